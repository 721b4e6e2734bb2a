ALTER TABLE "public"."oban_jobs" ADD COLUMN IF NOT EXISTS "attempted_by" text[];
COMMENT ON TABLE "public".oban_jobs IS '3';
