//! Design files: a [`Policy`] written as TOML, section by section in the words of a queue's
//! author (what the claim takes and sets, what a write checks, where attempts are counted, the
//! retry clock, exhaustion, the maintenance job, the relay). Every built-in design is such a
//! file (`models/designs/`), so there is one way to describe a design; docs/design-file.md
//! documents every key, docs/json/design-file.schema.json is its schema.
//!
//! A file either lists every key or starts from a built-in (`based_on = "reference"`) and says
//! only what differs — which is how each mutant is written: one key.

use super::policy::{
    AmbiguousShape, AttemptsAt, Backoff, BudgetPredicate, ClaimFence, ClaimOrder, ClockSource, FailureWrite, Growth,
    IdempotencyKeyPolicy, LeaseKind, Policy, RejectionWrite, Renewal, RetryTimer, TokenKind, WriteFence,
};
use super::time::Duration;
use serde::{Deserialize, Serialize};

/// A design file as written: every section and key optional, none unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignFile {
    /// The design's name, as reports and fleets name it.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A built-in design whose switches the file starts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<AttemptsSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<WriteSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhaustion: Option<ExhaustionSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelaySection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<RequeueSection>,
    /// The queue's own names for the model's six statuses (histories and SQL profiles of this
    /// design use them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statuses: Option<StatusNames>,
}

/// `[statuses]`: the queue's name for each of the model's six statuses; a status not named keeps
/// the model's name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusNames {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambiguous: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhausted: Option<String>,
}

impl StatusNames {
    /// Each status as the queue names it, with the model's name beside it.
    pub fn names(&self) -> [(String, super::row::Status); 6] {
        use super::row::Status;
        let name = |given: &Option<String>, status: Status| {
            (given.clone().unwrap_or_else(|| status.as_str().to_string()), status)
        };
        [
            name(&self.pending, Status::Pending),
            name(&self.in_flight, Status::InFlight),
            name(&self.published, Status::Published),
            name(&self.ambiguous, Status::Ambiguous),
            name(&self.failed, Status::Failed),
            name(&self.exhausted, Status::Exhausted),
        ]
    }

    /// A name may stand for several statuses only where no statement of the model tells them
    /// apart: PENDING and AMBIGUOUS (both claimable: a queue with no AMBIGUOUS returns a row of
    /// unknown outcome to its waiting status) or FAILED and EXHAUSTED (both terminal, both
    /// requeued: River's and Oban's `discarded`). Any other shared name is an error naming it.
    pub fn check(&self) -> Result<(), String> {
        let names = self.names();
        for (i, (n, status)) in names.iter().enumerate() {
            if let Some((_, other)) = names[..i].iter().find(|(m, other)| m == n && !indistinct(*other, *status)) {
                return Err(format!(
                    "statuses: {n:?} names both {} and {}, which the statements tell apart \
                     (only PENDING and AMBIGUOUS, or FAILED and EXHAUSTED, may share a name)",
                    other.as_str(),
                    status.as_str()
                ));
            }
        }
        Ok(())
    }

    /// The statuses each name stands for, in the model's order.
    pub fn by_name(&self) -> std::collections::BTreeMap<String, Vec<super::row::Status>> {
        let mut out: std::collections::BTreeMap<String, Vec<super::row::Status>> = Default::default();
        for (name, status) in self.names() {
            out.entry(name).or_default().push(status);
        }
        out
    }
}

/// Statuses no statement of the model tells apart, which one name of a queue may stand for.
pub fn indistinct(a: super::row::Status, b: super::row::Status) -> bool {
    use super::row::Status::*;
    matches!((a, b), (Pending, Ambiguous) | (Ambiguous, Pending) | (Failed, Exhausted) | (Exhausted, Failed))
}

/// `[claim]`: which rows a claim takes, in what order, and what it writes on them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimSection {
    /// The claim is scoped to the relay's tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_scoped: Option<bool>,
    /// The claim also takes IN_FLIGHT rows whose lease is still live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takes_live_leases: Option<bool>,
    /// The claim takes back IN_FLIGHT rows whose lease has expired (false: only the
    /// maintenance job does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takes_expired_leases: Option<bool>,
    /// The claim also takes PUBLISHED, FAILED and EXHAUSTED rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takes_terminal_rows: Option<bool>,
    /// The budget predicate: `strict` (attempts < max), `one-over` (attempts <= max), `absent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetPredicate>,
    /// `due` (retry time or creation, then id) or `created` (creation, tenant, id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<ClaimOrder>,
    /// `by-id` or `any`: the order of rows due at the same instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ties: Option<Ties>,
    /// What the claim sets besides status and expiry: `owner-and-token`, `owner-only`, `unfenced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sets: Option<ClaimFence>,
    /// Where a fresh token comes from: `counter` (token + 1) or `random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenKind>,
    /// What holds the lease: `expiry` (a time in the row) or `session` (the claiming relay's
    /// database session: good_job's advisory lock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseKind>,
    /// A heartbeat that renews the lease while the relay works: `none`, `by-owner` (aegra's
    /// `claimed_by = worker_name`) or `by-token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewal: Option<Renewal>,
}

/// `[attempts]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptsSection {
    /// `claim` (the claim's statement counts) or `failure-write` (the AMBIGUOUS and retry writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_at: Option<AttemptsAt>,
}

/// `[write]`: what a terminal write checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteSection {
    /// `status-owner-token`, `status-token`, `status-owner`, `status-only` or `message-id-only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<WriteFence>,
    /// The failure writes' fence, where it is not `fence` (Graphile Worker: complete by id, fail
    /// by `locked_by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_fence: Option<WriteFence>,
    /// The write checks the row's tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks_tenant: Option<bool>,
    /// A write that matched no row is reported as applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmatched_reported_as_applied: Option<bool>,
    /// What mark_published does to the row: `mark` (PUBLISHED) or `delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<super::policy::Completion>,
    /// A write recording a row FAILED or EXHAUSTED deletes it (moves it out of the table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_deletes: Option<bool>,
    /// After each of its writes the relay clears the row's lease where the owner is its own,
    /// leaving the status (aegra's `_release_lease`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub releases_lease_by_owner: Option<bool>,
}

/// How the retry delay grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackoffKind {
    /// `min(base · factor^(attempts−1), cap)`, the factor 2 unless `factor` says otherwise.
    Exponential,
    /// The same delay every time (`delay_ms`).
    Fixed,
    /// `min(base · attempts^exponent, cap)` (River: `attempt⁴` seconds).
    Power,
}

/// An exponential backoff's factor, as written (`factor = 2.718`), kept in thousandths so a
/// design stays comparable and hashable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Factor(pub u32);

impl Serialize for Factor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(f64::from(self.0) / 1000.0)
    }
}

impl<'de> Deserialize<'de> for Factor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Factor, D::Error> {
        let value = f64::deserialize(d)?;
        if !(value > 1.0 && value <= 1000.0) {
            return Err(serde::de::Error::custom(format!(
                "{value} is no factor a delay can grow by: give a number above 1 (at most 1000); a delay that does not grow is backoff = \"fixed\""
            )));
        }
        Ok(Factor((value * 1000.0).round() as u32))
    }
}

/// `[retry]`: the retry clock and its backoff.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    /// The AMBIGUOUS and retry writes set `next_attempt_at` and the claim honours it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffKind>,
    /// Exponential: the first delay (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ms: Option<u64>,
    /// Exponential: the longest delay (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_ms: Option<u64>,
    /// Fixed: the delay (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Exponential: what each attempt multiplies the delay by (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<Factor>,
    /// Power: the attempt count's exponent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponent: Option<u32>,
    /// What the AMBIGUOUS write leaves: `clears-lease` or `keeps-owner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambiguous_write: Option<AmbiguousShape>,
    /// The retry time is kept in the lease's expiry column (a visibility timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_lease_column: Option<bool>,
    /// The retry write moves a row whose budget is spent to EXHAUSTED (false: awa#435).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_write_checks_budget: Option<bool>,
    /// The failure statements check the budget themselves (false: the relay decides from its
    /// copy of the row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_in_statement: Option<bool>,
    /// Who keeps the retry time: `row` or `per-process` (each relay's own timer, CAP#1797).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer: Option<RetryTimer>,
}

/// `[exhaustion]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExhaustionSection {
    /// The design has an EXHAUSTED status: a failure past the budget moves there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<bool>,
}

/// The maintenance job beside the relays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MaintenanceJob {
    None,
    /// Expired leases whose budget is spent move to EXHAUSTED.
    ExhaustExpired,
    /// Expired leases move back to PENDING (budget spent: EXHAUSTED), fenced by `fence`.
    RescueExpired,
}

/// `[maintenance]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<MaintenanceJob>,
    /// The rescuer's fence: `expired` (finds and moves in one statement), `token` (moves what it
    /// read, if its token is still the row's) or `id` (moves the row it read, whatever holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<super::policy::ReleaseFence>,
    /// Where the rescuer moves a row: `pending`, `retry` (pending with a retry time) or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<super::policy::RescueTarget>,
    /// `exhausts` (a row whose budget is spent goes to EXHAUSTED) or `ignored`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::policy::RescueBudget>,
    /// A row given a retry time waits for the scheduler's step (River's `JobSchedule`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<bool>,
    /// The rescuer takes a lease only once its expiry has passed (Graphile Worker's `<`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_expiry: Option<bool>,
    /// A row rescued back to pending is due at the rescue's time (Graphile Worker's `run_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restamps: Option<bool>,
}

/// `claim.ties`: the order of rows due at the same instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ties {
    ById,
    Any,
}

/// `[relay]`: what the relay process does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySection {
    /// Whose clock gives `now`: `database` or `relay` (bound as a parameter; may be skewed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockSource>,
    /// Whose clock the writes read, where not `clock`'s: `database` or `relay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_clock: Option<ClockSource>,
    /// `message-id` on every attempt, or `per-attempt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKeyPolicy>,
    /// What a permanent rejection writes: `mark-failed` or `mark-retry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_rejection: Option<RejectionWrite>,
    /// Writes PUBLISHED before the broker acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_before_ack: Option<bool>,
    /// After losing the database connection post-publish, republishes at once and records
    /// PUBLISHED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub republish_after_db_loss: Option<bool>,
    /// Every relay of the design writes one owner id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_owner: Option<bool>,
    /// A relay records a row it claimed past the budget as failed, without publishing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fails_claims_past_budget: Option<bool>,
    /// What a failed or unknown publication writes: `retry` or `mark-failed` (aegra).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<FailureWrite>,
}

/// `[requeue]`: the operator's requeue of FAILED and EXHAUSTED rows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequeueSection {
    /// The requeue resets the token to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_token: Option<bool>,
}

/// What is wrong with a design file, where (line and column from 1), on one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct DesignError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl DesignFile {
    /// Parses a design file; an error names the key, the value and what is allowed.
    pub fn parse(text: &str) -> Result<DesignFile, DesignError> {
        toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            let (line, column) = line_column(text, at);
            let key = key_at(text, at);
            let message = e.message().replace('\n', " ").trim().to_string();
            let message = match key {
                Some(key) if !message.contains(&key) => format!("{key}: {message}"),
                _ => message,
            };
            DesignError { line, column, message }
        })
    }

    /// The policy: the base's switches with the file's keys applied. A key whose value cannot go
    /// with the others (a fixed delay with a cap) is an error naming it.
    pub fn apply(&self, base: Policy) -> Result<Policy, String> {
        let mut p = base;
        if let Some(c) = &self.claim {
            set(&mut p.claim_by_tenant, c.tenant_scoped);
            set(&mut p.claim_live_leases, c.takes_live_leases);
            set(&mut p.claim_expired_leases, c.takes_expired_leases);
            set(&mut p.claim_terminal, c.takes_terminal_rows);
            set(&mut p.budget, c.budget);
            set(&mut p.claim_order, c.order);
            if let Some(ties) = c.ties {
                p.claim_ties_any = ties == Ties::Any;
            }
            set(&mut p.claim_fence, c.sets);
            set(&mut p.token_kind, c.token);
            set(&mut p.lease, c.lease);
            set(&mut p.renewal, c.renewal);
        }
        if let Some(a) = &self.attempts {
            set(&mut p.attempts_at, a.counted_at);
        }
        if let Some(w) = &self.write {
            set(&mut p.write_fence, w.fence);
            if w.failure_fence.is_some() {
                p.failure_fence = w.failure_fence;
            }
            set(&mut p.write_checks_tenant, w.checks_tenant);
            set(&mut p.swallow_stale, w.unmatched_reported_as_applied);
            set(&mut p.completion, w.completion);
            set(&mut p.failure_deletes, w.failure_deletes);
            set(&mut p.release_by_owner, w.releases_lease_by_owner);
        }
        if let Some(r) = &self.retry {
            set(&mut p.retry_clock, r.clock);
            set(&mut p.ambiguous_shape, r.ambiguous_write);
            set(&mut p.retry_in_lease, r.in_lease_column);
            set(&mut p.retry_checks_budget, r.retry_write_checks_budget);
            set(&mut p.retry_timer, r.timer);
            set(&mut p.budget_in_write, r.budget_in_statement);
            let kind = r.backoff.unwrap_or(match p.backoff.growth {
                Growth::Power { .. } => BackoffKind::Power,
                _ if p.backoff.base == p.backoff.cap => BackoffKind::Fixed,
                _ => BackoffKind::Exponential,
            });
            let given = |keys: &[(&'static str, bool)]| keys.iter().find(|(_, g)| *g).map(|(k, _)| *k);
            match kind {
                BackoffKind::Fixed => {
                    let other = [
                        ("base_ms", r.base_ms.is_some()),
                        ("cap_ms", r.cap_ms.is_some()),
                        ("factor", r.factor.is_some()),
                        ("exponent", r.exponent.is_some()),
                    ];
                    if let Some(key) = given(&other) {
                        return Err(format!("retry.backoff = \"fixed\" takes delay_ms, not {key}"));
                    }
                    if let Some(d) = r.delay_ms {
                        p.backoff = Backoff::between(Duration(d), Duration(d));
                    } else if r.backoff.is_some() && (p.backoff.base != p.backoff.cap || !p.backoff.is_doubling()) {
                        return Err("retry.backoff = \"fixed\" needs delay_ms".into());
                    }
                }
                BackoffKind::Exponential => {
                    if let Some(key) = given(&[("delay_ms", r.delay_ms.is_some()), ("exponent", r.exponent.is_some())])
                    {
                        return Err(format!(
                            "retry.{key} does not go with backoff = \"exponential\", which takes base_ms, cap_ms and factor"
                        ));
                    }
                    set(&mut p.backoff.base.0, r.base_ms);
                    set(&mut p.backoff.cap.0, r.cap_ms);
                    match r.factor {
                        Some(Factor(factor_milli)) => p.backoff.growth = Growth::Exponential { factor_milli },
                        None if matches!(p.backoff.growth, Growth::Power { .. }) => {
                            p.backoff.growth = Growth::default()
                        }
                        None => {}
                    }
                }
                BackoffKind::Power => {
                    if let Some(key) = given(&[("delay_ms", r.delay_ms.is_some()), ("factor", r.factor.is_some())]) {
                        return Err(format!(
                            "retry.{key} does not go with backoff = \"power\", which takes base_ms, cap_ms and exponent"
                        ));
                    }
                    set(&mut p.backoff.base.0, r.base_ms);
                    set(&mut p.backoff.cap.0, r.cap_ms);
                    match (r.exponent, p.backoff.growth) {
                        (Some(0), _) => {
                            return Err("retry.exponent = 0: a delay that does not grow is backoff = \"fixed\"".into())
                        }
                        (Some(exponent), _) => p.backoff.growth = Growth::Power { exponent: exponent.min(64) },
                        (None, Growth::Power { .. }) => {}
                        (None, _) => return Err("retry.backoff = \"power\" needs exponent".into()),
                    }
                }
            }
            if p.backoff.base.0 == 0 {
                return Err("retry.base_ms = 0: a retry must wait at least 1 ms".into());
            }
            if p.backoff.cap < p.backoff.base {
                return Err(format!(
                    "retry.cap_ms = {} is below base_ms = {}: the cap must be at least the base",
                    p.backoff.cap.0, p.backoff.base.0
                ));
            }
        }
        if let Some(e) = &self.exhaustion {
            set(&mut p.exhausted_status, e.status);
        }
        if let Some(m) = &self.maintenance {
            if let Some(job) = m.job {
                p.relay.reaper = job == MaintenanceJob::ExhaustExpired;
                p.rescue = (job == MaintenanceJob::RescueExpired).then_some(super::policy::ReleaseFence::Expired);
            }
            // A fence sets the rescuer's, this file's or its base's.
            if let Some(fence) = m.fence {
                let rescue = p.rescue.as_mut().ok_or("maintenance.fence goes with job = \"rescue-expired\"")?;
                *rescue = fence;
            }
            for (key, given) in [
                ("target", m.target.is_some()),
                ("budget", m.budget.is_some()),
                ("after_expiry", m.after_expiry.is_some()),
                ("restamps", m.restamps.is_some()),
            ] {
                if given && p.rescue.is_none() {
                    return Err(format!("maintenance.{key} goes with job = \"rescue-expired\""));
                }
            }
            set(&mut p.rescue_to, m.target);
            set(&mut p.rescue_budget, m.budget);
            set(&mut p.scheduler, m.scheduler);
            set(&mut p.rescue_after_expiry, m.after_expiry);
            set(&mut p.rescue_restamps, m.restamps);
        }
        if p.scheduler && (!p.retry_clock || p.retry_in_lease) {
            return Err("maintenance.scheduler = true makes rows claimable whose retry time in next_attempt_at has passed: it needs retry.clock = true and retry.in_lease_column = false".into());
        }
        if p.claim_live_leases && !p.claim_expired_leases {
            return Err("claim.takes_expired_leases = false with takes_live_leases = true: a claim that takes live leases takes expired ones too".into());
        }
        if let Some(r) = &self.relay {
            set(&mut p.relay.clock, r.clock);
            if r.write_clock.is_some() {
                p.relay.write_clock = r.write_clock;
            }
            set(&mut p.relay.idempotency_key, r.idempotency_key);
            set(&mut p.relay.rejection, r.on_rejection);
            set(&mut p.relay.publish_before_ack, r.publish_before_ack);
            set(&mut p.relay.republish_after_db_loss, r.republish_after_db_loss);
            set(&mut p.relay.shared_owner, r.shared_owner);
            set(&mut p.relay.fails_claims_past_budget, r.fails_claims_past_budget);
            set(&mut p.relay.on_failure, r.on_failure);
        }
        if p.lease == LeaseKind::Session {
            if !matches!(p.claim_fence, ClaimFence::OwnerAndToken | ClaimFence::OwnerOnly) {
                return Err("claim.lease = \"session\" needs claim.sets = \"owner-and-token\" or \"owner-only\": the row's owner stands for the session that holds its lock".into());
            }
            if p.relay.shared_owner {
                return Err("claim.lease = \"session\" with relay.shared_owner = true: each relay's session holds its own locks, so the relays cannot share one owner id".into());
            }
            if p.retry_in_lease {
                return Err("claim.lease = \"session\" with retry.in_lease_column = true: a session lease has no expiry column to keep a retry time in".into());
            }
        }
        if p.release_by_owner && !matches!(p.claim_fence, ClaimFence::OwnerAndToken | ClaimFence::OwnerOnly) {
            return Err("write.releases_lease_by_owner = true needs claim.sets = \"owner-and-token\" or \"owner-only\": the release matches the row by the owner its claim recorded".into());
        }
        match p.renewal {
            Renewal::None => {}
            _ if p.lease != LeaseKind::Expiry || p.retry_in_lease => {
                return Err("claim.renewal renews an expiry in the row: it needs claim.lease = \"expiry\" and retry.in_lease_column = false".into());
            }
            Renewal::ByOwner if !matches!(p.claim_fence, ClaimFence::OwnerAndToken | ClaimFence::OwnerOnly) => {
                return Err("claim.renewal = \"by-owner\" needs claim.sets = \"owner-and-token\" or \"owner-only\": the heartbeat matches the row by the owner its claim recorded".into());
            }
            Renewal::ByToken if !matches!(p.claim_fence, ClaimFence::OwnerAndToken | ClaimFence::TokenOnly) => {
                return Err("claim.renewal = \"by-token\" needs claim.sets = \"owner-and-token\" or \"token-only\": the heartbeat matches the row by the token its claim set".into());
            }
            _ => {}
        }
        if p.retry_timer == RetryTimer::PerProcess && (p.retry_clock || p.retry_in_lease) {
            return Err("retry.timer = \"per-process\" with a retry time in the row (retry.clock or retry.in_lease_column): a design keeps its retry time in the row or in each process's timer, not both".into());
        }
        if p.failure_fence == Some(p.write_fence) {
            p.failure_fence = None;
        }
        if let Some(q) = &self.requeue {
            set(&mut p.requeue_resets_token, q.resets_token);
        }
        Ok(p)
    }

    /// The keys a file without `based_on` leaves out (such a file must say everything).
    pub fn missing_keys(&self) -> Vec<&'static str> {
        let written: toml::Table = toml::from_str(&self.to_toml()).expect("our own TOML");
        KEY_DOCS
            .iter()
            .map(|(key, _)| *key)
            // Optional in a complete file: the fixed or exponential backoff's other keys, the
            // rescuer's fence, and the two axes added later (default: mark, separate columns).
            .filter(|key| {
                !matches!(
                    *key,
                    "description"
                        | "based_on"
                        | "retry.base_ms"
                        | "retry.cap_ms"
                        | "retry.delay_ms"
                        | "retry.factor"
                        | "retry.exponent"
                        | "maintenance.fence"
                        | "write.completion"
                        | "retry.in_lease_column"
                        | "claim.takes_expired_leases"
                        | "maintenance.target"
                        | "maintenance.budget"
                        | "write.failure_fence"
                        | "retry.retry_write_checks_budget"
                        | "relay.shared_owner"
                        | "relay.fails_claims_past_budget"
                        | "write.failure_deletes"
                        | "retry.budget_in_statement"
                        | "claim.lease"
                        | "claim.renewal"
                        | "maintenance.scheduler"
                        | "maintenance.after_expiry"
                        | "claim.ties"
                        | "maintenance.restamps"
                        | "relay.write_clock"
                        | "retry.timer"
                        | "relay.on_failure"
                        | "write.releases_lease_by_owner"
                )
            })
            .filter(|key| !key.starts_with("statuses."))
            .filter(|key| {
                let mut at = Some(&written);
                let parts: Vec<&str> = key.split('.').collect();
                for part in &parts[..parts.len() - 1] {
                    at = at.and_then(|t| t.get(*part)).and_then(|v| v.as_table());
                }
                at.and_then(|t| t.get(*parts.last().unwrap())).is_none()
            })
            .collect()
    }

    /// The policy the file describes: from its `based_on` design (looked up by `builtin`), or,
    /// without one, from the file alone, which must then give every key.
    pub fn resolve(&self, builtin: &dyn Fn(&str) -> Option<Policy>) -> Result<Policy, String> {
        let base = match &self.based_on {
            Some(name) => builtin(name).ok_or_else(|| {
                format!("based_on = {name:?}: no such built-in design (outbox-check variants lists them)")
            })?,
            None => {
                let missing = self.missing_keys();
                if !missing.is_empty() {
                    let named = match missing.len() {
                        1..=3 => missing.join(", "),
                        n => format!("{} and {} more keys", missing[..2].join(", "), n - 2),
                    };
                    return Err(format!(
                        "{named} not given: a file without based_on must give every key (or start from a built-in: based_on = \"reference\")"
                    ));
                }
                let retry = self.retry.as_ref();
                let fixed = retry.and_then(|r| r.backoff) == Some(BackoffKind::Fixed);
                let needed: &[(&str, bool)] = if fixed {
                    &[("retry.delay_ms", retry.is_some_and(|r| r.delay_ms.is_some()))]
                } else {
                    &[
                        ("retry.base_ms", retry.is_some_and(|r| r.base_ms.is_some())),
                        ("retry.cap_ms", retry.is_some_and(|r| r.cap_ms.is_some())),
                    ]
                };
                if let Some((key, _)) = needed.iter().find(|(_, given)| !given) {
                    return Err(format!("{key} not given: a file without based_on must give every key"));
                }
                Policy::unset()
            }
        };
        if !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') || self.name.is_empty() {
            return Err(format!("name = {:?}: a design's name takes letters, digits, - and _", self.name));
        }
        self.apply(base)
    }

    /// The complete file of a policy: every key, so it can be edited into one's own design.
    pub fn complete(name: &str, description: &str, p: &Policy) -> DesignFile {
        let fixed = p.backoff.base == p.backoff.cap && p.backoff.growth == Growth::default();
        let power = match p.backoff.growth {
            Growth::Power { exponent } => Some(exponent),
            Growth::Exponential { .. } => None,
        };
        let factor = match p.backoff.growth {
            Growth::Exponential { factor_milli } if factor_milli != 2000 => Some(Factor(factor_milli)),
            _ => None,
        };
        DesignFile {
            name: name.to_string(),
            description: Some(description.to_string()),
            based_on: None,
            claim: Some(ClaimSection {
                tenant_scoped: Some(p.claim_by_tenant),
                takes_live_leases: Some(p.claim_live_leases),
                takes_expired_leases: Some(p.claim_expired_leases),
                takes_terminal_rows: Some(p.claim_terminal),
                budget: Some(p.budget),
                order: Some(p.claim_order),
                ties: Some(if p.claim_ties_any { Ties::Any } else { Ties::ById }),
                sets: Some(p.claim_fence),
                token: Some(p.token_kind),
                lease: Some(p.lease),
                renewal: Some(p.renewal),
            }),
            attempts: Some(AttemptsSection { counted_at: Some(p.attempts_at) }),
            write: Some(WriteSection {
                fence: Some(p.write_fence),
                failure_fence: p.failure_fence,
                checks_tenant: Some(p.write_checks_tenant),
                unmatched_reported_as_applied: Some(p.swallow_stale),
                completion: Some(p.completion),
                failure_deletes: Some(p.failure_deletes),
                releases_lease_by_owner: Some(p.release_by_owner),
            }),
            retry: Some(RetrySection {
                clock: Some(p.retry_clock),
                backoff: Some(match (fixed, power) {
                    (true, _) => BackoffKind::Fixed,
                    (false, Some(_)) => BackoffKind::Power,
                    (false, None) => BackoffKind::Exponential,
                }),
                base_ms: (!fixed).then_some(p.backoff.base.0),
                cap_ms: (!fixed).then_some(p.backoff.cap.0),
                delay_ms: fixed.then_some(p.backoff.base.0),
                factor,
                exponent: power,
                ambiguous_write: Some(p.ambiguous_shape),
                in_lease_column: Some(p.retry_in_lease),
                retry_write_checks_budget: Some(p.retry_checks_budget),
                budget_in_statement: Some(p.budget_in_write),
                timer: Some(p.retry_timer),
            }),
            exhaustion: Some(ExhaustionSection { status: Some(p.exhausted_status) }),
            maintenance: Some(MaintenanceSection {
                job: Some(match (p.rescue, p.relay.reaper) {
                    (Some(_), _) => MaintenanceJob::RescueExpired,
                    (None, true) => MaintenanceJob::ExhaustExpired,
                    (None, false) => MaintenanceJob::None,
                }),
                fence: p.rescue,
                target: p.rescue.map(|_| p.rescue_to),
                budget: p.rescue.map(|_| p.rescue_budget),
                scheduler: Some(p.scheduler),
                after_expiry: p.rescue.map(|_| p.rescue_after_expiry),
                restamps: p.rescue.map(|_| p.rescue_restamps),
            }),
            relay: Some(RelaySection {
                clock: Some(p.relay.clock),
                write_clock: p.relay.write_clock,
                idempotency_key: Some(p.relay.idempotency_key),
                on_rejection: Some(p.relay.rejection),
                publish_before_ack: Some(p.relay.publish_before_ack),
                republish_after_db_loss: Some(p.relay.republish_after_db_loss),
                shared_owner: Some(p.relay.shared_owner),
                fails_claims_past_budget: Some(p.relay.fails_claims_past_budget),
                on_failure: Some(p.relay.on_failure),
            }),
            requeue: Some(RequeueSection { resets_token: Some(p.requeue_resets_token) }),
            statuses: None,
        }
    }

    /// The file as TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a design file is plain data")
    }

    /// The file as TOML text with each key's meaning and allowed values above it: a file to
    /// start one's own design from.
    pub fn to_commented_toml(&self) -> String {
        let mut out = String::from("# An outbox-check design file (docs/design-file.md). Check it with\n#   outbox-check check --design THIS_FILE\n");
        let mut section = String::new();
        for line in self.to_toml().lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                section = trimmed.trim_matches(|c| c == '[' || c == ']').to_string();
                if let Some((_, doc)) = SECTION_DOCS.iter().find(|(s, _)| *s == section) {
                    out.push_str(&format!("# {doc}"));
                }
            } else if let Some((key, _)) = trimmed.split_once(" = ") {
                let dotted = if section.is_empty() { key.to_string() } else { format!("{section}.{key}") };
                if let Some((_, doc)) = KEY_DOCS.iter().find(|(k, _)| *k == dotted) {
                    out.push_str(&format!("# {doc}\n"));
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// What each section is about, for commented files and docs.
pub const SECTION_DOCS: [(&str, &str); 9] = [
    ("claim", "Which rows a claim takes, in what order, and what it writes on them.\n"),
    ("attempts", "Where the attempt counter is incremented.\n"),
    ("write", "What a terminal write (mark_published, mark_failed, mark_retry, AMBIGUOUS) checks.\n"),
    ("retry", "The retry clock: when a failed row may be claimed again.\n"),
    ("exhaustion", "What happens when the attempt budget is spent.\n"),
    ("maintenance", "The periodic job beside the relays.\n"),
    ("relay", "What the relay process does between the statements.\n"),
    ("requeue", "An operator's requeue of FAILED and EXHAUSTED rows.\n"),
    ("statuses", "The queue's own names for the model's statuses (optional; histories and SQL profiles use them).\n"),
];

/// Every key of a design file, dotted, with its meaning and allowed values.
pub const KEY_DOCS: [(&str, &str); 58] = [
    ("name", "The design's name, as fleets and reports name it (letters, digits, - and _)."),
    ("description", "One line saying what the design is."),
    ("based_on", "A built-in design to start from; the file then says only what differs."),
    ("claim.tenant_scoped", "true: a claim takes only its relay's tenant's rows."),
    ("claim.takes_live_leases", "true: a claim also takes IN_FLIGHT rows whose lease has not expired."),
    ("claim.takes_expired_leases", "true: a claim takes back IN_FLIGHT rows whose lease has expired; false: it never takes an in-flight row, only the maintenance job ends such a lease (River, Graphile Worker, Oban). Optional, default true."),
    ("claim.takes_terminal_rows", "true: a claim also takes PUBLISHED, FAILED and EXHAUSTED rows."),
    ("claim.budget", "\"strict\" (attempts < max), \"one-over\" (attempts <= max) or \"absent\" (no budget predicate)."),
    ("claim.ties", "\"by-id\" (rows due at the same instant are taken by id, as the order's last key) or \"any\" (the queue orders by its due time alone and leaves ties to the database: Graphile Worker's `order by priority, run_at`). With \"any\", conform follows the queue's choice among tied rows; the model checker takes them by id. Optional, default \"by-id\"."),
    ("claim.order", "\"due\" (retry time, else creation, then id), \"created\" (creation, tenant, id) or \"last-claimed\" (as due, where a claim makes its own time the row's due time: underway's `run_at = now()`, so a task taken back after its lease expired sorts by its last claim)."),
    ("claim.sets", "\"owner-and-token\" (owner and a fresh token), \"owner-only\" (the token stays), \"token-only\" (a fresh token, no owner: underway's `current_attempt`) or \"unfenced\" (status and expiry only)."),
    ("claim.token", "\"counter\" (token + 1) or \"random\" (a fresh value, compared for equality only)."),
    ("claim.lease", "What holds a claim's lease: \"expiry\" (a time in the row; it ends when time passes it) or \"session\" (held by the claiming relay's session: a database session, as good_job's advisory lock, or a node's registration, as Wolverine's owner_id; no time ends it, the session's end does — the relay crashes, its connection dies, or the fault lease-lost ends it while the relay keeps running, good_job#989, Wolverine#3850). A session lease needs claim.sets to record the owner. Optional, default \"expiry\"."),
    ("claim.renewal", "A heartbeat that renews the lease while the relay works on it, setting the expiry to now + the lease where the row is IN_FLIGHT and: \"by-owner\" its owner is the relay's (aegra's heartbeat, `WHERE run_id = ? AND claimed_by = ?`: with a worker name another attempt reuses, a stale attempt's heartbeat extends its successor's lease, aegra PR 547) or \"by-token\" its token is the claim's; \"none\": a lease lasts what its claim gave it. A relay paused takes no step, its heartbeat included. Needs claim.lease = \"expiry\" and claim.sets to record what it matches. Optional, default \"none\"."),
    ("attempts.counted_at", "\"claim\" (the claim's statement counts) or \"failure-write\" (the AMBIGUOUS and retry writes count)."),
    ("write.fence", "\"status-owner-token\", \"status-token\", \"status-owner\", \"status-only\" (IN_FLIGHT and the id, whoever holds it: River's completer) or \"message-id-only\" (by id alone)."),
    ("write.failure_fence", "The fence of the failure writes (AMBIGUOUS, retry, FAILED, EXHAUSTED) where it is not write.fence, the completion's; the same values. Graphile Worker completes by id and fails by `locked_by` (\"status-owner\"). Optional, default write.fence."),
    ("write.checks_tenant", "true: a terminal write also checks the row's tenant."),
    ("write.unmatched_reported_as_applied", "true: a write that matched no row is reported as applied."),
    ("write.completion", "\"mark\" (mark_published sets PUBLISHED) or \"delete\" (it deletes the row: no later statement matches it)."),
    ("write.failure_deletes", "true: a write that records a row FAILED or EXHAUSTED also deletes it from the table (Laravel moves a failed job to failed_jobs; pgmq archives a message): no later statement matches it, and an operator's requeue puts it back. Optional, default false."),
    ("write.releases_lease_by_owner", "true: after each terminal or failure write the relay runs one more statement that clears the row's lease (owner and expiry) where the owner is still its own, and leaves the status, whatever the write did: applied, matched nothing, or lost with its connection (aegra's `_release_lease`, in a `finally`, `WHERE run_id = ? AND claimed_by = ?`). The model runs it in the write's step. With a worker name another attempt reuses, a stale attempt's release strips its successor's lease (aegra PR 547). Needs claim.sets to record an owner. Optional, default false."),
    ("retry.clock", "true: failure writes set next_attempt_at and the claim waits for it."),
    ("retry.backoff", "\"exponential\" (base_ms multiplied by factor, 2 unless given, per attempt up to cap_ms), \"power\" (base_ms · attempts^exponent up to cap_ms) or \"fixed\" (delay_ms every time)."),
    ("retry.base_ms", "Exponential backoff: the first delay, in ms (at least 1)."),
    ("retry.cap_ms", "Exponential backoff: the longest delay, in ms (at least base_ms)."),
    ("retry.delay_ms", "Fixed backoff: the delay, in ms (at least 1)."),
    ("retry.factor", "Exponential backoff: what each attempt multiplies the delay by, a number above 1 (Graphile Worker's exp(attempts) seconds: 2.718 from a base of 2718 ms). Optional, default 2."),
    ("retry.exponent", "Power backoff (`backoff = \"power\"`, delay base_ms · attempts^exponent up to cap_ms): the exponent (River's attempt⁴ seconds: 4, from a base of 1000 ms)."),
    ("retry.ambiguous_write", "\"clears-lease\" (owner and expiry cleared, retry time set) or \"keeps-owner\" (expiry cleared only)."),
    ("retry.in_lease_column", "true: the retry time is kept in the lease's expiry column (a visibility timeout): a failure sets lease_expires_at to it, and the claim's lease check is its clock."),
    ("retry.retry_write_checks_budget", "true: the retry write (a definite, retryable failure: the broker unavailable, or a rejection with relay.on_rejection = \"mark-retry\") moves a row whose budget is spent to EXHAUSTED, as the AMBIGUOUS write does; false: it schedules another attempt whatever the attempts (awa's `RetryAfter` before awa#435). Optional, default true."),
    ("retry.budget_in_statement", "true: the AMBIGUOUS and retry statements check the row's attempts against the budget and exhaust a row whose budget is spent; false: they set what the relay sends, and the relay decides from its own copy of the row whether to retry or exhaust (Oban: `error_job` sets `retryable` by id, the worker discards at `attempt >= max_attempts`). Optional, default true."),
    ("retry.timer", "Who keeps the time a failed row may be retried at: \"row\" (next_attempt_at, where retry.clock keeps one) or \"per-process\" (each relay's own timer: a row attempted before is taken only by a claim made while its relay's timer is due, which that claim then restarts for the backoff's delay; no other relay reads it: CAP's retry processor, one per instance, CAP#1797). \"per-process\" needs retry.clock = false. Optional, default \"row\"."),
    ("exhaustion.status", "true: the design has EXHAUSTED; a failure past the budget moves there."),
    ("maintenance.job", "\"none\", \"exhaust-expired\" (expired leases whose budget is spent move to EXHAUSTED) or \"rescue-expired\" (expired leases move back to PENDING; budget spent: EXHAUSTED)."),
    ("maintenance.fence", "The rescuer's fence: \"expired\" (finds and moves a row in one statement), \"token\" (moves the row it read if the token is still the one it read) or \"id\" (moves the row it read by id, whatever holds it now)."),
    ("maintenance.target", "Where the rescuer moves a row: \"pending\" (claimable at once: Oban's Lifeline), \"retry\" (PENDING with a retry time, the backoff of its attempts: River's rescuer) or \"failed\" (Solid Queue's pruner). Optional, default \"pending\"."),
    ("maintenance.budget", "Whether the rescuer checks the budget: \"exhausts\" (a row whose budget is spent goes to EXHAUSTED, FAILED without it: River) or \"ignored\" (back to the target whatever its attempts: oban#137). Optional, default \"exhausts\"."),
    ("maintenance.after_expiry", "true: the rescuer takes a lease only once its expiry has passed, not at the instant it expires (Graphile Worker's `locked_at < now() - interval '4 hours'`). Optional, default false."),
    ("maintenance.restamps", "true: a row the rescuer moves back to pending is due at the rescue's time, behind the rows already waiting (Graphile Worker's `run_at = greatest(run_at, now())`), where the claim orders by due time. Optional, default false."),
    ("maintenance.scheduler", "true: a row given a retry time (a retry or AMBIGUOUS write, or the rescuer's \"retry\" target) waits for the scheduler, a maintenance step of its own that makes every row whose retry time has passed claimable again, in one statement (River's JobSchedule and Oban's stage_jobs: `retryable` → `available`); the claim takes only rows without a retry time. Needs retry.clock = true. Optional, default false."),
    ("relay.clock", "\"database\" (one clock for all) or \"relay\" (each relay's own, bound as a parameter; may be skewed)."),
    ("relay.write_clock", "Whose clock the terminal and failure writes read, where it is not relay.clock's: \"database\" or \"relay\" (a retry's due time from the relay's clock, compared by the claims with the database's: NServiceBus.SqlServer before 4.3, issue 463). Optional, default relay.clock's."),
    ("relay.idempotency_key", "\"message-id\" on every attempt, or \"per-attempt\" (a new key each time)."),
    ("relay.on_rejection", "What a permanent rejection writes: \"mark-failed\" or \"mark-retry\"."),
    ("relay.publish_before_ack", "true: the row is marked PUBLISHED before the broker acknowledged."),
    ("relay.republish_after_db_loss", "true: after losing the database post-publish, republish at once and record PUBLISHED."),
    ("relay.shared_owner", "true: every relay of the design writes one owner id (Graphile Worker's pool id since PR 469; a worker name a restarted attempt reuses, aegra PR 547), so a fence on the owner cannot tell them apart. Optional, default false."),
    ("relay.fails_claims_past_budget", "true: a relay that claimed a row past its budget (attempts above the maximum, where the claim has no budget predicate) records it failed at once without publishing it, deciding from its own copy of the row (Laravel's worker: `MaxAttemptsExceededException`). Optional, default false."),
    ("relay.on_failure", "What a failed or unknown publication writes (the broker unavailable, or no answer): \"retry\" (mark_retry for a definite failure, mark_ambiguous for an unknown outcome) or \"mark-failed\" (FAILED for good: aegra finalizes a run whose execution raised as `error`, and only its reaper, for a worker that stopped, runs it again). Optional, default \"retry\"."),
    ("requeue.resets_token", "true: the operator's requeue resets the token to 0."),
    ("statuses.pending", "The queue's name for PENDING (waiting to be claimed), e.g. \"available\"."),
    ("statuses.in_flight", "The queue's name for IN_FLIGHT (claimed, leased), e.g. \"running\"."),
    ("statuses.published", "The queue's name for PUBLISHED (done), e.g. \"completed\"."),
    ("statuses.ambiguous", "The queue's name for AMBIGUOUS (outcome unknown, to be retried); a queue with no such status gives its PENDING name (River's `retryable` stands for both)."),
    ("statuses.failed", "The queue's name for FAILED (rejected for good), e.g. \"discarded\"."),
    ("statuses.exhausted", "The queue's name for EXHAUSTED (budget spent), e.g. \"dead\"; a queue with one status for both gives its FAILED name (River's and Oban's `discarded`)."),
];

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The dotted key written on the line at byte `at` (`retry.base_ms`), from the section header
/// above it.
pub(crate) fn key_at(text: &str, at: usize) -> Option<String> {
    let start = text[..at.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?.trim();
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    let section = text[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim());
    Some(match section {
        Some(section) => format!("{section}.{key}"),
        None => key.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_file_gives_back_its_policy() {
        let mut p = Policy::unset();
        p.backoff = Backoff::between(Duration(250), Duration(250));
        p.write_fence = WriteFence::MessageIdOnly;
        let file = DesignFile::complete("x", "y", &p);
        let again = DesignFile::parse(&file.to_toml()).unwrap();
        assert_eq!(again, file);
        assert_eq!(again.apply(Policy::unset()).unwrap(), p);
    }

    #[test]
    fn a_bad_value_names_its_key_and_what_is_allowed() {
        let e = DesignFile::parse("name = \"q\"\n[attempts]\ncounted_at = \"never\"\n").unwrap_err();
        assert_eq!((e.line, e.column), (3, 14));
        assert!(
            e.message.contains("attempts.counted_at")
                && e.message.contains("never")
                && e.message.contains("failure-write"),
            "{e}"
        );
        let e = DesignFile::parse("name = \"q\"\n[claim]\nlive = true\n").unwrap_err();
        assert!(e.message.contains("live") && e.message.contains("takes_live_leases"), "{e}");
    }

    #[test]
    fn backoff_keys_must_go_together() {
        let file = |retry: &str| {
            DesignFile::parse(&format!("name = \"q\"\n[retry]\n{retry}\n"))
                .unwrap()
                .apply(Policy { backoff: Backoff::default(), ..Policy::unset() })
        };
        assert_eq!(
            file("backoff = \"fixed\"\ndelay_ms = 500").unwrap().backoff,
            Backoff::between(Duration(500), Duration(500))
        );
        assert!(file("backoff = \"fixed\"\ncap_ms = 5").unwrap_err().contains("delay_ms"));
        assert!(file("backoff = \"fixed\"").unwrap_err().contains("needs delay_ms"));
        assert!(file("base_ms = 10\ncap_ms = 5").unwrap_err().contains("cap_ms = 5"));
        assert!(file("base_ms = 0").unwrap_err().contains("at least 1 ms"));
        assert_eq!(file("base_ms = 10\ncap_ms = 80").unwrap().backoff, Backoff::between(Duration(10), Duration(80)));
    }
}
