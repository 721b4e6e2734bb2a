CREATE TABLE IF NOT EXISTS "public"."oban_peers" ("name" text NOT NULL, "node" text NOT NULL, "started_at" timestamp NOT NULL, "expires_at" timestamp NOT NULL, PRIMARY KEY ("name"));
ALTER TABLE "public".oban_peers SET UNLOGGED;
COMMENT ON TABLE "public".oban_jobs IS '11';
