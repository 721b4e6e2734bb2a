//! The example relays of docs/examples/relays — Python (psycopg, pika), Node.js (pg, nats) and
//! Java (JDBC, the RabbitMQ client) — run by `outbox-check e2e --relay`, black-box, under the
//! run's faults: each correct relay passes over several seeds, and each flawed one is caught with
//! a property the model checker finds for the design that flaw makes. Needs PostgreSQL,
//! nats-server, RabbitMQ and the relays' installs (docs/examples/relays/install.sh, which .ci/run
//! runs); NOT RUN without them, a failure instead under .ci/run's `OUTBOX_CHECK_REQUIRE_*`.

use std::process::{Command, Output};

mod common;

const PROFILE: &str = "docs/examples/native/native.profile.toml";

/// One example relay: its command, the broker it speaks, and how to tell it is installed.
struct Example {
    language: &'static str,
    command: &'static str,
    broker: &'static str,
    installed: fn() -> bool,
}

const PYTHON: Example = Example {
    language: "Python",
    command: "python3 docs/examples/relays/python/relay.py",
    broker: "rabbitmq",
    installed: || {
        Command::new("python3").args(["-c", "import psycopg, pika"]).output().is_ok_and(|o| o.status.success())
    },
};

const NODE: Example = Example {
    language: "Node.js",
    command: "node docs/examples/relays/node/relay.js",
    broker: "nats",
    installed: || {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/relays/node/node_modules");
        dir.join("pg").is_dir() && dir.join("nats").is_dir()
    },
};

const JAVA: Example = Example {
    language: "Java",
    command: "docs/examples/relays/java/relay.sh",
    broker: "rabbitmq",
    installed: || {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/relays/java/classes/Relay.class").is_file()
            && ["postgresql", "amqp-client", "slf4j-api", "slf4j-nop"]
                .iter()
                .all(|jar| std::path::Path::new(&format!("/usr/share/java/{jar}.jar")).is_file())
    },
};

/// The services and the relay's install, or a NOT RUN line (a failure under .ci/run).
fn ready(example: &Example) -> Option<(String, std::path::PathBuf)> {
    let what = format!("the {} example relay's tests", example.language);
    let url = common::pg_url(&what)?;
    let nats = common::nats_server(&what)?;
    if example.broker == "rabbitmq" && std::net::TcpStream::connect("127.0.0.1:5672").is_err() {
        assert!(
            std::env::var("OUTBOX_CHECK_REQUIRE_RABBITMQ").as_deref() != Ok("1"),
            "OUTBOX_CHECK_REQUIRE_RABBITMQ=1 but no RabbitMQ on 127.0.0.1:5672"
        );
        common::not_run(&format!("{what} need RabbitMQ on 127.0.0.1:5672"));
        return None;
    }
    if !(example.installed)() {
        assert!(
            std::env::var("OUTBOX_CHECK_REQUIRE_RELAYS").as_deref() != Ok("1"),
            "OUTBOX_CHECK_REQUIRE_RELAYS=1 but the {} example relay is not installed (docs/examples/relays/install.sh)",
            example.language
        );
        common::not_run(&format!("{what} need docs/examples/relays/install.sh run first"));
        return None;
    }
    Some((url, nats))
}

/// `outbox-check e2e --relay COMMAND --json`, 3 relays × 60 messages, every fault.
fn run(
    example: &Example,
    flaw: Option<&str>,
    seed: u64,
    extra: &[&str],
    env: (&str, &std::path::Path),
) -> (Output, serde_json::Value) {
    let command = match flaw {
        Some(flaw) => format!("{} --flaw {flaw}", example.command),
        None => example.command.to_string(),
    };
    let seed = seed.to_string();
    let mut c = Command::new(env!("CARGO_BIN_EXE_outbox-check"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(["e2e", "--relay", &command, "--profile", PROFILE, "--broker", example.broker])
        .args(["--relays", "3", "--messages", "60", "--seed", &seed, "--json", "--quiet"])
        .args(["--database-url", env.0, "--nats-server"])
        .arg(env.1)
        .args(extra);
    if example.broker == "rabbitmq" {
        // RabbitMQ keeps no deduplication window: a consumer behind it deduplicates by the id.
        c.arg("--consumer-deduplicates");
    }
    let out = common::output_within(&mut c, std::time::Duration::from_secs(300));
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{} {command} seed {seed}: no JSON ({e}), exit {:?}: {}",
            example.language,
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let errors = common::e2e_schema_errors(&json);
    assert!(errors.is_empty(), "{command}: {errors:?}");
    if let Some(history) = json["history"].as_str() {
        std::fs::remove_file(history).ok();
    }
    (out, json)
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// The flaws, each with the properties the model checker finds for the design it makes
/// (reports/verdicts.json, docs/designs.md) and the arguments that let it show.
const FLAWS: [(&str, &[&str], &[&str]); 4] = [
    // seed 000's V1 leaseBatch: legacy-v1, whose model check finds S1 and S2.
    ("lease-batch", &[], &["S1", "S2"]),
    // The attempt counted by the failure write alone (seed-v2's counting): the claim's attempt
    // differs from the declared design's (C2); with a budget of one, a row taken again after a
    // pause or kill between its publication and its write is stored twice (S3, decision 101).
    ("attempts-at-ambiguous", &["--max-attempts", "1"], &["S3", "C2"]),
    // seed 003's `attempts < 3` with no exhausted state (seed-tenant: L1): a budget of one, so
    // one failed publication leaves a row waiting that no claim takes again.
    ("no-exhausted", &["--max-attempts", "1"], &["L1"]),
    // A failed publication retried at once (the no-retry-clock mutant: S7).
    ("immediate-retry", &[], &["S7"]),
];

fn the_example_passes_and_each_flaw_is_caught(example: &Example) {
    let Some((url, nats)) = ready(example) else { return };
    let env = (url.as_str(), nats.as_path());
    for seed in [1, 2, 3] {
        let (out, report) = run(example, None, seed, &[], env);
        assert_eq!(
            out.status.code(),
            Some(0),
            "the correct {} relay, seed {seed}: {report:#}\n{}",
            example.language,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(report["oracle_fails_the_run"], false, "{report:#}");
        assert_eq!(report["not_terminal"], serde_json::json!([]), "{report:#}");
        assert_eq!(report["published_not_delivered"], serde_json::json!([]), "{report:#}");
        // The history is the relays' own: every relay made changes the recorder attributed.
        assert!(report["events"].as_u64().unwrap() > 120, "{report:#}");
        assert!(strings(&report["not_judged"]).iter().any(|w| w.contains("zero-row write")), "{report:#}");
    }
    for (flaw, extra, expected) in FLAWS {
        let mut seen = Vec::new();
        let caught = [1, 2, 3, 4].into_iter().find_map(|seed| {
            let (out, report) = run(example, Some(flaw), seed, extra, env);
            let broken = strings(&report["broken"]);
            seen.push(format!("seed {seed}: exit {:?}, broken {broken:?}", out.status.code()));
            (out.status.code() == Some(1) && broken.iter().any(|b| expected.contains(&b.as_str())))
                .then(|| report["replay"].as_str().map(str::to_string))
        });
        let replay = caught.unwrap_or_else(|| {
            panic!("the {} relay's flaw {flaw} was not caught with one of {expected:?}: {seen:?}", example.language)
        });
        assert!(replay.is_some_and(|r| r.contains(&format!("--flaw {flaw}"))), "a failing run says how to replay it");
    }
}

#[test]
fn the_python_relay_passes_and_each_flaw_is_caught() {
    the_example_passes_and_each_flaw_is_caught(&PYTHON);
}

#[test]
fn the_node_relay_passes_and_each_flaw_is_caught() {
    the_example_passes_and_each_flaw_is_caught(&NODE);
}

#[test]
fn the_java_relay_passes_and_each_flaw_is_caught() {
    the_example_passes_and_each_flaw_is_caught(&JAVA);
}

/// A relay command that exits at once, or never takes a row, is one line and exit 2.
#[test]
fn a_relay_that_cannot_run_is_one_line_and_exit_2() {
    let Some((url, nats)) = ready(&PYTHON) else { return };
    for (command, says) in [("exit 3", "exited at once"), ("sleep 600", "no relay took a row")] {
        let out = common::output_within(
            Command::new(env!("CARGO_BIN_EXE_outbox-check"))
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .args(["e2e", "--relay", command, "--profile", PROFILE, "--relays", "2", "--messages", "5", "--quiet"])
                .args(["--database-url", &url, "--nats-server"])
                .arg(&nats),
            std::time::Duration::from_secs(120),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains(says) && stderr.trim().lines().count() == 1, "{command}: {stderr}");
        assert!(out.stdout.is_empty(), "{command}: no verdict: {}", String::from_utf8_lossy(&out.stdout));
    }
}

/// Interrupted (SIGINT or SIGTERM) in the middle of its faults, a run of a user's relay leaves
/// nothing behind: no relay process (nor what its command started), no broker, no folder, no
/// scratch database.
#[test]
fn an_interrupted_relay_run_leaves_nothing_behind() {
    let Some((url, nats)) = ready(&NODE) else { return };
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // The relay under a name of the test's own, so its processes can be found.
        let mark = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("outbox-check-relay-{}-{signal}.js", std::process::id()));
        let _ = std::fs::remove_file(&mark);
        std::os::unix::fs::symlink(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/relays/node/relay.js"),
            &mark,
        )
        .unwrap();
        let command = format!("node {}", mark.display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .args(["e2e", "--relay", &command, "--profile", PROFILE, "--messages", "400", "--seed", "4", "--quiet"])
            .args(["--database-url", &url, "--nats-server"])
            .arg(&nats)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mark_name = mark.file_name().unwrap().to_string_lossy().into_owned();
        let running = || {
            let out = Command::new("pgrep").args(["-f", &mark_name]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).lines().count()
        };
        let started = std::time::Instant::now();
        while running() < 4 && started.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(running() >= 4, "the run did not start its 4 relays");
        std::thread::sleep(std::time::Duration::from_millis(1500));
        // SAFETY: a child of ours.
        unsafe {
            libc::kill(pid as i32, signal);
        }
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + signal), "interrupted by {signal}");
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(running(), 0, "relay processes left after signal {signal}");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("outbox-check-e2e-{pid}-4"));
        assert!(!dir.exists(), "{} left behind", dir.display());
        let broker = Command::new("pgrep").args(["-f", &format!("outbox-check-e2e-{pid}-")]).output().unwrap();
        assert!(broker.stdout.is_empty(), "a broker left: {}", String::from_utf8_lossy(&broker.stdout));
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let left = client
            .query(
                "SELECT d.datname FROM pg_database d JOIN pg_shdescription s ON s.objoid = d.oid WHERE s.description LIKE $1",
                &[&format!("%(pid {pid})")],
            )
            .unwrap();
        assert!(left.is_empty(), "a scratch database left after signal {signal}");
        std::fs::remove_file(&mark).ok();
    }
}
