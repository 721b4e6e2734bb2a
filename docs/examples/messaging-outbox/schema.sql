-- Seed 000's messaging_outbox as its V2 migration leaves it: the fenced lease (owner and token),
-- the retry clock in the row, six statuses, the partial index that serves the claim. Written by
-- this team for SQLite and PostgreSQL alike; where it differs from the seed:
--   * times are integers (milliseconds): `now` comes in as a parameter (docs/sql-profile.md, "Time");
--   * message_id is an integer here (text in the seed), so rows sort as the model's ids do.
CREATE TABLE messaging_outbox (
    message_id        BIGINT       NOT NULL PRIMARY KEY,
    tenant_id         BIGINT       NOT NULL,
    aggregate_id      BIGINT       NOT NULL,
    aggregate_version INTEGER      NOT NULL,
    status            VARCHAR(16)  NOT NULL
        CONSTRAINT ck_messaging_outbox_status
        CHECK (status IN ('PENDING', 'IN_FLIGHT', 'PUBLISHED', 'AMBIGUOUS', 'FAILED', 'EXHAUSTED')),
    attempts          INTEGER      NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_owner       VARCHAR(160),
    lease_token       BIGINT       NOT NULL DEFAULT 0
        CONSTRAINT ck_messaging_outbox_lease_token CHECK (lease_token >= 0),
    lease_expires_at  BIGINT,
    next_attempt_at   BIGINT,
    last_failure_code VARCHAR(64),
    created_at        BIGINT       NOT NULL,
    published_at      BIGINT
);

CREATE INDEX ix_messaging_outbox_next_attempt
    ON messaging_outbox (next_attempt_at, created_at)
    WHERE status IN ('PENDING', 'AMBIGUOUS', 'IN_FLIGHT');
