//! `outbox-check verify`: every engine on every variant and a mixed fleet, one verdict matrix,
//! compared with the expectations pinned in `reports/expectations.json`.

use crate::check::{check, CheckOptions, CheckReport, Verdict};
use crate::core::{Design, Property, Variant};
use crate::world::{Faults, WorldConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// The pinned expectations, compiled in: a changed verdict fails `verify` until someone edits
/// the file on purpose (and says why in the commit).
pub const EXPECTATIONS: &str = include_str!("../../reports/expectations.json");

pub struct VerifyArgs {
    /// A file to compare with instead of the compiled-in reports/expectations.json.
    pub expectations: Option<std::path::PathBuf>,
    pub messages: u32,
    pub threads: usize,
    pub sim_seeds: u64,
    pub report: Option<std::path::PathBuf>,
    pub database_url: Option<String>,
    pub json: bool,
    pub quiet: bool,
}

/// What each engine found on one fleet: the properties it saw violated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    pub model: Vec<String>,
    pub simulation: Vec<String>,
    /// `agrees` or `diverges` (or the error that stopped it), per SQL engine run.
    pub sql: BTreeMap<String, String>,
}

struct Fleet {
    name: String,
    designs: Vec<Design>,
}

fn fleets() -> Vec<Fleet> {
    let mut fleets: Vec<Fleet> =
        Variant::ALL.iter().map(|v| Fleet { name: v.name().to_string(), designs: vec![Design::Variant(*v); 2] }).collect();
    fleets.push(Fleet {
        name: "seed-v2+legacy-v1".into(),
        designs: vec![Design::Variant(Variant::SeedV2), Design::Variant(Variant::LegacyV1)],
    });
    fleets
}

fn ids() -> Vec<&'static str> {
    Property::SAFETY.iter().chain(Property::LIVENESS.iter()).map(|p| p.id()).collect()
}

pub fn verify(args: &VerifyArgs) -> ExitCode {
    let fleets = fleets();
    let steps = fleets.len() as u64 * 3;
    let bar = if args.quiet || args.json { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(steps) };
    bar.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} ({elapsed})").expect("a valid template"));
    let options = CheckOptions { threads: args.threads, ..CheckOptions::default() };
    let started = std::time::Instant::now();
    let pg_url = args.database_url.clone().or_else(|| std::env::var("OUTBOX_CHECK_PG_URL").ok().filter(|u| !u.is_empty()));
    let mut rows = Vec::new();
    for fleet in &fleets {
        bar.set_message(format!("model checking {}", fleet.name));
        let config = WorldConfig::fleet(&fleet.designs, args.messages, 1, 3, Faults::all());
        let report = check(&config, &options, &|_, _| {});
        bar.inc(1);

        bar.set_message(format!("simulating {} ({} seeds)", fleet.name, args.sim_seeds));
        let sim = simulate(fleet, args.sim_seeds, args.threads);
        bar.inc(1);

        bar.set_message(format!("SQL conformance of {}", fleet.name));
        let mut sql = BTreeMap::new();
        if let Some(design) = single(fleet) {
            sql.insert("sqlite".to_string(), conformance(design, None));
            if let Some(url) = &pg_url {
                sql.insert("postgres".to_string(), conformance(design, Some(url)));
            }
        }
        bar.inc(1);
        let found = Found {
            model: report.properties.iter().filter(|p| p.status == Verdict::Violated).map(|p| p.id.to_string()).collect(),
            simulation: ids().into_iter().filter(|id| sim.as_ref().is_some_and(|s| s.violated(id))).map(String::from).collect(),
            sql,
        };
        rows.push((fleet, report, sim, found));
    }
    bar.finish_and_clear();

    let (source, text) = match &args.expectations {
        None => ("reports/expectations.json".to_string(), EXPECTATIONS.to_string()),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (path.display().to_string(), text),
            Err(e) => {
                eprintln!("outbox-check: cannot read {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let expected: BTreeMap<String, Found> = match serde_json::from_str(&text) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("outbox-check: {source} is not valid: {e}");
            return ExitCode::from(2);
        }
    };
    let defaults = args.messages == 1 && args.sim_seeds == DEFAULT_SIM_SEEDS;
    let mut changed = Vec::new();
    for (fleet, _, _, found) in &rows {
        let Some(pinned) = expected.get(&fleet.name) else {
            changed.push(format!("{}: no expectation pinned", fleet.name));
            continue;
        };
        let mut pinned = pinned.clone();
        // PostgreSQL joins only when a URL is given.
        pinned.sql.retain(|engine, _| found.sql.contains_key(engine));
        for (what, got, want) in [("model checking", &found.model, &pinned.model), ("simulation", &found.simulation, &pinned.simulation)] {
            if got != want {
                changed.push(format!("{}: {what} found [{}], expected [{}]", fleet.name, got.join(" "), want.join(" ")));
            }
        }
        for (engine, verdict) in &found.sql {
            let want = pinned.sql.get(engine).cloned().unwrap_or_else(|| "agrees".into());
            if *verdict != want {
                changed.push(format!("{}: SQL on {engine} {verdict}, expected {want}", fleet.name));
            }
        }
    }
    let reference_ok = rows.iter().any(|(f, r, s, found)| {
        f.name == "reference"
            && !r.violated()
            && r.decided()
            && s.as_ref().is_some_and(|s| s.failed_runs == 0)
            && found.sql.values().all(|v| v == "agrees")
    });

    let seconds = started.elapsed().as_secs_f64();
    let verdicts = verdicts_json(&rows, args, seconds, &changed, defaults);
    if let Some(dir) = &args.report {
        // The JSON behind the matrix, beside it (without the run's duration, so an unchanged
        // verdict regenerates an unchanged file).
        let mut stable = verdicts.clone();
        stable["seconds"] = serde_json::Value::Null;
        if let Some(fleets) = stable["fleets"].as_array_mut() {
            for f in fleets {
                f["seconds"] = serde_json::Value::Null;
            }
        }
        let written = write_report(dir, &rows, args).and_then(|()| {
            std::fs::write(dir.join("verdicts.json"), serde_json::to_string_pretty(&stable).expect("JSON of plain values") + "\n")
        });
        if let Err(error) = written {
            eprintln!("outbox-check: cannot write the report under {}: {error}", dir.display());
            return ExitCode::from(2);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&verdicts).expect("JSON of plain values"));
    } else {
        print_matrix(&rows, args, seconds);
        if !reference_ok {
            println!("reference: VIOLATED.");
        }
        if defaults {
            if changed.is_empty() {
                println!("Every verdict equals the expectations pinned in reports/expectations.json.");
            } else {
                println!("Verdicts that differ from reports/expectations.json (update it on purpose, with the reason in the commit):");
                for c in &changed {
                    println!("  {c}");
                }
            }
        } else {
            println!("(expectations are pinned for the default bounds; not compared)");
        }
    }
    if reference_ok && (!defaults || changed.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

pub const DEFAULT_SIM_SEEDS: u64 = 300;

fn single(fleet: &Fleet) -> Option<Design> {
    let first = fleet.designs[0];
    fleet.designs.iter().all(|d| *d == first).then_some(first)
}

#[cfg(madsim)]
fn simulate(fleet: &Fleet, seeds: u64, threads: usize) -> Option<crate::sim::sweep::Summary> {
    use crate::sim::sweep::{sweep, Seeds, Summary};
    // Simulations run three relays of a variant (the model checker two), the mixed fleet as is.
    let designs = match single(fleet) {
        Some(d) => vec![d; 3],
        None => fleet.designs.clone(),
    };
    let config = crate::sim::SimConfig::new(designs, 20);
    let list = Seeds::all(0, seeds);
    let started = std::time::Instant::now();
    let results = sweep(&config, &list.list(), threads, &|_| {});
    Some(Summary::new(&config, list, &results, started.elapsed().as_secs_f64()))
}

#[cfg(not(madsim))]
fn simulate(_: &Fleet, _: u64, _: usize) -> Option<NoSim> {
    None
}

#[cfg(not(madsim))]
struct NoSim {
    violations: BTreeMap<String, u64>,
    failed_runs: u64,
    runs: u64,
}

/// The design's SQL against its own core: `agrees`, `diverges`, or why it could not run.
fn conformance(design: Design, url: Option<&str>) -> String {
    use crate::store::conform::{conform, Bounds};
    use crate::store::{SqliteStore, Store};
    let policy = design.policy();
    let report = match url {
        None => {
            let open = || Ok(Box::new(SqliteStore::in_memory(policy)?) as Box<dyn Store>);
            conform(policy, &open, Bounds::default(), 100, 0, &|| {})
        }
        Some(url) => match crate::store::bind::reusing_postgres(url, false, policy) {
            Err(e) => Err(e),
            Ok(open) => conform(policy, &open, Bounds::default(), 30, 0, &|| {}),
        },
    };
    match report {
        Ok(r) if r.divergence.is_none() => "agrees".into(),
        Ok(_) => "diverges".into(),
        Err(e) => format!("error: {e}"),
    }
}

type Row<'a, S> = (&'a Fleet, CheckReport, Option<S>, Found);

fn cell<S: SimLike>(id: &str, report: &CheckReport, sim: &Option<S>) -> (&'static str, &'static str) {
    let model = report.property(id).map(|p| p.status.clone());
    let simulated = sim.as_ref().is_some_and(|s| s.violated(id));
    match (model, simulated) {
        (Some(Verdict::Violated), _) => ("✗", "model checking"),
        (_, true) => ("✗", "simulation"),
        (Some(Verdict::Holds), false) => ("✓", "model checking + simulation"),
        _ => ("?", "undecided"),
    }
}

/// What verify reads of a simulation summary.
trait SimLike {
    fn violated(&self, id: &str) -> bool;
    fn runs(&self) -> u64;
    fn first_failing(&self, id: &str) -> Option<(u64, String)>;
}

#[cfg(madsim)]
impl SimLike for crate::sim::sweep::Summary {
    fn violated(&self, id: &str) -> bool {
        self.violations.contains_key(id)
    }
    fn runs(&self) -> u64 {
        self.runs
    }
    fn first_failing(&self, id: &str) -> Option<(u64, String)> {
        self.failing.iter().find(|f| f.properties.iter().any(|p| p == id)).map(|f| (f.seed, f.replay.clone()))
    }
}

#[cfg(not(madsim))]
impl SimLike for NoSim {
    fn violated(&self, id: &str) -> bool {
        self.violations.contains_key(id)
    }
    fn runs(&self) -> u64 {
        self.runs + self.failed_runs
    }
    fn first_failing(&self, _: &str) -> Option<(u64, String)> {
        None
    }
}

fn print_matrix<S: SimLike>(rows: &[Row<'_, S>], args: &VerifyArgs, seconds: f64) {
    let ids = ids();
    println!(
        "outbox-check verify — model checking (2 relays, {} message(s), budget 3, every fault), simulation ({} seeds of 3 relays × 20 messages), SQL conformance\n",
        args.messages, args.sim_seeds
    );
    print!("{:<20}", "fleet");
    for id in &ids {
        print!("{id:>5}");
    }
    println!("   {:<22}{}", "SQL", "states");
    for (fleet, report, sim, found) in rows {
        print!("{:<20}", fleet.name);
        for id in &ids {
            let (mark, technique) = cell(id, report, sim);
            let mark = if technique == "simulation" { "✗s" } else { mark };
            print!("{mark:>5}");
        }
        let sql: Vec<String> = found.sql.iter().map(|(e, v)| format!("{e} {v}")).collect();
        let sql = if sql.is_empty() { "(mixed fleet)".to_string() } else { sql.join(", ") };
        println!("   {sql:<22}{}", report.unique_states);
    }
    println!("\n✓  holds: in every reachable state of the model (liveness under the fairness of docs/model-checking.md), and in no simulated run was it broken");
    println!("✗  violated, decided by model checking — shortest counterexample: reports/counterexamples/<fleet>/<id>.md (written by --report), or outbox-check check --variant V (or --fleet A,B)");
    println!("✗s violated in simulation only (a scenario beyond the model's bounds) — the failing seed replays with outbox-check sim --seed N");
    println!("SQL: the design's SQL against its own core, step by step (agrees: the model's verdicts carry over to the SQL)");
    println!("{seconds:.1} s.");
}

fn verdicts_json<S: SimLike>(rows: &[Row<'_, S>], args: &VerifyArgs, seconds: f64, changed: &[String], defaults: bool) -> serde_json::Value {
    let ids = ids();
    let fleets: Vec<serde_json::Value> = rows
        .iter()
        .map(|(fleet, report, sim, found)| {
            let cells: Vec<serde_json::Value> = ids
                .iter()
                .map(|id| {
                    let (mark, technique) = cell(id, report, sim);
                    let p = report.property(id);
                    serde_json::json!({
                        "id": id,
                        "name": p.map(|p| p.name.clone()),
                        "status": match mark { "✓" => "holds", "✗" => "violated", _ => "undecided" },
                        "technique": technique,
                        "model": p.map(|p| p.status.clone()),
                        "steps": p.and_then(|p| p.counterexample.as_ref().map(|c| c.len())),
                        // Where `verify --report reports` writes it (Markdown, JSON, trace, ITF).
                        "counterexample": p.filter(|p| p.status == Verdict::Violated && p.counterexample.is_some()).map(|p| {
                            format!("reports/counterexamples/{}/{}.md", crate::report::fleet_slug(&report.fleet), p.id)
                        }),
                        "simulation_seed": sim.as_ref().and_then(|s| s.first_failing(id)).map(|(seed, _)| seed),
                        "replay": sim.as_ref().and_then(|s| s.first_failing(id)).map(|(_, r)| r),
                    })
                })
                .collect();
            serde_json::json!({
                "fleet": fleet.name,
                "unique_states": report.unique_states,
                "seconds": report.seconds,
                "simulated_runs": sim.as_ref().map(|s| s.runs()),
                "sql": found.sql,
                "found": found,
                "properties": cells,
            })
        })
        .collect();
    let out = serde_json::json!({
        "messages": args.messages,
        "sim_seeds": args.sim_seeds,
        "techniques": ["model checking", "simulation", "sql conformance"],
        "seconds": seconds,
        "expectations": if defaults { serde_json::json!({ "file": "reports/expectations.json", "differences": changed }) } else { serde_json::Value::Null },
        "fleets": fleets,
    });
    out
}

fn write_report<S: SimLike>(dir: &std::path::Path, rows: &[Row<'_, S>], args: &VerifyArgs) -> std::io::Result<()> {
    use std::fmt::Write;
    let commands: Vec<String> = rows
        .iter()
        .map(|(fleet, _, _, _)| {
            let line = match single(fleet) {
                Some(d) => format!("--variant {} --relays {}", d.name(), fleet.designs.len()),
                None => format!("--fleet {}", fleet.designs.iter().map(|d| d.name()).collect::<Vec<_>>().join(",")),
            };
            format!("outbox-check check {line} --messages {} --tenants 1 --max-attempts 3 --faults all", args.messages)
        })
        .collect();
    let pairs: Vec<(&CheckReport, &str)> = rows.iter().zip(&commands).map(|((_, r, _, _), c)| (r, c.as_str())).collect();
    crate::report::write_index(dir, &pairs)?;
    // The other engines' columns, appended.
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## Simulation and SQL conformance\n\nThe same fleets under madsim ({} seeds each: three relays of a variant, or the mixed fleet, 20 messages, a fault profile drawn per seed; `outbox-check sim`) and each design's SQL against its own core (`outbox-check conform`, 100 random sequences on SQLite{}).\n",
        args.sim_seeds,
        if rows.iter().any(|(_, _, _, f)| f.sql.contains_key("postgres")) { " and 30 on PostgreSQL" } else { "" }
    );
    out.push_str("| fleet | violated in simulation | first failing seed (replay) | SQL |\n|---|---|---|---|\n");
    for (fleet, _, sim, found) in rows {
        let violated = if found.simulation.is_empty() { "nothing".to_string() } else { found.simulation.join(" ") };
        let first = sim
            .as_ref()
            .and_then(|s| found.simulation.first().and_then(|id| s.first_failing(id)))
            .map(|(_, replay)| format!("`{replay}`"))
            .unwrap_or_else(|| "—".into());
        let sql: Vec<String> = found.sql.iter().map(|(e, v)| format!("{e}: {v}")).collect();
        let _ = writeln!(out, "| `{}` | {violated} | {first} | {} |", fleet.name, if sql.is_empty() { "—".into() } else { sql.join(", ") });
    }
    let index = dir.join("index.md");
    let mut text = std::fs::read_to_string(&index)?;
    // Insert after the matrix's legend (before the first finding section).
    match text.find("\n## ") {
        Some(at) => text.insert_str(at, &out),
        None => text.push_str(&out),
    }
    std::fs::write(index, text)
}
