//! The [`Store`] trait and its three implementations: the in-memory core, SQLite and PostgreSQL.
//!
//! A store runs one design's operations on its table. The SQL stores execute the statements of
//! [`sql`](super::sql) — `now` always bound as a parameter, never read from the server — and
//! turn what the database returns into the core's result types: a terminal write that changed no
//! row is `Stale`, never swallowed. Every statement a SQL store runs is also logged with its
//! parameters written in, so a divergence can be replayed by pasting the log into a SQL shell.

use super::sql::{self, Dialect, Table, ROW_COLUMNS};
use crate::core::WriteKind;
use crate::core::{
    random_token, AggregateId, ClaimRequest, EnqueueRequest, EnqueueResult, FailureCode, Instant, Lease, LeaseToken,
    MessageId, Outbox, Policy, RelayId, Row, StaleReason, Status, TenantId, WriteRequest, WriteResult,
};
use crate::design::Variant;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    #[error("the core refused the operation: {0}")]
    Core(#[from] crate::core::CoreError),
    #[error("the table holds a value the core cannot read: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Setup(String),
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> StoreError {
        StoreError::Postgres(one_line(&e))
    }
}

/// A PostgreSQL error with its server message, on one line.
pub fn one_line(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string().replace('\n', " "),
    }
}

/// One design's operations on one table.
pub trait Store {
    fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, StoreError>;
    fn claim(&mut self, req: &ClaimRequest) -> Result<Vec<Lease>, StoreError>;
    fn write(&mut self, req: &WriteRequest) -> Result<WriteResult, StoreError>;
    fn reap(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError>;
    /// Every row, by message id.
    fn rows(&mut self) -> Result<Vec<Row>, StoreError>;
    /// The statements run so far, parameters written in (empty for the core).
    fn log(&self) -> &[String] {
        &[]
    }
    /// Whether the store's table has a state for this write (outbox_events has no FAILED or
    /// EXHAUSTED): conformance sends only writes both sides can hold.
    fn can_write(&self, _kind: &WriteKind) -> bool {
        true
    }
    /// Whether the design has a reaper statement on this table.
    fn can_reap(&self) -> bool {
        true
    }
    /// Whether the statements take the attempt budget as a parameter (`:max_attempts`), so
    /// conformance can run budgets other than 3.
    fn takes_budget(&self) -> bool {
        true
    }
    /// A core row as this store's table can show it: fields the table has no column for are
    /// cleared, so the model's rows compare with the table's.
    fn view(&self, row: Row) -> Row {
        row
    }
    /// A status as this store's table can show it: where one name stands for two statuses
    /// (FAILED and EXHAUSTED as `discarded`), the one it is read back as.
    fn view_status(&self, status: crate::core::Status) -> crate::core::Status {
        status
    }
    /// A lease token as this store's table can show it: none where it keeps no token (River's
    /// jobs), so claims and rescue reads are compared on what the table has.
    fn view_token(&self, token: LeaseToken) -> LeaseToken {
        token
    }
    /// The rescuer's read: the first row, by id, whose lease has expired at `now` — its message
    /// and the token it holds (a design's maintenance job "rescue-expired").
    fn rescue_read(&mut self, _now: Instant) -> Result<Option<(MessageId, LeaseToken)>, StoreError> {
        Err(StoreError::Setup("this store has no rescuer".into()))
    }
    /// The rescuer's move of the row it read, fenced as the design says.
    fn rescue(&mut self, _req: &crate::core::ReleaseRequest, _max_attempts: u32) -> Result<WriteResult, StoreError> {
        Err(StoreError::Setup("this store has no rescuer".into()))
    }
    /// Whether the store runs a rescuer.
    fn can_rescue(&self) -> bool {
        false
    }
    /// The model's claim beside a store's that took `ids`: where the design leaves ties to the
    /// database (`claim.ties = "any"`), the same choice among rows due at the same instant
    /// ([`Outbox::claim_among_ties`]); anywhere else, the claim itself.
    fn claim_among_ties(&mut self, req: &ClaimRequest, _ids: &[MessageId]) -> Result<Vec<Lease>, StoreError> {
        self.claim(req)
    }
    /// The rescuer that moves every expired lease in one statement (a profile's `rescue_all`):
    /// returns the rows it moved, by id, where it says (a statement without RETURNING: none).
    fn rescue_all(&mut self, _now: Instant, _max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        Err(StoreError::Setup("this store has no rescuer".into()))
    }
    /// Whether the store's rescuer moves every expired lease at once ([`Store::rescue_all`])
    /// rather than reading one and moving it.
    fn sweeps(&self) -> bool {
        false
    }
    /// The scheduler (`maintenance.scheduler`): every row whose retry time passed at `now`
    /// becomes claimable; returns those it moved, by id.
    fn schedule(&mut self, _now: Instant) -> Result<Vec<MessageId>, StoreError> {
        Err(StoreError::Setup("this store has no scheduler".into()))
    }
    /// Whether the store runs a scheduler.
    fn can_schedule(&self) -> bool {
        false
    }
    /// The design's switches, where the store is the core itself.
    fn core_policy(&self) -> Option<Policy> {
        None
    }
    /// The run's budget and lease, before its first operation: a profile's enqueue may take
    /// them (`:max_attempts`, `:lease_ms`), and its `[time]` maps the lease onto the queue's.
    fn set_run(&mut self, _max_attempts: u32, _lease: crate::core::Duration) {}
    /// After [`Store::set_run`]: how many of the design's backoff milliseconds one millisecond
    /// of the run is, where the queue computes its retry delays in its own units (a profile's
    /// `[time] delays = "absolute"`); the model's backoff is read the same way.
    fn backoff_unit(&self) -> u64 {
        1
    }
    /// The most rows a claim takes, where its statement says so itself (`LIMIT 1` written in,
    /// no `:batch`): the run's claims ask for no more.
    fn fixed_batch(&self) -> Option<u32> {
        None
    }
    /// What the table is compared on: the model's fields it has no column for, and its columns
    /// that are none of the model's (`None`: every field, as the store's own table).
    fn fields(&self) -> Option<Fields> {
        None
    }
    /// A problem of the user's input met while running (a statement the server refused, a
    /// value its type cannot take): the run ends with it, exit 2, not with a divergence.
    fn problem(&self) -> Option<String> {
        None
    }
    /// Where a profile's run works on PostgreSQL: "database" (a scratch database of its own) or
    /// "schema" (the role may not create databases).
    fn scratch_kind(&self) -> Option<&'static str> {
        None
    }
}

/// What a profile's rows SELECT lets a run compare.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fields {
    /// Model fields the table has no column for: never compared.
    pub not_compared: Vec<String>,
    /// Columns the SELECT gives that are no model field and not mapped in `[columns]`: not read.
    pub not_read: Vec<String>,
}

/// The core itself, as a store.
pub struct MemoryStore {
    pub outbox: Outbox,
    pub policy: Policy,
}

impl MemoryStore {
    pub fn new(policy: Policy) -> MemoryStore {
        MemoryStore { outbox: Outbox::new(), policy }
    }
}

impl Store for MemoryStore {
    fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, StoreError> {
        Ok(self.outbox.enqueue(req)?)
    }
    fn claim(&mut self, req: &ClaimRequest) -> Result<Vec<Lease>, StoreError> {
        Ok(self.outbox.claim(&self.policy, req)?)
    }
    fn write(&mut self, req: &WriteRequest) -> Result<WriteResult, StoreError> {
        Ok(self.outbox.write(&self.policy, req)?)
    }
    fn reap(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        Ok(self.outbox.reap(now, max_attempts))
    }
    fn schedule(&mut self, now: Instant) -> Result<Vec<MessageId>, StoreError> {
        Ok(self.outbox.schedule(now))
    }
    fn can_schedule(&self) -> bool {
        self.policy.scheduler
    }
    fn rows(&mut self) -> Result<Vec<Row>, StoreError> {
        // A deleted row is gone from a table, as a SELECT sees it.
        Ok(self.outbox.rows().iter().filter(|r| !r.deleted).copied().collect())
    }
    fn rescue_read(&mut self, now: Instant) -> Result<Option<(MessageId, LeaseToken)>, StoreError> {
        Ok(self
            .outbox
            .rescuable_after(now, self.policy.rescue_after_expiry)
            .map(|row| (row.message_id, row.lease_token)))
    }
    fn rescue(&mut self, req: &crate::core::ReleaseRequest, _max_attempts: u32) -> Result<WriteResult, StoreError> {
        // The request's `to` already says where a spent budget goes.
        Ok(self.outbox.release(req)?)
    }
    fn can_rescue(&self) -> bool {
        self.policy.rescue.is_some()
    }
    fn rescue_all(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        Ok(self.outbox.rescue_all(&self.policy, now, max_attempts))
    }
    fn claim_among_ties(&mut self, req: &ClaimRequest, ids: &[MessageId]) -> Result<Vec<Lease>, StoreError> {
        Ok(self.outbox.claim_among_ties(&self.policy, req, ids)?)
    }
    fn core_policy(&self) -> Option<Policy> {
        Some(self.policy)
    }
}

// Names in the table: fixed-width, so text order is number order (the claim orders by them).
pub fn message_name(m: MessageId) -> String {
    format!("m{:08}", m.0)
}
pub fn tenant_name(t: TenantId) -> String {
    format!("t{:04}", t.0)
}
pub fn aggregate_name(a: AggregateId) -> String {
    format!("a{:08}", a.0)
}
pub fn owner_name(r: RelayId) -> String {
    format!("r{:04}", r.0)
}

fn number(text: &str, prefix: char) -> Result<u32, StoreError> {
    text.strip_prefix(prefix).and_then(|n| n.parse().ok()).ok_or_else(|| StoreError::Corrupt(format!("id '{text}'")))
}

/// A lease token as a table stores it.
enum RawToken {
    /// messaging_outbox's BIGINT ≥ 0.
    Int(i64),
    /// outbox_events' text: NULL before the first claim, else 16 hex digits.
    Text(Option<String>),
}

impl RawToken {
    fn value(self) -> Result<LeaseToken, StoreError> {
        match self {
            RawToken::Int(v) => Ok(LeaseToken(v as u64)),
            RawToken::Text(None) => Ok(LeaseToken(0)),
            RawToken::Text(Some(t)) => token_from_text(&t),
        }
    }
}

/// A random token as outbox_events stores it (it holds a uuid in the seed; text either way).
fn token_text(token: u64) -> String {
    format!("{token:016x}")
}

fn token_from_text(text: &str) -> Result<LeaseToken, StoreError> {
    u64::from_str_radix(text, 16).map(LeaseToken).map_err(|_| StoreError::Corrupt(format!("lease token '{text}'")))
}

/// A row as the SQL stores read it, before conversion.
struct RawRow {
    message_id: String,
    tenant_id: String,
    aggregate_id: String,
    aggregate_version: i64,
    status: String,
    attempts: i64,
    lease_owner: Option<String>,
    lease_token: RawToken,
    lease_expires_at: Option<i64>,
    next_attempt_at: Option<i64>,
    last_failure_code: Option<String>,
    created_at: i64,
    published_at: Option<i64>,
}

impl RawRow {
    fn into_row(self) -> Result<Row, StoreError> {
        let corrupt = |what: String| StoreError::Corrupt(what);
        Ok(Row {
            message_id: MessageId(number(&self.message_id, 'm')?),
            tenant_id: TenantId(number(&self.tenant_id, 't')? as u16),
            aggregate_id: AggregateId(number(&self.aggregate_id, 'a')?),
            aggregate_version: self.aggregate_version as u32,
            status: Status::parse(&self.status).ok_or_else(|| corrupt(format!("status '{}'", self.status)))?,
            attempts: self.attempts as u32,
            lease_owner: self.lease_owner.map(|o| number(&o, 'r').map(|n| RelayId(n as u16))).transpose()?,
            lease_token: self.lease_token.value()?,
            lease_expires_at: self.lease_expires_at.map(|t| Instant(t as u64)),
            next_attempt_at: self.next_attempt_at.map(|t| Instant(t as u64)),
            last_failure_code: self
                .last_failure_code
                .map(|c| FailureCode::parse(&c).ok_or_else(|| corrupt(format!("failure code '{c}'"))))
                .transpose()?,
            created_at: Instant(self.created_at as u64),
            published_at: self.published_at.map(|t| Instant(t as u64)),
            deleted: false,
        })
    }
}

/// A bound parameter, for the log.
#[derive(Clone, Debug)]
enum Param {
    Int(i64),
    Text(String),
    Null,
}

/// `sql` with its parameters written in, for a person to paste.
fn render(sql: &str, params: &[Param]) -> String {
    let mut out = sql.to_string();
    for (i, p) in params.iter().enumerate().rev() {
        let n = i + 1;
        let literal = match p {
            Param::Int(v) => v.to_string(),
            Param::Text(t) => format!("'{}'", t.replace('\'', "''")),
            Param::Null => "NULL".into(),
        };
        for ty in ["::text", "::bigint", "::integer"] {
            out = out.replace(&format!("${n}{ty}"), &literal);
        }
        out = out.replace(&format!("?{n}"), &literal);
    }
    out + ";"
}

impl Table {
    /// The migrations a store of this table applies: V2 for messaging_outbox, and seed 003's
    /// two on top for outbox_events (a conformance run opens one store per case, so each
    /// migration it skips is time saved).
    fn migrations(self) -> u32 {
        match self {
            Table::MessagingOutbox => 2,
            Table::OutboxEvents => 4,
        }
    }
}

/// The [`Store`] methods every SQL store answers from its [`Common`].
macro_rules! common_store_methods {
    () => {
        fn log(&self) -> &[String] {
            &self.common.log
        }
        fn can_write(&self, kind: &WriteKind) -> bool {
            self.common.can_write(kind)
        }
        fn can_reap(&self) -> bool {
            self.common.table == Table::MessagingOutbox
        }
        fn view(&self, row: Row) -> Row {
            self.common.view(row)
        }
    };
}

/// What every SQL store keeps besides its connection.
struct Common {
    policy: Policy,
    dialect: Dialect,
    table: Table,
    /// Random tokens issued so far (designs with random tokens: the core's sequence).
    random_issued: u64,
    log: Vec<String>,
}

/// Whether outbox-check's own SQL (built from the policy's switches) covers the design: it has
/// no statements for completion or failure by deletion, a retry time in the lease's column, a
/// rescuer, or a backoff other than doubling (its retry time is computed in SQL from the base
/// and the cap).
pub fn ours_cover(policy: &Policy) -> bool {
    policy.completion == crate::core::policy::Completion::Mark
        && !policy.failure_deletes
        && !policy.retry_in_lease
        && policy.rescue.is_none()
        && policy.lease == crate::core::LeaseKind::Expiry
        && policy.backoff.is_doubling()
}

impl Common {
    fn new(policy: Policy, dialect: Dialect) -> Result<Common, StoreError> {
        if !ours_cover(&policy) {
            return Err(StoreError::Setup(
                "outbox-check writes no SQL of its own for completion by deletion, a retry time in the lease's column, a rescuer, a session's lease or a backoff other than doubling: describe yours in a SQL profile (conform --profile, docs/sql-profile.md)".into(),
            ));
        }
        let table = Table::of(&policy);
        if table == Table::OutboxEvents {
            // outbox_events' statements are seed 003's: only its switches are bound.
            let seed = Variant::SeedTenant.policy();
            if (Policy { backoff: policy.backoff, relay: policy.relay, ..seed }) != policy {
                return Err(StoreError::Setup(
                    "random tokens live in outbox_events, whose SQL binds only seed-tenant's switches".into(),
                ));
            }
        }
        Ok(Common { policy, dialect, table, random_issued: 0, log: Vec::new() })
    }

    /// The fresh token a claim binds (parameter 4): the next random one, as the table stores it.
    /// (Random tokens live only in outbox_events; messaging_outbox's counter is `lease_token + 1`.)
    fn next_token(&mut self) -> Param {
        match self.table {
            Table::OutboxEvents => {
                self.random_issued += 1;
                Param::Text(token_text(random_token(self.random_issued)))
            }
            Table::MessagingOutbox => Param::Int(0),
        }
    }

    fn token_param(&self, token: LeaseToken) -> Param {
        match self.table {
            Table::OutboxEvents => Param::Text(token_text(token.0)),
            Table::MessagingOutbox => Param::Int(token.0 as i64),
        }
    }

    /// The claim SELECT's parameters: 1 tenant, 2 now, 3 max_attempts, 4 batch.
    fn claim_select_params(req: &ClaimRequest) -> [Param; 4] {
        [
            Param::Text(tenant_name(req.tenant_id)),
            Param::Int(req.now.0 as i64),
            Param::Int(i64::from(req.max_attempts)),
            Param::Int(i64::from(req.batch)),
        ]
    }

    /// One claimed row's UPDATE parameters: 1 message_id, 2 the lease's expiry, 3 owner, 4 the
    /// fresh token (drawn here, for designs with random tokens).
    fn claim_update_params(&mut self, id: &str, req: &ClaimRequest) -> [Param; 5] {
        [
            Param::Text(id.to_string()),
            Param::Int(req.now.plus(req.lease).0 as i64),
            Param::Text(owner_name(req.owner)),
            self.next_token(),
            Param::Int(req.now.0 as i64),
        ]
    }

    fn claim_sql(&self) -> (String, String) {
        match self.table {
            Table::MessagingOutbox => {
                (sql::claim_select(self.dialect, &self.policy), sql::claim_update(self.dialect, &self.policy))
            }
            Table::OutboxEvents => (sql::events_claim_select(self.dialect), sql::events_claim_update(self.dialect)),
        }
    }

    fn write_sql(&self, kind: WriteKind) -> Result<String, StoreError> {
        match self.table {
            Table::MessagingOutbox => Ok(sql::write(self.dialect, &self.policy, kind)),
            Table::OutboxEvents => sql::events_write(self.dialect, kind)
                .ok_or_else(|| StoreError::Setup(format!("outbox_events has no state for {kind:?}"))),
        }
    }

    fn reap_sql(&self) -> Result<String, StoreError> {
        match self.table {
            Table::MessagingOutbox => Ok(sql::reap(self.dialect)),
            Table::OutboxEvents => {
                Err(StoreError::Setup("seed-tenant has no reaper and outbox_events no EXHAUSTED state".into()))
            }
        }
    }

    fn rows_sql(&self) -> String {
        match self.table {
            Table::MessagingOutbox => format!("SELECT {ROW_COLUMNS} FROM messaging_outbox ORDER BY message_id"),
            Table::OutboxEvents => sql::events_rows(),
        }
    }

    /// The enqueue's INSERT of the outbox row, with its parameters: 1 message_id, 2 tenant,
    /// 3 aggregate, 4 the version the business change moved to, 5 now.
    fn insert(&self, req: &EnqueueRequest) -> (String, [Param; 5]) {
        let params = [
            Param::Text(message_name(req.message_id)),
            Param::Text(tenant_name(req.tenant_id)),
            Param::Text(aggregate_name(req.aggregate_id)),
            Param::Int(i64::from(req.expected_version) + 1),
            Param::Int(req.now.0 as i64),
        ];
        (self.insert_sql(), params)
    }

    fn insert_sql(&self) -> String {
        let p = |n, ty| match self.dialect {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}::{ty}"),
        };
        let (m, t, a, v, now) = (p(1, "text"), p(2, "text"), p(3, "text"), p(4, "bigint"), p(5, "bigint"));
        match self.table {
            Table::MessagingOutbox => format!(
                "INSERT INTO messaging_outbox (message_id, tenant_id, aggregate_id, aggregate_version, status, attempts, created_at) \
                 VALUES ({m}, {t}, {a}, {v}, 'PENDING', 0, {now})"
            ),
            Table::OutboxEvents => format!(
                "INSERT INTO outbox_events (tenant_id, event_id, request_id, aggregate_version, event_type, status, attempts, \
                 available_at, created_at) VALUES ({t}, {m}, {a}, {v}, 'PurchaseSubmitted', 'pending', 0, {now}, {now})"
            ),
        }
    }

    /// The row's status now, for a write that matched nothing (parameter 1 message_id).
    fn status_sql(&self) -> String {
        let p1 = if self.dialect == Dialect::Sqlite { "?1" } else { "$1" };
        match self.table {
            Table::MessagingOutbox => format!("SELECT status FROM messaging_outbox WHERE message_id = {p1}"),
            Table::OutboxEvents => format!("SELECT {} FROM outbox_events WHERE event_id = {p1}", sql::EVENTS_STATUS),
        }
    }

    fn can_write(&self, kind: &WriteKind) -> bool {
        self.table == Table::MessagingOutbox || !matches!(kind, WriteKind::Failed { .. } | WriteKind::Exhausted { .. })
    }

    fn view(&self, mut row: Row) -> Row {
        if self.table == Table::OutboxEvents {
            row.last_failure_code = None;
            row.published_at = None;
        }
        row
    }

    fn write_params(&self, req: &WriteRequest) -> Vec<Param> {
        vec![
            Param::Text(message_name(req.lease.message_id)),
            Param::Text(tenant_name(req.lease.tenant_id)),
            Param::Text(owner_name(req.lease.owner)),
            self.token_param(req.lease.token),
            Param::Int(req.now.0 as i64),
            req.kind.code().map_or(Param::Null, |c| Param::Text(c.as_str().into())),
            Param::Int(i64::from(req.max_attempts)),
            Param::Int(self.policy.backoff.base.0 as i64),
            Param::Int(self.policy.backoff.cap.0 as i64),
            // The attempts the relay's copy of the row counts after this failure.
            Param::Int(i64::from(self.policy.attempts_after_failure(req.lease.attempts))),
        ]
    }
}

fn stale_or_swallowed(policy: &Policy, status: Option<Status>) -> WriteResult {
    // The SQL cannot tell why no row matched; the reason is not compared.
    match (policy.swallow_stale, status) {
        (true, Some(status)) => WriteResult::Applied { status },
        _ => WriteResult::Stale { reason: StaleReason::NotInFlight },
    }
}

// ---------------------------------------------------------------------------------------------
// SQLite

/// The design's statements on an SQLite database (in memory by default).
pub struct SqliteStore {
    conn: rusqlite::Connection,
    common: Common,
}

impl SqliteStore {
    /// A fresh in-memory database migrated as far as the design's table needs.
    pub fn in_memory(policy: Policy) -> Result<SqliteStore, StoreError> {
        let common = Common::new(policy, Dialect::Sqlite)?;
        let mut conn = rusqlite::Connection::open_in_memory()?;
        super::migrate::migrate_sqlite(&mut conn, common.table.migrations())
            .map_err(|e| StoreError::Setup(e.to_string()))?;
        Ok(SqliteStore { conn, common })
    }

    fn params(params: &[Param]) -> Vec<rusqlite::types::Value> {
        params
            .iter()
            .map(|p| match p {
                Param::Int(v) => rusqlite::types::Value::Integer(*v),
                Param::Text(t) => rusqlite::types::Value::Text(t.clone()),
                Param::Null => rusqlite::types::Value::Null,
            })
            .collect()
    }
}

fn read_sqlite_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        message_id: r.get(0)?,
        tenant_id: r.get(1)?,
        aggregate_id: r.get(2)?,
        aggregate_version: r.get(3)?,
        status: r.get(4)?,
        attempts: r.get(5)?,
        lease_owner: r.get(6)?,
        lease_token: match r.get_ref(7)? {
            rusqlite::types::ValueRef::Integer(v) => RawToken::Int(v),
            _ => RawToken::Text(r.get(7)?),
        },
        lease_expires_at: r.get(8)?,
        next_attempt_at: r.get(9)?,
        last_failure_code: r.get(10)?,
        created_at: r.get(11)?,
        published_at: r.get(12)?,
    })
}

impl Store for SqliteStore {
    fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, StoreError> {
        let (tenant, aggregate) = (tenant_name(req.tenant_id), aggregate_name(req.aggregate_id));
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current: Option<i64> = {
            use rusqlite::OptionalExtension;
            tx.query_row(
                "SELECT version FROM business_aggregates WHERE tenant_id = ?1 AND aggregate_id = ?2",
                rusqlite::params![tenant, aggregate],
                |r| r.get(0),
            )
            .optional()?
        };
        let expected = i64::from(req.expected_version);
        if current.unwrap_or(0) != expected {
            return Ok(EnqueueResult::Stale { current_version: current.unwrap_or(0) as u32 });
        }
        let business = if current.is_some() {
            "UPDATE business_aggregates SET version = version + 1 WHERE tenant_id = ?1 AND aggregate_id = ?2 AND version = ?3"
        } else {
            "INSERT INTO business_aggregates (tenant_id, aggregate_id, version) VALUES (?1, ?2, ?3 + 1)"
        };
        let params = [Param::Text(tenant), Param::Text(aggregate), Param::Int(expected)];
        let changed = tx.execute(business, rusqlite::params_from_iter(Self::params(&params)))?;
        self.common.log.push(render(business, &params));
        if changed != 1 {
            return Ok(EnqueueResult::Stale { current_version: current.unwrap_or(0) as u32 });
        }
        let (insert, params) = self.common.insert(req);
        let insert = insert.as_str();
        tx.execute(insert, rusqlite::params_from_iter(Self::params(&params)))?;
        self.common.log.push(render(insert, &params));
        tx.commit()?;
        Ok(EnqueueResult::Applied { version: req.expected_version + 1 })
    }

    fn claim(&mut self, req: &ClaimRequest) -> Result<Vec<Lease>, StoreError> {
        let (select, update) = self.common.claim_sql();
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let params = Common::claim_select_params(req);
        let ids: Vec<String> = {
            let mut stmt = tx.prepare_cached(&select)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(Self::params(&params)), |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        self.common.log.push(render(&select, &params));
        let mut leases = Vec::with_capacity(ids.len());
        for id in ids {
            let params = self.common.claim_update_params(&id, req);
            let (tenant, token, attempts): (String, rusqlite::types::Value, i64) =
                tx.prepare_cached(&update)?.query_row(rusqlite::params_from_iter(Self::params(&params)), |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
            let token = match token {
                rusqlite::types::Value::Integer(v) => LeaseToken(v as u64),
                rusqlite::types::Value::Text(t) => token_from_text(&t)?,
                other => return Err(StoreError::Corrupt(format!("lease token {other:?}"))),
            };
            self.common.log.push(render(&update, &params));
            leases.push(Lease {
                message_id: MessageId(number(&id, 'm')?),
                tenant_id: TenantId(number(&tenant, 't')? as u16),
                owner: req.owner,
                token,
                attempts: attempts as u32,
                claim_seq: 0,
            });
        }
        tx.commit()?;
        Ok(leases)
    }

    fn write(&mut self, req: &WriteRequest) -> Result<WriteResult, StoreError> {
        let statement = self.common.write_sql(req.kind)?;
        let params = self.common.write_params(req);
        let status: Option<String> = {
            use rusqlite::OptionalExtension;
            self.conn
                .prepare_cached(&statement)?
                .query_row(rusqlite::params_from_iter(Self::params(&params)), |r| r.get(0))
                .optional()?
        };
        self.common.log.push(render(&statement, &params));
        match status {
            Some(s) => Ok(WriteResult::Applied { status: Status::parse(&s).ok_or_else(|| StoreError::Corrupt(s))? }),
            None => {
                let current: Option<String> = {
                    use rusqlite::OptionalExtension;
                    self.conn
                        .query_row(&self.common.status_sql(), [message_name(req.lease.message_id)], |r| r.get(0))
                        .optional()?
                };
                Ok(stale_or_swallowed(&self.common.policy, current.as_deref().and_then(Status::parse)))
            }
        }
    }

    fn reap(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        let statement = self.common.reap_sql()?;
        let params = [Param::Int(now.0 as i64), Param::Int(i64::from(max_attempts))];
        let ids: Vec<String> = {
            let mut stmt = self.conn.prepare_cached(&statement)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(Self::params(&params)), |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        self.common.log.push(render(&statement, &params));
        let mut ids = ids.iter().map(|id| number(id, 'm').map(MessageId)).collect::<Result<Vec<_>, _>>()?;
        ids.sort();
        Ok(ids)
    }

    fn rows(&mut self) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&self.common.rows_sql())?;
        let raw = stmt.query_map([], read_sqlite_row)?.collect::<Result<Vec<_>, _>>()?;
        raw.into_iter().map(RawRow::into_row).collect()
    }

    common_store_methods!();
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// The design's statements on a PostgreSQL server, inside a scratch schema of its own.
pub struct PgStore {
    scratch: super::postgres::Scratch,
    common: Common,
}

impl PgStore {
    /// Connects, creates a scratch schema (dropped with the store) and migrates it as far as the
    /// design's table needs.
    pub fn connect(url: &str, disposable: bool, policy: Policy) -> Result<PgStore, StoreError> {
        let common = Common::new(policy, Dialect::Postgres)?;
        let mut scratch =
            super::postgres::Scratch::connect(url, disposable).map_err(|e| StoreError::Setup(e.to_string()))?;
        scratch.migrate(common.table.migrations()).map_err(|e| StoreError::Setup(e.to_string()))?;
        Ok(PgStore { scratch, common })
    }

    /// The design's statements in a scratch schema another store created (and drops): for the
    /// relay processes of one end-to-end run, each with a connection of its own.
    pub fn attach(url: &str, schema: &str, policy: Policy) -> Result<PgStore, StoreError> {
        let common = Common::new(policy, Dialect::Postgres)?;
        let scratch =
            super::postgres::Scratch::attach(url, false, schema).map_err(|e| StoreError::Setup(e.to_string()))?;
        Ok(PgStore { scratch, common })
    }

    pub fn scratch(&mut self) -> &mut super::postgres::Scratch {
        &mut self.scratch
    }

    /// Empties the tables (inside the scratch schema) and the log, for the next case: cheaper
    /// than a schema per case.
    pub fn reset(&mut self) -> Result<(), StoreError> {
        self.scratch.client().batch_execute(&format!("TRUNCATE {}, business_aggregates", self.common.table.name()))?;
        self.common.random_issued = 0;
        self.common.log.clear();
        Ok(())
    }
}

/// One PostgreSQL store shared by successive cases, reset by the caller when a case opens it;
/// it keeps its own copy of the case's SQL log.
pub struct Reused {
    inner: std::rc::Rc<std::cell::RefCell<PgStore>>,
    log: Vec<String>,
}

impl Reused {
    pub fn new(inner: std::rc::Rc<std::cell::RefCell<PgStore>>) -> Reused {
        Reused { inner, log: Vec::new() }
    }

    fn with<T>(&mut self, f: impl FnOnce(&mut PgStore) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut inner = self.inner.borrow_mut();
        let result = f(&mut inner);
        let new = inner.common.log.get(self.log.len()..).unwrap_or_default().to_vec();
        self.log.extend(new);
        result
    }
}

/// Opens a store per conformance case, all on one scratch schema emptied between cases:
/// connecting fails fast (one line) on a server that does not answer.
pub fn reusing_postgres(
    url: &str,
    disposable: bool,
    policy: Policy,
) -> Result<impl Fn() -> Result<Box<dyn Store>, StoreError>, StoreError> {
    let shared = std::rc::Rc::new(std::cell::RefCell::new(PgStore::connect(url, disposable, policy)?));
    Ok(move || -> Result<Box<dyn Store>, StoreError> {
        shared.borrow_mut().reset()?;
        Ok(Box::new(Reused::new(shared.clone())) as Box<dyn Store>)
    })
}

impl Store for Reused {
    fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, StoreError> {
        self.with(|s| s.enqueue(req))
    }
    fn claim(&mut self, req: &ClaimRequest) -> Result<Vec<Lease>, StoreError> {
        self.with(|s| s.claim(req))
    }
    fn write(&mut self, req: &WriteRequest) -> Result<WriteResult, StoreError> {
        self.with(|s| s.write(req))
    }
    fn reap(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        self.with(|s| s.reap(now, max_attempts))
    }
    fn rows(&mut self) -> Result<Vec<Row>, StoreError> {
        self.with(|s| s.rows())
    }
    fn log(&self) -> &[String] {
        &self.log
    }
    fn can_write(&self, kind: &WriteKind) -> bool {
        self.inner.borrow().can_write(kind)
    }
    fn can_reap(&self) -> bool {
        self.inner.borrow().can_reap()
    }
    fn view(&self, row: Row) -> Row {
        self.inner.borrow().view(row)
    }
}

impl PgStore {
    fn values(params: &[Param]) -> Vec<Box<dyn postgres::types::ToSql + Sync>> {
        params
            .iter()
            .map(|p| -> Box<dyn postgres::types::ToSql + Sync> {
                match p {
                    Param::Int(v) => Box::new(*v),
                    Param::Text(t) => Box::new(t.clone()),
                    Param::Null => Box::new(None::<String>),
                }
            })
            .collect()
    }
}

/// Binds `params` for the postgres crate: integers as BIGINT, converted in SQL where a column is
/// INTEGER (the statements cast every parameter).
fn refs(values: &[Box<dyn postgres::types::ToSql + Sync>]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    values.iter().map(|b| b.as_ref()).collect()
}

fn read_pg_row(r: &postgres::Row) -> RawRow {
    RawRow {
        message_id: r.get(0),
        tenant_id: r.get(1),
        aggregate_id: r.get(2),
        aggregate_version: r.get(3),
        status: r.get(4),
        attempts: i64::from(r.get::<_, i32>(5)),
        lease_owner: r.get(6),
        lease_token: if *r.columns()[7].type_() == postgres::types::Type::TEXT {
            RawToken::Text(r.get(7))
        } else {
            RawToken::Int(r.get(7))
        },
        lease_expires_at: r.get(8),
        next_attempt_at: r.get(9),
        last_failure_code: r.get(10),
        created_at: r.get(11),
        published_at: r.get(12),
    }
}

/// Postgres' typed placeholders need integers of the column's width: `$n::integer` parameters
/// are bound as i32.
fn pg_fix_widths(sql: &str, params: &[Param]) -> Vec<Box<dyn postgres::types::ToSql + Sync>> {
    params
        .iter()
        .enumerate()
        .map(|(i, p)| -> Box<dyn postgres::types::ToSql + Sync> {
            let integer = sql.contains(&format!("${}::integer", i + 1));
            match p {
                Param::Int(v) if integer => Box::new(*v as i32),
                other => PgStore::values(std::slice::from_ref(other)).pop().expect("one value"),
            }
        })
        .collect()
}

/// The messages a reaper's `RETURNING message_id` names, in id order.
fn reaped_ids(rows: &[postgres::Row]) -> Result<Vec<MessageId>, StoreError> {
    let mut ids =
        rows.iter().map(|r| number(&r.get::<_, String>(0), 'm').map(MessageId)).collect::<Result<Vec<_>, _>>()?;
    ids.sort();
    Ok(ids)
}

/// How long a stamped statement of the run's own (an enqueue, the reaper) waits for a lock
/// before it gives way: a relay the run paused may hold the lock until the run resumes it.
const LOCK_GIVE_WAY_MS: u64 = 200;

impl PgStore {
    /// An enqueue that no claim or write overlaps (it holds the table in EXCLUSIVE mode), stamped
    /// inside its transaction by `stamp`, a query returning one bigint: for a recorder that
    /// orders a history by stamps while relays work (a claim's snapshot can otherwise predate an
    /// enqueue stamped before it).
    ///
    /// `None` when the table lock is not free within 200 ms (a relay the caller paused may hold a
    /// claim open): the caller resumes what is due and tries again, instead of waiting on a lock
    /// only it can free.
    pub fn enqueue_stamped(
        &mut self,
        req: &EnqueueRequest,
        stamp: &str,
    ) -> Result<Option<(EnqueueResult, i64)>, StoreError> {
        let table = self.common.table.name();
        let mut tx = self.scratch.client().transaction()?;
        tx.batch_execute(&format!("SET LOCAL lock_timeout = '{LOCK_GIVE_WAY_MS}ms'"))?;
        match tx.batch_execute(&format!("LOCK TABLE {table} IN EXCLUSIVE MODE")) {
            Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => return Ok(None),
            other => other?,
        }
        tx.batch_execute("SET LOCAL lock_timeout = 0")?;
        let result = Self::enqueue_in(&mut self.common, &mut tx, req)?;
        let stamp: i64 = tx.query_one(stamp, &[])?.get(0);
        if matches!(result, EnqueueResult::Applied { .. }) {
            tx.commit()?;
        }
        Ok(Some((result, stamp)))
    }

    /// A claim stamped inside its transaction by `stamp` (a query returning one bigint): the
    /// rows it leases are locked until the commit, so stamps order the statements on a row as
    /// they committed.
    pub fn claim_stamped(&mut self, req: &ClaimRequest, stamp: &str) -> Result<(Vec<Lease>, i64), StoreError> {
        let mut tx = self.scratch.client().transaction()?;
        let leases = Self::claim_in(&mut self.common, &mut tx, req)?;
        let stamp: i64 = tx.query_one(stamp, &[])?.get(0);
        tx.commit()?;
        Ok((leases, stamp))
    }

    /// A terminal or failure write stamped inside its transaction, as [`PgStore::claim_stamped`].
    pub fn write_stamped(&mut self, req: &WriteRequest, stamp: &str) -> Result<(WriteResult, i64), StoreError> {
        let mut tx = self.scratch.client().transaction()?;
        let result = Self::write_in(&mut self.common, &mut tx, req)?;
        let stamp: i64 = tx.query_one(stamp, &[])?.get(0);
        tx.commit()?;
        Ok((result, stamp))
    }

    /// The reaper's statement stamped inside its transaction by `stamp`, as
    /// [`PgStore::enqueue_stamped`]: `None` when a row it would reap, or the stamp, is locked for
    /// more than 200 ms (a relay the caller paused may hold either inside a write), so the caller
    /// resumes what is due and tries again instead of waiting on a lock only it can free.
    pub fn reap_stamped(
        &mut self,
        now: Instant,
        max_attempts: u32,
        stamp: &str,
    ) -> Result<Option<(Vec<MessageId>, i64)>, StoreError> {
        let statement = self.common.reap_sql()?;
        let params = [Param::Int(now.0 as i64), Param::Int(i64::from(max_attempts))];
        let values = pg_fix_widths(&statement, &params);
        let mut tx = self.scratch.client().transaction()?;
        tx.batch_execute(&format!("SET LOCAL lock_timeout = '{LOCK_GIVE_WAY_MS}ms'"))?;
        // Both statements may wait: the update on a row's lock, the stamp on the lock that
        // serialises stamps, which a relay paused between its stamp and its commit holds.
        let done = tx.query(&statement, &refs(&values)).and_then(|rows| Ok((rows, tx.query_one(stamp, &[])?)));
        let (rows, stamp) = match done {
            Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => return Ok(None),
            other => other?,
        };
        let stamp: i64 = stamp.get(0);
        tx.commit()?;
        self.common.log.push(render(&statement, &params));
        Ok(Some((reaped_ids(&rows)?, stamp)))
    }

    /// Forgets the SQL logged so far: a long-running caller that never reads it.
    pub fn clear_log(&mut self) {
        self.common.log.clear();
    }

    /// The claim's statements in `tx`: the select (FOR UPDATE SKIP LOCKED: the rows are this
    /// transaction's until it commits), then one update per row.
    fn claim_in(
        common: &mut Common,
        tx: &mut postgres::Transaction<'_>,
        req: &ClaimRequest,
    ) -> Result<Vec<Lease>, StoreError> {
        let (select, update) = common.claim_sql();
        let params = Common::claim_select_params(req);
        let values = pg_fix_widths(&select, &params);
        let mut log = vec![render(&select, &params)];
        let mut leases = Vec::new();
        let ids: Vec<String> = tx.query(&select, &refs(&values))?.iter().map(|r| r.get(0)).collect();
        for id in ids {
            let params = common.claim_update_params(&id, req);
            let values = pg_fix_widths(&update, &params);
            let row = tx.query_one(&update, &refs(&values))?;
            let token = match common.table {
                Table::OutboxEvents => token_from_text(&row.get::<_, String>(1))?,
                Table::MessagingOutbox => LeaseToken(row.get::<_, i64>(1) as u64),
            };
            log.push(render(&update, &params));
            leases.push(Lease {
                message_id: MessageId(number(&id, 'm')?),
                tenant_id: TenantId(number(&row.get::<_, String>(0), 't')? as u16),
                owner: req.owner,
                token,
                attempts: row.get::<_, i32>(2) as u32,
                claim_seq: 0,
            });
        }
        common.log.append(&mut log);
        Ok(leases)
    }

    /// The write's statement in `tx`; where it matched nothing, the row's status then, for
    /// the design's answer to a stale write.
    fn write_in(
        common: &mut Common,
        tx: &mut postgres::Transaction<'_>,
        req: &WriteRequest,
    ) -> Result<WriteResult, StoreError> {
        let statement = common.write_sql(req.kind)?;
        let params = common.write_params(req);
        let values = pg_fix_widths(&statement, &params);
        let status: Option<String> = tx.query_opt(&statement, &refs(&values))?.map(|r| r.get(0));
        common.log.push(render(&statement, &params));
        match status {
            Some(s) => Ok(WriteResult::Applied { status: Status::parse(&s).ok_or_else(|| StoreError::Corrupt(s))? }),
            None => {
                let current: Option<String> =
                    tx.query_opt(&common.status_sql(), &[&message_name(req.lease.message_id)])?.map(|r| r.get(0));
                Ok(stale_or_swallowed(&common.policy, current.as_deref().and_then(Status::parse)))
            }
        }
    }

    /// The enqueue's statements in `tx`: the business change from the expected version, then
    /// the outbox row. Stale (the business row moved): nothing done, the caller rolls back.
    fn enqueue_in(
        common: &mut Common,
        tx: &mut postgres::Transaction<'_>,
        req: &EnqueueRequest,
    ) -> Result<EnqueueResult, StoreError> {
        let (tenant, aggregate) = (tenant_name(req.tenant_id), aggregate_name(req.aggregate_id));
        let expected = i64::from(req.expected_version);
        // The business change: moves the aggregate only from the expected version.
        let business = if expected == 0 {
            "INSERT INTO business_aggregates (tenant_id, aggregate_id, version) VALUES ($1::text, $2::text, $3::bigint + 1) \
             ON CONFLICT DO NOTHING"
        } else {
            "UPDATE business_aggregates SET version = version + 1 \
             WHERE tenant_id = $1::text AND aggregate_id = $2::text AND version = $3::bigint"
        };
        let params = [Param::Text(tenant.clone()), Param::Text(aggregate.clone()), Param::Int(expected)];
        let values = pg_fix_widths(business, &params);
        let changed = tx.execute(business, &refs(&values))?;
        common.log.push(render(business, &params));
        if changed != 1 {
            let current: Option<i64> = tx
                .query_opt(
                    "SELECT version FROM business_aggregates WHERE tenant_id = $1 AND aggregate_id = $2",
                    &[&tenant, &aggregate],
                )?
                .map(|r| r.get(0));
            return Ok(EnqueueResult::Stale { current_version: current.unwrap_or(0) as u32 });
        }
        let (insert, params) = common.insert(req);
        let insert = insert.as_str();
        let values = pg_fix_widths(insert, &params);
        tx.execute(insert, &refs(&values))?;
        common.log.push(render(insert, &params));
        Ok(EnqueueResult::Applied { version: req.expected_version + 1 })
    }
}

impl Store for PgStore {
    fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, StoreError> {
        let mut tx = self.scratch.client().transaction()?;
        let result = Self::enqueue_in(&mut self.common, &mut tx, req)?;
        if matches!(result, EnqueueResult::Applied { .. }) {
            tx.commit()?;
        }
        Ok(result)
    }

    fn claim(&mut self, req: &ClaimRequest) -> Result<Vec<Lease>, StoreError> {
        let mut tx = self.scratch.client().transaction()?;
        let leases = Self::claim_in(&mut self.common, &mut tx, req)?;
        tx.commit()?;
        Ok(leases)
    }

    fn write(&mut self, req: &WriteRequest) -> Result<WriteResult, StoreError> {
        let mut tx = self.scratch.client().transaction()?;
        let result = Self::write_in(&mut self.common, &mut tx, req)?;
        tx.commit()?;
        Ok(result)
    }

    fn reap(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        let statement = self.common.reap_sql()?;
        let params = [Param::Int(now.0 as i64), Param::Int(i64::from(max_attempts))];
        let values = pg_fix_widths(&statement, &params);
        let rows = self.scratch.client().query(&statement, &refs(&values))?;
        self.common.log.push(render(&statement, &params));
        reaped_ids(&rows)
    }

    fn rows(&mut self) -> Result<Vec<Row>, StoreError> {
        let raw: Vec<RawRow> =
            self.scratch.client().query(&self.common.rows_sql(), &[])?.iter().map(read_pg_row).collect();
        raw.into_iter().map(RawRow::into_row).collect()
    }

    common_store_methods!();
}
