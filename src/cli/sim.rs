//! `outbox-check sim`: one seed, or a sweep of seeds, of the madsim world.

use super::*;
#[cfg(madsim)]
use simulate::*;

/// The simulations themselves: only a build with `--cfg madsim` has a simulator.
#[cfg(madsim)]
mod simulate {
    use outbox_check::design::Design;
    use outbox_check_sims::run::{run as run_seed, OracleVerdict};
    use outbox_check_sims::sweep::{replay_command, sweep, Seeds, Summary};
    use outbox_check_sims::SimConfig;
    use std::path::Path;
    use std::process::ExitCode;

    /// What `sim` was asked to do.
    pub struct SimArgs {
        pub config: SimConfig,
        pub seed: Option<u64>,
        pub seeds: Seeds,
        pub threads: usize,
        pub out: Option<std::path::PathBuf>,
        pub history: bool,
        pub json: bool,
        pub quiet: bool,
    }

    /// Failing histories written per sweep at most (the summary lists every failing seed).
    const WRITTEN_MAX: usize = 50;

    pub fn sim(args: &SimArgs) -> ExitCode {
        match args.seed {
            Some(seed) => one(args, seed),
            None => many(args),
        }
    }

    fn one(args: &SimArgs, seed: u64) -> ExitCode {
        let result = run_seed(&args.config, seed);
        let written = match (&args.out, result.failed()) {
            (Some(out), true) => match write_history(out, &args.config, &result) {
                Ok(path) => Some(path),
                Err(e) => {
                    eprintln!("outbox-check: {e}");
                    return ExitCode::from(2);
                }
            },
            _ => None,
        };
        if args.history {
            print!("{}", result.history);
        } else if args.json {
            let mut value = serde_json::to_value(&result).expect("JSON of plain values");
            value["schema"] = "outbox-check/sim-run/v1".into();
            value["replay"] = replay_command(&args.config, seed).into();
            value["history_file"] = written.as_ref().map(|p| p.display().to_string()).into();
            println!("{}", serde_json::to_string_pretty(&value).expect("JSON of plain values"));
        } else {
            let s = &result.stats;
            println!(
                "seed {seed}: {} × {}, faults: {}",
                result.fleet,
                outbox_check::report::count(args.config.messages, "message"),
                kinds(&result.profile.kinds())
            );
            println!(
            "  {} events, {} simulated ms, {} stale writes refused, {} unknown outcomes, {} duplicates delivered ({} deduplicated)",
            s.events, s.ended_ms, s.stale_refused, s.unknown_outcomes, s.duplicates_delivered, s.deduplicated
        );
            println!("  history hash {}", result.history_hash);
            match &result.oracle {
                OracleVerdict::Accepted => println!("  oracle: history accepted"),
                OracleVerdict::Diverged { detail, .. } => println!("  oracle: {}", detail.replace('\n', "\n  ")),
                OracleVerdict::NotChecked => {
                    println!("  oracle: not checked (a mixed fleet; the oracle checks one design)")
                }
            }
            if result.violations.is_empty() && !result.failed() {
                println!("  verdict: every property holds");
            }
            for v in &result.violations {
                println!("  VIOLATED {v}");
            }
            if let Some(path) = &written {
                println!("  history: {}", path.display());
            }
            if result.failed() {
                println!("  replay: {}", replay_command(&args.config, seed));
            }
        }
        if result.failed() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    }

    fn kinds(kinds: &[&str]) -> String {
        if kinds.is_empty() {
            "none (a quiet run)".into()
        } else {
            kinds.join(", ")
        }
    }

    fn many(args: &SimArgs) -> ExitCode {
        if let Err(problem) = args.seeds.validate() {
            eprintln!("outbox-check: {problem}");
            return ExitCode::from(2);
        }
        if let Some(out) = &args.out {
            if let Err(problem) = crate::writable_dir(out) {
                eprintln!("outbox-check: --out {}: {problem}", out.display());
                return ExitCode::from(2);
            }
        }
        let bar = if args.quiet || args.json {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(args.seeds.len())
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {pos}/{len} seeds, {per_sec}, eta {eta}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_message(format!("sim {}", args.config.fleet_name()));
        let failed = std::sync::atomic::AtomicU64::new(0);
        // Failing histories are written as they are found (the first WRITTEN_MAX), not kept.
        let written = std::sync::Mutex::new(Vec::new());
        let write_error = std::sync::Mutex::new(None);
        let summary = sweep(
            &args.config,
            args.seeds,
            args.threads,
            &|r| {
                let Some(out) = &args.out else { return };
                let mut written = written.lock().unwrap_or_else(|p| p.into_inner());
                if written.len() < WRITTEN_MAX {
                    match write_history(out, &args.config, r) {
                        Ok(path) => written.push(path.display().to_string()),
                        Err(e) => {
                            write_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                        }
                    }
                }
            },
            &|r| {
                if r.failed() {
                    let n = failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    bar.set_message(format!("sim {}: {n} failing", args.config.fleet_name()));
                }
                bar.inc(1);
            },
        );
        bar.finish_and_clear();
        let mut written = written.into_inner().unwrap_or_else(|p| p.into_inner());
        written.sort();
        if args.json {
            let mut value = serde_json::to_value(&summary).expect("JSON of plain values");
            value["schema"] = "outbox-check/sim-sweep/v1".into();
            value["histories_written"] = written.clone().into();
            println!("{}", serde_json::to_string_pretty(&value).expect("JSON of plain values"));
        } else {
            print_summary(&summary, &written);
        }
        // A history that could not be written is reported; the verdicts above still stand.
        let write_error = write_error.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = &write_error {
            eprintln!("outbox-check: {e}");
        }
        // A run that broke only S11 is reported and fails nothing (decision 77).
        if summary.failed_gated_runs > 0 {
            ExitCode::from(1)
        } else if write_error.is_some() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    }

    fn print_summary(s: &Summary, written: &[String]) {
        let shard =
            if s.seeds.shards > 1 { format!(" (shard {}/{})", s.seeds.shard, s.seeds.shards) } else { String::new() };
        println!(
            "sim {}: {} runs, seeds {}..{}{shard}, {} relays × {} messages, in {:.1} s ({:.0} runs/s)",
            s.fleet,
            s.runs,
            s.seeds.from,
            s.seeds.from.saturating_add(s.seeds.count),
            s.config.designs.len(),
            s.config.messages,
            s.seconds,
            s.runs_per_second
        );
        if s.violations.is_empty() {
            println!("  no property violated in any run");
        }
        for (property, runs) in &s.violations {
            let name = outbox_check::core::Property::parse(property)
                .map(|p| p.to_string())
                .unwrap_or_else(|| property.clone());
            println!("  VIOLATED in {runs:>5} runs: {name}");
        }
        let oracle: Vec<String> = s.oracle.iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!("  oracle on the histories: {}", oracle.join(", "));
        println!(
        "  duplicates delivered {} (deduplicated by key {}, applied twice {}), stale writes refused {}, unknown outcomes {}",
        s.duplicates_delivered, s.deduplicated, s.duplicate_effects, s.stale_refused, s.unknown_outcomes
    );
        // Counts past the budget + 1 are one bucket: a design without a budget check runs away.
        let max = s.config.max_attempts;
        let mut histogram: Vec<String> =
            s.attempts_histogram.iter().filter(|(a, _)| **a <= max + 1).map(|(a, n)| format!("{a}: {n}")).collect();
        let over: u64 = s.attempts_histogram.iter().filter(|(a, _)| **a > max + 1).map(|(_, n)| n).sum();
        if over > 0 {
            let top = s.attempts_histogram.keys().last().copied().unwrap_or(0);
            histogram.push(format!("{}..{top}: {over}", max + 2));
        }
        println!("  attempts per message at the end: {}", histogram.join(", "));
        match (s.publish_latency_p50_ms, s.publish_latency_p99_ms) {
            (Some(p50), Some(p99)) => println!("  enqueue-to-broker latency (simulated): p50 {p50} ms, p99 {p99} ms"),
            _ => println!("  no message reached the broker"),
        }
        println!("  runs under a permanent broker outage (L2 checked): {}", s.permanent_outage_runs);
        for f in s.failing.iter().take(10) {
            println!("  seed {}: {} — {}\n    replay: {}", f.seed, f.properties.join(" "), f.first, f.replay);
        }
        if s.failed_runs > 10 {
            let listed = if s.failing_not_listed > 0 {
                format!("; --json lists the first {}", s.failing.len())
            } else {
                "; --json lists them all".into()
            };
            println!("  … and {} more failing seeds{listed}", s.failed_runs - 10);
        }
        if !written.is_empty() {
            let more =
                if s.failed_runs > written.len() as u64 { format!(" ({WRITTEN_MAX} of them)") } else { String::new() };
            println!(
                "  failing histories{more}: {}",
                Path::new(&written[0]).parent().map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
    }

    /// Writes a failing run's history (oracle trace format) and its result beside it.
    fn write_history(
        out: &Path,
        config: &SimConfig,
        result: &outbox_check_sims::run::RunResult,
    ) -> Result<std::path::PathBuf, String> {
        let dir = out.join(config.fleet_name());
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join(format!("seed-{}.trace.jsonl", result.seed));
        std::fs::write(&path, &result.history).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let mut value = serde_json::to_value(result).expect("JSON of plain values");
        value["replay"] = replay_command(config, result.seed).into();
        let json = dir.join(format!("seed-{}.json", result.seed));
        std::fs::write(&json, serde_json::to_string_pretty(&value).expect("JSON of plain values"))
            .map_err(|e| format!("cannot write {}: {e}", json.display()))?;
        Ok(path)
    }

    /// The designs of `--variant V --relays R` or of `--fleet A,B,...` (reference by default).
    pub fn designs(variant: Option<Design>, fleet: &[Design], relays: u16) -> Vec<Design> {
        if fleet.is_empty() {
            vec![variant.unwrap_or(Design::Variant(outbox_check::design::Variant::Reference)); relays as usize]
        } else {
            fleet.to_vec()
        }
    }
}

/// `outbox-check sim`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Every relay runs this design (default: reference): a variant, a mutant, or a design
    /// file (FILE.toml).
    #[arg(long, visible_alias = "design", value_name = "DESIGN", value_parser = parse_design, conflicts_with = "fleet")]
    pub variant: Option<Design>,
    /// One relay per design, comma-separated: a mixed fleet; design files and built-ins mix.
    #[arg(long, value_parser = parse_design, value_delimiter = ',')]
    pub fleet: Vec<Design>,
    /// Relays, with --variant.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub relays: u16,
    /// Messages the application enqueues.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub messages: u32,
    /// Tenants; relay i and message i belong to tenant i mod T.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub tenants: u16,
    /// The attempt budget.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_attempts: u32,
    /// Run this one seed (and print its history hash).
    #[arg(long, conflicts_with_all = ["seeds", "from", "shard"])]
    pub seed: Option<u64>,
    /// Sweep this many seeds.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub seeds: u64,
    /// The sweep's first seed.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// Run only shard i of n of the sweep (every n-th seed from the i-th), e.g. 0/4.
    #[arg(long, value_parser = parse_shard, value_name = "I/N")]
    pub shard: Option<(u64, u64)>,
    /// Threads for a sweep (default: every core).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
    /// Where failing histories are written (DIR/<fleet>/seed-N.trace.jsonl and .json).
    #[arg(long, default_value = "reports/sim")]
    pub out: std::path::PathBuf,
    /// Write no files.
    #[arg(long)]
    pub no_write: bool,
    /// With --seed: print the run's history (the oracle's trace format) instead of a summary.
    #[arg(long, requires = "seed")]
    pub history: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `outbox-check sim`; returns the exit code.
#[cfg(not(madsim))]
pub fn run(_: Args) -> ExitCode {
    eprintln!("outbox-check: this build has no simulator: build with --cfg madsim (as .cargo/config.toml does)");
    ExitCode::from(2)
}

/// Runs `outbox-check sim`; returns the exit code.
#[cfg(madsim)]
pub fn run(args: Args) -> ExitCode {
    let Args {
        variant,
        fleet,
        relays,
        messages,
        tenants,
        max_attempts,
        seed,
        seeds,
        from,
        shard,
        threads,
        out,
        no_write,
        history,
        json,
        quiet,
    } = args;
    let designs = designs(variant, &fleet, relays);
    if let Err(problem) = crate::refuse_world_only(&designs, "sim") {
        eprintln!("outbox-check: {problem}");
        return ExitCode::from(2);
    }
    let mut config = outbox_check_sims::SimConfig::new(designs, messages);
    config.tenants = tenants;
    config.max_attempts = max_attempts;
    let (shard, shards) = shard.unwrap_or((0, 1));
    let threads = threads
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    sim(&SimArgs {
        config,
        seed,
        seeds: outbox_check_sims::sweep::Seeds { from, count: seeds, shard, shards },
        threads,
        out: (!no_write).then_some(out),
        history,
        json,
        quiet,
    })
}
