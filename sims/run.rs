//! One simulated run: nodes, faults, heal, verdict.

use super::profile::{FaultProfile, Peer, Scheduled};
use super::SimConfig;
use madsim::net::rpc::{Deserialize, Request, Serialize};
use madsim::net::{Endpoint, NetSim};
use madsim::runtime::{Handle, NodeHandle, Runtime};
use madsim::time::{sleep, timeout};
use outbox_check::core::{
    AggregateId, Auditor, Breach, ClaimRequest, EnqueueRequest, EnqueueResult, IdempotencyKey, Instant, Lease,
    MessageId, Outbox, Property, Row, Status, Violation, WriteRequest, WriteResult,
};
use outbox_check::oracle;
use outbox_check::relay::{drive, Clocks, PublishOutcome, Reply};
use outbox_check::trace::{self, Event, Outcome, PublishAnswer, WriteReport};
use outbox_check::world::WorldConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration as StdDuration;

const DB: &str = "10.0.0.1:5432";
const BROKER: &str = "10.0.0.2:9092";

fn relay_addr(i: usize) -> SocketAddr {
    format!("10.0.1.{}:7000", i + 1).parse().expect("a literal address")
}

fn ms(value: u64) -> StdDuration {
    StdDuration::from_millis(value)
}

/// A claim statement, as a relay sends it to the database node.
#[derive(Serialize, Deserialize)]
struct ClaimRpc {
    op: u64,
    relay: u16,
    request: ClaimRequest,
}
impl Request for ClaimRpc {
    type Response = Vec<Lease>;
    const ID: u64 = 1;
}

/// A terminal write.
#[derive(Serialize, Deserialize)]
struct WriteRpc {
    op: u64,
    relay: u16,
    request: WriteRequest,
}
impl Request for WriteRpc {
    type Response = WriteResult;
    const ID: u64 = 2;
}

/// A publication to the broker.
#[derive(Serialize, Deserialize)]
struct PublishRpc {
    op: u64,
    relay: u16,
    lease: Lease,
    key: IdempotencyKey,
}
impl Request for PublishRpc {
    type Response = PublishOutcome;
    const ID: u64 = 3;
}

/// What one run counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunStats {
    /// Copies the broker stored beyond a message's first.
    pub duplicates_delivered: u64,
    /// Copies the consumer dropped because it had seen their key.
    pub deduplicated: u64,
    /// Messages whose effect the consumer applied more than once (keys that were not stable).
    pub duplicate_effects: u64,
    /// Terminal writes the database refused as stale.
    pub stale_refused: u64,
    /// Statements whose outcome a relay could not learn.
    pub unknown_outcomes: u64,
    /// Each message's `attempts` at the end.
    pub attempts: Vec<u32>,
    /// Each stored message's enqueue-to-first-store time, in simulated ms.
    pub latency_ms: Vec<u64>,
    /// Each message's final status.
    pub statuses: Vec<Status>,
    /// Simulated ms when the run ended.
    pub ended_ms: u64,
    /// Every row was terminal when the run ended.
    pub settled: bool,
    /// Events in the history.
    pub events: usize,
}

/// The oracle's verdict on the run's history.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum OracleVerdict {
    Accepted,
    Diverged {
        line: usize,
        property: Option<Property>,
        detail: String,
    },
    /// A mixed fleet: the oracle checks one design per history.
    NotChecked,
}

/// The outcome of one seed.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub seed: u64,
    pub fleet: String,
    pub profile: FaultProfile,
    /// Each property broken, once, with the first occurrence in words.
    pub violations: Vec<Violation>,
    pub oracle: OracleVerdict,
    /// FNV-1a of the history's bytes: equal seeds give equal hashes.
    pub history_hash: String,
    pub stats: RunStats,
    #[serde(skip)]
    pub history: String,
}

impl RunResult {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty() || self.oracle_contradicts()
    }

    /// It failed for something `verify` gates on: a property other than S11
    /// ([`outbox_check::core::Property::gated`]), or a contradiction between the checkers.
    pub fn failed_gated(&self) -> bool {
        self.violations.iter().any(|v| v.property.gated()) || self.oracle_contradicts()
    }

    /// The oracle rejected a history the auditor accepted: one of the two checkers is wrong.
    pub fn oracle_contradicts(&self) -> bool {
        self.violations.is_empty() && matches!(self.oracle, OracleVerdict::Diverged { .. })
    }
}

/// Per message, what the broker and its consumer saw.
#[derive(Clone, Debug, Default)]
struct Delivery {
    copies: u64,
    keys: BTreeSet<IdempotencyKey>,
    effects: u64,
    first_stored_ms: Option<u64>,
}

/// The history as the run records it: each statement at the moment it commits, its outcome as
/// the relay learnt it (fixed up when the relay gives up on it).
#[derive(Default)]
struct Recorder {
    events: Vec<Event>,
    /// Ops committed whose outcome the relay has not learnt yet: op → event index.
    pending: BTreeMap<u64, usize>,
    /// Ops the relay gave up on before they reached the database or the broker.
    abandoned: BTreeSet<u64>,
    unknown: u64,
}

impl Recorder {
    fn commit(&mut self, op: u64, event: Event) {
        self.events.push(event);
        let index = self.events.len() - 1;
        if self.abandoned.remove(&op) {
            self.mark_unknown(index);
        } else {
            self.pending.insert(op, index);
        }
    }

    fn learnt(&mut self, op: u64) {
        self.pending.remove(&op);
    }

    /// The relay gave up on `op`; returns whether it had reached its peer.
    fn gave_up(&mut self, op: u64) -> bool {
        match self.pending.remove(&op) {
            Some(index) => {
                self.mark_unknown(index);
                true
            }
            None => {
                self.abandoned.insert(op);
                false
            }
        }
    }

    fn mark_unknown(&mut self, index: usize) {
        self.unknown += 1;
        match &mut self.events[index] {
            Event::Claim { leases, outcome, .. } => {
                leases.clear();
                *outcome = Outcome::Unknown;
            }
            Event::Write { result, .. } => *result = WriteReport::Unknown,
            Event::Publish { answer, .. } => *answer = PublishAnswer::Timeout,
            _ => {}
        }
    }

    /// The run ends: whatever a relay was still waiting for is unknown in the history (but not
    /// counted as a lost reply: the run was cut, nothing was lost).
    fn finish(&mut self) {
        let counted = self.unknown;
        for index in std::mem::take(&mut self.pending).into_values() {
            self.mark_unknown(index);
        }
        self.unknown = counted;
    }
}

/// Everything the nodes share: the database's table, the auditor's ghosts, the broker's store
/// and the recorder. The database and broker nodes own it in the story; the relays reach it only
/// through RPC (and the recorder, which is the test's notebook, not the world).
struct State {
    origin: madsim::time::Instant,
    faults_on: bool,
    outbox: Outbox,
    auditor: Auditor,
    violations: Vec<Violation>,
    recorder: Recorder,
    deliveries: Vec<Delivery>,
    enqueued_ms: Vec<u64>,
    enqueued: u32,
    stale_refused: u64,
    next_op: u64,
    ended_ms: u64,
    /// Relays killed or paused by the schedule, and live partitions per (relay, peer).
    killed: Vec<bool>,
    paused: Vec<bool>,
    partitions: BTreeMap<(u16, u8), u32>,
}

impl State {
    fn now_ms(&self) -> u64 {
        madsim::time::Instant::now().duration_since(self.origin).as_millis() as u64
    }

    fn op(&mut self) -> u64 {
        self.next_op += 1;
        self.next_op
    }

    fn audit(&mut self) {
        for violation in self.auditor.take_violations() {
            if !self.violations.iter().any(|v| v.property == violation.property) {
                self.violations.push(violation);
            }
        }
    }
}

struct Setup {
    sim: SimConfig,
    world: WorldConfig,
    profile: FaultProfile,
}

#[derive(Clone)]
struct Shared {
    setup: Arc<Setup>,
    state: Arc<Mutex<State>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Only a panic elsewhere poisons it, and a panic ends the run anyway.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn faults_on(&self) -> bool {
        self.lock().faults_on
    }
}

fn names(relay: u16) -> String {
    format!("r{relay}")
}
fn tenant(t: outbox_check::core::TenantId) -> String {
    format!("tenant{}", t.0)
}
fn message(m: MessageId) -> String {
    format!("m{}", m.0)
}

// ---------------------------------------------------------------------------------------------
// The database node.

/// The clocks a statement runs by: the database's own reading, and the relay's (`asked`, the
/// `now` it sent); the design says which one each statement reads.
fn statement_clocks(s: &State, asked: Instant) -> outbox_check::relay::Clocks {
    outbox_check::relay::Clocks { database: Instant(s.now_ms()), relay: asked }
}

fn db_claim(shared: &Shared, rpc: ClaimRpc) -> Vec<Lease> {
    let mut s = shared.lock();
    let policy = shared.setup.world.policy(rpc.relay as usize);
    let mut request = rpc.request;
    let clocks = statement_clocks(&s, request.now);
    let true_now = clocks.database;
    request.now = clocks.now_for(&policy);
    let State { outbox, auditor, .. } = &mut *s;
    let leases = auditor.claim(outbox, &policy, &request, true_now).unwrap_or_default();
    s.audit();
    let event = Event::claim_of(names(rpc.relay), tenant(request.tenant_id), &request, &leases, message);
    s.recorder.commit(rpc.op, event);
    leases
}

fn db_write(shared: &Shared, rpc: WriteRpc) -> WriteResult {
    let mut s = shared.lock();
    let policy = shared.setup.world.policy(rpc.relay as usize);
    let mut request = rpc.request;
    let clocks = statement_clocks(&s, request.now);
    let true_now = clocks.database;
    request.now = clocks.now_for_write(&policy);
    let State { outbox, auditor, .. } = &mut *s;
    let Ok(result) = auditor.write_at(outbox, &policy, &request, true_now) else {
        unreachable!("a relay's lease names a row of the table");
    };
    s.audit();
    if matches!(result, WriteResult::Stale { .. }) {
        s.stale_refused += 1;
    }
    let event = Event::write_of(
        names(rpc.relay),
        tenant(request.lease.tenant_id),
        message(request.lease.message_id),
        &request,
        result.into(),
    );
    s.recorder.commit(rpc.op, event);
    result
}

/// Whether the database loses this reply after the commit.
fn lose_reply(shared: &Shared) -> bool {
    shared.faults_on() && madsim::rand::random::<f64>() < shared.setup.profile.db_lost_after
}

async fn database(shared: Shared) {
    let ep = Arc::new(Endpoint::bind(DB).await.expect("the database's address is free"));
    let s = shared.clone();
    ep.add_rpc_handler(move |rpc: ClaimRpc| {
        let s = s.clone();
        async move {
            let leases = db_claim(&s, rpc);
            if lose_reply(&s) {
                std::future::pending::<()>().await;
            }
            leases
        }
    });
    let s = shared.clone();
    ep.add_rpc_handler(move |rpc: WriteRpc| {
        let s = s.clone();
        async move {
            let result = db_write(&s, rpc);
            if lose_reply(&s) {
                std::future::pending::<()>().await;
            }
            result
        }
    });
    if shared.setup.world.has_reaper() {
        let s = shared.clone();
        madsim::task::spawn(async move {
            loop {
                sleep(ms(s.setup.sim.reap_ms)).await;
                let mut st = s.lock();
                let now = st.now_ms();
                let State { outbox, auditor, .. } = &mut *st;
                let reaped = auditor.reap(outbox, Instant(now));
                st.audit();
                if !reaped.is_empty() {
                    st.recorder.events.push(Event::Reap { now, messages: reaped.into_iter().map(message).collect() });
                }
            }
        });
    }
    // The rescuer (designs with `maintenance.job = "rescue-expired"`): every period it reads the
    // first expired lease and moves that row back — in the same statement (fenced by the expiry),
    // or, fenced by the token it read or by id, after a pause in which a relay may claim it.
    if let Some(fence) = shared.setup.world.rescue() {
        let after = shared.setup.world.rescues_after_expiry();
        let s = shared.clone();
        madsim::task::spawn(async move {
            loop {
                sleep(ms(s.setup.sim.reap_ms)).await;
                let read = {
                    let st = s.lock();
                    let now = st.now_ms();
                    st.outbox
                        .rescuable_after(Instant(now), after)
                        .map(|row| Lease::of_row(row, st.auditor.ghost(row.message_id).map_or(0, |g| g.claims)))
                };
                let Some(lease) = read else { continue };
                if fence != outbox_check::core::ReleaseFence::Expired {
                    sleep(ms(1 + madsim::rand::random::<u64>() % s.setup.sim.reap_ms.max(1))).await;
                }
                let mut st = s.lock();
                let now = st.now_ms();
                let attempts = st.outbox.row(lease.message_id).map_or(0, |row| row.attempts);
                let request = s.setup.world.policy(0).rescue_request(
                    lease,
                    fence,
                    attempts,
                    s.setup.world.max_attempts,
                    Instant(now),
                );
                let to = request.to;
                let State { outbox, auditor, .. } = &mut *st;
                let Ok(result) = auditor.release(outbox, &request) else { continue };
                st.audit();
                st.recorder.events.push(Event::rescue_of(message(lease.message_id), &request, to, result));
            }
        });
    }
    // The application: message n is enqueued at n × window / messages.
    let messages = shared.setup.sim.messages;
    for n in 0..messages {
        let at = shared.setup.sim.enqueue_window_ms * u64::from(n) / u64::from(messages.max(1));
        let now = shared.lock().now_ms();
        if at > now {
            sleep(ms(at - now)).await;
        }
        let mut st = shared.lock();
        let now = st.now_ms();
        // Two messages per aggregate, as in the model's world.
        let aggregate = AggregateId(n / 2);
        let tenant_id = shared.setup.world.message_tenant(n);
        let request = EnqueueRequest {
            tenant_id,
            aggregate_id: aggregate,
            expected_version: st.outbox.aggregate_version(tenant_id, aggregate),
            message_id: MessageId(n),
            now: Instant(now),
        };
        let State { outbox, auditor, .. } = &mut *st;
        let Ok(result) = auditor.enqueue(outbox, &request) else { continue };
        st.audit();
        st.enqueued += 1;
        st.enqueued_ms[n as usize] = now;
        st.recorder.events.push(Event::Enqueue {
            tenant: tenant(tenant_id),
            aggregate: format!("agg{}", aggregate.0),
            expected_version: request.expected_version,
            message: message(request.message_id),
            now,
            result: match result {
                EnqueueResult::Applied { .. } => "applied".into(),
                EnqueueResult::Stale { .. } => "stale".into(),
            },
        });
    }
    std::future::pending::<()>().await;
}

// ---------------------------------------------------------------------------------------------
// The broker node and its consumer.

/// What the broker does with a publication: the answer (None: none is sent) and copies stored.
fn broker_fate(p: &FaultProfile, faults_on: bool, now: u64) -> (Option<PublishOutcome>, u64) {
    if p.permanent_outage {
        return (Some(PublishOutcome::RetryableFailure), 0);
    }
    if !faults_on {
        return (Some(PublishOutcome::Ack), 1);
    }
    if p.broker_outage.is_some_and(|(from, to)| (from..to).contains(&now)) {
        return (Some(PublishOutcome::RetryableFailure), 0);
    }
    let roll = madsim::rand::random::<f64>();
    let mut edge = 0.0;
    for (rate, fate) in [
        (p.broker_drop, (None, 0)),
        (p.broker_lost_ack, (None, 1)),
        (p.broker_reject, (Some(PublishOutcome::Rejected), 0)),
        (p.broker_unavailable, (Some(PublishOutcome::RetryableFailure), 0)),
        (p.broker_duplicate, (Some(PublishOutcome::Ack), 2)),
    ] {
        edge += rate;
        if roll < edge {
            return fate;
        }
    }
    (Some(PublishOutcome::Ack), 1)
}

fn broker_publish(shared: &Shared, rpc: PublishRpc) -> Option<PublishOutcome> {
    let mut s = shared.lock();
    if s.recorder.abandoned.remove(&rpc.op) {
        // The relay gave up before this arrived: as if lost in flight (a late store is the
        // lost-ack fault's business).
        return None;
    }
    let now = s.now_ms();
    let (answer, copies) = broker_fate(&shared.setup.profile, s.faults_on, now);
    let State { outbox, auditor, .. } = &mut *s;
    auditor.published(outbox, &rpc.lease, rpc.key, copies > 0);
    s.audit();
    let delivery = &mut s.deliveries[rpc.lease.message_id.0 as usize];
    for _ in 0..copies {
        delivery.copies += 1;
        delivery.first_stored_ms.get_or_insert(now);
        if !delivery.keys.insert(rpc.key) {
            continue;
        }
        delivery.effects += 1;
    }
    s.recorder.commit(
        rpc.op,
        Event::Publish {
            relay: names(rpc.relay),
            message: message(rpc.lease.message_id),
            key: key_name(rpc.key),
            answer: match answer {
                Some(PublishOutcome::Ack) => PublishAnswer::Ack,
                Some(PublishOutcome::RetryableFailure) => PublishAnswer::Unavailable,
                Some(PublishOutcome::Rejected) => PublishAnswer::Rejected,
                Some(PublishOutcome::Timeout) | None => PublishAnswer::Timeout,
            },
            stored: Some(copies > 0),
            token: Some(rpc.lease.token.0.to_string()),
        },
    );
    answer
}

fn key_name(key: IdempotencyKey) -> String {
    match key {
        IdempotencyKey::Message { message_id } => message(message_id),
        IdempotencyKey::Other { value } => format!("key-{value:x}"),
    }
}

async fn broker(shared: Shared) {
    let ep = Arc::new(Endpoint::bind(BROKER).await.expect("the broker's address is free"));
    ep.add_rpc_handler(move |rpc: PublishRpc| {
        let s = shared.clone();
        async move {
            match broker_publish(&s, rpc) {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        }
    });
    std::future::pending::<()>().await;
}

// ---------------------------------------------------------------------------------------------
// A relay node: the sans-IO cycle through async adapters.

async fn call<R: Request>(shared: &Shared, ep: &Endpoint, to: &str, op: u64, rpc: R) -> Option<R::Response> {
    let addr: SocketAddr = to.parse().expect("a literal address");
    match timeout(ms(shared.setup.sim.timeout_ms), ep.call(addr, rpc)).await {
        Ok(Ok(response)) => {
            shared.lock().recorder.learnt(op);
            Some(response)
        }
        _ => None,
    }
}

/// One relay's database and broker in the simulation: each effect is an RPC to the database or
/// broker node, and may go unanswered.
struct SimEffects<'a> {
    shared: &'a Shared,
    ep: &'a Endpoint,
    relay: u16,
    skew: i64,
}

impl outbox_check::relay::Effects for SimEffects<'_> {
    type Error = std::convert::Infallible;

    fn clocks(&mut self) -> Clocks {
        let now = self.shared.lock().now_ms();
        Clocks { database: Instant(now), relay: Instant(now.saturating_add_signed(self.skew)) }
    }

    async fn claim(&mut self, request: ClaimRequest) -> Result<Reply, Self::Error> {
        let (shared, relay) = (self.shared, self.relay);
        let op = shared.lock().op();
        Ok(match db_statement(shared, self.ep, op, ClaimRpc { op, relay, request }).await {
            Some(leases) => Reply::Claimed(leases),
            None => Reply::ConnectionLost,
        })
    }

    async fn publish(&mut self, lease: Lease, key: IdempotencyKey) -> Result<PublishOutcome, Self::Error> {
        let (shared, relay) = (self.shared, self.relay);
        let op = shared.lock().op();
        Ok(match call(shared, self.ep, BROKER, op, PublishRpc { op, relay, lease, key }).await {
            Some(outcome) => outcome,
            None => {
                gave_up_publish(shared, op, relay, &lease, key);
                PublishOutcome::Timeout
            }
        })
    }

    async fn write(&mut self, request: WriteRequest) -> Result<Reply, Self::Error> {
        let (shared, relay) = (self.shared, self.relay);
        let op = shared.lock().op();
        Ok(match db_statement(shared, self.ep, op, WriteRpc { op, relay, request }).await {
            Some(result) => Reply::Written(result),
            None => Reply::ConnectionLost,
        })
    }
}

async fn relay(shared: Shared, index: usize) {
    let Ok(ep) = Endpoint::bind(relay_addr(index)).await else { return };
    let config = shared.setup.world.relay_config(index);
    let mut effects =
        SimEffects { shared: &shared, ep: &ep, relay: index as u16, skew: shared.setup.profile.skew[index] };
    let mut busy = false;
    // The relay process's own retry timer (`retry.timer = "per-process"`): a crash restarts
    // this task, and with it the timer.
    let mut timer = None;
    loop {
        let poll = shared.setup.sim.poll_ms;
        let wait = if busy { 5 } else { poll + madsim::rand::random::<u64>() % poll };
        sleep(ms(wait)).await;
        let Ok(claimed) = drive(&config, &mut timer, &mut effects).await;
        busy = claimed as u32 == config.batch;
    }
}

/// A statement on the database connection: may die before it is sent (nothing runs), may go
/// unanswered (it may have committed).
async fn db_statement<R: Request>(shared: &Shared, ep: &Endpoint, op: u64, rpc: R) -> Option<R::Response> {
    if shared.faults_on() && madsim::rand::random::<f64>() < shared.setup.profile.db_lost_before {
        // Nothing was sent, so nothing can arrive late: the op needs no bookkeeping.
        sleep(ms(shared.setup.sim.timeout_ms)).await;
        return None;
    }
    let response = call(shared, ep, DB, op, rpc).await;
    if response.is_none() {
        shared.lock().recorder.gave_up(op);
    }
    response
}

fn gave_up_publish(shared: &Shared, op: u64, relay: u16, lease: &Lease, key: IdempotencyKey) {
    let mut s = shared.lock();
    if s.recorder.gave_up(op) {
        return;
    }
    // It never reached the broker: a publication that stored nothing, as the relay logs it.
    let State { outbox, auditor, .. } = &mut *s;
    auditor.published(outbox, lease, key, false);
    s.audit();
    s.recorder.events.push(Event::Publish {
        relay: names(relay),
        message: message(lease.message_id),
        key: key_name(key),
        answer: PublishAnswer::Timeout,
        stored: Some(false),
        token: Some(lease.token.0.to_string()),
    });
    // `op` stays abandoned: a copy still in flight is dropped on arrival.
}

// ---------------------------------------------------------------------------------------------
// The supervisor: faults, heal, verdict.

fn partition(shared: &Shared, nodes: &Nodes, relay: u16, peer: Peer, on: bool) {
    let net = NetSim::current();
    let key = (relay, peer as u8);
    let mut s = shared.lock();
    let count = s.partitions.entry(key).or_insert(0);
    if on {
        *count += 1;
    } else if *count > 0 {
        *count -= 1;
    } else {
        return;
    }
    let relay_node = nodes.relays[relay as usize];
    let peer_node = match peer {
        Peer::Database => nodes.database,
        Peer::Broker => nodes.broker,
    };
    if on && *count == 1 {
        net.clog_link(relay_node, peer_node);
        net.clog_link(peer_node, relay_node);
    } else if !on && *count == 0 {
        net.unclog_link(relay_node, peer_node);
        net.unclog_link(peer_node, relay_node);
    }
}

#[derive(Clone)]
struct Nodes {
    database: madsim::task::NodeId,
    broker: madsim::task::NodeId,
    relays: Vec<madsim::task::NodeId>,
}

fn inject(shared: &Shared, nodes: &Nodes, fault: Scheduled) {
    let handle = Handle::current();
    let record = |s: &mut State, kind: String| s.recorder.events.push(Event::Fault { kind });
    match fault {
        Scheduled::Kill { relay, for_ms, .. } => {
            let mut s = shared.lock();
            if !s.faults_on || s.killed[relay as usize] || s.paused[relay as usize] {
                return;
            }
            s.killed[relay as usize] = true;
            record(&mut s, format!("r{relay} killed for {for_ms} ms"));
            drop(s);
            handle.kill(nodes.relays[relay as usize]);
        }
        Scheduled::Pause { relay, for_ms, .. } => {
            let mut s = shared.lock();
            if !s.faults_on || s.killed[relay as usize] || s.paused[relay as usize] {
                return;
            }
            s.paused[relay as usize] = true;
            record(&mut s, format!("r{relay} paused for {for_ms} ms"));
            drop(s);
            handle.pause(nodes.relays[relay as usize]);
        }
        Scheduled::Partition { relay, peer, for_ms, .. } => {
            if !shared.faults_on() {
                return;
            }
            let what = format!(
                "r{relay} cut off from the {} for {for_ms} ms",
                if peer == Peer::Database { "database" } else { "broker" }
            );
            record(&mut shared.lock(), what);
            partition(shared, nodes, relay, peer, true);
        }
    }
}

/// Ends a fault (when the heal has not already).
fn lift(shared: &Shared, nodes: &Nodes, fault: Scheduled) {
    let handle = Handle::current();
    match fault {
        Scheduled::Kill { relay, .. } => {
            let mut s = shared.lock();
            if std::mem::take(&mut s.killed[relay as usize]) {
                drop(s);
                handle.restart(nodes.relays[relay as usize]);
            }
        }
        Scheduled::Pause { relay, .. } => {
            let mut s = shared.lock();
            if std::mem::take(&mut s.paused[relay as usize]) {
                drop(s);
                handle.resume(nodes.relays[relay as usize]);
            }
        }
        Scheduled::Partition { relay, peer, .. } => partition(shared, nodes, relay, peer, false),
    }
}

fn heal(shared: &Shared, nodes: &Nodes) {
    let handle = Handle::current();
    let mut s = shared.lock();
    s.faults_on = false;
    s.recorder.events.push(Event::Fault { kind: "faults stop: heal".into() });
    let killed = std::mem::take(&mut s.killed);
    let paused = std::mem::take(&mut s.paused);
    let partitions = std::mem::take(&mut s.partitions);
    let relays = killed.len();
    s.killed = vec![false; relays];
    s.paused = vec![false; relays];
    drop(s);
    for (i, node) in nodes.relays.iter().enumerate() {
        if killed[i] {
            handle.restart(*node);
        }
        if paused[i] {
            handle.resume(*node);
        }
    }
    let net = NetSim::current();
    for ((relay, _), count) in partitions {
        if count > 0 {
            let r = nodes.relays[relay as usize];
            for peer in [nodes.database, nodes.broker] {
                net.unclog_link(r, peer);
                net.unclog_link(peer, r);
            }
        }
    }
}

fn settled(shared: &Shared) -> bool {
    let s = shared.lock();
    s.enqueued == shared.setup.sim.messages && s.outbox.rows().iter().all(|r| r.status.is_terminal())
}

/// Runs one seed and checks it.
pub fn run(config: &SimConfig, seed: u64) -> RunResult {
    let profile = FaultProfile::draw(seed, config);
    run_with_profile(config, seed, profile)
}

/// Runs one seed under a given profile (a quiet one, say).
pub fn run_with_profile(config: &SimConfig, seed: u64, profile: FaultProfile) -> RunResult {
    let world = config.world();
    let setup = Arc::new(Setup { sim: config.clone(), world, profile: profile.clone() });
    let runtime = Runtime::with_seed_and_config(seed, madsim::Config::default());
    let shared = runtime.block_on(async move { simulate(setup).await });
    let mut s = shared.lock();
    s.recorder.finish();
    verdict(config, seed, profile, &shared.setup.world, &mut s)
}

async fn simulate(setup: Arc<Setup>) -> Shared {
    let relays = setup.sim.designs.len();
    let state = State {
        origin: madsim::time::Instant::now(),
        faults_on: true,
        outbox: Outbox::new(),
        auditor: Auditor::new(setup.sim.max_attempts),
        violations: Vec::new(),
        recorder: Recorder::default(),
        deliveries: vec![Delivery::default(); setup.sim.messages as usize],
        enqueued_ms: vec![0; setup.sim.messages as usize],
        enqueued: 0,
        stale_refused: 0,
        next_op: 0,
        ended_ms: 0,
        killed: vec![false; relays],
        paused: vec![false; relays],
        partitions: BTreeMap::new(),
    };
    let shared = Shared { setup, state: Arc::new(Mutex::new(state)) };
    let handle = Handle::current();
    let node = |name: String, ip: &str| handle.create_node().name(name).ip(ip.parse().expect("a literal address"));
    let s = shared.clone();
    let database: NodeHandle = node("database".into(), "10.0.0.1").init(move || database(s.clone())).build();
    let s = shared.clone();
    let broker_node: NodeHandle = node("broker".into(), "10.0.0.2").init(move || broker(s.clone())).build();
    let mut relay_nodes = Vec::new();
    for i in 0..relays {
        let s = shared.clone();
        let ip = format!("10.0.1.{}", i + 1);
        relay_nodes.push(node(format!("relay{i}"), &ip).init(move || relay(s.clone(), i)).build().id());
    }
    let nodes = Nodes { database: database.id(), broker: broker_node.id(), relays: relay_nodes };
    let sim = shared.setup.sim.clone();
    let mut faults = Vec::new();
    for fault in shared.setup.profile.schedule.clone() {
        let (s, n) = (shared.clone(), nodes.clone());
        faults.push(madsim::task::spawn(async move {
            sleep(ms(fault.at())).await;
            inject(&s, &n, fault);
            let length = match fault {
                Scheduled::Kill { for_ms, .. }
                | Scheduled::Pause { for_ms, .. }
                | Scheduled::Partition { for_ms, .. } => for_ms,
            };
            sleep(ms(length)).await;
            lift(&s, &n, fault);
        }));
    }
    // A stale lease can still act after every row is terminal: a paused relay's write, a
    // statement in flight. Keep running this long past the last change.
    let drain = 3 * sim.lease_ms + sim.timeout_ms;
    let mut settled_since: Option<u64> = None;
    let mut healed = false;
    loop {
        sleep(ms(100)).await;
        let now = shared.lock().now_ms();
        if !healed && now >= sim.fault_window_ms {
            heal(&shared, &nodes);
            healed = true;
        }
        if settled(&shared) {
            let since = *settled_since.get_or_insert(now);
            if now >= since + drain {
                break;
            }
        } else {
            settled_since = None;
        }
        if now >= sim.fault_window_ms + sim.heal_ms {
            break;
        }
    }
    if !healed {
        heal(&shared, &nodes);
    }
    {
        let mut s = shared.lock();
        s.ended_ms = s.now_ms();
    }
    // The nodes' tasks hold the run's state and would outlive the run inside the runtime: kill
    // them and let the executor drop them, so a sweep's memory does not grow with its seeds.
    for node in [nodes.database, nodes.broker].iter().chain(&nodes.relays) {
        handle.kill(*node);
    }
    for fault in &faults {
        fault.abort();
    }
    sleep(ms(1)).await;
    shared
}

fn verdict(config: &SimConfig, seed: u64, profile: FaultProfile, world: &WorldConfig, s: &mut State) -> RunResult {
    let now = s.ended_ms;
    let rows = s.outbox.rows().to_vec();
    let all_enqueued = s.enqueued == config.messages;
    let mut liveness = Vec::new();
    let listed = |keep: &dyn Fn(&Row) -> bool| -> Vec<(MessageId, Status)> {
        rows.iter().filter(|r| keep(r)).map(|r| (r.message_id, r.status)).collect()
    };
    let unsettled = listed(&|r| !r.status.is_terminal());
    if !unsettled.is_empty() || !all_enqueued {
        let after_ms = now.saturating_sub(config.fault_window_ms);
        liveness.push(Violation::new(Property::L1, Breach::NotSettled { after_ms, rows: unsettled }));
    }
    if profile.permanent_outage {
        let not_exhausted = listed(&|r| r.status != Status::Exhausted);
        if !not_exhausted.is_empty() {
            liveness.push(Violation::new(Property::L2, Breach::NotExhausted { rows: not_exhausted }));
        }
    } else {
        let unpublished = listed(&|r| !matches!(r.status, Status::Published | Status::Failed | Status::Exhausted));
        if !unpublished.is_empty() {
            liveness.push(Violation::new(Property::L3, Breach::NotDelivered { rows: unpublished }));
        }
    }
    for v in liveness {
        if !s.violations.iter().any(|x| x.property == v.property) {
            s.violations.push(v);
        }
    }
    s.violations.sort_by_key(|v| v.property);

    let header = trace::Header {
        backoff_base: Some(world.backoff_base.0),
        backoff_cap: Some(world.backoff_cap.0),
        source: Some(format!("outbox-check sim {} --seed {seed}", config.command_line())),
        // The simulated database runs one statement at a time, in the history's order.
        concurrency: Some(trace::Concurrency::Serial),
        ..trace::Header::new(&config.fleet_name(), config.max_attempts)
    };
    let history = trace::to_jsonl(&header, &s.recorder.events);
    let oracle = match config.single_design() {
        None => OracleVerdict::NotChecked,
        Some(design) => {
            let events = s.recorder.events.iter().enumerate().map(|(i, event)| (i + 2, event));
            match oracle::check(design, &header, events, oracle::Mode::First).first() {
                None => OracleVerdict::Accepted,
                Some(d) => {
                    OracleVerdict::Diverged { line: d.line, property: d.blame.property(), detail: d.to_string() }
                }
            }
        }
    };
    let stats = RunStats {
        duplicates_delivered: s.deliveries.iter().map(|d| d.copies.saturating_sub(1)).sum(),
        deduplicated: s.deliveries.iter().map(|d| d.copies.saturating_sub(d.effects)).sum(),
        duplicate_effects: s.deliveries.iter().filter(|d| d.effects > 1).count() as u64,
        stale_refused: s.stale_refused,
        unknown_outcomes: s.recorder.unknown,
        attempts: rows.iter().map(|r| r.attempts).collect(),
        latency_ms: s
            .deliveries
            .iter()
            .zip(&s.enqueued_ms)
            .filter_map(|(d, at)| d.first_stored_ms.map(|stored| stored.saturating_sub(*at)))
            .collect(),
        statuses: rows.iter().map(|r| r.status).collect(),
        ended_ms: now,
        settled: all_enqueued && rows.iter().all(|r| r.status.is_terminal()),
        events: s.recorder.events.len(),
    };
    RunResult {
        seed,
        fleet: config.fleet_name(),
        profile,
        violations: std::mem::take(&mut s.violations),
        oracle,
        history_hash: format!("{:016x}", fnv1a(history.as_bytes())),
        stats,
        history,
    }
}

/// FNV-1a, 64 bits: a stable hash of the history's bytes, the same on every build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
