-- V1: the outbox as the legacy leaseBatch path knew it: five statuses, a lease expiry, no owner,
-- no token, no retry clock. Times are integers (milliseconds on the caller's clock): `now` is
-- always a bound parameter, never the database's clock, so a run is as deterministic as the model.
CREATE TABLE business_aggregates (
    tenant_id    TEXT    NOT NULL,
    aggregate_id TEXT    NOT NULL,
    version      INTEGER NOT NULL CHECK (version >= 0),
    PRIMARY KEY (tenant_id, aggregate_id)
);

CREATE TABLE messaging_outbox (
    message_id        TEXT    NOT NULL PRIMARY KEY,
    tenant_id         TEXT    NOT NULL,
    aggregate_id      TEXT    NOT NULL,
    aggregate_version INTEGER NOT NULL,
    status            TEXT    NOT NULL
        CONSTRAINT ck_messaging_outbox_status
        CHECK (status IN ('PENDING', 'IN_FLIGHT', 'PUBLISHED', 'AMBIGUOUS', 'FAILED')),
    attempts          INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_expires_at  INTEGER,
    last_failure_code TEXT,
    created_at        INTEGER NOT NULL,
    published_at      INTEGER
);
