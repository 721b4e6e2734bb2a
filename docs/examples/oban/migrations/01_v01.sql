DO $$
BEGIN
IF NOT EXISTS (SELECT 1 FROM pg_type
               WHERE typname = 'oban_job_state'
                 AND typnamespace = 'public'::regnamespace::oid) THEN
    CREATE TYPE "public".oban_job_state AS ENUM (
      'available',
      'suspended',
      'scheduled',
      'executing',
      'retryable',
      'completed',
      'discarded',
      'cancelled'
    );
  END IF;
END$$;
CREATE TABLE IF NOT EXISTS "public"."oban_jobs" ("id" bigserial, "state" "public".oban_job_state DEFAULT 'available' NOT NULL, "queue" text DEFAULT 'default' NOT NULL, "worker" text NOT NULL, "args" jsonb NOT NULL, "errors" jsonb[] DEFAULT ARRAY[]::jsonb[] NOT NULL, "attempt" integer DEFAULT 0 NOT NULL, "max_attempts" integer DEFAULT 20 NOT NULL, "inserted_at" timestamp DEFAULT timezone('UTC', now()) NOT NULL, "scheduled_at" timestamp DEFAULT timezone('UTC', now()) NOT NULL, "attempted_at" timestamp, "completed_at" timestamp, PRIMARY KEY ("id"));
CREATE INDEX IF NOT EXISTS "oban_jobs_queue_index" ON "public"."oban_jobs" ("queue");
CREATE INDEX IF NOT EXISTS "oban_jobs_state_index" ON "public"."oban_jobs" ("state");
CREATE INDEX IF NOT EXISTS "oban_jobs_scheduled_at_index" ON "public"."oban_jobs" ("scheduled_at");
CREATE OR REPLACE FUNCTION "public".oban_jobs_notify() RETURNS trigger AS $$
DECLARE
  channel text;
  notice json;
BEGIN
  IF (TG_OP = 'INSERT') THEN
    channel = 'public.oban_insert';
    notice = json_build_object('queue', NEW.queue, 'state', NEW.state);

    -- No point triggering for a job that isn't scheduled to run now
    IF NEW.scheduled_at IS NOT NULL AND NEW.scheduled_at > now() AT TIME ZONE 'utc' THEN
      RETURN null;
    END IF;
  ELSE
    channel = 'public.oban_update';
    notice = json_build_object('queue', NEW.queue, 'new_state', NEW.state, 'old_state', OLD.state);
  END IF;

  PERFORM pg_notify(channel, notice::text);

  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS oban_notify ON "public".oban_jobs;
CREATE TRIGGER oban_notify
AFTER INSERT OR UPDATE OF state ON "public".oban_jobs
FOR EACH ROW EXECUTE PROCEDURE "public".oban_jobs_notify();
COMMENT ON TABLE "public".oban_jobs IS '1';
