//! `outbox-check explore`: the model checker in a browser, served on loopback.

use super::*;

pub(crate) fn explore(fleet: &FleetArgs, port: u16) -> ExitCode {
    let address = format!("127.0.0.1:{port}");
    let server = match tiny_http::Server::http(&address) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("outbox-check: cannot listen on {address}: {error}");
            return ExitCode::from(2);
        }
    };
    let config = match fleet.config() {
        Ok(config) => config,
        Err(problem) => {
            eprintln!("outbox-check: {problem}");
            return ExitCode::from(2);
        }
    };
    let explorer = outbox_check_models::explorer::Explorer::new(config);
    println!(
        "outbox-check explore — {} on http://{address}/ (Ctrl-C to stop)",
        explorer.config().relays.iter().map(|r| r.design.name()).collect::<Vec<_>>().join(", ")
    );
    // The whole-model verdicts, L1–L3 with their lassos included, from one check in the
    // background (bounded); the page shows them as they arrive.
    let checked = explorer.checked.clone();
    let config = explorer.config().clone();
    std::thread::spawn(move || {
        let options = outbox_check_models::check::CheckOptions {
            threads: 1,
            timeout: Some(std::time::Duration::from_secs(120)),
            ..Default::default()
        };
        let _ = checked.set(outbox_check_models::check::check(&config, &options, &|_, _| {}));
    });
    explorer.serve(server);
    ExitCode::SUCCESS
}

/// `outbox-check explore`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Port on 127.0.0.1 (1–65535).
    #[arg(long, default_value_t = 3000, value_parser = port)]
    pub port: u16,
}

/// Runs `outbox-check explore`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args { fleet, port } = args;
    explore(&fleet, port)
}
