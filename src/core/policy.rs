//! Designs as data: a [`Policy`] is a set of switches over the one core.
//!
//! Every variant of SPEC §5 and every mutant of docs/designs.md is a `Policy` value; no rule of the
//! outbox is written twice. A policy belongs to a relay, so a fleet can mix generations over one
//! table (a rolling upgrade). The switches that concern the database statements are read by
//! [`Outbox`](super::outbox::Outbox); the ones under [`RelayPolicy`] by the relay cycle.

use super::time::Duration;
use serde::{Deserialize, Serialize};

/// What a maintenance job's release checks before it ends a lease (a rescuer moving an expired
/// job on): the lease it read, the expiry, or nothing but the id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseFence {
    /// `status = IN_FLIGHT AND lease_token = <the token it read>`: fenced on what it read.
    Token,
    /// `status = IN_FLIGHT AND lease_expires_at <= now`: an expired lease, whoever holds it.
    Expired,
    /// `message_id = ?` alone.
    Id,
}

impl ReleaseFence {
    pub fn name(self) -> &'static str {
        match self {
            ReleaseFence::Token => "token",
            ReleaseFence::Expired => "expired",
            ReleaseFence::Id => "id",
        }
    }
}

/// Where the rescuer moves a row whose lease it ends (its budget left, or ignored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RescueTarget {
    /// Back to PENDING, claimable at once (Oban's Lifeline: `available`).
    #[default]
    Pending,
    /// Back to PENDING with a retry time, the backoff of its attempts from now (River's rescuer:
    /// `retryable`, `scheduled_at` in the future).
    Retry,
    /// To FAILED for good (Solid Queue's pruner fails the claimed executions of a dead process).
    Failed,
}

/// Whether the rescuer looks at the budget before it returns a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RescueBudget {
    /// A row whose budget is spent goes to EXHAUSTED (FAILED without it), not back (River
    /// discards at `attempt >= max_attempts`).
    #[default]
    Exhausts,
    /// Every row goes to the target, spent or not (Oban's orphan rescue before oban#137's fix).
    Ignored,
}

/// What holds a claim's lease, and so what ends it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeaseKind {
    /// An expiry in the row (`lease_expires_at`): the lease ends when time passes it, whatever
    /// its holder does (seed 000's outbox, River, Oban, Graphile Worker).
    #[default]
    Expiry,
    /// The claiming relay's database session (good_job's advisory lock): no time ends it; the
    /// session's end does — the relay crashes, or its connection dies, also while the relay
    /// itself keeps running (good_job#989).
    Session,
}

/// A heartbeat that renews a claim's lease while its relay works on it: `UPDATE … SET
/// lease_expires_at = now + lease WHERE id = ? AND status = IN_FLIGHT AND <fence>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Renewal {
    /// No renewal: a lease lasts what its claim gave it (seed 000's outbox).
    #[default]
    None,
    /// Fenced on the owner id alone (aegra's heartbeat, `claimed_by = worker_name`): with an id
    /// another attempt reuses, a stale attempt's heartbeat extends its successor's lease.
    ByOwner,
    /// Fenced on the claim's token (aegra PR 547's proposal: every worker write on the exact
    /// claim token).
    ByToken,
}

/// Who keeps the time a failed row may be retried at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryTimer {
    /// The row (`next_attempt_at`, or the lease's column of a visibility timeout), where
    /// `retry_clock` keeps one: every claim reads it.
    #[default]
    Row,
    /// Each relay process: a row attempted before is taken only by a claim made while its
    /// relay's own timer is due, and a claim that takes one restarts that relay's timer for the
    /// backoff's delay. No other relay reads it (CAP's retry processor, one per instance: N
    /// replicas retry a failing message about N times per interval, CAP#1797).
    PerProcess,
}

/// When `attempts` is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttemptsAt {
    /// By the claim, in the same statement that takes the lease (reference).
    Claim,
    /// By the AMBIGUOUS and retry writes (seed V2 and the V1 path): a relay that crashes, or loses
    /// its connection, after publishing leaves no trace in the count.
    FailureWrite,
}

/// What a claim writes besides status and expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimFence {
    /// Sets `lease_owner` and increments `lease_token` (reference).
    OwnerAndToken,
    /// Sets `lease_owner` but leaves the token as it was (mutant `claim-no-token-bump`).
    OwnerOnly,
    /// Sets status and expiry only: no owner, no token (the V1 `leaseBatch`).
    Unfenced,
    /// A fresh token and no owner (underway: `current_attempt = attempt_count + 1`, no worker
    /// recorded).
    TokenOnly,
}

/// What a terminal write checks besides `message_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteFence {
    /// `status = IN_FLIGHT AND lease_owner = ? AND lease_token = ?` (reference).
    StatusOwnerToken,
    /// `status = IN_FLIGHT AND lease_token = ?` (seed 003's random tokens).
    StatusToken,
    /// `status = IN_FLIGHT AND lease_owner = ?` (mutant `write-owner-only`).
    StatusOwner,
    /// `message_id = ?` alone (the V1 AMBIGUOUS write; mutant `write-id-only`).
    MessageIdOnly,
    /// `status = IN_FLIGHT` and the id, nothing of the lease (River's completer: `state =
    /// 'running'`): any holder's write ends whatever lease the row has now.
    StatusOnly,
}

/// The claim's budget predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetPredicate {
    /// `attempts < max` (reference).
    Strict,
    /// `attempts <= max`: one attempt too many (mutant `exhaust-off-by-one`).
    OneOver,
    /// No predicate (the V1 path; mutant `no-budget-predicate`).
    Absent,
}

/// Every attempt a budget of `max_attempts` allows has been made. Not the claim's refusal (that is
/// the design's [`BudgetPredicate::spent`], which may be looser): it is what ends a row for good —
/// the reaper exhausts an expired lease that used the budget up, the rescuer stops returning it to
/// PENDING, a failure write past it exhausts the row, and a claim that hands out the last attempt
/// exhausts the budget. The one place that comparison is made.
pub fn used_up(attempts: u32, max_attempts: u32) -> bool {
    attempts >= max_attempts
}

impl BudgetPredicate {
    /// Whether a row with `attempts` has spent its budget of `max_attempts` by this predicate:
    /// the claim takes no such row. The one place the predicate is evaluated.
    pub fn spent(self, attempts: u32, max_attempts: u32) -> bool {
        match self {
            BudgetPredicate::Strict => attempts >= max_attempts,
            BudgetPredicate::OneOver => attempts > max_attempts,
            BudgetPredicate::Absent => false,
        }
    }
}

/// What the AMBIGUOUS write leaves behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AmbiguousShape {
    /// Clears owner and expiry, sets the retry clock (reference, seed V2).
    ClearsLease,
    /// Clears expiry only, leaves `lease_owner` as it was and sets no retry time (the V1 path).
    KeepsOwner,
}

/// Where a fresh lease token comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenKind {
    /// `lease_token + 1`.
    Counter,
    /// A fresh random value compared for equality only (seed 003's uuid). The core stays
    /// deterministic: the value is a bijective mix of a table-wide claim counter, so it is never
    /// repeated and every engine computes the same one.
    Random,
}

/// Whose clock supplies `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClockSource {
    /// The database's (`clock_timestamp()`): one clock for every relay.
    Database,
    /// The relay's own, bound as a parameter; it may be skewed.
    Relay,
}

/// The total order in which a claim takes claimable rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimOrder {
    /// `COALESCE(next_attempt_at, created_at), message_id` (SPEC §3).
    Due,
    /// `created_at, tenant_id, message_id` (seed 003).
    Created,
    /// As `Due`, where a claim makes its own time the row's due time (underway's
    /// `run_at = now()`): a task taken back after its lease expired sorts by its last claim.
    LastClaimed,
}

/// Which idempotency key a relay sends with a publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdempotencyKeyPolicy {
    /// The row's `message_id`, on every attempt.
    MessageId,
    /// A new key per attempt (mutant `fresh-idempotency-key`).
    PerAttempt,
}

/// What a relay records for a permanent rejection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectionWrite {
    /// `mark_failed`.
    MarkFailed,
    /// `mark_retry`: the design has no failed state (seed 003).
    MarkRetry,
}

/// What a relay records for a failed or unknown publication (the broker unavailable, no answer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureWrite {
    /// A retry: `mark_retry` for a definite failure, `mark_ambiguous` for an unknown outcome.
    #[default]
    Retry,
    /// `mark_failed`: every failure is final (aegra finalizes a run whose execution raised as
    /// `error`; nothing retries it but the reaper, for a worker that stopped).
    MarkFailed,
}

/// Switches read by the relay cycle, not by the database statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelayPolicy {
    pub idempotency_key: IdempotencyKeyPolicy,
    pub rejection: RejectionWrite,
    /// Writes PUBLISHED before the broker acknowledged (mutant `publish-before-ack`).
    pub publish_before_ack: bool,
    /// After losing the DB connection post-publish, republishes at once and records PUBLISHED
    /// (mutant `retry-after-db-loss`).
    pub republish_after_db_loss: bool,
    /// The design runs the reaper (SPEC §3.4) as a periodic job beside its relays.
    pub reaper: bool,
    pub clock: ClockSource,
    /// Whose clock the terminal and failure writes read, where it is not `clock`'s: the due time
    /// of a retry from the relay's own clock while the claims compare it with the database's
    /// (NServiceBus.SqlServer before 4.3, issue 463). `None`: `clock`'s.
    #[serde(default)]
    pub write_clock: Option<ClockSource>,
    /// Every relay of the design writes one owner id (Graphile Worker's pool id, a worker name
    /// a restarted attempt reuses): a fence on the owner cannot tell them apart.
    #[serde(default)]
    pub shared_owner: bool,
    /// A relay that claimed a row past its budget (attempts above the maximum) records it failed
    /// at once, without publishing it (Laravel's worker: `MaxAttemptsExceededException`, decided
    /// from its own copy of the job).
    #[serde(default)]
    pub fails_claims_past_budget: bool,
    /// What a failed or unknown publication writes: a retry, or FAILED for good.
    #[serde(default)]
    pub on_failure: FailureWrite,
}

impl RelayPolicy {
    /// The clock the writes read: `write_clock`, else `clock`.
    pub fn write_clock(&self) -> ClockSource {
        self.write_clock.unwrap_or(self.clock)
    }

    /// Whether any statement reads the relay's own clock (a skew then matters).
    pub fn reads_relay_clock(&self) -> bool {
        self.clock == ClockSource::Relay || self.write_clock() == ClockSource::Relay
    }
}

/// A design: every switch the core and the relay cycle read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Policy {
    pub attempts_at: AttemptsAt,
    pub claim_fence: ClaimFence,
    pub write_fence: WriteFence,
    /// The fence of the failure writes (AMBIGUOUS, retry, FAILED, EXHAUSTED) where it differs
    /// from `write_fence`, the completion's (Graphile Worker completes by id and fails by
    /// `locked_by`).
    #[serde(default)]
    pub failure_fence: Option<WriteFence>,
    pub budget: BudgetPredicate,
    pub ambiguous_shape: AmbiguousShape,
    pub token_kind: TokenKind,
    pub claim_order: ClaimOrder,
    /// Rows due at the same instant may be taken in any order (`claim.ties = "any"`): the
    /// queue's ORDER BY stops at its due time (Graphile Worker's `run_at`).
    #[serde(default)]
    pub claim_ties_any: bool,
    /// Claim honours `next_attempt_at`, and AMBIGUOUS / retry writes set it.
    pub retry_clock: bool,
    /// The design has an EXHAUSTED status: a failure write past the budget moves there.
    pub exhausted_status: bool,
    /// Claim is scoped to one tenant.
    pub claim_by_tenant: bool,
    /// Terminal writes check the tenant.
    pub write_checks_tenant: bool,
    /// Claim takes IN_FLIGHT rows whose lease has not expired (mutant `steal-live-lease`).
    pub claim_live_leases: bool,
    /// Claim takes IN_FLIGHT rows whose lease has expired (reference, seed 000). Without it a
    /// claim never takes an in-flight row: only the rescuer or the reaper ends such a lease (River,
    /// Graphile Worker, Oban, Solid Queue).
    #[serde(default = "yes")]
    pub claim_expired_leases: bool,
    /// Claim accepts PUBLISHED, FAILED and EXHAUSTED rows (mutant `claim-terminal`).
    pub claim_terminal: bool,
    /// A write that matched no row reports Applied (mutant `swallow-stale`).
    pub swallow_stale: bool,
    /// Requeue resets `lease_token` to 0 (mutant `token-reset-on-requeue`).
    pub requeue_resets_token: bool,
    /// The design runs a rescuer beside its relays: it finds an expired lease and moves the row
    /// back to PENDING (its budget spent: to EXHAUSTED, or FAILED without that status), fenced
    /// as given — `Expired` in the same statement that finds it, `Token` or `Id` by a second
    /// statement after reading it (the job queue's "rescuer").
    #[serde(default)]
    pub rescue: Option<ReleaseFence>,
    /// Where the rescuer moves a row it takes back.
    #[serde(default)]
    pub rescue_to: RescueTarget,
    /// Whether the rescuer checks the budget first.
    #[serde(default)]
    pub rescue_budget: RescueBudget,
    /// What a successful publication's write does to the row: marks it PUBLISHED, or deletes it
    /// (a job queue's `DELETE … WHERE id = ?`): the row is gone, and no later statement matches it.
    #[serde(default)]
    pub completion: Completion,
    /// A write that records a row FAILED or EXHAUSTED also deletes it from the table (Laravel's
    /// failed job moves to `failed_jobs`; pgmq's archive): no later statement matches it, and an
    /// operator's requeue puts it back.
    #[serde(default)]
    pub failure_deletes: bool,
    /// The retry time is kept in the lease's expiry column (a visibility timeout): a failure
    /// write sets `lease_expires_at` to the retry time instead of `next_attempt_at`, and the
    /// claim's lease predicate is the only clock it checks.
    #[serde(default)]
    pub retry_in_lease: bool,
    /// The retry write (a definite, retryable failure: `Retry`) moves a row whose budget is spent
    /// to EXHAUSTED like the AMBIGUOUS write. Without it the retry write schedules another attempt
    /// whatever the attempts (awa's `RetryAfter` before awa#435).
    #[serde(default = "yes")]
    pub retry_checks_budget: bool,
    /// The AMBIGUOUS and retry statements check the row's attempts themselves and exhaust a row
    /// whose budget is spent. Without it the statement sets what it is told: the relay decides,
    /// from its own copy of the row, whether to send a retry or an exhaustion (Oban's
    /// `error_job` sets `retryable` by id; its executor discards at `attempt >= max_attempts`).
    #[serde(default = "yes")]
    pub budget_in_write: bool,
    /// What holds a claim's lease: an expiry in the row, or the claiming relay's session.
    #[serde(default)]
    pub lease: LeaseKind,
    /// Who keeps the retry time: the row, or each relay process's own timer.
    #[serde(default)]
    pub retry_timer: RetryTimer,
    /// After each terminal or failure write the relay clears the lease (owner and expiry) of the
    /// row where the owner is still its own, whatever the write did — applied, matched nothing,
    /// or lost with its connection — and leaves the status (aegra's `_release_lease`, in a
    /// `finally`).
    #[serde(default)]
    pub release_by_owner: bool,
    /// A heartbeat that renews the lease while its relay works, and what it is fenced on.
    #[serde(default)]
    pub renewal: Renewal,
    /// A row given a retry time waits for the scheduler, a maintenance step that makes every row
    /// whose retry time has passed claimable again (River's `JobSchedule`, Oban's `stage_jobs`:
    /// `retryable` → `available`); the claim takes only rows it made claimable or never delayed.
    #[serde(default)]
    pub scheduler: bool,
    /// The rescuer takes a lease only once its expiry has passed, not at the instant it expires
    /// (Graphile Worker's `locked_at < now() - interval '4 hours'`).
    #[serde(default)]
    pub rescue_after_expiry: bool,
    /// A row the rescuer moves back to PENDING is due at the rescue's time, behind the rows
    /// already waiting (Graphile Worker's `run_at = greatest(run_at, now())`).
    #[serde(default)]
    pub rescue_restamps: bool,
    pub backoff: Backoff,
    pub relay: RelayPolicy,
}

fn yes() -> bool {
    true
}

/// What `mark_published` does to the row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Completion {
    /// `status = PUBLISHED` (the outbox's way).
    #[default]
    Mark,
    /// The row is deleted.
    Delete,
}

/// The retry clock's delay: grown from a base by the attempt count, capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// How the delay grows with the attempts (default: doubling).
    #[serde(default)]
    pub growth: Growth,
    /// How many of the base's and cap's milliseconds one millisecond of the model is: 1, except
    /// where a SQL profile's queue computes its delays in its own units (`[time] delays =
    /// "absolute"`: Graphile Worker's `exp(attempts)` seconds) and the run's time is scaled.
    #[serde(skip, default = "one")]
    pub unit: u64,
}

const fn one() -> u64 {
    1
}

/// How a backoff's delay grows with the attempt count `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Growth {
    /// `base · factor^(n−1)`, the factor in thousandths: 2000 doubles (seed 000's outbox, Oban's
    /// `2^attempt` s, its 15 s pad aside); Graphile Worker's `exp(attempts)` seconds grows by e, 2718.
    Exponential { factor_milli: u32 },
    /// `base · n^exponent` (River's default, `attempt⁴` seconds).
    Power { exponent: u32 },
}

impl Default for Growth {
    fn default() -> Self {
        Growth::Exponential { factor_milli: 2000 }
    }
}

impl Backoff {
    /// Doubling from `base` up to `cap` (a fixed delay where the two are equal).
    pub const fn between(base: Duration, cap: Duration) -> Backoff {
        Backoff { base, cap, growth: Growth::Exponential { factor_milli: 2000 }, unit: 1 }
    }

    /// `min(grown, cap)`, where grown is `base · 2^(attempts−1)` by default (see [`Growth`]),
    /// in units of `unit` rounded up (the first of the model's milliseconds at which the delay
    /// has passed); never less than 1 ms so a retry time is strictly later than now.
    pub fn delay(self, attempts: u32) -> Duration {
        let steps = attempts.saturating_sub(1);
        let (base, cap) = (u128::from(self.base.0), u128::from(self.cap.0));
        let grown = match self.growth {
            Growth::Exponential { factor_milli: 2000 } => base << steps.min(32),
            Growth::Exponential { factor_milli } => {
                let mut d = base;
                for _ in 0..steps {
                    if d >= cap {
                        break;
                    }
                    d = d * u128::from(factor_milli) / 1000;
                }
                d
            }
            Growth::Power { exponent } => {
                base.saturating_mul(u128::from(attempts.max(1)).saturating_pow(exponent.min(64)))
            }
        };
        let delay = u64::try_from(grown.min(cap)).unwrap_or(u64::MAX).div_ceil(self.unit.max(1));
        Duration(delay.max(1))
    }

    /// Whether the backoff doubles (the default's shape): the one outbox-check's own SQL
    /// computes.
    pub fn is_doubling(self) -> bool {
        self.growth == Growth::default()
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::between(Duration(1_000), Duration(60_000))
    }
}

/// How far apart a message's first and last publication can be, for a broker's deduplication
/// window to cover: see [`Policy::publication_span`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// Publications one message can have at most.
    pub publications: u32,
    /// The longest time from its first publication to its last.
    pub longest: Duration,
}

impl Policy {
    /// The longest time between a message's first and last publication under this design, with
    /// leases of `lease`, a budget of `max_attempts` and relays that poll at least every `poll`;
    /// or why there is none.
    ///
    /// The assumption is SPEC §6's "no pause past a lease": every relay finishes each step of a
    /// lease (its publication included) before the lease expires. Then publication `k` happens
    /// within lease `k`, `[c_k, c_k + lease]`, and claim `k + 1` comes at most `lease + delay(k) +
    /// poll` after claim `k` — the failure write comes before the lease ends and sets the retry
    /// time `delay(k)` later, or it is lost and the lease runs out first; a relay polls within
    /// `poll`. So the span is at most `lease + Σ_{k < n} (lease + delay(k) + poll)` for the `n`
    /// publications the budget allows.
    ///
    /// A relay paused past its lease publishes later than this (a fault: the span grows by the
    /// pause), and an operator's requeue starts a new budget.
    pub fn publication_span(&self, lease: Duration, max_attempts: u32, poll: Duration) -> Result<Span, &'static str> {
        if self.relay.idempotency_key == IdempotencyKeyPolicy::PerAttempt {
            return Err(
                "a new idempotency key every attempt: no broker can tell two publications of a message apart (S8)",
            );
        }
        if self.relay.republish_after_db_loss {
            return Err("it republishes after a lost database connection without a new claim, so the budget does not bound publications (S3)");
        }
        if self.attempts_at == AttemptsAt::FailureWrite {
            return Err("attempts are counted by failure writes: a relay that crashes or loses its connection after publishing spends no budget, so publications are unbounded (S3)");
        }
        let publications = match self.budget {
            BudgetPredicate::Strict => max_attempts,
            BudgetPredicate::OneOver => max_attempts + 1,
            BudgetPredicate::Absent => return Err("no budget: a message may be claimed, and published, without end"),
        };
        let waits = self.retry_clock || self.retry_in_lease;
        let gaps: u64 =
            (1..publications).map(|k| lease.0 + if waits { self.backoff.delay(k).0 } else { 0 } + poll.0).sum();
        Ok(Span { publications, longest: Duration(lease.0 + gaps) })
    }

    /// `retry.timer = "per-process"`: a row with `attempts` was attempted before, so only a claim
    /// made while its relay's own retry timer is due may take it.
    pub fn waits_for_relay_timer(&self, attempts: u32) -> bool {
        self.retry_timer == RetryTimer::PerProcess && attempts > 0
    }

    /// `retry.timer = "per-process"`: the claim that handed out a lease with `attempts` took a
    /// row attempted before (one the relay's timer let it take), so it restarts that timer.
    pub fn lease_restarts_relay_timer(&self, attempts: u32) -> bool {
        self.retry_timer == RetryTimer::PerProcess && attempts > u32::from(self.attempts_at == AttemptsAt::Claim)
    }

    /// `attempts` after a failure write (AMBIGUOUS or retry) of a lease that had `attempts`:
    /// one more where the design counts attempts at that write.
    pub fn attempts_after_failure(&self, attempts: u32) -> u32 {
        attempts + u32::from(self.attempts_at == AttemptsAt::FailureWrite)
    }

    /// A failure recorded for a lease that had `attempts` spends the budget of `max_attempts`:
    /// the row moves to EXHAUSTED instead of being retried (only where the design has that
    /// status). The core's write and the relay's choice of write both ask here.
    pub fn failure_spends_budget(&self, attempts: u32, max_attempts: u32) -> bool {
        self.exhausted_status && used_up(self.attempts_after_failure(attempts), max_attempts)
    }

    /// Whether a failure write of `kind` checks the budget at all: the AMBIGUOUS write always,
    /// the retry write unless the design leaves it unchecked (awa#435).
    pub fn checks_budget(&self, kind: super::outbox::WriteKind) -> bool {
        !matches!(kind, super::outbox::WriteKind::Retry { .. }) || self.retry_checks_budget
    }

    /// The fence a write of `kind` checks: the completion's for `mark_published`, the failure
    /// writes' own where the design gives one.
    pub fn fence_of(&self, kind: super::outbox::WriteKind) -> WriteFence {
        match kind {
            super::outbox::WriteKind::Published => self.write_fence,
            _ => self.failure_fence.unwrap_or(self.write_fence),
        }
    }

    /// Every fence a terminal write of the design checks (one, or the completion's and the
    /// failure writes').
    pub fn write_fences(&self) -> impl Iterator<Item = WriteFence> {
        std::iter::once(self.write_fence).chain(self.failure_fence.filter(|f| *f != self.write_fence))
    }

    /// The write a relay sends to record a retryable failure (`Ambiguous` or `Retry`) of a
    /// lease that had `attempts`: the exhaustion write, with the same code, where this failure
    /// spends the budget (SPEC §4). The model's relays and conformance's random writes both
    /// ask here, so neither sends a write no relay of the design sends.
    pub fn failure_write(
        &self,
        kind: super::outbox::WriteKind,
        attempts: u32,
        max_attempts: u32,
    ) -> super::outbox::WriteKind {
        use super::outbox::WriteKind;
        match kind {
            WriteKind::Ambiguous { code } | WriteKind::Retry { code }
                if self.checks_budget(kind) && self.failure_spends_budget(attempts, max_attempts) =>
            {
                WriteKind::Exhausted { code }
            }
            other => other,
        }
    }

    /// The write a relay of the design sends, without publishing, for a lease claimed with
    /// `attempts` past the budget of `max_attempts`: none unless the design's relay fails such
    /// claims (`relay.fails_claims_past_budget`); then EXHAUSTED, or FAILED without that status.
    pub fn claim_past_budget_write(&self, attempts: u32, max_attempts: u32) -> Option<super::outbox::WriteKind> {
        use super::outbox::WriteKind;
        use super::row::FailureCode;
        (self.relay.fails_claims_past_budget && attempts > max_attempts).then_some(if self.exhausted_status {
            WriteKind::Exhausted { code: FailureCode::BudgetSpent }
        } else {
            WriteKind::Failed { code: FailureCode::BudgetSpent }
        })
    }

    /// Where the rescuer moves a row it found with an expired lease: to its target (back to
    /// PENDING, or FAILED); a row whose budget is spent to EXHAUSTED (FAILED in a design without
    /// it) unless the rescuer ignores the budget. The attempts stay.
    pub fn rescue_target(&self, attempts: u32, max_attempts: u32) -> super::row::Status {
        use super::row::Status;
        let spent = self.rescue_budget == RescueBudget::Exhausts && used_up(attempts, max_attempts);
        match (self.rescue_to, spent, self.exhausted_status) {
            (RescueTarget::Failed, _, _) => Status::Failed,
            (_, false, _) => Status::Pending,
            (_, true, true) => Status::Exhausted,
            (_, true, false) => Status::Failed,
        }
    }

    /// The retry time the rescuer gives a row it moves back to PENDING at `now`: the backoff of
    /// its `attempts` where its target is a retry, `now` where the rescue restamps the row's due
    /// time (`maintenance.restamps`), none otherwise.
    pub fn rescue_retry_at(&self, attempts: u32, now: super::time::Instant) -> Option<super::time::Instant> {
        match self.rescue_to {
            RescueTarget::Retry => Some(now.plus(self.backoff.delay(attempts))),
            RescueTarget::Pending if self.rescue_restamps => Some(now),
            _ => None,
        }
    }

    /// The rescuer's release of `lease` at `now`, the row having `attempts`: fenced by `fence`,
    /// to [`Policy::rescue_target`], with [`Policy::rescue_retry_at`] where the row goes back to
    /// PENDING. Every engine's rescuer asks here.
    pub fn rescue_request(
        &self,
        lease: super::row::Lease,
        fence: ReleaseFence,
        attempts: u32,
        max_attempts: u32,
        now: super::time::Instant,
    ) -> super::outbox::ReleaseRequest {
        let to = self.rescue_target(attempts, max_attempts);
        let retry_at = if to == super::row::Status::Pending { self.rescue_retry_at(attempts, now) } else { None };
        super::outbox::ReleaseRequest { lease, fence, to, retry_at, now }
    }

    /// A policy every switch of which a complete design file sets: the base such a file is
    /// applied to, never seen itself.
    pub fn unset() -> Policy {
        Policy {
            attempts_at: AttemptsAt::Claim,
            claim_fence: ClaimFence::Unfenced,
            write_fence: WriteFence::MessageIdOnly,
            failure_fence: None,
            budget: BudgetPredicate::Absent,
            ambiguous_shape: AmbiguousShape::KeepsOwner,
            token_kind: TokenKind::Counter,
            claim_order: ClaimOrder::Due,
            claim_ties_any: false,
            retry_clock: false,
            exhausted_status: false,
            claim_by_tenant: false,
            write_checks_tenant: false,
            claim_live_leases: false,
            claim_expired_leases: true,
            claim_terminal: false,
            swallow_stale: false,
            requeue_resets_token: false,
            rescue: None,
            rescue_to: RescueTarget::Pending,
            rescue_budget: RescueBudget::Exhausts,
            completion: Completion::Mark,
            failure_deletes: false,
            retry_in_lease: false,
            retry_checks_budget: true,
            budget_in_write: true,
            lease: LeaseKind::Expiry,
            retry_timer: RetryTimer::Row,
            release_by_owner: false,
            renewal: Renewal::None,
            scheduler: false,
            rescue_after_expiry: false,
            rescue_restamps: false,
            backoff: Backoff::between(super::time::Duration(1), super::time::Duration(1)),
            relay: RelayPolicy {
                idempotency_key: IdempotencyKeyPolicy::MessageId,
                rejection: RejectionWrite::MarkFailed,
                publish_before_ack: false,
                republish_after_db_loss: false,
                reaper: false,
                clock: ClockSource::Database,
                write_clock: None,
                shared_owner: false,
                fails_claims_past_budget: false,
                on_failure: FailureWrite::Retry,
            },
        }
    }

    /// Every switch as `(name, value)`, in a fixed order, for listings and reports.
    pub fn switches(&self) -> Vec<(&'static str, String)> {
        fn s<T: Serialize>(value: &T) -> String {
            match serde_json::to_value(value) {
                Ok(serde_json::Value::String(text)) => text,
                Ok(other) => other.to_string(),
                Err(_) => "?".into(),
            }
        }
        vec![
            ("attempts_at", s(&self.attempts_at)),
            ("claim_fence", s(&self.claim_fence)),
            ("write_fence", s(&self.write_fence)),
            ("failure_fence", self.failure_fence.map_or("as write_fence".to_string(), |f| s(&f))),
            ("budget", s(&self.budget)),
            ("ambiguous_shape", s(&self.ambiguous_shape)),
            ("token_kind", s(&self.token_kind)),
            ("claim_order", s(&self.claim_order)),
            ("claim_ties_any", s(&self.claim_ties_any)),
            ("retry_clock", s(&self.retry_clock)),
            ("retry_in_lease", s(&self.retry_in_lease)),
            ("completion", s(&self.completion)),
            ("exhausted_status", s(&self.exhausted_status)),
            ("claim_by_tenant", s(&self.claim_by_tenant)),
            ("write_checks_tenant", s(&self.write_checks_tenant)),
            ("claim_live_leases", s(&self.claim_live_leases)),
            ("claim_expired_leases", s(&self.claim_expired_leases)),
            ("claim_terminal", s(&self.claim_terminal)),
            ("swallow_stale", s(&self.swallow_stale)),
            ("requeue_resets_token", s(&self.requeue_resets_token)),
            ("rescue", self.rescue.map_or("none".to_string(), |f| format!("fenced by {}", f.name()))),
            ("rescue_to", s(&self.rescue_to)),
            ("rescue_budget", s(&self.rescue_budget)),
            ("rescue_after_expiry", s(&self.rescue_after_expiry)),
            ("rescue_restamps", s(&self.rescue_restamps)),
            ("failure_deletes", s(&self.failure_deletes)),
            ("retry_checks_budget", s(&self.retry_checks_budget)),
            ("budget_in_write", s(&self.budget_in_write)),
            ("lease", s(&self.lease)),
            ("retry_timer", s(&self.retry_timer)),
            ("release_by_owner", s(&self.release_by_owner)),
            ("renewal", s(&self.renewal)),
            ("scheduler", s(&self.scheduler)),
            (
                "backoff",
                match self.backoff.growth {
                    Growth::Exponential { factor_milli: 2000 } => {
                        format!("{}..{}", self.backoff.base, self.backoff.cap)
                    }
                    Growth::Exponential { factor_milli } => {
                        format!("{}..{} ×{}", self.backoff.base, self.backoff.cap, f64::from(factor_milli) / 1000.0)
                    }
                    Growth::Power { exponent } => format!("{}..{} n^{exponent}", self.backoff.base, self.backoff.cap),
                },
            ),
            ("relay.idempotency_key", s(&self.relay.idempotency_key)),
            ("relay.rejection", s(&self.relay.rejection)),
            ("relay.publish_before_ack", s(&self.relay.publish_before_ack)),
            ("relay.republish_after_db_loss", s(&self.relay.republish_after_db_loss)),
            ("relay.reaper", s(&self.relay.reaper)),
            ("relay.clock", s(&self.relay.clock)),
            ("relay.write_clock", self.relay.write_clock.map_or("as relay.clock".to_string(), |c| s(&c))),
            ("relay.shared_owner", s(&self.relay.shared_owner)),
            ("relay.fails_claims_past_budget", s(&self.relay.fails_claims_past_budget)),
            ("relay.on_failure", s(&self.relay.on_failure)),
        ]
    }
}
