//! The trace format: what an implementation of the outbox observed, one JSON object per line.
//!
//! The first line is a header (`{"format": "outbox-check-trace", "version": 1, ...}`); every
//! other line is an [`Event`] in the order the implementation committed it. Identifiers are the
//! implementation's own strings (message ids, relay ids, tenants, tokens): the oracle maps them.
//! The format is documented in docs/trace-format.md, with a JSON Schema beside it.

use crate::core::{FailureCode, Status};
use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "outbox-check-trace";
/// The version this build writes; it reads 1 and 2.
pub const VERSION: u32 = 2;

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The design the implementation claims to follow (default: `reference`).
    #[serde(default)]
    pub variant: Option<String>,
    /// The attempt budget the implementation runs with.
    pub max_attempts: u32,
    /// The retry clock: first delay and cap, in the trace's time unit (default 1000 and 60000).
    #[serde(default)]
    pub backoff_base: Option<u64>,
    #[serde(default)]
    pub backoff_cap: Option<u64>,
    /// Free text: what recorded this trace.
    #[serde(default)]
    pub source: Option<String>,
    /// How claims ran: `serial` (one at a time: every claim must return exactly the rows the
    /// design's claim returns) or `skip-locked` (concurrent claims that skip rows other
    /// transactions hold: a claim may skip a row only where the history shows another
    /// transaction could have held it). Default: `serial` in version 2, `skip-locked` in 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// The design by its switches, over `variant` (version 2): a queue is described without
    /// picking a built-in design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub design: Option<Switches>,
    /// The implementation's own status names, each mapped onto one of the model's six, or onto
    /// several its statements do not tell apart (version 2): `{"available": "PENDING",
    /// "running": "IN_FLIGHT", "completed": "PUBLISHED", "discarded": ["FAILED", "EXHAUSTED"]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statuses: Option<std::collections::BTreeMap<String, StatusList>>,
    /// Every relay (and maintenance job) that may appear (version 2, optional): under
    /// skip-locked, once each has logged an event after a claim, nothing later can excuse a row
    /// the claim passed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relays: Option<Vec<String>>,
}

impl Header {
    /// A version-2 header for `variant` (the fields the project's own recorders leave out
    /// stay out).
    pub fn new(variant: &str, max_attempts: u32) -> Header {
        Header {
            format: FORMAT.to_string(),
            version: VERSION,
            variant: Some(variant.to_string()),
            max_attempts,
            backoff_base: None,
            backoff_cap: None,
            source: None,
            concurrency: None,
            design: None,
            statuses: None,
            relays: None,
        }
    }

    /// How the claims ran, with the version's default.
    pub fn claims(&self) -> Concurrency {
        self.concurrency.unwrap_or(if self.version == 1 { Concurrency::SkipLocked } else { Concurrency::Serial })
    }

    /// The model's statuses a name of the history stands for: one of the implementation's own
    /// names (the header's `statuses`: one status, or several no statement tells apart), else
    /// one of the six; none for a name that is neither.
    pub fn statuses_of(&self, name: &str) -> Vec<Status> {
        match self.statuses.as_ref().and_then(|m| m.get(name)) {
            Some(list) => list.models().iter().filter_map(|m| Status::parse(m)).collect(),
            None => Status::parse(name).into_iter().collect(),
        }
    }

    /// Whether a name of the history stands for `status`.
    pub fn stands_for(&self, name: &str, status: Status) -> bool {
        self.statuses_of(name).contains(&status)
    }

    /// The implementation's name for a status of the model (its first, where it has several).
    pub fn status_name(&self, status: Status) -> String {
        self.statuses
            .as_ref()
            .and_then(|m| {
                m.iter()
                    .find(|(_, list)| list.models().iter().any(|m| m == status.as_str()))
                    .map(|(name, _)| name.clone())
            })
            .unwrap_or_else(|| status.as_str().to_string())
    }
}

/// What one of the header's status names stands for: one of the model's statuses, or a list of
/// them no statement tells apart (`["FAILED", "EXHAUSTED"]`: a queue's one `discarded`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatusList {
    One(String),
    Several(Vec<String>),
}

impl StatusList {
    /// The model's status names it lists.
    pub fn models(&self) -> &[String] {
        match self {
            StatusList::One(one) => std::slice::from_ref(one),
            StatusList::Several(several) => several,
        }
    }
}

/// A design by its switches (the header's `design`): each one given replaces the named
/// variant's (default `reference`). docs/trace-format.md lists them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switches {
    /// `claim` (the claim counts an attempt) or `failure` (each failure write does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_counted: Option<AttemptsCounted>,
    /// What a terminal write checks: `token-and-owner`, `token`, `owner` or `id-only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_fence: Option<Fence>,
    /// `counter` (each claim adds one; lower or equal tokens break S2) or `random` (compared
    /// for equality: a token must never repeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    /// The claim refuses a row whose budget is spent (`attempts < max_attempts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<bool>,
    /// Claims honour the row's retry time, and failure writes set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_clock: Option<bool>,
    /// A failure write past the budget moves the row to EXHAUSTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhausted_status: Option<bool>,
    /// Claims take only their tenant's rows; writes check the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_scoped: Option<bool>,
    /// `due` (retry time or creation, then id) or `created` (creation, tenant, id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_order: Option<Order>,
    /// A row given a retry time waits for the scheduler (`schedule` events), and claims take
    /// only rows without one (River's `JobSchedule`, Oban's `stage_jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttemptsCounted {
    Claim,
    Failure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fence {
    TokenAndOwner,
    Token,
    Owner,
    IdOnly,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tokens {
    Counter,
    Random,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    Due,
    Created,
}

impl Switches {
    /// `policy` with these switches set.
    pub fn apply(&self, mut policy: crate::core::Policy) -> crate::core::Policy {
        use crate::core::policy::{AttemptsAt, BudgetPredicate, ClaimOrder, TokenKind, WriteFence};
        if let Some(at) = self.attempts_counted {
            policy.attempts_at = match at {
                AttemptsCounted::Claim => AttemptsAt::Claim,
                AttemptsCounted::Failure => AttemptsAt::FailureWrite,
            };
        }
        if let Some(fence) = self.write_fence {
            policy.write_fence = match fence {
                Fence::TokenAndOwner => WriteFence::StatusOwnerToken,
                Fence::Token => WriteFence::StatusToken,
                Fence::Owner => WriteFence::StatusOwner,
                Fence::IdOnly => WriteFence::MessageIdOnly,
            };
        }
        if let Some(tokens) = self.tokens {
            policy.token_kind = match tokens {
                Tokens::Counter => TokenKind::Counter,
                Tokens::Random => TokenKind::Random,
            };
        }
        if let Some(budget) = self.budget {
            policy.budget = if budget { BudgetPredicate::Strict } else { BudgetPredicate::Absent };
        }
        if let Some(clock) = self.retry_clock {
            policy.retry_clock = clock;
        }
        if let Some(exhausted) = self.exhausted_status {
            policy.exhausted_status = exhausted;
        }
        if let Some(scoped) = self.tenant_scoped {
            policy.claim_by_tenant = scoped;
            policy.write_checks_tenant = scoped;
        }
        if let Some(order) = self.claim_order {
            policy.claim_order = match order {
                Order::Due => ClaimOrder::Due,
                Order::Created => ClaimOrder::Created,
            };
        }
        if let Some(scheduler) = self.scheduler {
            policy.scheduler = scheduler;
        }
        policy
    }
}

/// How the claims of a history ran (the header's `concurrency`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Concurrency {
    Serial,
    SkipLocked,
}

/// What a statement's caller learnt about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The reply arrived.
    Ok,
    /// The connection died: the statement may or may not have committed.
    Unknown,
}

fn ok() -> Outcome {
    Outcome::Ok
}

/// A lease as the implementation saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceLease {
    pub message: String,
    /// A string or an integer in the file (many queues' tokens are numbers); absent where the
    /// implementation hands out no token (it cannot fence: each claim is a lease of its own).
    #[serde(default, deserialize_with = "token_text_opt", skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub attempts: u32,
}

/// A token written as a string or as a non-negative integer, read as text.
fn token_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    // (Also reached through token_text_opt for every optional token field.)
    struct Token;
    impl serde::de::Visitor<'_> for Token {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a token: a string or a non-negative integer")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    deserializer.deserialize_any(Token)
}

fn token_text_opt<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    token_text(deserializer).map(Some)
}

/// A field whose value must be one of `allowed`: anything else is bad input, at its column.
fn one_of<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
    allowed: &'static [&'static str],
) -> Result<String, D::Error> {
    let value = String::deserialize(deserializer)?;
    if allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        Err(serde::de::Error::unknown_variant(&value, allowed))
    }
}

/// The terminal writes the format knows: the five of the model, and two completions that take
/// the row out of the table (`delete`, `archive`: a job queue's way to mark a job done).
pub const WRITES: [&str; 7] =
    ["mark_published", "mark_ambiguous", "mark_retry", "mark_failed", "mark_exhausted", "delete", "archive"];

fn write_name<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    one_of(deserializer, &WRITES)
}

fn enqueue_result<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    one_of(deserializer, &["applied", "stale"])
}

fn release_fence<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    one_of(deserializer, &["token", "expired", "id"])
}

fn release_result<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    one_of(deserializer, &["applied", "stale"])
}

fn requeue_result<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    one_of(deserializer, &["applied", "not_requeueable"])
}

impl PublishAnswer {
    /// As the format writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PublishAnswer::Ack => "ack",
            PublishAnswer::Timeout => "timeout",
            PublishAnswer::Unavailable => "unavailable",
            PublishAnswer::Rejected => "rejected",
        }
    }
}

impl WriteReport {
    /// As the format writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteReport::Applied => "applied",
            WriteReport::Stale => "stale",
            WriteReport::Unknown => "unknown",
        }
    }
}

/// The broker's answer to a publication, as the relay saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishAnswer {
    Ack,
    Timeout,
    Unavailable,
    Rejected,
}

impl From<crate::relay::PublishOutcome> for PublishAnswer {
    /// What the relay cycle was told, as the history records it.
    fn from(outcome: crate::relay::PublishOutcome) -> PublishAnswer {
        use crate::relay::PublishOutcome as O;
        match outcome {
            O::Ack => PublishAnswer::Ack,
            O::RetryableFailure => PublishAnswer::Unavailable,
            O::Timeout => PublishAnswer::Timeout,
            O::Rejected => PublishAnswer::Rejected,
        }
    }
}

/// What a terminal write reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteReport {
    Applied,
    Stale,
    /// The connection died before the reply.
    Unknown,
}

/// Declares [`Event`] and, per variant, a private struct of its fields: the parser reads the
/// `event` tag first and then the rest of the object straight into that struct, instead of
/// buffering every object as serde's internally tagged enums do (twice as slow, and a wrong
/// type's column lost). One list of fields serves both.
macro_rules! events {
    ($( $(#[$vattr:meta])* $variant:ident { $( $(#[$fattr:meta])* $field:ident : $ty:ty ),* $(,)? } ),* $(,)?) => {
        /// One observed event.
        #[derive(Clone, Debug, PartialEq, Serialize)]
        #[serde(tag = "event", rename_all = "snake_case")]
        pub enum Event {
            $( $(#[$vattr])* $variant { $( $(#[$fattr])* $field: $ty ),* } ),*
        }

        /// The `event` tag.
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Tag {
            $( $variant ),*
        }

        /// The fields of each event, refusing any other: the fast path, for lines that carry
        /// only what the format knows.
        mod body {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                pub(super) struct $variant { $( $(#[$fattr])* pub(super) $field: $ty ),* }
            )*
        }

        /// The same fields, ignoring any other: for a line the fast path refused, read under
        /// `serde_ignored`, which notes what is ignored.
        mod lenient {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[derive(Deserialize)]
                pub(super) struct $variant { $( $(#[$fattr])* pub(super) $field: $ty ),* }
            )*
        }

        impl Tag {
            /// The rest of an event object, after its tag, as that event.
            fn read<'de, D: serde::Deserializer<'de>>(self, rest: D, lenient: bool) -> Result<Event, D::Error> {
                match (self, lenient) {
                    $(
                        (Tag::$variant, false) => {
                            let body::$variant { $( $field ),* } = Deserialize::deserialize(rest)?;
                            Ok(Event::$variant { $( $field ),* })
                        }
                        (Tag::$variant, true) => {
                            let lenient::$variant { $( $field ),* } = Deserialize::deserialize(rest)?;
                            Ok(Event::$variant { $( $field ),* })
                        }
                    )*
                }
            }
        }
    };
}

events! {
    /// The business transition and its outbox row.
    Enqueue {
        tenant: String,
        aggregate: String,
        expected_version: u32,
        message: String,
        now: u64,
        /// `applied` or `stale`.
        #[serde(deserialize_with = "enqueue_result")]
        result: String,
    },
    /// A claim and the leases it returned (none when `outcome` is `unknown`).
    Claim {
        relay: String,
        tenant: String,
        batch: u32,
        lease_ms: u64,
        now: u64,
        #[serde(default)]
        leases: Vec<TraceLease>,
        #[serde(default = "ok")]
        outcome: Outcome,
    },
    /// A publication: the key sent and the broker's answer. `stored`, when the recorder knows
    /// it (a test broker), says whether the broker really stored the message.
    Publish {
        relay: String,
        message: String,
        key: String,
        answer: PublishAnswer,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stored: Option<bool>,
        /// The token of the lease the relay published under (optional; without it the
        /// publication is charged to the relay's lease of the message that is still open).
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "token_text_opt")]
        token: Option<String>,
    },
    /// A terminal write with the lease it presented and what it reported.
    Write {
        relay: String,
        #[serde(deserialize_with = "write_name")]
        write: String,
        message: String,
        tenant: String,
        /// The lease's token; absent where the implementation has none.
        #[serde(default, deserialize_with = "token_text_opt", skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        /// Without a token: the attempt number the writer's claim handed out, which tells its
        /// claim from the others (absent: the writer's latest claim of the row).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        now: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<FailureCode>,
        result: WriteReport,
        /// The status the implementation says the row now has (optional): one of the six, or
        /// one of the header's `statuses`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        /// The retry time the implementation chose itself (optional; its own backoff): where
        /// given, the row waits until then instead of the design's backoff, and S7 judges the
        /// claims against it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_attempt_at: Option<u64>,
    },
    /// A maintenance job (a rescuer) ended a lease without a claim: the row moved `to` a status
    /// (PENDING or AMBIGUOUS, with or without a retry time; FAILED; EXHAUSTED), under a fence:
    /// `token` (the lease it read), `expired` (any expired lease) or `id` (none).
    Release {
        /// Who ran it (informational; default `maintenance`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relay: Option<String>,
        message: String,
        now: u64,
        /// The status the row moves to: one of the six, or one of the header's `statuses`.
        to: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_attempt_at: Option<u64>,
        #[serde(deserialize_with = "release_fence")]
        fence: String,
        /// The token of the lease the job read (what a `token` fence compares); or, without
        /// tokens, the attempt it read. Absent: the row's latest claim.
        #[serde(default, deserialize_with = "token_text_opt", skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        /// `applied` or `stale`.
        #[serde(deserialize_with = "release_result")]
        result: String,
    },
    /// The reaper ran and exhausted these messages.
    Reap { now: u64, messages: Vec<String> },
    /// The scheduler ran (`maintenance.scheduler`) and made these messages, whose retry time
    /// had passed, claimable again.
    Schedule { now: u64, messages: Vec<String> },
    /// An operator requeued a message.
    Requeue {
        message: String,
        #[serde(deserialize_with = "requeue_result")]
        result: String,
    },
    /// A clock reading (informational: `now` travels with each statement).
    Clock { now: u64 },
    /// A fault the recorder injected (informational).
    Fault { kind: String },
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Event, D::Error> {
        deserializer.deserialize_map(EventVisitor { lenient: false })
    }
}

/// An event read with fields the format does not know ignored (see [`read_line`]).
struct LenientEvent(Event);

impl<'de> Deserialize<'de> for LenientEvent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<LenientEvent, D::Error> {
        deserializer.deserialize_map(EventVisitor { lenient: true }).map(LenientEvent)
    }
}

struct EventVisitor {
    lenient: bool,
}

/// An object's first key: `None` when it is `event` (read without allocating), else the key.
struct FirstKey;

impl<'de> serde::de::DeserializeSeed<'de> for FirstKey {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Option<String>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for FirstKey {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<String>, E> {
        Ok((key != "event").then(|| key.to_string()))
    }
}

impl<'de> serde::de::Visitor<'de> for EventVisitor {
    type Value = Event;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an event object with an \"event\" field")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        use serde::de::Error;
        let Some(first) = map.next_key_seed(FirstKey)? else {
            return Err(A::Error::missing_field("event"));
        };
        let Some(first) = first else {
            // The usual shape (every recorder of this project writes the tag first).
            let tag: Tag = map.next_value()?;
            return tag.read(serde::de::value::MapAccessDeserializer::new(map), self.lenient);
        };
        // The tag comes later: gather the object, then read it.
        let mut object = serde_json::Map::new();
        object.insert(first, map.next_value()?);
        while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
            object.insert(key, value);
        }
        let tag = object.remove("event").ok_or_else(|| A::Error::missing_field("event"))?;
        let tag: Tag = serde_json::from_value(tag).map_err(A::Error::custom)?;
        // The gathered object is read again as a value, out of sight of the line's reader:
        // what this reading ignores is handed to it through SLOW_PATH_IGNORED.
        if !self.lenient {
            return tag.read(serde_json::Value::Object(object), false).map_err(A::Error::custom);
        }
        let mut note = |path: serde_ignored::Path<'_>| {
            SLOW_PATH_IGNORED.with(|ignored| ignored.borrow_mut().push(path.to_string()));
        };
        tag.read(serde_ignored::Deserializer::new(serde_json::Value::Object(object), &mut note), true)
            .map_err(A::Error::custom)
    }
}

impl Event {
    /// A rescuer's release of `message`, as `request` asked it, that moved the row to `to`
    /// (where it applied) with `result`.
    pub fn rescue_of(
        message: String,
        request: &crate::core::ReleaseRequest,
        to: crate::core::Status,
        result: crate::core::WriteResult,
    ) -> Event {
        Event::Release {
            relay: Some("rescuer".into()),
            message,
            now: request.now.0,
            to: to.as_str().to_string(),
            next_attempt_at: request.retry_at.filter(|_| to == crate::core::Status::Pending).map(|at| at.0),
            fence: request.fence.name().into(),
            token: Some(request.lease.token.0.to_string()),
            attempt: None,
            result: if matches!(result, crate::core::WriteResult::Applied { .. }) { "applied" } else { "stale" }.into(),
        }
    }

    /// A claim as committed, with the leases it returned; `message` names the messages.
    pub fn claim_of(
        relay: String,
        tenant: String,
        request: &crate::core::ClaimRequest,
        leases: &[crate::core::Lease],
        message: impl Fn(crate::core::MessageId) -> String,
    ) -> Event {
        Event::Claim {
            relay,
            tenant,
            batch: request.batch,
            lease_ms: request.lease.0,
            now: request.now.0,
            leases: leases
                .iter()
                .map(|l| TraceLease {
                    message: message(l.message_id),
                    token: Some(l.token.0.to_string()),
                    attempts: l.attempts,
                })
                .collect(),
            outcome: Outcome::Ok,
        }
    }

    /// A terminal write with the lease it presented and what it reported.
    pub fn write_of(
        relay: String,
        tenant: String,
        message: String,
        request: &crate::core::WriteRequest,
        result: WriteReport,
    ) -> Event {
        Event::Write {
            relay,
            write: request.kind.name().to_string(),
            message,
            tenant,
            token: Some(request.lease.token.0.to_string()),
            attempt: None,
            now: request.now.0,
            code: request.kind.code(),
            result,
            status: None,
            next_attempt_at: None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Event::Enqueue { .. } => "enqueue",
            Event::Claim { .. } => "claim",
            Event::Publish { .. } => "publish",
            Event::Write { .. } => "write",
            Event::Release { .. } => "release",
            Event::Reap { .. } => "reap",
            Event::Schedule { .. } => "schedule",
            Event::Requeue { .. } => "requeue",
            Event::Clock { .. } => "clock",
            Event::Fault { .. } => "fault",
        }
    }
}

impl From<crate::core::WriteResult> for WriteReport {
    fn from(result: crate::core::WriteResult) -> WriteReport {
        match result {
            crate::core::WriteResult::Applied { .. } => WriteReport::Applied,
            crate::core::WriteResult::Stale { .. } => WriteReport::Stale,
        }
    }
}

/// A line that could not be read: where, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// serde_json's message without its own "at line 1 column N": each line is parsed alone, so its
/// line would always say 1; the error names the file's line and column already.
fn json_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).map(str::to_string).unwrap_or(text)
}

/// How a trace is read.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions {
    /// Refuse fields the format does not know, instead of ignoring them with a warning.
    pub strict: bool,
    /// The status names of the design the history is checked against (its design file's
    /// `[statuses]`), for a version-2 header that names none.
    pub statuses: Option<&'static crate::core::design_file::StatusNames>,
}

/// Fields a reading ignored (real logs carry their own, such as a timestamp): each path
/// (`ts`, `leases.0.shard`) with the first line it was seen on.
pub type Ignored = std::collections::BTreeMap<String, usize>;

/// Parses a whole trace: the header, then one event per non-blank line. Unknown fields are
/// ignored (see [`parse_with`]).
pub fn parse(file: &str, text: &str) -> Result<(Header, Vec<(usize, Event)>), ParseError> {
    parse_with(file, text, ReadOptions::default()).map(|(header, events, _)| (header, events))
}

/// A whole history as [`parse_with`] reads it: the header, each event with its line, and the
/// fields it ignored.
pub type Parsed = (Header, Vec<(usize, Event)>, Ignored);

/// [`parse`] with options; also returns the fields it ignored.
pub fn parse_with(file: &str, text: &str, options: ReadOptions) -> Result<Parsed, ParseError> {
    let mut events = Vec::new();
    let (header, ignored) = stream_reader(
        file,
        text.as_bytes(),
        options,
        |header| Ok(header.clone()),
        |line, event| {
            events.push((line, event));
            true
        },
    )?;
    Ok((header, events, ignored))
}

thread_local! {
    /// Fields ignored while an event whose tag came late was read from its gathered object.
    static SLOW_PATH_IGNORED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The fields a lease may carry (the only object nested in an event).
const LEASE_FIELDS: [&str; 3] = ["message", "token", "attempts"];

fn unknown_field(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("unknown field")
}

/// Reads one event from `text`. The fast path refuses any field the format does not know; on
/// such a line, `strict` makes that the error, and otherwise the line is read again ignoring
/// them, each noted in `ignored` with its line.
fn read_event(text: &str, line: usize, strict: bool, ignored: &mut Ignored) -> Result<Event, (usize, String)> {
    let fast = match serde_json::from_str::<Event>(text) {
        Ok(event) => return Ok(event),
        Err(e) if unknown_field(&e) && !strict => e,
        Err(e) if unknown_field(&e) => {
            return Err((
                e.column().max(1),
                format!("{} (--strict refuses fields the format does not know)", json_message(&e)),
            ))
        }
        Err(e) => return Err((e.column().max(1), json_message(&e))),
    };
    let mut note = |path: String| {
        ignored.entry(path).or_insert(line);
    };
    let lenient = |text: &str, note: &mut dyn FnMut(String)| -> Result<Event, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let event: LenientEvent = serde_ignored::deserialize(&mut deserializer, |path| note(path.to_string()))?;
        for path in SLOW_PATH_IGNORED.with(|ignored| std::mem::take(&mut *ignored.borrow_mut())) {
            note(path);
        }
        Ok(event.0)
    };
    match lenient(text, &mut note) {
        Ok(event) => Ok(event),
        // The unknown field is inside a lease: drop what a lease does not know, then read again.
        Err(e) if unknown_field(&e) => {
            let mut value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| (e.column().max(1), json_message(&e)))?;
            if let Some(leases) = value.get_mut("leases").and_then(|l| l.as_array_mut()) {
                for (i, lease) in leases.iter_mut().enumerate() {
                    if let Some(object) = lease.as_object_mut() {
                        object.retain(|key, _| {
                            let known = LEASE_FIELDS.contains(&key.as_str());
                            if !known {
                                note(format!("leases.{i}.{key}"));
                            }
                            known
                        });
                    }
                }
            }
            lenient(&value.to_string(), &mut note).map_err(|e| (fast.column().max(1), json_message(&e)))
        }
        Err(e) => Err((e.column().max(1), json_message(&e))),
    }
}

/// Reads the header line, noting the fields it ignores (or refusing them, with `strict`).
fn read_header(text: &str, line: usize, strict: bool, ignored: &mut Ignored) -> Result<Header, (usize, String)> {
    let mut unknown = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let header: Header = serde_ignored::deserialize(&mut deserializer, |path| {
        let path = path.to_string();
        unknown.get_or_insert_with(|| path.clone());
        ignored.entry(path).or_insert(line);
    })
    .map_err(|e| (e.column().max(1), json_message(&e)))?;
    match unknown {
        Some(path) if strict => {
            Err((1, format!("unknown field `{path}` (--strict refuses fields the format does not know)")))
        }
        _ => Ok(header),
    }
}

/// Parses a trace line by line from a reader (a file, stdin) without keeping it: one line in
/// memory at a time, however long the history. `start` gets the header (and may refuse it with
/// a message), `each` every event with its line number and returns whether to go on. Returns
/// what `start` returned and the fields ignored.
pub fn stream_reader<T>(
    file: &str,
    mut reader: impl std::io::BufRead,
    options: ReadOptions,
    start: impl FnOnce(&Header) -> Result<T, String>,
    mut each: impl FnMut(usize, Event) -> bool,
) -> Result<(T, Ignored), ParseError> {
    let error =
        |line: usize, column: usize, message: String| ParseError { file: file.to_string(), line, column, message };
    let mut buffer = String::new();
    let mut number = 0usize;
    let mut ignored = Ignored::new();
    // The next non-blank line and its number, or None at the end.
    let mut next_line = |buffer: &mut String| -> Result<Option<usize>, ParseError> {
        loop {
            buffer.clear();
            number += 1;
            match reader.read_line(buffer) {
                Ok(0) => return Ok(None),
                Ok(_) if buffer.trim().is_empty() => continue,
                Ok(_) => return Ok(Some(number)),
                Err(e) => return Err(error(number, 1, format!("cannot read: {e}"))),
            }
        }
    };
    let Some(first) = next_line(&mut buffer)? else {
        return Err(error(1, 1, "empty trace: expected a header line".into()));
    };
    let mut header: Header = read_header(&buffer, first, options.strict, &mut ignored)
        .map_err(|(column, message)| error(first, column, format!("bad header: {message}")))?;
    if let (VERSION, None, Some(names)) = (header.version, &header.statuses, options.statuses) {
        header.statuses = Some(
            names
                .by_name()
                .into_iter()
                .map(|(name, statuses)| {
                    let mut models: Vec<String> = statuses.iter().map(|s| s.as_str().to_string()).collect();
                    let list =
                        if models.len() == 1 { StatusList::One(models.remove(0)) } else { StatusList::Several(models) };
                    (name, list)
                })
                .collect(),
        );
    }
    if header.format != FORMAT {
        return Err(error(
            first,
            1,
            format!("not an outbox-check trace: format is '{}', expected '{FORMAT}'", header.format),
        ));
    }
    if header.version != 1 && header.version != VERSION {
        return Err(error(
            first,
            1,
            format!("unsupported trace version {} (this build reads versions 1 and {VERSION})", header.version),
        ));
    }
    if header.version == 1 && (header.design.is_some() || header.statuses.is_some() || header.relays.is_some()) {
        return Err(error(first, 1, "`design`, `statuses` and `relays` need version 2".into()));
    }
    if let Some((name, model)) = header
        .statuses
        .iter()
        .flatten()
        .find_map(|(name, list)| list.models().iter().find(|m| Status::parse(m).is_none()).map(|m| (name, m)))
    {
        let six: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
        return Err(error(
            first,
            1,
            format!("statuses: '{name}' maps to '{model}', which is not one of {}", six.join(", ")),
        ));
    }
    let mut shared = header.statuses.iter().flatten().filter(|(_, list)| list.models().len() != 1);
    if let Some((name, list)) = shared.next() {
        // The same rule as a design file's [statuses]: only statuses no statement tells apart.
        let mut listed = list.models().iter().filter_map(|m| Status::parse(m));
        let fine = match (listed.next(), listed.next(), listed.next()) {
            (Some(a), Some(b), None) => crate::core::design_file::indistinct(a, b),
            _ => false,
        };
        if !fine {
            return Err(error(
                first,
                1,
                format!(
                    "statuses: '{name}' maps to {}; a name may stand for two statuses only where no statement tells them apart: PENDING and AMBIGUOUS, or FAILED and EXHAUSTED",
                    list.models().join(" and ")
                ),
            ));
        }
    }
    if header.max_attempts == 0 {
        return Err(error(first, 1, "max_attempts must be at least 1".into()));
    }
    let started = start(&header).map_err(|message| error(first, 1, message))?;
    while let Some(line) = next_line(&mut buffer)? {
        let event = read_event(&buffer, line, options.strict, &mut ignored)
            .map_err(|(column, message)| error(line, column, message))?;
        // A status is one of the six or one of the header's own names: anything else is bad
        // input at its column, as an unknown value of any other field is.
        let status = match &event {
            Event::Write { status: Some(status), .. } => Some(("status", status)),
            Event::Release { to, .. } => Some(("to", to)),
            _ => None,
        };
        if let Some((field, name)) = status.filter(|(_, name)| header.statuses_of(name).is_empty()) {
            let column = buffer.find(&format!("\"{field}\"")).map_or(1, |c| c + 1);
            let mut allowed: Vec<String> = header.statuses.iter().flatten().map(|(n, _)| n.clone()).collect();
            allowed.extend(Status::ALL.iter().map(|s| s.as_str().to_string()));
            return Err(error(
                line,
                column,
                format!("unknown status '{name}' in `{field}`, expected one of {}", allowed.join(", ")),
            ));
        }
        if !each(line, event) {
            break;
        }
    }
    Ok((started, ignored))
}

/// Writes what happened in the closed world (a walk, a counterexample) in the trace format, as
/// a relay of the fleet would have logged it: what a lost connection hid is `unknown`, crashes
/// and clock readings are informational. The oracle must accept every `reference` history
/// written this way (tests/oracle.rs checks it).
pub fn from_world(config: &crate::world::WorldConfig, events: &[crate::world::Event]) -> (Header, Vec<Event>) {
    use crate::world::{DbFate, Event as W};
    let header = Header {
        variant: config.relays.first().map(|r| r.design.name().to_string()),
        backoff_base: Some(config.backoff_base.0),
        backoff_cap: Some(config.backoff_cap.0),
        source: Some("outbox-check world".to_string()),
        // The world runs one step at a time: its claims return exactly what the design's do.
        concurrency: Some(Concurrency::Serial),
        ..Header::new("reference", config.max_attempts)
    };
    let relay = |r: u16| format!("r{r}");
    let tenant = |t: crate::core::TenantId| format!("tenant{}", t.0);
    let message = |m: crate::core::MessageId| format!("m{}", m.0);
    let mut out = Vec::new();
    for event in events {
        match event {
            W::Enqueued { request, result } => out.push(Event::Enqueue {
                tenant: tenant(request.tenant_id),
                aggregate: format!("agg{}", request.aggregate_id.0),
                expected_version: request.expected_version,
                message: message(request.message_id),
                now: request.now.0,
                result: match result {
                    crate::core::EnqueueResult::Applied { .. } => "applied".into(),
                    crate::core::EnqueueResult::Stale { .. } => "stale".into(),
                },
            }),
            W::Claimed { relay: r, request, leases, db } => {
                let mut event = Event::claim_of(relay(*r), tenant(request.tenant_id), request, leases, message);
                if let Event::Claim { leases, outcome, .. } = &mut event {
                    if *db != DbFate::Ok {
                        leases.clear();
                        *outcome = Outcome::Unknown;
                    }
                }
                out.push(event);
            }
            W::Published { relay: r, lease, key, fate } => out.push(Event::Publish {
                relay: relay(*r),
                message: message(lease.message_id),
                key: match key {
                    crate::core::IdempotencyKey::Message { message_id } => message(*message_id),
                    crate::core::IdempotencyKey::Other { value } => format!("key-{value:x}"),
                },
                answer: match fate.outcome() {
                    crate::relay::PublishOutcome::Ack => PublishAnswer::Ack,
                    crate::relay::PublishOutcome::Timeout => PublishAnswer::Timeout,
                    crate::relay::PublishOutcome::RetryableFailure => PublishAnswer::Unavailable,
                    crate::relay::PublishOutcome::Rejected => PublishAnswer::Rejected,
                },
                stored: Some(fate.stores() > 0),
                token: Some(lease.token.0.to_string()),
            }),
            W::Wrote { relay: r, request, result, db, .. } => {
                let report = match (db, result) {
                    (DbFate::Ok, Some(result)) => WriteReport::from(*result),
                    _ => WriteReport::Unknown,
                };
                out.push(Event::write_of(
                    relay(*r),
                    tenant(request.lease.tenant_id),
                    message(request.lease.message_id),
                    request,
                    report,
                ));
            }
            W::Finished { .. } => {}
            W::Crashed { relay: r } => out.push(Event::Fault { kind: format!("{} crashed", relay(*r)) }),
            W::SessionEnded { relay: r, .. } => {
                out.push(Event::Fault { kind: format!("{}'s database session ended", relay(*r)) })
            }
            // The trace format has no release yet: the history says where one ran, as a note
            // (trace refuses such designs, decision 85).
            W::LeaseReleased { relay: r, message: m, cleared } => out.push(Event::Fault {
                kind: format!(
                    "{} released {}'s lease by its owner id{}",
                    relay(*r),
                    message(*m),
                    if *cleared { "" } else { " (no match)" }
                ),
            }),
            // Nor a renewal: a note too (trace refuses such designs, decision 88).
            W::LeaseRenewed { relay: r, until, messages } => out.push(Event::Fault {
                kind: format!(
                    "{}'s heartbeat renewed the lease of {} to {}",
                    relay(*r),
                    messages.iter().map(|m| message(*m)).collect::<Vec<_>>().join(", "),
                    until.0
                ),
            }),
            W::Scheduled { now, messages, .. } => {
                out.push(Event::Schedule { now: now.0, messages: messages.iter().map(|m| message(*m)).collect() })
            }
            W::Reaped { now, messages } => {
                out.push(Event::Reap { now: now.0, messages: messages.iter().map(|m| message(*m)).collect() })
            }
            W::Ticked { now } => out.push(Event::Clock { now: now.0 }),
            W::RescueRead { .. } => {}
            W::Rescued { request, result } => out.push(Event::Release {
                relay: Some("rescuer".into()),
                message: message(request.lease.message_id),
                now: request.now.0,
                to: request.to.as_str().to_string(),
                next_attempt_at: request.retry_at.map(|t| t.0),
                fence: request.fence.name().to_string(),
                token: Some(request.lease.token.0.to_string()),
                attempt: None,
                result: if matches!(result, crate::core::WriteResult::Applied { .. }) {
                    "applied".into()
                } else {
                    "stale".into()
                },
            }),
            W::Requeued { message_id, result } => out.push(Event::Requeue {
                message: message(*message_id),
                result: match result {
                    crate::core::RequeueResult::Applied => "applied".into(),
                    crate::core::RequeueResult::NotRequeueable { .. } => "not_requeueable".into(),
                },
            }),
        }
    }
    (header, out)
}

/// The trace as text: the header line, then one event per line.
pub fn to_jsonl(header: &Header, events: &[Event]) -> String {
    let mut text = serde_json::to_string(header).expect("JSON of plain values");
    text.push('\n');
    for event in events {
        text.push_str(&serde_json::to_string(event).expect("JSON of plain values"));
        text.push('\n');
    }
    text
}
