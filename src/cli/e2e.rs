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
pub(crate) fn e2e(
    mut options: outbox_check::e2e::Options,
    user: Option<(String, std::path::PathBuf, Option<String>)>,
    json: bool,
    quiet: bool,
) -> ExitCode {
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
    let report = match &user {
        None => outbox_check::e2e::run(&options, &progress),
        Some((command, profile, table)) => {
            outbox_check::e2e::blackbox::run_relays(&options, command, profile, table.as_deref(), &progress)
        }
    };
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

/// `outbox-check e2e`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The broker the relays publish to.
    #[arg(long, value_enum, default_value = "nats")]
    pub broker: outbox_check::e2e::Broker,
    /// RabbitMQ's URL, with --broker rabbitmq (loopback only).
    #[arg(long, value_name = "URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub rabbitmq_url: String,
    /// The design the relays run: a built-in or a design file whose SQL outbox-check
    /// generates (the messaging_outbox table, counter tokens).
    #[arg(long, visible_alias = "design", value_parser = parse_design, default_value = "reference", conflicts_with = "relay")]
    pub variant: Design,
    /// Relay processes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub relays: u16,
    /// Messages the application enqueues: all before the relays start, or with faults on, a
    /// tenth at the start and the rest at a steady pace through the fault window.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub messages: u32,
    /// The seed the faults are drawn from (the same seed, the same schedule).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The lease, in ms.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub lease_ms: u64,
    /// The retry clock's first delay, in ms.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub backoff_base_ms: u64,
    /// The retry clock's longest delay, in ms (at least --backoff-base-ms).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub backoff_cap_ms: u64,
    /// How long an idle relay waits before it polls again, in ms.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub poll_ms: u64,
    /// The attempt budget.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_attempts: u32,
    /// Rows a claim takes at most.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub batch: u32,
    /// The stream's deduplication window, in ms (NATS's default is two minutes).
    #[arg(long, default_value_t = 120_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub duplicate_window_ms: u64,
    /// Faults: all, none, or a comma-separated list of kill, pause, backend, cut, outage.
    #[arg(long, default_value = "all", value_parser = outbox_check::e2e::ProcessFaults::parse)]
    pub faults: outbox_check::e2e::ProcessFaults,
    /// PostgreSQL URL (default: OUTBOX_CHECK_PG_URL); loopback only.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The nats-server program (default: nats-server on PATH, or /usr/sbin/nats-server).
    #[arg(long, value_name = "PATH")]
    pub nats_server: Option<std::path::PathBuf>,
    /// Give up after this many seconds (the report says what was left open).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Write the run's history (the trace format) here.
    #[arg(long, value_name = "FILE")]
    pub history: Option<std::path::PathBuf>,
    /// Your relay: a command run as --relays processes (sh -c), told where to connect by the
    /// environment (docs/relays.md), judged black-box. Needs --profile.
    #[arg(long, value_name = "COMMAND", requires = "profile")]
    pub relay: Option<String>,
    /// With --relay: the SQL profile whose schema the scratch database holds, whose enqueue the
    /// application runs and whose design the history is checked against.
    #[arg(long, value_name = "FILE", requires = "relay")]
    pub profile: Option<std::path::PathBuf>,
    /// With --relay: the outbox table (default: the one the profile's enqueue inserts into).
    #[arg(long, value_name = "NAME", requires = "relay")]
    pub table: Option<String>,
    /// The consumer deduplicates by the message id, as one behind a broker without a
    /// deduplication window must: a second stored copy is named in the report, not a failure.
    #[arg(long)]
    pub consumer_deduplicates: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `outbox-check e2e`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args {
        broker,
        rabbitmq_url,
        variant,
        relays,
        messages,
        seed,
        lease_ms,
        backoff_base_ms,
        backoff_cap_ms,
        poll_ms,
        max_attempts,
        batch,
        duplicate_window_ms,
        faults,
        database_url,
        nats_server,
        timeout,
        history,
        relay,
        profile,
        table,
        consumer_deduplicates,
        json,
        quiet,
    } = args;
    if relay.as_deref().is_some_and(|r| r.trim().is_empty()) {
        eprintln!("outbox-check: --relay: an empty command");
        return ExitCode::from(2);
    }
    if let Err(problem) = crate::refuse_world_only(&[variant], "e2e") {
        eprintln!("outbox-check: {problem}");
        return ExitCode::from(2);
    }
    e2e(
        outbox_check::e2e::Options {
            broker,
            rabbitmq_url,
            design: variant,
            relays,
            messages,
            seed,
            lease_ms,
            backoff_base_ms,
            backoff_cap_ms,
            poll_ms,
            max_attempts,
            batch,
            duplicate_window_ms,
            faults,
            fault_span_ms: 3_000,
            database_url: database_url
                .or_else(|| std::env::var("OUTBOX_CHECK_PG_URL").ok().filter(|u| !u.is_empty()))
                .unwrap_or_default(),
            nats_server: nats_server.unwrap_or_default(),
            deadline_ms: timeout * 1_000,
            history,
            consumer_deduplicates,
        },
        relay.zip(profile).map(|(r, p)| (r, p, table)),
        json,
        quiet,
    )
}
