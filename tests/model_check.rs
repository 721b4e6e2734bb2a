//! The stateright model: pinned state counts, the verdicts it discovers for every variant and a
//! mixed fleet, shortest counterexamples that replay, and reductions that change no verdict.

use outbox_check::design::{Design, Mutant, Variant};
use outbox_check::world::{Abstraction, Faults, WorldConfig};
use outbox_check_models::check::{check, CheckOptions, CheckReport, Verdict};
use outbox_check_models::outbox::{replay, OutboxModel, SAFETY_NAMES};
use stateright::{Checker, Model};
use std::collections::BTreeSet;

fn fleet(designs: &[&str], messages: u32) -> WorldConfig {
    let designs: Vec<Design> = designs.iter().map(|d| Design::parse(d).expect("a design")).collect();
    WorldConfig::fleet(&designs, messages, 1, 3, Faults::all())
}

fn run(config: &WorldConfig) -> CheckReport {
    check(config, &CheckOptions { threads: 1, ..CheckOptions::default() }, &|_, _| {})
}

/// (id, status, counterexample length) of every property that does not simply hold.
fn findings(report: &CheckReport) -> Vec<(String, &'static str, usize)> {
    report
        .properties
        .iter()
        .filter(|p| p.status != Verdict::Holds)
        .map(|p| {
            let status = match p.status {
                Verdict::Violated => "violated",
                Verdict::Reached => "reached",
                Verdict::Unreached => "unreached",
                Verdict::Unknown => "unknown",
                Verdict::NotExercised => "not exercised",
                Verdict::Holds => "holds",
            };
            (p.id.clone(), status, p.counterexample.as_ref().map_or(0, |c| c.len()))
        })
        .collect()
}

fn owned(rows: &[(&str, &'static str, usize)]) -> Vec<(String, &'static str, usize)> {
    rows.iter().map(|&(id, s, n)| (id.to_string(), s, n)).collect()
}

#[test]
fn reference_holds_everything_and_reaches_every_situation() {
    let report = run(&fleet(&["reference", "reference"], 1));
    // S11 aside: the false failure reference's reaper records, which gates nothing (decision 77).
    assert!(report.complete && !report.violated_gated());
    assert_eq!(report.unique_states, 295, "the model's shape changed");
    assert_eq!(
        findings(&report),
        owned(&[
            // One tenant and no enqueue in this world: nothing could break S9 or S10.
            ("S9", "not exercised", 0),
            ("S10", "not exercised", 0),
            // A relay paused past its lease; another takes the row over, the broker rejects it
            // for good and the row is FAILED; the paused relay wakes and the broker stores it.
            ("S11", "violated", 7),
            ("R-S1", "reached", 6),
            ("R-S8", "reached", 2),
            ("R-S6", "reached", 4),
            // A claim hands out the last attempt (before any row is EXHAUSTED).
            ("R-S3", "reached", 7),
            ("R-S7", "reached", 7),
            // One message has no later event to overtake; see the two-message test.
            ("R-order", "unreached", 0),
            ("R-S2", "reached", 4),
            ("R-S4", "reached", 4),
            ("R-S5", "reached", 3),
            ("R-S9", "unreached", 0),
            ("R-S10", "unreached", 0),
            ("R-S11", "reached", 6),
        ])
    );
}

#[test]
fn legacy_v1_breaks_s1_and_s3_with_shortest_counterexamples() {
    let report = run(&fleet(&["legacy-v1", "legacy-v1"], 1));
    // Failure codes and publication times are kept where a design may write a terminal row:
    // S4 compares the whole row (31,851 states when they were erased, and a false S4).
    // 48,413 while the complete check was stateright's, whose states carried the last step's
    // outcome (decision 57); 27,509 before the complete check settled the properties the first
    // search had already broken (S1–S4, S6, S7 here: publication times, failure codes and
    // publication counts erased, decision 58).
    assert_eq!(report.unique_states, 7517, "the model's shape changed");
    assert_eq!(
        findings(&report),
        owned(&[
            ("S1", "violated", 4),
            ("S2", "violated", 1),
            ("S3", "violated", 10),
            ("S4", "violated", 6),
            ("S6", "violated", 2),
            ("S7", "violated", 3),
            ("S9", "not exercised", 0),
            ("S10", "not exercised", 0),
            ("S11", "violated", 5),
            ("R-S1", "unreached", 0),
            ("R-S8", "reached", 2),
            ("R-S6", "reached", 2),
            // No EXHAUSTED status, but a failure write counts the last attempt.
            ("R-S3", "reached", 9),
            ("R-S7", "reached", 6),
            ("R-order", "unreached", 0),
            ("R-S2", "reached", 2),
            ("R-S4", "reached", 4),
            ("R-S5", "reached", 3),
            ("R-S9", "unreached", 0),
            ("R-S10", "unreached", 0),
            ("R-S11", "reached", 4),
            ("L2", "violated", 19),
            ("L3", "violated", 7),
        ])
    );
}

#[test]
fn the_other_variants_and_a_mixed_fleet_are_reported_as_found() {
    let seed_v2 = run(&fleet(&["seed-v2", "seed-v2"], 1));
    let violated = |r: &CheckReport| -> Vec<String> {
        r.properties.iter().filter(|p| p.status == Verdict::Violated).map(|p| p.id.clone()).collect()
    };
    // Attempts counted only by the AMBIGUOUS write: crashes publish for free (S3); `now` from a
    // skewed relay clock takes live leases and early retries (S6, S7).
    assert_eq!(violated(&seed_v2), ["S3", "S6", "S7", "S11"]);
    // No EXHAUSTED state: a row over budget is never terminal (L1), not under an outage (L2).
    let seed_tenant = run(&fleet(&["seed-tenant", "seed-tenant"], 1));
    assert_eq!(violated(&seed_tenant), ["L1", "L2", "L3"]);
    // A rolling upgrade: the V1 relay's unfenced claim leaves the V2 relay's token standing.
    let mixed = run(&fleet(&["seed-v2", "legacy-v1"], 1));
    assert_eq!(violated(&mixed), ["S1", "S2", "S3", "S4", "S6", "S7", "S11", "L2", "L3"]);
    let s1 = mixed.property("S1").and_then(|p| p.counterexample.clone()).expect("a counterexample");
    let writer = s1.last().expect("a step").action;
    assert!(
        matches!(writer, outbox_check::world::Action::Write { relay: 0, .. }),
        "the seed-v2 relay's write applies: {writer:?}"
    );
}

/// Every design `check` knows, and two mixed fleets.
/// The rescuers (a job queue's maintenance job moving expired leases back), as design files:
/// fenced by expiry in one statement, by the token it read, and by id alone.
fn rescuers() -> Vec<Design> {
    ["expired", "token", "id"]
        .iter()
        .map(|fence| {
            let text = format!("name = \"rescue-by-{fence}\"\nbased_on = \"reference\"\n[maintenance]\njob = \"rescue-expired\"\nfence = \"{fence}\"\n");
            outbox_check::design::from_text(&text, &format!("rescue-by-{fence}.toml")).expect("a design file")
        })
        .collect()
}

/// The real queues' other axes, as design files: completion by deletion (by id), a visibility
/// timeout (the retry time in the lease's column) fenced by token and by id, and one whose claim
/// also takes live leases (so its retry clock can be broken).
fn queue_axes() -> Vec<Design> {
    [
        ("delete-by-id", "[write]\nfence = \"message-id-only\"\ncompletion = \"delete\"\n"),
        ("delete", "[write]\ncompletion = \"delete\"\n"),
        ("vt-token", "[write]\nfence = \"status-token\"\ncompletion = \"delete\"\n[retry]\nin_lease_column = true\n"),
        (
            "vt-by-id",
            "[write]\nfence = \"message-id-only\"\ncompletion = \"delete\"\n[retry]\nin_lease_column = true\n",
        ),
        ("vt-steals", "[claim]\ntakes_live_leases = true\n[retry]\nin_lease_column = true\n"),
        // Claims that never take an in-flight row (River, Graphile Worker, Oban): the reaper
        // alone, or a rescuer with each target and budget rule, and River's status-only fence.
        ("no-retake", "[claim]\ntakes_expired_leases = false\n"),
        (
            "river",
            "[claim]\ntakes_expired_leases = false\n[write]\nfence = \"status-only\"\n[maintenance]\njob = \"rescue-expired\"\ntarget = \"retry\"\nscheduler = true\n",
        ),
        // A scheduler that makes due retries claimable (River's JobSchedule), with reference's
        // claim and fences; and on each node's own clock, with a backoff that grows by a power.
        ("scheduler", "[maintenance]\nscheduler = true\n"),
        (
            "node-scheduler-power",
            "[relay]\nclock = \"relay\"\n[retry]\nbackoff = \"power\"\nexponent = 2\nbase_ms = 1000\ncap_ms = 100000\n[maintenance]\nscheduler = true\n",
        ),
        (
            "river-by-id",
            "[claim]\ntakes_expired_leases = false\n[write]\nfence = \"status-only\"\n[maintenance]\njob = \"rescue-expired\"\nfence = \"id\"\ntarget = \"retry\"\n",
        ),
        (
            "rescue-ignores-budget",
            "[claim]\ntakes_expired_leases = false\n[maintenance]\njob = \"rescue-expired\"\nbudget = \"ignored\"\n",
        ),
        ("pruner-fails", "[claim]\ntakes_expired_leases = false\n[maintenance]\njob = \"rescue-expired\"\ntarget = \"failed\"\n"),
        // Per-path rules and shared owners: Graphile Worker (completion by id, failures fenced by a
        // pool's shared owner id) and a retry write that never checks the budget (awa#435).
        (
            "graphile",
            "[claim]\ntakes_expired_leases = false\n[write]\nfence = \"message-id-only\"\nfailure_fence = \"status-owner\"\n[relay]\non_rejection = \"mark-retry\"\nshared_owner = true\n[maintenance]\njob = \"rescue-expired\"\n",
        ),
        ("shared-owner-fence", "[write]\nfence = \"status-owner\"\n[relay]\nshared_owner = true\n"),
        // Laravel's database queue: no budget in the reservation, a worker that fails a job
        // reserved past its tries without running it, failures that delete the row.
        (
            "laravel",
            "[claim]\nbudget = \"absent\"\nsets = \"unfenced\"\n[write]\nfence = \"message-id-only\"\ncompletion = \"delete\"\nfailure_deletes = true\n[relay]\nfails_claims_past_budget = true\n[maintenance]\njob = \"none\"\n",
        ),
        ("failure-deletes", "[write]\nfailure_deletes = true\n"),
        ("token-only", "[claim]\nsets = \"token-only\"\n[write]\nfence = \"status-token\"\n"),
        (
            "budget-from-copy",
            "[write]\nfence = \"message-id-only\"\n[retry]\nbudget_in_statement = false\n",
        ),
        (
            "retry-unchecked",
            "[retry]\nretry_write_checks_budget = false\n",
        ),
        // A lease the claiming relay's database session holds (good_job's advisory lock): ended by
        // a crash, a lost connection or the lease-lost fault, never by time; with reference's
        // fences, and with good_job's results by id.
        // Retry timers kept in each relay process, not in the row (CAP#1797): with reference's
        // fences, and with CAP's writes by id, no claim fence and failures that count attempts.
        ("per-process-timer", "[retry]\nclock = false\ntimer = \"per-process\"\n"),
        (
            "cap",
            "[claim]\nsets = \"unfenced\"\n[attempts]\ncounted_at = \"failure-write\"\n[write]\nfence = \"message-id-only\"\n[retry]\nclock = false\ntimer = \"per-process\"\n[exhaustion]\nstatus = false\n",
        ),
        // A relay whose every failure is final and that releases its lease by owner after each
        // write, with aegra's claim and status-only result (aegra 0.10.4: a worker name reused,
        // a reaper back to pending, a heartbeat by that name); and a heartbeat by token with
        // reference's fences.
        ("heartbeat-token", "[claim]\nrenewal = \"by-token\"\n"),
        (
            "aegra",
            "[claim]\ntakes_expired_leases = false\nsets = \"owner-only\"\nrenewal = \"by-owner\"\nbudget = \"absent\"\n[write]\nfence = \"status-only\"\nreleases_lease_by_owner = true\n[retry]\nclock = false\n[exhaustion]\nstatus = false\n[relay]\nshared_owner = true\non_failure = \"mark-failed\"\n[maintenance]\njob = \"rescue-expired\"\n",
        ),
        ("session", "[claim]\nlease = \"session\"\n"),
        (
            "good-job",
            "[claim]\nlease = \"session\"\nsets = \"owner-only\"\n[write]\nfence = \"message-id-only\"\n[maintenance]\njob = \"none\"\n",
        ),
    ]
    .iter()
    .map(|(name, keys)| {
        let text = format!("name = \"{name}\"\nbased_on = \"reference\"\n{keys}");
        outbox_check::design::from_text(&text, &format!("{name}.toml")).expect("a design file")
    })
    .collect()
}

fn every_fleet() -> Vec<Vec<Design>> {
    let mut fleets: Vec<Vec<Design>> = Variant::ALL
        .map(Design::Variant)
        .into_iter()
        .chain(Mutant::ALL.map(Design::Mutant))
        .map(|d| vec![d, d])
        .collect();
    fleets.push(vec![Design::Variant(Variant::SeedV2), Design::Variant(Variant::LegacyV1)]);
    fleets.push(vec![Design::Variant(Variant::Reference), Design::Mutant(Mutant::WriteIdOnly)]);
    fleets.extend(rescuers().into_iter().map(|d| vec![d, d]));
    fleets.extend(queue_axes().into_iter().map(|d| vec![d, d]));
    fleets
}

/// Every counterexample and example `check` reports, for every design and two mixed fleets,
/// replays in the plain world — and so does the file `check --out` writes for it, through
/// `outbox-check replay`'s reading of it. No path the reductions found is a checker bug.
#[test]
fn every_counterexample_of_every_fleet_replays_in_the_plain_world() {
    let dir = std::env::temp_dir().join(format!("outbox-check-replay-{}", std::process::id()));
    let mut replayed = 0;
    for designs in every_fleet() {
        let config = WorldConfig::fleet(&designs, 1, 1, 3, Faults::all());
        let report = run(&config);
        assert!(report.complete, "{designs:?}");
        for p in &report.properties {
            assert!(!p.note.as_deref().unwrap_or("").starts_with("checker bug"), "{designs:?} {}: {:?}", p.id, p.note);
        }
        let written = outbox_check_models::report::write_counterexamples(&report, &dir, "test").expect("written");
        for file in written
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "json") && !f.to_string_lossy().ends_with(".itf.json"))
        {
            let cx = outbox_check_models::report::CounterexampleFile::parse(&std::fs::read_to_string(file).unwrap())
                .expect("a file replay reads");
            let confirmed =
                outbox_check_models::replay::confirm(&cx.config, &cx.id, &cx.actions, cx.cycle_from, cx.message);
            assert!(confirmed.is_ok(), "{}: {:?}", file.display(), confirmed.err());
            replayed += 1;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(replayed > 40, "{replayed} files replayed");
}

/// At two messages the complete checks take minutes, but the counterexamples come from the exact
/// breadth-first search alone: every path it finds within 150,000 states, for every design and
/// two mixed fleets, replays in the plain world.
#[test]
fn every_shortest_path_at_two_messages_replays_in_the_plain_world() {
    use outbox_check_models::outbox::REACHABILITY;
    let names: BTreeSet<&'static str> =
        SAFETY_NAMES.iter().copied().chain(REACHABILITY.iter().map(|r| r.name())).collect();
    let mut replayed = 0;
    for designs in every_fleet() {
        let config = WorldConfig::fleet(&designs, 2, 1, 3, Faults::all());
        let model = OutboxModel::new(config.clone());
        let (paths, _) = outbox_check_models::check::bfs_paths(
            &model,
            &names,
            &|found| found.len() == names.len(),
            Some(150_000),
            None,
        );
        for (name, actions, _) in paths {
            let id = name.split(' ').next().unwrap();
            let real: Vec<_> = replay(&config, &actions).iter().map(|s| s.action).collect();
            let confirmed = outbox_check_models::replay::confirm(&config, id, &real, None, None);
            assert!(confirmed.is_ok(), "{designs:?} {id}: {:?}", confirmed.err());
            replayed += 1;
        }
    }
    assert!(replayed > 100, "{replayed} paths replayed");
}

/// `replay` says so when a file does not show what it claims.
#[test]
fn a_path_that_stops_short_does_not_replay() {
    let config = fleet(&["legacy-v1", "legacy-v1"], 1);
    let report = run(&config);
    let s1 = report.property("S1").and_then(|p| p.counterexample.clone()).expect("S1 is broken");
    let mut actions: Vec<_> = s1.iter().map(|s| s.action).collect();
    assert!(outbox_check_models::replay::confirm(&config, "S1", &actions, None, None).is_ok());
    actions.pop();
    let refused = outbox_check_models::replay::confirm(&config, "S1", &actions, None, None);
    assert!(refused.is_err(), "a path without its last step still broke S1");
    // An action that is not possible where it is taken.
    actions.insert(0, outbox_check::world::Action::Write { relay: 0, db: outbox_check::world::DbFate::Ok });
    let refused = outbox_check_models::replay::confirm(&config, "S1", &actions, None, None).unwrap_err();
    assert!(refused.0.contains("step 1"), "{refused}");
    // The text of such a path stops before the step, where the world would refuse it.
    assert!(replay(&config, &actions).is_empty());
}

/// The reductions (time, tokens, claim numbers, dead fields, relay symmetry) change no verdict:
/// the plain world, bounded in time, finds the same safety violations and reachable situations.
#[test]
fn reductions_change_no_verdict() {
    // legacy-v1 has no budget, so its plain world grows with every tick; the budgeted designs
    // have plain worlds small enough to explore in a test.
    let designs: Vec<Design> = [Variant::Reference, Variant::SeedV2, Variant::SeedTenant]
        .map(Design::Variant)
        .into_iter()
        .chain(
            [
                Mutant::ClaimNoTokenBump,
                Mutant::WriteOwnerOnly,
                Mutant::WriteIdOnly,
                Mutant::SwallowStale,
                Mutant::StealLiveLease,
                Mutant::ExhaustOffByOne,
            ]
            .map(Design::Mutant),
        )
        .chain(rescuers())
        .chain(queue_axes())
        .collect();
    for design in designs {
        // Distinct relay ids, so the relay symmetry is exercised too.
        let config = WorldConfig::fleet(
            &[design, design],
            1,
            1,
            2,
            Faults::parse("crash,broker-drop,broker-reject,clock-skew,lease-lost").unwrap(),
        );
        let mut config = config;
        let reduced = OutboxModel::new(config.clone()).checker().spawn_bfs().join();
        let abstracted = OutboxModel::for_safety(config.clone(), 0).checker().spawn_bfs().join();
        config.time_max = Some(outbox_check::core::Instant(6));
        let plain = OutboxModel::unreduced(config).checker().spawn_bfs().join();
        let names = |c: &dyn Fn() -> BTreeSet<&'static str>| c();
        let reduced_found = names(&|| reduced.discoveries().keys().copied().collect());
        let plain_found = names(&|| plain.discoveries().keys().copied().collect());
        let is_safety = |name: &&str| OutboxModel::spec_property(name).is_some();
        let abstract_violated: BTreeSet<&str> = abstracted.discoveries().keys().copied().collect();
        let plain_violated: BTreeSet<&str> = plain_found.iter().copied().filter(is_safety).collect();
        let (r, a, p) = (reduced.unique_state_count(), abstracted.unique_state_count(), plain.unique_state_count());
        println!("{design}: plain {p} states, reduced {r}, with the safety abstractions {a}");
        assert_eq!(reduced_found, plain_found, "{design}: reduced {r} states, plain {p}");
        assert_eq!(
            abstract_violated, plain_violated,
            "{design}: the safety abstractions ({a} states) against plain ({p})"
        );
        assert!(r < p, "{design}: the reductions reduce");
        assert!(a <= r, "{design}: the abstractions do not add states");
    }
}

#[test]
fn every_mutant_is_killed_by_a_property_mutants_md_lists() {
    let pinned: &[(Mutant, &str, usize)] = &[
        (Mutant::ClaimNoTokenBump, "S2", 1),
        (Mutant::WriteOwnerOnly, "S1", 6),
        (Mutant::WriteIdOnly, "S1", 6),
        (Mutant::SwallowStale, "S1", 3),
        (Mutant::StealLiveLease, "S6", 2),
        (Mutant::NoRetryClock, "S7", 3),
        (Mutant::NoBudgetPredicate, "S3", 10),
        (Mutant::ExhaustOffByOne, "S3", 10),
        (Mutant::ClaimTerminal, "S4", 4),
        (Mutant::PublishBeforeAck, "S5", 2),
        (Mutant::RetryAfterDbLoss, "S5", 5),
        (Mutant::FreshIdempotencyKey, "S8", 2),
        (Mutant::WriteIgnoresTenant, "S9", 3),
        (Mutant::TokenResetOnRequeue, "S2", 4),
    ];
    // A kill is a property verify gates on (not S11, which reference breaks too: decision 77).
    let safety: BTreeSet<&'static str> =
        SAFETY_NAMES.into_iter().filter(|n| OutboxModel::spec_property(n).is_some_and(|p| p.gated())).collect();
    for &(mutant, property, depth) in pinned {
        let model = OutboxModel::new(outbox_check_models::check::mutant_config(Design::Mutant(mutant)));
        let first = outbox_check_models::check::shortest_paths_until(&model, &safety, 1);
        let killers: Vec<(String, usize)> = first
            .iter()
            .map(|(name, actions, _)| (OutboxModel::spec_property(name).unwrap().id().to_string(), actions.len()))
            .collect();
        assert!(
            killers.contains(&(property.to_string(), depth)),
            "{mutant}: killed by {killers:?}, pinned {property} at {depth}"
        );
        assert!(mutant.expected_kills().contains(&property), "{mutant}: {property} is not what docs/designs.md lists");
    }
}

/// The safety abstractions hide no mutant: in the mutants' world the complete check of
/// `check` (abstract model, no reachability flag tracked) finds every safety violation the exact
/// model finds, and no other. The default run takes the mutants whose exact worlds are small
/// (among them `publish-before-ack`, whose relays publish after writing, which the
/// publication count's abstraction must see coming); `-- --ignored` takes all fourteen (five to
/// ten minutes: see reports/bench.md).
#[test]
fn the_safety_abstractions_hide_no_small_mutant() {
    abstractions_hide_no_mutant(&[
        Mutant::PublishBeforeAck,
        Mutant::NoRetryClock,
        Mutant::WriteIgnoresTenant,
        Mutant::StealLiveLease,
        Mutant::FreshIdempotencyKey,
    ]);
}

#[test]
#[ignore = "five to ten minutes; the small mutants run by default"]
fn the_safety_abstractions_hide_no_mutant() {
    abstractions_hide_no_mutant(&Mutant::ALL);
}

fn abstractions_hide_no_mutant(mutants: &[Mutant]) {
    for &mutant in mutants {
        let started = std::time::Instant::now();
        let config = outbox_check_models::check::mutant_config(Design::Mutant(mutant));
        let exact = OutboxModel::new(config.clone()).checker().threads(2).spawn_bfs().join();
        let abstracted = OutboxModel::for_safety(config, 0).checker().threads(2).spawn_bfs().join();
        let violated = |names: Vec<&'static str>| -> BTreeSet<&'static str> {
            names.into_iter().filter(|n| OutboxModel::spec_property(n).is_some()).collect()
        };
        let exact_violated = violated(exact.discoveries().keys().copied().collect());
        let abstract_violated = violated(abstracted.discoveries().keys().copied().collect());
        println!(
            "{mutant}: exact {} abstract {} states, {:?}",
            exact.unique_state_count(),
            abstracted.unique_state_count(),
            started.elapsed()
        );
        assert!(!exact_violated.is_empty(), "{mutant}: killed in the exact model");
        assert_eq!(abstract_violated, exact_violated, "{mutant}");
    }
}

/// The world the mutants are checked in is one `reference` survives, so each kill is the
/// mutant's doing (S11 aside, which kills nothing: decision 77).
#[test]
fn reference_survives_the_mutants_world() {
    let model = OutboxModel::new(outbox_check_models::check::mutant_config(Design::Variant(Variant::Reference)));
    let checker = model.checker().threads(2).spawn_bfs().join();
    let violated: Vec<&str> =
        checker.discoveries().keys().copied().filter(|n| OutboxModel::spec_property(n).is_some()).collect();
    assert_eq!(violated, ["S11 no false failure"]);
    assert!(checker.unique_state_count() > 10_000);
}

#[test]
fn two_messages_show_that_reference_does_not_keep_order_per_aggregate() {
    let mut config = fleet(&["reference"], 2);
    config.faults = Faults::parse("broker-drop").unwrap();
    let report = run(&config);
    assert!(!report.violated_gated());
    let order = report.property("R-order").expect("the ordering property");
    assert_eq!(order.status, Verdict::Reached);
    let steps = order.counterexample.as_ref().unwrap();
    assert!(steps.last().unwrap().text.iter().any(|t| t.contains("m1") && t.contains("PUBLISHED")), "{steps:#?}");
    let _ = replay;
}

/// The model checker normalises a successor with `normalise_after`, which skips what its step
/// cannot have changed: on every step of these searches it gives exactly what the full
/// normalisation gives, state and relay permutation alike.
#[test]
fn normalising_after_a_step_equals_normalising_in_full() {
    use outbox_check::world::{FleetFacts, World};
    use std::collections::{HashSet, VecDeque};
    let mut configs = vec![
        fleet(&["reference", "reference"], 2),
        fleet(&["seed-tenant", "seed-tenant"], 1),
        fleet(&["seed-v2", "legacy-v1"], 1),
        outbox_check_models::check::mutant_config(Design::Variant(Variant::Reference)),
    ];
    configs.extend(rescuers().into_iter().map(|d| WorldConfig::fleet(&[d, d], 2, 1, 3, Faults::all())));
    configs[1].relays[1].skew = -2;
    // Retry timers in each relay process, one relay's clock behind: the timers are instants of
    // their own to make relative.
    let timers = queue_axes().into_iter().find(|d| d.to_string() == "per-process-timer").expect("the axis");
    let mut with_timers = WorldConfig::fleet(&[timers, timers], 1, 1, 3, Faults::all());
    with_timers.relays[1].skew = -2;
    configs.push(with_timers);
    for config in configs {
        let facts = FleetFacts::of(&config);
        // The exact model, the safety check's with nothing settled, and with everything settled
        // (the liveness graphs').
        for safety in [None, Some(Abstraction::tracking(0)), Some(Abstraction::LIVENESS)] {
            let mut init = World::new(&config);
            init.normalise_by(&config, &facts, safety);
            let mut seen = HashSet::from([outbox_check::world::fingerprint(&init)]);
            let mut queue = VecDeque::from([init]);
            let mut actions = Vec::new();
            let mut steps = 0;
            while let Some(state) = queue.pop_front() {
                if seen.len() > 20_000 {
                    break;
                }
                actions.clear();
                state.actions(&config, &mut actions);
                for &action in &actions {
                    let mut fast = state.clone();
                    fast.advance(&config, action);
                    let mut full = fast.clone();
                    let full_perm = full.normalise_by(&config, &facts, safety);
                    let fast_perm = fast.normalise_after(&config, &facts, safety, action);
                    if fast != full {
                        panic!(
                            "after {action:?}\nfrom {:?} {:?} {:?}\nfast {:?} {:?} {:?}\nfull {:?} {:?} {:?}",
                            state.now,
                            state
                                .outbox
                                .rows()
                                .iter()
                                .map(|r| (r.status, r.created_at, r.lease_expires_at, r.next_attempt_at))
                                .collect::<Vec<_>>(),
                            state.relays,
                            fast.now,
                            fast.outbox
                                .rows()
                                .iter()
                                .map(|r| (r.status, r.created_at, r.lease_expires_at, r.next_attempt_at))
                                .collect::<Vec<_>>(),
                            fast.relays,
                            full.now,
                            full.outbox
                                .rows()
                                .iter()
                                .map(|r| (r.status, r.created_at, r.lease_expires_at, r.next_attempt_at))
                                .collect::<Vec<_>>(),
                            full.relays
                        );
                    }
                    assert_eq!(fast_perm, full_perm, "{action:?}");
                    steps += 1;
                    if seen.insert(outbox_check::world::fingerprint(&full)) {
                        queue.push_back(full);
                    }
                }
            }
            assert!(steps > 1_000, "{steps} steps compared");
        }
    }
}

/// The model's time scale as options: other leases, backoffs and skews
/// still change no verdict under the reductions, and a relay's clock is the one asked for.
#[test]
fn other_time_scales_change_no_verdict_under_the_reductions() {
    for (design, lease, base, cap, skew) in [
        (Design::Variant(Variant::Reference), 3u64, 2u64, 4u64, 1i64),
        (Design::Variant(Variant::SeedV2), 1, 1, 2, 3),
        (Design::Mutant(Mutant::WriteOwnerOnly), 3, 1, 1, 2),
        // Clocks behind true time: a design that claims by the relay's clock, and one that
        // writes by it while its claims read the database's.
        (Design::Variant(Variant::SeedV2), 2, 1, 4, -2),
        (write_clock_behind(), 2, 1, 4, -2),
        (write_clock_behind(), 2, 1, 4, -3),
    ] {
        let mut config = WorldConfig::fleet(
            &[design, design],
            1,
            1,
            2,
            Faults::parse("crash,broker-drop,broker-reject,clock-skew").unwrap(),
        );
        config.lease = outbox_check::core::Duration(lease);
        config.backoff_base = outbox_check::core::Duration(base);
        config.backoff_cap = outbox_check::core::Duration(cap);
        for relay in config.relays.iter_mut().filter(|r| r.skew != 0) {
            relay.skew = skew;
        }
        let reduced = OutboxModel::new(config.clone()).checker().spawn_bfs().join();
        config.time_max = Some(outbox_check::core::Instant(7));
        let plain = OutboxModel::unreduced(config).checker().spawn_bfs().join();
        let found = |c: &dyn Fn() -> BTreeSet<&'static str>| c();
        let (r, p) = (
            found(&|| reduced.discoveries().keys().copied().collect()),
            found(&|| plain.discoveries().keys().copied().collect()),
        );
        assert_eq!(r, p, "{design} lease {lease} backoff {base}-{cap} skew {skew}");
    }
}

/// NServiceBus.SqlServer 4.2's clocks on reference: claims by the database's clock, writes by
/// the relay's (`relay.write_clock`).
fn write_clock_behind() -> Design {
    let text =
        "name = \"write-clock\"\nbased_on = \"reference\"\n[relay]\nclock = \"database\"\nwrite_clock = \"relay\"\n";
    outbox_check::design::from_text(text, "write-clock.toml").expect("a design file")
}

/// A fleet whose second relay's clock runs behind true time starts that many ticks in, as its
/// normalised states do: every counterexample `check` reports replays in the plain world, for a
/// design that claims by the relay's clock and for one that writes by it.
#[test]
fn a_clock_behind_true_time_gives_counterexamples_that_replay() {
    let mut replayed = 0;
    for (design, skew) in
        [(Design::Variant(Variant::SeedV2), -2), (write_clock_behind(), -2), (write_clock_behind(), -4)]
    {
        let mut config = WorldConfig::fleet(&[design, design], 1, 1, 3, Faults::all());
        for relay in config.relays.iter_mut().filter(|r| r.skew != 0) {
            relay.skew = skew;
        }
        let report = run(&config);
        assert!(report.complete, "{design} {skew}");
        for p in &report.properties {
            assert!(!p.note.as_deref().unwrap_or("").starts_with("checker bug"), "{design} {}: {:?}", p.id, p.note);
            if let Some(path) = &p.counterexample {
                let actions: Vec<_> = path.iter().map(|s| s.action).collect();
                let confirmed = outbox_check_models::replay::confirm(&config, &p.id, &actions, p.cycle_from, p.message);
                assert!(confirmed.is_ok(), "{design} skew {skew} {}: {:?}", p.id, confirmed.err());
                replayed += 1;
            }
        }
    }
    assert!(replayed >= 6, "{replayed} paths replayed");
}

/// What one search found, as property names: the safety properties some step broke and the
/// reachability flags of `tracked` some step reached.
fn engine_found(found: &outbox_check_models::graph::Explored, tracked: u16) -> BTreeSet<&'static str> {
    let reach = outbox_check_models::outbox::REACHABILITY
        .iter()
        .enumerate()
        .filter(|(i, _)| found.reached & tracked & (1 << i) != 0);
    SAFETY_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| found.violated & (1 << i) != 0)
        .map(|(_, n)| *n)
        .chain(reach.map(|(_, r)| r.name()))
        .collect()
}

fn engine(
    config: &WorldConfig,
    normalisation: Abstraction,
    threads: usize,
    keep_graph: bool,
    shard: Option<outbox_check_models::graph::Shard>,
) -> outbox_check_models::graph::Explored {
    let job = outbox_check_models::graph::Explore {
        config,
        normalisation: Some(normalisation),
        threads,
        keep_graph,
        graph_limit: usize::MAX,
        limit_stops: false,
        shard,
    };
    outbox_check_models::graph::explore(&job, &|| false, &|_, _| {})
}

/// The complete check's own search (edge-labelled, fingerprints only, several threads) against
/// stateright's BFS of the model that carries each step's outcome in the state, for every
/// variant, every mutant, the rescuers and queue axes and two mixed fleets at one message, and
/// reference at two: the same violations and the same situations reached, on one thread and on
/// two, with the graph kept and without; every shard of a three-way sharded search completes,
/// and the shards together find exactly what the whole search finds.
#[test]
fn the_check_engine_finds_what_stateright_finds() {
    let all = (1u16 << outbox_check_models::outbox::REACHABILITY.len()) - 1;
    let mut configs: Vec<(WorldConfig, Vec<u16>)> =
        every_fleet().into_iter().map(|d| (WorldConfig::fleet(&d, 1, 1, 3, Faults::all()), vec![all, 0])).collect();
    configs.push((fleet(&["reference", "reference"], 2), vec![0]));
    for (config, masks) in configs {
        let name = config.relays.iter().map(|r| r.design.name().to_string()).collect::<Vec<_>>().join("+");
        for tracked in masks {
            let stateright = OutboxModel::for_safety(config.clone(), tracked).checker().threads(2).spawn_bfs().join();
            let expected: BTreeSet<&'static str> = stateright.discoveries().keys().copied().collect();
            let normalisation = Abstraction::tracking(tracked & outbox_check::world::ABSTRACTION_READS);
            let one = engine(&config, normalisation, 1, false, None);
            let two = engine(&config, normalisation, 2, false, None);
            let graph = engine(&config, normalisation, 2, true, None);
            assert!(one.complete && two.complete && graph.complete, "{name}");
            assert_eq!(engine_found(&one, tracked), expected, "{name} (tracked {tracked:#x}), one thread");
            assert_eq!(engine_found(&two, tracked), expected, "{name}, two threads");
            assert_eq!(engine_found(&graph, tracked), expected, "{name}, graph kept");
            assert_eq!(
                (one.unique, one.generated),
                (two.unique, two.generated),
                "{name}: the count depends on no thread"
            );
            assert_eq!(
                (graph.unique, graph.max_depth),
                (two.unique, two.max_depth),
                "{name}: the graph is the search's"
            );
            assert_eq!(graph.graph.as_ref().map(|g| g.len()), Some(graph.unique), "{name}");
            // Carrying the step's outcome in the state only ever splits states.
            assert!(two.unique <= stateright.unique_state_count(), "{name}");
            {
                let count = 3u32;
                let shards: Vec<_> = (0..count)
                    .map(|index| {
                        engine(
                            &config,
                            normalisation,
                            2,
                            false,
                            Some(outbox_check_models::graph::Shard { index, count }),
                        )
                    })
                    .collect();
                assert!(shards.iter().all(|s| s.complete), "{name}");
                let union: BTreeSet<&'static str> = shards.iter().flat_map(|s| engine_found(s, tracked)).collect();
                assert_eq!(union, expected, "{name} in {count} shards");
                // Together they visit every state (shards overlap below their split, never miss).
                assert!(shards.iter().map(|s| s.unique).sum::<usize>() >= two.unique, "{name} in {count} shards");
            }
        }
    }
}

/// `check --shard` then `merge` gives the verdicts, counterexample lengths and reachability
/// of the unsharded check, for a fleet that breaks properties and for reference.
#[test]
fn merged_shards_give_the_unsharded_verdicts() {
    for designs in [["legacy-v1", "legacy-v1"], ["reference", "reference"], ["seed-v2", "legacy-v1"]] {
        let config = fleet(&designs, 1);
        let whole = check(&config, &CheckOptions { liveness: false, ..CheckOptions::default() }, &|_, _| {});
        let shards: Vec<(String, CheckReport)> = (0..3)
            .map(|index| {
                let shard = Some(outbox_check_models::graph::Shard { index, count: 3 });
                (
                    format!("shard {index}"),
                    check(&config, &CheckOptions { liveness: false, shard, ..CheckOptions::default() }, &|_, _| {}),
                )
            })
            .collect();
        let merged = outbox_check_models::check::merge_shards(shards).expect("the shards of one search");
        let verdicts = |r: &CheckReport| {
            r.properties
                .iter()
                .map(|p| (p.id.clone(), p.status.clone(), p.counterexample.as_ref().map(|c| c.len())))
                .collect::<Vec<_>>()
        };
        assert_eq!(verdicts(&merged), verdicts(&whole), "{designs:?}");
        assert!(merged.complete && merged.decided(), "{designs:?}");
    }
}

/// Settling (decision 58): the complete check erases the ghost fields that only the safety
/// properties an exact path already broke read. Each property settled alone, and all of them,
/// against none settled, for every design and two mixed fleets at one message and the designs
/// whose unsettled search is small at two: every other property is broken exactly where it was,
/// every tracked situation reached exactly where it was, and settling never adds a state.
#[test]
fn settling_a_property_hides_no_other_finding() {
    use outbox_check_models::outbox::REACHABILITY;
    let all_flags = (1u16 << REACHABILITY.len()) - 1;
    let every: Vec<u16> =
        (0..SAFETY_NAMES.len()).map(|i| 1u16 << i).chain([(1u16 << SAFETY_NAMES.len()) - 1]).collect();
    let mut configs: Vec<WorldConfig> =
        every_fleet().iter().map(|d| WorldConfig::fleet(d, 1, 1, 3, Faults::all())).collect();
    configs.extend([fleet(&["reference", "reference"], 2), fleet(&["seed-tenant", "seed-tenant"], 2)]);
    // One relay writing by id alone that republishes after a lost connection: its only S1 is a
    // rewrite that changed nothing (whole rows compared, published_at included), which erasing
    // S4's published_at hid (issue 27, item 9). With one relay no superseded write breaks S1
    // too, so the first search cannot have settled S1 itself.
    let text = "name = \"by-id-republish\"\nbased_on = \"reference\"\n[write]\nfence = \"message-id-only\"\n\
                [relay]\nrepublish_after_db_loss = true\n";
    let by_id = outbox_check::design::from_text(text, "by-id-republish.toml").expect("a design file");
    configs.push(WorldConfig::fleet(&[by_id], 1, 1, 3, Faults::all()));
    let mut merged = 0;
    for config in configs {
        let name = config.relays.iter().map(|r| r.design.name().to_string()).collect::<Vec<_>>().join("+");
        for tracked in [all_flags, 0] {
            let reads = tracked & outbox_check::world::ABSTRACTION_READS;
            let base = engine(&config, Abstraction { tracked: reads, settled: 0 }, 2, false, None);
            for &settled in &every {
                let settled_run = engine(&config, Abstraction { tracked: reads, settled }, 2, false, None);
                assert!(base.complete && settled_run.complete, "{name}");
                let others = |violated: u16| violated & !settled;
                assert_eq!(
                    others(settled_run.violated),
                    others(base.violated),
                    "{name}: settled {settled:#x}, tracked {tracked:#x}"
                );
                assert_eq!(
                    settled_run.reached & tracked,
                    base.reached & tracked,
                    "{name}: settled {settled:#x}, tracked {tracked:#x}"
                );
                assert!(settled_run.unique <= base.unique, "{name}: settling added states");
                merged += base.unique - settled_run.unique;
            }
        }
    }
    assert!(merged > 0, "settling merged no state anywhere: the test shows nothing");
}

/// `check` with settling and without: every property's verdict (liveness included, whose
/// graph is the complete check's) and every counterexample's length are the same, for every
/// design and two mixed fleets.
#[test]
fn settling_changes_no_verdict_of_check() {
    let verdicts = |r: &CheckReport| {
        r.properties
            .iter()
            .map(|p| {
                // A lasso is the first fair one the graph shows: its length may differ in a
                // smaller graph; that it replays is checked (or the verdict would be unknown).
                let length = if p.kind == outbox_check_models::check::Kind::Liveness {
                    None
                } else {
                    p.counterexample.as_ref().map(|c| c.len())
                };
                (p.id.clone(), p.status.clone(), length)
            })
            .collect::<Vec<_>>()
    };
    for designs in every_fleet() {
        let config = WorldConfig::fleet(&designs, 1, 1, 3, Faults::all());
        let settled = check(&config, &CheckOptions::default(), &|_, _| {});
        let plain = check(&config, &CheckOptions { settle: false, ..CheckOptions::default() }, &|_, _| {});
        assert!(settled.decided() && plain.decided(), "{designs:?}");
        assert_eq!(verdicts(&settled), verdicts(&plain), "{designs:?}");
        assert!(settled.unique_states <= plain.unique_states, "{designs:?}");
    }
}

/// The liveness graphs normalise with every safety property settled
/// (`Abstraction::LIVENESS`): L1–L3, the permanent-outage world's L2 included, decide as on the
/// graph with none settled, for every design and two mixed fleets.
#[test]
fn the_liveness_graphs_settle_nothing_liveness_reads() {
    use outbox_check_models::liveness::{check_l1, check_l2, check_l3, Graph};
    let never = || None;
    for designs in every_fleet() {
        let config = WorldConfig::fleet(&designs, 1, 1, 3, Faults::all());
        let outage = outbox_check_models::check::world_of(&config, "L2");
        let graph = |config: &WorldConfig, abstraction| {
            Graph::build_with(config, Some(abstraction), usize::MAX, 2, &never).expect("a small graph").0
        };
        let found = |v: outbox_check_models::liveness::LassoVerdict| (v.lasso.is_some(), v.message);
        let (plain, settled) = (graph(&config, Abstraction::tracking(0)), graph(&config, Abstraction::LIVENESS));
        assert_eq!(found(check_l1(&settled, &config)), found(check_l1(&plain, &config)), "{designs:?} L1");
        assert_eq!(found(check_l3(&settled, &config)), found(check_l3(&plain, &config)), "{designs:?} L3");
        let (plain, settled) = (graph(&outage, Abstraction::tracking(0)), graph(&outage, Abstraction::LIVENESS));
        assert_eq!(found(check_l2(&settled, &outage)), found(check_l2(&plain, &outage)), "{designs:?} L2");
        assert!(settled.len() <= plain.len(), "{designs:?}");
    }
}

/// Settling at verify's own size, two messages, where the unsettled search still finishes in
/// minutes: `seed-v2` with each property settled alone and all of them, `legacy-v1` and the
/// rolling upgrade with all of them against none (`legacy-v1` unsettled: 24 M states with no
/// flag tracked, 40 M with every flag; the rolling upgrade is checked with no flag tracked, as
/// `check` runs it). The same check as `settling_a_property_hides_no_other_finding`; run with
/// `-- --ignored` (reports/bench.md has the last run).
fn settling_hides_nothing(designs: [&str; 2], masks: &[u16], trackings: &[u16]) {
    for &tracked in trackings {
        let config = fleet(&designs, 2);
        let reads = tracked & outbox_check::world::ABSTRACTION_READS;
        let started = std::time::Instant::now();
        let base = engine(&config, Abstraction { tracked: reads, settled: 0 }, 2, false, None);
        println!(
            "{designs:?} tracked {tracked:#x} unsettled: {} states in {:.1} s",
            base.unique,
            started.elapsed().as_secs_f64()
        );
        for &settled in masks {
            let started = std::time::Instant::now();
            let run = engine(&config, Abstraction { tracked: reads, settled }, 2, false, None);
            println!(
                "{designs:?} settled {settled:#x}: {} states in {:.1} s",
                run.unique,
                started.elapsed().as_secs_f64()
            );
            assert!(base.complete && run.complete, "{designs:?}");
            assert_eq!(run.violated & !settled, base.violated & !settled, "{designs:?} settled {settled:#x}");
            assert_eq!(run.reached & tracked, base.reached & tracked, "{designs:?} settled {settled:#x}");
            assert!(run.unique <= base.unique, "{designs:?}");
        }
    }
}

const ALL_FLAGS: u16 = (1 << outbox_check_models::outbox::REACHABILITY.len()) - 1;
const ALL_SETTLED: u16 = (1 << SAFETY_NAMES.len()) - 1;

#[test]
#[ignore = "ten minutes: verify's size, unsettled"]
fn settling_hides_nothing_in_seed_v2_at_two_messages() {
    let each: Vec<u16> = (0..SAFETY_NAMES.len()).map(|i| 1u16 << i).chain([ALL_SETTLED]).collect();
    settling_hides_nothing(["seed-v2", "seed-v2"], &each, &[ALL_FLAGS, 0]);
}

#[test]
#[ignore = "fifteen minutes and several GB: verify's size, unsettled"]
fn settling_hides_nothing_in_legacy_v1_at_two_messages() {
    settling_hides_nothing(["legacy-v1", "legacy-v1"], &[ALL_SETTLED], &[ALL_FLAGS, 0]);
}

#[test]
#[ignore = "many minutes and several GB: verify's size, unsettled"]
fn settling_hides_nothing_in_the_rolling_upgrade_at_two_messages() {
    settling_hides_nothing(["seed-v2", "legacy-v1"], &[ALL_SETTLED], &[0]);
}

/// Every complete check states how likely a 64-bit fingerprint collision made it miss a state:
/// the birthday bound over the states it kept, growing with them.
#[test]
fn a_complete_check_bounds_the_chance_of_a_fingerprint_collision() {
    let small = run(&fleet(&["reference"], 1));
    let larger = run(&fleet(&["reference", "reference"], 1));
    for report in [&small, &larger] {
        let n = report.unique_states as f64;
        let bound = n * (n - 1.0) / 2.0 / 2f64.powi(64);
        assert!(report.collision_bound > 0.0, "{}", report.collision_bound);
        assert!((report.collision_bound - bound).abs() <= bound * 1e-9, "{} vs {bound}", report.collision_bound);
    }
    assert!(larger.unique_states > small.unique_states && larger.collision_bound > small.collision_bound);
    assert!(outbox_check_models::check::collision_bound(usize::MAX) <= 1.0);
    assert_eq!(outbox_check_models::check::collision_bound(1), 0.0);
}

/// The complete check divided among timely workers by owner (`check --workers N`, issue 31):
/// every design and mixed fleet of `every_fleet` at one message, and reference at two, give
/// with 1, 2 and 4 workers the same states, depth, verdicts, reachability
/// and counterexample lengths as the search in one process; the workers' own counts add up to
/// the unique states, and with 4 no worker holds more than half of them.
#[test]
fn workers_divide_the_complete_check_and_change_no_verdict() {
    use outbox_check_models::check::try_check;
    use outbox_check_models::cluster::Workers;
    let mut configs: Vec<WorldConfig> =
        every_fleet().iter().map(|d| WorldConfig::fleet(d, 1, 1, 3, Faults::all())).collect();
    configs.push(fleet(&["reference", "reference"], 2));
    let verdicts = |r: &CheckReport| {
        r.properties
            .iter()
            .map(|p| (p.id.clone(), p.status.clone(), p.counterexample.as_ref().map(|c| c.len())))
            .collect::<Vec<_>>()
    };
    for config in configs {
        let name = config.relays.iter().map(|r| r.design.name().to_string()).collect::<Vec<_>>().join("+");
        let options = CheckOptions { liveness: false, ..CheckOptions::default() };
        let whole = check(&config, &options, &|_, _| {});
        for n in [1, 2, 4] {
            let workers = Some(Workers::Here { threads: n });
            let divided = try_check(&config, &CheckOptions { workers, ..options.clone() }, &|_, _| {})
                .expect("workers in this process");
            assert!(divided.complete, "{name} on {n} workers");
            assert_eq!(
                (divided.states, divided.unique_states, divided.max_depth),
                (whole.states, whole.unique_states, whole.max_depth),
                "{name} on {n} workers"
            );
            assert_eq!(verdicts(&divided), verdicts(&whole), "{name} on {n} workers");
            let states = divided.worker_states.expect("the workers' counts");
            assert_eq!(states.len(), n, "{name}");
            assert_eq!(states.iter().sum::<usize>(), whole.unique_states, "{name} on {n} workers");
            if n == 4 && whole.unique_states >= 1000 {
                assert!(states.iter().all(|s| *s <= whole.unique_states / 2), "{name}: {states:?}");
            }
        }
    }
}
