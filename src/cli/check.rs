//! `outbox-check check`: the exhaustive model check of one fleet, its bounds, and its report as text and JSON.

use super::*;

/// A positive number of gigabytes.
pub(crate) fn parse_gigabytes(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(gb) if gb > 0.0 && gb.is_finite() => Ok(gb),
        _ => Err(format!("'{text}' is not a positive number of GB")),
    }
}

/// The machine's memory in bytes (Linux; `None` elsewhere).
pub(crate) fn memory_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 =
        info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

pub(crate) fn check_command(
    fleet: &FleetArgs,
    options: &CheckOptions,
    out: Option<&std::path::Path>,
    explorer_port: u16,
    json: bool,
    quiet: bool,
) -> ExitCode {
    // Where the results go is settled before the long work, not after it.
    if let Some(dir) = out {
        if let Err(problem) = writable_dir(dir) {
            eprintln!("outbox-check: --out {}: {problem}", dir.display());
            return ExitCode::from(2);
        }
    }
    let config = match fleet.config() {
        Ok(config) => config,
        Err(problem) => {
            eprintln!("outbox-check: {problem}");
            return ExitCode::from(2);
        }
    };
    let bar = spinner(quiet, "model checking");
    let report = match try_check(&config, options, &|states, unique| {
        bar.set_message(format!("model checking: {states} states generated, {unique} unique"));
    }) {
        Ok(report) => report,
        Err(problem) => {
            bar.finish_and_clear();
            eprintln!("outbox-check: {problem}");
            return ExitCode::from(2);
        }
    };
    bar.finish_and_clear();
    let command = outbox_check::report::check_command(&config);
    let mut written = Vec::new();
    let mut write_failed = false;
    if let Some(dir) = out {
        match outbox_check_models::report::write_counterexamples(&report, dir, &command) {
            Ok(files) => written = files,
            Err(error) => {
                // The verdicts below still stand: say what could not be written, lose nothing.
                eprintln!("outbox-check: cannot write counterexamples under {}: {error}", dir.display());
                write_failed = true;
            }
        }
    }
    if json {
        print_check_json(&report, fleet.variant.map(|d| d.name().to_string()));
    } else {
        print_check(&report, explorer_port, &written);
    }
    // S11 is reported and fails nothing (decision 77): a design that lets anyone but a live
    // holder fail a row cannot keep it.
    if report.violated_gated() || !report.decided() {
        ExitCode::from(1)
    } else if write_failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// `check --json`'s object (also `merge --json`'s).
pub(crate) fn print_check_json(report: &CheckReport, variant: Option<String>) {
    let mut value = serde_json::to_value(report).expect("JSON of plain values");
    value["schema"] = "outbox-check/check/v1".into();
    value["variant"] = variant.map_or(serde_json::Value::Null, serde_json::Value::String);
    println!("{}", serde_json::to_string_pretty(&value).expect("JSON of plain values"));
}

pub(crate) fn print_check(report: &CheckReport, port: u16, written: &[std::path::PathBuf]) {
    let c = &report.config;
    println!(
        "outbox-check check — {} ({}, {}, {}, budget {}, faults: {})",
        report.fleet.join(", "),
        outbox_check::report::count(c.relays.len() as u64, "relay"),
        outbox_check::report::count(c.messages, "message"),
        outbox_check::report::count(c.tenants, "tenant"),
        c.max_attempts,
        c.faults.names().join(", ")
    );
    println!(
        "{} states generated, {} unique, depth {}, {:.2} s ({:.2} s complete check, {:.2} M states/s; \
         {} states searched for shortest paths){}{}\n\
         A state missed by a fingerprint collision (64-bit): probability at most {:.1e}.\n",
        report.states,
        report.unique_states,
        report.max_depth,
        report.seconds,
        report.search_seconds,
        report.states as f64 / report.search_seconds.max(1e-9) / 1e6,
        report.path_search_states,
        if report.complete { "" } else { " — INCOMPLETE" },
        report.liveness_states.map(|n| format!("; liveness graph {n} states")).unwrap_or_default(),
        report.collision_bound
    );
    if let Some(shard) = report.shard {
        println!(
            "Shard {}/{} (split at depth {}): the verdicts below are this part's only — \
             `outbox-check merge` of every shard's --json gives the search's.\n",
            shard.index, shard.count, shard.depth
        );
    }
    if let Some(states) = &report.worker_states {
        println!(
            "Divided among {} workers by owner: each kept and expanded the states it owns ({}).\n",
            states.len(),
            states.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(n) = report.merged_shards {
        println!(
            "Merged from {n} shards: states summed over the shards (which overlap), seconds the longest shard's.\n"
        );
    }
    for p in &report.properties {
        let status = match p.status {
            Verdict::Holds => "holds",
            Verdict::Violated => "VIOLATED",
            Verdict::Reached => "reached",
            Verdict::Unreached => "unreached",
            Verdict::Unknown => "unknown",
            Verdict::NotExercised => "–",
        };
        let depth = p
            .counterexample
            .as_ref()
            .map(|c| format!(" ({})", outbox_check::report::count(c.len() as u64, "step")))
            .unwrap_or_default();
        println!("  {:<9} {:<7} {}{depth}", status, p.id, p.name);
        if let Some(note) = &p.note {
            println!("  {:<17} {note}", "");
        }
        if p.status == Verdict::Violated {
            if !outbox_check::core::Property::gated_id(&p.id) {
                println!("  {:<17} reported, not a failure of the check: see decision 77 in docs/decisions.md", "");
            }
            if let Some(steps) = &p.counterexample {
                // The one sentence of what goes wrong, as the Markdown has it.
                let what = steps.iter().rev().flat_map(|s| s.violations.iter()).find(|v| v.property.id() == p.id);
                if let Some(v) = what {
                    println!("  {:<17} what goes wrong: {}", "", v.detail);
                }
                for step in steps {
                    if p.cycle_from == Some(step.index) {
                        println!("  {:<17} — repeated forever from here —", "");
                    }
                    println!("  {:<17} {:>2}. {}", "", step.index, step.text.join("; "));
                }
            }
            if let Some(path) = &p.explorer_path {
                println!("  {:<17} explorer: http://127.0.0.1:{port}/#/steps/{path}", "");
            }
        }
    }
    let kinds = |k: Kind| report.properties.iter().filter(|p| p.kind == k).count();
    let count = |v: Verdict| report.properties.iter().filter(|p| p.status == v).count();
    if report.complete {
        if report.shard.is_some() || report.merged_shards.is_some() {
            println!("\nLiveness (L1-L3) is not checked by a sharded search: run `check` unsharded for it.");
        }
        println!(
            "\n{} safety, {} reachability and {} liveness properties checked{}.",
            kinds(Kind::Safety),
            kinds(Kind::Reachability),
            kinds(Kind::Liveness),
            match count(Verdict::NotExercised) {
                0 => String::new(),
                n => format!(" ({n} safety properties not exercised: – above, with the reason)"),
            }
        );
    } else {
        let reason = report
            .properties
            .iter()
            .find_map(|p| p.note.clone().filter(|_| p.status == Verdict::Unknown))
            .unwrap_or_default();
        println!(
            "\nINCOMPLETE: {} properties undecided ({reason}); what is shown as violated was found and replayed.",
            count(Verdict::Unknown)
        );
    }
    if let Some(span) = &report.publication_span {
        match (&span.unbounded, span.ticks, span.publications) {
            (Some(reason), _, _) => println!("\nBroker deduplication: no window covers every republication — {reason}."),
            (None, Some(ticks), Some(publications)) => println!(
                "\nBroker deduplication: a message's {} here span at most {} (lease {}, backoff {}–{}, a poll every tick). \
                 In real time: lease + the sum over the budget's retries of (lease + backoff + poll interval), assuming no relay pauses past \
                 its lease; a broker's dedup window shorter than that delivers a late republication twice (outbox-check e2e shows it).",
                outbox_check::report::count(publications, "publication"),
                outbox_check::report::count(ticks, "tick"),
                c.lease.0,
                c.backoff_base.0,
                c.backoff_cap.0
            ),
            _ => {}
        }
    }
    if !written.is_empty() {
        println!(
            "Counterexamples written: {}",
            written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
}

/// `outbox-check check`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Checker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Stop the whole check (every phase, liveness included) after this many seconds; what
    /// is undecided then is reported as unknown and the check as incomplete (exit 1).
    #[arg(long, value_parser = at_least_one)]
    pub timeout: Option<u64>,
    /// Stop the same way when the check holds more than this many GB of memory, instead of
    /// being killed by the system [default: 80% of the machine's memory].
    #[arg(long, value_name = "GB", value_parser = parse_gigabytes)]
    pub max_memory: Option<f64>,
    /// Skip L1–L3 (they keep the state graph's edges in memory, and search a second graph
    /// with a permanent broker outage for L2).
    #[arg(long)]
    pub no_liveness: bool,
    /// Search only part I of N (0 <= I < N) of the state space, for one job of a CI matrix
    /// or an indexed job; `outbox-check merge` combines the N shards' --json into the
    /// search's verdict. Safety and reachability only: liveness needs the whole graph.
    #[arg(long, value_parser = parse_shard, value_name = "I/N", conflicts_with = "workers")]
    pub shard: Option<(u64, u64)>,
    /// Divide the complete check among N workers (timely dataflow threads) by owner: each
    /// keeps and expands the states whose fingerprint it owns. With --hosts, N in each process.
    /// Safety and reachability only.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub workers: Option<u64>,
    /// With --workers: the cluster's processes, one host:port a line, the same file in every
    /// process; each process is started with its --process. Every process prints the report.
    #[arg(long, value_name = "FILE", requires = "workers", requires = "process")]
    pub hosts: Option<std::path::PathBuf>,
    /// With --hosts: this process's line in the file, from 0.
    #[arg(long, value_name = "I", requires = "hosts")]
    pub process: Option<usize>,
    /// Write each counterexample under DIR/<fleet>/ (Markdown, JSON, trace, ITF). Without
    /// it nothing is written.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// Write no files (the default; kept so scripts that pass it go on working).
    #[arg(long, hide = true, conflicts_with = "out")]
    pub no_write: bool,
    /// The port printed in explorer links (1–65535).
    #[arg(long, default_value_t = 3000, value_parser = port)]
    pub explorer_port: u16,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `outbox-check check`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args {
        fleet,
        threads,
        timeout,
        max_memory,
        no_liveness,
        shard,
        workers,
        hosts,
        process,
        out,
        no_write: _,
        explorer_port,
        json,
        quiet,
    } = args;
    let workers = match (workers, hosts, process) {
        (None, ..) => None,
        (Some(n), None, _) => Some(Workers::Here { threads: n as usize }),
        (Some(n), Some(file), Some(process)) => {
            let hosts: Vec<String> = match std::fs::read_to_string(&file) {
                Ok(text) => text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string)
                    .collect(),
                Err(e) => {
                    eprintln!("outbox-check: --hosts {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            if process >= hosts.len() {
                eprintln!(
                    "outbox-check: --process {process}: {} lists {} processes (0 to {})",
                    file.display(),
                    hosts.len(),
                    hosts.len().saturating_sub(1)
                );
                return ExitCode::from(2);
            }
            Some(Workers::Cluster { threads: n as usize, process, hosts })
        }
        (Some(_), Some(_), None) => {
            eprintln!("outbox-check: --hosts needs --process");
            return ExitCode::from(2);
        }
    };
    let shard = match shard.map(|(index, count)| (u32::try_from(index), u32::try_from(count))) {
        None => None,
        Some((Ok(index), Ok(count))) => Some(outbox_check_models::graph::Shard { index, count }),
        Some(_) => {
            eprintln!("outbox-check: --shard: at most {} shards", u32::MAX);
            return ExitCode::from(2);
        }
    };
    let options = CheckOptions {
        threads: threads as usize,
        timeout: timeout.map(std::time::Duration::from_secs),
        max_memory: max_memory.map(|gb| (gb * 1e9) as u64).or_else(|| memory_total().map(|total| total / 10 * 8)),
        liveness: !no_liveness && shard.is_none() && workers.is_none(),
        shard,
        workers,
        ..CheckOptions::default()
    };
    check_command(&fleet, &options, out.as_deref(), explorer_port, json, quiet)
}
