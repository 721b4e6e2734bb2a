DROP INDEX IF EXISTS "public"."oban_jobs_scheduled_at_index";
CREATE INDEX "oban_jobs_scheduled_at_index" ON "public"."oban_jobs" ("scheduled_at") WHERE state in ('available'::"public".oban_job_state, 'scheduled'::"public".oban_job_state);
ALTER TABLE "public"."oban_jobs" ADD CONSTRAINT "worker_length" CHECK (char_length(worker) > 0 AND char_length(worker) < 128);
ALTER TABLE "public"."oban_jobs" ADD CONSTRAINT "queue_length" CHECK (char_length(queue) > 0 AND char_length(queue) < 128);
CREATE OR REPLACE FUNCTION "public".oban_wrap_id(value bigint) RETURNS int AS $$
BEGIN
  RETURN (CASE WHEN value > 2147483647 THEN mod(value, 2147483647) ELSE value END)::int;
END;
$$ LANGUAGE plpgsql IMMUTABLE;
COMMENT ON TABLE "public".oban_jobs IS '2';
