//! PostgreSQL under real concurrency: SKIP LOCKED, lease takeover, and four relays whose
//! backends are killed between publish and terminal write. Needs `OUTBOX_CHECK_PG_URL` (prints
//! NOT RUN without it; fails without it under `OUTBOX_CHECK_REQUIRE_PG=1`).

use outbox_check::core::policy::TokenKind;
use outbox_check::core::{
    AggregateId, ClaimRequest, Duration, EnqueueRequest, Instant, Lease, LeaseToken, MessageId, Policy, RelayId,
    Status, TenantId, WriteKind, WriteRequest, WriteResult,
};
use outbox_check::design::Variant;
use outbox_check::relay::{drive_now, Clocks, Effects, PublishOutcome, RelayConfig, Reply};
use outbox_check::store::bind::{message_name, owner_name, tenant_name};
use outbox_check::store::postgres::Scratch;
use outbox_check::store::sql::{self, Dialect};
use outbox_check::store::{PgStore, Store};
use outbox_check::trace::{to_jsonl, Event, Header, PublishAnswer, WriteReport};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

mod common;

fn url() -> Option<String> {
    common::pg_url("PostgreSQL concurrency tests")
}

fn enqueue_all(store: &mut PgStore, messages: u32) {
    for n in 0..messages {
        let req = EnqueueRequest {
            tenant_id: TenantId(0),
            aggregate_id: AggregateId(n),
            expected_version: 0,
            message_id: MessageId(n),
            now: Instant(n as u64),
        };
        store.enqueue(&req).expect("enqueue");
    }
}

fn claim_request(owner: u16, now: u64, batch: u32, lease: u64) -> ClaimRequest {
    ClaimRequest {
        tenant_id: TenantId(0),
        owner: RelayId(owner),
        batch,
        lease: Duration(lease),
        now: Instant(now),
        max_attempts: 3,
        retry_due: true,
    }
}

/// Seed 003's test: while one transaction holds a row lock, a second worker's claim returns a
/// different row, without blocking and without claiming the locked one — on each table.
fn skip_locked(variant: Variant) {
    let Some(url) = url() else { return };
    let policy = variant.policy();
    let (table, id, select) = match sql::Table::of(&policy) {
        sql::Table::MessagingOutbox => {
            ("messaging_outbox", "message_id", sql::claim_select(Dialect::Postgres, &policy))
        }
        sql::Table::OutboxEvents => ("outbox_events", "event_id", sql::events_claim_select(Dialect::Postgres)),
    };
    let mut first = PgStore::connect(&url, false, policy).expect("the server answers");
    enqueue_all(&mut first, 2);
    let schema = first.scratch().schema().to_string();
    let mut holder = Scratch::attach(&url, false, &schema).unwrap();
    let mut tx = holder.client().transaction().unwrap();
    tx.query(&format!("SELECT 1 FROM {table} WHERE {id} = $1 FOR UPDATE"), &[&message_name(MessageId(0))]).unwrap();
    // A second worker, on its own connection, must not wait for the lock (a timeout proves it).
    let mut second = Scratch::attach(&url, false, &schema).unwrap();
    second.client().batch_execute("SET lock_timeout = '2s'").unwrap();
    let started = std::time::Instant::now();
    let rows = second.client().query(&select, &[&tenant_name(TenantId(0)), &100i64, &3i32, &1i64]).unwrap();
    let elapsed = started.elapsed();
    let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, [message_name(MessageId(1))], "{variant}: the claim took the locked row or none");
    assert!(elapsed < std::time::Duration::from_secs(1), "{variant}: the claim waited {elapsed:?} for the lock");
    tx.commit().unwrap();
    // Once the lock is gone, the row is claimable again, in due order.
    let leases = first.claim(&claim_request(1, 100, 2, 1000)).unwrap();
    assert_eq!(leases.iter().map(|l| l.message_id).collect::<Vec<_>>(), [MessageId(0), MessageId(1)], "{variant}");
}

#[test]
fn a_claim_skips_a_row_another_transaction_holds_without_waiting() {
    skip_locked(Variant::Reference);
}

#[test]
fn seed_tenant_claim_skips_a_row_another_transaction_holds_without_waiting() {
    skip_locked(Variant::SeedTenant);
}

#[test]
fn an_expired_lease_is_taken_over_and_the_old_owners_write_is_stale() {
    let Some(url) = url() else { return };
    let mut store = PgStore::connect(&url, false, Variant::Reference.policy()).expect("the server answers");
    enqueue_all(&mut store, 1);
    let old = store.claim(&claim_request(0, 1_000, 1, 100)).unwrap();
    assert_eq!(old.len(), 1);
    assert!(store.claim(&claim_request(1, 1_050, 1, 100)).unwrap().is_empty(), "a live lease was taken");
    let new = store.claim(&claim_request(1, 1_200, 1, 100)).unwrap();
    assert_eq!(new.len(), 1, "the expired lease was not taken over");
    assert_eq!(new[0].token, LeaseToken(old[0].token.0 + 1));
    let write = |lease: Lease| WriteRequest { lease, kind: WriteKind::Published, now: Instant(1_250), max_attempts: 3 };
    assert!(matches!(store.write(&write(old[0])).unwrap(), WriteResult::Stale { .. }), "the old owner's write applied");
    assert_eq!(store.write(&write(new[0])).unwrap(), WriteResult::Applied { status: Status::Published });
    let row = &store.rows().unwrap()[0];
    assert_eq!((row.status, row.lease_token, row.attempts), (Status::Published, new[0].token, 2));
}

/// What one statement did, stamped inside its transaction by a sequence: for statements on the
/// same row, the row lock orders them, so the stamps order them as they committed.
#[derive(Clone, Debug)]
enum Stamped {
    Claim { stamp: i64, message: u32, token: u64 },
    Write { stamp: i64, message: u32, token: u64, applied: bool },
}

struct Relay<'a> {
    url: String,
    schema: String,
    db: Scratch,
    pid: i32,
    policy: Policy,
    /// The history in the oracle's trace format, keyed by commit order.
    trace: &'a Mutex<Vec<(i64, Event)>>,
}

fn write_event(req: &WriteRequest, result: WriteReport) -> Event {
    Event::write_of(
        owner_name(req.lease.owner),
        tenant_name(req.lease.tenant_id),
        message_name(req.lease.message_id),
        req,
        result,
    )
}

/// One relay thread's effects, performed by the library's one relay driver: its statements on
/// `relay`'s connection, a broker that drops, refuses and loses acknowledgements by `rng`, and a
/// backend terminated between a publication and its write.
struct Driven<'a, 'n> {
    relay: Relay<'a>,
    log: &'a Mutex<Vec<Stamped>>,
    trace: &'a Mutex<Vec<(i64, Event)>>,
    /// Per message: the copies the broker stored, and the publications asked of it.
    stored: &'a Mutex<BTreeMap<u32, u32>>,
    asked: &'a Mutex<BTreeMap<u32, u32>>,
    kills: &'a AtomicU64,
    killer: Scratch,
    rng: rand_chacha::ChaCha8Rng,
    now: &'n dyn Fn() -> u64,
    published_at: i64,
}

impl Effects for Driven<'_, '_> {
    type Error = std::convert::Infallible;

    fn clocks(&mut self) -> Clocks {
        Clocks::same(Instant((self.now)()))
    }

    async fn claim(&mut self, request: ClaimRequest) -> Result<Reply, Self::Error> {
        Ok(match self.relay.claim(&request, self.log) {
            Ok(leases) => Reply::Claimed(leases),
            Err(_) => {
                self.relay.reconnect();
                Reply::ConnectionLost
            }
        })
    }

    async fn publish(
        &mut self,
        lease: Lease,
        key: outbox_check::core::IdempotencyKey,
    ) -> Result<PublishOutcome, Self::Error> {
        *self.asked.lock().unwrap().entry(lease.message_id.0).or_default() += 1;
        let roll: f64 = self.rng.gen();
        let outcome = if roll < 0.10 {
            PublishOutcome::RetryableFailure
        } else if roll < 0.15 {
            PublishOutcome::Timeout // dropped before storing
        } else {
            *self.stored.lock().unwrap().entry(lease.message_id.0).or_default() += 1;
            if roll < 0.20 {
                PublishOutcome::Timeout
            } else {
                PublishOutcome::Ack
            } // lost ack
        };
        self.published_at = self.relay.stamp();
        self.trace.lock().unwrap().push((
            2 * self.published_at,
            Event::Publish {
                relay: owner_name(lease.owner),
                message: message_name(lease.message_id),
                key: match key {
                    outbox_check::core::IdempotencyKey::Message { message_id } => message_name(message_id),
                    outbox_check::core::IdempotencyKey::Other { value } => format!("{value:#x}"),
                },
                answer: PublishAnswer::from(outcome),
                stored: Some(roll >= 0.15),
                token: Some(lease.token.0.to_string()),
            },
        ));
        // Between publish and terminal write, the backend may die.
        if self.rng.gen_bool(0.03) {
            self.killer.client().query("SELECT pg_terminate_backend($1)", &[&self.relay.pid]).unwrap();
            self.kills.fetch_add(1, Ordering::Relaxed);
        }
        Ok(outcome)
    }

    async fn write(&mut self, mut request: WriteRequest) -> Result<Reply, Self::Error> {
        request.now = Instant((self.now)());
        Ok(match self.relay.write(&request, self.log) {
            Ok(result) => Reply::Written(result),
            Err(_) => {
                // The connection died: the relay cannot know whether the write committed, and
                // logs it so, after its publication.
                self.trace
                    .lock()
                    .unwrap()
                    .push((2 * self.published_at + 1, write_event(&request, WriteReport::Unknown)));
                self.relay.reconnect();
                Reply::ConnectionLost
            }
        })
    }
}

impl<'a> Relay<'a> {
    fn connect(url: &str, schema: &str, policy: Policy, trace: &'a Mutex<Vec<(i64, Event)>>) -> Relay<'a> {
        let mut db = Scratch::attach(url, false, schema).expect("attach");
        let pid: i32 = db.client().query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        Relay { url: url.into(), schema: schema.into(), db, pid, policy, trace }
    }

    fn reconnect(&mut self) {
        *self = Relay::connect(&self.url, &self.schema, self.policy, self.trace);
    }

    fn stamp(&mut self) -> i64 {
        self.db.client().query_one("SELECT nextval('outbox_check_order')", &[]).unwrap().get(0)
    }

    fn claim(&mut self, req: &ClaimRequest, log: &Mutex<Vec<Stamped>>) -> Result<Vec<Lease>, postgres::Error> {
        let select = sql::claim_select(Dialect::Postgres, &self.policy);
        let update = sql::claim_update(Dialect::Postgres, &self.policy);
        let mut tx = self.db.client().transaction()?;
        let ids: Vec<String> = tx
            .query(
                &select,
                &[&tenant_name(req.tenant_id), &(req.now.0 as i64), &(req.max_attempts as i32), &i64::from(req.batch)],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut leases = Vec::new();
        for id in ids {
            let row = tx.query_one(
                &update,
                &[&id, &(req.now.plus(req.lease).0 as i64), &owner_name(req.owner), &0i64, &(req.now.0 as i64)],
            )?;
            let message: u32 = id[1..].parse().unwrap();
            leases.push(Lease {
                message_id: MessageId(message),
                tenant_id: req.tenant_id,
                owner: req.owner,
                token: LeaseToken(row.get::<_, i64>(1) as u64),
                attempts: row.get::<_, i32>(2) as u32,
                claim_seq: 0,
            });
        }
        let stamp: i64 = tx.query_one("SELECT nextval('outbox_check_order')", &[])?.get(0);
        tx.commit()?;
        self.trace.lock().unwrap().push((
            2 * stamp,
            Event::claim_of(owner_name(req.owner), tenant_name(req.tenant_id), req, &leases, message_name),
        ));
        let mut log = log.lock().unwrap();
        for l in &leases {
            log.push(Stamped::Claim { stamp, message: l.message_id.0, token: l.token.0 });
        }
        Ok(leases)
    }

    fn write(&mut self, req: &WriteRequest, log: &Mutex<Vec<Stamped>>) -> Result<WriteResult, postgres::Error> {
        let statement = sql::write(Dialect::Postgres, &self.policy, req.kind);
        let code = req.kind.code().map(|c| c.as_str().to_string());
        let mut tx = self.db.client().transaction()?;
        let status: Option<String> = tx
            .query_opt(
                &statement,
                &[
                    &message_name(req.lease.message_id),
                    &tenant_name(req.lease.tenant_id),
                    &owner_name(req.lease.owner),
                    &(req.lease.token.0 as i64),
                    &(req.now.0 as i64),
                    &code,
                    &(req.max_attempts as i32),
                    &(self.policy.backoff.base.0 as i64),
                    &(self.policy.backoff.cap.0 as i64),
                    &(self.policy.attempts_after_failure(req.lease.attempts) as i32),
                ],
            )?
            .map(|r| r.get(0));
        let stamp: i64 = tx.query_one("SELECT nextval('outbox_check_order')", &[])?.get(0);
        tx.commit()?;
        self.trace.lock().unwrap().push((
            2 * stamp,
            write_event(req, if status.is_some() { WriteReport::Applied } else { WriteReport::Stale }),
        ));
        log.lock().unwrap().push(Stamped::Write {
            stamp,
            message: req.lease.message_id.0,
            token: req.lease.token.0,
            applied: status.is_some(),
        });
        Ok(match status {
            Some(s) => WriteResult::Applied { status: Status::parse(&s).unwrap() },
            None => WriteResult::Stale { reason: outbox_check::core::StaleReason::NotInFlight },
        })
    }
}

#[test]
fn four_relays_with_a_flaky_broker_and_killed_backends_lose_nothing_and_never_write_stale() {
    let Some(url) = url() else { return };
    const MESSAGES: u32 = 2000;
    const RELAYS: u16 = 4;
    let mut policy = Variant::Reference.policy();
    assert_eq!(policy.token_kind, TokenKind::Counter);
    policy.backoff.base = Duration(20);
    policy.backoff.cap = Duration(200);
    let mut setup = PgStore::connect(&url, false, policy).expect("the server answers");
    setup.scratch().client().batch_execute("CREATE SEQUENCE outbox_check_order").unwrap();
    enqueue_all(&mut setup, MESSAGES);
    let schema = setup.scratch().schema().to_string();

    let started = std::time::Instant::now();
    let now = move || started.elapsed().as_millis() as u64 + 10_000;
    let log = Mutex::new(Vec::new());
    let trace: Mutex<Vec<(i64, Event)>> = Mutex::new(
        (0..MESSAGES)
            .map(|n| {
                (
                    i64::from(n) - i64::from(MESSAGES),
                    Event::Enqueue {
                        tenant: tenant_name(TenantId(0)),
                        aggregate: format!("a{:08}", n),
                        expected_version: 0,
                        message: message_name(MessageId(n)),
                        now: u64::from(n),
                        result: "applied".into(),
                    },
                )
            })
            .collect(),
    );
    // The broker: what it stored, and every publication asked of it, per message.
    let stored = Mutex::new(BTreeMap::<u32, u32>::new());
    let asked = Mutex::new(BTreeMap::<u32, u32>::new());
    let kills = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let deadline = std::time::Duration::from_secs(120);
    std::thread::scope(|scope| {
        for r in 0..RELAYS {
            let (url, schema, log, stored, asked, kills, done, trace) =
                (&url, &schema, &log, &stored, &asked, &kills, &done, &trace);
            scope.spawn(move || {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(u64::from(r));
                let mut relay = Relay::connect(url, schema, policy, trace);
                let mut published_at = 0i64;
                let mut killer = Scratch::attach(url, false, schema).unwrap();
                let config = RelayConfig { owner: RelayId(r), tenant_id: TenantId(0), batch: 10, lease: Duration(1_000), max_attempts: 3, policy };
                while !done.load(Ordering::Relaxed) {
                    assert!(started.elapsed() < deadline, "the relays did not finish in {deadline:?}");
                    if r == 0 {
                        let reap = sql::reap(Dialect::Postgres);
                        let at = now();
                        let mut tx = relay.db.client().transaction().unwrap();
                        let reaped: Vec<String> = tx.query(&reap, &[&(at as i64), &3i32]).unwrap().iter().map(|r| r.get(0)).collect();
                        let stamp: i64 = tx.query_one("SELECT nextval('outbox_check_order')", &[]).unwrap().get(0);
                        tx.commit().unwrap();
                        if !reaped.is_empty() {
                            trace.lock().unwrap().push((2 * stamp, Event::Reap { now: at, messages: reaped }));
                        }
                    }
                    let mut effects = Driven {
                        relay,
                        log,
                        trace,
                        stored,
                        asked,
                        kills,
                        killer,
                        rng,
                        now: &now,
                        published_at,
                    };
                    let claimed = drive_now(&config, &mut None, &mut effects).unwrap();
                    Driven { relay, killer, rng, published_at, .. } = effects;
                    if claimed == 0 {
                        let open: i64 = relay
                            .db
                            .client()
                            .query_one("SELECT count(*) FROM messaging_outbox WHERE status NOT IN ('PUBLISHED', 'FAILED', 'EXHAUSTED')", &[])
                            .map(|row| row.get(0))
                            .unwrap_or(1);
                        if open == 0 {
                            done.store(true, Ordering::Relaxed);
                        }
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                }
            });
        }
    });
    let rows = setup.rows().unwrap();
    assert_eq!(rows.len(), MESSAGES as usize, "a message was lost");
    let stored = stored.into_inner().unwrap();
    let asked = asked.into_inner().unwrap();
    for row in &rows {
        assert!(row.status.is_terminal(), "{row:?} is not terminal");
        if row.status == Status::Published {
            assert!(stored.contains_key(&row.message_id.0), "{} PUBLISHED but never stored", row.message_id);
        }
        assert!(asked.get(&row.message_id.0).copied().unwrap_or(0) <= 3, "{} published over budget", row.message_id);
    }
    assert!(kills.load(Ordering::Relaxed) > 0, "no backend was killed");
    // No stale write applied: per message, in commit order, every applied write presents the
    // token of the latest claim, and one write at most is applied per claim.
    let mut by_message: BTreeMap<u32, Vec<Stamped>> = BTreeMap::new();
    for e in log.into_inner().unwrap() {
        let m = match e {
            Stamped::Claim { message, .. } | Stamped::Write { message, .. } => message,
        };
        by_message.entry(m).or_default().push(e);
    }
    let mut applied = 0;
    for (m, mut events) in by_message {
        events.sort_by_key(|e| match e {
            Stamped::Claim { stamp, .. } | Stamped::Write { stamp, .. } => *stamp,
        });
        let (mut latest, mut written) = (0u64, false);
        for e in events {
            match e {
                Stamped::Claim { token, .. } => {
                    assert_eq!(token, latest + 1, "m{m}: claim token {token} after {latest}");
                    (latest, written) = (token, false);
                }
                Stamped::Write { token, applied: true, .. } => {
                    assert_eq!(token, latest, "m{m}: a write with token {token} applied after claim {latest}: stale");
                    assert!(!written, "m{m}: two writes applied for claim {latest}");
                    written = true;
                    applied += 1;
                }
                Stamped::Write { .. } => {}
            }
        }
    }
    assert!(applied >= MESSAGES as usize);
    // The same history, as the relay fleet would log it, through `outbox-check trace`.
    let mut events = trace.into_inner().unwrap();
    events.sort_by_key(|(key, _)| *key);
    let header = Header {
        backoff_base: Some(policy.backoff.base.0),
        backoff_cap: Some(policy.backoff.cap.0),
        source: Some("tests/pg_concurrency.rs: 4 relays on PostgreSQL".into()),
        // Four relays' claims ran at once, each skipping rows the others held.
        concurrency: Some(outbox_check::trace::Concurrency::SkipLocked),
        // Every actor that may hold a row: the relays and the reaper.
        relays: Some((0..RELAYS).map(|r| format!("r{r:04}")).chain(["reaper".to_string()]).collect()),
        ..Header::new("reference", 3)
    };
    let events: Vec<Event> = events.into_iter().map(|(_, e)| e).collect();
    let file = std::env::temp_dir().join(format!("outbox-check-pg-{}.jsonl", std::process::id()));
    std::fs::write(&file, to_jsonl(&header, &events)).unwrap();
    let checking = std::time::Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .arg("trace")
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if checking.elapsed() > std::time::Duration::from_secs(120) {
            child.kill().ok();
            panic!(
                "the oracle took over 120 s on the PostgreSQL history ({} events, {})",
                events.len(),
                file.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let checked = child.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "the oracle rejected the PostgreSQL history ({} events, {}):\n{}{}",
        events.len(),
        file.display(),
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    std::fs::remove_file(&file).ok();
    let published = rows.iter().filter(|r| r.status == Status::Published).count();
    println!(
        "{MESSAGES} messages, {RELAYS} relays: {published} PUBLISHED, {} backends killed, {applied} writes applied, {} events checked by the oracle in {:.1} s; in {:.1} s",
        kills.load(Ordering::Relaxed),
        events.len(),
        checking.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// The e2e run's own statements — the reaper and the enqueue — wait for no lock a relay may hold:
/// the run that pauses a relay is the one that resumes it, so waiting would be for ever (a CI run
/// hung so: a relay paused inside a write of a row on its last attempt, past its lease, and the
/// reaper's update waiting on that row). They give way, and reap once the lock is gone.
#[test]
fn the_runs_own_statements_give_way_to_a_lock_a_paused_relay_holds() {
    let Some(url) = url() else { return };
    let stamp = outbox_check::store::postgres::COMMIT_STAMP;
    let mut store = PgStore::connect(&url, false, Variant::Reference.policy()).expect("the server answers");
    // Without the give-way, a wait ends here as an error instead of holding the test for ever.
    store.scratch().client().batch_execute("CREATE SEQUENCE outbox_check_order; SET statement_timeout = '5s'").unwrap();
    enqueue_all(&mut store, 1);
    // One attempt of a budget of one, its lease over at t=15: the reaper's row at t=100.
    assert_eq!(store.claim(&claim_request(1, 10, 1, 5)).unwrap().len(), 1);
    let schema = store.scratch().schema().to_string();
    let mut holder = Scratch::attach(&url, false, &schema).unwrap();
    let mut tx = holder.client().transaction().unwrap();
    tx.query("SELECT 1 FROM messaging_outbox WHERE message_id = $1 FOR UPDATE", &[&message_name(MessageId(0))])
        .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(store.reap_stamped(Instant(100), 1, stamp).unwrap(), None, "the reaper took a locked row");
    let req = EnqueueRequest {
        tenant_id: TenantId(0),
        aggregate_id: AggregateId(1),
        expected_version: 0,
        message_id: MessageId(1),
        now: Instant(100),
    };
    assert!(store.enqueue_stamped(&req, stamp).unwrap().is_none(), "the enqueue took the locked table");
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "they waited {:?}", started.elapsed());
    tx.rollback().unwrap();
    // A relay paused between its stamp and its commit holds the lock that serialises stamps.
    let mut tx = holder.client().transaction().unwrap();
    tx.query_one(stamp, &[]).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(store.reap_stamped(Instant(100), 1, stamp).unwrap(), None, "the reaper waited for a stamp");
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "it waited {:?}", started.elapsed());
    tx.rollback().unwrap();
    let (reaped, _) = store.reap_stamped(Instant(100), 1, stamp).unwrap().expect("no lock is held now");
    assert_eq!(reaped, [MessageId(0)]);
    assert_eq!(store.rows().unwrap()[0].status, Status::Exhausted);
}
