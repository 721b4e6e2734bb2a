//! The core's operations as SQL text, for SQLite and PostgreSQL, from a design's [`Policy`].
//!
//! Each switch of the policy becomes a clause — the claim's predicate and order, what the claim
//! sets, the terminal write's fence and what it sets — so every design the core knows (variants
//! and mutants with counter tokens) has its own statements. The differential tests then check
//! that these statements do to a real table what the core does to its rows.

use crate::core::policy::{AmbiguousShape, AttemptsAt, BudgetPredicate, ClaimFence, ClaimOrder, TokenKind, WriteFence};
use crate::core::{Policy, WriteKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The n-th positional parameter (1-based), typed where PostgreSQL needs it.
    fn p(self, n: usize, ty: &str) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}::{ty}"),
        }
    }

    fn min(self) -> &'static str {
        match self {
            Dialect::Sqlite => "MIN",
            Dialect::Postgres => "LEAST",
        }
    }

    fn max(self) -> &'static str {
        match self {
            Dialect::Sqlite => "MAX",
            Dialect::Postgres => "GREATEST",
        }
    }
}

/// The claim's SELECT: parameters 1 tenant, 2 now, 3 max_attempts, 4 batch. Returns message_id.
/// PostgreSQL locks what it returns and skips rows another transaction holds (`SKIP LOCKED`).
pub fn claim_select(d: Dialect, policy: &Policy) -> String {
    let mut predicate = Vec::new();
    if policy.claim_by_tenant {
        predicate.push(format!("tenant_id = {}", d.p(1, "text")));
    }
    if !policy.claim_terminal {
        predicate.push("status IN ('PENDING', 'AMBIGUOUS', 'IN_FLIGHT')".to_string());
    }
    let now = d.p(2, "bigint");
    if !policy.claim_live_leases {
        predicate.push(format!("(lease_expires_at IS NULL OR lease_expires_at <= {now})"));
    }
    if policy.retry_clock {
        predicate.push(format!("(next_attempt_at IS NULL OR next_attempt_at <= {now})"));
    }
    match policy.budget {
        BudgetPredicate::Strict => predicate.push(format!("attempts < {}", d.p(3, "integer"))),
        BudgetPredicate::OneOver => predicate.push(format!("attempts <= {}", d.p(3, "integer"))),
        BudgetPredicate::Absent => {}
    }
    // Every parameter must appear for PostgreSQL to type it: unused ones are compared away.
    let mut unused = Vec::new();
    if !policy.claim_by_tenant {
        unused.push(format!("{} IS NOT NULL", d.p(1, "text")));
    }
    if policy.claim_live_leases && !policy.retry_clock {
        unused.push(format!("{now} IS NOT NULL"));
    }
    if policy.budget == BudgetPredicate::Absent {
        unused.push(format!("{} IS NOT NULL", d.p(3, "integer")));
    }
    predicate.extend(unused);
    let order = match policy.claim_order {
        ClaimOrder::Due => "COALESCE(next_attempt_at, created_at), message_id",
        ClaimOrder::Created => "created_at, tenant_id, message_id",
    };
    let lock = if d == Dialect::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
    let predicate = if predicate.is_empty() { "TRUE".to_string() } else { predicate.join(" AND ") };
    format!(
        "SELECT message_id FROM messaging_outbox WHERE {predicate} ORDER BY {order} LIMIT {}{lock}",
        d.p(4, "bigint")
    )
}

/// One claimed row's UPDATE: parameters 1 message_id, 2 now + lease, 3 owner, 4 random token.
/// Returns tenant_id, lease_token, attempts.
pub fn claim_update(d: Dialect, policy: &Policy) -> String {
    let mut set = vec!["status = 'IN_FLIGHT'".to_string(), format!("lease_expires_at = {}", d.p(2, "bigint"))];
    let token = match policy.token_kind {
        TokenKind::Counter => "lease_token + 1".to_string(),
        TokenKind::Random => d.p(4, "bigint"),
    };
    match policy.claim_fence {
        ClaimFence::OwnerAndToken => {
            set.push(format!("lease_owner = {}", d.p(3, "text")));
            set.push(format!("lease_token = {token}"));
        }
        ClaimFence::OwnerOnly => set.push(format!("lease_owner = {}", d.p(3, "text"))),
        ClaimFence::Unfenced => {}
    }
    if policy.attempts_at == AttemptsAt::Claim {
        set.push("attempts = attempts + 1".into());
    }
    // Every parameter must appear (PostgreSQL types it, SQLite counts it): unused ones are
    // compared away.
    let mut unused = Vec::new();
    if policy.claim_fence == ClaimFence::Unfenced {
        unused.push(format!(" AND {} IS NOT NULL", d.p(3, "text")));
    }
    if !(policy.token_kind == TokenKind::Random && policy.claim_fence == ClaimFence::OwnerAndToken) {
        unused.push(format!(" AND {} IS NOT NULL", d.p(4, "bigint")));
    }
    format!(
        "UPDATE messaging_outbox SET {} WHERE message_id = {}{} RETURNING tenant_id, lease_token, attempts",
        set.join(", "),
        d.p(1, "text"),
        unused.concat()
    )
}

/// A terminal write: parameters 1 message_id, 2 tenant, 3 owner, 4 token, 5 now, 6 code,
/// 7 max_attempts, 8 backoff base, 9 backoff cap. Returns status; no row means Stale.
pub fn write(d: Dialect, policy: &Policy, kind: WriteKind) -> String {
    let mut fence = vec![format!("message_id = {}", d.p(1, "text"))];
    if policy.write_checks_tenant {
        fence.push(format!("tenant_id = {}", d.p(2, "text")));
    }
    let (owner, token) = match policy.write_fence {
        WriteFence::MessageIdOnly => (false, false),
        WriteFence::StatusOwnerToken => (true, true),
        WriteFence::StatusToken => (false, true),
        WriteFence::StatusOwner => (true, false),
    };
    if policy.write_fence != WriteFence::MessageIdOnly {
        fence.push("status = 'IN_FLIGHT'".into());
    }
    if owner {
        fence.push(format!("lease_owner = {}", d.p(3, "text")));
    }
    if token {
        fence.push(format!("lease_token = {}", d.p(4, "bigint")));
    }
    let now = d.p(5, "bigint");
    let code = d.p(6, "text");
    let max = d.p(7, "integer");
    let keeps_owner = matches!(kind, WriteKind::Ambiguous { .. }) && policy.ambiguous_shape == AmbiguousShape::KeepsOwner;
    let mut set = vec!["lease_expires_at = NULL".to_string()];
    if !keeps_owner {
        set.push("lease_owner = NULL".into());
    }
    match kind {
        WriteKind::Published => {
            set.push("status = 'PUBLISHED'".into());
            set.push(format!("published_at = {now}"));
        }
        WriteKind::Ambiguous { .. } | WriteKind::Retry { .. } => {
            // SET sees the old row: the attempts after this write are `attempts + inc`.
            let inc = if policy.attempts_at == AttemptsAt::FailureWrite { " + 1" } else { "" };
            let after = format!("attempts{inc}");
            if !inc.is_empty() {
                set.push(format!("attempts = {after}"));
            }
            set.push(format!("last_failure_code = {code}"));
            let next = if matches!(kind, WriteKind::Ambiguous { .. }) { "AMBIGUOUS" } else { "PENDING" };
            let spent = format!("({after}) >= {max}");
            if policy.exhausted_status {
                set.push(format!("status = CASE WHEN {spent} THEN 'EXHAUSTED' ELSE '{next}' END"));
            } else {
                set.push(format!("status = '{next}'"));
            }
            if policy.retry_clock && !keeps_owner {
                // min(base · 2^(a−1), cap), at least 1 ms; a = attempts after the write.
                let doublings = format!("{}({}(({after}) - 1, 0), 32)", d.min(), d.max());
                let delay = format!(
                    "{}(1, {}({}, {} * (CAST(1 AS BIGINT) << {doublings})))",
                    d.max(),
                    d.min(),
                    d.p(9, "bigint"),
                    d.p(8, "bigint")
                );
                let due = format!("{now} + {delay}");
                if policy.exhausted_status {
                    set.push(format!("next_attempt_at = CASE WHEN {spent} THEN next_attempt_at ELSE {due} END"));
                } else {
                    set.push(format!("next_attempt_at = {due}"));
                }
            }
        }
        WriteKind::Failed { .. } => {
            set.push("status = 'FAILED'".into());
            set.push(format!("last_failure_code = {code}"));
        }
        WriteKind::Exhausted { .. } => {
            set.push("status = 'EXHAUSTED'".into());
            set.push(format!("last_failure_code = {code}"));
        }
    }
    let mut sql = format!("UPDATE messaging_outbox SET {} WHERE {}", set.join(", "), fence.join(" AND "));
    // Every parameter must appear, used or not (PostgreSQL types it, SQLite counts it).
    for (n, ty) in [(2, "text"), (3, "text"), (4, "bigint"), (5, "bigint"), (6, "text"), (7, "integer"), (8, "bigint"), (9, "bigint")] {
        let p = d.p(n, ty);
        if !sql.contains(&p) {
            sql.push_str(&format!(" AND ({p} IS NULL OR TRUE)"));
        }
    }
    sql + " RETURNING status"
}

/// The reaper: parameters 1 now, 2 max_attempts. Returns message_id.
pub fn reap(d: Dialect) -> String {
    format!(
        "UPDATE messaging_outbox SET status = 'EXHAUSTED', lease_owner = NULL, lease_expires_at = NULL, \
         last_failure_code = 'budget_spent' \
         WHERE status = 'IN_FLIGHT' AND lease_expires_at <= {} AND attempts >= {} RETURNING message_id",
        d.p(1, "bigint"),
        d.p(2, "integer")
    )
}

/// Every column of a row, in [`crate::core::Row`]'s order.
pub const ROW_COLUMNS: &str = "message_id, tenant_id, aggregate_id, aggregate_version, status, attempts, lease_owner, \
     lease_token, lease_expires_at, next_attempt_at, last_failure_code, created_at, published_at";
