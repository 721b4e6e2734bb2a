ALTER TABLE "public"."oban_jobs" DROP CONSTRAINT "priority_range";
ALTER TABLE "public"."oban_jobs" ADD CONSTRAINT "non_negative_priority" CHECK (priority >= 0) NOT VALID;
DROP TRIGGER IF EXISTS oban_notify ON "public".oban_jobs;
DROP FUNCTION IF EXISTS "public".oban_jobs_notify();
COMMENT ON TABLE "public".oban_jobs IS '12';
