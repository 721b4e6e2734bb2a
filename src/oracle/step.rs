//! One event applied to every open branch: the plan of the rows it touches, the model's step
//! through the core and the auditor, the comparison with what the implementation reported, and
//! the branches an unknown outcome opens or a later event resolves.

use super::*;

impl Oracle {
    /// The status a maintenance job's release moves `row` to, by the history's name for it: a
    /// name that stands for two statuses no statement tells apart is read as the one the row
    /// can be in — EXHAUSTED where its budget is spent, else FAILED; PENDING before AMBIGUOUS.
    /// None for a name that is no status a release may write.
    fn release_status(&self, name: &str, row: &Row) -> Option<Status> {
        let spent = row.attempts >= self.max_attempts;
        let mut candidates = self.header.statuses_of(name);
        candidates.retain(|s| matches!(s, Status::Pending | Status::Ambiguous | Status::Failed | Status::Exhausted));
        candidates.sort_by_key(|s| match s {
            Status::Exhausted => u8::from(!spent),
            Status::Failed => u8::from(spent),
            Status::Pending => 0,
            _ => 1,
        });
        candidates.first().copied()
    }

    /// Erases, in the rows `event` touched, what no rule of the model ever reads again: the last
    /// failure code, when a row was published, and a terminal row's retry time (unless the
    /// design may claim terminal rows). Resolutions of unknown outcomes that differ only there
    /// then become one branch instead of living on side by side.
    pub(super) fn forget(&self, branch: &mut Branch, plan: &Plan, event: &Event) {
        branch.excused.clear();
        let all = matches!(
            event,
            Event::Reap { .. } | Event::Schedule { .. } | Event::Claim { outcome: Outcome::Unknown, .. }
        );
        let claim_terminal = self.policy.claim_terminal;
        let forget = |row: &mut Row| {
            row.last_failure_code = None;
            row.published_at = None;
            if row.status.is_terminal() && !claim_terminal {
                row.next_attempt_at = None;
            }
        };
        match plan {
            Plan::Ids { .. } if all => branch.outbox.rows_mut().iter_mut().for_each(forget),
            // Find the touched rows, never walk the table.
            Plan::Ids { messages, .. } => {
                for id in messages {
                    if let Some(i) = branch.outbox.index(*id) {
                        forget(&mut branch.outbox.rows_mut()[i]);
                    }
                }
            }
            Plan::Nothing => {}
        }
    }

    /// Resolves, both ways, the deferred writes to rows `event` touches (every row, for a reap):
    /// one branch per consistent combination.
    pub(super) fn resolve_deferred(&self, branch: Branch, event: &Event, plan: &Plan) -> Vec<Branch> {
        if branch.deferred.is_empty() {
            return vec![branch];
        }
        let max_attempts = self.max_attempts;
        let outbox = &branch.outbox;
        let touches = |d: &Deferred| match (event, plan) {
            // A committed write leaves its row out of IN_FLIGHT, so a reap can only tell the two
            // apart where the row, unwritten, would be reaped.
            (Event::Reap { now, .. }, _) => outbox
                .row(d.req.lease.message_id)
                .is_some_and(|row| Outbox::is_reapable(row, Instant(*now), max_attempts)),
            // The scheduler moves every row whose retry time has passed: a write that gives its
            // row a retry time decides whether the scheduler had it to move.
            (Event::Schedule { .. }, _) => true,
            // A claim whose outcome is unknown may have taken any row; a serial claim is judged
            // against every row it could have taken.
            (Event::Claim { outcome: Outcome::Unknown, .. }, _) => true,
            // A claim depends on every row it could take: a serial one must return exactly the
            // design's rows, a skip-locked one may pass over a row only if something could hold
            // it. A deferred write whose row is not claimable now (unwritten) and would be
            // terminal once written (so unclaimable too) does not matter to it.
            (Event::Claim { now, batch, .. }, Plan::Ids { messages, tenant, .. }) => {
                let id = d.req.lease.message_id;
                let (tenant, now, policy) = (*tenant, Instant(*now), &self.policy);
                let Some(row) = outbox.row(id) else { return false };
                if messages.contains(&id) {
                    return true;
                }
                // Does the row fall inside the claim's window (before the last row it returned,
                // or anywhere if its batch is not full) in either resolution?
                let last =
                    messages.last().and_then(|m| outbox.row(*m)).map(|r| Outbox::order_key(policy.claim_order, r));
                let within = |r: &Row| {
                    messages.len() < *batch as usize
                        || last.is_some_and(|k| Outbox::order_key(policy.claim_order, r) < k)
                };
                // Written, could the row be claimable now? Terminal, no (unless the design claims
                // terminal rows); retried, once its retry time has come, at that time's place.
                let committed = match d.req.kind {
                    WriteKind::Published | WriteKind::Failed { .. } | WriteKind::Exhausted { .. } => {
                        policy.claim_terminal
                    }
                    WriteKind::Ambiguous { .. }
                        if policy.ambiguous_shape == crate::core::policy::AmbiguousShape::KeepsOwner =>
                    {
                        within(row)
                    }
                    WriteKind::Ambiguous { .. } | WriteKind::Retry { .. } => {
                        let attempts = policy.attempts_after_failure(row.attempts);
                        let retry = d.retry_at.map_or_else(|| d.req.now.plus(policy.backoff.delay(attempts)), Instant);
                        let written = Row { next_attempt_at: policy.retry_clock.then_some(retry), ..*row };
                        policy.claim_terminal || ((!policy.retry_clock || retry <= now) && within(&written))
                    }
                };
                committed || (Outbox::is_claimable(policy, row, tenant, now, max_attempts) && within(row))
            }
            (_, Plan::Ids { messages, .. }) => messages.contains(&d.req.lease.message_id),
            (_, Plan::Nothing) => false,
        };
        let flags: Vec<bool> = branch.deferred.iter().map(touches).collect();
        if !flags.contains(&true) {
            return vec![branch];
        }
        let mut base = branch;
        let (mut now, mut later) = (Vec::new(), Vec::new());
        for (d, touched) in std::mem::take(&mut base.deferred).into_iter().zip(flags) {
            if touched {
                now.push(d)
            } else {
                later.push(d)
            }
        }
        base.deferred = later;
        let mut out = vec![base];
        for d in now {
            let mut next = Vec::with_capacity(out.len() * 2);
            for b in out {
                let mut applied = b.clone();
                let id = d.req.lease.message_id;
                let before: SmallVec<[Row; 1]> = applied.outbox.row(id).copied().into_iter().collect();
                if applied.auditor.write(&mut applied.outbox, &completing(self.policy, &d.write), &d.req).is_ok() {
                    // Committed, the design's own write may break a property (one fenced by id
                    // alone applies for a superseded lease): that resolution lives on, carrying
                    // the finding, in case it is the only one the rest of the history allows.
                    let mut broke = self.audited(&mut applied, d.line, &d.event.0, Some(id), &before).err();
                    if let Err(finding) = chosen_retry(&mut applied.outbox, id, d.retry_at, d.req.now) {
                        let s7 =
                            Divergence::new(d.line, &d.event.0, Blame::Safety(Property::S7), finding, &before, self);
                        broke = broke.or(Some(s7));
                    }
                    applied.resolutions.push(format!("line {}: {} committed", d.line, d.write));
                    if let (Some(found), None) = (broke, &applied.broke) {
                        let resolutions = vec![format!("line {}: {} committed", d.line, d.write)];
                        let finding = Finding::Under { resolutions, finding: Box::new(found.finding.clone()) };
                        let found = found.reworded(finding, self);
                        applied.broke = Some(Box::new(self.in_your_names(found, &applied)));
                    }
                    next.push(applied);
                }
                let mut not = b;
                not.resolutions.push(format!("line {}: {} not committed", d.line, d.write));
                next.push(not);
            }
            out = next;
        }
        out
    }

    /// The event with the implementation's names turned into the model's ids.
    pub(super) fn plan(&mut self, event: &Event) -> Plan {
        match event {
            Event::Enqueue { tenant, aggregate, message, .. } => Plan::Ids {
                tenant: self.tenant(tenant),
                relay: RelayId(0),
                messages: smallvec![self.message(message)],
                aggregate: self.aggregate(aggregate),
            },
            Event::Claim { relay, tenant, leases, .. } => Plan::Ids {
                tenant: self.tenant(tenant),
                relay: self.relay(relay),
                messages: leases.iter().map(|l| self.message(&l.message)).collect(),
                aggregate: AggregateId(0),
            },
            Event::Publish { relay, message, .. } => Plan::Ids {
                tenant: TenantId(0),
                relay: self.relay(relay),
                messages: smallvec![self.message(message)],
                aggregate: AggregateId(0),
            },
            Event::Write { relay, message, tenant, .. } => Plan::Ids {
                tenant: self.tenant(tenant),
                relay: self.relay(relay),
                messages: smallvec![self.message(message)],
                aggregate: AggregateId(0),
            },
            Event::Reap { messages, .. } => Plan::Ids {
                tenant: TenantId(0),
                relay: self.relay("reaper"),
                messages: messages.iter().map(|m| self.message(m)).collect(),
                aggregate: AggregateId(0),
            },
            Event::Schedule { messages, .. } => Plan::Ids {
                tenant: TenantId(0),
                relay: self.relay("scheduler"),
                messages: messages.iter().map(|m| self.message(m)).collect(),
                aggregate: AggregateId(0),
            },
            Event::Requeue { message, .. } => Plan::Ids {
                tenant: TenantId(0),
                relay: self.relay("operator"),
                messages: smallvec![self.message(message)],
                aggregate: AggregateId(0),
            },
            Event::Release { relay, message, .. } => Plan::Ids {
                tenant: TenantId(0),
                relay: self.relay(relay.as_deref().unwrap_or("maintenance")),
                messages: smallvec![self.message(message)],
                aggregate: AggregateId(0),
            },
            Event::Clock { .. } | Event::Fault { .. } => Plan::Nothing,
        }
    }

    /// The auditor's first violation after `event` stepped on `b` that the history gives the
    /// means to judge, as a divergence in the history's words (`message`: the row the event
    /// names first).
    pub(super) fn audited(
        &self,
        b: &mut Branch,
        line: usize,
        event: &Event,
        message: Option<MessageId>,
        before: &[Row],
    ) -> Result<(), Divergence> {
        // What the history gives no means to judge is not judged (see Accepted::not_judged).
        let judged = |p: Property| match p {
            Property::S5 | Property::S8 | Property::S11 => self.seen_publish,
            Property::S10 => self.seen_enqueue,
            _ => true,
        };
        let violations = b.auditor.take_violations();
        if violations.iter().any(|v| !judged(v.property)) && self.unjudged_at.get().is_none() {
            self.unjudged_at.set(Some(line));
        }
        let Some(v) = violations.into_iter().find(|v| judged(v.property)) else { return Ok(()) };
        let finding = match (v.property, event, v.message(), message, Actor::of(event)) {
            // The design's claim kept a row's token (the model's own tokens, not yours).
            (Property::S2, Event::Claim { relay: name, .. }, Some(message), ..) => {
                Finding::KeptToken { relay: name.clone(), message }
            }
            // A superseded write, in the history's words: who wrote, and which claim had
            // superseded the lease it wrote for.
            (Property::S1, _, _, Some(id), Some(actor)) => {
                let superseded_by = self.superseded_by(b, id);
                if v.superseded() {
                    Finding::AppliedSuperseded { actor, message: id, superseded_by }
                } else {
                    Finding::Broken { breach: v.breach, superseded_by }
                }
            }
            _ => Finding::Broken { breach: v.breach, superseded_by: None },
        };
        Err(Divergence::new(line, event, Blame::Safety(v.property), finding, before, self))
    }

    /// The successors of one branch under `event`, or why it cannot happen there.
    pub(super) fn step(
        &self,
        b: &mut Branch,
        line: usize,
        event: &Event,
        plan: &Plan,
        begin: usize,
    ) -> Result<Option<Branch>, Divergence> {
        let &Plan::Ids { tenant, relay, ref messages, aggregate } = plan else {
            return Ok(None);
        };
        let diverge =
            |blame: Blame, finding: Finding, rows: &[Row]| Divergence::new(line, event, blame, finding, rows, self);
        let conformance = Blame::Conformance;
        let rows_of = |b: &Branch, ids: &[MessageId]| {
            ids.iter().filter_map(|id| b.outbox.row(*id).cloned()).collect::<SmallVec<[Row; 1]>>()
        };
        let audited = |b: &mut Branch, before: &[Row]| self.audited(b, line, event, messages.first().copied(), before);
        match event {
            Event::Enqueue { expected_version, now, result, .. } => {
                let req = EnqueueRequest {
                    tenant_id: tenant,
                    aggregate_id: aggregate,
                    expected_version: *expected_version,
                    message_id: messages[0],
                    now: Instant(*now),
                };
                // A row deleted on completion keeps its id in the model, which never reuses one: a
                // new job under it is beyond the model, not a torn enqueue (decision 65).
                if b.outbox.row(messages[0]).is_some_and(|r| r.deleted) {
                    return Err(diverge(conformance(Conformance::C8), Finding::ReusedId { message: messages[0] }, &[]));
                }
                let model = b.auditor.enqueue(&mut b.outbox, &req).map_err(|error| {
                    diverge(Blame::Safety(Property::S10), Finding::Refused { asked: Asked::Enqueue, error }, &[])
                })?;
                let model_says = match model {
                    EnqueueResult::Applied { .. } => "applied",
                    EnqueueResult::Stale { .. } => "stale",
                };
                if model_says != result {
                    let finding = Finding::EnqueueResult { model, got: result.clone() };
                    return Err(diverge(Blame::Safety(Property::S10), finding, &[]));
                }
                if model_says == "applied" {
                    b.open.push(messages[0]);
                }
                audited(b, &[])?;
                Ok(None)
            }
            Event::Claim { batch, lease_ms, now, leases, outcome, .. } => {
                let req = ClaimRequest {
                    tenant_id: tenant,
                    owner: relay,
                    batch: *batch,
                    lease: Duration(*lease_ms),
                    now: Instant(*now),
                    max_attempts: self.max_attempts,
                    retry_due: true,
                };
                if *outcome == Outcome::Unknown {
                    // Not committed, or committed with leases nobody learnt of.
                    let mut committed = b.clone();
                    let taken = committed.auditor.claim(&mut committed.outbox, &self.policy, &req, Instant(*now));
                    // Committed, it locked the rows it took and no other.
                    let rows: SmallVec<[HeldRow; 2]> = taken
                        .map(|l| l.iter().map(|l| HeldRow { message: l.message_id, begin: 0, skip: 0 }).collect())
                        .unwrap_or_default();
                    // (Only skips read them: a serial history has none.)
                    if !self.serial {
                        committed.holds.push(ClaimHolds { claim: line, rows, full: true });
                    }
                    // A skip taken as excused by this claim stays excused only if it took the
                    // row, or another claim of unknown outcome can hold it.
                    let locked = locked_by(event, plan, self.policy.claim_by_tenant);
                    let claim = AnyClaim::of(&locked, relay.0, line, begin);
                    for skip in std::mem::take(&mut committed.excused) {
                        let row = HeldRow { message: skip.message, begin: skip.begin, skip: skip.line };
                        if !self.hold(&mut committed, claim.as_ref(), row) {
                            committed.skips.push(skip);
                        }
                    }
                    let resolution = format!("line {line}: claim committed");
                    committed.resolutions.push(resolution.clone());
                    // Committed, the design's own claim may break a property (legacy-v1's keeps
                    // the token): that resolution lives on, carrying the finding, in case it is
                    // the only one the rest of the history allows.
                    let before: SmallVec<[Row; 1]> = SmallVec::new();
                    if let Err(d) = audited(&mut committed, &before) {
                        let resolutions = vec![resolution];
                        let finding = Finding::Under { resolutions, finding: Box::new(d.finding.clone()) };
                        let d = d.reworded(finding, self);
                        committed.broke = Some(Box::new(self.in_your_names(d, &committed)));
                    }
                    b.resolutions.push(format!("line {line}: claim not committed"));
                    return Ok(Some(committed));
                }
                if !self.seen_enqueue {
                    // No enqueue in the history (a job queue): a row is enqueued, as far as the
                    // model knows, when a claim first returns it — as a job of its own.
                    let unseen: SmallVec<[MessageId; 2]> =
                        messages.iter().copied().filter(|id| b.outbox.row(*id).is_none()).collect();
                    for id in unseen {
                        implicit_enqueue(b, tenant, id, Instant(*now));
                    }
                }
                let before = rows_of(b, messages);
                // Every row the design's claim could take now, in its order: a serial claim
                // returns the first `batch` of them, a skip-locked one may pass over some.
                let expected = {
                    let Branch { outbox, open, .. } = &mut *b;
                    if self.policy.claim_terminal {
                        *open = outbox.rows().iter().map(|r| r.message_id).collect();
                    } else {
                        open.retain(|id| outbox.row(*id).is_some_and(|r| !r.status.is_terminal()));
                    }
                    open.sort_unstable();
                    open.dedup();
                    outbox.claim_pick(&self.policy, &ClaimRequest { batch: u32::MAX, ..req }, open)
                };
                let skipped: SmallVec<[(MessageId, Row); 2]> = if self.serial {
                    SmallVec::new()
                } else {
                    // The rows before the last one returned, or all of them if the batch is not
                    // full, that the claim did not return.
                    let upto = if messages.len() < *batch as usize {
                        expected.len()
                    } else {
                        messages.last().and_then(|m| expected.iter().position(|e| e == m)).map_or(0, |k| k + 1)
                    };
                    expected[..upto]
                        .iter()
                        .filter(|id| !messages.contains(id))
                        .filter_map(|id| b.outbox.row(*id).map(|row| (*id, *row)))
                        .collect()
                };
                let claimed = b
                    .auditor
                    .claim_exactly(&mut b.outbox, &self.policy, &req, messages, Instant(*now))
                    .map_err(|error| {
                        diverge(conformance(Conformance::C8), Finding::Refused { asked: Asked::Claim, error }, &before)
                    })?;
                match claimed {
                    Err((id, refusal)) => {
                        let property = match refusal {
                            ClaimRefusal::OtherTenant => Some(Property::S9),
                            ClaimRefusal::Terminal => Some(Property::S4),
                            ClaimRefusal::LiveLease => Some(Property::S6),
                            // Taking an expired lease the design leaves to its rescuer breaks no
                            // property: it is not what the design's claim does.
                            ClaimRefusal::InFlight => None,
                            ClaimRefusal::RetryClock => Some(Property::S7),
                            // Its time has passed: taking it before the scheduler moved it is
                            // not what the design's claim does, and breaks no property.
                            ClaimRefusal::Unscheduled => None,
                            ClaimRefusal::BudgetSpent => Some(Property::S3),
                            ClaimRefusal::OverBatch | ClaimRefusal::Twice => None,
                        };
                        let blame = property.map_or(conformance(Conformance::C1), Blame::Safety);
                        Err(diverge(blame, Finding::ClaimRefused { message: id, refusal }, &before))
                    }
                    Ok(model_leases) => {
                        let want = &expected[..expected.len().min(*batch as usize)];
                        // The rows, not the order they are listed in: RETURNING has none.
                        let same_rows = want.len() == messages.len() && want.iter().all(|id| messages.contains(id));
                        if self.serial && !same_rows {
                            // One claim at a time: it returns exactly the design's rows, in order.
                            // A row the claim passed over that a write of unknown outcome had
                            // written to: had that write applied where the design refuses it, S1.
                            let unknown_write_at = want
                                .iter()
                                .filter(|id| !messages.contains(id))
                                .find_map(|id| self.locks.get(id.0 as usize).and_then(|l| l.unknown_write))
                                .filter(|at| *at < line);
                            let finding =
                                Finding::ClaimOrder { model: want.to_vec(), got: messages.to_vec(), unknown_write_at };
                            return Err(diverge(conformance(Conformance::C1), finding, &before));
                        }
                        for (got, lease) in leases.iter().zip(&model_leases) {
                            if got.attempts != lease.attempts {
                                // Counting differently is no violation by itself: the design
                                // counts elsewhere (S3 judges the budget when it is passed).
                                let finding = Finding::Attempts {
                                    message: lease.message_id,
                                    model: lease.attempts,
                                    got: got.attempts,
                                };
                                return Err(diverge(conformance(Conformance::C2), finding, &before));
                            }
                            // A claim without a token is a lease of its own, named by its line.
                            let token = got
                                .token
                                .as_deref()
                                .map_or_else(|| TokenName::Text(format!("{TOKENLESS}{line})").into()), TokenName::new);
                            b.held.push(Held { relay, token, lease: *lease, ended: false, line });
                        }
                        // A passed-over row waits for evidence that another transaction held it.
                        let mut claim = None;
                        for (id, row) in skipped {
                            if !self.held_elsewhere(b, id, begin, line) {
                                let claim = claim.get_or_insert_with(|| std::sync::Arc::new(event.clone())).clone();
                                b.skips.push(Skip { line, begin, settled: false, message: id, row, claim });
                            }
                        }
                        audited(b, &before)?;
                        Ok(None)
                    }
                }
            }
            Event::Publish { message, key, answer, stored, token, .. } => {
                let id = messages[0];
                // The lease the publication counts against (S3): the one whose token it names,
                // else the relay's latest lease of the message that is still open (not one its
                // own write already ended) — in the budget that lease was claimed in, from before
                // a requeue if it is (decision 68). Without either it counts against the current
                // budget.
                let lease = b
                    .held
                    .iter()
                    .rev()
                    .find(|h| {
                        h.relay == relay
                            && h.lease.message_id == id
                            && match token {
                                Some(t) => h.token.is(t),
                                None => !h.ended,
                            }
                    })
                    .map(|h| h.lease)
                    .unwrap_or(Lease {
                        message_id: id,
                        tenant_id: tenant,
                        owner: relay,
                        token: LeaseToken(u64::MAX),
                        attempts: 0,
                        claim_seq: u32::MAX,
                    });
                let key = if key == message {
                    IdempotencyKey::Message { message_id: id }
                } else {
                    IdempotencyKey::Other { value: fnv(key) }
                };
                let stored = stored.unwrap_or(*answer == PublishAnswer::Ack);
                let before = rows_of(b, messages);
                b.auditor.published(&b.outbox, &lease, key, stored);
                audited(b, &before)?;
                Ok(None)
            }
            Event::Write { write, token, attempt, now, code, result, status, next_attempt_at, .. } => {
                let id = messages[0];
                let kind = write_kind(write, *code).ok_or_else(|| {
                    diverge(conformance(Conformance::C8), Finding::UnknownWrite { write: write.clone() }, &[])
                })?;
                // The lease the write presents: by its token; without one, by the attempt its
                // claim handed out, else the writer's latest claim of the row.
                let held = b.held.iter_mut().rev().find(|h| h.presented_by(relay, id, token.as_deref(), *attempt));
                // Whatever the write reports, the relay is done with this lease.
                let mut lease = held
                    .map(|h| {
                        h.ended = true;
                        h.lease
                    })
                    .unwrap_or(Lease {
                        message_id: id,
                        tenant_id: tenant,
                        owner: relay,
                        token: LeaseToken(u64::MAX),
                        attempts: 0,
                        claim_seq: u32::MAX,
                    });
                lease.tenant_id = tenant;
                let req = WriteRequest { lease, kind, now: Instant(*now), max_attempts: self.max_attempts };
                let before = rows_of(b, messages);
                if *result == WriteReport::Unknown {
                    if b.outbox.row(id).is_none() {
                        let finding = Finding::UnknownRow { asked: Asked::Write, message: id };
                        return Err(diverge(conformance(Conformance::C7), finding, &before));
                    }
                    let event = EventAt(std::sync::Arc::new(event.clone()));
                    b.deferred.push(Deferred { line, write: write.clone(), req, retry_at: *next_attempt_at, event });
                    return Ok(None);
                }
                let applied = b;
                let model = applied.auditor.write(&mut applied.outbox, &completing(self.policy, write), &req).map_err(
                    |error| {
                        diverge(conformance(Conformance::C7), Finding::Refused { asked: Asked::Write, error }, &before)
                    },
                )?;
                match result {
                    WriteReport::Unknown => unreachable!("an unknown write is deferred above"),
                    WriteReport::Applied | WriteReport::Stale => {
                        let model_says = match model {
                            WriteResult::Applied { .. } => WriteReport::Applied,
                            WriteResult::Stale { .. } => WriteReport::Stale,
                        };
                        if model_says != *result {
                            // A superseded lease's write breaks S1; the latest lease's second
                            // write to a row it already ended breaks S4.
                            let latest = applied.auditor.ghost(id).is_some_and(|g| g.claims == req.lease.claim_seq);
                            let property = match (model, *result) {
                                (WriteResult::Stale { reason: crate::core::StaleReason::WrongTenant }, _) => {
                                    Some(Property::S9)
                                }
                                (
                                    WriteResult::Stale {
                                        reason:
                                            crate::core::StaleReason::NotInFlight | crate::core::StaleReason::Deleted,
                                    },
                                    _,
                                ) if latest && before.first().is_some_and(|r| r.status.is_terminal()) => {
                                    Some(Property::S4)
                                }
                                (WriteResult::Stale { .. }, WriteReport::Applied) => Some(Property::S1),
                                _ => None,
                            };
                            let blame = property.map_or(conformance(Conformance::C3), Blame::Safety);
                            let superseded_by =
                                if property == Some(Property::S1) { self.superseded_by(applied, id) } else { None };
                            let finding = Finding::WriteResult { model, got: *result, superseded_by };
                            return Err(diverge(blame, finding, &before));
                        }
                        if let (Some(got), WriteResult::Applied { status: expected }) = (status, model) {
                            if !self.header.stands_for(got, expected) {
                                let finding = Finding::Status { model: expected, got: got.clone() };
                                return Err(diverge(conformance(Conformance::C4), finding, &before));
                            }
                        }
                        audited(applied, &before)?;
                        if matches!(model, WriteResult::Applied { .. }) {
                            chosen_retry(&mut applied.outbox, id, *next_attempt_at, req.now)
                                .map_err(|finding| diverge(Blame::Safety(Property::S7), finding, &before))?;
                        }
                        Ok(None)
                    }
                }
            }
            Event::Release { now, to, next_attempt_at, fence, token, attempt, result, .. } => {
                let id = messages[0];
                let before = rows_of(b, messages);
                let Some(row) = before.first().copied() else {
                    let finding = Finding::UnknownRow { asked: Asked::Release, message: id };
                    return Err(diverge(conformance(Conformance::C7), finding, &[]));
                };
                let to = match self.release_status(to, &row) {
                    Some(status) => status,
                    None => {
                        return Err(diverge(
                            conformance(Conformance::C8),
                            Finding::ReleaseTo { to: to.clone() },
                            &before,
                        ))
                    }
                };
                let fence = match fence.as_str() {
                    "token" => ReleaseFence::Token,
                    "expired" => ReleaseFence::Expired,
                    _ => ReleaseFence::Id,
                };
                // The lease the job read: the one whose token (or attempt) it names, else the
                // row's latest claim.
                let latest = b.auditor.ghost(id).map_or(0, |g| g.claims);
                let read = b
                    .held
                    .iter()
                    .rev()
                    .find(|h| {
                        h.lease.message_id == id
                            && match (token, attempt) {
                                (Some(t), _) => h.token.is(t),
                                (None, Some(a)) => h.lease.attempts == *a,
                                (None, None) => h.lease.claim_seq == latest,
                            }
                    })
                    .map(|h| h.lease);
                // A token no claim of the history handed out matches no row — unless the history
                // never learnt the row's latest lease (that claim's reply was lost, no relay
                // reported it): then the token may be that lease's or an older one's, and the
                // release is taken as the history reports it (checked both ways).
                let latest_known = b.held.iter().any(|h| h.lease.message_id == id && h.lease.claim_seq == latest);
                let named = token.is_some() || attempt.is_some();
                // Under a counter design every claim's token is greater than the one before it
                // (S2 holds the history to that): after the latest claim the history knows, with
                // token K, the `n` claims it never learnt of hold tokens of at least K+1, …, K+n.
                // A token below K+n cannot be the latest lease's (decision 69).
                let below_latest = || {
                    let named = token.as_deref().and_then(TokenName::number)?;
                    let known = b
                        .held
                        .iter()
                        .filter(|h| h.lease.message_id == id)
                        .filter_map(|h| match h.token {
                            TokenName::Number(n) => Some((h.lease.claim_seq, n)),
                            TokenName::Text(_) => None,
                        })
                        .max()?;
                    let lost = u64::from(latest.saturating_sub(known.0));
                    Some(lost > 0 && named < known.1.saturating_add(lost))
                };
                let counter = self.policy.token_kind == crate::core::policy::TokenKind::Counter;
                let stale = named
                    && (latest_known
                        || result != "applied"
                        || (counter && read.is_none() && below_latest() == Some(true)));
                let lease = read.unwrap_or(Lease {
                    message_id: id,
                    tenant_id: row.tenant_id,
                    owner: relay,
                    token: if stale { LeaseToken(u64::MAX) } else { row.lease_token },
                    attempts: row.attempts,
                    claim_seq: if stale { u32::MAX } else { latest },
                });
                let req =
                    ReleaseRequest { lease, fence, to, retry_at: next_attempt_at.map(Instant), now: Instant(*now) };
                // A design whose rescuer takes a lease only once its expiry has passed
                // (`maintenance.after_expiry`) does not take it at the instant it expires: the
                // expiry fence alone would (decision 97).
                let too_early = fence == ReleaseFence::Expired
                    && self.policy.rescue_after_expiry
                    && row.status == Status::InFlight
                    && !Outbox::is_rescuable(&row, Instant(*now), true);
                let model = if too_early {
                    WriteResult::Stale { reason: StaleReason::WrongToken }
                } else {
                    b.auditor.release(&mut b.outbox, &req).map_err(|error| {
                        diverge(
                            conformance(Conformance::C7),
                            Finding::Refused { asked: Asked::Release, error },
                            &before,
                        )
                    })?
                };
                let model_says = if matches!(model, WriteResult::Applied { .. }) { "applied" } else { "stale" };
                if model_says != result {
                    // Ending a lease claimed after the job read the row breaks S1.
                    let superseded = lease.claim_seq != latest && row.status == Status::InFlight;
                    if result == "applied" && superseded {
                        let superseded_by = self.superseded_by(b, id);
                        let finding = Finding::ReleaseResult { model, got: "applied".to_string(), superseded_by };
                        return Err(diverge(Blame::Safety(Property::S1), finding, &before));
                    }
                    let finding = Finding::ReleaseResult { model, got: result.clone(), superseded_by: None };
                    return Err(diverge(conformance(Conformance::C3), finding, &before));
                }
                if model_says == "applied" {
                    b.open.push(id);
                }
                audited(b, &before)?;
                Ok(None)
            }
            Event::Reap { now, .. } | Event::Schedule { now, .. } => {
                let before = rows_of(b, messages);
                let at = Instant(*now);
                let reap = matches!(event, Event::Reap { .. });
                let mut moved = if reap {
                    b.auditor.reap(&mut b.outbox, at)
                } else if self.policy.scheduler {
                    // Concurrent relays: the scheduler's statement, like a claim, does not see a
                    // row another transaction held or committed after it began (its snapshot
                    // is older, or it waited and found the row changed). Such a row stays; one
                    // no transaction of the history can explain waits for evidence (a skip).
                    let mut leave: SmallVec<[MessageId; 2]> = SmallVec::new();
                    if !self.serial {
                        let passed: Vec<(MessageId, Row)> = b
                            .outbox
                            .rows()
                            .iter()
                            .filter(|r| Outbox::is_schedulable(r, at) && !messages.contains(&r.message_id))
                            .map(|r| (r.message_id, *r))
                            .collect();
                        for (id, row) in passed {
                            if !self.held_elsewhere(b, id, begin, line) {
                                let step = std::sync::Arc::new(event.clone());
                                b.skips.push(Skip { line, begin, settled: false, message: id, row, claim: step });
                            }
                            leave.push(id);
                        }
                    }
                    b.auditor.schedule_except(&mut b.outbox, at, at, &leave)
                } else {
                    // A design without a scheduler has none to move anything.
                    Vec::new()
                };
                let mut expected = messages.to_vec();
                moved.sort();
                expected.sort();
                if moved != expected {
                    let finding = if reap {
                        Finding::Reaped { model: moved, got: expected }
                    } else {
                        Finding::Scheduled { model: moved, got: expected }
                    };
                    return Err(diverge(conformance(Conformance::C5), finding, &before));
                }
                audited(b, &before)?;
                Ok(None)
            }
            Event::Requeue { result, .. } => {
                let before = rows_of(b, messages);
                let model = b.auditor.requeue(&mut b.outbox, &self.policy, messages[0]).map_err(|error| {
                    diverge(conformance(Conformance::C7), Finding::Refused { asked: Asked::Requeue, error }, &before)
                })?;
                let model_says = if model == RequeueResult::Applied { "applied" } else { "not_requeueable" };
                if model_says != result {
                    let finding = Finding::RequeueResult { model, got: result.clone() };
                    return Err(diverge(conformance(Conformance::C6), finding, &before));
                }
                if model == RequeueResult::Applied {
                    b.open.push(messages[0]);
                }
                audited(b, &before)?;
                Ok(None)
            }
            Event::Clock { .. } | Event::Fault { .. } => Ok(None),
        }
    }

    /// Applies `event` to a branch as the implementation reported it, whatever the design says:
    /// after a divergence, the rest of the history is checked from the table it says it left.
    pub(super) fn adopt(&self, b: &mut Branch, line: usize, event: &Event, plan: &Plan) {
        use crate::core::policy::{BudgetPredicate, WriteFence};
        let &Plan::Ids { tenant, relay, ref messages, aggregate } = plan else { return };
        let mut lax = self.policy;
        lax.claim_by_tenant = false;
        lax.write_checks_tenant = false;
        lax.claim_live_leases = true;
        lax.claim_expired_leases = true;
        lax.claim_terminal = true;
        lax.budget = BudgetPredicate::Absent;
        lax.retry_clock = false;
        lax.write_fence = WriteFence::MessageIdOnly;
        lax.failure_fence = None;
        lax.swallow_stale = false;
        let max_attempts = self.max_attempts;
        let force_release = |b: &mut Branch, id: MessageId, to: Status, retry_at: Option<u64>, now: u64| {
            let Some(row) = b.outbox.row(id).copied() else { return };
            let lease = Lease {
                message_id: id,
                tenant_id: row.tenant_id,
                owner: relay,
                token: row.lease_token,
                attempts: row.attempts,
                claim_seq: 0,
            };
            let req = ReleaseRequest {
                lease,
                fence: ReleaseFence::Id,
                to,
                retry_at: retry_at.map(Instant),
                now: Instant(now),
            };
            let _ = b.outbox.release(&req);
        };
        match event {
            Event::Enqueue { now, result, .. } if result == "applied" && b.outbox.row(messages[0]).is_none() => {
                let req = EnqueueRequest {
                    tenant_id: tenant,
                    aggregate_id: aggregate,
                    expected_version: b.outbox.aggregate_version(tenant, aggregate),
                    message_id: messages[0],
                    now: Instant(*now),
                };
                let _ = b.auditor.enqueue(&mut b.outbox, &req);
                b.open.push(messages[0]);
            }
            Event::Claim { batch, lease_ms, now, leases, outcome: Outcome::Ok, .. } => {
                for (got, &id) in leases.iter().zip(messages) {
                    if b.outbox.row(id).is_none() {
                        implicit_enqueue(b, tenant, id, Instant(*now));
                    }
                    let req = ClaimRequest {
                        tenant_id: tenant,
                        owner: relay,
                        batch: (*batch).max(1),
                        lease: Duration((*lease_ms).max(1)),
                        now: Instant(*now),
                        max_attempts,
                        retry_due: true,
                    };
                    if let Ok(Ok(mut claimed)) =
                        b.auditor.claim_exactly(&mut b.outbox, &lax, &req, &[id], Instant(*now))
                    {
                        if let (Some(lease), Some(i)) = (claimed.first_mut(), b.outbox.index(id)) {
                            b.outbox.rows_mut()[i].attempts = got.attempts;
                            lease.attempts = got.attempts;
                            let token = got
                                .token
                                .as_deref()
                                .map_or_else(|| TokenName::Text(format!("{TOKENLESS}{line})").into()), TokenName::new);
                            b.held.push(Held { relay, token, lease: *lease, ended: false, line });
                        }
                    }
                    b.open.push(id);
                }
            }
            Event::Write { write, token, attempt, now, code, result, next_attempt_at, .. } => {
                let id = messages[0];
                let held = b.held.iter_mut().rev().find(|h| h.presented_by(relay, id, token.as_deref(), *attempt));
                let lease = held.map(|h| {
                    h.ended = true;
                    h.lease
                });
                if *result == WriteReport::Applied {
                    if let (Some(kind), Some(row)) = (write_kind(write, *code), b.outbox.row(id).copied()) {
                        let lease = lease.unwrap_or(Lease {
                            message_id: id,
                            tenant_id: row.tenant_id,
                            owner: relay,
                            token: row.lease_token,
                            attempts: row.attempts,
                            claim_seq: 0,
                        });
                        let mut lax = lax;
                        lax.ambiguous_shape = crate::core::policy::AmbiguousShape::ClearsLease;
                        if let (true, Some(i)) = (row.status.is_terminal(), b.outbox.index(id)) {
                            // A write to a terminal row: the row goes where the write says.
                            b.outbox.rows_mut()[i].status = Status::InFlight;
                        }
                        let req = WriteRequest {
                            lease: Lease { tenant_id: row.tenant_id, ..lease },
                            kind,
                            now: Instant(*now),
                            max_attempts,
                        };
                        let _ = b.outbox.write(&lax, &req);
                        let _ = chosen_retry(&mut b.outbox, id, *next_attempt_at, Instant(*now));
                    }
                }
            }
            Event::Publish { .. } => {
                let _ = self.step(b, line, event, plan, 0);
            }
            Event::Release { now, to, next_attempt_at, result, .. } if result == "applied" => {
                let row = b.outbox.index(messages[0]).map(|i| b.outbox.rows()[i]);
                if let Some(to) = row.and_then(|row| self.release_status(to, &row)) {
                    force_release(b, messages[0], to, *next_attempt_at, *now);
                    b.open.push(messages[0]);
                }
            }
            Event::Reap { now, .. } => {
                for &id in messages {
                    force_release(b, id, Status::Exhausted, None, *now);
                }
            }
            // What the scheduler says it moved becomes claimable, whatever the retry time said.
            Event::Schedule { .. } => {
                for &id in messages {
                    if let Some(i) = b.outbox.index(id) {
                        b.outbox.rows_mut()[i].next_attempt_at = None;
                    }
                }
            }
            Event::Requeue { result, .. } if result == "applied" => {
                let id = messages[0];
                if let Some(i) = b.outbox.index(id) {
                    b.outbox.rows_mut()[i].status = Status::Failed;
                    let _ = b.auditor.requeue(&mut b.outbox, &self.policy, id);
                    b.open.push(id);
                }
            }
            _ => {}
        }
        b.auditor.take_violations();
    }
}

#[derive(Clone, Debug)]
pub(super) enum Plan {
    Ids { tenant: TenantId, relay: RelayId, messages: SmallVec<[MessageId; 2]>, aggregate: AggregateId },
    Nothing,
}

/// A row a history without enqueues brings in with its first claim: a job of its own, with an
/// aggregate apart from every one the history names.
pub(super) fn implicit_enqueue(b: &mut Branch, tenant: TenantId, id: MessageId, now: Instant) {
    let req = EnqueueRequest {
        tenant_id: tenant,
        aggregate_id: AggregateId(IMPLICIT_AGGREGATE | id.0),
        expected_version: 0,
        message_id: id,
        now,
    };
    let _ = b.auditor.enqueue(&mut b.outbox, &req);
    b.open.push(id);
}

/// The rows an event's transaction held locked, as reported: the rows a claim returned (any row,
/// for a claim of unknown outcome), the row of an applied write or release (or one of unknown
/// outcome), the rows a reap took, a requeued row. A statement that matched nothing took no lock.
pub(super) enum Locked {
    Nothing,
    /// Up to `batch` rows the claim could take — of its tenant, where the design's claim is
    /// scoped to one.
    Any {
        tenant: Option<TenantId>,
        batch: u32,
    },
    Rows(SmallVec<[MessageId; 2]>),
}

pub(super) fn locked_by(event: &Event, plan: &Plan, claim_by_tenant: bool) -> Locked {
    let Plan::Ids { messages, tenant, .. } = plan else { return Locked::Nothing };
    match event {
        Event::Claim { outcome: Outcome::Unknown, batch, .. } => {
            Locked::Any { tenant: claim_by_tenant.then_some(*tenant), batch: *batch }
        }
        Event::Claim { .. } | Event::Reap { .. } | Event::Schedule { .. } => Locked::Rows(messages.clone()),
        Event::Write { result: WriteReport::Applied | WriteReport::Unknown, .. } => Locked::Rows(messages.clone()),
        Event::Release { result, .. } | Event::Requeue { result, .. } if result == "applied" => {
            Locked::Rows(messages.clone())
        }
        _ => Locked::Nothing,
    }
}

/// The policy a write runs under: a `delete` or `archive` takes the row out of the table, so no
/// later statement matches it (the core's completion by deletion), whatever the design marks.
pub(super) fn completing(mut policy: Policy, write: &str) -> Policy {
    if matches!(write, "delete" | "archive") {
        policy.completion = crate::core::policy::Completion::Delete;
    }
    policy
}

pub(super) fn write_kind(name: &str, code: Option<FailureCode>) -> Option<WriteKind> {
    Some(match name {
        "mark_published" => WriteKind::Published,
        "mark_ambiguous" => WriteKind::Ambiguous { code: code.unwrap_or(FailureCode::Timeout) },
        "mark_retry" => WriteKind::Retry { code: code.unwrap_or(FailureCode::Unavailable) },
        "mark_failed" => WriteKind::Failed { code: code.unwrap_or(FailureCode::Rejected) },
        "mark_exhausted" => WriteKind::Exhausted { code: code.unwrap_or(FailureCode::BudgetSpent) },
        // A completion that takes the row out of the table: the model's PUBLISHED, deleted, so
        // nothing matches it again (see `completing`).
        "delete" | "archive" => WriteKind::Published,
        _ => return None,
    })
}

/// Where a write the implementation reported applied left its row waiting for a retry, the
/// retry time it chose replaces the design's backoff; one not later than the write's `now`
/// breaks S7.
pub(super) fn chosen_retry(
    outbox: &mut Outbox,
    id: MessageId,
    retry_at: Option<u64>,
    now: Instant,
) -> Result<(), Finding> {
    let Some(at) = retry_at else { return Ok(()) };
    outbox.choose_retry(id, Instant(at), now).map_err(|status| Finding::RetryNotLater { status, at, now })
}
