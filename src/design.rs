//! The designs a run can name: the built-ins ([`builtin`]: SPEC §5's variants and the catalogue's
//! mutants, from models/designs/) and the user's own files ([`file`], registered under their
//! name). A [`Design`] is a name for a [`Policy`]: the core reads only the policy.
//!
//! Above the core on purpose: the core holds no catalogue, no files and no process-wide state.

pub mod builtin;
pub mod file;

pub use builtin::{Mutant, Variant};
pub use file::{from_text, load, named, register};

use crate::core::design_file::StatusNames;
use crate::core::Policy;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A design a relay can run: a variant of SPEC §5, a mutant of docs/designs.md, or a design
/// read from the user's own file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Design {
    Variant(Variant),
    Mutant(Mutant),
    Custom(&'static CustomDesign),
}

/// A design from a file (docs/design-file.md). The file layer (`crate::design`) registers it
/// once per process under its name, so that a configuration naming it reads back.
#[derive(Debug)]
pub struct CustomDesign {
    pub name: String,
    pub description: String,
    pub policy: Policy,
    /// The queue's own status names, where the file gives them.
    pub statuses: Option<StatusNames>,
    /// Where it was read from, for messages.
    pub origin: String,
}

impl PartialEq for CustomDesign {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for CustomDesign {}
impl std::hash::Hash for CustomDesign {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}
impl PartialOrd for CustomDesign {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for CustomDesign {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}
impl Serialize for CustomDesign {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}
impl Design {
    pub fn policy(self) -> Policy {
        match self {
            Design::Variant(v) => v.policy(),
            Design::Mutant(m) => m.policy(),
            Design::Custom(c) => c.policy,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Design::Variant(v) => v.name(),
            Design::Mutant(m) => m.name(),
            Design::Custom(c) => &c.name,
        }
    }

    /// How a command line names the design: a built-in by name, a file's design by its file.
    pub fn argument(self) -> &'static str {
        match self {
            Design::Custom(c) => &c.origin,
            other => other.name(),
        }
    }

    /// Parses a variant or mutant name.
    pub fn parse(text: &str) -> Option<Design> {
        Variant::parse(text).map(Design::Variant).or_else(|| Mutant::parse(text).map(Design::Mutant))
    }

    /// Every valid name, variants first, for error messages.
    pub fn all_names() -> Vec<&'static str> {
        Variant::ALL.iter().map(|v| v.name()).chain(Mutant::ALL.iter().map(|m| m.name())).collect()
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
