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
    if report.violated() || !report.decided() {
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
    /// Print one JSON object (the check's format) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `outbox-check merge`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args { files, json } = args;
    merge(&files, json)
}
