ALTER TABLE "public"."oban_jobs" ADD COLUMN IF NOT EXISTS "discarded_at" timestamp, ADD COLUMN IF NOT EXISTS "priority" integer, ADD COLUMN IF NOT EXISTS "tags" text[];
ALTER TABLE "public"."oban_jobs" ALTER COLUMN "priority" TYPE integer, ALTER COLUMN "priority" SET DEFAULT 0, ALTER COLUMN "tags" TYPE text[], ALTER COLUMN "tags" SET DEFAULT ARRAY[]::text[];
DROP INDEX IF EXISTS "public"."oban_jobs_queue_state_scheduled_at_id_index";
CREATE INDEX IF NOT EXISTS "oban_jobs_state_queue_priority_scheduled_at_id_index" ON "public"."oban_jobs" ("state", "queue", "priority", "scheduled_at", "id");
CREATE OR REPLACE FUNCTION "public".oban_jobs_notify() RETURNS trigger AS $$
DECLARE
  channel text;
  notice json;
BEGIN
  IF NEW.state = 'available' THEN
    channel = 'public.oban_insert';
    notice = json_build_object('queue', NEW.queue);

    PERFORM pg_notify(channel, notice::text);
  END IF;

  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS oban_notify ON "public".oban_jobs;
CREATE TRIGGER oban_notify
AFTER INSERT ON "public".oban_jobs
FOR EACH ROW EXECUTE PROCEDURE "public".oban_jobs_notify();
COMMENT ON TABLE "public".oban_jobs IS '8';
