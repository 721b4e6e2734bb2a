//! The database-side recorder (`outbox-check record`): two triggers on the user's outbox table
//! log every row it changes — the row before and after, the session that changed it — and stamp
//! each transaction at its commit, in commit order; the log then becomes a history in the trace
//! format, read with a profile's column and status names, for the oracle to check.
//!
//! Commit order: a deferred constraint trigger runs as the transaction commits and takes the next
//! stamp by updating the one row of a counter, whose lock it holds until the commit ends — so a
//! later stamp is a later commit. A transaction that rolls back leaves nothing (its log rows go
//! with it). What a recorder cannot see: a statement that changed no row (a write refused by its
//! fence fires no row trigger) and a claim that took nothing.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::core::Status;
use crate::store::profile::Profile;
use crate::trace::{Event, Header, StatusList, TraceLease, WriteReport};

/// The schema the recorder keeps its log in, in the user's database.
pub const SCHEMA: &str = "outbox_check_recorder";

/// What installs the recorder on `table` (a name as the user writes it, `queue.jobs`).
pub fn install_sql(table: &str) -> String {
    format!(
        r#"CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.recording (table_name text NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp());
INSERT INTO {SCHEMA}.recording (table_name) VALUES ({table_literal});
CREATE TABLE {SCHEMA}.changes (
    seq bigserial PRIMARY KEY,
    tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
    pid integer NOT NULL DEFAULT pg_backend_pid(),
    app text NOT NULL DEFAULT current_setting('application_name'),
    port integer DEFAULT inet_client_port(),
    op text NOT NULL,
    old jsonb,
    new jsonb
);
CREATE TABLE {SCHEMA}.commits (tx xid8 PRIMARY KEY, stamp bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE {SCHEMA}.counter (one boolean PRIMARY KEY DEFAULT true, n bigint NOT NULL);
INSERT INTO {SCHEMA}.counter (n) VALUES (0);
CREATE FUNCTION {SCHEMA}.log() RETURNS trigger LANGUAGE plpgsql AS $recorder$
BEGIN
    INSERT INTO {SCHEMA}.changes (op, old, new)
    VALUES (TG_OP,
            CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END,
            CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
    RETURN NULL;
END
$recorder$;
CREATE FUNCTION {SCHEMA}.stamp() RETURNS trigger LANGUAGE plpgsql AS $recorder$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {SCHEMA}.commits WHERE tx = pg_current_xact_id()) THEN
        -- The counter's row stays locked until this transaction's commit ends: stamps follow
        -- commit order, and the time is read once the lock is held.
        WITH bumped AS (UPDATE {SCHEMA}.counter SET n = n + 1 RETURNING n)
        INSERT INTO {SCHEMA}.commits (tx, stamp) SELECT pg_current_xact_id(), n FROM bumped;
    END IF;
    RETURN NULL;
END
$recorder$;
CREATE TRIGGER outbox_check_recorder_log AFTER INSERT OR UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.log();
CREATE CONSTRAINT TRIGGER outbox_check_recorder_stamp AFTER INSERT OR UPDATE OR DELETE ON {table}
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.stamp();
"#,
        table_literal = literal(table),
    )
}

/// What removes every object of the recorder from `table` and the database.
pub fn remove_sql(table: &str) -> String {
    format!(
        "DROP TRIGGER IF EXISTS outbox_check_recorder_log ON {table};\n\
         DROP TRIGGER IF EXISTS outbox_check_recorder_stamp ON {table};\n\
         DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;\n"
    )
}

/// A SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// One row change as the log holds it.
#[derive(Clone, Debug)]
pub struct Change {
    /// The commit-order stamp of its transaction.
    pub stamp: i64,
    /// The session that made it: its `application_name`, else `pid-N`.
    pub session: String,
    /// The commit's time, milliseconds after the recording started.
    pub now: u64,
    /// `INSERT`, `UPDATE` or `DELETE`.
    pub op: String,
    pub old: Option<Map<String, Value>>,
    pub new: Option<Map<String, Value>>,
    /// The row's lease expiry and retry time after the change, as milliseconds after the start
    /// (read by the server from the profile's columns: timestamps, or numbers taken as
    /// milliseconds since the Unix epoch).
    pub expiry: Option<i64>,
    pub retry_at: Option<i64>,
}

/// The SELECT that reads the log in commit order; `expiry` and `retry` are the table's columns
/// for the lease's expiry and the retry time, if it has them.
pub fn read_sql(expiry: Option<&str>, retry: Option<&str>) -> String {
    let ms = |column: Option<&str>| match column {
        None => "NULL::bigint".to_string(),
        Some(c) => {
            let c = literal(c);
            format!(
                "CASE jsonb_typeof(c.new -> {c}) \
                   WHEN 'string' THEN (extract(epoch from ((c.new ->> {c})::timestamptz - r.started_at)) * 1000)::bigint \
                   WHEN 'number' THEN (c.new ->> {c})::numeric::bigint - (extract(epoch from r.started_at) * 1000)::bigint END"
            )
        }
    };
    format!(
        "SELECT k.stamp, c.app, c.pid, c.port, (extract(epoch from (k.at - r.started_at)) * 1000)::bigint AS now_ms, c.op, \
                c.old::text, c.new::text, {} AS expiry, {} AS retry_at \
           FROM {SCHEMA}.changes c JOIN {SCHEMA}.commits k USING (tx) CROSS JOIN {SCHEMA}.recording r \
          ORDER BY k.stamp, c.seq",
        ms(expiry),
        ms(retry)
    )
}

/// The table's own name for the model's `field` (the profile's `[columns]`), else the field's.
pub fn column(profile: &Profile, field: &str) -> String {
    profile.file.columns.get(field).and_then(|names| names.names().first().cloned()).unwrap_or_else(|| field.into())
}

/// The log in commit order, each change's session named by `name(application_name, pid,
/// client port)`; times read with `profile`'s column names.
pub fn read(
    client: &mut postgres::Client,
    profile: &Profile,
    name: &dyn Fn(&str, i32, Option<i32>) -> String,
) -> Result<Vec<Change>, postgres::Error> {
    let (expiry, retry) = (column(profile, "lease_expires_at"), column(profile, "next_attempt_at"));
    client.batch_execute("SET TIME ZONE 'UTC'")?;
    let rows = client.query(&read_sql(Some(&expiry), Some(&retry)), &[])?;
    let object = |text: Option<String>| -> Option<Map<String, Value>> {
        text.and_then(|t| serde_json::from_str::<Value>(&t).ok()).and_then(|v| match v {
            Value::Object(map) => Some(map),
            _ => None,
        })
    };
    Ok(rows
        .iter()
        .map(|row| {
            let app: String = row.get(1);
            Change {
                stamp: row.get(0),
                session: name(&app, row.get(2), row.get(3)),
                now: row.get::<_, Option<i64>>(4).unwrap_or(0).max(0) as u64,
                op: row.get(5),
                old: object(row.get(6)),
                new: object(row.get(7)),
                expiry: row.get(8),
                retry_at: row.get(9),
            }
        })
        .collect())
}

/// A session's name as `record stop` gives it: its `application_name`, else `pid-N`.
pub fn session_name(app: &str, pid: i32, _port: Option<i32>) -> String {
    if app.is_empty() {
        format!("pid-{pid}")
    } else {
        app.to_string()
    }
}

/// A history built from a log, and the sessions it saw.
pub struct Recorded {
    pub header: Header,
    pub events: Vec<Event>,
    /// Sessions seen, by name.
    pub sessions: Vec<String>,
}

/// What a recorder cannot see, for the user to read beside the verdict.
pub const NOT_SEEN: [&str; 3] = [
    "a statement that changed no row (a write its fence refused, a claim that took nothing): no trigger fires",
    "publications: a recording holds the table's changes, not the broker's",
    "which statement made a change: a write is read off the row's status before and after",
];

/// The history of `changes` (in commit order) under `profile`'s names: an insert is an enqueue;
/// rows a session moves into the in-flight status, a claim by that session (one per
/// transaction); a row moved out of it by a session that took it, that session's write, with the
/// lease its own latest claim of the row handed it (a later claim may have superseded it: a
/// worker writes the jobs it took) and its kind read off the new status; by a session that never
/// took it, a release under the design's rescuer fence (a completion: that session's write,
/// presenting no lease); a delete, a completion by deletion; a row moved from a terminal status
/// back to waiting, a requeue. The session named `reaper` runs the design's reaper: what it
/// moves out of in-flight in one transaction is one reap.
pub fn history(profile: &Profile, max_attempts: u32, changes: &[Change], reaper: Option<&str>) -> Recorded {
    let policy = profile.design.policy();
    let column = |field: &str| column(profile, field);
    let (id_col, status_col, attempts_col, token_col, tenant_col) =
        (column("message_id"), column("status"), column("attempts"), column("lease_token"), column("tenant_id"));
    let expiry_col = column("lease_expires_at");
    let names = profile.statuses.names();
    let status_of = |row: &Map<String, Value>| -> Option<(String, Status)> {
        let name = text(row.get(&status_col)?)?;
        let status = names.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)?;
        Some((name, status))
    };
    let message_of = |row: &Map<String, Value>| row.get(&id_col).and_then(text).unwrap_or_default();
    let tenant_of = |row: &Map<String, Value>| row.get(&tenant_col).and_then(text).unwrap_or_else(|| "t0".into());
    let attempts_of = |row: &Map<String, Value>| row.get(&attempts_col).and_then(Value::as_u64).unwrap_or(0) as u32;
    let token_of = |row: &Map<String, Value>| row.get(&token_col).and_then(text);
    let at = |ms: Option<i64>| ms.map(|ms| ms.max(0) as u64);
    let fence = policy.rescue.map_or("id", |f| f.name()).to_string();

    let mut events = Vec::new();
    let mut sessions: Vec<String> = Vec::new();
    // Each session's latest lease of each row it took: the token and attempts it would present.
    let mut taken_by: BTreeMap<(String, String), (Option<String>, u32)> = BTreeMap::new();
    let mut i = 0;
    while i < changes.len() {
        let stamp = changes[i].stamp;
        let tx: Vec<&Change> = changes[i..].iter().take_while(|c| c.stamp == stamp).collect();
        i += tx.len();
        let (session, now) = (tx[0].session.clone(), tx[0].now);
        if !sessions.contains(&session) {
            sessions.push(session.clone());
        }
        let mut claimed: Vec<(TraceLease, String, Option<i64>)> = Vec::new();
        let mut reaped: Vec<String> = Vec::new();
        for change in &tx {
            let before = change.old.as_ref().and_then(status_of);
            let after = change.new.as_ref().and_then(status_of);
            match (change.op.as_str(), &change.old, &change.new) {
                ("INSERT", _, Some(new)) => events.push(Event::Enqueue {
                    tenant: tenant_of(new),
                    aggregate: message_of(new),
                    expected_version: 0,
                    message: message_of(new),
                    now,
                    result: "applied".into(),
                }),
                ("UPDATE", Some(old), Some(new)) => {
                    let message = message_of(new);
                    let was = before.as_ref().map(|b| b.1);
                    let is = after.as_ref().map(|a| a.1);
                    // Taken: moved into in-flight, or leased again while in flight (a new
                    // attempt, token or expiry: a lease that bumps none of them is re-taken too).
                    let taken = is == Some(Status::InFlight)
                        && (was != Some(Status::InFlight)
                            || attempts_of(old) != attempts_of(new)
                            || token_of(old) != token_of(new)
                            || old.get(&expiry_col) != new.get(&expiry_col));
                    if taken {
                        taken_by.insert((message.clone(), session.clone()), (token_of(new), attempts_of(new)));
                        let lease = TraceLease { message, token: token_of(new), attempts: attempts_of(new) };
                        claimed.push((lease, tenant_of(new), change.expiry));
                    } else if was == Some(Status::InFlight) && is.is_some_and(|s| s != Status::InFlight) {
                        let Some((name, to)) = after.clone() else { continue };
                        let next_attempt_at =
                            matches!(to, Status::Pending | Status::Ambiguous).then(|| at(change.retry_at)).flatten();
                        // The session's own lease of the row, if it ever took it: a worker
                        // writes the jobs it took, with what its claim handed it — a lease a
                        // later claim may have superseded. Anyone else is a rescuer.
                        let own = taken_by.get(&(message.clone(), session.clone())).cloned();
                        if reaper == Some(session.as_str()) {
                            reaped.push(message);
                        } else if own.is_some() || to == Status::Published {
                            // A completion by a session that never took the row presents no
                            // lease at all.
                            let took = own.is_some();
                            let (token, attempts) = own.unwrap_or((None, attempts_of(old)));
                            let write = match to {
                                Status::Published => "mark_published",
                                Status::Ambiguous => "mark_ambiguous",
                                Status::Pending => "mark_retry",
                                Status::Failed | Status::Exhausted
                                    if crate::core::policy::used_up(attempts, max_attempts) =>
                                {
                                    "mark_exhausted"
                                }
                                _ => "mark_failed",
                            };
                            events.push(Event::Write {
                                relay: session.clone(),
                                write: write.into(),
                                message,
                                tenant: tenant_of(old),
                                attempt: (token.is_none() && took).then_some(attempts),
                                token,
                                now,
                                code: None,
                                result: WriteReport::Applied,
                                status: Some(name),
                                next_attempt_at,
                            });
                        } else {
                            events.push(Event::Release {
                                relay: Some(session.clone()),
                                message,
                                now,
                                to: name,
                                next_attempt_at,
                                fence: fence.clone(),
                                token: None,
                                attempt: None,
                                result: "applied".into(),
                            });
                        }
                    } else if was.is_some_and(|s| s.is_terminal())
                        && is.is_some_and(|s| matches!(s, Status::Pending | Status::Ambiguous))
                    {
                        events.push(Event::Requeue { message, result: "applied".into() });
                    }
                }
                ("DELETE", Some(old), _) => {
                    let message = message_of(old);
                    let own = taken_by.get(&(message.clone(), session.clone())).cloned();
                    events.push(Event::Write {
                        relay: session.clone(),
                        write: "delete".into(),
                        tenant: tenant_of(old),
                        token: own.as_ref().and_then(|o| o.0.clone()),
                        attempt: own.as_ref().filter(|o| o.0.is_none()).map(|o| o.1),
                        message,
                        now,
                        code: None,
                        result: WriteReport::Applied,
                        status: None,
                        next_attempt_at: None,
                    });
                }
                _ => {}
            }
        }
        if !reaped.is_empty() {
            events.push(Event::Reap { now, messages: reaped });
        }
        if !claimed.is_empty() {
            // The lease the claim handed out: from its expiry where the table keeps one, else
            // the profile's.
            let lease_ms = claimed
                .iter()
                .filter_map(|c| c.2)
                .map(|expiry| expiry.saturating_sub(now as i64).max(0) as u64)
                .max()
                .unwrap_or_else(|| profile.file.time.as_ref().map_or(30_000, |t| t.lease.0));
            events.push(Event::Claim {
                relay: session.clone(),
                tenant: claimed[0].1.clone(),
                batch: claimed.len() as u32,
                lease_ms,
                now,
                leases: claimed.into_iter().map(|c| c.0).collect(),
                outcome: crate::trace::Outcome::Ok,
            });
        }
    }
    let mut header = Header::new(profile.design.name(), max_attempts);
    header.source = Some(format!("outbox-check record, {} session(s)", sessions.len()));
    header.concurrency = Some(crate::trace::Concurrency::SkipLocked);
    let mut statuses: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, status) in &names {
        statuses.entry(name.clone()).or_default().push(status.as_str().to_string());
    }
    header.statuses = Some(
        statuses
            .into_iter()
            .map(|(name, list)| {
                let list = if list.len() == 1 { StatusList::One(list[0].clone()) } else { StatusList::Several(list) };
                (name, list)
            })
            .collect(),
    );
    Recorded { header, events, sessions }
}

/// A JSON value as text: a string as it is, a number in digits.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
