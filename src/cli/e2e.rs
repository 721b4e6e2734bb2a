//! `outbox-check e2e`: relay processes over PostgreSQL and a real broker under real faults.

use super::*;

/// Where the nats-server program is: on PATH, or where Debian puts it.
pub(crate) fn find_program(name: &str, fallback: &str) -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()));
    on_path.or_else(|| Some(std::path::PathBuf::from(fallback)).filter(|p| p.is_file()))
}

/// `outbox-check e2e`: checks the environment (a PostgreSQL URL, the broker's program) in one
/// line each, runs, prints.
pub(crate) fn e2e(mut options: outbox_check::e2e::Options, json: bool, quiet: bool) -> ExitCode {
    if options.backoff_cap_ms < options.backoff_base_ms {
        eprintln!(
            "outbox-check: --backoff-cap-ms {} is below --backoff-base-ms {}",
            options.backoff_cap_ms, options.backoff_base_ms
        );
        return ExitCode::from(2);
    }
    if options.database_url.is_empty() {
        eprintln!(
            "outbox-check: e2e needs a PostgreSQL server: --database-url URL or OUTBOX_CHECK_PG_URL (loopback only)"
        );
        return ExitCode::from(2);
    }
    if options.broker == outbox_check::e2e::Broker::Rabbitmq {
        let loopback = options
            .rabbitmq_url
            .split_once("://")
            .map(|(_, rest)| rest.rsplit_once('@').map_or(rest, |(_, host)| host));
        if !loopback.is_some_and(|host| {
            host.starts_with("127.0.0.1") || host.starts_with("localhost") || host.starts_with("[::1]")
        }) {
            eprintln!("outbox-check: --rabbitmq-url {}: only a loopback RabbitMQ (the run declares and deletes a queue there)", options.rabbitmq_url);
            return ExitCode::from(2);
        }
    } else if options.nats_server.as_os_str().is_empty() {
        match find_program("nats-server", "/usr/sbin/nats-server") {
            Some(path) => options.nats_server = path,
            None => {
                eprintln!("outbox-check: nats-server not found on PATH or at /usr/sbin/nats-server (Debian's package nats-server; or --nats-server PATH)");
                return ExitCode::from(2);
            }
        }
    } else if !options.nats_server.is_file() {
        eprintln!("outbox-check: --nats-server {}: no such program", options.nats_server.display());
        return ExitCode::from(2);
    }
    if let Some(path) = &options.history {
        if let Err(problem) = writable_file(path) {
            eprintln!("outbox-check: --history {}: {problem}", path.display());
            return ExitCode::from(2);
        }
    }
    let show = !quiet && !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let progress = |line: &str| {
        if show {
            eprint!("\r\x1b[2K{line}");
        }
    };
    let report = outbox_check::e2e::run(&options, &progress);
    if show {
        eprint!("\r\x1b[2K");
    }
    match report {
        Err(problem) => {
            eprintln!("outbox-check: {problem}");
            ExitCode::from(2)
        }
        Ok(report) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&report).expect("JSON of plain values"));
            } else {
                outbox_check::e2e::print(&report);
            }
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}
