//! `outbox-check conform`: the SQL of a design against the core, by differential property tests.

use super::*;

use outbox_check::design::Design;
use outbox_check::store::bind::reusing_postgres;
use outbox_check::store::{SqliteStore, Store, StoreError};
use outbox_check_models::conform::{conform, Bounds, Report};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    Sqlite,
    Postgres,
}

pub struct ConformArgs {
    /// The user's own SQL, when given: run instead of ours.
    pub profile: Option<outbox_check::store::profile::Profile>,
    pub engine: Engine,
    pub design: Design,
    pub against: Design,
    pub cases: u32,
    pub seed: u64,
    pub database_url: Option<String>,
    pub disposable: bool,
    /// Only drop the scratch schemas and databases killed runs left behind, then exit.
    pub clean_up: bool,
    pub json: bool,
    pub quiet: bool,
}

/// Runs one conformance sweep; prints the summary, or the minimal divergence with its SQL.
pub fn execute(args: &ConformArgs) -> ExitCode {
    if args.clean_up {
        return clean_up(args);
    }
    match sweep(args) {
        Ok(report) => {
            print(args, &report);
            if report.diverged() || report.violated() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            // One line per problem (a profile's are all reported at once).
            match e {
                StoreError::Setup(problems) => {
                    for line in problems.lines() {
                        eprintln!("outbox-check: {line}");
                    }
                }
                other => eprintln!("outbox-check: {}", other.to_string().replace('\n', " ")),
            }
            ExitCode::from(2)
        }
    }
}

/// `--clean-up`: drops the scratch schemas that runs killed outright left on the server.
fn clean_up(args: &ConformArgs) -> ExitCode {
    if args.engine != Engine::Postgres {
        eprintln!(
            "outbox-check: --clean-up is for --store postgres (an SQLite store lives in memory and leaves nothing)"
        );
        return ExitCode::from(2);
    }
    let dropped = url(args)
        .map_err(|e| e.to_string())
        .and_then(|url| outbox_check::store::postgres::clean_up(&url, args.disposable).map_err(|e| e.to_string()));
    match dropped {
        Ok(dropped) if args.json => {
            println!("{}", serde_json::json!({ "dropped": dropped }));
            ExitCode::SUCCESS
        }
        Ok(dropped) => {
            if dropped.is_empty() {
                println!("no scratch schema or database left behind");
            } else {
                println!(
                    "dropped {} scratch schema(s) or database(s) left behind: {}",
                    dropped.len(),
                    dropped.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("outbox-check: {}", e.replace('\n', " "));
            ExitCode::from(2)
        }
    }
}

/// The URL: `--database-url`, else `OUTBOX_CHECK_PG_URL`.
fn url(args: &ConformArgs) -> Result<String, StoreError> {
    args.database_url.clone().or_else(|| std::env::var("OUTBOX_CHECK_PG_URL").ok().filter(|u| !u.is_empty())).ok_or_else(|| {
        StoreError::Setup("--store postgres needs --database-url or OUTBOX_CHECK_PG_URL (e.g. postgresql://postgres@127.0.0.1:5432/test)".into())
    })
}

pub fn sweep(args: &ConformArgs) -> Result<Report, StoreError> {
    let policy = args.design.policy();
    let bar = if args.quiet || args.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(u64::from(args.cases))
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} cases, eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("conform {} on {:?}", args.design, args.engine).to_lowercase());
    if let Some(profile) = &args.profile {
        // (b) the schedules that matter, from the model checker, before the random sequences
        // take the progress bar.
        let spinner = if args.quiet || args.json {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new_spinner()
        };
        let schedules = outbox_check_models::conform::schedules(args.against, &|name| {
            spinner.set_message(format!("finding the schedules that matter: model checking {name}"))
        });
        spinner.finish_and_clear();
        // A table that keeps no tenant runs one tenant: the schedules of two tenants are not
        // replayed on it (the report says so).
        let tenantless = |fields: &Option<outbox_check::store::bind::Fields>| {
            fields.as_ref().is_some_and(|f| f.not_compared.iter().any(|c| c == "tenant_id"))
        };
        let replay_all =
            |open: &dyn Fn() -> Result<Box<dyn Store>, StoreError>, one_tenant: bool| -> Result<Vec<_>, StoreError> {
                schedules
                    .iter()
                    .filter(|s| !(one_tenant && s.tenants() > 1))
                    .map(|s| {
                        let mut store = open()?;
                        let result =
                            outbox_check_models::conform::replay_schedule(s, args.against.policy(), store.as_mut());
                        match store.problem() {
                            Some(problem) => Err(StoreError::Setup(problem)),
                            None => Ok(result),
                        }
                    })
                    .collect()
            };
        let not_run = |one_tenant: bool| -> Vec<String> {
            schedules.iter().filter(|s| one_tenant && s.tenants() > 1).map(|s| s.source.clone()).collect()
        };
        let report = match args.engine {
            Engine::Sqlite => {
                bar.set_message(format!("conform {} on sqlite", profile.origin.display()));
                // The schema and every statement must at least prepare before the sweep starts.
                let fields = profile.sqlite()?.fields();
                let open = || profile.sqlite();
                let bounds = Bounds { tenants: if tenantless(&fields) { 1 } else { 2 }, ..Bounds::default() };
                let mut report = conform(args.against.policy(), &open, bounds, args.cases, args.seed, &|| bar.inc(1))?;
                report.schedules = replay_all(&open, tenantless(&fields))?;
                report.schedules_not_run = not_run(tenantless(&fields));
                report.fields = fields;
                report
            }
            Engine::Postgres => {
                bar.set_message(format!("conform {} on postgres", profile.origin.display()));
                let url = url(args)?;
                let open = profile.postgres(&url, args.disposable)?;
                let (fields, scratch) = {
                    let store = open()?;
                    (store.fields(), store.scratch_kind())
                };
                let bounds = Bounds { tenants: if tenantless(&fields) { 1 } else { 2 }, ..Bounds::default() };
                let mut report = conform(args.against.policy(), &open, bounds, args.cases, args.seed, &|| bar.inc(1))?;
                report.schedules = replay_all(&open, tenantless(&fields))?;
                report.schedules_not_run = not_run(tenantless(&fields));
                report.fields = fields;
                report.scratch = scratch;
                drop(open);
                // (c) concurrent relays over the statements, with faults; the history to the oracle.
                bar.finish_and_clear();
                let spinner = if args.quiet || args.json {
                    indicatif::ProgressBar::hidden()
                } else {
                    indicatif::ProgressBar::new_spinner()
                };
                spinner.set_message(
                    "4 relays over your statements on PostgreSQL, with a flaky broker and killed backends",
                );
                spinner.enable_steady_tick(std::time::Duration::from_millis(120));
                // The writes the concurrent run's relays send: its broker acknowledges, fails
                // and times out, and never rejects (so no mark_failed); mark_exhausted only where
                // the design has EXHAUSTED.
                let sent = |key: &str| match key {
                    "mark_ambiguous" | "mark_retry" => true,
                    "mark_exhausted" => args.against.policy().exhausted_status,
                    _ => false,
                };
                let missing: Vec<&str> = profile
                    .file
                    .statements
                    .each()
                    .into_iter()
                    .filter(|(key, sql)| sql.is_none() && sent(key))
                    .map(|(key, _)| key)
                    .collect();
                if !missing.is_empty() {
                    report.concurrent_not_run = Some(format!(
                        "your profile has no {} statement, which the relays send when the broker fails or times out",
                        missing.join(" or ")
                    ));
                } else if profile.file.statements.rescue_all.is_some()
                    && !profile.sweep_names_its_moves(&args.against.policy())
                {
                    // A history names every row a step moved and where to; this sweep's
                    // statement does not say.
                    report.concurrent_not_run = Some(
                        "your rescuer (rescue_all) moves every expired lease in one statement whose RETURNING does not name the rows it moved and their status, so a history cannot record its moves".into(),
                    );
                } else if profile
                    .file
                    .time
                    .as_ref()
                    .is_some_and(|t| t.delays == outbox_check::store::profile::Delays::Absolute)
                {
                    // The concurrent run's relays retry after 20 to 200 ms, which its history's
                    // header states; a queue computing its own delays would not wait those.
                    report.concurrent_not_run = Some(
                        "your queue computes its own retry delays ([time] delays = \"absolute\"), and the concurrent run's history states the short delays its relays wait".into(),
                    );
                } else if args.against.policy().scheduler && profile.file.statements.schedule.is_none() {
                    // Retried rows would wait for good for a scheduler the profile leaves out:
                    // no relay's fault, and nothing to judge.
                    report.concurrent_not_run = Some(format!(
                        "{} has a scheduler (maintenance.scheduler), and your profile has no schedule statement",
                        args.against
                    ));
                } else {
                    report.concurrent = Some(profile.concurrent(&url, args.disposable, 4, 200, args.seed)?);
                }
                spinner.finish_and_clear();
                report
            }
        };
        bar.finish_and_clear();
        return Ok(report);
    }
    let report = match args.engine {
        Engine::Sqlite => {
            let open = || Ok(Box::new(SqliteStore::in_memory(policy)?) as Box<dyn Store>);
            conform(args.against.policy(), &open, Bounds::default(), args.cases, args.seed, &|| bar.inc(1))
        }
        Engine::Postgres => {
            let url = url(args)?;
            let open = reusing_postgres(&url, args.disposable, policy)?;
            conform(args.against.policy(), &open, Bounds::default(), args.cases, args.seed, &|| bar.inc(1))
        }
    };
    bar.finish_and_clear();
    report
}

fn print(args: &ConformArgs, report: &Report) {
    let engine = match args.engine {
        Engine::Sqlite => "sqlite",
        Engine::Postgres => "postgres",
    };
    if args.json {
        let value = serde_json::json!({
            "store": engine,
            "variant": args.design.name(),
            "profile": args.profile.as_ref().map(|p| p.origin.display().to_string()),
            "model": args.against.name(),
            "schema": "outbox-check/conform/v1",
            "cases": report.cases,
            "operations": report.operations,
            "seconds": report.seconds,
            "operations_per_second": report.operations as f64 / report.seconds.max(1e-9),
            "verdict": report.verdict(),
            "divergence": report.divergence,
            "exercised": report.exercised,
            "not_exercised": report.exercised.missing(),
            "schedules": report.schedules,
            "concurrent": report.concurrent,
            "fields": report.fields,
            "schedules_not_run": report.schedules_not_run,
            "concurrent_not_run": report.concurrent_not_run,
            "scratch": report.scratch,
        });
        println!("{}", serde_json::to_string_pretty(&value).expect("JSON of plain values"));
        return;
    }
    let whose = match &args.profile {
        Some(p) => format!("the SQL of {}", p.origin.display()),
        None => format!("{} SQL", args.design),
    };
    // Every statement script the report holds, in one file a person opens beside it.
    let scripts = scripts_file(report);
    // The verdict first, and what to do.
    let check = check_command(args.against);
    let headline = match report.verdict() {
        "diverged" => format!(
            "diverged: {whose} does something {} does not — fix the statements (the first divergence is below)",
            args.against
        ),
        "violated" => format!(
            "violated: {whose} does what {0} says, and {0} itself breaks {1} — fix the design ({check}), then the statements",
            args.against,
            report.design_breaks().into_iter().filter(|p| outbox_check::core::Property::gated_id(p)).collect::<Vec<_>>().join(", ")
        ),
        _ => format!("agrees: {whose} does what {} does in every check below", args.against),
    };
    println!("{headline}");
    if args.quiet {
        if let Some(first) = first_counterexample(report) {
            for line in first.lines() {
                println!("  {line}");
            }
        }
        if let Some(path) = &scripts {
            println!("  every SQL script of this report: {path}");
        }
        return;
    }
    let place = match report.scratch {
        Some("database") => " (in a scratch database of the run's own)",
        Some(_) => " (in a scratch schema: this role may not create a database)",
        None => "",
    };
    println!(
        "conform {whose} on {engine}{place} against the {} model: {} cases, {} operations in {:.2} s ({:.0} operations/s)",
        args.against,
        report.cases,
        report.operations,
        report.seconds,
        report.operations as f64 / report.seconds.max(1e-9)
    );
    match &report.divergence {
        None => println!("  agrees: every result and the whole table matched the model after every step"),
        Some(d) => {
            println!("  DIVERGED (shrunk to {}):", outbox_check::report::count(d.ops.len() as u64, "step"));
            for line in d.to_string().lines() {
                println!("  {line}");
            }
        }
    }
    let missing = report.exercised.missing();
    if report.divergence.is_none() && !missing.is_empty() {
        println!("  not exercised by any case (try more --cases): {}", missing.join("; "));
    }
    if let Some(fields) = &report.fields {
        if !fields.not_compared.is_empty() {
            println!("  not compared (your rows SELECT gives no column for them): {}", fields.not_compared.join(", "));
        }
        if !fields.not_read.is_empty() {
            println!(
                "  not read (columns of your rows SELECT that are no field of the model; map one in [columns]): {}",
                fields.not_read.join(", ")
            );
        }
    }
    if let Some(why) = &report.concurrent_not_run {
        println!("concurrent run: not run: {why}");
    }
    if let Some(c) = &report.concurrent {
        println!(
            "concurrent run: {} relays × {} messages on PostgreSQL (seed {}), {} backends killed between publish and write, {} events in {:.1} s:",
            c.relays, c.messages, c.seed, c.kills, c.events, c.seconds
        );
        if !c.diverged() && !c.violated() {
            println!("  every message terminal, every PUBLISHED one stored by the broker, and the history consistent with {} (oracle)", args.against);
        }
        if c.timed_out {
            println!("  ✗ not every message was terminal within 60 s");
        }
        if !c.not_terminal.is_empty() {
            println!(
                "  ✗ not terminal at the end: {}",
                c.not_terminal.iter().map(|m| format!("m{m}")).collect::<Vec<_>>().join(", ")
            );
        }
        if !c.left_by_design.is_empty() {
            println!(
                "  ✗ left for good by {} (budget spent, not terminal, nothing in the design moves them: L1): {}",
                args.against,
                c.left_by_design.iter().map(|m| format!("m{m}")).collect::<Vec<_>>().join(", ")
            );
        }
        if !c.published_not_stored.is_empty() {
            println!(
                "  ✗ PUBLISHED but never stored: {}",
                c.published_not_stored.iter().map(|m| format!("m{m}")).collect::<Vec<_>>().join(", ")
            );
        }
        if let Some(o) = &c.oracle {
            let more = c.findings.len().saturating_sub(1);
            println!("  ✗ the oracle on the recorded history: {}", o.replace('\n', "\n    "));
            if more > 0 {
                let more = if more == 1 { "1 more finding".to_string() } else { format!("{more} more findings") };
                println!("  and {more}, the first example of each:");
                for f in &c.findings[1..] {
                    println!("  ✗ {}", f.replace('\n', "\n    "));
                }
            }
            if let Some(p) = &c.design_breaks {
                let check = check_command(args.against);
                println!(
                    "    your statements did what {0} says: {0} itself breaks {p} ({check} finds it in the model)",
                    args.against
                );
            }
        }
        if let Some(h) = &c.history {
            println!("  the history: {h} (outbox-check trace {h} --all --html history.html draws it)");
        }
    }
    if args.profile.is_some() {
        let diverged: Vec<_> = report.schedules.iter().filter(|s| s.divergence.is_some()).collect();
        let stopped: Vec<_> = report.schedules.iter().filter(|s| s.stopped.is_some()).collect();
        println!(
            "schedules that matter (the model checker's shortest counterexamples and {}'s reachability examples), replayed on your statements: {} of {} do what the design does",
            args.against,
            report.schedules.len() - diverged.len() - stopped.len(),
            report.schedules.len()
        );
        if !stopped.is_empty() {
            // Why, once per reason, with how many paths it cut short.
            let mut why: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
            for s in &stopped {
                let reason = s.stopped.as_deref().unwrap_or_default();
                *why.entry(reason.split_once(": ").map_or(reason, |(_, r)| r)).or_default() += 1;
            }
            for (reason, n) in why {
                println!(
                    "  – {} stopped where the design goes on: {reason} (what follows was not replayed)",
                    outbox_check::report::count(n as u64, "schedule")
                );
            }
        }
        if !report.schedules_not_run.is_empty() {
            println!(
                "  not replayed: {} of two tenants (your table keeps no tenant; the random sequences ran one)",
                outbox_check::report::count(report.schedules_not_run.len() as u64, "schedule")
            );
        }
        for (n, s) in diverged.into_iter().enumerate() {
            let d = s.divergence.as_ref().expect("diverged");
            println!("  ✗ {}", s.source);
            println!("    {} (step {}): model: {}; your SQL: {}", d.finding, d.step, d.expected, d.got);
            for (i, step) in d.interleaving.iter().enumerate() {
                println!("    {:>2}. {step}", i + 1);
            }
            // The first script in full; the others are in the scripts file.
            if n == 0 {
                println!("    statements run (paste after the schema):");
                for line in &d.sql {
                    for l in line.lines() {
                        println!("      {l}");
                    }
                }
            }
        }
        let check = check_command(args.against);
        let breaks = report.design_breaks();
        if !breaks.is_empty() {
            println!(
                "what {} breaks by itself (2 relays, 1 message, every fault) — your statements, doing what it says along its counterexamples, break it too:",
                args.against
            );
            for s in
                report.schedules.iter().filter(|s| s.design_breaks && s.divergence.is_none() && s.stopped.is_none())
            {
                println!("  ✗ {}", s.source);
            }
            println!("  ({check} shows each path; fix the design, then the statements)");
        }
    }
    if let Some(path) = &scripts {
        println!("every SQL script of this report, in one file: {path}");
    }
}

/// The first counterexample of a report, in words: the random sequences' shrunk divergence, a
/// schedule's, the concurrent history's first finding, or a path of the design's own.
fn first_counterexample(report: &Report) -> Option<String> {
    if let Some(d) = &report.divergence {
        // Up to its script, which is in the scripts file.
        return Some(
            d.to_string()
                .lines()
                .take_while(|l| !l.trim_start().starts_with("SQL the store ran"))
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    if let Some((s, d)) = report.schedules.iter().find_map(|s| s.divergence.as_ref().map(|d| (s, d))) {
        let mut out =
            format!("✗ {}\n{} (step {}): model: {}; your SQL: {}", s.source, d.finding, d.step, d.expected, d.got);
        for (i, step) in d.interleaving.iter().enumerate() {
            out.push_str(&format!("\n{:>2}. {step}", i + 1));
        }
        return Some(out);
    }
    if let Some(o) = report.concurrent.as_ref().and_then(|c| c.oracle.as_ref()) {
        return Some(format!("✗ the oracle on the concurrent run's history: {}", o.lines().next().unwrap_or_default()));
    }
    report
        .schedules
        .iter()
        .find(|s| s.design_breaks && s.divergence.is_none() && s.stopped.is_none())
        .map(|s| format!("✗ {}", s.source))
}

/// Writes every statement script of the report (the random sequences' divergence, each diverged
/// schedule's) to one file in the temporary directory; its path, where there is any.
fn scripts_file(report: &Report) -> Option<String> {
    let mut text = String::new();
    if let Some(d) = &report.divergence {
        text.push_str(&format!("-- the random sequences' shrunk divergence (step {}: {})\n", d.step, d.op));
        for sql in &d.sql {
            text.push_str(sql);
            text.push('\n');
        }
    }
    for s in &report.schedules {
        if let Some(d) = &s.divergence {
            text.push_str(&format!("\n-- {} (step {}: {})\n", s.source, d.step, d.finding));
            for sql in &d.sql {
                text.push_str(sql);
                text.push('\n');
            }
        }
    }
    if text.is_empty() {
        return None;
    }
    let path = std::env::temp_dir().join(format!("outbox-check-conform-{}.sql", std::process::id()));
    std::fs::write(&path, text).ok().map(|()| path.display().to_string())
}

/// The command that shows a declared design's own counterexamples.
fn check_command(design: outbox_check::design::Design) -> String {
    match design {
        outbox_check::design::Design::Custom(_) => {
            "outbox-check check --design on the profile's design file".to_string()
        }
        built_in => format!("outbox-check check --variant {built_in}"),
    }
}

/// `outbox-check conform`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The engine: sqlite (embedded, in memory) or postgres.
    #[arg(long = "store", value_enum)]
    pub engine: conform::Engine,
    /// The design whose SQL runs on the store (on messaging_outbox; seed-tenant on seed 003's outbox_events).
    #[arg(long, value_parser = parse_design, default_value = "reference")]
    pub variant: Design,
    /// The design whose core is the model (default: the same design; with --profile, the
    /// design the profile declares).
    #[arg(long, value_parser = parse_design)]
    pub against: Option<Design>,
    /// Your own SQL instead of ours: a SQL profile (docs/sql-profile.md) — your schema and
    /// statements, run as written against the core of the design it declares.
    #[arg(long, value_name = "FILE.toml", conflicts_with = "variant")]
    pub profile: Option<std::path::PathBuf>,
    /// Random sequences to run.
    #[arg(long, default_value_t = 256, value_parser = at_least_one_u32)]
    pub cases: u32,
    /// The generator's seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// PostgreSQL URL (default: OUTBOX_CHECK_PG_URL).
    #[arg(long)]
    pub database_url: Option<String>,
    /// Allow a host that is not loopback (the harness still works only in its own schema).
    #[arg(long)]
    pub i_understand_this_database_is_disposable: bool,
    /// Only drop the scratch schemas and databases that runs killed outright (SIGKILL) left on
    /// the server — those marked as outbox-check's whose session is gone — then exit.
    #[arg(long)]
    pub clean_up: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress bar, and a short report: the verdict, the first counterexample and the
    /// file holding every SQL script.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `outbox-check conform`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args {
        engine,
        variant,
        against,
        profile,
        cases,
        seed,
        database_url,
        i_understand_this_database_is_disposable,
        clean_up,
        json,
        quiet,
    } = args;
    let profile = match profile.map(|p| outbox_check::store::profile::Profile::load(&p)).transpose() {
        Ok(profile) => profile,
        Err(problems) => {
            for problem in problems.lines() {
                eprintln!("outbox-check: {problem}");
            }
            return ExitCode::from(2);
        }
    };
    let variant = profile.as_ref().map_or(variant, |p| p.design);
    if let Err(problem) =
        crate::refuse_world_only_but(&[variant, against.unwrap_or(variant)], "conform", profile.is_some())
    {
        eprintln!("outbox-check: {problem}");
        return ExitCode::from(2);
    }
    execute(&ConformArgs {
        profile,
        engine,
        design: variant,
        against: against.unwrap_or(variant),
        cases,
        seed,
        database_url,
        disposable: i_understand_this_database_is_disposable,
        clean_up,
        json,
        quiet,
    })
}
