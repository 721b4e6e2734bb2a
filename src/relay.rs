//! The relay cycle of SPEC §4 as a sans-IO state machine.
//!
//! A [`Cycle`] is one pass of one relay: claim → for each lease: publish → record. It
//! does no I/O, keeps no clock and never blocks: the driver — the model checker, a madsim node,
//! a real SQL runner — performs each [`Effect`] it returns and feeds back what happened as an
//! [`Input`], with the clock readings of that moment. It imports only the core.
//!
//! What it must never do: invent a confirmation, republish inside the same cycle, or retry a
//! write whose outcome it could not learn (the mutants of docs/designs.md aside, which are switches in
//! the [`Policy`]).

use crate::core::policy::{ClockSource, FailureWrite, IdempotencyKeyPolicy, RejectionWrite};
use crate::core::{
    ClaimRequest, Duration, FailureCode, IdempotencyKey, Instant, Lease, MessageId, Policy, RelayId, Status, TenantId,
    WriteKind, WriteRequest, WriteResult,
};
use serde::{Deserialize, Serialize};

pub mod driver;
pub use driver::{drive, drive_now, Effects, Reply};

/// What one relay is configured to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelayConfig {
    pub owner: RelayId,
    pub tenant_id: TenantId,
    pub batch: u32,
    pub lease: Duration,
    pub max_attempts: u32,
    pub policy: Policy,
}

/// The clock readings at the moment the driver feeds an input: the database's and the relay's
/// own (skewed) one. The policy decides which becomes `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Clocks {
    pub database: Instant,
    pub relay: Instant,
}

impl Clocks {
    /// One clock for both, for drivers without skew.
    pub fn same(now: Instant) -> Clocks {
        Clocks { database: now, relay: now }
    }

    /// The `now` a design's statements run by: the database's reading, or the relay's own
    /// where the design binds its clock as a parameter. The one place that choice is made: the
    /// relay cycle, the world and the simulations all ask here.
    pub fn now_for(self, policy: &Policy) -> Instant {
        self.read(policy.relay.clock)
    }

    /// The `now` a design's terminal and failure writes run by (`relay.write_clock`).
    pub fn now_for_write(self, policy: &Policy) -> Instant {
        self.read(policy.relay.write_clock())
    }

    fn read(self, source: ClockSource) -> Instant {
        match source {
            ClockSource::Database => self.database,
            ClockSource::Relay => self.relay,
        }
    }
}

/// What the broker told the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishOutcome {
    /// Acknowledged: stored.
    Ack,
    /// A definite, retryable failure: nothing stored.
    RetryableFailure,
    /// No answer in time, or the acknowledgement was lost: maybe stored.
    Timeout,
    /// A permanent rejection.
    Rejected,
}

/// The next thing the driver must do for the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// Run the claim; answer with [`Cycle::claimed`] (or [`Input::ConnectionLost`]).
    Claim { request: ClaimRequest },
    /// Ask the broker to publish; answer [`Input::Published`].
    Publish { lease: Lease, key: IdempotencyKey },
    /// Run the terminal write; answer [`Input::Written`].
    Write { request: WriteRequest },
    /// The cycle is over.
    Done,
}

/// What happened to the last effect. (A claim's leases come back through [`Cycle::claimed`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Input {
    Published {
        outcome: PublishOutcome,
    },
    Written {
        result: WriteResult,
    },
    /// The database connection died: the statement may or may not have committed.
    ConnectionLost,
}

/// How one lease ended for the relay (SPEC §4's "relay result").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseResult {
    Sent,
    RetryScheduled,
    Ambiguous,
    Failed,
    Exhausted,
    /// The DB connection was lost after publishing: nothing recorded, no immediate retry.
    AckUnknown,
    /// The terminal write matched no row: reported, counted.
    Stale,
}

impl LeaseResult {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseResult::Sent => "sent",
            LeaseResult::RetryScheduled => "retry_scheduled",
            LeaseResult::Ambiguous => "ambiguous",
            LeaseResult::Failed => "failed",
            LeaseResult::Exhausted => "exhausted",
            LeaseResult::AckUnknown => "ack_unknown",
            LeaseResult::Stale => "stale",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum Phase {
    Claiming,
    Publishing,
    /// Recording the outcome of the current lease's publication.
    Recording,
    /// Mutant `publish-before-ack`: PUBLISHED written before publishing.
    RecordingEarly,
    /// Mutant `retry-after-db-loss`: republishing after a lost connection.
    Republishing,
    /// Recording a lease claimed past its budget as failed, without publishing it
    /// (`relay.fails_claims_past_budget`).
    Refusing,
    Done,
}

/// A relay process's retry timer after its claim handed out `leases` at `clocks`
/// (`retry.timer = "per-process"`): restarted for the backoff's delay, by the clock the design
/// reads (`relay.clock`), where the claim took a row attempted before; `timer` unchanged
/// otherwise (and always where the design keeps its retry time in the row).
pub fn retry_timer_after(
    config: &RelayConfig,
    leases: &[Lease],
    clocks: Clocks,
    timer: Option<Instant>,
) -> Option<Instant> {
    let policy = &config.policy;
    leases
        .iter()
        .filter(|l| policy.lease_restarts_relay_timer(l.attempts))
        .map(|l| clocks.now_for(policy).plus(policy.backoff.delay(l.attempts)))
        .max()
        .or(timer)
}

/// One pass of one relay. Small and hashable, so a model checker can keep it in its state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cycle {
    phase: Phase,
    leases: Vec<Lease>,
    current: usize,
}

/// What [`Cycle::resume`] returns: the next effect, and the result of a lease that just ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    pub effect: Effect,
    pub finished: Option<(MessageId, LeaseResult)>,
}

impl Cycle {
    /// Starts a cycle: the first effect is the claim.
    pub fn start(config: &RelayConfig, clocks: Clocks) -> (Cycle, Effect) {
        Cycle::start_timed(config, clocks, None)
    }

    /// [`Cycle::start`] for a relay that keeps its own retry timer (`retry.timer =
    /// "per-process"`): `timer` is when it fires next (`None`: due, as at the process's start).
    /// The claim may take a row attempted before only while the timer is due by the clock the
    /// design reads (`relay.clock`: the process's own where the design binds it). A driver that
    /// runs such a design keeps the timer per relay process, restarts it with
    /// [`retry_timer_after`] after each claim, and forgets it when the process restarts.
    pub fn start_timed(config: &RelayConfig, clocks: Clocks, timer: Option<Instant>) -> (Cycle, Effect) {
        let mut cycle = Cycle { phase: Phase::Claiming, leases: Vec::new(), current: 0 };
        let mut effect = cycle.claim(config, clocks);
        if let Effect::Claim { request } = &mut effect {
            request.retry_due = timer.is_none_or(|at| at <= request.now);
        }
        (cycle, effect)
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The leases this cycle holds (all of them, finished or not).
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// The leases this cycle may still publish: the current one unless its publication is
    /// behind it (a mutant that republishes after a lost connection may publish it again from
    /// `Recording`, and is not counted here), and those after it.
    pub fn leases_to_publish(&self) -> &[Lease] {
        let from = match self.phase {
            Phase::Publishing | Phase::RecordingEarly | Phase::Republishing => self.current,
            Phase::Recording | Phase::Refusing => self.current + 1,
            Phase::Claiming | Phase::Done => self.leases.len(),
        };
        &self.leases[from.min(self.leases.len())..]
    }

    /// The leases this cycle still works on — its current one and those after it — which a
    /// heartbeat renews (`claim.renewal`); none before its claim's answer (it has none yet) or
    /// once it is done (it is done when the current lease is past the last).
    pub fn leases_held(&self) -> &[Lease] {
        &self.leases[self.current.min(self.leases.len())..]
    }

    /// Mutable leases, for normalising engines that rewrite tokens in place.
    pub fn leases_mut(&mut self) -> &mut [Lease] {
        &mut self.leases
    }

    /// Hashes this cycle and its pending effect as a relay of any name would have them: every
    /// field but the leases' owner. Relays whose states hash alike here differ only by name.
    pub fn hash_anonymous<H: std::hash::Hasher>(&self, effect: &Effect, state: &mut H) {
        use std::hash::Hash;
        fn lease<H: std::hash::Hasher>(l: &Lease, state: &mut H) {
            (l.message_id, l.tenant_id, l.token, l.attempts, l.claim_seq).hash(state);
        }
        (self.phase, self.current, self.leases.len()).hash(state);
        self.leases.iter().for_each(|l| lease(l, state));
        match effect {
            Effect::Claim { request } => {
                (0u8, request.tenant_id, request.batch, request.now, request.retry_due).hash(state)
            }
            Effect::Publish { lease: l, key } => {
                (1u8, key).hash(state);
                lease(l, state);
            }
            Effect::Write { request } => {
                (2u8, request.kind, request.now).hash(state);
                lease(&request.lease, state);
            }
            Effect::Done => 3u8.hash(state),
        }
    }

    fn claim(&mut self, config: &RelayConfig, clocks: Clocks) -> Effect {
        self.phase = Phase::Claiming;
        Effect::Claim {
            request: ClaimRequest {
                tenant_id: config.tenant_id,
                owner: config.owner,
                batch: config.batch,
                lease: config.lease,
                now: now(config, clocks),
                max_attempts: config.max_attempts,
                retry_due: true,
            },
        }
    }

    /// Feeds the claim's leases (the driver calls this instead of `resume(Input::Claimed)`).
    pub fn claimed(&mut self, config: &RelayConfig, leases: Vec<Lease>, clocks: Clocks) -> Step {
        debug_assert_eq!(self.phase, Phase::Claiming, "claimed() outside a claim");
        self.leases = leases;
        self.current = 0;
        Step { effect: self.begin_lease(config, clocks), finished: None }
    }

    fn begin_lease(&mut self, config: &RelayConfig, clocks: Clocks) -> Effect {
        let Some(lease) = self.leases.get(self.current).copied() else {
            self.phase = Phase::Done;
            return Effect::Done;
        };
        if let Some(kind) = config.policy.claim_past_budget_write(lease.attempts, config.max_attempts) {
            self.phase = Phase::Refusing;
            return write(config, lease, kind, clocks);
        }
        if config.policy.relay.publish_before_ack {
            self.phase = Phase::RecordingEarly;
            return write(config, lease, WriteKind::Published, clocks);
        }
        self.phase = Phase::Publishing;
        Effect::Publish { lease, key: key(config, &lease) }
    }

    fn next_lease(&mut self, config: &RelayConfig, clocks: Clocks, result: LeaseResult) -> Step {
        let id = self.leases[self.current].message_id;
        self.current += 1;
        Step { effect: self.begin_lease(config, clocks), finished: Some((id, result)) }
    }

    /// Advances the cycle with what happened to the last effect.
    pub fn resume(&mut self, config: &RelayConfig, input: Input, clocks: Clocks) -> Step {
        let none = |effect| Step { effect, finished: None };
        match (self.phase, input) {
            (Phase::Claiming, Input::ConnectionLost) => {
                // A claim that may have committed: its rows come back when their leases expire.
                self.phase = Phase::Done;
                none(Effect::Done)
            }
            (Phase::Publishing, Input::Published { outcome }) => {
                let lease = self.leases[self.current];
                self.phase = Phase::Recording;
                none(write(config, lease, record(config, &lease, outcome), clocks))
            }
            (Phase::Republishing, Input::Published { .. }) => {
                // The mutant records PUBLISHED whatever the broker said the second time.
                let lease = self.leases[self.current];
                self.phase = Phase::Recording;
                none(write(config, lease, WriteKind::Published, clocks))
            }
            (Phase::RecordingEarly, Input::Written { result }) => {
                let lease = self.leases[self.current];
                self.phase = Phase::Publishing;
                match result {
                    WriteResult::Applied { .. } => none(Effect::Publish { lease, key: key(config, &lease) }),
                    WriteResult::Stale { .. } => self.next_lease(config, clocks, LeaseResult::Stale),
                }
            }
            (Phase::Recording | Phase::Refusing, Input::Written { result }) => {
                let outcome = match result {
                    WriteResult::Stale { .. } => LeaseResult::Stale,
                    WriteResult::Applied { status } => match status {
                        Status::Published => LeaseResult::Sent,
                        Status::Pending => LeaseResult::RetryScheduled,
                        Status::Ambiguous => LeaseResult::Ambiguous,
                        Status::Failed => LeaseResult::Failed,
                        Status::Exhausted => LeaseResult::Exhausted,
                        // Only a swallowed stale write reports a row still IN_FLIGHT; the relay
                        // believes the write went through.
                        Status::InFlight => LeaseResult::Sent,
                    },
                };
                self.next_lease(config, clocks, outcome)
            }
            (Phase::Recording, Input::ConnectionLost) if config.policy.relay.republish_after_db_loss => {
                let lease = self.leases[self.current];
                self.phase = Phase::Republishing;
                none(Effect::Publish { lease, key: key(config, &lease) })
            }
            (Phase::Recording | Phase::RecordingEarly | Phase::Refusing, Input::ConnectionLost) => {
                self.next_lease(config, clocks, LeaseResult::AckUnknown)
            }
            (phase, input) => panic!("relay cycle: input {input:?} does not answer the effect of phase {phase:?}"),
        }
    }
}

fn now(config: &RelayConfig, clocks: Clocks) -> Instant {
    clocks.now_for(&config.policy)
}

fn key(config: &RelayConfig, lease: &Lease) -> IdempotencyKey {
    match config.policy.relay.idempotency_key {
        IdempotencyKeyPolicy::MessageId => IdempotencyKey::Message { message_id: lease.message_id },
        IdempotencyKeyPolicy::PerAttempt => {
            IdempotencyKey::Other { value: (u64::from(lease.message_id.0) << 32) | u64::from(lease.attempts) }
        }
    }
}

fn write(config: &RelayConfig, lease: Lease, kind: WriteKind, clocks: Clocks) -> Effect {
    Effect::Write {
        request: WriteRequest {
            lease,
            kind,
            now: clocks.now_for_write(&config.policy),
            max_attempts: config.max_attempts,
        },
    }
}

/// SPEC §4's classification of a broker outcome into the write that records it.
fn record(config: &RelayConfig, lease: &Lease, outcome: PublishOutcome) -> WriteKind {
    let policy = &config.policy;
    // The core decides whether this failure spends the budget, as its write will.
    let failure = |kind| policy.failure_write(kind, lease.attempts, config.max_attempts);
    let final_failure = policy.relay.on_failure == FailureWrite::MarkFailed;
    match outcome {
        PublishOutcome::Ack => WriteKind::Published,
        PublishOutcome::RetryableFailure | PublishOutcome::Timeout if final_failure => {
            let code = if outcome == PublishOutcome::Timeout { FailureCode::Timeout } else { FailureCode::Unavailable };
            WriteKind::Failed { code }
        }
        PublishOutcome::RetryableFailure => failure(WriteKind::Retry { code: FailureCode::Unavailable }),
        PublishOutcome::Timeout => failure(WriteKind::Ambiguous { code: FailureCode::Timeout }),
        PublishOutcome::Rejected => match policy.relay.rejection {
            RejectionWrite::MarkFailed => WriteKind::Failed { code: FailureCode::Rejected },
            RejectionWrite::MarkRetry => failure(WriteKind::Retry { code: FailureCode::Rejected }),
        },
    }
}
