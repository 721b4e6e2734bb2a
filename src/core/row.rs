//! The outbox row of SPEC §2, its identifiers and its six statuses, and the lease a claim hands out.

use super::time::Instant;
use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// Unique id of an outbox row; also the idempotency key sent to the broker.
    MessageId(u32), "m");
id_type!(
    /// Owning organisation of a row; claims and writes never cross tenants.
    TenantId(u16), "tenant");
id_type!(
    /// Id of a relay process; the `lease_owner` of the rows it holds.
    RelayId(u16), "r");
id_type!(
    /// The business entity whose change produced an event.
    AggregateId(u32), "agg");
id_type!(
    /// A fencing token: +1 on every claim (or a fresh random value, for variants that use
    /// random tokens), never reset, never decreased.
    LeaseToken(u64), "#");

/// The six statuses of SPEC §2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Written, not yet delivered; may carry a retry time.
    Pending,
    /// Leased to `lease_owner` under `lease_token`.
    InFlight,
    /// The broker acknowledged it. Terminal.
    Published,
    /// A publication was attempted and its outcome is unknown.
    Ambiguous,
    /// The broker definitively rejected it. Terminal.
    Failed,
    /// The attempt budget is spent without a confirmation. Terminal.
    Exhausted,
}

impl Status {
    pub const ALL: [Status; 6] =
        [Status::Pending, Status::InFlight, Status::Published, Status::Ambiguous, Status::Failed, Status::Exhausted];

    /// Terminal rows never change again, except through an operator requeue.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Published | Status::Failed | Status::Exhausted)
    }

    /// The name used in SQL and in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::InFlight => "IN_FLIGHT",
            Status::Published => "PUBLISHED",
            Status::Ambiguous => "AMBIGUOUS",
            Status::Failed => "FAILED",
            Status::Exhausted => "EXHAUSTED",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the last attempt did not end in PUBLISHED.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The broker did not answer in time, or its acknowledgement was lost.
    Timeout,
    /// The broker refused for now (outage, throttling); nothing was stored.
    Unavailable,
    /// The broker rejected the message for good.
    Rejected,
    /// The attempt budget is spent.
    BudgetSpent,
}

impl FailureCode {
    pub const ALL: [FailureCode; 4] =
        [FailureCode::Timeout, FailureCode::Unavailable, FailureCode::Rejected, FailureCode::BudgetSpent];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::Timeout => "timeout",
            FailureCode::Unavailable => "unavailable",
            FailureCode::Rejected => "rejected",
            FailureCode::BudgetSpent => "budget_spent",
        }
    }

    pub fn parse(text: &str) -> Option<FailureCode> {
        FailureCode::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

/// One outbox row (SPEC §2). `Copy`: tables and snapshots of rows are cloned as plain memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub message_id: MessageId,
    pub tenant_id: TenantId,
    pub aggregate_id: AggregateId,
    pub aggregate_version: u32,
    pub status: Status,
    pub attempts: u32,
    pub lease_owner: Option<RelayId>,
    pub lease_token: LeaseToken,
    pub lease_expires_at: Option<Instant>,
    pub next_attempt_at: Option<Instant>,
    pub last_failure_code: Option<FailureCode>,
    pub created_at: Instant,
    pub published_at: Option<Instant>,
    /// The row was deleted by a design that completes by deletion: it stays here as PUBLISHED
    /// for the properties' sake, and no statement matches it (SQL no longer shows it).
    #[serde(default)]
    pub deleted: bool,
}

impl Row {
    /// The row's lease is held, live, by `owner`'s session (`claim.lease = "session"`): its end
    /// would end this lease ([`Outbox::end_session`](super::outbox::Outbox::end_session)).
    pub fn held_by_session(&self, owner: RelayId) -> bool {
        self.status == Status::InFlight
            && self.lease_owner == Some(owner)
            && self.lease_expires_at == Some(super::time::Instant::NEVER)
    }

    /// When the row may be claimed again after a failure: its retry time, or, where the design
    /// keeps that time in the lease's column (a visibility timeout), the expiry of a row that is
    /// not IN_FLIGHT (every write of the other designs clears it).
    pub fn retry_at(&self) -> Option<Instant> {
        self.next_attempt_at.or(if self.status == Status::InFlight { None } else { self.lease_expires_at })
    }
}

/// What a claim hands to the relay for one row: the proof it must show on its terminal write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub message_id: MessageId,
    pub tenant_id: TenantId,
    /// The relay that asked for the claim (even where an unfenced claim did not record it).
    pub owner: RelayId,
    pub token: LeaseToken,
    /// The row's `attempts` right after the claim.
    pub attempts: u32,
    /// Ghost: which claim of this row, by any path, produced this lease (1 for the first).
    /// Set by the [`Auditor`](super::audit::Auditor); the rules never read it, so an unfenced
    /// path that leaves owner and token unchanged cannot hide a superseded claim from S1.
    #[serde(default)]
    pub claim_seq: u32,
}

// Rows and leases are hashed as a few packed words, not field by field: the model checker
// hashes every state it generates (a row took some twenty hasher calls). The packing is
// injective — every field keeps its full width, an absent option sets no presence bit — so equal
// hashes still mean equal values as far as a 64-bit hash can tell.

impl std::hash::Hash for Row {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let present = |o: bool, bit: u32| u64::from(o) << bit;
        let code = self.last_failure_code.map_or(0u64, |c| c as u64 + 1);
        let flags = u64::from(self.tenant_id.0)
            | (self.status as u64) << 16
            | u64::from(self.lease_owner.map_or(0, |o| o.0)) << 24
            | present(self.lease_owner.is_some(), 40)
            | present(self.lease_expires_at.is_some(), 41)
            | present(self.next_attempt_at.is_some(), 42)
            | present(self.published_at.is_some(), 43)
            | present(self.deleted, 44)
            | code << 48;
        state.write_u64(u64::from(self.message_id.0) | u64::from(self.aggregate_id.0) << 32);
        state.write_u64(u64::from(self.aggregate_version) | u64::from(self.attempts) << 32);
        state.write_u64(flags);
        state.write_u64(self.lease_token.0);
        state.write_u64(self.lease_expires_at.map_or(0, |t| t.0));
        state.write_u64(self.next_attempt_at.map_or(0, |t| t.0));
        state.write_u64(self.created_at.0);
        state.write_u64(self.published_at.map_or(0, |t| t.0));
    }
}

impl Lease {
    /// The lease a row holds as a maintenance job reads it: its token and attempts, its owner
    /// (none named: `u16::MAX`), and which claim of the row issued it.
    pub fn of_row(row: &Row, claim_seq: u32) -> Lease {
        Lease {
            message_id: row.message_id,
            tenant_id: row.tenant_id,
            owner: row.lease_owner.unwrap_or(RelayId(u16::MAX)),
            token: row.lease_token,
            attempts: row.attempts,
            claim_seq,
        }
    }
}

impl std::hash::Hash for Lease {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(
            u64::from(self.message_id.0) | u64::from(self.tenant_id.0) << 32 | u64::from(self.owner.0) << 48,
        );
        state.write_u64(self.token.0);
        state.write_u64(u64::from(self.attempts) | u64::from(self.claim_seq) << 32);
    }
}

/// A business row: the aggregate whose version an enqueue moves forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Aggregate {
    pub tenant_id: TenantId,
    pub aggregate_id: AggregateId,
    pub version: u32,
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
