-- V2: the fenced lease (owner and token), the retry clock in the row, a sixth status, and the
-- partial index that serves the claim's due order. Backfill is unnecessary: the token defaults to
-- 0 and the first claim makes it 1; the constraint states the invariant the code depends on.
ALTER TABLE messaging_outbox
    ADD COLUMN lease_owner TEXT,
    ADD COLUMN lease_token BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at BIGINT;

ALTER TABLE messaging_outbox
    ADD CONSTRAINT ck_messaging_outbox_lease_token CHECK (lease_token >= 0);

ALTER TABLE messaging_outbox DROP CONSTRAINT ck_messaging_outbox_status;
ALTER TABLE messaging_outbox
    ADD CONSTRAINT ck_messaging_outbox_status
    CHECK (status IN ('PENDING', 'IN_FLIGHT', 'PUBLISHED', 'AMBIGUOUS', 'FAILED', 'EXHAUSTED'));

-- The claim orders by COALESCE(next_attempt_at, created_at), message_id (NULLS never occur in
-- that expression, so no NULLS FIRST/LAST mismatch can force a sort) over the rows it may take.
CREATE INDEX ix_messaging_outbox_due
    ON messaging_outbox (tenant_id, (COALESCE(next_attempt_at, created_at)), message_id)
    WHERE status IN ('PENDING', 'AMBIGUOUS', 'IN_FLIGHT');
