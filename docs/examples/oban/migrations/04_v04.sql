DROP FUNCTION IF EXISTS "public".oban_wrap_id(value bigint);
COMMENT ON TABLE "public".oban_jobs IS '4';
