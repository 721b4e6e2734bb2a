-- outbox_events rows in retry_scheduled and ack_unknown are claimable again once available_at
-- has passed (docs/decisions.md, 33): the claim's partial index covers them.
DROP INDEX ix_outbox_events_claim;
CREATE INDEX ix_outbox_events_claim
    ON outbox_events (tenant_id, created_at, event_id)
    WHERE status IN ('pending', 'retry_scheduled', 'ack_unknown', 'leased');
