//! The catalogue of what outbox-check checks: SPEC §7's properties and the situations that must be
//! reachable so that no safety property holds vacuously. One row each, in [`PROPERTIES`] and
//! [`SITUATIONS`]; every name, sentence, JSON id, legend, witness, index and bit mask anywhere in
//! the project is derived from these rows.
//!
//! A new safety property touches three files: a row here (with its witness situation and the
//! ghost fields it reads), its check in `audit.rs`, and the place in `world.rs` where its
//! witness situation is seen (a field of `Seen`). The model checker's property list, verify's
//! columns, the reports' legends, the settling of the complete check and the JSON ids all follow
//! from the row.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A property of SPEC §7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Property {
    S1,
    S2,
    S3,
    S4,
    S5,
    S6,
    S7,
    S8,
    S9,
    S10,
    S11,
    L1,
    L2,
    L3,
}

/// Ghost fields a property or a situation reads: the complete check's abstractions erase a field
/// only where nothing still looked at reads it (World::abstract_for_safety).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghosts(u8);

impl Ghosts {
    pub const NONE: Ghosts = Ghosts(0);
    /// The ghost count of a message's publications in its current budget.
    pub const PUBLICATIONS: Ghosts = Ghosts(1);
    /// Whether the broker stored the message.
    pub const STORED: Ghosts = Ghosts(1 << 1);
    /// The row's `published_at`.
    pub const PUBLISHED_AT: Ghosts = Ghosts(1 << 2);
    /// The row's `last_failure_code`.
    pub const FAILURE_CODE: Ghosts = Ghosts(1 << 3);

    pub const fn union(self, other: Ghosts) -> Ghosts {
        Ghosts(self.0 | other.0)
    }

    pub const fn overlaps(self, other: Ghosts) -> bool {
        self.0 & other.0 != 0
    }
}

/// One row of the property catalogue.
pub struct PropertyEntry {
    pub property: Property,
    /// The id in reports and JSON: `S1`.
    pub id: &'static str,
    /// The id and the sentence, as the model checker names the property: `S1 no stale terminal
    /// write succeeds`.
    pub name: &'static str,
    /// SPEC §7's sentence.
    pub sentence: &'static str,
    /// The few words a legend under a matrix gives it.
    pub legend: &'static str,
    /// The situation whose reach shows the property could have failed in a run (safety only).
    pub witness: Option<Situation>,
    /// The ghost fields the property's check reads beyond the rows and the latest claims.
    pub reads: Ghosts,
    /// Whether `verify` fails `reference` and a user's design for breaking it. Every property
    /// but S11: a design that bounds attempts and recovers rows whose holder went silent fails
    /// some row a paused holder still delivers, reference included (decision 77); S11 is
    /// checked, reported and pinned like the rest.
    pub gated: bool,
}

/// The properties, safety first, in [`Property`]'s order.
pub const PROPERTIES: [PropertyEntry; 14] = [
    PropertyEntry {
        property: Property::S1,
        id: "S1",
        name: "S1 no stale terminal write succeeds",
        sentence: "no stale terminal write succeeds",
        legend: "no stale terminal write succeeds",
        witness: Some(Situation::StaleRefused),
        // "Reported applied but changed nothing" compares whole rows: a rewrite that changed
        // nothing keeps published_at and the failure code as they were (issue 27, item 9).
        reads: Ghosts::PUBLISHED_AT.union(Ghosts::FAILURE_CODE),
        gated: true,
    },
    PropertyEntry {
        property: Property::S2,
        id: "S2",
        name: "S2 fresh token per claim",
        sentence: "fresh token per claim",
        legend: "fresh token per claim",
        witness: Some(Situation::ClaimedAgain),
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::S3,
        id: "S3",
        name: "S3 attempts within budget",
        sentence: "attempts within budget",
        legend: "attempts within budget",
        witness: Some(Situation::Exhausted),
        reads: Ghosts::PUBLICATIONS,
        gated: true,
    },
    PropertyEntry {
        property: Property::S4,
        id: "S4",
        name: "S4 terminal is absorbing",
        sentence: "terminal is absorbing",
        legend: "terminal is absorbing",
        witness: Some(Situation::TerminalMet),
        reads: Ghosts::PUBLISHED_AT.union(Ghosts::FAILURE_CODE),
        gated: true,
    },
    PropertyEntry {
        property: Property::S5,
        id: "S5",
        name: "S5 no invented confirmation",
        sentence: "no invented confirmation",
        legend: "no invented confirmation",
        witness: Some(Situation::Confirmed),
        reads: Ghosts::STORED,
        gated: true,
    },
    PropertyEntry {
        property: Property::S6,
        id: "S6",
        name: "S6 one live lease",
        sentence: "one live lease",
        legend: "one live lease",
        witness: Some(Situation::LeaseTakenOver),
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::S7,
        id: "S7",
        name: "S7 retry clock respected",
        sentence: "retry clock respected",
        legend: "retry clock respected",
        witness: Some(Situation::AmbiguousThenPublished),
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::S8,
        id: "S8",
        name: "S8 stable idempotency key",
        sentence: "stable idempotency key",
        legend: "stable idempotency key",
        witness: Some(Situation::DuplicateDeduplicated),
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::S9,
        id: "S9",
        name: "S9 tenant isolation",
        sentence: "tenant isolation",
        legend: "tenant isolation",
        witness: Some(Situation::TenantsCrossed),
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::S10,
        id: "S10",
        name: "S10 atomic enqueue",
        sentence: "atomic enqueue",
        legend: "atomic enqueue",
        witness: Some(Situation::StaleEnqueue),
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::S11,
        id: "S11",
        name: "S11 no false failure",
        sentence: "no false failure",
        legend: "no delivery while the row is recorded failed",
        witness: Some(Situation::FailedForHolder),
        // Whether the broker stored the delivery that comes after the failure.
        reads: Ghosts::STORED,
        gated: false,
    },
    PropertyEntry {
        property: Property::L1,
        id: "L1",
        name: "L1 every message eventually reaches a terminal status",
        sentence: "every message eventually reaches a terminal status",
        legend: "every message eventually terminal",
        witness: None,
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::L2,
        id: "L2",
        name: "L2 under a permanent outage every message is EXHAUSTED after at most max publications",
        sentence: "under a permanent outage every message is EXHAUSTED after at most max publications",
        legend: "EXHAUSTED within the budget under an outage",
        witness: None,
        reads: Ghosts::NONE,
        gated: true,
    },
    PropertyEntry {
        property: Property::L3,
        id: "L3",
        name: "L3 once faults stop, every message still deliverable is eventually PUBLISHED",
        sentence: "once faults stop, every message still deliverable is eventually PUBLISHED",
        legend: "delivered once faults stop",
        witness: None,
        reads: Ghosts::NONE,
        gated: true,
    },
];

impl Property {
    pub const SAFETY: [Property; 11] = [
        Property::S1,
        Property::S2,
        Property::S3,
        Property::S4,
        Property::S5,
        Property::S6,
        Property::S7,
        Property::S8,
        Property::S9,
        Property::S10,
        Property::S11,
    ];
    pub const LIVENESS: [Property; 3] = [Property::L1, Property::L2, Property::L3];

    /// Its row of the catalogue.
    pub const fn entry(self) -> &'static PropertyEntry {
        &PROPERTIES[self as usize]
    }

    pub const fn id(self) -> &'static str {
        self.entry().id
    }

    /// The property as a sentence, as SPEC §7 names it.
    pub const fn sentence(self) -> &'static str {
        self.entry().sentence
    }

    /// The id and the sentence: `S1 no stale terminal write succeeds`.
    pub const fn name(self) -> &'static str {
        self.entry().name
    }

    /// Whether `verify` fails `reference` and a user's design for breaking it
    /// ([`PropertyEntry::gated`]).
    pub const fn gated(self) -> bool {
        self.entry().gated
    }

    /// Whether the property of this id is one `verify` gates on (an unknown id is).
    pub fn gated_id(id: &str) -> bool {
        Property::parse(id).is_none_or(Property::gated)
    }

    /// Its bit in masks over [`Property::SAFETY`] (safety properties only).
    pub const fn bit(self) -> u16 {
        1 << self as usize
    }

    pub fn parse(text: &str) -> Option<Property> {
        Property::SAFETY.into_iter().chain(Property::LIVENESS).find(|p| p.id().eq_ignore_ascii_case(text))
    }

    /// The safety properties' names, in [`Property::SAFETY`]'s order.
    pub const SAFETY_NAMES: [&'static str; 11] = {
        let mut names = [""; 11];
        let mut i = 0;
        while i < names.len() {
            names[i] = Property::SAFETY[i].name();
            i += 1;
        }
        names
    };

    /// Every property with its legend, safety and liveness each joined by `", "` and the two
    /// joined by `between`: `S1 no stale terminal write succeeds, …, S10 atomic enqueue; L1 …`.
    pub fn legend(between: &str) -> String {
        let words = |ps: &[Property]| ps.iter().map(|p| format!("{} {}", p.id(), p.entry().legend)).collect::<Vec<_>>();
        format!("{}{between}{}", words(&Property::SAFETY).join(", "), words(&Property::LIVENESS).join(", "))
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A situation worth reaching (SPEC §7's reachability list, and a witness for every other safety
/// property), in the order of [`SITUATIONS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Situation {
    StaleRefused,
    DuplicateDeduplicated,
    LeaseTakenOver,
    Exhausted,
    AmbiguousThenPublished,
    OrderOvertaken,
    ClaimedAgain,
    TerminalMet,
    Confirmed,
    TenantsCrossed,
    StaleEnqueue,
    FailedForHolder,
}

/// One row of the situation catalogue.
pub struct SituationEntry {
    pub situation: Situation,
    /// The id and the sentence, as the model checker names it: `R-S1 a stale write is attempted
    /// and refused`.
    pub name: &'static str,
    /// The safety property it exercises; `None` for R-order, which shows that order per aggregate
    /// is not kept.
    pub exercises: Option<Property>,
    /// The ghost fields that must be kept for it to be seen.
    pub reads: Ghosts,
}

/// The situations: SPEC §7's reachability list first, then the other properties' witnesses.
pub const SITUATIONS: [SituationEntry; 12] = [
    SituationEntry {
        situation: Situation::StaleRefused,
        name: "R-S1 a stale write is attempted and refused",
        exercises: Some(Property::S1),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::DuplicateDeduplicated,
        name: "R-S8 a message is published twice and the consumer sees one effect",
        exercises: Some(Property::S8),
        reads: Ghosts::STORED,
    },
    SituationEntry {
        situation: Situation::LeaseTakenOver,
        name: "R-S6 a lease expires and is taken over",
        exercises: Some(Property::S6),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::Exhausted,
        name: "R-S3 the budget is exhausted (a message's last attempt is used)",
        exercises: Some(Property::S3),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::AmbiguousThenPublished,
        name: "R-S7 an AMBIGUOUS message is later PUBLISHED",
        exercises: Some(Property::S7),
        reads: Ghosts::FAILURE_CODE,
    },
    SituationEntry {
        situation: Situation::OrderOvertaken,
        name: "R-order a later event of an aggregate is published before an earlier one",
        exercises: None,
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::ClaimedAgain,
        name: "R-S2 a row is claimed again",
        exercises: Some(Property::S2),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::TerminalMet,
        name: "R-S4 a claim or a write meets a terminal row",
        exercises: Some(Property::S4),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::Confirmed,
        name: "R-S5 a message is confirmed PUBLISHED",
        exercises: Some(Property::S5),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::TenantsCrossed,
        name: "R-S9 a claim or a write meets another tenant's row",
        exercises: Some(Property::S9),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::StaleEnqueue,
        name: "R-S10 a stale enqueue is attempted",
        exercises: Some(Property::S10),
        reads: Ghosts::NONE,
    },
    SituationEntry {
        situation: Situation::FailedForHolder,
        name: "R-S11 a row is recorded failed while another relay may still publish it",
        exercises: Some(Property::S11),
        reads: Ghosts::NONE,
    },
];

impl Situation {
    pub const ALL: [Situation; 12] = {
        let mut all = [Situation::StaleRefused; 12];
        let mut i = 0;
        while i < all.len() {
            all[i] = SITUATIONS[i].situation;
            i += 1;
        }
        all
    };

    pub const fn entry(self) -> &'static SituationEntry {
        &SITUATIONS[self as usize]
    }

    pub const fn name(self) -> &'static str {
        self.entry().name
    }

    /// The id alone: `R-S1`.
    pub fn id(self) -> &'static str {
        self.name().split(' ').next().unwrap_or_default()
    }

    /// What it exercises, as its id: a safety property's, or `ordering`.
    pub fn exercises_id(self) -> &'static str {
        self.entry().exercises.map_or("ordering", Property::id)
    }

    /// Its bit in masks of tracked situations.
    pub const fn bit(self) -> u16 {
        1 << self as usize
    }

    /// The situations that must be tracked for `property` to count as exercised.
    pub fn witness_of(property: Property) -> Option<Situation> {
        property.entry().witness
    }

    /// The bits of the situations that read any of `ghosts`.
    pub const fn reading(ghosts: Ghosts) -> u16 {
        let mut bits = 0;
        let mut i = 0;
        while i < SITUATIONS.len() {
            if SITUATIONS[i].reads.overlaps(ghosts) {
                bits |= SITUATIONS[i].situation.bit();
            }
            i += 1;
        }
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row sits at its variant's index, its name is its id and sentence, and every safety
    /// property's witness exercises it back.
    #[test]
    fn the_catalogue_is_consistent() {
        for (i, entry) in PROPERTIES.iter().enumerate() {
            assert_eq!(entry.property as usize, i);
            assert_eq!(entry.name, format!("{} {}", entry.id, entry.sentence));
            let safety = Property::SAFETY.contains(&entry.property);
            assert_eq!(entry.witness.is_some(), safety, "{}", entry.id);
            if let Some(w) = entry.witness {
                assert_eq!(w.entry().exercises, Some(entry.property), "{}", entry.id);
            }
        }
        for (i, entry) in SITUATIONS.iter().enumerate() {
            assert_eq!(entry.situation as usize, i);
            assert!(entry.name.starts_with("R-"), "{}", entry.name);
        }
        assert_eq!(Property::SAFETY.len() + Property::LIVENESS.len(), PROPERTIES.len());
    }
}
