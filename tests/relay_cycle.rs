//! The sans-IO relay cycle of SPEC §4: each broker/DB outcome and what the relay records.

use outbox_check::core::*;
use outbox_check::design::{Mutant, Variant};
use outbox_check::relay::*;

fn config(variant: Variant) -> RelayConfig {
    RelayConfig {
        owner: RelayId(1),
        tenant_id: TenantId(0),
        batch: 2,
        lease: Duration(10),
        max_attempts: 3,
        policy: variant.policy(),
    }
}

fn lease(id: u32, attempts: u32) -> Lease {
    Lease {
        message_id: MessageId(id),
        tenant_id: TenantId(0),
        owner: RelayId(1),
        token: LeaseToken(attempts.into()),
        attempts,
        claim_seq: attempts,
    }
}

const NOW: Clocks = Clocks { database: Instant(100), relay: Instant(150) };

fn started(config: &RelayConfig, leases: Vec<Lease>) -> (Cycle, Effect) {
    let (mut cycle, effect) = Cycle::start(config, NOW);
    let Effect::Claim { request } = effect else { panic!("a cycle starts with its claim, got {effect:?}") };
    let now = match config.policy.relay.clock {
        outbox_check::core::policy::ClockSource::Database => NOW.database,
        outbox_check::core::policy::ClockSource::Relay => NOW.relay,
    };
    assert_eq!((request.batch, request.owner, request.now), (2, RelayId(1), now));
    let step = cycle.claimed(config, leases, NOW);
    (cycle, step.effect)
}

/// Each broker outcome, at the lease's attempts, makes `c`'s relay record the write given.
fn assert_records(c: &RelayConfig, cases: &[(u32, PublishOutcome, WriteKind)]) {
    for &(attempts, outcome, expected) in cases {
        let (mut cycle, _) = started(c, vec![lease(0, attempts)]);
        let step = cycle.resume(c, Input::Published { outcome }, NOW);
        assert_eq!(written_kind(step.effect), expected, "{outcome:?} at attempt {attempts}");
    }
}

fn written_kind(effect: Effect) -> WriteKind {
    match effect {
        Effect::Write { request } => request.kind,
        other => panic!("expected a write, got {other:?}"),
    }
}

#[test]
fn an_ack_is_recorded_as_published_and_the_next_lease_follows() {
    let c = config(Variant::Reference);
    let (mut cycle, effect) = started(&c, vec![lease(0, 1), lease(1, 1)]);
    assert_eq!(
        effect,
        Effect::Publish { lease: lease(0, 1), key: IdempotencyKey::Message { message_id: MessageId(0) } }
    );
    let step = cycle.resume(&c, Input::Published { outcome: PublishOutcome::Ack }, NOW);
    assert_eq!(written_kind(step.effect), WriteKind::Published);
    let step = cycle.resume(&c, Input::Written { result: WriteResult::Applied { status: Status::Published } }, NOW);
    assert_eq!(step.finished, Some((MessageId(0), LeaseResult::Sent)));
    assert!(matches!(step.effect, Effect::Publish { lease, .. } if lease.message_id == MessageId(1)));
}

#[test]
fn outcomes_map_to_the_writes_of_spec_section_4() {
    let c = config(Variant::Reference);
    let cases = [
        (1, PublishOutcome::RetryableFailure, WriteKind::Retry { code: FailureCode::Unavailable }),
        (3, PublishOutcome::RetryableFailure, WriteKind::Exhausted { code: FailureCode::Unavailable }),
        (1, PublishOutcome::Timeout, WriteKind::Ambiguous { code: FailureCode::Timeout }),
        (3, PublishOutcome::Timeout, WriteKind::Exhausted { code: FailureCode::Timeout }),
        (1, PublishOutcome::Rejected, WriteKind::Failed { code: FailureCode::Rejected }),
    ];
    assert_records(&c, &cases);
}

#[test]
fn a_lost_connection_after_publishing_records_nothing_and_does_not_republish() {
    let c = config(Variant::Reference);
    let (mut cycle, _) = started(&c, vec![lease(0, 1), lease(1, 1)]);
    cycle.resume(&c, Input::Published { outcome: PublishOutcome::Ack }, NOW);
    let step = cycle.resume(&c, Input::ConnectionLost, NOW);
    assert_eq!(step.finished, Some((MessageId(0), LeaseResult::AckUnknown)));
    assert!(
        matches!(step.effect, Effect::Publish { lease, .. } if lease.message_id == MessageId(1)),
        "{:?}",
        step.effect
    );
}

#[test]
fn a_stale_write_is_reported_not_retried() {
    let c = config(Variant::Reference);
    let (mut cycle, _) = started(&c, vec![lease(0, 1)]);
    cycle.resume(&c, Input::Published { outcome: PublishOutcome::Ack }, NOW);
    let step = cycle.resume(&c, Input::Written { result: WriteResult::Stale { reason: StaleReason::WrongToken } }, NOW);
    assert_eq!((step.effect, step.finished), (Effect::Done, Some((MessageId(0), LeaseResult::Stale))));
    assert!(cycle.is_done());
}

#[test]
fn a_lost_claim_ends_the_cycle() {
    let c = config(Variant::Reference);
    let (mut cycle, _) = Cycle::start(&c, NOW);
    assert_eq!(cycle.resume(&c, Input::ConnectionLost, NOW).effect, Effect::Done);
    let (mut empty, _) = Cycle::start(&c, NOW);
    assert_eq!(empty.claimed(&c, Vec::new(), NOW).effect, Effect::Done);
}

#[test]
fn designs_choose_their_clock_and_their_writes() {
    // seed-v2 takes `now` from the relay; its AMBIGUOUS write counts the attempt, so the budget
    // is spent one publication later than the lease's count says.
    let c = config(Variant::SeedV2);
    let (mut cycle, effect) = Cycle::start(&c, NOW);
    let Effect::Claim { request } = effect else { panic!() };
    assert_eq!(request.now, Instant(150));
    cycle.claimed(&c, vec![lease(0, 2)], NOW);
    let step = cycle.resume(&c, Input::Published { outcome: PublishOutcome::Timeout }, NOW);
    assert_eq!(written_kind(step.effect), WriteKind::Exhausted { code: FailureCode::Timeout });
    // seed-tenant has no failed state: a rejection is scheduled for retry.
    let c = config(Variant::SeedTenant);
    let (mut cycle, _) = started(&c, vec![lease(0, 1)]);
    let step = cycle.resume(&c, Input::Published { outcome: PublishOutcome::Rejected }, NOW);
    assert_eq!(written_kind(step.effect), WriteKind::Retry { code: FailureCode::Rejected });
    // legacy-v1 has no EXHAUSTED status and no budget: it never gives up.
    let c = config(Variant::LegacyV1);
    let (mut cycle, _) = started(&c, vec![lease(0, 9)]);
    let step = cycle.resume(&c, Input::Published { outcome: PublishOutcome::Timeout }, NOW);
    assert_eq!(written_kind(step.effect), WriteKind::Ambiguous { code: FailureCode::Timeout });
}

#[test]
fn relay_mutants_act_in_the_cycle() {
    let c = RelayConfig { policy: Mutant::PublishBeforeAck.policy(), ..config(Variant::Reference) };
    let (_, effect) = started(&c, vec![lease(0, 1)]);
    assert_eq!(written_kind(effect), WriteKind::Published, "writes before publishing");

    let c = RelayConfig { policy: Mutant::RetryAfterDbLoss.policy(), ..config(Variant::Reference) };
    let (mut cycle, _) = started(&c, vec![lease(0, 1)]);
    cycle.resume(&c, Input::Published { outcome: PublishOutcome::Timeout }, NOW);
    let step = cycle.resume(&c, Input::ConnectionLost, NOW);
    assert!(matches!(step.effect, Effect::Publish { .. }), "republishes at once");
    let step = cycle.resume(&c, Input::Published { outcome: PublishOutcome::Timeout }, NOW);
    assert_eq!(written_kind(step.effect), WriteKind::Published, "and invents a confirmation");

    let c = RelayConfig { policy: Mutant::FreshIdempotencyKey.policy(), ..config(Variant::Reference) };
    let (_, effect) = started(&c, vec![lease(0, 1)]);
    assert!(matches!(effect, Effect::Publish { key: IdempotencyKey::Other { .. }, .. }));
}

#[test]
#[should_panic(expected = "does not answer the effect")]
fn an_input_that_answers_another_effect_is_a_driver_bug() {
    let c = config(Variant::Reference);
    let (mut cycle, _) = started(&c, vec![lease(0, 1)]);
    cycle.resume(&c, Input::Written { result: WriteResult::Applied { status: Status::Published } }, NOW);
}

/// Laravel's worker (`relay.fails_claims_past_budget`): a lease claimed past the budget is
/// recorded failed for good at once, never published; a lease within it is published as usual,
/// and a relay without the switch publishes whatever the attempts.
#[test]
fn a_relay_that_fails_claims_past_the_budget_records_them_without_publishing() {
    let mut c = config(Variant::Reference);
    c.policy.relay.fails_claims_past_budget = true;
    let (mut cycle, effect) = started(&c, vec![lease(0, 4), lease(1, 3)]);
    assert_eq!(written_kind(effect), WriteKind::Exhausted { code: FailureCode::BudgetSpent });
    assert_eq!(cycle.leases_to_publish(), &[lease(1, 3)], "the refused lease is never published");
    let step = cycle.resume(&c, Input::Written { result: WriteResult::Applied { status: Status::Exhausted } }, NOW);
    assert_eq!(step.finished, Some((MessageId(0), LeaseResult::Exhausted)));
    assert!(matches!(step.effect, Effect::Publish { lease, .. } if lease == self::lease(1, 3)));
    // Without EXHAUSTED the same lease is written FAILED; a lost connection moves on.
    c.policy.exhausted_status = false;
    let (mut cycle, effect) = started(&c, vec![lease(0, 4)]);
    assert_eq!(written_kind(effect), WriteKind::Failed { code: FailureCode::BudgetSpent });
    let step = cycle.resume(&c, Input::ConnectionLost, NOW);
    assert_eq!(step.finished, Some((MessageId(0), LeaseResult::AckUnknown)));
    assert!(cycle.is_done());
    let plain = config(Variant::Reference);
    let (_, effect) = started(&plain, vec![lease(0, 4)]);
    assert!(matches!(effect, Effect::Publish { .. }), "{effect:?}");
}

/// `relay.on_failure = "mark-failed"` (aegra: a run whose execution raised is finalized `error`):
/// a definite failure and an unknown outcome are recorded FAILED, with their own codes, at any
/// attempt; an ack and a rejection are recorded as before.
#[test]
fn a_design_whose_every_failure_is_final_records_failed() {
    let mut c = config(Variant::Reference);
    c.policy.relay.on_failure = outbox_check::core::policy::FailureWrite::MarkFailed;
    let cases = [
        (1, PublishOutcome::RetryableFailure, WriteKind::Failed { code: FailureCode::Unavailable }),
        (3, PublishOutcome::RetryableFailure, WriteKind::Failed { code: FailureCode::Unavailable }),
        (1, PublishOutcome::Timeout, WriteKind::Failed { code: FailureCode::Timeout }),
        (3, PublishOutcome::Timeout, WriteKind::Failed { code: FailureCode::Timeout }),
        (1, PublishOutcome::Rejected, WriteKind::Failed { code: FailureCode::Rejected }),
        (1, PublishOutcome::Ack, WriteKind::Published),
    ];
    assert_records(&c, &cases);
}
