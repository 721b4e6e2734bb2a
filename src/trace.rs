//! The trace format: what an implementation of the outbox observed, one JSON object per line.
//!
//! The first line is a header (`{"format": "outbox-check-trace", "version": 1, ...}`); every
//! other line is an [`Event`] in the order the implementation committed it. Identifiers are the
//! implementation's own strings (message ids, relay ids, tenants, tokens): the oracle maps them.
//! The format is documented in docs/trace-format.md, with a JSON Schema beside it.

use crate::core::{FailureCode, Status};
use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "outbox-check-trace";
pub const VERSION: u32 = 1;

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub token: String,
    pub attempts: u32,
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

/// What a terminal write reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteReport {
    Applied,
    Stale,
    /// The connection died before the reply.
    Unknown,
}

/// One observed event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// The business transition and its outbox row.
    Enqueue {
        tenant: String,
        aggregate: String,
        expected_version: u32,
        message: String,
        now: u64,
        /// `applied` or `stale`.
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
        #[serde(default)]
        stored: Option<bool>,
    },
    /// A terminal write with the lease it presented and what it reported.
    Write {
        relay: String,
        write: String,
        message: String,
        tenant: String,
        token: String,
        now: u64,
        #[serde(default)]
        code: Option<FailureCode>,
        result: WriteReport,
        /// The status the implementation says the row now has (optional).
        #[serde(default)]
        status: Option<Status>,
    },
    /// The reaper ran and exhausted these messages.
    Reap { now: u64, messages: Vec<String> },
    /// An operator requeued a message.
    Requeue { message: String, result: String },
    /// A clock reading (informational: `now` travels with each statement).
    Clock { now: u64 },
    /// A fault the recorder injected (informational).
    Fault { kind: String },
}

impl Event {
    pub fn name(&self) -> &'static str {
        match self {
            Event::Enqueue { .. } => "enqueue",
            Event::Claim { .. } => "claim",
            Event::Publish { .. } => "publish",
            Event::Write { .. } => "write",
            Event::Reap { .. } => "reap",
            Event::Requeue { .. } => "requeue",
            Event::Clock { .. } => "clock",
            Event::Fault { .. } => "fault",
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

/// Parses a whole trace: the header, then one event per non-blank line.
pub fn parse(file: &str, text: &str) -> Result<(Header, Vec<(usize, Event)>), ParseError> {
    let error = |line: usize, column: usize, message: String| ParseError { file: file.to_string(), line, column, message };
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((i, first)) = lines.next() else {
        return Err(error(1, 1, "empty trace: expected a header line".into()));
    };
    let header: Header =
        serde_json::from_str(first).map_err(|e| error(i + 1, e.column().max(1), format!("bad header: {e}")))?;
    if header.format != FORMAT {
        return Err(error(i + 1, 1, format!("not an outbox-check trace: format is '{}', expected '{FORMAT}'", header.format)));
    }
    if header.version != VERSION {
        return Err(error(i + 1, 1, format!("unsupported trace version {} (this build reads version {VERSION})", header.version)));
    }
    if header.max_attempts == 0 {
        return Err(error(i + 1, 1, "max_attempts must be at least 1".into()));
    }
    let mut events = Vec::new();
    for (i, line) in lines {
        let event: Event = serde_json::from_str(line).map_err(|e| error(i + 1, e.column().max(1), e.to_string()))?;
        events.push((i + 1, event));
    }
    Ok((header, events))
}
