//! The binary as a user meets it: exit codes, one-line errors, the listings.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A `check --json` report's verdicts: each property's id, status and counterexample length.
fn verdicts(report: &serde_json::Value) -> Vec<(String, String, Option<usize>)> {
    report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].to_string(), p["status"].to_string(), p["counterexample"].as_array().map(|c| c.len())))
        .collect()
}

/// `trace` on a fixture that diverges: its words, after asserting exit 1.
fn diverging(args: &[&str]) -> String {
    let out = run(args);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}{}", text(&out.stderr));
    said
}

#[test]
fn help_lists_every_command() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for command in ["verify", "check", "merge", "replay", "explore", "mutants", "sim", "conform", "trace", "variants"] {
        assert!(help.contains(&format!("  {command} ")), "--help does not list {command}:\n{help}");
    }
    assert!(help.contains("Exit codes"), "{help}");
}

#[test]
fn variants_lists_every_variant_and_mutant() {
    let out = run(&["variants"]);
    assert!(out.status.success());
    let listing = text(&out.stdout);
    let names = [
        "reference",
        "seed-v2",
        "legacy-v1",
        "seed-tenant",
        "claim-no-token-bump",
        "write-owner-only",
        "write-id-only",
        "swallow-stale",
        "steal-live-lease",
        "no-retry-clock",
        "no-budget-predicate",
        "exhaust-off-by-one",
        "claim-terminal",
        "publish-before-ack",
        "retry-after-db-loss",
        "fresh-idempotency-key",
        "write-ignores-tenant",
        "token-reset-on-requeue",
    ];
    for name in names {
        assert!(listing.contains(name), "variants does not list {name}");
    }
    let json: serde_json::Value = serde_json::from_slice(&run(&["variants", "--json"]).stdout).expect("valid JSON");
    assert_eq!(json["schema"], "outbox-check/variants/v1");
    let listed: Vec<&str> = json["designs"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(listed, names);
}

#[test]
fn an_unknown_variant_is_one_line_naming_the_valid_ones_and_exit_2() {
    let out = run(&["variants", "seed-v3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("unknown design 'seed-v3'") && err.contains("reference, seed-v2, legacy-v1, seed-tenant"),
        "{err}"
    );
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for args in [
        &["verify", "--bogus"][..],
        &["verify", "--messages", "zero"],
        &["nonsense"],
        &["sim", "--seeds", "0"],
        &["sim", "--seed", "1", "--seeds", "3"],
        &["sim", "--history"],
        &["conform"],
        &["check", "--variant", "nosuch"],
        &["check", "--fleet", "reference", "--variant", "reference"],
        &["check", "--relays", "2"],
        &["check", "--variant", "reference", "--max-memory", "0"],
        &["explore", "--variant", "reference", "--port", "0"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("outbox-check: "), "{args:?}: {err}");
    }
}

#[test]
fn verify_passes_on_reference_and_reports_the_legacy_findings() {
    let out = run(&["verify", "--json", "--quiet", "--messages", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let fleet = |name: &str| json["fleets"].as_array().unwrap().iter().find(|f| f["fleet"] == name).cloned().unwrap();
    let violated = |name: &str| -> Vec<String> {
        fleet(name)["properties"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["status"] == "violated")
            .map(|p| p["id"].as_str().unwrap().to_string())
            .collect()
    };
    // Reference breaks only S11, the false failure its reaper records (decision 77): reported,
    // and no failure of verify.
    assert_eq!(violated("reference"), ["S11"]);
    let legacy = violated("legacy-v1");
    assert!(legacy.contains(&"S1".to_string()) && legacy.contains(&"S3".to_string()), "{legacy:?}");
    assert!(violated("seed-v2+legacy-v1").contains(&"S1".to_string()));
}

#[test]
fn verify_writes_the_findings_report() {
    let dir = std::env::temp_dir().join(format!("outbox-check-report-{}", std::process::id()));
    let out = run(&["verify", "--quiet", "--messages", "1", "--report", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Every complete check bounds the chance a fingerprint collision hid a state (issue 27, item 12).
    let said = text(&out.stdout);
    let bound = said
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "A state missed by a fingerprint collision (64-bit) in any of these checks: probability at most ",
            )
        })
        .expect("the collision bound")
        .trim_end_matches('.');
    let bound: f64 = bound.parse().expect("a number");
    assert!(bound > 0.0 && bound < 1e-6, "{said}");
    let index = std::fs::read_to_string(dir.join("index.md")).expect("index.md");
    assert!(index.contains("| `reference` | ✓ | ✓ |"), "{index}");
    assert!(index.contains("[✗](counterexamples/legacy-v1-x2/S1.md)"), "{index}");
    assert!(index.contains("```mermaid"), "{index}");
    assert!(dir.join("counterexamples/legacy-v1-x2/S1.md").exists());
    assert!(dir.join("counterexamples/legacy-v1-x2/S1.trace.jsonl").exists());
    // ITF: one state per step plus the initial one; the last step breaks the property.
    let itf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("counterexamples/legacy-v1-x2/S1.itf.json")).unwrap())
            .unwrap();
    let details: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("counterexamples/legacy-v1-x2/S1.json")).unwrap())
            .unwrap();
    let steps = details["property"]["counterexample"].as_array().unwrap().len();
    assert_eq!(itf["#meta"]["format"], "ITF");
    assert_eq!(itf["vars"], serde_json::json!(["now", "rows", "relays", "action", "violations"]));
    let states = itf["states"].as_array().unwrap();
    assert_eq!(states.len(), steps + 1);
    assert_eq!(states[0]["action"], "init");
    assert!(
        states.last().unwrap()["violations"].as_array().unwrap().iter().any(|v| v == "S1"),
        "{}",
        states.last().unwrap()
    );
    assert!(states.iter().all(|s| s["rows"][0]["lease_token"]["#bigint"].is_string()));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sim_replays_a_seed_and_writes_failing_histories_the_oracle_reads() {
    let hash = |out: &Output| -> String {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
        json["history_hash"].as_str().expect("a hash").to_string()
    };
    let first = hash(&run(&["sim", "--seed", "7", "--json"]));
    assert_eq!(first, hash(&run(&["sim", "--seed", "7", "--json"])), "two runs of seed 7 differ");
    assert_ne!(first, hash(&run(&["sim", "--seed", "8", "--json"])));

    let dir = std::env::temp_dir().join(format!("outbox-check-sim-{}", std::process::id()));
    let out = run(&["sim", "--variant", "legacy-v1", "--seeds", "100", "--quiet", "--out", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let summary = text(&out.stdout);
    assert!(summary.contains("S1 no stale terminal write succeeds"), "{summary}");
    assert!(summary.contains("replay: outbox-check sim --variant legacy-v1"), "{summary}");
    let written: Vec<_> =
        std::fs::read_dir(dir.join("legacy-v1")).expect("histories written").flatten().map(|e| e.path()).collect();
    let trace = written.iter().find(|p| p.to_string_lossy().ends_with(".trace.jsonl")).expect("a history");
    let checked = run(&["trace", trace.to_str().unwrap()]);
    assert_eq!(checked.status.code(), Some(1), "the oracle accepted a failing legacy history");
    assert!(text(&checked.stdout).contains(": S"), "{}", text(&checked.stdout));

    // A reference history, piped through the oracle, is accepted.
    let history = run(&["sim", "--seed", "3", "--history"]);
    assert!(history.status.success());
    let file = dir.join("reference-3.jsonl");
    std::fs::write(&file, &history.stdout).unwrap();
    let checked = run(&["trace", file.to_str().unwrap()]);
    assert!(checked.status.success(), "{}{}", text(&checked.stdout), text(&checked.stderr));
    std::fs::remove_dir_all(&dir).ok();

    let bad = run(&["sim", "--seeds", "10", "--shard", "4/4"]);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(text(&bad.stderr).lines().count(), 1, "{}", text(&bad.stderr));
}

#[test]
fn conform_agrees_on_sqlite_reports_legacy_divergence_and_refuses_bad_servers_in_one_line() {
    let out = run(&["conform", "--store", "sqlite", "--cases", "64", "--json"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(json["verdict"], "agrees");
    assert!(json["operations"].as_u64().unwrap() > 100);

    let out =
        run(&["conform", "--store", "sqlite", "--variant", "legacy-v1", "--against", "reference", "--cases", "64"]);
    assert_eq!(out.status.code(), Some(1));
    let report = text(&out.stdout);
    assert!(report.contains("DIVERGED") && report.contains("SELECT message_id FROM messaging_outbox"), "{report}");

    let no_url = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(["conform", "--store", "postgres"])
        .env_remove("OUTBOX_CHECK_PG_URL")
        .output()
        .unwrap();
    assert_eq!(no_url.status.code(), Some(2));
    assert!(text(&no_url.stderr).contains("OUTBOX_CHECK_PG_URL"));
    for url in ["postgresql://postgres@127.0.0.1:1/test", "postgresql://postgres@192.0.2.1:5432/test", "not a url"] {
        let out = run(&["conform", "--store", "postgres", "--database-url", url, "--quiet"]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        assert_eq!(text(&out.stderr).lines().count(), 1, "{url}: {}", text(&out.stderr));
    }
}

#[test]
fn verify_fails_when_a_verdict_differs_from_the_pinned_expectations() {
    let pinned: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("reports/expectations.json").unwrap()).unwrap();
    let mut changed = pinned.clone();
    // Pretend seed-v2 was expected to keep S6.
    changed["seed-v2"]["model"] = serde_json::json!(["S3", "S7", "S9", "S11"]);
    let file = std::env::temp_dir().join(format!("outbox-check-expect-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_string(&changed).unwrap()).unwrap();
    let junit = std::env::temp_dir().join(format!("outbox-check-junit-{}.xml", std::process::id()));
    let out = run(&[
        "verify",
        "--quiet",
        "--messages",
        "1",
        "--expectations",
        file.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    std::fs::remove_file(&file).ok();
    assert_eq!(out.status.code(), Some(1));
    let text = text(&out.stdout);
    assert!(text.contains("seed-v2: model checking found [S3 S6 S7 S9 S11], expected [S3 S7 S9 S11]"), "{text}");
    // And it names the file it compared with, not the built-in one.
    assert!(text.contains("outbox-check-expect-"), "{text}");
    // The JUnit report fails exactly the case that moved: seed-v2's S6, with its sentence.
    let xml = std::fs::read_to_string(&junit).unwrap();
    std::fs::remove_file(&junit).ok();
    assert!(xml.starts_with("<?xml") && xml.contains("<testsuites name=\"outbox-check verify\""), "{xml}");
    let cases = xml.matches("<testcase ").count();
    // SQLite for each of the four designs, and PostgreSQL too where OUTBOX_CHECK_PG_URL is set.
    let sql = xml.matches("name=\"SQL on ").count();
    assert!(sql == 4 || sql == 8, "{sql} SQL cases:\n{xml}");
    assert_eq!(
        cases,
        5 * (outbox_check::core::Property::SAFETY.len() + outbox_check::core::Property::LIVENESS.len()) + sql,
        "a case per fleet and property, and one per design's SQL engine:\n{xml}"
    );
    assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
    let failed = xml.split("<testcase ").find(|c| c.contains("<failure ")).unwrap();
    assert!(failed.contains("classname=\"seed-v2\"") && failed.contains("name=\"S6 "), "{failed}");
    assert!(failed.contains("S6 violated (model checking): "), "the case carries the sentence: {failed}");
    // With the pinned expectations nothing fails, though legacy-v1 breaks most properties (they
    // are pinned for two messages, the default; one finds the same, and a named file is compared
    // at any bounds).
    let out = run(&[
        "verify",
        "--quiet",
        "--messages",
        "1",
        "--expectations",
        "reports/expectations.json",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let xml = std::fs::read_to_string(&junit).unwrap();
    std::fs::remove_file(&junit).ok();
    assert!(xml.contains("failures=\"0\"") && !xml.contains("<failure "), "{xml}");
}

#[test]
fn check_over_its_memory_limit_is_incomplete_not_checked() {
    // Three messages take some hundred MB to search: a limit of 40 MB is passed within seconds.
    let out = run(&[
        "check",
        "--variant",
        "reference",
        "--messages",
        "3",
        "--no-liveness",
        "--quiet",
        "--max-memory",
        "0.04",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("INCOMPLETE") && stdout.contains("--max-memory 0.04 GB"), "{stdout}");
    assert!(!stdout.contains("properties checked"), "{stdout}");
    // A limit the search stays under changes nothing.
    let out = run(&["check", "--variant", "reference", "--no-liveness", "--quiet", "--max-memory", "8"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A check is bounded by its --timeout in every phase, whatever the value, and one cut short
/// says so and exits 1.
#[test]
fn timeouts_of_any_size_bound_the_check_without_panicking() {
    let out = run(&["check", "--variant", "reference", "--quiet", "--timeout", "10000000000000000000"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("properties checked"));
    let started = std::time::Instant::now();
    let out = run(&["check", "--variant", "reference", "--messages", "4", "--quiet", "--timeout", "2"]);
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("INCOMPLETE") && stdout.contains("--timeout"), "{stdout}");
    assert!(!stdout.contains("properties checked"), "{stdout}");
    // Generous against a loaded machine, far below the minutes the whole check would take.
    assert!(seconds < 30.0, "a 2 s timeout took {seconds:.1} s");
}

/// Where the results would go is checked before the work; a write that fails after it loses
/// neither the verdicts nor their exit code.
#[test]
fn results_are_never_lost_to_an_output_directory() {
    let out = run(&["check", "--variant", "legacy-v1", "--quiet", "--out", "/proc/nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).lines().count(), 1, "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("/proc/nope"));
    // A directory that can be written, but whose fleet folder is taken by a file.
    let dir = std::env::temp_dir().join(format!("outbox-check-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("legacy-v1-x2"), "in the way").unwrap();
    let out = run(&["check", "--variant", "legacy-v1", "--quiet", "--no-liveness", "--out", dir.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(1), "the violations' exit code");
    assert!(text(&out.stdout).contains("VIOLATED  S1"), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("cannot write counterexamples"), "{}", text(&out.stderr));
}

/// What `check --out` writes, `replay` confirms; a file that was tampered with does not replay,
/// and a file that is no counterexample is bad input.
#[test]
fn replay_confirms_a_counterexample_file_and_refuses_a_tampered_one() {
    let dir = std::env::temp_dir().join(format!("outbox-check-replay-cli-{}", std::process::id()));
    let out = run(&["check", "--variant", "legacy-v1", "--quiet", "--out", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    for id in ["S1", "S4", "L2", "L3"] {
        let file = dir.join(format!("legacy-v1-x2/{id}.json"));
        let out = run(&["replay", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{id}: {}", text(&out.stdout));
        assert!(text(&out.stdout).contains("replays"), "{}", text(&out.stdout));
    }
    let file = dir.join("legacy-v1-x2/S1.json");
    let mut cx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    cx["property"]["counterexample"].as_array_mut().unwrap().pop();
    std::fs::write(&file, cx.to_string()).unwrap();
    let out = run(&["replay", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("does NOT replay"), "{}", text(&out.stdout));
    std::fs::write(&file, "{\"fleet\": 3}").unwrap();
    let out = run(&["replay", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).lines().count(), 1, "{}", text(&out.stderr));
    std::fs::remove_dir_all(&dir).ok();
}

/// A bad database URL or a server that does not answer is the environment: exit 2 with one line,
/// before any model checking, never "VIOLATED".
#[test]
fn verify_reports_a_bad_database_as_the_environment() {
    for url in ["not a url", "postgresql://postgres@127.0.0.1:1/test"] {
        let started = std::time::Instant::now();
        let out = run(&["verify", "--quiet", "--database-url", url]);
        assert_eq!(out.status.code(), Some(2), "{url}: {}", text(&out.stdout));
        assert_eq!(text(&out.stderr).lines().count(), 1, "{url}: {}", text(&out.stderr));
        assert!(!text(&out.stdout).contains("VIOLATED"), "{url}: {}", text(&out.stdout));
        assert!(started.elapsed().as_secs() < 5, "{url}: it ran the long work first");
    }
}

/// A seed range that runs nothing, or runs past the last seed, is bad input.
#[test]
fn an_empty_seed_range_is_an_error() {
    for args in
        [&["sim", "--from", "18446744073709551615", "--seeds", "10"][..], &["sim", "--seeds", "2", "--shard", "5/8"]]
    {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&out.stderr).lines().count(), 1, "{args:?}: {}", text(&out.stderr));
    }
}

/// verify's matrix never shows ✓ for a property nothing exercised: S9 and S10 are exercised in
/// its two-tenant world, and its JSON says which world decided each cell.
#[test]
fn verify_exercises_tenant_isolation_and_atomic_enqueue() {
    let out = run(&["verify", "--json", "--quiet", "--messages", "1"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    for fleet in json["fleets"].as_array().unwrap() {
        for p in fleet["properties"].as_array().unwrap() {
            if p["status"] == "holds" {
                assert_eq!(p["model"], "holds", "{} {}: ✓ without a model verdict of holds", fleet["fleet"], p["id"]);
            }
        }
        let s9 = fleet["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S9").unwrap();
        assert!(s9["status"] == "holds" || s9["status"] == "violated", "{} S9: {s9}", fleet["fleet"]);
    }
    let seed_v2 = json["fleets"].as_array().unwrap().iter().find(|f| f["fleet"] == "seed-v2").unwrap();
    let s9 = seed_v2["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S9").unwrap();
    assert_eq!(s9["status"], "violated", "seed-v2's claim is not scoped to a tenant: {s9}");
}

/// A report file that cannot be written is bad input, found before the work: `verify --junit`
/// and `trace --html` under a path whose folder is a file, or at a folder.
#[test]
fn an_unwritable_report_file_is_exit_2_before_the_work() {
    let blocker = std::env::temp_dir().join(format!("outbox-check-blocker-{}", std::process::id()));
    std::fs::write(&blocker, b"").unwrap();
    let under = blocker.join("report.xml");
    let started = std::time::Instant::now();
    let out = run(&["verify", "--quiet", "--junit", under.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "found before the work");
    let err = text(&out.stderr);
    assert!(err.trim_end().lines().count() == 1 && err.contains("--junit"), "{err}");
    let dir = std::env::temp_dir();
    let out = run(&["trace", "--html", dir.to_str().unwrap(), "tests/traces/valid-published.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is a folder"), "{}", text(&out.stderr));
    std::fs::remove_file(&blocker).ok();
}

/// The model's time scale from the command line: the reproduce command carries it, and a cap
/// below the base is one line and exit 2.
#[test]
fn the_models_time_scale_is_an_option_and_reproduces() {
    let dir = std::env::temp_dir().join(format!("outbox-check-timescale-{}", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args([
            "check",
            "--variant",
            "legacy-v1",
            "--lease",
            "3",
            "--backoff-base",
            "2",
            "--backoff-cap",
            "6",
            "--skew",
            "1",
            "--no-liveness",
            "--quiet",
            "--out",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let md = std::fs::read_to_string(dir.join("legacy-v1-x2/S1.md")).unwrap();
    assert!(md.contains("--lease 3 --backoff-base 2 --backoff-cap 6 --skew 1"), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("legacy-v1-x2/S1.json")).unwrap()).unwrap();
    assert_eq!(json["config"]["lease"], 3);
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(["check", "--variant", "reference", "--backoff-base", "4", "--backoff-cap", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--backoff-cap 2 is below --backoff-base 4") && err.trim_end().lines().count() == 1, "{err}");
}

/// `check --shard I/N --json` in every shard, then `merge`: the unsharded check's safety and
/// reachability verdicts and exit code; and every way the files can fail to be one search's
/// shards is one line and exit 2.
#[test]
fn sharded_check_merges_into_the_unsharded_verdicts() {
    let dir = std::env::temp_dir().join(format!("outbox-check-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = ["check", "--variant", "legacy-v1", "--json", "--quiet"];
    let whole = run(&[&base[..], &["--no-liveness"]].concat());
    let mut files = Vec::new();
    for i in 0..3 {
        let shard = format!("{i}/3");
        let out = run(&[&base[..], &["--shard", &shard]].concat());
        assert_eq!(out.status.code(), Some(1), "legacy-v1's shard {shard}: {}", text(&out.stderr));
        let file = dir.join(format!("shard-{i}.json"));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.to_str().unwrap().to_string());
    }
    fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&["merge"][..], extra].concat()
    }
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    let merged = run(&args(&[&names[..], &["--json"]].concat()));
    assert_eq!(merged.status.code(), whole.status.code(), "{}", text(&merged.stderr));
    let json = |bytes: &[u8]| -> serde_json::Value { serde_json::from_slice(bytes).expect("JSON") };
    assert_eq!(verdicts(&json(&merged.stdout)), verdicts(&json(&whole.stdout)));
    let table = text(&run(&args(&names)).stdout);
    assert!(
        table.contains("Merged from 3 shards")
            && table.contains("VIOLATED")
            && table.contains("not checked by a sharded search"),
        "{table}"
    );
    // Not one search's shards: a shard missing, one given twice, a report of an unsharded run,
    // a file that is not a report.
    let unsharded = dir.join("whole.json");
    std::fs::write(&unsharded, &whole.stdout).unwrap();
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "{\"schema\": \"something else\"}").unwrap();
    for (bad, says) in [
        (vec![names[0], names[1]], "shards missing: 2/3"),
        (vec![names[0], names[1], names[1]], "given twice"),
        (vec![unsharded.to_str().unwrap()], "not a shard's report"),
        (vec![junk.to_str().unwrap()], "not a report of `check --json`"),
        (vec!["/nonexistent/shard.json"], "cannot read"),
    ] {
        let out = run(&args(&bad));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains(says) && err.lines().count() == 1, "{bad:?}: {err}");
    }
    let out = run(&["check", "--variant", "reference", "--shard", "3/3"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The shards of a check of your own design file merge once `merge` is given the file, as
/// `check` was; without it, one line names the design and what to give.
#[test]
fn shards_of_a_design_file_merge_with_the_file() {
    let dir = std::env::temp_dir().join(format!("outbox-check-file-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let reference = text(&run(&["variants", "reference", "--toml"]).stdout);
    let design = dir.join("my-queue.toml");
    std::fs::write(&design, reference.replace("name = \"reference\"", "name = \"my-queue\"")).unwrap();
    let design = design.to_str().unwrap();
    let whole = run(&["check", "--design", design, "--no-liveness", "--json", "--quiet"]);
    assert_eq!(whole.status.code(), Some(0), "{}", text(&whole.stderr));
    let mut files = Vec::new();
    for i in 0..2 {
        let out = run(&["check", "--design", design, "--shard", &format!("{i}/2"), "--json", "--quiet"]);
        let file = dir.join(format!("shard-{i}.json"));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.to_str().unwrap().to_string());
    }
    let without = run(&["merge", &files[0], &files[1]]);
    let err = text(&without.stderr);
    assert_eq!(without.status.code(), Some(2), "{err}");
    assert!(err.contains("'my-queue'") && err.contains("--design") && err.lines().count() == 1, "{err}");
    let merged = run(&["merge", "--design", design, &files[0], &files[1], "--json"]);
    assert_eq!(merged.status.code(), Some(0), "{}", text(&merged.stderr));
    let statuses = |bytes: &[u8]| {
        let v: serde_json::Value = serde_json::from_slice(bytes).expect("JSON");
        v["properties"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["id"].to_string(), p["status"].to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(statuses(&merged.stdout), statuses(&whole.stdout));
    // A shard whose split depth was edited is not one of this check's shards (issue 27, item 11).
    let mut edited: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[1]).unwrap()).unwrap();
    let depth = edited["shard"]["depth"].as_u64().expect("a shard's depth");
    edited["shard"]["depth"] = serde_json::json!(depth + 1);
    let moved = dir.join("shard-1-edited.json");
    std::fs::write(&moved, edited.to_string()).unwrap();
    let refused = run(&["merge", "--design", design, &files[0], moved.to_str().unwrap()]);
    let err = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("split the search at depth") && err.lines().count() == 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 27, items 3 and 4: where one resolution of an unknown outcome breaks a safety property
/// and the other fails later with a conformance finding, the verdict names both and
/// `--safety-only` fails — it never says "no safety property broken" while a resolution breaks
/// one.
#[test]
fn safety_only_fails_while_some_resolution_breaks_a_property() {
    for (fixture, other) in [
        ("tests/traces/invalid-s1-unknown-write-by-id-committed-or-c1.jsonl", "at line 7: C1"),
        ("tests/traces/invalid-s1-release-after-an-unknown-claim-or-c2.jsonl", "at line 6: C2"),
    ] {
        let said = diverging(&["trace", "--strict", "--safety-only", fixture]);
        assert!(said.contains(": S1 no stale terminal write succeeds"), "{fixture}: {said}");
        assert!(
            said.contains(&format!("or, where the unknown outcomes resolve otherwise: {other}")),
            "{fixture}: {said}"
        );
        let json = run(&["trace", "--all", "--json", fixture]);
        let verdict: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
        let otherwise = &verdict["files"][0]["divergences"][0]["otherwise"];
        assert!(otherwise.as_array().is_some_and(|o| o.len() == 1), "{fixture}: {verdict}");
    }
}

/// Issue 27, item 14: a check that stops at a divergence says what it did not judge of the
/// lines it read, not of a history it did not read to its end.
#[test]
fn a_stopped_check_says_where_it_stopped_in_what_it_did_not_judge() {
    let fixture = "tests/traces/invalid-s6-live-lease-taken-before-the-first-publish.jsonl";
    let said = diverging(&["trace", fixture]);
    assert!(said.contains("the history has no publish up to line 4, where the check stopped"), "{said}");
    let all = text(&run(&["trace", "--all", fixture]).stdout);
    assert!(!all.contains("has no publish"), "the whole history has a publish: {all}");
}

/// Issue 27, item 14: a serial claim that passes over a row a write of unknown outcome touched
/// says that, had the write applied where the design refuses it, it was S1 (as a skip-locked
/// claim's skip already did).
#[test]
fn a_serial_claim_past_an_unknown_write_hints_at_s1() {
    let fixture = "tests/traces/invalid-c1-serial-claim-passes-over-a-row-an-unknown-write-touched.jsonl";
    let said = diverging(&["trace", fixture]);
    assert!(said.contains(": C1 "), "{said}");
    assert!(
        said.contains("the write of unknown outcome at line 6 may have applied where the design refuses it: S1 if so"),
        "{said}"
    );
}

/// Issue 27, item 14: a complete batch listed in an order of its own (RETURNING has none) is
/// the design's claim, and a claim of other rows is still C1.
#[test]
fn a_claim_is_judged_by_its_rows_not_the_order_it_lists_them_in() {
    let fixture = "tests/traces/valid-batch-claim-listed-in-another-order.jsonl";
    let out = run(&["trace", "--strict", fixture]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let dir = std::env::temp_dir().join(format!("outbox-check-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let other = dir.join("other-rows.jsonl");
    let history = std::fs::read_to_string(fixture).unwrap();
    // The batch of one takes m2 where the design takes m1 first: C1.
    let history = history.replace(
        r#""batch":2,"lease_ms":30000,"now":1000,"leases":[{"message":"m2","token":"1","attempts":1},{"message":"m1","token":"1","attempts":1}]"#,
        r#""batch":1,"lease_ms":30000,"now":1000,"leases":[{"message":"m2","token":"1","attempts":1}]"#,
    );
    std::fs::write(&other, history.lines().take(4).collect::<Vec<_>>().join("\n")).unwrap();
    let said = diverging(&["trace", other.to_str().unwrap()]);
    assert!(said.contains("line 4: C1"), "{said}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 27, item 7: a publication without a token counts in the budget of the lease its relay
/// still holds, from before a requeue too — and a fourth there is still S3.
#[test]
fn a_paused_relays_publication_counts_in_its_own_budget() {
    let fixture = "tests/traces/valid-paused-relay-publishes-in-its-own-budget-after-a-requeue.jsonl";
    let out = run(&["trace", "--strict", fixture]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let history = std::fs::read_to_string(fixture).unwrap();
    let last = history.lines().last().unwrap().to_string();
    let dir = std::env::temp_dir().join(format!("outbox-check-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let twice = dir.join("twice.jsonl");
    std::fs::write(&twice, format!("{}\n{last}\n", history.trim_end())).unwrap();
    let said = diverging(&["trace", twice.to_str().unwrap()]);
    assert!(said.contains("line 21: S3") && said.contains("published 4 times in one budget"), "{said}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 27, item 10: `check` can set up the world that kills write-owner-only (one owner id
/// for two relays); without it the mutant passes.
#[test]
fn check_kills_write_owner_only_with_a_shared_owner() {
    let s1 = |extra: &[&str]| {
        let mut args = vec!["check", "--design", "write-owner-only", "--no-liveness", "--json", "--quiet"];
        args.extend_from_slice(extra);
        let out = run(&args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let status = v["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S1").unwrap()["status"].clone();
        (out.status.code(), status)
    };
    assert_eq!(s1(&["--shared-owner"]), (Some(1), serde_json::json!("violated")));
    assert_eq!(s1(&[]), (Some(0), serde_json::json!("holds")));
    let bad = run(&["check", "--design", "write-owner-only", "--relays", "1", "--shared-owner"]);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(text(&bad.stderr).lines().count(), 1, "{}", text(&bad.stderr));
}

/// Issue 27, item 10: `mutants` checks each mutant in a world `check` sets up from flags a user
/// can give, and names that command; running it kills the mutant with the same property at the
/// same depth, and `reference` survives it.
#[test]
fn every_mutant_is_killed_by_the_check_command_mutants_names() {
    let out = run(&["mutants", "--json", "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mutants = report["mutants"].as_array().unwrap();
    assert_eq!(mutants.len(), 14);
    let check = |command: &str| {
        let args: Vec<&str> =
            command.split_whitespace().skip(1).chain(["--no-liveness", "--json", "--quiet"]).collect();
        let out = run(&args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        (out.status.code(), v)
    };
    for m in mutants {
        let command = m["check"].as_str().unwrap();
        assert!(command.starts_with("outbox-check check --design "), "{command}");
        let (code, v) = check(command);
        assert_eq!(code, Some(1), "{command}");
        let killer = m["killed_by"].as_str().unwrap();
        let p = v["properties"].as_array().unwrap().iter().find(|p| p["id"] == killer).unwrap();
        assert_eq!(p["status"], "violated", "{command}: {killer}");
        assert_eq!(p["counterexample"].as_array().unwrap().len() as u64, m["depth"].as_u64().unwrap(), "{command}");
    }
    let reference = mutants[0]["check"].as_str().unwrap().replace(mutants[0]["mutant"].as_str().unwrap(), "reference");
    let (code, v) = check(&reference);
    assert_eq!(code, Some(0), "{reference}: {v}");
}

/// `check --workers 1 --hosts FILE --process I` in two processes on loopback (timely's
/// cluster): each prints the whole report — the unique states of the search in one process,
/// divided between the two — and the same verdicts. A process index past the file, or a file
/// that cannot be read, is one line and exit 2.
#[test]
fn two_processes_divide_one_check() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("workers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Two free loopback ports (timely binds them itself).
    let ports: Vec<u16> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, ports.iter().map(|p| format!("127.0.0.1:{p}\n")).collect::<String>()).unwrap();
    let hosts = hosts.to_str().unwrap();
    let base = ["check", "--variant", "legacy-v1", "--json", "--quiet", "--no-write"];
    let whole = run(&[&base[..], &["--no-liveness"]].concat());
    let process = |i: &str| {
        Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .args([&base[..], &["--workers", "1", "--hosts", hosts, "--process", i]].concat())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (one, zero) = (process("1"), process("0"));
    let outs = [zero.wait_with_output().unwrap(), one.wait_with_output().unwrap()];
    let json = |bytes: &[u8]| -> serde_json::Value { serde_json::from_slice(bytes).expect("JSON on stdout") };
    let whole = json(&whole.stdout);
    for out in &outs {
        assert_eq!(out.status.code(), Some(1), "legacy-v1 breaks properties: {}", text(&out.stderr));
        let report = json(&out.stdout);
        assert_eq!(report["unique_states"], whole["unique_states"]);
        assert_eq!(verdicts(&report), verdicts(&whole));
        let states: Vec<u64> =
            report["worker_states"].as_array().expect("worker_states").iter().map(|n| n.as_u64().unwrap()).collect();
        assert_eq!(states.len(), 2);
        assert_eq!(states.iter().sum::<u64>(), whole["unique_states"].as_u64().unwrap());
        assert!(states.iter().all(|s| *s > 0), "{states:?}");
    }
    for (extra, says) in [
        (vec!["--workers", "1", "--hosts", hosts, "--process", "2"], "lists 2 processes"),
        (vec!["--workers", "1", "--hosts", "/nonexistent/hosts", "--process", "0"], "--hosts /nonexistent/hosts"),
    ] {
        let out = run(&[&base[..], &extra[..]].concat());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says) && err.trim_end().lines().count() == 1, "{extra:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
