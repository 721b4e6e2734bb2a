-- V1: five statuses, a lease expiry, no owner, no token, no retry clock. Times are BIGINT
-- milliseconds bound as parameters: `now` is never the server's clock.
CREATE TABLE business_aggregates (
    tenant_id    TEXT   NOT NULL,
    aggregate_id TEXT   NOT NULL,
    version      BIGINT NOT NULL CHECK (version >= 0),
    PRIMARY KEY (tenant_id, aggregate_id)
);

CREATE TABLE messaging_outbox (
    message_id        TEXT   NOT NULL PRIMARY KEY,
    tenant_id         TEXT   NOT NULL,
    aggregate_id      TEXT   NOT NULL,
    aggregate_version BIGINT NOT NULL,
    status            TEXT   NOT NULL
        CONSTRAINT ck_messaging_outbox_status
        CHECK (status IN ('PENDING', 'IN_FLIGHT', 'PUBLISHED', 'AMBIGUOUS', 'FAILED')),
    attempts          INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_expires_at  BIGINT,
    last_failure_code TEXT,
    created_at        BIGINT NOT NULL,
    published_at      BIGINT
);
