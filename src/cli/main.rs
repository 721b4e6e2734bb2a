//! The `outbox-check` binary: parses the command line, orchestrates the engines, presents. No
//! outbox rule lives here.
//!
//! Exit codes: 0 everything checked holds, 1 a property is violated, 2 bad input or environment.

use clap::{Parser, Subcommand};
use outbox_check::core::{Design, Mutant, Variant};
use outbox_check::world::{Faults, WorldConfig};
use outbox_check_models::check::{check, CheckOptions, CheckReport, Kind, Verdict};

// Model checking clones and drops millions of small states; mimalloc makes that allocation
// cheaper than the system allocator does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod check;
mod conform;
mod e2e;
mod explore;
mod merge;
mod mutants;
mod replay;
#[cfg(madsim)]
mod sim;
mod trace;
mod variants;
mod verify;
use check::{check_command, memory_total, parse_gigabytes, print_check, print_check_json};
use e2e::e2e;
use explore::explore;
use merge::merge;
use mutants::mutants;
use replay::replay;
use std::process::ExitCode;
use trace::{trace, TraceMode};
use variants::variants;

#[derive(Parser, Debug)]
#[command(
    name = "outbox-check",
    version,
    about = "Proves, or refutes with a counterexample, that a transactional-outbox relay with fenced leases is safe.",
    after_help = "Exit codes: 0 every property checked holds, 1 a property is violated, 2 bad input or environment.\n\
                  Designs: outbox-check variants"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: model-check, simulate and SQL-check every variant and a mixed fleet; print
    /// the verdict matrix.
    #[command(
        after_help = "Examples:\n  outbox-check verify\n  outbox-check verify --json > verdicts.json\n  outbox-check verify --report reports   (regenerates reports/index.md and the counterexamples)\n\n\
        The fleets: each variant, and seed-v2 beside legacy-v1. Model checking: two relays, two\n\
        messages, budget 3, every fault (one relay's clock a lease ahead), L1-L3 included.\n\
        Simulation: 300 seeds of three relays × 20 messages, each with its own fault profile.\n\
        SQL: each design's SQL against its own core on SQLite, and on PostgreSQL when\n\
        OUTBOX_CHECK_PG_URL or --database-url is given.\n\n\
        Exit: 0 when reference holds everything and every verdict equals\n\
        reports/expectations.json (compiled in; compared at the default bounds) or the\n\
        --expectations file (compared at any bounds), 1 otherwise (the differences are\n\
        listed), 2 on bad input."
    )]
    Verify {
        /// Messages per fleet (model checking). Two by default (under three minutes on two
        /// cores); three take tens of minutes and gigabytes.
        #[arg(long, default_value_t = verify::DEFAULT_MESSAGES, value_parser = clap::value_parser!(u32).range(1..=3))]
        messages: u32,
        /// Checker and simulation threads.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: u64,
        /// Simulated seeds per fleet.
        #[arg(long, default_value_t = verify::DEFAULT_SIM_SEEDS, value_parser = at_least_one)]
        sim_seeds: u64,
        /// Also run SQL conformance on this PostgreSQL server (default: OUTBOX_CHECK_PG_URL).
        #[arg(long)]
        database_url: Option<String>,
        /// Compare with this file instead of the reports/expectations.json built in.
        #[arg(long, value_name = "FILE")]
        expectations: Option<std::path::PathBuf>,
        /// Also write DIR/index.md (the matrix and one section per finding) and every
        /// counterexample under DIR/counterexamples/.
        #[arg(long, value_name = "DIR")]
        report: Option<std::path::PathBuf>,
        /// Also write a JUnit XML report for CI test reporters: one test case per fleet and
        /// property, failing exactly where verify fails (a verdict that moved, or reference
        /// broken); an expected violation passes with its sentence and counterexample.
        #[arg(long, value_name = "FILE")]
        junit: Option<std::path::PathBuf>,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
        /// Also check your own design file as a fleet of its own (repeatable): with no verdict
        /// pinned, it must hold every property, as reference must.
        #[arg(long = "design", value_name = "FILE.toml", value_parser = parse_design)]
        designs: Vec<Design>,
    },
    /// Print a shell completion script: `outbox-check completions bash > /etc/bash_completion.d/outbox-check`.
    #[command(
        after_help = "Examples:\n  outbox-check completions bash > ~/.local/share/bash-completion/completions/outbox-check\n  \
        outbox-check completions zsh > \"${fpath[1]}/_outbox-check\"\n  outbox-check completions fish > ~/.config/fish/completions/outbox-check.fish"
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// List every variant and mutant with its switches, or one of them.
    #[command(
        after_help = "Examples:\n  outbox-check variants\n  outbox-check variants seed-v2\n  outbox-check variants reference --toml > my-queue.toml\n  outbox-check variants my-queue.toml\n  outbox-check variants --json | jq '.designs[].name'"
    )]
    Variants {
        /// Show only this variant, mutant or design file.
        #[arg(value_parser = parse_design)]
        design: Option<Design>,
        /// Print JSON instead of text.
        #[arg(long, conflicts_with = "toml")]
        json: bool,
        /// Print the design as a complete design file, every key explained: a file to start your
        /// own design from (outbox-check variants reference --toml > my-queue.toml).
        #[arg(long, requires = "design")]
        toml: bool,
    },
    /// Model-check a variant or fleet exhaustively with stateright; shortest counterexamples.
    #[command(
        after_help = "Examples:\n  outbox-check check --variant reference\n  outbox-check check --fleet seed-v2,legacy-v1 --json\n  outbox-check check --variant legacy-v1 --messages 1 --faults crash,broker-drop\n\n\
        Exit: 0 every safety and liveness property holds (or was not exercised: shown as such,\n\
        with the reason), 1 one is violated or the check is incomplete (cut short by --timeout or\n\
        --max-memory: the undecided properties say \"unknown\"), 2 bad input. Every violation is\n\
        replayed in the plain world before it is reported. Counterexamples are written only with\n\
        --out DIR: DIR/<fleet>/<property>.md (with a Mermaid diagram), .json (for\n\
        outbox-check replay), .trace.jsonl and .itf.json."
    )]
    Check {
        #[command(flatten)]
        fleet: FleetArgs,
        /// Checker threads.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: u64,
        /// Stop the whole check (every phase, liveness included) after this many seconds; what
        /// is undecided then is reported as unknown and the check as incomplete (exit 1).
        #[arg(long, value_parser = at_least_one)]
        timeout: Option<u64>,
        /// Stop the same way when the check holds more than this many GB of memory, instead of
        /// being killed by the system [default: 80% of the machine's memory].
        #[arg(long, value_name = "GB", value_parser = parse_gigabytes)]
        max_memory: Option<f64>,
        /// Skip L1–L3 (they keep the state graph's edges in memory, and search a second graph
        /// with a permanent broker outage for L2).
        #[arg(long)]
        no_liveness: bool,
        /// Search only part I of N (0 <= I < N) of the state space, for one job of a CI matrix
        /// or an indexed job; `outbox-check merge` combines the N shards' --json into the
        /// search's verdict. Safety and reachability only: liveness needs the whole graph.
        #[arg(long, value_parser = parse_shard, value_name = "I/N")]
        shard: Option<(u64, u64)>,
        /// Write each counterexample under DIR/<fleet>/ (Markdown, JSON, trace, ITF). Without
        /// it nothing is written.
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
        /// Write no files (the default; kept so scripts that pass it go on working).
        #[arg(long, hide = true, conflicts_with = "out")]
        no_write: bool,
        /// The port printed in explorer links (1–65535).
        #[arg(long, default_value_t = 3000, value_parser = port)]
        explorer_port: u16,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Replay a counterexample file that `check` wrote (its .json) step by step in the plain
    /// world — no normalisation, no abstraction — and confirm the property breaks as it says.
    #[command(
        after_help = "Example: outbox-check check --variant legacy-v1 --out /tmp/cx && outbox-check replay /tmp/cx/legacy-v1-x2/S1.json\n\n\
        Safety: the last step breaks the property. Reachability: the last step reaches the\n\
        situation. Liveness: the cycle is fault-free, lets time pass, never reaches the goal and\n\
        returns to the state it began in. Exit: 0 the file's property is broken as it says, 1 it\n\
        is not, 2 the file cannot be read or is not a counterexample."
    )]
    Replay {
        /// A counterexample's .json, as `check --out DIR` writes it.
        file: std::path::PathBuf,
        /// The design file of a design the counterexample names (its fleet had one).
        #[arg(long = "design", value_name = "FILE.toml", value_parser = parse_design)]
        designs: Vec<Design>,
        /// Print one JSON object instead of the steps.
        #[arg(long)]
        json: bool,
        /// Accepted for uniformity with the other commands (replay draws no progress).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Open the explorer on a variant or fleet: step through its states in a browser, with the
    /// table, each relay's clock and every property's status at the state shown.
    #[command(
        after_help = "Example: outbox-check explore --variant legacy-v1 --port 3000\n  then open http://127.0.0.1:3000/ (a counterexample's link from `check` opens at its path)"
    )]
    Explore {
        #[command(flatten)]
        fleet: FleetArgs,
        /// Port on 127.0.0.1 (1–65535).
        #[arg(long, default_value_t = 3000, value_parser = port)]
        port: u16,
    },
    /// Combine the --json reports of a sharded check (`check --shard I/N --json`, every I
    /// once) into the verdict of the whole search.
    #[command(
        after_help = "Example:\n  for i in 0 1 2 3; do outbox-check check --variant reference --messages 3 --shard $i/4 --json > shard-$i.json; done\n  outbox-check merge shard-*.json\n\n\
        Safety and reachability are decided as by one unsharded check when every shard completed:\n\
        violated (or reached) where any shard found it, with the shortest counterexample among\n\
        them; holds only where every shard completed. Liveness (L1-L3) is not decided by a sharded\n\
        run. Exit: 0 every safety property holds (or was not exercised), 1 one is violated or\n\
        undecided, 2 a file cannot be read or the files are not every shard of one search."
    )]
    Merge {
        /// The shards' reports, as `check --shard I/N --json` printed them.
        #[arg(required = true, value_name = "SHARD.json")]
        files: Vec<std::path::PathBuf>,
        /// Print one JSON object (the check's format) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Check every mutant (docs/designs.md) and say which property kills it, at what depth.
    #[command(after_help = "Example: outbox-check mutants --json\n\nExit: 0 every mutant is killed, 1 one survives.")]
    Mutants {
        /// Checker threads.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: u64,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Simulate relays, broker and database faults deterministically with madsim; one seed
    /// replays one run byte for byte.
    #[command(
        after_help = "Examples:\n  outbox-check sim --variant reference --seeds 1000\n  outbox-check sim --variant legacy-v1 --seeds 100\n  outbox-check sim --seed 7 --json\n  outbox-check sim --variant legacy-v1 --seed 3 --history | outbox-check trace /dev/stdin\n  outbox-check sim --seeds 10000 --shard 2/8   (this CI job's eighth of the sweep)\n\n\
        Each seed draws its own fault profile (swarm testing): broker drops, lost acks,\n\
        duplicates, rejections and outages; database replies lost before or after commit;\n\
        relay kills, pauses past the lease and partitions; clock skew. Faults stop after 8 s of\n\
        simulated time; then L1 and L3 (L2 under a permanent outage) are checked. Every\n\
        history is checked by the core's auditor and, for one-design fleets, by the oracle.\n\
        Exit: 0 no run violated anything, 1 a run did (its history is written under --out and\n\
        its replay command printed), 2 bad input."
    )]
    Sim {
        /// Every relay runs this design (default: reference): a variant, a mutant, or a design
        /// file (FILE.toml).
        #[arg(long, visible_alias = "design", value_name = "DESIGN", value_parser = parse_design, conflicts_with = "fleet")]
        variant: Option<Design>,
        /// One relay per design, comma-separated: a mixed fleet; design files and built-ins mix.
        #[arg(long, value_parser = parse_design, value_delimiter = ',')]
        fleet: Vec<Design>,
        /// Relays, with --variant.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16))]
        relays: u16,
        /// Messages the application enqueues.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        messages: u32,
        /// Tenants; relay i and message i belong to tenant i mod T.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
        tenants: u16,
        /// The attempt budget.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        max_attempts: u32,
        /// Run this one seed (and print its history hash).
        #[arg(long, conflicts_with_all = ["seeds", "from", "shard"])]
        seed: Option<u64>,
        /// Sweep this many seeds.
        #[arg(long, default_value_t = 100, value_parser = at_least_one)]
        seeds: u64,
        /// The sweep's first seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Run only shard i of n of the sweep (every n-th seed from the i-th), e.g. 0/4.
        #[arg(long, value_parser = parse_shard, value_name = "I/N")]
        shard: Option<(u64, u64)>,
        /// Threads for a sweep (default: every core).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        threads: Option<u64>,
        /// Where failing histories are written (DIR/<fleet>/seed-N.trace.jsonl and .json).
        #[arg(long, default_value = "reports/sim")]
        out: std::path::PathBuf,
        /// Write no files.
        #[arg(long)]
        no_write: bool,
        /// With --seed: print the run's history (the oracle's trace format) instead of a summary.
        #[arg(long, requires = "seed")]
        history: bool,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Check a design's SQL — ours, or yours with --profile — against the core on SQLite or
    /// PostgreSQL by differential property tests; a divergence is shrunk to a minimal sequence
    /// and printed as SQL.
    #[command(
        after_help = "Examples:\n  outbox-check conform --store sqlite\n  outbox-check conform --store postgres --database-url postgresql://postgres@127.0.0.1:5432/test\n  outbox-check conform --store sqlite --variant legacy-v1 --against reference   (where V1 differs)\n  outbox-check conform --profile docs/examples/jobs/jobs.profile.toml --store sqlite   (your own SQL)\n\n\
        With --profile (docs/sql-profile.md) your statements run as written, and after the random\n\
        sequences come the schedules that matter (the model checker's shortest counterexamples,\n\
        replayed on your statements) and, on PostgreSQL, four relays at once with a flaky broker\n\
        and killed backends, their history checked by the oracle.\n\n\
        Each case is a random sequence of enqueues, claims by several owners and tenants, terminal\n\
        writes with current and superseded leases, reaps and clock advances, run on the core and\n\
        on the store; results and the whole table must agree after every step. PostgreSQL runs\n\
        in a fresh scratch schema per case (random validated name, dropped afterwards); the URL\n\
        comes from --database-url or OUTBOX_CHECK_PG_URL, and a non-loopback host is refused\n\
        without --i-understand-this-database-is-disposable. SIGINT and SIGTERM drop the scratch\n\
        schemas before exiting; ones a killed run left are dropped by the next run or --clean-up.\n\
        Bound: every variant and mutant — reference, seed-v2, legacy-v1 and the counter-token\n\
        mutants on messaging_outbox, seed-tenant on seed 003's outbox_events (random tokens).\n\
        Exit: 0 agrees, 1 diverged, 2 bad input or no server."
    )]
    Conform {
        /// The engine: sqlite (embedded, in memory) or postgres.
        #[arg(long = "store", value_enum)]
        engine: conform::Engine,
        /// The design whose SQL runs on the store (on messaging_outbox; seed-tenant on seed 003's outbox_events).
        #[arg(long, value_parser = parse_design, default_value = "reference")]
        variant: Design,
        /// The design whose core is the model (default: the same design; with --profile, the
        /// design the profile declares).
        #[arg(long, value_parser = parse_design)]
        against: Option<Design>,
        /// Your own SQL instead of ours: a SQL profile (docs/sql-profile.md) — your schema and
        /// statements, run as written against the core of the design it declares.
        #[arg(long, value_name = "FILE.toml", conflicts_with = "variant")]
        profile: Option<std::path::PathBuf>,
        /// Random sequences to run.
        #[arg(long, default_value_t = 256, value_parser = at_least_one_u32)]
        cases: u32,
        /// The generator's seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// PostgreSQL URL (default: OUTBOX_CHECK_PG_URL).
        #[arg(long)]
        database_url: Option<String>,
        /// Allow a host that is not loopback (the harness still works only in its own schema).
        #[arg(long)]
        i_understand_this_database_is_disposable: bool,
        /// Only drop the scratch schemas that runs killed outright (SIGKILL) left on the server —
        /// those marked as outbox-check's whose session is gone — then exit.
        #[arg(long)]
        clean_up: bool,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// The relay cycle end to end over real parts: relay processes over PostgreSQL publishing to
    /// NATS JetStream, a consumer recording every delivery, under real faults from one seed.
    #[command(
        after_help = "Examples:\n  OUTBOX_CHECK_PG_URL=postgresql://postgres@127.0.0.1:5432/test outbox-check e2e\n  \
        outbox-check e2e --seed 7 --duplicate-window-ms 100 --faults cut   (a window too short: a duplicate reaches the consumer)\n  \
        outbox-check e2e --variant legacy-v1 --json\n\n\
        The run starts its own nats-server (-js, a free loopback port, its own store folder) so it\n\
        can kill the broker and start it again, makes a scratch schema on the PostgreSQL server\n\
        (--database-url or OUTBOX_CHECK_PG_URL; loopback only), enqueues the messages, and starts\n\
        the relays as processes of this program. Faults, drawn from --seed: relays killed\n\
        (SIGKILL) and started again, relays paused past their lease (SIGSTOP/SIGCONT), the broker\n\
        killed and restarted (kill, pause, outage); backends terminated between publish and write,\n\
        broker connections cut before the acknowledgement (backend, cut). The relays log what\n\
        commits; the oracle checks that history, and the consumer's deliveries are checked against\n\
        the table: every PUBLISHED message delivered (S5 end to end), every delivery beyond a\n\
        message's first named — a redelivery, or a second copy the broker stored (a duplicate\n\
        effect, with the publications that caused it). Nothing is left behind: no process, schema\n\
        or store folder.\n\n\
        Exit: 0 every check passed, 1 a check failed (the history is written for `outbox-check\n\
        trace`), 2 bad input or a missing server."
    )]
    E2e {
        /// The broker the relays publish to.
        #[arg(long, value_enum, default_value = "nats")]
        broker: outbox_check::e2e::Broker,
        /// RabbitMQ's URL, with --broker rabbitmq (loopback only).
        #[arg(long, value_name = "URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
        rabbitmq_url: String,
        /// The design the relays run: a built-in or a design file whose SQL outbox-check
        /// generates (the messaging_outbox table, counter tokens).
        #[arg(long, visible_alias = "design", value_parser = parse_design, default_value = "reference")]
        variant: Design,
        /// Relay processes.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=32))]
        relays: u16,
        /// Messages the application enqueues: all before the relays start, or with faults on, a
        /// tenth at the start and the rest at a steady pace through the fault window.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        messages: u32,
        /// The seed the faults are drawn from (the same seed, the same schedule).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The lease, in ms.
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
        lease_ms: u64,
        /// The retry clock's first delay, in ms.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=600_000))]
        backoff_base_ms: u64,
        /// The retry clock's longest delay, in ms (at least --backoff-base-ms).
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        backoff_cap_ms: u64,
        /// How long an idle relay waits before it polls again, in ms.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=60_000))]
        poll_ms: u64,
        /// The attempt budget.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        max_attempts: u32,
        /// Rows a claim takes at most.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000))]
        batch: u32,
        /// The stream's deduplication window, in ms (NATS's default is two minutes).
        #[arg(long, default_value_t = 120_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
        duplicate_window_ms: u64,
        /// Faults: all, none, or a comma-separated list of kill, pause, backend, cut, outage.
        #[arg(long, default_value = "all", value_parser = outbox_check::e2e::Faults::parse)]
        faults: outbox_check::e2e::Faults,
        /// PostgreSQL URL (default: OUTBOX_CHECK_PG_URL); loopback only.
        #[arg(long)]
        database_url: Option<String>,
        /// The nats-server program (default: nats-server on PATH, or /usr/sbin/nats-server).
        #[arg(long, value_name = "PATH")]
        nats_server: Option<std::path::PathBuf>,
        /// Give up after this many seconds (the report says what was left open).
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout: u64,
        /// Write the run's history (the trace format) here.
        #[arg(long, value_name = "FILE")]
        history: Option<std::path::PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// No progress line.
        #[arg(long, short)]
        quiet: bool,
    },
    /// One relay process of `e2e` (started by it; not for use by hand).
    #[command(hide = true)]
    E2eRelay {
        /// The relay's setup, as e2e wrote it.
        file: std::path::PathBuf,
    },
    /// Check histories recorded by any implementation against the model (the reference oracle).
    #[command(
        after_help = "Examples:\n  outbox-check trace relay-run.jsonl --json\n  my-recorder | outbox-check trace -\n  \
        outbox-check trace relay-run.jsonl --all --html relay-run.html\n\n\
        The format: docs/trace-format.md. Fields the format does not know (a timestamp, a host)\n\
        are ignored and listed once on stderr; --strict refuses them. Every divergence is named:\n\
        a safety property (S1-S10) or a conformance finding (C1-C8: the implementation did what\n\
        its declared design does not, safely). Exit: 0 every history is consistent with the\n\
        model (or, with --safety-only, breaks no safety property), 1 one diverges (the first\n\
        divergence is printed; --all lists every one), 2 a file cannot be read or parsed\n\
        (FILE:LINE:COL and the problem)."
    )]
    Trace {
        /// Trace files (JSON Lines with a header line); `-` reads standard input.
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
        /// Refuse fields the format does not know instead of ignoring them.
        #[arg(long)]
        strict: bool,
        /// Check against this design instead of the one the header names: a variant, a mutant
        /// or a design file (FILE.toml).
        #[arg(long, visible_alias = "design", value_name = "DESIGN", value_parser = parse_design)]
        variant: Option<Design>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// No progress display (shown on a terminal while a long history is checked).
        #[arg(short, long)]
        quiet: bool,
        /// List every divergence, going on after each from what the implementation reported.
        #[arg(long)]
        all: bool,
        /// Conformance findings (C1-C8) are listed but exit 0; only a safety property fails.
        #[arg(long)]
        safety_only: bool,
        /// Draw the history as one self-contained HTML page: a lane per relay, each lease a bar,
        /// publications and writes as marks, the divergences highlighted. One file only.
        #[arg(long, value_name = "OUT.html")]
        html: Option<std::path::PathBuf>,
    },
}

/// Which fleet to check and its bounds.
#[derive(clap::Args, Debug, Clone)]
struct FleetArgs {
    /// Every relay runs this design: a variant, a mutant, or your own design file (FILE.toml,
    /// docs/design-file.md).
    #[arg(long, visible_alias = "design", value_name = "DESIGN", value_parser = parse_design, conflicts_with = "fleet", required_unless_present = "fleet")]
    variant: Option<Design>,
    /// One relay per design, comma-separated: a mixed fleet (a rolling upgrade); design files and
    /// built-ins mix (--fleet my.toml,legacy-v1).
    #[arg(long, value_parser = parse_design, value_delimiter = ',')]
    fleet: Vec<Design>,
    /// Relays, with --variant.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4))]
    relays: u16,
    /// Messages in the table (two per aggregate: with 2, the ordering example appears). The state
    /// space grows fast: see reports/bench.md.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    messages: u32,
    /// Tenants; relay i and message i belong to tenant i mod T.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=4))]
    tenants: u16,
    /// The attempt budget.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=6))]
    max_attempts: u32,
    /// Faults: all, none, or a comma-separated list of the catalogue's (the help lists them).
    #[arg(long, default_value = "all", value_parser = parse_faults, help = faults_help())]
    faults: Faults,
    /// Operator requeues of FAILED/EXHAUSTED rows the environment may make.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    requeues: u8,
    /// The application's enqueues are steps of the model, each message with a stale attempt
    /// beside it (what S10 is about); otherwise every message is in the table from the start.
    #[arg(long)]
    enqueues: bool,
    /// The lease, in the model's ticks (1–8). The model keeps its own time scale: a design
    /// file's milliseconds do not enter it.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=8))]
    lease: u64,
    /// The retry clock's first delay, in ticks (1–8).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=8))]
    backoff_base: u64,
    /// The retry clock's longest delay, in ticks (1–16, at least --backoff-base).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=16))]
    backoff_cap: u64,
    /// With the clock-skew fault: how far every second relay's clock runs ahead of true time,
    /// in ticks (0–8). Default: one lease.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i64).range(0..=8))]
    skew: Option<i64>,
}

impl FleetArgs {
    fn config(&self) -> Result<WorldConfig, String> {
        let designs: Vec<Design> = match self.variant {
            Some(design) => vec![design; self.relays as usize],
            None => self.fleet.clone(),
        };
        if self.backoff_cap < self.backoff_base {
            return Err(format!(
                "--backoff-cap {} is below --backoff-base {}: the cap must be at least the base",
                self.backoff_cap, self.backoff_base
            ));
        }
        let mut config = WorldConfig::fleet(&designs, self.messages, self.tenants, self.max_attempts, self.faults);
        config.requeues = self.requeues;
        config.enqueue_actions = self.enqueues;
        config.lease = outbox_check::core::Duration(self.lease);
        config.backoff_base = outbox_check::core::Duration(self.backoff_base);
        config.backoff_cap = outbox_check::core::Duration(self.backoff_cap);
        let skew = self.skew.unwrap_or(self.lease as i64);
        for relay in config.relays.iter_mut().filter(|r| r.skew != 0) {
            relay.skew = skew;
        }
        Ok(config)
    }
}

/// `--faults`'s help, naming every fault of the catalogue.
fn faults_help() -> String {
    format!("Faults: all, none, or a comma-separated list of {}", Faults::NAMES.join(", "))
}

fn parse_faults(text: &str) -> Result<Faults, String> {
    Faults::parse(text)
}

/// Parses `i/n` with 0 ≤ i < n.
fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let bad = || format!("shard '{text}' must be i/n with 0 <= i < n, e.g. 0/4");
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Parses a variant or mutant name.
pub fn parse_design(text: &str) -> Result<Design, String> {
    if text.ends_with(".toml") || text.contains('/') {
        return outbox_check::design::load(std::path::Path::new(text));
    }
    Design::parse(text).ok_or_else(|| {
        let names = Design::all_names();
        // A near miss (a typo, a letter swapped) gets the name it most likely meant.
        let near = names
            .iter()
            .map(|name| (strsim::damerau_levenshtein(text, name), *name))
            .min()
            .filter(|(distance, name)| *distance <= (name.len() / 4).max(2));
        let hint = near.map(|(_, name)| format!(" (did you mean '{name}'?)")).unwrap_or_default();
        format!("unknown design '{text}'{hint}; valid: {}, or a design file (FILE.toml)", names.join(", "))
    })
}

/// A count that must be at least 1: zero gets one plain sentence, not a range up to 2⁶⁴.
fn at_least_one(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{text}' is not a whole number")),
    }
}

fn at_least_one_u32(text: &str) -> Result<u32, String> {
    at_least_one(text).and_then(|n| u32::try_from(n).map_err(|_| format!("{n} is too large (at most {})", u32::MAX)))
}

/// A TCP port to listen on.
fn port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(0) => Err("0 is not a port: give one of 1-65535".to_string()),
        Ok(p) => Ok(p),
        Err(_) => Err(format!("'{text}' is not a port: give one of 1-65535")),
    }
}

/// Runs the command line; returns the process's exit code.
fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so `outbox-check ... | head` would panic on the closed pipe; a
    // command-line tool should end quietly instead, as the default disposition does.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    run()
}

fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = error.print();
                return if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            eprintln!("outbox-check: {}", one_line(&error.render().to_string()));
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Verify {
            messages,
            threads,
            sim_seeds,
            database_url,
            expectations,
            report,
            junit,
            json,
            quiet,
            designs,
        } => verify::verify(&verify::VerifyArgs {
            designs,
            expectations,
            junit,
            messages,
            threads: threads as usize,
            sim_seeds,
            report,
            database_url,
            json,
            quiet,
        }),
        Command::Variants { design, json, toml } => variants(design, json, toml),
        Command::E2eRelay { file } => outbox_check::e2e::relay::main(&file),
        Command::E2e {
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
            json,
            quiet,
        } => e2e(
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
            },
            json,
            quiet,
        ),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "outbox-check", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Check {
            fleet,
            threads,
            timeout,
            max_memory,
            no_liveness,
            shard,
            out,
            no_write: _,
            explorer_port,
            json,
            quiet,
        } => {
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
                max_memory: max_memory
                    .map(|gb| (gb * 1e9) as u64)
                    .or_else(|| memory_total().map(|total| total / 10 * 8)),
                liveness: !no_liveness && shard.is_none(),
                shard,
                ..CheckOptions::default()
            };
            check_command(&fleet, &options, out.as_deref(), explorer_port, json, quiet)
        }
        Command::Replay { file, designs: _, json, quiet: _ } => replay(&file, json),
        Command::Explore { fleet, port } => explore(&fleet, port),
        Command::Merge { files, json } => merge(&files, json),
        Command::Mutants { threads, json, quiet } => mutants(threads as usize, json, quiet),
        Command::Sim {
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
        } => {
            #[cfg(not(madsim))]
            {
                let _ = (
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
                );
                eprintln!(
                    "outbox-check: this build has no simulator: build with --cfg madsim (as .cargo/config.toml does)"
                );
                ExitCode::from(2)
            }
            #[cfg(madsim)]
            {
                let mut config = outbox_check_sims::SimConfig::new(sim::designs(variant, &fleet, relays), messages);
                config.tenants = tenants;
                config.max_attempts = max_attempts;
                let (shard, shards) = shard.unwrap_or((0, 1));
                let threads = threads
                    .map(|t| t as usize)
                    .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
                sim::sim(&sim::SimArgs {
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
        }
        Command::Conform {
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
        } => {
            let profile = match profile.map(|p| outbox_check::store::profile::Profile::load(&p)).transpose() {
                Ok(profile) => profile,
                Err(problem) => {
                    eprintln!("outbox-check: {problem}");
                    return ExitCode::from(2);
                }
            };
            let variant = profile.as_ref().map_or(variant, |p| p.design);
            conform::run(&conform::ConformArgs {
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
        Command::Trace { files, strict, variant, json, quiet, all, safety_only, html } => {
            trace(&files, variant, TraceMode { strict, json, quiet, all, safety_only }, html.as_deref())
        }
    }
}

/// clap's message without its "error: " prefix, usage block and tips, on one line.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid arguments");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    // "the following required arguments were not provided:" names them on the next lines.
    if line.ends_with(':') {
        let named: Vec<&str> = lines.take_while(|l| l.starts_with("--") || l.starts_with('<')).collect();
        line = format!("{line} {}", named.join(", "));
    }
    format!("{line} (see --help)")
}

/// A spinner on stderr with a state count, hidden when stderr is not a terminal or with --quiet.
fn spinner(quiet: bool, what: &str) -> indicatif::ProgressBar {
    let bar = if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new_spinner() };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").expect("a valid template"),
    );
    bar.set_message(what.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// `dir` exists as a directory we may write into, or can be created: checked before a long run
/// so its results are not lost to a path that was never usable.
pub fn writable_dir(dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let probe = dir.join(format!(".outbox-check-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("cannot write into it: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Whether a file can be written at `path` (its folder made if missing), checked before the work
/// that produces it; nothing is left behind.
pub fn writable_file(path: &std::path::Path) -> Result<(), String> {
    if path.is_dir() {
        return Err("is a folder".into());
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    writable_dir(parent)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
