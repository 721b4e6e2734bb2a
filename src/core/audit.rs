//! The properties of SPEC §7 and the auditor that checks the safety ones step by step, and what
//! it records when one breaks: a [`Breach`] — rows, relays, tenants, tokens, statuses and times,
//! never words — which whoever shows it to a person words with [`Breach::words`] and the
//! [`Names`] that person knows: the model's ids (`m0`, `r1`, `tenant0`) for the checker's and the
//! simulations' reports ([`ModelNames`]), the history's own names for the trace oracle.
//!
//! The [`Auditor`] wraps every operation on an [`Outbox`]: it performs the operation, then checks
//! what changed against ghost state the rules never read — which claim of each row is the latest
//! (by any path, fenced or not), which tokens a row has had, how many times the broker was asked
//! to publish each message and whether it stored it, which business transitions committed. The
//! model checker, the simulations, the SQL conformance runs and the trace oracle all check through
//! it, so "S1" means one thing everywhere.

use super::outbox::{
    ClaimRequest, CoreError, EnqueueRequest, EnqueueResult, Outbox, RequeueResult, StaleReason, WriteKind,
    WriteRequest, WriteResult,
};
use super::policy::{Policy, ReleaseFence, RetryTimer, TokenKind};
pub use super::property::Property;
pub use super::row::IdempotencyKey;
use super::row::{Lease, LeaseToken, MessageId, RelayId, Row, Status, TenantId};
use super::time::Instant;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fmt::Write as _;

/// One broken property and what broke it, as facts ([`Breach`]); [`Violation::detail`] puts
/// them in the model's words.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    pub property: Property,
    pub breach: Breach,
}

impl Violation {
    pub fn new(property: Property, breach: Breach) -> Violation {
        Violation { property, breach }
    }

    /// The row it concerns (none for a property of the whole run, such as L1).
    pub fn message(&self) -> Option<MessageId> {
        self.breach.message()
    }

    /// An S1 of a write or release that applied for a lease a later claim had superseded (not
    /// one that reported a result the row does not show).
    pub fn superseded(&self) -> bool {
        matches!(self.breach, Breach::Superseded { .. })
    }

    /// What went wrong, with the model's ids.
    pub fn detail(&self) -> String {
        self.breach.words(&ModelNames)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.property, self.detail())
    }
}

/// In reports: `property` and `detail`, the words with the model's ids.
impl Serialize for Violation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = serializer.serialize_struct("Violation", 2)?;
        out.serialize_field("property", &self.property)?;
        out.serialize_field("detail", &self.detail())?;
        out.end()
    }
}

/// Ghost state of one row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowGhost {
    pub message_id: u32,
    /// Claims of this row by any path; the latest lease has `claim_seq == claims`.
    pub claims: u32,
    /// Tokens the row has had, for random tokens (a counter only needs the last one).
    pub tokens_seen: Vec<LeaseToken>,
    /// Publications asked of the broker in the current budget (a requeue starts a new one).
    pub publications: u32,
    /// Publications in the budget before the last requeue: a relay still holding a lease from
    /// before the requeue publishes against the budget its claim was counted in.
    pub publications_previous: u32,
    /// The value of `claims` when the row was last requeued: leases with a larger `claim_seq`
    /// belong to the current budget.
    pub requeued_after_claim: u32,
    /// Publications over the row's whole life.
    pub publications_total: u32,
    /// The broker stored the message at least once.
    pub stored: bool,
    /// `retry.timer = "per-process"`: the time before which the design promises no retry of the
    /// row, its backoff's delay after the claim that last retried it. The row keeps no retry
    /// time; each relay's own timer keeps that promise for itself only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_promise: Option<Instant>,
}

/// Packed words, like [`Row`]'s hash (every field at full width, so injective).
impl std::hash::Hash for RowGhost {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(u64::from(self.message_id) | u64::from(self.claims) << 32);
        state.write_u64(u64::from(self.publications) | u64::from(self.publications_previous) << 32);
        state.write_u64(u64::from(self.requeued_after_claim) | u64::from(self.publications_total) << 32);
        state.write_u64(u64::from(self.stored) | (self.tokens_seen.len() as u64) << 1);
        // The retry promise in a word of its own, 0 for none (an instant is far below u64::MAX).
        state.write_u64(self.retry_promise.map_or(0, |at| at.0 + 1));
        self.tokens_seen.iter().for_each(|t| state.write_u64(t.0));
    }
}

/// A snapshot of the rows a step may change, on the stack for the small tables of the model
/// checker (which claims in every other step).
type Snapshot = smallvec::SmallVec<[Row; 4]>;

/// Performs operations on an [`Outbox`] and checks the safety properties on each.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Auditor {
    pub max_attempts: u32,
    ghosts: Vec<RowGhost>,
    /// Taken after every step: a state kept between steps holds none.
    #[serde(skip)]
    violations: Vec<Violation>,
}

impl Auditor {
    pub fn new(max_attempts: u32) -> Auditor {
        Auditor { max_attempts, ghosts: Vec::new(), violations: Vec::new() }
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    pub fn take_violations(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.violations)
    }

    pub fn ghost(&self, message_id: MessageId) -> Option<&RowGhost> {
        crate::core::outbox::find_sorted(&self.ghosts, &message_id.0, message_id.0 as usize, |g| g.message_id)
            .ok()
            .map(|i| &self.ghosts[i])
    }

    pub fn ghosts(&self) -> &[RowGhost] {
        &self.ghosts
    }

    /// Mutable ghosts, for normalising engines that rewrite tokens in place.
    pub fn ghosts_mut(&mut self) -> &mut [RowGhost] {
        &mut self.ghosts
    }

    fn ghost_mut(&mut self, message_id: MessageId) -> &mut RowGhost {
        let i = match crate::core::outbox::find_sorted(&self.ghosts, &message_id.0, message_id.0 as usize, |g| {
            g.message_id
        }) {
            Ok(i) => i,
            Err(i) => {
                self.ghosts.insert(i, RowGhost { message_id: message_id.0, ..RowGhost::default() });
                i
            }
        };
        &mut self.ghosts[i]
    }

    fn violated(&mut self, property: Property, breach: Breach) {
        self.violations.push(Violation { property, breach });
    }

    /// S3's count on a row a step touched.
    fn check_row(&mut self, row: &Row) {
        if row.attempts > self.max_attempts {
            let breach =
                Breach::AttemptsOverBudget { message: row.message_id, attempts: row.attempts, max: self.max_attempts };
            self.violated(Property::S3, breach);
        }
    }

    /// S5 when a row becomes PUBLISHED: the broker stored the message.
    fn check_confirmation(&mut self, before: &Row, after: &Row) {
        let confirmed = after.status == Status::Published && before.status != Status::Published;
        if confirmed && !self.ghost(after.message_id).is_some_and(|g| g.stored) {
            self.violated(Property::S5, Breach::ConfirmedUnstored { message: after.message_id });
        }
    }

    /// S4 across one step: a row that was terminal is unchanged.
    fn check_absorbing(&mut self, before: &Row, after: &Row, by: Doer) {
        if before.status.is_terminal() && before != after {
            let now = (!after.deleted).then_some(after.status);
            self.violated(
                Property::S4,
                Breach::ChangedTerminal { by, message: before.message_id, was: before.status, now },
            );
        }
    }

    /// S2 across a step that is not a claim: the token did not move.
    fn check_token_kept(&mut self, before: &Row, after: &Row, by: Doer) {
        if before.lease_token != after.lease_token {
            self.violated(
                Property::S2,
                Breach::TokenMoved { by, message: before.message_id, from: before.lease_token, to: after.lease_token },
            );
        }
    }

    /// SPEC §3.1 with S10: the outbox row exists if and only if the business transition committed.
    pub fn enqueue(&mut self, outbox: &mut Outbox, req: &EnqueueRequest) -> Result<EnqueueResult, CoreError> {
        let version_before = outbox.aggregate_version(req.tenant_id, req.aggregate_id);
        let result = outbox.enqueue(req)?;
        let version_after = outbox.aggregate_version(req.tenant_id, req.aggregate_id);
        // The core refuses an id the table holds (an error, not a result), so the row is there
        // after a result if and only if this enqueue inserted it.
        let inserted = outbox.row(req.message_id).is_some();
        if let Some(breach) = Self::enqueue_breach(req.message_id, &result, inserted, version_before, version_after) {
            self.violated(Property::S10, breach);
        }
        if inserted {
            self.ghost_mut(req.message_id);
        }
        Ok(result)
    }

    /// S10 for one enqueue, from what the table shows after it: an applied enqueue inserted its
    /// row and moved the aggregate one version on; a stale one did neither.
    pub fn enqueue_breach(
        message: MessageId,
        result: &EnqueueResult,
        inserted: bool,
        version_before: u32,
        version_after: u32,
    ) -> Option<Breach> {
        let transitioned = version_after == version_before + 1;
        match result {
            EnqueueResult::Applied { .. } if !(inserted && transitioned) => {
                Some(Breach::EnqueueTorn { message, inserted, transitioned })
            }
            EnqueueResult::Stale { .. } if inserted || version_after != version_before => {
                Some(Breach::StaleEnqueueChanged { message })
            }
            _ => None,
        }
    }

    /// SPEC §3.2 with S2, S3, S4, S6, S7 and S9. `true_now` is the global clock (the model's or the
    /// simulation's), which a skewed relay's `req.now` may differ from. Stamps each lease's
    /// `claim_seq` ghost.
    pub fn claim(
        &mut self,
        outbox: &mut Outbox,
        policy: &Policy,
        req: &ClaimRequest,
        true_now: Instant,
    ) -> Result<Vec<Lease>, CoreError> {
        let before: Snapshot = outbox.rows().iter().cloned().collect();
        let mut leases = outbox.claim(policy, req)?;
        self.audit_claim(&before, outbox, policy, req, &mut leases, true_now);
        Ok(leases)
    }

    /// Claims exactly `ids` (see [`Outbox::claim_exactly`]) with the checks of [`Auditor::claim`].
    pub fn claim_exactly(
        &mut self,
        outbox: &mut Outbox,
        policy: &Policy,
        req: &ClaimRequest,
        ids: &[MessageId],
        true_now: Instant,
    ) -> Result<Result<Vec<Lease>, (MessageId, crate::core::outbox::ClaimRefusal)>, CoreError> {
        // Only the named rows can change: snapshot those, not the table.
        let before: Snapshot = ids.iter().filter_map(|id| outbox.row(*id).cloned()).collect();
        let claimed = outbox.claim_exactly(policy, req, ids)?;
        Ok(claimed.map(|mut leases| {
            self.audit_claim(&before, outbox, policy, req, &mut leases, true_now);
            leases
        }))
    }

    fn audit_claim(
        &mut self,
        before: &[Row],
        outbox: &Outbox,
        policy: &Policy,
        req: &ClaimRequest,
        leases: &mut [Lease],
        true_now: Instant,
    ) {
        for lease in leases.iter_mut() {
            let Some(old) = before.iter().find(|r| r.message_id == lease.message_id) else {
                continue;
            };
            let new = outbox.row(lease.message_id).cloned().unwrap_or(*old);
            let by = Doer::Claim { owner: req.owner };
            let message = old.message_id;
            self.check_absorbing(old, &new, by);
            if old.tenant_id != req.tenant_id {
                let breach = Breach::OtherTenant { by, tenant: req.tenant_id, message, of: old.tenant_id };
                self.violated(Property::S9, breach);
            }
            if let Some(until) = old.lease_expires_at.filter(|&at| old.status == Status::InFlight && at > true_now) {
                let breach = Breach::TookLiveLease { by, message, owner: old.lease_owner, until, now: true_now };
                self.violated(Property::S6, breach);
            }
            if let Some(at) = old.retry_at().filter(|&at| at > true_now) {
                self.violated(Property::S7, Breach::TookBeforeRetry { by, message, now: true_now, at });
            }
            // A retry of a design whose relays keep their own timers: no sooner than the delay after
            // the last one, whichever relay made it (the ghost's promise, renewed below).
            let retry = policy.waits_for_relay_timer(old.attempts);
            // And of a design with a scheduler: no sooner than the retry time the scheduler
            // cleared, where its clock ran ahead of the true one.
            if retry || policy.scheduler {
                let promised = self.ghost(message).and_then(|g| g.retry_promise);
                if let Some(at) = promised.filter(|&at| at > true_now) {
                    let breach = if retry {
                        Breach::RetriedTooSoon { by, message, now: true_now, at }
                    } else {
                        Breach::TookBeforeRetry { by, message, now: true_now, at }
                    };
                    self.violated(Property::S7, breach);
                }
            }
            let fresh = match policy.token_kind {
                TokenKind::Counter => new.lease_token.0 == old.lease_token.0 + 1,
                TokenKind::Random => {
                    let ghost = self.ghost(old.message_id);
                    new.lease_token != old.lease_token
                        && !ghost.is_some_and(|g| g.tokens_seen.contains(&new.lease_token))
                }
            };
            if !fresh {
                let breach = Breach::TokenReused { by, message, token: new.lease_token, was: old.lease_token };
                self.violated(Property::S2, breach);
            }
            let ghost = self.ghost_mut(old.message_id);
            ghost.claims += 1;
            lease.claim_seq = ghost.claims;
            if retry {
                ghost.retry_promise = Some(true_now.plus(policy.backoff.delay(lease.attempts)));
            } else if policy.scheduler {
                ghost.retry_promise = None;
            }
            if policy.token_kind == TokenKind::Random {
                ghost.tokens_seen.push(old.lease_token);
            }
            self.check_row(&new);
        }
    }

    /// SPEC §3.3 with S1 (only the latest claim's writer may apply; a Stale write changes
    /// nothing), S4, S7 (AMBIGUOUS and retry set a later retry time) and S9, where the write's
    /// own `now` is the only time known (a recorded history).
    pub fn write(
        &mut self,
        outbox: &mut Outbox,
        policy: &Policy,
        req: &WriteRequest,
    ) -> Result<WriteResult, CoreError> {
        self.write_at(outbox, policy, req, req.now)
    }

    /// [`Auditor::write`] where the true time is known (the model's, the simulation's): the
    /// retry time an AMBIGUOUS or retry write sets must be later than the write's `now` and
    /// than true time too. A relay whose clock runs behind the clock the claims read sets a
    /// retry time that is already due: the row is taken again at once (NServiceBus.SqlServer
    /// #463: a due time from the endpoint's clock, compared with the database's).
    pub fn write_at(
        &mut self,
        outbox: &mut Outbox,
        policy: &Policy,
        req: &WriteRequest,
        true_now: Instant,
    ) -> Result<WriteResult, CoreError> {
        let id = req.lease.message_id;
        let before = outbox.row(id).cloned();
        let result = outbox.write(policy, req)?;
        let (Some(old), Some(new)) = (before, outbox.row(id).cloned()) else {
            return Ok(result);
        };
        let by = Doer::Write { kind: req.kind, owner: req.lease.owner, token: req.lease.token };
        let message = id;
        let latest = self.ghost(id).map(|g| g.claims).unwrap_or(0);
        match result {
            WriteResult::Applied { .. } if old == new => {
                self.violated(Property::S1, Breach::AppliedNoChange { by, message });
            }
            WriteResult::Applied { .. } => {
                if req.lease.claim_seq != latest {
                    let breach = Breach::Superseded { by, message, seq: req.lease.claim_seq, latest };
                    self.violated(Property::S1, breach);
                }
                if old.tenant_id != req.lease.tenant_id {
                    let breach = Breach::OtherTenant { by, tenant: req.lease.tenant_id, message, of: old.tenant_id };
                    self.violated(Property::S9, breach);
                }
                let later = req.now.max(true_now);
                // Where each relay keeps its own retry timer, the row keeps no retry time: the
                // claim's check above judges the retries.
                if matches!(req.kind, WriteKind::Ambiguous { .. } | WriteKind::Retry { .. })
                    && policy.retry_timer == RetryTimer::Row
                    && matches!(new.status, Status::Ambiguous | Status::Pending)
                    && new.retry_at().is_none_or(|at| at <= later)
                {
                    let breach = Breach::RetryNotLater {
                        by,
                        message,
                        status: new.status,
                        retry_at: new.retry_at(),
                        now: later,
                        true_time: later != req.now,
                    };
                    self.violated(Property::S7, breach);
                }
            }
            WriteResult::Stale { reason } => {
                if old != new {
                    self.violated(Property::S1, Breach::StaleButChanged { by, message, reason });
                }
            }
        }
        self.check_absorbing(&old, &new, by);
        self.check_token_kept(&old, &new, by);
        self.check_confirmation(&old, &new);
        self.check_row(&new);
        Ok(result)
    }

    /// A relay's lease release after its write (`write.releases_lease_by_owner`), with S1 (a
    /// release that clears the lease of a claim other than its own — a successor's under the same
    /// owner id — is a stale write that changed the row), S4 and S2.
    pub fn release_by_owner(&mut self, outbox: &mut Outbox, lease: &Lease) -> Result<bool, CoreError> {
        let id = lease.message_id;
        let Some(old) = outbox.row(id).cloned() else {
            return Ok(false);
        };
        let cleared = outbox.release_by_owner(id, lease.owner)?;
        let new = outbox.row(id).cloned().unwrap_or(old);
        let by = Doer::LeaseRelease { owner: lease.owner };
        let latest = self.ghost(id).map(|g| g.claims).unwrap_or(0);
        if cleared && lease.claim_seq != latest && old.status == Status::InFlight {
            self.violated(Property::S1, Breach::Superseded { by, message: id, seq: lease.claim_seq, latest });
        }
        self.check_absorbing(&old, &new, by);
        self.check_token_kept(&old, &new, by);
        Ok(cleared)
    }

    /// A heartbeat's renewal of `lease` to `until` (`claim.renewal`), with S1 (a renewal that
    /// extends the lease of a claim other than its own — a successor's under the same owner id —
    /// is a stale write that changed the row), S4 and S2.
    pub fn renew(
        &mut self,
        outbox: &mut Outbox,
        renewal: super::policy::Renewal,
        lease: &Lease,
        until: Instant,
    ) -> Result<bool, CoreError> {
        let id = lease.message_id;
        let Some(old) = outbox.row(id).cloned() else {
            return Ok(false);
        };
        let renewed = outbox.renew(renewal, lease, until)?;
        let new = outbox.row(id).cloned().unwrap_or(old);
        let by = Doer::Renewal { owner: lease.owner };
        let latest = self.ghost(id).map(|g| g.claims).unwrap_or(0);
        if renewed && lease.claim_seq != latest {
            self.violated(Property::S1, Breach::Superseded { by, message: id, seq: lease.claim_seq, latest });
        }
        self.check_absorbing(&old, &new, by);
        self.check_token_kept(&old, &new, by);
        Ok(renewed)
    }

    /// The scheduler's step at `now` by its own clock (`maintenance.scheduler`), with S4 and S2
    /// on every row it moved (it moves only PENDING and AMBIGUOUS rows, so neither can break
    /// unless the core is wrong). A row whose retry time is still ahead of `true_now` — the
    /// scheduler's clock runs ahead — keeps that time in its ghost, and a claim before it breaks
    /// S7.
    pub fn schedule(&mut self, outbox: &mut Outbox, now: Instant, true_now: Instant) -> Vec<MessageId> {
        self.schedule_except(outbox, now, true_now, &[])
    }

    /// [`Auditor::schedule`] leaving the rows in `leave` unmoved (see [`Outbox::schedule_except`]).
    pub fn schedule_except(
        &mut self,
        outbox: &mut Outbox,
        now: Instant,
        true_now: Instant,
        leave: &[MessageId],
    ) -> Vec<MessageId> {
        let before: Vec<Row> = outbox
            .rows()
            .iter()
            .filter(|r| Outbox::is_schedulable(r, now) && !leave.contains(&r.message_id))
            .copied()
            .collect();
        let moved = outbox.schedule_except(now, leave);
        for old in &before {
            let new = outbox.row(old.message_id).copied().unwrap_or(*old);
            self.check_absorbing(old, &new, Doer::Scheduler);
            self.check_token_kept(old, &new, Doer::Scheduler);
            if let Some(at) = old.next_attempt_at.filter(|&at| at > true_now) {
                self.ghost_mut(old.message_id).retry_promise = Some(at);
            }
        }
        moved
    }

    /// A maintenance job's release with S1 (it may end only the latest claim's lease: one that
    /// applies after the row was claimed again ends a lease it never read), S4 and S2.
    pub fn release(
        &mut self,
        outbox: &mut Outbox,
        req: &crate::core::ReleaseRequest,
    ) -> Result<WriteResult, CoreError> {
        let id = req.lease.message_id;
        let before = outbox.row(id).cloned();
        let result = outbox.release(req)?;
        let (Some(old), Some(new)) = (before, outbox.row(id).cloned()) else {
            return Ok(result);
        };
        let by = Doer::Release { fence: req.fence, to: req.to };
        let latest = self.ghost(id).map(|g| g.claims).unwrap_or(0);
        if matches!(result, WriteResult::Applied { .. })
            && req.lease.claim_seq != latest
            && old.status == Status::InFlight
        {
            self.violated(Property::S1, Breach::Superseded { by, message: id, seq: req.lease.claim_seq, latest });
        }
        self.check_absorbing(&old, &new, by);
        self.check_token_kept(&old, &new, by);
        self.check_confirmation(&old, &new);
        Ok(result)
    }

    /// SPEC §3.4 with S4 and S2.
    pub fn reap(&mut self, outbox: &mut Outbox, now: Instant) -> Vec<MessageId> {
        let before: Vec<Row> = outbox.rows().to_vec();
        let reaped = outbox.reap(now, self.max_attempts);
        for id in &reaped {
            let (Some(old), Some(new)) = (before.iter().find(|r| r.message_id == *id), outbox.row(*id).cloned()) else {
                continue;
            };
            self.check_absorbing(old, &new, Doer::Reap);
            self.check_token_kept(old, &new, Doer::Reap);
        }
        reaped
    }

    /// Operator requeue with S2: the token is kept. Starts a new publication budget.
    pub fn requeue(&mut self, outbox: &mut Outbox, policy: &Policy, id: MessageId) -> Result<RequeueResult, CoreError> {
        let before = outbox.row(id).cloned();
        let result = outbox.requeue(policy, id)?;
        if let (Some(old), Some(new)) = (before, outbox.row(id).cloned()) {
            self.check_token_kept(&old, &new, Doer::Requeue);
        }
        if result == RequeueResult::Applied {
            let ghost = self.ghost_mut(id);
            ghost.publications_previous = ghost.publications;
            ghost.publications = 0;
            ghost.requeued_after_claim = ghost.claims;
        }
        Ok(result)
    }

    /// A relay asked the broker to publish under `lease` with `key`; `stored` is whether the
    /// broker stored it. Checks S3 (publications within the budget the lease's claim belongs to),
    /// S8 (the key is the message id) and S11 (the broker stored a message whose row is recorded
    /// failed: a holder delivered after someone recorded the row failed).
    pub fn published(&mut self, outbox: &Outbox, lease: &Lease, key: IdempotencyKey, stored: bool) {
        let max = self.max_attempts;
        let message_id = lease.message_id;
        let status = outbox.row(message_id).map(|row| row.status);
        let ghost = self.ghost_mut(message_id);
        // A relay publishes before it writes, so a row already failed was failed by someone else:
        // a reaper, a rescuer, a later claim's holder (Laravel#48539), a superseded write.
        let failed = matches!(status, Some(Status::Failed | Status::Exhausted));
        let count = if lease.claim_seq > ghost.requeued_after_claim {
            ghost.publications += 1;
            ghost.publications
        } else {
            ghost.publications_previous += 1;
            ghost.publications_previous
        };
        ghost.publications_total += 1;
        ghost.stored |= stored;
        if count > max {
            self.violated(Property::S3, Breach::PublishedOverBudget { message: message_id, count, max });
        }
        if key != (IdempotencyKey::Message { message_id }) {
            self.violated(Property::S8, Breach::WrongKey { message: message_id, key });
        }
        if let (true, true, Some(status)) = (stored, failed, status) {
            let breach =
                Breach::DeliveredAfterFailure { by: lease.owner, message: message_id, token: lease.token, status };
            self.violated(Property::S11, breach);
        }
    }
}

/// How a reader calls the model's ids and statuses. Every method has the model's own words as
/// its default.
pub trait Names {
    fn message_name(&self, id: MessageId) -> String {
        id.to_string()
    }
    fn relay_name(&self, id: RelayId) -> String {
        id.to_string()
    }
    fn tenant_name(&self, id: TenantId) -> String {
        id.to_string()
    }
    fn status_name(&self, status: Status) -> String {
        status.as_str().to_string()
    }
}

/// The model's own names: `m0`, `r1`, `tenant0`, `IN_FLIGHT`.
pub struct ModelNames;

impl Names for ModelNames {}

/// The step that broke a property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Doer {
    Claim {
        owner: RelayId,
    },
    Write {
        kind: WriteKind,
        owner: RelayId,
        token: LeaseToken,
    },
    Release {
        fence: ReleaseFence,
        to: Status,
    },
    /// A relay's lease release after its write, by its owner id.
    LeaseRelease {
        owner: RelayId,
    },
    /// A relay's heartbeat renewing a lease.
    Renewal {
        owner: RelayId,
    },
    /// The scheduler making a row claimable again.
    Scheduler,
    Reap,
    Requeue,
}

impl Doer {
    /// "claim by r1", "mark_published by r0 with #3", "release (token fence) to PENDING".
    pub fn words(&self, names: &dyn Names) -> String {
        match *self {
            Doer::Claim { owner } => format!("claim by {}", names.relay_name(owner)),
            Doer::Write { kind, owner, token } => {
                format!("{} by {} with {token}", kind.name(), names.relay_name(owner))
            }
            Doer::Release { fence, to } => format!("release ({} fence) to {}", fence.name(), names.status_name(to)),
            Doer::LeaseRelease { owner } => format!("lease release by {}", names.relay_name(owner)),
            Doer::Renewal { owner } => format!("heartbeat renewal by {}", names.relay_name(owner)),
            Doer::Scheduler => "scheduler".to_string(),
            Doer::Reap => "reap".to_string(),
            Doer::Requeue => "requeue".to_string(),
        }
    }
}

/// What broke a property, one variant per way the auditor (or a run's end) finds it broken.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Breach {
    /// S3: a row's attempts passed the budget.
    AttemptsOverBudget { message: MessageId, attempts: u32, max: u32 },
    /// S3: the broker was asked to publish a message more often than the budget allows.
    PublishedOverBudget { message: MessageId, count: u32, max: u32 },
    /// S5: a row became PUBLISHED though the broker never stored the message.
    ConfirmedUnstored { message: MessageId },
    /// S4: a step changed a terminal row (`now` is `None` when it deleted it).
    ChangedTerminal { by: Doer, message: MessageId, was: Status, now: Option<Status> },
    /// S2: a step other than a claim moved the token.
    TokenMoved { by: Doer, message: MessageId, from: LeaseToken, to: LeaseToken },
    /// S2: a claim handed out a token the row had had.
    TokenReused { by: Doer, message: MessageId, token: LeaseToken, was: LeaseToken },
    /// S10: an applied enqueue did not insert its row together with the business change.
    EnqueueTorn { message: MessageId, inserted: bool, transitioned: bool },
    /// S10: a stale enqueue changed something.
    StaleEnqueueChanged { message: MessageId },
    /// S9: a claim or write for one tenant returned, or applied to, another's row.
    OtherTenant { by: Doer, tenant: TenantId, message: MessageId, of: TenantId },
    /// S6: a claim took a row whose lease was still live.
    TookLiveLease { by: Doer, message: MessageId, owner: Option<RelayId>, until: Instant, now: Instant },
    /// S7: a claim took a row before its retry time.
    TookBeforeRetry { by: Doer, message: MessageId, now: Instant, at: Instant },
    /// S7: a claim retried a row within the backoff's delay after its last retry
    /// (`retry.timer = "per-process"`: the last one was another relay's, whose timer this one
    /// does not read).
    RetriedTooSoon { by: Doer, message: MessageId, now: Instant, at: Instant },
    /// S7: an AMBIGUOUS or retry write left no later retry time.
    /// (`true_time`: `now` is true time, later than the write's own clock read.)
    RetryNotLater {
        by: Doer,
        message: MessageId,
        status: Status,
        retry_at: Option<Instant>,
        now: Instant,
        true_time: bool,
    },
    /// S1: a write reported applied but changed nothing.
    AppliedNoChange { by: Doer, message: MessageId },
    /// S1: a write reported stale but changed the row.
    StaleButChanged { by: Doer, message: MessageId, reason: StaleReason },
    /// S1: a write or release applied for the lease of claim `seq` while claim `latest` is the
    /// row's latest.
    Superseded { by: Doer, message: MessageId, seq: u32, latest: u32 },
    /// S8: a publication's key is not the message id.
    WrongKey { message: MessageId, key: IdempotencyKey },
    /// S11: the broker stored a message under a lease while its row was recorded `status` (FAILED
    /// or EXHAUSTED) — by a reaper, a rescuer, a later claim's holder or a superseded write: a
    /// relay publishes before it writes.
    DeliveredAfterFailure { by: RelayId, message: MessageId, token: LeaseToken, status: Status },
    /// L1 at a simulation's end: rows not terminal (or enqueues not all done) so long after the
    /// faults stopped.
    NotSettled { after_ms: u64, rows: Vec<(MessageId, Status)> },
    /// L2 at a simulation's end: rows not EXHAUSTED under a permanent broker outage.
    NotExhausted { rows: Vec<(MessageId, Status)> },
    /// L3 at a simulation's end: rows neither PUBLISHED nor FAILED/EXHAUSTED after the heal.
    NotDelivered { rows: Vec<(MessageId, Status)> },
}

impl Breach {
    /// The row it concerns (none for a property of the whole run).
    pub fn message(&self) -> Option<MessageId> {
        match *self {
            Breach::AttemptsOverBudget { message, .. }
            | Breach::PublishedOverBudget { message, .. }
            | Breach::ConfirmedUnstored { message }
            | Breach::ChangedTerminal { message, .. }
            | Breach::TokenMoved { message, .. }
            | Breach::TokenReused { message, .. }
            | Breach::EnqueueTorn { message, .. }
            | Breach::StaleEnqueueChanged { message }
            | Breach::OtherTenant { message, .. }
            | Breach::TookLiveLease { message, .. }
            | Breach::TookBeforeRetry { message, .. }
            | Breach::RetriedTooSoon { message, .. }
            | Breach::RetryNotLater { message, .. }
            | Breach::AppliedNoChange { message, .. }
            | Breach::StaleButChanged { message, .. }
            | Breach::Superseded { message, .. }
            | Breach::WrongKey { message, .. }
            | Breach::DeliveredAfterFailure { message, .. } => Some(message),
            Breach::NotSettled { .. } | Breach::NotExhausted { .. } | Breach::NotDelivered { .. } => None,
        }
    }

    /// What went wrong, in the reader's names: "claim by r1 took m0 at true time t=3, before its
    /// retry time t=5".
    pub fn words(&self, names: &dyn Names) -> String {
        let m = |id: MessageId| names.message_name(id);
        let rows = |rows: &[(MessageId, Status)]| {
            let mut out = String::new();
            for (i, (id, status)) in rows.iter().enumerate() {
                let _ = write!(out, "{}{} {}", if i == 0 { "" } else { ", " }, m(*id), names.status_name(*status));
            }
            out
        };
        match self {
            Breach::AttemptsOverBudget { message, attempts, max } => {
                format!("{} has attempts = {attempts} over the budget of {max}", m(*message))
            }
            Breach::PublishedOverBudget { message, count, max } => {
                format!("{} was published {count} times in one budget, over the budget of {max}", m(*message))
            }
            Breach::ConfirmedUnstored { message } => {
                format!(
                    "{} became {} but the broker never stored it",
                    m(*message),
                    names.status_name(Status::Published)
                )
            }
            Breach::ChangedTerminal { by, message, was, now } => {
                let now = now.map_or("now deleted".to_string(), |s| format!("now {}", names.status_name(s)));
                format!("{} changed {} which was {} ({now})", by.words(names), m(*message), names.status_name(*was))
            }
            Breach::TokenMoved { by, message, from, to } => {
                format!("{} changed the token of {} from {from} to {to}", by.words(names), m(*message))
            }
            Breach::TokenReused { by, message, token, was } => {
                format!("{} gave {} the token {token} it had before (was {was})", by.words(names), m(*message))
            }
            Breach::EnqueueTorn { message, inserted, transitioned } => format!(
                "enqueue of {} applied with row inserted = {inserted}, business moved = {transitioned}",
                m(*message)
            ),
            Breach::StaleEnqueueChanged { message } => {
                format!("stale enqueue of {} still inserted a row or moved the business row", m(*message))
            }
            Breach::OtherTenant { by, tenant, message, of } => format!(
                "{} for {} {} {} of {}",
                by.words(names),
                names.tenant_name(*tenant),
                if matches!(by, Doer::Claim { .. }) { "returned" } else { "applied to" },
                m(*message),
                names.tenant_name(*of)
            ),
            Breach::TookLiveLease { by, message, owner, until, now } => format!(
                "{} took {} whose lease by {} runs until {until} at true time {now}",
                by.words(names),
                m(*message),
                owner.map_or_else(|| "an unnamed relay".to_string(), |o| names.relay_name(o))
            ),
            Breach::TookBeforeRetry { by, message, now, at } => {
                format!("{} took {} at true time {now}, before its retry time {at}", by.words(names), m(*message))
            }
            Breach::RetriedTooSoon { by, message, now, at } => format!(
                "{} retried {} at true time {now}, within the retry delay of its last retry: none is due before {at} (each relay's timer spaces only its own retries)",
                by.words(names),
                m(*message)
            ),
            Breach::RetryNotLater { by, message, status, retry_at, now, true_time } => format!(
                "{} left {} {} with {}, not later than {}{now}",
                by.words(names),
                m(*message),
                names.status_name(*status),
                retry_at.map_or("no retry time".to_string(), |t| format!("retry time {t}")),
                if *true_time { "true time " } else { "" }
            ),
            Breach::AppliedNoChange { by, message } => {
                format!("{} reported applied to {} but changed nothing", by.words(names), m(*message))
            }
            Breach::StaleButChanged { by, message, reason } => {
                format!("{} said stale ({reason}) but changed {}", by.words(names), m(*message))
            }
            Breach::Superseded { by, message, seq, latest } => {
                let read = if matches!(by, Doer::Release { .. }) { "read at" } else { "from" };
                format!(
                    "{} applied to {} {read} claim {seq} of the row while claim {latest} is the latest",
                    by.words(names),
                    m(*message)
                )
            }
            Breach::WrongKey { message, key } => {
                let key = match key {
                    IdempotencyKey::Message { message_id } => m(*message_id),
                    IdempotencyKey::Other { .. } => key.to_string(),
                };
                format!("{} was published with key {key}, not its message id", m(*message))
            }
            Breach::DeliveredAfterFailure { by, message, token, status } => format!(
                "the broker stored {} from {} under lease {token} after its row was recorded {}",
                m(*message),
                names.relay_name(*by),
                names.status_name(*status)
            ),
            Breach::NotSettled { after_ms, rows: r } => {
                format!("{after_ms} ms after the faults stopped, not terminal: {}", rows(r))
            }
            Breach::NotExhausted { rows: r } => {
                format!("under a permanent broker outage, not {}: {}", names.status_name(Status::Exhausted), rows(r))
            }
            Breach::NotDelivered { rows: r } => format!(
                "after the heal, neither {} nor {}/{}: {}",
                names.status_name(Status::Published),
                names.status_name(Status::Failed),
                names.status_name(Status::Exhausted),
                rows(r)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{FailureCode, RelayId, TenantId};

    /// A reader's names replace the model's in every field they name, and nowhere else.
    struct Theirs;

    impl Names for Theirs {
        fn message_name(&self, id: MessageId) -> String {
            format!("job-{}", id.0)
        }
        fn relay_name(&self, id: RelayId) -> String {
            format!("worker-{}", id.0)
        }
        fn tenant_name(&self, id: TenantId) -> String {
            format!("org-{}", id.0)
        }
        fn status_name(&self, status: Status) -> String {
            status.as_str().to_lowercase()
        }
    }

    #[test]
    fn words_name_every_id_as_the_reader_calls_it() {
        let by = Doer::Write {
            kind: WriteKind::Retry { code: FailureCode::Timeout },
            owner: RelayId(1),
            token: LeaseToken(3),
        };
        let breach = Breach::RetryNotLater {
            by,
            message: MessageId(2),
            status: Status::Pending,
            retry_at: Some(Instant(4)),
            now: Instant(5),
            true_time: false,
        };
        assert_eq!(
            breach.words(&ModelNames),
            "mark_retry by r1 with #3 left m2 PENDING with retry time t=4, not later than t=5"
        );
        assert_eq!(
            breach.words(&Theirs),
            "mark_retry by worker-1 with #3 left job-2 pending with retry time t=4, not later than t=5"
        );
        let tenant = Breach::OtherTenant {
            by: Doer::Claim { owner: RelayId(0) },
            tenant: TenantId(0),
            message: MessageId(7),
            of: TenantId(1),
        };
        assert_eq!(tenant.words(&Theirs), "claim by worker-0 for org-0 returned job-7 of org-1");
        assert_eq!(tenant.message(), Some(MessageId(7)));
        let release = Breach::Superseded {
            by: Doer::Release { fence: ReleaseFence::Token, to: Status::Pending },
            message: MessageId(0),
            seq: 1,
            latest: 2,
        };
        assert_eq!(
            release.words(&ModelNames),
            "release (token fence) to PENDING applied to m0 read at claim 1 of the row while claim 2 is the latest"
        );
        let run =
            Breach::NotDelivered { rows: vec![(MessageId(0), Status::Ambiguous), (MessageId(1), Status::Pending)] };
        assert_eq!(run.message(), None);
        assert_eq!(
            run.words(&ModelNames),
            "after the heal, neither PUBLISHED nor FAILED/EXHAUSTED: m0 AMBIGUOUS, m1 PENDING"
        );
    }
}
