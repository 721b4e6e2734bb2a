//! The rules of SPEC §3, one scenario each, on the core alone.

use outbox_check::core::*;
use outbox_check::design::{Design, Mutant, Variant};

const MAX: u32 = 3;

fn table(messages: u32) -> Outbox {
    let mut outbox = Outbox::new();
    for m in 0..messages {
        let req = EnqueueRequest {
            tenant_id: TenantId(0),
            aggregate_id: AggregateId(m),
            expected_version: 0,
            message_id: MessageId(m),
            now: Instant(u64::from(m)),
        };
        assert_eq!(outbox.enqueue(&req), Ok(EnqueueResult::Applied { version: 1 }));
    }
    outbox
}

fn claim(owner: u16, batch: u32, now: u64) -> ClaimRequest {
    ClaimRequest {
        tenant_id: TenantId(0),
        owner: RelayId(owner),
        batch,
        lease: Duration(10),
        now: Instant(now),
        max_attempts: MAX,
        retry_due: true,
    }
}

fn write(lease: Lease, kind: WriteKind, now: u64) -> WriteRequest {
    WriteRequest { lease, kind, now: Instant(now), max_attempts: MAX }
}

const TIMEOUT: WriteKind = WriteKind::Ambiguous { code: FailureCode::Timeout };

#[test]
fn enqueue_moves_the_aggregate_and_inserts_only_when_current() {
    let mut outbox = table(1);
    let stale = EnqueueRequest {
        tenant_id: TenantId(0),
        aggregate_id: AggregateId(0),
        expected_version: 0,
        message_id: MessageId(7),
        now: Instant(5),
    };
    assert_eq!(outbox.enqueue(&stale), Ok(EnqueueResult::Stale { current_version: 1 }));
    assert!(outbox.row(MessageId(7)).is_none(), "a stale business write inserts nothing");
    let current = EnqueueRequest { expected_version: 1, ..stale };
    assert_eq!(outbox.enqueue(&current), Ok(EnqueueResult::Applied { version: 2 }));
    assert_eq!(outbox.row(MessageId(7)).map(|r| r.aggregate_version), Some(2));
    let again = EnqueueRequest { expected_version: 2, ..stale };
    assert_eq!(outbox.enqueue(&again), Err(CoreError::DuplicateMessageId(MessageId(7))));
    assert_eq!(outbox.aggregate_version(TenantId(0), AggregateId(0)), 2, "a refused insert moves nothing");
    assert_eq!(
        outbox.aggregates(),
        &[Aggregate { tenant_id: TenantId(0), aggregate_id: AggregateId(0), version: 2 }],
        "the business table: one aggregate, at version 2"
    );
}

#[test]
fn claim_rejects_invalid_input() {
    let mut outbox = table(1);
    let p = Variant::Reference.policy();
    assert_eq!(outbox.claim(&p, &ClaimRequest { batch: 0, ..claim(0, 1, 0) }), Err(CoreError::InvalidBatch));
    assert_eq!(outbox.claim(&p, &ClaimRequest { lease: Duration(0), ..claim(0, 1, 0) }), Err(CoreError::InvalidLease));
    assert_eq!(outbox.claim(&p, &ClaimRequest { max_attempts: 0, ..claim(0, 1, 0) }), Err(CoreError::InvalidBudget));
    assert_eq!(outbox.rows()[0].status, Status::Pending, "a refused claim changes nothing");
}

#[test]
fn claim_leases_in_due_order_and_counts_the_attempt() {
    let mut outbox = table(3);
    let p = Variant::Reference.policy();
    let leases = outbox.claim(&p, &claim(4, 2, 10)).unwrap();
    assert_eq!(leases.iter().map(|l| l.message_id.0).collect::<Vec<_>>(), [0, 1], "oldest first");
    let row = outbox.row(MessageId(0)).unwrap();
    assert_eq!(row.status, Status::InFlight);
    assert_eq!(row.lease_owner, Some(RelayId(4)));
    assert_eq!(row.lease_token, LeaseToken(1));
    assert_eq!(row.lease_expires_at, Some(Instant(20)));
    assert_eq!(row.attempts, 1);
    assert_eq!(
        leases[0],
        Lease {
            message_id: MessageId(0),
            tenant_id: TenantId(0),
            owner: RelayId(4),
            token: LeaseToken(1),
            attempts: 1,
            claim_seq: 0
        }
    );
    // m0 goes back with a retry time (t=1011) later than m1's and m2's creation; m1's lease
    // expires at t=20 and its due time stays its creation: due order is m1, m2, m0.
    outbox.write(&p, &write(leases[0], TIMEOUT, 11)).unwrap();
    let next = outbox.claim(&p, &claim(4, 3, 2000)).unwrap();
    assert_eq!(next.iter().map(|l| l.message_id.0).collect::<Vec<_>>(), [1, 2, 0]);
}

#[test]
fn claim_skips_live_leases_retry_times_spent_budgets_and_other_tenants() {
    let mut outbox = table(1);
    let p = Variant::Reference.policy();
    let first = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    assert!(outbox.claim(&p, &claim(1, 1, 9)).unwrap().is_empty(), "lease live until t=10");
    let other = ClaimRequest { tenant_id: TenantId(1), ..claim(1, 1, 10) };
    assert!(outbox.claim(&p, &other).unwrap().is_empty(), "another tenant's claim");
    let second = outbox.claim(&p, &claim(1, 1, 10)).unwrap()[0];
    assert_eq!((second.token, second.attempts), (LeaseToken(2), 2), "expired lease taken over");
    assert_ne!(first.token, second.token);
    outbox.write(&p, &write(second, TIMEOUT, 11)).unwrap();
    let retry_at = outbox.row(MessageId(0)).unwrap().next_attempt_at.unwrap();
    assert_eq!(retry_at, Instant(11).plus(p.backoff.delay(2)));
    assert!(outbox.claim(&p, &claim(1, 1, retry_at.0 - 1)).unwrap().is_empty(), "retry clock");
    let third = outbox.claim(&p, &claim(1, 1, retry_at.0)).unwrap()[0];
    assert_eq!(third.attempts, MAX);
    let later = third.attempts;
    // Lease expires with the budget spent: nobody may claim it, the reaper exhausts it.
    assert!(outbox.claim(&p, &claim(2, 1, 10_000)).unwrap().is_empty(), "budget spent at attempts = {later}");
    assert_eq!(outbox.reap(Instant(10_000), MAX), [MessageId(0)]);
    assert_eq!(outbox.row(MessageId(0)).unwrap().status, Status::Exhausted);
}

#[test]
fn terminal_writes_are_fenced_and_say_why_they_are_stale() {
    let mut outbox = table(1);
    let p = Variant::Reference.policy();
    let old = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    let new = outbox.claim(&p, &claim(1, 1, 10)).unwrap()[0];
    let snapshot = outbox.clone();
    let stale = |reason| Ok(WriteResult::Stale { reason });
    assert_eq!(outbox.write(&p, &write(old, WriteKind::Published, 11)), stale(StaleReason::WrongOwner));
    let same_owner_old_token = Lease { owner: new.owner, ..old };
    assert_eq!(
        outbox.write(&p, &write(same_owner_old_token, WriteKind::Published, 11)),
        stale(StaleReason::WrongToken)
    );
    let other_tenant = Lease { tenant_id: TenantId(1), ..new };
    assert_eq!(outbox.write(&p, &write(other_tenant, WriteKind::Published, 11)), stale(StaleReason::WrongTenant));
    assert_eq!(outbox, snapshot, "stale writes change nothing");
    assert_eq!(
        outbox.write(&p, &write(new, WriteKind::Published, 12)),
        Ok(WriteResult::Applied { status: Status::Published })
    );
    let row = outbox.row(MessageId(0)).unwrap();
    assert_eq!((row.lease_owner, row.lease_expires_at, row.published_at), (None, None, Some(Instant(12))));
    assert_eq!(
        outbox.write(&p, &write(new, WriteKind::Published, 13)),
        stale(StaleReason::NotInFlight),
        "no double confirmation"
    );
    let ghost = Lease { message_id: MessageId(9), ..new };
    assert_eq!(outbox.write(&p, &write(ghost, WriteKind::Published, 13)), Err(CoreError::UnknownMessage(MessageId(9))));
}

#[test]
fn a_failure_write_past_the_budget_exhausts() {
    let mut outbox = table(1);
    let p = Variant::Reference.policy();
    for now in [0, 5_000, 10_000] {
        let lease = outbox.claim(&p, &claim(0, 1, now)).unwrap()[0];
        let result =
            outbox.write(&p, &write(lease, WriteKind::Retry { code: FailureCode::Unavailable }, now + 1)).unwrap();
        let expected = if lease.attempts < MAX { Status::Pending } else { Status::Exhausted };
        assert_eq!(result, WriteResult::Applied { status: expected }, "attempt {}", lease.attempts);
    }
    let lease = Lease {
        message_id: MessageId(0),
        tenant_id: TenantId(0),
        owner: RelayId(0),
        token: LeaseToken(3),
        attempts: 3,
        claim_seq: 0,
    };
    assert_eq!(
        outbox.write(&p, &write(lease, WriteKind::Published, 20_000)),
        Ok(WriteResult::Stale { reason: StaleReason::NotInFlight }),
        "EXHAUSTED is absorbing"
    );
}

#[test]
fn requeue_keeps_the_token_and_starts_a_new_budget() {
    let mut outbox = table(1);
    let p = Variant::Reference.policy();
    let lease = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    assert_eq!(outbox.requeue(&p, MessageId(0)), Ok(RequeueResult::NotRequeueable { status: Status::InFlight }));
    outbox.write(&p, &write(lease, WriteKind::Failed { code: FailureCode::Rejected }, 1)).unwrap();
    assert_eq!(outbox.requeue(&p, MessageId(0)), Ok(RequeueResult::Applied));
    let row = outbox.row(MessageId(0)).unwrap();
    assert_eq!((row.status, row.attempts, row.lease_token), (Status::Pending, 0, LeaseToken(1)));
    let again = outbox.claim(&p, &claim(0, 1, 2)).unwrap()[0];
    assert_eq!(again.token, LeaseToken(2), "the old lease's token is never handed out again");
    assert_eq!(outbox.requeue(&p, MessageId(5)), Err(CoreError::UnknownMessage(MessageId(5))));
}

#[test]
fn backoff_doubles_up_to_its_cap_and_is_never_zero() {
    let b = Backoff::between(Duration(100), Duration(350));
    let delays: Vec<u64> = (0..6).map(|a| b.delay(a).0).collect();
    assert_eq!(delays, [100, 100, 200, 350, 350, 350]);
    assert_eq!(Backoff::between(Duration(0), Duration(0)).delay(3), Duration(1));
    assert_eq!(Backoff::between(Duration(u64::MAX / 2), Duration(u64::MAX)).delay(40).0, u64::MAX);
}

/// The real queues' backoffs: River's attempt⁴ s and Graphile Worker's exp(min(attempts, 10))
/// s, each delay as the queue's own code computes it (jitter aside).
#[test]
fn backoff_grows_by_a_power_or_a_factor_of_its_own() {
    let s = 1_000;
    let river = Backoff { growth: Growth::Power { exponent: 4 }, ..Backoff::between(Duration(s), Duration(u64::MAX)) };
    let delays: Vec<u64> = (1..5).map(|a| river.delay(a).0).collect();
    assert_eq!(delays, [s, 16 * s, 81 * s, 256 * s]);
    assert_eq!(river.delay(0), Duration(s), "no attempt yet counts as the first");
    let graphile = Backoff {
        growth: Growth::Exponential { factor_milli: 2718 },
        ..Backoff::between(Duration(2718), Duration(22_026_466))
    };
    let delays: Vec<u64> = [1, 2, 3, 10, 11, 30].iter().map(|a| graphile.delay(*a).0).collect();
    // e, e², e³ s to the rounding of e itself to 2.718 (e¹⁰ drifts 0.1 % low); the cap, e¹⁰ s,
    // from the eleventh attempt on.
    assert_eq!(delays, [2718, 7387, 20077, 22_000_894, 22_026_466, 22_026_466]);
    assert!(!graphile.is_doubling() && !river.is_doubling() && Backoff::default().is_doubling());
    // Huge exponents and factors saturate at the cap, never wrap.
    let steep = Backoff { growth: Growth::Power { exponent: 64 }, ..Backoff::between(Duration(7), Duration(1_000)) };
    assert_eq!(steep.delay(u32::MAX), Duration(1_000));
}

#[test]
fn seed_v2_counts_attempts_at_the_ambiguous_write() {
    let mut outbox = table(1);
    let p = Variant::SeedV2.policy();
    let lease = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    assert_eq!((lease.attempts, lease.token), (0, LeaseToken(1)), "fenced claim, no attempt counted");
    outbox.write(&p, &write(lease, TIMEOUT, 1)).unwrap();
    let row = outbox.row(MessageId(0)).unwrap();
    assert_eq!((row.status, row.attempts, row.lease_owner), (Status::Ambiguous, 1, None));
    assert!(row.next_attempt_at.is_some_and(|at| at > Instant(1)));
}

#[test]
fn legacy_v1_leases_without_owner_or_token_and_writes_by_message_id() {
    let mut outbox = table(1);
    let p = Variant::LegacyV1.policy();
    let lease = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    let row = *outbox.row(MessageId(0)).unwrap();
    assert_eq!(
        (row.status, row.lease_owner, row.lease_token, row.attempts),
        (Status::InFlight, None, LeaseToken(0), 0)
    );
    let takeover = outbox.claim(&p, &claim(1, 1, 10)).unwrap()[0];
    assert_eq!(takeover.token, lease.token, "nothing tells the two leases apart");
    // The first relay's AMBIGUOUS write goes through although its claim was superseded.
    let result = outbox.write(&p, &write(lease, TIMEOUT, 11)).unwrap();
    assert_eq!(result, WriteResult::Applied { status: Status::Ambiguous });
    let row = outbox.row(MessageId(0)).unwrap();
    assert_eq!((row.attempts, row.next_attempt_at, row.lease_expires_at), (1, None, None));
}

#[test]
fn random_tokens_never_repeat_on_a_row() {
    let mut outbox = table(1);
    let p = Variant::SeedTenant.policy();
    let mut seen = vec![LeaseToken(0)];
    for now in [0, 10, 20] {
        let lease = outbox.claim(&p, &claim(0, 1, now)).unwrap()[0];
        assert!(!seen.contains(&lease.token), "token {} repeated", lease.token);
        seen.push(lease.token);
    }
}

#[test]
fn the_auditor_stamps_the_latest_claim_and_catches_a_superseded_write() {
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let p = Mutant::WriteOwnerOnly.policy();
    let first = auditor.claim(&mut outbox, &p, &claim(0, 1, 0), Instant(0)).unwrap()[0];
    let second = auditor.claim(&mut outbox, &p, &claim(0, 1, 10), Instant(10)).unwrap()[0];
    assert_eq!((first.claim_seq, second.claim_seq), (1, 2));
    assert!(auditor.violations().is_empty());
    auditor.write(&mut outbox, &p, &write(first, WriteKind::Published, 11)).unwrap();
    let seen = auditor.violations().to_vec();
    let violations = auditor.take_violations();
    assert_eq!(seen, violations, "violations() shows what take_violations() then takes");
    assert!(auditor.violations().is_empty(), "taken means gone");
    assert_eq!(violations.iter().map(|v| v.property).collect::<Vec<_>>(), [Property::S1, Property::S5]);
    let (s1, s5) = (&violations[0], &violations[1]);
    assert_eq!((s1.message(), s5.message()), (Some(MessageId(0)), Some(MessageId(0))));
    assert!(s1.superseded() && !s5.superseded(), "only the S1 of a superseded lease is one");
    assert_eq!(
        s1.detail(),
        "mark_published by r0 with #1 applied to m0 from claim 1 of the row while claim 2 is the latest"
    );
    assert_eq!(s1.to_string(), format!("S1 no stale terminal write succeeds: {}", s1.detail()));
}

/// The model checker tells states apart by a 64-bit fingerprint of their hash: ghosts that differ
/// in any one field must hash apart, or two different states are taken for one.
#[test]
fn ghosts_that_differ_in_any_field_hash_apart() {
    use std::hash::{Hash, Hasher};
    fn hash(g: &RowGhost) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        g.hash(&mut h);
        h.finish()
    }
    let base = RowGhost {
        message_id: 3,
        claims: 5,
        tokens_seen: vec![LeaseToken(7)],
        publications: 2,
        publications_previous: 1,
        requeued_after_claim: 4,
        publications_total: 6,
        stored: false,
        retry_promise: None,
    };
    let variants: Vec<(&str, RowGhost)> = vec![
        ("message_id", RowGhost { message_id: 9, ..base.clone() }),
        ("claims", RowGhost { claims: 8, ..base.clone() }),
        ("tokens_seen", RowGhost { tokens_seen: vec![LeaseToken(8)], ..base.clone() }),
        ("tokens_seen length", RowGhost { tokens_seen: vec![LeaseToken(7), LeaseToken(9)], ..base.clone() }),
        ("publications", RowGhost { publications: 3, ..base.clone() }),
        ("publications_previous", RowGhost { publications_previous: 0, ..base.clone() }),
        ("requeued_after_claim", RowGhost { requeued_after_claim: 1, ..base.clone() }),
        ("publications_total", RowGhost { publications_total: 9, ..base.clone() }),
        ("stored", RowGhost { stored: true, ..base.clone() }),
        ("retry_promise at 0", RowGhost { retry_promise: Some(Instant(0)), ..base.clone() }),
        ("retry_promise at 1", RowGhost { retry_promise: Some(Instant(1)), ..base.clone() }),
    ];
    for (field, other) in &variants {
        assert_ne!(hash(&base), hash(other), "ghosts differing only in {field} hash alike");
    }
    assert_eq!(hash(&base), hash(&base.clone()), "equal ghosts hash alike");
}

/// A ghost's token count shares a hashed word with `stored`, and its tokens follow: were two
/// counts to give one word, a ghost with two tokens followed by one with none would hash as a
/// ghost with none followed by one whose first words are those two tokens. Worlds hash their
/// ghosts as a list, so the lists must hash apart.
#[test]
fn ghost_lists_hash_apart_where_a_token_count_could_run_into_the_next_ghost() {
    use std::hash::{Hash, Hasher};
    fn hash(g: &[RowGhost]) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        g.hash(&mut h);
        h.finish()
    }
    let ghost =
        |message_id: u32, publications: u32, requeued_after_claim: u32, stored: bool, tokens: &[u64]| RowGhost {
            message_id,
            claims: 0,
            tokens_seen: tokens.iter().map(|t| LeaseToken(*t)).collect(),
            publications,
            publications_previous: 0,
            requeued_after_claim,
            publications_total: 0,
            stored,
            retry_promise: None,
        };
    let two_then_none = [ghost(0, 0, 0, false, &[5, 6]), ghost(1, 1, 0, false, &[])];
    let none_then_two = [ghost(0, 0, 0, true, &[]), ghost(5, 6, 1, false, &[0, 0])];
    assert_ne!(hash(&two_then_none), hash(&none_then_two));
}

#[test]
fn a_release_ends_a_lease_where_its_fence_matches_and_keeps_the_count() {
    let reference = Design::Variant(Variant::Reference).policy();
    let release = |lease: Lease, fence: ReleaseFence, to: Status, retry_at: Option<u64>, now: u64| ReleaseRequest {
        lease,
        fence,
        to,
        retry_at: retry_at.map(Instant),
        now: Instant(now),
    };
    // Token fence: the lease it read, while the row still holds it.
    let mut outbox = table(1);
    let first = outbox.claim(&reference, &claim(0, 1, 100)).unwrap()[0];
    let applied = outbox.release(&release(first, ReleaseFence::Token, Status::Pending, Some(150), 120)).unwrap();
    assert_eq!(applied, WriteResult::Applied { status: Status::Pending });
    let row = *outbox.row(MessageId(0)).unwrap();
    assert_eq!(
        (row.attempts, row.lease_owner, row.lease_expires_at, row.next_attempt_at),
        (1, None, None, Some(Instant(150)))
    );
    assert_eq!(row.lease_token, first.token, "a release keeps the token");
    // ... and not once the row is no longer IN_FLIGHT, nor for a lease the row no longer holds.
    assert_eq!(
        outbox.release(&release(first, ReleaseFence::Token, Status::Pending, None, 121)).unwrap(),
        WriteResult::Stale { reason: StaleReason::NotInFlight }
    );
    let second = outbox.claim(&reference, &claim(1, 1, 200)).unwrap()[0];
    assert_eq!(
        outbox.release(&release(first, ReleaseFence::Token, Status::Pending, None, 201)).unwrap(),
        WriteResult::Stale { reason: StaleReason::WrongToken }
    );
    // Expiry fence: any expired lease, and only an expired one (this lease runs to 210).
    assert!(matches!(
        outbox.release(&release(second, ReleaseFence::Expired, Status::Exhausted, Some(5), 209)).unwrap(),
        WriteResult::Stale { .. }
    ));
    assert_eq!(
        outbox.release(&release(first, ReleaseFence::Expired, Status::Exhausted, Some(5), 210)).unwrap(),
        WriteResult::Applied { status: Status::Exhausted }
    );
    let row = *outbox.row(MessageId(0)).unwrap();
    assert_eq!(
        (row.next_attempt_at, row.last_failure_code),
        (None, Some(FailureCode::BudgetSpent)),
        "a terminal release sets no retry time"
    );
    // Id fence: anything, even a terminal row (the auditor calls that S4).
    let mut auditor = Auditor::new(MAX);
    assert_eq!(
        auditor.release(&mut outbox, &release(first, ReleaseFence::Id, Status::Failed, None, 300)).unwrap(),
        WriteResult::Applied { status: Status::Failed }
    );
    assert_eq!(auditor.take_violations().iter().map(|v| v.property).collect::<Vec<_>>(), [Property::S4]);
}

#[test]
fn the_auditor_catches_a_release_that_ends_a_lease_claimed_after_it_read_the_row() {
    let reference = Design::Variant(Variant::Reference).policy();
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let read = auditor.claim(&mut outbox, &reference, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    let taken = auditor.claim(&mut outbox, &reference, &claim(1, 1, 200), Instant(200)).unwrap()[0];
    let by_id = |lease: Lease| ReleaseRequest {
        lease,
        fence: ReleaseFence::Id,
        to: Status::Pending,
        retry_at: None,
        now: Instant(205),
    };
    auditor.release(&mut outbox.clone(), &by_id(taken)).unwrap();
    assert!(auditor.take_violations().is_empty(), "ending the latest lease is no violation");
    auditor.release(&mut outbox, &by_id(read)).unwrap();
    assert_eq!(auditor.take_violations().iter().map(|v| v.property).collect::<Vec<_>>(), [Property::S1]);
}

/// The longest span between a message's first and last publication (what a broker's dedup
/// window must cover): leases, retry delays and polls between the budget's publications; none
/// where the budget does not bound publications or keys differ per attempt.
#[test]
fn the_publication_span_follows_lease_backoff_and_budget() {
    use outbox_check::core::policy::Backoff;
    use outbox_check::core::Duration;
    use outbox_check::design::{Design, Mutant};
    let mut reference = Variant::Reference.policy();
    reference.backoff = Backoff::between(Duration(200), Duration(300));
    let span = reference.publication_span(Duration(1_000), 3, Duration(100)).unwrap();
    // 1,000 for the last lease, then two gaps: lease + delay(1) + poll, lease + delay(2) (capped) + poll.
    assert_eq!((span.publications, span.longest), (3, Duration(1_000 + (1_000 + 200 + 100) + (1_000 + 300 + 100))));
    assert_eq!(reference.publication_span(Duration(1_000), 1, Duration(100)).unwrap().longest, Duration(1_000));
    // docs/cli.md's example: lease 30 s, backoff 1–60 s, budget 5, a poll every second: 169 s.
    let mut readme = Variant::Reference.policy();
    readme.backoff = Backoff::between(Duration(1_000), Duration(60_000));
    assert_eq!(readme.publication_span(Duration(30_000), 5, Duration(1_000)).unwrap().longest, Duration(169_000));
    // One attempt over the budget: one more publication, one more gap.
    let mut over = Design::Mutant(Mutant::ExhaustOffByOne).policy();
    over.backoff = reference.backoff;
    assert_eq!(over.publication_span(Duration(1_000), 3, Duration(100)).unwrap().publications, 4);
    // Without a retry clock the next claim waits only for the lease.
    let mut no_clock = Design::Mutant(Mutant::NoRetryClock).policy();
    no_clock.backoff = reference.backoff;
    assert_eq!(
        no_clock.publication_span(Duration(1_000), 3, Duration(100)).unwrap().longest,
        Duration(1_000 + 2 * 1_100)
    );
    for unbounded in [
        Design::Variant(Variant::LegacyV1),
        Design::Variant(Variant::SeedV2),
        Design::Mutant(Mutant::FreshIdempotencyKey),
        Design::Mutant(Mutant::RetryAfterDbLoss),
        Design::Mutant(Mutant::NoBudgetPredicate),
    ] {
        assert!(unbounded.policy().publication_span(Duration(1_000), 3, Duration(100)).is_err(), "{unbounded}");
    }
}

/// `claim.takes_expired_leases = false` (River, Graphile Worker, Oban): a claim never takes an
/// in-flight row, expired or not, and says why; the rescuer's read still finds it.
#[test]
fn a_claim_that_never_takes_in_flight_rows_leaves_expired_leases_to_the_rescuer() {
    let reference = Design::Variant(Variant::Reference).policy();
    let river = Policy { claim_expired_leases: false, ..reference };
    let mut outbox = table(1);
    let first = outbox.claim(&river, &claim(0, 1, 100)).unwrap()[0];
    let row = *outbox.row(MessageId(0)).unwrap();
    // The lease ran out at 110; at 200 the reference claim takes it back, this one does not.
    assert!(Outbox::is_claimable(&reference, &row, TenantId(0), Instant(200), MAX));
    assert!(!Outbox::is_claimable(&river, &row, TenantId(0), Instant(200), MAX));
    assert_eq!(Outbox::refusal(&river, &row, TenantId(0), Instant(200), MAX), Some(ClaimRefusal::InFlight));
    assert_eq!(Outbox::refusal(&river, &row, TenantId(0), Instant(105), MAX), Some(ClaimRefusal::LiveLease));
    assert_eq!(ClaimRefusal::InFlight.to_string(), "it is in flight, and only a rescuer takes an in-flight row back");
    assert!(outbox.claim(&river, &claim(1, 1, 200)).unwrap().is_empty());
    assert_eq!(outbox.rescuable(Instant(200)).map(|r| r.message_id), Some(first.message_id));
    // Rows that are not in flight are claimed as before, a retry time in the lease column too.
    let vt = Policy { claim_expired_leases: false, retry_in_lease: true, ..reference };
    let mut waiting = row;
    waiting.status = Status::Pending;
    waiting.lease_expires_at = Some(Instant(150));
    assert!(!Outbox::is_claimable(&vt, &waiting, TenantId(0), Instant(149), MAX));
    assert!(Outbox::is_claimable(&vt, &waiting, TenantId(0), Instant(150), MAX));
}

/// The rescuer's target and budget rule: back to PENDING (at once, or after the backoff of its
/// attempts), or FAILED; a spent budget to EXHAUSTED unless the rescuer ignores it.
#[test]
fn the_rescuer_moves_a_row_to_its_target_and_checks_the_budget_as_told() {
    let reference = Design::Variant(Variant::Reference).policy();
    let rescuer = Policy { rescue: Some(ReleaseFence::Expired), ..reference };
    let lease = |attempts: u32| Lease {
        message_id: MessageId(0),
        tenant_id: TenantId(0),
        owner: RelayId(0),
        token: LeaseToken(attempts as u64),
        attempts,
        claim_seq: 0,
    };
    let at = Instant(1_000);
    let cases: [(RescueTarget, RescueBudget, u32, Status, Option<u64>); 8] = [
        (RescueTarget::Pending, RescueBudget::Exhausts, 1, Status::Pending, None),
        (RescueTarget::Pending, RescueBudget::Exhausts, MAX, Status::Exhausted, None),
        (RescueTarget::Pending, RescueBudget::Ignored, MAX, Status::Pending, None),
        // River: retryable after its backoff, base 1 s doubling: 2 s after the second attempt.
        (RescueTarget::Retry, RescueBudget::Exhausts, 2, Status::Pending, Some(3_000)),
        (RescueTarget::Retry, RescueBudget::Exhausts, MAX, Status::Exhausted, None),
        (RescueTarget::Retry, RescueBudget::Ignored, MAX, Status::Pending, Some(5_000)),
        (RescueTarget::Failed, RescueBudget::Exhausts, 1, Status::Failed, None),
        (RescueTarget::Failed, RescueBudget::Ignored, MAX, Status::Failed, None),
    ];
    for (target, budget, attempts, to, retry_at) in cases {
        let policy = Policy { rescue_to: target, rescue_budget: budget, ..rescuer };
        let request = policy.rescue_request(lease(attempts), ReleaseFence::Expired, attempts, MAX, at);
        assert_eq!(
            (request.to, request.retry_at, request.fence, request.now),
            (to, retry_at.map(Instant), ReleaseFence::Expired, at),
            "{target:?} {budget:?} at {attempts} attempts"
        );
    }
    // Without EXHAUSTED a spent budget fails the row.
    let no_exhausted = Policy { exhausted_status: false, ..rescuer };
    assert_eq!(no_exhausted.rescue_target(MAX, MAX), Status::Failed);
    assert_eq!(no_exhausted.rescue_target(MAX - 1, MAX), Status::Pending);
    // The retry time goes on the row the release moves back.
    let mut outbox = table(1);
    let held = outbox.claim(&reference, &claim(0, 1, 100)).unwrap()[0];
    let river = Policy { rescue_to: RescueTarget::Retry, ..rescuer };
    let request = river.rescue_request(held, ReleaseFence::Expired, held.attempts, MAX, Instant(200));
    assert_eq!(outbox.release(&request).unwrap(), WriteResult::Applied { status: Status::Pending });
    assert_eq!(outbox.row(MessageId(0)).unwrap().next_attempt_at, Some(Instant(1_200)));
}

/// `write.fence = "status-only"` (River's completer): a write applies to any IN_FLIGHT row of
/// its id, whoever holds it, and to nothing else.
#[test]
fn a_status_only_fence_ends_whatever_lease_the_row_has() {
    let reference = Design::Variant(Variant::Reference).policy();
    let river = Policy { write_fence: WriteFence::StatusOnly, ..reference };
    let mut outbox = table(1);
    let first = outbox.claim(&river, &claim(0, 1, 100)).unwrap()[0];
    let second = outbox.claim(&river, &claim(1, 1, 200)).unwrap()[0];
    assert_ne!(first.token, second.token);
    let mut fenced = outbox.clone();
    assert_eq!(
        fenced.write(&reference, &write(first, WriteKind::Published, 201)).unwrap(),
        WriteResult::Stale { reason: StaleReason::WrongOwner }
    );
    assert_eq!(
        outbox.write(&river, &write(first, WriteKind::Published, 201)).unwrap(),
        WriteResult::Applied { status: Status::Published }
    );
    assert_eq!(
        outbox.write(&river, &write(second, WriteKind::Published, 202)).unwrap(),
        WriteResult::Stale { reason: StaleReason::NotInFlight }
    );
}

/// S10's rule, fed what a torn enqueue would leave (the core's own enqueue never tears, so the
/// rule is tested on its own): applied needs the row and exactly one version more; stale needs
/// neither.
#[test]
fn an_enqueue_is_torn_unless_row_and_version_move_together() {
    let m = MessageId(4);
    let applied = EnqueueResult::Applied { version: 3 };
    let stale = EnqueueResult::Stale { current_version: 2 };
    assert_eq!(Auditor::enqueue_breach(m, &applied, true, 2, 3), None);
    assert_eq!(
        Auditor::enqueue_breach(m, &applied, false, 2, 3),
        Some(Breach::EnqueueTorn { message: m, inserted: false, transitioned: true })
    );
    assert_eq!(
        Auditor::enqueue_breach(m, &applied, true, 2, 2),
        Some(Breach::EnqueueTorn { message: m, inserted: true, transitioned: false })
    );
    assert_eq!(
        Auditor::enqueue_breach(m, &applied, true, 2, 4),
        Some(Breach::EnqueueTorn { message: m, inserted: true, transitioned: false })
    );
    assert_eq!(Auditor::enqueue_breach(m, &stale, false, 2, 2), None);
    assert_eq!(Auditor::enqueue_breach(m, &stale, true, 2, 2), Some(Breach::StaleEnqueueChanged { message: m }));
    assert_eq!(Auditor::enqueue_breach(m, &stale, false, 2, 3), Some(Breach::StaleEnqueueChanged { message: m }));
    // Through the auditor, the core's enqueue keeps it.
    let mut outbox = Outbox::new();
    let mut auditor = Auditor::new(MAX);
    let req = EnqueueRequest {
        tenant_id: TenantId(0),
        aggregate_id: AggregateId(0),
        expected_version: 0,
        message_id: m,
        now: Instant(0),
    };
    assert_eq!(auditor.enqueue(&mut outbox, &req), Ok(EnqueueResult::Applied { version: 1 }));
    assert_eq!(
        auditor.enqueue(&mut outbox, &EnqueueRequest { message_id: MessageId(5), ..req }).unwrap(),
        EnqueueResult::Stale { current_version: 1 }
    );
    assert!(auditor.violations().is_empty(), "{:?}", auditor.violations());
    assert!(auditor.ghost(m).is_some() && auditor.ghost(MessageId(5)).is_none());
}

/// S4's words for a terminal row a rescuer moved by id: what it was and what it is now.
#[test]
fn the_auditor_names_what_a_terminal_row_became() {
    let reference = Design::Variant(Variant::Reference).policy();
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let lease = auditor.claim(&mut outbox, &reference, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    auditor.published(&outbox, &lease, IdempotencyKey::Message { message_id: MessageId(0) }, true);
    auditor.write(&mut outbox, &reference, &write(lease, WriteKind::Published, 101)).unwrap();
    assert!(auditor.take_violations().is_empty());
    let by_id =
        ReleaseRequest { lease, fence: ReleaseFence::Id, to: Status::Pending, retry_at: None, now: Instant(102) };
    assert_eq!(auditor.release(&mut outbox, &by_id).unwrap(), WriteResult::Applied { status: Status::Pending });
    let v = auditor.take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].property, Property::S4);
    assert!(
        matches!(v[0].breach, Breach::ChangedTerminal { was: Status::Published, now: Some(Status::Pending), .. }),
        "{:?}",
        v[0].breach
    );
}

/// A random-token claim that leaves the token as it was reuses it (S2), even the first time;
/// a random-token claim records the token it replaced, a counter claim records none.
#[test]
fn a_random_token_claim_that_keeps_the_token_reuses_it() {
    let tenant = Design::Variant(Variant::SeedTenant).policy();
    assert_eq!(tenant.token_kind, TokenKind::Random);
    let keeps = Policy { claim_fence: ClaimFence::OwnerOnly, ..tenant };
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    auditor.claim(&mut outbox, &keeps, &claim(0, 1, 100), Instant(100)).unwrap();
    let v = auditor.take_violations();
    assert!(v.iter().any(|v| v.property == Property::S2), "{v:?}");
    // Fresh random tokens: no breach, and the ghost keeps the tokens the row had.
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let first = auditor.claim(&mut outbox, &tenant, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    auditor.claim(&mut outbox, &tenant, &claim(1, 1, 200), Instant(200)).unwrap();
    assert!(auditor.take_violations().is_empty());
    assert_eq!(auditor.ghost(MessageId(0)).unwrap().tokens_seen, vec![LeaseToken(0), first.token]);
    let reference = Design::Variant(Variant::Reference).policy();
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    auditor.claim(&mut outbox, &reference, &claim(0, 1, 100), Instant(100)).unwrap();
    assert!(auditor.ghost(MessageId(0)).unwrap().tokens_seen.is_empty());
}

/// Publications are counted per budget: those of a lease from before a requeue go to the old
/// budget (S3 past it), the rest to the new one, and every one to the lifetime count.
#[test]
fn publications_count_against_the_budget_their_claim_belongs_to() {
    let reference = Design::Variant(Variant::Reference).policy();
    let mut outbox = table(1);
    let mut auditor = Auditor::new(1);
    let one = |now: u64| ClaimRequest { max_attempts: 1, ..claim(0, 1, now) };
    let old = auditor.claim(&mut outbox, &reference, &one(100), Instant(100)).unwrap()[0];
    let key = IdempotencyKey::Message { message_id: MessageId(0) };
    auditor.published(&outbox, &old, key, false);
    let fail = WriteRequest { max_attempts: 1, ..write(old, WriteKind::Failed { code: FailureCode::Rejected }, 101) };
    assert_eq!(auditor.write(&mut outbox, &reference, &fail).unwrap(), WriteResult::Applied { status: Status::Failed });
    auditor.requeue(&mut outbox, &reference, MessageId(0)).unwrap();
    assert!(auditor.take_violations().is_empty());
    let new = auditor.claim(&mut outbox, &reference, &one(200), Instant(200)).unwrap()[0];
    auditor.published(&outbox, &new, key, true);
    assert!(auditor.take_violations().is_empty(), "one publication in each budget");
    // The lease from before the requeue publishes again: its budget had one.
    auditor.published(&outbox, &old, key, false);
    let v = auditor.take_violations();
    assert!(
        matches!(
            v.as_slice(),
            [Violation { property: Property::S3, breach: Breach::PublishedOverBudget { count: 2, max: 1, .. } }]
        ),
        "{v:?}"
    );
    let ghost = auditor.ghost(MessageId(0)).unwrap();
    assert_eq!((ghost.publications, ghost.publications_previous, ghost.publications_total), (1, 2, 3));
}

#[test]
fn the_model_names_tenants_as_it_prints_them() {
    assert_eq!(ModelNames.tenant_name(TenantId(2)), "tenant2");
    assert_eq!(ModelNames.tenant_name(TenantId(2)), TenantId(2).to_string());
}

/// Design files (the core's `design_file`): the rules a file is held to, each with the words
/// of its error.
mod design_file_rules {
    use outbox_check::core::design_file::{DesignFile, StatusNames};
    use outbox_check::core::*;
    use outbox_check::design::{Design, Variant};

    fn apply(base: Policy, text: &str) -> Result<Policy, String> {
        DesignFile::parse(&format!("name = \"q\"\n{text}\n")).unwrap().apply(base)
    }

    #[test]
    fn one_name_stands_for_two_statuses_only_where_no_statement_tells_them_apart() {
        assert_eq!(StatusNames::default().check(), Ok(()));
        let river = StatusNames {
            pending: Some("available".into()),
            in_flight: Some("running".into()),
            ..StatusNames::default()
        };
        assert_eq!(river.check(), Ok(()));
        // River's and Oban's `discarded`; a queue with no AMBIGUOUS.
        let discarded = StatusNames {
            failed: Some("discarded".into()),
            exhausted: Some("discarded".into()),
            ..StatusNames::default()
        };
        assert_eq!(discarded.check(), Ok(()));
        assert_eq!(discarded.by_name()["discarded"], vec![Status::Failed, Status::Exhausted]);
        let retryable = StatusNames {
            pending: Some("retryable".into()),
            ambiguous: Some("retryable".into()),
            ..StatusNames::default()
        };
        assert_eq!(retryable.check(), Ok(()));
        // Statuses a statement tells apart never share a name, whichever comes first.
        for (a, b) in [
            (Status::Pending, Status::InFlight),
            (Status::Published, Status::Failed),
            (Status::Ambiguous, Status::Exhausted),
        ] {
            let mut names = StatusNames::default();
            for s in [a, b] {
                let slot = match s {
                    Status::Pending => &mut names.pending,
                    Status::InFlight => &mut names.in_flight,
                    Status::Published => &mut names.published,
                    Status::Ambiguous => &mut names.ambiguous,
                    Status::Failed => &mut names.failed,
                    Status::Exhausted => &mut names.exhausted,
                };
                *slot = Some("same".into());
            }
            let e = names.check().unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "statuses: \"same\" names both {} and {}, which the statements",
                    a.as_str(),
                    b.as_str()
                )),
                "{e}"
            );
        }
        assert_eq!(ModelNames.status_name(Status::InFlight), "IN_FLIGHT");
    }

    #[test]
    fn an_error_names_its_key_once() {
        let e = DesignFile::parse("name = \"q\"\n[attempts]\ncounted_at = \"never\"\n").unwrap_err();
        assert!(e.message.starts_with("attempts.counted_at: unknown variant `never`"), "{e}");
        assert_eq!((e.line, e.column), (3, 14), "the value's line and column, from 1");
        // toml's own words already name it: not again.
        let e = DesignFile::parse("name = \"q\"\nlive = true\n").unwrap_err();
        assert!(e.message.starts_with("unknown field `live`"), "{e}");
    }

    #[test]
    fn backoff_keys_go_with_their_kind() {
        let exponential = Design::Variant(Variant::Reference).policy();
        let fixed = Policy { backoff: Backoff::between(Duration(250), Duration(250)), ..exponential };
        // Without `backoff`, the base's kind: a fixed base takes delay_ms, an exponential one not.
        assert_eq!(
            apply(fixed, "[retry]\ndelay_ms = 300").unwrap().backoff,
            Backoff::between(Duration(300), Duration(300))
        );
        assert_eq!(
            apply(exponential, "[retry]\ndelay_ms = 300").unwrap_err(),
            "retry.delay_ms does not go with backoff = \"exponential\", which takes base_ms, cap_ms and factor"
        );
        // Fixed takes no base or cap, either of them, nor another kind's keys.
        for key in ["cap_ms = 5", "base_ms = 5", "factor = 3.0", "exponent = 2"] {
            let e = apply(exponential, &format!("[retry]\nbackoff = \"fixed\"\n{key}\ndelay_ms = 5")).unwrap_err();
            let name = key.split(' ').next().unwrap();
            assert_eq!(e, format!("retry.backoff = \"fixed\" takes delay_ms, not {name}"));
        }
        // Power: River's attempt⁴ seconds; it needs its exponent, takes no factor.
        let river =
            apply(exponential, "[retry]\nbackoff = \"power\"\nbase_ms = 1000\ncap_ms = 9000000\nexponent = 4").unwrap();
        assert_eq!(river.backoff.delay(3), Duration(81_000));
        assert_eq!(
            apply(exponential, "[retry]\nbackoff = \"power\"").unwrap_err(),
            "retry.backoff = \"power\" needs exponent"
        );
        assert!(apply(exponential, "[retry]\nbackoff = \"power\"\nexponent = 0").unwrap_err().contains("exponent = 0"));
        assert!(apply(exponential, "[retry]\nbackoff = \"power\"\nexponent = 2\nfactor = 3.0")
            .unwrap_err()
            .starts_with("retry.factor does not go with backoff = \"power\""));
        // A power base keeps its kind without `backoff`; an exponential one returns to doubling.
        assert_eq!(apply(river, "[retry]\nbase_ms = 2").unwrap().backoff.delay(2), Duration(32));
        let back = apply(river, "[retry]\nbackoff = \"exponential\"").unwrap();
        assert_eq!(back.backoff.delay(3), Duration(4_000));
        // A factor: Graphile Worker's e; none at or below 1.
        let graphile = apply(exponential, "[retry]\nbase_ms = 2718\ncap_ms = 22026466\nfactor = 2.718").unwrap();
        assert_eq!(graphile.backoff.delay(2), Duration(7387));
        // A base's factor stays where the file names the kind again without one.
        let again = apply(graphile, "[retry]\nbackoff = \"exponential\"\nbase_ms = 3000").unwrap();
        assert_eq!(again.backoff.delay(2), Duration(8154));
        let e = DesignFile::parse("name = \"q\"\n[retry]\nfactor = 1.0\n").unwrap_err();
        assert!(e.message.contains("1 is no factor a delay can grow by"), "{e}");
        // Each shape round-trips through a complete file.
        for policy in [river, graphile, fixed] {
            let text = DesignFile::complete("q", "round trip", &policy).to_toml();
            let again = DesignFile::parse(&text).unwrap().resolve(&|_| None).unwrap();
            assert_eq!(again.backoff, policy.backoff, "{text}");
        }
        // Fixed needs a delay only where the base's backoff is not fixed already.
        assert!(apply(exponential, "[retry]\nbackoff = \"fixed\"").unwrap_err().contains("needs delay_ms"));
        assert_eq!(apply(fixed, "[retry]\nbackoff = \"fixed\"").unwrap().backoff, fixed.backoff);
        // The cap may equal the base, not be below it.
        assert_eq!(
            apply(exponential, "[retry]\nbase_ms = 10\ncap_ms = 10").unwrap().backoff,
            Backoff::between(Duration(10), Duration(10))
        );
        assert!(apply(exponential, "[retry]\nbase_ms = 10\ncap_ms = 9")
            .unwrap_err()
            .contains("cap_ms = 9 is below base_ms = 10"));
    }

    #[test]
    fn a_file_without_based_on_names_the_keys_it_leaves_out() {
        let reference = Design::Variant(Variant::Reference).policy();
        let complete = DesignFile::complete("mine", "all of reference", &reference).to_toml();
        assert_eq!(DesignFile::parse(&complete).unwrap().missing_keys(), Vec::<&str>::new());
        let without: String =
            complete.lines().filter(|l| !l.starts_with("budget =")).map(|l| format!("{l}\n")).collect();
        let file = DesignFile::parse(&without).unwrap();
        assert_eq!(file.missing_keys(), vec!["claim.budget"]);
        let e = file.resolve(&|_| None).unwrap_err();
        assert!(e.starts_with("claim.budget not given"), "{e}");
    }

    #[test]
    fn a_design_name_takes_letters_digits_dashes_and_underscores() {
        let named = |name: &str| {
            DesignFile::parse(&format!("name = {name:?}\nbased_on = \"reference\"\n"))
                .unwrap()
                .resolve(&|_| Some(Design::Variant(Variant::Reference).policy()))
        };
        assert!(named("rescue-by_id2").is_ok());
        assert_eq!(
            named("my queue").unwrap_err(),
            "name = \"my queue\": a design's name takes letters, digits, - and _"
        );
        assert!(named("").is_err());
    }

    #[test]
    fn a_complete_file_gives_back_its_policy_with_its_kind_of_backoff() {
        let reference = Design::Variant(Variant::Reference).policy();
        let fixed = Policy { backoff: Backoff::between(Duration(250), Duration(250)), ..reference };
        for (policy, has, lacks) in [
            (reference, &["base_ms = 1000", "cap_ms = 60000"][..], &["delay_ms"][..]),
            (fixed, &["delay_ms = 250"][..], &["base_ms", "cap_ms"][..]),
        ] {
            let file = DesignFile::complete("mine", "all of it", &policy);
            let text = file.to_toml();
            for key in has {
                assert!(text.contains(key), "{key} missing:\n{text}");
            }
            for key in lacks {
                assert!(!text.contains(key), "{key} given:\n{text}");
            }
            assert_eq!(DesignFile::parse(&text).unwrap().resolve(&|_| None), Ok(policy));
            let commented = file.to_commented_toml();
            assert!(commented.starts_with("# An outbox-check design file (docs/design-file.md)."), "{commented}");
            assert!(
                commented.contains("# true: a claim takes only its relay's tenant's rows.\ntenant_scoped = "),
                "{commented}"
            );
            assert!(
                commented.contains("# Which rows a claim takes, in what order, and what it writes on them.\n[claim]"),
                "{commented}"
            );
        }
    }
}

/// The words every result of the core prints (reports, the explorer and the oracle show them to
/// users), and the failure code each write records.
#[test]
fn the_cores_results_say_what_happened_in_words() {
    assert_eq!(EnqueueResult::Applied { version: 2 }.to_string(), "applied (the aggregate is now at version 2)");
    assert_eq!(
        EnqueueResult::Stale { current_version: 3 }.to_string(),
        "stale (the aggregate is at version 3: nothing inserted)"
    );
    let reasons = [
        (StaleReason::WrongTenant, "the row belongs to another tenant"),
        (StaleReason::NotInFlight, "the row is no longer IN_FLIGHT"),
        (StaleReason::Deleted, "the row was deleted"),
        (StaleReason::WrongOwner, "another relay holds the lease"),
        (StaleReason::WrongToken, "the token was superseded"),
    ];
    for (reason, words) in reasons {
        assert_eq!(reason.to_string(), words);
        assert_eq!(WriteResult::Stale { reason }.to_string(), format!("stale: {words}"));
    }
    assert_eq!(ClaimRefusal::LiveLease.to_string(), "its lease is still live");
    assert_eq!(RequeueResult::Applied.to_string(), "applied (back to PENDING with a new budget)");
    assert_eq!(
        RequeueResult::NotRequeueable { status: Status::Published }.to_string(),
        "not requeueable (the row is PUBLISHED)"
    );
    assert_eq!(WriteKind::Published.code(), None);
    for code in [FailureCode::Timeout, FailureCode::Unavailable, FailureCode::Rejected] {
        assert_eq!(WriteKind::Ambiguous { code }.code(), Some(code));
        assert_eq!(WriteKind::Retry { code }.code(), Some(code));
        assert_eq!(WriteKind::Failed { code }.code(), Some(code));
        assert_eq!(WriteKind::Exhausted { code }.code(), Some(code));
    }
}

/// S11: the broker stores a message while its row is recorded failed (here by the reaper, then
/// by a later claim's holder) — and only then: not a copy the broker dropped, not a delivery
/// before the failure, not after a requeue.
#[test]
fn a_delivery_under_a_lease_another_recorded_failed_breaks_s11() {
    let reference = Design::Variant(Variant::Reference).policy();
    let key = IdempotencyKey::Message { message_id: MessageId(0) };
    let one = |now: u64| ClaimRequest { max_attempts: 1, ..claim(0, 1, now) };
    // The holder delivers before the reaper: the row is IN_FLIGHT, no S11.
    let mut outbox = table(1);
    let mut auditor = Auditor::new(1);
    let lease = auditor.claim(&mut outbox, &reference, &one(100), Instant(100)).unwrap()[0];
    auditor.published(&outbox, &lease, key, true);
    assert!(auditor.take_violations().is_empty());
    // The lease runs out with the budget spent: the reaper exhausts the row the holder still
    // holds; a copy the broker dropped is no delivery, a stored one is.
    assert_eq!(auditor.reap(&mut outbox, Instant(110)), vec![MessageId(0)]);
    let s11 = |v: Vec<Violation>| v.into_iter().filter(|v| v.property == Property::S11).collect::<Vec<_>>();
    // (Each publication past the first is S3's too, with a budget of one.)
    auditor.published(&outbox, &lease, key, false);
    assert!(s11(auditor.take_violations()).is_empty(), "nothing stored, nothing delivered");
    auditor.published(&outbox, &lease, key, true);
    let v = s11(auditor.take_violations());
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0].detail(),
        format!("the broker stored m0 from r0 under lease {} after its row was recorded EXHAUSTED", lease.token)
    );
    // Once requeued the row is no longer recorded failed: a delivery then is no false failure.
    auditor.requeue(&mut outbox, &reference, MessageId(0)).unwrap();
    auditor.published(&outbox, &lease, key, true);
    assert!(s11(auditor.take_violations()).is_empty());
    // Laravel#48539's route: a later claim's holder fails the row (here its own failure write)
    // while the first holder still runs; the first holder's delivery is the false failure.
    let new = auditor.claim(&mut outbox, &reference, &one(200), Instant(200)).unwrap()[0];
    let fail = WriteRequest { max_attempts: 1, ..write(new, WriteKind::Failed { code: FailureCode::Rejected }, 201) };
    assert_eq!(auditor.write(&mut outbox, &reference, &fail).unwrap(), WriteResult::Applied { status: Status::Failed });
    auditor.take_violations();
    auditor.published(&outbox, &lease, key, true);
    assert_eq!(s11(auditor.take_violations()).len(), 1);
}

/// Random tokens are splitmix64 of the claim's number in the table (every engine computes the
/// same one: SQL binds it), and a normalising engine's restart begins the numbering again.
#[test]
fn random_tokens_follow_the_claim_number_and_restart_from_the_first() {
    let tenant = Design::Variant(Variant::SeedTenant).policy();
    let mut outbox = table(3);
    let first = outbox.claim(&tenant, &claim(0, 1, 100)).unwrap()[0];
    let second = outbox.claim(&tenant, &claim(0, 1, 100)).unwrap()[0];
    assert_eq!((first.token, second.token), (LeaseToken(random_token(1)), LeaseToken(random_token(2))));
    outbox.restart_random_tokens();
    let third = outbox.claim(&tenant, &claim(0, 1, 100)).unwrap()[0];
    assert_eq!(third.token, LeaseToken(random_token(1)));
}

/// A refusal names the rule that refuses, at each rule's boundary: a lease ending at `now` is
/// not live and a retry time at `now` is due, so a row whose budget is spent says so.
#[test]
fn a_refusal_names_the_rule_at_its_boundary() {
    let reference = Design::Variant(Variant::Reference).policy();
    let refusal = |row: &Row, now: u64| Outbox::refusal(&reference, row, TenantId(0), Instant(now), 1);
    let mut outbox = table(1);
    let lease = outbox.claim(&reference, &claim(0, 1, 100)).unwrap()[0];
    let held = *outbox.row(MessageId(0)).unwrap();
    assert_eq!(held.lease_expires_at, Some(Instant(110)));
    assert_eq!(refusal(&held, 109), Some(ClaimRefusal::LiveLease));
    assert_eq!(refusal(&held, 110), Some(ClaimRefusal::BudgetSpent));
    let retry = write(lease, WriteKind::Retry { code: FailureCode::Unavailable }, 105);
    assert_eq!(outbox.write(&reference, &retry).unwrap(), WriteResult::Applied { status: Status::Pending });
    let waiting = *outbox.row(MessageId(0)).unwrap();
    let at = waiting.next_attempt_at.expect("a retry time").0;
    assert_eq!(refusal(&waiting, at - 1), Some(ClaimRefusal::RetryClock));
    assert_eq!(refusal(&waiting, at), Some(ClaimRefusal::BudgetSpent));
}

/// The rescuer's read takes the first row by id whose lease has expired at `now` (not a live
/// lease, not a row without one), and a release to EXHAUSTED records the spent budget as the
/// row's failure code (one back to PENDING records none).
#[test]
fn the_rescuer_reads_the_first_expired_lease_and_a_release_to_exhausted_says_why() {
    let reference = Design::Variant(Variant::Reference).policy();
    let mut outbox = table(3);
    let first = outbox.claim(&reference, &claim(0, 1, 100)).unwrap()[0];
    let second = outbox.claim(&reference, &claim(1, 1, 105)).unwrap()[0];
    let read = |outbox: &Outbox, now: u64| outbox.rescuable(Instant(now)).map(|row| row.message_id);
    assert_eq!(read(&outbox, 109), None, "both leases are live, m2 has none");
    assert_eq!(read(&outbox, 110), Some(MessageId(0)));
    let release = |lease: Lease, to: Status| ReleaseRequest {
        lease,
        fence: ReleaseFence::Token,
        to,
        retry_at: None,
        now: Instant(120),
    };
    assert_eq!(
        outbox.release(&release(first, Status::Pending)).unwrap(),
        WriteResult::Applied { status: Status::Pending }
    );
    assert_eq!(read(&outbox, 115), Some(MessageId(1)));
    assert_eq!(
        outbox.release(&release(second, Status::Exhausted)).unwrap(),
        WriteResult::Applied { status: Status::Exhausted }
    );
    assert_eq!(outbox.row(MessageId(0)).unwrap().last_failure_code, None);
    assert_eq!(outbox.row(MessageId(1)).unwrap().last_failure_code, Some(FailureCode::BudgetSpent));
    assert_eq!(read(&outbox, 200), None);
}

/// A row is stranded when no step of the design can end it: not terminal, its budget spent for
/// the claim, and no maintenance job that moves an IN_FLIGHT row.
#[test]
fn a_row_is_stranded_only_where_no_claim_reaper_or_rescuer_can_end_it() {
    let reference = Design::Variant(Variant::Reference).policy();
    let mut outbox = table(2);
    let fresh = *outbox.row(MessageId(1)).unwrap();
    assert!(!Outbox::stranded(&reference, &fresh, 1, false), "a claim still takes it");
    outbox.claim(&reference, &ClaimRequest { max_attempts: 1, ..claim(0, 1, 100) }).unwrap();
    let held = *outbox.row(MessageId(0)).unwrap();
    assert!(Outbox::stranded(&reference, &held, 1, false), "in flight, budget spent, nothing reaps it");
    assert!(!Outbox::stranded(&reference, &held, 1, true), "a reaper or rescuer moves it");
    assert!(!Outbox::stranded(&reference, &held, 2, false), "a claim may take it again");
    let waiting = Row { status: Status::Ambiguous, ..held };
    assert!(Outbox::stranded(&reference, &waiting, 1, true), "no maintenance job moves an AMBIGUOUS row");
    let ended = Row { status: Status::Failed, ..held };
    assert!(!Outbox::stranded(&reference, &ended, 1, false), "a terminal row is ended, not stranded");
}

/// The random tokens are splitmix64's finaliser over the claim number: pinned values, so a SQL
/// binding that computes them itself can be checked against these.
#[test]
fn random_tokens_are_splitmix64_and_release_fences_have_their_names() {
    assert_eq!(random_token(1), 0x910a_2dec_8902_5cc1);
    assert_eq!(random_token(2), 0x9758_35de_1c97_56ce);
    assert_eq!(
        [ReleaseFence::Token.name(), ReleaseFence::Expired.name(), ReleaseFence::Id.name()],
        ["token", "expired", "id"]
    );
}

/// The switches `variants` and a design file's comments print: every field of the policy under
/// its own key, in a fixed order, as the word the design file takes.
#[test]
fn a_policys_switches_are_its_fields_under_their_keys_in_the_files_words() {
    let order = [
        "attempts_at",
        "claim_fence",
        "write_fence",
        "failure_fence",
        "budget",
        "ambiguous_shape",
        "token_kind",
        "claim_order",
        "claim_ties_any",
        "retry_clock",
        "retry_in_lease",
        "completion",
        "exhausted_status",
        "claim_by_tenant",
        "write_checks_tenant",
        "claim_live_leases",
        "claim_expired_leases",
        "claim_terminal",
        "swallow_stale",
        "requeue_resets_token",
        "rescue",
        "rescue_to",
        "rescue_budget",
        "rescue_after_expiry",
        "rescue_restamps",
        "failure_deletes",
        "retry_checks_budget",
        "budget_in_write",
        "lease",
        "retry_timer",
        "release_by_owner",
        "renewal",
        "scheduler",
        "backoff",
        "relay.idempotency_key",
        "relay.rejection",
        "relay.publish_before_ack",
        "relay.republish_after_db_loss",
        "relay.reaper",
        "relay.clock",
        "relay.write_clock",
        "relay.shared_owner",
        "relay.fails_claims_past_budget",
        "relay.on_failure",
    ];
    for variant in [Variant::Reference, Variant::LegacyV1] {
        let policy = variant.policy();
        let json = serde_json::to_value(policy).expect("a policy serialises");
        let switches = policy.switches();
        assert_eq!(switches.iter().map(|(k, _)| *k).collect::<Vec<_>>(), order);
        for (name, value) in &switches {
            let field = name.split('.').try_fold(&json, |v, k| v.get(k)).unwrap_or_else(|| panic!("{name} is a field"));
            let want = match (*name, field) {
                ("failure_fence", _) => policy.failure_fence.map_or("as write_fence".to_string(), |f| {
                    serde_json::to_value(f).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
                }),
                ("rescue", _) => policy.rescue.map_or("none".to_string(), |f| format!("fenced by {}", f.name())),
                ("relay.write_clock", _) => policy.relay.write_clock.map_or("as relay.clock".to_string(), |c| {
                    serde_json::to_value(c).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
                }),
                ("backoff", _) => format!("{}..{}", policy.backoff.base, policy.backoff.cap),
                (_, serde_json::Value::String(word)) => word.clone(),
                (_, other) => other.to_string(),
            };
            assert_eq!(value, &want, "{name} of {variant:?}");
            assert!(!value.starts_with('"'), "{name} is printed as a word, not a JSON string: {value}");
        }
    }
    let values = |v: Variant| v.policy().switches().into_iter().map(|(_, v)| v).collect::<Vec<_>>();
    assert_ne!(values(Variant::Reference), values(Variant::LegacyV1), "two designs print apart");
    let reference = Variant::Reference.policy().switches();
    assert!(reference.contains(&("retry_clock", "true".to_string())), "{reference:?}");
}

/// The ghost fields a property reads are four distinct bits: an abstraction erases a field only
/// where nothing looking reads it, so two fields sharing a bit (or a field of no bit) would erase
/// one that is read.
#[test]
fn ghost_fields_are_distinct_bits_and_a_union_reads_both() {
    let fields = [Ghosts::PUBLICATIONS, Ghosts::STORED, Ghosts::PUBLISHED_AT, Ghosts::FAILURE_CODE];
    for (i, a) in fields.iter().enumerate() {
        assert!(a.overlaps(*a), "field {i} is a bit");
        assert_eq!(a.union(*a), *a, "a field joined with itself is read once");
        assert!(!a.overlaps(Ghosts::NONE));
        for (j, b) in fields.iter().enumerate().filter(|(j, _)| *j != i) {
            assert!(!a.overlaps(*b), "fields {i} and {j} share a bit");
            let both = a.union(*b);
            assert!(both.overlaps(*a) && both.overlaps(*b), "the union of {i} and {j} reads both");
            for (k, c) in fields.iter().enumerate().filter(|(k, _)| *k != i && *k != j) {
                assert!(!both.overlaps(*c), "the union of {i} and {j} does not read {k}");
            }
        }
    }
}

/// A property's sentence is its name without the id, and every safety property has a bit of
/// its own in the masks over `Property::SAFETY`.
#[test]
fn a_property_says_its_sentence_and_has_a_bit_of_its_own() {
    for p in Property::SAFETY.into_iter().chain(Property::LIVENESS) {
        assert_eq!(format!("{} {}", p.id(), p.sentence()), p.name());
        assert!(p.sentence().len() > 10, "{}: {}", p.id(), p.sentence());
    }
    assert_eq!(Property::S1.sentence(), "no stale terminal write succeeds");
    let mut seen = 0u16;
    for p in Property::SAFETY {
        assert_eq!(p.bit().count_ones(), 1, "{}", p.id());
        assert_eq!(seen & p.bit(), 0, "{} shares a bit", p.id());
        seen |= p.bit();
    }
    assert_eq!(seen.count_ones() as usize, Property::SAFETY.len());
}

/// Per-write fences (Graphile Worker: complete by id, fail by `locked_by`): the completion checks
/// `write.fence`, every failure write `write.failure_fence`.
#[test]
fn a_failure_write_checks_its_own_fence_and_the_completion_its_own() {
    let mut p = Variant::Reference.policy();
    p.write_fence = WriteFence::MessageIdOnly;
    p.failure_fence = Some(WriteFence::StatusOwner);
    assert_eq!(p.fence_of(WriteKind::Published), WriteFence::MessageIdOnly);
    for kind in [
        TIMEOUT,
        WriteKind::Retry { code: FailureCode::Unavailable },
        WriteKind::Failed { code: FailureCode::Rejected },
        WriteKind::Exhausted { code: FailureCode::Rejected },
    ] {
        assert_eq!(p.fence_of(kind), WriteFence::StatusOwner, "{kind:?}");
    }
    assert_eq!(p.write_fences().collect::<Vec<_>>(), [WriteFence::MessageIdOnly, WriteFence::StatusOwner]);
    let mut outbox = table(1);
    let old = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    let new = outbox.claim(&p, &claim(1, 1, 10)).unwrap()[0];
    let snapshot = outbox.clone();
    assert_eq!(
        outbox.write(&p, &write(old, WriteKind::Failed { code: FailureCode::Rejected }, 11)),
        Ok(WriteResult::Stale { reason: StaleReason::WrongOwner }),
        "the failure write checks the owner"
    );
    assert_eq!(outbox, snapshot);
    assert_eq!(
        outbox.write(&p, &write(old, WriteKind::Published, 11)),
        Ok(WriteResult::Applied { status: Status::Published }),
        "the completion checks the id alone, so the superseded lease's applies"
    );
    // One owner id for two workers (a shared pool): the failure fence on the owner passes too.
    let mut outbox = table(1);
    let old = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    outbox.claim(&p, &claim(0, 1, 10)).unwrap();
    assert_eq!(
        outbox.write(&p, &write(old, WriteKind::Failed { code: FailureCode::Rejected }, 11)),
        Ok(WriteResult::Applied { status: Status::Failed }),
        "a fence on a shared owner cannot tell two attempts apart"
    );
    let _ = new;
    let same = Policy { failure_fence: None, ..p };
    assert_eq!(
        same.fence_of(TIMEOUT),
        WriteFence::MessageIdOnly,
        "without its own, the failure writes use write.fence"
    );
    assert_eq!(same.write_fences().count(), 1);
}

/// awa#435: a retry write that does not check the budget reschedules a row whatever its attempts;
/// the AMBIGUOUS write still exhausts it, and the relay's choice of write agrees with the core.
#[test]
fn a_retry_write_that_does_not_check_the_budget_never_exhausts() {
    let retry = WriteKind::Retry { code: FailureCode::Unavailable };
    let checked = Variant::Reference.policy();
    let unchecked = Policy { retry_checks_budget: false, ..checked };
    assert!(checked.checks_budget(retry) && checked.checks_budget(TIMEOUT));
    assert!(!unchecked.checks_budget(retry) && unchecked.checks_budget(TIMEOUT));
    assert_eq!(checked.failure_write(retry, MAX, MAX), WriteKind::Exhausted { code: FailureCode::Unavailable });
    assert_eq!(unchecked.failure_write(retry, MAX, MAX), retry, "the relay sends the retry write itself");
    assert_eq!(unchecked.failure_write(TIMEOUT, MAX, MAX), WriteKind::Exhausted { code: FailureCode::Timeout });
    for (policy, kind, status) in [
        (unchecked, retry, Status::Pending),
        (unchecked, TIMEOUT, Status::Exhausted),
        (checked, retry, Status::Exhausted),
    ] {
        let mut outbox = table(1);
        let mut lease = outbox.claim(&policy, &claim(0, 1, 0)).unwrap()[0];
        for now in [100_000, 200_000] {
            outbox.write(&policy, &write(lease, retry, now)).unwrap();
            lease = outbox.claim(&policy, &claim(0, 1, now + 50_000)).unwrap()[0];
        }
        assert_eq!(lease.attempts, MAX);
        assert_eq!(
            outbox.write(&policy, &write(lease, kind, 300_000)),
            Ok(WriteResult::Applied { status }),
            "{kind:?}"
        );
        let row = outbox.row(MessageId(0)).unwrap();
        if status == Status::Pending {
            assert!(row.next_attempt_at > Some(Instant(300_000)), "a rescheduled row waits for its retry time");
        }
    }
}

/// `relay.shared_owner`: every relay of such a design writes the first one's owner id; relays
/// of other designs in the fleet keep their own.
#[test]
fn relays_of_a_shared_owner_design_write_one_owner_id() {
    use outbox_check::world::{Faults, WorldConfig};
    let shared = outbox_check::design::from_text(
        "name = \"pool\"\nbased_on = \"reference\"\n[relay]\nshared_owner = true\n",
        "pool.toml",
    )
    .unwrap();
    assert!(shared.policy().relay.shared_owner);
    let reference = Design::Variant(Variant::Reference);
    let config = WorldConfig::fleet(&[reference, shared, reference, shared, shared], 1, 1, 3, Faults::all());
    let owners: Vec<u16> = config.relays.iter().map(|r| r.owner.0).collect();
    assert_eq!(owners, [0, 1, 2, 1, 1]);
    let small = WorldConfig::small(shared, 3, 1);
    assert!(small.relays.iter().all(|r| r.owner == small.relays[0].owner));
    let own = WorldConfig::small(reference, 3, 1);
    assert_eq!(own.relays.iter().map(|r| r.owner.0).collect::<Vec<_>>(), [0, 1, 2]);
}

/// The design file's per-path keys: the retry write's budget check as given, and a failure fence
/// equal to the completion's is no fence of its own.
#[test]
fn per_path_keys_say_what_they_set() {
    // Each file its own name: one name may not stand for two designs.
    let n = std::cell::Cell::new(0);
    let parse = |keys: &str| {
        n.set(n.get() + 1);
        let name = format!("per-path-{}", n.get());
        outbox_check::design::from_text(
            &format!("name = \"{name}\"\nbased_on = \"reference\"\n{keys}"),
            &format!("{name}.toml"),
        )
        .map(|d| d.policy())
    };
    let p = parse("[retry]\nretry_write_checks_budget = false\n").unwrap();
    assert!(!p.retry_checks_budget);
    assert!(parse("[retry]\nretry_write_checks_budget = true\n").unwrap().retry_checks_budget);
    let p = parse("[write]\nfence = \"status-token\"\nfailure_fence = \"status-token\"\n").unwrap();
    assert_eq!(p.failure_fence, None);
    let p = parse("[write]\nfailure_fence = \"status-owner\"\n").unwrap();
    assert_eq!((p.write_fence, p.failure_fence), (WriteFence::StatusOwnerToken, Some(WriteFence::StatusOwner)));
    let reference = Variant::Reference.policy();
    assert!(reference.retry_checks_budget && reference.failure_fence.is_none() && !reference.relay.shared_owner);
}

/// The legend printed under every report: each property's id and legend, safety and liveness
/// joined by what the caller asks.
#[test]
fn the_legend_names_every_property_once_and_joins_safety_and_liveness_as_asked() {
    let legend = Property::legend(" | ");
    assert!(legend.starts_with(&format!("S1 {}, S2 ", Property::S1.entry().legend)), "{legend}");
    assert_eq!(legend.matches(" | ").count(), 1, "{legend}");
    let (safety, liveness) = legend.split_once(" | ").unwrap();
    assert_eq!(safety.split(", ").count(), Property::SAFETY.len(), "{safety}");
    assert!(safety.ends_with(&format!("S11 {}", Property::S11.entry().legend)), "{safety}");
    assert_eq!(liveness.split(", ").next(), Some(format!("L1 {}", Property::L1.entry().legend).as_str()));
}

/// A situation's id is the first word of its name (`R-S1`), unique; what it exercises is a
/// safety property's id, or `ordering`; and the situations reading a ghost field are exactly
/// those whose entry reads it.
#[test]
fn a_situation_has_its_id_what_it_exercises_and_the_ghosts_it_reads() {
    use outbox_check::core::property::SITUATIONS;
    assert_eq!(Situation::StaleRefused.id(), "R-S1");
    assert_eq!(Situation::StaleRefused.exercises_id(), "S1");
    assert_eq!(Situation::OrderOvertaken.exercises_id(), "ordering");
    assert_eq!(Situation::FailedForHolder.id(), "R-S11");
    let mut ids: Vec<&str> = Situation::ALL.iter().map(|s| s.id()).collect();
    assert!(ids.iter().all(|id| id.starts_with("R-") && id.len() > 3), "{ids:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), Situation::ALL.len());
    assert_eq!(Situation::reading(Ghosts::NONE), 0);
    for ghost in [Ghosts::PUBLICATIONS, Ghosts::STORED, Ghosts::PUBLISHED_AT, Ghosts::FAILURE_CODE] {
        let mut want = 0u16;
        for entry in &SITUATIONS {
            if entry.reads.overlaps(ghost) {
                want |= entry.situation.bit();
            }
        }
        assert_eq!(Situation::reading(ghost), want);
    }
    let stored = Situation::reading(Ghosts::STORED);
    assert_ne!(stored, 0, "some situation reads whether the broker stored a message");
    assert_eq!(
        Situation::reading(Ghosts::STORED.union(Ghosts::FAILURE_CODE)),
        stored | Situation::reading(Ghosts::FAILURE_CODE)
    );
}

/// `write.failure_deletes` (Laravel's failed_jobs, pgmq's archive): a write that records a row
/// FAILED or EXHAUSTED takes it out of the table — no later write or claim matches it — while a
/// retry leaves it; an operator's requeue puts it back.
#[test]
fn a_failure_that_deletes_leaves_no_row_to_match_and_a_requeue_brings_it_back() {
    let p = Policy { failure_deletes: true, ..Variant::Reference.policy() };
    let mut outbox = table(2);
    let leases = outbox.claim(&p, &claim(0, 2, 0)).unwrap();
    let failed = WriteKind::Failed { code: FailureCode::Rejected };
    assert_eq!(outbox.write(&p, &write(leases[0], failed, 1)), Ok(WriteResult::Applied { status: Status::Failed }));
    assert!(outbox.row(MessageId(0)).unwrap().deleted);
    assert_eq!(
        outbox.write(&p, &write(leases[0], WriteKind::Published, 2)),
        Ok(WriteResult::Stale { reason: StaleReason::Deleted })
    );
    let retry = WriteKind::Retry { code: FailureCode::Unavailable };
    assert_eq!(outbox.write(&p, &write(leases[1], retry, 1)), Ok(WriteResult::Applied { status: Status::Pending }));
    assert!(!outbox.row(MessageId(1)).unwrap().deleted, "a retry keeps the row");
    assert!(outbox.claim(&p, &claim(0, 2, 100_000)).unwrap().iter().all(|l| l.message_id != MessageId(0)));
    assert_eq!(outbox.requeue(&p, MessageId(0)), Ok(RequeueResult::Applied));
    assert!(!outbox.row(MessageId(0)).unwrap().deleted, "a requeue puts the row back");
    let kept = Variant::Reference.policy();
    let mut outbox = table(1);
    let lease = outbox.claim(&kept, &claim(0, 1, 0)).unwrap()[0];
    outbox.write(&kept, &write(lease, failed, 1)).unwrap();
    assert!(!outbox.row(MessageId(0)).unwrap().deleted, "without the switch a failed row stays");
}

/// Rows are hashed as packed words (the model checker hashes every state): rows that differ in
/// any one field — an option's presence as well as its value — hash apart, or the search would
/// take two states for one.
#[test]
fn rows_that_differ_in_any_field_hash_apart() {
    use std::hash::{Hash, Hasher};
    fn hash(r: &Row) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        r.hash(&mut h);
        h.finish()
    }
    let base = Row {
        message_id: MessageId(3),
        tenant_id: TenantId(1),
        aggregate_id: AggregateId(4),
        aggregate_version: 2,
        status: Status::InFlight,
        attempts: 2,
        lease_owner: None,
        lease_token: LeaseToken(5),
        lease_expires_at: None,
        next_attempt_at: None,
        last_failure_code: None,
        created_at: Instant(6),
        published_at: None,
        deleted: false,
    };
    let variants: Vec<(&str, Row)> = vec![
        ("message", Row { message_id: MessageId(4), ..base }),
        ("aggregate", Row { aggregate_id: AggregateId(5), ..base }),
        ("aggregate version", Row { aggregate_version: 3, ..base }),
        ("tenant", Row { tenant_id: TenantId(2), ..base }),
        ("status", Row { status: Status::Failed, ..base }),
        ("owner 0 against none", Row { lease_owner: Some(RelayId(0)), ..base }),
        ("owner 1", Row { lease_owner: Some(RelayId(1)), ..base }),
        ("expiry 0 against none", Row { lease_expires_at: Some(Instant(0)), ..base }),
        ("retry time 0 against none", Row { next_attempt_at: Some(Instant(0)), ..base }),
        ("published at 0 against none", Row { published_at: Some(Instant(0)), ..base }),
        ("deleted", Row { deleted: true, ..base }),
        ("the first failure code against none", Row { last_failure_code: Some(FailureCode::Timeout), ..base }),
        ("the second failure code against none", Row { last_failure_code: Some(FailureCode::Unavailable), ..base }),
        ("attempts", Row { attempts: 3, ..base }),
        ("token", Row { lease_token: LeaseToken(6), ..base }),
        ("created", Row { created_at: Instant(7), ..base }),
    ];
    for (field, other) in &variants {
        assert_ne!(hash(&base), hash(other), "rows differing only in {field} hash alike");
    }
    for (i, (a, x)) in variants.iter().enumerate() {
        for (b, y) in &variants[i + 1..] {
            assert_ne!(hash(x), hash(y), "a row changed in {a} hashes as one changed in {b}");
        }
    }
}

/// The failure codes' words, which SQL stores and histories carry, and their parsing back.
#[test]
fn failure_codes_have_their_words_and_parse_back() {
    assert_eq!(FailureCode::ALL.map(FailureCode::as_str), ["timeout", "unavailable", "rejected", "budget_spent"]);
    for code in FailureCode::ALL {
        assert_eq!(FailureCode::parse(code.as_str()), Some(code));
    }
    assert_eq!(FailureCode::parse("lost"), None);
    assert_eq!(FailureCode::parse(""), None);
}

/// `retry.budget_in_statement = false` (Oban: `error_job` sets `retryable` by id, the executor
/// discards at `attempt >= max_attempts` from its copy): the failure statement sets what it is
/// sent, whatever the row's attempts; the relay still picks the exhaustion from its own copy.
#[test]
fn a_failure_statement_without_the_budget_does_what_the_relay_decided() {
    let retry = WriteKind::Retry { code: FailureCode::Unavailable };
    let by_id = Policy { write_fence: WriteFence::MessageIdOnly, ..Variant::Reference.policy() };
    let copy = Policy { budget_in_write: false, ..by_id };
    assert_eq!(copy.failure_write(retry, MAX, MAX), WriteKind::Exhausted { code: FailureCode::Unavailable });
    assert_eq!(copy.failure_write(retry, 1, MAX), retry);
    for (policy, status) in [(copy, Status::Pending), (by_id, Status::Exhausted)] {
        let mut outbox = table(1);
        let stale = outbox.claim(&policy, &claim(0, 1, 0)).unwrap()[0];
        for now in [100_000, 200_000] {
            let lease = outbox.claim(&policy, &claim(1, 1, now)).unwrap()[0];
            if now == 100_000 {
                outbox.write(&policy, &write(lease, retry, now + 1)).unwrap();
            }
        }
        assert_eq!(outbox.row(MessageId(0)).unwrap().attempts, MAX);
        // The first worker's copy says attempt 1: it sends a retry, and only a statement that
        // checks the row's attempts exhausts the row.
        assert_eq!(policy.failure_write(retry, stale.attempts, MAX), retry);
        assert_eq!(outbox.write(&policy, &write(stale, retry, 300_000)), Ok(WriteResult::Applied { status }));
    }
}

/// Leases are hashed as packed words too (relay cycles hold them): leases that differ in any one
/// field hash apart.
#[test]
fn leases_that_differ_in_any_field_hash_apart() {
    use std::hash::{Hash, Hasher};
    fn hash(l: &Lease) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        l.hash(&mut h);
        h.finish()
    }
    let base = Lease {
        message_id: MessageId(3),
        tenant_id: TenantId(1),
        owner: RelayId(2),
        token: LeaseToken(5),
        attempts: 2,
        claim_seq: 4,
    };
    let variants = [
        ("message", Lease { message_id: MessageId(4), ..base }),
        ("tenant", Lease { tenant_id: TenantId(2), ..base }),
        ("tenant 0", Lease { tenant_id: TenantId(0), ..base }),
        ("owner", Lease { owner: RelayId(3), ..base }),
        ("owner 0", Lease { owner: RelayId(0), ..base }),
        ("token", Lease { token: LeaseToken(6), ..base }),
        ("attempts", Lease { attempts: 3, ..base }),
        ("claim", Lease { claim_seq: 5, ..base }),
    ];
    for (i, (a, x)) in variants.iter().enumerate() {
        assert_ne!(hash(&base), hash(x), "leases differing only in {a} hash alike");
        for (b, y) in &variants[i + 1..] {
            assert_ne!(hash(x), hash(y), "a lease changed in {a} hashes as one changed in {b}");
        }
    }
}

/// The words reports print for keys and times.
#[test]
fn keys_instants_and_durations_print_as_reports_show_them() {
    assert_eq!(IdempotencyKey::Message { message_id: MessageId(3) }.to_string(), MessageId(3).to_string());
    assert_eq!(MessageId(3).to_string(), "m3");
    assert_eq!(IdempotencyKey::Other { value: 42 }.to_string(), "0x2a");
    assert_eq!(Instant(7).to_string(), "t=7");
    assert_eq!(Duration(250).to_string(), "250ms");
}

/// `claim.sets = "token-only"` (underway's `current_attempt`): a claim gives the row a fresh
/// token and records no owner, and a write fenced on the token tells two claims apart.
#[test]
fn a_token_only_claim_bumps_the_token_and_records_no_owner() {
    let p = Policy {
        claim_fence: ClaimFence::TokenOnly,
        write_fence: WriteFence::StatusToken,
        ..Variant::Reference.policy()
    };
    let mut outbox = table(1);
    let first = outbox.claim(&p, &claim(0, 1, 0)).unwrap()[0];
    let row = outbox.row(MessageId(0)).unwrap();
    assert_eq!((row.lease_owner, row.lease_token, first.token), (None, LeaseToken(1), LeaseToken(1)));
    let second = outbox.claim(&p, &claim(1, 1, 10)).unwrap()[0];
    assert_eq!(second.token, LeaseToken(2));
    assert_eq!(outbox.row(MessageId(0)).unwrap().lease_owner, None);
    assert_eq!(
        outbox.write(&p, &write(first, WriteKind::Published, 11)),
        Ok(WriteResult::Stale { reason: StaleReason::WrongToken })
    );
    assert_eq!(
        outbox.write(&p, &write(second, WriteKind::Published, 11)),
        Ok(WriteResult::Applied { status: Status::Published })
    );
}

/// A relay that fails claims past the budget (`relay.fails_claims_past_budget`, Laravel) sends
/// its write only for a lease whose attempts exceed the budget, EXHAUSTED or FAILED as the design
/// has statuses; any other relay sends none. A policy read without `budget_in_write` (files
/// written before the key) keeps the budget in the write, and `gated_id` gates the properties
/// `verify` fails a design for, and an id it does not know.
#[test]
fn a_claim_past_the_budget_is_failed_only_where_the_design_says_and_only_past_it() {
    let base = Variant::Reference.policy();
    assert_eq!(base.claim_past_budget_write(4, 3), None);
    let mut laravel = base;
    laravel.relay.fails_claims_past_budget = true;
    let spent = Some(WriteKind::Exhausted { code: FailureCode::BudgetSpent });
    assert_eq!(laravel.claim_past_budget_write(4, 3), spent);
    assert_eq!(laravel.claim_past_budget_write(3, 3), None);
    assert_eq!(laravel.claim_past_budget_write(2, 3), None);
    let no_exhausted = Policy { exhausted_status: false, ..laravel };
    assert_eq!(no_exhausted.claim_past_budget_write(5, 3), Some(WriteKind::Failed { code: FailureCode::BudgetSpent }));

    let mut value = serde_json::to_value(Policy { budget_in_write: true, ..base }).unwrap();
    value.as_object_mut().unwrap().remove("budget_in_write").expect("the field is serialised");
    let read: Policy = serde_json::from_value(value).unwrap();
    assert!(read.budget_in_write);

    assert!(Property::gated_id("S1") && Property::gated_id("s4") && Property::gated_id("X9"));
    assert!(!Property::gated_id("S11"));
}

/// A session's lease (`claim.lease = "session"`, good_job's advisory lock): no time ends it, the
/// end of the holder's session does, and only the leases that session holds.
#[test]
fn a_session_lease_outlives_any_time_and_ends_with_its_session_alone() {
    let session = Policy { lease: LeaseKind::Session, ..Variant::Reference.policy() };
    let mut outbox = table(3);
    let first = outbox.claim(&session, &claim(0, 2, 0)).unwrap();
    assert_eq!(first.len(), 2);
    let other = outbox.claim(&session, &claim(1, 1, 0)).unwrap()[0];
    assert_eq!(outbox.row(MessageId(0)).unwrap().lease_expires_at, Some(Instant::NEVER));
    let late = u64::MAX - 1;
    assert!(outbox.claim(&session, &claim(2, 3, late)).unwrap().is_empty(), "no time ends a session's lease");
    assert_eq!(outbox.rescuable(Instant(late)), None);
    assert!(!Outbox::is_reapable(outbox.row(MessageId(0)).unwrap(), Instant(late), 1));
    // A write ends its lease as ever; the session then holds one row fewer.
    outbox.write(&session, &write(first[1], WriteKind::Published, 3)).unwrap();
    assert_eq!(outbox.end_session(RelayId(0), Instant(7)), [MessageId(0)], "r0's session held m0 alone by then");
    let row = *outbox.row(MessageId(0)).unwrap();
    assert_eq!(
        (row.status, row.lease_expires_at, row.lease_owner),
        (Status::InFlight, Some(Instant(7)), Some(RelayId(0)))
    );
    assert_eq!(
        outbox.row(MessageId(other.message_id.0)).unwrap().lease_expires_at,
        Some(Instant::NEVER),
        "r1's lock stays"
    );
    assert_eq!(outbox.end_session(RelayId(0), Instant(8)), [], "an ended lease does not end again");
    assert_eq!(outbox.rescuable(Instant(7)).map(|r| r.message_id), Some(MessageId(0)));
    let again = outbox.claim(&session, &claim(2, 3, 7)).unwrap();
    assert_eq!(again.iter().map(|l| (l.message_id, l.attempts)).collect::<Vec<_>>(), [(MessageId(0), 2)]);
    // The expiry lease is untouched by a session's end.
    let mut expiry = table(1);
    let p = Variant::Reference.policy();
    expiry.claim(&p, &claim(0, 1, 0)).unwrap();
    assert_eq!(expiry.end_session(RelayId(0), Instant(1)), []);
    assert_eq!(expiry.row(MessageId(0)).unwrap().lease_expires_at, Some(Instant(10)));
    assert_eq!(Instant::NEVER.to_string(), "its session's end");
    assert_eq!(Instant(7).to_string(), "t=7");
}

#[test]
fn a_session_lease_needs_an_owner_and_one_session_per_owner() {
    let resolve = |keys: &str| {
        let text = format!("name = \"s\"\nbased_on = \"reference\"\n{keys}");
        design_file::DesignFile::parse(&text).unwrap().resolve(&|n| Design::parse(n).map(Design::policy))
    };
    assert_eq!(resolve("[claim]\nlease = \"session\"\n").unwrap().lease, LeaseKind::Session);
    assert_eq!(resolve("[claim]\nlease = \"session\"\nsets = \"owner-only\"\n").unwrap().lease, LeaseKind::Session);
    assert_eq!(resolve("").unwrap().lease, LeaseKind::Expiry);
    for (keys, words) in [
        ("[claim]\nlease = \"session\"\nsets = \"unfenced\"\n", "claim.sets"),
        ("[claim]\nlease = \"session\"\nsets = \"token-only\"\n", "claim.sets"),
        ("[claim]\nlease = \"session\"\n[relay]\nshared_owner = true\n", "relay.shared_owner"),
        ("[claim]\nlease = \"session\"\n[retry]\nin_lease_column = true\n", "retry.in_lease_column"),
    ] {
        let e = resolve(keys).unwrap_err();
        assert!(e.starts_with("claim.lease = \"session\"") && e.contains(words), "{keys}: {e}");
    }
    let e = design_file::DesignFile::parse("name = \"s\"\n[claim]\nlease = \"row\"\n").unwrap_err();
    assert!(e.message.contains("claim.lease") && e.message.contains("session"), "{e}");
    let p = Policy { lease: LeaseKind::Session, ..Variant::Reference.policy() };
    let file = design_file::DesignFile::complete("s", "d", &p);
    assert!(file.to_toml().contains("lease = \"session\""));
    assert_eq!(file.apply(Policy::unset()).unwrap(), p);
    assert!(p.switches().contains(&("lease", "session".to_string())));
    let mut value = serde_json::to_value(Variant::Reference.policy()).unwrap();
    value.as_object_mut().unwrap().remove("lease").expect("the field is serialised");
    assert_eq!(serde_json::from_value::<Policy>(value).unwrap().lease, LeaseKind::Expiry);
}

/// S7 at a write where true time is known: the retry time must be later than the write's own
/// `now` and than true time. A relay whose clock runs behind sets one already past (the retry is
/// due at once: NServiceBus.SqlServer #463); the same write judged by its own `now` alone, as a
/// recorded history is, passes; a clock ahead of true time passes both ways.
#[test]
fn a_retry_time_already_past_in_true_time_breaks_s7_at_the_write() {
    let reference = Design::Variant(Variant::Reference).policy();
    let retry = WriteKind::Retry { code: FailureCode::Timeout };
    let run = |write_now: u64, true_now: u64, judged_by_true_time: bool| {
        let mut outbox = table(1);
        let mut auditor = Auditor::new(MAX);
        let lease = auditor.claim(&mut outbox, &reference, &claim(0, 1, 100), Instant(100)).unwrap()[0];
        let req = write(lease, retry, write_now);
        let result = if judged_by_true_time {
            auditor.write_at(&mut outbox, &reference, &req, Instant(true_now))
        } else {
            auditor.write(&mut outbox, &reference, &req)
        };
        assert_eq!(result.unwrap(), WriteResult::Applied { status: Status::Pending });
        (auditor.take_violations(), outbox.row(MessageId(0)).unwrap().retry_at())
    };
    // A backoff of 1 s from a clock 5 s behind true time: the retry time is 4 s in the past.
    let (v2, at) = run(100_000, 105_000, true);
    assert_eq!(at, Some(Instant(101_000)));
    assert!(
        matches!(
            v2.as_slice(),
            [Violation {
                property: Property::S7,
                breach: Breach::RetryNotLater { now: Instant(105_000), true_time: true, .. }
            }]
        ),
        "{v2:?}"
    );
    let words = v2[0].breach.words(&ModelNames);
    assert!(words.ends_with("not later than true time t=105000"), "{words}");
    // The same write judged by its own clock alone, and a clock ahead of true time: nothing.
    assert!(run(100_000, 105_000, false).0.is_empty());
    assert!(run(105_000, 100_000, true).0.is_empty());
    // True time at the retry time itself: not later.
    assert_eq!(run(100_000, 101_000, true).0.len(), 1);
    assert!(run(100_000, 100_999, true).0.is_empty());
}

/// `retry.timer = "per-process"` (CAP#1797): the row keeps no retry time, a row attempted before
/// is taken only by a claim whose relay's own timer is due, and S7 judges each retry against the
/// backoff's delay after the last one, whichever relay made it. The relay restarts its timer
/// after a claim that took such a row (`relay::retry_timer_after`).
#[test]
fn a_retry_timer_per_process_spaces_only_its_own_relays_retries() {
    let text = "name = \"timers\"\nbased_on = \"reference\"\n[retry]\nclock = false\ntimer = \"per-process\"\nbackoff = \"fixed\"\ndelay_ms = 50\n";
    let policy = outbox_check::design::from_text(text, "timers.toml").unwrap().policy();
    let retry = WriteKind::Retry { code: FailureCode::Timeout };
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    // The first attempt needs no timer; its retry write sets no retry time and breaks nothing.
    let not_due = |owner: u16, now: u64| ClaimRequest { retry_due: false, ..claim(owner, 1, now) };
    let first = auditor.claim(&mut outbox, &policy, &not_due(0, 100), Instant(100)).unwrap()[0];
    auditor.write(&mut outbox, &policy, &write(first, retry, 100)).unwrap();
    assert_eq!(outbox.row(MessageId(0)).unwrap().retry_at(), None);
    assert!(auditor.take_violations().is_empty());
    // A relay whose timer is not due takes nothing; one whose timer is due retries at once.
    assert!(auditor.claim(&mut outbox, &policy, &not_due(0, 101), Instant(101)).unwrap().is_empty());
    let second = auditor.claim(&mut outbox, &policy, &claim(0, 1, 101), Instant(101)).unwrap()[0];
    assert!(auditor.take_violations().is_empty(), "a first retry may come at any time");
    auditor.write(&mut outbox, &policy, &write(second, retry, 102)).unwrap();
    // That relay's timer now fires 50 ms after its claim; another relay's timer is its own.
    let config = outbox_check::relay::RelayConfig {
        owner: RelayId(0),
        tenant_id: TenantId(0),
        batch: 1,
        lease: Duration(30),
        max_attempts: MAX,
        policy,
    };
    let clocks = outbox_check::relay::Clocks::same(Instant(101));
    assert_eq!(outbox_check::relay::retry_timer_after(&config, &[second], clocks, None), Some(Instant(151)));
    assert_eq!(outbox_check::relay::retry_timer_after(&config, &[first], clocks, Some(Instant(7))), Some(Instant(7)));
    // The other relay retries within the delay: S7, in the design's words.
    auditor.claim(&mut outbox, &policy, &claim(1, 1, 120), Instant(120)).unwrap();
    let v = auditor.take_violations();
    assert!(
        matches!(
            v.as_slice(),
            [Violation {
                property: Property::S7,
                breach: Breach::RetriedTooSoon { now: Instant(120), at: Instant(151), .. }
            }]
        ),
        "{v:?}"
    );
    assert!(v[0].breach.words(&ModelNames).contains("within the retry delay of its last retry"), "{v:?}");
    // Another relay's retry at the promised time itself is on time.
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let first = auditor.claim(&mut outbox, &policy, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    auditor.write(&mut outbox, &policy, &write(first, retry, 100)).unwrap();
    let second = auditor.claim(&mut outbox, &policy, &claim(0, 1, 101), Instant(101)).unwrap()[0];
    auditor.write(&mut outbox, &policy, &write(second, retry, 102)).unwrap();
    let third = auditor.claim(&mut outbox, &policy, &claim(1, 1, 151), Instant(151)).unwrap();
    assert_eq!(third.len(), 1);
    assert!(auditor.take_violations().is_empty(), "a retry at its promised time");
    // The same design with its retry time in the row refuses a retry time and a timer both.
    let both = text.replace("clock = false", "clock = true");
    let refused = outbox_check::design::from_text(&both, "both.toml").unwrap_err().to_string();
    assert!(refused.contains("retry.timer = \"per-process\" with a retry time in the row"), "{refused}");
}

/// A claim request written without `retry_due` (a file or message from before the field) reads
/// as due: no timer of the relay's holds it back.
#[test]
fn a_claim_request_without_retry_due_reads_as_due() {
    let text = r#"{"tenant_id":0,"owner":1,"batch":2,"lease":10,"now":5,"max_attempts":3}"#;
    let req: ClaimRequest = serde_json::from_str(text).unwrap();
    assert!(req.retry_due);
}

/// `write.releases_lease_by_owner` (aegra's `_release_lease`): the release clears the owner and
/// expiry where the owner is the releaser's and keeps the status; a release by a lease whose claim
/// a later one under the same owner id superseded strips the successor's lease, which S1 names.
#[test]
fn a_release_by_owner_clears_the_lease_and_strips_a_successors_under_the_same_name() {
    let text = "name = \"rel\"\nbased_on = \"reference\"\n[claim]\nsets = \"owner-only\"\n[write]\nreleases_lease_by_owner = true\n";
    let policy = outbox_check::design::from_text(text, "rel.toml").unwrap().policy();
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let first = auditor.claim(&mut outbox, &policy, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    // Another relay's release matches nothing.
    let other = Lease { owner: RelayId(1), ..first };
    assert!(!auditor.release_by_owner(&mut outbox, &other).unwrap());
    // The lease expires and the same owner id claims again: a second attempt, a later claim.
    // (An owner-only claim keeps the token: S2, the design's own finding, and nothing else.)
    auditor.claim(&mut outbox, &policy, &claim(0, 1, 200), Instant(200)).unwrap();
    assert!(auditor.take_violations().iter().all(|v| v.property == Property::S2));
    // The first attempt's release strips the second's lease; the row stays IN_FLIGHT.
    assert!(auditor.release_by_owner(&mut outbox, &first).unwrap());
    let row = *outbox.row(MessageId(0)).unwrap();
    assert_eq!((row.status, row.lease_owner, row.lease_expires_at), (Status::InFlight, None, None));
    let v = auditor.take_violations();
    assert!(matches!(v.as_slice(), [Violation { property: Property::S1, breach: Breach::Superseded { .. } }]), "{v:?}");
    assert!(v[0].breach.words(&ModelNames).starts_with("lease release by r0"), "{v:?}");
    // The latest claim's own release is no breach.
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let only = auditor.claim(&mut outbox, &policy, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    auditor.take_violations();
    assert!(auditor.release_by_owner(&mut outbox, &only).unwrap());
    assert!(auditor.take_violations().is_empty());
    // A design whose claim records no owner cannot release by it.
    let unfenced = text.replace("owner-only", "unfenced");
    let refused = outbox_check::design::from_text(&unfenced, "u.toml").unwrap_err();
    assert!(refused.contains("write.releases_lease_by_owner = true needs claim.sets"), "{refused}");
}

/// `claim.renewal` (a heartbeat): the renewal sets the expiry where the row is IN_FLIGHT and its
/// fence matches, and changes nothing else; by owner, a superseded attempt's renewal extends its
/// successor's lease under the same owner id, which S1 names; by token it matches nothing then.
#[test]
fn a_renewal_extends_only_what_its_fence_matches_and_a_stale_one_is_s1() {
    use outbox_check::core::policy::Renewal;
    let design = |renewal: &str, sets: &str| {
        let name = format!("hb-{renewal}-{sets}");
        let text = format!(
            "name = \"{name}\"\nbased_on = \"reference\"\n[claim]\nsets = \"{sets}\"\nrenewal = \"{renewal}\"\n"
        );
        outbox_check::design::from_text(&text, &format!("{name}.toml")).map(|d| d.policy())
    };
    let by_owner = design("by-owner", "owner-only").unwrap();
    assert_eq!(by_owner.renewal, Renewal::ByOwner);
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let first = auditor.claim(&mut outbox, &by_owner, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    // (An owner-only claim keeps the token: S2, the design's own finding.)
    assert!(auditor.take_violations().iter().all(|v| v.property == Property::S2));
    let before = *outbox.row(MessageId(0)).unwrap();
    // Its own lease: the expiry moves, nothing else, and no breach.
    assert!(auditor.renew(&mut outbox, Renewal::ByOwner, &first, Instant(150)).unwrap());
    let after = *outbox.row(MessageId(0)).unwrap();
    assert_eq!(Row { lease_expires_at: before.lease_expires_at, ..after }, before);
    assert_eq!(after.lease_expires_at, Some(Instant(150)));
    assert!(auditor.take_violations().is_empty());
    // The same expiry again changes nothing; another owner's renewal matches nothing.
    assert!(!auditor.renew(&mut outbox, Renewal::ByOwner, &first, Instant(150)).unwrap());
    let other = Lease { owner: RelayId(1), ..first };
    assert!(!auditor.renew(&mut outbox, Renewal::ByOwner, &other, Instant(170)).unwrap());
    assert!(!auditor.renew(&mut outbox, Renewal::None, &first, Instant(170)).unwrap());
    // Expired, claimed again under the same owner id: the first attempt's heartbeat extends the
    // second's lease (S1).
    auditor.claim(&mut outbox, &by_owner, &claim(0, 1, 200), Instant(200)).unwrap();
    auditor.take_violations();
    assert!(auditor.renew(&mut outbox, Renewal::ByOwner, &first, Instant(260)).unwrap());
    let v = auditor.take_violations();
    assert!(matches!(v.as_slice(), [Violation { property: Property::S1, breach: Breach::Superseded { .. } }]), "{v:?}");
    assert!(v[0].breach.words(&ModelNames).starts_with("heartbeat renewal by r0"), "{v:?}");
    // By token: the first attempt's token is not the second's.
    let by_token = design("by-token", "owner-and-token").unwrap();
    let mut outbox = table(1);
    let mut auditor = Auditor::new(MAX);
    let first = auditor.claim(&mut outbox, &by_token, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    assert!(auditor.renew(&mut outbox, Renewal::ByToken, &first, Instant(150)).unwrap());
    auditor.claim(&mut outbox, &by_token, &claim(0, 1, 200), Instant(200)).unwrap();
    assert!(!auditor.renew(&mut outbox, Renewal::ByToken, &first, Instant(260)).unwrap());
    // A terminal row is renewed by nobody, its own last holder included.
    let second = Lease { token: outbox.row(MessageId(0)).unwrap().lease_token, ..first };
    let write = WriteRequest { lease: second, kind: WriteKind::Published, now: Instant(210), max_attempts: MAX };
    assert!(matches!(outbox.write(&by_token, &write).unwrap(), WriteResult::Applied { .. }));
    assert!(!auditor.renew(&mut outbox, Renewal::ByToken, &second, Instant(260)).unwrap());
    assert!(auditor.take_violations().iter().all(|v| v.property != Property::S1));
    // What the fence needs, the claim must record; and only an expiry in the row is renewed.
    assert!(design("by-owner", "token-only").unwrap_err().contains("claim.renewal = \"by-owner\" needs claim.sets"));
    assert!(design("by-token", "owner-only").unwrap_err().contains("claim.renewal = \"by-token\" needs claim.sets"));
    let session =
        "name = \"hb-session\"\nbased_on = \"reference\"\n[claim]\nlease = \"session\"\nrenewal = \"by-token\"\n";
    let e = outbox_check::design::from_text(session, "hb-session.toml").unwrap_err();
    assert!(e.contains("claim.renewal renews an expiry in the row"), "{e}");
}

/// `maintenance.scheduler` (River's `JobSchedule`, Oban's `stage_jobs`): a row given a retry time
/// is claimable only once the scheduler has run after that time; the scheduler moves every such
/// row and nothing else.
#[test]
fn a_scheduler_makes_due_retries_claimable_and_the_claim_waits_for_it() {
    let text = "name = \"sched\"\nbased_on = \"reference\"\n[maintenance]\nscheduler = true\n";
    let policy = outbox_check::design::from_text(text, "sched.toml").unwrap().policy();
    assert!(policy.scheduler);
    let mut outbox = table(3);
    let mut auditor = Auditor::new(MAX);
    // m0 fails and waits until its retry time; m1 is claimed and stays IN_FLIGHT; m2 is fresh.
    let m0 = auditor.claim(&mut outbox, &policy, &claim(0, 1, 100), Instant(100)).unwrap()[0];
    let retry = WriteRequest {
        lease: m0,
        kind: WriteKind::Retry { code: FailureCode::Unavailable },
        now: Instant(110),
        max_attempts: MAX,
    };
    assert!(matches!(auditor.write(&mut outbox, &policy, &retry).unwrap(), WriteResult::Applied { .. }));
    let at = outbox.row(MessageId(0)).unwrap().next_attempt_at.expect("a retry time");
    auditor.claim(&mut outbox, &policy, &claim(0, 1, 100), Instant(100)).unwrap();
    // Past the retry time, the claim still does not take m0: the scheduler has not run.
    let later = Instant(at.0 + 1_000);
    let row = *outbox.row(MessageId(0)).unwrap();
    assert!(!Outbox::is_claimable(&policy, &row, TenantId(0), later, MAX));
    let without = Policy { scheduler: false, ..policy };
    assert!(Outbox::is_claimable(&without, &row, TenantId(0), later, MAX), "the retry clock alone would take it");
    // Before the retry time the scheduler has nothing to move; after it, exactly m0.
    assert!(auditor.schedule(&mut outbox, Instant(at.0 - 1), Instant(at.0 - 1)).is_empty());
    let mut ahead = (outbox.clone(), auditor.clone());
    assert_eq!(auditor.schedule(&mut outbox, at, at), vec![MessageId(0)]);
    // On time by the true clock: nothing for a later claim to be early against.
    assert_eq!(auditor.ghost(MessageId(0)).unwrap().retry_promise, None);
    assert!(auditor.take_violations().iter().all(|v| v.property == Property::S7 || v.property == Property::S2));
    let row = *outbox.row(MessageId(0)).unwrap();
    assert_eq!((row.status, row.next_attempt_at), (Status::Pending, None));
    assert!(Outbox::is_claimable(&policy, &row, TenantId(0), at, MAX));
    assert!(outbox.row(MessageId(1)).unwrap().status == Status::InFlight, "an in-flight row is not the scheduler's");
    assert!(auditor.schedule(&mut outbox, later, later).is_empty(), "nothing left to move");
    auditor.claim(&mut outbox, &policy, &claim(0, 1, 100), at).unwrap();
    assert!(auditor.take_violations().iter().all(|v| v.property != Property::S7), "claimed at its time");
    // The claim's order keeps the time m0 became due (River's and Oban's scheduled_at): m2,
    // waiting since its creation, goes first.
    let (outbox, auditor) = &mut ahead;
    let mut order = (outbox.clone(), auditor.clone());
    assert_eq!(order.1.schedule(&mut order.0, at, at), vec![MessageId(0)]);
    assert_eq!(order.0.row(MessageId(0)).unwrap().created_at, at);
    let first = order.1.claim(&mut order.0, &policy, &claim(0, 1, 100), at).unwrap();
    assert_eq!(first.iter().map(|l| l.message_id).collect::<Vec<_>>(), vec![MessageId(2)]);
    // A scheduler whose clock runs ahead of the true one moves m0 early: the claim that follows
    // before the retry time breaks S7, one at or after it does not.
    auditor.take_violations();
    assert_eq!(auditor.schedule(outbox, at, Instant(at.0 - 5)), vec![MessageId(0)]);
    let mut later_claim = (outbox.clone(), auditor.clone());
    auditor.claim(outbox, &policy, &claim(0, 2, 100), Instant(at.0 - 5)).unwrap();
    let v = auditor.take_violations();
    assert!(v.iter().any(|v| matches!(v.breach, Breach::TookBeforeRetry { .. })), "{v:?}");
    let (outbox, auditor) = &mut later_claim;
    auditor.claim(outbox, &policy, &claim(0, 2, 100), at).unwrap();
    assert!(auditor.take_violations().iter().all(|v| v.property != Property::S7));
    // A scheduler needs a retry time in the row.
    let clockless = text
        .replace("[maintenance]", "[retry]\nclock = false\n[maintenance]")
        .replace("\"sched\"", "\"sched-clockless\"");
    let e = outbox_check::design::from_text(&clockless, "sched-clockless.toml").unwrap_err();
    assert!(e.contains("maintenance.scheduler = true makes rows claimable"), "{e}");
}

/// Graphile Worker's resetLockedAt: one statement moves every expired lease — the rescuer's
/// step, row after row, each where the rescuer sends it; `maintenance.after_expiry` waits until
/// the expiry has passed; `maintenance.restamps` makes the rescue's time the row's due time.
#[test]
fn a_sweeping_rescuer_moves_every_expired_lease_as_single_steps_would() {
    let reference = Design::Variant(Variant::Reference).policy();
    let rescuer = Policy { rescue: Some(ReleaseFence::Expired), claim_expired_leases: false, ..reference };
    let mut outbox = table(3);
    // m0 and m1 claimed at 100 (leases to 110); m2 stays pending.
    let held: Vec<Lease> = outbox.claim(&rescuer, &claim(0, 2, 100)).unwrap();
    assert_eq!(held.iter().map(|l| l.message_id).collect::<Vec<_>>(), [MessageId(0), MessageId(1)]);
    // At 110 an inclusive rescuer takes both, one after the other, as two single steps would;
    // a strict one takes neither until 111.
    let mut single = outbox.clone();
    let strict = Policy { rescue_after_expiry: true, ..rescuer };
    assert_eq!(outbox.clone().rescue_all(&strict, Instant(110), MAX), Vec::<MessageId>::new());
    assert!(outbox.rescuable_after(Instant(110), true).is_none());
    assert_eq!(outbox.rescuable_after(Instant(111), true).map(|r| r.message_id), Some(MessageId(0)));
    assert_eq!(outbox.clone().rescue_all(&strict, Instant(111), MAX), [MessageId(0), MessageId(1)]);
    let moved = outbox.rescue_all(&rescuer, Instant(110), MAX);
    assert_eq!(moved, [MessageId(0), MessageId(1)]);
    for _ in 0..2 {
        let row = *single.rescuable(Instant(110)).unwrap();
        let lease = Lease::of_row(&row, 0);
        let req = rescuer.rescue_request(lease, ReleaseFence::Expired, row.attempts, MAX, Instant(110));
        single.release(&req).unwrap();
    }
    assert_eq!(outbox.rows(), single.rows(), "a sweep is the single steps in a row");
    assert_eq!(outbox.row(MessageId(1)).unwrap().status, Status::Pending);
    assert_eq!(outbox.row(MessageId(1)).unwrap().next_attempt_at, None);
    assert_eq!(outbox.rescue_all(&rescuer, Instant(6_000), MAX), Vec::<MessageId>::new(), "nothing left");
    // Restamped: the row is due at the rescue, behind m2, which waited since its enqueue.
    let mut restamped = table(3);
    let stamp = Policy { rescue_restamps: true, ..rescuer };
    restamped.claim(&stamp, &claim(0, 1, 100)).unwrap();
    assert_eq!(restamped.rescue_all(&stamp, Instant(200), MAX), [MessageId(0)]);
    assert_eq!(restamped.row(MessageId(0)).unwrap().next_attempt_at, Some(Instant(200)));
    let next: Vec<MessageId> =
        restamped.claim(&stamp, &claim(1, 3, 200)).unwrap().iter().map(|l| l.message_id).collect();
    assert_eq!(next, [MessageId(1), MessageId(2), MessageId(0)]);
}

/// `claim.ties = "any"`: a queue may take any of the rows due at the same instant, and the
/// model follows its choice — but only among ties, and never more or fewer rows.
#[test]
fn a_claim_follows_the_queues_choice_among_rows_due_together() {
    let reference = Design::Variant(Variant::Reference).policy();
    let any = Policy { claim_ties_any: true, ..reference };
    // m0 … m2 enqueued at 0, 1, 2; m3, m4 at 2 as well.
    let mut outbox = table(3);
    for m in 3..5 {
        let req = EnqueueRequest {
            tenant_id: TenantId(0),
            aggregate_id: AggregateId(m),
            expected_version: 0,
            message_id: MessageId(m),
            now: Instant(2),
        };
        outbox.enqueue(&req).unwrap();
    }
    let ids = |leases: Vec<Lease>| leases.iter().map(|l| l.message_id).collect::<Vec<_>>();
    let take = |policy: &Policy, batch: u32, ids_: &[u32]| {
        let mut copy = outbox.clone();
        let chosen: Vec<MessageId> = ids_.iter().map(|m| MessageId(*m)).collect();
        ids(copy.claim_among_ties(policy, &claim(0, batch, 10), &chosen).unwrap())
    };
    let m = |v: &[u32]| v.iter().map(|m| MessageId(*m)).collect::<Vec<_>>();
    // Batch 3 takes m0, m1 and one of the rows due at 2: m4 is as good as m2.
    assert_eq!(take(&any, 3, &[0, 1, 4]), m(&[0, 1, 4]));
    assert_eq!(take(&any, 3, &[4, 0, 1]), m(&[4, 0, 1]), "in the order the queue returned them");
    // Not among the ties, too few, a row twice: the claim's own pick.
    assert_eq!(take(&any, 3, &[0, 2, 3]), m(&[0, 1, 2]));
    assert_eq!(take(&any, 3, &[0, 1]), m(&[0, 1, 2]));
    assert_eq!(take(&any, 3, &[0, 4, 4]), m(&[0, 1, 2]));
    // By id (the default), the queue's choice is never followed.
    assert_eq!(take(&reference, 3, &[0, 1, 4]), m(&[0, 1, 2]));
}

/// A backoff in the queue's own units (`[time] delays = "absolute"`): each delay divided by the
/// unit and rounded up, never below 1.
#[test]
fn a_backoff_in_other_units_rounds_each_delay_up() {
    let graphile = Backoff {
        growth: Growth::Exponential { factor_milli: 2718 },
        unit: 144_000,
        ..Backoff::between(Duration(2718), Duration(22_026_466))
    };
    let delays: Vec<u64> = [1, 4, 5, 10, 11].iter().map(|a| graphile.delay(*a).0).collect();
    // e s … e⁴ s are within the first 144 s; e⁵ s (148 s) in the second; the cap in the 153rd.
    assert_eq!(delays, [1, 1, 2, 153, 153]);
    assert_eq!(Backoff { unit: 1, ..graphile }.delay(1), Duration(2718));
}
