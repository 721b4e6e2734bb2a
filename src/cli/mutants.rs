//! `outbox-check mutants`: which property kills each mutant, with its shortest path.

use super::*;

pub(crate) fn mutants(threads: usize, json: bool, quiet: bool) -> ExitCode {
    use stateright::{Checker, HasDiscoveries, Model};
    let bar =
        if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(Mutant::ALL.len() as u64) };
    bar.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("a valid template"));
    let mut rows = Vec::new();
    for mutant in Mutant::ALL {
        bar.set_message(mutant.name());
        let model = outbox_check_models::outbox::OutboxModel::new(outbox_check_models::check::mutant_config(
            Design::Mutant(mutant),
        ));
        let started = std::time::Instant::now();
        // stateright finds whether a failure exists; the exact depth of the first one comes
        // from our own breadth-first search (stateright keeps the last path it met).
        // A kill is a property verify gates on: S11, which reference breaks too, kills nothing
        // (decision 77).
        let gated =
            |name: &str| outbox_check_models::outbox::OutboxModel::spec_property(name).is_some_and(|p| p.gated());
        let safety: std::collections::BTreeSet<&'static str> =
            outbox_check_models::outbox::SAFETY_NAMES.into_iter().filter(|name| gated(name)).collect();
        let checker = model
            .clone()
            .checker()
            .threads(threads)
            .finish_when(HasDiscoveries::AnyOf(safety.clone()))
            .spawn_bfs()
            .join();
        let failing = checker.discoveries().keys().any(|name| gated(name));
        let killers: Vec<(String, usize)> = if failing {
            outbox_check_models::check::shortest_paths_until(&model, &safety, 1)
                .into_iter()
                .filter_map(|(name, actions, _)| {
                    outbox_check_models::outbox::OutboxModel::spec_property(name)
                        .map(|p| (p.id().to_string(), actions.len()))
                })
                .collect()
        } else {
            Vec::new()
        };
        rows.push((mutant, killers, checker.unique_state_count(), started.elapsed().as_secs_f64()));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let survivors: Vec<&str> = rows.iter().filter(|r| r.1.is_empty()).map(|r| r.0.name()).collect();
    if json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(m, killers, states, seconds)| {
                serde_json::json!({
                    "mutant": m.name(), "mistake": m.mistake(), "killed": !killers.is_empty(),
                    "killed_by": killers.first().map(|k| &k.0), "depth": killers.first().map(|k| k.1),
                    "expected_to_break": m.expected_kills(), "unique_states": states, "seconds": seconds,
                    "check": format!("outbox-check check --design {} {}", m.name(), outbox_check_models::check::MUTANT_WORLD),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "schema": "outbox-check/mutants/v1", "mutants": list, "survivors": survivors })
            )
            .expect("JSON")
        );
    } else {
        println!(
            "outbox-check mutants — each mutant's fleet: 3 relays on one message (the third reusing the first's id), \
             2 tenants, budget 3, every fault, 1 requeue"
        );
        println!(
            "the world of `outbox-check check --design MUTANT {}`: that command shows each kill\n",
            outbox_check_models::check::MUTANT_WORLD
        );
        println!("  {:<24} {:<8} {:>6} {:>10}  expected (docs/designs.md)", "mutant", "killed by", "depth", "states");
        for (m, killers, states, _) in &rows {
            match killers.first() {
                Some((id, depth)) => println!(
                    "  {:<24} {:<8} {:>6} {:>10}  {}",
                    m.name(),
                    id,
                    depth,
                    states,
                    m.expected_kills().join(" or ")
                ),
                None => println!(
                    "  {:<24} {:<8} {:>6} {:>10}  {}",
                    m.name(),
                    "SURVIVES",
                    "-",
                    states,
                    m.expected_kills().join(" or ")
                ),
            }
        }
        println!("\n{} of {} mutants killed.", rows.len() - survivors.len(), rows.len());
    }
    if survivors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `outbox-check mutants`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Checker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `outbox-check mutants`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args { threads, json, quiet } = args;
    mutants(threads as usize, json, quiet)
}
