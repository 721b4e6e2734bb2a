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
    pub(super) model_rows: Vec<Row>,
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

    pub(super) fn new(
        line: usize,
        event: &Event,
        blame: Blame,
        expected: String,
        got: String,
        rows: &[Row],
    ) -> Divergence {
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
