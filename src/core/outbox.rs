//! The outbox table and the operations of SPEC §3, each one atomic.
//!
//! This is the only place that knows the outbox rules. Every operation takes `now` as an argument
//! and the caller's [`Policy`]; nothing here reads a clock, does I/O, draws a random number or
//! iterates a hash map. Expected refusals are typed results ([`WriteResult::Stale`],
//! [`EnqueueResult::Stale`]); invalid input is a [`CoreError`].

pub use super::policy::ReleaseFence;
use super::policy::{
    AmbiguousShape, AttemptsAt, ClaimFence, ClaimOrder, LeaseKind, Policy, Renewal, TokenKind, WriteFence,
};
use super::row::{Aggregate, AggregateId, FailureCode, Lease, LeaseToken, MessageId, RelayId, Row, Status, TenantId};
use super::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// Invalid input: the caller asked for something the design does not define.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum CoreError {
    /// A claim must ask for at least one row.
    #[error("invalid batch: a claim must ask for at least one row")]
    InvalidBatch,
    /// A lease must last some time, or it expires as it is granted.
    #[error("invalid lease: a lease must last at least 1 ms")]
    InvalidLease,
    /// The attempt budget must allow one attempt.
    #[error("invalid budget: max_attempts must be at least 1")]
    InvalidBudget,
    /// `message_id` is unique.
    #[error("duplicate message id {0}")]
    DuplicateMessageId(MessageId),
    /// A lease (or requeue) named a message the table does not hold.
    #[error("no row with message id {0}")]
    UnknownMessage(MessageId),
}

/// Enqueue: the business transition and its outbox row, in one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EnqueueRequest {
    pub tenant_id: TenantId,
    pub aggregate_id: AggregateId,
    /// The version the application read; an aggregate never written is at version 0.
    pub expected_version: u32,
    pub message_id: MessageId,
    pub now: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum EnqueueResult {
    /// The aggregate moved to `version` and the outbox row was inserted.
    Applied { version: u32 },
    /// The aggregate was not at the expected version: nothing changed.
    Stale { current_version: u32 },
}

impl std::fmt::Display for EnqueueResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnqueueResult::Applied { version } => write!(f, "applied (the aggregate is now at version {version})"),
            EnqueueResult::Stale { current_version } => {
                write!(f, "stale (the aggregate is at version {current_version}: nothing inserted)")
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimRequest {
    pub tenant_id: TenantId,
    pub owner: RelayId,
    pub batch: u32,
    pub lease: Duration,
    pub now: Instant,
    pub max_attempts: u32,
    /// The claiming relay's own retry timer is due (`retry.timer = "per-process"`): only then
    /// may the claim take a row attempted before. Always true where the design keeps its retry
    /// time in the row, and where a history is replayed (it says what was taken).
    #[serde(default = "due")]
    pub retry_due: bool,
}

fn due() -> bool {
    true
}

/// The five writes that end a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "write", rename_all = "snake_case")]
pub enum WriteKind {
    Published,
    /// Outcome unknown (timeout, lost ack).
    Ambiguous {
        code: FailureCode,
    },
    /// Definite, retryable failure: back to PENDING with a retry time.
    Retry {
        code: FailureCode,
    },
    Failed {
        code: FailureCode,
    },
    Exhausted {
        code: FailureCode,
    },
}

impl WriteKind {
    /// The failure code the write records (none for `mark_published`).
    pub fn code(self) -> Option<FailureCode> {
        match self {
            WriteKind::Published => None,
            WriteKind::Ambiguous { code }
            | WriteKind::Retry { code }
            | WriteKind::Failed { code }
            | WriteKind::Exhausted { code } => Some(code),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WriteKind::Published => "mark_published",
            WriteKind::Ambiguous { .. } => "mark_ambiguous",
            WriteKind::Retry { .. } => "mark_retry",
            WriteKind::Failed { .. } => "mark_failed",
            WriteKind::Exhausted { .. } => "mark_exhausted",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WriteRequest {
    pub lease: Lease,
    pub kind: WriteKind,
    pub now: Instant,
    pub max_attempts: u32,
}

/// A maintenance job ends a lease without a claim: back to PENDING or AMBIGUOUS (with or
/// without a retry time), or to FAILED or EXHAUSTED. `lease` is the lease it read (its token is
/// what a `Token` fence compares); the attempt count is left as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReleaseRequest {
    pub lease: Lease,
    pub fence: ReleaseFence,
    pub to: Status,
    pub retry_at: Option<Instant>,
    pub now: Instant,
}

/// Why a claim may not take a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimRefusal {
    OtherTenant,
    Terminal,
    LiveLease,
    /// An in-flight row whose lease expired, to a claim that never takes one.
    InFlight,
    RetryClock,
    /// A row whose retry time has passed, still waiting for the scheduler to move it
    /// (`maintenance.scheduler`).
    Unscheduled,
    BudgetSpent,
    /// More rows than the batch asked for.
    OverBatch,
    /// The same row twice.
    Twice,
}

/// Why a terminal write matched no row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleReason {
    WrongTenant,
    NotInFlight,
    WrongOwner,
    WrongToken,
    /// The row was deleted (completion by deletion): nothing matches it.
    Deleted,
}

impl std::fmt::Display for StaleReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StaleReason::WrongTenant => "the row belongs to another tenant",
            StaleReason::NotInFlight => "the row is no longer IN_FLIGHT",
            StaleReason::Deleted => "the row was deleted",
            StaleReason::WrongOwner => "another relay holds the lease",
            StaleReason::WrongToken => "the token was superseded",
        })
    }
}

impl std::fmt::Display for WriteResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteResult::Applied { status } => write!(f, "applied → {status}"),
            WriteResult::Stale { reason } => write!(f, "stale: {reason}"),
        }
    }
}

impl std::fmt::Display for ClaimRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClaimRefusal::OtherTenant => "it belongs to another tenant",
            ClaimRefusal::Terminal => "it is terminal",
            ClaimRefusal::LiveLease => "its lease is still live",
            ClaimRefusal::InFlight => "it is in flight, and only a rescuer takes an in-flight row back",
            ClaimRefusal::RetryClock => "its retry time has not come",
            ClaimRefusal::Unscheduled => "it waits for the scheduler to make it claimable",
            ClaimRefusal::BudgetSpent => "its budget is spent",
            ClaimRefusal::OverBatch => "the batch is already full",
            ClaimRefusal::Twice => "it was already returned by this claim",
        })
    }
}

impl std::fmt::Display for RequeueResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequeueResult::Applied => f.write_str("applied (back to PENDING with a new budget)"),
            RequeueResult::NotRequeueable { status } => write!(f, "not requeueable (the row is {status})"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum WriteResult {
    /// The write matched the row, which now has `status`.
    Applied { status: Status },
    /// The write matched no row: the writer's claim was superseded.
    Stale { reason: StaleReason },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RequeueResult {
    Applied,
    /// Only FAILED and EXHAUSTED rows are requeued.
    NotRequeueable {
        status: Status,
    },
}

/// Where `key` is in `items` (sorted by `key_of`, keys unique), as `binary_search` answers.
///
/// Ids are handed out densely from 0 by every engine, so an item usually sits at the index its
/// id names (`guess`), and a new one belongs at the end: both are tried before the search, which
/// on a large table misses the cache at every step.
pub fn find_sorted<T, K: Ord>(items: &[T], key: &K, guess: usize, key_of: impl Fn(&T) -> K) -> Result<usize, usize> {
    if let Some(item) = items.get(guess) {
        if key_of(item) == *key {
            return Ok(guess);
        }
    }
    match items.last() {
        None => Err(0),
        Some(last) if key_of(last) < *key => Err(items.len()),
        Some(_) => items.binary_search_by(|item| key_of(item).cmp(key)),
    }
}

/// The outbox table with its business rows.
///
/// Rows are kept sorted by `message_id` and aggregates by `(tenant, aggregate)`, so equal tables
/// compare and hash equal whatever order the operations came in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Outbox {
    rows: Vec<Row>,
    aggregates: Vec<Aggregate>,
    /// Claims ever made with [`TokenKind::Random`]: the source of fresh random tokens.
    random_tokens_issued: u64,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox::default()
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    pub fn aggregates(&self) -> &[Aggregate] {
        &self.aggregates
    }

    pub fn row(&self, message_id: MessageId) -> Option<&Row> {
        self.index(message_id).map(|i| &self.rows[i])
    }

    /// The row's position in the table (sorted by message id).
    /// A queue that chose its own retry time (a trace's `next_attempt_at`) in a write that left
    /// `message_id` waiting (PENDING or AMBIGUOUS): that time replaces the design's backoff. One
    /// not later than the write's `now` is refused with the row's status, and breaks S7.
    pub fn choose_retry(&mut self, message_id: MessageId, at: Instant, now: Instant) -> Result<(), Status> {
        let Some(i) = self.index(message_id) else { return Ok(()) };
        let row = &mut self.rows[i];
        if !matches!(row.status, Status::Pending | Status::Ambiguous) {
            return Ok(());
        }
        if at <= now {
            return Err(row.status);
        }
        row.next_attempt_at = Some(at);
        Ok(())
    }

    pub fn index(&self, message_id: MessageId) -> Option<usize> {
        find_sorted(&self.rows, &message_id, message_id.0 as usize, |r| r.message_id).ok()
    }

    fn aggregate_slot(&self, tenant_id: TenantId, aggregate_id: AggregateId) -> Result<usize, usize> {
        find_sorted(&self.aggregates, &(tenant_id, aggregate_id), aggregate_id.0 as usize, |a| {
            (a.tenant_id, a.aggregate_id)
        })
    }

    pub fn aggregate_version(&self, tenant_id: TenantId, aggregate_id: AggregateId) -> u32 {
        self.aggregate_slot(tenant_id, aggregate_id).map(|i| self.aggregates[i].version).unwrap_or(0)
    }

    /// Used by normalising engines (the model checker) that rewrite times and tokens in place.
    pub fn rows_mut(&mut self) -> &mut [Row] {
        &mut self.rows
    }

    /// Used by normalising engines: restarts the source of random tokens. Sound only when every
    /// token it issued before is renamed to a value it never issues (see `World::normalise`).
    pub fn restart_random_tokens(&mut self) {
        self.random_tokens_issued = 0;
    }

    /// SPEC §3.1: the aggregate moves from `expected_version` to the next only if it is there now;
    /// the outbox row is inserted only if that update changed a row.
    pub fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, CoreError> {
        let slot = find_sorted(&self.rows, &req.message_id, req.message_id.0 as usize, |r| r.message_id);
        let Err(row_at) = slot else {
            return Err(CoreError::DuplicateMessageId(req.message_id));
        };
        let found = self.aggregate_slot(req.tenant_id, req.aggregate_id);
        let current = found.map(|i| self.aggregates[i].version).unwrap_or(0);
        if current != req.expected_version {
            return Ok(EnqueueResult::Stale { current_version: current });
        }
        let version = current + 1;
        match found {
            Ok(i) => self.aggregates[i].version = version,
            Err(i) => self
                .aggregates
                .insert(i, Aggregate { tenant_id: req.tenant_id, aggregate_id: req.aggregate_id, version }),
        }
        self.rows.insert(
            row_at,
            Row {
                message_id: req.message_id,
                tenant_id: req.tenant_id,
                aggregate_id: req.aggregate_id,
                aggregate_version: version,
                status: Status::Pending,
                attempts: 0,
                lease_owner: None,
                lease_token: LeaseToken(0),
                lease_expires_at: None,
                next_attempt_at: None,
                last_failure_code: None,
                created_at: req.now,
                published_at: None,
                deleted: false,
            },
        );
        Ok(EnqueueResult::Applied { version })
    }

    /// The claim predicate: may `policy`'s claim for `tenant` at `now` take `row`?
    pub fn is_claimable(policy: &Policy, row: &Row, tenant_id: TenantId, now: Instant, max_attempts: u32) -> bool {
        if row.deleted || (policy.claim_by_tenant && row.tenant_id != tenant_id) {
            return false;
        }
        let status_ok = matches!(row.status, Status::Pending | Status::Ambiguous | Status::InFlight)
            || (policy.claim_terminal && row.status.is_terminal());
        if !status_ok {
            return false;
        }
        // Only a claim sets the expiry and every write clears it, so a non-null expiry is a
        // live or expired lease whatever the status says — or, where the design keeps its retry
        // time there (a visibility timeout), the time a failed row becomes visible again.
        let lease_ok = policy.claim_live_leases
            || (row.lease_expires_at.is_none_or(|at| at <= now)
                && (policy.claim_expired_leases || row.status != Status::InFlight));
        // With a scheduler the claim takes only rows without a retry time: those the scheduler
        // made claimable, or never delayed (River: `state = 'available'`).
        let clock_ok = if policy.scheduler {
            row.next_attempt_at.is_none()
        } else {
            !policy.retry_clock || row.next_attempt_at.is_none_or(|at| at <= now)
        };
        let budget_ok = !policy.budget.spent(row.attempts, max_attempts);
        lease_ok && clock_ok && budget_ok
    }

    /// The claim's total order, as a sortable key.
    pub fn order_key(order: ClaimOrder, row: &Row) -> (Instant, TenantId, MessageId) {
        match order {
            ClaimOrder::Due | ClaimOrder::LastClaimed => {
                (row.retry_at().unwrap_or(row.created_at), TenantId(0), row.message_id)
            }
            ClaimOrder::Created => (row.created_at, row.tenant_id, row.message_id),
        }
    }

    /// A claim must ask for a row, last some time, and allow one attempt.
    fn validate_claim(req: &ClaimRequest) -> Result<(), CoreError> {
        if req.batch == 0 {
            return Err(CoreError::InvalidBatch);
        }
        if req.lease.0 == 0 {
            return Err(CoreError::InvalidLease);
        }
        if req.max_attempts == 0 {
            return Err(CoreError::InvalidBudget);
        }
        Ok(())
    }

    /// SPEC §3.2: takes up to `batch` claimable rows in the policy's order and leases them, in one
    /// statement. Returns one lease per row, in claim order.
    pub fn claim(&mut self, policy: &Policy, req: &ClaimRequest) -> Result<Vec<Lease>, CoreError> {
        Self::validate_claim(req)?;
        let picked = self.pick(policy, req, 0..self.rows.len());
        Ok(picked.into_iter().map(|i| self.lease_row(policy, req, i)).collect())
    }

    /// A claim that may take `ids` where the design leaves ties to the database
    /// (`claim.ties = "any"`): `ids` are taken where they are as many as the claim takes and
    /// claimable, and due at the instants the claim's own pick is (another choice among rows due
    /// at the same instant); otherwise the claim takes its own pick. A design that breaks ties by
    /// id always takes its own.
    pub fn claim_among_ties(
        &mut self,
        policy: &Policy,
        req: &ClaimRequest,
        ids: &[MessageId],
    ) -> Result<Vec<Lease>, CoreError> {
        Self::validate_claim(req)?;
        let own = self.pick(policy, req, 0..self.rows.len());
        if policy.claim_ties_any && ids.len() == own.len() {
            let every = self.pick(policy, &ClaimRequest { batch: u32::MAX, ..*req }, 0..self.rows.len());
            let due = |i: usize| {
                let (at, tenant, _) = Self::order_key(policy.claim_order, &self.rows[i]);
                (at, tenant)
            };
            let chosen: Option<Vec<usize>> =
                ids.iter().map(|id| self.index(*id).filter(|i| every.contains(i))).collect();
            if let Some(chosen) = chosen {
                let (mut theirs, mut ours): (Vec<_>, Vec<_>) =
                    (chosen.iter().map(|&i| due(i)).collect(), own.iter().map(|&i| due(i)).collect());
                theirs.sort();
                ours.sort();
                let distinct = chosen.iter().enumerate().all(|(k, i)| !chosen[..k].contains(i));
                if distinct && theirs == ours {
                    return Ok(chosen.into_iter().map(|i| self.lease_row(policy, req, i)).collect());
                }
            }
        }
        Ok(own.into_iter().map(|i| self.lease_row(policy, req, i)).collect())
    }

    /// The rows a claim would take, in its order, without taking them, looking only at the
    /// rows of `candidates` (which must hold every row the claim could take; a caller that
    /// keeps the table's non-terminal rows need not scan the rest).
    pub fn claim_pick(&self, policy: &Policy, req: &ClaimRequest, candidates: &[MessageId]) -> Vec<MessageId> {
        let picked = self.pick(policy, req, candidates.iter().filter_map(|id| self.index(*id)));
        picked.into_iter().map(|i| self.rows[i].message_id).collect()
    }

    /// The claim's selection: the claimable rows among `indices`, in the claim's order, at most
    /// a batch. The one place that rule lives.
    fn pick(&self, policy: &Policy, req: &ClaimRequest, indices: impl Iterator<Item = usize>) -> Vec<usize> {
        let mut picked: Vec<usize> = indices
            .filter(|&i| Self::is_claimable(policy, &self.rows[i], req.tenant_id, req.now, req.max_attempts))
            .filter(|&i| req.retry_due || !policy.waits_for_relay_timer(self.rows[i].attempts))
            .collect();
        picked.sort_by_key(|&i| Self::order_key(policy.claim_order, &self.rows[i]));
        picked.dedup();
        picked.truncate(req.batch as usize);
        picked
    }

    /// Claims exactly `ids` as a claim that returned them would have, the leases in the order of
    /// `ids`: each must be claimable. The order they are listed in is not checked: a claim's
    /// `RETURNING` has none (decision 67). For checking an implementation
    /// whose claim may skip rows another transaction holds locked (`SKIP LOCKED`): it returns a
    /// subset of what this table would, never a row it would refuse. `Err` names the first row
    /// that breaks the rule, with the reason.
    pub fn claim_exactly(
        &mut self,
        policy: &Policy,
        req: &ClaimRequest,
        ids: &[MessageId],
    ) -> Result<Result<Vec<Lease>, (MessageId, ClaimRefusal)>, CoreError> {
        Self::validate_claim(req)?;
        let mut rows = Vec::with_capacity(ids.len());
        for &id in ids {
            let i = self.index(id).ok_or(CoreError::UnknownMessage(id))?;
            if let Some(refusal) = Self::refusal(policy, &self.rows[i], req.tenant_id, req.now, req.max_attempts) {
                return Ok(Err((id, refusal)));
            }
            if rows.contains(&i) {
                return Ok(Err((id, ClaimRefusal::Twice)));
            }
            rows.push(i);
        }
        if rows.len() > req.batch as usize {
            return Ok(Err((ids[req.batch as usize], ClaimRefusal::OverBatch)));
        }
        Ok(Ok(rows.into_iter().map(|i| self.lease_row(policy, req, i)).collect()))
    }

    /// Why the claim predicate refuses `row`, or `None` if it is claimable.
    pub fn refusal(
        policy: &Policy,
        row: &Row,
        tenant_id: TenantId,
        now: Instant,
        max_attempts: u32,
    ) -> Option<ClaimRefusal> {
        if Self::is_claimable(policy, row, tenant_id, now, max_attempts) {
            return None;
        }
        Some(if policy.claim_by_tenant && row.tenant_id != tenant_id {
            ClaimRefusal::OtherTenant
        } else if row.status.is_terminal() {
            ClaimRefusal::Terminal
        } else if row.status == Status::InFlight && row.lease_expires_at.is_some_and(|at| at > now) {
            ClaimRefusal::LiveLease
        } else if row.status == Status::InFlight && !policy.claim_expired_leases {
            ClaimRefusal::InFlight
        } else if row.retry_at().is_some_and(|at| at > now) {
            ClaimRefusal::RetryClock
        } else if policy.scheduler && row.next_attempt_at.is_some() {
            ClaimRefusal::Unscheduled
        } else {
            ClaimRefusal::BudgetSpent
        })
    }

    /// One row's share of a claim, in the statement that takes the lease.
    fn lease_row(&mut self, policy: &Policy, req: &ClaimRequest, i: usize) -> Lease {
        let fresh_token = match policy.token_kind {
            TokenKind::Counter => LeaseToken(self.rows[i].lease_token.0 + 1),
            TokenKind::Random => {
                self.random_tokens_issued += 1;
                LeaseToken(random_token(self.random_tokens_issued))
            }
        };
        let row = &mut self.rows[i];
        row.status = Status::InFlight;
        row.lease_expires_at = Some(match policy.lease {
            LeaseKind::Expiry => req.now.plus(req.lease),
            LeaseKind::Session => Instant::NEVER,
        });
        match policy.claim_fence {
            ClaimFence::OwnerAndToken => {
                row.lease_owner = Some(req.owner);
                row.lease_token = fresh_token;
            }
            ClaimFence::OwnerOnly => row.lease_owner = Some(req.owner),
            ClaimFence::TokenOnly => row.lease_token = fresh_token,
            ClaimFence::Unfenced => {}
        }
        if policy.attempts_at == AttemptsAt::Claim {
            row.attempts += 1;
        }
        if policy.claim_order == ClaimOrder::LastClaimed {
            // One due-time column: the claim's time replaces the retry time it waited for.
            row.created_at = req.now;
            row.next_attempt_at = None;
        }
        Lease {
            message_id: row.message_id,
            tenant_id: row.tenant_id,
            owner: req.owner,
            token: row.lease_token,
            attempts: row.attempts,
            claim_seq: 0,
        }
    }

    /// The fence of a terminal write: `None` when the write matches the row.
    fn fence(policy: &Policy, kind: WriteKind, row: &Row, lease: &Lease) -> Option<StaleReason> {
        if row.deleted {
            return Some(StaleReason::Deleted);
        }
        if policy.write_checks_tenant && row.tenant_id != lease.tenant_id {
            return Some(StaleReason::WrongTenant);
        }
        let (owner, token) = match policy.fence_of(kind) {
            WriteFence::MessageIdOnly => return None,
            WriteFence::StatusOwnerToken => (true, true),
            WriteFence::StatusToken => (false, true),
            WriteFence::StatusOwner => (true, false),
            WriteFence::StatusOnly => (false, false),
        };
        if row.status != Status::InFlight {
            Some(StaleReason::NotInFlight)
        } else if owner && row.lease_owner != Some(lease.owner) {
            Some(StaleReason::WrongOwner)
        } else if token && row.lease_token != lease.token {
            Some(StaleReason::WrongToken)
        } else {
            None
        }
    }

    /// SPEC §3.3: a terminal write applies only where the fence matches, clears the lease, and
    /// reports Stale otherwise. The lease's expiry is not part of the condition: a current token
    /// proves nobody has claimed since.
    pub fn write(&mut self, policy: &Policy, req: &WriteRequest) -> Result<WriteResult, CoreError> {
        if req.max_attempts == 0 {
            return Err(CoreError::InvalidBudget);
        }
        let i = self.index(req.lease.message_id).ok_or(CoreError::UnknownMessage(req.lease.message_id))?;
        let row = &mut self.rows[i];
        if let Some(reason) = Self::fence(policy, req.kind, row, &req.lease) {
            if policy.swallow_stale {
                return Ok(WriteResult::Applied { status: row.status });
            }
            return Ok(WriteResult::Stale { reason });
        }
        row.lease_expires_at = None;
        let keeps_owner =
            matches!(req.kind, WriteKind::Ambiguous { .. }) && policy.ambiguous_shape == AmbiguousShape::KeepsOwner;
        if !keeps_owner {
            row.lease_owner = None;
        }
        match req.kind {
            WriteKind::Published => {
                row.status = Status::Published;
                row.published_at = Some(req.now);
                row.deleted = policy.completion == super::policy::Completion::Delete;
            }
            WriteKind::Ambiguous { code } | WriteKind::Retry { code } => {
                let spent = policy.budget_in_write
                    && policy.checks_budget(req.kind)
                    && policy.failure_spends_budget(row.attempts, req.max_attempts);
                row.attempts = policy.attempts_after_failure(row.attempts);
                row.last_failure_code = Some(code);
                if spent {
                    row.status = Status::Exhausted;
                } else {
                    row.status = if matches!(req.kind, WriteKind::Ambiguous { .. }) {
                        Status::Ambiguous
                    } else {
                        Status::Pending
                    };
                    if policy.retry_clock && !keeps_owner {
                        // The backoff of the attempts the statement counts, or, where the relay
                        // decides what to write (`retry.budget_in_statement = false`), of those
                        // its copy of the row counts: a stale write's own (decision 92).
                        let counted = if policy.budget_in_write {
                            row.attempts
                        } else {
                            policy.attempts_after_failure(req.lease.attempts)
                        };
                        let at = req.now.plus(policy.backoff.delay(counted));
                        if policy.retry_in_lease {
                            row.lease_expires_at = Some(at);
                        } else {
                            row.next_attempt_at = Some(at);
                        }
                    }
                }
            }
            WriteKind::Failed { code } => {
                row.status = Status::Failed;
                row.last_failure_code = Some(code);
            }
            WriteKind::Exhausted { code } => {
                row.status = Status::Exhausted;
                row.last_failure_code = Some(code);
            }
        }
        if policy.failure_deletes && matches!(row.status, Status::Failed | Status::Exhausted) {
            row.deleted = true;
        }
        Ok(WriteResult::Applied { status: row.status })
    }

    /// A maintenance job's release (see [`ReleaseRequest`]): applies where its fence matches,
    /// ends the lease and moves the row to `to`; Stale otherwise, changing nothing.
    pub fn release(&mut self, req: &ReleaseRequest) -> Result<WriteResult, CoreError> {
        let i = self.index(req.lease.message_id).ok_or(CoreError::UnknownMessage(req.lease.message_id))?;
        let row = &mut self.rows[i];
        if row.deleted {
            return Ok(WriteResult::Stale { reason: StaleReason::Deleted });
        }
        let matches = match req.fence {
            ReleaseFence::Token => row.status == Status::InFlight && row.lease_token == req.lease.token,
            ReleaseFence::Expired => {
                row.status == Status::InFlight && row.lease_expires_at.is_some_and(|at| at <= req.now)
            }
            ReleaseFence::Id => true,
        };
        if !matches {
            return Ok(WriteResult::Stale {
                reason: if row.status == Status::InFlight { StaleReason::WrongToken } else { StaleReason::NotInFlight },
            });
        }
        row.status = req.to;
        row.lease_owner = None;
        row.lease_expires_at = None;
        row.next_attempt_at = if matches!(req.to, Status::Pending | Status::Ambiguous) { req.retry_at } else { None };
        if req.to == Status::Exhausted {
            row.last_failure_code = Some(FailureCode::BudgetSpent);
        }
        Ok(WriteResult::Applied { status: row.status })
    }

    /// The end of `owner`'s database session at `now` (a design whose leases the session holds:
    /// `claim.lease = "session"`): every lease it holds ends — as if it had expired at `now` —
    /// whether or not the relay behind it still runs. Returns the rows released, by message id.
    pub fn end_session(&mut self, owner: RelayId, now: Instant) -> Vec<MessageId> {
        let mut released = Vec::new();
        for row in &mut self.rows {
            if row.held_by_session(owner) {
                row.lease_expires_at = Some(now);
                released.push(row.message_id);
            }
        }
        released
    }

    /// A relay's lease release after its write (`write.releases_lease_by_owner`): clears the
    /// owner and expiry of row `id` where its owner is `owner`, and leaves the status. Returns
    /// whether it matched (and so changed) the row.
    pub fn release_by_owner(&mut self, id: MessageId, owner: RelayId) -> Result<bool, CoreError> {
        let i = self.index(id).ok_or(CoreError::UnknownMessage(id))?;
        let row = &mut self.rows[i];
        if row.deleted || row.lease_owner != Some(owner) {
            return Ok(false);
        }
        row.lease_owner = None;
        row.lease_expires_at = None;
        Ok(true)
    }

    /// Whether a heartbeat's renewal of `lease` to `until` matches row `row` (`renewal`'s fence:
    /// IN_FLIGHT and the owner, or IN_FLIGHT and the token) and would change it.
    pub fn renews(renewal: Renewal, row: &Row, lease: &Lease, until: Instant) -> bool {
        let matches = !row.deleted
            && row.status == Status::InFlight
            && match renewal {
                Renewal::None => false,
                Renewal::ByOwner => row.lease_owner == Some(lease.owner),
                Renewal::ByToken => row.lease_token == lease.token,
            };
        matches && row.lease_expires_at != Some(until)
    }

    /// A heartbeat's renewal (`claim.renewal`): sets row `id`'s expiry to `until` where
    /// [`Outbox::renews`] says it matches. Returns whether it changed the row.
    pub fn renew(&mut self, renewal: Renewal, lease: &Lease, until: Instant) -> Result<bool, CoreError> {
        let i = self.index(lease.message_id).ok_or(CoreError::UnknownMessage(lease.message_id))?;
        let row = &mut self.rows[i];
        if !Self::renews(renewal, row, lease, until) {
            return Ok(false);
        }
        row.lease_expires_at = Some(until);
        Ok(true)
    }

    /// The scheduler's predicate: a row waiting for a retry time that has passed at `now`.
    pub fn is_schedulable(row: &Row, now: Instant) -> bool {
        !row.deleted
            && matches!(row.status, Status::Pending | Status::Ambiguous)
            && row.next_attempt_at.is_some_and(|at| at <= now)
    }

    /// The scheduler's one statement (`maintenance.scheduler`): every row whose retry time has
    /// passed at `now` loses it, and so becomes claimable. The claim's order keeps reading that
    /// time, as River's and Oban's `scheduled_at` keeps it once the job is `available`: it
    /// becomes the row's `created_at`, which only the claim's order reads (decision 92).
    /// Returns the rows it moved, by id.
    pub fn schedule(&mut self, now: Instant) -> Vec<MessageId> {
        self.schedule_except(now, &[])
    }

    /// The scheduler's step leaving the rows in `leave` where they are: rows its statement did
    /// not see, because another transaction held them or committed them after it began.
    pub fn schedule_except(&mut self, now: Instant, leave: &[MessageId]) -> Vec<MessageId> {
        let mut moved = Vec::new();
        for row in &mut self.rows {
            if Self::is_schedulable(row, now) && !leave.contains(&row.message_id) {
                row.created_at = row.next_attempt_at.unwrap_or(row.created_at);
                row.next_attempt_at = None;
                moved.push(row.message_id);
            }
        }
        moved
    }

    /// The rescuer's read: the first row, by id, whose lease has expired at `now`.
    pub fn rescuable(&self, now: Instant) -> Option<&Row> {
        self.rescuable_after(now, false)
    }

    /// The rescuer's read: the first row, by id, whose lease has expired at `now` — with `after`,
    /// whose expiry is before `now` (`maintenance.after_expiry`: not at the instant it expires).
    pub fn rescuable_after(&self, now: Instant, after: bool) -> Option<&Row> {
        self.rows.iter().find(|row| Self::is_rescuable(row, now, after))
    }

    /// The rescuer's predicate: IN_FLIGHT, its lease expired at `now` — with `after`, expired
    /// before `now` (`maintenance.after_expiry`: not at the instant it expires).
    pub fn is_rescuable(row: &Row, now: Instant, after: bool) -> bool {
        row.status == Status::InFlight && row.lease_expires_at.is_some_and(|at| at < now || (!after && at == now))
    }

    /// A rescuer that moves every expired lease in one statement (Graphile Worker's
    /// `resetLockedAt`): the design's rescuer step, one row after another by id, until no lease
    /// has expired at `now`. Each row goes where [`Policy::rescue_request`] sends it. Returns the
    /// rows moved. The same as that many single rescuer steps in a row, so a sweep never reaches a
    /// table the model's one-row rescuer could not.
    pub fn rescue_all(&mut self, policy: &Policy, now: Instant, max_attempts: u32) -> Vec<MessageId> {
        let Some(fence) = policy.rescue else { return Vec::new() };
        let mut moved = Vec::new();
        while let Some(row) = self.rescuable_after(now, policy.rescue_after_expiry) {
            let lease = Lease::of_row(row, 0);
            let req = policy.rescue_request(lease, fence, lease.attempts, max_attempts, now);
            match self.release(&req) {
                Ok(WriteResult::Applied { .. }) => moved.push(lease.message_id),
                // An expired lease the fence refuses (a design whose rescuer fences on a token
                // it did not read): nothing more this sweep moves.
                _ => break,
            }
        }
        moved
    }

    /// The reaper's predicate: IN_FLIGHT, lease expired, budget spent.
    pub fn is_reapable(row: &Row, now: Instant, max_attempts: u32) -> bool {
        row.status == Status::InFlight
            && row.lease_expires_at.is_some_and(|at| at <= now)
            && super::policy::used_up(row.attempts, max_attempts)
    }

    /// No step of the design can ever end `row`: no claim takes it again (its budget is spent by
    /// the claim's predicate), and no reaper or rescuer moves it (it is not IN_FLIGHT, or the
    /// design runs neither). Left for good, not lost by a fault (L1 names such rows).
    pub fn stranded(policy: &Policy, row: &Row, max_attempts: u32, maintained: bool) -> bool {
        !row.status.is_terminal()
            && policy.budget.spent(row.attempts, max_attempts)
            && !(maintained && row.status == Status::InFlight)
    }

    /// SPEC §3.4: an IN_FLIGHT row whose lease expired with its budget spent can never be claimed
    /// again; move it to EXHAUSTED. Returns the rows reaped, by message id.
    pub fn reap(&mut self, now: Instant, max_attempts: u32) -> Vec<MessageId> {
        let mut reaped = Vec::new();
        for row in &mut self.rows {
            if Self::is_reapable(row, now, max_attempts) {
                row.status = Status::Exhausted;
                row.lease_owner = None;
                row.lease_expires_at = None;
                row.last_failure_code = Some(FailureCode::BudgetSpent);
                reaped.push(row.message_id);
            }
        }
        reaped
    }

    /// Operator requeue: FAILED or EXHAUSTED back to PENDING with a new attempt budget. The token
    /// is kept, so a lease from before the requeue stays stale.
    pub fn requeue(&mut self, policy: &Policy, message_id: MessageId) -> Result<RequeueResult, CoreError> {
        let i = self.index(message_id).ok_or(CoreError::UnknownMessage(message_id))?;
        let row = &mut self.rows[i];
        if !matches!(row.status, Status::Failed | Status::Exhausted) {
            return Ok(RequeueResult::NotRequeueable { status: row.status });
        }
        row.status = Status::Pending;
        row.attempts = 0;
        row.deleted = false;
        row.lease_owner = None;
        row.lease_expires_at = None;
        row.next_attempt_at = None;
        if policy.requeue_resets_token {
            row.lease_token = LeaseToken(0);
        }
        Ok(RequeueResult::Applied)
    }
}

/// splitmix64's finaliser: a bijection on u64, so distinct claim numbers give distinct tokens, and
/// every engine (SQL binds the value as a parameter) computes the same one.
pub fn random_token(claim_number: u64) -> u64 {
    let mut z = claim_number.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
