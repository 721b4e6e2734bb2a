//! Random walks through the whole world — relays running the sans-IO cycle, the broker, the
//! consumer, crashes, lost connections, clock skew — for every variant and mutant. What a walk
//! breaks is the auditor's finding, pinned here; `reference` must break nothing but S11.

use outbox_check::core::{Property, RelayId, TenantId};
use outbox_check::design::{Design, Mutant, Variant};
use outbox_check::search::{search, Finding};
use outbox_check::world::{Faults, RelaySpec, WorldConfig};

const SEEDS: u64 = 2000;
const STEPS_MAX: usize = 80;

/// Three relays of `design`: r1's clock runs 2 ms ahead; slot 2 reuses r0's id (a restarted relay
/// while its paused predecessor still lives); one operator requeue; the application's enqueues
/// (stale ones too) are steps of the walk.
fn fleet(designs: [Design; 3]) -> WorldConfig {
    let mut config = WorldConfig::small(designs[0], 3, 3);
    for (i, design) in designs.into_iter().enumerate() {
        config.relays[i].design = design;
    }
    config.relays[1].skew = 2;
    config.relays[2].owner = RelayId(0);
    config.requeues = 1;
    config.enqueue_actions = true;
    config
}

fn ids(found: &[Finding]) -> Vec<&'static str> {
    found.iter().map(|f| f.property.id()).collect()
}

fn describe(design: &str, found: &[Finding]) -> String {
    let mut text = format!("{design}: {:?}", ids(found));
    for f in found {
        text +=
            &format!("\n  {} (seed {}, {} steps): {}", f.property.id(), f.seed, f.actions.len(), f.violation.detail());
    }
    text
}

#[test]
fn reference_breaks_nothing_in_any_fleet_shape() {
    let reference = Design::Variant(Variant::Reference);
    let mut shapes = vec![fleet([reference; 3])];
    let mut two_tenants = WorldConfig::small(reference, 2, 4);
    two_tenants.tenants = 2;
    two_tenants.relays[1].tenant_id = TenantId(1);
    two_tenants.requeues = 2;
    shapes.push(two_tenants);
    let mut batch = WorldConfig::small(reference, 2, 3);
    batch.batch = 2;
    batch.max_attempts = 2;
    shapes.push(batch);
    for config in shapes {
        // Nothing but S11, the false failure its reaper records (decision 77).
        let found: Vec<Finding> =
            search(&config, SEEDS, STEPS_MAX).into_iter().filter(|f| f.property.gated()).collect();
        assert!(found.is_empty(), "{}", describe("reference", &found));
    }
}

#[test]
fn world_search_pins_what_each_design_breaks() {
    // S11, the false failure, is found wherever a relay only paused past its lease delivers a
    // row another relay or the reaper recorded failed: reference too, and every design built on
    // it (decision 77).
    let pinned: &[(&str, &[&str])] = &[
        ("reference", &["S11"]),
        ("seed-v2", &["S3", "S6", "S7", "S11"]),
        ("legacy-v1", &["S1", "S2", "S3", "S4", "S6", "S7", "S11"]),
        ("seed-tenant", &[]),
        ("claim-no-token-bump", &["S1", "S2", "S11"]),
        ("write-owner-only", &["S1", "S11"]),
        ("write-id-only", &["S1", "S4", "S11"]),
        ("swallow-stale", &["S1", "S11"]),
        ("steal-live-lease", &["S6", "S11"]),
        ("no-retry-clock", &["S7", "S11"]),
        ("no-budget-predicate", &["S3", "S11"]),
        ("exhaust-off-by-one", &["S3", "S11"]),
        ("claim-terminal", &["S4", "S11"]),
        ("publish-before-ack", &["S5"]),
        ("retry-after-db-loss", &["S3", "S5", "S11"]),
        ("fresh-idempotency-key", &["S8", "S11"]),
        ("write-ignores-tenant", &["S11"]),
        ("token-reset-on-requeue", &["S2", "S11"]),
    ];
    let mut failures = Vec::new();
    for &(name, expected) in pinned {
        let design = Design::parse(name).expect("a design name");
        let found = search(&fleet([design; 3]), SEEDS, STEPS_MAX);
        println!("{}", describe(name, &found));
        if ids(&found) != expected {
            failures.push(format!("{name}: found {:?}, pinned {expected:?}", ids(&found)));
        }
        if let Design::Mutant(m) = design {
            let kills: Vec<&Finding> = found.iter().filter(|f| f.property.gated()).collect();
            if !kills.is_empty() && !kills.iter().any(|f| m.expected_kills().contains(&f.property.id())) {
                failures.push(format!("{name}: broke {:?}, none listed in docs/designs.md", ids(&found)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every mutant is killed by at least one of the two searches (core-level in
/// tests/core_properties.rs, world-level here); this one needs the relay cycle.
#[test]
fn relay_level_mutants_are_killed_by_the_world() {
    for mutant in [Mutant::PublishBeforeAck, Mutant::RetryAfterDbLoss, Mutant::FreshIdempotencyKey] {
        let design = Design::Mutant(mutant);
        let found = search(&fleet([design; 3]), SEEDS, STEPS_MAX);
        assert!(
            found.iter().any(|f| mutant.expected_kills().contains(&f.property.id())),
            "{}",
            describe(mutant.name(), &found)
        );
    }
}

/// A rolling upgrade: a seed-v2 relay beside a legacy-v1 relay over one table. The legacy
/// relay's unfenced claim leaves the V2 relay's token standing, so its writes go through.
#[test]
fn mixed_fleet_seed_v2_beside_legacy_v1() {
    let v2 = Design::Variant(Variant::SeedV2);
    let v1 = Design::Variant(Variant::LegacyV1);
    let mut config = WorldConfig::small(v2, 2, 3);
    config.relays[1].design = v1;
    let found = search(&config, SEEDS, STEPS_MAX);
    println!("{}", describe("seed-v2 + legacy-v1", &found));
    assert_eq!(ids(&found), ["S1", "S2", "S3", "S4", "S7"]);
    // S1 here is the V2 relay's fenced write applying after the V1 relay's unfenced claim.
    let s1 = &found[0];
    assert_eq!(s1.property, Property::S1);
}

/// Without faults and with a lease longer than any cycle, a single relay of any design breaks
/// nothing but what the design lacks outright (legacy-v1 has no token to refresh): the findings
/// above are the faults' doing, not the harness's.
#[test]
fn a_quiet_single_relay_world_breaks_nothing_even_for_legacy() {
    for variant in Variant::ALL {
        let mut config = WorldConfig::small(Design::Variant(variant), 1, 3);
        config.faults = Faults::none();
        config.lease = outbox_check::core::Duration(100);
        config.relays =
            vec![RelaySpec { design: Design::Variant(variant), owner: RelayId(0), tenant_id: TenantId(0), skew: 0 }];
        let found = search(&config, 500, STEPS_MAX);
        let expected: &[&str] = if variant == Variant::LegacyV1 { &["S2"] } else { &[] };
        assert_eq!(ids(&found), expected, "{}", describe(variant.name(), &found));
    }
}

/// A design whose session holds the lease: the lease-lost fault is a step only where it ends a
/// lease, the relay runs on after it, and a crash or a claim whose connection died ends the
/// session's leases too; a design with an expiry lease never offers the fault.
#[test]
fn a_session_ends_with_its_relays_crash_lost_connection_or_the_lease_lost_fault() {
    use outbox_check::world::{Action, DbFate, Event, World};
    let text = "name = \"session\"\nbased_on = \"reference\"\n[claim]\nlease = \"session\"\n";
    let session = outbox_check::design::from_text(text, "session.toml").unwrap();
    let lost = |design: Design| {
        let config = WorldConfig::fleet(&[design, design], 1, 1, 3, Faults::all());
        let mut actions = Vec::new();
        let mut world = World::new(&config);
        world.actions(&config, &mut actions);
        assert!(!actions.iter().any(|a| matches!(a, Action::LeaseLost { .. })), "nothing held yet");
        world.apply(&config, Action::Poll { relay: 0, db: DbFate::Ok });
        actions.clear();
        world.actions(&config, &mut actions);
        (config, world, actions.contains(&Action::LeaseLost { relay: 0 }))
    };
    let (_, _, offered) = lost(Design::Variant(Variant::Reference));
    assert!(!offered, "an expiry lease is ended by time, not by the fault");
    let (config, mut world, offered) = lost(session);
    assert!(offered);
    let report = world.apply(&config, Action::LeaseLost { relay: 0 });
    assert!(report.events.iter().any(|e| matches!(e, Event::SessionEnded { relay: 0, .. })), "{:?}", report.events);
    assert!(world.relays[0].is_some(), "the relay runs on");
    world.apply(&config, Action::Poll { relay: 1, db: DbFate::Ok });
    let row = world.outbox.row(outbox_check::core::MessageId(0)).unwrap();
    assert_eq!((row.lease_owner, row.attempts), (Some(RelayId(1)), 2), "r1 took the job r0 still runs");
    let report = world.apply(&config, Action::Crash { relay: 1 });
    assert!(report.events.iter().any(|e| matches!(e, Event::SessionEnded { relay: 1, .. })));
    let report = world.apply(&config, Action::Poll { relay: 1, db: DbFate::LostAfter });
    assert!(report.events.iter().any(|e| matches!(e, Event::SessionEnded { relay: 1, .. })), "a lost claim reply");
    assert!(
        world.outbox.row(outbox_check::core::MessageId(0)).unwrap().lease_expires_at
            != Some(outbox_check::core::Instant::NEVER)
    );
}

/// A heartbeat (`claim.renewal`) is a relay's step only where it extends a lease its cycle
/// works on; fenced on a worker name another attempt reuses (aegra 0.10.4), a stale attempt's
/// heartbeat extends its successor's lease — S1, by the route aegra PR 547 names — and fenced on
/// the claim's token it matches nothing once the row is claimed again.
#[test]
fn a_heartbeat_renews_its_own_lease_and_by_owner_alone_a_successors_too() {
    use outbox_check::core::{Doer, MessageId, Property};
    use outbox_check::world::{Action, DbFate, Event, World};
    let run = |path: &str| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let design = outbox_check::design::load(&root.join(path)).unwrap();
        let config = WorldConfig::fleet(&[design, design], 1, 1, 3, Faults::all());
        let mut world = World::new(&config);
        let mut actions = Vec::new();
        let mut offered = |world: &World| {
            actions.clear();
            world.actions(&config, &mut actions);
            actions.contains(&Action::Renew { relay: 0 })
        };
        assert!(!offered(&world), "nothing held yet");
        world.apply(&config, Action::Poll { relay: 0, db: DbFate::Ok });
        assert!(!offered(&world), "a lease just claimed: a renewal would change nothing");
        world.apply(&config, Action::Tick);
        assert!(offered(&world), "a tick later the heartbeat extends it");
        let report = world.apply(&config, Action::Renew { relay: 0 });
        let row = *world.outbox.row(MessageId(0)).unwrap();
        assert_eq!(row.lease_expires_at, Some(world.now.plus(config.lease)), "{:?}", report.events);
        assert!(report.violations.is_empty());
        // r0 stalls past its lease; the rescuer returns the job and r1 claims it.
        world.apply(&config, Action::Tick);
        world.apply(&config, Action::Tick);
        world.apply(&config, Action::Tick);
        world.apply(&config, Action::Rescue);
        world.apply(&config, Action::Poll { relay: 1, db: DbFate::Ok });
        world.apply(&config, Action::Tick);
        let stale = offered(&world);
        let report = stale.then(|| world.apply(&config, Action::Renew { relay: 0 }));
        (stale, report)
    };
    let (stale, report) = run("docs/examples/real-bugs/aegra-0-10-4.toml");
    assert!(stale, "the same worker name: r0's heartbeat matches r1's claim");
    let report = report.unwrap();
    assert!(report.events.iter().any(|e| matches!(e, Event::LeaseRenewed { relay: 0, .. })));
    let s1 = report.violations.iter().find(|v| v.property == Property::S1).expect("S1");
    assert!(matches!(s1.breach, outbox_check::core::Breach::Superseded { by: Doer::Renewal { .. }, .. }), "{s1:?}");
    let (stale, _) = run("docs/examples/real-bugs/aegra-pr-547.toml");
    assert!(!stale, "PR 547's token: r0's heartbeat matches nothing of r1's claim");
}

/// The scheduler (`maintenance.scheduler`) is a step only where a retry time has passed, and the
/// row it moves is then claimable; a fleet without one never offers it.
#[test]
fn the_scheduler_is_a_step_only_when_a_retry_is_due() {
    use outbox_check::core::{MessageId, Status};
    use outbox_check::world::{Action, BrokerFate, DbFate, Event, World};
    let text = "name = \"sched-world\"\nbased_on = \"reference\"\n[maintenance]\nscheduler = true\n";
    let design = outbox_check::design::from_text(text, "sched-world.toml").unwrap();
    let config = WorldConfig::fleet(&[design], 1, 1, 3, Faults::all());
    let mut world = World::new(&config);
    let offered = |world: &World| {
        let mut actions = Vec::new();
        world.actions(&config, &mut actions);
        actions.contains(&Action::Schedule { node: None })
    };
    world.apply(&config, Action::Poll { relay: 0, db: DbFate::Ok });
    world.apply(&config, Action::Publish { relay: 0, fate: BrokerFate::Unavailable });
    world.apply(&config, Action::Write { relay: 0, db: DbFate::Ok });
    let row = *world.outbox.row(MessageId(0)).unwrap();
    let at = row.next_attempt_at.expect("a retry time");
    assert_eq!(row.status, Status::Pending);
    assert!(!offered(&world), "not due yet");
    while world.now < at {
        world.apply(&config, Action::Tick);
    }
    assert!(offered(&world));
    // Due, but a claim before the scheduler runs takes nothing.
    let mut probe = world.clone();
    probe.apply(&config, Action::Poll { relay: 0, db: DbFate::Ok });
    assert_eq!(probe.outbox.row(MessageId(0)).unwrap().status, Status::Pending);
    let report = world.apply(&config, Action::Schedule { node: None });
    assert!(report
        .events
        .iter()
        .any(|e| matches!(e, Event::Scheduled { messages, .. } if messages == &[MessageId(0)])));
    assert!(!offered(&world), "nothing left to move");
    world.apply(&config, Action::Poll { relay: 0, db: DbFate::Ok });
    assert_eq!(world.outbox.row(MessageId(0)).unwrap().status, Status::InFlight);
    let plain = WorldConfig::fleet(&[Design::Variant(Variant::Reference)], 1, 1, 3, Faults::all());
    assert!(!plain.has_scheduler());
    // A design that reads the process's clock runs its scheduler on any node: on one whose clock
    // runs ahead (the clock-skew fault: r1 a lease ahead), it makes a retry claimable early, and
    // the claim that follows at once breaks S7.
    let text = "name = \"sched-node\"\nbased_on = \"reference\"\n[relay]\nclock = \"relay\"\n[maintenance]\nscheduler = true\n";
    let design = outbox_check::design::from_text(text, "sched-node.toml").unwrap();
    let config = WorldConfig::fleet(&[design, design], 1, 1, 3, Faults::all());
    let mut world = World::new(&config);
    world.apply(&config, Action::Poll { relay: 0, db: DbFate::Ok });
    world.apply(&config, Action::Publish { relay: 0, fate: BrokerFate::Unavailable });
    world.apply(&config, Action::Write { relay: 0, db: DbFate::Ok });
    let at = world.outbox.row(MessageId(0)).unwrap().next_attempt_at.unwrap();
    assert!(at > world.now);
    let mut actions = Vec::new();
    world.actions(&config, &mut actions);
    assert!(actions.contains(&Action::Schedule { node: Some(1) }), "r1's node is ahead: {actions:?}");
    assert!(!actions.contains(&Action::Schedule { node: Some(0) }), "r0's is not");
    assert!(!actions.contains(&Action::Schedule { node: None }), "no scheduler reads the database's clock");
    let report = world.apply(&config, Action::Schedule { node: Some(1) });
    assert!(report.violations.is_empty(), "making it claimable is not yet a claim");
    let report = world.apply(&config, Action::Poll { relay: 0, db: DbFate::Ok });
    assert!(report.violations.iter().any(|v| v.property == Property::S7), "{:?}", report.violations);
}
