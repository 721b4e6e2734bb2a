CREATE INDEX IF NOT EXISTS "oban_jobs_state_cancelled_at_index" ON "public"."oban_jobs" ("state", "cancelled_at");
CREATE INDEX IF NOT EXISTS "oban_jobs_state_discarded_at_index" ON "public"."oban_jobs" ("state", "discarded_at");
COMMENT ON TABLE "public".oban_jobs IS '13';
