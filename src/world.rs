//! A closed, deterministic world of relays, one outbox table, a broker and a clock.
//!
//! [`World`] is the transition system the model checker explores and the random searches walk:
//! every [`Action`] is one atomic step — a relay performing its pending effect under a chosen
//! fault, a relay crashing, time advancing, the application enqueueing, an operator requeueing.
//! Relays run the sans-IO [`Cycle`](crate::relay::Cycle); the table is the core's
//! [`Outbox`](crate::core::Outbox), every operation goes through the core's
//! [`Auditor`](crate::core::Auditor). No rule of the outbox lives here, only the environment:
//! which faults may strike and how the broker and the consumer behave.

use crate::core::{
    AggregateId, Auditor, Design, Duration, EnqueueRequest, IdempotencyKey, Instant, MessageId, Outbox, Policy,
    RelayId, TenantId, Violation,
};
use crate::relay::{Clocks, Cycle, Effect, Input, LeaseResult, PublishOutcome, RelayConfig};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which faults of SPEC §6 the environment may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Faults {
    /// A relay crashes and restarts, losing its in-memory leases.
    pub crash: bool,
    /// The DB connection dies before a statement runs.
    pub db_lost_before: bool,
    /// The DB connection dies after a statement committed, before the reply.
    pub db_lost_after: bool,
    /// The broker drops a message before storing it (the relay times out).
    pub broker_drop: bool,
    /// The broker stores a message but its acknowledgement is lost (the relay times out).
    pub broker_lost_ack: bool,
    /// The broker stores a message twice.
    pub broker_duplicate: bool,
    /// The broker rejects a message for good.
    pub broker_reject: bool,
    /// The broker refuses for now (an outage), a definite retryable failure.
    pub broker_unavailable: bool,
}

impl Faults {
    pub const NAMES: [&'static str; 8] = [
        "crash",
        "db-lost-before",
        "db-lost-after",
        "broker-drop",
        "broker-lost-ack",
        "broker-duplicate",
        "broker-reject",
        "broker-unavailable",
    ];

    pub fn all() -> Faults {
        Faults {
            crash: true,
            db_lost_before: true,
            db_lost_after: true,
            broker_drop: true,
            broker_lost_ack: true,
            broker_duplicate: true,
            broker_reject: true,
            broker_unavailable: true,
        }
    }

    pub fn none() -> Faults {
        Faults {
            crash: false,
            db_lost_before: false,
            db_lost_after: false,
            broker_drop: false,
            broker_lost_ack: false,
            broker_duplicate: false,
            broker_reject: false,
            broker_unavailable: false,
        }
    }

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "crash" => &mut self.crash,
            "db-lost-before" => &mut self.db_lost_before,
            "db-lost-after" => &mut self.db_lost_after,
            "broker-drop" => &mut self.broker_drop,
            "broker-lost-ack" => &mut self.broker_lost_ack,
            "broker-duplicate" => &mut self.broker_duplicate,
            "broker-reject" => &mut self.broker_reject,
            "broker-unavailable" => &mut self.broker_unavailable,
            _ => return None,
        })
    }

    /// Parses `all`, `none` or a comma-separated list of fault names.
    pub fn parse(text: &str) -> Result<Faults, String> {
        match text.trim() {
            "all" => return Ok(Faults::all()),
            "none" | "" => return Ok(Faults::none()),
            _ => {}
        }
        let mut faults = Faults::none();
        for name in text.split(',').map(str::trim) {
            match faults.flag(name) {
                Some(flag) => *flag = true,
                None => {
                    return Err(format!("unknown fault '{name}'; valid: all, none, {}", Faults::NAMES.join(", ")))
                }
            }
        }
        Ok(faults)
    }

    pub fn names(&self) -> Vec<&'static str> {
        let mut copy = *self;
        Faults::NAMES.into_iter().filter(|n| copy.flag(n).is_some_and(|f| *f)).collect()
    }
}

/// One relay of the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelaySpec {
    pub design: Design,
    /// The id the relay writes as `lease_owner`. Two slots with one id model a restarted relay
    /// reusing its id while its paused predecessor still lives.
    pub owner: RelayId,
    pub tenant_id: TenantId,
    /// The relay's clock minus the true clock, in ms (used by designs that take `now` from the
    /// relay).
    pub skew: i64,
}

/// The bounds and environment of a world.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorldConfig {
    pub relays: Vec<RelaySpec>,
    /// Messages the application enqueues, spread round-robin over `tenants`.
    pub messages: u32,
    pub tenants: u16,
    pub max_attempts: u32,
    pub batch: u32,
    pub lease: Duration,
    /// How far one `Tick` moves the true clock.
    pub tick: Duration,
    /// The true clock stops here: time is bounded so every run is finite.
    pub time_max: Instant,
    /// The retry clock's base delay and cap, for every design in the fleet.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub faults: Faults,
    /// The application's enqueues are actions (with a stale one per message); otherwise every
    /// message is in the table from the start.
    pub enqueue_actions: bool,
    /// An operator may requeue FAILED and EXHAUSTED rows (only with the `requeue` budget > 0).
    pub requeues: u8,
    /// Every publication fails as unavailable (SPEC L2's permanent outage).
    pub permanent_outage: bool,
}

impl WorldConfig {
    /// A small world: `relays` relays of `design` on one tenant, all faults on.
    pub fn small(design: Design, relays: u16, messages: u32) -> WorldConfig {
        WorldConfig {
            relays: (0..relays).map(|i| RelaySpec { design, owner: RelayId(i), tenant_id: TenantId(0), skew: 0 }).collect(),
            messages,
            tenants: 1,
            max_attempts: 3,
            batch: 1,
            lease: Duration(2),
            tick: Duration(1),
            time_max: Instant(12),
            backoff_base: Duration(1),
            backoff_cap: Duration(4),
            faults: Faults::all(),
            enqueue_actions: false,
            requeues: 0,
            permanent_outage: false,
        }
    }

    /// The policy relay `index` runs, with the world's backoff.
    pub fn policy(&self, index: usize) -> Policy {
        let mut policy = self.relays[index].design.policy();
        policy.backoff.base = self.backoff_base;
        policy.backoff.cap = self.backoff_cap;
        policy
    }

    pub fn relay_config(&self, index: usize) -> RelayConfig {
        RelayConfig {
            owner: self.relays[index].owner,
            tenant_id: self.relays[index].tenant_id,
            batch: self.batch,
            lease: self.lease,
            max_attempts: self.max_attempts,
            policy: self.policy(index),
        }
    }

    /// Some design of the fleet runs the reaper job.
    pub fn has_reaper(&self) -> bool {
        (0..self.relays.len()).any(|i| self.policy(i).relay.reaper)
    }

    pub fn message_tenant(&self, message: u32) -> TenantId {
        TenantId((message % u32::from(self.tenants.max(1))) as u16)
    }
}

/// What the broker did with a publication, as chosen by the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrokerFate {
    /// Stored and acknowledged.
    Ack,
    /// Stored twice and acknowledged (the consumer must dedup).
    Duplicate,
    /// Dropped before storing; the relay times out.
    Drop,
    /// Stored, but the acknowledgement was lost; the relay times out.
    LostAck,
    /// Refused for now; nothing stored.
    Unavailable,
    /// Rejected for good; nothing stored.
    Reject,
}

impl BrokerFate {
    fn stores(self) -> u8 {
        match self {
            BrokerFate::Ack | BrokerFate::LostAck => 1,
            BrokerFate::Duplicate => 2,
            BrokerFate::Drop | BrokerFate::Unavailable | BrokerFate::Reject => 0,
        }
    }

    fn outcome(self) -> PublishOutcome {
        match self {
            BrokerFate::Ack | BrokerFate::Duplicate => PublishOutcome::Ack,
            BrokerFate::Drop | BrokerFate::LostAck => PublishOutcome::Timeout,
            BrokerFate::Unavailable => PublishOutcome::RetryableFailure,
            BrokerFate::Reject => PublishOutcome::Rejected,
        }
    }
}

/// What the database connection did with a statement, as chosen by the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DbFate {
    Ok,
    /// Lost before the statement ran: nothing happened.
    LostBefore,
    /// Lost after it committed, before the reply.
    LostAfter,
}

/// One atomic step of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// An idle relay starts a cycle with its claim.
    Poll { relay: u16, db: DbFate },
    /// A relay's publication reaches the broker.
    Publish { relay: u16, fate: BrokerFate },
    /// A relay's terminal write reaches the database.
    Write { relay: u16, db: DbFate },
    /// A relay crashes and restarts with nothing in memory.
    Crash { relay: u16 },
    /// The reaper job runs (when a design of the fleet has one).
    Reap,
    /// The true clock advances by one tick.
    Tick,
    /// The application enqueues the next message; `stale` with a version it read too early.
    Enqueue { stale: bool },
    /// An operator requeues a FAILED or EXHAUSTED message.
    Requeue { message: u32 },
}

/// The consumer's view of one message: what the broker stored, deduplicated by key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Delivery {
    /// Copies the broker stored, duplicates included.
    pub copies: u8,
    /// Distinct idempotency keys stored: the effects the consumer applies.
    pub keys: Vec<IdempotencyKey>,
}

/// One relay's in-memory state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelayState {
    /// The cycle under way and the effect it waits on; `None` when idle.
    pub cycle: Option<(Cycle, Effect)>,
    /// Writes this relay saw refused as Stale.
    pub stale_writes: u8,
}

/// The whole world: small and hashable, so the model checker can keep it as its state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct World {
    pub now: Instant,
    pub outbox: Outbox,
    pub auditor: Auditor,
    pub relays: Vec<RelayState>,
    /// Indexed by message number.
    pub deliveries: Vec<Delivery>,
    pub enqueued: u32,
    pub requeues_left: u8,
    /// Ghost flags for the reachability properties of SPEC §7.
    pub seen: Seen,
}

/// Situations worth reaching, so no safety check passes vacuously.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Seen {
    /// A stale write was attempted and refused.
    pub stale_refused: bool,
    /// A message was stored twice and the consumer saw one effect.
    pub duplicate_deduplicated: bool,
    /// A claim took over a row whose lease had expired.
    pub lease_taken_over: bool,
    /// A message reached EXHAUSTED.
    pub exhausted: bool,
    /// A message that was AMBIGUOUS was later PUBLISHED.
    pub ambiguous_then_published: bool,
    /// A later event of an aggregate was published before an earlier one.
    pub order_overtaken: bool,
}

impl World {
    pub fn new(config: &WorldConfig) -> World {
        let mut world = World {
            now: Instant(0),
            outbox: Outbox::new(),
            auditor: Auditor::new(config.max_attempts),
            relays: vec![RelayState::default(); config.relays.len()],
            deliveries: vec![Delivery::default(); config.messages as usize],
            enqueued: 0,
            requeues_left: config.requeues,
            seen: Seen::default(),
        };
        if !config.enqueue_actions {
            for _ in 0..config.messages {
                world.enqueue(config, false);
            }
        }
        world
    }

    pub fn violations(&self) -> &[Violation] {
        self.auditor.violations()
    }

    fn clocks(&self, config: &WorldConfig, relay: usize) -> Clocks {
        let skew = config.relays[relay].skew;
        let relay_now = Instant(self.now.0.saturating_add_signed(skew));
        Clocks { database: self.now, relay: relay_now }
    }

    /// Every action enabled in this state, in a fixed order.
    pub fn actions(&self, config: &WorldConfig, actions: &mut Vec<Action>) {
        let f = &config.faults;
        let db_fates = |out: &mut Vec<Action>, make: &dyn Fn(DbFate) -> Action| {
            out.push(make(DbFate::Ok));
            if f.db_lost_before {
                out.push(make(DbFate::LostBefore));
            }
            if f.db_lost_after {
                out.push(make(DbFate::LostAfter));
            }
        };
        for (i, relay) in self.relays.iter().enumerate() {
            let r = i as u16;
            match &relay.cycle {
                None => db_fates(actions, &|db| Action::Poll { relay: r, db }),
                Some((_, Effect::Publish { .. })) => {
                    if config.permanent_outage {
                        actions.push(Action::Publish { relay: r, fate: BrokerFate::Unavailable });
                    } else {
                        let fates = [
                            (true, BrokerFate::Ack),
                            (f.broker_duplicate, BrokerFate::Duplicate),
                            (f.broker_drop, BrokerFate::Drop),
                            (f.broker_lost_ack, BrokerFate::LostAck),
                            (f.broker_unavailable, BrokerFate::Unavailable),
                            (f.broker_reject, BrokerFate::Reject),
                        ];
                        for (on, fate) in fates {
                            if on {
                                actions.push(Action::Publish { relay: r, fate });
                            }
                        }
                    }
                }
                Some((_, Effect::Write { .. })) => db_fates(actions, &|db| Action::Write { relay: r, db }),
                Some(_) => {}
            }
            if f.crash && relay.cycle.is_some() {
                actions.push(Action::Crash { relay: r });
            }
        }
        if config.has_reaper() {
            actions.push(Action::Reap);
        }
        if self.now.plus(config.tick) <= config.time_max {
            actions.push(Action::Tick);
        }
        if config.enqueue_actions && self.enqueued < config.messages {
            actions.push(Action::Enqueue { stale: false });
            actions.push(Action::Enqueue { stale: true });
        }
        if self.requeues_left > 0 {
            for row in self.outbox.rows() {
                if matches!(row.status, crate::core::Status::Failed | crate::core::Status::Exhausted) {
                    actions.push(Action::Requeue { message: row.message_id.0 });
                }
            }
        }
    }

    /// Applies one action; returns the lease that ended with it, if any. Violations accumulate in
    /// the auditor. Panics on an action that is not enabled: that is a bug of the driver.
    pub fn apply(&mut self, config: &WorldConfig, action: Action) -> Option<(MessageId, LeaseResult)> {
        match action {
            Action::Poll { relay, db } => self.poll(config, relay as usize, db),
            Action::Publish { relay, fate } => self.publish(config, relay as usize, fate),
            Action::Write { relay, db } => self.write(config, relay as usize, db),
            Action::Crash { relay } => {
                self.relays[relay as usize].cycle = None;
                None
            }
            Action::Reap => {
                let reaped = self.auditor.reap(&mut self.outbox, self.now);
                self.seen.exhausted |= !reaped.is_empty();
                None
            }
            Action::Tick => {
                self.now = self.now.plus(config.tick);
                None
            }
            Action::Enqueue { stale } => {
                self.enqueue(config, stale);
                None
            }
            Action::Requeue { message } => {
                // The operator's tool ships with the fleet's first design.
                let policy = config.policy(0);
                self.requeues_left -= 1;
                let _ = self.auditor.requeue(&mut self.outbox, &policy, MessageId(message));
                None
            }
        }
    }

    fn enqueue(&mut self, config: &WorldConfig, stale: bool) {
        let n = self.enqueued;
        // Two messages per aggregate, so an ordering per aggregate exists to be overtaken.
        let aggregate = AggregateId(n / 2);
        let tenant = config.message_tenant(n);
        let current = self.outbox.aggregate_version(tenant, aggregate);
        let req = EnqueueRequest {
            tenant_id: tenant,
            aggregate_id: aggregate,
            expected_version: if stale { current + 1 } else { current },
            message_id: MessageId(n),
            now: self.now,
        };
        if let Ok(crate::core::EnqueueResult::Applied { .. }) = self.auditor.enqueue(&mut self.outbox, &req) {
            self.enqueued += 1;
        }
    }

    fn poll(&mut self, config: &WorldConfig, r: usize, db: DbFate) -> Option<(MessageId, LeaseResult)> {
        let relay_config = config.relay_config(r);
        let clocks = self.clocks(config, r);
        let (mut cycle, effect) = Cycle::start(&relay_config, clocks);
        let Effect::Claim { request } = effect else {
            unreachable!("a cycle claims after reaping");
        };
        let step = match db {
            DbFate::LostBefore => cycle.resume(&relay_config, Input::ConnectionLost, clocks),
            DbFate::Ok | DbFate::LostAfter => {
                let before = self.outbox.clone();
                let leases = self
                    .auditor
                    .claim(&mut self.outbox, &relay_config.policy, &request, self.now)
                    .unwrap_or_default();
                for lease in &leases {
                    if let Some(old) = before.row(lease.message_id) {
                        if old.status == crate::core::Status::InFlight {
                            self.seen.lease_taken_over = true;
                        }
                    }
                }
                if db == DbFate::LostAfter {
                    cycle.resume(&relay_config, Input::ConnectionLost, clocks)
                } else {
                    cycle.claimed(&relay_config, leases, clocks)
                }
            }
        };
        self.settle(r, cycle, step.effect);
        step.finished
    }

    fn publish(&mut self, config: &WorldConfig, r: usize, fate: BrokerFate) -> Option<(MessageId, LeaseResult)> {
        let relay_config = config.relay_config(r);
        let clocks = self.clocks(config, r);
        let (mut cycle, effect) = self.relays[r].cycle.take().expect("publish from an idle relay");
        let Effect::Publish { lease, key } = effect else {
            unreachable!("publish action without a pending publication");
        };
        let stores = fate.stores();
        self.auditor.published(lease.message_id, key, stores > 0);
        let delivery = &mut self.deliveries[lease.message_id.0 as usize];
        delivery.copies = delivery.copies.saturating_add(stores);
        if stores > 0 && !delivery.keys.contains(&key) {
            delivery.keys.push(key);
            delivery.keys.sort();
        }
        if delivery.copies >= 2 && delivery.keys.len() == 1 {
            self.seen.duplicate_deduplicated = true;
        }
        let step = cycle.resume(&relay_config, Input::Published { outcome: fate.outcome() }, clocks);
        self.settle(r, cycle, step.effect);
        step.finished
    }

    fn write(&mut self, config: &WorldConfig, r: usize, db: DbFate) -> Option<(MessageId, LeaseResult)> {
        let relay_config = config.relay_config(r);
        let clocks = self.clocks(config, r);
        let (mut cycle, effect) = self.relays[r].cycle.take().expect("write from an idle relay");
        let Effect::Write { request } = effect else {
            unreachable!("write action without a pending write");
        };
        let input = match db {
            DbFate::LostBefore => Input::ConnectionLost,
            DbFate::Ok | DbFate::LostAfter => {
                let was = self.outbox.row(request.lease.message_id).map(|row| row.status);
                let result = self.auditor.write(&mut self.outbox, &relay_config.policy, &request);
                let Ok(result) = result else {
                    unreachable!("a relay's lease names a row of the table");
                };
                match result {
                    crate::core::WriteResult::Stale { .. } => {
                        self.seen.stale_refused = true;
                        self.relays[r].stale_writes = self.relays[r].stale_writes.saturating_add(1);
                    }
                    crate::core::WriteResult::Applied { status } => {
                        self.note_applied(request.lease.message_id, was, status);
                    }
                }
                if db == DbFate::LostAfter {
                    Input::ConnectionLost
                } else {
                    Input::Written { result }
                }
            }
        };
        let step = cycle.resume(&relay_config, input, clocks);
        self.settle(r, cycle, step.effect);
        step.finished
    }

    fn note_applied(&mut self, id: MessageId, _was: Option<crate::core::Status>, status: crate::core::Status) {
        use crate::core::{FailureCode, Status};
        match status {
            Status::Exhausted => self.seen.exhausted = true,
            Status::Published => {
                let row = self.outbox.row(id).cloned();
                if let Some(row) = row {
                    if row.last_failure_code == Some(FailureCode::Timeout) {
                        self.seen.ambiguous_then_published = true;
                    }
                    let overtaken = self.outbox.rows().iter().any(|other| {
                        other.aggregate_id == row.aggregate_id
                            && other.tenant_id == row.tenant_id
                            && other.aggregate_version < row.aggregate_version
                            && other.status != Status::Published
                    });
                    self.seen.order_overtaken |= overtaken;
                }
            }
            _ => {}
        }
    }

    /// Keeps the cycle if it has more to do; a relay whose cycle is done is idle again.
    fn settle(&mut self, r: usize, cycle: Cycle, effect: Effect) {
        self.relays[r].cycle = if effect == Effect::Done { None } else { Some((cycle, effect)) };
    }

    /// Every message has reached a terminal status.
    pub fn all_terminal(&self) -> bool {
        self.enqueued == self.deliveries.len() as u32
            && self.outbox.rows().iter().all(|row| row.status.is_terminal())
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Poll { relay, db } => write!(f, "r{relay} polls (db {db:?})"),
            Action::Publish { relay, fate } => write!(f, "r{relay} publishes (broker {fate:?})"),
            Action::Write { relay, db } => write!(f, "r{relay} writes (db {db:?})"),
            Action::Crash { relay } => write!(f, "r{relay} crashes"),
            Action::Reap => write!(f, "reaper runs"),
            Action::Tick => write!(f, "tick"),
            Action::Enqueue { stale } => write!(f, "enqueue{}", if *stale { " (stale)" } else { "" }),
            Action::Requeue { message } => write!(f, "requeue m{message}"),
        }
    }
}
