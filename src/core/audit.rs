//! The properties of SPEC §7 and the auditor that checks the safety ones step by step.
//!
//! The [`Auditor`] wraps every operation on an [`Outbox`]: it performs the operation, then checks
//! what changed against ghost state the rules never read — which claim of each row is the latest
//! (by any path, fenced or not), which tokens a row has had, how many times the broker was asked
//! to publish each message and whether it stored it, which business transitions committed. The
//! model checker, the simulations, the SQL conformance runs and the trace oracle all check through
//! it, so "S1" means one thing everywhere.

use super::outbox::{
    ClaimRequest, CoreError, EnqueueRequest, EnqueueResult, Outbox, RequeueResult, WriteKind, WriteRequest, WriteResult,
};
use super::policy::{Policy, TokenKind};
pub use super::property::Property;
use super::row::{Lease, LeaseToken, MessageId, Row, Status};
use super::time::Instant;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One broken property: the facts a caller acts on as fields, and what broke it in words.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Violation {
    pub property: Property,
    /// The row it concerns (none for a property of the whole run, such as L1).
    #[serde(skip)]
    pub message: Option<MessageId>,
    /// An S1 of a write or release that applied for a lease a later claim had superseded (not
    /// one that reported a result the row does not show).
    #[serde(skip)]
    pub superseded: bool,
    pub detail: String,
}

impl Violation {
    /// A violation of a property of the whole run, not of one row.
    pub fn of_run(property: Property, detail: String) -> Violation {
        Violation { property, message: None, superseded: false, detail }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.property, self.detail)
    }
}

/// The key a relay sent with a publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IdempotencyKey {
    /// The row's message id: the only key SPEC allows.
    Message { message_id: MessageId },
    /// Anything else (a key minted per attempt).
    Other { value: u64 },
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdempotencyKey::Message { message_id } => write!(f, "{message_id}"),
            IdempotencyKey::Other { value } => write!(f, "{value:#x}"),
        }
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
}

/// Packed words, like [`Row`]'s hash (every field at full width, so injective).
impl std::hash::Hash for RowGhost {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(u64::from(self.message_id) | u64::from(self.claims) << 32);
        state.write_u64(u64::from(self.publications) | u64::from(self.publications_previous) << 32);
        state.write_u64(u64::from(self.requeued_after_claim) | u64::from(self.publications_total) << 32);
        state.write_u64(u64::from(self.stored) | (self.tokens_seen.len() as u64) << 1);
        self.tokens_seen.iter().for_each(|t| state.write_u64(t.0));
    }
}

/// A write request in words, for a violation's detail: "mark_published by r0 with t3".
struct WriteWords<'a>(&'a WriteRequest);

impl std::fmt::Display for WriteWords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} by {} with {}", self.0.kind.name(), self.0.lease.owner, self.0.lease.token)
    }
}

/// A claim in words, for a violation's detail: "claim by r1".
struct ClaimWords(crate::core::RelayId);

impl std::fmt::Display for ClaimWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "claim by {}", self.0)
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

    fn violated(&mut self, property: Property, message: MessageId, detail: String) {
        self.violations.push(Violation { property, message: Some(message), superseded: false, detail });
    }

    /// S1: a write or release for the lease of claim `seq` applied while a later claim is the
    /// latest.
    fn superseded(&mut self, message: MessageId, detail: String) {
        self.violations.push(Violation { property: Property::S1, message: Some(message), superseded: true, detail });
    }

    /// S3's count on a row a step touched.
    fn check_row(&mut self, row: &Row) {
        if row.attempts > self.max_attempts {
            self.violated(
                Property::S3,
                row.message_id,
                format!("{} has attempts = {} over the budget of {}", row.message_id, row.attempts, self.max_attempts),
            );
        }
    }

    /// S5 when a row becomes PUBLISHED: the broker stored the message.
    fn check_confirmation(&mut self, before: &Row, after: &Row) {
        let confirmed = after.status == Status::Published && before.status != Status::Published;
        if confirmed && !self.ghost(after.message_id).is_some_and(|g| g.stored) {
            self.violated(
                Property::S5,
                after.message_id,
                format!("{} became PUBLISHED but the broker never stored it", after.message_id),
            );
        }
    }

    /// S4 across one step: a row that was terminal is unchanged.
    fn check_absorbing(&mut self, before: &Row, after: &Row, what: &dyn std::fmt::Display) {
        if before.status.is_terminal() && before != after {
            let now = if after.deleted { "now deleted".to_string() } else { format!("now {}", after.status) };
            self.violated(
                Property::S4,
                before.message_id,
                format!("{what} changed {} which was {} ({now})", before.message_id, before.status),
            );
        }
    }

    /// S2 across a step that is not a claim: the token did not move.
    fn check_token_kept(&mut self, before: &Row, after: &Row, what: &dyn std::fmt::Display) {
        if before.lease_token != after.lease_token {
            self.violated(
                Property::S2,
                before.message_id,
                format!(
                    "{what} changed the token of {} from {} to {}",
                    before.message_id, before.lease_token, after.lease_token
                ),
            );
        }
    }

    /// SPEC §3.1 with S10: the outbox row exists if and only if the business transition committed.
    pub fn enqueue(&mut self, outbox: &mut Outbox, req: &EnqueueRequest) -> Result<EnqueueResult, CoreError> {
        let version_before = outbox.aggregate_version(req.tenant_id, req.aggregate_id);
        let rows_before = outbox.rows().len();
        let result = outbox.enqueue(req)?;
        let version_after = outbox.aggregate_version(req.tenant_id, req.aggregate_id);
        let inserted = outbox.rows().len() == rows_before + 1 && outbox.row(req.message_id).is_some();
        let transitioned = version_after == version_before + 1;
        match result {
            EnqueueResult::Applied { .. } if !(inserted && transitioned) => self.violated(
                Property::S10,
                req.message_id,
                format!(
                    "enqueue of {} applied with row inserted = {inserted}, business moved = {transitioned}",
                    req.message_id
                ),
            ),
            EnqueueResult::Stale { .. } if inserted || version_after != version_before => self.violated(
                Property::S10,
                req.message_id,
                format!("stale enqueue of {} still inserted a row or moved the business row", req.message_id),
            ),
            _ => {}
        }
        if inserted {
            self.ghost_mut(req.message_id);
        }
        Ok(result)
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
            let what = ClaimWords(req.owner);
            self.check_absorbing(old, &new, &what);
            if old.tenant_id != req.tenant_id {
                self.violated(
                    Property::S9,
                    old.message_id,
                    format!("{what} for {} returned {} of {}", req.tenant_id, old.message_id, old.tenant_id),
                );
            }
            if old.status == Status::InFlight && old.lease_expires_at.is_some_and(|at| at > true_now) {
                self.violated(
                    Property::S6,
                    old.message_id,
                    format!(
                        "{what} took {} whose lease by {} runs until {} at true time {true_now}",
                        old.message_id,
                        old.lease_owner.map(|o| o.to_string()).unwrap_or_else(|| "an unnamed relay".into()),
                        old.lease_expires_at.unwrap_or_default()
                    ),
                );
            }
            if let Some(at) = old.retry_at().filter(|&at| at > true_now) {
                self.violated(
                    Property::S7,
                    old.message_id,
                    format!("{what} took {} at true time {true_now}, before its retry time {at}", old.message_id),
                );
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
                self.violated(
                    Property::S2,
                    old.message_id,
                    format!(
                        "{what} gave {} the token {} it had before (was {})",
                        old.message_id, new.lease_token, old.lease_token
                    ),
                );
            }
            let ghost = self.ghost_mut(old.message_id);
            ghost.claims += 1;
            lease.claim_seq = ghost.claims;
            if policy.token_kind == TokenKind::Random {
                ghost.tokens_seen.push(old.lease_token);
            }
            self.check_row(&new);
        }
    }

    /// SPEC §3.3 with S1 (only the latest claim's writer may apply; a Stale write changes
    /// nothing), S4, S7 (AMBIGUOUS and retry set a later retry time) and S9.
    pub fn write(
        &mut self,
        outbox: &mut Outbox,
        policy: &Policy,
        req: &WriteRequest,
    ) -> Result<WriteResult, CoreError> {
        let id = req.lease.message_id;
        let before = outbox.row(id).cloned();
        let result = outbox.write(policy, req)?;
        let (Some(old), Some(new)) = (before, outbox.row(id).cloned()) else {
            return Ok(result);
        };
        // Written out only when a violation needs it: this runs on every write of every engine.
        let what = WriteWords(req);
        let latest = self.ghost(id).map(|g| g.claims).unwrap_or(0);
        match result {
            WriteResult::Applied { .. } if old == new => {
                self.violated(Property::S1, id, format!("{what} reported applied to {id} but changed nothing"));
            }
            WriteResult::Applied { .. } => {
                if req.lease.claim_seq != latest {
                    self.superseded(
                        id,
                        format!(
                            "{what} applied to {} from claim {} of the row while claim {latest} is the latest",
                            id, req.lease.claim_seq
                        ),
                    );
                }
                if old.tenant_id != req.lease.tenant_id {
                    self.violated(
                        Property::S9,
                        id,
                        format!("{what} for {} applied to {id} of {}", req.lease.tenant_id, old.tenant_id),
                    );
                }
                if matches!(req.kind, WriteKind::Ambiguous { .. } | WriteKind::Retry { .. })
                    && matches!(new.status, Status::Ambiguous | Status::Pending)
                    && new.retry_at().is_none_or(|at| at <= req.now)
                {
                    self.violated(
                        Property::S7,
                        id,
                        format!(
                            "{what} left {id} {} with {}, not later than {}",
                            new.status,
                            new.retry_at().map_or("no retry time".to_string(), |t| format!("retry time {t}")),
                            req.now
                        ),
                    );
                }
            }
            WriteResult::Stale { reason } => {
                if old != new {
                    self.violated(Property::S1, id, format!("{what} said stale ({reason}) but changed {id}"));
                }
            }
        }
        self.check_absorbing(&old, &new, &what);
        self.check_token_kept(&old, &new, &what);
        self.check_confirmation(&old, &new);
        self.check_row(&new);
        Ok(result)
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
        let what = format!("release ({} fence) to {}", req.fence.name(), req.to);
        let latest = self.ghost(id).map(|g| g.claims).unwrap_or(0);
        if matches!(result, WriteResult::Applied { .. })
            && req.lease.claim_seq != latest
            && old.status == Status::InFlight
        {
            self.superseded(
                id,
                format!(
                    "{what} applied to {id} read at claim {} of the row while claim {latest} is the latest",
                    req.lease.claim_seq
                ),
            );
        }
        self.check_absorbing(&old, &new, &what);
        self.check_token_kept(&old, &new, &what);
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
            self.check_absorbing(old, &new, &"reap");
            self.check_token_kept(old, &new, &"reap");
        }
        reaped
    }

    /// Operator requeue with S2: the token is kept. Starts a new publication budget.
    pub fn requeue(&mut self, outbox: &mut Outbox, policy: &Policy, id: MessageId) -> Result<RequeueResult, CoreError> {
        let before = outbox.row(id).cloned();
        let result = outbox.requeue(policy, id)?;
        if let (Some(old), Some(new)) = (before, outbox.row(id).cloned()) {
            self.check_token_kept(&old, &new, &"requeue");
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
    /// broker stored it. Checks S3 (publications within the budget the lease's claim belongs to)
    /// and S8 (the key is the message id).
    pub fn published(&mut self, lease: &Lease, key: IdempotencyKey, stored: bool) {
        let max = self.max_attempts;
        let message_id = lease.message_id;
        let ghost = self.ghost_mut(message_id);
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
            self.violated(
                Property::S3,
                message_id,
                format!("{message_id} was published {count} times in one budget, over the budget of {max}"),
            );
        }
        if key != (IdempotencyKey::Message { message_id }) {
            self.violated(
                Property::S8,
                message_id,
                format!("{message_id} was published with key {key}, not its message id"),
            );
        }
    }
}
