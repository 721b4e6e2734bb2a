//! Differential conformance: one operation sequence run on the core (the model) and on a store;
//! after every step the results and the whole table must agree.
//!
//! proptest generates the sequences — enqueues (some with a stale version), claims by several
//! owners of several tenants, terminal writes presenting current and superseded leases, reaps,
//! time advancing — and shrinks a divergence to a minimal sequence, which is reported with the
//! SQL the store ran, ready to paste.

use outbox_check::core::{
    AggregateId, ClaimRefusal, ClaimRequest, Duration, EnqueueRequest, FailureCode, Instant, Lease, MessageId, Outbox,
    Policy, RelayId, Row, TenantId, WriteKind, WriteRequest, WriteResult,
};
use outbox_check::store::bind::{MemoryStore, Store, StoreError};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde::Serialize;

/// One step of a conformance sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// The application enqueues the next message; `stale` with a version one too far.
    Enqueue {
        tenant: u16,
        aggregate: u32,
        stale: bool,
    },
    Claim {
        owner: u16,
        tenant: u16,
        batch: u32,
    },
    /// A terminal write presenting the `pick`-th lease ever issued (mod their number): current
    /// or superseded; `misrouted`, with the other tenant's id in place of the lease's.
    Write {
        pick: usize,
        /// The write, by its statement's name (`mark_retry`) in JSON.
        #[serde(serialize_with = "write_name")]
        kind: u8,
        /// Its failure code, by name (`timeout`) in JSON.
        #[serde(serialize_with = "code_name")]
        code: u8,
        misrouted: bool,
    },
    Reap,
    /// The rescuer reads the first expired lease (designs with a rescuer).
    RescueRead,
    /// The rescuer moves the row of the `pick`-th read so far (mod their number): the latest,
    /// or one read before the row was claimed again.
    Rescue {
        pick: usize,
    },
    Advance {
        ms: u64,
    },
}

/// The fixed parameters of a sequence. `max_attempts` is the budget of a store whose
/// statements do not take `:max_attempts`; the others run the budget each case draws.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Bounds {
    pub max_attempts: u32,
    pub lease_ms: u64,
    pub tenants: u16,
    pub owners: u16,
    pub max_ops: usize,
    /// The model's backoff cap.
    pub backoff_cap_ms: u64,
    /// What the retry ladders wait between attempts: the longest delay the backoff gives within
    /// their budgets, at most the cap (River's cap is Go's longest duration, 292 years).
    #[serde(skip)]
    pub ladder_wait_ms: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_attempts: 3,
            lease_ms: 100,
            tenants: 2,
            owners: 3,
            max_ops: 40,
            backoff_cap_ms: 60_000,
            ladder_wait_ms: 60_000,
        }
    }
}

/// One random case: the budget it runs with and its operations.
pub type Case = (u32, Vec<Op>);

/// Most cases are random operations under a budget of 1 to 6; one in eight is a retry ladder —
/// one row claimed and failed 4 to 7 times under a budget of 8 to 10, waiting out the backoff's
/// cap between attempts — so the backoff reaches its cap (at the 7th attempt for a base 64
/// times smaller), which a budget of 3 never lets it do. A ladder never spends its budget, so
/// every write in it presents the row's live lease.
pub fn cases(bounds: Bounds) -> impl Strategy<Value = Case> {
    let tenants = bounds.tenants.max(1);
    let owners = bounds.owners.max(1);
    let op = prop_oneof![
        3 => (0..tenants, 0..4u32, prop::bool::weighted(0.15)).prop_map(|(tenant, aggregate, stale)| Op::Enqueue { tenant, aggregate, stale }),
        4 => (0..owners, 0..tenants, 1..4u32).prop_map(|(owner, tenant, batch)| Op::Claim { owner, tenant, batch }),
        5 => (any::<usize>(), 0..5u8, 0..4u8, prop::bool::weighted(0.15))
            .prop_map(|(pick, kind, code, misrouted)| Op::Write { pick, kind, code, misrouted }),
        1 => Just(Op::Reap),
        1 => Just(Op::RescueRead),
        1 => any::<usize>().prop_map(|pick| Op::Rescue { pick }),
        3 => prop_oneof![Just(1u64), Just(50), Just(100), Just(150), Just(1000), Just(20_000)].prop_map(|ms| Op::Advance { ms }),
    ];
    let random = (1..=6u32, prop::collection::vec(op, 1..=bounds.max_ops.max(1)));
    let wait = bounds.ladder_wait_ms.max(bounds.lease_ms) + 1;
    let ladder = (8..=10u32, 0..tenants, prop::collection::vec((0..owners, 1..3u8, 0..4u8), 4..=7)).prop_map(
        move |(budget, tenant, rungs)| {
            let mut ops = vec![Op::Enqueue { tenant, aggregate: 0, stale: false }];
            for (pick, (owner, kind, code)) in rungs.into_iter().enumerate() {
                ops.push(Op::Claim { owner, tenant, batch: 1 });
                ops.push(Op::Write { pick, kind, code, misrouted: false });
                ops.push(Op::Advance { ms: wait });
            }
            (budget, ops)
        },
    );
    prop_oneof![7 => random, 1 => ladder]
}

/// Where a store first disagreed with the model.
#[derive(Clone, Debug, Serialize)]
pub struct Divergence {
    /// The attempt budget the sequence ran with.
    pub budget: u32,
    /// 1-based step of the sequence.
    pub step: usize,
    pub op: Op,
    pub ops: Vec<Op>,
    pub expected: String,
    pub got: String,
    /// The SQL the store ran up to and including the diverging step.
    pub sql: Vec<String>,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Op::Enqueue { tenant, aggregate, stale } => {
                write!(
                    f,
                    "enqueue for {} {}{}",
                    TenantId(tenant),
                    AggregateId(aggregate),
                    if stale { " with a stale version" } else { "" }
                )
            }
            Op::Claim { owner, tenant, batch } => {
                write!(f, "claim by {} for {}, batch {batch}", RelayId(owner), TenantId(tenant))
            }
            Op::Write { pick, kind: k, code, misrouted } => {
                write!(f, "{} presenting one of the leases issued so far (pick {pick})", kind(k, code).name())?;
                if misrouted {
                    f.write_str(" with the other tenant's id")?;
                }
                Ok(())
            }
            Op::Reap => f.write_str("reap"),
            Op::RescueRead => f.write_str("the rescuer reads the first expired lease"),
            Op::Rescue { pick } => write!(f, "the rescuer moves a row it read (pick {pick})"),
            Op::Advance { ms } => write!(f, "time advances {ms} ms"),
        }
    }
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "step {} ({}) diverged:\n  model: {}\n  store: {}", self.step, self.op, self.expected, self.got)?;
        writeln!(
            f,
            "sequence ({}, budget {}):",
            outbox_check::report::count(self.ops.len() as u64, "step"),
            self.budget
        )?;
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  {:>2}. {op}", i + 1)?;
        }
        writeln!(f, "SQL the store ran (paste after the schema or migrations):")?;
        for line in &self.sql {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// A store's answer as a person reads it.
trait Said {
    fn said(&self) -> String;
}

impl Said for outbox_check::core::EnqueueResult {
    fn said(&self) -> String {
        self.to_string()
    }
}

impl Said for WriteResult {
    fn said(&self) -> String {
        self.to_string()
    }
}

impl Said for Vec<Lease> {
    fn said(&self) -> String {
        if self.is_empty() {
            return "no row".into();
        }
        let leases: Vec<String> = self
            .iter()
            .map(|l| {
                format!("{} (token {}, attempts {}, {} of {})", l.message_id, l.token, l.attempts, l.owner, l.tenant_id)
            })
            .collect();
        leases.join(", ")
    }
}

impl Said for Vec<MessageId> {
    fn said(&self) -> String {
        if self.is_empty() {
            return "no row moved".into();
        }
        self.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
    }
}

fn show<T: Said>(r: &Result<T, StoreError>) -> String {
    match r {
        Ok(v) => v.said(),
        Err(e) => format!("error: {e}"),
    }
}

/// The model and the store answered alike.
fn same<T: PartialEq>(a: &Result<T, StoreError>, b: &Result<T, StoreError>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(x), Err(y)) => x.to_string() == y.to_string(),
        _ => false,
    }
}

/// Two claims took the same leases: the rows a claim took are a set — the order a statement
/// returns them in is its own (RETURNING keeps none), and the harness could only guess the
/// design's order from columns a table need not have.
fn same_claim(a: &Result<Vec<Lease>, StoreError>, b: &Result<Vec<Lease>, StoreError>, store: &dyn Store) -> bool {
    let sorted = |r: &Result<Vec<Lease>, StoreError>| -> Result<Vec<Lease>, String> {
        r.as_ref().map_err(|e| e.to_string()).map(|leases| {
            let mut leases: Vec<Lease> =
                leases.iter().map(|l| Lease { token: store.view_token(l.token), ..*l }).collect();
            leases.sort_by_key(|l| l.message_id);
            leases
        })
    };
    match (sorted(a), sorted(b)) {
        (Ok(x), Ok(y)) => x == y,
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}

/// Two rescue reads found the same row, with the token as the store's table shows it.
fn same_read(
    a: &Result<Option<(MessageId, outbox_check::core::LeaseToken)>, StoreError>,
    b: &Result<Option<(MessageId, outbox_check::core::LeaseToken)>, StoreError>,
    store: &dyn Store,
) -> bool {
    let seen = |r: &Result<Option<(MessageId, outbox_check::core::LeaseToken)>, StoreError>| {
        r.as_ref().map(|read| read.map(|(m, t)| (m, store.view_token(t)))).map_err(|e| e.to_string())
    };
    seen(a) == seen(b)
}

/// The result kinds compared: a Stale's reason is not (SQL cannot tell it from 0 rows).
fn same_write(a: &WriteResult, b: &WriteResult, store: &dyn Store) -> bool {
    match (a, b) {
        // As the table names them: one name may stand for two statuses no statement tells apart.
        (WriteResult::Applied { status: x }, WriteResult::Applied { status: y }) => {
            store.view_status(*x) == store.view_status(*y)
        }
        (WriteResult::Stale { .. }, WriteResult::Stale { .. }) => true,
        _ => false,
    }
}

fn write_name<S: serde::Serializer>(k: &u8, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind(*k, 0).name())
}

fn code_name<S: serde::Serializer>(c: &u8, s: S) -> Result<S::Ok, S::Error> {
    match kind(1, *c) {
        WriteKind::Ambiguous { code } => s.serialize_str(code.as_str()),
        _ => unreachable!("kind 1 is the AMBIGUOUS write, which carries a code"),
    }
}

fn kind(kind: u8, code: u8) -> WriteKind {
    let code = [FailureCode::Timeout, FailureCode::Unavailable, FailureCode::Rejected, FailureCode::Timeout]
        [code as usize % 4];
    match kind % 5 {
        0 => WriteKind::Published,
        1 => WriteKind::Ambiguous { code },
        2 => WriteKind::Retry { code },
        3 => WriteKind::Failed { code },
        _ => WriteKind::Exhausted { code },
    }
}

/// What the random cases exercised, counted over every case run: the situations a store's
/// statements can get wrong and a run may never present. A conformance report lists the ones
/// no case reached ([`Exercised::missing`]), so "agrees" says what it covered.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Exercised {
    /// Enqueues presenting an aggregate version one too far.
    pub stale_enqueues: u64,
    /// Writes sent with the other tenant's id in place of their lease's.
    pub misrouted_writes: u64,
    /// Claims run while another tenant's rows waited.
    pub claims_beside_another_tenant: u64,
    /// Writes presenting a lease that is not the latest its row was given.
    pub superseded_writes: u64,
    /// The budgets the cases ran with.
    pub budgets: std::collections::BTreeSet<u32>,
    /// Steps after which a row had spent its budget (its attempts at the budget, or EXHAUSTED).
    pub budgets_spent: u64,
    /// Retries and ambiguous writes whose backoff was the cap.
    pub retries_at_the_cap: u64,
    /// Reaps that moved a row.
    pub reaps: u64,
    /// Rescues that moved a row.
    pub rescues: u64,
    /// Scheduler runs that made a row claimable again.
    pub schedules: u64,
    /// The store takes `:max_attempts`; it has a reaper; it has a rescuer (`None` before a case).
    pub takes_budget: Option<bool>,
    pub reaper: Option<bool>,
    pub rescuer: Option<bool>,
    /// The design has a scheduler: whether the store has one too (`None`: the design has none).
    pub scheduler: Option<bool>,
    /// Tenants the sequences ran (1 where the table keeps none: another tenant's situations
    /// cannot arise, and are not listed as missing).
    pub tenants: u16,
    /// The model's backoff cap, in milliseconds.
    pub backoff_cap_ms: u64,
}

impl Exercised {
    /// What no case exercised, in words, each with why where the store's statements decide it.
    pub fn missing(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut gap = |count: u64, what: &str| {
            if count == 0 {
                out.push(what.to_string());
            }
        };
        gap(self.stale_enqueues, "an enqueue with a stale aggregate version");
        if self.tenants != 1 {
            gap(self.misrouted_writes, "a write presenting another tenant's id");
            gap(self.claims_beside_another_tenant, "a claim while another tenant's rows waited");
        }
        gap(self.superseded_writes, "a write presenting a superseded lease");
        gap(self.budgets_spent, "a row that spent its budget");
        gap(self.retries_at_the_cap, &format!("a retry whose backoff reached its cap ({} ms)", self.backoff_cap_ms));
        if self.reaper == Some(true) {
            gap(self.reaps, "a reap that moved a row");
        }
        if self.rescuer == Some(true) {
            gap(self.rescues, "a rescue that moved a row");
        }
        match self.scheduler {
            Some(true) => gap(self.schedules, "a scheduler run that made a row claimable"),
            Some(false) => out.push("a scheduler run (your profile has no schedule statement)".to_string()),
            None => {}
        }
        if self.budgets.iter().all(|&b| b == 3) {
            out.push(if self.takes_budget == Some(false) {
                "a budget other than 3 (no statement takes :max_attempts)".to_string()
            } else {
                "a budget other than 3".to_string()
            });
        }
        out
    }

    fn spent(&mut self, rows: &[Row], budget: u32) {
        let spent = |r: &Row| r.attempts >= budget || r.status == outbox_check::core::Status::Exhausted;
        self.budgets_spent += u64::from(rows.iter().any(spent));
    }
}

/// Runs `ops` on the model and the store side by side; returns the number of operations run.
/// `bounds.max_attempts` is the case's budget.
pub fn execute(
    ops: &[Op],
    bounds: Bounds,
    model: &mut dyn Store,
    store: &mut dyn Store,
    exercised: &mut Exercised,
) -> Result<usize, Box<Divergence>> {
    exercised.budgets.insert(bounds.max_attempts);
    exercised.takes_budget = Some(store.takes_budget());
    exercised.reaper = Some(store.can_reap());
    exercised.rescuer = Some(model.can_rescue() && store.can_rescue());
    exercised.scheduler = model.can_schedule().then(|| store.can_schedule());
    exercised.tenants = bounds.tenants;
    exercised.backoff_cap_ms = bounds.backoff_cap_ms;
    let mut now = Instant(1_000);
    let mut next_message = 0u32;
    let mut leases: Vec<Lease> = Vec::new();
    let mut reads: Vec<(MessageId, outbox_check::core::LeaseToken)> = Vec::new();
    let diverge = |step: usize, expected: String, got: String, store: &dyn Store| {
        Box::new(Divergence {
            budget: bounds.max_attempts,
            step: step + 1,
            op: ops[step].clone(),
            ops: ops.to_vec(),
            expected,
            got,
            sql: store.log().to_vec(),
        })
    };
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Enqueue { tenant, aggregate, stale } => {
                let (tenant_id, aggregate_id) = (TenantId(tenant), AggregateId(aggregate));
                let current = model.rows().map_err(|e| diverge(step, "rows".into(), e.to_string(), store))?;
                let version = current
                    .iter()
                    .filter(|r| r.tenant_id == tenant_id && r.aggregate_id == aggregate_id)
                    .map(|r| r.aggregate_version)
                    .max()
                    .unwrap_or(0);
                let req = EnqueueRequest {
                    tenant_id,
                    aggregate_id,
                    expected_version: version + u32::from(stale),
                    message_id: MessageId(next_message),
                    now,
                };
                let (a, b) = (model.enqueue(&req), store.enqueue(&req));
                if matches!(a, Ok(outbox_check::core::EnqueueResult::Applied { .. })) {
                    next_message += 1;
                }
                exercised.stale_enqueues += u64::from(stale);
                if !same(&a, &b) {
                    return Err(diverge(step, show(&a), show(&b), store));
                }
            }
            Op::Claim { owner, tenant, batch } => {
                let req = ClaimRequest {
                    tenant_id: TenantId(tenant),
                    owner: RelayId(owner),
                    // A claim whose LIMIT is written in takes at most that many.
                    batch: store.fixed_batch().map_or(batch, |fixed| batch.min(fixed)),
                    lease: Duration(bounds.lease_ms),
                    now,
                    max_attempts: bounds.max_attempts,
                    retry_due: true,
                };
                let waiting = model.rows().unwrap_or_default();
                if waiting
                    .iter()
                    .any(|r| r.tenant_id != req.tenant_id && r.status == outbox_check::core::Status::Pending)
                {
                    exercised.claims_beside_another_tenant += 1;
                }
                let (a, b) = claim_on_both(model, store, &req);
                if !same_claim(&a, &b, &*store) {
                    return Err(diverge(step, show(&a), show(&b), store));
                }
                leases.extend(a.unwrap_or_default());
            }
            Op::Write { pick, kind: k, code, misrouted } => {
                if leases.is_empty() {
                    continue;
                }
                let mut lease = leases[pick % leases.len()];
                // The write a relay of the design sends: a failure that spends the lease's budget
                // goes as the exhaustion write (decision 74).
                let kind = match model.core_policy() {
                    Some(policy) => policy.failure_write(kind(k, code), lease.attempts, bounds.max_attempts),
                    None => kind(k, code),
                };
                // The exhaustion write goes only where a relay of the design sends it: for a
                // failure that spends the budget, or a claim past it. Elsewhere no relay sends
                // it, and a queue whose one failure write decides from the attempts (Graphile
                // Worker's) could not be told from one that ignores them.
                if let (WriteKind::Exhausted { .. }, Some(policy)) = (kind, model.core_policy()) {
                    let spent = policy.failure_spends_budget(lease.attempts, bounds.max_attempts)
                        || policy.claim_past_budget_write(lease.attempts, bounds.max_attempts).is_some();
                    if !spent {
                        continue;
                    }
                }
                // A write the store's table has no state for is not sent (outbox_events has no
                // FAILED or EXHAUSTED; its design never writes them).
                if !store.can_write(&kind) {
                    continue;
                }
                if leases.iter().rposition(|l| l.message_id == lease.message_id) != Some(pick % leases.len()) {
                    exercised.superseded_writes += 1;
                }
                // One tenant (a table that keeps none): no other tenant's id to present.
                if misrouted && bounds.tenants > 1 {
                    lease.tenant_id = TenantId((lease.tenant_id.0 + 1) % bounds.tenants);
                    exercised.misrouted_writes += 1;
                }
                let req = WriteRequest { lease, kind, now, max_attempts: bounds.max_attempts };
                let (a, b) = (model.write(&req), store.write(&req));
                match &a {
                    Ok(WriteResult::Applied { .. })
                        if matches!(req.kind, WriteKind::Retry { .. } | WriteKind::Ambiguous { .. }) =>
                    {
                        let row =
                            model.rows().unwrap_or_default().into_iter().find(|r| r.message_id == lease.message_id);
                        if row
                            .and_then(|r| r.retry_at())
                            .is_some_and(|at| at.0.saturating_sub(now.0) == bounds.backoff_cap_ms)
                        {
                            exercised.retries_at_the_cap += 1;
                        }
                    }
                    _ => {}
                }
                let same = match (&a, &b) {
                    (Ok(x), Ok(y)) => same_write(x, y, &*store),
                    _ => same(&a, &b),
                };
                if !same {
                    return Err(diverge(step, show(&a), show(&b), store));
                }
            }
            Op::Reap if !store.can_reap() => continue,
            Op::Reap => {
                let (a, b) = (model.reap(now, bounds.max_attempts), store.reap(now, bounds.max_attempts));
                if !same(&a, &b) {
                    return Err(diverge(step, show(&a), show(&b), store));
                }
                exercised.reaps += u64::from(a.is_ok_and(|moved| !moved.is_empty()));
            }
            Op::RescueRead | Op::Rescue { .. } if !(model.can_rescue() && store.can_rescue()) => continue,
            // A rescuer that moves every expired lease in one statement: the design's rescuer
            // moving them one after another (the core's `rescue_all`); the tables say the rest.
            Op::RescueRead if store.sweeps() => continue,
            Op::Rescue { .. } if store.sweeps() => {
                let (a, b) = (model.rescue_all(now, bounds.max_attempts), store.rescue_all(now, bounds.max_attempts));
                if let Err(e) = b {
                    return Err(diverge(step, show(&a), e.to_string(), store));
                }
                exercised.rescues += a.map_or(0, |moved| moved.len() as u64);
            }
            Op::RescueRead => {
                let (a, b) = (model.rescue_read(now), store.rescue_read(now));
                if !same_read(&a, &b, &*store) {
                    return Err(diverge(step, read_said(&a), read_said(&b), store));
                }
                reads.extend(a.ok().flatten());
            }
            Op::Rescue { pick } => {
                if reads.is_empty() {
                    continue;
                }
                let req = rescue_request(model, reads[pick % reads.len()], now, bounds.max_attempts)
                    .map_err(|e| diverge(step, "rows".into(), e.to_string(), store))?;
                let (a, b) = (model.rescue(&req, bounds.max_attempts), store.rescue(&req, bounds.max_attempts));
                exercised.rescues += u64::from(matches!(a, Ok(WriteResult::Applied { .. })));
                let same = match (&a, &b) {
                    (Ok(x), Ok(y)) => same_write(x, y, &*store),
                    _ => same(&a, &b),
                };
                if !same {
                    return Err(diverge(step, show(&a), show(&b), store));
                }
            }
            Op::Advance { ms } => {
                now = now.plus(Duration(ms));
                // A design's scheduler runs as time passes (River's every second), on both sides.
                if model.can_schedule() && store.can_schedule() {
                    let (a, b) = (model.schedule(now), store.schedule(now));
                    if !same(&a, &b) {
                        return Err(diverge(step, show(&a), show(&b), store));
                    }
                    exercised.schedules += u64::from(a.is_ok_and(|moved| !moved.is_empty()));
                }
            }
        }
        // The model's table, read once: for what the step exercised and for the comparison.
        let rows = model.rows();
        if let Ok(rows) = &rows {
            exercised.spent(rows, bounds.max_attempts);
        }
        let (a, b) = (rows.map(|rows| rows.into_iter().map(|r| store.view(r)).collect::<Vec<_>>()), store.rows());
        if !same(&a, &b) {
            let (a, b) = (a.unwrap_or_default(), b.map_err(|e| diverge(step, "rows".into(), e.to_string(), store))?);
            let (x, y) = first_difference(&a, &b);
            return Err(diverge(step, format!("table: {x}"), format!("table: {y}"), store));
        }
    }
    Ok(ops.len())
}

/// The rescuer's move of the row it read as `read`: back to PENDING with budget left, else to
/// EXHAUSTED (FAILED in a design without it), as the world's rescuer does; fenced as the model's
/// design says.
fn rescue_request(
    model: &mut dyn Store,
    read: (MessageId, outbox_check::core::LeaseToken),
    now: Instant,
    max_attempts: u32,
) -> Result<outbox_check::core::ReleaseRequest, StoreError> {
    let policy = model.core_policy().ok_or_else(|| StoreError::Setup("the model is the core".into()))?;
    let rows = model.rows()?;
    let row = rows.iter().find(|r| r.message_id == read.0);
    let lease = Lease {
        message_id: read.0,
        tenant_id: row.map_or(TenantId(0), |r| r.tenant_id),
        owner: RelayId(u16::MAX),
        token: read.1,
        attempts: row.map_or(0, |r| r.attempts),
        claim_seq: 0,
    };
    let fence = policy.rescue.ok_or_else(|| StoreError::Setup("the design has no rescuer".into()))?;
    Ok(policy.rescue_request(lease, fence, lease.attempts, max_attempts, now))
}

/// The first row where two tables differ, in words: the fields that differ, by name.
fn first_difference(a: &[Row], b: &[Row]) -> (String, String) {
    let instant = |t: Option<Instant>| t.map_or("none".to_string(), |t| t.to_string());
    for i in 0..a.len().max(b.len()) {
        match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) if x != y => {
                let fields: [(&str, String, String); 12] = [
                    ("message_id", x.message_id.to_string(), y.message_id.to_string()),
                    ("tenant_id", x.tenant_id.to_string(), y.tenant_id.to_string()),
                    (
                        "aggregate",
                        format!("{} v{}", x.aggregate_id, x.aggregate_version),
                        format!("{} v{}", y.aggregate_id, y.aggregate_version),
                    ),
                    ("status", x.status.to_string(), y.status.to_string()),
                    ("attempts", x.attempts.to_string(), y.attempts.to_string()),
                    (
                        "lease_owner",
                        x.lease_owner.map_or("none".into(), |o| o.to_string()),
                        y.lease_owner.map_or("none".into(), |o| o.to_string()),
                    ),
                    ("lease_token", x.lease_token.to_string(), y.lease_token.to_string()),
                    ("lease_expires_at", instant(x.lease_expires_at), instant(y.lease_expires_at)),
                    ("next_attempt_at", instant(x.next_attempt_at), instant(y.next_attempt_at)),
                    (
                        "last_failure_code",
                        x.last_failure_code.map_or("none".into(), |c| c.as_str().to_string()),
                        y.last_failure_code.map_or("none".into(), |c| c.as_str().to_string()),
                    ),
                    ("created_at", x.created_at.to_string(), y.created_at.to_string()),
                    ("published_at", instant(x.published_at), instant(y.published_at)),
                ];
                let differ: Vec<&(&str, String, String)> = fields.iter().filter(|(_, m, s)| m != s).collect();
                let side = |model: bool| {
                    let values: Vec<String> =
                        differ.iter().map(|f| format!("{} = {}", f.0, if model { &f.1 } else { &f.2 })).collect();
                    format!("{}: {}", x.message_id, values.join(", "))
                };
                return (side(true), side(false));
            }
            (Some(x), None) => return (format!("{} present", x.message_id), format!("{} missing", x.message_id)),
            (None, Some(y)) => return (format!("{} missing", y.message_id), format!("{} present", y.message_id)),
            _ => {}
        }
    }
    (String::new(), String::new())
}

/// What a conformance run found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub cases: u32,
    pub operations: u64,
    pub seconds: f64,
    /// The minimal sequence proptest shrank a divergence to.
    pub divergence: Option<Divergence>,
    /// What the random cases presented to the statements.
    pub exercised: Exercised,
    /// The schedules that matter, replayed (SQL profiles only).
    pub schedules: Vec<ScheduleResult>,
    /// Concurrent relays over the statements (SQL profiles on PostgreSQL only).
    pub concurrent: Option<outbox_check::store::profile::ConcurrentReport>,
    /// What the table was compared on (SQL profiles only).
    pub fields: Option<outbox_check::store::bind::Fields>,
    /// Schedules not replayed, by source: those of two tenants, on a table that keeps none.
    pub schedules_not_run: Vec<String>,
    /// Why the concurrent run (PostgreSQL) did not run, where it did not.
    pub concurrent_not_run: Option<String>,
    /// Where a profile's run worked on PostgreSQL: "database" or "schema".
    pub scratch: Option<&'static str>,
}

impl Report {
    /// Something diverged: the random sequences or a schedule.
    pub fn diverged(&self) -> bool {
        self.divergence.is_some()
            || self.schedules.iter().any(|s| s.divergence.is_some())
            || self.concurrent.as_ref().is_some_and(|c| c.diverged())
    }

    /// The statements agree with the design, and the concurrent run broke a property the design
    /// itself breaks (but S11, which is reported and fails nothing: decision 77).
    pub fn violated(&self) -> bool {
        self.concurrent.as_ref().is_some_and(|c| c.violated())
            || self.design_breaks().into_iter().any(outbox_check::core::Property::gated_id)
    }

    /// The properties the declared design breaks by itself and the statements, agreeing with it
    /// along its counterexample, break too.
    pub fn design_breaks(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .schedules
            .iter()
            .filter(|s| s.design_breaks && s.divergence.is_none() && s.stopped.is_none())
            .map(|s| s.property.as_str())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// `agrees`, `diverged` (the statements depart from the design) or `violated` (they do what
    /// it says, and a real run broke a property the design breaks).
    pub fn verdict(&self) -> &'static str {
        if self.diverged() {
            "diverged"
        } else if self.violated() {
            "violated"
        } else {
            "agrees"
        }
    }
}

/// One claim on the store and on the model: the model takes the store's rows where the design
/// leaves ties to the database and they are another choice among rows due together
/// ([`Store::claim_among_ties`]). Returns (the model's, the store's).
fn claim_on_both(
    model: &mut dyn Store,
    store: &mut dyn Store,
    req: &ClaimRequest,
) -> (Result<Vec<Lease>, StoreError>, Result<Vec<Lease>, StoreError>) {
    let b = store.claim(req);
    let a = match &b {
        Ok(taken) => model.claim_among_ties(req, &taken.iter().map(|l| l.message_id).collect::<Vec<_>>()),
        Err(_) => model.claim(req),
    };
    (a, b)
}

/// The model's backoff in the store's units (a queue that computes its delays in its own, at
/// the run's scale), and the cap the run's retries reach in them.
fn same_units(model: &mut MemoryStore, store: &dyn Store, bounds: Bounds) -> Bounds {
    let unit = store.backoff_unit();
    model.policy.backoff.unit = unit;
    Bounds { backoff_cap_ms: bounds.backoff_cap_ms.div_ceil(unit.max(1)).max(1), ..bounds }
}

/// Runs `cases` random sequences: each on a fresh model with `model_policy` and a fresh store
/// from `open`. `tick` is called after each case.
pub fn conform(
    model_policy: Policy,
    open: &dyn Fn() -> Result<Box<dyn Store>, StoreError>,
    bounds: Bounds,
    cases: u32,
    seed: u64,
    tick: &dyn Fn(),
) -> Result<Report, StoreError> {
    let started = std::time::Instant::now();
    // The ladders' budgets are 8 to 10: no retry of theirs waits longer than the delay after
    // attempt 11.
    let cap = model_policy.backoff.cap.0;
    let bounds = Bounds { backoff_cap_ms: cap, ladder_wait_ms: model_policy.backoff.delay(11).0.min(cap), ..bounds };
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(
        config,
        proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &seed_bytes(seed)),
    );
    let operations = std::cell::Cell::new(0u64);
    let setup_error: std::cell::RefCell<Option<StoreError>> = std::cell::RefCell::new(None);
    let last: std::cell::RefCell<Option<Divergence>> = std::cell::RefCell::new(None);
    let exercised = std::cell::RefCell::new(Exercised::default());
    // A store whose statements never name :max_attempts has its budget written in: it runs 3.
    let budget = |store: &dyn Store, drawn: u32| if store.takes_budget() { drawn } else { bounds.max_attempts };
    let result = runner.run(&self::cases(bounds), |(drawn, ops)| {
        // A problem of the profile ends the run: no more cases, no shrinking.
        if setup_error.borrow().is_some() {
            return Ok(());
        }
        let mut store = match open() {
            Ok(store) => store,
            Err(e) => {
                let message = e.to_string();
                *setup_error.borrow_mut() = Some(e);
                return Err(TestCaseError::fail(message));
            }
        };
        let mut model = MemoryStore::new(model_policy);
        let bounds = Bounds { max_attempts: budget(store.as_ref(), drawn), ..bounds };
        store.set_run(bounds.max_attempts, Duration(bounds.lease_ms));
        let bounds = same_units(&mut model, store.as_ref(), bounds);
        let outcome = execute(&ops, bounds, &mut model, store.as_mut(), &mut exercised.borrow_mut());
        tick();
        if let Some(problem) = store.problem() {
            *setup_error.borrow_mut() = Some(StoreError::Setup(problem.clone()));
            return Err(TestCaseError::fail(problem));
        }
        match outcome {
            Ok(n) => {
                operations.set(operations.get() + n as u64);
                Ok(())
            }
            Err(d) => {
                let message = d.to_string();
                *last.borrow_mut() = Some(*d);
                Err(TestCaseError::fail(message))
            }
        }
    });
    if let Some(e) = setup_error.into_inner() {
        return Err(e);
    }
    let divergence = match result {
        Ok(()) => None,
        // proptest re-runs the minimal case last, so `last` holds its divergence.
        Err(TestError::Fail(_, (drawn, minimal))) => {
            let mut store = open()?;
            let mut model = MemoryStore::new(model_policy);
            let bounds = Bounds { max_attempts: budget(store.as_ref(), drawn), ..bounds };
            store.set_run(bounds.max_attempts, Duration(bounds.lease_ms));
            let bounds = same_units(&mut model, store.as_ref(), bounds);
            execute(&minimal, bounds, &mut model, store.as_mut(), &mut Exercised::default())
                .err()
                .map(|d| *d)
                .or_else(|| last.into_inner())
        }
        Err(TestError::Abort(reason)) => return Err(StoreError::Setup(format!("proptest aborted: {reason}"))),
    };
    Ok(Report {
        cases,
        operations: operations.get(),
        seconds: started.elapsed().as_secs_f64(),
        divergence,
        exercised: exercised.into_inner(),
        schedules: Vec::new(),
        concurrent: None,
        fields: None,
        schedules_not_run: Vec::new(),
        concurrent_not_run: None,
        scratch: None,
    })
}

fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&outbox_check::core::random_token(seed.wrapping_add(i as u64)).to_le_bytes());
    }
    bytes
}

/// A schedule that matters: the database operations of one path the model checker found — a
/// design's shortest counterexample or a reachability example — to replay on a store.
#[derive(Clone, Debug, Serialize)]
pub struct Schedule {
    /// Where the path comes from, in words ("S1: the shortest counterexample of write-id-only").
    pub source: String,
    /// The property the path is about.
    pub property: String,
    /// The world's events along the path (the application's first enqueues included).
    #[serde(skip)]
    pub events: Vec<outbox_check::world::Event>,
    /// The path is a counterexample of the declared design itself: statements that agree with
    /// the design along it break the property as the design does.
    pub design_breaks: bool,
}

impl Schedule {
    /// How many tenants the path's application enqueues for and its relays claim for.
    pub fn tenants(&self) -> usize {
        let mut seen = std::collections::BTreeSet::new();
        for event in &self.events {
            match event {
                outbox_check::world::Event::Enqueued { request, .. } => {
                    seen.insert(request.tenant_id);
                }
                outbox_check::world::Event::Claimed { request, .. } => {
                    seen.insert(request.tenant_id);
                }
                outbox_check::world::Event::Wrote { request, .. } => {
                    seen.insert(request.lease.tenant_id);
                }
                _ => {}
            }
        }
        seen.len()
    }
}

/// How one schedule went on a store.
#[derive(Clone, Debug, Serialize)]
pub struct ScheduleResult {
    pub source: String,
    pub property: String,
    /// Database operations replayed.
    pub operations: usize,
    /// `None`: every answer and the table agreed with the model after every operation.
    pub divergence: Option<ScheduleDivergence>,
    /// The path is the declared design's own counterexample of `property`: agreeing with the
    /// design along it, the statements break the property as the design does.
    pub design_breaks: bool,
    /// Where the path went on to a step the profile has no statement for, and why: what
    /// follows was not replayed.
    pub stopped: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScheduleDivergence {
    /// 1-based, among the path's events.
    pub step: usize,
    /// What went wrong, in a sentence ("your statements let this stale write apply").
    pub finding: String,
    pub expected: String,
    pub got: String,
    /// The path up to and including the diverging step, in words.
    pub interleaving: Vec<String>,
    /// The statements the store ran, values written in.
    pub sql: Vec<String>,
}

/// Replays a schedule's database operations on `store` and on the core of `model_policy`,
/// comparing every answer and the whole table after each. Statements whose connection was lost
/// before they ran are not sent; writes the store has no statement for, and requeues, end
/// the replay there (what follows would depend on them).
pub fn replay_schedule(schedule: &Schedule, model_policy: Policy, store: &mut dyn Store) -> ScheduleResult {
    use outbox_check::world::{DbFate, Event};
    let mut model = MemoryStore::new(model_policy);
    let mut interleaving = Vec::new();
    let mut operations = 0;
    // A relay presents the lease its claim gave it: the lease the model's claim issued in place
    // of the one the path's own design issued (their tokens and counts may differ).
    let mut issued: Vec<(Lease, Lease)> = Vec::new();
    let mut rescue_read: Option<(MessageId, outbox_check::core::LeaseToken)> = None;
    // The path's budget and lease, as its claims carry them.
    if let Some(request) = schedule.events.iter().find_map(|e| match e {
        Event::Claimed { request, .. } => Some(request),
        _ => None,
    }) {
        store.set_run(request.max_attempts, request.lease);
        model.policy.backoff.unit = store.backoff_unit();
    }
    let result = |operations, divergence| ScheduleResult {
        source: schedule.source.clone(),
        property: schedule.property.clone(),
        operations,
        divergence,
        design_breaks: schedule.design_breaks,
        stopped: None,
    };
    // The path goes where the profile has no statement: what follows is not replayed, and the
    // report says why (never counted as doing what the design does).
    let stopped = |operations, step: usize, why: String| ScheduleResult {
        stopped: Some(format!("step {step}: {why}")),
        ..result(operations, None)
    };
    for (i, event) in schedule.events.iter().enumerate() {
        interleaving.push(crate::outbox::describe(event));
        let diverged =
            |finding: String, expected: String, got: String, interleaving: &Vec<String>, store: &dyn Store| {
                ScheduleDivergence {
                    step: i + 1,
                    finding,
                    expected,
                    got,
                    interleaving: interleaving.clone(),
                    sql: store.log().to_vec(),
                }
            };
        match event {
            Event::Enqueued { request, .. } => {
                let (a, b) = (model.enqueue(request), store.enqueue(request));
                if !same(&a, &b) {
                    let d = diverged(
                        "your statements answer the enqueue differently".into(),
                        show(&a),
                        show(&b),
                        &interleaving,
                        store,
                    );
                    return result(operations, Some(d));
                }
            }
            Event::Claimed { request, db, leases, .. } if *db != DbFate::LostBefore => {
                let before = model.rows().unwrap_or_default();
                let (a, b) = claim_on_both(&mut model, store, request);
                if !same_claim(&a, &b, &*store) {
                    let d = diverged(
                        claim_finding(&model_policy, &before, request, &a, &b),
                        show(&a),
                        show(&b),
                        &interleaving,
                        store,
                    );
                    return result(operations, Some(d));
                }
                for (theirs, ours) in leases.iter().zip(a.iter().flatten()) {
                    issued.push((*theirs, *ours));
                }
            }
            Event::Wrote { request, result: Some(_), db, .. } if *db != DbFate::LostBefore => {
                if !store.can_write(&request.kind) {
                    return stopped(
                        operations,
                        i + 1,
                        format!("your profile has no statement for {}", request.kind.name()),
                    );
                }
                let mut request = *request;
                if let Some((_, ours)) = issued.iter().rev().find(|(theirs, _)| *theirs == request.lease) {
                    request.lease = Lease { tenant_id: request.lease.tenant_id, ..*ours };
                }
                let (a, b) = (model.write(&request), store.write(&request));
                let agree = match (&a, &b) {
                    (Ok(x), Ok(y)) => same_write(x, y, &*store),
                    _ => same(&a, &b),
                };
                if !agree {
                    let finding = match (&a, &b) {
                        (Ok(WriteResult::Stale { .. }), Ok(WriteResult::Applied { .. })) => {
                            format!("your statements let this stale {} apply", request.kind.name())
                        }
                        (Ok(WriteResult::Applied { .. }), Ok(WriteResult::Stale { .. })) => {
                            format!("your statements refuse this {}, which the design applies", request.kind.name())
                        }
                        _ => format!("your {} leaves another result than the design's", request.kind.name()),
                    };
                    let d = diverged(finding, show(&a), show(&b), &interleaving, store);
                    return result(operations, Some(d));
                }
            }
            Event::Reaped { now, .. } => {
                if !store.can_reap() {
                    return stopped(operations, i + 1, "your profile has no reap statement".into());
                }
                let max = model_policy_max(schedule);
                let (a, b) = (model.reap(*now, max), store.reap(*now, max));
                if !same(&a, &b) {
                    let d = diverged(
                        "your maintenance job moves other rows than the design's".into(),
                        show(&a),
                        show(&b),
                        &interleaving,
                        store,
                    );
                    return result(operations, Some(d));
                }
            }
            Event::Scheduled { now, .. } => {
                if !store.can_schedule() {
                    return stopped(operations, i + 1, "your profile has no schedule statement".into());
                }
                let (a, b) = (model.schedule(*now), store.schedule(*now));
                if !same(&a, &b) {
                    let d = diverged(
                        "your scheduler makes other rows claimable than the design's".into(),
                        show(&a),
                        show(&b),
                        &interleaving,
                        store,
                    );
                    return result(operations, Some(d));
                }
            }
            Event::RescueRead { .. } | Event::Rescued { .. } if !(store.can_rescue() && model.can_rescue()) => {
                return stopped(operations, i + 1, "your profile has no rescue_read and rescue statements".into());
            }
            // A rescuer that moves every expired lease in one statement reads nothing first, and
            // moves what the design's rescuer would move one after another.
            Event::RescueRead { .. } if store.sweeps() => continue,
            Event::Rescued { request, .. } if store.sweeps() => {
                let max = model_policy_max(schedule);
                let (a, b) = (model.rescue_all(request.now, max), store.rescue_all(request.now, max));
                if let Err(e) = &b {
                    let d = diverged(
                        "your rescuer fails where the design's moves".into(),
                        show(&a),
                        e.to_string(),
                        &interleaving,
                        store,
                    );
                    return result(operations, Some(d));
                }
            }
            Event::RescueRead { now, .. } => {
                let (a, b) = (model.rescue_read(*now), store.rescue_read(*now));
                if !same_read(&a, &b, &*store) {
                    let d = diverged(
                        "your rescuer reads another expired lease than the design's".into(),
                        read_said(&a),
                        read_said(&b),
                        &interleaving,
                        store,
                    );
                    return result(operations, Some(d));
                }
                rescue_read = a.ok().flatten();
            }
            Event::Rescued { request, .. } => {
                // A rescuer that finds and moves in one statement reads as it moves.
                let read = match rescue_read.take() {
                    Some(read) => Some(read),
                    None if request.fence == outbox_check::core::ReleaseFence::Expired => {
                        let (a, b) = (model.rescue_read(request.now), store.rescue_read(request.now));
                        if !same(&a, &b) {
                            let d = diverged(
                                "your rescuer finds another expired lease than the design's".into(),
                                read_said(&a),
                                read_said(&b),
                                &interleaving,
                                store,
                            );
                            return result(operations, Some(d));
                        }
                        a.ok().flatten()
                    }
                    None => None,
                };
                let Some(read) = read else {
                    return stopped(operations, i + 1, "the rescuer's read found no row to move".into());
                };
                let max = model_policy_max(schedule);
                let Ok(req) = rescue_request(&mut model, read, request.now, max) else {
                    return result(operations, None);
                };
                let (a, b) = (model.rescue(&req, max), store.rescue(&req, max));
                let agree = match (&a, &b) {
                    (Ok(x), Ok(y)) => same_write(x, y, &*store),
                    _ => same(&a, &b),
                };
                if !agree {
                    let finding = match (&a, &b) {
                        (Ok(WriteResult::Stale { .. }), Ok(WriteResult::Applied { .. })) => {
                            "your rescuer moves a row it read that another relay claimed since".to_string()
                        }
                        (Ok(WriteResult::Applied { .. }), Ok(WriteResult::Stale { .. })) => {
                            "your rescuer refuses a move the design makes".to_string()
                        }
                        _ => "your rescuer leaves another result than the design's".to_string(),
                    };
                    let d = diverged(finding, show(&a), show(&b), &interleaving, store);
                    return result(operations, Some(d));
                }
            }
            Event::Requeued { .. } => {
                return stopped(operations, i + 1, "an operator's requeue, which a profile has no statement for".into())
            }
            _ => continue,
        }
        operations += 1;
        let (a, b) =
            (model.rows().map(|rows| rows.into_iter().map(|r| store.view(r)).collect::<Vec<_>>()), store.rows());
        if !same(&a, &b) {
            let (x, y) = match (a, b) {
                (Ok(a), Ok(b)) => first_difference(&a, &b),
                (a, b) => (show_rows(&a), show_rows(&b)),
            };
            let d = diverged(
                "your statements leave the table otherwise than the design".into(),
                format!("table: {x}"),
                format!("table: {y}"),
                &interleaving,
                store,
            );
            return result(operations, Some(d));
        }
    }
    result(operations, None)
}

/// What a diverging claim did that the design's does not, in the words of the property it
/// breaks where one row says it: a row taken before its retry time (S7), over a live lease, with
/// its budget spent (S3), of another tenant (S9), or a row the design's claim takes and the
/// statement left.
fn claim_finding(
    policy: &Policy,
    before: &[Row],
    request: &ClaimRequest,
    model: &Result<Vec<Lease>, StoreError>,
    store: &Result<Vec<Lease>, StoreError>,
) -> String {
    let (Ok(ours), Ok(theirs)) = (model, store) else {
        return "your claim takes other rows, or other leases, than the design's".into();
    };
    let now = request.now;
    for lease in theirs.iter().filter(|l| !ours.iter().any(|o| o.message_id == l.message_id)) {
        let id = lease.message_id;
        let Some(row) = before.iter().find(|r| r.message_id == id) else { continue };
        // Why the design's claim refused the row: the core's own ladder.
        let Some(refusal) = Outbox::refusal(policy, row, request.tenant_id, now, request.max_attempts) else {
            continue;
        };
        return match refusal {
            ClaimRefusal::RetryClock => format!(
                "your claim takes {id} at t={} before its retry time t={} (S7)",
                now.0,
                row.retry_at().map_or(0, |at| at.0)
            ),
            ClaimRefusal::LiveLease => {
                let owner = row.lease_owner.map_or("another relay".to_string(), |o| o.to_string());
                let until = row.lease_expires_at.map_or(0, |u| u.0);
                format!("your claim takes {id} at t={} while {owner}'s lease runs until t={until} (S6)", now.0)
            }
            ClaimRefusal::InFlight => format!(
                "your claim takes {id} at t={}, in flight with its lease expired: the design's claim never takes an in-flight row, only its rescuer",
                now.0
            ),
            ClaimRefusal::Unscheduled => format!(
                "your claim takes {id} at t={}, whose retry time t={} has passed but which the scheduler has not yet made claimable",
                now.0,
                row.retry_at().map_or(0, |at| at.0)
            ),
            ClaimRefusal::BudgetSpent => format!(
                "your claim takes {id} with its budget spent ({} attempts of {}) (S3)",
                row.attempts, request.max_attempts
            ),
            ClaimRefusal::Terminal => format!("your claim takes {id}, which is {}", row.status),
            ClaimRefusal::OtherTenant => {
                format!("your claim for {} takes {id} of {} (S9)", request.tenant_id, row.tenant_id)
            }
            // Refusals of a whole claim, not of one row: none applies to a row alone.
            ClaimRefusal::OverBatch | ClaimRefusal::Twice => continue,
        };
    }
    if let Some(left) = ours.iter().find(|o| !theirs.iter().any(|l| l.message_id == o.message_id)) {
        return format!("your claim leaves {}, which the design's claim takes", left.message_id);
    }
    "your claim hands out other leases (token or attempts) than the design's".into()
}

fn read_said(r: &Result<Option<(MessageId, outbox_check::core::LeaseToken)>, StoreError>) -> String {
    match r {
        Ok(Some((m, t))) => format!("{m} (token {t})"),
        Ok(None) => "no expired lease".into(),
        Err(e) => format!("error: {e}"),
    }
}

fn show_rows(r: &Result<Vec<Row>, StoreError>) -> String {
    match r {
        Ok(rows) => format!("{} rows", rows.len()),
        Err(e) => format!("error: {e}"),
    }
}

/// The budget the schedule's world ran with (every claim carries it).
fn model_policy_max(schedule: &Schedule) -> u32 {
    schedule
        .events
        .iter()
        .find_map(|e| match e {
            outbox_check::world::Event::Claimed { request, .. } => Some(request.max_attempts),
            outbox_check::world::Event::Wrote { request, .. } => Some(request.max_attempts),
            _ => None,
        })
        .unwrap_or(3)
}

/// The schedules that matter for a design: the shortest counterexample of every safety property
/// that some built-in design or mutant breaks (each the interleaving that breaks it there), and
/// the design's own reachability examples (a takeover, a stale write refused, the budget spent,
/// an ambiguous message later published …). Found by the model checker, safety only.
pub fn schedules(declared: outbox_check::design::Design, progress: &dyn Fn(&str)) -> Vec<Schedule> {
    use crate::check::{check, CheckOptions, Kind, Verdict};
    use outbox_check::design::{Design, Mutant, Variant};
    use outbox_check::world::{Faults, WorldConfig};
    let options = CheckOptions { threads: 2, liveness: false, ..CheckOptions::default() };
    let mut worlds: Vec<(String, WorldConfig)> = Vec::new();
    for v in Variant::ALL {
        worlds.push((v.name().to_string(), WorldConfig::fleet(&[Design::Variant(v); 2], 1, 1, 3, Faults::all())));
    }
    // Each mutant in the variants' world (two relays, one message, every fault): a few seconds
    // for all, where the mutant catalogue's larger world takes minutes.
    for m in Mutant::ALL {
        worlds.push((m.name().to_string(), WorldConfig::fleet(&[Design::Mutant(m); 2], 1, 1, 3, Faults::all())));
    }
    // And each in verify's isolation world (two tenants, misrouted writes, the application's
    // enqueues), where S9 and S10 can fail: a hundredth of a second each.
    let builtins = Variant::ALL.into_iter().map(Design::Variant).chain(Mutant::ALL.into_iter().map(Design::Mutant));
    for design in builtins.collect::<Vec<_>>() {
        worlds.push((format!("{} with two tenants", design.name()), WorldConfig::isolation(&[design; 2])));
    }
    let own = WorldConfig::fleet(&[declared; 2], 1, 1, 3, Faults::all());
    let own_isolation = WorldConfig::isolation(&[declared; 2]);
    let mut out: Vec<Schedule> = Vec::new();
    let mut add = |source: String,
                   property: String,
                   config: &WorldConfig,
                   steps: &[crate::outbox::ReplayStep],
                   design_breaks: bool| {
        let (_, mut events) = outbox_check::world::World::new_with_events(config);
        events.extend(steps.iter().flat_map(|s| s.events.iter().cloned()));
        // One schedule per sequence of events.
        match out.iter_mut().find(|s| s.events == events) {
            Some(same) if design_breaks && same.property == property && !same.design_breaks => {
                // The declared design's own counterexample, found for another design too (or
                // for itself, where the declared design is a built-in).
                let other = same.source.rsplit(" of ").next().unwrap_or_default().to_string();
                same.source = if source.ends_with(&format!(" of {other}")) {
                    source
                } else {
                    format!("{source} (the same path as for {other})")
                };
                same.design_breaks = true;
            }
            Some(_) => {}
            None => out.push(Schedule { source, property, events, design_breaks }),
        }
    };
    for (name, config) in &worlds {
        progress(name);
        let report = check(config, &options, &|_, _| {});
        for p in report.properties.iter().filter(|p| p.kind == Kind::Safety && p.status == Verdict::Violated) {
            if let Some(steps) = &p.counterexample {
                add(
                    format!("{} {}: the shortest counterexample of {name}", p.id, p.name),
                    p.id.clone(),
                    config,
                    steps,
                    false,
                );
            }
        }
    }
    progress(declared.name());
    // The declared design's own world, liveness included: what it breaks by itself, each with
    // its shortest counterexample (a liveness lasso's prefix and cycle replay as one path).
    let report = check(&own, &CheckOptions { liveness: true, ..options.clone() }, &|_, _| {});
    for p in report.properties.iter().filter(|p| p.kind != Kind::Reachability && p.status == Verdict::Violated) {
        if let Some(steps) = &p.counterexample {
            add(
                format!("{} {}: the shortest counterexample of {}", p.id, p.name, declared.name()),
                p.id.clone(),
                &own,
                steps,
                true,
            );
        }
    }
    for p in report.properties.iter().filter(|p| p.kind == Kind::Reachability && p.status == Verdict::Reached) {
        if let Some(steps) = &p.counterexample {
            add(format!("{} {}: reached by {}", p.id, p.name, declared.name()), p.id.clone(), &own, steps, false);
        }
    }
    // The declared design with two tenants: the S9 and S10 it breaks by itself (issue 27: a
    // design without the tenant check in its claim and writes broke S9 here and agreed before).
    progress(&format!("{} with two tenants", declared.name()));
    let report = check(&own_isolation, &options, &|_, _| {});
    for p in report.properties.iter().filter(|p| p.kind == Kind::Safety && p.status == Verdict::Violated) {
        if let Some(steps) = &p.counterexample {
            add(
                format!("{} {}: the shortest counterexample of {} with two tenants", p.id, p.name, declared.name()),
                p.id.clone(),
                &own_isolation,
                steps,
                true,
            );
        }
    }
    out
}
