//! `outbox-check merge`: one verdict from the reports of a sharded check.

use super::*;

/// `outbox-check merge`: the shards' reports, read and combined.
pub(crate) fn merge(files: &[std::path::PathBuf], json: bool) -> ExitCode {
    let mut reports = Vec::new();
    let mut variant = None;
    for file in files {
        let name = file.display().to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(error) => {
                eprintln!("outbox-check: cannot read {name}: {error}");
                return ExitCode::from(2);
            }
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(value) => value,
            Err(error) => {
                eprintln!("outbox-check: {name} is not JSON: {error}");
                return ExitCode::from(2);
            }
        };
        if value["schema"] != "outbox-check/check/v1" {
            eprintln!(
                "outbox-check: {name} is not a report of `check --json` (no \"schema\": \"outbox-check/check/v1\")"
            );
            return ExitCode::from(2);
        }
        variant = value["variant"].as_str().map(str::to_string);
        // A design from a file is known by name only once its file is read.
        let unknown: Vec<&str> = value["fleet"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_str())
            .filter(|d| Design::parse(d).is_none() && outbox_check::design::named(d).is_none())
            .collect();
        if let Some(design) = unknown.first() {
            eprintln!(
                "outbox-check: {name} checked the design '{design}' from a design file: give that file with --design FILE.toml, as check had it"
            );
            return ExitCode::from(2);
        }
        match serde_json::from_value::<CheckReport>(value) {
            Ok(report) => reports.push((name, report)),
            Err(error) => {
                eprintln!("outbox-check: {name} is not a check report this version reads: {error}");
                return ExitCode::from(2);
            }
        }
    }
    let report = match outbox_check_models::check::merge_shards(reports) {
        Ok(report) => report,
        Err(problem) => {
            eprintln!("outbox-check: {problem}");
            return ExitCode::from(2);
        }
    };
    if json {
        print_check_json(&report, variant);
    } else {
        print_check(&report, 3000, &[]);
    }
    if report.violated_gated() || !report.decided() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `outbox-check merge`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shards' reports, as `check --shard I/N --json` printed them.
    #[arg(required = true, value_name = "SHARD.json")]
    pub files: Vec<std::path::PathBuf>,
    /// The design file of a design the shards checked (their fleet had one), as `check --design`
    /// was given it (repeatable).
    #[arg(long = "design", value_name = "FILE.toml", value_parser = parse_design)]
    pub designs: Vec<Design>,
    /// Print one JSON object (the check's format) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `outbox-check merge`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    // The design files were read (and their designs registered) as the arguments were parsed.
    let Args { files, designs: _, json } = args;
    merge(&files, json)
}
