-- V2: the fenced lease (owner and token), the retry clock in the row, a sixth status, and the
-- partial index that serves the claim's due order. SQLite cannot change a CHECK constraint in
-- place, so the table is rebuilt and every row copied; the token starts at 0 (the first claim
-- makes it 1), and the constraint states the invariant the code depends on.
CREATE TABLE messaging_outbox_v2 (
    message_id        TEXT    NOT NULL PRIMARY KEY,
    tenant_id         TEXT    NOT NULL,
    aggregate_id      TEXT    NOT NULL,
    aggregate_version INTEGER NOT NULL,
    status            TEXT    NOT NULL
        CONSTRAINT ck_messaging_outbox_status
        CHECK (status IN ('PENDING', 'IN_FLIGHT', 'PUBLISHED', 'AMBIGUOUS', 'FAILED', 'EXHAUSTED')),
    attempts          INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_owner       TEXT,
    lease_token       INTEGER NOT NULL DEFAULT 0
        CONSTRAINT ck_messaging_outbox_lease_token CHECK (lease_token >= 0),
    lease_expires_at  INTEGER,
    next_attempt_at   INTEGER,
    last_failure_code TEXT,
    created_at        INTEGER NOT NULL,
    published_at      INTEGER
);

INSERT INTO messaging_outbox_v2
    (message_id, tenant_id, aggregate_id, aggregate_version, status, attempts,
     lease_expires_at, last_failure_code, created_at, published_at)
SELECT message_id, tenant_id, aggregate_id, aggregate_version, status, attempts,
       lease_expires_at, last_failure_code, created_at, published_at
FROM messaging_outbox;

DROP TABLE messaging_outbox;
ALTER TABLE messaging_outbox_v2 RENAME TO messaging_outbox;

-- The claim orders by COALESCE(next_attempt_at, created_at), message_id over the rows it may
-- take; the partial index matches that order and that predicate, so a claim never sorts the table.
CREATE INDEX ix_messaging_outbox_due
    ON messaging_outbox (tenant_id, COALESCE(next_attempt_at, created_at), message_id)
    WHERE status IN ('PENDING', 'AMBIGUOUS', 'IN_FLIGHT');
