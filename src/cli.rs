//! The command line: parses, orchestrates the engines, presents. No outbox rule lives here.
//!
//! Exit codes: 0 everything checked holds, 1 a property is violated, 2 bad input or environment.

use crate::core::{Design, Mutant, Property, RelayId, TenantId, Variant};
use crate::search::{search, Finding};
use crate::world::{RelaySpec, WorldConfig};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "outbox-check",
    version,
    about = "Proves, or refutes with a counterexample, that a transactional-outbox relay with fenced leases is safe.",
    after_help = "Exit codes: 0 every property checked holds, 1 a property is violated, 2 bad input or environment.\n\
                  Designs: outbox-check variants"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: check every variant and a mixed fleet, print the verdict matrix.
    #[command(after_help = "Example: outbox-check verify --json > verdicts.json\n\n\
        Built so far: random walks through the world of relays, broker and faults (the `search`\n\
        technique). Model checking, simulation and SQL conformance join the matrix as they land.")]
    Verify {
        /// Random walks per design.
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        seeds: u64,
        /// Steps per walk.
        #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        steps: u64,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// List every variant and mutant with its switches, or one of them.
    #[command(after_help = "Examples:\n  outbox-check variants\n  outbox-check variants seed-v2\n  outbox-check variants --json | jq '.[].name'")]
    Variants {
        /// Show only this variant or mutant.
        #[arg(value_parser = parse_design)]
        design: Option<Design>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// [not built yet] Model-check a variant or fleet exhaustively with stateright.
    Check(NotBuilt),
    /// [not built yet] Open stateright's explorer on a variant or fleet.
    Explore(NotBuilt),
    /// [not built yet] Check every mutant of MUTANTS.md and say which property kills it.
    Mutants(NotBuilt),
    /// [not built yet] Deterministic simulation with madsim.
    Sim(NotBuilt),
    /// [not built yet] Differential conformance of the SQL stores against the core.
    Conform(NotBuilt),
    /// [not built yet] Check a recorded history against the model.
    Trace(NotBuilt),
}

#[derive(clap::Args, Debug)]
struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

/// Parses a variant or mutant name.
pub fn parse_design(text: &str) -> Result<Design, String> {
    Design::parse(text).ok_or_else(|| format!("unknown design '{text}'; valid: {}", Design::all_names().join(", ")))
}

/// Runs the command line; returns the process's exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand) {
                let _ = error.print();
                return if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            eprintln!("outbox-check: {}", one_line(&error.render().to_string()));
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Verify { seeds, steps, json } => verify(seeds, steps as usize, json),
        Command::Variants { design, json } => variants(design, json),
        Command::Check(_) => not_built("check", "exhaustive model checking with stateright (issue #3)"),
        Command::Explore(_) => not_built("explore", "the stateright explorer (issue #3)"),
        Command::Mutants(_) => not_built("mutants", "model checking of every mutant (issue #3)"),
        Command::Sim(_) => not_built("sim", "deterministic simulation with madsim (issue #4)"),
        Command::Conform(_) => not_built("conform", "SQL conformance on SQLite and PostgreSQL (issue #5)"),
        Command::Trace(_) => not_built("trace", "the reference oracle for recorded histories (issue #6)"),
    }
}

/// clap's message without its "error: " prefix, usage block and tips, on one line.
fn one_line(rendered: &str) -> String {
    let first = rendered.lines().next().unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    format!("{first} (see --help)")
}

fn not_built(command: &str, what: &str) -> ExitCode {
    eprintln!("outbox-check: `{command}` is not built yet: {what}; `outbox-check verify` runs what exists");
    ExitCode::from(2)
}

fn variants(only: Option<Design>, json: bool) -> ExitCode {
    let designs: Vec<Design> = Variant::ALL
        .map(Design::Variant)
        .into_iter()
        .chain(Mutant::ALL.map(Design::Mutant))
        .filter(|d| only.is_none_or(|o| o == *d))
        .collect();
    if json {
        let list: Vec<serde_json::Value> = designs
            .iter()
            .map(|d| {
                let (kind, about, breaks) = match d {
                    Design::Variant(v) => ("variant", v.summary(), None),
                    Design::Mutant(m) => ("mutant", m.mistake(), Some(m.expected_kills())),
                };
                let switches: serde_json::Map<String, serde_json::Value> =
                    d.policy().switches().into_iter().map(|(k, v)| (k.to_string(), v.into())).collect();
                serde_json::json!({
                    "name": d.name(), "kind": kind, "about": about,
                    "mutants_md_expects": breaks, "switches": switches,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list).expect("JSON of plain values"));
        return ExitCode::SUCCESS;
    }
    let reference = crate::core::Policy::reference().switches();
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
        println!("\nMutants (MUTANTS.md): reference with one switch flipped\n");
    }
    for m in Mutant::ALL.into_iter().filter(|m| chosen(Design::Mutant(*m))) {
        println!("  {:<24} {:<38} {}  (should break {})", m.name(), m.switch(), m.mistake(), m.expected_kills().join(" or "));
    }
    ExitCode::SUCCESS
}

/// One row of the verdict matrix: a fleet and what the search found.
struct Verdict {
    name: String,
    findings: Vec<Finding>,
}

/// The fleets `verify` checks: three relays of each variant (one clock 2 ms ahead, one reusing
/// another's id, one requeue, enqueues as steps), and a seed-v2 relay beside a legacy-v1 relay.
fn verify_fleets() -> Vec<(String, WorldConfig)> {
    let mut fleets = Vec::new();
    for v in Variant::ALL {
        let design = Design::Variant(v);
        let mut config = WorldConfig::small(design, 3, 3);
        config.relays[1].skew = 2;
        config.relays[2].owner = RelayId(0);
        config.requeues = 1;
        config.enqueue_actions = true;
        fleets.push((v.name().to_string(), config));
    }
    let mut mixed = WorldConfig::small(Design::Variant(Variant::SeedV2), 2, 3);
    mixed.relays[1] = RelaySpec { design: Design::Variant(Variant::LegacyV1), owner: RelayId(1), tenant_id: TenantId(0), skew: 0 };
    fleets.push(("seed-v2+legacy-v1".to_string(), mixed));
    fleets
}

fn verify(seeds: u64, steps: usize, json: bool) -> ExitCode {
    let verdicts: Vec<Verdict> = verify_fleets()
        .into_iter()
        .map(|(name, config)| Verdict { name, findings: search(&config, seeds, steps) })
        .collect();
    let reference_clean = verdicts.iter().any(|v| v.name == "reference" && v.findings.is_empty());
    if json {
        let rows: Vec<serde_json::Value> = verdicts
            .iter()
            .map(|v| {
                let properties: Vec<serde_json::Value> = Property::SAFETY
                    .iter()
                    .map(|p| {
                        let finding = v.findings.iter().find(|f| f.property == *p);
                        serde_json::json!({
                            "id": p.id(), "name": p.sentence(),
                            "status": if finding.is_some() { "violated" } else { "not found" },
                            "technique": "search",
                            "counterexample": finding.map(|f| serde_json::json!({
                                "seed": f.seed, "detail": f.violation.detail,
                                "steps": f.actions.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                            })),
                        })
                    })
                    .collect();
                serde_json::json!({ "fleet": v.name, "properties": properties })
            })
            .collect();
        let out = serde_json::json!({ "seeds": seeds, "steps": steps, "techniques": ["search"], "fleets": rows });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON of plain values"));
    } else {
        println!("outbox-check verify — random walks ({seeds} seeds × {steps} steps per fleet)\n");
        print!("{:<20}", "fleet");
        for p in Property::SAFETY {
            print!("{:>5}", p.id());
        }
        println!();
        for v in &verdicts {
            print!("{:<20}", v.name);
            for p in Property::SAFETY {
                let broken = v.findings.iter().any(|f| f.property == p);
                print!("{:>5}", if broken { "✗" } else { "·" });
            }
            println!();
        }
        println!("\n✗ violated (a walk found a counterexample)   · no walk broke it (not a proof)\n");
        for v in verdicts.iter().filter(|v| !v.findings.is_empty()) {
            println!("{}:", v.name);
            for f in &v.findings {
                println!("  {} {} — seed {}, {} steps: {}", f.property.id(), f.property.sentence(), f.seed, f.actions.len(), f.violation.detail);
            }
        }
        println!("\nNot yet in the matrix: model checking (check), simulation (sim), SQL conformance (conform).");
        println!("{}", if reference_clean { "reference: no violation found." } else { "reference: VIOLATED." });
    }
    if reference_clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
