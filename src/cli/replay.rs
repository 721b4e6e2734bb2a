//! `outbox-check replay`: a counterexample file run again in the plain world.

use super::*;

pub(crate) fn replay(file: &std::path::Path, json: bool) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("outbox-check: cannot read {}: {error}", file.display());
            return ExitCode::from(2);
        }
    };
    let parsed = outbox_check_models::report::CounterexampleFile::parse(&text);
    let cx = match parsed {
        Ok(cx) => cx,
        Err(problem) => {
            // serde says of a design name it cannot place only that no enum variant matched.
            let problem = problem.to_string();
            let problem = match problem.split_once("data did not match any variant of untagged enum Design") {
                Some((before, at)) => {
                    format!("{before}a design that is neither built in nor given with --design FILE.toml{at}")
                }
                None => problem,
            };
            eprintln!("outbox-check: {}: {problem}", file.display());
            return ExitCode::from(2);
        }
    };
    let outcome = outbox_check_models::replay::confirm(&cx.config, &cx.id, &cx.actions, cx.cycle_from, cx.message);
    let (steps, confirmed) = match &outcome {
        Ok(steps) => (steps.clone(), None),
        Err(why) => (
            outbox_check_models::replay::run(&cx.config, &cx.actions).map(|(s, _)| s).unwrap_or_default(),
            Some(why.to_string()),
        ),
    };
    if json {
        let value = serde_json::json!({
            "schema": "outbox-check/replay/v1",
            "file": file.display().to_string(), "property": cx.id, "replays": confirmed.is_none(),
            "problem": confirmed, "steps": steps,
        });
        println!("{}", serde_json::to_string_pretty(&value).expect("JSON of plain values"));
    } else {
        println!(
            "outbox-check replay — {} of {} ({}), in the plain world\n",
            cx.id,
            cx.fleet.join(", "),
            file.display()
        );
        for step in &steps {
            if cx.cycle_from == Some(step.index) {
                println!("     — repeated forever from here —");
            }
            println!("  {:>2}. {}", step.index, step.text.join("; "));
            for v in &step.violations {
                println!("      ✗ {v}");
            }
        }
        match &confirmed {
            None => println!(
                "\n{} replays: {}.",
                cx.id,
                if cx.kind_is_reachability() {
                    "the situation is reached"
                } else {
                    "the property is broken as the file says"
                }
            ),
            Some(why) => println!("\n{} does NOT replay: {why}.", cx.id),
        }
    }
    if confirmed.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `outbox-check replay`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A counterexample's .json, as `check --out DIR` writes it.
    pub file: std::path::PathBuf,
    /// The design file of a design the counterexample names (its fleet had one).
    #[arg(long = "design", value_name = "FILE.toml", value_parser = parse_design)]
    pub designs: Vec<Design>,
    /// Print one JSON object instead of the steps.
    #[arg(long)]
    pub json: bool,
    /// Accepted for uniformity with the other commands (replay draws no progress).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `outbox-check replay`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args { file, designs: _, json, quiet: _ } = args;
    replay(&file, json)
}
