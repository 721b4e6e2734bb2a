//! Reading the user's design files (docs/design-file.md): one file, one design, registered
//! under its name so fleets, reports and configurations name it.

use crate::core::design::DesignFile;
use crate::core::{CustomDesign, Design};
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
    CustomDesign::register(CustomDesign {
        name: file.name,
        description,
        policy,
        statuses: file.statuses,
        origin: origin.to_string(),
    })
    .map(Design::Custom)
    .map_err(|e| format!("{origin}: {e}"))
}
