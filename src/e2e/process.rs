//! One relay of an end-to-end run, as an OS process of its own (`outbox-check e2e-relay FILE`):
//! the sans-IO relay cycle of `crate::relay` over the run's PostgreSQL schema and NATS
//! JetStream, logging every statement and publication to its own file as it goes.
//!
//! The log is what the run's history is made of, so it is written the way a crash cannot
//! falsify: before a statement runs, a *pending* line with the statement's event as it would read
//! had the connection died (`unknown`); after it committed, the event with its commit stamp (a
//! sequence value taken inside the transaction: statements on one row are ordered by the row's
//! lock, so stamps order them as they committed). A relay killed between the commit and its line
//! leaves the pending line, which the run reads as a statement of unknown outcome — what it is.
//! A publication is logged after the broker answered; one the relay did not live to log shows up
//! only at the consumer, which says so.

use super::nats::{self, Answer};
use super::{LogLine, Publication, RelaySetup};
use crate::core::{
    ClaimRequest, Duration, IdempotencyKey, Instant, Lease, RelayId, TenantId, WriteRequest, WriteResult,
};
use crate::relay::{drive_now, Clocks, Effects, PublishOutcome, RelayConfig, Reply};
use crate::store::bind::{message_name, owner_name, tenant_name, PgStore, StoreError};
use crate::store::postgres::Scratch;
use crate::trace::{Event, Outcome, PublishAnswer, WriteReport};
use rand::{Rng, SeedableRng};
use std::io::Write;

/// The relay's log file, appended a line at a time.
struct Log {
    file: std::fs::File,
    /// The stamp of this relay's last committed statement (a pending line comes after it).
    last: i64,
    next_pending: u64,
}

impl Log {
    fn line(&mut self, line: &LogLine) -> Result<(), String> {
        let mut text = serde_json::to_string(line).expect("JSON of plain values");
        text.push('\n');
        self.file.write_all(text.as_bytes()).map_err(|e| format!("cannot write the relay's log: {e}"))
    }

    fn pending(&mut self, event: Event) -> Result<u64, String> {
        let id = self.next_pending;
        self.next_pending += 1;
        self.line(&LogLine::Pending { id, after: self.last, event })?;
        Ok(id)
    }

    fn committed(&mut self, stamp: i64, resolves: Option<u64>, event: Event) -> Result<(), String> {
        self.last = self.last.max(stamp);
        self.line(&LogLine::Committed { stamp, resolves, event })
    }
}

/// The relay's connection to the broker.
enum Publisher {
    Nats { client: async_nats::Client, js: async_nats::jetstream::Context },
    Rabbit(super::rabbitmq::Rabbit),
}

impl Publisher {
    async fn connect(setup: &RelaySetup) -> Result<Publisher, String> {
        let timeout = std::time::Duration::from_millis(setup.publish_timeout_ms);
        Ok(match setup.broker {
            super::Broker::Nats => {
                let client = nats::connect(&setup.broker_url).await?;
                let js = nats::jetstream(client.clone(), timeout);
                Publisher::Nats { client, js }
            }
            super::Broker::Rabbitmq => Publisher::Rabbit(super::rabbitmq::connect(&setup.broker_url).await?),
        })
    }

    async fn publish(
        &self,
        setup: &RelaySetup,
        message: &str,
        publication: &str,
        payload: Vec<u8>,
        cut: bool,
    ) -> Answer {
        let timeout = std::time::Duration::from_millis(setup.publish_timeout_ms);
        match self {
            Publisher::Nats { client, js } => nats::publish(client, js, message, publication, payload, cut).await,
            Publisher::Rabbit(rabbit) => {
                rabbit.publish(&setup.queue, message, publication, payload, cut, timeout).await
            }
        }
    }
}

/// The relay's database connection, in the run's schema: the store's own statements, each
/// stamped inside its transaction.
struct Db {
    setup: RelaySetup,
    store: PgStore,
    pid: i32,
}

/// The commit stamp: drawn last inside the statement's transaction, in commit order.
const STAMP: &str = crate::store::postgres::COMMIT_STAMP;

impl Db {
    fn connect(setup: &RelaySetup) -> Result<Db, String> {
        let mut store = PgStore::attach(&setup.database_url, &setup.schema, setup.policy).map_err(|e| e.to_string())?;
        // Named for the run, the relay and its incarnation, so the run can see this session end
        // before it starts the relay again after killing it.
        let name = super::session_name(&setup.schema, setup.relay, setup.incarnation);
        store
            .scratch()
            .client()
            .batch_execute(&format!("SET application_name = '{name}'"))
            .map_err(|e| e.to_string())?;
        let pid: i32 =
            store.scratch().client().query_one("SELECT pg_backend_pid()", &[]).map_err(|e| e.to_string())?.get(0);
        Ok(Db { setup: setup.clone(), store, pid })
    }

    /// A new connection after a lost one, retried while the server refuses.
    fn reconnect(&mut self) -> Result<(), String> {
        let started = std::time::Instant::now();
        loop {
            match Db::connect(&self.setup) {
                Ok(db) => {
                    *self = db;
                    return Ok(());
                }
                Err(e) if started.elapsed() > std::time::Duration::from_secs(10) => return Err(e),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        }
    }

    fn stamp(&mut self) -> Result<i64, postgres::Error> {
        Ok(self.store.scratch().client().query_one(STAMP, &[])?.get(0))
    }

    fn claim(&mut self, req: &ClaimRequest) -> Result<(i64, Vec<Lease>), StoreError> {
        let (leases, stamp) = self.store.claim_stamped(req, STAMP)?;
        self.store.clear_log();
        Ok((stamp, leases))
    }

    fn write(&mut self, req: &WriteRequest) -> Result<(i64, WriteResult), StoreError> {
        let (result, stamp) = self.store.write_stamped(req, STAMP)?;
        self.store.clear_log();
        Ok((stamp, result))
    }
}

/// The process's entry: reads its setup from `file`, runs until the run's stop file appears or
/// the process that started it is gone.
pub fn main(file: &std::path::Path) -> std::process::ExitCode {
    let setup: RelaySetup = match std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("outbox-check e2e-relay: cannot read {}: {e}", file.display());
            return std::process::ExitCode::from(2);
        }
    };
    match run(&setup) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outbox-check e2e-relay r{}: {e}", setup.relay);
            std::process::ExitCode::from(2)
        }
    }
}

fn run(setup: &RelaySetup) -> Result<(), String> {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&setup.log)
        .map_err(|e| format!("cannot open {}: {e}", setup.log.display()))?;
    // Pending ids carry the incarnation: unique over the relay's restarts.
    let log = Log { file, last: 0, next_pending: u64::from(setup.incarnation) << 32 };
    let rng = rand_chacha::ChaCha8Rng::seed_from_u64(
        setup.seed ^ u64::from(setup.relay) << 32 ^ u64::from(setup.incarnation) << 48,
    );
    let runtime = nats::runtime();
    // The JetStream context spawns its acknowledgement task on the current runtime.
    let _entered = runtime.enter();
    let publisher = runtime.block_on(Publisher::connect(setup))?;
    let db = Db::connect(setup)?;
    let killer = Scratch::attach(&setup.database_url, false, &setup.schema).map_err(|e| e.to_string())?;
    let owner = RelayId(setup.relay);
    let config = RelayConfig {
        owner,
        tenant_id: TenantId(0),
        batch: setup.batch,
        lease: Duration(setup.lease_ms),
        max_attempts: setup.max_attempts,
        policy: setup.policy,
    };
    let relay = owner_name(owner);
    let tenant = tenant_name(TenantId(0));
    let stopped = || setup.stop.exists() || unsafe { libc::getppid() } != parent;
    let mut effects =
        Process { setup, log, rng, runtime: &runtime, publisher, publications: 0, db, killer, relay, tenant };
    // The process's own retry timer (`retry.timer = "per-process"`), gone with the process.
    let mut timer = None;
    while !stopped() {
        if drive_now(&config, &mut timer, &mut effects)? == 0 {
            std::thread::sleep(std::time::Duration::from_millis(setup.poll_ms));
        }
    }
    Ok(())
}

/// One relay process's database, broker and log: every statement and publication it makes is
/// logged with its commit stamp (a statement first as pending, so one whose reply is lost is in
/// the history with an unknown outcome), and the faults drawn for it are injected around them.
struct Process<'a> {
    setup: &'a RelaySetup,
    log: Log,
    rng: rand_chacha::ChaCha8Rng,
    runtime: &'a tokio::runtime::Runtime,
    publisher: Publisher,
    /// Publications made by this incarnation: their ids.
    publications: u64,
    db: Db,
    /// A second connection, to terminate the relay's own backend between publish and write.
    killer: Scratch,
    relay: String,
    tenant: String,
}

impl Effects for Process<'_> {
    type Error = String;

    fn clocks(&mut self) -> Clocks {
        Clocks::same(Instant(super::now_ms(self.setup.epoch_ms)))
    }

    async fn claim(&mut self, mut request: ClaimRequest) -> Result<Reply, String> {
        request.now = self.clocks().database;
        let unknown = Event::Claim {
            relay: self.relay.clone(),
            tenant: self.tenant.clone(),
            batch: request.batch,
            lease_ms: request.lease.0,
            now: request.now.0,
            leases: Vec::new(),
            outcome: Outcome::Unknown,
        };
        let pending = self.log.pending(unknown)?;
        match self.db.claim(&request) {
            Ok((stamp, leases)) => {
                self.log.committed(
                    stamp,
                    Some(pending),
                    Event::claim_of(self.relay.clone(), self.tenant.clone(), &request, &leases, message_name),
                )?;
                Ok(Reply::Claimed(leases))
            }
            Err(_) => {
                self.db.reconnect()?;
                Ok(Reply::ConnectionLost)
            }
        }
    }

    async fn publish(&mut self, lease: Lease, key: IdempotencyKey) -> Result<PublishOutcome, String> {
        let (setup, relay) = (self.setup, self.relay.clone());
        let message = message_name(lease.message_id);
        let cut = self.rng.gen_bool(setup.cut_before_ack);
        let at = super::now_ms(setup.epoch_ms);
        let payload = format!("{message} token {}", lease.token.0).into_bytes();
        let id = format!("{relay}.{}.{}", setup.incarnation, self.publications);
        self.publications += 1;
        let answer = self.runtime.block_on(self.publisher.publish(setup, &message, &id, payload, cut));
        if cut {
            self.log.line(&LogLine::Fault {
                at_ms: at,
                what: format!("{relay}'s broker connection cut before the ack of {message}"),
            })?;
            // The connection is gone: the relay starts a new one, as its client would.
            self.publisher = self.runtime.block_on(Publisher::connect(setup))?;
        }
        let outcome = match answer {
            Answer::Ack { .. } => PublishOutcome::Ack,
            Answer::Timeout => PublishOutcome::Timeout,
            Answer::Unavailable => PublishOutcome::RetryableFailure,
        };
        let (sequence, duplicate) = match answer {
            Answer::Ack { sequence, duplicate } => (sequence, duplicate),
            _ => (None, false),
        };
        self.log.line(&LogLine::Publication(Publication {
            id,
            relay: relay.clone(),
            message: message.clone(),
            token: lease.token.0,
            at_ms: at,
            answer: PublishAnswer::from(outcome),
            cut,
            sequence,
            duplicate,
        }))?;
        let key = match key {
            IdempotencyKey::Message { message_id } => message_name(message_id),
            IdempotencyKey::Other { value } => format!("{value:#x}"),
        };
        let event = Event::Publish {
            relay: relay.clone(),
            message,
            key,
            answer: PublishAnswer::from(outcome),
            stored: None,
            token: Some(lease.token.0.to_string()),
        };
        match self.db.stamp() {
            Ok(stamp) => self.log.committed(stamp, None, event)?,
            Err(_) => self.db.reconnect()?,
        }
        // Between the publication and the terminal write, the backend may die.
        if self.rng.gen_bool(setup.kill_backend) {
            let _ = self.killer.client().query("SELECT pg_terminate_backend($1)", &[&self.db.pid]);
            self.log.line(&LogLine::Fault {
                at_ms: super::now_ms(setup.epoch_ms),
                what: format!(
                    "{relay}'s backend terminated between publish and write of {}",
                    message_name(lease.message_id)
                ),
            })?;
        }
        Ok(outcome)
    }

    async fn write(&mut self, mut request: WriteRequest) -> Result<Reply, String> {
        request.now = self.clocks().database;
        let (relay, tenant) = (self.relay.clone(), self.tenant.clone());
        let event = |result| {
            Event::write_of(relay.clone(), tenant.clone(), message_name(request.lease.message_id), &request, result)
        };
        let pending = self.log.pending(event(WriteReport::Unknown))?;
        match self.db.write(&request) {
            Ok((stamp, result)) => {
                let report = if matches!(result, WriteResult::Applied { .. }) {
                    WriteReport::Applied
                } else {
                    WriteReport::Stale
                };
                self.log.committed(stamp, Some(pending), event(report))?;
                Ok(Reply::Written(result))
            }
            Err(_) => {
                self.db.reconnect()?;
                Ok(Reply::ConnectionLost)
            }
        }
    }
}
