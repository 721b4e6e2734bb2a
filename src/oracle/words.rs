//! Events and rows in the words of the history, for divergences and the HTML drawing.

use super::*;

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

pub(super) fn event_json(event: &Event) -> serde_json::Value {
    serde_json::to_value(event).unwrap_or_else(|_| serde_json::Value::String(event.name().to_string()))
}
