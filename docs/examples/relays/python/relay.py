#!/usr/bin/env python3
"""An outbox relay in Python, on psycopg and pika (RabbitMQ with publisher confirms), for the
queue of docs/examples/native (queue.jobs). It knows nothing of outbox-check but the contract's
environment variables (docs/relays.md): where to connect, who it is, the lease, the budget, the
backoff.

The correct relay claims through queue.claim() (owner, a fresh lock token, the attempt counted),
publishes each job with its id as the message id and waits for the broker's confirm, then writes
the outcome fenced on state, owner and token. `--flaw NAME` runs it with one of the mistakes of
the designs outbox-check ships (docs/relays.md, "The example relays"):

  lease-batch            seed 000's V1 leaseBatch: status and expiry only (no owner, no token
                         bump, no attempt), and writes keyed on the id alone
  attempts-at-ambiguous  the claim does not count the attempt; only a failed publication does
  zero-row-success       a write that matched no row is taken for success
  no-exhausted           seed 003: `attempt < max` in the claim, but a failure never ends the job
  immediate-retry        a failed publication is retried at once (run_at = now())
"""
import argparse
import os
import signal
import sys
import time

import pika
import psycopg

FLAWS = ["lease-batch", "attempts-at-ambiguous", "zero-row-success", "no-exhausted", "immediate-retry"]

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--flaw", choices=FLAWS)
flaw = parser.parse_args().flaw

env = os.environ
try:
    NAME = env["OUTBOX_CHECK_RELAY_NAME"]
    OWNER = int(env["OUTBOX_CHECK_RELAY_ID"])
    DATABASE_URL = env["OUTBOX_CHECK_DATABASE_URL"]
    BROKER = env["OUTBOX_CHECK_BROKER"]
    BROKER_URL = env["OUTBOX_CHECK_BROKER_URL"]
    QUEUE = env["OUTBOX_CHECK_QUEUE"]
except KeyError as missing:
    sys.exit(f"relay.py: {missing.args[0]} is not set (run me with outbox-check e2e --relay)")
if BROKER != "rabbitmq":
    sys.exit(f"relay.py: speaks RabbitMQ only, not {BROKER} (outbox-check e2e --broker rabbitmq)")
TENANT = int(env.get("OUTBOX_CHECK_TENANT", "0"))
LEASE_MS = int(env.get("OUTBOX_CHECK_LEASE_MS", "1000"))
MAX_ATTEMPTS = int(env.get("OUTBOX_CHECK_MAX_ATTEMPTS", "3"))
BACKOFF_BASE_MS = int(env.get("OUTBOX_CHECK_BACKOFF_BASE_MS", "200"))
BACKOFF_CAP_MS = int(env.get("OUTBOX_CHECK_BACKOFF_CAP_MS", "1000"))
BATCH = int(env.get("OUTBOX_CHECK_BATCH", "10"))
POLL_S = int(env.get("OUTBOX_CHECK_POLL_MS", "50")) / 1000

CLAIM = "SELECT id, lock_token, attempt FROM queue.claim(%s, %s, %s::interval, %s)"
# The rows queue.claim() picks, for the flawed claims below (parameters: tenant, batch).
PICK = """SELECT d.id FROM queue.jobs AS d
         WHERE d.tenant = %s AND d.state IN ('available', 'unknown', 'running')
           AND (d.locked_until IS NULL OR d.locked_until <= now())
           AND (d.run_at IS NULL OR d.run_at <= now())
           AND d.attempt < d.max_attempts
         ORDER BY coalesce(d.run_at, d.created), d.id
         LIMIT %s
         FOR UPDATE SKIP LOCKED"""
# The claim queue.claim() makes, without counting the attempt (attempts-at-ambiguous).
CLAIM_UNCOUNTED = f"""
UPDATE queue.jobs AS j
   SET state = 'running', locked_until = now() + %s::interval, locked_by = %s, lock_token = j.lock_token + 1
 WHERE j.id IN ({PICK})
RETURNING j.id, j.lock_token, j.attempt"""
# Seed 000's V1 leaseBatch: status and expiry, nothing else.
LEASE_BATCH = f"""
UPDATE queue.jobs AS j
   SET state = 'running', locked_until = now() + %s::interval
 WHERE j.id IN ({PICK})
RETURNING j.id, j.lock_token, j.attempt"""
FENCE = "WHERE id = %s AND tenant = %s AND state = 'running' AND locked_by = %s AND lock_token = %s"
BY_ID = "WHERE id = %s"
COMPLETE = "UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, state = 'completed', finished = now() "
# A failed publication: the job waits for its retry time, or ends dead with its budget spent.
FAIL = """UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = %s,
       state  = CASE WHEN attempt >= max_attempts THEN 'dead'::queue.job_state ELSE %s::queue.job_state END,
       run_at = CASE WHEN attempt >= max_attempts THEN run_at ELSE now() + %s::interval END """
FAIL_COUNTED = """UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = %s, attempt = attempt + 1,
       state  = CASE WHEN attempt + 1 >= max_attempts THEN 'dead'::queue.job_state ELSE %s::queue.job_state END,
       run_at = CASE WHEN attempt + 1 >= max_attempts THEN run_at ELSE now() + %s::interval END """
FAIL_NEVER_ENDS = """UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = %s,
       state = %s::queue.job_state, run_at = now() + %s::interval """
FAIL_AT_ONCE = """UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = %s,
       state  = CASE WHEN attempt >= max_attempts THEN 'dead'::queue.job_state ELSE %s::queue.job_state END,
       run_at = CASE WHEN attempt >= max_attempts THEN run_at ELSE now() + %s::interval * 0 END """

stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)


def log(text):
    print(f"{NAME}: {text}", flush=True)


def ms(n):
    return f"{n} milliseconds"


def backoff(attempt):
    return min(BACKOFF_BASE_MS * 2 ** max(attempt - 1, 0), BACKOFF_CAP_MS)


def database():
    while True:
        try:
            return psycopg.connect(DATABASE_URL, autocommit=True, application_name=NAME)
        except psycopg.OperationalError as e:
            log(f"database: {e}; again in 100 ms")
            time.sleep(0.1)


class Broker:
    def __init__(self):
        self.channel = None

    def publish(self, job_id):
        """True: confirmed; False: refused; None: unknown (the connection went)."""
        try:
            if self.channel is None or self.channel.is_closed:
                connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
                self.channel = connection.channel()
                self.channel.confirm_delivery()
            self.channel.basic_publish(
                exchange="",
                routing_key=QUEUE,
                body=f"job {job_id}".encode(),
                properties=pika.BasicProperties(message_id=str(job_id), delivery_mode=2),
                mandatory=True,
            )
            return True
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
            return False
        except pika.exceptions.AMQPError as e:
            log(f"broker: {e!r}")
            self.channel = None
            return None


def claim(db):
    if flaw == "lease-batch":
        return db.execute(LEASE_BATCH, (ms(LEASE_MS), TENANT, BATCH)).fetchall()
    if flaw == "attempts-at-ambiguous":
        return db.execute(CLAIM_UNCOUNTED, (ms(LEASE_MS), OWNER, TENANT, BATCH)).fetchall()
    return db.execute(CLAIM, (TENANT, OWNER, ms(LEASE_MS), BATCH)).fetchall()


def write(db, sql, values, job_id, token):
    where = (BY_ID, (job_id,)) if flaw == "lease-batch" else (FENCE, (job_id, TENANT, OWNER, token))
    done = db.execute(sql + where[0], values + where[1]).rowcount
    if done == 0 and flaw != "zero-row-success":
        log(f"{job_id}: the job is no longer mine (stale lease {token}); left to its new holder")


def failed(db, job_id, token, attempt, confirmed):
    state, code = ("available", "rejected") if confirmed is False else ("unknown", "timeout")
    if flaw == "attempts-at-ambiguous":
        sql, attempt = FAIL_COUNTED, attempt + 1
    elif flaw == "no-exhausted":
        sql = FAIL_NEVER_ENDS
    elif flaw == "immediate-retry":
        sql = FAIL_AT_ONCE
    else:
        sql = FAIL
    write(db, sql, (code, state, ms(backoff(attempt))), job_id, token)


def main():
    db, broker = database(), Broker()
    log(f"running{' with flaw ' + flaw if flaw else ''}")
    while not stopping:
        try:
            jobs = claim(db)
            if not jobs:
                time.sleep(POLL_S)
                continue
            for job_id, token, attempt in jobs:
                confirmed = broker.publish(job_id)
                if confirmed:
                    write(db, COMPLETE, (), job_id, token)
                else:
                    failed(db, job_id, token, attempt, confirmed)
        except psycopg.OperationalError as e:
            # The connection is gone: the jobs held return to the queue when their lease ends.
            log(f"database connection lost: {e}".splitlines()[0])
            db = database()


if __name__ == "__main__":
    main()
