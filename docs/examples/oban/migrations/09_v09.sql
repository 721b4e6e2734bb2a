ALTER TABLE "public"."oban_jobs" ADD COLUMN IF NOT EXISTS "meta" jsonb DEFAULT '{}', ADD COLUMN IF NOT EXISTS "cancelled_at" timestamp;
ALTER TYPE "public".oban_job_state ADD VALUE IF NOT EXISTS 'cancelled';
CREATE INDEX IF NOT EXISTS "oban_jobs_state_queue_priority_scheduled_at_id_index" ON "public"."oban_jobs" ("state", "queue", "priority", "scheduled_at", "id");
COMMENT ON TABLE "public".oban_jobs IS '9';
