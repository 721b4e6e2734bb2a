//! The implementation's names: each message, tenant, relay and aggregate a history names gets a
//! small number in order of first appearance, and every divergence is told back in those names.

use super::*;

impl Oracle {
    /// The implementation's name for a thing, as a small number (in order of first appearance).
    pub(super) fn id(&mut self, kind: u8, name: &str) -> u32 {
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

    pub(super) fn message(&mut self, name: &str) -> MessageId {
        MessageId(self.id(0, name))
    }

    pub(super) fn tenant(&mut self, name: &str) -> TenantId {
        TenantId(self.id(1, name) as u16)
    }

    pub(super) fn relay(&mut self, name: &str) -> RelayId {
        RelayId(self.id(2, name) as u16)
    }

    pub(super) fn aggregate(&mut self, name: &str) -> AggregateId {
        AggregateId(self.id(3, name))
    }

    /// The claim whose lease had superseded the one a write or release applied for: the latest
    /// claim of the row, as the history made it.
    pub(super) fn superseded_by(&self, b: &Branch, id: MessageId) -> Option<Superseder> {
        let latest = b.auditor.ghost(id).map_or(0, |g| g.claims);
        b.held.iter().rev().find(|h| h.lease.message_id == id && h.lease.claim_seq == latest).map(|h| Superseder {
            line: h.line,
            relay: h.relay,
            token: h.token_text(),
        })
    }

    /// The divergence's rows in the history's names: message, tenant, aggregate, the relay
    /// holding the lease and its token as the history wrote it (where a claim of the history
    /// handed it out).
    pub(super) fn in_your_names(&self, mut d: Divergence, b: &Branch) -> Divergence {
        d.resolutions = b.resolutions.clone();
        let instant = |t: Option<Instant>| t.map(|t| t.0);
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

    pub(super) fn name_of(&self, kind: u8, id: u32) -> String {
        self.names[kind as usize].name(id).map_or_else(|| id.to_string(), str::to_string)
    }
}

pub(super) fn name_in<'a>(text: &'a str, ends: &[u32], id: u32) -> Option<&'a str> {
    let end = *ends.get(id as usize)? as usize;
    let start = if id == 0 { 0 } else { ends[id as usize - 1] as usize };
    text.get(start..end)
}

/// FNV-1a: a stable number for a key that is not the message id.
pub(super) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The model's ids and statuses as the history names them; an id the history never named keeps
/// the model's name.
impl Naming for Oracle {
    fn message_name(&self, id: MessageId) -> String {
        self.names[0].name(id.0).map_or_else(|| id.to_string(), str::to_string)
    }
    fn tenant_name(&self, id: TenantId) -> String {
        self.names[1].name(u32::from(id.0)).map_or_else(|| id.to_string(), str::to_string)
    }
    fn relay_name(&self, id: RelayId) -> String {
        self.names[2].name(u32::from(id.0)).map_or_else(|| id.to_string(), str::to_string)
    }
    fn status_name(&self, status: Status) -> String {
        self.header.status_name(status).to_string()
    }
}
