//! The reductions that keep the world's state space small (docs/model-checking.md): symmetry
//! (relays, messages, tokens and claim numbers renamed to canonical ranks), time made relative to
//! `now`, counters saturated at the budget, dead fields erased, and, for a safety check, the
//! abstractions of what no property or tracked situation still reads. Each merges only states
//! that no property, situation or later step can tell apart.

use super::*;

impl World {
    /// Rewrites the state into a canonical representative that behaves the same from here on, so
    /// the model checker collapses states that differ only in what cannot matter any more:
    ///
    /// - **time**: every clock that may still read an instant reads at least the horizon
    ///   `now − W` (W the largest negative clock skew of the fleet), now and later, so instants
    ///   at or before it are past for good: as order keys (due order) they are only compared
    ///   with each other and become their ranks; expiries among them only ever say "expired", so
    ///   they become 0; `published_at`, read only by S4 and S1's "changed nothing" where a design
    ///   may write a terminal row, keeps its distance from now when it could still equal a write's `now` (else 0); later
    ///   instants keep their distance from `now`. A quiet tick then leads back to the same
    ///   state, and time needs no bound.
    /// - **tokens** (counter kind): a row's token and the tokens of the leases held for it are
    ///   compared for equality and grow by exactly 1, never past the row's; renaming them to their
    ///   ranks keeps every comparison. Not done when a design resets tokens (a reset token is
    ///   compared with larger ones, and a +1 could then meet a renamed value it would never meet).
    /// - **random tokens**: renamed to ranks, and the random source restarted, whose first value
    ///   is no small rank.
    /// - **ghost claim numbers**: compared for equality only, the row's being the largest: ranks.
    /// - **counters** compared only with the budget (attempts, publications) saturate at
    ///   `max + 1`; a lease's pending write's `now` is overwritten when it runs, so it becomes 0;
    ///   the lifetime publication count is not a state at all.
    pub fn normalise(&mut self, config: &WorldConfig) -> Permutation {
        self.normalise_with(config, None)
    }

    /// [`World::normalise`], and with `safety = Some(tracked)` the abstractions of
    /// [`World::abstract_for_safety`] too, for a check of the safety properties in which only the
    /// reachability flags in the bit mask `tracked` are still looked at.
    pub fn normalise_with(&mut self, config: &WorldConfig, safety: Option<Abstraction>) -> Permutation {
        self.normalise_by(config, &FleetFacts::of(config), safety)
    }

    /// [`World::normalise_with`] with the fleet's facts read once by the caller.
    pub fn normalise_by(
        &mut self,
        config: &WorldConfig,
        facts: &FleetFacts,
        safety: Option<Abstraction>,
    ) -> Permutation {
        self.normalise_time(config, facts);
        self.erase_stale_leases(facts);
        self.normalise_ranks(config, facts);
        self.normalise_rest(config, facts, safety)
    }

    /// [`World::normalise_by`] for the successor by `action` of a normalised state, skipping
    /// what that action cannot have changed: a publication touches no row, instant, token or
    /// claim number (only its relay's cycle and the row's ghost counters), a tick only the
    /// clock. The result is the same (`tests/model_check.rs` compares the two on every step of
    /// a complete check); the model checker spends less than half its time here.
    pub fn normalise_after(
        &mut self,
        config: &WorldConfig,
        facts: &FleetFacts,
        safety: Option<Abstraction>,
        action: Action,
    ) -> Permutation {
        match action {
            Action::Publish { .. } => {
                self.erase_stale_leases(facts);
                for (_, effect) in self.relays.iter_mut().flatten() {
                    if let Effect::Write { request } = effect {
                        request.now = Instant(0);
                    }
                }
                for ghost in self.auditor.ghosts_mut() {
                    saturate_publications(ghost, config.max_attempts + 1);
                }
                self.normalise_rest(config, facts, safety)
            }
            Action::Tick => {
                self.normalise_time(config, facts);
                self.normalise_rest(config, facts, safety)
            }
            _ => self.normalise_by(config, facts, safety),
        }
    }

    /// Tokens and ghost claim numbers to ranks, counters saturated, pending writes' `now` erased.
    pub(super) fn normalise_ranks(&mut self, config: &WorldConfig, facts: &FleetFacts) {
        let cap = config.max_attempts + 1;
        let World { outbox, auditor, relays, rescuer, .. } = self;
        // Every copy of a lease the relays (and the rescuer) hold, gathered once.
        let mut leases: SmallVec<[&mut Lease; 8]> = SmallVec::new();
        leases.extend(rescuer.as_mut());
        for (cycle, effect) in relays.iter_mut().flatten() {
            leases.extend(cycle.leases_mut().iter_mut());
            match effect {
                Effect::Publish { lease, .. } => leases.push(lease),
                Effect::Write { request } => {
                    request.now = Instant(0);
                    leases.push(&mut request.lease);
                }
                Effect::Claim { .. } | Effect::Done => {}
            }
        }
        for row in outbox.rows_mut() {
            let id = row.message_id;
            if !facts.resets_tokens {
                let mut tokens: SmallVec<[u64; 8]> = smallvec![row.lease_token.0];
                tokens.extend(leases.iter().filter(|l| l.message_id == id).map(|l| l.token.0));
                tokens.sort_unstable();
                tokens.dedup();
                let rank = |t: u64| rank_in(&tokens, t) as u64;
                row.lease_token = LeaseToken(rank(row.lease_token.0));
                for l in leases.iter_mut().filter(|l| l.message_id == id) {
                    l.token = LeaseToken(rank(l.token.0));
                }
            }
            row.attempts = row.attempts.min(cap);
            let mut ghost = auditor.ghosts_mut().iter_mut().find(|g| g.message_id == id.0);
            let (claims, requeued) = ghost.as_ref().map_or((0, 0), |g| (g.claims, g.requeued_after_claim));
            let mut seqs: SmallVec<[u32; 8]> = smallvec![claims, requeued];
            seqs.extend(leases.iter().filter(|l| l.message_id == id).map(|l| l.claim_seq));
            seqs.sort_unstable();
            seqs.dedup();
            let rank = |c: u32| rank_in(&seqs, c) as u32;
            for l in leases.iter_mut().filter(|l| l.message_id == id) {
                l.claim_seq = rank(l.claim_seq);
                l.attempts = l.attempts.min(cap);
            }
            if let Some(ghost) = ghost.as_mut() {
                ghost.claims = rank(ghost.claims);
                ghost.requeued_after_claim = rank(ghost.requeued_after_claim);
                saturate_publications(ghost, cap);
                ghost.tokens_seen.clear();
            }
        }
        drop(leases);
        if facts.random_tokens {
            self.outbox.restart_random_tokens();
        }
    }

    /// The abstractions, dead fields and relay order: what every step may change.
    pub(super) fn normalise_rest(
        &mut self,
        config: &WorldConfig,
        facts: &FleetFacts,
        safety: Option<Abstraction>,
    ) -> Permutation {
        if let Some(abstraction) = safety {
            self.abstract_for_safety(config, facts, abstraction);
        }
        self.erase_dead_fields(facts);
        self.canonical_relay_order(config, facts)
    }

    /// In a fleet where every claim bumps the token and every write checks it, a lease whose
    /// claim is no longer the row's latest can only ever be refused: its token, attempts and
    /// pending write kind are dead, so superseded leases look alike (token 0, which no later
    /// claim hands out). Its ghost claim number stays: it says which budget its publications
    /// count against.
    pub(super) fn erase_stale_leases(&mut self, facts: &FleetFacts) {
        if !facts.fenced {
            return;
        }
        let latest: SmallVec<[(MessageId, u32); 8]> =
            self.auditor.ghosts().iter().map(|g| (MessageId(g.message_id), g.claims)).collect();
        let is_stale = |l: &Lease| latest.iter().any(|&(m, c)| m == l.message_id && c != l.claim_seq);
        if let Some(lease) = self.rescuer.as_mut().filter(|l| is_stale(l)) {
            *lease = Lease { token: LeaseToken(0), attempts: 0, ..*lease };
        }
        for (cycle, effect) in self.relays.iter_mut().flatten() {
            for lease in cycle.leases_mut() {
                if is_stale(lease) {
                    *lease = Lease { token: LeaseToken(0), attempts: 0, ..*lease };
                }
            }
            match effect {
                Effect::Publish { lease, .. } if is_stale(lease) => {
                    *lease = Lease { token: LeaseToken(0), attempts: 0, ..*lease };
                }
                Effect::Write { request } if is_stale(&request.lease) => {
                    request.lease = Lease { token: LeaseToken(0), attempts: 0, ..request.lease };
                    request.kind = crate::core::WriteKind::Published;
                }
                _ => {}
            }
        }
    }

    /// Abstractions for the safety check: they merge states that differ in ghost variables a
    /// safety property reads, and only ever towards a *larger* chance of a violation, so a
    /// property that holds here holds in the exact world; in the fleets where they apply they
    /// also raise no false alarm. No rule of the core reads what they change, so the abstract
    /// world takes exactly the steps of the exact one. `abstraction.tracked` is the bit mask (in
    /// [`Situation::bit`]) of the reachability flags still looked at: a
    /// field one of them reads is left alone.
    ///
    /// - **Publications over-counted** (S3). A row's ghost publication count `p` becomes
    ///   `max(p, attempts − h)`, `h` the leases of its current budget that are still to be
    ///   published. It never decreases `p`, so a publication past the budget is still seen. In a
    ///   fleet whose every design counts `attempts` at the claim under the strict budget
    ///   predicate and publishes once per lease, `p + h ≤ attempts` always holds (every
    ///   publication and every lease still to publish was a claim, and every claim counted one
    ///   attempt), so the new value is exactly `attempts − h`: `p` is no longer a state of its
    ///   own, and since `attempts − h` publications plus at most `h + (max − attempts)` more
    ///   stay within `max`, nothing is flagged that the exact world would not flag. (Applied in
    ///   those fleets only: elsewhere the count stays exact.)
    /// - **Broker storage forgotten** (S5). `stored` is kept only while some relay has a pending
    ///   write of PUBLISHED for the row; otherwise it becomes `false`. That only ever makes an
    ///   unconfirmed PUBLISHED more likely to be flagged. In a fleet where no design writes
    ///   PUBLISHED before its broker acknowledged (or after a second, unchecked publication),
    ///   every write of PUBLISHED follows its own relay's stored publication, which sets `stored`
    ///   again, so nothing is flagged that the exact world would not flag.
    /// - **Failure code dropped.** `last_failure_code` is read by no rule, by S4's comparison of a
    ///   terminal row and S1's "reported applied but changed nothing" (whose fields are dead
    ///   anyway where [`Self::erase_dead_fields`] erases them, or no longer looked at once S1 and
    ///   S4 are settled) and by the "AMBIGUOUS later PUBLISHED"
    ///   flag: once that flag is not tracked, it goes. (The "claimed again" flag reads whether a
    ///   code is set, but a row with a code has been claimed and counted an attempt or left
    ///   PENDING, unless an operator requeued it: so not while requeues are left.)
    /// - **Claim numbers collapsed** (S1, S3). A lease's ghost claim number is read only as "is
    ///   it the row's latest claim" (S1, the liveness checks, stale leases) and "does it belong
    ///   to the current budget", that is, is it past the claim number of the row's last requeue
    ///   (S3); the requeue's number only in that comparison, and a requeue to come puts every
    ///   lease held by then before itself. So where every lease held for a row belongs to its
    ///   current budget, the budget's start becomes 0, the stale leases 1 and the latest claim
    ///   the next: two stale leases look alike.
    ///
    /// Then, for the properties already **settled** (`abstraction.settled`: an exact path breaks
    /// each, so the check no longer looks at them), the ghost fields that only they read are
    /// erased; no rule, no liveness check and no other property reads them, so the steps and
    /// every other property's verdict stay exactly those of the exact world:
    /// - S3 settled: the publication counts become 0.
    /// - S1 and S4 settled: `published_at` (read by S4's comparison of a terminal row and S1's
    ///   "reported applied but changed nothing", which compares whole rows) becomes 0, and the
    ///   failure code goes as above, in fleets whose designs touch terminal rows too.
    /// - S5 settled and the "published twice" flag (R-S8) not tracked: `stored` becomes `false`.
    pub(super) fn abstract_for_safety(&mut self, config: &WorldConfig, facts: &FleetFacts, abstraction: Abstraction) {
        // What each property and situation reads is declared in the catalogue (core::property);
        // only the ghost fields of ABSTRACTION_READS are read by situations.
        let cap = config.max_attempts + 1;
        let publications_settled = abstraction.no_property_reads(Ghosts::PUBLICATIONS);
        let terminal_settled = abstraction.no_property_reads(Ghosts::PUBLISHED_AT);
        let forget_stored = abstraction.no_situation_reads(Ghosts::STORED)
            && (facts.confirms_after_ack || abstraction.no_property_reads(Ghosts::STORED));
        let drop_code = abstraction.no_situation_reads(Ghosts::FAILURE_CODE)
            && self.requeues_left == 0
            && (facts.keeps_terminal || abstraction.no_property_reads(Ghosts::FAILURE_CODE));
        self.collapse_claim_numbers();
        for m in 0..self.outbox.rows().len() {
            let row = &mut self.outbox.rows_mut()[m];
            if drop_code {
                row.last_failure_code = None;
            }
            if terminal_settled {
                row.published_at = row.published_at.map(|_| Instant(0));
            }
            let (id, attempts) = (row.message_id, row.attempts);
            let Some(g) = self.auditor.ghosts().iter().position(|g| g.message_id == id.0) else { continue };
            let budget_from = self.auditor.ghosts()[g].requeued_after_claim;
            let mut to_publish = 0u32;
            let mut confirming = false;
            for (cycle, effect) in self.relays.iter().flatten() {
                let ours = |l: &&Lease| l.message_id == id && l.claim_seq > budget_from;
                to_publish += cycle.leases_to_publish().iter().filter(ours).count() as u32;
                if let Effect::Write { request } = effect {
                    confirming |= request.lease.message_id == id && request.kind == crate::core::WriteKind::Published;
                }
            }
            let ghost = &mut self.auditor.ghosts_mut()[g];
            if publications_settled {
                ghost.publications = 0;
                ghost.publications_previous = 0;
            } else if facts.counts_at_claim {
                ghost.publications = ghost.publications.max(attempts.saturating_sub(to_publish)).min(cap);
            }
            if forget_stored && !confirming {
                ghost.stored = false;
            }
        }
    }

    /// The claim numbers of [`World::abstract_for_safety`]: on each row whose every lease held
    /// belongs to its current budget, the budget's start becomes 0, the stale leases 1 and the
    /// latest claim the next (ranks, as `normalise_ranks` would give them).
    pub(super) fn collapse_claim_numbers(&mut self) {
        // Per ghost: (row, latest claim, budget start, every lease in the current budget, some
        // lease stale).
        type Claims = (MessageId, u32, u32, bool, bool);
        let mut rows: SmallVec<[Claims; 8]> = self
            .auditor
            .ghosts()
            .iter()
            .map(|g| (MessageId(g.message_id), g.claims, g.requeued_after_claim, g.claims > 0, false))
            .collect();
        self.each_lease(&mut |l| {
            if let Some(r) = rows.iter_mut().find(|r| r.0 == l.message_id) {
                r.3 &= l.claim_seq > r.2;
                r.4 |= l.claim_seq != r.1;
            }
        });
        let top = |stale: bool| if stale { 2 } else { 1 };
        self.each_lease(&mut |l| {
            if let Some(&(_, latest, _, _, stale)) = rows.iter().find(|r| r.0 == l.message_id && r.3) {
                l.claim_seq = if l.claim_seq == latest { top(stale) } else { 1 };
            }
        });
        for (ghost, &(_, _, _, collapse, stale)) in self.auditor.ghosts_mut().iter_mut().zip(&rows) {
            if collapse {
                ghost.claims = top(stale);
                ghost.requeued_after_claim = 0;
                // Read by no lease held, and overwritten by the next requeue.
                ghost.publications_previous = 0;
            }
        }
    }

    /// Relays that run the same design for the same tenant (with the same skew, where the
    /// design reads the relay's clock) under owner ids no other slot shares are interchangeable:
    /// renaming their owner ids in rows and leases and swapping their states gives a world that
    /// behaves the same. Picks, among such swaps, the world with the smallest fingerprint.
    /// Returns the permutation applied: new slot `i` holds what slot `perm[i]` held.
    pub(super) fn canonical_relay_order(&mut self, config: &WorldConfig, facts: &FleetFacts) -> Permutation {
        let mut perm: Permutation = (0..config.relays.len()).collect();
        if facts.swappable.is_empty() {
            return perm;
        }
        let anonymous = |world: &World, i: usize| {
            use std::hash::{Hash, Hasher};
            let mut h = stable_hasher();
            match &world.relays[i] {
                None => 0u8.hash(&mut h),
                Some((cycle, effect)) => cycle.hash_anonymous(effect, &mut h),
            }
            if let Some(timer) = world.timers.get(i) {
                timer.hash(&mut h);
            }
            h.finish()
        };
        for &(a, b) in &facts.swappable {
            let (a, b) = (usize::from(a), usize::from(b));
            let (ka, kb) = (anonymous(self, a), anonymous(self, b));
            let swap = match kb.cmp(&ka) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                // Alike but for names: the world and its swap differ only in the owner ids of
                // rows and leases, so those decide (without building the swap to compare).
                std::cmp::Ordering::Equal => {
                    let (oa, ob) = (config.relays[a].owner, config.relays[b].owner);
                    let rename = |o: RelayId| {
                        if o == oa {
                            ob
                        } else if o == ob {
                            oa
                        } else {
                            o
                        }
                    };
                    let slot = |i: usize| {
                        if i == a {
                            b
                        } else if i == b {
                            a
                        } else {
                            i
                        }
                    };
                    self.owner_key(&rename, &slot) < self.owner_key(&|o| o, &|i| i)
                }
            };
            if swap {
                self.swap_relays(config, a, b);
                perm.swap(a, b);
            }
        }
        perm
    }

    /// A hash of the owner ids this world holds — of its rows, then of the leases of each relay
    /// slot — as they would read with ids renamed by `rename` and slot `i` holding what slot
    /// `slot(i)` holds.
    pub(super) fn owner_key(&self, rename: &dyn Fn(RelayId) -> RelayId, slot: &dyn Fn(usize) -> usize) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = stable_hasher();
        for row in self.outbox.rows() {
            row.lease_owner.map(rename).hash(&mut h);
        }
        for i in 0..self.relays.len() {
            if let Some((cycle, effect)) = &self.relays[slot(i)] {
                i.hash(&mut h);
                cycle.leases().iter().for_each(|l| rename(l.owner).hash(&mut h));
                match effect {
                    Effect::Publish { lease, .. } => rename(lease.owner).hash(&mut h),
                    Effect::Write { request } => rename(request.lease.owner).hash(&mut h),
                    Effect::Claim { .. } | Effect::Done => {}
                }
            }
        }
        h.finish()
    }

    /// Exchanges relay slots `i` and `j` and renames their owner ids.
    pub(super) fn swap_relays(&mut self, config: &WorldConfig, i: usize, j: usize) {
        let (a, b) = (config.relays[i].owner, config.relays[j].owner);
        let rename = |o: RelayId| {
            if o == a {
                b
            } else if o == b {
                a
            } else {
                o
            }
        };
        self.relays.swap(i, j);
        if !self.timers.is_empty() {
            self.timers.swap(i, j);
        }
        for row in self.outbox.rows_mut() {
            row.lease_owner = row.lease_owner.map(rename);
        }
        self.each_lease(&mut |l| l.owner = rename(l.owner));
    }

    /// Fields no rule and no check can read again become constants.
    ///
    /// - `last_failure_code` is read by nothing but the "AMBIGUOUS later PUBLISHED" reachability
    ///   check, which needs only whether it says timeout.
    /// - In a fleet whose every design keeps terminal rows terminal (claims skip them, writes
    ///   check the status first, a stale write says Stale) and with no requeue left, a terminal
    ///   row is only ever compared by status: its other fields, the tokens, attempts and write
    ///   kinds of the leases still held for it, and the broker-stored ghost
    ///   (S5 judges a row when it becomes PUBLISHED) are dead. Its publication count stays while
    ///   a lease for it is held, since a stale relay may still publish it (S3).
    pub(super) fn erase_dead_fields(&mut self, facts: &FleetFacts) {
        let terminal_safe = self.requeues_left == 0 && facts.keeps_terminal;
        let mut dead: SmallVec<[MessageId; 8]> = SmallVec::new();
        for row in self.outbox.rows_mut() {
            // Where a design may write a terminal row, S4 compares the whole row, code included.
            if facts.keeps_terminal && row.last_failure_code != Some(FailureCode::Timeout) {
                row.last_failure_code = None;
            }
            if terminal_safe && row.status.is_terminal() {
                *row = crate::core::Row {
                    attempts: 0,
                    lease_owner: None,
                    lease_token: LeaseToken(0),
                    lease_expires_at: None,
                    next_attempt_at: None,
                    last_failure_code: None,
                    created_at: Instant(0),
                    published_at: None,
                    ..*row
                };
                dead.push(row.message_id);
            }
        }
        if dead.is_empty() {
            return;
        }
        let mut held: SmallVec<[MessageId; 8]> = SmallVec::new();
        self.each_lease(&mut |l| {
            if dead.contains(&l.message_id) {
                held.push(l.message_id);
                l.token = LeaseToken(0);
                l.attempts = 0;
            }
        });
        for (_, effect) in self.relays.iter_mut().flatten() {
            if let Effect::Write { request } = effect {
                if dead.contains(&request.lease.message_id) {
                    request.kind = crate::core::WriteKind::Published;
                }
            }
        }
        for ghost in self.auditor.ghosts_mut() {
            if dead.contains(&MessageId(ghost.message_id)) {
                ghost.stored = false;
                if !held.contains(&MessageId(ghost.message_id)) {
                    ghost.publications = 0;
                }
            }
        }
    }

    pub(super) fn normalise_time(&mut self, config: &WorldConfig, facts: &FleetFacts) {
        let window = config.relays.iter().map(|r| r.skew.min(0).unsigned_abs()).max().unwrap_or(0);
        let now = self.now.0;
        // Signed: early on, `now − W` is before the first instant, and then no instant is past
        // for good yet (saturating it at 0 would make the result depend on how early it is, and
        // normalising twice would not give the same state).
        let horizon = i128::from(now) - i128::from(window);
        // The instants of rows whose fields are dead (see `erase_dead_fields`, which makes them
        // constants afterwards) are compared with nothing: they take no rank, or a state and its
        // normalisation would rank the live instants differently.
        let dead_terminal = self.requeues_left == 0 && facts.keeps_terminal;
        let mut old: SmallVec<[u64; 16]> = SmallVec::new();
        for row in self.outbox.rows() {
            if dead_terminal && row.status.is_terminal() {
                continue;
            }
            old.push(row.created_at.0);
            old.extend(row.next_attempt_at.map(|t| t.0));
            // A visibility timeout's retry time, kept in the lease's column of a row that is not
            // IN_FLIGHT, orders the claim as a retry time does (`Row::retry_at`).
            if row.status != Status::InFlight {
                old.extend(row.lease_expires_at.map(|t| t.0));
            }
        }
        // Instants at or before the horizon are past for every clock that may still read them,
        // now and later: only their order among themselves is left to compare.
        old.retain(|t| i128::from(*t) <= horizon);
        old.sort_unstable();
        old.dedup();
        // A rescuer that waits until an expiry has passed (`maintenance.after_expiry`) compares
        // `expiry < clock`: an expiry at the horizon is not past yet, and one past for good must
        // stay below every clock, so the instants after the horizon start one rank higher.
        let strict = config.rescues_after_expiry();
        let base = old.len() as u64 + u64::from(strict);
        let map = |t: u64| {
            if i128::from(t) <= horizon {
                rank_in(&old, t) as u64
            } else {
                base + (i128::from(t) - horizon) as u64
            }
        };
        for row in self.outbox.rows_mut() {
            row.created_at = Instant(map(row.created_at.0));
            row.next_attempt_at = row.next_attempt_at.map(|t| Instant(map(t.0)));
            // Every clock that may still read an expiry reads at least `horizon`, and expiries
            // are only ever compared as `expiry <= clock`: one at or before the horizon has
            // expired for good, however long ago.
            // (A retry time in the lease's column is ranked like the other retry times.)
            let in_flight = row.status == Status::InFlight;
            // A session's lease (`Instant::NEVER`) ends with its session, not with time: it stays.
            row.lease_expires_at = row.lease_expires_at.map(|t| {
                Instant(if t == Instant::NEVER {
                    t.0
                } else if in_flight && (i128::from(t.0) < horizon || (!strict && i128::from(t.0) == horizon)) {
                    0
                } else if in_flight && i128::from(t.0) == horizon {
                    base
                } else {
                    map(t.0)
                })
            });
            // `published_at` is read only by S4's comparison of a terminal row before and after
            // a step, in fleets where a design may write a terminal row: there it is compared
            // for equality with the `now` of a write to come, which reads at least the horizon.
            // One before the horizon can equal none of those: it becomes "long ago"; later ones
            // keep their distance from now. Elsewhere it is read by nothing.
            row.published_at = row.published_at.map(|t| {
                if facts.keeps_terminal {
                    Instant(0)
                } else if t == PUBLISHED_LONG_AGO || i128::from(t.0) < horizon {
                    PUBLISHED_LONG_AGO
                } else {
                    Instant(base + (i128::from(t.0) - horizon) as u64)
                }
            });
        }
        // A relay's retry timer is compared only with its own clock, which reads at least the
        // horizon; the auditor's retry promise only with true time, which reads at least now.
        // Past those, each is due for good; later ones keep their distance.
        for timer in &mut self.timers {
            *timer = timer.filter(|t| i128::from(t.0) > horizon).map(|t| Instant(map(t.0)));
        }
        for ghost in self.auditor.ghosts_mut() {
            ghost.retry_promise = ghost.retry_promise.filter(|t| t.0 > now).map(|t| Instant(map(t.0)));
        }
        self.now = Instant(base + window);
    }

    /// Calls `f` on every copy of a lease the relays hold (in their cycles and pending effects).
    pub(super) fn each_lease(&mut self, f: &mut dyn FnMut(&mut Lease)) {
        if let Some(lease) = self.rescuer.as_mut() {
            f(lease);
        }
        for (cycle, effect) in self.relays.iter_mut().flatten() {
            cycle.leases_mut().iter_mut().for_each(&mut *f);
            match effect {
                Effect::Publish { lease, .. } => f(lease),
                Effect::Write { request } => f(&mut request.lease),
                Effect::Claim { .. } | Effect::Done => {}
            }
        }
    }
}

/// What the safety check still looks at, so that its abstractions ([`World::normalise_by`] with
/// `Some`) may merge states that differ only in what it no longer reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Abstraction {
    /// The reachability flags still tracked (bits as [`Situation::bit`]): a
    /// field one of them reads is left alone.
    pub tracked: u16,
    /// The safety properties already settled (bits in [`Property::SAFETY`]'s order): an exact
    /// search has a path that breaks each, so the check no longer looks at them, and a ghost
    /// field only settled properties read is erased (see [`World::abstract_for_safety`]).
    pub settled: u16,
}

impl Abstraction {
    /// Tracking the flags in `tracked`, every safety property still looked at.
    pub const fn tracking(tracked: u16) -> Abstraction {
        Abstraction { tracked, settled: 0 }
    }

    /// Nothing tracked and every safety property settled: what a liveness graph needs, whose
    /// checks read no flag and no safety property.
    pub const LIVENESS: Abstraction = Abstraction { tracked: 0, settled: (1 << Property::SAFETY.len()) - 1 };

    pub(super) fn settles(self, property: Property) -> bool {
        Property::SAFETY.contains(&property) && self.settled & property.bit() != 0
    }

    /// No situation still tracked reads any of `ghosts`.
    pub(super) fn no_situation_reads(self, ghosts: Ghosts) -> bool {
        self.tracked & Situation::reading(ghosts) == 0
    }

    /// No safety property still looked at (not settled) reads any of `ghosts`.
    pub(super) fn no_property_reads(self, ghosts: Ghosts) -> bool {
        Property::SAFETY.iter().all(|p| self.settles(*p) || !p.entry().reads.overlaps(ghosts))
    }
}

/// A normalised `published_at` before the horizon: no write to come can read it as its `now`.
pub const PUBLISHED_LONG_AGO: Instant = Instant(u64::MAX);

/// The situations (bits as [`Situation::bit`]) whose ghost fields the safety abstractions leave
/// alone while they are tracked, as the catalogue declares their reads: R-S8 reads the broker's
/// storage, R-S7 the failure code. Tracking any other situation normalises exactly as tracking
/// none.
pub const ABSTRACTION_READS: u16 = Situation::reading(Ghosts::STORED.union(Ghosts::FAILURE_CODE));

/// What normalisation needs to know of the fleet's designs: read once per model, not per state.
#[derive(Clone, Debug)]
pub struct FleetFacts {
    resets_tokens: bool,
    random_tokens: bool,
    /// Every claim bumps the token and every write checks it.
    fenced: bool,
    /// No design touches a terminal row.
    keeps_terminal: bool,
    /// The pairs of relay slots `(a, b)`, `a < b`, in the order [`World::canonical_relay_order`]
    /// tries them: same design, tenant and (where the design reads it) clock, and owner ids no
    /// other slot shares.
    swappable: SmallVec<[(u8, u8); 4]>,
    /// Every design counts `attempts` at the claim, under the strict budget predicate, and
    /// publishes once per lease.
    counts_at_claim: bool,
    /// No design writes PUBLISHED but right after its own acknowledged publication.
    confirms_after_ack: bool,
}

impl FleetFacts {
    pub fn of(config: &WorldConfig) -> FleetFacts {
        use crate::core::policy::{AttemptsAt, BudgetPredicate, ClaimFence, WriteFence};
        let policies: SmallVec<[Policy; 4]> = (0..config.relays.len()).map(|i| config.policy(i)).collect();
        FleetFacts {
            resets_tokens: policies.iter().any(|p| p.requeue_resets_token),
            random_tokens: policies.iter().any(|p| p.token_kind == TokenKind::Random),
            fenced: policies.iter().all(|p| {
                p.claim_fence == ClaimFence::OwnerAndToken
                    && p.write_fences().all(|f| matches!(f, WriteFence::StatusOwnerToken | WriteFence::StatusToken))
                    && !p.swallow_stale
                    && !p.requeue_resets_token
                    && p.rescue != Some(crate::core::ReleaseFence::Id)
                    && !p.release_by_owner
                    && p.renewal == crate::core::policy::Renewal::None
            }),
            keeps_terminal: policies.iter().all(|p| {
                !p.claim_terminal
                    && p.write_fences().all(|f| f != WriteFence::MessageIdOnly)
                    && !p.swallow_stale
                    && p.rescue != Some(crate::core::ReleaseFence::Id)
            }),
            swappable: {
                let n = config.relays.len();
                let key = |i: usize| {
                    let spec = &config.relays[i];
                    let relay_clock = policies[i].relay.reads_relay_clock();
                    (spec.design, spec.tenant_id, if relay_clock { spec.skew } else { 0 })
                };
                let unique_owner =
                    |i: usize| config.relays.iter().filter(|r| r.owner == config.relays[i].owner).count() == 1;
                let mut pairs = SmallVec::new();
                for a in 0..n {
                    for b in (a + 1)..n {
                        if key(a) == key(b) && unique_owner(a) && unique_owner(b) {
                            pairs.push((a as u8, b as u8));
                        }
                    }
                }
                pairs
            },
            counts_at_claim: policies.iter().all(|p| {
                p.attempts_at == AttemptsAt::Claim
                    && p.budget == BudgetPredicate::Strict
                    && !p.relay.republish_after_db_loss
            }),
            confirms_after_ack: policies
                .iter()
                .all(|p| !p.relay.publish_before_ack && !p.relay.republish_after_db_loss),
        }
    }
}

/// A ghost's publication counts, compared only with the budget, saturate at `cap` (`max + 1`);
/// the lifetime count is not a state at all.
pub(super) fn saturate_publications(ghost: &mut crate::core::RowGhost, cap: u32) {
    ghost.publications = ghost.publications.min(cap);
    ghost.publications_previous = ghost.publications_previous.min(cap);
    ghost.publications_total = 0;
}

/// The rank of `value` in a short sorted slice: how many of its elements are smaller (a linear
/// scan beats a binary search at the sizes normalisation ranks).
pub(super) fn rank_in<T: Ord + Copy>(sorted: &[T], value: T) -> usize {
    sorted.iter().take_while(|&&x| x < value).count()
}
