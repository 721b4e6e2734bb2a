//! Time as the core sees it: plain numbers handed in by the caller.
//!
//! The core never reads a clock. An [`Instant`] is a count of milliseconds on whatever clock the
//! caller uses (the database's, a relay's own, a model's discrete clock); the core only compares
//! instants and adds durations to them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in time, in milliseconds on the caller's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Instant(pub u64);

/// A span of time, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Duration(pub u64);

impl Instant {
    /// The expiry of a lease held by a database session (`claim.lease = "session"`): no time
    /// ends it; only its session's end does ([`Outbox::end_session`](super::outbox::Outbox::end_session)).
    pub const NEVER: Instant = Instant(u64::MAX);

    /// `self + duration`, saturating rather than wrapping: a lease far in the future stays in the
    /// future.
    pub fn plus(self, duration: Duration) -> Instant {
        Instant(self.0.saturating_add(duration.0))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Instant::NEVER {
            return f.write_str("its session's end");
        }
        write!(f, "t={}", self.0)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}
