//! What the oracle says: a [`Verdict`] of [`Divergence`]s, each with its [`Blame`] (a safety
//! property or a conformance finding) and the [`Otherwise`] branches of unknown outcomes; the
//! words a person reads are made from them here.

use super::*;

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
            Conformance::C5 => "the reaper or the scheduler moved other rows than the declared design's",
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

/// The lease a write or release of the history presented: its token as the history wrote it,
/// else the attempt its claim handed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presented {
    Token(String),
    Attempt(u32),
    Nothing,
}

impl Presented {
    pub(super) fn of(token: &Option<String>, attempt: &Option<u32>) -> Presented {
        match (token, attempt) {
            (Some(t), _) => Presented::Token(t.clone()),
            (None, Some(a)) => Presented::Attempt(*a),
            (None, None) => Presented::Nothing,
        }
    }
}

impl std::fmt::Display for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Presented::Token(t) => write!(f, "token {t}"),
            Presented::Attempt(a) => write!(f, "attempt {a}"),
            Presented::Nothing => f.write_str("no token"),
        }
    }
}

/// Who did a write or a release of the history, as the history names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    Write {
        write: String,
        relay: String,
        lease: Presented,
    },
    /// A release by a relay, or by maintenance where the history names none.
    Release {
        to: String,
        relay: Option<String>,
        fence: String,
        lease: Presented,
    },
}

impl Actor {
    pub(super) fn of(event: &Event) -> Option<Actor> {
        match event {
            Event::Write { relay, write, token, attempt, .. } => {
                Some(Actor::Write { write: write.clone(), relay: relay.clone(), lease: Presented::of(token, attempt) })
            }
            Event::Release { relay, fence, token, attempt, to, .. } => Some(Actor::Release {
                to: to.clone(),
                relay: relay.clone(),
                fence: fence.clone(),
                lease: Presented::of(token, attempt),
            }),
            _ => None,
        }
    }
}

/// "mark_published by worker-1 (token 1)", "the release by rescuer (id fence, having read
/// token 1)".
impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Actor::Write { write, relay, lease } => write!(f, "{write} by {relay} ({lease})"),
            Actor::Release { to, relay, fence, lease } => write!(
                f,
                "the release to {to} by {} ({fence} fence, having read {lease})",
                relay.as_deref().unwrap_or("maintenance")
            ),
        }
    }
}

/// The claim whose lease had superseded the one a write or release applied for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superseder {
    pub line: usize,
    pub relay: RelayId,
    /// Its token as the history wrote it, where it had one.
    pub token: Option<String>,
}

/// What the oracle asked of the core when the core refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    Enqueue,
    Claim,
    Write,
    Release,
    Requeue,
}

/// What the history did that the model does not, as facts: the model's ids (put in the
/// history's names when the words are made), the history's own values where it wrote them, and
/// what the model did instead. [`Finding::words`] makes the words, here and only here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// The auditor saw the step the implementation took break a property; where the property is
    /// S1, the claim that had superseded the lease.
    Broken { breach: Breach, superseded_by: Option<Superseder> },
    /// S2: the declared design's claim left a row's token as it was.
    KeptToken { relay: String, message: MessageId },
    /// S1: a write or release of the history applied for a lease a later claim had superseded.
    AppliedSuperseded { actor: Actor, message: MessageId, superseded_by: Option<Superseder> },
    /// The finding of one resolution of the unknown outcomes (its resolutions, as the accepted
    /// part of a verdict lists them), where another went on further.
    Under { resolutions: Vec<String>, finding: Box<Finding> },
    /// The core refused what the event asks.
    Refused { asked: Asked, error: CoreError },
    /// An enqueue under the id of a row the history deleted.
    ReusedId { message: MessageId },
    /// An enqueue's result differs from the model's.
    EnqueueResult { model: EnqueueResult, got: String },
    /// A claim returned a row the design's claim refuses.
    ClaimRefused { message: MessageId, refusal: ClaimRefusal },
    /// A serial claim returned other rows than the design's, or in another order; the line of a
    /// write of unknown outcome to a row it passed over, where there is one.
    ClaimOrder { model: Vec<MessageId>, got: Vec<MessageId>, unknown_write_at: Option<usize> },
    /// A claim's attempts differ from the model's.
    Attempts { message: MessageId, model: u32, got: u32 },
    /// A claim handed out a token the row had had (at the claim on line `at`).
    TokenReused { message: MessageId, token: String, at: usize },
    /// A counter design's claim handed out a token lower than the claim on line `at` did.
    TokenLower { message: MessageId, token: String, max: u64, at: usize },
    /// A write the trace format does not know.
    UnknownWrite { write: String },
    /// A write or release named a row the history never enqueued.
    UnknownRow { asked: Asked, message: MessageId },
    /// A write's result differs from the model's.
    WriteResult { model: WriteResult, got: WriteReport, superseded_by: Option<Superseder> },
    /// The status a write left differs from the model's (`got` as the history wrote it).
    Status { model: Status, got: String },
    /// A write that applied left the retry time it chose not later than its own now.
    RetryNotLater { status: Status, at: u64, now: Instant },
    /// A release to a status that does not end a lease.
    ReleaseTo { to: String },
    /// A release's result differs from the model's.
    ReleaseResult { model: WriteResult, got: String, superseded_by: Option<Superseder> },
    /// The reaper took other rows than the design's.
    Reaped { model: Vec<MessageId>, got: Vec<MessageId> },
    /// The scheduler made other rows claimable than the design's scheduler.
    Scheduled { model: Vec<MessageId>, got: Vec<MessageId> },
    /// A requeue's result differs from the model's.
    RequeueResult { model: RequeueResult, got: String },
    /// A claim (or, with `schedule`, the scheduler) passed over a claimable (due) row no
    /// transaction of the history could have locked; the line of an earlier write of unknown
    /// outcome to it, where there is one.
    Skipped { message: MessageId, unknown_write_at: Option<usize>, schedule: bool },
    /// No resolution of the unknown outcomes leaves a history for this event.
    NoHistory,
}

impl Finding {
    /// What the model allows (empty where it is only "no violation") and what the
    /// implementation did, in `names`.
    pub fn words(&self, names: &dyn Naming) -> (String, String) {
        let m = |id: MessageId| names.message_name(id);
        let list = |ids: &[MessageId]| ids.iter().map(|id| m(*id)).collect::<Vec<_>>().join(", ");
        let superseded = |by: &Option<Superseder>| {
            by.as_ref().map_or_else(String::new, |s| {
                let token = s.token.as_ref().map(|t| format!(" (token {t})")).unwrap_or_default();
                format!(
                    " — the claim at line {} by {}{token} had superseded its lease",
                    s.line,
                    names.relay_name(s.relay)
                )
            })
        };
        let result = |r: &WriteResult| match *r {
            WriteResult::Applied { status } => format!("applied → {}", names.status_name(status)),
            WriteResult::Stale { reason: StaleReason::NotInFlight } => {
                format!("stale: the row is no longer {}", names.status_name(Status::InFlight))
            }
            WriteResult::Stale { reason } => format!("stale: {reason}"),
        };
        match self {
            Finding::Broken { breach, superseded_by } => {
                (String::new(), format!("{}{}", breach.words(names), superseded(superseded_by)))
            }
            Finding::KeptToken { relay, message } => (
                String::new(),
                format!(
                    "the claim by {relay} left {} with the token it already had: this design's claim does not move the token",
                    m(*message)
                ),
            ),
            Finding::AppliedSuperseded { actor, message, superseded_by } => (
                String::new(),
                format!(
                    "{actor} applied to {}, for a lease that was no longer the latest{}",
                    m(*message),
                    superseded(superseded_by)
                ),
            ),
            Finding::Under { resolutions, finding } => {
                let (expected, got) = finding.words(names);
                (expected, format!("{got} (where the unknown outcomes resolve as {})", resolutions.join(", ")))
            }
            Finding::Refused { asked, error } => {
                let error = match error {
                    CoreError::DuplicateMessageId(id) => format!("duplicate message id {}", m(*id)),
                    CoreError::UnknownMessage(id) => format!("no row with message id {}", m(*id)),
                    other => other.to_string(),
                };
                let expected = match asked {
                    Asked::Enqueue => "a valid enqueue",
                    Asked::Claim => "a valid claim",
                    Asked::Write => "a write to a known row",
                    Asked::Release => "a release of a known row",
                    Asked::Requeue => "a requeue of a known row",
                };
                (expected.to_string(), error)
            }
            Finding::ReusedId { message } => (
                "a new message id (the model never reuses one, not even a deleted row's)".to_string(),
                format!("an enqueue of {}, the id of a row the history deleted", m(*message)),
            ),
            Finding::EnqueueResult { model, got } => {
                let model = match model {
                    EnqueueResult::Applied { .. } => "applied",
                    EnqueueResult::Stale { .. } => "stale",
                };
                (model.to_string(), got.clone())
            }
            Finding::ClaimRefused { message, refusal } => {
                (format!("no claim of {} ({refusal})", m(*message)), format!("a claim of {}", m(*message)))
            }
            Finding::ClaimOrder { model, got, unknown_write_at } => {
                let rows = |ids: &[MessageId]| if ids.is_empty() { "no row".to_string() } else { list(ids) };
                (
                    format!("a claim of {} (the history's claims run one at a time: concurrency serial)", rows(model)),
                    format!("a claim of {}{}", rows(got), unknown_write_hint(*unknown_write_at)),
                )
            }
            Finding::Attempts { message, model, got } => {
                (format!("attempts = {model} after the claim of {}", m(*message)), format!("attempts = {got}"))
            }
            Finding::TokenReused { message, token, at } => (
                format!("a token {} never had", m(*message)),
                format!("token {token} for {}, which the claim at line {at} already handed out", m(*message)),
            ),
            Finding::TokenLower { message, token, max, at } => (
                format!("a token of {} greater than every earlier one", m(*message)),
                format!("token {token} for {}, lower than token {max} from the claim at line {at}", m(*message)),
            ),
            Finding::UnknownWrite { write } => ("a known write".to_string(), write.clone()),
            Finding::UnknownRow { asked: Asked::Release, message } => {
                ("a release of a known row".to_string(), format!("a release of {}", m(*message)))
            }
            Finding::UnknownRow { message, .. } => {
                ("a write to a known row".to_string(), format!("a write to {}", m(*message)))
            }
            Finding::WriteResult { model, got, superseded_by } => {
                (format!("the write {}", result(model)), format!("{}{}", got.as_str(), superseded(superseded_by)))
            }
            Finding::Status { model, got } => (format!("status {}", names.status_name(*model)), format!("status {got}")),
            Finding::RetryNotLater { status, at, now } => (
                String::new(),
                format!(
                    "the write left the row {} with the retry time t={at} it chose, not later than its now {now}",
                    names.status_name(*status)
                ),
            ),
            Finding::ReleaseTo { to } => (
                "a release to a status that ends a lease (PENDING, AMBIGUOUS, FAILED, EXHAUSTED)".to_string(),
                format!("a release to {to}"),
            ),
            Finding::ReleaseResult { model, got, superseded_by } => {
                (format!("the release {}", result(model)), format!("{got}{}", superseded(superseded_by)))
            }
            Finding::Reaped { model, got } => (format!("reaping [{}]", list(model)), format!("[{}]", list(got))),
            Finding::Scheduled { model, got } => (format!("scheduling [{}]", list(model)), format!("[{}]", list(got))),
            Finding::RequeueResult { model, got } => {
                let model = if *model == RequeueResult::Applied { "applied" } else { "not_requeueable" };
                (model.to_string(), got.clone())
            }
            Finding::Skipped { message, unknown_write_at, schedule } => {
                let name = m(*message);
                let hint = unknown_write_hint(*unknown_write_at);
                let (model, step, ready) = if *schedule {
                    (format!("scheduling {name} too"), "a scheduler step", "due")
                } else {
                    (format!("a claim of {name} too"), "a claim", "claimable")
                };
                (
                    model,
                    format!(
                        "{step} that passed over {name} while it was {ready}, and no transaction of the history could have held its lock then (concurrency skip-locked){hint}"
                    ),
                )
            }
            Finding::NoHistory => ("no history".to_string(), "an event".to_string()),
        }
    }

    /// Whether the model allows nothing but what the implementation did: the declared design's
    /// core took the step as the implementation did and saw it break a property.
    pub fn by_the_design(&self) -> bool {
        match self {
            Finding::Broken { .. }
            | Finding::KeptToken { .. }
            | Finding::AppliedSuperseded { .. }
            | Finding::RetryNotLater { .. } => true,
            Finding::Under { finding, .. } => finding.by_the_design(),
            _ => false,
        }
    }
}

/// The aggregate ids of rows a history without enqueues brought in with their first claim: one
/// per row, apart from every aggregate the history names.
pub(super) const IMPLICIT_AGGREGATE: u32 = 0x8000_0000;

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
    /// What happened, as facts.
    #[serde(skip)]
    pub finding: Finding,
    /// What the model allows, where that is more than "no violation" (empty then): the
    /// finding's words ([`Finding::words`]) in the history's own names.
    pub expected: String,
    /// What the implementation did: the finding's words in the history's own names.
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
    pub(super) model_rows: Vec<Row>,
    /// The resolutions of the unknown outcomes in the branch that found it.
    #[serde(skip)]
    pub(super) resolutions: Vec<String>,
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
    pub(super) fn headline(&self) -> String {
        let blame = match self.blame {
            Blame::Safety(p) => format!("{p}"),
            Blame::Conformance(c) => format!("{c} (no safety property broken)"),
        };
        format!("{blame}: {}", self.said())
    }

    /// What happened, without the finding's name: "the model allows …, the implementation
    /// reported …", or only what it did where the model allows nothing else.
    pub fn said(&self) -> String {
        if self.expected.is_empty() {
            self.got.clone()
        } else {
            format!("the model allows {}, the implementation reported {}", self.expected, self.got)
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

    /// The same divergence with another finding, its words made again.
    pub(super) fn reworded(mut self, finding: Finding, names: &dyn Naming) -> Divergence {
        (self.expected, self.got) = finding.words(names);
        self.finding = finding;
        self
    }

    /// The divergence, said to be found under the resolutions of its branch that `others` (the
    /// branches that went on) do not share.
    pub(super) fn under(self, others: &[Vec<String>], names: &dyn Naming) -> Divergence {
        let resolutions: Vec<String> =
            self.resolutions.iter().filter(|r| !others.iter().all(|o| o.contains(r))).cloned().collect();
        if resolutions.is_empty() {
            return self;
        }
        let finding = Finding::Under { resolutions, finding: Box::new(self.finding.clone()) };
        self.reworded(finding, names)
    }

    /// A divergence at `line`, its words made in `names` (the history's).
    pub(super) fn new(
        line: usize,
        event: &Event,
        blame: Blame,
        finding: Finding,
        rows: &[Row],
        names: &dyn Naming,
    ) -> Divergence {
        let (expected, got) = finding.words(names);
        Divergence {
            line,
            event: event_json(event),
            blame,
            finding,
            expected,
            got,
            rows: Vec::new(),
            resolutions_dropped: false,
            otherwise: Vec::new(),
            model_rows: rows.to_vec(),
            resolutions: Vec::new(),
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

    /// Whether any divergence is more than the false failure (S11): what a run of the declared
    /// design's own relays fails on. S11 alone is reported there and fails nothing, as in
    /// `check` and `sim` (decision 77); a recorded history that shows it still diverges.
    pub fn beyond_false_failures(&self) -> bool {
        self.divergences.iter().any(|d| d.blame != Blame::Safety(Property::S11))
    }

    /// The safety property the first divergence breaks where the model allows nothing else: the
    /// declared design's core took that step as the implementation did, so the design breaks
    /// the property by itself.
    pub fn design_breaks(&self) -> Option<Property> {
        self.first().filter(|d| d.finding.by_the_design()).and_then(|d| d.blame.property())
    }
}

/// " (the write of unknown outcome at line N may have applied where the design refuses it: S1 if
/// so)", where a claim passed over a row such a write had written to.
fn unknown_write_hint(at: Option<usize>) -> String {
    at.map(|at| {
        format!(" (the write of unknown outcome at line {at} may have applied where the design refuses it: S1 if so)")
    })
    .unwrap_or_default()
}

/// The divergence to report when every resolution of the unknown outcomes failed at one event:
/// a safety property one of them breaks rather than a departure from the design in another, and
/// with it what each other resolution breaks where that differs — so the report never says more
/// than the history shows (decision 62). Where all fail alike, `otherwise` stays empty: the
/// finding is the history's whichever way the outcomes went.
pub(super) fn choose(failures: Vec<Divergence>) -> Option<Divergence> {
    let id = Divergence::finding;
    let pick =
        failures.iter().position(|d| d.blame.is_safety()).or(if failures.is_empty() { None } else { Some(0) })?;
    let mut others: Vec<Otherwise> = Vec::new();
    let mut seen = vec![id(&failures[pick])];
    let line = failures[pick].line;
    for d in &failures {
        if !seen.contains(&id(d)) {
            seen.push(id(d));
            let mut words = d.headline().lines().next().unwrap_or_default().to_string();
            // A resolution that failed at another event than the one reported.
            if d.line != line {
                words = format!("at line {}: {words}", d.line);
            }
            others.push(Otherwise { blame: d.blame, words });
        }
    }
    let mut chosen = failures.into_iter().nth(pick)?;
    chosen.otherwise = others;
    Some(chosen)
}
