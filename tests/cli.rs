//! The binary as a user meets it: exit codes, one-line errors, the listings.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-check")).args(args).output().expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_every_command() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for command in ["verify", "check", "explore", "mutants", "sim", "conform", "trace", "variants"] {
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
        "reference", "seed-v2", "legacy-v1", "seed-tenant", "claim-no-token-bump", "write-owner-only", "write-id-only",
        "swallow-stale", "steal-live-lease", "no-retry-clock", "no-budget-predicate", "exhaust-off-by-one",
        "claim-terminal", "publish-before-ack", "retry-after-db-loss", "fresh-idempotency-key", "write-ignores-tenant",
        "token-reset-on-requeue",
    ];
    for name in names {
        assert!(listing.contains(name), "variants does not list {name}");
    }
    let json: serde_json::Value = serde_json::from_slice(&run(&["variants", "--json"]).stdout).expect("valid JSON");
    let listed: Vec<&str> = json.as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(listed, names);
}

#[test]
fn an_unknown_variant_is_one_line_naming_the_valid_ones_and_exit_2() {
    let out = run(&["variants", "seed-v3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("unknown design 'seed-v3'") && err.contains("reference, seed-v2, legacy-v1, seed-tenant"), "{err}");
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for args in [&["verify", "--bogus"][..], &["verify", "--messages", "zero"], &["nonsense"], &["sim", "--seeds", "0"], &["sim", "--seed", "1", "--seeds", "3"], &["sim", "--history"], &["conform"], &["check", "--variant", "nosuch"], &["check", "--fleet", "reference", "--variant", "reference"], &["check", "--relays", "2"], &["check", "--variant", "reference", "--max-memory", "0"], &["explore", "--variant", "reference", "--port", "0"]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("outbox-check: "), "{args:?}: {err}");
    }
}

#[test]
fn verify_passes_on_reference_and_reports_the_legacy_findings() {
    let out = run(&["verify", "--json", "--quiet"]);
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
    assert!(violated("reference").is_empty());
    let legacy = violated("legacy-v1");
    assert!(legacy.contains(&"S1".to_string()) && legacy.contains(&"S3".to_string()), "{legacy:?}");
    assert!(violated("seed-v2+legacy-v1").contains(&"S1".to_string()));
}

#[test]
fn verify_writes_the_findings_report() {
    let dir = std::env::temp_dir().join(format!("outbox-check-report-{}", std::process::id()));
    let out = run(&["verify", "--quiet", "--report", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let index = std::fs::read_to_string(dir.join("index.md")).expect("index.md");
    assert!(index.contains("| `reference + reference` | ✓ | ✓ |"), "{index}");
    assert!(index.contains("[✗](counterexamples/legacy-v1-x2/S1.md)"), "{index}");
    assert!(index.contains("```mermaid"), "{index}");
    assert!(dir.join("counterexamples/legacy-v1-x2/S1.md").exists());
    assert!(dir.join("counterexamples/legacy-v1-x2/S1.trace.jsonl").exists());
    // ITF: one state per step plus the initial one; the last step breaks the property.
    let itf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("counterexamples/legacy-v1-x2/S1.itf.json")).unwrap()).unwrap();
    let details: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("counterexamples/legacy-v1-x2/S1.json")).unwrap()).unwrap();
    let steps = details["property"]["counterexample"].as_array().unwrap().len();
    assert_eq!(itf["#meta"]["format"], "ITF");
    assert_eq!(itf["vars"], serde_json::json!(["now", "rows", "relays", "action", "violations"]));
    let states = itf["states"].as_array().unwrap();
    assert_eq!(states.len(), steps + 1);
    assert_eq!(states[0]["action"], "init");
    assert!(states.last().unwrap()["violations"].as_array().unwrap().iter().any(|v| v == "S1"), "{}", states.last().unwrap());
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
    let written: Vec<_> = std::fs::read_dir(dir.join("legacy-v1")).expect("histories written").flatten().map(|e| e.path()).collect();
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

    let out = run(&["conform", "--store", "sqlite", "--variant", "legacy-v1", "--against", "reference", "--cases", "64"]);
    assert_eq!(out.status.code(), Some(1));
    let report = text(&out.stdout);
    assert!(report.contains("DIVERGED") && report.contains("SELECT message_id FROM messaging_outbox"), "{report}");

    let no_url = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
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
    changed["seed-v2"]["model"] = serde_json::json!(["S3", "S7"]);
    let file = std::env::temp_dir().join(format!("outbox-check-expect-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_string(&changed).unwrap()).unwrap();
    let out = run(&["verify", "--quiet", "--expectations", file.to_str().unwrap()]);
    std::fs::remove_file(&file).ok();
    assert_eq!(out.status.code(), Some(1));
    let text = text(&out.stdout);
    assert!(text.contains("seed-v2: model checking found [S3 S6 S7], expected [S3 S7]"), "{text}");
}

#[test]
fn check_gives_up_in_one_line_before_the_machine_runs_out_of_memory() {
    // Three messages take some hundred MB to search: a limit of 40 MB is passed within seconds.
    let out = run(&["check", "--variant", "reference", "--messages", "3", "--no-liveness", "--no-write", "--quiet", "--max-memory", "0.04"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("gave up") && err.contains("--max-memory 0.04 GB"), "{err}");
    // A limit the search stays under changes nothing.
    let out = run(&["check", "--variant", "reference", "--no-liveness", "--no-write", "--quiet", "--max-memory", "8"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
