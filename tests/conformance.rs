//! Differential conformance: the SQL of each design, on SQLite always and on PostgreSQL when
//! `OUTBOX_CHECK_PG_URL` is set, does to a real table what the core does to its rows.

use outbox_check::core::{
    AggregateId, ClaimRequest, Duration, EnqueueRequest, FailureCode, Instant, MessageId, Policy, RelayId, Status,
    TenantId, WriteKind, WriteRequest, WriteResult,
};
use outbox_check::design::{Design, Mutant, Variant};
use outbox_check::store::{MemoryStore, PgStore, SqliteStore, Store, StoreError};
use outbox_check_models::conform::{cases, conform, execute, Bounds, Exercised};
use proptest::strategy::{Strategy, ValueTree};

fn sqlite(policy: Policy) -> impl Fn() -> Result<Box<dyn Store>, StoreError> {
    move || Ok(Box::new(SqliteStore::in_memory(policy)?) as Box<dyn Store>)
}

mod common;

fn pg_url() -> Option<String> {
    common::pg_url("PostgreSQL conformance tests")
}

const BOUND: [Variant; 4] = Variant::ALL;

#[test]
fn every_bound_design_agrees_with_the_core_on_sqlite() {
    let designs = BOUND.map(Design::Variant).into_iter().chain(
        // Mutants whose SQL differs in a clause of its own: the generator must honour each switch.
        [
            Mutant::NoRetryClock,
            Mutant::NoBudgetPredicate,
            Mutant::ExhaustOffByOne,
            Mutant::WriteOwnerOnly,
            Mutant::SwallowStale,
        ]
        .map(Design::Mutant),
    );
    for design in designs {
        let policy = design.policy();
        let report = conform(policy, &sqlite(policy), Bounds::default(), 150, 1, &|| {}).expect("SQLite opens");
        assert!(report.divergence.is_none(), "{design}: {}", report.divergence.unwrap());
        assert!(report.operations > 1000, "{design}: only {} operations", report.operations);
    }
}

/// The SQL of the axes real job queues added — a claim that never takes an in-flight row, a
/// write fenced on the status alone, failure writes with a fence of their own, a retry write
/// without a budget check, failure statements that leave the budget to the relay — agrees with
/// its own core, and could have disagreed: each axis's SQL run against the core of the design
/// without the axis, or that design's SQL against the axis's core, diverges (a write the axis
/// lets through is sent only by a core that has it, so some axes show in the second direction).
#[test]
fn the_job_queue_clauses_agree_with_their_core_and_differ_from_reference() {
    use outbox_check::core::WriteFence;
    let reference = Variant::Reference.policy();
    let by_id = Policy { write_fence: WriteFence::MessageIdOnly, ..reference };
    let axes = [
        ("claim never takes an in-flight row", Policy { claim_expired_leases: false, ..reference }, reference),
        ("write fenced on the status alone", Policy { write_fence: WriteFence::StatusOnly, ..reference }, reference),
        (
            "failure writes fenced by owner alone, the completion by the token",
            Policy { failure_fence: Some(WriteFence::StatusOwner), ..reference },
            reference,
        ),
        ("a retry write that never exhausts", Policy { retry_checks_budget: false, ..reference }, reference),
        (
            "a claim that sets a token and no owner",
            Policy {
                claim_fence: outbox_check::core::ClaimFence::TokenOnly,
                write_fence: WriteFence::StatusToken,
                ..reference
            },
            Policy { write_fence: WriteFence::StatusToken, ..reference },
        ),
        // With writes by id a stale worker's copy of the attempts differs from the row's.
        ("the relay decides exhaustion from its copy", Policy { budget_in_write: false, ..by_id }, by_id),
    ];
    for (axis, policy, base) in axes {
        let own = conform(policy, &sqlite(policy), Bounds::default(), 150, 1, &|| {}).expect("SQLite opens");
        assert!(own.divergence.is_none(), "{axis}: {}", own.divergence.unwrap());
        // A stale copy of the attempts meets a spent row only in longer sequences.
        let cases = if base == by_id { 3000 } else { 300 };
        let other = conform(base, &sqlite(policy), Bounds::default(), cases, 1, &|| {}).expect("SQLite opens");
        let swapped = conform(policy, &sqlite(base), Bounds::default(), cases, 1, &|| {}).expect("SQLite opens");
        assert!(
            other.divergence.is_some() || swapped.divergence.is_some(),
            "{axis}: the SQL agrees with the core without the axis as well, and that SQL with the axis's core"
        );
    }
}

#[test]
fn every_bound_design_agrees_with_the_core_on_postgres() {
    let Some(url) = pg_url() else { return };
    for variant in BOUND {
        let policy = variant.policy();
        let open = || Ok(Box::new(PgStore::connect(&url, false, policy)?) as Box<dyn Store>);
        let report = conform(policy, &open, Bounds::default(), 40, 2, &|| {}).expect("PostgreSQL opens");
        assert!(report.divergence.is_none(), "{variant:?}: {}", report.divergence.unwrap());
    }
}

#[test]
fn a_wrong_store_is_caught_and_shrunk_to_a_short_sequence_with_its_sql() {
    // The swallow-stale SQL against the reference model: a stale write reported as applied.
    let report =
        conform(Variant::Reference.policy(), &sqlite(Mutant::SwallowStale.policy()), Bounds::default(), 300, 3, &|| {})
            .expect("SQLite opens");
    let d = report.divergence.expect("the differential test misses a swallowed stale write");
    assert!(d.ops.len() <= 6, "not shrunk: {} steps\n{d}", d.ops.len());
    assert!(d.expected.contains("stale") && d.got.contains("applied"), "{d}");
    assert!(d.sql.iter().any(|s| s.starts_with("UPDATE messaging_outbox SET")), "{d}");
    assert!(d.sql.iter().all(|s| !s.contains('?') && !s.contains('$')), "parameters left in the SQL:\n{d}");
}

#[test]
fn legacy_sql_diverges_from_the_reference_model_exactly_where_the_legacy_model_does() {
    // On each sequence: the step where legacy-v1's SQL first disagrees with the reference core
    // is the step where the legacy-v1 core first disagrees with it.
    let bounds = Bounds::default();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut diverged, mut checked) = (0, 0);
    for _ in 0..200 {
        let (budget, sequence) = cases(bounds).new_tree(&mut runner).unwrap().current();
        let bounds = Bounds { max_attempts: budget, ..bounds };
        let sql = execute(
            &sequence,
            bounds,
            &mut MemoryStore::new(Variant::Reference.policy()),
            &mut SqliteStore::in_memory(Variant::LegacyV1.policy()).unwrap(),
            &mut Exercised::default(),
        );
        let model = execute(
            &sequence,
            bounds,
            &mut MemoryStore::new(Variant::Reference.policy()),
            &mut MemoryStore::new(Variant::LegacyV1.policy()),
            &mut Exercised::default(),
        );
        match (sql, model) {
            (Ok(_), Ok(_)) => {}
            (Err(a), Err(b)) => {
                assert_eq!(a.step, b.step, "SQL: {a}\nmodel: {b}");
                diverged += 1;
            }
            (a, b) => panic!("one diverges, the other not: SQL {a:?}, model {b:?}"),
        }
        checked += 1;
    }
    assert!(diverged > checked / 4, "legacy-v1 differs from reference in only {diverged} of {checked} sequences");
}

/// seed 003's outbox_events through its own statements: a takeover with a fresh random token,
/// the old holder refused, an uncertain publication parked as `ack_unknown` and claimable again
/// at its retry time, the budget counted at the claim, another tenant's relay seeing nothing.
fn seed_tenant_story(store: &mut dyn Store) {
    let lease = Duration(100);
    let claim = |store: &mut dyn Store, owner: u16, tenant: u16, now: u64| {
        let req = ClaimRequest {
            tenant_id: TenantId(tenant),
            owner: RelayId(owner),
            batch: 1,
            lease,
            now: Instant(now),
            max_attempts: 3,
            retry_due: true,
        };
        store.claim(&req).unwrap()
    };
    let write = |store: &mut dyn Store, lease, kind, now: u64| {
        store.write(&WriteRequest { lease, kind, now: Instant(now), max_attempts: 3 }).unwrap()
    };
    let enqueue = EnqueueRequest {
        tenant_id: TenantId(1),
        aggregate_id: AggregateId(7),
        expected_version: 0,
        message_id: MessageId(0),
        now: Instant(1_000),
    };
    store.enqueue(&enqueue).unwrap();
    assert!(claim(store, 9, 2, 1_000).is_empty(), "another tenant's relay claimed the row");
    let first = claim(store, 0, 1, 1_000).pop().expect("the pending row is claimed");
    assert!(claim(store, 1, 1, 1_050).is_empty(), "a live lease was taken");
    let second = claim(store, 1, 1, 1_100).pop().expect("the expired lease is taken over");
    assert_ne!(first.token, second.token, "the takeover reused the token");
    assert_eq!(second.attempts, 2, "attempts are counted at the claim");
    assert!(
        matches!(write(store, first, WriteKind::Published, 1_110), WriteResult::Stale { .. }),
        "the old holder's write applied"
    );
    let parked = write(store, second, WriteKind::Ambiguous { code: FailureCode::Timeout }, 1_120);
    assert_eq!(parked, WriteResult::Applied { status: Status::Ambiguous });
    let row = store.rows().unwrap().pop().unwrap();
    let due = row.next_attempt_at.expect("ack_unknown keeps a retry time");
    assert!(claim(store, 0, 1, due.0 - 1).is_empty(), "claimed before its retry time");
    let third = claim(store, 0, 1, due.0).pop().expect("claimable again at its retry time");
    assert_eq!(third.attempts, 3);
    assert_eq!(
        write(store, third, WriteKind::Retry { code: FailureCode::Unavailable }, due.0 + 1),
        WriteResult::Applied { status: Status::Pending }
    );
    assert!(claim(store, 0, 1, 1_000_000).is_empty(), "claimed past the budget of 3");
}

#[test]
fn seed_tenant_sql_keeps_fences_retry_times_and_budget_on_sqlite() {
    let policy = Variant::SeedTenant.policy();
    let mut model = MemoryStore::new(policy);
    seed_tenant_story(&mut model);
    let mut store = SqliteStore::in_memory(policy).unwrap();
    seed_tenant_story(&mut store);
    assert!(!store.can_write(&WriteKind::Failed { code: FailureCode::Rejected }), "outbox_events has no failed state");
    assert!(!store.can_reap(), "seed-tenant has no reaper");
    assert!(store.log().iter().any(|s| s.contains("status = 'ack_unknown'")), "{:#?}", store.log());
    assert_eq!(store.rows().unwrap(), model.rows().unwrap().into_iter().map(|r| store.view(r)).collect::<Vec<_>>());
}

#[test]
fn seed_tenant_sql_keeps_fences_retry_times_and_budget_on_postgres() {
    let Some(url) = pg_url() else { return };
    let mut store = PgStore::connect(&url, false, Variant::SeedTenant.policy()).unwrap();
    seed_tenant_story(&mut store);
}
