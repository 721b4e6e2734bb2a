//! Applies the schema migrations in order and records which ran.
//!
//! Migrations are compiled in from `migrations/<engine>/NNN_name.sql`. Each runs in its own
//! transaction together with its row in `outbox_check_migrations`, so a failed migration leaves
//! the schema as it was and is retried on the next run.

/// One schema change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// The SQLite migrations, in order.
pub const SQLITE: [Migration; 4] = [
    Migration { version: 1, name: "v1_outbox", sql: include_str!("../../migrations/sqlite/001_v1_outbox.sql") },
    Migration {
        version: 2,
        name: "v2_fenced_leases",
        sql: include_str!("../../migrations/sqlite/002_v2_fenced_leases.sql"),
    },
    Migration {
        version: 3,
        name: "seed_tenant_outbox_events",
        sql: include_str!("../../migrations/sqlite/003_seed_tenant_outbox_events.sql"),
    },
    Migration {
        version: 4,
        name: "seed_tenant_claimable_states",
        sql: include_str!("../../migrations/sqlite/004_seed_tenant_claimable_states.sql"),
    },
];

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("migration {version} ({name}) failed: {source}")]
    Failed { version: u32, name: &'static str, source: rusqlite::Error },
    #[error("cannot read the applied migrations: {0}")]
    Bookkeeping(rusqlite::Error),
    #[error("{0}")]
    Postgres(String),
}

/// The versions already applied, in order.
pub fn applied_sqlite(conn: &rusqlite::Connection) -> Result<Vec<u32>, MigrateError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS outbox_check_migrations (
             version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    )
    .map_err(MigrateError::Bookkeeping)?;
    let mut stmt = conn
        .prepare("SELECT version FROM outbox_check_migrations ORDER BY version")
        .map_err(MigrateError::Bookkeeping)?;
    let versions = stmt
        .query_map([], |row| row.get::<_, u32>(0))
        .and_then(|rows| rows.collect::<Result<Vec<u32>, _>>())
        .map_err(MigrateError::Bookkeeping)?;
    Ok(versions)
}

/// Applies every SQLite migration up to and including `target` that has not run yet; returns
/// the versions applied now.
pub fn migrate_sqlite(conn: &mut rusqlite::Connection, target: u32) -> Result<Vec<u32>, MigrateError> {
    let done = applied_sqlite(conn)?;
    let mut applied = Vec::new();
    for m in SQLITE.iter().filter(|m| m.version <= target && !done.contains(&m.version)) {
        let failed = |source| MigrateError::Failed { version: m.version, name: m.name, source };
        let tx = conn.transaction().map_err(failed)?;
        tx.execute_batch(m.sql).map_err(failed)?;
        tx.execute("INSERT INTO outbox_check_migrations (version, name) VALUES (?1, ?2)", (m.version, m.name))
            .map_err(failed)?;
        tx.commit().map_err(failed)?;
        applied.push(m.version);
    }
    Ok(applied)
}
