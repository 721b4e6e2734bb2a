//! Reading the user's design files (docs/design-file.md): one file, one design, registered
//! under its name so fleets, reports and configurations name it.
//!
//! The registry lives here, above the core, so that the core holds no state of its own: a design
//! read from a file lives for the rest of the process (a configuration names it by reference),
//! and reading a configuration back looks its name up here.

use super::{CustomDesign, Design};
use crate::core::design_file::DesignFile;
use serde::Deserialize;
use std::path::Path;

/// The design a file describes. A problem is one line naming the file, the key, the value and
/// what is allowed (the CLI exits 2 with it).
pub fn load(path: &Path) -> Result<Design, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read design file {shown}: {e}"))?;
    from_text(&text, &shown.to_string())
}

/// [`load`] of a file's text, `origin` naming it in messages.
pub fn from_text(text: &str, origin: &str) -> Result<Design, String> {
    let file = DesignFile::parse(text).map_err(|e| format!("{origin}:{e}"))?;
    if let Some(statuses) = &file.statuses {
        statuses.check().map_err(|e| format!("{origin}: {e}"))?;
    }
    let policy = file.resolve(&|name| Design::parse(name).map(Design::policy)).map_err(|e| format!("{origin}: {e}"))?;
    // A file may describe a built-in under its own name (`variants reference --toml` is one):
    // it is that design, as long as every switch agrees.
    if let Some(builtin) = Design::parse(&file.name) {
        if builtin.policy() == policy && file.statuses.is_none() {
            return Ok(builtin);
        }
        let differ: Vec<&str> = policy
            .switches()
            .into_iter()
            .zip(builtin.policy().switches())
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0)
            .collect();
        let differ = if differ.is_empty() { "statuses".to_string() } else { differ.join(", ") };
        return Err(format!(
            "{origin}: name = {:?} is a built-in design's, and this file differs from it ({differ}): give your design a name of its own",
            file.name
        ));
    }
    let description = file.description.clone().unwrap_or_else(|| format!("the design in {origin}"));
    register(CustomDesign { name: file.name, description, policy, statuses: file.statuses, origin: origin.to_string() })
        .map(Design::Custom)
        .map_err(|e| format!("{origin}: {e}"))
}

static CUSTOM: std::sync::Mutex<Vec<&'static CustomDesign>> = std::sync::Mutex::new(Vec::new());

/// Registers a design under its name for the rest of the process. A built-in's name, or
/// another file's design under the same name with other switches, is refused.
pub fn register(design: CustomDesign) -> Result<&'static CustomDesign, String> {
    if Design::parse(&design.name).is_some() {
        return Err(format!(
            "name = {:?} is a built-in design's; a file's design needs a name of its own",
            design.name
        ));
    }
    let mut all = CUSTOM.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = all.iter().find(|d| d.name == design.name) {
        if known.policy == design.policy {
            return Ok(known);
        }
        return Err(format!(
            "name = {:?} is also the name of the design in {}, with other switches",
            design.name, known.origin
        ));
    }
    let leaked: &'static CustomDesign = Box::leak(Box::new(design));
    all.push(leaked);
    Ok(leaked)
}

/// A registered design by name.
pub fn named(name: &str) -> Option<&'static CustomDesign> {
    CUSTOM.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|d| d.name == name).copied()
}

impl<'de> Deserialize<'de> for &'static CustomDesign {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown design '{name}' (a design file must be given with --design)"))
        })
    }
}
