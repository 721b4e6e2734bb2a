#!/usr/bin/env node
// An outbox relay in Node.js, on pg and nats (JetStream, acknowledged publications), for the
// queue of docs/examples/native (queue.jobs). It knows nothing of outbox-check but the contract's
// environment variables (docs/relays.md).
//
// The correct relay claims through queue.claim() (owner, a fresh lock token, the attempt
// counted), publishes each job with its id as Nats-Msg-Id and waits for JetStream's ack, then
// writes the outcome fenced on state, owner and token. `--flaw NAME` runs one of the mistakes of
// the designs outbox-check ships (see relay.py's list; the same names).
'use strict';
const { Client } = require('pg');
const { connect } = require('nats');

const FLAWS = ['lease-batch', 'attempts-at-ambiguous', 'zero-row-success', 'no-exhausted', 'immediate-retry'];
const args = process.argv.slice(2);
const flaw = args[0] === '--flaw' ? args[1] : undefined;
if (args.length && (!flaw || !FLAWS.includes(flaw))) {
  console.error(`relay.js: usage: relay.js [--flaw ${FLAWS.join('|')}]`);
  process.exit(2);
}
const env = process.env;
for (const name of ['OUTBOX_CHECK_RELAY_NAME', 'OUTBOX_CHECK_RELAY_ID', 'OUTBOX_CHECK_DATABASE_URL',
  'OUTBOX_CHECK_BROKER', 'OUTBOX_CHECK_BROKER_URL', 'OUTBOX_CHECK_SUBJECT']) {
  if (!env[name]) {
    console.error(`relay.js: ${name} is not set (run me with outbox-check e2e --relay)`);
    process.exit(2);
  }
}
if (env.OUTBOX_CHECK_BROKER !== 'nats') {
  console.error(`relay.js: speaks NATS only, not ${env.OUTBOX_CHECK_BROKER} (outbox-check e2e --broker nats)`);
  process.exit(2);
}
const NAME = env.OUTBOX_CHECK_RELAY_NAME;
const OWNER = Number(env.OUTBOX_CHECK_RELAY_ID);
const TENANT = Number(env.OUTBOX_CHECK_TENANT || 0);
const LEASE_MS = Number(env.OUTBOX_CHECK_LEASE_MS || 1000);
const BASE_MS = Number(env.OUTBOX_CHECK_BACKOFF_BASE_MS || 200);
const CAP_MS = Number(env.OUTBOX_CHECK_BACKOFF_CAP_MS || 1000);
const BATCH = Number(env.OUTBOX_CHECK_BATCH || 10);
const POLL_MS = Number(env.OUTBOX_CHECK_POLL_MS || 50);
const SUBJECT = env.OUTBOX_CHECK_SUBJECT;

const PICK = `SELECT d.id FROM queue.jobs AS d
               WHERE d.tenant = $TENANT AND d.state IN ('available', 'unknown', 'running')
                 AND (d.locked_until IS NULL OR d.locked_until <= now())
                 AND (d.run_at IS NULL OR d.run_at <= now())
                 AND d.attempt < d.max_attempts
               ORDER BY coalesce(d.run_at, d.created), d.id
               LIMIT $BATCH
               FOR UPDATE SKIP LOCKED`;
const CLAIM = 'SELECT id, lock_token, attempt FROM queue.claim($1, $2, $3::interval, $4)';
const CLAIM_UNCOUNTED = `UPDATE queue.jobs AS j
   SET state = 'running', locked_until = now() + $1::interval, locked_by = $2, lock_token = j.lock_token + 1
 WHERE j.id IN (${PICK.replace('$TENANT', '$3').replace('$BATCH', '$4')})
RETURNING j.id, j.lock_token, j.attempt`;
const LEASE_BATCH = `UPDATE queue.jobs AS j SET state = 'running', locked_until = now() + $1::interval
 WHERE j.id IN (${PICK.replace('$TENANT', '$2').replace('$BATCH', '$3')})
RETURNING j.id, j.lock_token, j.attempt`;
const COMPLETE = "UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, state = 'completed', finished = now()";
const FAIL = `UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = $1,
       state  = CASE WHEN attempt >= max_attempts THEN 'dead'::queue.job_state ELSE $2::queue.job_state END,
       run_at = CASE WHEN attempt >= max_attempts THEN run_at ELSE now() + $3::interval END`;
const FAIL_COUNTED = `UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = $1, attempt = attempt + 1,
       state  = CASE WHEN attempt + 1 >= max_attempts THEN 'dead'::queue.job_state ELSE $2::queue.job_state END,
       run_at = CASE WHEN attempt + 1 >= max_attempts THEN run_at ELSE now() + $3::interval END`;
const FAIL_NEVER_ENDS = `UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = $1,
       state = $2::queue.job_state, run_at = now() + $3::interval`;
const FAIL_AT_ONCE = `UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = $1,
       state  = CASE WHEN attempt >= max_attempts THEN 'dead'::queue.job_state ELSE $2::queue.job_state END,
       run_at = CASE WHEN attempt >= max_attempts THEN run_at ELSE now() + $3::interval * 0 END`;

const log = (text) => console.log(`${NAME}: ${text}`);
const ms = (n) => `${n} milliseconds`;
const sleep = (n) => new Promise((resolve) => setTimeout(resolve, n));
const backoff = (attempt) => Math.min(BASE_MS * 2 ** Math.max(attempt - 1, 0), CAP_MS);
let stopping = false;
process.on('SIGTERM', () => { stopping = true; });

async function database() {
  for (;;) {
    const db = new Client({ connectionString: env.OUTBOX_CHECK_DATABASE_URL, application_name: NAME });
    db.on('error', () => {});
    try {
      await db.connect();
      return db;
    } catch (e) {
      log(`database: ${e.message}; again in 100 ms`);
      await sleep(100);
    }
  }
}

async function claim(db) {
  if (flaw === 'lease-batch') return (await db.query(LEASE_BATCH, [ms(LEASE_MS), TENANT, BATCH])).rows;
  if (flaw === 'attempts-at-ambiguous') {
    return (await db.query(CLAIM_UNCOUNTED, [ms(LEASE_MS), OWNER, TENANT, BATCH])).rows;
  }
  return (await db.query(CLAIM, [TENANT, OWNER, ms(LEASE_MS), BATCH])).rows;
}

async function write(db, sql, values, job) {
  const byId = flaw === 'lease-batch';
  const n = values.length;
  const where = byId
    ? ` WHERE id = $${n + 1}`
    : ` WHERE id = $${n + 1} AND tenant = $${n + 2} AND state = 'running' AND locked_by = $${n + 3} AND lock_token = $${n + 4}`;
  const params = byId ? [...values, job.id] : [...values, job.id, TENANT, OWNER, job.lock_token];
  const result = await db.query(sql + where, params);
  if (result.rowCount === 0 && flaw !== 'zero-row-success') {
    log(`${job.id}: no longer mine (stale lease ${job.lock_token}); left to its new holder`);
  }
}

async function failed(db, job, outcome) {
  const [state, code] = outcome === 'refused' ? ['available', 'rejected'] : ['unknown', 'timeout'];
  let sql = FAIL;
  let attempt = job.attempt;
  if (flaw === 'attempts-at-ambiguous') { sql = FAIL_COUNTED; attempt += 1; }
  if (flaw === 'no-exhausted') sql = FAIL_NEVER_ENDS;
  if (flaw === 'immediate-retry') sql = FAIL_AT_ONCE;
  await write(db, sql, [code, state, ms(backoff(attempt))], job);
}

async function broker() {
  for (;;) {
    try {
      return await connect({ servers: env.OUTBOX_CHECK_BROKER_URL, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    } catch (e) {
      log(`broker: ${e.message}; again in 100 ms`);
      await sleep(100);
    }
  }
}

async function main() {
  const nc = await broker();
  const js = nc.jetstream({ timeout: Math.max(Math.floor(LEASE_MS / 2), 100) });
  let db = await database();
  log(`running${flaw ? ` with flaw ${flaw}` : ''}`);
  while (!stopping) {
    try {
      const jobs = await claim(db);
      if (jobs.length === 0) { await sleep(POLL_MS); continue; }
      for (const job of jobs) {
        let outcome;
        try {
          // msgID is sent as the Nats-Msg-Id header: JetStream deduplicates on it.
          await js.publish(SUBJECT, new TextEncoder().encode(`job ${job.id}`), { msgID: String(job.id) });
          outcome = 'acked';
        } catch (e) {
          outcome = 'unknown';
        }
        if (outcome === 'acked') await write(db, COMPLETE, [], job);
        else await failed(db, job, outcome);
      }
    } catch (e) {
      // The connection is gone: the jobs held return to the queue when their lease ends.
      log(`database connection lost: ${e.message}`);
      db.end().catch(() => {});
      db = await database();
    }
  }
  await nc.close();
  await db.end().catch(() => {});
}

main().catch((e) => { console.error(`relay.js: ${e.message}`); process.exit(1); });
