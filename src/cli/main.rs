//! The `outbox-check` binary: parses the command line, orchestrates the engines, presents. No
//! outbox rule lives here.
//!
//! Exit codes: 0 everything checked holds, 1 a property is violated, 2 bad input or environment.

use clap::{Parser, Subcommand};
use outbox_check::design::{Design, Mutant, Variant};
use outbox_check::world::{Faults, WorldConfig};
use outbox_check_models::check::{try_check, CheckOptions, CheckReport, Kind, Verdict};
use outbox_check_models::cluster::Workers;

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
mod record;
mod replay;
mod sim;
mod trace;
mod variants;
mod verify;
use check::{print_check, print_check_json};
use std::process::ExitCode;

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
        Exit: 0 when reference holds everything (S11, the false failure, is pinned, not required:\n\
        decision 77) and every verdict equals\n\
        reports/expectations.json (compiled in; compared at the default bounds) or the\n\
        --expectations file (compared at any bounds), 1 otherwise (the differences are\n\
        listed), 2 on bad input."
    )]
    Verify(verify::Args),
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
    Variants(variants::Args),
    /// Model-check a variant or fleet exhaustively with stateright; shortest counterexamples.
    #[command(
        after_help = "Examples:\n  outbox-check check --variant reference\n  outbox-check check --fleet seed-v2,legacy-v1 --json\n  outbox-check check --variant legacy-v1 --messages 1 --faults crash,broker-drop\n\n\
        Exit: 0 every safety and liveness property holds (or was not exercised: shown as such,\n\
        with the reason; S11, the false failure, is reported but fails nothing: decision 77),\n\
        1 one is violated or the check is incomplete (cut short by --timeout or\n\
        --max-memory: the undecided properties say \"unknown\"), 2 bad input. Every violation is\n\
        replayed in the plain world before it is reported. Counterexamples are written only with\n\
        --out DIR: DIR/<fleet>/<property>.md (with a Mermaid diagram), .json (for\n\
        outbox-check replay), .trace.jsonl and .itf.json."
    )]
    Check(check::Args),
    /// Replay a counterexample file that `check` wrote (its .json) step by step in the plain
    /// world — no normalisation, no abstraction — and confirm the property breaks as it says.
    #[command(
        after_help = "Example: outbox-check check --variant legacy-v1 --out /tmp/cx && outbox-check replay /tmp/cx/legacy-v1-x2/S1.json\n\n\
        Safety: the last step breaks the property. Reachability: the last step reaches the\n\
        situation. Liveness: the cycle is fault-free, lets time pass, never reaches the goal and\n\
        returns to the state it began in. Exit: 0 the file's property is broken as it says, 1 it\n\
        is not, 2 the file cannot be read or is not a counterexample."
    )]
    Replay(replay::Args),
    /// Open the explorer on a variant or fleet: step through its states in a browser, with the
    /// table, each relay's clock and every property's status at the state shown.
    #[command(
        after_help = "Example: outbox-check explore --variant legacy-v1 --port 3000\n  then open http://127.0.0.1:3000/ (a counterexample's link from `check` opens at its path)"
    )]
    Explore(explore::Args),
    /// Combine the --json reports of a sharded check (`check --shard I/N --json`, every I
    /// once) into the verdict of the whole search.
    #[command(
        after_help = "Examples:\n  for i in 0 1 2 3; do outbox-check check --variant reference --messages 3 --shard $i/4 --json > shard-$i.json; done\n  outbox-check merge shard-*.json\n  outbox-check merge --design my-queue.toml shard-*.json   (shards of `check --design my-queue.toml`)\n\n\
        Safety and reachability are decided as by one unsharded check when every shard completed:\n\
        violated (or reached) where any shard found it, with the shortest counterexample among\n\
        them; holds only where every shard completed. Liveness (L1-L3) is not decided by a sharded\n\
        run. Exit: 0 every safety property holds (or was not exercised; S11 fails nothing), 1 one is violated or\n\
        undecided, 2 a file cannot be read or the files are not every shard of one search."
    )]
    Merge(merge::Args),
    /// Check every mutant (docs/designs.md) and say which property kills it, at what depth.
    #[command(after_help = "Example: outbox-check mutants --json\n\nExit: 0 every mutant is killed, 1 one survives.")]
    Mutants(mutants::Args),
    /// Simulate relays, broker and database faults deterministically with madsim; one seed
    /// replays one run byte for byte.
    #[command(
        after_help = "Examples:\n  outbox-check sim --variant reference --seeds 1000\n  outbox-check sim --variant legacy-v1 --seeds 100\n  outbox-check sim --seed 7 --json\n  outbox-check sim --variant legacy-v1 --seed 3 --history | outbox-check trace /dev/stdin\n  outbox-check sim --seeds 10000 --shard 2/8   (this CI job's eighth of the sweep)\n\n\
        Each seed draws its own fault profile (swarm testing): broker drops, lost acks,\n\
        duplicates, rejections and outages; database replies lost before or after commit;\n\
        relay kills, pauses past the lease and partitions; clock skew. Faults stop after 8 s of\n\
        simulated time; then L1 and L3 (L2 under a permanent outage) are checked. Every\n\
        history is checked by the core's auditor and, for one-design fleets, by the oracle.\n\
        Exit: 0 no run violated anything (but S11, which is reported and fails nothing), 1 a run did (its history is written under --out and\n\
        its replay command printed), 2 bad input."
    )]
    Sim(sim::Args),
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
        in a fresh scratch schema (a --profile: a scratch database of its own, where its DDL may\n\
        make schemas, types and functions; random validated name, dropped afterwards); the URL\n\
        comes from --database-url or OUTBOX_CHECK_PG_URL, and a non-loopback host is refused\n\
        without --i-understand-this-database-is-disposable. SIGINT and SIGTERM drop them before\n\
        exiting; ones a killed run left are dropped by the next run or --clean-up.\n\
        Bound: every variant and mutant — reference, seed-v2, legacy-v1 and the counter-token\n\
        mutants on messaging_outbox, seed-tenant on seed 003's outbox_events (random tokens).\n\
        Exit: 0 agrees, 1 diverged, 2 bad input or no server."
    )]
    Conform(conform::Args),
    /// The relay cycle end to end over real parts: relay processes over PostgreSQL publishing to
    /// NATS JetStream, a consumer recording every delivery, under real faults from one seed.
    #[command(
        after_help = "Examples:\n  OUTBOX_CHECK_PG_URL=postgresql://postgres@127.0.0.1:5432/test outbox-check e2e\n  \
        outbox-check e2e --seed 7 --duplicate-window-ms 100 --faults cut   (a window too short: a duplicate reaches the consumer)\n  \
        outbox-check e2e --variant legacy-v1 --json\n  \
        outbox-check e2e --relay 'python3 docs/examples/relays/python/relay.py' --profile docs/examples/native/native.profile.toml --broker rabbitmq\n\n\
        With --relay COMMAND the relays are yours: COMMAND runs as --relays processes (sh -c, each\n\
        in a process group of its own) told where to connect by environment variables\n\
        (OUTBOX_CHECK_DATABASE_URL, OUTBOX_CHECK_BROKER_URL … docs/relays.md), over a scratch\n\
        database holding --profile's schema. They are judged black-box: a recorder on the outbox\n\
        table and a proxy per relay attribute every change; nothing is asked of the relay but the\n\
        contract. Faults on your processes from --seed: SIGKILL and restart, SIGSTOP past the\n\
        lease, database backends terminated, broker connections partitioned and cut, NATS\n\
        killed (a failing run prints the command that replays it).\n\n\
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
    E2e(e2e::Args),
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
        a safety property (S1-S11) or a conformance finding (C1-C8: the implementation did what\n\
        its declared design does not, safely). Exit: 0 every history is consistent with the\n\
        model (or, with --safety-only, breaks no safety property), 1 one diverges (the first\n\
        divergence is printed; --all lists every one), 2 a file cannot be read or parsed\n\
        (FILE:LINE:COL and the problem)."
    )]
    Trace(trace::Args),
    /// Record a test database's outbox table from the database side: `start` installs two
    /// triggers and a schema of the recorder's own, your tests run as they always do, `stop`
    /// writes the history in the trace format and removes the recorder.
    #[command(
        after_help = "Examples:\n  outbox-check record start --database-url postgresql://localhost/test --table queue.jobs --install\n  \
        cargo test   (or your own integration tests, against that database)\n  \
        outbox-check record stop --database-url postgresql://localhost/test --profile my-queue.profile.toml --out run.jsonl\n  \
        outbox-check trace run.jsonl --design my-queue.toml\n\n\
        Every change to the table is logged with the session that made it (its application_name,\n\
        else its backend pid) and stamped as its transaction commits, in commit order; a rolled-back\n\
        transaction leaves nothing. The history reads the rows with the profile's [columns] and\n\
        [statuses]. Not seen: a statement that changed no row (a refused write, an empty claim),\n\
        publications, which statement made a change. Exit: 0 done, 2 bad input or a database\n\
        problem (one line)."
    )]
    Record(record::Args),
}

/// Which fleet to check and its bounds.
#[derive(clap::Args, Debug, Clone)]
pub struct FleetArgs {
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
    /// in ticks (−8–8; negative: behind it). Default: one lease ahead.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i64).range(-8..=8))]
    skew: Option<i64>,
    /// The last relay runs under the first relay's owner id: one worker name started twice, which
    /// a write fenced by owner alone cannot tell apart (the mutant write-owner-only).
    #[arg(long)]
    shared_owner: bool,
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
        if self.shared_owner && designs.len() < 2 {
            return Err("--shared-owner needs at least two relays (--relays 2 or more)".to_string());
        }
        if self.shared_owner && designs.iter().any(|d| d.policy().lease == outbox_check::core::LeaseKind::Session) {
            return Err("--shared-owner with a design whose session holds the lease (claim.lease = \"session\"): each relay's session holds its own locks".to_string());
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
        if self.shared_owner {
            let first = config.relays[0].owner;
            if let Some(last) = config.relays.last_mut() {
                last.owner = first;
            }
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

/// Refuses a design whose leases a database session holds (`claim.lease = "session"`), whose
/// relay releases its lease by owner after each write (`write.releases_lease_by_owner`), or whose
/// relay renews its lease by a heartbeat (`claim.renewal`), or that runs a scheduler
/// (`maintenance.scheduler`), in a
/// command that does not model it: only check, explore and replay (the model's world) do.
pub fn refuse_world_only(designs: &[Design], command: &str) -> Result<(), String> {
    refuse_world_only_but(designs, command, false)
}

/// As [`refuse_world_only`], with `scheduler` allowed (a SQL profile with a `schedule`
/// statement runs a design's scheduler).
pub fn refuse_world_only_but(designs: &[Design], command: &str, scheduler: bool) -> Result<(), String> {
    if let Some(design) = designs.iter().find(|d| d.policy().lease == outbox_check::core::LeaseKind::Session) {
        return Err(format!(
            "design {}: claim.lease = \"session\" runs in check, explore and replay; {command} does not model a database session's end yet",
            design.name()
        ));
    }
    if let Some(design) = designs.iter().find(|d| d.policy().release_by_owner) {
        return Err(format!(
            "design {}: write.releases_lease_by_owner = true runs in check, explore and replay; {command} does not run a relay's lease release yet",
            design.name()
        ));
    }
    if let Some(design) = designs.iter().find(|d| d.policy().scheduler && !scheduler) {
        return Err(format!(
            "design {}: maintenance.scheduler = true runs in check, explore and replay; {command} does not run a scheduler yet",
            design.name()
        ));
    }
    if let Some(design) = designs.iter().find(|d| d.policy().renewal != outbox_check::core::policy::Renewal::None) {
        return Err(format!(
            "design {}: claim.renewal runs in check, explore and replay; {command} does not run a relay's heartbeat yet",
            design.name()
        ));
    }
    Ok(())
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
        Command::Verify(args) => verify::run(args),
        Command::Variants(args) => variants::run(args),
        Command::E2eRelay { file } => outbox_check::e2e::process::main(&file),
        Command::E2e(args) => e2e::run(args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "outbox-check", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Check(args) => check::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Explore(args) => explore::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Mutants(args) => mutants::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Conform(args) => conform::run(args),
        Command::Trace(args) => trace::run(args),
        Command::Record(args) => record::run(args),
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
