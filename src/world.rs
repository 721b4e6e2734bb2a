//! A closed, deterministic world of relays, one outbox table, a broker and a clock.
//!
//! [`World`] is the transition system the model checker explores and the random searches walk:
//! every [`Action`] is one atomic step — a relay performing its pending effect under a chosen
//! fault, a relay crashing, time advancing, the application enqueueing, an operator requeueing.
//! Relays run the sans-IO [`Cycle`](crate::relay::Cycle); the table is the core's
//! [`Outbox`](crate::core::Outbox), every operation goes through the core's
//! [`Auditor`](crate::core::Auditor). No rule of the outbox lives here, only the environment:
//! which faults may strike and how the broker and the consumer behave.

use crate::core::policy::TokenKind;
use crate::core::{
    used_up, AggregateId, Auditor, ClaimRequest, Duration, EnqueueRequest, EnqueueResult, FailureCode, Ghosts,
    IdempotencyKey, Instant, Lease, LeaseToken, MessageId, Outbox, Policy, Property, RelayId, RequeueResult, Situation,
    Status, TenantId, Violation, WriteRequest, WriteResult,
};
use crate::design::Design;
use crate::relay::{Clocks, Cycle, Effect, LeaseResult, PublishOutcome, RelayConfig, Reply, Step};
use serde::{Deserialize, Serialize};
use smallvec::{smallvec, SmallVec};
use std::fmt;

pub mod fault;

pub use fault::{Fault, Faults};

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
    /// The true clock stops here, so every walk is finite. The model checker sets none: it
    /// normalises time (only deadlines relative to now matter), so its graph is finite anyway.
    pub time_max: Option<Instant>,
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
            relays: (0..relays)
                .map(|i| RelaySpec { design, owner: RelayId(i), tenant_id: TenantId(0), skew: 0 })
                .collect(),
            messages,
            tenants: 1,
            max_attempts: 3,
            batch: 1,
            lease: Duration(2),
            tick: Duration(1),
            time_max: Some(Instant(12)),
            backoff_base: Duration(1),
            backoff_cap: Duration(4),
            faults: Faults::all(),
            enqueue_actions: false,
            requeues: 0,
            permanent_outage: false,
        }
    }

    /// A fleet with one relay per design, relay `i` serving tenant `i mod tenants`; with the
    /// `clock-skew` fault every odd relay's clock runs one lease ahead. Lease 2 ticks, backoff
    /// 1 doubling to 4 ticks.
    pub fn fleet(designs: &[Design], messages: u32, tenants: u16, max_attempts: u32, faults: Faults) -> WorldConfig {
        let lease = Duration(2);
        let tenants = tenants.max(1);
        WorldConfig {
            relays: designs
                .iter()
                .enumerate()
                .map(|(i, &design)| RelaySpec {
                    design,
                    owner: RelayId(i as u16),
                    tenant_id: TenantId(i as u16 % tenants),
                    skew: if faults.has(Fault::ClockSkew) && i % 2 == 1 { lease.0 as i64 } else { 0 },
                })
                .collect(),
            messages,
            tenants,
            max_attempts,
            batch: 1,
            lease,
            tick: Duration(1),
            time_max: None,
            backoff_base: Duration(1),
            backoff_cap: Duration(4),
            faults,
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

    /// The rescuer the fleet runs, if a design of it has one (the first such design's).
    pub fn rescue(&self) -> Option<crate::core::ReleaseFence> {
        (0..self.relays.len()).find_map(|i| self.policy(i).rescue)
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
    /// Every fate, in the order the world offers them.
    pub const ALL: [BrokerFate; 6] = [
        BrokerFate::Ack,
        BrokerFate::Duplicate,
        BrokerFate::Drop,
        BrokerFate::LostAck,
        BrokerFate::Unavailable,
        BrokerFate::Reject,
    ];

    /// The fault of the catalogue this fate is, if it is one.
    pub fn fault(self) -> Option<Fault> {
        match self {
            BrokerFate::Ack => None,
            BrokerFate::Duplicate => Some(Fault::BrokerDuplicate),
            BrokerFate::Drop => Some(Fault::BrokerDrop),
            BrokerFate::LostAck => Some(Fault::BrokerLostAck),
            BrokerFate::Unavailable => Some(Fault::BrokerUnavailable),
            BrokerFate::Reject => Some(Fault::BrokerReject),
        }
    }

    /// How many copies the broker stored: the one mapping of a fate to what the broker holds
    /// (the world's ghost, the trace writer and the reports read it here).
    pub fn stores(self) -> u8 {
        match self {
            BrokerFate::Ack | BrokerFate::LostAck => 1,
            BrokerFate::Duplicate => 2,
            BrokerFate::Drop | BrokerFate::Unavailable | BrokerFate::Reject => 0,
        }
    }

    /// What happened, in words (for reports, diagrams and the explorer).
    pub fn words(self) -> &'static str {
        match self {
            BrokerFate::Ack => "ack (stored)",
            BrokerFate::Duplicate => "ack (stored twice)",
            BrokerFate::Drop => "timeout (dropped, not stored)",
            BrokerFate::LostAck => "timeout (stored, ack lost)",
            BrokerFate::Unavailable => "unavailable (not stored)",
            BrokerFate::Reject => "rejected for good",
        }
    }

    /// What the relay hears.
    pub fn outcome(self) -> PublishOutcome {
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

impl DbFate {
    pub const ALL: [DbFate; 3] = [DbFate::Ok, DbFate::LostBefore, DbFate::LostAfter];

    /// The fault of the catalogue this is, if it is one.
    pub fn fault(self) -> Option<Fault> {
        match self {
            DbFate::Ok => None,
            DbFate::LostBefore => Some(Fault::DbLostBefore),
            DbFate::LostAfter => Some(Fault::DbLostAfter),
        }
    }

    /// What the connection did, in words: nothing for a statement that went through.
    pub fn words(self) -> &'static str {
        match self {
            DbFate::Ok => "",
            DbFate::LostBefore => " — connection lost before the statement ran",
            DbFate::LostAfter => " — committed, but the connection was lost before the reply",
        }
    }
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
    /// A relay's terminal write reaches the database with another tenant's id.
    MisroutedWrite { relay: u16 },
    /// A relay crashes and restarts with nothing in memory.
    Crash { relay: u16 },
    /// The reaper job runs (when a design of the fleet has one).
    Reap,
    /// The rescuer finds an expired lease and moves its row in the same statement (fence
    /// `expired`).
    Rescue,
    /// The rescuer reads an expired lease, to move its row by a second statement.
    RescueRead,
    /// The rescuer's second statement: moves the row it read (fence `token` or `id`).
    RescueWrite,
    /// The true clock advances by one tick.
    Tick,
    /// The application enqueues the next message; `stale` with a version it read too early.
    Enqueue { stale: bool },
    /// An operator requeues a FAILED or EXHAUSTED message.
    Requeue { message: u32 },
}

impl Action {
    /// The fault of the catalogue this action injects, if it injects one.
    pub fn fault(self) -> Option<Fault> {
        match self {
            Action::Poll { db, .. } | Action::Write { db, .. } => db.fault(),
            Action::Publish { fate, .. } => fate.fault(),
            Action::MisroutedWrite { .. } => Some(Fault::MisroutedWrite),
            Action::Crash { .. } => Some(Fault::Crash),
            Action::Reap
            | Action::Rescue
            | Action::RescueRead
            | Action::RescueWrite
            | Action::Tick
            | Action::Enqueue { .. }
            | Action::Requeue { .. } => None,
        }
    }
}

/// Situations worth reaching, so no safety check passes vacuously. Flags of the last step only:
/// sticky flags would multiply the model's state space for nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Seen {
    /// A stale write was attempted and refused.
    pub stale_refused: bool,
    /// A message was stored a second time and the consumer still saw one effect.
    pub duplicate_deduplicated: bool,
    /// A claim took over a row whose lease had expired.
    pub lease_taken_over: bool,
    /// A message's budget was spent: a claim handed out its last attempt, a failure write
    /// counted it, or the message reached EXHAUSTED.
    pub exhausted: bool,
    /// A message that had been AMBIGUOUS was PUBLISHED.
    pub ambiguous_then_published: bool,
    /// A later event of an aggregate was published before an earlier one.
    pub order_overtaken: bool,
    /// A claim took a row that had been claimed before (S2's freshness is put to the test).
    pub claimed_again: bool,
    /// A claim ran while the table held a terminal row, or a write ran on a terminal row (S4).
    pub terminal_met: bool,
    /// A row became PUBLISHED (S5 asks whether the broker stored it).
    pub confirmed: bool,
    /// A claim ran while the table held a live row of another tenant, or a write ran with
    /// another tenant's id (S9).
    pub tenants_crossed: bool,
    /// The application attempted an enqueue with a stale version (S10).
    pub stale_enqueue: bool,
}

impl Seen {
    /// The flag of a situation of the catalogue (`core::property`): the one place that maps one
    /// to the other.
    fn flag(&mut self, situation: Situation) -> &mut bool {
        match situation {
            Situation::StaleRefused => &mut self.stale_refused,
            Situation::DuplicateDeduplicated => &mut self.duplicate_deduplicated,
            Situation::LeaseTakenOver => &mut self.lease_taken_over,
            Situation::Exhausted => &mut self.exhausted,
            Situation::AmbiguousThenPublished => &mut self.ambiguous_then_published,
            Situation::OrderOvertaken => &mut self.order_overtaken,
            Situation::ClaimedAgain => &mut self.claimed_again,
            Situation::TerminalMet => &mut self.terminal_met,
            Situation::Confirmed => &mut self.confirmed,
            Situation::TenantsCrossed => &mut self.tenants_crossed,
            Situation::StaleEnqueue => &mut self.stale_enqueue,
        }
    }

    /// Whether the last step reached `situation`.
    pub fn has(&self, situation: Situation) -> bool {
        let mut copy = *self;
        *copy.flag(situation)
    }

    /// Keeps the flags whose situation's bit ([`Situation::bit`]) is set in `mask`.
    pub fn mask(&mut self, mask: u16) {
        for situation in Situation::ALL {
            *self.flag(situation) &= mask & situation.bit() != 0;
        }
    }
}

/// What the last step did, kept in the state for the model checker's properties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepFlags {
    /// Bit `i` set: property `Property::SAFETY[i]` was violated by the last step.
    pub violated: u16,
    pub seen: Seen,
}

impl StepFlags {
    pub fn violated(&self, property: Property) -> bool {
        Property::SAFETY.contains(&property) && self.violated & property.bit() != 0
    }
}

/// What happened in one step, in the words of the operations (for reports and traces; never
/// kept in the state).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Enqueued {
        request: EnqueueRequest,
        result: EnqueueResult,
    },
    Claimed {
        relay: u16,
        request: ClaimRequest,
        leases: Vec<Lease>,
        db: DbFate,
    },
    Published {
        relay: u16,
        lease: Lease,
        key: IdempotencyKey,
        fate: BrokerFate,
    },
    Wrote {
        relay: u16,
        request: WriteRequest,
        result: Option<WriteResult>,
        db: DbFate,
    },
    Finished {
        relay: u16,
        message_id: MessageId,
        result: LeaseResult,
    },
    Crashed {
        relay: u16,
    },
    Reaped {
        now: Instant,
        messages: Vec<MessageId>,
    },
    /// The rescuer read an expired lease (its first statement).
    RescueRead {
        now: Instant,
        lease: Lease,
    },
    /// The rescuer's move of a row: the release it ran and what it did.
    Rescued {
        request: crate::core::ReleaseRequest,
        result: WriteResult,
    },
    Ticked {
        now: Instant,
    },
    Requeued {
        message_id: MessageId,
        result: RequeueResult,
    },
}

/// What [`World::apply`] returns.
#[derive(Clone, Debug)]
pub struct StepReport {
    pub events: Vec<Event>,
    pub violations: Vec<Violation>,
    /// Events are recorded (the model checker's steps record none: it keeps only the state).
    describe: bool,
}

impl Default for StepReport {
    fn default() -> Self {
        StepReport { events: Vec::new(), violations: Vec::new(), describe: true }
    }
}

impl StepReport {
    fn event(&mut self, make: impl FnOnce() -> Event) {
        if self.describe {
            self.events.push(make());
        }
    }
}

/// How [`World::normalise`] reordered the relay slots: new slot `i` holds what slot `perm[i]`
/// held.
pub type Permutation = SmallVec<[usize; 4]>;

/// The whole world: small and hashable, so the model checker can keep it as its state. Its
/// `Debug` is written for a person (test failures and logs show it): the table, the
/// relays, and the properties the last step broke.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct World {
    /// The true clock.
    pub now: Instant,
    pub outbox: Outbox,
    pub auditor: Auditor,
    /// Each relay's cycle under way and the effect it waits on; `None` when idle.
    pub relays: Vec<Option<(Cycle, Effect)>>,
    pub enqueued: u32,
    pub requeues_left: u8,
    /// The lease the rescuer read and has not yet acted on (two-statement rescuers only).
    pub rescuer: Option<Lease>,
    pub step: StepFlags,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |t: Option<Instant>| t.map_or("–".to_string(), |t| format!("t={}", t.0));
        writeln!(f, "time t={} (relative: the model keeps time relative to now)", self.now.0)?;
        writeln!(f, "table:")?;
        for row in self.outbox.rows() {
            writeln!(
                f,
                "  {} of {}: {}, attempts {}, owner {}, token {}, lease until {}, retry at {}",
                row.message_id,
                row.tenant_id,
                row.status,
                row.attempts,
                row.lease_owner.map_or("–".to_string(), |o| o.to_string()),
                row.lease_token.0,
                at(row.lease_expires_at),
                at(row.next_attempt_at)
            )?;
        }
        writeln!(f, "relays:")?;
        for r in 0..self.relays.len() {
            writeln!(f, "  r{r}: {}", self.waits(r))?;
        }
        let broken: Vec<&str> = Property::SAFETY.iter().filter(|p| self.step.violated(**p)).map(|p| p.id()).collect();
        if broken.is_empty() {
            write!(f, "the last step broke no property")
        } else {
            write!(f, "VIOLATED by the last step: {}", broken.join(", "))
        }
    }
}

impl World {
    /// What relay slot `r` waits on, in words: "idle", "about to claim (now=3)", "holds m0
    /// token 1: about to publish", "about to write mark_published(m0 token 1)".
    pub fn waits(&self, r: usize) -> String {
        match self.relays.get(r).and_then(|c| c.as_ref()) {
            None => "idle".to_string(),
            Some((_, crate::relay::Effect::Claim { request })) => format!("about to claim (now={})", request.now.0),
            Some((_, crate::relay::Effect::Publish { lease, .. })) => {
                format!("holds {} token {}: about to publish", lease.message_id, lease.token.0)
            }
            Some((_, crate::relay::Effect::Write { request })) => {
                format!(
                    "about to write {}({} token {})",
                    request.kind.name(),
                    request.lease.message_id,
                    request.lease.token.0
                )
            }
            Some((_, crate::relay::Effect::Done)) => "done".to_string(),
        }
    }

    pub fn new(config: &WorldConfig) -> World {
        World::new_with_events(config).0
    }

    /// The initial world and what happened to make it: the application's enqueues of the
    /// messages that are in the table from the start.
    pub fn new_with_events(config: &WorldConfig) -> (World, Vec<Event>) {
        let mut world = World {
            now: Instant(0),
            outbox: Outbox::new(),
            auditor: Auditor::new(config.max_attempts),
            relays: vec![None; config.relays.len()],
            enqueued: 0,
            requeues_left: config.requeues,
            rescuer: None,
            step: StepFlags::default(),
        };
        let mut report = StepReport::default();
        if !config.enqueue_actions {
            for _ in 0..config.messages {
                world.enqueue(config, false, &mut report);
            }
        }
        (world, report.events)
    }

    fn clocks(&self, config: &WorldConfig, relay: usize) -> Clocks {
        let skew = config.relays[relay].skew;
        Clocks { database: self.now, relay: Instant(self.now.0.saturating_add_signed(skew)) }
    }

    /// Every action enabled in this state, in a fixed order.
    pub fn actions(&self, config: &WorldConfig, actions: &mut Vec<Action>) {
        // An outcome is offered when it is no fault, or a fault the configuration allows.
        let allowed = |fault: Option<Fault>| fault.is_none_or(|f| config.faults.has(f));
        let db_fates = |out: &mut Vec<Action>, make: &dyn Fn(DbFate) -> Action| {
            for db in DbFate::ALL.into_iter().filter(|db| allowed(db.fault())) {
                out.push(make(db));
            }
        };
        for (i, relay) in self.relays.iter().enumerate() {
            let r = i as u16;
            match relay {
                // A claim whose connection dies before it runs changes nothing: the same as not
                // polling, so it is no step of its own.
                None => {
                    for db in [DbFate::Ok, DbFate::LostAfter].into_iter().filter(|db| allowed(db.fault())) {
                        actions.push(Action::Poll { relay: r, db });
                    }
                }
                Some((_, Effect::Publish { .. })) => {
                    if config.permanent_outage {
                        actions.push(Action::Publish { relay: r, fate: BrokerFate::Unavailable });
                    } else {
                        for fate in BrokerFate::ALL.into_iter().filter(|fate| allowed(fate.fault())) {
                            actions.push(Action::Publish { relay: r, fate });
                        }
                    }
                }
                Some((_, Effect::Write { .. })) => {
                    db_fates(actions, &|db| Action::Write { relay: r, db });
                    if allowed(Some(Fault::MisroutedWrite)) && config.tenants > 1 {
                        actions.push(Action::MisroutedWrite { relay: r });
                    }
                }
                Some(_) => {}
            }
            if allowed(Some(Fault::Crash)) && relay.is_some() {
                actions.push(Action::Crash { relay: r });
            }
        }
        // The reaper is enabled only when it has work: a reap that changes nothing is no step.
        if config.has_reaper()
            && self.outbox.rows().iter().any(|row| Outbox::is_reapable(row, self.now, config.max_attempts))
        {
            actions.push(Action::Reap);
        }
        match config.rescue() {
            Some(_) if self.rescuer.is_some() => actions.push(Action::RescueWrite),
            Some(fence) if self.rescuable().is_some() => actions.push(if fence == crate::core::ReleaseFence::Expired {
                Action::Rescue
            } else {
                Action::RescueRead
            }),
            _ => {}
        }
        if config.time_max.is_none_or(|max| self.now.plus(config.tick) <= max) {
            actions.push(Action::Tick);
        }
        if config.enqueue_actions && self.enqueued < config.messages {
            actions.push(Action::Enqueue { stale: false });
            actions.push(Action::Enqueue { stale: true });
        }
        if self.requeues_left > 0 {
            for row in self.outbox.rows() {
                if matches!(row.status, Status::Failed | Status::Exhausted) {
                    actions.push(Action::Requeue { message: row.message_id.0 });
                }
            }
        }
    }

    /// Applies one action and reports what happened. Panics on an action that is not enabled:
    /// that is a bug of the driver.
    pub fn apply(&mut self, config: &WorldConfig, action: Action) -> StepReport {
        self.apply_with(config, action, true)
    }

    /// [`World::apply`] without describing the step in events: for the model checker, which
    /// keeps only the state (and the step's flags).
    pub fn advance(&mut self, config: &WorldConfig, action: Action) {
        self.apply_with(config, action, false);
    }

    fn apply_with(&mut self, config: &WorldConfig, action: Action, describe: bool) -> StepReport {
        let mut report = StepReport { describe, ..StepReport::default() };
        self.step = StepFlags::default();
        match action {
            Action::Poll { relay, db } => self.poll(config, relay as usize, db, &mut report),
            Action::Publish { relay, fate } => self.publish(config, relay as usize, fate, &mut report),
            Action::Write { relay, db } => self.write(config, relay as usize, db, false, &mut report),
            Action::MisroutedWrite { relay } => self.write(config, relay as usize, DbFate::Ok, true, &mut report),
            Action::Crash { relay } => {
                self.relays[relay as usize] = None;
                report.event(|| Event::Crashed { relay });
            }
            Action::Reap => {
                let messages = self.auditor.reap(&mut self.outbox, self.now);
                self.step.seen.exhausted |= !messages.is_empty();
                report.event(|| Event::Reaped { now: self.now, messages });
            }
            Action::Rescue => {
                let lease = self.rescuable().expect("a rescue with an expired lease");
                self.rescue(config, lease, crate::core::ReleaseFence::Expired, &mut report);
            }
            Action::RescueRead => {
                let lease = self.rescuable().expect("a rescuer read with an expired lease");
                self.rescuer = Some(lease);
                report.event(|| Event::RescueRead { now: self.now, lease });
            }
            Action::RescueWrite => {
                let lease = self.rescuer.take().expect("a rescuer write after its read");
                let fence = config.rescue().expect("a design with a rescuer");
                self.rescue(config, lease, fence, &mut report);
            }
            Action::Tick => {
                self.now = self.now.plus(config.tick);
                report.event(|| Event::Ticked { now: self.now });
            }
            Action::Enqueue { stale } => self.enqueue(config, stale, &mut report),
            Action::Requeue { message } => {
                // The operator's tool ships with the fleet's first design.
                let policy = config.policy(0);
                self.requeues_left -= 1;
                let message_id = MessageId(message);
                if let Ok(result) = self.auditor.requeue(&mut self.outbox, &policy, message_id) {
                    report.event(|| Event::Requeued { message_id, result });
                }
            }
        }
        report.violations = self.auditor.take_violations();
        for v in &report.violations {
            if let Some(i) = Property::SAFETY.iter().position(|p| *p == v.property) {
                self.step.violated |= 1 << i;
            }
        }
        report
    }

    /// The first row (by id) whose lease has expired, as the rescuer reads it: its lease as it
    /// stands (the latest claim's).
    fn rescuable(&self) -> Option<Lease> {
        let row = self.outbox.rescuable(self.now)?;
        Some(Lease::of_row(row, self.auditor.ghost(row.message_id).map_or(0, |g| g.claims)))
    }

    /// The rescuer's move of the row of `lease`: back to PENDING with its budget left, else to
    /// EXHAUSTED (FAILED in a design without it). The attempts stay.
    fn rescue(
        &mut self,
        config: &WorldConfig,
        lease: Lease,
        fence: crate::core::ReleaseFence,
        report: &mut StepReport,
    ) {
        let attempts = self.outbox.row(lease.message_id).map_or(0, |row| row.attempts);
        let to = config.policy(0).rescue_target(attempts, config.max_attempts);
        let request = crate::core::ReleaseRequest { lease, fence, to, retry_at: None, now: self.now };
        if let Ok(result) = self.auditor.release(&mut self.outbox, &request) {
            self.step.seen.exhausted |= matches!(result, WriteResult::Applied { status: Status::Exhausted });
            self.step.seen.stale_refused |= matches!(result, WriteResult::Stale { .. });
            report.event(|| Event::Rescued { request, result });
        }
    }

    fn enqueue(&mut self, config: &WorldConfig, stale: bool, report: &mut StepReport) {
        let n = self.enqueued;
        // Two messages per aggregate, so an ordering per aggregate exists to be overtaken.
        let aggregate = AggregateId(n / 2);
        let tenant = config.message_tenant(n);
        let current = self.outbox.aggregate_version(tenant, aggregate);
        let request = EnqueueRequest {
            tenant_id: tenant,
            aggregate_id: aggregate,
            expected_version: if stale { current + 1 } else { current },
            message_id: MessageId(n),
            now: self.now,
        };
        self.step.seen.stale_enqueue = stale;
        if let Ok(result) = self.auditor.enqueue(&mut self.outbox, &request) {
            if let EnqueueResult::Applied { .. } = result {
                self.enqueued += 1;
            }
            report.event(|| Event::Enqueued { request, result });
        }
    }

    fn poll(&mut self, config: &WorldConfig, r: usize, db: DbFate, report: &mut StepReport) {
        let relay_config = config.relay_config(r);
        let clocks = self.clocks(config, r);
        let (mut cycle, effect) = Cycle::start(&relay_config, clocks);
        let Effect::Claim { request } = effect else {
            unreachable!("a cycle starts with its claim");
        };
        let mut leases = Vec::new();
        if db != DbFate::LostBefore {
            // One pass over the table before the claim: which rows are leased (a claim of one is
            // a takeover), which some claim has taken before (its new token must differ), and
            // whether a terminal row or another tenant's live row is there to be met.
            let mut taken_over: SmallVec<[MessageId; 8]> = SmallVec::new();
            let mut claimed_before: SmallVec<[MessageId; 8]> = SmallVec::new();
            let (mut terminal_met, mut tenants_crossed) = (false, false);
            for row in self.outbox.rows() {
                if row.status == Status::InFlight {
                    taken_over.push(row.message_id);
                }
                if row.status != Status::Pending
                    || row.attempts > 0
                    || row.last_failure_code.is_some()
                    || row.next_attempt_at.is_some()
                {
                    claimed_before.push(row.message_id);
                }
                terminal_met |= row.status.is_terminal();
                tenants_crossed |= row.tenant_id != request.tenant_id && !row.status.is_terminal();
            }
            self.step.seen.terminal_met = terminal_met;
            self.step.seen.tenants_crossed = tenants_crossed;
            leases = self.auditor.claim(&mut self.outbox, &relay_config.policy, &request, self.now).unwrap_or_default();
            self.step.seen.lease_taken_over = leases.iter().any(|l| taken_over.contains(&l.message_id));
            self.step.seen.claimed_again = leases.iter().any(|l| claimed_before.contains(&l.message_id));
            // The claim handed out a row's last attempt: its budget is spent.
            self.step.seen.exhausted = leases.iter().any(|l| used_up(l.attempts, config.max_attempts));
        }
        report.event(|| Event::Claimed { relay: r as u16, request, leases: leases.clone(), db });
        let reply = if db == DbFate::Ok { Reply::Claimed(leases) } else { Reply::ConnectionLost };
        let step = cycle.answer(&relay_config, reply, clocks);
        self.settle(r, cycle, step, report);
    }

    fn publish(&mut self, config: &WorldConfig, r: usize, fate: BrokerFate, report: &mut StepReport) {
        let relay_config = config.relay_config(r);
        let clocks = self.clocks(config, r);
        let (mut cycle, effect) = self.relays[r].take().expect("publish from an idle relay");
        let Effect::Publish { lease, key } = effect else {
            unreachable!("publish action without a pending publication");
        };
        let stores = fate.stores();
        let stored_before = self.auditor.ghost(lease.message_id).is_some_and(|g| g.stored);
        self.auditor.published(&lease, key, stores > 0);
        // The consumer deduplicates by key: a second copy under the message id is no new effect.
        let stable_key = key == IdempotencyKey::Message { message_id: lease.message_id };
        self.step.seen.duplicate_deduplicated = stable_key && stores > 0 && (stored_before || stores > 1);
        report.event(|| Event::Published { relay: r as u16, lease, key, fate });
        let step = cycle.answer(&relay_config, Reply::Published(fate.outcome()), clocks);
        self.settle(r, cycle, step, report);
    }

    fn write(&mut self, config: &WorldConfig, r: usize, db: DbFate, misrouted: bool, report: &mut StepReport) {
        let relay_config = config.relay_config(r);
        let clocks = self.clocks(config, r);
        let (mut cycle, effect) = self.relays[r].take().expect("write from an idle relay");
        let Effect::Write { mut request } = effect else {
            unreachable!("write action without a pending write");
        };
        if misrouted {
            let other = (request.lease.tenant_id.0 + 1) % config.tenants.max(1);
            request.lease.tenant_id = TenantId(other);
        }
        // The statement's `now` is read when it runs, not when the relay decided to write.
        request.now = clocks.now_for(&relay_config.policy);
        let mut result = None;
        if db != DbFate::LostBefore {
            let id = request.lease.message_id;
            let row = self.outbox.row(id);
            let attempts_before = row.map_or(0, |row| row.attempts);
            let was_ambiguous = row.is_some_and(|row| row.last_failure_code == Some(FailureCode::Timeout));
            self.step.seen.terminal_met = row.is_some_and(|row| row.status.is_terminal());
            self.step.seen.tenants_crossed = row.is_some_and(|row| row.tenant_id != request.lease.tenant_id);
            let applied = self.auditor.write(&mut self.outbox, &relay_config.policy, &request);
            let Ok(applied) = applied else {
                unreachable!("a relay's lease names a row of the table");
            };
            result = Some(applied);
            // A failure write that counted the last attempt spends the budget too.
            let attempts_after = self.outbox.row(id).map_or(0, |row| row.attempts);
            self.step.seen.exhausted =
                !used_up(attempts_before, config.max_attempts) && used_up(attempts_after, config.max_attempts);
            match applied {
                WriteResult::Stale { .. } => self.step.seen.stale_refused = true,
                WriteResult::Applied { status: Status::Exhausted } => self.step.seen.exhausted = true,
                WriteResult::Applied { status: Status::Published } => {
                    self.step.seen.confirmed = true;
                    self.step.seen.ambiguous_then_published = was_ambiguous;
                    self.step.seen.order_overtaken = self.overtakes(id);
                }
                WriteResult::Applied { .. } => {}
            }
        }
        report.event(|| Event::Wrote { relay: r as u16, request, result, db });
        let reply = match (db, result) {
            (DbFate::Ok, Some(result)) => Reply::Written(result),
            _ => Reply::ConnectionLost,
        };
        let step = cycle.answer(&relay_config, reply, clocks);
        self.settle(r, cycle, step, report);
    }

    /// `id` was just published while an earlier event of its aggregate was not.
    fn overtakes(&self, id: MessageId) -> bool {
        let Some(row) = self.outbox.row(id) else { return false };
        self.outbox.rows().iter().any(|other| {
            other.aggregate_id == row.aggregate_id
                && other.tenant_id == row.tenant_id
                && other.aggregate_version < row.aggregate_version
                && other.status != Status::Published
        })
    }

    /// Keeps the cycle if it has more to do; a relay whose cycle is done is idle again.
    fn settle(&mut self, r: usize, cycle: Cycle, step: Step, report: &mut StepReport) {
        if let Some((message_id, result)) = step.finished {
            report.event(|| Event::Finished { relay: r as u16, message_id, result });
        }
        self.relays[r] = if step.effect == Effect::Done { None } else { Some((cycle, step.effect)) };
    }

    /// Rewrites the state into a canonical representative that behaves the same from here on, so
    /// the model checker collapses states that differ only in what cannot matter any more:
    ///
    /// - **time**: every clock that may still read an instant reads at least the horizon
    ///   `now − W` (W the largest negative clock skew of the fleet), now and later, so instants
    ///   at or before it are past for good: as order keys (due order) they are only compared
    ///   with each other and become their ranks; expiries among them only ever say "expired", so
    ///   they become 0; `published_at`, read only by S4 where a design may write a terminal row,
    ///   keeps its distance from now when it could still equal a write's `now` (else 0); later
    ///   instants keep their distance from `now`. A quiet tick then leads back to the same
    ///   state, and time needs no bound.
    /// - **tokens** (counter kind): a row's token and the tokens of the leases held for it are
    ///   compared for equality and grow by exactly 1, never past the row's; renaming them to their
    ///   ranks keeps every comparison. Not done when a design resets tokens (a reset token is
    ///   compared with larger ones, and a +1 could then meet a renamed value it would never meet).
    /// - **random tokens**: renamed to ranks, and the random source restarted, whose first value
    ///   is no small rank.
    /// - **ghost claim numbers**: compared for equality only, the row's being the largest: ranks.
    /// - **counters** compared only with the budget (attempts, publications) saturate at
    ///   `max + 1`; a lease's pending write's `now` is overwritten when it runs, so it becomes 0;
    ///   the lifetime publication count is not a state at all.
    pub fn normalise(&mut self, config: &WorldConfig) -> Permutation {
        self.normalise_with(config, None)
    }

    /// [`World::normalise`], and with `safety = Some(tracked)` the abstractions of
    /// [`World::abstract_for_safety`] too, for a check of the safety properties in which only the
    /// reachability flags in the bit mask `tracked` are still looked at.
    pub fn normalise_with(&mut self, config: &WorldConfig, safety: Option<Abstraction>) -> Permutation {
        self.normalise_by(config, &FleetFacts::of(config), safety)
    }

    /// [`World::normalise_with`] with the fleet's facts read once by the caller.
    pub fn normalise_by(
        &mut self,
        config: &WorldConfig,
        facts: &FleetFacts,
        safety: Option<Abstraction>,
    ) -> Permutation {
        self.normalise_time(config, facts);
        self.erase_stale_leases(facts);
        self.normalise_ranks(config, facts);
        self.normalise_rest(config, facts, safety)
    }

    /// [`World::normalise_by`] for the successor by `action` of a normalised state, skipping
    /// what that action cannot have changed: a publication touches no row, instant, token or
    /// claim number (only its relay's cycle and the row's ghost counters), a tick only the
    /// clock. The result is the same (`tests/model_check.rs` compares the two on every step of
    /// a complete check); the model checker spends less than half its time here.
    pub fn normalise_after(
        &mut self,
        config: &WorldConfig,
        facts: &FleetFacts,
        safety: Option<Abstraction>,
        action: Action,
    ) -> Permutation {
        match action {
            Action::Publish { .. } => {
                self.erase_stale_leases(facts);
                for (_, effect) in self.relays.iter_mut().flatten() {
                    if let Effect::Write { request } = effect {
                        request.now = Instant(0);
                    }
                }
                for ghost in self.auditor.ghosts_mut() {
                    saturate_publications(ghost, config.max_attempts + 1);
                }
                self.normalise_rest(config, facts, safety)
            }
            Action::Tick => {
                self.normalise_time(config, facts);
                self.normalise_rest(config, facts, safety)
            }
            _ => self.normalise_by(config, facts, safety),
        }
    }

    /// Tokens and ghost claim numbers to ranks, counters saturated, pending writes' `now` erased.
    fn normalise_ranks(&mut self, config: &WorldConfig, facts: &FleetFacts) {
        let cap = config.max_attempts + 1;
        let World { outbox, auditor, relays, rescuer, .. } = self;
        // Every copy of a lease the relays (and the rescuer) hold, gathered once.
        let mut leases: SmallVec<[&mut Lease; 8]> = SmallVec::new();
        leases.extend(rescuer.as_mut());
        for (cycle, effect) in relays.iter_mut().flatten() {
            leases.extend(cycle.leases_mut().iter_mut());
            match effect {
                Effect::Publish { lease, .. } => leases.push(lease),
                Effect::Write { request } => {
                    request.now = Instant(0);
                    leases.push(&mut request.lease);
                }
                Effect::Claim { .. } | Effect::Done => {}
            }
        }
        for row in outbox.rows_mut() {
            let id = row.message_id;
            if !facts.resets_tokens {
                let mut tokens: SmallVec<[u64; 8]> = smallvec![row.lease_token.0];
                tokens.extend(leases.iter().filter(|l| l.message_id == id).map(|l| l.token.0));
                tokens.sort_unstable();
                tokens.dedup();
                let rank = |t: u64| rank_in(&tokens, t) as u64;
                row.lease_token = LeaseToken(rank(row.lease_token.0));
                for l in leases.iter_mut().filter(|l| l.message_id == id) {
                    l.token = LeaseToken(rank(l.token.0));
                }
            }
            row.attempts = row.attempts.min(cap);
            let mut ghost = auditor.ghosts_mut().iter_mut().find(|g| g.message_id == id.0);
            let (claims, requeued) = ghost.as_ref().map_or((0, 0), |g| (g.claims, g.requeued_after_claim));
            let mut seqs: SmallVec<[u32; 8]> = smallvec![claims, requeued];
            seqs.extend(leases.iter().filter(|l| l.message_id == id).map(|l| l.claim_seq));
            seqs.sort_unstable();
            seqs.dedup();
            let rank = |c: u32| rank_in(&seqs, c) as u32;
            for l in leases.iter_mut().filter(|l| l.message_id == id) {
                l.claim_seq = rank(l.claim_seq);
                l.attempts = l.attempts.min(cap);
            }
            if let Some(ghost) = ghost.as_mut() {
                ghost.claims = rank(ghost.claims);
                ghost.requeued_after_claim = rank(ghost.requeued_after_claim);
                saturate_publications(ghost, cap);
                ghost.tokens_seen.clear();
            }
        }
        drop(leases);
        if facts.random_tokens {
            self.outbox.restart_random_tokens();
        }
    }

    /// The abstractions, dead fields and relay order: what every step may change.
    fn normalise_rest(&mut self, config: &WorldConfig, facts: &FleetFacts, safety: Option<Abstraction>) -> Permutation {
        if let Some(abstraction) = safety {
            self.abstract_for_safety(config, facts, abstraction);
        }
        self.erase_dead_fields(facts);
        self.canonical_relay_order(config, facts)
    }

    /// In a fleet where every claim bumps the token and every write checks it, a lease whose
    /// claim is no longer the row's latest can only ever be refused: its token, attempts and
    /// pending write kind are dead, so superseded leases look alike (token 0, which no later
    /// claim hands out). Its ghost claim number stays: it says which budget its publications
    /// count against.
    fn erase_stale_leases(&mut self, facts: &FleetFacts) {
        if !facts.fenced {
            return;
        }
        let latest: SmallVec<[(MessageId, u32); 8]> =
            self.auditor.ghosts().iter().map(|g| (MessageId(g.message_id), g.claims)).collect();
        let is_stale = |l: &Lease| latest.iter().any(|&(m, c)| m == l.message_id && c != l.claim_seq);
        if let Some(lease) = self.rescuer.as_mut().filter(|l| is_stale(l)) {
            *lease = Lease { token: LeaseToken(0), attempts: 0, ..*lease };
        }
        for (cycle, effect) in self.relays.iter_mut().flatten() {
            for lease in cycle.leases_mut() {
                if is_stale(lease) {
                    *lease = Lease { token: LeaseToken(0), attempts: 0, ..*lease };
                }
            }
            match effect {
                Effect::Publish { lease, .. } if is_stale(lease) => {
                    *lease = Lease { token: LeaseToken(0), attempts: 0, ..*lease };
                }
                Effect::Write { request } if is_stale(&request.lease) => {
                    request.lease = Lease { token: LeaseToken(0), attempts: 0, ..request.lease };
                    request.kind = crate::core::WriteKind::Published;
                }
                _ => {}
            }
        }
    }

    /// Abstractions for the safety check: they merge states that differ in ghost variables a
    /// safety property reads, and only ever towards a *larger* chance of a violation, so a
    /// property that holds here holds in the exact world; in the fleets where they apply they
    /// also raise no false alarm. No rule of the core reads what they change, so the abstract
    /// world takes exactly the steps of the exact one. `abstraction.tracked` is the bit mask (in
    /// [`Situation::bit`]) of the reachability flags still looked at: a
    /// field one of them reads is left alone.
    ///
    /// - **Publications over-counted** (S3). A row's ghost publication count `p` becomes
    ///   `max(p, attempts − h)`, `h` the leases of its current budget that are still to be
    ///   published. It never decreases `p`, so a publication past the budget is still seen. In a
    ///   fleet whose every design counts `attempts` at the claim under the strict budget
    ///   predicate and publishes once per lease, `p + h ≤ attempts` always holds (every
    ///   publication and every lease still to publish was a claim, and every claim counted one
    ///   attempt), so the new value is exactly `attempts − h`: `p` is no longer a state of its
    ///   own, and since `attempts − h` publications plus at most `h + (max − attempts)` more
    ///   stay within `max`, nothing is flagged that the exact world would not flag. (Applied in
    ///   those fleets only: elsewhere the count stays exact.)
    /// - **Broker storage forgotten** (S5). `stored` is kept only while some relay has a pending
    ///   write of PUBLISHED for the row; otherwise it becomes `false`. That only ever makes an
    ///   unconfirmed PUBLISHED more likely to be flagged. In a fleet where no design writes
    ///   PUBLISHED before its broker acknowledged (or after a second, unchecked publication),
    ///   every write of PUBLISHED follows its own relay's stored publication, which sets `stored`
    ///   again, so nothing is flagged that the exact world would not flag.
    /// - **Failure code dropped.** `last_failure_code` is read by no rule, by S4's comparison of a
    ///   terminal row (whose fields are dead anyway where [`Self::erase_dead_fields`] erases
    ///   them, or no longer looked at once S4 is settled) and by the "AMBIGUOUS later PUBLISHED"
    ///   flag: once that flag is not tracked, it goes. (The "claimed again" flag reads whether a
    ///   code is set, but a row with a code has been claimed and counted an attempt or left
    ///   PENDING, unless an operator requeued it: so not while requeues are left.)
    /// - **Claim numbers collapsed** (S1, S3). A lease's ghost claim number is read only as "is
    ///   it the row's latest claim" (S1, the liveness checks, stale leases) and "does it belong
    ///   to the current budget", that is, is it past the claim number of the row's last requeue
    ///   (S3); the requeue's number only in that comparison, and a requeue to come puts every
    ///   lease held by then before itself. So where every lease held for a row belongs to its
    ///   current budget, the budget's start becomes 0, the stale leases 1 and the latest claim
    ///   the next: two stale leases look alike.
    ///
    /// Then, for the properties already **settled** (`abstraction.settled`: an exact path breaks
    /// each, so the check no longer looks at them), the ghost fields that only they read are
    /// erased; no rule, no liveness check and no other property reads them, so the steps and
    /// every other property's verdict stay exactly those of the exact world:
    /// - S3 settled: the publication counts become 0.
    /// - S4 settled: `published_at` (read by S4's comparison of a terminal row alone) becomes 0,
    ///   and the failure code goes as above, in fleets whose designs touch terminal rows too.
    /// - S5 settled and the "published twice" flag (R-S8) not tracked: `stored` becomes `false`.
    fn abstract_for_safety(&mut self, config: &WorldConfig, facts: &FleetFacts, abstraction: Abstraction) {
        // What each property and situation reads is declared in the catalogue (core::property);
        // only the ghost fields of ABSTRACTION_READS are read by situations.
        let cap = config.max_attempts + 1;
        let publications_settled = abstraction.no_property_reads(Ghosts::PUBLICATIONS);
        let terminal_settled = abstraction.no_property_reads(Ghosts::PUBLISHED_AT);
        let forget_stored = abstraction.no_situation_reads(Ghosts::STORED)
            && (facts.confirms_after_ack || abstraction.no_property_reads(Ghosts::STORED));
        let drop_code = abstraction.no_situation_reads(Ghosts::FAILURE_CODE)
            && self.requeues_left == 0
            && (facts.keeps_terminal || abstraction.no_property_reads(Ghosts::FAILURE_CODE));
        self.collapse_claim_numbers();
        for m in 0..self.outbox.rows().len() {
            let row = &mut self.outbox.rows_mut()[m];
            if drop_code {
                row.last_failure_code = None;
            }
            if terminal_settled {
                row.published_at = row.published_at.map(|_| Instant(0));
            }
            let (id, attempts) = (row.message_id, row.attempts);
            let Some(g) = self.auditor.ghosts().iter().position(|g| g.message_id == id.0) else { continue };
            let budget_from = self.auditor.ghosts()[g].requeued_after_claim;
            let mut to_publish = 0u32;
            let mut confirming = false;
            for (cycle, effect) in self.relays.iter().flatten() {
                let ours = |l: &&Lease| l.message_id == id && l.claim_seq > budget_from;
                to_publish += cycle.leases_to_publish().iter().filter(ours).count() as u32;
                if let Effect::Write { request } = effect {
                    confirming |= request.lease.message_id == id && request.kind == crate::core::WriteKind::Published;
                }
            }
            let ghost = &mut self.auditor.ghosts_mut()[g];
            if publications_settled {
                ghost.publications = 0;
                ghost.publications_previous = 0;
            } else if facts.counts_at_claim {
                ghost.publications = ghost.publications.max(attempts.saturating_sub(to_publish)).min(cap);
            }
            if forget_stored && !confirming {
                ghost.stored = false;
            }
        }
    }

    /// The claim numbers of [`World::abstract_for_safety`]: on each row whose every lease held
    /// belongs to its current budget, the budget's start becomes 0, the stale leases 1 and the
    /// latest claim the next (ranks, as `normalise_ranks` would give them).
    fn collapse_claim_numbers(&mut self) {
        // Per ghost: (row, latest claim, budget start, every lease in the current budget, some
        // lease stale).
        type Claims = (MessageId, u32, u32, bool, bool);
        let mut rows: SmallVec<[Claims; 8]> = self
            .auditor
            .ghosts()
            .iter()
            .map(|g| (MessageId(g.message_id), g.claims, g.requeued_after_claim, g.claims > 0, false))
            .collect();
        self.each_lease(&mut |l| {
            if let Some(r) = rows.iter_mut().find(|r| r.0 == l.message_id) {
                r.3 &= l.claim_seq > r.2;
                r.4 |= l.claim_seq != r.1;
            }
        });
        let top = |stale: bool| if stale { 2 } else { 1 };
        self.each_lease(&mut |l| {
            if let Some(&(_, latest, _, _, stale)) = rows.iter().find(|r| r.0 == l.message_id && r.3) {
                l.claim_seq = if l.claim_seq == latest { top(stale) } else { 1 };
            }
        });
        for (ghost, &(_, _, _, collapse, stale)) in self.auditor.ghosts_mut().iter_mut().zip(&rows) {
            if collapse {
                ghost.claims = top(stale);
                ghost.requeued_after_claim = 0;
                // Read by no lease held, and overwritten by the next requeue.
                ghost.publications_previous = 0;
            }
        }
    }

    /// Relays that run the same design for the same tenant (with the same skew, where the
    /// design reads the relay's clock) under owner ids no other slot shares are interchangeable:
    /// renaming their owner ids in rows and leases and swapping their states gives a world that
    /// behaves the same. Picks, among such swaps, the world with the smallest fingerprint.
    /// Returns the permutation applied: new slot `i` holds what slot `perm[i]` held.
    fn canonical_relay_order(&mut self, config: &WorldConfig, facts: &FleetFacts) -> Permutation {
        let mut perm: Permutation = (0..config.relays.len()).collect();
        if facts.swappable.is_empty() {
            return perm;
        }
        let anonymous = |world: &World, i: usize| {
            use std::hash::{Hash, Hasher};
            let mut h = stable_hasher();
            match &world.relays[i] {
                None => 0u8.hash(&mut h),
                Some((cycle, effect)) => cycle.hash_anonymous(effect, &mut h),
            }
            h.finish()
        };
        for &(a, b) in &facts.swappable {
            let (a, b) = (usize::from(a), usize::from(b));
            let (ka, kb) = (anonymous(self, a), anonymous(self, b));
            let swap = match kb.cmp(&ka) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                // Alike but for names: the world and its swap differ only in the owner ids of
                // rows and leases, so those decide (without building the swap to compare).
                std::cmp::Ordering::Equal => {
                    let (oa, ob) = (config.relays[a].owner, config.relays[b].owner);
                    let rename = |o: RelayId| {
                        if o == oa {
                            ob
                        } else if o == ob {
                            oa
                        } else {
                            o
                        }
                    };
                    let slot = |i: usize| {
                        if i == a {
                            b
                        } else if i == b {
                            a
                        } else {
                            i
                        }
                    };
                    self.owner_key(&rename, &slot) < self.owner_key(&|o| o, &|i| i)
                }
            };
            if swap {
                self.swap_relays(config, a, b);
                perm.swap(a, b);
            }
        }
        perm
    }

    /// A hash of the owner ids this world holds — of its rows, then of the leases of each relay
    /// slot — as they would read with ids renamed by `rename` and slot `i` holding what slot
    /// `slot(i)` holds.
    fn owner_key(&self, rename: &dyn Fn(RelayId) -> RelayId, slot: &dyn Fn(usize) -> usize) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = stable_hasher();
        for row in self.outbox.rows() {
            row.lease_owner.map(rename).hash(&mut h);
        }
        for i in 0..self.relays.len() {
            if let Some((cycle, effect)) = &self.relays[slot(i)] {
                i.hash(&mut h);
                cycle.leases().iter().for_each(|l| rename(l.owner).hash(&mut h));
                match effect {
                    Effect::Publish { lease, .. } => rename(lease.owner).hash(&mut h),
                    Effect::Write { request } => rename(request.lease.owner).hash(&mut h),
                    Effect::Claim { .. } | Effect::Done => {}
                }
            }
        }
        h.finish()
    }

    /// Exchanges relay slots `i` and `j` and renames their owner ids.
    fn swap_relays(&mut self, config: &WorldConfig, i: usize, j: usize) {
        let (a, b) = (config.relays[i].owner, config.relays[j].owner);
        let rename = |o: RelayId| {
            if o == a {
                b
            } else if o == b {
                a
            } else {
                o
            }
        };
        self.relays.swap(i, j);
        for row in self.outbox.rows_mut() {
            row.lease_owner = row.lease_owner.map(rename);
        }
        self.each_lease(&mut |l| l.owner = rename(l.owner));
    }

    /// Fields no rule and no check can read again become constants.
    ///
    /// - `last_failure_code` is read by nothing but the "AMBIGUOUS later PUBLISHED" reachability
    ///   check, which needs only whether it says timeout.
    /// - In a fleet whose every design keeps terminal rows terminal (claims skip them, writes
    ///   check the status first, a stale write says Stale) and with no requeue left, a terminal
    ///   row is only ever compared by status: its other fields, the tokens, attempts and write
    ///   kinds of the leases still held for it, and the broker-stored ghost
    ///   (S5 judges a row when it becomes PUBLISHED) are dead. Its publication count stays while
    ///   a lease for it is held, since a stale relay may still publish it (S3).
    fn erase_dead_fields(&mut self, facts: &FleetFacts) {
        let terminal_safe = self.requeues_left == 0 && facts.keeps_terminal;
        let mut dead: SmallVec<[MessageId; 8]> = SmallVec::new();
        for row in self.outbox.rows_mut() {
            // Where a design may write a terminal row, S4 compares the whole row, code included.
            if facts.keeps_terminal && row.last_failure_code != Some(FailureCode::Timeout) {
                row.last_failure_code = None;
            }
            if terminal_safe && row.status.is_terminal() {
                *row = crate::core::Row {
                    attempts: 0,
                    lease_owner: None,
                    lease_token: LeaseToken(0),
                    lease_expires_at: None,
                    next_attempt_at: None,
                    last_failure_code: None,
                    created_at: Instant(0),
                    published_at: None,
                    ..*row
                };
                dead.push(row.message_id);
            }
        }
        if dead.is_empty() {
            return;
        }
        let mut held: SmallVec<[MessageId; 8]> = SmallVec::new();
        self.each_lease(&mut |l| {
            if dead.contains(&l.message_id) {
                held.push(l.message_id);
                l.token = LeaseToken(0);
                l.attempts = 0;
            }
        });
        for (_, effect) in self.relays.iter_mut().flatten() {
            if let Effect::Write { request } = effect {
                if dead.contains(&request.lease.message_id) {
                    request.kind = crate::core::WriteKind::Published;
                }
            }
        }
        for ghost in self.auditor.ghosts_mut() {
            if dead.contains(&MessageId(ghost.message_id)) {
                ghost.stored = false;
                if !held.contains(&MessageId(ghost.message_id)) {
                    ghost.publications = 0;
                }
            }
        }
    }

    fn normalise_time(&mut self, config: &WorldConfig, facts: &FleetFacts) {
        let window = config.relays.iter().map(|r| r.skew.min(0).unsigned_abs()).max().unwrap_or(0);
        let now = self.now.0;
        // Signed: early on, `now − W` is before the first instant, and then no instant is past
        // for good yet (saturating it at 0 would make the result depend on how early it is, and
        // normalising twice would not give the same state).
        let horizon = i128::from(now) - i128::from(window);
        // The instants of rows whose fields are dead (see `erase_dead_fields`, which makes them
        // constants afterwards) are compared with nothing: they take no rank, or a state and its
        // normalisation would rank the live instants differently.
        let dead_terminal = self.requeues_left == 0 && facts.keeps_terminal;
        let mut old: SmallVec<[u64; 16]> = SmallVec::new();
        for row in self.outbox.rows() {
            if dead_terminal && row.status.is_terminal() {
                continue;
            }
            old.push(row.created_at.0);
            old.extend(row.next_attempt_at.map(|t| t.0));
            // A visibility timeout's retry time, kept in the lease's column of a row that is not
            // IN_FLIGHT, orders the claim as a retry time does (`Row::retry_at`).
            if row.status != Status::InFlight {
                old.extend(row.lease_expires_at.map(|t| t.0));
            }
        }
        // Instants at or before the horizon are past for every clock that may still read them,
        // now and later: only their order among themselves is left to compare.
        old.retain(|t| i128::from(*t) <= horizon);
        old.sort_unstable();
        old.dedup();
        let base = old.len() as u64;
        let map = |t: u64| {
            if i128::from(t) <= horizon {
                rank_in(&old, t) as u64
            } else {
                base + (i128::from(t) - horizon) as u64
            }
        };
        for row in self.outbox.rows_mut() {
            row.created_at = Instant(map(row.created_at.0));
            row.next_attempt_at = row.next_attempt_at.map(|t| Instant(map(t.0)));
            // Every clock that may still read an expiry reads at least `horizon`, and expiries
            // are only ever compared as `expiry <= clock`: one at or before the horizon has
            // expired for good, however long ago.
            // (A retry time in the lease's column is ranked like the other retry times.)
            let in_flight = row.status == Status::InFlight;
            row.lease_expires_at = row
                .lease_expires_at
                .map(|t| Instant(if in_flight && i128::from(t.0) <= horizon { 0 } else { map(t.0) }));
            // `published_at` is read only by S4's comparison of a terminal row before and after
            // a step, in fleets where a design may write a terminal row: there it is compared
            // for equality with the `now` of a write to come, which reads at least the horizon.
            // One before the horizon can equal none of those: it becomes "long ago"; later ones
            // keep their distance from now. Elsewhere it is read by nothing.
            row.published_at = row.published_at.map(|t| {
                if facts.keeps_terminal {
                    Instant(0)
                } else if t == PUBLISHED_LONG_AGO || i128::from(t.0) < horizon {
                    PUBLISHED_LONG_AGO
                } else {
                    Instant(base + (i128::from(t.0) - horizon) as u64)
                }
            });
        }
        self.now = Instant(base + window);
    }

    /// Calls `f` on every copy of a lease the relays hold (in their cycles and pending effects).
    fn each_lease(&mut self, f: &mut dyn FnMut(&mut Lease)) {
        if let Some(lease) = self.rescuer.as_mut() {
            f(lease);
        }
        for (cycle, effect) in self.relays.iter_mut().flatten() {
            cycle.leases_mut().iter_mut().for_each(&mut *f);
            match effect {
                Effect::Publish { lease, .. } => f(lease),
                Effect::Write { request } => f(&mut request.lease),
                Effect::Claim { .. } | Effect::Done => {}
            }
        }
    }
}

/// What the safety check still looks at, so that its abstractions ([`World::normalise_by`] with
/// `Some`) may merge states that differ only in what it no longer reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Abstraction {
    /// The reachability flags still tracked (bits as [`Situation::bit`]): a
    /// field one of them reads is left alone.
    pub tracked: u16,
    /// The safety properties already settled (bits in [`Property::SAFETY`]'s order): an exact
    /// search has a path that breaks each, so the check no longer looks at them, and a ghost
    /// field only settled properties read is erased (see [`World::abstract_for_safety`]).
    pub settled: u16,
}

impl Abstraction {
    /// Tracking the flags in `tracked`, every safety property still looked at.
    pub const fn tracking(tracked: u16) -> Abstraction {
        Abstraction { tracked, settled: 0 }
    }

    /// Nothing tracked and every safety property settled: what a liveness graph needs, whose
    /// checks read no flag and no safety property.
    pub const LIVENESS: Abstraction = Abstraction { tracked: 0, settled: (1 << Property::SAFETY.len()) - 1 };

    fn settles(self, property: Property) -> bool {
        Property::SAFETY.contains(&property) && self.settled & property.bit() != 0
    }

    /// No situation still tracked reads any of `ghosts`.
    fn no_situation_reads(self, ghosts: Ghosts) -> bool {
        self.tracked & Situation::reading(ghosts) == 0
    }

    /// No safety property still looked at (not settled) reads any of `ghosts`.
    fn no_property_reads(self, ghosts: Ghosts) -> bool {
        Property::SAFETY.iter().all(|p| self.settles(*p) || !p.entry().reads.overlaps(ghosts))
    }
}

/// A normalised `published_at` before the horizon: no write to come can read it as its `now`.
pub const PUBLISHED_LONG_AGO: Instant = Instant(u64::MAX);

/// The situations (bits as [`Situation::bit`]) whose ghost fields the safety abstractions leave
/// alone while they are tracked, as the catalogue declares their reads: R-S8 reads the broker's
/// storage, R-S7 the failure code. Tracking any other situation normalises exactly as tracking
/// none.
pub const ABSTRACTION_READS: u16 = Situation::reading(Ghosts::STORED.union(Ghosts::FAILURE_CODE));

/// What normalisation needs to know of the fleet's designs: read once per model, not per state.
#[derive(Clone, Debug)]
pub struct FleetFacts {
    resets_tokens: bool,
    random_tokens: bool,
    /// Every claim bumps the token and every write checks it.
    fenced: bool,
    /// No design touches a terminal row.
    keeps_terminal: bool,
    /// The pairs of relay slots `(a, b)`, `a < b`, in the order [`World::canonical_relay_order`]
    /// tries them: same design, tenant and (where the design reads it) clock, and owner ids no
    /// other slot shares.
    swappable: SmallVec<[(u8, u8); 4]>,
    /// Every design counts `attempts` at the claim, under the strict budget predicate, and
    /// publishes once per lease.
    counts_at_claim: bool,
    /// No design writes PUBLISHED but right after its own acknowledged publication.
    confirms_after_ack: bool,
}

impl FleetFacts {
    pub fn of(config: &WorldConfig) -> FleetFacts {
        use crate::core::policy::{AttemptsAt, BudgetPredicate, ClaimFence, ClockSource, WriteFence};
        let policies: SmallVec<[Policy; 4]> = (0..config.relays.len()).map(|i| config.policy(i)).collect();
        FleetFacts {
            resets_tokens: policies.iter().any(|p| p.requeue_resets_token),
            random_tokens: policies.iter().any(|p| p.token_kind == TokenKind::Random),
            fenced: policies.iter().all(|p| {
                p.claim_fence == ClaimFence::OwnerAndToken
                    && matches!(p.write_fence, WriteFence::StatusOwnerToken | WriteFence::StatusToken)
                    && !p.swallow_stale
                    && !p.requeue_resets_token
                    && p.rescue != Some(crate::core::ReleaseFence::Id)
            }),
            keeps_terminal: policies.iter().all(|p| {
                !p.claim_terminal
                    && p.write_fence != WriteFence::MessageIdOnly
                    && !p.swallow_stale
                    && p.rescue != Some(crate::core::ReleaseFence::Id)
            }),
            swappable: {
                let n = config.relays.len();
                let key = |i: usize| {
                    let spec = &config.relays[i];
                    let relay_clock = policies[i].relay.clock == ClockSource::Relay;
                    (spec.design, spec.tenant_id, if relay_clock { spec.skew } else { 0 })
                };
                let unique_owner =
                    |i: usize| config.relays.iter().filter(|r| r.owner == config.relays[i].owner).count() == 1;
                let mut pairs = SmallVec::new();
                for a in 0..n {
                    for b in (a + 1)..n {
                        if key(a) == key(b) && unique_owner(a) && unique_owner(b) {
                            pairs.push((a as u8, b as u8));
                        }
                    }
                }
                pairs
            },
            counts_at_claim: policies.iter().all(|p| {
                p.attempts_at == AttemptsAt::Claim
                    && p.budget == BudgetPredicate::Strict
                    && !p.relay.republish_after_db_loss
            }),
            confirms_after_ack: policies
                .iter()
                .all(|p| !p.relay.publish_before_ack && !p.relay.republish_after_db_loss),
        }
    }
}

/// A ghost's publication counts, compared only with the budget, saturate at `cap` (`max + 1`);
/// the lifetime count is not a state at all.
fn saturate_publications(ghost: &mut crate::core::RowGhost, cap: u32) {
    ghost.publications = ghost.publications.min(cap);
    ghost.publications_previous = ghost.publications_previous.min(cap);
    ghost.publications_total = 0;
}

/// The rank of `value` in a short sorted slice: how many of its elements are smaller (a linear
/// scan beats a binary search at the sizes normalisation ranks).
fn rank_in<T: Ord + Copy>(sorted: &[T], value: T) -> usize {
    sorted.iter().take_while(|&&x| x < value).count()
}

/// A hasher with fixed seeds: the same hashes in every run and on every machine.
pub fn stable_hasher() -> ahash::AHasher {
    use std::hash::BuildHasher;
    ahash::RandomState::with_seeds(0x6f75_7462_6f78, 0x0063_6865_636b, 7, 11).build_hasher()
}

/// A fixed 64-bit hash of a value.
pub fn fingerprint<T: std::hash::Hash>(value: &T) -> u64 {
    use std::hash::Hasher;
    let mut hasher = stable_hasher();
    value.hash(&mut hasher);
    hasher.finish()
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Poll { relay, db } => write!(f, "r{relay} claims{}", db.words()),
            Action::Publish { relay, fate } => write!(f, "r{relay} publishes: {}", fate.words()),
            Action::Write { relay, db } => write!(f, "r{relay} writes{}", db.words()),
            Action::MisroutedWrite { relay } => write!(f, "r{relay} writes with another tenant's id"),
            Action::Crash { relay } => write!(f, "r{relay} crashes"),
            Action::Reap => write!(f, "reaper runs"),
            Action::Rescue => write!(f, "rescuer runs"),
            Action::RescueRead => write!(f, "rescuer reads an expired lease"),
            Action::RescueWrite => write!(f, "rescuer moves the row it read"),
            Action::Tick => write!(f, "tick"),
            Action::Enqueue { stale } => write!(f, "enqueue{}", if *stale { " (stale)" } else { "" }),
            Action::Requeue { message } => write!(f, "requeue m{message}"),
        }
    }
}
