//! `outbox-check e2e`: the relay cycle end to end over real parts — relays as OS processes over
//! real PostgreSQL (the run's scratch schema) publishing to a real NATS JetStream (a server the
//! run starts itself), a consumer recording every delivery — under real faults drawn from one
//! seed: relays killed (SIGKILL) and restarted, relays paused past their lease
//! (SIGSTOP/SIGCONT), backends terminated between publish and write, broker connections cut
//! before the acknowledgement, the broker killed and started again.
//!
//! One checker judges it all: the relays' statements and publications, logged as they commit
//! ([`relay`]), make a history in the trace format that the oracle checks; the consumer's
//! deliveries are checked against the table — every PUBLISHED message delivered at least once
//! (S5 end to end), and every delivery beyond a message's first named: a second copy the
//! broker stored (its deduplication window had passed: a duplicate effect, with the
//! publications that caused it) or a redelivery of the same copy.

pub mod blackbox;
mod consumer;
mod history;
pub mod nats;
mod print;
pub mod process;
pub mod proxy;
pub mod rabbitmq;
use consumer::{consume, consume_rabbit, drain};
use history::{check_history, last_sequence, merge_logs, name_deliveries, reap, Findings};
pub use print::print;

use crate::core::{AggregateId, Duration, EnqueueRequest, Instant, MessageId, Policy, RelayId, Status, TenantId};
use crate::design::Design;
use crate::store::bind::{aggregate_name, message_name, owner_name, tenant_name};
use crate::store::{PgStore, Store};
use crate::trace::PublishAnswer;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// The run's clock: milliseconds since the run began, plus this offset (so no instant is 0).
const CLOCK_OFFSET: u64 = 10_000;

/// Now on the run's clock, which every process reads from the wall clock and the run's start.
pub fn now_ms(epoch_ms: u64) -> u64 {
    unix_ms().saturating_sub(epoch_ms) + CLOCK_OFFSET
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A message id of the table (`m00000012`) as the core's.
pub fn message_of(name: &str) -> MessageId {
    MessageId(name.trim_start_matches('m').parse().unwrap_or(u32::MAX))
}

/// Sets `command`'s child to be killed when this process dies (Linux), so a run killed outright
/// leaves no relay or broker running. Spawn from the thread that lives for the whole run.
pub(crate) fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// The broker an end-to-end run publishes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Broker {
    /// NATS JetStream on a server the run starts itself; deduplicates on Nats-Msg-Id within the
    /// stream's duplicate window
    Nats,
    /// the machine's RabbitMQ with publisher confirms, a queue of the run's own; no
    /// deduplication, no outage fault
    Rabbitmq,
}

impl Broker {
    pub fn name(self) -> &'static str {
        match self {
            Broker::Nats => "NATS JetStream",
            Broker::Rabbitmq => "RabbitMQ",
        }
    }
}

/// What a relay process needs, written to a file it reads at start.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RelaySetup {
    pub relay: u16,
    pub broker: Broker,
    /// The NATS server's or RabbitMQ's URL.
    pub broker_url: String,
    /// RabbitMQ: the run's queue.
    pub queue: String,
    pub policy: Policy,
    pub database_url: String,
    pub schema: String,
    pub lease_ms: u64,
    pub poll_ms: u64,
    pub batch: u32,
    pub max_attempts: u32,
    pub epoch_ms: u64,
    pub log: PathBuf,
    /// The run asks its relays to stop by creating this file.
    pub stop: PathBuf,
    pub seed: u64,
    /// How many times this relay was started before (a restart draws other faults).
    pub incarnation: u32,
    /// The chance, per publication, that the relay's broker connection is cut before the ack.
    pub cut_before_ack: f64,
    /// The chance, per publication, that the relay's backend is terminated before its write.
    pub kill_backend: f64,
    pub publish_timeout_ms: u64,
}

/// A line of a relay's log.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLine {
    /// About to run a statement: its event as it would read had the connection died.
    Pending { id: u64, after: i64, event: crate::trace::Event },
    /// A statement committed (or a publication answered) at this commit stamp.
    Committed { stamp: i64, resolves: Option<u64>, event: crate::trace::Event },
    /// What the broker answered one publication.
    Publication(Publication),
    /// A fault the relay injected itself.
    Fault { at_ms: u64, what: String },
}

/// One publication, as its relay saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Publication {
    /// The publication's own id (relay, incarnation, count), sent with it as a header.
    pub id: String,
    pub relay: String,
    pub message: String,
    pub token: u64,
    pub at_ms: u64,
    pub answer: PublishAnswer,
    /// The relay's broker connection was cut before the acknowledgement.
    pub cut: bool,
    /// The stream sequence the acknowledgement named.
    pub sequence: Option<u64>,
    /// The broker acknowledged it as a duplicate of a message id it had within its window.
    pub duplicate: bool,
}

/// One delivery the consumer received.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Delivery {
    pub message: String,
    /// Which stored copy it is: the stream sequence (NATS), else the publication that sent it.
    pub copy: String,
    /// The stream sequence of the copy (NATS).
    pub sequence: Option<u64>,
    /// The publication that sent the copy, from its header.
    pub publication: Option<String>,
    /// When the broker stored that copy (NATS), else when it was sent or, unknown, received; on
    /// the run's clock.
    pub stored_ms: u64,
    pub received_ms: u64,
    /// The broker had delivered this copy before (the consumer's ack did not reach it).
    pub redelivered: bool,
}

/// Which faults the run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessFaults {
    pub kill: bool,
    pub pause: bool,
    pub backend: bool,
    pub cut: bool,
    pub outage: bool,
}

impl ProcessFaults {
    pub const NAMES: [&'static str; 5] = ["kill", "pause", "backend", "cut", "outage"];

    pub fn parse(text: &str) -> Result<ProcessFaults, String> {
        let mut f = ProcessFaults { kill: false, pause: false, backend: false, cut: false, outage: false };
        match text {
            "all" => return Ok(ProcessFaults { kill: true, pause: true, backend: true, cut: true, outage: true }),
            "none" => return Ok(f),
            _ => {}
        }
        for name in text.split(',').map(str::trim) {
            match name {
                "kill" => f.kill = true,
                "pause" => f.pause = true,
                "backend" => f.backend = true,
                "cut" => f.cut = true,
                "outage" => f.outage = true,
                other => {
                    return Err(format!(
                        "unknown e2e fault '{other}' (all, none, or a list of {})",
                        ProcessFaults::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(f)
    }

    fn names(self) -> Vec<&'static str> {
        let on = [self.kill, self.pause, self.backend, self.cut, self.outage];
        ProcessFaults::NAMES.iter().zip(on).filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }
}

/// A run's settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub broker: Broker,
    /// RabbitMQ's URL (with `--broker rabbitmq`).
    pub rabbitmq_url: String,
    pub design: Design,
    pub relays: u16,
    pub messages: u32,
    pub seed: u64,
    pub lease_ms: u64,
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    pub poll_ms: u64,
    pub max_attempts: u32,
    pub batch: u32,
    /// The stream's deduplication window.
    pub duplicate_window_ms: u64,
    pub faults: ProcessFaults,
    /// Faults are scheduled in this many ms from the start.
    pub fault_span_ms: u64,
    pub database_url: String,
    pub nats_server: PathBuf,
    /// The run gives up after this long (the report says what was left).
    pub deadline_ms: u64,
    /// Write the history here (always; else only when the checks fail, to a temporary file).
    pub history: Option<PathBuf>,
    /// The consumer deduplicates by the message id: a second stored copy is named, not a failure.
    pub consumer_deduplicates: bool,
}

/// A fault the run injects from outside the relays, at `at_ms` after the start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Disruption {
    /// SIGKILL, then a new process under the same relay id.
    Kill { at_ms: u64, relay: u16 },
    /// SIGSTOP for `for_ms`, then SIGCONT.
    Pause { at_ms: u64, relay: u16, for_ms: u64 },
    /// The broker killed (SIGKILL) and started again on its port and store `for_ms` later.
    Outage { at_ms: u64, for_ms: u64 },
    /// Every database backend of a relay terminated (a user's relay: `e2e --relay`).
    Backend { at_ms: u64, relay: u16 },
    /// Every broker connection of a relay partitioned at its proxy (nothing forwarded for 0.6
    /// leases), then cut (a user's relay: `e2e --relay`).
    Cut { at_ms: u64, relay: u16 },
}

impl Disruption {
    fn at(&self) -> u64 {
        match self {
            Disruption::Kill { at_ms, .. }
            | Disruption::Pause { at_ms, .. }
            | Disruption::Outage { at_ms, .. }
            | Disruption::Backend { at_ms, .. }
            | Disruption::Cut { at_ms, .. } => *at_ms,
        }
    }

    /// In words, for the report.
    pub fn words(&self) -> String {
        match self {
            Disruption::Kill { at_ms, relay } => {
                format!("t={} {} killed (SIGKILL) and started again", secs(*at_ms), owner_name(RelayId(*relay)))
            }
            Disruption::Pause { at_ms, relay, for_ms } => format!(
                "t={} {} paused {} (SIGSTOP, SIGCONT)",
                secs(*at_ms),
                owner_name(RelayId(*relay)),
                secs(*for_ms)
            ),
            Disruption::Outage { at_ms, for_ms } => {
                format!("t={} broker killed (SIGKILL), started again {} later", secs(*at_ms), secs(*for_ms))
            }
            Disruption::Backend { at_ms, relay } => {
                format!("t={} {}'s database backends terminated", secs(*at_ms), blackbox::relay_name(*relay))
            }
            Disruption::Cut { at_ms, relay } => format!(
                "t={} {}'s broker connections partitioned (nothing forwarded), then cut",
                secs(*at_ms),
                blackbox::relay_name(*relay)
            ),
        }
    }
}

fn secs(ms: u64) -> String {
    format!("{:.2} s", ms as f64 / 1000.0)
}

/// The faults of a run, drawn from its seed: two kills, two pauses past the lease and one broker
/// outage at most, inside the first `fault_span_ms`.
pub fn schedule(options: &Options) -> Vec<Disruption> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(options.seed);
    let mut at = || 300 + rng.gen_range(0..options.fault_span_ms.max(1));
    let mut faults = Vec::new();
    if options.faults.kill {
        for _ in 0..2 {
            let at_ms = at();
            faults.push(Disruption::Kill { at_ms, relay: 0 });
        }
    }
    if options.faults.pause {
        for _ in 0..2 {
            let at_ms = at();
            faults.push(Disruption::Pause { at_ms, relay: 0, for_ms: 0 });
        }
    }
    // The run kills only a broker it started itself: not the machine's RabbitMQ.
    if options.faults.outage && options.broker == Broker::Nats {
        let at_ms = at();
        faults.push(Disruption::Outage { at_ms, for_ms: 0 });
    }
    // Relays and lengths from the same seed, after the times (so the times do not depend on them).
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(options.seed ^ 0x5eed);
    for f in &mut faults {
        match f {
            Disruption::Kill { relay, .. } => *relay = rng.gen_range(0..options.relays),
            Disruption::Pause { relay, for_ms, .. } => {
                *relay = rng.gen_range(0..options.relays);
                // Past the lease: 1.3 to 2 leases.
                *for_ms = options.lease_ms * 13 / 10 + rng.gen_range(0..=options.lease_ms * 7 / 10);
            }
            Disruption::Outage { for_ms, .. } => *for_ms = 300 + rng.gen_range(0..500),
            Disruption::Backend { .. } | Disruption::Cut { .. } => {}
        }
    }
    faults.sort_by_key(Disruption::at);
    faults
}

/// The longest pause the schedule can hold (a paused relay may publish that much later).
pub fn longest_pause(options: &Options) -> u64 {
    if options.faults.pause {
        options.lease_ms * 2
    } else {
        0
    }
}

/// What the run found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    pub schema: String,
    pub design: String,
    pub broker: Broker,
    pub seed: u64,
    pub relays: u16,
    pub messages: u32,
    pub lease_ms: u64,
    pub backoff_ms: [u64; 2],
    pub poll_ms: u64,
    pub max_attempts: u32,
    /// The broker's deduplication window; none for a broker that does not deduplicate.
    pub duplicate_window_ms: Option<u64>,
    /// The design's longest span between a message's first and last publication, in ms, or why
    /// it has none; and the longest pause the faults may add.
    pub publication_span_ms: Option<u64>,
    pub publication_span_unbounded: Option<String>,
    pub longest_pause_ms: u64,
    /// The faults injected from outside, in words, and those the relays injected themselves.
    pub faults: Vec<String>,
    pub relay_faults: Vec<String>,
    pub seconds: f64,
    /// Rows PUBLISHED per second, end to end.
    pub messages_per_second: f64,
    pub events: usize,
    /// The oracle's verdict on the history: `None` accepted, else its first divergence in words.
    pub oracle: Option<String>,
    /// Whether the oracle's findings fail the run: not where all it found is S11, the false
    /// failure, which a design that recovers rows from silent holders breaks by itself — reported,
    /// failing nothing, as in `check` and `sim` (decision 77).
    pub oracle_fails_the_run: bool,
    /// Every property (S1–S11) and conformance finding (C1–C8) the oracle found, going on after
    /// each divergence.
    pub broken: Vec<String>,
    /// Divergences whose finding depends on how unknown outcomes resolved: "S4 or S2 (line
    /// 942)". Not in `broken`: the history breaks one of them, which one it does not show.
    pub either: Vec<String>,
    pub published: usize,
    /// How many rows ended in each status.
    pub ended: std::collections::BTreeMap<String, usize>,
    /// Messages the consumer received whose row did not end PUBLISHED (an acknowledgement lost
    /// after the broker stored it, then the budget spent): at least once, without the outbox
    /// knowing.
    pub delivered_not_published: Vec<String>,
    /// Rows that were not terminal when the run ended.
    pub not_terminal: Vec<String>,
    /// PUBLISHED rows the consumer never received (S5 end to end).
    pub published_not_delivered: Vec<String>,
    pub deliveries: usize,
    /// Every delivery beyond a message's first, named.
    pub extra_deliveries: Vec<ExtraDelivery>,
    /// Publications the broker answered as duplicates (caught by its window).
    pub deduplicated_by_broker: Vec<Deduplicated>,
    /// Publications the consumer received a copy of that no relay lived to log.
    pub unlogged_copies: Vec<String>,
    /// Where the history was written (always with --history; else where a check failed).
    pub history: Option<String>,
    /// The user's relay command (`e2e --relay`); none for the run's own relays.
    pub relay_command: Option<String>,
    /// Rows left waiting with their budget spent, which no claim takes again (L1).
    pub stuck: Vec<String>,
    /// Messages the broker stored more copies of than the attempt budget allows (S3 by the
    /// copies, a lower bound on the publications: `e2e --relay`).
    pub over_budget: Vec<String>,
    /// What the run could not observe, and so did not judge.
    pub not_judged: Vec<String>,
    /// The command that runs the same schedule again (`e2e --relay`).
    pub replay: Option<String>,
    /// The consumer deduplicates by the message id (`--consumer-deduplicates`): second copies
    /// are named and dropped, not a failure.
    pub consumer_deduplicates: bool,
}

/// A delivery beyond a message's first.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExtraDelivery {
    pub message: String,
    /// `duplicate_effect` (a second copy the broker stored) or `redelivery` (the same copy again).
    pub kind: String,
    /// Which copy (see [`Delivery::copy`]) and the publication that sent it, where known.
    pub copy: String,
    pub publication: Option<String>,
    pub stored_ms: u64,
    /// For a second copy: when the first copy was stored, and the gap.
    pub first_stored_ms: Option<u64>,
    pub gap_ms: Option<u64>,
    /// The message's publications, in words ("r0002 at t=1.78 s: timeout (connection cut)").
    pub publications: Vec<String>,
    pub words: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Deduplicated {
    pub message: String,
    pub relay: String,
    pub at_ms: u64,
    /// After the message's first stored copy.
    pub after_first_ms: Option<u64>,
}

impl RunReport {
    /// Every check passed: the oracle accepts the history, every message ended terminal, every
    /// PUBLISHED one was delivered, and no message took effect twice.
    pub fn passed(&self) -> bool {
        !self.oracle_fails_the_run
            && self.not_terminal.is_empty()
            && self.published_not_delivered.is_empty()
            && (self.duplicate_effects() == 0 || self.consumer_deduplicates)
            && self.stuck.is_empty()
            && self.over_budget.is_empty()
    }

    pub fn duplicate_effects(&self) -> usize {
        self.extra_deliveries.iter().filter(|d| d.kind == "duplicate_effect").count()
    }
}

/// Everything the run started, undone when it ends (or is interrupted).
struct Run {
    dir: PathBuf,
    children: Arc<Mutex<Vec<u32>>>,
    _interrupt: crate::cleanup::Registered,
}

impl Run {
    fn new(dir: PathBuf) -> Result<Run, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let children: Arc<Mutex<Vec<u32>>> = Arc::default();
        let (pids, folder) = (children.clone(), dir.clone());
        let interrupt = crate::cleanup::on_interrupt(move || {
            for pid in pids.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                // SAFETY: kill has no preconditions; a pid of ours, still a child until waited.
                unsafe {
                    libc::kill(*pid as i32, libc::SIGKILL);
                }
            }
            let _ = std::fs::remove_dir_all(&folder);
        });
        Ok(Run { dir, children, _interrupt: interrupt })
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The broker of a run: a NATS server the run started, or the run's queue on the machine's
/// RabbitMQ (deleted when the run ends, or is interrupted).
enum BrokerRun {
    Nats(nats::NatsServer),
    // Boxed: the RabbitMQ connection is large beside NATS's server handle (clippy's large_enum_variant).
    Rabbit { rabbit: Box<rabbitmq::Rabbit>, queue: String, _interrupt: crate::cleanup::Registered },
}

impl BrokerRun {
    fn url(&self, rabbitmq_url: &str) -> String {
        match self {
            BrokerRun::Nats(server) => server.url(),
            BrokerRun::Rabbit { .. } => rabbitmq_url.to_string(),
        }
    }
}

/// Removes the folders of runs whose process is gone (a run killed outright leaves its folder).
fn remove_stale_runs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("outbox-check-e2e-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only asks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A relay process and how often it was started.
struct RelayProcess {
    child: Child,
    incarnation: u32,
    paused_until: Option<std::time::Instant>,
}

/// A relay never outlives its run's handle on it: a run that ends early with an error (exit 2)
/// kills what it started before its scratch schema is dropped — a relay left paused inside a
/// transaction would hold that drop for ever. (An exited child is not signalled again.)
impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the whole thing; `progress` gets a line now and then. An error is the environment's
/// (exit 2): a server that is not there, a design the run cannot drive.
pub fn run(options: &Options, progress: &dyn Fn(&str)) -> Result<RunReport, String> {
    let policy = {
        let mut p = options.design.policy();
        p.backoff = crate::core::policy::Backoff {
            base: Duration(options.backoff_base_ms),
            cap: Duration(options.backoff_cap_ms),
            ..p.backoff
        };
        p
    };
    if crate::store::sql::Table::of(&policy) != crate::store::sql::Table::MessagingOutbox
        || policy.token_kind != crate::core::policy::TokenKind::Counter
        || !crate::store::bind::ours_cover(&policy)
    {
        return Err(format!(
            "e2e drives the SQL outbox-check generates for the messaging_outbox table (counter tokens); {} is not such a design",
            options.design.name()
        ));
    }
    // The database first: a server that is not there is found before anything starts.
    let mut store = PgStore::connect(&options.database_url, false, policy)
        .map_err(|e| format!("PostgreSQL at {}: {e}", options.database_url))?;
    let base = std::env::temp_dir();
    remove_stale_runs(&base);
    let run = Run::new(base.join(format!("outbox-check-e2e-{}-{}", std::process::id(), options.seed)))?;
    let runtime = nats::runtime();
    // The JetStream context spawns its acknowledgement task on the current runtime.
    let _entered = runtime.enter();
    let queue = format!("outbox-check-e2e-{}-{}", std::process::id(), options.seed);
    let mut broker = start_broker(options, &run, &runtime, &queue)?;

    store
        .scratch()
        .client()
        .batch_execute("CREATE SEQUENCE outbox_check_order")
        .map_err(|e| format!("PostgreSQL: {e}"))?;
    let schema = store.scratch().schema().to_string();
    let started = std::time::Instant::now();
    let epoch_ms = unix_ms();
    let mut history: Vec<(i64, u64, serde_json::Value)> = Vec::new();
    // The application's enqueues: with faults on, a tenth at the start and the rest at a steady
    // pace through the fault window, so the faults meet relays at work; without, all at once.
    let faulty = !options.faults.names().is_empty();
    let upfront = if faulty { options.messages.div_ceil(10) } else { options.messages };
    let enqueue_at = |n: u32| -> u64 {
        if n < upfront {
            0
        } else {
            u64::from(n - upfront) * options.fault_span_ms / u64::from((options.messages - upfront).max(1))
        }
    };
    let mut enqueued = 0u32;
    let enqueue =
        |store: &mut PgStore, history: &mut Vec<(i64, u64, serde_json::Value)>, n: u32| -> Result<bool, String> {
            let req = EnqueueRequest {
                tenant_id: TenantId(0),
                aggregate_id: AggregateId(n),
                expected_version: 0,
                message_id: MessageId(n),
                now: Instant(now_ms(epoch_ms)),
            };
            // Stamped inside its transaction, which no claim overlaps: its place in commit order.
            // Not yet when a paused relay holds the table: the loop resumes what is due first.
            let Some((_, stamp)) = store
                .enqueue_stamped(&req, crate::store::postgres::COMMIT_STAMP)
                .map_err(|e| format!("PostgreSQL: {e}"))?
            else {
                return Ok(false);
            };
            let event = crate::trace::Event::Enqueue {
                tenant: tenant_name(TenantId(0)),
                aggregate: aggregate_name(AggregateId(n)),
                expected_version: 0,
                message: message_name(MessageId(n)),
                now: req.now.0,
                result: "applied".into(),
            };
            history.push((2 * stamp, 0, serde_json::to_value(&event).expect("JSON of plain values")));
            Ok(true)
        };
    while enqueued < upfront {
        if enqueue(&mut store, &mut history, enqueued)? {
            enqueued += 1;
        }
    }

    // The consumer: every delivery, recorded and acknowledged.
    let deliveries: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let consuming = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let consumer = {
        let (kind, url, queue, deliveries, consuming) =
            (options.broker, broker.url(&options.rabbitmq_url), queue.clone(), deliveries.clone(), consuming.clone());
        std::thread::spawn(move || match kind {
            Broker::Nats => consume(&url, epoch_ms, &deliveries, &consuming),
            Broker::Rabbitmq => consume_rabbit(&url, &queue, epoch_ms, &deliveries, &consuming),
        })
    };

    let stop = run.dir.join("stop");
    let broker_url = broker.url(&options.rabbitmq_url);
    let setup = |relay: u16, incarnation: u32| RelaySetup {
        relay,
        broker: options.broker,
        broker_url: broker_url.clone(),
        queue: queue.clone(),
        policy,
        database_url: options.database_url.clone(),
        schema: schema.clone(),
        lease_ms: options.lease_ms,
        poll_ms: options.poll_ms,
        batch: options.batch,
        max_attempts: options.max_attempts,
        epoch_ms,
        log: run.dir.join(format!("relay-{relay}.jsonl")),
        stop: stop.clone(),
        seed: options.seed,
        incarnation,
        cut_before_ack: if options.faults.cut { 0.05 } else { 0.0 },
        kill_backend: if options.faults.backend { 0.03 } else { 0.0 },
        // Less than the lease: a relay finishes its publication within its lease.
        publish_timeout_ms: (options.lease_ms / 2).max(100),
    };
    let spawn = |setup: &RelaySetup| -> Result<Child, String> {
        let file = run.dir.join(format!("relay-{}-{}.json", setup.relay, setup.incarnation));
        std::fs::write(&file, serde_json::to_string(setup).expect("JSON of plain values"))
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let err = std::fs::File::create(run.dir.join(format!("relay-{}-{}.err", setup.relay, setup.incarnation)))
            .map_err(|e| e.to_string())?;
        let mut command = Command::new(exe);
        command.arg("e2e-relay").arg(&file).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
        die_with_parent(&mut command);
        let child = command.spawn().map_err(|e| format!("cannot start a relay process: {e}"))?;
        run.children.lock().unwrap_or_else(|p| p.into_inner()).push(child.id());
        Ok(child)
    };
    let mut relays: Vec<RelayProcess> = Vec::new();
    for r in 0..options.relays {
        relays.push(RelayProcess { child: spawn(&setup(r, 0))?, incarnation: 0, paused_until: None });
    }

    // The faults from outside, in time; the reaper, if the design has one; until every row is
    // terminal and every fault is over, or the deadline.
    let plan = schedule(options);
    let mut next_fault = 0;
    let mut outage_until: Option<std::time::Instant> = None;
    let mut checked = std::time::Instant::now();
    let deadline = std::time::Duration::from_millis(options.deadline_ms);
    let ms = |i: std::time::Instant| i.duration_since(started).as_millis() as u64;
    loop {
        let now = std::time::Instant::now();
        while next_fault < plan.len() && plan[next_fault].at() <= ms(now) {
            let respawn = |r, i| spawn(&setup(r, i));
            start(&plan[next_fault], now, &mut store, &schema, &mut relays, &respawn, &mut broker, &mut outage_until)?;
            next_fault += 1;
        }
        end_due(now, &mut relays, &mut broker, &run, &mut outage_until)?;
        while enqueued < options.messages && enqueue_at(enqueued) <= ms(now) {
            if !enqueue(&mut store, &mut history, enqueued)? {
                break;
            }
            enqueued += 1;
        }
        if policy.relay.reaper {
            if let Some(event) = reap(&mut store, epoch_ms, options.max_attempts)? {
                history.push(event);
            }
        }
        if now.duration_since(checked) >= std::time::Duration::from_millis(200) {
            checked = now;
            let rows = store.rows().map_err(|e| format!("PostgreSQL: {e}"))?;
            let remaining =
                rows.iter().filter(|r| !r.status.is_terminal()).count() + (options.messages - enqueued) as usize;
            let faults_over =
                next_fault == plan.len() && outage_until.is_none() && relays.iter().all(|p| p.paused_until.is_none());
            progress(&format!(
                "{} of {} messages open, {} deliveries, {:.1} s",
                remaining,
                options.messages,
                deliveries.lock().unwrap_or_else(|p| p.into_inner()).len(),
                started.elapsed().as_secs_f64()
            ));
            if (remaining == 0 && faults_over && enqueued == options.messages) || started.elapsed() > deadline {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let elapsed = started.elapsed();

    stop_relays(&stop, &mut relays)?;
    drain(&broker, &runtime, &deliveries);
    consuming.store(false, std::sync::atomic::Ordering::Relaxed);
    let _ = consumer.join();
    let deliveries = std::mem::take(&mut *deliveries.lock().unwrap_or_else(|p| p.into_inner()));
    let rows = store.rows().map_err(|e| format!("PostgreSQL: {e}"))?;
    if let BrokerRun::Rabbit { rabbit, queue, .. } = &broker {
        runtime.block_on(rabbit.delete(queue));
    }
    drop(broker);

    // The history: the relays' logs merged by commit stamp.
    let (publications, relay_faults) = merge_logs(&run.dir, options.relays, &mut history);
    let text = history_text(options, &policy, &history);
    let findings = check_history(options.design, &text)?;
    let observed =
        Observed { plan: &plan, relay_faults, rows: &rows, deliveries: &deliveries, publications: &publications };
    let mut report = run_report(options, &policy, observed, findings, elapsed, history.len());
    if let Some(path) = &options.history {
        std::fs::write(path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        report.history = Some(path.display().to_string());
    } else if !report.passed() {
        let path = base.join(format!("outbox-check-e2e-seed-{}-{}.jsonl", options.seed, std::process::id()));
        if std::fs::write(&path, &text).is_ok() {
            report.history = Some(path.display().to_string());
        }
    }
    drop(store);
    drop(run);
    Ok(report)
}

/// Starts one disruption of the schedule at `now`: a relay killed and started again as its next
/// incarnation (`respawn`), a relay paused (SIGSTOP) until its pause ends, or the run's broker
/// killed until its outage ends.
#[allow(clippy::too_many_arguments)]
fn start(
    disruption: &Disruption,
    now: std::time::Instant,
    store: &mut PgStore,
    schema: &str,
    relays: &mut [RelayProcess],
    respawn: &dyn Fn(u16, u32) -> Result<Child, String>,
    broker: &mut BrokerRun,
    outage_until: &mut Option<std::time::Instant>,
) -> Result<(), String> {
    match disruption {
        Disruption::Kill { relay, .. } => {
            let p = &mut relays[*relay as usize];
            let _ = p.child.kill();
            let _ = p.child.wait();
            // Its database session outlives it until the server notices, still holding the row
            // locks of a claim it was in: the relay starts again only once that session is gone.
            end_session(store, &session_name(schema, *relay, p.incarnation))?;
            p.paused_until = None;
            p.incarnation += 1;
            p.child = respawn(*relay, p.incarnation)?;
        }
        Disruption::Pause { relay, for_ms, .. } => {
            let p = &mut relays[*relay as usize];
            // SAFETY: a child of ours, not yet waited for.
            unsafe {
                libc::kill(p.child.id() as i32, libc::SIGSTOP);
            }
            p.paused_until = Some(now + std::time::Duration::from_millis(*for_ms));
        }
        Disruption::Outage { for_ms, .. } => {
            if let BrokerRun::Nats(server) = broker {
                server.kill();
            }
            *outage_until = Some(now + std::time::Duration::from_millis(*for_ms));
        }
        // The run's own relays cut and terminate their connections themselves.
        Disruption::Backend { .. } | Disruption::Cut { .. } => {}
    }
    Ok(())
}

/// The `application_name` of a relay incarnation's database session in the run's schema.
pub fn session_name(schema: &str, relay: u16, incarnation: u32) -> String {
    format!("oc-e2e {schema} r{relay}.{incarnation}")
}

/// Ends the database session named `name` (a killed relay's) and waits until the server has
/// let it go, with the locks it held.
fn end_session(store: &mut PgStore, name: &str) -> Result<(), String> {
    let client = store.scratch().client();
    let started = std::time::Instant::now();
    loop {
        let left: i64 = client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                &[&name],
            )
            .map_err(|e| format!("PostgreSQL: {e}"))?
            .get(0);
        if left == 0 {
            return Ok(());
        }
        if started.elapsed() > std::time::Duration::from_secs(10) {
            return Err(format!("the session {name} of a killed relay did not end in 10 s"));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Ends what is due at `now`: paused relays go on (SIGCONT), a broker whose outage is over is
/// started again (its process recorded, so the run removes it).
fn end_due(
    now: std::time::Instant,
    relays: &mut [RelayProcess],
    broker: &mut BrokerRun,
    run: &Run,
    outage_until: &mut Option<std::time::Instant>,
) -> Result<(), String> {
    for p in relays.iter_mut() {
        if p.paused_until.is_some_and(|t| t <= now) {
            // SAFETY: a child of ours, not yet waited for.
            unsafe {
                libc::kill(p.child.id() as i32, libc::SIGCONT);
            }
            p.paused_until = None;
        }
    }
    if outage_until.is_some_and(|t| t <= now) {
        if let BrokerRun::Nats(server) = broker {
            server.restart()?;
            if let Some(pid) = server.pid() {
                run.children.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
            }
        }
        *outage_until = None;
    }
    Ok(())
}

/// The run's history in the trace format: a header declaring the design, the relays and how
/// they ran, then every event in commit order.
fn history_text(options: &Options, policy: &Policy, history: &[(i64, u64, serde_json::Value)]) -> String {
    let header = crate::trace::Header {
        backoff_base: Some(policy.backoff.base.0),
        backoff_cap: Some(policy.backoff.cap.0),
        source: Some(format!(
            "outbox-check e2e --seed {}: {} relay processes on PostgreSQL and {}",
            options.seed,
            options.relays,
            options.broker.name()
        )),
        concurrency: Some(crate::trace::Concurrency::SkipLocked),
        relays: Some(
            (0..options.relays)
                .map(|r| owner_name(RelayId(r)))
                .chain(policy.relay.reaper.then(|| "reaper".to_string()))
                .collect(),
        ),
        ..crate::trace::Header::new(options.design.name(), options.max_attempts)
    };
    let mut text = serde_json::to_string(&header).expect("JSON of plain values");
    text.push('\n');
    for (_, _, event) in history {
        text.push_str(&event.to_string());
        text.push('\n');
    }
    text
}

/// What a run observed, for its report.
struct Observed<'a> {
    plan: &'a [Disruption],
    relay_faults: Vec<String>,
    rows: &'a [crate::core::Row],
    deliveries: &'a [Delivery],
    publications: &'a [Publication],
}

/// The run's report: its settings, the faults, the oracle's findings on its history and the
/// consumer's checks of every delivery against the table.
fn run_report(
    options: &Options,
    policy: &Policy,
    observed: Observed<'_>,
    findings: Findings,
    elapsed: std::time::Duration,
    events: usize,
) -> RunReport {
    let Observed { plan, relay_faults, rows, deliveries, publications } = observed;
    let Findings { oracle, oracle_fails_the_run, broken, either } = findings;
    let span = policy.publication_span(Duration(options.lease_ms), options.max_attempts, Duration(options.poll_ms));
    let published: Vec<&crate::core::Row> = rows.iter().filter(|r| r.status == Status::Published).collect();
    let window = (options.broker == Broker::Nats).then_some(options.duplicate_window_ms);
    let named = name_deliveries(deliveries, publications, window);
    RunReport {
        schema: "outbox-check/e2e/v1".into(),
        design: options.design.name().to_string(),
        broker: options.broker,
        seed: options.seed,
        relays: options.relays,
        messages: options.messages,
        lease_ms: options.lease_ms,
        backoff_ms: [options.backoff_base_ms, options.backoff_cap_ms],
        poll_ms: options.poll_ms,
        max_attempts: options.max_attempts,
        duplicate_window_ms: window,
        publication_span_ms: span.ok().map(|s| s.longest.0),
        publication_span_unbounded: span.err().map(str::to_string),
        longest_pause_ms: longest_pause(options),
        faults: plan.iter().map(Disruption::words).collect(),
        relay_faults,
        seconds: elapsed.as_secs_f64(),
        messages_per_second: published.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        events,
        oracle_fails_the_run: oracle.is_some() && oracle_fails_the_run,
        oracle,
        broken,
        either,
        published: published.len(),
        ended: rows.iter().fold(Default::default(), |mut ended, r| {
            *ended.entry(r.status.as_str().to_string()).or_default() += 1;
            ended
        }),
        delivered_not_published: rows
            .iter()
            .filter(|r| {
                r.status != Status::Published && deliveries.iter().any(|d| d.message == message_name(r.message_id))
            })
            .map(|r| format!("{} ({})", message_name(r.message_id), r.status))
            .collect(),
        not_terminal: rows.iter().filter(|r| !r.status.is_terminal()).map(|r| message_name(r.message_id)).collect(),
        published_not_delivered: published
            .iter()
            .map(|r| message_name(r.message_id))
            .filter(|m| !deliveries.iter().any(|d| &d.message == m))
            .collect(),
        deliveries: deliveries.len(),
        extra_deliveries: named.0,
        deduplicated_by_broker: named.1,
        unlogged_copies: named.2,
        history: None,
        relay_command: None,
        stuck: Vec::new(),
        over_budget: Vec::new(),
        not_judged: Vec::new(),
        replay: None,
        consumer_deduplicates: options.consumer_deduplicates,
    }
}

/// Starts the run's broker: a nats-server of its own with the stream, or the run's queue on the
/// machine's RabbitMQ (deleted on interrupt too). Called inside the runtime's context.
fn start_broker(
    options: &Options,
    run: &Run,
    runtime: &tokio::runtime::Runtime,
    queue: &str,
) -> Result<BrokerRun, String> {
    Ok(match options.broker {
        Broker::Nats => {
            let server = nats::NatsServer::start(&options.nats_server, &run.dir)?;
            if let Some(pid) = server.pid() {
                run.children.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
            }
            let client = runtime.block_on(nats::connect(&server.url()))?;
            let js = nats::jetstream(client, std::time::Duration::from_secs(5));
            runtime
                .block_on(nats::create_stream(&js, std::time::Duration::from_millis(options.duplicate_window_ms)))?;
            BrokerRun::Nats(server)
        }
        Broker::Rabbitmq => {
            let rabbit = runtime.block_on(rabbitmq::connect(&options.rabbitmq_url))?;
            runtime.block_on(rabbit.declare(queue))?;
            let (url, name) = (options.rabbitmq_url.clone(), queue.to_string());
            let interrupt = crate::cleanup::on_interrupt(move || {
                nats::runtime().block_on(async {
                    if let Ok(rabbit) = rabbitmq::connect(&url).await {
                        rabbit.delete(&name).await;
                    }
                })
            });
            BrokerRun::Rabbit { rabbit: Box::new(rabbit), queue: queue.to_string(), _interrupt: interrupt }
        }
    })
}

/// Stops the relays: the stop file, a moment to finish their cycle (paused ones continued),
/// then SIGKILL.
fn stop_relays(stop: &Path, relays: &mut [RelayProcess]) -> Result<(), String> {
    std::fs::write(stop, b"").map_err(|e| format!("cannot write {}: {e}", stop.display()))?;
    let stopping = std::time::Instant::now();
    for p in relays.iter_mut() {
        // SAFETY: a child of ours, not yet waited for: the pid is still its own.
        unsafe {
            libc::kill(p.child.id() as i32, libc::SIGCONT);
        }
    }
    for p in relays.iter_mut() {
        while p.child.try_wait().ok().flatten().is_none() && stopping.elapsed() < std::time::Duration::from_secs(3) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    Ok(())
}

impl ProcessFaults {
    /// The faults on, in words.
    pub fn describe(self) -> String {
        let names = self.names();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}
