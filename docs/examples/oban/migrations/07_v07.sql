CREATE INDEX IF NOT EXISTS "oban_jobs_attempted_at_id_index" ON "public"."oban_jobs" (attempted_at desc, "id") WHERE state in ('completed', 'discarded');
COMMENT ON TABLE "public".oban_jobs IS '7';
