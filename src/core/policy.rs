//! Designs as data: a [`Policy`] is a set of switches over the one core.
//!
//! Every variant of SPEC §5 and every mutant of docs/designs.md is a `Policy` value; no rule of the
//! outbox is written twice. A policy belongs to a relay, so a fleet can mix generations over one
//! table (a rolling upgrade). The switches that concern the database statements are read by
//! [`Outbox`](super::outbox::Outbox); the ones under [`RelayPolicy`] by the relay cycle.

use super::time::Duration;
use serde::{Deserialize, Serialize};
use std::fmt;

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
}

/// A design: every switch the core and the relay cycle read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Policy {
    pub attempts_at: AttemptsAt,
    pub claim_fence: ClaimFence,
    pub write_fence: WriteFence,
    pub budget: BudgetPredicate,
    pub ambiguous_shape: AmbiguousShape,
    pub token_kind: TokenKind,
    pub claim_order: ClaimOrder,
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
    pub rescue: Option<super::outbox::ReleaseFence>,
    /// What a successful publication's write does to the row: marks it PUBLISHED, or deletes it
    /// (a job queue's `DELETE … WHERE id = ?`): the row is gone, and no later statement matches it.
    #[serde(default)]
    pub completion: Completion,
    /// The retry time is kept in the lease's expiry column (a visibility timeout): a failure
    /// write sets `lease_expires_at` to the retry time instead of `next_attempt_at`, and the
    /// claim's lease predicate is the only clock it checks.
    #[serde(default)]
    pub retry_in_lease: bool,
    pub backoff: Backoff,
    pub relay: RelayPolicy,
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

/// The retry clock's delay: exponential in the attempt count, with a cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// `min(base · 2^(attempts−1), cap)`, never less than 1 ms so a retry time is strictly later
    /// than now.
    pub fn delay(self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(32);
        let delay = self.base.0.saturating_mul(1u64 << doublings).min(self.cap.0);
        Duration(delay.max(1))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { base: Duration(1_000), cap: Duration(60_000) }
    }
}

/// The designs of SPEC §5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Reference,
    SeedV2,
    LegacyV1,
    SeedTenant,
}

impl Variant {
    pub const ALL: [Variant; 4] = [Variant::Reference, Variant::SeedV2, Variant::LegacyV1, Variant::SeedTenant];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Reference => "reference",
            Variant::SeedV2 => "seed-v2",
            Variant::LegacyV1 => "legacy-v1",
            Variant::SeedTenant => "seed-tenant",
        }
    }

    pub fn summary(self) -> &'static str {
        match self {
            Variant::Reference => "SPEC §3 and §4: fenced claim and writes, attempts counted at claim, retry clock, reaper",
            Variant::SeedV2 => "seed 000's messaging_outbox V2 as written: fenced, but attempts counted by the AMBIGUOUS write and `now` from the relay",
            Variant::LegacyV1 => "seed 000's V1 leaseBatch path: no owner, no token bump, no retry clock, no budget; writes keyed on message_id",
            Variant::SeedTenant => "seed 003's outbox_events: tenant-scoped SKIP LOCKED claim, attempts < 3 at claim, random tokens, no failed or exhausted state",
        }
    }

    pub fn parse(text: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == text)
    }

    /// The design, from its file under models/designs/ (built into the binary).
    pub fn policy(self) -> Policy {
        static POLICIES: std::sync::OnceLock<[Policy; 4]> = std::sync::OnceLock::new();
        POLICIES.get_or_init(|| Variant::ALL.map(|v| builtin(Design::Variant(v))))[self as usize]
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The mistakes of docs/designs.md's catalogue, each one switch flipped on `reference`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutant {
    ClaimNoTokenBump,
    WriteOwnerOnly,
    WriteIdOnly,
    SwallowStale,
    StealLiveLease,
    NoRetryClock,
    NoBudgetPredicate,
    ExhaustOffByOne,
    ClaimTerminal,
    PublishBeforeAck,
    RetryAfterDbLoss,
    FreshIdempotencyKey,
    WriteIgnoresTenant,
    TokenResetOnRequeue,
}

impl Mutant {
    pub const ALL: [Mutant; 14] = [
        Mutant::ClaimNoTokenBump,
        Mutant::WriteOwnerOnly,
        Mutant::WriteIdOnly,
        Mutant::SwallowStale,
        Mutant::StealLiveLease,
        Mutant::NoRetryClock,
        Mutant::NoBudgetPredicate,
        Mutant::ExhaustOffByOne,
        Mutant::ClaimTerminal,
        Mutant::PublishBeforeAck,
        Mutant::RetryAfterDbLoss,
        Mutant::FreshIdempotencyKey,
        Mutant::WriteIgnoresTenant,
        Mutant::TokenResetOnRequeue,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutant::ClaimNoTokenBump => "claim-no-token-bump",
            Mutant::WriteOwnerOnly => "write-owner-only",
            Mutant::WriteIdOnly => "write-id-only",
            Mutant::SwallowStale => "swallow-stale",
            Mutant::StealLiveLease => "steal-live-lease",
            Mutant::NoRetryClock => "no-retry-clock",
            Mutant::NoBudgetPredicate => "no-budget-predicate",
            Mutant::ExhaustOffByOne => "exhaust-off-by-one",
            Mutant::ClaimTerminal => "claim-terminal",
            Mutant::PublishBeforeAck => "publish-before-ack",
            Mutant::RetryAfterDbLoss => "retry-after-db-loss",
            Mutant::FreshIdempotencyKey => "fresh-idempotency-key",
            Mutant::WriteIgnoresTenant => "write-ignores-tenant",
            Mutant::TokenResetOnRequeue => "token-reset-on-requeue",
        }
    }

    /// The mistake, in the catalogue's words (docs/designs.md).
    pub fn mistake(self) -> &'static str {
        match self {
            Mutant::ClaimNoTokenBump => "claim leaves lease_token unchanged",
            Mutant::WriteOwnerOnly => "terminal writes check status and owner, not the token",
            Mutant::WriteIdOnly => "terminal writes keyed on message_id alone",
            Mutant::SwallowStale => "a write that matched no row is reported as applied",
            Mutant::StealLiveLease => "claim takes IN_FLIGHT rows whose lease has not expired",
            Mutant::NoRetryClock => "AMBIGUOUS/retry writes set no next_attempt_at and claim ignores it",
            Mutant::NoBudgetPredicate => "claim omits attempts < max",
            Mutant::ExhaustOffByOne => "the budget check lets one more attempt through (attempts <= max)",
            Mutant::ClaimTerminal => "claim accepts PUBLISHED, FAILED or EXHAUSTED rows",
            Mutant::PublishBeforeAck => "the row is marked PUBLISHED before the broker acknowledged",
            Mutant::RetryAfterDbLoss => {
                "after losing the DB connection post-publish, the relay republishes at once and records PUBLISHED"
            }
            Mutant::FreshIdempotencyKey => "each attempt sends a new idempotency key instead of message_id",
            Mutant::WriteIgnoresTenant => "terminal writes do not check the tenant",
            Mutant::TokenResetOnRequeue => "requeue resets lease_token to 0",
        }
    }

    /// The switch flipped, as its file says it (`write.fence = "message-id-only"`).
    pub fn switch(self) -> String {
        let file = super::design::DesignFile::parse(MUTANT_FILES[self as usize]).expect("a built-in file");
        let table: toml::Table = toml::from_str(&file.to_toml()).expect("our own TOML");
        let mut keys = Vec::new();
        for (section, value) in &table {
            if let toml::Value::Table(entries) = value {
                keys.extend(entries.iter().map(|(k, v)| format!("{section}.{k} = {v}")));
            }
        }
        keys.join(", ")
    }

    /// The properties the catalogue expects it to break (the tools must find one of them).
    pub fn expected_kills(self) -> &'static [&'static str] {
        match self {
            Mutant::ClaimNoTokenBump => &["S1", "S2"],
            Mutant::WriteOwnerOnly => &["S1"],
            Mutant::WriteIdOnly => &["S1", "S4"],
            Mutant::SwallowStale => &["S1"],
            Mutant::StealLiveLease => &["S6", "S3"],
            Mutant::NoRetryClock => &["S7", "L2"],
            Mutant::NoBudgetPredicate => &["S3"],
            Mutant::ExhaustOffByOne => &["S3", "L1"],
            Mutant::ClaimTerminal => &["S4"],
            Mutant::PublishBeforeAck => &["S5"],
            Mutant::RetryAfterDbLoss => &["S3", "S5", "S7"],
            Mutant::FreshIdempotencyKey => &["S8"],
            Mutant::WriteIgnoresTenant => &["S9"],
            Mutant::TokenResetOnRequeue => &["S2", "S1"],
        }
    }

    pub fn parse(text: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == text)
    }

    /// `reference` with this one switch flipped, from its file under models/designs/mutants/.
    pub fn policy(self) -> Policy {
        static POLICIES: std::sync::OnceLock<[Policy; 14]> = std::sync::OnceLock::new();
        POLICIES.get_or_init(|| Mutant::ALL.map(|m| builtin(Design::Mutant(m))))[self as usize]
    }
}

impl fmt::Display for Mutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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

    /// The reference design of SPEC §3–§4 (models/designs/reference.toml).
    pub fn reference() -> Policy {
        Variant::Reference.policy()
    }

    /// Where the rescuer moves a row it found with an expired lease: back to PENDING with budget
    /// left, else to EXHAUSTED (FAILED in a design without it). The attempts stay.
    pub fn rescue_target(&self, attempts: u32, max_attempts: u32) -> super::row::Status {
        use super::row::Status;
        match (used_up(attempts, max_attempts), self.exhausted_status) {
            (false, _) => Status::Pending,
            (true, true) => Status::Exhausted,
            (true, false) => Status::Failed,
        }
    }

    /// A policy every switch of which a complete design file sets: the base such a file is
    /// applied to, never seen itself.
    pub(crate) fn unset() -> Policy {
        Policy {
            attempts_at: AttemptsAt::Claim,
            claim_fence: ClaimFence::Unfenced,
            write_fence: WriteFence::MessageIdOnly,
            budget: BudgetPredicate::Absent,
            ambiguous_shape: AmbiguousShape::KeepsOwner,
            token_kind: TokenKind::Counter,
            claim_order: ClaimOrder::Due,
            retry_clock: false,
            exhausted_status: false,
            claim_by_tenant: false,
            write_checks_tenant: false,
            claim_live_leases: false,
            claim_terminal: false,
            swallow_stale: false,
            requeue_resets_token: false,
            rescue: None,
            completion: Completion::Mark,
            retry_in_lease: false,
            backoff: Backoff { base: super::time::Duration(1), cap: super::time::Duration(1) },
            relay: RelayPolicy {
                idempotency_key: IdempotencyKeyPolicy::MessageId,
                rejection: RejectionWrite::MarkFailed,
                publish_before_ack: false,
                republish_after_db_loss: false,
                reaper: false,
                clock: ClockSource::Database,
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
            ("budget", s(&self.budget)),
            ("ambiguous_shape", s(&self.ambiguous_shape)),
            ("token_kind", s(&self.token_kind)),
            ("claim_order", s(&self.claim_order)),
            ("retry_clock", s(&self.retry_clock)),
            ("retry_in_lease", s(&self.retry_in_lease)),
            ("completion", s(&self.completion)),
            ("exhausted_status", s(&self.exhausted_status)),
            ("claim_by_tenant", s(&self.claim_by_tenant)),
            ("write_checks_tenant", s(&self.write_checks_tenant)),
            ("claim_live_leases", s(&self.claim_live_leases)),
            ("claim_terminal", s(&self.claim_terminal)),
            ("swallow_stale", s(&self.swallow_stale)),
            ("requeue_resets_token", s(&self.requeue_resets_token)),
            ("rescue", self.rescue.map_or("none".to_string(), |f| format!("fenced by {}", f.name()))),
            ("backoff", format!("{}..{}", self.backoff.base, self.backoff.cap)),
            ("relay.idempotency_key", s(&self.relay.idempotency_key)),
            ("relay.rejection", s(&self.relay.rejection)),
            ("relay.publish_before_ack", s(&self.relay.publish_before_ack)),
            ("relay.republish_after_db_loss", s(&self.relay.republish_after_db_loss)),
            ("relay.reaper", s(&self.relay.reaper)),
            ("relay.clock", s(&self.relay.clock)),
        ]
    }
}

/// A design a relay can run: a variant of SPEC §5, a mutant of docs/designs.md, or a design
/// read from the user's own file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Design {
    Variant(Variant),
    Mutant(Mutant),
    Custom(&'static CustomDesign),
}

/// A design from a file (docs/design-file.md). The file layer (`crate::design`) registers it
/// once per process under its name, so that a configuration naming it reads back.
#[derive(Debug)]
pub struct CustomDesign {
    pub name: String,
    pub description: String,
    pub policy: Policy,
    /// The queue's own status names, where the file gives them.
    pub statuses: Option<super::design::StatusNames>,
    /// Where it was read from, for messages.
    pub origin: String,
}

impl PartialEq for CustomDesign {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for CustomDesign {}
impl std::hash::Hash for CustomDesign {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}
impl PartialOrd for CustomDesign {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for CustomDesign {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}
impl Serialize for CustomDesign {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}
impl Design {
    pub fn policy(self) -> Policy {
        match self {
            Design::Variant(v) => v.policy(),
            Design::Mutant(m) => m.policy(),
            Design::Custom(c) => c.policy,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Design::Variant(v) => v.name(),
            Design::Mutant(m) => m.name(),
            Design::Custom(c) => &c.name,
        }
    }

    /// How a command line names the design: a built-in by name, a file's design by its file.
    pub fn argument(self) -> &'static str {
        match self {
            Design::Custom(c) => &c.origin,
            other => other.name(),
        }
    }

    /// Parses a variant or mutant name.
    pub fn parse(text: &str) -> Option<Design> {
        Variant::parse(text).map(Design::Variant).or_else(|| Mutant::parse(text).map(Design::Mutant))
    }

    /// Every valid name, variants first, for error messages.
    pub fn all_names() -> Vec<&'static str> {
        Variant::ALL.iter().map(|v| v.name()).chain(Mutant::ALL.iter().map(|m| m.name())).collect()
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The built-in designs' files, in [`Variant::ALL`]'s and [`Mutant::ALL`]'s order.
const VARIANT_FILES: [&str; 4] = [
    include_str!("../../models/designs/reference.toml"),
    include_str!("../../models/designs/seed-v2.toml"),
    include_str!("../../models/designs/legacy-v1.toml"),
    include_str!("../../models/designs/seed-tenant.toml"),
];
const MUTANT_FILES: [&str; 14] = [
    include_str!("../../models/designs/mutants/claim-no-token-bump.toml"),
    include_str!("../../models/designs/mutants/write-owner-only.toml"),
    include_str!("../../models/designs/mutants/write-id-only.toml"),
    include_str!("../../models/designs/mutants/swallow-stale.toml"),
    include_str!("../../models/designs/mutants/steal-live-lease.toml"),
    include_str!("../../models/designs/mutants/no-retry-clock.toml"),
    include_str!("../../models/designs/mutants/no-budget-predicate.toml"),
    include_str!("../../models/designs/mutants/exhaust-off-by-one.toml"),
    include_str!("../../models/designs/mutants/claim-terminal.toml"),
    include_str!("../../models/designs/mutants/publish-before-ack.toml"),
    include_str!("../../models/designs/mutants/retry-after-db-loss.toml"),
    include_str!("../../models/designs/mutants/fresh-idempotency-key.toml"),
    include_str!("../../models/designs/mutants/write-ignores-tenant.toml"),
    include_str!("../../models/designs/mutants/token-reset-on-requeue.toml"),
];

impl Design {
    /// The text of a built-in design's file.
    pub fn builtin_file(self) -> Option<&'static str> {
        match self {
            Design::Variant(v) => Some(VARIANT_FILES[v as usize]),
            Design::Mutant(m) => Some(MUTANT_FILES[m as usize]),
            Design::Custom(_) => None,
        }
    }
}

/// A built-in design's policy from its file: a variant's file lists every key, a mutant's starts
/// from `reference`. A bad built-in file is a bug of this build (tests/design_files.rs reads
/// every one).
fn builtin(design: Design) -> Policy {
    let text = design.builtin_file().expect("a built-in design");
    let file =
        super::design::DesignFile::parse(text).unwrap_or_else(|e| panic!("models/designs: {}: {e}", design.name()));
    assert_eq!(file.name, design.name(), "a built-in file names its design");
    file.resolve(&|name| Design::parse(name).map(Design::policy))
        .unwrap_or_else(|e| panic!("models/designs: {}: {e}", design.name()))
}
