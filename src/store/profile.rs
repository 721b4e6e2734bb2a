//! SQL profiles: the user's own schema and statements, run as a [`Store`] so conformance holds
//! them against the core of the design they claim to implement (docs/sql-profile.md).
//!
//! A profile names a design (a built-in or a design file), a schema (a DDL file), one statement
//! per operation — run as written, only its named parameters bound (`:now`, `:id`, `:token` …) —
//! and a SELECT that reads the table in the model's shape. Nothing is rewritten: the log of
//! what ran is the user's statements with their parameters, ready to paste.
//!
//! Values: ids, tenants, owners and tokens are integers (message `m3` is 3, tenant `tenant1`
//! is 1, relay `r2` is 2); times are integer milliseconds; failure codes are text (`timeout`,
//! `unavailable`, `rejected`, `budget_spent`); statuses are the profile's own names.

use super::bind::{Store, StoreError};
use crate::core::{
    ClaimRequest, Design, EnqueueRequest, EnqueueResult, FailureCode, Instant, Lease, LeaseToken, MessageId, Policy, RelayId, Row,
    Status, TenantId, WriteKind, WriteRequest, WriteResult,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A profile as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// The design the SQL claims to implement: a built-in's name or a design file (relative to
    /// the profile).
    pub design: String,
    /// The DDL that creates the table (relative to the profile), run before every case.
    pub schema: String,
    pub statements: Statements,
    /// How each terminal write shows that it applied: `rows-affected` (default) or `returning`
    /// (a row back).
    #[serde(default)]
    pub observe: BTreeMap<String, Observe>,
    /// The profile's status values for the model's six statuses.
    #[serde(default)]
    pub statuses: Statuses,
}

/// The statements, by operation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statements {
    pub enqueue: String,
    /// Takes up to `:batch` rows and returns them: `message_id`, `lease_token`, `attempts`
    /// (and `tenant_id` where the table has one).
    pub claim: String,
    pub mark_published: String,
    pub mark_ambiguous: Option<String>,
    pub mark_retry: Option<String>,
    pub mark_failed: Option<String>,
    pub mark_exhausted: Option<String>,
    /// The maintenance job; returns the ids it moved (`message_id`).
    pub reap: Option<String>,
    /// Every row in the model's shape, ordered by `message_id`: `message_id` and `status`, and
    /// whichever of `tenant_id`, `attempts`, `lease_owner`, `lease_token`, `lease_expires_at`,
    /// `next_attempt_at`, `last_failure_code`, `created_at`, `published_at` the table keeps.
    pub rows: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Observe {
    #[default]
    RowsAffected,
    Returning,
}

/// The profile's names for the six statuses.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statuses {
    #[serde(default = "pending")]
    pub pending: String,
    #[serde(default = "in_flight")]
    pub in_flight: String,
    #[serde(default = "published")]
    pub published: String,
    #[serde(default = "ambiguous")]
    pub ambiguous: String,
    #[serde(default = "failed")]
    pub failed: String,
    #[serde(default = "exhausted")]
    pub exhausted: String,
}

fn pending() -> String {
    "PENDING".into()
}
fn in_flight() -> String {
    "IN_FLIGHT".into()
}
fn published() -> String {
    "PUBLISHED".into()
}
fn ambiguous() -> String {
    "AMBIGUOUS".into()
}
fn failed() -> String {
    "FAILED".into()
}
fn exhausted() -> String {
    "EXHAUSTED".into()
}

impl Default for Statuses {
    fn default() -> Self {
        Statuses { pending: pending(), in_flight: in_flight(), published: published(), ambiguous: ambiguous(), failed: failed(), exhausted: exhausted() }
    }
}

impl Statuses {
    fn pairs(&self) -> [(Status, &str); 6] {
        [
            (Status::Pending, self.pending.as_str()),
            (Status::InFlight, self.in_flight.as_str()),
            (Status::Published, self.published.as_str()),
            (Status::Ambiguous, self.ambiguous.as_str()),
            (Status::Failed, self.failed.as_str()),
            (Status::Exhausted, self.exhausted.as_str()),
        ]
    }

    fn parse(&self, text: &str) -> Option<Status> {
        self.pairs().into_iter().find(|(_, name)| *name == text).map(|(s, _)| s)
    }
}

/// A profile read and checked: its design, its schema's text, where it came from.
#[derive(Clone, Debug)]
pub struct Profile {
    pub file: ProfileFile,
    pub design: Design,
    pub schema_sql: String,
    pub origin: PathBuf,
}

/// The row fields a profile's SELECT may give, by column name.
const COLUMNS: [&str; 11] = [
    "message_id",
    "tenant_id",
    "status",
    "attempts",
    "lease_owner",
    "lease_token",
    "lease_expires_at",
    "next_attempt_at",
    "last_failure_code",
    "created_at",
    "published_at",
];

impl Profile {
    /// Reads a profile, its design and its schema. A problem is one line naming the file, the
    /// key and what is wrong.
    pub fn load(path: &Path) -> Result<Profile, String> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read SQL profile {shown}: {e}"))?;
        let file: ProfileFile = toml::from_str(&text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            let line = text[..at.min(text.len())].matches('\n').count() + 1;
            format!("{shown}:{line}: {}", e.message().replace('\n', " "))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let design = if file.design.ends_with(".toml") || file.design.contains('/') {
            crate::design::load(&dir.join(&file.design))?
        } else {
            Design::parse(&file.design).ok_or_else(|| format!("{shown}: design = {:?}: neither a built-in design nor a design file (FILE.toml)", file.design))?
        };
        let schema_path = dir.join(&file.schema);
        let schema_sql = std::fs::read_to_string(&schema_path).map_err(|e| format!("{shown}: schema = {:?}: cannot read {}: {e}", file.schema, schema_path.display()))?;
        let names: Vec<&str> = file.statuses.pairs().iter().map(|(_, n)| *n).collect();
        if let Some(dup) = names.iter().enumerate().find_map(|(i, n)| names[..i].contains(n).then_some(*n)) {
            return Err(format!("{shown}: statuses: {dup:?} names two statuses"));
        }
        for (key, _) in &file.observe {
            if !["mark_published", "mark_ambiguous", "mark_retry", "mark_failed", "mark_exhausted"].contains(&key.as_str()) {
                return Err(format!("{shown}: observe.{key}: not a terminal write (mark_published, mark_ambiguous, mark_retry, mark_failed, mark_exhausted)"));
            }
        }
        Ok(Profile { file, design, schema_sql, origin: path.to_path_buf() })
    }

    /// A fresh SQLite store over the profile's schema, in memory.
    pub fn sqlite(&self) -> Result<Box<dyn Store>, StoreError> {
        let conn = rusqlite::Connection::open_in_memory()?;
        conn.execute_batch(&self.schema_sql).map_err(|e| StoreError::Setup(format!("the profile's schema: {e}")))?;
        let mut store = ProfileStore { conn, profile: self.clone(), log: Vec::new(), versions: BTreeMap::new(), columns: Vec::new() };
        store.columns = store.row_columns()?;
        store.check_statements()?;
        Ok(Box::new(store))
    }
}

/// The named parameters each statement may use.
pub const PARAMETERS: [(&str, &[&str]); 8] = [
    ("enqueue", &["id", "tenant", "aggregate", "version", "now"]),
    ("claim", &["now", "owner", "tenant", "batch", "lease_ms", "lease_until", "max_attempts"]),
    ("mark_published", WRITE_PARAMETERS),
    ("mark_ambiguous", WRITE_PARAMETERS),
    ("mark_retry", WRITE_PARAMETERS),
    ("mark_failed", WRITE_PARAMETERS),
    ("mark_exhausted", WRITE_PARAMETERS),
    ("reap", &["now", "max_attempts"]),
];

const WRITE_PARAMETERS: &[&str] =
    &["id", "tenant", "owner", "token", "attempts", "now", "code", "retry_at", "backoff_base_ms", "backoff_cap_ms", "max_attempts"];

/// The user's statements on SQLite.
pub struct ProfileStore {
    conn: rusqlite::Connection,
    profile: Profile,
    log: Vec<String>,
    /// The application's aggregate versions (the business table is the application's, not the
    /// outbox's: the harness keeps it, so a stale enqueue is refused before any statement).
    versions: BTreeMap<(u16, u32), u32>,
    /// The columns the rows SELECT gives.
    columns: Vec<String>,
}

type Params = Vec<(&'static str, rusqlite::types::Value)>;

fn int(v: impl Into<i64>) -> rusqlite::types::Value {
    rusqlite::types::Value::Integer(v.into())
}
fn text(v: &str) -> rusqlite::types::Value {
    rusqlite::types::Value::Text(v.to_string())
}

impl ProfileStore {
    fn row_columns(&self) -> Result<Vec<String>, StoreError> {
        let stmt = self.conn.prepare(&self.profile.file.statements.rows).map_err(|e| StoreError::Setup(format!("statements.rows: {e}")))?;
        let names: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
        for required in ["message_id", "status"] {
            if !names.iter().any(|n| n == required) {
                return Err(StoreError::Setup(format!("statements.rows gives no {required} column (it gives {})", names.join(", "))));
            }
        }
        if let Some(other) = names.iter().find(|n| !COLUMNS.contains(&n.as_str())) {
            return Err(StoreError::Setup(format!("statements.rows: column {other:?} is none of the model's ({})", COLUMNS.join(", "))));
        }
        Ok(names)
    }

    /// Every statement prepares on the schema and names only parameters it gets: found before
    /// the first case, as a problem of the profile (exit 2), not as a divergence.
    fn check_statements(&self) -> Result<(), StoreError> {
        let s = &self.profile.file.statements;
        let all: [(&str, Option<&String>); 8] = [
            ("enqueue", Some(&s.enqueue)),
            ("claim", Some(&s.claim)),
            ("mark_published", Some(&s.mark_published)),
            ("mark_ambiguous", s.mark_ambiguous.as_ref()),
            ("mark_retry", s.mark_retry.as_ref()),
            ("mark_failed", s.mark_failed.as_ref()),
            ("mark_exhausted", s.mark_exhausted.as_ref()),
            ("reap", s.reap.as_ref()),
        ];
        for (key, sql) in all.into_iter().chain([("rows", Some(&s.rows))]) {
            let Some(sql) = sql else { continue };
            if let Some(reads) = reads_the_clock(sql) {
                return Err(StoreError::Setup(format!(
                    "statements.{key} reads {reads}: a run must be deterministic, so time comes in as :now (docs/sql-profile.md, \"Time\")"
                )));
            }
            let stmt = self.conn.prepare(sql).map_err(|e| StoreError::Setup(format!("statements.{key}: {e}")))?;
            let allowed = PARAMETERS.iter().find(|(k, _)| *k == key).map_or(&[][..], |(_, p)| p);
            for i in 1..=stmt.parameter_count() {
                let name = stmt.parameter_name(i).unwrap_or("?");
                if !allowed.iter().any(|p| format!(":{p}") == name) {
                    let known: Vec<String> = allowed.iter().map(|p| format!(":{p}")).collect();
                    return Err(StoreError::Setup(format!(
                        "statements.{key}: parameter {name} is not one this statement gets (it gets {})",
                        known.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Runs `sql` with those of `params` it names; returns the rows it gave back and the number
    /// of rows it changed. Logged with the values written in.
    fn run(&mut self, key: &str, sql: &str, params: &Params) -> Result<(Vec<BTreeMap<String, rusqlite::types::Value>>, usize), StoreError> {
        let mut stmt = self.conn.prepare(sql).map_err(|e| StoreError::Setup(format!("statements.{key}: {e}")))?;
        let mut shown = sql.to_string();
        for i in 1..=stmt.parameter_count() {
            let name = stmt.parameter_name(i).unwrap_or("?").to_string();
            let Some((_, value)) = params.iter().find(|(n, _)| format!(":{n}") == name) else {
                let known: Vec<String> = params.iter().map(|(n, _)| format!(":{n}")).collect();
                return Err(StoreError::Setup(format!("statements.{key}: parameter {name} is not one this statement gets (it gets {})", known.join(", "))));
            };
            stmt.raw_bind_parameter(i, value)?;
            shown = shown.replace(&name, &render(value));
        }
        let names: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
        let mut out = Vec::new();
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next()? {
            let mut values = BTreeMap::new();
            for (i, n) in names.iter().enumerate() {
                values.insert(n.clone(), row.get::<_, rusqlite::types::Value>(i)?);
            }
            out.push(values);
        }
        drop(rows);
        let changed = self.conn.changes() as usize;
        self.log.push(format!("{};", shown.trim().trim_end_matches(';')));
        Ok((out, changed))
    }

    fn write_sql(&self, kind: &WriteKind) -> Option<(&'static str, String)> {
        let s = &self.profile.file.statements;
        match kind {
            WriteKind::Published => Some(("mark_published", s.mark_published.clone())),
            WriteKind::Ambiguous { .. } => s.mark_ambiguous.clone().map(|q| ("mark_ambiguous", q)),
            WriteKind::Retry { .. } => s.mark_retry.clone().map(|q| ("mark_retry", q)),
            WriteKind::Failed { .. } => s.mark_failed.clone().map(|q| ("mark_failed", q)),
            WriteKind::Exhausted { .. } => s.mark_exhausted.clone().map(|q| ("mark_exhausted", q)),
        }
    }
}

/// What in a statement would read the database's clock or draw a random number, if anything.
pub fn reads_the_clock(sql: &str) -> Option<&'static str> {
    let lower = sql.to_ascii_lowercase();
    let words = |w: &str| {
        lower.match_indices(w).any(|(i, _)| {
            let before = lower[..i].chars().next_back().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            let after = lower[i + w.len()..].chars().next().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            before && after
        })
    };
    [
        ("current_timestamp", "the database's clock (CURRENT_TIMESTAMP)"),
        ("current_time", "the database's clock (CURRENT_TIME)"),
        ("current_date", "the database's clock (CURRENT_DATE)"),
        ("localtimestamp", "the database's clock (LOCALTIMESTAMP)"),
        ("'now'", "the database's clock ('now')"),
        ("unixepoch()", "the database's clock (unixepoch())"),
        ("now()", "the database's clock (now())"),
        ("clock_timestamp", "the database's clock (clock_timestamp())"),
        ("statement_timestamp", "the database's clock (statement_timestamp())"),
        ("transaction_timestamp", "the database's clock (transaction_timestamp())"),
        ("random()", "a random number (random())"),
        ("randomblob", "a random number (randomblob())"),
        ("gen_random_uuid", "a random number (gen_random_uuid())"),
    ]
    .into_iter()
    .find(|(w, _)| if w.starts_with('\'') || w.ends_with(')') { lower.contains(w) } else { words(w) })
    .map(|(_, what)| what)
}

fn render(value: &rusqlite::types::Value) -> String {
    match value {
        rusqlite::types::Value::Null => "NULL".into(),
        rusqlite::types::Value::Integer(i) => i.to_string(),
        rusqlite::types::Value::Real(r) => r.to_string(),
        rusqlite::types::Value::Text(t) => format!("'{}'", t.replace('\'', "''")),
        rusqlite::types::Value::Blob(_) => "X''".into(),
    }
}

fn as_int(key: &str, column: &str, v: Option<&rusqlite::types::Value>) -> Result<Option<i64>, StoreError> {
    match v {
        None | Some(rusqlite::types::Value::Null) => Ok(None),
        Some(rusqlite::types::Value::Integer(i)) => Ok(Some(*i)),
        Some(other) => Err(StoreError::Corrupt(format!("{key}: column {column} holds {}, not an integer", render(other)))),
    }
}

impl Store for ProfileStore {
    fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, StoreError> {
        let key = (req.tenant_id.0, req.aggregate_id.0);
        let current = self.versions.get(&key).copied().unwrap_or(0);
        if current != req.expected_version {
            return Ok(EnqueueResult::Stale { current_version: current });
        }
        let params: Params = vec![
            ("id", int(req.message_id.0)),
            ("tenant", int(req.tenant_id.0)),
            ("aggregate", int(req.aggregate_id.0)),
            ("version", int(req.expected_version + 1)),
            ("now", int(req.now.0 as i64)),
        ];
        let sql = self.profile.file.statements.enqueue.clone();
        self.run("enqueue", &sql, &params)?;
        self.versions.insert(key, current + 1);
        Ok(EnqueueResult::Applied { version: req.expected_version + 1 })
    }

    fn claim(&mut self, req: &ClaimRequest) -> Result<Vec<Lease>, StoreError> {
        let params: Params = vec![
            ("now", int(req.now.0 as i64)),
            ("owner", int(req.owner.0)),
            ("tenant", int(req.tenant_id.0)),
            ("batch", int(req.batch)),
            ("lease_ms", int(req.lease.0 as i64)),
            ("lease_until", int(req.now.plus(req.lease).0 as i64)),
            ("max_attempts", int(req.max_attempts)),
        ];
        // The rows before the claim, to put what it returns in the design's claim order (a
        // RETURNING clause gives its rows in no set order).
        let before = self.rows()?;
        let sql = self.profile.file.statements.claim.clone();
        let (rows, _) = self.run("claim", &sql, &params)?;
        let mut leases = Vec::new();
        for row in rows {
            let id = as_int("claim", "message_id", row.get("message_id"))?.ok_or_else(|| StoreError::Setup("statements.claim returns no message_id column".into()))?;
            leases.push(Lease {
                message_id: MessageId(id as u32),
                tenant_id: TenantId(as_int("claim", "tenant_id", row.get("tenant_id"))?.unwrap_or(i64::from(req.tenant_id.0)) as u16),
                owner: req.owner,
                token: LeaseToken(as_int("claim", "lease_token", row.get("lease_token"))?.unwrap_or(0) as u64),
                attempts: as_int("claim", "attempts", row.get("attempts"))?.unwrap_or(0) as u32,
                claim_seq: 0,
            });
        }
        let order = self.profile.design.policy().claim_order;
        leases.sort_by_key(|l| {
            let row = before.iter().find(|r| r.message_id == l.message_id);
            let due = row.map_or(Instant(0), |r| match order {
                crate::core::policy::ClaimOrder::Due => r.next_attempt_at.unwrap_or(r.created_at),
                crate::core::policy::ClaimOrder::Created => r.created_at,
            });
            let tenant = if order == crate::core::policy::ClaimOrder::Created { row.map_or(0, |r| r.tenant_id.0) } else { 0 };
            (due, tenant, l.message_id)
        });
        Ok(leases)
    }

    fn write(&mut self, req: &WriteRequest) -> Result<WriteResult, StoreError> {
        let Some((key, sql)) = self.write_sql(&req.kind) else {
            return Err(StoreError::Setup(format!("the profile has no statement for {}", req.kind.name())));
        };
        let policy: Policy = self.profile.design.policy();
        let retry_at = req.now.plus(policy.backoff.delay(policy.attempts_after_failure(req.lease.attempts)));
        let params: Params = vec![
            ("id", int(req.lease.message_id.0)),
            ("tenant", int(req.lease.tenant_id.0)),
            ("owner", int(req.lease.owner.0)),
            ("token", int(req.lease.token.0 as i64)),
            ("attempts", int(req.lease.attempts)),
            ("now", int(req.now.0 as i64)),
            ("code", text(req.kind.code().map_or("", FailureCode::as_str))),
            ("retry_at", int(retry_at.0 as i64)),
            ("backoff_base_ms", int(policy.backoff.base.0 as i64)),
            ("backoff_cap_ms", int(policy.backoff.cap.0 as i64)),
            ("max_attempts", int(req.max_attempts)),
        ];
        let (rows, changed) = self.run(key, &sql, &params)?;
        let observe = self.profile.file.observe.get(key).copied().unwrap_or_default();
        let applied = match observe {
            Observe::RowsAffected => changed > 0,
            Observe::Returning => !rows.is_empty(),
        };
        if !applied {
            return Ok(WriteResult::Stale { reason: crate::core::StaleReason::WrongToken });
        }
        let status = self
            .rows()?
            .into_iter()
            .find(|r| r.message_id == req.lease.message_id)
            .map(|r| r.status)
            .ok_or_else(|| StoreError::Corrupt(format!("{key} applied, and the rows SELECT no longer shows {}", req.lease.message_id)))?;
        Ok(WriteResult::Applied { status })
    }

    fn reap(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        let Some(sql) = self.profile.file.statements.reap.clone() else { return Ok(Vec::new()) };
        let params: Params = vec![("now", int(now.0 as i64)), ("max_attempts", int(max_attempts))];
        let (rows, _) = self.run("reap", &sql, &params)?;
        let mut ids = Vec::new();
        for row in rows {
            if let Some(id) = as_int("reap", "message_id", row.get("message_id"))? {
                ids.push(MessageId(id as u32));
            }
        }
        ids.sort();
        Ok(ids)
    }

    fn rows(&mut self) -> Result<Vec<Row>, StoreError> {
        let sql = self.profile.file.statements.rows.clone();
        let mut stmt = self.conn.prepare(&sql).map_err(|e| StoreError::Setup(format!("statements.rows: {e}")))?;
        let names: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
        let statuses = self.profile.file.statuses.clone();
        let mut out = Vec::new();
        let mut rows = stmt.raw_query();
        while let Some(r) = rows.next()? {
            let mut values = BTreeMap::new();
            for (i, n) in names.iter().enumerate() {
                values.insert(n.as_str(), r.get::<_, rusqlite::types::Value>(i)?);
            }
            let get = |c: &str| as_int("rows", c, values.get(c));
            let at = |c: &str| get(c).map(|v| v.map(|v| Instant(v as u64)));
            let status = match values.get("status") {
                Some(rusqlite::types::Value::Text(t)) => {
                    statuses.parse(t).ok_or_else(|| StoreError::Corrupt(format!("rows: status {t:?} is none of the profile's statuses")))?
                }
                other => return Err(StoreError::Corrupt(format!("rows: status {}", other.map_or("missing".into(), render)))),
            };
            let code = match values.get("last_failure_code") {
                Some(rusqlite::types::Value::Text(t)) if !t.is_empty() => {
                    Some(FailureCode::parse(t).ok_or_else(|| StoreError::Corrupt(format!("rows: last_failure_code {t:?}")))?)
                }
                _ => None,
            };
            out.push(Row {
                message_id: MessageId(get("message_id")?.unwrap_or(0) as u32),
                tenant_id: TenantId(get("tenant_id")?.unwrap_or(0) as u16),
                aggregate_id: crate::core::AggregateId(0),
                aggregate_version: 0,
                status,
                attempts: get("attempts")?.unwrap_or(0) as u32,
                lease_owner: get("lease_owner")?.map(|o| RelayId(o as u16)),
                lease_token: LeaseToken(get("lease_token")?.unwrap_or(0) as u64),
                lease_expires_at: at("lease_expires_at")?,
                next_attempt_at: at("next_attempt_at")?,
                last_failure_code: code,
                created_at: at("created_at")?.unwrap_or(Instant(0)),
                published_at: at("published_at")?,
            });
        }
        out.sort_by_key(|r| r.message_id);
        Ok(out)
    }

    fn log(&self) -> &[String] {
        &self.log
    }

    fn can_write(&self, kind: &WriteKind) -> bool {
        self.write_sql(kind).is_some()
    }

    fn can_reap(&self) -> bool {
        self.profile.file.statements.reap.is_some()
    }

    /// The model's row as the profile's SELECT shows it: what it has no column for is cleared.
    fn view(&self, row: Row) -> Row {
        let has = |c: &str| self.columns.iter().any(|n| n == c);
        Row {
            aggregate_id: crate::core::AggregateId(0),
            aggregate_version: 0,
            tenant_id: if has("tenant_id") { row.tenant_id } else { TenantId(0) },
            attempts: if has("attempts") { row.attempts } else { 0 },
            lease_owner: if has("lease_owner") { row.lease_owner } else { None },
            lease_token: if has("lease_token") { row.lease_token } else { LeaseToken(0) },
            lease_expires_at: if has("lease_expires_at") { row.lease_expires_at } else { None },
            next_attempt_at: if has("next_attempt_at") { row.next_attempt_at } else { None },
            last_failure_code: if has("last_failure_code") { row.last_failure_code } else { None },
            created_at: if has("created_at") { row.created_at } else { Instant(0) },
            published_at: if has("published_at") { row.published_at } else { None },
            ..row
        }
    }
}
