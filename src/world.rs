//! A closed, deterministic world of relays, one outbox table, a broker and a clock.
//!
//! [`World`] is the transition system the model checker explores and the random searches walk:
//! every [`Action`] is one atomic step — a relay performing its pending effect under a chosen
//! fault, a relay crashing, time advancing, the application enqueueing, an operator requeueing.
//! Relays run the sans-IO [`Cycle`](crate::relay::Cycle); the table is the core's
//! [`Outbox`](crate::core::Outbox), every operation goes through the core's
//! [`Auditor`](crate::core::Auditor). No rule of the outbox lives here, only the environment:
//! which faults may strike and how the broker and the consumer behave.

use crate::core::policy::{LeaseKind, TokenKind};
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
mod reduce;

pub use fault::{Fault, Faults};
pub use reduce::{Abstraction, FleetFacts, ABSTRACTION_READS, PUBLISHED_LONG_AGO};

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
        .share_owners()
    }

    /// The isolation world, where S9 and S10 can fail: two tenants with a relay and a message
    /// each, writes that may go out with the other tenant's id (`misrouted-write`, the only
    /// fault), and the application's enqueues as steps, each with a stale attempt beside it.
    /// `verify` checks every fleet in it; `conform` replays what it finds on a profile's SQL.
    pub fn isolation(designs: &[Design]) -> WorldConfig {
        let mut config = WorldConfig::fleet(designs, 2, 2, 3, Faults::none().with(Fault::MisroutedWrite));
        config.enqueue_actions = true;
        config
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
        .share_owners()
    }

    /// Where a design's relays share one owner id (`relay.shared_owner`), every relay of it after
    /// the first writes the first's.
    fn share_owners(mut self) -> WorldConfig {
        for i in 0..self.relays.len() {
            let design = self.relays[i].design;
            if design.policy().relay.shared_owner {
                let first = self.relays.iter().position(|r| r.design == design).unwrap_or(i);
                self.relays[i].owner = self.relays[first].owner;
            }
        }
        self
    }

    /// The policy relay `index` runs, with the world's backoff: its base and cap, the design's
    /// growth.
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

    /// Some design of the fleet keeps its retry timer in each relay process
    /// (`retry.timer = "per-process"`): the world keeps one per relay.
    pub fn keeps_relay_timers(&self) -> bool {
        (0..self.relays.len()).any(|i| self.policy(i).retry_timer == crate::core::policy::RetryTimer::PerProcess)
    }

    /// The rescuer the fleet runs, if a design of it has one (the first such design's).
    pub fn rescue(&self) -> Option<crate::core::ReleaseFence> {
        (0..self.relays.len()).find_map(|i| self.policy(i).rescue)
    }

    /// Whether the fleet's rescuer waits until a lease's expiry has passed
    /// (`maintenance.after_expiry`).
    pub fn rescues_after_expiry(&self) -> bool {
        (0..self.relays.len())
            .map(|i| self.policy(i))
            .find(|p| p.rescue.is_some())
            .is_some_and(|p| p.rescue_after_expiry)
    }

    /// Some design of the fleet runs the scheduler (`maintenance.scheduler`).
    pub fn has_scheduler(&self) -> bool {
        (0..self.relays.len()).any(|i| self.policy(i).scheduler)
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
    /// A relay's session (its database session, its node's registration) ends while the relay
    /// runs on (designs whose session holds the lease): the leases it held end with it.
    LeaseLost { relay: u16 },
    /// A relay's heartbeat renews the leases it works on (`claim.renewal`).
    Renew { relay: u16 },
    /// The reaper job runs (when a design of the fleet has one).
    Reap,
    /// The rescuer finds an expired lease and moves its row in the same statement (fence
    /// `expired`).
    Rescue,
    /// The rescuer reads an expired lease, to move its row by a second statement.
    RescueRead,
    /// The rescuer's second statement: moves the row it read (fence `token` or `id`).
    RescueWrite,
    /// The scheduler makes the rows whose retry time has passed claimable again, by the database's
    /// clock (`node: None`), or, for a design that reads the process's clock, by the clock of
    /// relay `node`'s process: it may run on any node.
    Schedule { node: Option<u16> },
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
            Action::LeaseLost { .. } => Some(Fault::LeaseLost),
            Action::Renew { .. }
            | Action::Reap
            | Action::Rescue
            | Action::RescueRead
            | Action::RescueWrite
            | Action::Schedule { .. }
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
    /// A row was recorded FAILED or EXHAUSTED while a relay other than the writer held a lease
    /// of it it may still publish (S11 asks whether it then delivers).
    pub failed_for_holder: bool,
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
            Situation::FailedForHolder => &mut self.failed_for_holder,
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
        /// The write went out with the other tenant's id in its lease (the misrouted-write fault).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        misrouted: bool,
    },
    Finished {
        relay: u16,
        message_id: MessageId,
        result: LeaseResult,
    },
    Crashed {
        relay: u16,
    },
    /// A relay's session ended (it crashed, its connection died, or the lease-lost fault ended
    /// it) and the leases it held ended with it (designs whose session holds the
    /// lease).
    SessionEnded {
        relay: u16,
        now: Instant,
        messages: Vec<MessageId>,
    },
    /// A relay's lease release after its write (`write.releases_lease_by_owner`): `cleared` when
    /// the row's owner was its own and the lease went.
    LeaseReleased {
        relay: u16,
        message: MessageId,
        cleared: bool,
    },
    /// A relay's heartbeat extended the leases of `messages` to `until` (`claim.renewal`).
    LeaseRenewed {
        relay: u16,
        until: Instant,
        messages: Vec<MessageId>,
    },
    Reaped {
        now: Instant,
        messages: Vec<MessageId>,
    },
    /// The scheduler made `messages` claimable again (`maintenance.scheduler`), at `now` by the
    /// clock it read: the database's, or relay `node`'s process's.
    Scheduled {
        node: Option<u16>,
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
    /// Each relay process's own retry timer, when it fires next (`None`: due), in fleets with a
    /// design of `retry.timer = "per-process"`; empty in every other fleet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timers: Vec<Option<Instant>>,
    pub step: StepFlags,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |t: Option<Instant>| t.map_or("–".to_string(), |t| t.to_string());
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
            let timer = match self.timers.get(r) {
                Some(Some(at)) => format!(" (retry timer fires at t={})", at.0),
                Some(None) => " (retry timer due)".to_string(),
                None => String::new(),
            };
            writeln!(f, "  r{r}: {}{timer}", self.waits(r))?;
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
        // A fleet with a clock behind true time starts that many ticks in, so every clock reads
        // an instant from the start, as in a normalised state (`World::normalise`, whose
        // horizon is `now` less the largest negative skew): a counterexample found there
        // replays here step by step.
        let behind = config.relays.iter().map(|r| r.skew.min(0).unsigned_abs()).max().unwrap_or(0);
        let mut world = World {
            now: Instant(behind),
            outbox: Outbox::new(),
            auditor: Auditor::new(config.max_attempts),
            relays: vec![None; config.relays.len()],
            enqueued: 0,
            requeues_left: config.requeues,
            rescuer: None,
            timers: if config.keeps_relay_timers() { vec![None; config.relays.len()] } else { Vec::new() },
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
            // Enabled only where it ends a lease: a session that holds none drops unseen.
            if allowed(Some(Fault::LeaseLost)) && relay.is_some() && self.holds_session_leases(config, i) {
                actions.push(Action::LeaseLost { relay: r });
            }
            // Enabled only where a renewal changes a row: a heartbeat that extends nothing is no
            // step.
            if self.renewals(config, i).next().is_some() {
                actions.push(Action::Renew { relay: r });
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
            Some(fence) if self.rescuable(config).is_some() => actions
                .push(if fence == crate::core::ReleaseFence::Expired { Action::Rescue } else { Action::RescueRead }),
            _ => {}
        }
        // Enabled only when it has work, as the reaper: on the database's clock, and on each node
        // whose design reads its own (nodes of one clock offer the same step, so that renaming
        // relays renames it).
        let mut database = false;
        for i in 0..config.relays.len() {
            let policy = config.policy(i);
            if !policy.scheduler {
                continue;
            }
            let node = policy.relay.reads_relay_clock().then_some(i as u16);
            if node.is_none() && std::mem::replace(&mut database, true) {
                continue;
            }
            let now = self.clocks(config, i).now_for(&policy);
            if self.outbox.rows().iter().any(|row| Outbox::is_schedulable(row, now)) {
                actions.push(Action::Schedule { node });
            }
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
                // The process restarts, and its retry timer with it.
                if let Some(timer) = self.timers.get_mut(relay as usize) {
                    *timer = None;
                }
                report.event(|| Event::Crashed { relay });
                self.end_session(config, relay as usize, &mut report);
            }
            Action::LeaseLost { relay } => self.end_session(config, relay as usize, &mut report),
            Action::Renew { relay } => self.renew(config, relay as usize, &mut report),
            Action::Reap => {
                let messages = self.auditor.reap(&mut self.outbox, self.now);
                self.step.seen.exhausted |= !messages.is_empty();
                self.step.seen.failed_for_holder |= messages.iter().any(|id| self.may_still_publish(*id, None));
                report.event(|| Event::Reaped { now: self.now, messages });
            }
            Action::Rescue => {
                let lease = self.rescuable(config).expect("a rescue with an expired lease");
                self.rescue(config, lease, crate::core::ReleaseFence::Expired, &mut report);
            }
            Action::RescueRead => {
                let lease = self.rescuable(config).expect("a rescuer read with an expired lease");
                self.rescuer = Some(lease);
                report.event(|| Event::RescueRead { now: self.now, lease });
            }
            Action::RescueWrite => {
                let lease = self.rescuer.take().expect("a rescuer write after its read");
                let fence = config.rescue().expect("a design with a rescuer");
                self.rescue(config, lease, fence, &mut report);
            }
            Action::Schedule { node } => {
                let now = self.scheduler_clock(config, node).expect("a scheduler on that clock");
                let messages = self.auditor.schedule(&mut self.outbox, now, self.now);
                report.event(|| Event::Scheduled { node, now, messages });
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

    /// Whether a relay other than `except` holds a lease of row `id` it may still publish (R-S11:
    /// a row recorded failed now could then be delivered).
    fn may_still_publish(&self, id: MessageId, except: Option<usize>) -> bool {
        self.relays.iter().enumerate().any(|(r, relay)| {
            Some(r) != except
                && relay.as_ref().is_some_and(|(cycle, _)| cycle.leases_to_publish().iter().any(|l| l.message_id == id))
        })
    }

    /// The first row (by id) whose lease has expired, as the rescuer reads it: its lease as it
    /// stands (the latest claim's).
    fn rescuable(&self, config: &WorldConfig) -> Option<Lease> {
        let row = self.outbox.rescuable_after(self.now, config.rescues_after_expiry())?;
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
        let request = config.policy(0).rescue_request(lease, fence, attempts, config.max_attempts, self.now);
        if let Ok(result) = self.auditor.release(&mut self.outbox, &request) {
            self.step.seen.exhausted |= matches!(result, WriteResult::Applied { status: Status::Exhausted });
            self.step.seen.failed_for_holder |=
                matches!(result, WriteResult::Applied { status: Status::Failed | Status::Exhausted })
                    && self.may_still_publish(lease.message_id, None);
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

    /// Whether relay `r`'s session holds a lease (a design whose session holds them).
    fn holds_session_leases(&self, config: &WorldConfig, r: usize) -> bool {
        let owner = config.relays[r].owner;
        config.policy(r).lease == LeaseKind::Session && self.outbox.rows().iter().any(|row| row.held_by_session(owner))
    }

    /// The clock a scheduler reads: the database's, or that of relay `node`'s process (a design
    /// with a scheduler that reads its process's clock); None where no such scheduler runs.
    fn scheduler_clock(&self, config: &WorldConfig, node: Option<u16>) -> Option<Instant> {
        match node {
            None => config.has_scheduler().then_some(self.now),
            Some(r) => {
                let policy = config.relays.get(r as usize).map(|_| config.policy(r as usize))?;
                policy.scheduler.then(|| self.clocks(config, r as usize).now_for(&policy))
            }
        }
    }

    /// The leases relay `r`'s heartbeat would renew now, each with the expiry it would set: those
    /// its cycle works on whose row the renewal matches and changes.
    fn renewals<'a>(&'a self, config: &'a WorldConfig, r: usize) -> impl Iterator<Item = (Lease, Instant)> + 'a {
        let policy = config.policy(r);
        let held = match (&self.relays[r], policy.renewal) {
            (Some((cycle, _)), renewal) if renewal != crate::core::policy::Renewal::None => cycle.leases_held(),
            _ => &[],
        };
        let until = self.clocks(config, r).now_for(&policy).plus(config.lease);
        held.iter().filter_map(move |lease| {
            let row = self.outbox.row(lease.message_id)?;
            Outbox::renews(policy.renewal, row, lease, until).then_some((*lease, until))
        })
    }

    fn renew(&mut self, config: &WorldConfig, r: usize, report: &mut StepReport) {
        let renewal = config.policy(r).renewal;
        let due: SmallVec<[(Lease, Instant); 4]> = self.renewals(config, r).collect();
        let mut messages = Vec::new();
        for (lease, until) in &due {
            if self.auditor.renew(&mut self.outbox, renewal, lease, *until).unwrap_or(false) {
                messages.push(lease.message_id);
            }
        }
        let until = due.first().map_or(self.now, |(_, until)| *until);
        report.event(|| Event::LeaseRenewed { relay: r as u16, until, messages });
    }

    /// Relay `r`'s session ends: where its design's leases are the session's, every
    /// lease it holds ends now, whether or not the relay still runs.
    fn end_session(&mut self, config: &WorldConfig, r: usize, report: &mut StepReport) {
        if config.policy(r).lease != LeaseKind::Session {
            return;
        }
        let messages = self.outbox.end_session(config.relays[r].owner, self.now);
        if !messages.is_empty() {
            let now = self.now;
            report.event(|| Event::SessionEnded { relay: r as u16, now, messages });
        }
    }

    fn poll(&mut self, config: &WorldConfig, r: usize, db: DbFate, report: &mut StepReport) {
        let relay_config = config.relay_config(r);
        let clocks = self.clocks(config, r);
        let timer = self.timers.get(r).copied().flatten();
        let (mut cycle, effect) = Cycle::start_timed(&relay_config, clocks, timer);
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
        if db == DbFate::LostAfter {
            self.end_session(config, r, report);
        }
        if let (DbFate::Ok, Some(timer)) = (db, self.timers.get_mut(r)) {
            *timer = crate::relay::retry_timer_after(&relay_config, &leases, clocks, *timer);
        }
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
        self.auditor.published(&self.outbox, &lease, key, stores > 0);
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
        request.now = clocks.now_for_write(&relay_config.policy);
        let mut result = None;
        if db != DbFate::LostBefore {
            let id = request.lease.message_id;
            let row = self.outbox.row(id);
            let attempts_before = row.map_or(0, |row| row.attempts);
            let was_ambiguous = row.is_some_and(|row| row.last_failure_code == Some(FailureCode::Timeout));
            self.step.seen.terminal_met = row.is_some_and(|row| row.status.is_terminal());
            self.step.seen.tenants_crossed = row.is_some_and(|row| row.tenant_id != request.lease.tenant_id);
            let applied = self.auditor.write_at(&mut self.outbox, &relay_config.policy, &request, self.now);
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
                WriteResult::Applied { status: status @ (Status::Failed | Status::Exhausted) } => {
                    self.step.seen.exhausted |= status == Status::Exhausted;
                    self.step.seen.failed_for_holder = self.may_still_publish(id, Some(r));
                }
                WriteResult::Applied { status: Status::Published } => {
                    self.step.seen.confirmed = true;
                    self.step.seen.ambiguous_then_published = was_ambiguous;
                    self.step.seen.order_overtaken = self.overtakes(id);
                }
                WriteResult::Applied { .. } => {}
            }
        }
        report.event(|| Event::Wrote { relay: r as u16, request, result, db, misrouted });
        // The release runs after the write on a connection of its own, whatever the write did.
        if relay_config.policy.release_by_owner {
            let lease = request.lease;
            let cleared = self.auditor.release_by_owner(&mut self.outbox, &lease).unwrap_or(false);
            report.event(|| Event::LeaseReleased { relay: r as u16, message: lease.message_id, cleared });
        }
        if db != DbFate::Ok {
            self.end_session(config, r, report);
        }
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
            Action::LeaseLost { relay } => write!(f, "r{relay}'s session drops while it runs"),
            Action::Renew { relay } => write!(f, "r{relay}'s heartbeat renews its lease"),
            Action::Reap => write!(f, "reaper runs"),
            Action::Rescue => write!(f, "rescuer runs"),
            Action::RescueRead => write!(f, "rescuer reads an expired lease"),
            Action::RescueWrite => write!(f, "rescuer moves the row it read"),
            Action::Schedule { node: None } => write!(f, "scheduler runs"),
            Action::Schedule { node: Some(r) } => write!(f, "scheduler runs on r{r}'s node"),
            Action::Tick => write!(f, "tick"),
            Action::Enqueue { stale } => write!(f, "enqueue{}", if *stale { " (stale)" } else { "" }),
            Action::Requeue { message } => write!(f, "requeue m{message}"),
        }
    }
}
