-- The jobs queue of ../jobs as a PostgreSQL team writes it: a schema of its own, enums for the
-- state and the failure code, uuid ids, timestamps read from now(), a jsonb payload, an array of
-- tags, the budget in the row, seed rows, and the claim in a PL/pgSQL function.
CREATE SCHEMA queue;

CREATE TYPE queue.job_state AS ENUM ('available', 'running', 'completed', 'unknown', 'discarded', 'dead');
CREATE TYPE queue.failure AS ENUM ('timeout', 'unavailable', 'rejected', 'budget_spent');

-- The kinds of job, seeded by the migration (as Graphile Worker's task identifiers are): each
-- case of a run starts from them.
CREATE TABLE queue.tasks (
    id         serial PRIMARY KEY,
    identifier text NOT NULL UNIQUE
);
INSERT INTO queue.tasks (identifier) VALUES ('send_email'), ('charge_card');

CREATE TABLE queue.jobs (
    id           uuid PRIMARY KEY,
    task_id      integer NOT NULL REFERENCES queue.tasks,
    tenant       integer NOT NULL,
    state        queue.job_state NOT NULL DEFAULT 'available',
    attempt      smallint NOT NULL DEFAULT 0,
    max_attempts smallint NOT NULL DEFAULT 25,
    locked_by    integer,
    lock_token   bigint NOT NULL DEFAULT 0,
    locked_until timestamptz,
    run_at       timestamptz,
    error        queue.failure,
    payload      jsonb NOT NULL DEFAULT '{}',
    tags         text[] NOT NULL DEFAULT '{}',
    created      timestamptz NOT NULL DEFAULT now(),
    finished     timestamptz
);
CREATE INDEX jobs_due ON queue.jobs (tenant, state, run_at);

-- Takes up to p_batch due jobs of a tenant, oldest first, skipping rows another claim holds.
CREATE FUNCTION queue.claim(p_tenant integer, p_owner integer, p_lease interval, p_batch integer)
RETURNS SETOF queue.jobs LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE queue.jobs AS j
       SET state = 'running', locked_until = now() + p_lease, locked_by = p_owner,
           lock_token = j.lock_token + 1, attempt = j.attempt + 1
     WHERE j.id IN (SELECT d.id FROM queue.jobs AS d
                     WHERE d.tenant = p_tenant AND d.state IN ('available', 'unknown', 'running')
                       AND (d.locked_until IS NULL OR d.locked_until <= now())
                       AND (d.run_at IS NULL OR d.run_at <= now())
                       AND d.attempt < d.max_attempts
                     ORDER BY coalesce(d.run_at, d.created), d.id
                     LIMIT p_batch
                     FOR UPDATE SKIP LOCKED)
    RETURNING j.*;
END
$$;
