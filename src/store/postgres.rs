//! PostgreSQL for conformance runs: a scratch schema of our own on a server the user names.
//!
//! A database the user gave is never touched outside the harness's own schema: every run works
//! in a fresh schema with a random, validated name and drops it afterwards. The URL comes only
//! from the caller (`OUTBOX_CHECK_PG_URL` or `--database-url`), and a host that is not loopback
//! is refused unless the caller says the database is disposable.
//!
//! No scratch schema outlives its run. Each is created under a session advisory lock of its own
//! and marked with a comment ([`MARKER`]); SIGINT and SIGTERM drop every schema of the process
//! before it exits; and a schema left by a run that was killed outright (SIGKILL, a lost machine)
//! is recognised by its name, its marker and its lock no longer being held, and dropped by the
//! next run's first connection or by `outbox-check conform --clean-up`. A schema without the
//! marker, or whose lock a live session holds, is never touched.

use super::migrate::{MigrateError, Migration};
use std::str::FromStr;

/// The PostgreSQL migrations, in order.
pub const MIGRATIONS: [Migration; 4] = [
    Migration { version: 1, name: "v1_outbox", sql: include_str!("../../migrations/postgres/001_v1_outbox.sql") },
    Migration {
        version: 2,
        name: "v2_fenced_leases",
        sql: include_str!("../../migrations/postgres/002_v2_fenced_leases.sql"),
    },
    Migration {
        version: 3,
        name: "seed_tenant_outbox_events",
        sql: include_str!("../../migrations/postgres/003_seed_tenant_outbox_events.sql"),
    },
    Migration {
        version: 4,
        name: "seed_tenant_claimable_states",
        sql: include_str!("../../migrations/postgres/004_seed_tenant_claimable_states.sql"),
    },
];

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("not a PostgreSQL URL: {0}")]
    BadUrl(String),
    #[error("refusing host '{0}': not loopback; pass --i-understand-this-database-is-disposable to use it")]
    NotLoopback(String),
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(String),
    #[error("PostgreSQL: {0}")]
    Sql(String),
}

impl From<postgres::Error> for PgError {
    fn from(error: postgres::Error) -> Self {
        PgError::Sql(error.as_db_error().map(|e| e.to_string()).unwrap_or_else(|| error.to_string()))
    }
}

/// An error and its causes on one line ("error connecting to server: Connection refused").
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// Checks a URL before any connection: parseable, and loopback unless `disposable`.
pub fn check_url(url: &str, disposable: bool) -> Result<postgres::Config, PgError> {
    let mut config = postgres::Config::from_str(url).map_err(|e| PgError::BadUrl(e.to_string()))?;
    // A server that does not answer is an environment problem to report, not a hang.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    for host in config.get_hosts() {
        match host {
            postgres::config::Host::Tcp(name) => {
                let loopback = name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
                if !loopback && !disposable {
                    return Err(PgError::NotLoopback(name.clone()));
                }
            }
            postgres::config::Host::Unix(_) => {}
        }
    }
    Ok(config)
}

/// The comment every scratch schema carries, followed by ` (pid N)` of the process that made it.
pub const MARKER: &str = "outbox-check scratch schema";

/// A commit-order stamp, drawn as the last statement of a transaction that commits right after:
/// the next value of the scratch schema's `outbox_check_order`, taken under a transaction-level
/// advisory lock keyed by that sequence, so no other transaction of the schema draws one until
/// this one has committed. Stamps then order as commits do. Without the lock they ordered as
/// the draws did: a write that drew its stamp and then stalled (a busy machine) kept its row
/// locked past the stamp, so a skip-locked claim of another relay, logged after it, passed over
/// the row while the history said the write had committed (issue 27, item 13).
pub const COMMIT_STAMP: &str = "SELECT nextval('outbox_check_order') \
     FROM (SELECT pg_advisory_xact_lock('outbox_check_order'::regclass::oid::bigint)) AS serialised";

/// The advisory lock class of scratch schemas ("obox"); the key is the low 32 bits of the
/// schema's hex suffix.
const LOCK_CLASS: i32 = 0x6f62_6f78;

fn is_scratch_name(schema: &str) -> bool {
    schema.len() == 29 && schema.starts_with("outbox_check_") && schema[13..].chars().all(|c| c.is_ascii_hexdigit())
}

fn lock_key(schema: &str) -> i32 {
    u64::from_str_radix(&schema[13..], 16).unwrap_or(0) as u32 as i32
}

/// The scratch schemas this process holds, for the signal handler: where each lives and its name.
static LIVE: std::sync::Mutex<Vec<(postgres::Config, String)>> = std::sync::Mutex::new(Vec::new());
static SIGNALS: std::sync::Once = std::sync::Once::new();
static ORPHANS: std::sync::Once = std::sync::Once::new();

fn live() -> std::sync::MutexGuard<'static, Vec<(postgres::Config, String)>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// On SIGINT or SIGTERM: drop every scratch schema of this process (then the process exits as
/// the signal would, `crate::cleanup`). Holding the registry keeps new schemas from being made
/// meanwhile.
fn drop_on_signal() {
    SIGNALS.call_once(|| {
        let registered = crate::cleanup::on_interrupt(|| {
            let schemas = live();
            for (config, schema) in schemas.iter() {
                if let Ok(mut client) = config.connect(postgres::NoTls) {
                    // The run's own threads go on until the exit, so the drop can lose a deadlock
                    // to one of their transactions (PostgreSQL aborts one side): try again.
                    for _ in 0..20 {
                        match client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")) {
                            Err(e) if e.code().is_some() => std::thread::sleep(std::time::Duration::from_millis(50)),
                            _ => break,
                        }
                    }
                }
            }
            eprintln!("outbox-check: interrupted; dropped {} scratch schema(s)", schemas.len());
        });
        // For the life of the process: the registry of live schemas is the state it reads.
        std::mem::forget(registered);
    });
}

/// Drops the scratch schemas that runs which ended without cleaning up left behind (marked,
/// and with no live session holding their lock), except `keep`. Returns their names.
fn drop_orphans(client: &mut postgres::Client, keep: Option<&str>) -> Result<Vec<String>, PgError> {
    let rows = client.query(
        "SELECT n.nspname FROM pg_namespace n
          WHERE n.nspname LIKE 'outbox\\_check\\_%' AND obj_description(n.oid, 'pg_namespace') LIKE $1",
        &[&format!("{MARKER}%")],
    )?;
    let mut dropped = Vec::new();
    for row in rows {
        let schema: String = row.get(0);
        if !is_scratch_name(&schema) || Some(schema.as_str()) == keep {
            continue;
        }
        let free: bool =
            client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_CLASS, &lock_key(&schema)])?.get(0);
        if free {
            client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))?;
            client.execute("SELECT pg_advisory_unlock($1, $2)", &[&LOCK_CLASS, &lock_key(&schema)])?;
            dropped.push(schema);
        }
    }
    Ok(dropped)
}

/// `outbox-check conform --clean-up`: drops the scratch schemas killed runs left on this server.
pub fn clean_up(url: &str, disposable: bool) -> Result<Vec<String>, PgError> {
    let config = check_url(url, disposable)?;
    let mut client = config.connect(postgres::NoTls).map_err(|e| PgError::Connect(with_causes(&e)))?;
    drop_orphans(&mut client, None)
}

/// A connection working in a schema of its own, dropped with it.
pub struct Scratch {
    client: postgres::Client,
    schema: String,
    /// This connection created the schema and drops it (an attached one does not).
    owned: bool,
}

impl Scratch {
    pub fn connect(url: &str, disposable: bool) -> Result<Scratch, PgError> {
        let config = check_url(url, disposable)?;
        let mut client = config.connect(postgres::NoTls).map_err(|e| PgError::Connect(with_causes(&e)))?;
        drop_on_signal();
        let schema = loop {
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
            let seed = (nanos as u64)
                ^ (u64::from(std::process::id()) << 32)
                ^ COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let schema = format!("outbox_check_{:016x}", crate::core::random_token(seed));
            // The name goes into SQL unquoted: it must be exactly what was just generated.
            if !is_scratch_name(&schema) {
                return Err(PgError::Sql(format!("refusing schema name {schema}")));
            }
            // The lock is this session's for as long as it lives: taken before the schema
            // exists, so no clean-up can mistake a schema being made for one left behind.
            let locked: bool =
                client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_CLASS, &lock_key(&schema)])?.get(0);
            if locked {
                break schema;
            }
        };
        {
            let mut live = live();
            client.batch_execute(&format!(
                "CREATE SCHEMA {schema}; COMMENT ON SCHEMA {schema} IS '{MARKER} (pid {})'; SET search_path TO {schema}",
                std::process::id()
            ))?;
            live.push((config, schema.clone()));
        }
        let mut scratch = Scratch { client, schema, owned: true };
        // Once per process: what runs that were killed outright left behind.
        let mut orphans = Ok(());
        ORPHANS.call_once(|| orphans = drop_orphans(&mut scratch.client, Some(&scratch.schema)).map(|_| ()));
        orphans?;
        Ok(scratch)
    }

    /// Another connection into an existing scratch schema (a second worker, a reconnect after
    /// a lost connection). It does not drop the schema.
    pub fn attach(url: &str, disposable: bool, schema: &str) -> Result<Scratch, PgError> {
        if !is_scratch_name(schema) {
            return Err(PgError::Sql(format!(
                "refusing schema name {schema}: not one of outbox-check's scratch schemas"
            )));
        }
        let config = check_url(url, disposable)?;
        let mut client = config.connect(postgres::NoTls).map_err(|e| PgError::Connect(with_causes(&e)))?;
        client.batch_execute(&format!("SET search_path TO {schema}"))?;
        Ok(Scratch { client, schema: schema.to_string(), owned: false })
    }

    pub fn client(&mut self) -> &mut postgres::Client {
        &mut self.client
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Applies every migration up to `target` not applied yet in this schema; returns those
    /// applied now.
    pub fn migrate(&mut self, target: u32) -> Result<Vec<u32>, MigrateError> {
        let book = |e: postgres::Error| MigrateError::Postgres(e.to_string());
        self.client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS outbox_check_migrations (
                     version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )
            .map_err(book)?;
        let done: Vec<i32> = self
            .client
            .query("SELECT version FROM outbox_check_migrations", &[])
            .map_err(book)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut applied = Vec::new();
        for m in MIGRATIONS.iter().filter(|m| m.version <= target && !done.contains(&(m.version as i32))) {
            let failed = |e: postgres::Error| {
                MigrateError::Postgres(format!("migration {} ({}) failed: {e}", m.version, m.name))
            };
            let mut tx = self.client.transaction().map_err(failed)?;
            tx.batch_execute(m.sql).map_err(failed)?;
            tx.execute(
                "INSERT INTO outbox_check_migrations (version, name) VALUES ($1, $2)",
                &[&(m.version as i32), &m.name],
            )
            .map_err(failed)?;
            tx.commit().map_err(failed)?;
            applied.push(m.version);
        }
        Ok(applied)
    }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let mut live = live();
        let _ = self.client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        live.retain(|(_, schema)| *schema != self.schema);
    }
}
