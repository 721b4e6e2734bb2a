COMMENT ON TABLE "public".oban_jobs IS '6';
