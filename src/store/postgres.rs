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

/// The scratch schemas and databases this process holds, for the signal handler: where each
/// lives and its name.
static LIVE: std::sync::Mutex<Vec<(postgres::Config, Kept)>> = std::sync::Mutex::new(Vec::new());

/// What a run keeps on a server for its length.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kept {
    Schema(String),
    Database(String),
}

impl Kept {
    fn drop_sql(&self) -> String {
        match self {
            Kept::Schema(name) => format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
            // FORCE (PostgreSQL 13): the run's own connections may still be open.
            Kept::Database(name) => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        }
    }
}
static SIGNALS: std::sync::Once = std::sync::Once::new();
static ORPHANS: std::sync::Once = std::sync::Once::new();

fn live() -> std::sync::MutexGuard<'static, Vec<(postgres::Config, Kept)>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// On SIGINT or SIGTERM: drop every scratch schema of this process (then the process exits as
/// the signal would, `crate::cleanup`). Holding the registry keeps new schemas from being made
/// meanwhile.
fn drop_on_signal() {
    SIGNALS.call_once(|| {
        let registered = crate::cleanup::on_interrupt(|| {
            let schemas = live();
            for (config, kept) in schemas.iter() {
                if let Ok(mut client) = config.connect(postgres::NoTls) {
                    // The run's own threads go on until the exit, so the drop can lose a deadlock
                    // to one of their transactions (PostgreSQL aborts one side): try again.
                    for _ in 0..20 {
                        match client.batch_execute(&kept.drop_sql()) {
                            Err(e) if e.code().is_some() => std::thread::sleep(std::time::Duration::from_millis(50)),
                            _ => break,
                        }
                    }
                }
            }
            eprintln!("outbox-check: interrupted; dropped {} scratch schema(s) or database(s)", schemas.len());
        });
        // For the life of the process: the registry of live schemas is the state it reads.
        std::mem::forget(registered);
    });
}

/// Drops the scratch schemas and databases that runs which ended without cleaning up left
/// behind (marked, and with no live session holding their lock), except `keep`. Returns their
/// names.
fn drop_orphans(client: &mut postgres::Client, keep: Option<&str>) -> Result<Vec<String>, PgError> {
    let rows = client.query(
        "SELECT n.nspname FROM pg_namespace n
          WHERE n.nspname LIKE 'outbox\\_check\\_%' AND obj_description(n.oid, 'pg_namespace') LIKE $1",
        &[&format!("{MARKER}%")],
    )?;
    let databases = client.query(
        "SELECT d.datname FROM pg_database d
          WHERE d.datname LIKE 'outbox\\_check\\_%' AND shobj_description(d.oid, 'pg_database') LIKE $1",
        &[&format!("{MARKER}%")],
    )?;
    let found = rows.iter().map(|r| Kept::Schema(r.get(0))).chain(databases.iter().map(|r| Kept::Database(r.get(0))));
    let mut dropped = Vec::new();
    for kept in found {
        let (Kept::Schema(name) | Kept::Database(name)) = &kept;
        if !is_scratch_name(name) || Some(name.as_str()) == keep {
            continue;
        }
        let free: bool =
            client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_CLASS, &lock_key(name)])?.get(0);
        if free {
            client.batch_execute(&kept.drop_sql())?;
            client.execute("SELECT pg_advisory_unlock($1, $2)", &[&LOCK_CLASS, &lock_key(name)])?;
            dropped.push(name.clone());
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

/// Where a run works: a scratch schema in the user's database, or (profiles, where the server
/// lets the role create databases) a scratch database of its own with the harness's objects in
/// its schema [`HARNESS_SCHEMA`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub database: Option<String>,
    pub schema: String,
}

impl Place {
    pub fn schema(schema: &str) -> Place {
        Place { database: None, schema: schema.to_string() }
    }
}

/// The harness's own schema inside a scratch database: its clock and its commit-order sequence.
pub const HARNESS_SCHEMA: &str = "outbox_check";

/// The clock functions a run shadows (docs/sql-profile.md, "Time"): in the harness's schema,
/// ahead of `pg_catalog` in the search path, each reads the run's clock, the setting
/// `outbox_check.now`, which the run sets before each statement.
pub const SHADOWED_CLOCK: [&str; 4] = ["now", "clock_timestamp", "statement_timestamp", "transaction_timestamp"];

/// The time the model's instant 0 is, for a timestamp column: PostgreSQL's own epoch.
pub const CLOCK_BASE: &str = "2000-01-01 00:00:00+00";

/// A connection working in a schema (or database) of its own, dropped with it.
pub struct Scratch {
    client: postgres::Client,
    schema: String,
    /// The scratch database this connection works in, if the run has one.
    database: Option<String>,
    /// The connection to the user's database that created the scratch database and holds its
    /// lock: it drops the database.
    admin: Option<postgres::Client>,
    /// This connection created the schema and drops it (an attached one does not).
    owned: bool,
}

/// A fresh scratch name, its advisory lock taken by `client` for as long as the session lives:
/// taken before the schema or database exists, so no clean-up can mistake one being made for
/// one left behind.
fn fresh_name(client: &mut postgres::Client) -> Result<String, PgError> {
    loop {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let seed = (nanos as u64)
            ^ (u64::from(std::process::id()) << 32)
            ^ COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("outbox_check_{:016x}", crate::core::random_token(seed));
        // The name goes into SQL unquoted: it must be exactly what was just generated.
        if !is_scratch_name(&name) {
            return Err(PgError::Sql(format!("refusing scratch name {name}")));
        }
        let locked: bool =
            client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_CLASS, &lock_key(&name)])?.get(0);
        if locked {
            return Ok(name);
        }
    }
}

impl Scratch {
    pub fn connect(url: &str, disposable: bool) -> Result<Scratch, PgError> {
        let config = check_url(url, disposable)?;
        let mut client = config.connect(postgres::NoTls).map_err(|e| PgError::Connect(with_causes(&e)))?;
        drop_on_signal();
        let schema = fresh_name(&mut client)?;
        {
            let mut live = live();
            client.batch_execute(&format!(
                "CREATE SCHEMA {schema}; COMMENT ON SCHEMA {schema} IS '{MARKER} (pid {})'; SET search_path TO {schema}, pg_catalog",
                std::process::id()
            ))?;
            live.push((config, Kept::Schema(schema.clone())));
        }
        let mut scratch = Scratch { client, schema, database: None, admin: None, owned: true };
        // Once per process: what runs that were killed outright left behind.
        let mut orphans = Ok(());
        ORPHANS.call_once(|| orphans = drop_orphans(&mut scratch.client, Some(&scratch.schema)).map(|_| ()));
        orphans?;
        Ok(scratch)
    }

    /// A scratch database of the run's own, where the user's DDL may create schemas, types and
    /// functions: the role must be allowed to create databases. Where the server refuses
    /// (`CREATE DATABASE` not permitted), a scratch schema in the user's database instead;
    /// [`Scratch::place`] says which.
    pub fn database(url: &str, disposable: bool) -> Result<Scratch, PgError> {
        let config = check_url(url, disposable)?;
        let mut admin = config.connect(postgres::NoTls).map_err(|e| PgError::Connect(with_causes(&e)))?;
        drop_on_signal();
        let name = fresh_name(&mut admin)?;
        {
            let mut live = live();
            match admin.batch_execute(&format!("CREATE DATABASE {name}")) {
                Err(e) if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
                    drop(live);
                    drop(admin);
                    return Scratch::connect(url, disposable);
                }
                Err(e) => return Err(e.into()),
                Ok(()) => {}
            }
            live.push((config.clone(), Kept::Database(name.clone())));
        }
        let made = (|| -> Result<postgres::Client, PgError> {
            admin.batch_execute(&format!(
                "COMMENT ON DATABASE {name} IS '{MARKER} (pid {})';
                 ALTER DATABASE {name} SET search_path TO public, {HARNESS_SCHEMA}, pg_catalog;
                 ALTER DATABASE {name} SET TimeZone TO 'UTC';
                 ALTER DATABASE {name} SET outbox_check.now TO '{CLOCK_BASE}'",
                std::process::id()
            ))?;
            let mut inside = config.clone();
            inside.dbname(&name);
            let mut client = inside.connect(postgres::NoTls).map_err(|e| PgError::Connect(with_causes(&e)))?;
            client.batch_execute(&format!("CREATE SCHEMA {HARNESS_SCHEMA}"))?;
            Ok(client)
        })();
        let mut scratch = match made {
            Ok(client) => Scratch {
                client,
                schema: HARNESS_SCHEMA.to_string(),
                database: Some(name.clone()),
                admin: Some(admin),
                owned: true,
            },
            Err(e) => {
                let _ = admin.batch_execute(&Kept::Database(name.clone()).drop_sql());
                live().retain(|(_, kept)| *kept != Kept::Database(name.clone()));
                return Err(e);
            }
        };
        let mut orphans = Ok(());
        if let Some(admin) = scratch.admin.as_mut() {
            ORPHANS.call_once(|| orphans = drop_orphans(admin, Some(&name)).map(|_| ()));
        }
        orphans?;
        Ok(scratch)
    }

    /// Another connection into an existing scratch schema (a second worker, a reconnect after
    /// a lost connection). It does not drop the schema.
    pub fn attach(url: &str, disposable: bool, schema: &str) -> Result<Scratch, PgError> {
        Scratch::attach_to(url, disposable, &Place::schema(schema))
    }

    /// Another connection into an existing scratch schema or database. It does not drop it.
    pub fn attach_to(url: &str, disposable: bool, place: &Place) -> Result<Scratch, PgError> {
        let mut config = check_url(url, disposable)?;
        let name = place.database.as_deref().unwrap_or(&place.schema);
        if !is_scratch_name(name) {
            return Err(PgError::Sql(format!(
                "refusing scratch name {name}: not one of outbox-check's scratch schemas or databases"
            )));
        }
        if let Some(db) = &place.database {
            config.dbname(db);
        }
        let mut client = config.connect(postgres::NoTls).map_err(|e| PgError::Connect(with_causes(&e)))?;
        if place.database.is_none() {
            client.batch_execute(&format!("SET search_path TO {}, pg_catalog", place.schema))?;
        }
        Ok(Scratch {
            client,
            schema: place.schema.clone(),
            database: place.database.clone(),
            admin: None,
            owned: false,
        })
    }

    /// Where this connection works.
    pub fn place(&self) -> Place {
        Place { database: self.database.clone(), schema: self.schema.clone() }
    }

    /// The user's tables, qualified and quoted: in a scratch database every table outside the
    /// system's and the harness's schemas, else the scratch schema's but the harness's own
    /// (`outbox_check_…`).
    pub fn user_tables(&mut self) -> Result<Vec<String>, PgError> {
        let rows = if self.database.is_some() {
            self.client.query(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
                  WHERE schemaname NOT IN ('pg_catalog', 'information_schema', $1) ORDER BY 1",
                &[&HARNESS_SCHEMA],
            )?
        } else {
            self.client.query(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
                  WHERE schemaname = $1 AND tablename NOT LIKE 'outbox\\_check\\_%' ORDER BY 1",
                &[&self.schema],
            )?
        };
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Installs the run's clock: [`SHADOWED_CLOCK`]'s functions in the harness's schema, each
    /// reading `outbox_check.now`, ahead of `pg_catalog` in this connection's search path (a
    /// scratch database has them so in every session).
    pub fn install_clock(&mut self) -> Result<(), PgError> {
        let schema = &self.schema;
        let mut sql = format!("SET TimeZone TO 'UTC'; SET outbox_check.now TO '{CLOCK_BASE}';");
        for name in SHADOWED_CLOCK {
            let volatility = if name == "clock_timestamp" { "VOLATILE" } else { "STABLE" };
            sql.push_str(&format!(
                "CREATE OR REPLACE FUNCTION {schema}.{name}() RETURNS timestamptz LANGUAGE sql {volatility} \
                 AS $clock$ SELECT coalesce(nullif(current_setting('outbox_check.now', true), ''), '{CLOCK_BASE}')::timestamptz $clock$;"
            ));
        }
        // random() draws from the run's own stream: a sequence of the harness's, mixed by a
        // multiplicative hash (Knuth's 2654435761) into [0, 1). One run, one stream.
        sql.push_str(&format!(
            "CREATE SEQUENCE IF NOT EXISTS {schema}.outbox_check_random_draws;
             CREATE OR REPLACE FUNCTION {schema}.random() RETURNS double precision LANGUAGE sql VOLATILE \
             AS $draw$ SELECT ((nextval('{schema}.outbox_check_random_draws') * 2654435761) % 4294967296)::double precision / 4294967296 $draw$;"
        ));
        self.client.batch_execute(&sql)?;
        Ok(())
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
        match (&self.database, self.admin.as_mut()) {
            (Some(db), Some(admin)) => {
                let kept = Kept::Database(db.clone());
                let _ = admin.batch_execute(&kept.drop_sql());
                live.retain(|(_, k)| *k != kept);
            }
            _ => {
                let kept = Kept::Schema(self.schema.clone());
                let _ = self.client.batch_execute(&kept.drop_sql());
                live.retain(|(_, k)| *k != kept);
            }
        }
    }
}
