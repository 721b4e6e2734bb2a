-- The relay's queue, created as pgmq's Rust client creates one (pgmq-rs, `SELECT * from
-- pgmq.create(queue_name=>$1::text)`).
SELECT * from pgmq.create(queue_name=>'outbox'::text);
