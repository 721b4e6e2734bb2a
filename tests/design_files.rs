//! Design files: every built-in is one, `variants NAME --toml` prints a file that reads back as
//! that design, a user's file is checked by the same tools (and what it breaks is found by
//! them), and a bad file is one line and exit 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("design-files");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

fn names() -> Vec<String> {
    let listing = json(&run(&["variants", "--json"]));
    listing["designs"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn every_builtin_prints_as_a_file_that_reads_back_as_itself() {
    let all = names();
    assert_eq!(all.len(), 18, "{all:?}");
    let listing = json(&run(&["variants", "--json"]));
    for (name, builtin) in all.iter().zip(listing["designs"].as_array().unwrap()) {
        let out = run(&["variants", name, "--toml"]);
        assert_eq!(out.status.code(), Some(0), "{name}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("# ") && text.contains("[claim]"), "{name}: a commented, complete file");
        // The same switches, by the file; and under its own name it is the built-in itself.
        let file = scratch(&format!("{name}.toml"), &text);
        let read = json(&run(&["variants", file.to_str().unwrap(), "--json"]));
        assert_eq!(read["designs"][0]["name"], name.as_str());
        assert_eq!(read["designs"][0]["switches"], builtin["switches"], "{name}");
        // Renamed, it is a design of its own with the same switches.
        let renamed = scratch(
            &format!("mine-{name}.toml"),
            &text.replacen(&format!("name = \"{name}\""), &format!("name = \"mine-{name}\""), 1),
        );
        let read = json(&run(&["variants", renamed.to_str().unwrap(), "--json"]));
        assert_eq!(read["designs"][0]["kind"], "file");
        assert_eq!(read["designs"][0]["switches"], builtin["switches"], "mine-{name}");
    }
}

#[test]
fn the_builtin_files_match_the_schema_and_the_docs_name_every_key() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/json/design-file.schema.json")).unwrap())
            .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    // A design file read as data, with every schema error it has.
    let validated = |path: &Path| {
        let value: toml::Value = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let value = serde_json::to_value(&value).unwrap();
        let errors: Vec<String> =
            validator.iter_errors(&value).map(|e| format!("{e} at {}", e.instance_path())).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        value
    };
    let docs = std::fs::read_to_string(root.join("docs/design-file.md")).unwrap();
    let mut files = 0;
    let mut keys = std::collections::BTreeSet::new();
    for dir in ["models/designs", "models/designs/mutants"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let value = validated(&path);
            for (key, v) in value.as_object().unwrap() {
                match v.as_object() {
                    Some(section) => keys.extend(section.keys().map(|k| format!("{key}.{k}"))),
                    None => {
                        keys.insert(key.clone());
                    }
                }
            }
            files += 1;
        }
    }
    assert_eq!(files, 18);
    for key in &keys {
        assert!(docs.contains(&format!("`{key}`")), "docs/design-file.md does not explain {key}");
    }
    // Every key the parser takes is in the schema, with the words `variants --toml` prints, and
    // in the docs: the three cannot drift apart.
    for (dotted, words) in outbox_check::core::design_file::KEY_DOCS {
        let mut at = &schema;
        for part in dotted.split('.') {
            at = &at["properties"][part];
        }
        assert_eq!(at["description"].as_str(), Some(words), "docs/json/design-file.schema.json: {dotted}");
        assert!(docs.contains(&format!("`{dotted}`")), "docs/design-file.md does not explain {dotted}");
    }
    // The examples of real queues and real bugs are design files of the schema too.
    let mut examples = 0;
    let mut dirs = vec![root.join("docs/examples")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            // SQL profiles (`*.profile.toml`, docs/sql-profile.md) live beside the designs.
            let name = path.file_name().unwrap().to_string_lossy();
            if !name.ends_with(".toml") || name.ends_with(".profile.toml") {
                continue;
            }
            validated(&path);
            examples += 1;
        }
    }
    assert!(examples >= 4, "{examples} example design files");
    // Each mutant's file is reference with one key changed.
    for entry in std::fs::read_dir(root.join("models/designs/mutants")).unwrap() {
        let path = entry.unwrap().path();
        let value: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(value.get("based_on").and_then(|v| v.as_str()), Some("reference"), "{}", path.display());
        let changed: usize = value.values().filter_map(|v| v.as_table()).map(|t| t.len()).sum();
        assert_eq!(changed, 1, "{}: one key", path.display());
    }
}

#[test]
fn a_users_design_is_checked_and_what_it_breaks_is_found() {
    // Attempts counted at claim, completion by id only: a job queue's common shape.
    let file = scratch(
        "by-id.toml",
        "name = \"by-id\"\ndescription = \"completion by id only\"\nbased_on = \"reference\"\n\n[write]\nfence = \"message-id-only\"\n",
    );
    let out = run(&["check", "--design", file.to_str().unwrap(), "--json", "--quiet", "--no-liveness"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    assert_eq!(report["fleet"], serde_json::json!(["by-id", "by-id"]));
    let status =
        |id: &str| report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap()["status"].clone();
    assert_eq!(status("S1"), "violated");
    // Its reference twin holds S1: the file's one key is what breaks it.
    let twin = scratch("twin.toml", "name = \"twin\"\nbased_on = \"reference\"\n");
    let out = run(&["check", "--design", twin.to_str().unwrap(), "--json", "--quiet", "--no-liveness"]);
    let twin_report = json(&out);
    let s1 = twin_report["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S1").unwrap();
    assert_eq!(s1["status"], "holds");

    // Files and built-ins mix in a fleet; the reproduce command names the file.
    let fleet = format!("{},legacy-v1", file.display());
    let out = run(&["check", "--fleet", &fleet, "--quiet", "--no-liveness"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("by-id, legacy-v1"), "{text}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("design-files/out");
    let _ = std::fs::remove_dir_all(&dir);
    run(&["check", "--design", file.to_str().unwrap(), "--quiet", "--no-liveness", "--out", dir.to_str().unwrap()]);
    let md = std::fs::read_to_string(dir.join("by-id-x2/S1.md")).unwrap();
    assert!(md.contains(&format!("outbox-check check --design {}", file.display())), "{md}");
    // The counterexample replays with the design file given, and says what is missing without.
    let cx = dir.join("by-id-x2/S1.json");
    let out = run(&["replay", cx.to_str().unwrap(), "--design", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run(&["replay", cx.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither built in nor given with --design"));
    // The simulations take it too.
    let out = run(&["sim", "--design", file.to_str().unwrap(), "--seeds", "40", "--quiet", "--no-write", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_bad_design_file_is_one_line_naming_the_key_and_exit_2() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "bad-value.toml",
            "name = \"q\"\nbased_on = \"reference\"\n[claim]\nbudget = \"loose\"\n",
            &["bad-value.toml:4:10", "claim.budget", "loose", "one-over"],
        ),
        (
            "bad-key.toml",
            "name = \"q\"\nbased_on = \"reference\"\n[claim]\nlive = true\n",
            &["bad-key.toml:4:1", "claim.live", "takes_live_leases"],
        ),
        (
            "bad-type.toml",
            "name = \"q\"\nbased_on = \"reference\"\n[retry]\nbase_ms = \"x\"\n",
            &["retry.base_ms", "\"x\""],
        ),
        (
            "bad-cap.toml",
            "name = \"q\"\nbased_on = \"reference\"\n[retry]\nbase_ms = 10\ncap_ms = 5\n",
            &["retry.cap_ms = 5", "at least the base"],
        ),
        ("incomplete.toml", "name = \"q\"\n[claim]\nbudget = \"strict\"\n", &["not given", "based_on"]),
        (
            "unknown-base.toml",
            "name = \"q\"\nbased_on = \"referense\"\n",
            &["based_on = \"referense\"", "no such built-in"],
        ),
        (
            "builtin-name.toml",
            "name = \"reference\"\nbased_on = \"reference\"\n[write]\nfence = \"status-owner\"\n",
            &["built-in design's", "write_fence"],
        ),
        (
            "bad-name.toml",
            "name = \"my queue\"\nbased_on = \"reference\"\n",
            &["name = \"my queue\"", "letters, digits"],
        ),
        ("not-toml.toml", "name = \n", &["not-toml.toml:1:"]),
    ];
    for (name, text, says) in cases {
        let file = scratch(name, text);
        let out = run(&["check", "--design", file.to_str().unwrap(), "--quiet"]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        for s in *says {
            assert!(err.contains(s), "{name}: {err} should say {s}");
        }
    }
    let out = run(&["check", "--design", "/nonexistent/q.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read design file"));
}

#[test]
fn verify_checks_a_users_design_as_a_fleet_that_must_hold_everything() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let by_id = root.join("docs/examples/job-queue-by-id.toml");
    let junit = Path::new(env!("CARGO_TARGET_TMPDIR")).join("design-files-junit.xml");
    let out = run(&[
        "verify",
        "--design",
        by_id.to_str().unwrap(),
        "--sim-seeds",
        "20",
        "--messages",
        "1",
        "--quiet",
        "--json",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let verdicts = json(&out);
    let fleet = verdicts["fleets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fleet"] == "job-queue-by-id")
        .expect("the design's row");
    let violated: Vec<&str> = fleet["properties"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "violated")
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert!(violated.contains(&"S1"), "{violated:?}");
    // JUnit fails exactly the design's broken properties (the built-ins pass: not compared at
    // these bounds, and reference holds).
    let xml = std::fs::read_to_string(&junit).unwrap();
    // (S11 is reported and fails nothing: decision 77.)
    let gated = violated.iter().filter(|id| outbox_check::core::Property::gated_id(id)).count();
    assert_eq!(xml.matches("<failure").count(), gated, "{xml}");
    assert!(xml.contains("job-queue-by-id: S1 is violated"), "{xml}");
    // A design that is reference under another name passes.
    let twin = scratch("verify-twin.toml", "name = \"verify-twin\"\nbased_on = \"reference\"\n");
    let out = run(&["verify", "--design", twin.to_str().unwrap(), "--sim-seeds", "20", "--messages", "1", "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("verify-twin"));
}

/// A rescuer that moves expired leases back: in one statement fenced on the expiry, or by a
/// second one fenced on the token it read, nothing breaks; by id alone, the model checker finds
/// the release of a lease another relay took in between (S1) and of a PUBLISHED job (S4).
#[test]
fn a_rescuer_by_id_is_found_to_release_a_live_lease() {
    let verdicts = |fence: &str| {
        let file = scratch(
            &format!("rescue-{fence}.toml"),
            &format!("name = \"rescue-{fence}\"\nbased_on = \"reference\"\n[maintenance]\njob = \"rescue-expired\"\nfence = \"{fence}\"\n"),
        );
        let report = json(&run(&["check", "--design", file.to_str().unwrap(), "--json", "--quiet", "--no-liveness"]));
        report["properties"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == "safety")
            .map(|p| {
                (
                    p["id"].as_str().unwrap().to_string(),
                    p["status"].as_str().unwrap().to_string(),
                    p["counterexample"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    for fence in ["expired", "token"] {
        for (id, status, _) in verdicts(fence) {
            // S11, the false failure, as reference's reaper records it (decision 77).
            let expected: &[&str] = if id == "S11" { &["violated"] } else { &["holds", "not_exercised"] };
            assert!(expected.contains(&status.as_str()), "rescue by {fence}: {id} is {status}");
        }
    }
    let by_id = verdicts("id");
    let status = |id: &str| by_id.iter().find(|(i, ..)| i == id).map(|(_, s, _)| s.clone()).unwrap();
    assert_eq!(status("S1"), "violated");
    assert_eq!(status("S4"), "violated");
    let s1 = &by_id.iter().find(|(i, ..)| i == "S1").unwrap().2;
    let story: Vec<String> = s1
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["text"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()))
        .collect();
    assert!(story.iter().any(|t| t.starts_with("rescuer at") && t.contains("reads m0's expired lease")), "{story:?}");
    assert!(story.iter().any(|t| t.contains("moves m0 to PENDING by id alone")), "{story:?}");
    // A fence belongs to a rescuer.
    let file = scratch(
        "fence-alone.toml",
        "name = \"fence-alone\"\nbased_on = \"reference\"\n[maintenance]\nfence = \"id\"\n",
    );
    let out = run(&["check", "--design", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("maintenance.fence goes with job = \"rescue-expired\""));
}

/// A design file's `[statuses]` are the names a history and a SQL profile of that design use
/// when they give none of their own.
#[test]
fn a_design_files_status_names_read_a_history_that_names_none() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture =
        std::fs::read_to_string(root.join("tests/traces/valid-release-then-late-write-refused.jsonl")).unwrap();
    // The same history with a header that names neither statuses nor switches.
    let mut lines: Vec<String> = fixture.lines().map(String::from).collect();
    lines[0] = "{\"format\":\"outbox-check-trace\",\"version\":2,\"max_attempts\":3}".into();
    let history = scratch("named-statuses.jsonl", &(lines.join("\n") + "\n"));
    let named = scratch(
        "named-statuses.toml",
        "name = \"named-statuses\"\nbased_on = \"reference\"\n[statuses]\npending = \"available\"\nin_flight = \"running\"\npublished = \"completed\"\nexhausted = \"discarded\"\n",
    );
    let out = run(&["trace", "--design", named.to_str().unwrap(), history.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the names, "available" is no status the history may use.
    let out = run(&["trace", "--variant", "reference", history.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("available"));
    // One name for two statuses a statement tells apart is refused.
    let twice = scratch(
        "twice.toml",
        "name = \"twice\"\nbased_on = \"reference\"\n[statuses]\npending = \"open\"\nin_flight = \"open\"\n",
    );
    let out = run(&["check", "--design", twice.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"open\" names both PENDING and IN_FLIGHT"));
    // FAILED and EXHAUSTED under one name read the same history: its `discarded` is EXHAUSTED.
    let shared = scratch(
        "named-shared.toml",
        "name = \"named-shared\"\nbased_on = \"reference\"\n[statuses]\npending = \"available\"\nin_flight = \"running\"\npublished = \"completed\"\nfailed = \"discarded\"\nexhausted = \"discarded\"\n",
    );
    let out = run(&["trace", "--design", shared.to_str().unwrap(), history.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    // A profile with one name for FAILED and EXHAUSTED compares them as the table can show
    // them: the same verdict as with a name each.
    let jobs = root.join("docs/examples/jobs");
    scratch("schema.sql", &std::fs::read_to_string(jobs.join("schema.sql")).unwrap());
    let profile = std::fs::read_to_string(jobs.join("jobs.profile.toml")).unwrap();
    assert!(profile.contains("exhausted = \"dead\""));
    let shared = profile.replace("exhausted = \"dead\"", "exhausted = \"discarded\"").replace("'dead'", "'discarded'");
    let profile = scratch("shared.profile.toml", &shared);
    let out = run(&["conform", "--profile", profile.to_str().unwrap(), "--store", "sqlite", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    // Two names the statements tell apart still cannot be one.
    let clash =
        scratch("clash.profile.toml", &shared.replace("published = \"completed\"", "published = \"discarded\""));
    let out = run(&["conform", "--profile", clash.to_str().unwrap(), "--store", "sqlite"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("names both PUBLISHED and FAILED"));
}

/// A backoff that grows by a power or a factor of its own is a design like any other for the
/// model checker, which keeps the growth with its own ticks; outbox-check's own SQL computes only
/// doubling, so conform without a profile refuses it rather than compare another backoff.
#[test]
fn a_backoff_of_its_own_growth_is_checked_and_needs_a_profile_to_conform() {
    let power = scratch(
        "power-backoff.toml",
        "name = \"power-backoff\"\nbased_on = \"reference\"\n[retry]\nbackoff = \"power\"\nbase_ms = 1000\ncap_ms = 100000\nexponent = 4\n",
    );
    let doubling = json(&run(&["check", "--json", "--no-liveness", "--variant", "reference"]));
    let grown = json(&run(&["check", "--json", "--no-liveness", "--design", power.to_str().unwrap()]));
    // The same verdicts; a retry waits 1, 4, 4 ticks instead of 1, 2, 4, so other states.
    let verdicts = |v: &serde_json::Value| {
        v["properties"].as_array().unwrap().iter().map(|p| p["status"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(verdicts(&grown), verdicts(&doubling));
    assert_ne!(grown["unique_states"], doubling["unique_states"]);
    let out = run(&["conform", "--variant", power.to_str().unwrap(), "--store", "sqlite"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("a backoff other than doubling: describe yours in a SQL profile"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Completion by deletion and a visibility timeout are designs like any other: the tools find
/// what each breaks (the example files in docs/examples), and a deleted row matches nothing.
#[test]
fn completion_by_deletion_and_a_visibility_timeout_are_checked() {
    let violated = |file: &str| -> Vec<String> {
        let out = run(&["check", "--design", file, "--json", "--quiet", "--no-liveness"]);
        assert_ne!(out.status.code(), Some(2), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let report = json(&out);
        report["properties"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["status"] == "violated")
            .map(|p| p["id"].as_str().unwrap().to_string())
            .collect()
    };
    // By id with deletion: the stale completion still applies (S1), and deletes a FAILED job (S4).
    let out = run(&["check", "--design", "docs/examples/job-queue-delete.toml", "--json", "--quiet", "--no-liveness"]);
    let report = json(&out);
    let s4 = report["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S4").unwrap();
    assert_eq!(s4["status"], "violated");
    let last = s4["counterexample"].as_array().unwrap().last().unwrap();
    assert!(
        last["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["property"] == "S4" && v["detail"].as_str().unwrap().contains("which was FAILED (now deleted)")),
        "{last}"
    );
    assert_eq!(violated("docs/examples/job-queue-delete.toml"), ["S1", "S4", "S11"]);
    // Deletion with the reference's fence is as safe as marking: it breaks only what reference
    // breaks, S11, the false failure its reaper records (decision 77).
    let delete =
        scratch("delete.toml", "name = \"delete\"\nbased_on = \"reference\"\n[write]\ncompletion = \"delete\"\n");
    assert_eq!(violated(delete.to_str().unwrap()), violated("reference"));
    assert_eq!(violated("reference"), ["S11"]);
    // The visibility timeout fenced by the receipt holds as reference does (its reaper's S11
    // aside); its retry clock can still be broken.
    assert_eq!(violated("docs/examples/visibility-timeout.toml"), ["S11"]);
    let steals = scratch("vt-steals.toml", "name = \"vt-steals\"\nbased_on = \"reference\"\n[claim]\ntakes_live_leases = true\n[retry]\nin_lease_column = true\n");
    assert_eq!(violated(steals.to_str().unwrap()), ["S6", "S7", "S11"]);
    // Our own SQL does not cover these axes: conform says so and points to a profile.
    let out =
        run(&["conform", "--variant", "docs/examples/job-queue-delete.toml", "--store", "sqlite", "--cases", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SQL profile"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// For each built-in variant, its file from `variants NAME --toml`, renamed so it is a design of
/// its own, gets from `check --design` the verdicts `check --variant NAME` gives — safety,
/// reachability and liveness, with counterexamples of the same length.
#[test]
fn each_variants_file_checks_as_the_variant_does() {
    for name in ["reference", "legacy-v1", "seed-v2", "seed-tenant"] {
        let text = String::from_utf8(run(&["variants", name, "--toml"]).stdout).unwrap();
        let file = scratch(
            &format!("as-file-{name}.toml"),
            &text.replacen(&format!("name = \"{name}\""), &format!("name = \"as-file-{name}\""), 1),
        );
        let verdicts = |args: &[&str]| -> Vec<(String, String, usize)> {
            let out = run(args);
            assert_ne!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
            json(&out)["properties"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["id"].as_str().unwrap().to_string(),
                        p["status"].as_str().unwrap().to_string(),
                        p["counterexample"].as_array().map_or(0, Vec::len),
                    )
                })
                .collect()
        };
        let builtin = verdicts(&["check", "--variant", name, "--json", "--quiet"]);
        let from_file = verdicts(&["check", "--design", file.to_str().unwrap(), "--json", "--quiet"]);
        assert!(builtin.len() >= 20, "{name}: {builtin:?}");
        assert_eq!(from_file, builtin, "{name}");
    }
}

/// `verify --design` on a design our SQL does not cover (a rescuer) gives its model and
/// simulation verdicts, says where its SQL is checked, and is not an environment problem.
#[test]
fn verify_takes_a_design_our_sql_does_not_cover() {
    let out = run(&["verify", "--design", "docs/examples/job-queue.toml", "--sim-seeds", "50", "--messages", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let row = text.lines().find(|l| l.starts_with("job-queue ")).expect("its row");
    assert!(row.contains("(your SQL: conform --profile)"), "{row}");
    assert!(!text.contains("could not run"), "{text}");
}

/// `check --json` (safety only) of a design file under docs/examples.
fn check_example(file: &str) -> std::process::Output {
    check_example_with(file, &[])
}

/// [`check_example`] with more arguments.
fn check_example_with(file: &str, more: &[&str]) -> std::process::Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let mut args = vec!["check", "--design", path.to_str().unwrap(), "--json", "--quiet", "--no-liveness"];
    args.extend_from_slice(more);
    run(&args)
}

/// [`check_example`]'s report with every fault but lease-lost.
fn check_example_without_lease_lost(file: &str) -> serde_json::Value {
    let faults = outbox_check::world::fault::Faults::all().without(outbox_check::world::fault::Fault::LeaseLost);
    json(&check_example_with(file, &["--faults", &faults.names().join(",")]))
}

/// One property's entry in a `check --json` report.
fn property(report: &serde_json::Value, id: &str) -> serde_json::Value {
    report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap().clone()
}

/// A property's entry that must be violated (its entry in full if not).
fn violated(report: &serde_json::Value, id: &str) -> serde_json::Value {
    let p = property(report, id);
    assert_eq!(p["status"], "violated", "{p:#}");
    p
}

/// The first line of each step of a property's counterexample.
fn step_texts(p: &serde_json::Value) -> Vec<String> {
    p["counterexample"].as_array().unwrap().iter().map(|s| s["text"][0].as_str().unwrap().to_string()).collect()
}

/// River, issue 1302 (docs/examples/real-bugs/river-1302.toml): the rescuer writes the jobs it
/// read by id alone, and `check` finds the documented failure by that route — a job completed
/// between the rescuer's read and its write is moved back (S4), the violating step being the
/// rescuer's. River after PR 1373 (docs/examples/river.toml, the write guarded by `running` and
/// the horizon) keeps S4; what it still breaks is for the tool to say, and it says S1 by
/// another route: the completer's `state = 'running'` fence lets a rescued attempt's result end
/// its successor's lease.
#[test]
fn river_1302_is_found_through_its_rescuer_and_river_after_the_fix_keeps_s4() {
    let check = |file: &str| {
        let out = check_example(file);
        assert_eq!(out.status.code(), Some(1), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        json(&out)
    };
    let last_step = |p: &serde_json::Value| {
        let steps = p["counterexample"].as_array().expect("a counterexample");
        steps.last().unwrap()["text"][0].as_str().unwrap().to_string()
    };
    let bug = check("docs/examples/real-bugs/river-1302.toml");
    let s4 = property(&bug, "S4");
    assert_eq!(s4["status"], "violated");
    let last = last_step(&s4);
    assert!(last.starts_with("rescuer at t=") && last.contains("by id alone"), "{last}");
    let fixed = check("docs/examples/river.toml");
    assert_eq!(property(&fixed, "S4")["status"], "holds");
    let s1 = property(&fixed, "S1");
    assert_eq!(s1["status"], "violated");
    let steps = s1["counterexample"].as_array().unwrap();
    assert!(
        steps.iter().any(|s| s["text"][0].as_str().unwrap().contains("by its expiry (fence expired)")),
        "River's S1 comes through its rescuer: {s1}"
    );
    // … and its JobScheduler: the rescued job is `retryable` until the scheduler makes it
    // `available`, and only then claimed again.
    let texts: Vec<&str> = steps.iter().map(|s| s["text"][0].as_str().unwrap()).collect();
    let scheduled = texts.iter().position(|t| t.starts_with("scheduler at t=")).expect("a scheduler step");
    assert!(texts[scheduled + 1].starts_with("r1 claims") && texts[scheduled + 1].contains("attempts 2"), "{texts:?}");
    assert!(last_step(&s1).contains("mark_published"), "{}", last_step(&s1));
}

/// Oban, issue 137 (docs/examples/real-bugs/oban-137.toml): the orphan rescue returned crashed
/// jobs to `available` whatever their attempts, and the fetch had no budget check; `check`
/// finds S3 by that route — the step before the claim over the budget is the rescuer's. After
/// 304e190 (oban-137-fixed.toml, the rescue discards spent jobs) S3 holds.
#[test]
fn oban_137_is_found_through_its_orphan_rescue_and_the_fix_keeps_the_budget() {
    let check = |file: &str| json(&check_example(file));
    let bug = check("docs/examples/real-bugs/oban-137.toml");
    let s3 = property(&bug, "S3");
    assert_eq!(s3["status"], "violated");
    let texts = step_texts(&s3);
    let n = texts.len();
    assert!(texts[n - 1].contains("claims") && texts[n - 1].ends_with("attempts 4"), "{texts:?}");
    assert!(texts[n - 2].starts_with("rescuer at t=") && texts[n - 2].contains("to PENDING"), "{texts:?}");
    let fixed = check("docs/examples/real-bugs/oban-137-fixed.toml");
    assert_eq!(property(&fixed, "S3")["status"], "holds");
}

/// awa, PR 435 (docs/examples/real-bugs/awa-435.toml): a handler's `RetryAfter` rescheduled the
/// job whatever its attempts. `check --max-attempts 1` finds S3 by that route — a retry write
/// applied to a row whose single attempt is spent, then a second claim — and no rescuer step on
/// the way. After the fix (awa-435-fixed.toml) the retry write exhausts the job, and what S3
/// still finds goes through awa's heartbeat rescue, which moves a stale job back to `retryable`
/// whatever its attempts.
#[test]
fn awa_435_is_found_through_its_retry_write_and_the_fix_leaves_only_the_rescue() {
    let s3 = |file: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let out = run(&[
            "check",
            "--design",
            path.to_str().unwrap(),
            "--json",
            "--quiet",
            "--no-liveness",
            "--max-attempts",
            "1",
        ]);
        assert_eq!(out.status.code(), Some(1), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let s3 = property(&json(&out), "S3");
        assert_eq!(s3["status"], "violated", "{file}: {s3}");
        s3["counterexample"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["text"][0].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let bug = s3("docs/examples/real-bugs/awa-435.toml");
    assert!(
        bug.iter().any(|t| t.contains("mark_retry(m0, token #1, attempts 1)") && t.contains("applied → PENDING")),
        "{bug:?}"
    );
    assert!(!bug.iter().any(|t| t.starts_with("rescuer")), "{bug:?}");
    assert!(bug.last().unwrap().contains("attempts 2"), "{bug:?}");
    let fixed = s3("docs/examples/real-bugs/awa-435-fixed.toml");
    assert!(fixed.iter().any(|t| t.starts_with("rescuer") && t.contains("to PENDING")), "{fixed:?}");
    assert!(!fixed.iter().any(|t| t.contains("mark_retry") && t.contains("→ PENDING")), "{fixed:?}");
}

/// Graphile Worker (docs/examples/graphile-worker.toml): completion by id and failure by the
/// pool's owner id. `check` finds S1 by Graphile's own route — the 4-hour unlock (the rescuer),
/// a second claim, then the first attempt's completion — reports S2 at the first claim (no
/// claim sets a token), and keeps S3 (the claim's `attempts < max_attempts`) and S5.
#[test]
fn graphile_worker_is_found_completing_a_job_another_worker_claimed_after_the_unlock() {
    let report = json(&check_example("docs/examples/graphile-worker.toml"));
    let s1 = property(&report, "S1");
    assert_eq!(s1["status"], "violated");
    let texts = step_texts(&s1);
    assert!(texts.iter().any(|t| t.starts_with("rescuer") && t.contains("by its expiry")), "{texts:?}");
    assert!(texts.last().unwrap().starts_with("r0 mark_published(m0, token #0, attempts 1)"), "{texts:?}");
    let s2 = property(&report, "S2");
    assert_eq!((s2["status"].as_str(), s2["counterexample"].as_array().map(Vec::len)), (Some("violated"), Some(1)));
    for id in ["S3", "S5"] {
        assert_eq!(property(&report, id)["status"], "holds", "{id}");
    }
}

/// Laravel's database queue (docs/examples/laravel-database-queue.toml; issue 48539): a worker
/// that reserves a job whose reservation expired, past its tries, fails it without running it —
/// while the worker that held it still runs. `check --max-attempts 1` finds S11 by that route: a
/// relay writes the job failed for good without ever publishing it, and the other relay's copy
/// is stored after.
#[test]
fn laravel_48539_is_found_by_a_worker_failing_a_job_it_reserved_past_its_tries() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/laravel-database-queue.toml");
    let out = run(&[
        "check",
        "--design",
        path.to_str().unwrap(),
        "--json",
        "--quiet",
        "--no-liveness",
        "--max-attempts",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let s11 = property(&json(&out), "S11");
    assert_eq!(s11["status"], "violated", "{s11}");
    let texts = step_texts(&s11);
    let failing = texts
        .iter()
        .find(|t| t.contains("mark_exhausted") && t.contains("attempts 2"))
        .unwrap_or_else(|| panic!("a write of the job failed past its tries: {texts:?}"));
    let who = failing.split(' ').next().unwrap().to_string();
    assert!(
        !texts.iter().any(|t| t.starts_with(&format!("{who} publishes"))),
        "{who} fails the job without running it: {texts:?}"
    );
    let last = texts.last().unwrap();
    assert!(last.contains("publishes") && last.contains("(stored)") && !last.starts_with(&who), "{texts:?}");
}

/// Oban's Basic engine (docs/examples/oban.toml): results by id, retry or discard decided from the
/// executor's copy, the Lifeline returning jobs executing past its horizon. `check` finds S1 by
/// Oban's own route — the Lifeline, a second fetch, then the first attempt's completion (Oban
/// #532's shape) — and keeps S3 (the fetch's `attempt < max_attempts`).
#[test]
fn oban_is_found_completing_a_job_the_lifeline_returned_and_claimed_again() {
    let report = json(&check_example("docs/examples/oban.toml"));
    let s1 = property(&report, "S1");
    assert_eq!(s1["status"], "violated");
    let texts = step_texts(&s1);
    assert!(texts.iter().any(|t| t.starts_with("rescuer") && t.contains("by its expiry")), "{texts:?}");
    assert!(texts.last().unwrap().starts_with("r0 mark_published(m0, token #0, attempts 1)"), "{texts:?}");
    assert_eq!(property(&report, "S3")["status"], "holds");
    // S7 by Oban's own route: `stage_jobs` on a node whose clock runs ahead makes a retryable job
    // available before its time, and the fetch that follows takes it (the fetch reads no time).
    let texts = step_texts(&violated(&report, "S7"));
    let n = texts.len();
    assert!(texts[n - 2].starts_with("scheduler on r1's node, by its clock,"), "{texts:?}");
    assert!(texts[n - 1].contains("claims") && texts[n - 1].contains("attempts 2"), "{texts:?}");
}

/// Solid Queue, issue 589 (docs/examples/real-bugs/solid-queue-589.toml): the pruner read the
/// claimed executions of a process whose heartbeat went stale and failed each by job id, and a
/// finish did not check the claimed execution was still there. `check` finds the issue's "finished
/// jobs ending up as failed" (S4): the worker's completion applies, then the pruner's failure of
/// what it read. After the fix (solid-queue-589-fixed.toml, every outcome finalizes its own
/// claimed execution once) S4 holds, and what remains is S11: a live worker pruned still
/// delivers, its job recorded failed.
#[test]
fn solid_queue_589_is_found_through_its_pruner_and_the_fix_leaves_the_false_failure() {
    let bug = json(&check_example("docs/examples/real-bugs/solid-queue-589.toml"));
    let s4 = property(&bug, "S4");
    assert_eq!(s4["status"], "violated");
    let texts = step_texts(&s4);
    let n = texts.len();
    assert!(texts[n - 2].contains("mark_published") && texts[n - 2].contains("applied → PUBLISHED"), "{texts:?}");
    assert!(texts[n - 1].starts_with("rescuer") && texts[n - 1].contains("to FAILED by id alone"), "{texts:?}");
    let fixed = json(&check_example("docs/examples/real-bugs/solid-queue-589-fixed.toml"));
    for id in ["S1", "S4"] {
        assert_eq!(property(&fixed, id)["status"], "holds", "{id}");
    }
    let s11 = property(&fixed, "S11");
    assert_eq!(s11["status"], "violated");
    let steps = s11["counterexample"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["text"][0].as_str().unwrap().contains("to FAILED by the token it read")), "{s11}");
}

/// pgmq (docs/examples/pgmq.toml): the visibility timeout is lease and retry clock, every write
/// is by `msg_id`. `check` finds S1 by pgmq's own route — no maintenance job at all: the timeout
/// passes, a second `read` takes the message, the first reader's delete applies — and S3, since
/// pgmq sets no limit on `read_ct`; S4 holds (a deleted or archived message is gone).
#[test]
fn pgmq_is_found_deleting_a_message_another_reader_took_after_its_timeout() {
    let report = json(&check_example("docs/examples/pgmq.toml"));
    let s1 = property(&report, "S1");
    assert_eq!(s1["status"], "violated");
    let texts = step_texts(&s1);
    assert!(!texts.iter().any(|t| t.starts_with("rescuer")), "{texts:?}");
    assert!(texts.iter().filter(|t| t.contains(" claims for ")).count() == 2, "{texts:?}");
    assert!(texts.last().unwrap().starts_with("r0 mark_published(m0"), "{texts:?}");
    assert_eq!(property(&report, "S3")["status"], "violated");
    assert_eq!(property(&report, "S4")["status"], "holds");
}

/// reports/queues.md: every design file under docs/examples/ (and real-bugs/) has its row, and
/// each row is what `check --no-liveness` says today — ✓ holds, ✗ n violated in n steps, – not
/// exercised.
#[test]
fn every_example_design_has_its_verdicts_in_reports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = std::fs::read_to_string(root.join("reports/queues.md")).unwrap();
    let mut files: Vec<String> = Vec::new();
    for dir in ["docs/examples", "docs/examples/real-bugs"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().to_string();
            if name.ends_with(".toml") {
                files.push(format!("{dir}/{name}"));
            }
        }
    }
    // The design a real queue's SQL profile declares, beside that profile.
    files.push("docs/examples/river/design.toml".to_string());
    files.sort();
    let ids = ["S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11"];
    let mut differing = Vec::new();
    for file in &files {
        let report = json(&check_example(file));
        let cells: Vec<String> = ids
            .iter()
            .map(|id| {
                let p = property(&report, id);
                match p["status"].as_str().unwrap() {
                    "holds" => "✓".to_string(),
                    "violated" => format!("✗ {}", p["counterexample"].as_array().unwrap().len()),
                    "not_exercised" => "–".to_string(),
                    other => other.to_string(),
                }
            })
            .collect();
        let shown = file.trim_start_matches("docs/examples/");
        let row = format!("| [{shown}](../{file}) | {} |", cells.join(" | "));
        if !table.lines().any(|l| l == row) {
            differing.push(row);
        }
    }
    assert!(differing.is_empty(), "reports/queues.md lacks, or differs from, the rows\n{}", differing.join("\n"));
    let rows = table.lines().filter(|l| l.starts_with("| [")).count();
    assert_eq!(rows, files.len(), "reports/queues.md has a row for a file that is gone");
}

/// underway (docs/examples/underway.toml): a fresh `current_attempt` per claim and every result
/// fenced on it. `check` finds every safety property but the false failure kept, as the fence
/// promises: a superseded attempt's result is refused.
#[test]
fn underway_keeps_every_fenced_property_and_breaks_only_the_false_failure() {
    let report = json(&check_example("docs/examples/underway.toml"));
    for id in ["S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8"] {
        assert_eq!(property(&report, id)["status"], "holds", "{id}");
    }
    assert_eq!(property(&report, "S11")["status"], "violated");
    assert_eq!(property(&report, "R-S1")["status"], "reached", "a stale result is attempted and refused");
}

/// Graphile Worker 0.12 (docs/examples/real-bugs/graphile-worker-0-12.toml), the design behind
/// issues 169 and 254. #169: `get_job` re-takes a job whose 4-hour lock ran out while its worker
/// still runs it, and the first run's completion, by id alone, applies — S1, its last step the
/// first worker's write after the second claim. #254: a job claimed at its last attempt whose
/// worker never learns of the claim stays locked, since `get_job` skips spent jobs and nothing
/// unlocks them — L1. With `resetLockedAt` (Graphile Worker today, graphile-worker.toml) L1
/// holds.
#[test]
fn graphile_worker_169_and_254_are_found_and_the_unlock_keeps_every_job_ending() {
    let check = |file: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        json(&run(&["check", "--design", path.to_str().unwrap(), "--json", "--quiet"]))
    };
    let bug = check("docs/examples/real-bugs/graphile-worker-0-12.toml");
    let s1 = property(&bug, "S1");
    assert_eq!(s1["status"], "violated");
    let texts = step_texts(&s1);
    let n = texts.len();
    assert!(texts[n - 1].starts_with("r0 mark_published") && texts[n - 1].contains("attempts 1"), "{texts:?}");
    assert!(texts[n - 2].starts_with("r1 claims") && texts[n - 2].contains("attempts 2"), "{texts:?}");
    assert_eq!(property(&bug, "L1")["status"], "violated");
    let today = check("docs/examples/graphile-worker.toml");
    assert_eq!(property(&today, "L1")["status"], "holds");
    assert_eq!(property(&today, "S1")["status"], "violated");
}

/// good_job 3.15, issue 989 (docs/examples/real-bugs/good-job-3-15.toml): the lease is a
/// session-level advisory lock, so a connection that drops while the job runs releases it; a
/// second worker takes the job while the first still runs, and the first's result, saved by id,
/// applies. `check` finds S1 by that route — the session's end is a step of the counterexample —
/// and without the lease-lost fault no stale result is even attempted: a crash or a lost
/// connection at a statement ends the session where the relay also stops.
#[test]
fn good_job_989_is_found_by_a_session_that_drops_while_its_job_runs() {
    let file = "docs/examples/real-bugs/good-job-3-15.toml";
    let report = json(&check_example(file));
    let s1 = property(&report, "S1");
    assert_eq!(s1["status"], "violated");
    let texts = step_texts(&s1);
    let n = texts.len();
    assert!(texts[n - 1].starts_with("r0 mark_published") && texts[n - 1].contains("applied"), "{texts:?}");
    assert!(texts[n - 2].starts_with("r1 claims") && texts[n - 2].contains("attempts 2"), "{texts:?}");
    assert!(texts[..n - 2].iter().any(|t| t.starts_with("r0's session ends")), "{texts:?}");
    assert_eq!(property(&report, "S6")["status"], "holds", "the database never holds two locks on one job");
    let without = check_example_without_lease_lost(file);
    assert_eq!(property(&without, "S1")["status"], "not_exercised");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    // Commands that do not model a session's end say so and stop (exit 2), rather than judge.
    let out = run(&["sim", "--design", path.to_str().unwrap(), "--seeds", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("good-job-3-15") && err.contains("session") && err.lines().count() == 1, "{err}");
    // good_job 4's `:skiplocked` strategy: no session lock, a process heartbeat and a cleanup of
    // stale processes; the result still saved by id, so S1 remains, through the cleanup.
    let fixed = json(&check_example("docs/examples/real-bugs/good-job-4-skiplocked.toml"));
    let texts = step_texts(&violated(&fixed, "S1"));
    let n = texts.len();
    assert!(texts[n - 1].starts_with("r0 mark_published") && texts[n - 1].contains("applied"), "{texts:?}");
    assert!(texts[n - 2].starts_with("r1 claims") && texts[n - 3].starts_with("rescuer"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("session")), "{texts:?}");
}

/// Spring Modulith 1.2, issue 663 (docs/examples/real-bugs/spring-modulith-1-2.toml): nothing
/// marks a publication in progress, so another node's resubmission invokes the listener of a
/// publication the first node still processes. `check` finds S6 in two steps, both invocations;
/// and since a failed listener writes nothing, nothing is ever recorded failed (S11 is not
/// exercised) and no failure write changes a completed publication (S4 comes from a completion).
#[test]
fn spring_modulith_663_is_found_as_a_resubmission_of_a_publication_in_progress() {
    let report = json(&check_example("docs/examples/real-bugs/spring-modulith-1-2.toml"));
    let s6 = property(&report, "S6");
    assert_eq!(s6["status"], "violated");
    let texts = step_texts(&s6);
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts[0].starts_with("r0 claims") && texts[1].starts_with("r1 claims"), "{texts:?}");
    assert_eq!(property(&report, "S11")["status"], "not_exercised");
    let s4 = step_texts(&property(&report, "S4"));
    assert!(s4.last().unwrap().contains("mark_published"), "{s4:?}");
}

/// kombu 3.0's Redis transport, issue 337 (docs/examples/real-bugs/kombu-redis-3-0.toml): a
/// worker holds a task past the visibility timeout (its ETA), `restore_visible` puts it back, a
/// second worker pops it, and the first's ack by delivery tag applies. `check` finds S1 by that
/// route: time passes under the first lease, the rescuer restores, the second claim, the ack.
#[test]
fn kombu_337_is_found_by_a_task_held_past_the_visibility_timeout() {
    let report = json(&check_example("docs/examples/real-bugs/kombu-redis-3-0.toml"));
    let s1 = property(&report, "S1");
    assert_eq!(s1["status"], "violated");
    let texts = step_texts(&s1);
    let n = texts.len();
    assert!(texts[n - 1].starts_with("r0 mark_published") && texts[n - 1].contains("applied"), "{texts:?}");
    assert!(texts[n - 2].starts_with("r1 claims") && texts[n - 2].contains("attempts 2"), "{texts:?}");
    assert!(texts[n - 3].starts_with("rescuer") && texts[n - 3].contains("expired"), "{texts:?}");
    assert!(texts[..n - 3].iter().any(|t| t.starts_with("time advances")), "{texts:?}");
    assert_eq!(property(&report, "S6")["status"], "not_exercised", "no pop takes an unacked task");
}

/// Wolverine 1.8.2, issue 587, and 1.8.3, its fix, with issue 3850
/// (docs/examples/real-bugs/wolverine-1-8-*.toml). An envelope handled with `owner_id = 0` is
/// taken by the durability agent's recovery: S6 in two steps. Owned by its node's number (the
/// fix), it is taken only after its node is judged dead: S6 holds, and S1 is found only through
/// the lease-lost fault (a live node judged dead, #3850) and the orphan release.
#[test]
fn wolverine_587_is_found_by_its_recovery_and_the_fix_only_through_a_live_node_judged_dead() {
    let bug = json(&check_example("docs/examples/real-bugs/wolverine-1-8-2.toml"));
    let s6 = step_texts(&property(&bug, "S6"));
    assert_eq!(s6.len(), 2, "{s6:?}");
    assert!(s6[0].starts_with("r0 claims") && s6[1].starts_with("r1 claims"), "{s6:?}");
    let file = "docs/examples/real-bugs/wolverine-1-8-3.toml";
    let fixed = json(&check_example(file));
    assert_eq!(property(&fixed, "S6")["status"], "not_exercised");
    let s1 = step_texts(&property(&fixed, "S1"));
    let n = s1.len();
    assert!(s1[n - 1].starts_with("r0 mark_published") && s1[n - 2].starts_with("r1 claims"), "{s1:?}");
    assert!(s1[n - 3].starts_with("rescuer"), "{s1:?}");
    assert!(s1.iter().any(|t| t.starts_with("r0's session ends")), "{s1:?}");
    let without = check_example_without_lease_lost(file);
    assert_eq!(property(&without, "S1")["status"], "not_exercised");
    assert_eq!(property(&without, "S4")["status"], "holds");
}

/// NServiceBus.SqlServer, issue 463 (docs/examples/real-bugs/nservicebus-sqlserver-4-2.toml): a
/// delayed retry's due time comes from the endpoint's clock and is matured by the database's.
/// With the endpoint's clock behind the database's (`--skew -2`), `check` finds the documented
/// failure by its own route: the retry write leaves a due time that is already past in true time
/// (S7, on the write that set it). A clock ahead only delays retries: S7 holds. 4.3 (PR 496: the
/// due time from the database's clock plus the delay) keeps S7 behind as well.
#[test]
fn nservicebus_463_is_found_through_a_due_time_from_a_clock_behind_the_databases() {
    let file = "docs/examples/real-bugs/nservicebus-sqlserver-4-2.toml";
    let s7 = violated(&json(&check_example_with(file, &["--skew", "-2"])), "S7");
    let last = s7["counterexample"].as_array().unwrap().last().unwrap().clone();
    let text = last["text"][0].as_str().unwrap();
    assert!(text.starts_with("r1 mark_ambiguous") && text.contains("runs 2 behind"), "{text}");
    let detail = last["violations"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("not later than true time"), "{detail}");
    assert_eq!(property(&json(&check_example(file)), "S7")["status"], "holds", "a clock ahead delays, never hastens");
    let fixed = json(&check_example_with("docs/examples/real-bugs/nservicebus-sqlserver-4-3.toml", &["--skew", "-2"]));
    assert_eq!(property(&fixed, "S7")["status"], "holds");
}

/// CAP, issue 1797 (docs/examples/real-bugs/cap-10-0-1.toml): every instance runs its own retry
/// processor on its own timer and the row keeps no retry time. Without skew, `check` finds the
/// documented failure by its own route: a message one instance's processor has just retried is
/// retried again, within the interval, by another instance's (S7 at that claim). With one relay
/// its own timer spaces its retries (S7 holds, a retry being reached); with the retry time in the
/// row instead (cap-10-0-1-retry-time-in-row.toml, what the issue expected) S7 holds too.
#[test]
fn cap_1797_is_found_through_each_instances_own_retry_timer() {
    let file = "docs/examples/real-bugs/cap-10-0-1.toml";
    let s7 = violated(&json(&check_example_with(file, &["--skew", "0"])), "S7");
    let steps = step_texts(&s7);
    let claims: Vec<&String> = steps.iter().filter(|t| t.contains(" claims ")).collect();
    let (last, before) = (claims[claims.len() - 1], claims[claims.len() - 2]);
    assert!(steps.last() == Some(last), "{steps:?}");
    assert_ne!(last[..2], before[..2], "the last two retries are two relays': {steps:?}");
    assert!(!steps.iter().any(|t| t.contains("time advances")), "both within one interval: {steps:?}");
    let cx = s7["counterexample"].as_array().unwrap();
    let detail = cx.last().unwrap()["violations"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("within the retry delay of its last retry"), "{detail}");
    let alone = json(&check_example_with(file, &["--skew", "0", "--relays", "1"]));
    assert_eq!(property(&alone, "S7")["status"], "holds");
    assert_eq!(property(&alone, "R-S2")["status"], "reached", "a retry happens with one relay");
    let row = "docs/examples/real-bugs/cap-10-0-1-retry-time-in-row.toml";
    assert_eq!(property(&json(&check_example_with(row, &["--skew", "0"])), "S7")["status"], "holds");
}

/// aegra, PR 547 (docs/examples/real-bugs/aegra-0-10-4.toml): a worker name the same worker
/// index reuses as the lease holder and a result written on the run's status alone. `check`
/// finds the PR's third route: an attempt that stalled past its lease, was reaped and whose run
/// was claimed again under the same name finishes late over its successor's run (S1 at that
/// write, after the rescuer's step). Every failure is final, so no retry write shows S7. The PR's
/// token per acquisition (aegra-pr-547.toml) holds S1 and S2.
#[test]
fn aegra_547_is_found_through_a_reaped_attempts_late_finish() {
    let bug = json(&check_example("docs/examples/real-bugs/aegra-0-10-4.toml"));
    let steps = step_texts(&violated(&bug, "S1"));
    let n = steps.len();
    assert!(steps[n - 1].starts_with("r0 mark_published") && steps[n - 2].starts_with("r1 claims"), "{steps:?}");
    assert!(steps[n - 3].starts_with("rescuer"), "{steps:?}");
    assert_eq!(property(&bug, "S2")["status"], "violated", "no token");
    assert_eq!(property(&bug, "S7")["status"], "not_exercised", "no retry write");
    let fixed = json(&check_example("docs/examples/real-bugs/aegra-pr-547.toml"));
    assert_eq!(property(&fixed, "S1")["status"], "holds");
    assert_eq!(property(&fixed, "S2")["status"], "holds");
    // The release route: a finalize lost with its connection, then `_release_lease` clears the
    // lease of a run still running, which no reaper query sees again: the run hangs (L1). The
    // PR's token leaves no such release.
    let with_liveness = |file: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        json(&run(&["check", "--design", path.to_str().unwrap(), "--json", "--quiet"]))
    };
    let bug = with_liveness("docs/examples/real-bugs/aegra-0-10-4.toml");
    let l1 = violated(&bug, "L1");
    let texts: Vec<String> = l1["counterexample"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["text"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()))
        .collect();
    assert!(texts.iter().any(|t| t.contains("connection lost before the statement ran")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("owner and expiry cleared, status kept")), "{texts:?}");
    let fixed = with_liveness("docs/examples/real-bugs/aegra-pr-547.toml");
    assert_eq!(property(&fixed, "L1")["status"], "holds");
    // The heartbeat route (tests/world_search.rs walks it) lives in the model's world, as does a
    // scheduler: the simulations and the SQL runs refuse either with one line and exit 2.
    let heartbeat =
        scratch("heartbeat.toml", "name = \"heartbeat\"\nbased_on = \"reference\"\n[claim]\nrenewal = \"by-token\"\n");
    let scheduler =
        scratch("scheduler.toml", "name = \"scheduler\"\nbased_on = \"reference\"\n[maintenance]\nscheduler = true\n");
    for (design, key) in [(&heartbeat, "claim.renewal"), (&scheduler, "maintenance.scheduler = true")] {
        for command in [&["sim", "--seeds", "1"][..], &["conform", "--store", "sqlite"][..]] {
            let mut args = command.to_vec();
            args.extend(["--variant", design.to_str().unwrap()]);
            let out = run(&args);
            assert_eq!(out.status.code(), Some(2), "{command:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(&format!("{key} runs in check, explore and replay")), "{stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
        }
    }
}

/// Solid Queue today (docs/examples/solid-queue.toml, unchanged since v1.5.0): every outcome and
/// the pruner act on the claimed execution they hold, so S1–S8 hold; what `check` finds is S11 by
/// the pruner's own route — a worker whose heartbeat went stale is pruned, its job failed, and it
/// still delivers.
#[test]
fn solid_queue_today_keeps_its_claims_and_fails_a_live_workers_job() {
    let report = json(&check_example("docs/examples/solid-queue.toml"));
    for id in ["S1", "S2", "S3", "S4", "S5", "S7", "S8"] {
        assert_eq!(property(&report, id)["status"], "holds", "{id}");
    }
    let steps = step_texts(&violated(&report, "S11"));
    let n = steps.len();
    assert!(steps[n - 1].starts_with("r0 publishes") && steps[n - 2].starts_with("rescuer"), "{steps:?}");
    assert!(steps[n - 2].contains("to FAILED"), "{steps:?}");
}
