//! `outbox-check verify`: every engine on every variant and a mixed fleet, one verdict matrix,
//! compared with the expectations pinned in `reports/expectations.json`.

use super::*;

use outbox_check::core::Property;
use outbox_check::design::{Design, Variant};
use outbox_check::report::wrap;
use outbox_check::world::{Faults, WorldConfig};
use outbox_check_models::check::{check, merged, CheckOptions, CheckReport, Verdict};
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
    pub junit: Option<std::path::PathBuf>,
    pub database_url: Option<String>,
    pub json: bool,
    pub quiet: bool,
    /// The user's designs (files), each checked as a fleet of its own beside the built-ins and,
    /// like reference, expected to hold everything.
    pub designs: Vec<Design>,
}

/// What each engine found on one fleet: the properties it saw violated, and those nothing it
/// checked could have broken.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    pub model: Vec<String>,
    /// Safety properties no world of the model check exercised (shown "–", never ✓).
    #[serde(default)]
    pub not_exercised: Vec<String>,
    pub simulation: Vec<String>,
    /// `agrees` or `diverges` (or the error that stopped it), per SQL engine run.
    pub sql: BTreeMap<String, String>,
}

struct Fleet {
    name: String,
    designs: Vec<Design>,
}

impl Fleet {
    /// A fleet that must hold everything: reference, and every design the user gave.
    fn gated(&self, args: &VerifyArgs) -> bool {
        self.name == "reference" || args.designs.iter().any(|d| d.name() == self.name)
    }
}

fn fleets() -> Vec<Fleet> {
    let mut fleets: Vec<Fleet> = Variant::ALL
        .iter()
        .map(|v| Fleet { name: v.name().to_string(), designs: vec![Design::Variant(*v); 2] })
        .collect();
    fleets.push(Fleet {
        name: "seed-v2+legacy-v1".into(),
        designs: vec![Design::Variant(Variant::SeedV2), Design::Variant(Variant::LegacyV1)],
    });
    fleets
}

fn ids() -> Vec<&'static str> {
    Property::SAFETY.iter().chain(Property::LIVENESS.iter()).map(|p| p.id()).collect()
}

/// The model's worlds for one fleet: the main one (two relays, every fault, one tenant) and
/// the isolation world, where S9 and S10 can fail — two tenants with a relay and a message each,
/// writes that may go out with the other tenant's id, and the application's enqueues as steps,
/// each with a stale attempt beside it.
fn worlds(fleet: &Fleet, messages: u32) -> [WorldConfig; 2] {
    let main = WorldConfig::fleet(&fleet.designs, messages, 1, 3, Faults::all());
    [main, WorldConfig::isolation(&fleet.designs)]
}

/// Everything `verify` needs from the environment, checked before the long work: the
/// expectations file, the report directory, the PostgreSQL server. A problem is one line and
/// exit 2, never a verdict.
fn environment(args: &VerifyArgs) -> Result<(BTreeMap<String, Found>, Option<String>), String> {
    let (source, text) = match &args.expectations {
        None => ("reports/expectations.json".to_string(), EXPECTATIONS.to_string()),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            (path.display().to_string(), text)
        }
    };
    let expected = serde_json::from_str(&text).map_err(|e| format!("{source} is not valid: {e}"))?;
    if let Some(dir) = &args.report {
        crate::writable_dir(dir).map_err(|problem| format!("--report {}: {problem}", dir.display()))?;
    }
    // verify simulates every fleet, and the simulations do not model a session's end.
    crate::refuse_world_only(&args.designs, "verify")?;
    if let Some(file) = &args.junit {
        crate::writable_file(file).map_err(|problem| format!("--junit {}: {problem}", file.display()))?;
    }
    let pg_url =
        args.database_url.clone().or_else(|| std::env::var("OUTBOX_CHECK_PG_URL").ok().filter(|u| !u.is_empty()));
    if let Some(url) = &pg_url {
        // Connect once now (a scratch schema, dropped at once): a bad URL or a server that does
        // not answer is found before minutes of model checking, not reported as a divergence.
        outbox_check::store::postgres::Scratch::connect(url, false).map_err(|e| format!("PostgreSQL at {url}: {e}"))?;
    }
    Ok((expected, pg_url))
}

pub fn verify(args: &VerifyArgs) -> ExitCode {
    let (expected, pg_url) = match environment(args) {
        Ok(found) => found,
        Err(problem) => {
            eprintln!("outbox-check: {problem}");
            return ExitCode::from(2);
        }
    };
    let mut fleets = fleets();
    for design in &args.designs {
        if !fleets.iter().any(|f| f.name == design.name()) {
            fleets.push(Fleet { name: design.name().to_string(), designs: vec![*design; 2] });
        }
    }
    let steps = fleets.len() as u64 * 4;
    let bar =
        if args.quiet || args.json { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(steps) };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} ({elapsed})").expect("a valid template"),
    );
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    for fleet in &fleets {
        let [main, isolation] = worlds(fleet, args.messages);
        bar.set_message(format!("model checking {}", fleet.name));
        let states = |_, unique: usize| bar.set_message(format!("model checking {}: {unique} states", fleet.name));
        let report = check(&main, &CheckOptions { threads: args.threads, ..CheckOptions::default() }, &states);
        bar.inc(1);
        bar.set_message(format!("model checking {} with two tenants and enqueues", fleet.name));
        let isolation = check(
            &isolation,
            &CheckOptions { threads: args.threads, liveness: false, ..CheckOptions::default() },
            &|_, _| {},
        );
        bar.inc(1);

        bar.set_message(format!("simulating {} ({} seeds)", fleet.name, args.sim_seeds));
        let sim = simulate(fleet, args.sim_seeds, args.threads);
        bar.inc(1);

        bar.set_message(format!("SQL conformance of {}", fleet.name));
        let mut sql = BTreeMap::new();
        // A design our SQL does not cover (deletion, a visibility timeout, a rescuer) has no SQL
        // of ours to hold against it: its own is checked with conform --profile.
        if let Some(design) = single(fleet).filter(|d| outbox_check::store::bind::ours_cover(&d.policy())) {
            sql.insert("sqlite".to_string(), conformance(design, None));
            if let Some(url) = &pg_url {
                sql.insert("postgres".to_string(), conformance(design, Some(url)));
            }
        }
        bar.inc(1);
        let reports = vec![report, isolation];
        let model =
            |v: Verdict| ids().into_iter().filter(|id| merged(id, &reports) == v).map(String::from).collect::<Vec<_>>();
        let found = Found {
            model: model(Verdict::Violated),
            not_exercised: model(Verdict::NotExercised),
            simulation: ids()
                .into_iter()
                .filter(|id| sim.as_ref().is_some_and(|s| s.violated(id)))
                .map(String::from)
                .collect(),
            sql,
        };
        rows.push((fleet, reports, sim, found));
    }
    bar.finish_and_clear();

    // The built-in expectations are pinned for the default bounds; a file the user names is
    // theirs for the bounds they run, so it is always compared.
    let defaults =
        args.expectations.is_some() || (args.messages == DEFAULT_MESSAGES && args.sim_seeds == DEFAULT_SIM_SEEDS);
    let mut changed = Vec::new();
    // (fleet, property or "SQL on <engine>") whose verdict moved from the pinned one.
    let mut moved: std::collections::BTreeSet<(String, String)> = std::collections::BTreeSet::new();
    for (fleet, _, _, found) in &rows {
        let Some(pinned) = expected.get(&fleet.name) else {
            if args.designs.iter().any(|d| d.name() == fleet.name) {
                // The user's design: no verdict pinned, it must hold everything (below).
                continue;
            }
            changed.push(format!("{}: no expectation pinned", fleet.name));
            continue;
        };
        let mut pinned = pinned.clone();
        // PostgreSQL joins only when a URL is given.
        pinned.sql.retain(|engine, _| found.sql.contains_key(engine));
        for (what, got, want) in [
            ("model checking", &found.model, &pinned.model),
            ("not exercised", &found.not_exercised, &pinned.not_exercised),
            ("simulation", &found.simulation, &pinned.simulation),
        ] {
            if got != want {
                changed.push(format!(
                    "{}: {what} found [{}], expected [{}]",
                    fleet.name,
                    got.join(" "),
                    want.join(" ")
                ));
                for id in got.iter().filter(|id| !want.contains(id)).chain(want.iter().filter(|id| !got.contains(id))) {
                    moved.insert((fleet.name.clone(), id.clone()));
                }
            }
        }
        for (engine, verdict) in &found.sql {
            let want = pinned.sql.get(engine).cloned().unwrap_or_else(|| "agrees".into());
            if *verdict != want && !verdict.starts_with("error") {
                changed.push(format!("{}: SQL on {engine} {verdict}, expected {want}", fleet.name));
                moved.insert((fleet.name.clone(), format!("SQL on {engine}")));
            }
        }
    }
    // A store that could not run is the environment's problem, not a verdict.
    let sql_errors: Vec<String> = rows
        .iter()
        .flat_map(|(f, _, _, found)| {
            found
                .sql
                .iter()
                .filter(|(_, v)| v.starts_with("error"))
                .map(move |(e, v)| format!("{}: SQL on {e}: {v}", f.name))
        })
        .collect();
    // Every property verify gates on held (all but S11, decision 77), every one decided, and the
    // SQL agrees.
    let passes = |reports: &[CheckReport], s: &Option<_>, found: &Found| {
        reports.iter().all(|r| !r.violated_gated() && r.decided())
            && s.as_ref().is_some_and(SimLike::passes)
            && found.sql.values().all(|v| v == "agrees")
    };
    let reference_ok = rows.iter().any(|(f, reports, s, found)| f.name == "reference" && passes(reports, s, found));
    // The user's designs that break something, by their files.
    let broken_designs: Vec<&str> = rows
        .iter()
        .filter(|(f, reports, s, found)| f.gated(args) && f.name != "reference" && !passes(reports, s, found))
        .map(|(f, ..)| f.designs[0].argument())
        .collect();

    let seconds = started.elapsed().as_secs_f64();
    let verdicts = verdicts_json(&rows, args, seconds, &changed, defaults, &expectations_name(args));
    let mut report_failed = None;
    if let Some(file) = &args.junit {
        let gated: Vec<&str> = rows.iter().filter(|(f, ..)| f.gated(args)).map(|(f, ..)| f.name.as_str()).collect();
        let xml = junit(&verdicts, &moved, defaults, args.report.is_some(), &gated);
        if let Err(error) = std::fs::write(file, xml) {
            report_failed = Some(format!("cannot write {}: {error}", file.display()));
        }
    }
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
            std::fs::write(
                dir.join("verdicts.json"),
                serde_json::to_string_pretty(&stable).expect("JSON of plain values") + "\n",
            )
        });
        if let Err(error) = written {
            report_failed = Some(format!("cannot write the report under {}: {error}", dir.display()));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&verdicts).expect("JSON of plain values"));
    } else {
        print_matrix(&rows, args, seconds);
        if !sql_errors.is_empty() {
            println!("SQL conformance could not run (the environment, not a verdict):");
            for e in &sql_errors {
                println!("  {e}");
            }
        } else if !reference_ok {
            println!("reference: VIOLATED.");
        }
        for file in &broken_designs {
            println!("{file}: VIOLATED — its shortest counterexamples: outbox-check check --design {file}");
        }
        let source = expectations_name(args);
        if defaults {
            if changed.is_empty() {
                println!("Every verdict equals the expectations pinned in {source}.");
            } else {
                println!("Verdicts that differ from {source} (update it on purpose, with the reason in the commit):");
                for c in &changed {
                    println!("  {c}");
                }
            }
        } else {
            println!("(the built-in expectations are pinned for the default bounds: not compared; --expectations FILE compares with yours)");
        }
    }
    // Whatever could not be written, the verdicts above stand and so does their exit code.
    if let Some(problem) = &report_failed {
        eprintln!("outbox-check: {problem}");
    }
    if !sql_errors.is_empty() {
        eprintln!("outbox-check: {}", sql_errors.join("; "));
        return ExitCode::from(2);
    }
    if reference_ok && broken_designs.is_empty() && (!defaults || changed.is_empty()) {
        if report_failed.is_some() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    } else {
        ExitCode::from(1)
    }
}

fn xml_text(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// verify's verdicts as JUnit XML (the schema CI test reporters read: testsuites > testsuite >
/// testcase, with failure): a suite per fleet, a case per property and per SQL engine. A case
/// fails exactly where verify fails — its verdict moved from the pinned one, or it is
/// `reference`'s or a user's design's (`gated`) and not ✓ — so the report and the exit code agree; an expected violation passes,
/// its sentence and counterexample in the case's output.
pub fn junit(
    verdicts: &serde_json::Value,
    moved: &std::collections::BTreeSet<(String, String)>,
    compared: bool,
    written: bool,
    gated: &[&str],
) -> String {
    let mut suites = String::new();
    let (mut total, mut failed) = (0, 0);
    for fleet in verdicts["fleets"].as_array().into_iter().flatten() {
        let name = fleet["fleet"].as_str().unwrap_or_default();
        let mut cases = String::new();
        let (mut tests, mut failures) = (0, 0);
        let mut case = |id: &str, title: &str, status: &str, out: String, broken: bool| {
            let moved_here = compared && moved.contains(&(name.to_string(), id.to_string()));
            let failure = if moved_here {
                Some(format!("{id} is {status}: not the verdict pinned in the expectations"))
            } else if broken {
                Some(format!("{name}: {id} is {status}"))
            } else {
                None
            };
            tests += 1;
            cases +=
                &format!("    <testcase classname=\"{}\" name=\"{}\" time=\"0\">\n", xml_text(name), xml_text(title));
            if let Some(message) = &failure {
                failures += 1;
                cases += &format!(
                    "      <failure message=\"{}\" type=\"verdict\">{}</failure>\n",
                    xml_text(message),
                    xml_text(&out)
                );
            }
            cases += &format!("      <system-out>{}</system-out>\n    </testcase>\n", xml_text(&out));
        };
        for p in fleet["properties"].as_array().into_iter().flatten() {
            let id = p["id"].as_str().unwrap_or_default();
            let status = p["status"].as_str().unwrap_or_default();
            let mut out = format!("{id} {status}");
            if let Some(t) = p["technique"].as_str() {
                out += &format!(" ({t})");
            }
            if let Some(sentence) = p["what_goes_wrong"].as_str() {
                out += &format!(": {sentence}");
            }
            if let (Some(path), true) = (p["counterexample"].as_str(), written) {
                out += &format!("\ncounterexample: {path}");
            }
            if let Some(replay) = p["replay"].as_str() {
                out += &format!("\nreplay: {replay}");
            }
            if let Some(note) = p["note"].as_str() {
                out += &format!("\n{note}");
            }
            let broken = gated.contains(&name)
                && outbox_check::core::Property::gated_id(id)
                && !matches!(status, "holds" | "not_exercised");
            let title = format!("{id} {}", p["name"].as_str().unwrap_or_default());
            case(id, &title, status, out, broken);
        }
        for (engine, verdict) in fleet["sql"].as_object().into_iter().flatten() {
            let id = format!("SQL on {engine}");
            let verdict = verdict.as_str().unwrap_or_default();
            let broken = gated.contains(&name) && verdict != "agrees";
            case(&id, &id, verdict, format!("{id}: {verdict}"), broken);
        }
        total += tests;
        failed += failures;
        suites += &format!(
            "  <testsuite name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\">\n{cases}  </testsuite>\n",
            xml_text(name)
        );
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"outbox-check verify\" tests=\"{total}\" failures=\"{failed}\" errors=\"0\">\n{suites}</testsuites>\n"
    )
}

/// The file the verdicts are compared with, as a person named it.
fn expectations_name(args: &VerifyArgs) -> String {
    args.expectations.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "reports/expectations.json".into())
}

/// The report whose world decided `id` as `merged` says, for its counterexample and note.
fn deciding<'a>(id: &str, reports: &'a [CheckReport]) -> Option<&'a outbox_check_models::check::PropertyResult> {
    let verdict = merged(id, reports);
    reports.iter().filter_map(|r| r.property(id)).find(|p| p.status == verdict)
}

pub const DEFAULT_SIM_SEEDS: u64 = 300;

/// Messages per fleet in the main world: two, so that an aggregate has an order to overtake
/// and two leases can be in flight at once.
pub const DEFAULT_MESSAGES: u32 = 2;

fn single(fleet: &Fleet) -> Option<Design> {
    let first = fleet.designs[0];
    fleet.designs.iter().all(|d| *d == first).then_some(first)
}

#[cfg(madsim)]
fn simulate(fleet: &Fleet, seeds: u64, threads: usize) -> Option<outbox_check_sims::sweep::Summary> {
    use outbox_check_sims::sweep::{sweep, Seeds};
    // Simulations run three relays of a variant (the model checker two), the mixed fleet as is.
    let designs = match single(fleet) {
        Some(d) => vec![d; 3],
        None => fleet.designs.clone(),
    };
    let config = outbox_check_sims::SimConfig::new(designs, 20);
    Some(sweep(&config, Seeds::all(0, seeds), threads, &|_| {}, &|_| {}))
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
    use outbox_check::store::{SqliteStore, Store};
    use outbox_check_models::conform::{conform, Bounds};
    let policy = design.policy();
    let report = match url {
        None => {
            let open = || Ok(Box::new(SqliteStore::in_memory(policy)?) as Box<dyn Store>);
            conform(policy, &open, Bounds::default(), 100, 0, &|| {})
        }
        Some(url) => match outbox_check::store::bind::reusing_postgres(url, false, policy) {
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

type Row<'a, S> = (&'a Fleet, Vec<CheckReport>, Option<S>, Found);

fn cell<S: SimLike>(id: &str, reports: &[CheckReport], sim: &Option<S>) -> (&'static str, &'static str) {
    let simulated = sim.as_ref().is_some_and(|s| s.violated(id));
    match (merged(id, reports), simulated) {
        (Verdict::Violated, _) => ("✗", "model checking"),
        (_, true) => ("✗s", "simulation"),
        (Verdict::Holds, false) => ("✓", "model checking + simulation"),
        (Verdict::NotExercised, false) => ("–", "not exercised"),
        _ => ("?", "undecided"),
    }
}

/// What verify reads of a simulation summary.
trait SimLike {
    fn violated(&self, id: &str) -> bool;
    fn runs(&self) -> u64;
    fn first_failing(&self, id: &str) -> Option<(u64, String)>;
    /// No run failed for anything verify gates on (every property but S11, or a contradiction
    /// between the checkers).
    fn passes(&self) -> bool;
}

#[cfg(madsim)]
impl SimLike for outbox_check_sims::sweep::Summary {
    fn violated(&self, id: &str) -> bool {
        self.violations.contains_key(id)
    }
    fn runs(&self) -> u64 {
        self.runs
    }
    fn first_failing(&self, id: &str) -> Option<(u64, String)> {
        self.failing.iter().find(|f| f.properties.iter().any(|p| p == id)).map(|f| (f.seed, f.replay.clone()))
    }
    fn passes(&self) -> bool {
        self.failed_gated_runs == 0
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
    fn passes(&self) -> bool {
        self.failed_runs == 0
    }
}

fn print_matrix<S: SimLike>(rows: &[Row<'_, S>], args: &VerifyArgs, seconds: f64) {
    let ids = ids();
    println!(
        "outbox-check verify — model checking (2 relays, {}, budget 3, every fault; and two tenants with enqueues, for S9 and S10), simulation ({} seeds of 3 relays × 20 messages), SQL conformance\n",
        outbox_check::report::count(args.messages, "message"), args.sim_seeds
    );
    let sql_of = |fleet: &Fleet, found: &Found| {
        let sql: Vec<String> = found.sql.iter().map(|(e, v)| format!("{e} {v}")).collect();
        if !sql.is_empty() {
            sql.join(", ")
        } else if single(fleet).is_none() {
            "(mixed fleet)".to_string()
        } else {
            "(your SQL: conform --profile)".to_string()
        }
    };
    let width = rows.iter().map(|(fleet, _, _, f)| sql_of(fleet, f).chars().count()).max().unwrap_or(0).max(3) + 2;
    print!("{:<20}", "fleet");
    for id in &ids {
        print!("{id:>5}");
    }
    println!("   {:<width$}states", "SQL");
    for (fleet, reports, sim, found) in rows {
        print!("{:<20}", fleet.name);
        for id in &ids {
            let (mark, _) = cell(id, reports, sim);
            print!("{mark:>5}");
        }
        let states: usize = reports.iter().map(|r| r.unique_states).sum();
        println!("   {:<width$}{states}", sql_of(fleet, found));
    }
    println!("\n{}\n", wrap(&format!("{}.", Property::legend("; ")), 120));
    println!("✓  holds: exercised (a situation where it could fail was reached) and true in every reachable state of the model (liveness under the fairness of docs/model-checking.md), and no simulated run broke it");
    println!("✗  violated, decided by model checking and replayed in the plain world — shortest counterexample: outbox-check check --variant V (or --fleet A,B) --out DIR, or verify --report DIR");
    println!("✗s violated in simulation only (a scenario beyond the model's bounds) — the failing seed is below");
    println!("–  not exercised: nothing in the checked worlds could have broken it (the reason is below)");
    println!("?  undecided: the check stopped before it could decide");
    // Each complete check keeps its states as 64-bit fingerprints (docs/model-checking.md): the
    // chance that any of them missed a state is at most the sum of their bounds.
    let bound: f64 = rows
        .iter()
        .flat_map(|(_, reports, _, _)| reports.iter())
        .filter(|r| r.complete)
        .map(|r| r.collision_bound)
        .sum();
    println!(
        "A state missed by a fingerprint collision (64-bit) in any of these checks: probability at most {bound:.1e}."
    );
    println!("SQL: the design's SQL against its own core, step by step (agrees: the model's verdicts carry over to the SQL);\n     \"(your SQL: conform --profile)\": a design our SQL does not cover (deletion, a visibility timeout, a rescuer)");
    for (fleet, reports, sim, _) in rows {
        for id in &ids {
            match cell(id, reports, sim).0 {
                "✗s" => {
                    if let Some((_, replay)) = sim.as_ref().and_then(|s| s.first_failing(id)) {
                        println!("  {} {id} ✗s: {replay}", fleet.name);
                    }
                }
                "–" | "?" => {
                    if let Some(note) = deciding(id, reports).and_then(|p| p.note.clone()) {
                        println!("  {} {id}: {note}", fleet.name);
                    }
                }
                _ => {}
            }
        }
    }
    println!("{seconds:.1} s.");
}

fn verdicts_json<S: SimLike>(
    rows: &[Row<'_, S>],
    args: &VerifyArgs,
    seconds: f64,
    changed: &[String],
    defaults: bool,
    source: &str,
) -> serde_json::Value {
    let ids = ids();
    let fleets: Vec<serde_json::Value> = rows
        .iter()
        .map(|(fleet, reports, sim, found)| {
            let cells: Vec<serde_json::Value> = ids
                .iter()
                .map(|id| {
                    let (mark, technique) = cell(id, reports, sim);
                    let p = deciding(id, reports);
                    let decider = reports.iter().find(|r| r.property(id).is_some_and(|q| Some(q.status.clone()) == p.map(|p| p.status.clone())));
                    serde_json::json!({
                        "id": id,
                        "name": p.map(|p| p.name.clone()),
                        "status": match mark { "✓" => "holds", "✗" | "✗s" => "violated", "–" => "not_exercised", _ => "undecided" },
                        "technique": technique,
                        "model": p.map(|p| p.status.clone()),
                        "note": p.and_then(|p| p.note.clone()),
                        "steps": p.and_then(|p| p.counterexample.as_ref().map(|c| c.len())),
                        "what_goes_wrong": p.filter(|p| p.status == Verdict::Violated).and_then(outbox_check_models::report::what_goes_wrong),
                        // Where `--report DIR` wrote it (Markdown, JSON, trace, ITF); null without.
                        "counterexample": p.filter(|p| p.status == Verdict::Violated && p.counterexample.is_some()).zip(decider).zip(args.report.as_ref()).map(|((p, r), dir)| {
                            dir.join("counterexamples").join(outbox_check::report::config_slug(&r.config)).join(format!("{}.md", p.id)).display().to_string()
                        }),
                        "simulation_seed": sim.as_ref().and_then(|s| s.first_failing(id)).map(|(seed, _)| seed),
                        "replay": sim.as_ref().and_then(|s| s.first_failing(id)).map(|(_, r)| r),
                    })
                })
                .collect();
            serde_json::json!({
                "fleet": fleet.name,
                "unique_states": reports.iter().map(|r| r.unique_states).sum::<usize>(),
                "seconds": reports.iter().map(|r| r.seconds).sum::<f64>(),
                "simulated_runs": sim.as_ref().map(|s| s.runs()),
                "sql": found.sql,
                "found": found,
                "properties": cells,
            })
        })
        .collect();
    serde_json::json!({
        "schema": "outbox-check/verify/v1",
        "messages": args.messages,
        "sim_seeds": args.sim_seeds,
        "techniques": ["model checking", "simulation", "sql conformance"],
        "seconds": seconds,
        "expectations": if defaults { serde_json::json!({ "file": source, "differences": changed }) } else { serde_json::Value::Null },
        "fleets": fleets,
    })
}

fn write_report<S: SimLike>(dir: &std::path::Path, rows: &[Row<'_, S>], args: &VerifyArgs) -> std::io::Result<()> {
    use std::fmt::Write;
    let fleets: Vec<(&str, &[CheckReport], &[String])> = rows
        .iter()
        .map(|(fleet, reports, _, found)| (fleet.name.as_str(), reports.as_slice(), found.simulation.as_slice()))
        .collect();
    outbox_check_models::report::write_index(dir, &fleets, args.messages)?;
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
        let _ = writeln!(
            out,
            "| `{}` | {violated} | {first} | {} |",
            fleet.name,
            if sql.is_empty() { "—".into() } else { sql.join(", ") }
        );
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

/// `outbox-check verify`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Messages per fleet (model checking). Two by default (under three minutes on two
    /// cores); three take tens of minutes and gigabytes.
    #[arg(long, default_value_t = verify::DEFAULT_MESSAGES, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub messages: u32,
    /// Checker and simulation threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Simulated seeds per fleet.
    #[arg(long, default_value_t = verify::DEFAULT_SIM_SEEDS, value_parser = at_least_one)]
    pub sim_seeds: u64,
    /// Also run SQL conformance on this PostgreSQL server (default: OUTBOX_CHECK_PG_URL).
    #[arg(long)]
    pub database_url: Option<String>,
    /// Compare with this file instead of the reports/expectations.json built in.
    #[arg(long, value_name = "FILE")]
    pub expectations: Option<std::path::PathBuf>,
    /// Also write DIR/index.md (the matrix and one section per finding) and every
    /// counterexample under DIR/counterexamples/.
    #[arg(long, value_name = "DIR")]
    pub report: Option<std::path::PathBuf>,
    /// Also write a JUnit XML report for CI test reporters: one test case per fleet and
    /// property, failing exactly where verify fails (a verdict that moved, or reference
    /// broken); an expected violation passes with its sentence and counterexample.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Also check your own design file as a fleet of its own (repeatable): with no verdict
    /// pinned, it must hold every property, as reference must.
    #[arg(long = "design", value_name = "FILE.toml", value_parser = parse_design)]
    pub designs: Vec<Design>,
}

/// Runs `outbox-check verify`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args { messages, threads, sim_seeds, database_url, expectations, report, junit, json, quiet, designs } = args;
    verify(&VerifyArgs {
        designs,
        expectations,
        junit,
        messages,
        threads: threads as usize,
        sim_seeds,
        report,
        database_url,
        json,
        quiet,
    })
}
