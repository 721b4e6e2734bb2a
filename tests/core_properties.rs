//! Property tests of the core alone: random operation sequences — several relays, arbitrary
//! advances of `now`, stale and current leases, several tenants — through the auditor.
//!
//! `reference` must keep every safety property after every step. Each mutant is run through the
//! same generator with proptest searching for a failure; the property it breaks is whatever the
//! auditor names on the shrunk sequence, and the test pins it.

use outbox_check::core::*;
use outbox_check::design::{Mutant, Variant};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

const MAX_ATTEMPTS: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        tenant: u16,
        aggregate: u32,
        stale: bool,
    },
    Claim {
        owner: u16,
        tenant: u16,
        batch: u32,
        lease: u64,
    },
    /// A terminal write with a lease from the pool of every lease ever handed out (current or
    /// stale); `other_tenant` sends it with the wrong tenant, as a confused caller might.
    Write {
        pick: usize,
        kind: u8,
        other_tenant: bool,
    },
    Reap,
    Requeue {
        pick: usize,
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0u16..2, 0u32..3, prop::bool::weighted(0.2))
            .prop_map(|(tenant, aggregate, stale)| Op::Enqueue { tenant, aggregate, stale }),
        3 => (0u16..3, 0u16..2, 1u32..3, 1u64..5)
            .prop_map(|(owner, tenant, batch, lease)| Op::Claim { owner, tenant, batch, lease }),
        4 => (0usize..16, 0u8..5, prop::bool::weighted(0.1))
            .prop_map(|(pick, kind, other_tenant)| Op::Write { pick, kind, other_tenant }),
        1 => Just(Op::Reap),
        1 => (0usize..16).prop_map(|pick| Op::Requeue { pick }),
        3 => (0u64..6).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Runs `ops` under `policy` and returns every violation the auditor reports.
fn run(policy: &Policy, ops: &[Op]) -> Vec<Violation> {
    let mut outbox = Outbox::new();
    let mut auditor = Auditor::new(MAX_ATTEMPTS);
    let mut now = Instant(0);
    let mut leases: Vec<Lease> = Vec::new();
    let mut next_message = 0u32;
    for op in ops {
        match *op {
            Op::Enqueue { tenant, aggregate, stale } => {
                let tenant_id = TenantId(tenant);
                let aggregate_id = AggregateId(aggregate);
                let current = outbox.aggregate_version(tenant_id, aggregate_id);
                let req = EnqueueRequest {
                    tenant_id,
                    aggregate_id,
                    expected_version: current + u32::from(stale),
                    message_id: MessageId(next_message),
                    now,
                };
                if let Ok(EnqueueResult::Applied { .. }) = auditor.enqueue(&mut outbox, &req) {
                    next_message += 1;
                }
            }
            Op::Claim { owner, tenant, batch, lease } => {
                let req = ClaimRequest {
                    tenant_id: TenantId(tenant),
                    owner: RelayId(owner),
                    batch,
                    lease: Duration(lease),
                    now,
                    max_attempts: MAX_ATTEMPTS,
                    retry_due: true,
                };
                leases.extend(auditor.claim(&mut outbox, policy, &req, now).expect("valid claim"));
            }
            Op::Write { pick, kind, other_tenant } => {
                if leases.is_empty() {
                    continue;
                }
                let mut lease = leases[pick % leases.len()];
                if other_tenant {
                    lease.tenant_id = TenantId(lease.tenant_id.0 ^ 1);
                }
                let kind = match kind {
                    0 => WriteKind::Published,
                    1 => WriteKind::Ambiguous { code: FailureCode::Timeout },
                    2 => WriteKind::Retry { code: FailureCode::Unavailable },
                    3 => WriteKind::Failed { code: FailureCode::Rejected },
                    _ => WriteKind::Exhausted { code: FailureCode::BudgetSpent },
                };
                let req = WriteRequest { lease, kind, now, max_attempts: MAX_ATTEMPTS };
                auditor.write(&mut outbox, policy, &req).expect("the lease names a row");
            }
            Op::Reap => {
                auditor.reap(&mut outbox, now);
            }
            Op::Requeue { pick } => {
                if next_message > 0 {
                    let id = MessageId((pick % next_message as usize) as u32);
                    auditor.requeue(&mut outbox, policy, id).expect("the message exists");
                }
            }
            Op::Advance { ms } => now = now.plus(Duration(ms)),
        }
    }
    // The core alone publishes nothing, so S5 (which asks the broker) is not this test's to judge.
    auditor.take_violations().into_iter().filter(|v| v.property != Property::S5).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn reference_keeps_every_safety_property(ops in prop::collection::vec(op(), 1..60)) {
        let violations = run(&Variant::Reference.policy(), &ops);
        prop_assert!(violations.is_empty(), "{:?}", violations);
    }
}

/// Lets proptest search for a sequence that breaks `target` under `policy` and shrinks it.
fn search(policy: &Policy, target: Property) -> Option<Vec<Op>> {
    let mut runner = TestRunner::new_with_rng(
        Config { cases: 1500, failure_persistence: None, ..Config::default() },
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let result = runner.run(&prop::collection::vec(op(), 1..60), |ops| {
        let violations = run(policy, &ops);
        match violations.iter().find(|v| v.property == target) {
            None => Ok(()),
            Some(v) => Err(TestCaseError::fail(v.to_string())),
        }
    });
    match result {
        Ok(()) => None,
        Err(TestError::Fail(_, ops)) => Some(ops),
        Err(other) => panic!("search aborted: {other}"),
    }
}

/// Every safety property the core-level search breaks under `policy`, each with its shrunk
/// sequence.
fn broken(policy: &Policy) -> Vec<(Property, Vec<Op>)> {
    Property::SAFETY.into_iter().filter_map(|p| search(policy, p).map(|ops| (p, ops))).collect()
}

fn ids(found: &[(Property, Vec<Op>)]) -> Vec<&'static str> {
    found.iter().map(|(p, _)| p.id()).collect()
}

/// What the core-level search finds for each mutant, pinned. A mutant whose row is empty acts in
/// the relay cycle, which this test does not run (see tests/world_search.rs).
#[test]
fn core_search_kills_the_core_mutants() {
    let pinned: &[(Mutant, &[&str])] = &[
        (Mutant::ClaimNoTokenBump, &["S1", "S2"]),
        (Mutant::WriteOwnerOnly, &["S1"]),
        (Mutant::WriteIdOnly, &["S1", "S4"]),
        (Mutant::SwallowStale, &["S1"]),
        (Mutant::StealLiveLease, &["S6"]),
        (Mutant::NoRetryClock, &["S7"]),
        (Mutant::NoBudgetPredicate, &["S3"]),
        (Mutant::ExhaustOffByOne, &["S3"]),
        (Mutant::ClaimTerminal, &["S4"]),
        (Mutant::PublishBeforeAck, &[]),
        (Mutant::RetryAfterDbLoss, &[]),
        (Mutant::FreshIdempotencyKey, &[]),
        (Mutant::WriteIgnoresTenant, &["S9"]),
        (Mutant::TokenResetOnRequeue, &["S1", "S2"]),
    ];
    let mut failures = Vec::new();
    for &(mutant, expected) in pinned {
        let found = broken(&mutant.policy());
        println!("{mutant}: {:?}", ids(&found));
        for (property, ops) in &found {
            println!("  {}: {} ops: {ops:?}", property.id(), ops.len());
        }
        if ids(&found) != expected {
            failures.push(format!("{mutant}: found {:?}, pinned {expected:?}", ids(&found)));
        }
        let killed_as_listed = found.iter().any(|(p, _)| mutant.expected_kills().contains(&p.id()));
        if !found.is_empty() && !killed_as_listed {
            failures.push(format!("{mutant}: broke {:?}, none of which docs/designs.md lists", ids(&found)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The relay-level mutants change nothing in the core: the core-level search must see them as
/// `reference`, so whatever kills them later is the relay cycle's doing.
#[test]
fn relay_mutants_leave_the_core_as_reference() {
    for mutant in [Mutant::PublishBeforeAck, Mutant::RetryAfterDbLoss, Mutant::FreshIdempotencyKey] {
        let policy = mutant.policy();
        let reference = Variant::Reference.policy();
        assert_eq!(Policy { relay: reference.relay, ..policy }, reference, "{mutant}");
        assert_ne!(policy.relay, reference.relay, "{mutant}");
    }
}

/// The variants under the core-level search, pinned: what each breaks where random sequences of
/// claims and writes alone reach (no clock skew, no broker: see tests/world_search.rs for those).
#[test]
fn core_search_on_the_variants() {
    let pinned: &[(Variant, &[&str])] = &[
        (Variant::Reference, &[]),
        (Variant::SeedV2, &["S9"]),
        (Variant::LegacyV1, &["S1", "S2", "S3", "S4", "S7", "S9"]),
        (Variant::SeedTenant, &[]),
    ];
    let mut failures = Vec::new();
    for &(variant, expected) in pinned {
        let found = broken(&variant.policy());
        println!("{variant}: {:?}", ids(&found));
        for (property, ops) in &found {
            println!("  {}: {} ops: {ops:?}", property.id(), ops.len());
        }
        if ids(&found) != expected {
            failures.push(format!("{variant}: found {:?}, pinned {expected:?}", ids(&found)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
