//! The madsim simulations: determinism, what each design is found to do, and that the checks
//! are not vacuous (faults really happen, the oracle really reads the histories).

use outbox_check::core::{Property, Status};
use outbox_check::design::{Design, Variant};
use outbox_check_sims::profile::FaultProfile;
use outbox_check_sims::run::{run, run_with_profile, OracleVerdict, RunResult};
use outbox_check_sims::sweep::{sweep, Seeds};
use outbox_check_sims::SimConfig;

fn config(variant: Variant) -> SimConfig {
    SimConfig::new(vec![Design::Variant(variant); 3], 20)
}

/// Every run of a sweep of `count` seeds from 0, in seed order; failing runs with their history.
fn results(config: &SimConfig, count: u64) -> Vec<RunResult> {
    let all = std::sync::Mutex::new(Vec::new());
    let histories = std::sync::Mutex::new(std::collections::BTreeMap::new());
    sweep(
        config,
        Seeds::all(0, count),
        2,
        &|r| {
            histories.lock().unwrap().insert(r.seed, r.history.clone());
        },
        &|r| all.lock().unwrap().push(r.clone()),
    );
    let mut all = all.into_inner().unwrap();
    let histories = histories.into_inner().unwrap();
    for r in &mut all {
        r.history = histories.get(&r.seed).cloned().unwrap_or_default();
    }
    all.sort_by_key(|r| r.seed);
    all
}

#[test]
fn the_same_seed_gives_the_same_history_byte_for_byte() {
    for config in [
        config(Variant::Reference),
        SimConfig::new(vec![Design::Variant(Variant::SeedV2), Design::Variant(Variant::LegacyV1)], 10),
    ] {
        let seeds: Vec<u64> = (0..40).collect();
        let first: Vec<(String, String)> = seeds
            .iter()
            .map(|&s| {
                let r = run(&config, s);
                (r.history_hash, r.history)
            })
            .collect();
        // The second pass on two threads: scheduling of the sweep must not matter.
        let second = results(&config, 40);
        for (i, r) in second.iter().enumerate() {
            assert_eq!(r.seed, seeds[i]);
            assert_eq!(r.history_hash, first[i].0, "seed {} replayed differently", r.seed);
        }
        let again = run(&config, 3);
        assert_eq!(again.history, first[3].1, "seed 3's history differs between two runs");
        // Different seeds do differ (the hash is not constant).
        let distinct: std::collections::BTreeSet<&String> = first.iter().map(|(h, _)| h).collect();
        assert!(distinct.len() > 30, "only {} distinct histories in 40 seeds", distinct.len());
    }
}

#[test]
fn reference_survives_a_sweep_and_the_faults_were_real() {
    let config = config(Variant::Reference);
    let results = results(&config, 400);
    for r in &results {
        // Nothing but S11, the false failure reference's reaper records (decision 77); where the
        // auditor finds it, the oracle rejects the history too.
        assert!(r.violations.iter().all(|v| v.property == Property::S11), "seed {}: {:?}", r.seed, r.violations);
        if r.violations.is_empty() {
            assert_eq!(r.oracle, OracleVerdict::Accepted, "seed {}: the oracle rejected a reference history", r.seed);
        } else {
            assert!(matches!(r.oracle, OracleVerdict::Diverged { .. }), "seed {}: the oracle missed S11", r.seed);
        }
    }
    // Not vacuous: the sweep met stale writes, lost replies, duplicates, exhausted and failed rows.
    let total = |f: fn(&outbox_check_sims::run::RunResult) -> u64| results.iter().map(f).sum::<u64>();
    assert!(total(|r| r.stats.stale_refused) > 0, "no stale write was ever refused");
    assert!(total(|r| r.stats.unknown_outcomes) > 0, "no outcome was ever unknown");
    assert!(total(|r| r.stats.deduplicated) > 0, "the consumer never deduplicated");
    let statuses: Vec<Status> = results.iter().flat_map(|r| r.stats.statuses.clone()).collect();
    for status in [Status::Published, Status::Exhausted, Status::Failed] {
        assert!(statuses.contains(&status), "no row ended {status:?}");
    }
    // The heal phase: every reference row ends terminal, and outside a permanent outage every
    // row is PUBLISHED, FAILED or EXHAUSTED; under one, every row is EXHAUSTED (L2).
    let outages: Vec<_> = results.iter().filter(|r| r.profile.permanent_outage).collect();
    assert!(!outages.is_empty(), "no seed drew a permanent outage");
    for r in outages {
        assert!(r.stats.statuses.iter().all(|s| *s == Status::Exhausted), "seed {}: {:?}", r.seed, r.stats.statuses);
        assert!(r.stats.attempts.iter().all(|a| *a == config.max_attempts));
    }
}

#[test]
fn a_quiet_run_publishes_everything_once() {
    let config = config(Variant::Reference);
    let r = run_with_profile(&config, 11, FaultProfile::quiet(3));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.stats.statuses.iter().all(|s| *s == Status::Published));
    assert!(r.stats.attempts.iter().all(|a| *a == 1));
    assert_eq!(r.stats.duplicates_delivered, 0);
    assert_eq!(r.stats.unknown_outcomes, 0);
    assert_eq!(r.oracle, OracleVerdict::Accepted);
}

#[test]
fn legacy_v1_breaks_within_its_first_hundred_seeds_and_the_oracle_agrees() {
    let config = config(Variant::LegacyV1);
    let results = results(&config, 100);
    let broke = |p: Property| results.iter().filter(|r| r.violations.iter().any(|v| v.property == p)).count();
    assert!(broke(Property::S1) > 0, "no stale write succeeded in 100 legacy-v1 seeds");
    assert!(broke(Property::S3) > 0, "legacy-v1 never went over budget in 100 seeds");
    for r in results.iter().filter(|r| r.violations.iter().any(|v| Property::SAFETY.contains(&v.property))) {
        // The failing history is kept, and the oracle, reading it, names a safety property too.
        assert!(!r.history.is_empty());
        match &r.oracle {
            OracleVerdict::Diverged { property: Some(p), .. } => assert!(Property::SAFETY.contains(p)),
            other => panic!("seed {}: the auditor found {:?}, the oracle said {other:?}", r.seed, r.violations),
        }
    }
}

#[test]
fn seed_designs_and_a_mixed_fleet_are_reported_as_found() {
    // seed-v2 counts attempts only at the AMBIGUOUS write (S3); seed-tenant has no EXHAUSTED
    // and never reclaims AMBIGUOUS rows (L1/L3); a rolling upgrade lets the V1 relay's unfenced
    // writes through (S1). These are the model checker's findings, rediscovered here.
    let found = |config: &SimConfig| {
        let mut properties: Vec<Property> =
            results(config, 150).iter().flat_map(|r| r.violations.iter().map(|v| v.property)).collect();
        properties.sort();
        properties.dedup();
        properties
    };
    let v2 = found(&config(Variant::SeedV2));
    assert!(v2.contains(&Property::S3), "{v2:?}");
    assert!(!v2.contains(&Property::S1), "{v2:?}");
    let tenant = found(&config(Variant::SeedTenant));
    assert!(tenant.contains(&Property::L1) && tenant.contains(&Property::L3), "{tenant:?}");
    assert!(tenant.iter().all(|p| !Property::SAFETY.contains(p)), "{tenant:?}");
    let mixed = found(&SimConfig::new(vec![Design::Variant(Variant::SeedV2), Design::Variant(Variant::LegacyV1)], 10));
    assert!(mixed.contains(&Property::S1), "{mixed:?}");
}

#[test]
fn shards_split_a_sweep_exactly() {
    let whole = Seeds::all(100, 50).list();
    let mut parts: Vec<u64> = (0..4).flat_map(|i| Seeds { from: 100, count: 50, shard: i, shards: 4 }.list()).collect();
    parts.sort();
    assert_eq!(parts, whole);
    assert_eq!(Seeds { from: 100, count: 50, shard: 1, shards: 4 }.list()[..3], [101, 105, 109]);
    assert_eq!(Seeds { from: 100, count: 50, shard: 1, shards: 4 }.len(), 13);
}

#[test]
fn an_empty_or_overflowing_seed_range_is_refused() {
    assert!(Seeds { from: 0, count: 2, shard: 5, shards: 8 }.validate().is_err(), "a shard with no seed");
    assert!(Seeds::all(u64::MAX, 10).validate().is_err(), "seeds past the largest");
    assert!(Seeds::all(u64::MAX, 1).validate().is_ok(), "the largest seed is a seed");
    assert!(Seeds { from: 0, count: 2, shard: 1, shards: 8 }.validate().is_ok());
}

/// A sweep's summary is the same whether it is folded run by run or built from all the runs.
#[test]
fn a_streamed_summary_equals_the_summary_of_every_run() {
    use outbox_check_sims::sweep::Summary;
    let config = config(Variant::LegacyV1);
    let all = results(&config, 60);
    let whole = Summary::new(&config, Seeds::all(0, 60), &all, 1.0);
    let streamed = sweep(&config, Seeds::all(0, 60), 2, &|_| {}, &|_| {});
    let json = |s: &Summary| {
        let mut v = serde_json::to_value(s).unwrap();
        v["seconds"] = serde_json::Value::Null;
        v["runs_per_second"] = serde_json::Value::Null;
        v
    };
    assert_eq!(json(&streamed), json(&whole));
    assert!(whole.failed_runs > 0 && whole.publish_latency_p50_ms.is_some());
}

/// The rescuer runs in the simulations: by id it reopens finished jobs (S4) and ends leases it
/// never read (S1), and the oracle, reading those histories, agrees; fenced by the token it read
/// or by the expiry it holds everything over the same seeds — and the rescuer really ran.
#[test]
fn the_rescuer_runs_in_the_simulations_and_the_oracle_agrees() {
    let design = |fence: &str| {
        let text = format!("name = \"sim-rescue-by-{fence}\"\nbased_on = \"reference\"\n[maintenance]\njob = \"rescue-expired\"\nfence = \"{fence}\"\n");
        outbox_check::design::from_text(&text, &format!("sim-rescue-by-{fence}.toml")).expect("a design file")
    };
    let by_id = results(&SimConfig::new(vec![design("id"); 3], 20), 150);
    let broke = |p: Property| by_id.iter().filter(|r| r.violations.iter().any(|v| v.property == p)).count();
    assert!(broke(Property::S4) > 0, "the by-id rescuer never reopened a job in 150 seeds");
    // The oracle, reading the failing histories, rejects them too — except where the history
    // does not show the lease the rescuer read (the claim that issued it lost its reply, and so
    // did the one after): then no reading of it proves the release stale, and it is accepted.
    let failing: Vec<&RunResult> = by_id.iter().filter(|r| !r.violations.is_empty()).collect();
    let rejected = failing.iter().filter(|r| matches!(&r.oracle, OracleVerdict::Diverged { .. })).count();
    println!("by-id rescuer: {} failing seeds, the oracle rejects {rejected}", failing.len());
    assert!(
        rejected * 10 >= failing.len() * 8,
        "the oracle rejected only {rejected} of {} failing histories",
        failing.len()
    );
    assert!(by_id
        .iter()
        .any(|r| matches!(&r.oracle, OracleVerdict::Diverged { property: Some(Property::S4 | Property::S1), .. })));
    for fence in ["token", "expired"] {
        let runs = results(&SimConfig::new(vec![design(fence); 3], 20), 150);
        // Nothing but S11, the false failure reference's reaper records too (decision 77), and
        // the oracle agrees with the auditor on every history.
        let failed: Vec<u64> = runs
            .iter()
            .filter(|r| r.failed_gated() || r.violations.is_empty() != matches!(r.oracle, OracleVerdict::Accepted))
            .map(|r| r.seed)
            .collect();
        assert!(failed.is_empty(), "rescue by {fence}: seeds {failed:?} failed");
    }
    let history = run(&SimConfig::new(vec![design("token"); 3], 20), 3).history;
    assert!(history.contains("\"event\":\"release\""), "the rescuer never ran");
}
