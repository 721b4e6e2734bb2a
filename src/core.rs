//! The pure outbox core: rows, leases, tokens, the retry clock, designs as switches, the auditor.
//!
//! It imports nothing of the project and must never read a clock, do I/O, draw a random number,
//! hold process-wide state or let a hash map's order reach a result. Which designs exist is not
//! its business (`crate::design` names them); it reads a [`Policy`]. Every engine — the model checker, the simulations, the
//! SQL bindings, the trace oracle — calls it; none restates its rules.

pub mod audit;
pub mod design_file;
pub mod outbox;
pub mod policy;
pub mod property;
pub mod row;
pub mod time;

pub use audit::{Auditor, RowGhost, Violation};
pub use audit::{Breach, Doer, ModelNames, Names};
pub use outbox::{
    random_token, ClaimRefusal, ClaimRequest, CoreError, EnqueueRequest, EnqueueResult, Outbox, ReleaseFence,
    ReleaseRequest, RequeueResult, StaleReason, WriteKind, WriteRequest, WriteResult,
};
pub use policy::{
    used_up, Backoff, ClaimFence, Growth, LeaseKind, Policy, RescueBudget, RescueTarget, TokenKind, WriteFence,
};
pub use property::{Ghosts, Property, Situation};
pub use row::{
    Aggregate, AggregateId, FailureCode, IdempotencyKey, Lease, LeaseToken, MessageId, RelayId, Row, Status, TenantId,
};
pub use time::{Duration, Instant};
