//! The catalogue of SPEC §6's faults the model checker injects: one row each in [`FAULTS`], from
//! which the CLI's values, the JSON fields of a configuration, the report words and the set a
//! world allows ([`Faults`]) are derived.
//!
//! A new fault touches three files: a row here, the action that injects it in `world.rs` (and its
//! [`Fault`] in `Action::fault`), and the simulations' fault profile (`sims/profile.rs`) where it
//! is to be simulated too. `tests/json_schemas.rs` checks the JSON Schemas list every fault.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// A fault the environment may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    Crash,
    DbLostBefore,
    DbLostAfter,
    BrokerDrop,
    BrokerLostAck,
    BrokerDuplicate,
    BrokerReject,
    BrokerUnavailable,
    ClockSkew,
    MisroutedWrite,
    LeaseLost,
}

/// One row of the fault catalogue.
pub struct FaultEntry {
    pub fault: Fault,
    /// Its name on the command line and in reports: `broker-lost-ack`.
    pub name: &'static str,
    /// Its field in a configuration's JSON: `broker_lost_ack`.
    pub field: &'static str,
    /// What happens, in a sentence.
    pub sentence: &'static str,
}

/// The faults, in [`Fault`]'s order.
pub const FAULTS: [FaultEntry; 11] = [
    FaultEntry {
        fault: Fault::Crash,
        name: "crash",
        field: "crash",
        sentence: "a relay crashes and restarts, losing its in-memory leases",
    },
    FaultEntry {
        fault: Fault::DbLostBefore,
        name: "db-lost-before",
        field: "db_lost_before",
        sentence: "the database connection dies before a statement runs",
    },
    FaultEntry {
        fault: Fault::DbLostAfter,
        name: "db-lost-after",
        field: "db_lost_after",
        sentence: "the database connection dies after a statement committed, before the reply",
    },
    FaultEntry {
        fault: Fault::BrokerDrop,
        name: "broker-drop",
        field: "broker_drop",
        sentence: "the broker drops a message before storing it (the relay times out)",
    },
    FaultEntry {
        fault: Fault::BrokerLostAck,
        name: "broker-lost-ack",
        field: "broker_lost_ack",
        sentence: "the broker stores a message but its acknowledgement is lost (the relay times out)",
    },
    FaultEntry {
        fault: Fault::BrokerDuplicate,
        name: "broker-duplicate",
        field: "broker_duplicate",
        sentence: "the broker stores a message twice",
    },
    FaultEntry {
        fault: Fault::BrokerReject,
        name: "broker-reject",
        field: "broker_reject",
        sentence: "the broker rejects a message for good",
    },
    FaultEntry {
        fault: Fault::BrokerUnavailable,
        name: "broker-unavailable",
        field: "broker_unavailable",
        sentence: "the broker refuses for now (an outage), a definite retryable failure",
    },
    FaultEntry {
        fault: Fault::ClockSkew,
        name: "clock-skew",
        field: "clock_skew",
        sentence: "every other relay's clock runs one lease ahead of true time (matters to designs that take `now` from the relay)",
    },
    FaultEntry {
        fault: Fault::MisroutedWrite,
        name: "misrouted-write",
        field: "misrouted_write",
        sentence: "a terminal write goes out with another tenant's id (a mis-routed or confused caller)",
    },
    FaultEntry {
        fault: Fault::LeaseLost,
        name: "lease-lost",
        field: "lease_lost",
        sentence: "a relay's lease ends while it keeps running: the session holding it drops mid-job (a dropped database connection, a node its peers judge dead) and the relay runs on (designs whose session holds the lease, claim.lease = \"session\"; an expiry ends so by time, which ticks explore)",
    },
];

impl Fault {
    pub const ALL: [Fault; 11] = {
        let mut all = [Fault::Crash; 11];
        let mut i = 0;
        while i < all.len() {
            all[i] = FAULTS[i].fault;
            i += 1;
        }
        all
    };

    pub const fn entry(self) -> &'static FaultEntry {
        &FAULTS[self as usize]
    }

    pub const fn name(self) -> &'static str {
        self.entry().name
    }

    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    const fn bit(self) -> u16 {
        1 << self as usize
    }
}

/// Every fault's JSON field, in the catalogue's order.
const FIELDS: [&str; 11] = {
    let mut fields = [""; 11];
    let mut i = 0;
    while i < fields.len() {
        fields[i] = FAULTS[i].field;
        i += 1;
    }
    fields
};

/// Which faults the environment may inject: a set over the catalogue. In JSON, an object with one
/// boolean per fault (`{"crash": true, "db_lost_before": false, …}`), every fault present
/// (`lease_lost`, added later, may be absent: false).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Faults(u16);

impl Faults {
    /// Every fault's name, in the catalogue's order.
    pub const NAMES: [&'static str; 11] = {
        let mut names = [""; 11];
        let mut i = 0;
        while i < names.len() {
            names[i] = FAULTS[i].name;
            i += 1;
        }
        names
    };

    pub fn all() -> Faults {
        Fault::ALL.into_iter().fold(Faults::none(), Faults::with)
    }

    pub const fn none() -> Faults {
        Faults(0)
    }

    /// This set and `fault`.
    pub fn with(self, fault: Fault) -> Faults {
        Faults(self.0 | fault.bit())
    }

    /// This set without `fault`.
    pub fn without(self, fault: Fault) -> Faults {
        Faults(self.0 & !fault.bit())
    }

    pub fn has(self, fault: Fault) -> bool {
        self.0 & fault.bit() != 0
    }

    /// Parses `all`, `none` or a comma-separated list of fault names.
    pub fn parse(text: &str) -> Result<Faults, String> {
        match text.trim() {
            "all" => return Ok(Faults::all()),
            "none" | "" => return Ok(Faults::none()),
            _ => {}
        }
        let mut faults = Faults::none();
        for name in text.split(',').map(str::trim) {
            match Fault::parse(name) {
                Some(fault) => faults = faults.with(fault),
                None => return Err(format!("unknown fault '{name}'; valid: all, none, {}", Faults::NAMES.join(", "))),
            }
        }
        Ok(faults)
    }

    /// The names of the faults in the set, in the catalogue's order.
    pub fn names(&self) -> Vec<&'static str> {
        Fault::ALL.into_iter().filter(|f| self.has(*f)).map(Fault::name).collect()
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

impl Serialize for Faults {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("Faults", FAULTS.len())?;
        for entry in &FAULTS {
            s.serialize_field(entry.field, &self.has(entry.fault))?;
        }
        s.end()
    }
}

impl<'de> Deserialize<'de> for Faults {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Faults, D::Error> {
        let mut fields = BTreeMap::<String, bool>::deserialize(deserializer)?;
        let mut faults = Faults::none();
        for entry in &FAULTS {
            match fields.remove(entry.field) {
                Some(true) => faults = faults.with(entry.fault),
                Some(false) => {}
                // Added after files were written without it: absent means not injected.
                None if entry.fault == Fault::LeaseLost => {}
                None => return Err(D::Error::missing_field(entry.field)),
            }
        }
        if let Some(unknown) = fields.keys().next() {
            return Err(D::Error::unknown_field(unknown, &FIELDS));
        }
        Ok(faults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_is_consistent_and_its_json_round_trips() {
        for (i, entry) in FAULTS.iter().enumerate() {
            assert_eq!(entry.fault as usize, i);
            assert_eq!(entry.field, entry.name.replace('-', "_"));
        }
        let some = Faults::none().with(Fault::Crash).with(Fault::ClockSkew);
        let json = serde_json::to_string(&some).unwrap();
        assert!(json.starts_with(r#"{"crash":true,"db_lost_before":false,"#), "{json}");
        assert_eq!(serde_json::from_str::<Faults>(&json).unwrap(), some);
        assert!(serde_json::from_str::<Faults>(r#"{"crash":true}"#).is_err());
        // A configuration written before lease-lost existed reads as without it.
        let mut old: serde_json::Value = serde_json::to_value(Faults::all()).unwrap();
        old.as_object_mut().unwrap().remove("lease_lost");
        assert_eq!(serde_json::from_value::<Faults>(old).unwrap(), Faults::all().without(Fault::LeaseLost));
        assert_eq!(Faults::parse("crash, clock-skew").unwrap(), some);
        assert_eq!(some.names(), ["crash", "clock-skew"]);
        assert!(Faults::parse("crash,nonsense").unwrap_err().contains("valid: all, none, crash, db-lost-before"));
    }
}
