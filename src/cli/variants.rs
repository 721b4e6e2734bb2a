//! `outbox-check variants`: every built-in design and mutant, or one design, with its switches (text, JSON or a design file).

use super::*;

pub(crate) fn variants(only: Option<Design>, json: bool, toml: bool) -> ExitCode {
    if let (true, Some(design)) = (toml, only) {
        let about = match design {
            Design::Variant(v) => v.summary().to_string(),
            Design::Mutant(m) => format!("reference with one mistake: {}", m.mistake()),
            Design::Custom(c) => c.description.clone(),
        };
        let mut file = outbox_check::core::design_file::DesignFile::complete(design.name(), &about, &design.policy());
        if let Design::Custom(c) = design {
            file.statuses = c.statuses.clone();
        }
        print!("{}", file.to_commented_toml());
        return ExitCode::SUCCESS;
    }
    let designs: Vec<Design> = Variant::ALL
        .map(Design::Variant)
        .into_iter()
        .chain(Mutant::ALL.map(Design::Mutant))
        .chain(only.filter(|d| matches!(d, Design::Custom(_))))
        .filter(|d| only.is_none_or(|o| o == *d))
        .collect();
    if json {
        let list: Vec<serde_json::Value> = designs
            .iter()
            .map(|d| {
                let (kind, about, breaks) = match d {
                    Design::Variant(v) => ("variant", v.summary(), None),
                    Design::Mutant(m) => ("mutant", m.mistake(), Some(m.expected_kills())),
                    Design::Custom(c) => ("file", c.description.as_str(), None),
                };
                let switches: serde_json::Map<String, serde_json::Value> =
                    d.policy().switches().into_iter().map(|(k, v)| (k.to_string(), v.into())).collect();
                serde_json::json!({
                    "name": d.name(), "kind": kind, "about": about,
                    "expected_to_break": breaks, "switches": switches,
                })
            })
            .collect();
        let out = serde_json::json!({ "schema": "outbox-check/variants/v1", "designs": list });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON of plain values"));
        return ExitCode::SUCCESS;
    }
    let reference = outbox_check::design::Variant::Reference.policy().switches();
    let chosen = |d: Design| designs.contains(&d);
    if Variant::ALL.iter().any(|v| chosen(Design::Variant(*v))) {
        println!("Variants (SPEC §5): switches that differ from reference\n");
    }
    for v in Variant::ALL.into_iter().filter(|v| chosen(Design::Variant(*v))) {
        println!("  {:<12} {}", v.name(), v.summary());
        for ((name, value), (_, base)) in v.policy().switches().into_iter().zip(&reference) {
            if v == Variant::Reference || value != *base {
                println!("  {:<12}   {name} = {value}", "");
            }
        }
    }
    if Mutant::ALL.iter().any(|m| chosen(Design::Mutant(*m))) {
        println!("\nMutants (docs/designs.md): reference with one switch flipped\n");
    }
    for m in Mutant::ALL.into_iter().filter(|m| chosen(Design::Mutant(*m))) {
        println!(
            "  {:<24} {:<38} {}  (should break {})",
            m.name(),
            m.switch(),
            m.mistake(),
            m.expected_kills().join(" or ")
        );
    }
    for d in &designs {
        if let Design::Custom(c) = d {
            println!("Design file {}: switches that differ from reference\n", c.origin);
            println!("  {:<12} {}", c.name, c.description);
            for ((name, value), (_, base)) in c.policy.switches().into_iter().zip(&reference) {
                if value != *base {
                    println!("  {:<12}   {name} = {value}", "");
                }
            }
        }
    }
    ExitCode::SUCCESS
}

/// `outbox-check variants`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Show only this variant, mutant or design file.
    #[arg(value_parser = parse_design)]
    pub design: Option<Design>,
    /// Print JSON instead of text.
    #[arg(long, conflicts_with = "toml")]
    pub json: bool,
    /// Print the design as a complete design file, every key explained: a file to start your
    /// own design from (outbox-check variants reference --toml > my-queue.toml).
    #[arg(long, requires = "design")]
    pub toml: bool,
}

/// Runs `outbox-check variants`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args { design, json, toml } = args;
    variants(design, json, toml)
}
