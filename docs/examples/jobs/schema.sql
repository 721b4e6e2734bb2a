-- A job table as a queue's author might write it: their own names for everything.
CREATE TABLE jobs (
    id           INTEGER PRIMARY KEY,
    tenant       INTEGER NOT NULL,
    state        TEXT    NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0,
    locked_by    INTEGER,
    lock_token   INTEGER NOT NULL DEFAULT 0,
    locked_until INTEGER,
    run_at       INTEGER,
    error        TEXT,
    created      INTEGER NOT NULL,
    finished     INTEGER
);
CREATE INDEX jobs_due ON jobs (tenant, state, run_at);
