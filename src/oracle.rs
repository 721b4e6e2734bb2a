//! The reference oracle: replays a history recorded by any implementation on the core and says
//! whether the model allows it — or where it first does not.
//!
//! Feed it [`trace::Event`](crate::trace::Event)s in the order the implementation committed them.
//! Each event is applied to the model (the core through the auditor, with the trace's own `now`)
//! and what the implementation reported is compared with what the model says. A statement whose
//! outcome the implementation could not learn (a lost connection) is checked under both
//! resolutions — committed or not — and the history is accepted if any resolution stays
//! consistent; the verdict says which one was used.
//!
//! A [`Divergence`] is returned by value through every step (clippy's `result_large_err`): it is
//! made at most once per branch, where the check of that branch ends, so its size costs nothing
//! on the path every consistent event takes.
//!
//! ```
//! use outbox_check::oracle::Oracle;
//! use outbox_check::trace::{parse, Event};
//!
//! let text = r#"{"format":"outbox-check-trace","version":2,"max_attempts":3}
//! {"event":"enqueue","tenant":"t","aggregate":"a","expected_version":0,"message":"m1","now":0,"result":"applied"}
//! {"event":"claim","relay":"r1","tenant":"t","batch":1,"lease_ms":30000,"now":10,"leases":[{"message":"m1","token":"1","attempts":1}]}
//! {"event":"publish","relay":"r1","message":"m1","key":"m1","answer":"ack"}
//! {"event":"write","relay":"r1","write":"mark_published","message":"m1","tenant":"t","token":"1","now":20,"result":"applied"}"#;
//! let (header, events) = parse("example.jsonl", text).unwrap();
//! let mut oracle = Oracle::new(&header).unwrap();
//! for (line, event) in &events {
//!     oracle.feed(*line, event).unwrap();
//! }
//! assert!(oracle.finish().unwrap().resolutions.is_empty());
//! ```
#![allow(clippy::result_large_err)]

use crate::core::{
    AggregateId, Auditor, Breach, ClaimRefusal, ClaimRequest, CoreError, Duration, EnqueueRequest, EnqueueResult,
    FailureCode, IdempotencyKey, Instant, Lease, LeaseToken, MessageId, Names as Naming, Outbox, Policy, Property,
    RelayId, ReleaseFence, ReleaseRequest, RequeueResult, Row, StaleReason, Status, TenantId, WriteKind, WriteRequest,
    WriteResult,
};
use crate::design::Design;
use crate::trace::{Event, Header, Outcome, PublishAnswer, WriteReport};
use serde::Serialize;
use smallvec::{smallvec, SmallVec};

mod names;
mod step;
mod verdict;
mod words;
use names::*;
use step::*;
pub use verdict::*;
pub use words::row_words;
use words::*;

/// Checks a history held in memory against `design` with everything else its header declares.
pub fn check<'a>(
    design: Design,
    header: &Header,
    events: impl IntoIterator<Item = (usize, &'a Event)>,
    mode: Mode,
) -> Verdict {
    let mut oracle = Oracle::for_header(design, header).mode(mode);
    for (line, event) in events {
        if !oracle.check_event(line, event) {
            break;
        }
    }
    oracle.verdict()
}

/// A lease the implementation holds, under its own token string.
#[derive(Clone, Debug, PartialEq, Hash)]
struct Held {
    relay: RelayId,
    token: TokenName,
    lease: Lease,
    /// The relay's own write for this lease has run (whatever it reported): it publishes under
    /// it no more.
    ended: bool,
    /// The line of the claim that handed it out.
    line: usize,
}

/// The name a claim without a token gets: a lease of its own, named by its line.
const TOKENLESS: &str = "(claim at line ";

impl Held {
    /// Whether this is the lease a write by `relay` of `id` presents: the one its token names;
    /// without one, the one whose attempt it names, else the relay's latest (searched from the
    /// end).
    fn presented_by(&self, relay: RelayId, id: MessageId, token: Option<&str>, attempt: Option<u32>) -> bool {
        self.relay == relay
            && self.lease.message_id == id
            && match (token, attempt) {
                (Some(t), _) => self.token.is(t),
                (None, Some(a)) => self.lease.attempts == a,
                (None, None) => true,
            }
    }

    /// The token as the history wrote it (none for a claim without one).
    fn token_text(&self) -> Option<String> {
        match &self.token {
            TokenName::Number(n) => Some(n.to_string()),
            TokenName::Text(t) if t.starts_with(TOKENLESS) => None,
            TokenName::Text(t) => Some(t.to_string()),
        }
    }
}

/// The tokens the history's claims handed out for one row, for S2: a claim's token must be one
/// the row never had, and under a counter design greater than every earlier one — for numeric
/// tokens of a counter design the largest so far says both, so only that is kept.
#[derive(Clone, Debug, Default)]
struct RowTokens {
    /// The tokens that the largest does not stand for, with the line of their claim.
    seen: Vec<(TokenName, usize)>,
    /// The largest numeric one and its line.
    max: Option<(u64, usize)>,
}

/// An implementation's token string, kept without an allocation when it is a plain decimal
/// number (most are): a history holds one per claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum TokenName {
    Number(u64),
    Text(Box<str>),
}

impl TokenName {
    /// `text` as a number when it is one written canonically (no sign, no leading zero).
    fn number(text: &str) -> Option<u64> {
        let canonical =
            !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
        canonical.then(|| text.parse().ok()).flatten()
    }

    fn new(text: &str) -> TokenName {
        TokenName::number(text).map_or_else(|| TokenName::Text(text.into()), TokenName::Number)
    }

    fn is(&self, text: &str) -> bool {
        match self {
            TokenName::Number(n) => TokenName::number(text) == Some(*n),
            TokenName::Text(t) => **t == *text,
        }
    }
}

/// An implementation's names of one kind, each numbered in order of first appearance: the text
/// of all of them in one string, and a hash table of numbers looked up by the names they stand
/// for. A history names every message and aggregate; a map of `String` keys would cost an
/// allocation and some 40 bytes per name more.
#[derive(Default)]
struct Names {
    text: String,
    /// `ends[id]`: where name `id` ends in `text` (it starts where `id - 1` ends).
    ends: Vec<u32>,
    table: hashbrown::HashTable<u32>,
    hasher: ahash::RandomState,
}

impl Names {
    fn name(&self, id: u32) -> Option<&str> {
        name_in(&self.text, &self.ends, id)
    }

    /// The number of `name`, given one if it is new.
    fn id(&mut self, name: &str) -> u32 {
        let Names { text, ends, table, hasher } = self;
        let hash = hasher.hash_one(name);
        if let Some(&id) = table.find(hash, |&id| name_in(text, ends, id) == Some(name)) {
            return id;
        }
        let id = ends.len() as u32;
        text.push_str(name);
        ends.push(text.len() as u32);
        table.insert_unique(hash, id, |&id| hasher.hash_one(name_in(text, ends, id).unwrap_or_default()));
        id
    }
}

/// One way the history so far can have happened.
#[derive(Clone, Debug)]
struct Branch {
    outbox: Outbox,
    auditor: Auditor,
    held: Vec<Held>,
    resolutions: Vec<String>,
    /// Writes with an unknown outcome not resolved yet: each touches one row, so it forks the
    /// branch only when a later event touches that row (or a reap looks at every row).
    /// Unknown writes to different rows are independent: deferring them keeps the branches
    /// from multiplying while many are open at once.
    deferred: Vec<Deferred>,
    /// Every row that may not be terminal (enqueued or requeued since last looked at): where a
    /// claim's expected rows are looked for, instead of the whole table.
    open: Vec<MessageId>,
    /// Rows a skip-locked claim passed over while they were claimable, with no evidence yet that
    /// another transaction held them (see [`Oracle::judge_skips`]).
    skips: Vec<Skip>,
    /// A safety property this resolution broke (a claim of unknown outcome that, committed, broke
    /// one by the design's own rule): reported if no resolution without one survives.
    broke: Option<Box<Divergence>>,
    /// The rows each open claim of unknown outcome is taken to hold locked in this resolution
    /// (see [`Oracle::held_elsewhere`]).
    holds: SmallVec<[ClaimHolds; 1]>,
    /// The skips this event's claim of unknown outcome was taken to excuse (see
    /// [`Oracle::any_holds`]): its committed resolution, which took the rows it took, keeps only
    /// the excuses that still fit.
    excused: Vec<Skip>,
}

/// The rows a claim of unknown outcome (by its line) has been taken to hold: the rows its
/// committed resolution took (`full`: it holds no other), or the passed-over rows it was the
/// only excuse for — never more than its batch, for a transaction keeps the rows it locked.
#[derive(Clone, Debug, PartialEq, Hash)]
struct ClaimHolds {
    claim: usize,
    rows: SmallVec<[HeldRow; 2]>,
    full: bool,
}

/// A row a claim of unknown outcome is taken to hold, and the skip that needs it held: the
/// passing-over claim committed at line `skip`, its statement having begun after line `begin`.
/// (A committed resolution's rows need no skip: `skip` 0.)
#[derive(Clone, Copy, Debug, PartialEq, Hash)]
struct HeldRow {
    message: MessageId,
    begin: usize,
    skip: usize,
}

/// A claim of unknown outcome: its transaction may hold up to `batch` rows it could take (of
/// its tenant, where the design's claim is scoped to one) — the same ones throughout — from
/// after line `began` (its statement's start) until `end`, the line where its relay logged
/// again (`None` while it has not). It saw no row enqueued after its own line.
#[derive(Clone, Copy, Debug)]
struct AnyClaim {
    actor: u16,
    tenant: Option<TenantId>,
    line: usize,
    began: usize,
    batch: u32,
    end: Option<usize>,
}

impl AnyClaim {
    /// The claim of unknown outcome an event that locks `locked` is, where it is one: by
    /// `actor`, logged at `line`, its statement begun after line `began`.
    fn of(locked: &Locked, actor: u16, line: usize, began: usize) -> Option<AnyClaim> {
        let &Locked::Any { tenant, batch } = locked else { return None };
        Some(AnyClaim { actor, tenant, line, began, batch, end: None })
    }

    /// Whether it could have held the lock of a row of `tenant` enqueued at line `enqueued`
    /// while a skip-locked claim that began after line `begin` and committed at line `skip`
    /// passed over it.
    fn could_hold(&self, tenant: TenantId, enqueued: usize, begin: usize, skip: usize) -> bool {
        self.tenant.is_none_or(|t| t == tenant)
            && enqueued < self.line
            && self.began < skip
            && self.end.is_none_or(|end| end > begin)
    }
}

/// A claimable row a skip-locked claim did not return: excused once the history shows another
/// transaction that could have held the row's lock while the claim ran.
#[derive(Clone, Debug)]
struct Skip {
    /// The claim's line (its commit, in the history's order), and the line after which its
    /// statement began.
    line: usize,
    begin: usize,
    /// Every relay known has logged since: only a relay not seen yet could still excuse it.
    settled: bool,
    message: MessageId,
    /// The row as it was, and the claim, for the report.
    row: Row,
    claim: std::sync::Arc<Event>,
}

impl PartialEq for Skip {
    fn eq(&self, other: &Skip) -> bool {
        self.line == other.line && self.message == other.message && self.settled == other.settled
    }
}

impl std::hash::Hash for Skip {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.line, self.message).hash(state);
    }
}

/// What the history says about one row's locks, for the skip-locked rule: the latest line at
/// which a transaction that locked it may still have been open, and the actors whose statement
/// on it has an unknown outcome and who have logged nothing since (their transaction may still
/// hold it).
#[derive(Clone, Debug, Default)]
struct RowLock {
    end: usize,
    open: SmallVec<[u16; 1]>,
    /// The line of the latest write to the row whose outcome is unknown.
    unknown_write: Option<usize>,
}

/// What an actor's latest statement of unknown outcome may still hold locked.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Open {
    Row(MessageId),
    /// Rows a claim could take (see [`AnyClaim`]).
    Any,
}

/// A terminal write whose outcome the implementation could not learn, resolved lazily.
#[derive(Clone, Debug, PartialEq, Hash)]
struct Deferred {
    line: usize,
    write: String,
    req: WriteRequest,
    /// The retry time the implementation chose, if it said.
    retry_at: Option<u64>,
    /// The write's event, for the divergence its committed resolution may carry.
    event: EventAt,
}

/// An event kept beside its line: the line names it, so it takes no part in comparing or
/// hashing what holds it.
#[derive(Clone, Debug)]
struct EventAt(std::sync::Arc<Event>);

impl PartialEq for EventAt {
    fn eq(&self, _: &EventAt) -> bool {
        true
    }
}

impl std::hash::Hash for EventAt {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// Branches beyond this many are pruned (each unknown outcome can double them).
const BRANCHES_MAX: usize = 4096;

pub struct Oracle {
    policy: Policy,
    max_attempts: u32,
    /// The implementation's names by kind (message, tenant, relay, aggregate), each mapped to a
    /// small number in order of first appearance.
    names: [Names; 4],
    /// The last name looked up per kind and its id: a history names the same relay, tenant and
    /// message on consecutive lines, and a string comparison is cheaper than a hash lookup.
    last_name: [(String, u32); 4],
    branches: Vec<Branch>,
    events: usize,
    dropped: bool,
    /// Per message (by id): the tokens claims returned. The same in every branch, since claims
    /// whose outcome is known are the same everywhere and unknown ones return no token.
    tokens: Vec<RowTokens>,
    /// The history's claims ran one at a time: each must return exactly the rows the design's
    /// claim returns (header `concurrency: serial`).
    serial: bool,
    /// The history has logged an enqueue / a publication so far. A job queue with no business
    /// transaction logs no enqueue: its rows are taken as enqueued when first claimed.
    seen_enqueue: bool,
    seen_publish: bool,
    /// Some claim of the history carried no token.
    tokenless: bool,
    /// Safety findings of resolutions that failed while others went on: should the others fail
    /// later, the history breaks one of these or what they fail with.
    died: Vec<Divergence>,
    /// The first line where a violation was left unjudged for want of those events.
    unjudged_at: std::cell::Cell<Option<usize>>,
    /// The header the history declared (its status names).
    header: Header,
    /// Per actor (relay id; the reaper and the operator have ids of their own): the line of its
    /// latest event, whether it ever claimed, and its latest statement of unknown outcome if it
    /// has logged nothing since. An actor runs one statement at a time: a statement began after
    /// its actor's previous event committed.
    actor_last: Vec<usize>,
    actor_claims: Vec<bool>,
    /// The actors the header lists (`relays`): every one that may run.
    declared: Option<Vec<u16>>,
    actor_open: Vec<Option<Open>>,
    /// Per message (by id): its locks as the history shows them.
    locks: Vec<RowLock>,
    /// Claims of unknown outcome (which may hold rows they could take): those over, and those
    /// whose relay has logged nothing since.
    any: Vec<AnyClaim>,
    /// Per message (by id): the line of its enqueue (0 where the history has none).
    enqueued_at: Vec<usize>,
    /// How far [`Oracle::check_event`] goes, what it found so far, and whether it stopped.
    mode: Mode,
    found: Vec<Divergence>,
    stopped: bool,
    /// The line of the last event checked (where the check stopped, if it did).
    last_line: usize,
}

impl Oracle {
    pub fn new(header: &Header) -> Result<Oracle, String> {
        let variant = header.variant.as_deref().unwrap_or("reference");
        if variant.contains('+') && Design::parse(variant).is_none() {
            return Err(format!(
                "'{variant}' is a mixed fleet: the oracle checks a history against one design; pass --variant to choose it"
            ));
        }
        let design = Design::parse(variant)
            .ok_or_else(|| format!("unknown variant '{variant}'; valid: {}", Design::all_names().join(", ")))?;
        Ok(Oracle::for_header(design, header))
    }

    /// An oracle for `design` (in place of the header's variant) with everything else the
    /// header declares: budget, retry clock, concurrency, design switches, status names.
    pub fn for_header(design: Design, header: &Header) -> Oracle {
        let mut oracle = Oracle::for_design(design, header.max_attempts, header.backoff_base, header.backoff_cap);
        if let Some(switches) = &header.design {
            oracle.policy = switches.apply(oracle.policy);
        }
        oracle.serial = header.claims() == crate::trace::Concurrency::Serial;
        oracle.header = header.clone();
        if let Some(relays) = &header.relays {
            let ids = relays.iter().map(|r| oracle.relay(r).0).collect();
            oracle.declared = Some(ids);
        }
        oracle
    }

    /// Judges claims as serial (`true`) or skip-locked.
    pub fn serial(mut self, serial: bool) -> Oracle {
        self.serial = serial;
        self
    }

    /// Goes on after a divergence, from what the implementation reported (`--all`,
    /// `--safety-only`): the next event is checked against the table the history says it left.
    fn keep_going(&self) -> bool {
        self.mode != Mode::First
    }

    /// Checks with [`Oracle::check_event`] and [`Oracle::verdict`] in `mode`.
    pub fn mode(mut self, mode: Mode) -> Oracle {
        self.mode = mode;
        self
    }

    /// Checks the next event of the history; false once the check stops (its mode says how
    /// far it goes after a divergence).
    pub fn check_event(&mut self, line: usize, event: &Event) -> bool {
        if self.stopped {
            return false;
        }
        self.last_line = line;
        if let Err(d) = self.feed(line, event) {
            let fails = self.mode.fails(&d);
            self.found.push(d);
            self.stopped = self.mode != Mode::All && fails;
        }
        !self.stopped
    }

    /// The verdict on the events checked: what [`Oracle::check_event`] found and, unless it
    /// stopped, what the end of the history settles.
    pub fn verdict(mut self) -> Verdict {
        let (mode, stopped, mut divergences) = (self.mode, self.stopped, std::mem::take(&mut self.found));
        let (accepted, at_end) = self.finish_all();
        if !stopped {
            divergences.extend(at_end);
        }
        Verdict { mode, divergences, accepted, stopped }
    }

    /// An oracle for `design` with a budget and the retry clock's base and cap.
    pub fn for_design(
        design: Design,
        max_attempts: u32,
        backoff_base: Option<u64>,
        backoff_cap: Option<u64>,
    ) -> Oracle {
        let mut policy = design.policy();
        if let Some(base) = backoff_base {
            policy.backoff.base = Duration(base);
        }
        if let Some(cap) = backoff_cap {
            policy.backoff.cap = Duration(cap);
        }
        Oracle {
            policy,
            max_attempts,
            names: Default::default(),
            last_name: Default::default(),
            branches: vec![Branch {
                outbox: Outbox::new(),
                auditor: Auditor::new(max_attempts),
                held: Vec::new(),
                resolutions: Vec::new(),
                deferred: Vec::new(),
                open: Vec::new(),
                skips: Vec::new(),
                excused: Vec::new(),
                broke: None,
                holds: SmallVec::new(),
            }],
            events: 0,
            dropped: false,
            tokens: Vec::new(),
            serial: false,
            seen_enqueue: false,
            seen_publish: false,
            tokenless: false,
            unjudged_at: std::cell::Cell::new(None),
            died: Vec::new(),
            header: Header::new(design.name(), max_attempts),
            actor_last: Vec::new(),
            actor_claims: Vec::new(),
            declared: None,
            actor_open: Vec::new(),
            locks: Vec::new(),
            any: Vec::new(),
            enqueued_at: Vec::new(),
            mode: Mode::First,
            found: Vec::new(),
            stopped: false,
            last_line: 0,
        }
    }

    /// S2 from the history itself: each token a claim returns is new for its row (and, where the
    /// design's tokens count up, greater than every earlier one). The model's own tokens are
    /// always fresh, so only the implementation's can tell.
    fn check_tokens(&mut self, line: usize, event: &Event, plan: &Plan) -> Result<(), Divergence> {
        let (Event::Claim { leases, outcome: Outcome::Ok, .. }, Plan::Ids { messages, .. }) = (event, plan) else {
            return Ok(());
        };
        let counter = self.policy.token_kind == crate::core::policy::TokenKind::Counter;
        let mut first = None;
        for (got, id) in leases.iter().zip(messages) {
            // A claim without a token has nothing to compare: the implementation cannot fence.
            let Some(got_token) = &got.token else {
                self.tokenless = true;
                continue;
            };
            let i = id.0 as usize;
            if self.tokens.len() <= i {
                self.tokens.resize_with(i + 1, RowTokens::default);
            }
            let row = &mut self.tokens[i];
            let token = TokenName::new(got_token);
            let message = *id;
            let token_text = got_token.clone();
            let reused = |at: usize| Some(Finding::TokenReused { message, token: token_text.clone(), at });
            let problem = match (&token, row.max) {
                (TokenName::Number(n), Some((max, at))) if *n == max => reused(at),
                (TokenName::Number(n), Some((max, at))) if counter && *n < max => {
                    Some(Finding::TokenLower { message, token: got_token.clone(), max, at })
                }
                _ => row.seen.iter().find(|(t, _)| *t == token).and_then(|&(_, at)| reused(at)),
            };
            if let Some(finding) = problem {
                // The claim's other leases are still recorded: going on (--all), a later claim
                // is judged against every token this one handed out.
                if first.is_none() {
                    let mut d = Divergence::new(line, event, Blame::Safety(Property::S2), finding, &[], self);
                    d.resolutions_dropped = self.dropped;
                    first = Some(d);
                }
                continue;
            }
            // A counter design's numeric tokens only grow (or S2 stopped the history above):
            // the largest stands for all of them. Any other token is kept to compare with.
            match token {
                TokenName::Number(n) if row.max.is_none_or(|(max, _)| n > max) => {
                    if let Some((max, at)) = row.max.filter(|_| !counter) {
                        row.seen.push((TokenName::Number(max), at));
                    }
                    row.max = Some((n, line));
                }
                other => row.seen.push((other, line)),
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Checks one event. After a divergence the oracle's state is unspecified: a caller should
    /// stop at the first divergence.
    pub fn feed(&mut self, line: usize, event: &Event) -> Result<(), Divergence> {
        let plan = self.plan(event);
        self.seen_enqueue |= matches!(event, Event::Enqueue { .. });
        self.seen_publish |= matches!(event, Event::Publish { .. });
        let actor = match (event, &plan) {
            (Event::Enqueue { .. } | Event::Clock { .. } | Event::Fault { .. }, _) | (_, Plan::Nothing) => None,
            (_, Plan::Ids { relay, .. }) => Some(relay.0),
        };
        let begin = actor.map_or(0, |a| self.enter(a, line, matches!(event, Event::Claim { .. })));
        if let (Event::Enqueue { .. }, Plan::Ids { messages, .. }) = (event, &plan) {
            let i = messages[0].0 as usize;
            if self.enqueued_at.len() <= i {
                self.enqueued_at.resize(i + 1, 0);
            }
            if self.enqueued_at[i] == 0 {
                self.enqueued_at[i] = line;
            }
        }
        // The line every relay that claims has logged an event after: a skip older than that can
        // be excused by no later statement.
        // Every relay the header lists, or else every relay seen claiming so far (one that first
        // appears later may have begun its first statement at any time: a skip settled that way
        // is only given up where another resolution needs no excuse).
        let seen =
            self.actor_last.iter().zip(&self.actor_claims).filter(|(_, c)| **c).map(|(l, _)| *l).min().unwrap_or(0);
        let declared = self.declared.as_ref().map_or(0, |actors| {
            actors.iter().map(|a| self.actor_last.get(*a as usize).copied().unwrap_or(0)).min().unwrap_or(0)
        });
        let settled = (seen, declared);
        // A claim of unknown outcome that was over before this statement and every declared
        // relay's next one began can excuse no skip to come: it and what it held are forgotten.
        let floor = declared.min(begin);
        if self.any.iter().any(|c| c.end.is_some_and(|end| end <= floor)) {
            let over = |line: usize| self.any.iter().any(|c| c.line == line && c.end.is_some_and(|end| end <= floor));
            for b in &mut self.branches {
                b.holds.retain(|h| !over(h.claim));
            }
            self.any.retain(|c| c.end.is_none_or(|end| end > floor));
        }
        let locked = locked_by(event, &plan, self.policy.claim_by_tenant);
        let mut token_divergence = None;
        if let Err(d) = self.check_tokens(line, event, &plan) {
            if !self.keep_going() {
                return Err(d);
            }
            token_divergence = Some(d);
        }
        // Every failing resolution's divergence: the one reported is chosen from all of them.
        let mut failures: Vec<Divergence> = Vec::new();
        let mut branches = std::mem::take(&mut self.branches);
        let before = branches.len();
        if branches.iter().any(|b| !b.deferred.is_empty()) {
            branches = branches.into_iter().flat_map(|b| self.resolve_deferred(b, event, &plan)).collect();
        }
        if let Some(claim) = actor.and_then(|a| AnyClaim::of(&locked, a, line, begin)) {
            branches = branches.into_iter().flat_map(|b| self.any_holds(b, &claim)).collect();
        }
        // Each branch steps in place (a history without unknown outcomes has one, moved never);
        // a claim of unknown outcome adds its committed twin after the others. Going on after
        // a divergence, a branch that diverges goes on from what the implementation reported.
        let mut twins = Vec::new();
        let mut went_on = Vec::new();
        let mut any_ok = false;
        branches.retain_mut(|b| {
            let skipped = self.judge_skips(b, begin, settled, &locked);
            if skipped.is_err() && !self.keep_going() {
                failures.extend(skipped.err().map(|d| self.in_your_names(d, b)));
                return false;
            }
            let saved = self.keep_going().then(|| b.clone());
            match self.step(b, line, event, &plan, begin) {
                Ok(twin) => {
                    self.forget(b, &plan, event);
                    if let Some(mut twin) = twin {
                        self.forget(&mut twin, &plan, event);
                        twins.push(twin);
                    }
                    match skipped {
                        Ok(()) => {
                            any_ok = true;
                            true
                        }
                        Err(d) => {
                            failures.push(self.in_your_names(d, b));
                            went_on.push(b.clone());
                            false
                        }
                    }
                }
                Err(divergence) => {
                    let d = skipped.err().unwrap_or(divergence);
                    // A resolution that already broke a property is reported by that.
                    match b.broke.take() {
                        Some(broke) => failures.push(*broke),
                        None => failures.push(self.in_your_names(d, b)),
                    }
                    if let Some(mut saved) = saved {
                        self.adopt(&mut saved, line, event, &plan);
                        self.forget(&mut saved, &plan, event);
                        went_on.push(saved);
                    }
                    false
                }
            }
        });
        branches.append(&mut twins);
        // A resolution whose skip only a relay not seen yet could excuse gives way to one that
        // needs no such excuse (an unknown write that committed, say).
        if branches.len() > 1
            && branches.iter().any(|b| b.skips.iter().any(|s| s.settled))
            && branches.iter().any(|b| b.skips.iter().all(|s| !s.settled))
        {
            branches.retain(|b| b.skips.iter().all(|s| !s.settled));
        }
        // Resolutions that failed here while others go on: their safety findings are kept.
        if !branches.is_empty() {
            let others: Vec<Vec<String>> = branches.iter().map(|b| b.resolutions.clone()).collect();
            let died: Vec<Divergence> = failures.iter().filter(|d| d.blame.is_safety()).cloned().collect();
            let died: Vec<Divergence> = died.into_iter().map(|d| d.under(&others, self)).collect();
            self.died.extend(died);
        }
        // Only resolutions that broke a property are left: the history breaks it, or what the
        // others failed with.
        let clean = branches.iter().any(|b| b.broke.is_none());
        if !branches.is_empty() && !clean && token_divergence.is_none() {
            let mut found: Vec<Divergence> = branches.iter().filter_map(|b| b.broke.as_deref().cloned()).collect();
            found.extend(failures.drain(..).filter(|d| !d.blame.is_safety()));
            found.append(&mut self.died);
            let d = choose(found);
            if let Some(d) = d {
                for b in &mut branches {
                    b.broke = None;
                }
                self.record_locks(actor, line, begin, event, &locked);
                self.finish_step(branches, before);
                return Err(d);
            }
        }
        any_ok |= !branches.is_empty();
        self.record_locks(actor, line, begin, event, &locked);
        let mut next = branches;
        let divergence = match (token_divergence, any_ok) {
            (Some(d), _) => Some(d),
            (None, false) => {
                Some(choose(failures.into_iter().chain(self.died.drain(..)).collect()).unwrap_or_else(|| {
                    Divergence::new(line, event, Blame::Conformance(Conformance::C8), Finding::NoHistory, &[], self)
                }))
            }
            (None, true) => None,
        };
        if let Some(mut d) = divergence {
            d.resolutions_dropped = self.dropped;
            if !self.keep_going() {
                return Err(d);
            }
            if !any_ok {
                next = went_on;
            }
            self.finish_step(next, before);
            return Err(d);
        }
        self.finish_step(next, before);
        Ok(())
    }

    /// An actor's event begins: closes what its previous statement of unknown outcome may have
    /// held (its transaction is over once the actor logs again) and returns the line of that
    /// previous event (0 for its first), after which this statement began.
    fn enter(&mut self, actor: u16, line: usize, claims: bool) -> usize {
        let a = actor as usize;
        if self.actor_last.len() <= a {
            self.actor_last.resize(a + 1, 0);
            self.actor_claims.resize(a + 1, false);
            self.actor_open.resize(a + 1, None);
        }
        match self.actor_open[a].take() {
            Some(Open::Row(id)) => {
                if let Some(lock) = self.locks.get_mut(id.0 as usize) {
                    lock.open.retain(|x| *x != actor);
                    lock.end = lock.end.max(line);
                }
            }
            Some(Open::Any) => {
                // The rows each resolution took it to hold stay its: a later skip's excuse must
                // fit beside them.
                for claim in self.any.iter_mut().filter(|c| c.actor == actor && c.end.is_none()) {
                    claim.end = Some(line);
                }
            }
            None => {}
        }
        self.actor_claims[a] |= claims;
        std::mem::replace(&mut self.actor_last[a], line)
    }

    /// Notes the rows this event's transaction held (as the implementation reported them).
    fn record_locks(&mut self, actor: Option<u16>, line: usize, begin: usize, event: &Event, locked: &Locked) {
        let open = matches!(
            event,
            Event::Claim { outcome: Outcome::Unknown, .. } | Event::Write { result: WriteReport::Unknown, .. }
        );
        match locked {
            Locked::Nothing => {}
            Locked::Any { .. } => {
                if let Some(claim) = actor.and_then(|a| AnyClaim::of(locked, a, line, begin)) {
                    self.actor_open[claim.actor as usize] = Some(Open::Any);
                    self.any.push(claim);
                }
            }
            Locked::Rows(ids) => {
                for &id in ids {
                    let i = id.0 as usize;
                    if self.locks.len() <= i {
                        self.locks.resize_with(i + 1, RowLock::default);
                    }
                    match (open, actor) {
                        (true, Some(a)) => {
                            if matches!(event, Event::Write { .. }) {
                                self.locks[i].unknown_write = Some(line);
                            }
                            self.locks[i].open.push(a);
                            self.actor_open[a as usize] = Some(Open::Row(id));
                        }
                        _ => self.locks[i].end = self.locks[i].end.max(line),
                    }
                }
            }
        }
    }

    /// The line of `id`'s enqueue (0 where the history has none).
    fn enqueued(&self, id: MessageId) -> usize {
        self.enqueued_at.get(id.0 as usize).copied().unwrap_or(0)
    }

    /// Whether a transaction of the history may have held `id`'s lock while a claim that began
    /// after line `begin` ran and committed at line `skip`: one that locked it and committed
    /// after `begin` (the enqueue too), or one of unknown outcome that ran then (decision 71). A claim of unknown
    /// outcome could lock only rows of its tenant (where the design's claim is scoped to one)
    /// committed before it was logged, at most its batch of them, the same ones throughout: a
    /// row it is the only excuse for is noted as one it holds in this resolution, and must fit
    /// beside those it holds already — also once it is over.
    fn held_elsewhere(&self, b: &mut Branch, id: MessageId, begin: usize, skip: usize) -> bool {
        if self.locks.get(id.0 as usize).is_some_and(|l| l.end > begin || !l.open.is_empty()) {
            return true;
        }
        // Enqueued by a transaction that committed after the statement began: its snapshot may
        // not have the row at all (decision 102).
        if self.enqueued(id) > begin {
            return true;
        }
        self.hold(b, None, HeldRow { message: id, begin, skip })
    }

    /// Whether the claims of unknown outcome (and `extra`, one just logged) can hold `row` as
    /// well as every row this resolution already takes them to hold, each at most its batch —
    /// a matching; if so, the resolution notes the one found.
    fn hold(&self, b: &mut Branch, extra: Option<&AnyClaim>, row: HeldRow) -> bool {
        let tenant_of = |r: &HeldRow, b: &Branch| b.outbox.row(r.message).map(|row| row.tenant_id);
        let Some(tenant) = tenant_of(&row, b) else { return false };
        let enqueued = self.enqueued(row.message);
        let claims = || self.any.iter().chain(extra);
        // A claim whose rows are known (its committed resolution) or already taken to include
        // this one, that ran at the time.
        let holding =
            |c: &AnyClaim| b.holds.iter().any(|h| h.claim == c.line && h.rows.iter().any(|r| r.message == row.message));
        if claims().any(|c| c.could_hold(tenant, enqueued, row.begin, row.skip) && holding(c)) {
            return true;
        }
        let free: SmallVec<[AnyClaim; 2]> =
            claims().filter(|c| !b.holds.iter().any(|h| h.claim == c.line && h.full)).copied().collect();
        if !free.iter().any(|c| c.could_hold(tenant, enqueued, row.begin, row.skip)) {
            return false;
        }
        let mut rows: SmallVec<[(HeldRow, TenantId, usize); 4]> = SmallVec::new();
        for h in b.holds.iter().filter(|h| !h.full) {
            for r in &h.rows {
                rows.push((*r, tenant_of(r, b).unwrap_or(tenant), self.enqueued(r.message)));
            }
        }
        rows.push((row, tenant, enqueued));
        let Some(owner) = holders(&rows, &free) else { return false };
        b.holds.retain(|h| h.full);
        for (c, claim) in free.iter().enumerate() {
            let mine: SmallVec<[HeldRow; 2]> =
                rows.iter().zip(&owner).filter(|(_, o)| **o == c).map(|((r, ..), _)| *r).collect();
            if !mine.is_empty() {
                b.holds.push(ClaimHolds { claim: claim.line, rows: mine, full: false });
            }
        }
        true
    }

    /// A claim of unknown outcome, just logged, whose statement began before pending skips
    /// committed may have held their rows (decision 71): as many as fit beside the rows the
    /// claims of unknown outcome are taken to hold already, each at most its batch. Where not
    /// all fit, one resolution per skip taken first (for a batch of one, every choice); the
    /// others stay pending.
    fn any_holds(&self, b: Branch, claim: &AnyClaim) -> Vec<Branch> {
        let touched: Vec<usize> = (0..b.skips.len())
            .filter(|&i| claim.tenant.is_none_or(|t| t == b.skips[i].row.tenant_id) && claim.began < b.skips[i].line)
            .collect();
        if touched.is_empty() {
            return vec![b];
        }
        let excuse = |mut c: Branch, first: Option<usize>| {
            let mut dropped = Vec::new();
            let mut excused = Vec::new();
            for i in first.into_iter().chain(touched.iter().copied().filter(|i| Some(*i) != first)) {
                let skip = &c.skips[i];
                let row = HeldRow { message: skip.message, begin: skip.begin, skip: skip.line };
                if self.hold(&mut c, Some(claim), row) {
                    excused.push(i);
                } else {
                    dropped.push(i);
                }
            }
            excused.sort_unstable();
            for i in excused.into_iter().rev() {
                let skip = c.skips.remove(i);
                c.excused.push(skip);
            }
            c.excused.reverse();
            (c, dropped)
        };
        let (first, dropped) = excuse(b.clone(), None);
        let mut out = vec![first];
        for d in &dropped {
            let (alternative, _) = excuse(b.clone(), Some(*d));
            out.push(alternative);
        }
        out
    }

    /// The skip-locked rule on a branch's pending skips, as this event (whose actor's previous
    /// event is at line `begin`) locks rows: a transaction that began before the claim
    /// committed may have held the row during it — the skip is excused. One that began after
    /// it is the row's next lock, so none can come later: the skip stands. So does a skip
    /// older than `settled`, the line after which every claiming relay has logged. Unexcused
    /// skips are removed and the first returned.
    fn judge_skips(
        &self,
        b: &mut Branch,
        begin: usize,
        settled: (usize, usize),
        locked: &Locked,
    ) -> Result<(), Divergence> {
        let (seen, declared) = settled;
        if b.skips.is_empty() {
            return Ok(());
        }
        let mut unexcused: Option<Skip> = None;
        b.skips.retain_mut(|skip| {
            let (touched, certain) = match locked {
                Locked::Nothing => (false, false),
                // A claim of unknown outcome excused what it could hold already (any_holds).
                Locked::Any { .. } => (false, false),
                Locked::Rows(ids) => (ids.contains(&skip.message), true),
            };
            if touched && begin < skip.line {
                return false;
            }
            if touched && certain {
                if unexcused.is_none() {
                    unexcused = Some(skip.clone());
                }
                return false;
            }
            if skip.line < declared {
                // Every relay that may run has logged since: nothing can excuse it now.
                if unexcused.is_none() {
                    unexcused = Some(skip.clone());
                }
                return false;
            }
            if skip.line < seen {
                skip.settled = true;
            }
            true
        });
        match unexcused {
            None => Ok(()),
            Some(skip) => Err(self.skip_divergence(&skip)),
        }
    }

    /// A skip no transaction of the history explains, as a divergence at its claim.
    fn skip_divergence(&self, skip: &Skip) -> Divergence {
        let unknown_write_at =
            self.locks.get(skip.message.0 as usize).and_then(|l| l.unknown_write).filter(|at| *at < skip.line);
        Divergence::new(
            skip.line,
            &skip.claim,
            Blame::Conformance(Conformance::C1),
            Finding::Skipped {
                message: skip.message,
                unknown_write_at,
                schedule: matches!(*skip.claim, Event::Schedule { .. }),
            },
            &[skip.row],
            self,
        )
    }

    /// After an event: merges resolutions that came to the same state and keeps at most
    /// BRANCHES_MAX.
    fn finish_step(&mut self, next: Vec<Branch>, before: usize) {
        // Resolutions that led to the same table, ghosts and leases are one branch. Comparing
        // every pair of branches on every event would cost branches² × table: compare them by
        // fingerprint, and only when this event forked a branch or every 64 events (when
        // branches that differed in one row may have converged).
        let unique = if next.len() > 1 && (next.len() > before || self.events.is_multiple_of(64)) {
            let mut seen: std::collections::HashMap<u64, Vec<usize>> = std::collections::HashMap::new();
            let mut unique: Vec<Branch> = Vec::with_capacity(next.len());
            for branch in next {
                let key = crate::world::fingerprint(&(
                    &branch.outbox,
                    &branch.auditor,
                    &branch.held,
                    &branch.deferred,
                    &branch.skips,
                    &branch.holds,
                ));
                let same = seen.get(&key).is_some_and(|ids| {
                    ids.iter().any(|&i| {
                        let b = &unique[i];
                        b.outbox == branch.outbox
                            && b.auditor == branch.auditor
                            && b.held == branch.held
                            && b.deferred == branch.deferred
                            && b.skips == branch.skips
                            && b.holds == branch.holds
                            && b.broke.is_some() == branch.broke.is_some()
                    })
                });
                if !same {
                    seen.entry(key).or_default().push(unique.len());
                    unique.push(branch);
                }
            }
            unique
        } else {
            next
        };
        let mut unique = unique;
        self.dropped |= unique.len() > BRANCHES_MAX;
        unique.truncate(BRANCHES_MAX);
        self.branches = unique;
        self.events += 1;
    }

    /// How many resolutions of the unknown outcomes are still consistent.
    pub fn open_resolutions(&self) -> usize {
        self.branches.len()
    }

    /// The verdict on everything fed so far: accepted, or the first skip-locked claim that passed
    /// over a row nothing could have held (a skip is judged once the history is complete).
    pub fn finish(self) -> Result<Accepted, Divergence> {
        let (accepted, mut divergences) = self.finish_all();
        if divergences.is_empty() {
            Ok(accepted)
        } else {
            Err(divergences.remove(0))
        }
    }

    /// The verdict with every divergence the end of the history settles (skips no transaction
    /// excused); the accepted part describes the resolution kept.
    pub fn finish_all(mut self) -> (Accepted, Vec<Divergence>) {
        let mut divergences = Vec::new();
        if !self.branches.is_empty() && self.branches.iter().all(|b| b.broke.is_some()) {
            let mut found: Vec<Divergence> = self.branches.iter().filter_map(|b| b.broke.as_deref().cloned()).collect();
            found.append(&mut self.died);
            divergences.extend(choose(found));
            self.branches.iter_mut().for_each(|b| b.broke = None);
        }
        self.branches.retain(|b| b.broke.is_none());
        if !self.branches.iter().any(|b| b.skips.is_empty()) {
            if let Some(b) = self.branches.first() {
                divergences = b.skips.iter().map(|skip| self.in_your_names(self.skip_divergence(skip), b)).collect();
            }
        } else {
            self.branches.retain(|b| b.skips.is_empty());
        }
        (self.accepted(), divergences)
    }

    fn accepted(self) -> Accepted {
        let resolutions = self
            .branches
            .into_iter()
            .next()
            .map(|b| {
                let mut r = b.resolutions;
                r.extend(
                    b.deferred
                        .iter()
                        .map(|d| format!("line {}: {} unresolved (consistent either way)", d.line, d.write)),
                );
                r
            })
            .unwrap_or_default();
        let mut not_judged = Vec::new();
        // A check that stopped at a divergence has not read the rest of the history.
        let has_no = |what: &str| {
            if self.stopped {
                format!("the history has no {what} up to line {}, where the check stopped", self.last_line)
            } else {
                format!("the history has no {what}")
            }
        };
        if !self.seen_enqueue {
            not_judged.push(format!(
                "S10 atomic enqueue: {} (rows were taken as enqueued when first claimed)",
                has_no("enqueue")
            ));
        }
        if !self.seen_publish {
            not_judged.push(format!("S5, S8 and S3's count of publications: {}", has_no("publish")));
        }
        if self.tokenless {
            not_judged.push(
                "S2 for the claims without a token: the implementation cannot fence (S1 is judged by the claim each write answers)"
                    .to_string(),
            );
        }
        if let (Some(line), true) = (self.unjudged_at.get(), self.seen_enqueue && self.seen_publish) {
            not_judged.push(format!(
                "S5, S8 or S10 at line {line}, which came before the history's first publish or enqueue"
            ));
        }
        if !self.serial && self.events > 0 {
            not_judged.push(
                "whether a skip-locked claim passed over a row only while another transaction held it, where the history cannot tell (see docs/trace-format.md)"
                    .to_string(),
            );
        }
        Accepted { events: self.events, resolutions, not_judged }
    }
}

/// Which claim of unknown outcome holds each row (by index into `claims`), each claim at most
/// its batch of distinct rows and only rows it could have held for the skip that needs them;
/// `None` if no assignment exists. Augmenting paths: rows and claims are few.
fn holders(rows: &[(HeldRow, TenantId, usize)], claims: &[AnyClaim]) -> Option<Vec<usize>> {
    fn place(
        r: usize,
        rows: &[(HeldRow, TenantId, usize)],
        claims: &[AnyClaim],
        owner: &mut [usize],
        visited: &mut [bool],
    ) -> bool {
        for c in 0..claims.len() {
            let (row, tenant, enqueued) = rows[r];
            if visited[c] || !claims[c].could_hold(tenant, enqueued, row.begin, row.skip) {
                continue;
            }
            visited[c] = true;
            // One row skipped twice is still one lock.
            let message = row.message;
            let mut held: SmallVec<[MessageId; 4]> =
                (0..rows.len()).filter(|o| owner[*o] == c).map(|o| rows[o].0.message).collect();
            held.sort_unstable();
            held.dedup();
            if held.contains(&message) || held.len() < claims[c].batch as usize {
                owner[r] = c;
                return true;
            }
            for other in 0..rows.len() {
                if owner[other] == c && place(other, rows, claims, owner, visited) {
                    owner[r] = c;
                    return true;
                }
            }
        }
        false
    }
    let mut owner = vec![usize::MAX; rows.len()];
    for r in 0..rows.len() {
        let mut visited = vec![false; claims.len()];
        if !place(r, rows, claims, &mut owner, &mut visited) {
            return None;
        }
    }
    Some(owner)
}
