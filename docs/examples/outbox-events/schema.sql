-- Seed 003's outbox_events, as this team writes it for SQLite and PostgreSQL alike. Where it
-- differs from the seed, on purpose:
--   * tenant_id and event_id are integers (text and uuid in the seed), so rows sort as the
--     model's ids do; the lease token stays a uuid (text in SQLite);
--   * times are integer milliseconds, `now` a parameter (docs/sql-profile.md, "Time");
--   * the payload is text, not jsonb, so one file serves both databases.
CREATE TABLE outbox_events (
    tenant_id         BIGINT   NOT NULL,
    event_id          BIGINT   NOT NULL,
    request_id        BIGINT   NOT NULL,
    aggregate_version BIGINT   NOT NULL,
    event_type        TEXT     NOT NULL,
    payload           TEXT     NOT NULL DEFAULT '{}',
    status            TEXT     NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'leased', 'sent', 'ack_unknown', 'retry_scheduled')),
    attempts          INTEGER  NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    leased_by         TEXT,
    lease_token       UUID,
    lease_until       BIGINT,
    available_at      BIGINT   NOT NULL,
    created_at        BIGINT   NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);

CREATE INDEX ix_outbox_events_claim
    ON outbox_events (tenant_id, created_at, event_id)
    WHERE status IN ('pending', 'retry_scheduled', 'ack_unknown', 'leased');
