ALTER TYPE "public".oban_job_state ADD VALUE IF NOT EXISTS 'suspended' BEFORE 'scheduled';
COMMENT ON TABLE "public".oban_jobs IS '14';
