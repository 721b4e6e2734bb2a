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
        if !policy.claim_expired_leases {
            // Only the maintenance job takes an in-flight row back.
            predicate.push("status <> 'IN_FLIGHT'".to_string());
        }
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
        ClaimOrder::Due | ClaimOrder::LastClaimed => "COALESCE(next_attempt_at, created_at), message_id",
        ClaimOrder::Created => "created_at, tenant_id, message_id",
    };
    let lock = if d == Dialect::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
    let predicate = if predicate.is_empty() { "TRUE".to_string() } else { predicate.join(" AND ") };
    format!(
        "SELECT message_id FROM messaging_outbox WHERE {predicate} ORDER BY {order} LIMIT {}{lock}",
        d.p(4, "bigint")
    )
}

/// One claimed row's UPDATE: parameters 1 message_id, 2 now + lease, 3 owner, 4 random token,
/// 5 now. Returns tenant_id, lease_token, attempts.
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
        ClaimFence::TokenOnly => set.push(format!("lease_token = {token}")),
        ClaimFence::Unfenced => {}
    }
    if policy.attempts_at == AttemptsAt::Claim {
        set.push("attempts = attempts + 1".into());
    }
    // Every parameter must appear (PostgreSQL types it, SQLite counts it): unused ones are
    // compared away.
    let mut unused = Vec::new();
    if policy.claim_order == ClaimOrder::LastClaimed {
        // The claim's time is the row's due time (underway's `run_at = now()`).
        set.push(format!("created_at = {}, next_attempt_at = NULL", d.p(5, "bigint")));
    } else {
        unused.push(format!(" AND {} IS NOT NULL", d.p(5, "bigint")));
    }
    if matches!(policy.claim_fence, ClaimFence::Unfenced | ClaimFence::TokenOnly) {
        unused.push(format!(" AND {} IS NOT NULL", d.p(3, "text")));
    }
    if !(policy.token_kind == TokenKind::Random
        && matches!(policy.claim_fence, ClaimFence::OwnerAndToken | ClaimFence::TokenOnly))
    {
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
/// 7 max_attempts, 8 backoff base, 9 backoff cap, 10 the attempts the relay's copy counts after
/// this failure. Returns status; no row means Stale.
pub fn write(d: Dialect, policy: &Policy, kind: WriteKind) -> String {
    let mut fence = vec![format!("message_id = {}", d.p(1, "text"))];
    if policy.write_checks_tenant {
        fence.push(format!("tenant_id = {}", d.p(2, "text")));
    }
    let (owner, token) = match policy.fence_of(kind) {
        WriteFence::MessageIdOnly => (false, false),
        WriteFence::StatusOwnerToken => (true, true),
        WriteFence::StatusToken => (false, true),
        WriteFence::StatusOwner => (true, false),
        WriteFence::StatusOnly => (false, false),
    };
    if policy.fence_of(kind) != WriteFence::MessageIdOnly {
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
    let keeps_owner =
        matches!(kind, WriteKind::Ambiguous { .. }) && policy.ambiguous_shape == AmbiguousShape::KeepsOwner;
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
            let exhausts = policy.exhausted_status && policy.budget_in_write && policy.checks_budget(kind);
            if exhausts {
                set.push(format!("status = CASE WHEN {spent} THEN 'EXHAUSTED' ELSE '{next}' END"));
            } else {
                set.push(format!("status = '{next}'"));
            }
            if policy.retry_clock && !keeps_owner {
                // Where the relay decides what its failure write says, it sends the retry time
                // of the attempts its copy counts (parameter 10), not the row's.
                let counted = if policy.budget_in_write { after.clone() } else { d.p(10, "integer") };
                let due = retry_due(d, &counted);
                if exhausts {
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
    let sql = format!("UPDATE messaging_outbox SET {} WHERE {}", set.join(", "), fence.join(" AND "));
    mention_write_params(d, sql, "bigint") + " RETURNING status"
}

/// `now + min(base · 2^(a−1), cap)`, at least 1 ms later, where `a` = `attempts` (the SQL
/// expression for the attempts after the write): a write's parameters 5 now, 8 base, 9 cap.
fn retry_due(d: Dialect, attempts: &str) -> String {
    let doublings = format!("{}({}(({attempts}) - 1, 0), 32)", d.min(), d.max());
    let delay = format!(
        "{}(1, {}({}, {} * (CAST(1 AS BIGINT) << {doublings})))",
        d.max(),
        d.min(),
        d.p(9, "bigint"),
        d.p(8, "bigint")
    );
    format!("{} + {delay}", d.p(5, "bigint"))
}

/// Appends `AND (<p> IS NULL OR TRUE)` for every write parameter the statement does not use:
/// PostgreSQL must type each one, SQLite counts them.
/// `token_ty` is the token's SQL type (`bigint` in messaging_outbox, `text` in outbox_events).
fn mention_write_params(d: Dialect, mut sql: String, token_ty: &str) -> String {
    for (n, ty) in [
        (2, "text"),
        (3, "text"),
        (4, token_ty),
        (5, "bigint"),
        (6, "text"),
        (7, "integer"),
        (8, "bigint"),
        (9, "bigint"),
        (10, "integer"),
    ] {
        let p = d.p(n, ty);
        if !sql.contains(&p) {
            sql.push_str(&format!(" AND ({p} IS NULL OR TRUE)"));
        }
    }
    sql
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

// ---------------------------------------------------------------------------------------------
// seed 003's outbox_events

/// The table a design's rows live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// `messaging_outbox` (V1/V2): every design with counter tokens.
    MessagingOutbox,
    /// seed 003's `outbox_events`: random tokens stored as text, its own five states.
    OutboxEvents,
}

impl Table {
    pub fn of(policy: &Policy) -> Table {
        if policy.token_kind == TokenKind::Random {
            Table::OutboxEvents
        } else {
            Table::MessagingOutbox
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Table::MessagingOutbox => "messaging_outbox",
            Table::OutboxEvents => "outbox_events",
        }
    }
}

/// outbox_events' state as the core's status (docs/decisions.md, 4 and 33): `pending` and
/// `retry_scheduled` are PENDING, `ack_unknown` is AMBIGUOUS, `leased` IN_FLIGHT, `sent` PUBLISHED.
pub const EVENTS_STATUS: &str = "CASE status WHEN 'pending' THEN 'PENDING' WHEN 'retry_scheduled' THEN 'PENDING' \
     WHEN 'ack_unknown' THEN 'AMBIGUOUS' WHEN 'leased' THEN 'IN_FLIGHT' WHEN 'sent' THEN 'PUBLISHED' END";

/// Seed 003's claim, with `now` bound: parameters as [`claim_select`]'s (1 tenant, 2 now,
/// 3 max_attempts, 4 batch). A row is claimable when it waits (`pending`, `retry_scheduled`,
/// `ack_unknown`) and its `available_at` has passed, or its lease has expired; within the budget.
pub fn events_claim_select(d: Dialect) -> String {
    let now = d.p(2, "bigint");
    let lock = if d == Dialect::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
    format!(
        "SELECT event_id FROM outbox_events WHERE tenant_id = {} AND attempts < {} \
         AND ((status IN ('pending', 'retry_scheduled', 'ack_unknown') AND available_at <= {now}) \
         OR (status = 'leased' AND lease_until <= {now})) \
         ORDER BY created_at, tenant_id, event_id LIMIT {}{lock}",
        d.p(1, "text"),
        d.p(3, "integer"),
        d.p(4, "bigint")
    )
}

/// Seed 003's claim UPDATE: parameters as [`claim_update`]'s (1 event_id, 2 now + lease,
/// 3 owner, 4 the fresh token as text). Returns tenant_id, lease_token, attempts.
pub fn events_claim_update(d: Dialect) -> String {
    format!(
        "UPDATE outbox_events SET status = 'leased', attempts = attempts + 1, leased_by = {}, lease_token = {}, \
         lease_until = {} WHERE event_id = {} AND {} IS NOT NULL RETURNING tenant_id, lease_token, attempts",
        d.p(3, "text"),
        d.p(4, "text"),
        d.p(2, "bigint"),
        d.p(1, "text"),
        d.p(5, "bigint")
    )
}

/// A terminal write on outbox_events, parameters as [`write`]'s (the token as text). Fenced on
/// tenant, `leased` and the token; `None` for a write the table has no state for (FAILED,
/// EXHAUSTED). Returns the status as the core's.
pub fn events_write(d: Dialect, kind: WriteKind) -> Option<String> {
    let state = match kind {
        WriteKind::Published => "sent",
        WriteKind::Retry { .. } => "retry_scheduled",
        WriteKind::Ambiguous { .. } => "ack_unknown",
        WriteKind::Failed { .. } | WriteKind::Exhausted { .. } => return None,
    };
    let mut set = vec![format!("status = '{state}'"), "leased_by = NULL".into(), "lease_until = NULL".into()];
    if state != "sent" {
        set.push(format!("available_at = {}", retry_due(d, "attempts")));
    }
    let sql = format!(
        "UPDATE outbox_events SET {} WHERE event_id = {} AND tenant_id = {} AND status = 'leased' AND lease_token = {}",
        set.join(", "),
        d.p(1, "text"),
        d.p(2, "text"),
        d.p(4, "text")
    );
    Some(mention_write_params(d, sql, "text") + &format!(" RETURNING {EVENTS_STATUS}"))
}

/// Every outbox_events row in [`ROW_COLUMNS`]' shape: the retry time is `available_at` once it
/// differs from `created_at` (a retry is always later), and the table keeps no failure code
/// and no publication time.
pub fn events_rows() -> String {
    format!(
        "SELECT event_id, tenant_id, request_id, aggregate_version, {EVENTS_STATUS}, attempts, leased_by, lease_token, \
         lease_until, CASE WHEN available_at = created_at THEN NULL ELSE available_at END, CAST(NULL AS TEXT), created_at, \
         CAST(NULL AS BIGINT) FROM outbox_events ORDER BY event_id"
    )
}
