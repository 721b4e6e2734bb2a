//! A profile's concurrent run on PostgreSQL: relays as threads over the profile's statements,
//! each on its own connection, with a flaky broker and backends terminated between a publication
//! and its write; the history, in commit-stamp order, is judged by the oracle against the
//! declared design.

use super::*;

/// What the concurrent run on PostgreSQL found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConcurrentReport {
    pub relays: u16,
    pub messages: u32,
    pub seed: u64,
    pub seconds: f64,
    /// Backends terminated between a publication and its terminal write.
    pub kills: u64,
    /// Events in the recorded history.
    pub events: usize,
    /// Messages not terminal when the run ended that the design could still move.
    pub not_terminal: Vec<u32>,
    /// Messages the design itself leaves for good: not terminal, their budget spent, so no claim
    /// takes them, and nothing in the design moves them to a terminal status (L1).
    pub left_by_design: Vec<u32>,
    /// Messages PUBLISHED in the table that the broker never stored (S5 end to end).
    pub published_not_stored: Vec<u32>,
    /// The oracle's first divergence on the recorded history, in words; `None`: consistent.
    pub oracle: Option<String>,
    /// Every distinct finding of the oracle on the history, the first example of each, in
    /// words: the check goes on past its first.
    pub findings: Vec<String>,
    /// Where the oracle's finding is a property the declared design breaks by itself — a safety
    /// violation on a step the design's core takes too, so the statements did what the design
    /// says — that property (`S3`); `None` where the statements departed from the design.
    pub design_breaks: Option<String>,
    /// The run stopped at its deadline before every message was terminal.
    pub timed_out: bool,
    /// Where the recorded history was written when something diverged (`outbox-check trace`
    /// reads it).
    pub history: Option<String>,
}

impl ConcurrentReport {
    /// The statements departed from the design: the oracle caught a step the design does not
    /// take, a message was left behind, or PUBLISHED without the broker storing it.
    pub fn diverged(&self) -> bool {
        (self.oracle.is_some() && self.design_breaks.is_none())
            || !self.not_terminal.is_empty()
            || !self.published_not_stored.is_empty()
    }

    /// The run broke a property the design itself breaks, the statements doing what it says (but
    /// S11, which is reported and fails nothing: decision 77).
    pub fn violated(&self) -> bool {
        self.design_breaks.as_deref().is_some_and(crate::core::Property::gated_id) || !self.left_by_design.is_empty()
    }
}

/// A row no step of the design will move again: not terminal, its budget spent so no claim
/// takes it, and no maintenance job of the profile's to move it on. (A rescuer only hands it
/// back to the claim, which still refuses it.)
/// One relay thread of a profile's concurrent run: the profile's statements on its own connection
/// (a new one after its backend was terminated), a broker that drops, refuses and loses
/// acknowledgements by `rng`, and every statement logged under its commit-order stamp.
struct ThreadRelay<'a> {
    store: ProfileStore,
    /// The connection's backend, for `killer` to terminate.
    pid: i32,
    connect: &'a dyn Fn() -> Result<(ProfileStore, i32), StoreError>,
    now: &'a dyn Fn() -> u64,
    rng: rand_chacha::ChaCha8Rng,
    trace: &'a std::sync::Mutex<Vec<(i64, crate::trace::Event)>>,
    /// Per message: the copies the broker stored.
    stored: &'a std::sync::Mutex<BTreeMap<u32, u32>>,
    kills: &'a std::sync::atomic::AtomicU64,
    killer: crate::store::postgres::Scratch,
    /// The order stamp of this relay's latest publication: a write whose outcome is unknown is
    /// logged right after it.
    published_at: i64,
}

impl ThreadRelay<'_> {
    fn log(&self, stamp: i64, mut event: crate::trace::Event) {
        if !self.store.keeps_tokens() {
            without_tokens(&mut event);
        }
        self.trace.lock().unwrap_or_else(|e| e.into_inner()).push((stamp, event));
    }
}

/// An event of a table that keeps no token (River's jobs, pgmq's messages) as the history can
/// tell it: with no token, each claim a lease of its own, so the oracle never reads the zero the
/// run carries in its place as a token handed out twice.
fn without_tokens(event: &mut crate::trace::Event) {
    use crate::trace::Event;
    match event {
        Event::Claim { leases, .. } => leases.iter_mut().for_each(|l| l.token = None),
        Event::Publish { token, .. } | Event::Write { token, .. } | Event::Release { token, .. } => *token = None,
        _ => {}
    }
}

impl crate::relay::Effects for ThreadRelay<'_> {
    type Error = StoreError;

    fn clocks(&mut self) -> crate::relay::Clocks {
        crate::relay::Clocks::same(Instant((self.now)()))
    }

    async fn claim(&mut self, request: ClaimRequest) -> Result<crate::relay::Reply, StoreError> {
        use crate::relay::Reply;
        match self.store.claim(&request) {
            Ok(leases) => {
                let event = crate::trace::Event::claim_of(
                    format!("r{}", request.owner.0),
                    "t0".into(),
                    &request,
                    &leases,
                    |m| format!("m{}", m.0),
                );
                self.log(2 * self.store.last_stamp, event);
                Ok(Reply::Claimed(leases))
            }
            Err(StoreError::Postgres(_)) => {
                (self.store, self.pid) = (self.connect)()?;
                Ok(Reply::ConnectionLost)
            }
            Err(other) => Err(other),
        }
    }

    async fn publish(
        &mut self,
        lease: Lease,
        _key: crate::core::IdempotencyKey,
    ) -> Result<crate::relay::PublishOutcome, StoreError> {
        use crate::relay::PublishOutcome;
        use rand::Rng;
        let roll: f64 = self.rng.gen();
        let outcome = if roll < 0.10 {
            PublishOutcome::RetryableFailure
        } else if roll < 0.15 {
            PublishOutcome::Timeout
        } else {
            *self.stored.lock().unwrap_or_else(|e| e.into_inner()).entry(lease.message_id.0).or_default() += 1;
            if roll < 0.20 {
                PublishOutcome::Timeout
            } else {
                PublishOutcome::Ack
            }
        };
        self.published_at = self.killer.client().query_one(crate::store::postgres::COMMIT_STAMP, &[])?.get(0);
        let event = crate::trace::Event::Publish {
            relay: format!("r{}", lease.owner.0),
            message: format!("m{}", lease.message_id.0),
            key: format!("m{}", lease.message_id.0),
            answer: crate::trace::PublishAnswer::from(outcome),
            stored: Some(roll >= 0.15),
            token: Some(lease.token.0.to_string()),
        };
        self.log(2 * self.published_at, event);
        // Between publish and terminal write, the backend may die.
        if self.rng.gen_bool(0.03) {
            self.killer.client().query("SELECT pg_terminate_backend($1)", &[&self.pid])?;
            self.kills.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(outcome)
    }

    async fn write(&mut self, mut request: WriteRequest) -> Result<crate::relay::Reply, StoreError> {
        use crate::relay::Reply;
        use crate::trace::WriteReport;
        request.now = Instant((self.now)());
        let event = |result| {
            crate::trace::Event::write_of(
                format!("r{}", request.lease.owner.0),
                "t0".into(),
                format!("m{}", request.lease.message_id.0),
                &request,
                result,
            )
        };
        match self.store.write(&request) {
            Ok(result) => {
                let report = if matches!(result, WriteResult::Applied { .. }) {
                    WriteReport::Applied
                } else {
                    WriteReport::Stale
                };
                self.log(2 * self.store.last_stamp, event(report));
                Ok(Reply::Written(result))
            }
            Err(StoreError::Postgres(_)) => {
                // Whether it committed is unknown: logged so, after the publication.
                self.log(2 * self.published_at + 1, event(WriteReport::Unknown));
                (self.store, self.pid) = (self.connect)()?;
                Ok(Reply::ConnectionLost)
            }
            Err(other) => Err(other),
        }
    }
}

impl Profile {
    /// `relays` relays as threads over the profile's statements on PostgreSQL, each on its own
    /// connection into one scratch schema: a broker that drops, refuses and loses
    /// acknowledgements, and backends terminated between a publication and its write — drawn
    /// from `seed`. Every statement is stamped in its transaction; the history, in stamp order,
    /// is checked by the oracle against the declared design.
    pub fn concurrent(
        &self,
        url: &str,
        disposable: bool,
        relays: u16,
        messages: u32,
        seed: u64,
    ) -> Result<ConcurrentReport, StoreError> {
        use crate::relay::{drive_now, RelayConfig};
        use crate::trace::Event as T;
        use rand::SeedableRng;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Mutex;
        let mut policy = self.design.policy();
        // Short retries, so a run ends in seconds; the history's header says so.
        policy.backoff =
            crate::core::Backoff { base: crate::core::Duration(20), cap: crate::core::Duration(200), ..policy.backoff };
        let max_attempts = 3;
        let mut setup = self.scratch(url, disposable)?;
        let place = setup.place();
        setup.client().batch_execute(&format!("CREATE SEQUENCE {}.outbox_check_order", place.schema))?;
        let shared = std::rc::Rc::new(std::cell::RefCell::new(setup));
        let mut first = ProfileStore::open(Db::Postgres(shared.clone()), self)?;
        first.policy = policy;
        let lease = crate::core::Duration(1_000);
        first.set_run(max_attempts, lease);
        let started = std::time::Instant::now();
        let now = move || started.elapsed().as_millis() as u64 + 10_000;
        let names = |m: MessageId| format!("m{}", m.0);
        let relay_name = |r: RelayId| format!("r{}", r.0);
        let mut events: Vec<(i64, T)> = Vec::new();
        for n in 0..messages {
            let req = EnqueueRequest {
                tenant_id: TenantId(0),
                aggregate_id: crate::core::AggregateId(n),
                expected_version: 0,
                message_id: MessageId(n),
                now: Instant(u64::from(n)),
            };
            first.enqueue(&req)?;
            events.push((
                i64::from(n) - i64::from(messages),
                T::Enqueue {
                    tenant: "t0".into(),
                    aggregate: format!("a{n}"),
                    expected_version: 0,
                    message: names(MessageId(n)),
                    now: u64::from(n),
                    result: "applied".into(),
                },
            ));
        }
        // The ids the table gave the messages (pgmq's identity column): every relay's store
        // reads and binds them as the run's.
        let assigned = first.assigned.clone();
        let trace = Mutex::new(events);
        let stored = Mutex::new(BTreeMap::<u32, u32>::new());
        let kills = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        let timed_out = AtomicBool::new(false);
        let failure: Mutex<Option<String>> = Mutex::new(None);
        let deadline = std::time::Duration::from_secs(60);
        let tokens = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        std::thread::scope(|scope| {
            for r in 0..relays {
                let (tokens, assigned) = (&tokens, &assigned);
                let (trace, stored, kills, done, timed_out, failure, schema) =
                    (&trace, &stored, &kills, &done, &timed_out, &failure, &place);
                scope.spawn(move || {
                    let run = || -> Result<(), StoreError> {
                        let mut rng =
                            rand_chacha::ChaCha8Rng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(u64::from(r)));
                        let connect = || -> Result<(ProfileStore, i32), StoreError> {
                            let mut scratch = crate::store::postgres::Scratch::attach_to(url, disposable, schema)
                                .map_err(|e| StoreError::Setup(e.to_string()))?;
                            let pid: i32 = scratch.client().query_one("SELECT pg_backend_pid()", &[])?.get(0);
                            let mut store = ProfileStore::open(
                                Db::Postgres(std::rc::Rc::new(std::cell::RefCell::new(scratch))),
                                self,
                            )?;
                            store.stamp = true;
                            store.policy = policy;
                            store.set_run(max_attempts, lease);
                            store.shared_tokens = Some(tokens.clone());
                            store.assigned = assigned.clone();
                            Ok((store, pid))
                        };
                        let (mut store, mut pid) = connect()?;
                        let mut killer = crate::store::postgres::Scratch::attach_to(url, disposable, schema)
                            .map_err(|e| StoreError::Setup(e.to_string()))?;
                        let config = RelayConfig {
                            owner: RelayId(r),
                            tenant_id: TenantId(0),
                            batch: store.fixed_batch().map_or(5, |fixed| fixed.min(5)),
                            lease,
                            max_attempts,
                            policy,
                        };
                        let mut published_at = 0i64;
                        while !done.load(Ordering::Relaxed) {
                            if started.elapsed() > deadline {
                                timed_out.store(true, Ordering::Relaxed);
                                done.store(true, Ordering::Relaxed);
                                break;
                            }
                            // A maintenance statement that moved rows, logged at its stamp.
                            let log_moved = |stamp: i64, moved: Vec<MessageId>, event: &dyn Fn(Vec<String>) -> T| {
                                if !moved.is_empty() {
                                    let messages = moved.iter().map(|m| names(*m)).collect();
                                    trace.lock().unwrap_or_else(|e| e.into_inner()).push((2 * stamp, event(messages)));
                                }
                            };
                            if r == 0 && store.can_reap() {
                                let at = Instant(now());
                                if let Ok(reaped) = store.reap(at, max_attempts) {
                                    log_moved(store.last_stamp, reaped, &|messages| T::Reap { now: at.0, messages });
                                }
                            }
                            // The scheduler beside the relays (`maintenance.scheduler`): rows
                            // whose retry time passed become claimable, in one statement.
                            if r == 0 && policy.scheduler && store.can_schedule() {
                                let at = Instant(now());
                                if let Ok(moved) = store.schedule(at) {
                                    log_moved(store.last_stamp, moved, &|messages| T::Schedule { now: at.0, messages });
                                }
                            }
                            // A rescuer's release, at its statement's commit.
                            let log_rescue = |store: &ProfileStore, mut event: T| {
                                if !store.keeps_tokens() {
                                    without_tokens(&mut event);
                                }
                                trace.lock().unwrap_or_else(|e| e.into_inner()).push((2 * store.last_stamp, event));
                            };
                            // A rescuer that sweeps (`rescue_all`) beside the relays, where its
                            // statements name the rows they moved: one release each.
                            if let (0, Some(fence)) = (r, policy.rescue.filter(|_| store.sweeps())) {
                                let at = Instant(now());
                                match store.rescue_all_moves(at, max_attempts, &policy) {
                                    Ok(moves) => {
                                        for (message, to, attempts) in moves {
                                            let lease = Lease {
                                                message_id: message,
                                                tenant_id: TenantId(0),
                                                owner: RelayId(u16::MAX),
                                                token: crate::core::LeaseToken(0),
                                                attempts,
                                                claim_seq: 0,
                                            };
                                            // Where the statement says it moved the row.
                                            let request = crate::core::ReleaseRequest {
                                                lease,
                                                fence,
                                                to,
                                                retry_at: (to == Status::Pending)
                                                    .then(|| policy.rescue_retry_at(attempts, at))
                                                    .flatten(),
                                                now: at,
                                            };
                                            log_rescue(
                                                &store,
                                                T::rescue_of(
                                                    names(message),
                                                    &request,
                                                    to,
                                                    WriteResult::Applied { status: to },
                                                ),
                                            );
                                        }
                                    }
                                    // A sweep that does not say what it moved cannot be recorded.
                                    Err(e @ StoreError::Corrupt(_)) => return Err(e),
                                    Err(_) => {}
                                }
                            }
                            // The rescuer beside the relays: a read, then the move of the row it
                            // read, each its own statement — another relay may claim between.
                            if let (0, Some(fence)) =
                                (r, policy.rescue.filter(|_| store.can_rescue() && !store.sweeps()))
                            {
                                let at = Instant(now());
                                if let Ok(Some((message, token))) = store.rescue_read(at) {
                                    // Where it goes and its retry time, as the design's rescuer
                                    // decides from the attempts of the row it read.
                                    let attempts = store
                                        .rows()?
                                        .iter()
                                        .find(|row| row.message_id == message)
                                        .map_or(0, |row| row.attempts);
                                    let lease = Lease {
                                        message_id: message,
                                        tenant_id: TenantId(0),
                                        owner: RelayId(u16::MAX),
                                        token,
                                        attempts,
                                        claim_seq: 0,
                                    };
                                    let request =
                                        policy.rescue_request(lease, fence, attempts, max_attempts, Instant(now()));
                                    if let Ok(result) = store.rescue(&request, max_attempts) {
                                        // The statement decides where the row goes; applied, it says.
                                        let to = match result {
                                            WriteResult::Applied { status } => status,
                                            WriteResult::Stale { .. } => request.to,
                                        };
                                        log_rescue(&store, T::rescue_of(names(message), &request, to, result));
                                    }
                                }
                            }
                            let mut effects = ThreadRelay {
                                store,
                                pid,
                                connect: &connect,
                                now: &now,
                                rng,
                                trace,
                                stored,
                                kills,
                                killer,
                                published_at,
                            };
                            // The profile's SQL decides what a claim takes: no timer of the
                            // relay's is read (a design's per-process timer is the core's).
                            let claimed = drive_now(&config, &mut None, &mut effects)?;
                            ThreadRelay { store, pid, rng, killer, published_at, .. } = effects;
                            if claimed == 0 {
                                let can_reap = store.can_reap() || store.can_rescue();
                                let open = store
                                    .rows()?
                                    .iter()
                                    .filter(|row| {
                                        !row.status.is_terminal()
                                            && !Outbox::stranded(&policy, row, max_attempts, can_reap)
                                    })
                                    .count();
                                if open == 0 {
                                    done.store(true, Ordering::Relaxed);
                                }
                                std::thread::sleep(std::time::Duration::from_millis(10));
                            }
                        }
                        Ok(())
                    };
                    if let Err(e) = run() {
                        *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                        done.store(true, Ordering::Relaxed);
                    }
                });
            }
        });
        if let Some(problem) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(StoreError::Setup(format!("the concurrent run stopped: {problem}")));
        }
        let rows = first.rows()?;
        let stored = stored.into_inner().unwrap_or_else(|e| e.into_inner());
        let can_reap = first.can_reap() || first.can_rescue();
        let not_terminal: Vec<u32> = rows
            .iter()
            .filter(|r| !r.status.is_terminal() && !Outbox::stranded(&policy, r, max_attempts, can_reap))
            .map(|r| r.message_id.0)
            .collect();
        let left_by_design: Vec<u32> = rows
            .iter()
            .filter(|r| Outbox::stranded(&policy, r, max_attempts, can_reap))
            .map(|r| r.message_id.0)
            .collect();
        // A message no longer in the table was deleted by its completion: PUBLISHED, as the model
        // keeps it, so the broker must have stored it too.
        let mut published_not_stored: Vec<u32> = rows
            .iter()
            .filter(|r| r.status == Status::Published)
            .map(|r| r.message_id.0)
            // (Where a failure deletes too — pgmq's archive — a gone message may have failed.)
            .chain((0..messages).filter(|m| !policy.failure_deletes && !rows.iter().any(|r| r.message_id.0 == *m)))
            .filter(|m| !stored.contains_key(m))
            .collect();
        published_not_stored.sort_unstable();
        let mut events = trace.into_inner().unwrap_or_else(|e| e.into_inner());
        events.sort_by_key(|(key, _)| *key);
        let header = crate::trace::Header {
            backoff_base: Some(policy.backoff.base.0),
            backoff_cap: Some(policy.backoff.cap.0),
            source: Some(format!(
                "outbox-check conform --profile {}: {relays} relays on PostgreSQL, seed {seed}",
                self.origin.display()
            )),
            concurrency: Some(crate::trace::Concurrency::SkipLocked),
            relays: Some((0..relays).map(|r| relay_name(RelayId(r))).collect()),
            ..crate::trace::Header::new(self.design.name(), max_attempts)
        };
        let checked = crate::oracle::check(
            self.design,
            &header,
            events.iter().enumerate().map(|(line, (_, event))| (line + 2, event)),
            crate::oracle::Mode::All,
        );
        // A safety finding with nothing the model "allows" instead is a step the design's core
        // took as the statements did: the design breaks the property, not the SQL.
        let design_breaks = checked.design_breaks().map(|p| p.id().to_string());
        let verdict = checked.first().map(|d| d.to_string());
        let mut seen = Vec::new();
        let mut findings = Vec::new();
        for d in &checked.divergences {
            if !seen.contains(&d.blame) {
                seen.push(d.blame);
                findings.push(d.to_string());
            }
        }
        let mut report = ConcurrentReport {
            history: None,
            relays,
            messages,
            seed,
            seconds: started.elapsed().as_secs_f64(),
            kills: kills.load(Ordering::Relaxed),
            events: events.len(),
            not_terminal,
            left_by_design,
            published_not_stored,
            oracle: verdict,
            findings,
            design_breaks,
            timed_out: timed_out.load(Ordering::Relaxed),
        };
        if report.diverged() || report.violated() {
            let path =
                std::env::temp_dir().join(format!("outbox-check-concurrent-seed-{seed}-{}.jsonl", std::process::id()));
            let events: Vec<crate::trace::Event> = events.into_iter().map(|(_, e)| e).collect();
            report.history = std::fs::write(&path, crate::trace::to_jsonl(&header, &events))
                .ok()
                .map(|()| path.display().to_string());
        }
        Ok(report)
    }
}
