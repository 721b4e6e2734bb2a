//! Differential conformance: the SQL of each design, on SQLite always and on PostgreSQL when
//! `OUTBOX_CHECK_PG_URL` is set, does to a real table what the core does to its rows.

use outbox_check::core::{Design, Mutant, Policy, Variant};
use outbox_check::store::conform::{conform, execute, ops, Bounds};
use outbox_check::store::{MemoryStore, PgStore, SqliteStore, Store, StoreError};
use proptest::strategy::{Strategy, ValueTree};

fn sqlite(policy: Policy) -> impl Fn() -> Result<Box<dyn Store>, StoreError> {
    move || Ok(Box::new(SqliteStore::in_memory(policy)?) as Box<dyn Store>)
}

mod common;

fn pg_url() -> Option<String> {
    common::pg_url("PostgreSQL conformance tests")
}

const BOUND: [Variant; 3] = [Variant::Reference, Variant::SeedV2, Variant::LegacyV1];

#[test]
fn every_bound_design_agrees_with_the_core_on_sqlite() {
    let designs = BOUND.map(Design::Variant).into_iter().chain(
        // Mutants whose SQL differs in a clause of its own: the generator must honour each switch.
        [Mutant::NoRetryClock, Mutant::NoBudgetPredicate, Mutant::ExhaustOffByOne, Mutant::WriteOwnerOnly, Mutant::SwallowStale]
            .map(Design::Mutant),
    );
    for design in designs {
        let policy = design.policy();
        let report = conform(policy, &sqlite(policy), Bounds::default(), 150, 1, &|| {}).expect("SQLite opens");
        assert!(report.divergence.is_none(), "{design}: {}", report.divergence.unwrap());
        assert!(report.operations > 1000, "{design}: only {} operations", report.operations);
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
    let report = conform(Variant::Reference.policy(), &sqlite(Mutant::SwallowStale.policy()), Bounds::default(), 300, 3, &|| {})
        .expect("SQLite opens");
    let d = report.divergence.expect("the differential test misses a swallowed stale write");
    assert!(d.ops.len() <= 6, "not shrunk: {} steps\n{d}", d.ops.len());
    assert!(d.expected.contains("Stale") && d.got.contains("Applied"), "{d}");
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
        let sequence = ops(bounds).new_tree(&mut runner).unwrap().current();
        let sql = execute(&sequence, bounds, &mut MemoryStore::new(Variant::Reference.policy()), &mut SqliteStore::in_memory(Variant::LegacyV1.policy()).unwrap());
        let model = execute(&sequence, bounds, &mut MemoryStore::new(Variant::Reference.policy()), &mut MemoryStore::new(Variant::LegacyV1.policy()));
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
