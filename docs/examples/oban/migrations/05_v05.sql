DROP INDEX IF EXISTS "public"."oban_jobs_scheduled_at_index";
DROP INDEX IF EXISTS "public"."oban_jobs_queue_index";
DROP INDEX IF EXISTS "public"."oban_jobs_state_index";
CREATE INDEX IF NOT EXISTS "oban_jobs_queue_state_scheduled_at_id_index" ON "public"."oban_jobs" ("queue", "state", "scheduled_at", "id");
COMMENT ON TABLE "public".oban_jobs IS '5';
