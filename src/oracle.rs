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
    AggregateId, Auditor, ClaimRefusal, ClaimRequest, Duration, EnqueueRequest, EnqueueResult, FailureCode,
    IdempotencyKey, Instant, Lease, LeaseToken, MessageId, Outbox, Policy, Property, RelayId, ReleaseFence,
    ReleaseRequest, RequeueResult, Row, Status, TenantId, WriteKind, WriteRequest, WriteResult,
};
use crate::design::Design;
use crate::trace::{Event, Header, Outcome, PublishAnswer, WriteReport};
use serde::Serialize;
use smallvec::{smallvec, SmallVec};

/// Something the implementation did that its declared design does not, without breaking a
/// safety property: each has an id and a sentence of its own, so every divergence is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Conformance {
    C1,
    C2,
    C3,
    C4,
    C5,
    C6,
    C7,
    C8,
}

impl Conformance {
    pub fn id(self) -> &'static str {
        match self {
            Conformance::C1 => "C1",
            Conformance::C2 => "C2",
            Conformance::C3 => "C3",
            Conformance::C4 => "C4",
            Conformance::C5 => "C5",
            Conformance::C6 => "C6",
            Conformance::C7 => "C7",
            Conformance::C8 => "C8",
        }
    }

    pub fn sentence(self) -> &'static str {
        match self {
            Conformance::C1 => "the claim returned rows the declared design's claim does not return",
            Conformance::C2 => "attempts are counted differently from the declared design",
            Conformance::C3 => "a write's result differs from the declared design's",
            Conformance::C4 => "a row's status after a write differs from the declared design's",
            Conformance::C5 => "the reaper took other rows than the declared design's reaper",
            Conformance::C6 => "a requeue's result differs from the declared design's",
            Conformance::C7 => "an event names a row the history never enqueued",
            Conformance::C8 => "an operation the declared design cannot express",
        }
    }
}

impl std::fmt::Display for Conformance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.id(), self.sentence())
    }
}

/// Who is to blame for a divergence: a safety property the implementation broke, or a
/// conformance finding (it did what its declared design does not, safely).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    Safety(Property),
    Conformance(Conformance),
}

impl Blame {
    /// The property's or the finding's id ("S4", "C2").
    pub fn id(self) -> &'static str {
        match self {
            Blame::Safety(p) => p.id(),
            Blame::Conformance(c) => c.id(),
        }
    }

    pub fn is_safety(self) -> bool {
        matches!(self, Blame::Safety(_))
    }

    /// The property broken, where one is.
    pub fn property(self) -> Option<Property> {
        match self {
            Blame::Safety(p) => Some(p),
            Blame::Conformance(_) => None,
        }
    }

    /// `safety` or `conformance`, as the JSON verdict names the kind.
    pub fn kind(self) -> &'static str {
        match self {
            Blame::Safety(_) => "safety",
            Blame::Conformance(_) => "conformance",
        }
    }
}

impl std::fmt::Display for Blame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blame::Safety(p) => write!(f, "{p}"),
            Blame::Conformance(c) => write!(f, "{c}"),
        }
    }
}

/// In the JSON verdict (docs/trace-verdict.schema.json): `kind`, `property` and `conformance`.
impl Serialize for Blame {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("kind", self.kind())?;
        map.serialize_entry("property", &self.property())?;
        let conformance = match self {
            Blame::Conformance(c) => Some(*c),
            Blame::Safety(_) => None,
        };
        map.serialize_entry("conformance", &conformance)?;
        map.end()
    }
}

/// What another resolution of the unknown outcomes breaks: its blame, and that finding in words
/// (the JSON verdict gives the words).
#[derive(Clone, Debug)]
pub struct Otherwise {
    pub blame: Blame,
    pub words: String,
}

impl Serialize for Otherwise {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.words)
    }
}

impl std::fmt::Display for Otherwise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.words)
    }
}

/// The aggregate ids of rows a history without enqueues brought in with their first claim: one
/// per row, apart from every aggregate the history names.
const IMPLICIT_AGGREGATE: u32 = 0x8000_0000;

/// The id of the JSON `outbox-check trace --json` prints (docs/trace-verdict.schema.json).
pub const VERDICT_SCHEMA: &str = "outbox-check/trace-verdict/v2";

/// Where the history first leaves what the model allows.
#[derive(Clone, Debug, Serialize)]
pub struct Divergence {
    pub line: usize,
    /// The event, as the oracle read it.
    pub event: serde_json::Value,
    /// A property of SPEC §7 the implementation broke, or a conformance finding (it did what
    /// its declared design does not, safely).
    #[serde(flatten)]
    pub blame: Blame,
    /// What the model allows, where that is more than "no violation" (empty then).
    pub expected: String,
    /// What the implementation did, in the history's own names.
    pub got: String,
    /// The rows the event touched, as they were before it, in the history's own names.
    pub rows: Vec<serde_json::Value>,
    /// Unknown outcomes opened more resolutions than the oracle keeps, some were dropped: the
    /// divergence may belong to a dropped one.
    pub resolutions_dropped: bool,
    /// Where unknown outcomes leave more than one resolution and they fail differently: what
    /// each other resolution breaks, one line each (empty when every resolution fails as this
    /// one does). The history then breaks one of these or this finding, not this one for sure.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub otherwise: Vec<Otherwise>,
    /// The model's rows, until they are put in the history's names.
    #[serde(skip)]
    model_rows: Vec<Row>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}\n  event: {}", self.line, self.headline(), self.event)?;
        for other in &self.otherwise {
            write!(f, "\n  or, where the unknown outcomes resolve otherwise: {other}")?;
        }
        if self.resolutions_dropped {
            write!(f, "\n  (too many unknown outcomes: {BRANCHES_MAX} resolutions were kept, others dropped)")?;
        }
        Ok(())
    }
}

impl Divergence {
    /// The finding and what happened, without the line or the event: "S1 …: r0 applied …".
    fn headline(&self) -> String {
        let blame = match self.blame {
            Blame::Safety(p) => format!("{p}"),
            Blame::Conformance(c) => format!("{c} (no safety property broken)"),
        };
        if self.expected.is_empty() {
            format!("{blame}: {}", self.got)
        } else {
            format!("{blame}: the model allows {}, the implementation reported {}", self.expected, self.got)
        }
    }

    /// The property broken or the conformance finding, by id ("S4", "C2").
    pub fn finding(&self) -> &'static str {
        self.blame.id()
    }

    /// This finding and, where unknown outcomes leave resolutions that fail differently, each
    /// other resolution's: the history breaks one of them.
    pub fn possible_findings(&self) -> Vec<&'static str> {
        std::iter::once(self.blame.id()).chain(self.otherwise.iter().map(|o| o.blame.id())).collect()
    }

    fn new(line: usize, event: &Event, blame: Blame, expected: String, got: String, rows: &[Row]) -> Divergence {
        Divergence {
            line,
            event: event_json(event),
            blame,
            expected,
            got,
            rows: Vec::new(),
            resolutions_dropped: false,
            otherwise: Vec::new(),
            model_rows: rows.to_vec(),
        }
    }
}

/// An accepted history: how many events, and which resolution of each unknown outcome was used.
#[derive(Clone, Debug, Serialize)]
pub struct Accepted {
    pub events: usize,
    pub resolutions: Vec<String>,
    /// The properties the history gave no means to judge (a job queue that logs no enqueue
    /// or no publication), and why.
    pub not_judged: Vec<String>,
}

/// How far a check goes after a divergence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Stop at the first divergence.
    #[default]
    First,
    /// Go on past conformance findings; stop at the first safety violation (`--safety-only`).
    SafetyOnly,
    /// Go on after every divergence, from what the implementation reported (`--all`).
    All,
}

impl Mode {
    /// Whether a divergence fails the check (a conformance finding does not, in `SafetyOnly`).
    pub fn fails(self, d: &Divergence) -> bool {
        d.blame.is_safety() || self != Mode::SafetyOnly
    }
}

/// The oracle's verdict on a history: the divergences found, in the order of the history, and
/// what the accepted part rests on. Every caller reads this, never the words of a divergence.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub mode: Mode,
    pub divergences: Vec<Divergence>,
    /// How many events were checked, the resolutions kept and what was not judged.
    pub accepted: Accepted,
    /// The check stopped at a divergence that fails it (the history's rest was not checked).
    pub stopped: bool,
}

impl Verdict {
    /// Some divergence fails the check.
    pub fn fails(&self) -> bool {
        self.divergences.iter().any(|d| self.mode.fails(d))
    }

    pub fn first(&self) -> Option<&Divergence> {
        self.divergences.first()
    }

    /// `consistent` (no divergence), `diverges` (one fails the check) or `safe` (conformance
    /// findings only, in `SafetyOnly`).
    pub fn word(&self) -> &'static str {
        if self.divergences.is_empty() {
            "consistent"
        } else if self.fails() {
            "diverges"
        } else {
            "safe"
        }
    }

    /// The findings the history breaks whichever way its unknown outcomes resolved, by id, each
    /// once: safety properties first, in catalogue order, then conformance findings.
    pub fn broken(&self) -> Vec<&'static str> {
        let mut broken: Vec<Blame> =
            self.divergences.iter().filter(|d| d.otherwise.is_empty()).map(|d| d.blame).collect();
        broken.sort_by_key(|b| match b {
            Blame::Safety(p) => (0, p.bit()),
            Blame::Conformance(c) => (1, *c as u16),
        });
        broken.dedup();
        broken.into_iter().map(Blame::id).collect()
    }

    /// Where the unknown outcomes leave resolutions that fail differently: the findings one of
    /// which the history breaks, and the line ("S1 or C2 (line 7)").
    pub fn either(&self) -> Vec<String> {
        self.divergences
            .iter()
            .filter(|d| !d.otherwise.is_empty())
            .map(|d| format!("{} (line {})", d.possible_findings().join(" or "), d.line))
            .collect()
    }

    /// The safety property the first divergence breaks where the model allows nothing else: the
    /// declared design's core took that step as the implementation did, so the design breaks
    /// the property by itself.
    pub fn design_breaks(&self) -> Option<Property> {
        self.first().filter(|d| d.expected.is_empty()).and_then(|d| d.blame.property())
    }
}

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

fn name_in<'a>(text: &'a str, ends: &[u32], id: u32) -> Option<&'a str> {
    let end = *ends.get(id as usize)? as usize;
    let start = if id == 0 { 0 } else { ends[id as usize - 1] as usize };
    text.get(start..end)
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
}

/// The divergence to report when every resolution of the unknown outcomes failed at one event:
/// a safety property one of them breaks rather than a departure from the design in another, and
/// with it what each other resolution breaks where that differs — so the report never says more
/// than the history shows (decision 62). Where all fail alike, `otherwise` stays empty: the
/// finding is the history's whichever way the outcomes went.
fn choose(failures: Vec<Divergence>) -> Option<Divergence> {
    let id = Divergence::finding;
    let pick =
        failures.iter().position(|d| d.blame.is_safety()).or(if failures.is_empty() { None } else { Some(0) })?;
    let mut others: Vec<Otherwise> = Vec::new();
    let mut seen = vec![id(&failures[pick])];
    for d in &failures {
        if !seen.contains(&id(d)) {
            seen.push(id(d));
            let words = d.headline().lines().next().unwrap_or_default().to_string();
            others.push(Otherwise { blame: d.blame, words });
        }
    }
    let mut chosen = failures.into_iter().nth(pick)?;
    chosen.otherwise = others;
    Some(chosen)
}

/// A claimable row a skip-locked claim did not return: excused once the history shows another
/// transaction that could have held the row's lock while the claim ran.
#[derive(Clone, Debug)]
struct Skip {
    /// The claim's line (its commit, in the history's order).
    line: usize,
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
}

/// Where a write the implementation reported applied left its row waiting for a retry, the
/// retry time it chose replaces the design's backoff; one not later than the write's `now`
/// breaks S7.
fn chosen_retry(outbox: &mut Outbox, id: MessageId, retry_at: Option<u64>, now: Instant) -> Result<(), String> {
    let Some(at) = retry_at else { return Ok(()) };
    outbox.choose_retry(id, Instant(at), now).map_err(|status| {
        format!("the write left the row {status} with the retry time t={at} it chose, not later than its now {now}")
    })
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
    /// Claims of unknown outcome (which may hold any row): the latest line one may have been
    /// open at, and the actors of those still open.
    any_end: usize,
    any_open: SmallVec<[u16; 2]>,
    /// How far [`Oracle::check_event`] goes, what it found so far, and whether it stopped.
    mode: Mode,
    found: Vec<Divergence>,
    stopped: bool,
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
                broke: None,
            }],
            events: 0,
            dropped: false,
            tokens: Vec::new(),
            serial: false,
            seen_enqueue: false,
            seen_publish: false,
            tokenless: false,
            unjudged_at: std::cell::Cell::new(None),
            header: Header::new(design.name(), max_attempts),
            actor_last: Vec::new(),
            actor_claims: Vec::new(),
            declared: None,
            actor_open: Vec::new(),
            locks: Vec::new(),
            any_end: 0,
            any_open: SmallVec::new(),
            mode: Mode::First,
            found: Vec::new(),
            stopped: false,
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
            let reused = |at: usize| {
                Some((
                    format!("a token {} never had", got.message),
                    format!("token {got_token} for {}, which the claim at line {at} already handed out", got.message),
                ))
            };
            let problem = match (&token, row.max) {
                (TokenName::Number(n), Some((max, at))) if *n == max => reused(at),
                (TokenName::Number(n), Some((max, at))) if counter && *n < max => Some((
                    format!("a token of {} greater than every earlier one", got.message),
                    format!(
                        "token {got_token} for {}, lower than token {max} from the claim at line {at}",
                        got.message
                    ),
                )),
                _ => row.seen.iter().find(|(t, _)| *t == token).and_then(|&(_, at)| reused(at)),
            };
            if let Some((expected, got_text)) = problem {
                // The claim's other leases are still recorded: going on (--all), a later claim
                // is judged against every token this one handed out.
                if first.is_none() {
                    let mut d = Divergence::new(line, event, Blame::Safety(Property::S2), expected, got_text, &[]);
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

    /// The implementation's name for a thing, as a small number (in order of first appearance).
    fn id(&mut self, kind: u8, name: &str) -> u32 {
        let last = &mut self.last_name[kind as usize];
        if last.0 == name && !name.is_empty() {
            return last.1;
        }
        let id = self.names[kind as usize].id(name);
        last.0.clear();
        last.0.push_str(name);
        last.1 = id;
        id
    }

    fn message(&mut self, name: &str) -> MessageId {
        MessageId(self.id(0, name))
    }

    fn tenant(&mut self, name: &str) -> TenantId {
        TenantId(self.id(1, name) as u16)
    }

    fn relay(&mut self, name: &str) -> RelayId {
        RelayId(self.id(2, name) as u16)
    }

    fn aggregate(&mut self, name: &str) -> AggregateId {
        AggregateId(self.id(3, name))
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
        let locked = locked_by(event, &plan);
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
                    failures.push(self.in_your_names(d, b));
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
        // Only resolutions that broke a property are left: the history breaks it.
        let clean = branches.iter().any(|b| b.broke.is_none());
        if !branches.is_empty() && !clean && token_divergence.is_none() {
            let d = choose(branches.iter().filter_map(|b| b.broke.as_deref().cloned()).collect());
            if let Some(d) = d {
                for b in &mut branches {
                    b.broke = None;
                }
                self.record_locks(actor, line, event, &locked);
                self.finish_step(branches, before);
                return Err(d);
            }
        }
        any_ok |= !branches.is_empty();
        self.record_locks(actor, line, event, &locked);
        let mut next = branches;
        let divergence = match (token_divergence, any_ok) {
            (Some(d), _) => Some(d),
            (None, false) => Some(choose(failures).unwrap_or_else(|| {
                Divergence::new(
                    line,
                    event,
                    Blame::Conformance(Conformance::C8),
                    "no history".into(),
                    "an event".into(),
                    &[],
                )
            })),
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
                self.any_open.retain(|x| *x != actor);
                self.any_end = self.any_end.max(line);
            }
            None => {}
        }
        self.actor_claims[a] |= claims;
        std::mem::replace(&mut self.actor_last[a], line)
    }

    /// Notes the rows this event's transaction held (as the implementation reported them).
    fn record_locks(&mut self, actor: Option<u16>, line: usize, event: &Event, locked: &Locked) {
        let open = matches!(
            event,
            Event::Claim { outcome: Outcome::Unknown, .. } | Event::Write { result: WriteReport::Unknown, .. }
        );
        match locked {
            Locked::Nothing => {}
            Locked::Any => {
                if let Some(a) = actor {
                    self.any_open.push(a);
                    self.actor_open[a as usize] = Some(Open::Any);
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

    /// Whether a transaction of the history may have held `id`'s lock while a claim that began
    /// after line `begin` ran (and committed at the current line): one that locked it and
    /// committed after `begin`, or one of unknown outcome whose actor has logged nothing since.
    fn held_elsewhere(&self, id: MessageId, begin: usize) -> bool {
        let row = self.locks.get(id.0 as usize).is_some_and(|l| l.end > begin || !l.open.is_empty());
        row || self.any_end > begin || !self.any_open.is_empty()
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
                Locked::Any => (true, false),
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
        let name = self.name_of(0, skip.message.0);
        let hint = self
            .locks
            .get(skip.message.0 as usize)
            .and_then(|l| l.unknown_write)
            .filter(|at| *at < skip.line)
            .map(|at| format!(" (the write of unknown outcome at line {at} may have applied where the design refuses it: S1 if so)"))
            .unwrap_or_default();
        Divergence::new(
            skip.line,
            &skip.claim,
            Blame::Conformance(Conformance::C1),
            format!("a claim of {name} too"),
            format!(
                "a claim that passed over {name} while it was claimable, and no transaction of the history could have held its lock then (concurrency skip-locked){hint}"
            ),
            &[skip.row],
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
                ));
                let same = seen.get(&key).is_some_and(|ids| {
                    ids.iter().any(|&i| {
                        let b = &unique[i];
                        b.outbox == branch.outbox
                            && b.auditor == branch.auditor
                            && b.held == branch.held
                            && b.deferred == branch.deferred
                            && b.skips == branch.skips
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
            divergences.extend(choose(self.branches.iter().filter_map(|b| b.broke.as_deref().cloned()).collect()));
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
        if !self.seen_enqueue {
            not_judged.push(
                "S10 atomic enqueue: the history has no enqueue (rows were taken as enqueued when first claimed)"
                    .to_string(),
            );
        }
        if !self.seen_publish {
            not_judged.push("S5, S8 and S3's count of publications: the history has no publish".to_string());
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

    /// Erases, in the rows `event` touched, what no rule of the model ever reads again: the last
    /// failure code, when a row was published, and a terminal row's retry time (unless the
    /// design may claim terminal rows). Resolutions of unknown outcomes that differ only there
    /// then become one branch instead of living on side by side.
    fn forget(&self, branch: &mut Branch, plan: &Plan, event: &Event) {
        let all = matches!(event, Event::Reap { .. } | Event::Claim { outcome: Outcome::Unknown, .. });
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
    fn resolve_deferred(&self, branch: Branch, event: &Event, plan: &Plan) -> Vec<Branch> {
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
                let ok = applied.auditor.write(&mut applied.outbox, &completing(self.policy, &d.write), &d.req).is_ok();
                let ok = ok && chosen_retry(&mut applied.outbox, d.req.lease.message_id, d.retry_at, d.req.now).is_ok();
                if ok && applied.auditor.take_violations().is_empty() {
                    applied.resolutions.push(format!("line {}: {} committed", d.line, d.write));
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
    fn plan(&mut self, event: &Event) -> Plan {
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

    /// The successors of one branch under `event`, or why it cannot happen there.
    fn step(
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
        let diverge = |blame: Blame, expected: String, got: String, rows: &[Row]| {
            Divergence::new(line, event, blame, expected, got, rows)
        };
        let conformance = Blame::Conformance;
        let rows_of = |b: &Branch, ids: &[MessageId]| {
            ids.iter().filter_map(|id| b.outbox.row(*id).cloned()).collect::<SmallVec<[Row; 1]>>()
        };
        let audited = |b: &mut Branch, before: &[Row]| -> Result<(), Divergence> {
            // What the history gives no means to judge is not judged (see Accepted::not_judged).
            let judged = |p: Property| match p {
                Property::S5 | Property::S8 => self.seen_publish,
                Property::S10 => self.seen_enqueue,
                _ => true,
            };
            let violations = b.auditor.take_violations();
            if violations.iter().any(|v| !judged(v.property)) && self.unjudged_at.get().is_none() {
                self.unjudged_at.set(Some(line));
            }
            match violations.into_iter().find(|v| judged(v.property)) {
                None => Ok(()),
                Some(v) => {
                    let mut said = self.words(&v.detail);
                    // A superseded write, in the history's words: who wrote, and which claim
                    // had superseded the lease it wrote for.
                    // The design's claim kept a row's token (the model's own tokens, not yours).
                    if let (Property::S2, Event::Claim { relay: name, .. }, Some(row)) = (v.property, event, v.message)
                    {
                        let row = self.name_of(0, row.0);
                        said = format!("the claim by {name} left {row} with the token it already had: this design's claim does not move the token");
                    }
                    if let (Property::S1, Some(&id), Some(doer)) = (v.property, messages.first(), doer(event)) {
                        if v.superseded {
                            said = format!(
                                "{doer} applied to {}, for a lease that was no longer the latest",
                                self.name_of(0, id.0)
                            );
                        }
                        said += &self.superseded_by(b, id);
                    }
                    Err(diverge(Blame::Safety(v.property), String::new(), said, before))
                }
            }
        };
        match event {
            Event::Enqueue { expected_version, now, result, .. } => {
                let req = EnqueueRequest {
                    tenant_id: tenant,
                    aggregate_id: aggregate,
                    expected_version: *expected_version,
                    message_id: messages[0],
                    now: Instant(*now),
                };
                let model = b
                    .auditor
                    .enqueue(&mut b.outbox, &req)
                    .map_err(|e| diverge(Blame::Safety(Property::S10), "a valid enqueue".into(), e.to_string(), &[]))?;
                let model_says = match model {
                    EnqueueResult::Applied { .. } => "applied",
                    EnqueueResult::Stale { .. } => "stale",
                };
                if model_says != result {
                    return Err(diverge(Blame::Safety(Property::S10), model_says.into(), result.clone(), &[]));
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
                };
                if *outcome == Outcome::Unknown {
                    // Not committed, or committed with leases nobody learnt of.
                    let mut committed = b.clone();
                    let _ = committed.auditor.claim(&mut committed.outbox, &self.policy, &req, Instant(*now));
                    committed.resolutions.push(format!("line {line}: claim committed"));
                    // Committed, the design's own claim may break a property (legacy-v1's keeps
                    // the token): that resolution lives on, carrying the finding, in case it is
                    // the only one the rest of the history allows.
                    let before: SmallVec<[Row; 1]> = SmallVec::new();
                    if let Err(d) = audited(&mut committed, &before) {
                        let mut d = d;
                        d.got = format!("{} (if the claim of unknown outcome committed: the only resolution the rest of the history allows)", d.got);
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
                let claimed =
                    b.auditor.claim_exactly(&mut b.outbox, &self.policy, &req, messages, Instant(*now)).map_err(
                        |e| diverge(conformance(Conformance::C8), "a valid claim".into(), e.to_string(), &before),
                    )?;
                match claimed {
                    Err((id, refusal)) => {
                        let property = match refusal {
                            ClaimRefusal::OtherTenant => Some(Property::S9),
                            ClaimRefusal::Terminal => Some(Property::S4),
                            ClaimRefusal::LiveLease => Some(Property::S6),
                            ClaimRefusal::RetryClock => Some(Property::S7),
                            ClaimRefusal::BudgetSpent => Some(Property::S3),
                            ClaimRefusal::OverBatch | ClaimRefusal::OutOfOrder | ClaimRefusal::Twice => None,
                        };
                        let name = self.name_of(0, id.0);
                        let blame = property.map_or(conformance(Conformance::C1), Blame::Safety);
                        Err(diverge(
                            blame,
                            format!("no claim of {name} ({refusal})"),
                            format!("a claim of {name}"),
                            &before,
                        ))
                    }
                    Ok(model_leases) => {
                        let want = &expected[..expected.len().min(*batch as usize)];
                        if self.serial && want != messages.as_slice() {
                            // One claim at a time: it returns exactly the design's rows, in order.
                            let names = |ids: &[MessageId]| {
                                if ids.is_empty() {
                                    "no row".to_string()
                                } else {
                                    ids.iter().map(|m| self.name_of(0, m.0)).collect::<Vec<_>>().join(", ")
                                }
                            };
                            return Err(diverge(
                                conformance(Conformance::C1),
                                format!(
                                    "a claim of {} (the history's claims run one at a time: concurrency serial)",
                                    names(want)
                                ),
                                format!("a claim of {}", names(messages)),
                                &before,
                            ));
                        }
                        for (got, lease) in leases.iter().zip(&model_leases) {
                            if got.attempts != lease.attempts {
                                // Counting differently is no violation by itself: the design
                                // counts elsewhere (S3 judges the budget when it is passed).
                                return Err(diverge(
                                    conformance(Conformance::C2),
                                    format!("attempts = {} after the claim of {}", lease.attempts, got.message),
                                    format!("attempts = {}", got.attempts),
                                    &before,
                                ));
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
                            if !self.held_elsewhere(id, begin) {
                                let claim = claim.get_or_insert_with(|| std::sync::Arc::new(event.clone())).clone();
                                b.skips.push(Skip { line, settled: false, message: id, row, claim });
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
                // else the relay's lease of the message that is still open — not one its own
                // write already ended, nor one from before a requeue. Without either it counts
                // against the current budget.
                let requeued = b.auditor.ghost(id).map_or(0, |g| g.requeued_after_claim);
                let lease = b
                    .held
                    .iter()
                    .rev()
                    .find(|h| {
                        h.relay == relay
                            && h.lease.message_id == id
                            && match token {
                                Some(t) => h.token.is(t),
                                None => !h.ended && h.lease.claim_seq > requeued,
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
                b.auditor.published(&lease, key, stored);
                audited(b, &before)?;
                Ok(None)
            }
            Event::Write { write, message, token, attempt, now, code, result, status, next_attempt_at, .. } => {
                let id = messages[0];
                let kind = write_kind(write, *code)
                    .ok_or_else(|| diverge(conformance(Conformance::C8), "a known write".into(), write.clone(), &[]))?;
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
                        return Err(diverge(
                            conformance(Conformance::C7),
                            "a write to a known row".into(),
                            format!("a write to {message}"),
                            &before,
                        ));
                    }
                    b.deferred.push(Deferred { line, write: write.clone(), req, retry_at: *next_attempt_at });
                    return Ok(None);
                }
                let applied = b;
                let model =
                    applied.auditor.write(&mut applied.outbox, &completing(self.policy, write), &req).map_err(|e| {
                        diverge(conformance(Conformance::C7), "a write to a known row".into(), e.to_string(), &before)
                    })?;
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
                            let mut got = result.as_str().to_string();
                            if property == Some(Property::S1) {
                                got += &self.superseded_by(applied, id);
                            }
                            return Err(diverge(blame, format!("the write {model}"), got, &before));
                        }
                        if let (Some(got), WriteResult::Applied { status: expected }) = (status, model) {
                            if self.header.status(got) != Some(expected) {
                                let expected = self.header.status_name(expected);
                                return Err(diverge(
                                    conformance(Conformance::C4),
                                    format!("status {expected}"),
                                    format!("status {got}"),
                                    &before,
                                ));
                            }
                        }
                        audited(applied, &before)?;
                        if matches!(model, WriteResult::Applied { .. }) {
                            chosen_retry(&mut applied.outbox, id, *next_attempt_at, req.now)
                                .map_err(|said| diverge(Blame::Safety(Property::S7), String::new(), said, &before))?;
                        }
                        Ok(None)
                    }
                }
            }
            Event::Release { now, to, next_attempt_at, fence, token, attempt, result, .. } => {
                let id = messages[0];
                let before = rows_of(b, messages);
                let Some(row) = before.first().copied() else {
                    return Err(diverge(
                        conformance(Conformance::C7),
                        "a release of a known row".into(),
                        format!("a release of {}", self.name_of(0, id.0)),
                        &[],
                    ));
                };
                let to = match self.header.status(to) {
                    Some(status @ (Status::Pending | Status::Ambiguous | Status::Failed | Status::Exhausted)) => status,
                    _ => {
                        return Err(diverge(
                            conformance(Conformance::C8),
                            "a release to a status that ends a lease (PENDING, AMBIGUOUS, FAILED, EXHAUSTED)".into(),
                            format!("a release to {to}"),
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
                let stale = named && (latest_known || result != "applied");
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
                let model = b.auditor.release(&mut b.outbox, &req).map_err(|e| {
                    diverge(conformance(Conformance::C7), "a release of a known row".into(), e.to_string(), &before)
                })?;
                let model_says = if matches!(model, WriteResult::Applied { .. }) { "applied" } else { "stale" };
                if model_says != result {
                    // Ending a lease claimed after the job read the row breaks S1.
                    let superseded = lease.claim_seq != latest && row.status == Status::InFlight;
                    if result == "applied" && superseded {
                        let got = format!("applied{}", self.superseded_by(b, id));
                        return Err(diverge(Blame::Safety(Property::S1), format!("the release {model}"), got, &before));
                    }
                    return Err(diverge(
                        conformance(Conformance::C3),
                        format!("the release {model}"),
                        result.clone(),
                        &before,
                    ));
                }
                if model_says == "applied" {
                    b.open.push(id);
                }
                audited(b, &before)?;
                Ok(None)
            }
            Event::Reap { now, .. } => {
                let before = rows_of(b, messages);
                let mut reaped = b.auditor.reap(&mut b.outbox, Instant(*now));
                let mut expected = messages.to_vec();
                reaped.sort();
                expected.sort();
                if reaped != expected {
                    let names =
                        |ids: &[MessageId]| ids.iter().map(|m| self.name_of(0, m.0)).collect::<Vec<_>>().join(", ");
                    return Err(diverge(
                        conformance(Conformance::C5),
                        format!("reaping [{}]", names(&reaped)),
                        format!("[{}]", names(&expected)),
                        &before,
                    ));
                }
                audited(b, &before)?;
                Ok(None)
            }
            Event::Requeue { result, .. } => {
                let before = rows_of(b, messages);
                let model = b.auditor.requeue(&mut b.outbox, &self.policy, messages[0]).map_err(|e| {
                    diverge(conformance(Conformance::C7), "a requeue of a known row".into(), e.to_string(), &before)
                })?;
                let model_says = if model == RequeueResult::Applied { "applied" } else { "not_requeueable" };
                if model_says != result {
                    return Err(diverge(conformance(Conformance::C6), model_says.into(), result.clone(), &before));
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
    fn adopt(&self, b: &mut Branch, line: usize, event: &Event, plan: &Plan) {
        use crate::core::policy::{BudgetPredicate, WriteFence};
        let &Plan::Ids { tenant, relay, ref messages, aggregate } = plan else { return };
        let mut lax = self.policy;
        lax.claim_by_tenant = false;
        lax.write_checks_tenant = false;
        lax.claim_live_leases = true;
        lax.claim_terminal = true;
        lax.budget = BudgetPredicate::Absent;
        lax.retry_clock = false;
        lax.write_fence = WriteFence::MessageIdOnly;
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
                if let Some(to) = self.header.status(to) {
                    force_release(b, messages[0], to, *next_attempt_at, *now);
                    b.open.push(messages[0]);
                }
            }
            Event::Reap { now, .. } => {
                for &id in messages {
                    force_release(b, id, Status::Exhausted, None, *now);
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

    /// " — the claim at line L by R (token T) had superseded its lease": the latest claim of
    /// `id` in the history, for a superseded write (empty if the history has none).
    fn superseded_by(&self, b: &Branch, id: MessageId) -> String {
        let latest = b.auditor.ghost(id).map_or(0, |g| g.claims);
        b.held
            .iter()
            .rev()
            .find(|h| h.lease.message_id == id && h.lease.claim_seq == latest)
            .map(|h| {
                let token = h.token_text().map(|t| format!(" (token {t})")).unwrap_or_default();
                format!(
                    " — the claim at line {} by {}{token} had superseded its lease",
                    h.line,
                    self.name_of(2, u32::from(h.relay.0))
                )
            })
            .unwrap_or_default()
    }

    /// A text the core wrote with the model's ids (`m0`, `r1`, `tenant0`, `agg2`), in the
    /// history's own names.
    fn words(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(|c: char| c.is_ascii_alphanumeric()) {
            out.push_str(&rest[..start]);
            rest = &rest[start..];
            let end = rest.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(rest.len());
            let word = &rest[..end];
            let named = [("tenant", 1u8), ("agg", 3), ("m", 0), ("r", 2)].iter().find_map(|&(prefix, kind)| {
                let digits = word.strip_prefix(prefix)?;
                let id: u32 = (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| digits.parse().ok())
                    .flatten()?;
                self.names[kind as usize].name(id).map(str::to_string)
            });
            out.push_str(named.as_deref().unwrap_or(word));
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }

    /// The divergence's rows in the history's names: message, tenant, aggregate, the relay
    /// holding the lease and its token as the history wrote it (where a claim of the history
    /// handed it out).
    fn in_your_names(&self, mut d: Divergence, b: &Branch) -> Divergence {
        let instant = |t: Option<Instant>| t.map(|t| t.0);
        // The model's status names, in the history's own where its header maps them.
        if self.header.statuses.is_some() {
            for status in Status::ALL {
                let theirs = self.header.status_name(status);
                if theirs != status.as_str() {
                    d.expected = d.expected.replace(status.as_str(), &theirs);
                    d.got = d.got.replace(status.as_str(), &theirs);
                }
            }
        }
        d.rows = std::mem::take(&mut d.model_rows)
            .iter()
            .map(|row| {
                let token = b
                    .held
                    .iter()
                    .rev()
                    .find(|h| h.lease.message_id == row.message_id && h.lease.token == row.lease_token)
                    .and_then(Held::token_text);
                serde_json::json!({
                    "message": self.name_of(0, row.message_id.0),
                    "tenant": self.name_of(1, u32::from(row.tenant_id.0)),
                    // A job of a history without enqueues has no aggregate.
                    "aggregate": (row.aggregate_id.0 & IMPLICIT_AGGREGATE == 0).then(|| self.name_of(3, row.aggregate_id.0)),
                    "aggregate_version": row.aggregate_version,
                    "status": self.header.status_name(row.status),
                    "attempts": row.attempts,
                    "lease_owner": row.lease_owner.map(|o| self.name_of(2, u32::from(o.0))),
                    "lease_token": token,
                    "lease_expires_at": instant(row.lease_expires_at),
                    "next_attempt_at": instant(row.next_attempt_at),
                })
            })
            .collect();
        d
    }

    fn name_of(&self, kind: u8, id: u32) -> String {
        self.names[kind as usize].name(id).map_or_else(|| id.to_string(), str::to_string)
    }
}

#[derive(Clone, Debug)]
enum Plan {
    Ids { tenant: TenantId, relay: RelayId, messages: SmallVec<[MessageId; 2]>, aggregate: AggregateId },
    Nothing,
}

/// A row a history without enqueues brings in with its first claim: a job of its own, with an
/// aggregate apart from every one the history names.
fn implicit_enqueue(b: &mut Branch, tenant: TenantId, id: MessageId, now: Instant) {
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
enum Locked {
    Nothing,
    Any,
    Rows(SmallVec<[MessageId; 2]>),
}

fn locked_by(event: &Event, plan: &Plan) -> Locked {
    let Plan::Ids { messages, .. } = plan else { return Locked::Nothing };
    match event {
        Event::Claim { outcome: Outcome::Unknown, .. } => Locked::Any,
        Event::Claim { .. } | Event::Reap { .. } => Locked::Rows(messages.clone()),
        Event::Write { result: WriteReport::Applied | WriteReport::Unknown, .. } => Locked::Rows(messages.clone()),
        Event::Release { result, .. } | Event::Requeue { result, .. } if result == "applied" => {
            Locked::Rows(messages.clone())
        }
        _ => Locked::Nothing,
    }
}

/// A row of a divergence (as [`Divergence::rows`] holds it) in words: "m1 of acme: IN_FLIGHT,
/// attempts 1, leased to relay-a (token 7) until t=31000".
pub fn row_words(row: &serde_json::Value) -> String {
    let text = |key: &str| row.get(key).and_then(|v| v.as_str()).map(str::to_string);
    let number = |key: &str| row.get(key).and_then(|v| v.as_u64());
    let mut out = format!(
        "{} of {}: {}, attempts {}",
        text("message").unwrap_or_default(),
        text("tenant").unwrap_or_default(),
        text("status").unwrap_or_default(),
        number("attempts").unwrap_or(0)
    );
    if let Some(owner) = text("lease_owner") {
        out += &format!(", leased to {owner}");
    }
    if let Some(token) = text("lease_token") {
        out += &format!(" (token {token})");
    }
    if let Some(until) = number("lease_expires_at") {
        out += &format!(" until t={until}");
    }
    if let Some(at) = number("next_attempt_at") {
        out += &format!(", retry at t={at}");
    }
    out
}

/// Who did a write or a release and with which lease, in the history's words: "mark_published
/// by worker-1 (token 1)", "the release by rescuer (id fence, having read token 1)".
fn doer(event: &Event) -> Option<String> {
    let lease = |token: &Option<String>, attempt: &Option<u32>| match (token, attempt) {
        (Some(t), _) => format!("token {t}"),
        (None, Some(a)) => format!("attempt {a}"),
        (None, None) => "no token".to_string(),
    };
    match event {
        Event::Write { relay, write, token, attempt, .. } => {
            Some(format!("{write} by {relay} ({})", lease(token, attempt)))
        }
        Event::Release { relay, fence, token, attempt, to, .. } => Some(format!(
            "the release to {to} by {} ({fence} fence, having read {})",
            relay.as_deref().unwrap_or("maintenance"),
            lease(token, attempt)
        )),
        _ => None,
    }
}

fn event_json(event: &Event) -> serde_json::Value {
    serde_json::to_value(event).unwrap_or_else(|_| serde_json::Value::String(event.name().to_string()))
}

/// The policy a write runs under: a `delete` or `archive` takes the row out of the table, so no
/// later statement matches it (the core's completion by deletion), whatever the design marks.
fn completing(mut policy: Policy, write: &str) -> Policy {
    if matches!(write, "delete" | "archive") {
        policy.completion = crate::core::policy::Completion::Delete;
    }
    policy
}

fn write_kind(name: &str, code: Option<FailureCode>) -> Option<WriteKind> {
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

/// FNV-1a: a stable number for a key that is not the message id.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
