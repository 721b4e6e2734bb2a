-- sqlx's own migrations table, as sqlx creates it before running underway's migrations
-- (launchbadge/sqlx 9d6bf66, sqlx-postgres/src/migrate.rs, ensure_migrations_table, with
-- sqlx's default table name): underway's first migration copies its shape into its schema.
CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
    success BOOLEAN NOT NULL,
    checksum BYTEA NOT NULL,
    execution_time BIGINT NOT NULL
);
