-- The design of seed 003: outbox_events, tenant-scoped, claimed with FOR UPDATE SKIP LOCKED,
-- with a random lease token compared for equality.
CREATE TABLE outbox_events (
    tenant_id         TEXT    NOT NULL,
    event_id          TEXT    NOT NULL,
    request_id        TEXT    NOT NULL,
    aggregate_version BIGINT  NOT NULL,
    event_type        TEXT    NOT NULL,
    payload           JSONB   NOT NULL DEFAULT '{}'::jsonb,
    status            TEXT    NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'leased', 'sent', 'ack_unknown', 'retry_scheduled')),
    attempts          INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    leased_by         TEXT,
    lease_token       TEXT,
    lease_until       BIGINT,
    available_at      BIGINT  NOT NULL,
    created_at        BIGINT  NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);

CREATE INDEX ix_outbox_events_claim
    ON outbox_events (tenant_id, created_at, event_id)
    WHERE status IN ('pending', 'leased');
