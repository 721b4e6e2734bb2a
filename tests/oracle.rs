//! The reference oracle on recorded histories: every fixture gets its verdict, bad input is one
//! clear error with line and column, and no input makes the parser or the oracle panic.

use outbox_check::oracle::Oracle;
use outbox_check::trace::{parse, parse_with, ReadOptions};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::process::Command;

/// Runs a trace through the oracle: `Ok(resolutions)` or `Err((property id, line))`.
fn verdict(file: &str, text: &str) -> Result<Vec<String>, (Option<String>, usize)> {
    let (header, events) = parse(file, text).expect("a fixture parses");
    let mut oracle = Oracle::new(&header).expect("a known variant");
    for (line, event) in &events {
        if let Err(d) = oracle.feed(*line, event) {
            // Every divergence is named: a safety property or a conformance finding, and its
            // JSON says which.
            let json = serde_json::to_value(&d).unwrap();
            assert_eq!(json["kind"], if d.blame.property().is_some() { "safety" } else { "conformance" });
            assert_eq!(json["property"].as_str().or(json["conformance"].as_str()), Some(d.finding()));
            return Err((Some(d.finding().to_string()), d.line));
        }
    }
    // A skip-locked claim's skip is settled at the end: then the divergence is at its claim.
    oracle.finish().map(|a| a.resolutions).map_err(|d| (Some(d.finding().to_string()), usize::MAX - d.line))
}

#[test]
fn every_fixture_gets_its_verdict() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/traces");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let result = verdict(&name, &text);
        if name.starts_with("valid-") {
            assert!(result.is_ok(), "{name}: {result:?}");
        } else {
            // invalid-s7-…: rejected, with S7 named; invalid-c3-…: the conformance finding C3.
            let expected = name.split('-').nth(1).unwrap().to_uppercase();
            match result {
                Err((Some(property), line)) => {
                    // Found when the history ended, for a skip-locked claim's skip.
                    let (line, at_end) = if line > usize::MAX / 2 { (usize::MAX - line, true) } else { (line, false) };
                    assert_eq!(property, expected, "{name}: diverged at line {line}");
                    // The divergence is on the last line, unless the header's source says
                    // "divergence at line N" (a skip, judged later, is reported at its claim).
                    let said = text.lines().next().unwrap().split("divergence at line ").nth(1);
                    let want = said.map_or(text.lines().count(), |n| {
                        n.trim_end_matches(|c: char| !c.is_ascii_digit())
                            .split(|c: char| !c.is_ascii_digit())
                            .next()
                            .unwrap()
                            .parse()
                            .unwrap()
                    });
                    assert_eq!(line, want, "{name}: the divergence's line (at the end of the history: {at_end})");
                }
                other => panic!("{name}: expected a divergence naming {expected}, got {other:?}"),
            }
        }
        seen += 1;
    }
    assert!(seen >= 13, "only {seen} fixtures");
}

#[test]
fn unknown_outcomes_are_checked_under_both_resolutions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/traces");
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    let committed = verdict("c", &read("valid-unknown-write-committed.jsonl")).unwrap();
    assert_eq!(committed, ["line 5: mark_published committed"]);
    let not = verdict("n", &read("valid-unknown-write-not-committed.jsonl")).unwrap();
    assert_eq!(not, ["line 5: mark_published not committed"]);
}

#[test]
fn bad_input_is_one_error_with_line_and_column_and_exit_2() {
    let header = r#"{"format":"outbox-check-trace","version":1,"max_attempts":3}"#;
    let v2 = r#"{"format":"outbox-check-trace","version":2,"max_attempts":3,"statuses":{"available":"PENDING"}}"#;
    let cases = [
        ("truncated", format!("{header}\n{{\"event\":\"clock\",\"now\":"), "2:"),
        ("wrong type", format!("{header}\n{{\"event\":\"clock\",\"now\":\"soon\"}}"), "2:"),
        ("unknown event", format!("{header}\n{{\"event\":\"teleport\"}}"), "2:"),
        // An unknown value of a known field is bad input, not a divergence.
        (
            "unknown write",
            format!("{header}\n{{\"event\":\"write\",\"relay\":\"r\",\"write\":\"mark_publishd\",\"message\":\"m\",\"tenant\":\"t\",\"token\":\"1\",\"now\":1,\"result\":\"applied\"}}"),
            "2:52: unknown variant `mark_publishd`",
        ),
        ("version", r#"{"format":"outbox-check-trace","version":9,"max_attempts":3}"#.to_string(), "1:1: unsupported trace version 9"),
        ("not a trace", r#"{"format":"csv","version":1,"max_attempts":3}"#.to_string(), "1:1: not an outbox-check trace"),
        ("empty", String::new(), "1:1: empty trace"),
        // Version 2: a status the header does not map, a design switch it does not know.
        (
            "unknown status",
            format!("{v2}\n{{\"event\":\"release\",\"message\":\"m\",\"now\":1,\"to\":\"availible\",\"fence\":\"id\",\"result\":\"applied\"}}"),
            "2:42: unknown status 'availible' in `to`, expected one of available, PENDING",
        ),
        (
            "unknown switch",
            r#"{"format":"outbox-check-trace","version":2,"max_attempts":3,"design":{"write_fense":"token"}}"#.to_string(),
            "1:",
        ),
        (
            "bad status map",
            r#"{"format":"outbox-check-trace","version":2,"max_attempts":3,"statuses":{"done":"FINISHED"}}"#.to_string(),
            "1:1: statuses: 'done' maps to 'FINISHED', which is not one of PENDING",
        ),
        (
            "version-1 design",
            r#"{"format":"outbox-check-trace","version":1,"max_attempts":3,"design":{"budget":true}}"#.to_string(),
            "1:1: `design`, `statuses` and `relays` need version 2",
        ),
    ];
    let dir = std::env::temp_dir().join(format!("outbox-check-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (what, text, expected) in cases {
        let file = dir.join(format!("{}.jsonl", what.replace(' ', "-")));
        std::fs::write(&file, &text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_outbox-check")).arg("trace").arg(&file).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(err.contains(&format!("{}:{expected}", file.display())), "{what}: {err}");
    }
    let out =
        Command::new(env!("CARGO_BIN_EXE_outbox-check")).args(["trace", "/nonexistent/trace.jsonl"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

/// A bounded fuzz run: fixtures with bytes flipped, dropped and duplicated; parsing and checking
/// may refuse them, never panic.
#[test]
fn mutated_traces_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/traces");
    let fixtures: Vec<Vec<u8>> =
        std::fs::read_dir(&dir).unwrap().map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let alphabet = b"{}[]\":,0123456789abcdefghijklmnopqrstuvwxyz_- \n";
    let started = std::time::Instant::now();
    let mut cases = 0;
    while cases < 20_000 && started.elapsed() < std::time::Duration::from_secs(20) {
        let mut bytes = fixtures[rng.gen_range(0..fixtures.len())].clone();
        for _ in 0..rng.gen_range(1..6) {
            let at = rng.gen_range(0..bytes.len().max(1));
            match rng.gen_range(0..3) {
                0 if !bytes.is_empty() => {
                    let i = at.min(bytes.len() - 1);
                    bytes[i] = alphabet[rng.gen_range(0..alphabet.len())];
                }
                1 if !bytes.is_empty() => {
                    bytes.remove(at.min(bytes.len() - 1));
                }
                _ => bytes.insert(at.min(bytes.len()), alphabet[rng.gen_range(0..alphabet.len())]),
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok((header, events)) = parse("fuzz", &text) {
            if let Ok(mut oracle) = Oracle::new(&header) {
                for (line, event) in &events {
                    if oracle.feed(*line, event).is_err() {
                        break;
                    }
                }
            }
        }
        cases += 1;
    }
    assert!(cases >= 1_000, "only {cases} cases in the time bound");
}

/// One checker, two engines: every random walk of a `reference` fleet through the world, written
/// in the trace format as its relays would have logged it, is accepted by the oracle — and a
/// legacy-v1 fleet's walks are not, always at a line naming a property.
#[test]
fn the_oracle_accepts_every_reference_walk_and_rejects_legacy_ones() {
    use outbox_check::core::RelayId;
    use outbox_check::design::{Design, Variant};
    use outbox_check::search::Walker;
    use outbox_check::world::{World, WorldConfig};
    let walk = |config: &WorldConfig, seed: u64| {
        let mut world = World::new(config);
        let mut events = Vec::new();
        let mut walker = Walker::new(seed);
        let mut enabled = Vec::new();
        for _ in 0..60 {
            enabled.clear();
            world.actions(config, &mut enabled);
            let action = enabled[walker.below(enabled.len())];
            events.extend(world.apply(config, action).events);
        }
        outbox_check::trace::from_world(config, &events)
    };
    let check = |header: &outbox_check::trace::Header, events: &[outbox_check::trace::Event]| {
        let text = outbox_check::trace::to_jsonl(header, events);
        let (header, events) = parse("walk", &text).expect("a written trace parses");
        let mut oracle = Oracle::new(&header).unwrap();
        for (line, event) in &events {
            oracle.feed(*line, event).map_err(Box::new)?;
        }
        Ok::<_, Box<outbox_check::oracle::Divergence>>(())
    };
    let mut reference = WorldConfig::small(Design::Variant(Variant::Reference), 3, 3);
    reference.relays[2].owner = RelayId(0);
    reference.enqueue_actions = true;
    reference.requeues = 1;
    for seed in 0..500 {
        let (header, events) = walk(&reference, seed);
        if let Err(d) = check(&header, &events) {
            panic!("seed {seed}: the oracle rejects a reference walk: {d}");
        }
    }
    let legacy = WorldConfig::small(Design::Variant(Variant::LegacyV1), 2, 2);
    let mut rejected = 0;
    for seed in 0..200 {
        let (mut header, events) = walk(&legacy, seed);
        header.variant = Some("reference".into());
        if let Err(d) = check(&header, &events) {
            assert!(d.blame.is_safety() || d.expected.contains("claim"), "seed {seed}: {d}");
            rejected += 1;
        }
    }
    assert!(rejected > 100, "only {rejected} of 200 legacy walks rejected by the reference oracle");
}

/// Counterexamples travel: `check` writes each in the trace format, and the oracle reads it —
/// reference's ordering example is consistent with reference, legacy-v1's S1 counterexample
/// breaks a safety property under its own rules.
#[test]
fn counterexample_traces_pass_through_the_oracle() {
    use outbox_check::design::Design;
    use outbox_check::world::{Faults, WorldConfig};
    use outbox_check_models::check::{check, CheckOptions};
    let dir = std::env::temp_dir().join(format!("outbox-check-cx-{}", std::process::id()));
    let run = |design: &str, messages: u32, faults: &str| {
        let d = Design::parse(design).unwrap();
        let config = WorldConfig::fleet(&[d, d], messages, 1, 3, Faults::parse(faults).unwrap());
        let report = check(&config, &CheckOptions { liveness: false, ..CheckOptions::default() }, &|_, _| {});
        outbox_check_models::report::write_counterexamples(&report, &dir, "test").unwrap();
    };
    run("reference", 2, "broker-drop");
    run("legacy-v1", 1, "all");
    let read = |path: &str| std::fs::read_to_string(dir.join(path)).unwrap();
    assert!(verdict("order", &read("reference-x2-m2-f-broker-drop/R-order.trace.jsonl")).is_ok());
    match verdict("s1", &read("legacy-v1-x2/S1.trace.jsonl")) {
        Err((Some(_), _)) => {}
        other => panic!("legacy-v1's S1 counterexample: {other:?}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_event_reads_the_same_whatever_the_position_of_its_tag() {
    // The parser reads the tag first when it comes first (the fast path) and gathers the object
    // when it does not: both must give the same event, and the same errors.
    let header = r#"{"format":"outbox-check-trace","version":1,"max_attempts":3}"#;
    let first = r#"{"event":"claim","relay":"r1","tenant":"t","batch":2,"lease_ms":30,"now":5,"leases":[{"message":"m1","token":"7","attempts":1}]}"#;
    let last = r#"{"relay":"r1","tenant":"t","batch":2,"lease_ms":30,"now":5,"leases":[{"message":"m1","token":"7","attempts":1}],"event":"claim"}"#;
    let (_, a) = parse("a", &format!("{header}\n{first}\n")).unwrap();
    let (_, b) = parse("b", &format!("{header}\n{last}\n")).unwrap();
    assert_eq!(a, b);
    assert_eq!(a[0].1.name(), "claim");
    // A field the format does not know is ignored and reported, or refused with --strict.
    for line in [r#"{"now":5,"event":"clock","extra":1}"#, r#"{"event":"clock","now":5,"extra":1}"#] {
        let text = format!("{header}\n{line}\n");
        let (_, events, ignored) = parse_with("c", &text, ReadOptions::default()).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(ignored.get("extra"), Some(&2), "{ignored:?}");
        let e = parse_with("c", &text, ReadOptions { strict: true, ..ReadOptions::default() }).unwrap_err();
        assert!(e.message.contains("unknown field `extra`") && e.line == 2, "{e}");
    }
    for line in [r#"{"now":5}"#, r#"{}"#] {
        let e = parse("d", &format!("{header}\n{line}\n")).unwrap_err();
        assert!(e.message.contains("missing field `event`"), "{e}");
    }
    // With the tag first, a wrong type's column is where the value is.
    let e = parse("e", &format!("{header}\n{{\"event\":\"clock\",\"now\":\"soon\"}}\n")).unwrap_err();
    assert_eq!((e.line, e.column), (2, 29), "{e}");
}

/// Real logs: fields the format does not know are ignored and listed once (refused with
/// --strict), tokens may be integers, `-` reads standard input.
#[test]
fn real_logs_with_extra_fields_integer_tokens_and_stdin_are_read() {
    use std::io::Write;
    let fixture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/traces/valid-takeover-stale-refused.jsonl"),
    )
    .unwrap();
    let logged = fixture
        .replace("\"event\":\"claim\"", "\"ts\":\"2026-12-03T10:00:00Z\",\"event\":\"claim\"")
        .replace("\"attempts\":2}", "\"attempts\":2,\"shard\":3}")
        .replace("\"token\":\"1\"", "\"token\":1")
        .replace("\"token\":\"2\"", "\"token\":2");
    let trace = |args: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .arg("trace")
            .args(args)
            .arg("-")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(logged.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = trace(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("consistent"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one warning: {err}");
    assert!(err.contains("ts (first on line 3)") && err.contains("leases.0.shard"), "{err}");
    let out = trace(&["--strict"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(standard input):3:") && err.contains("unknown field `ts`"), "{err}");
    // And a superseded write with an integer token is still judged as one.
    let stale_applied = logged
        .replace("\"token\":1,\"now\":34000,\"result\":\"stale\"", "\"token\":1,\"now\":34000,\"result\":\"applied\"");
    let (_, events) = parse("s1", &stale_applied).unwrap();
    let (header, _) = parse("s1", &stale_applied).unwrap();
    let mut oracle = Oracle::new(&header).unwrap();
    let diverged = events.iter().find_map(|(line, e)| oracle.feed(*line, e).err()).expect("S1");
    assert_eq!(diverged.blame.property().map(|p| p.id()), Some("S1"));
}

/// The schemas under docs/ describe what outbox-check reads and prints: every line of every
/// fixture validates against docs/trace-format.schema.json (the strict format), and what
/// `trace --json` prints for every fixture validates against docs/trace-verdict.schema.json.
#[test]
fn the_fixtures_and_the_verdicts_match_their_json_schemas() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(root.join(p)).unwrap()).unwrap()
    };
    let trace_schema = read("docs/trace-format.schema.json");
    let part = |def: &str| {
        let schema = serde_json::json!({
            "$schema": trace_schema["$schema"], "$defs": trace_schema["$defs"], "$ref": format!("#/$defs/{def}"),
        });
        jsonschema::validator_for(&schema).expect("a valid schema")
    };
    let (header, event) = (part("header"), part("event"));
    let verdict = jsonschema::validator_for(&read("docs/trace-verdict.schema.json")).expect("a valid schema");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root.join("tests/traces")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let schema = if i == 0 { &header } else { &event };
            let errors: Vec<String> = schema.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{}:{}: {errors:?}", path.display(), i + 1);
        }
        files.push(path);
    }
    let out =
        Command::new(env!("CARGO_BIN_EXE_outbox-check")).arg("trace").arg("--json").args(&files).output().unwrap();
    // The first divergent file ends the run with exit 1; check each file on its own to cover all.
    assert!(matches!(out.status.code(), Some(0 | 1)));
    for file in &files {
        let out =
            Command::new(env!("CARGO_BIN_EXE_outbox-check")).args(["trace", "--json"]).arg(file).output().unwrap();
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let errors: Vec<String> =
            verdict.iter_errors(&value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(errors.is_empty(), "{}: {errors:?}\n{value}", file.display());
    }
}

/// Runs `outbox-check trace` on a history; exit code and JSON verdict.
fn trace_cli(name: &str, text: &str, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let file = std::env::temp_dir().join(format!("outbox-check-{name}-{}.jsonl", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .arg("trace")
        .arg("--json")
        .args(args)
        .arg(&file)
        .output()
        .unwrap();
    std::fs::remove_file(&file).ok();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stderr))),
    )
}

/// `--all` lists every divergence, going on from what the implementation reported; without it
/// the first ends the check; `--safety-only` exits 0 when only conformance findings remain.
#[test]
fn all_goes_on_after_a_divergence_and_safety_only_passes_conformance_findings() {
    let head = r#"{"format":"outbox-check-trace","version":2,"max_attempts":3}"#;
    let enqueue = r#"{"event":"enqueue","tenant":"t","aggregate":"a","expected_version":0,"message":"m1","now":0,"result":"applied"}"#;
    // attempts counted wrong (C2) — then a stale write reported applied (S1) after a takeover.
    let events = [
        enqueue,
        r#"{"event":"claim","relay":"r1","tenant":"t","batch":1,"lease_ms":100,"now":10,"leases":[{"message":"m1","token":"1","attempts":2}]}"#,
        r#"{"event":"claim","relay":"r2","tenant":"t","batch":1,"lease_ms":100,"now":200,"leases":[{"message":"m1","token":"2","attempts":3}]}"#,
        r#"{"event":"publish","relay":"r2","message":"m1","key":"m1","answer":"ack","token":"2"}"#,
        r#"{"event":"write","relay":"r1","write":"mark_published","message":"m1","tenant":"t","token":"1","now":210,"result":"applied"}"#,
    ];
    let text = format!("{head}\n{}\n", events.join("\n"));
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["files"][0]["divergences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| format!("{}@{}", d["property"].as_str().or(d["conformance"].as_str()).unwrap(), d["line"]))
            .collect()
    };
    let (code, first) = trace_cli("first", &text, &[]);
    assert_eq!((code, ids(&first)), (Some(1), vec!["C2@3".to_string()]));
    // From the implementation's attempts on: its second claim's attempts (3) follow its own
    // count (2 + 1: no second C2), and the superseded write is S1.
    let (code, all) = trace_cli("all", &text, &["--all"]);
    assert_eq!((code, ids(&all)), (Some(1), vec!["C2@3".to_string(), "S1@6".to_string()]));
    let (code, safety) = trace_cli("safety", &text, &["--safety-only"]);
    assert_eq!((code, ids(&safety)), (Some(1), vec!["C2@3".to_string(), "S1@6".to_string()]));
    assert_eq!(safety["files"][0]["verdict"], "diverges");
    // Without the stale write only the conformance finding is left: exit 0, verdict "safe".
    let text = format!("{head}\n{}\n", events[..4].join("\n"));
    let (code, safe) = trace_cli("safe", &text, &["--safety-only"]);
    assert_eq!((code, ids(&safe)), (Some(0), vec!["C2@3".to_string()]));
    assert_eq!(safe["files"][0]["verdict"], "safe");
    let (code, _) = trace_cli("strict", &text, &[]);
    assert_eq!(code, Some(1));
}

/// Version 1 reads claims as skip-locked, version 2 as serial: a claim that passes over a row
/// another relay's claim (logged after it, begun before it committed) held is consistent
/// under skip-locked and C1 under serial.
#[test]
fn version_1_defaults_to_skip_locked_and_version_2_to_serial() {
    let fixture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/traces/valid-skip-locked-claim-passes-over-a-row-another-claim-held.jsonl"),
    )
    .unwrap();
    let body: String = fixture.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let v1 = format!("{}\n{body}", r#"{"format":"outbox-check-trace","version":1,"max_attempts":3}"#);
    let v2 = format!("{}\n{body}", r#"{"format":"outbox-check-trace","version":2,"max_attempts":3}"#);
    assert!(verdict("v1", &v1).is_ok());
    assert_eq!(verdict("v2", &v2), Err((Some("C1".to_string()), 5)));
    // Under skip-locked the evidence matters: without relay-b's claim of m1, m1 was free.
    let without: String = v1.lines().filter(|l| !l.contains("relay-b")).map(|l| format!("{l}\n")).collect();
    assert_eq!(verdict("without", &without).map_err(|(p, _)| p), Err(Some("C1".to_string())));
}

/// The header's status names are the history's own: a write's `status` and a release's `to`
/// use them, and the rows of a divergence speak them.
#[test]
fn status_names_and_switches_come_from_the_header() {
    let head = r#"{"format":"outbox-check-trace","version":2,"max_attempts":3,"design":{"attempts_counted":"claim","write_fence":"token"},"statuses":{"available":"PENDING","running":"IN_FLIGHT","completed":"PUBLISHED"}}"#;
    let claim = r#"{"event":"claim","relay":"w1","tenant":"d","batch":1,"lease_ms":100,"now":10,"leases":[{"message":"j1","token":7,"attempts":1}]}"#;
    let wrong = r#"{"event":"write","relay":"w1","write":"mark_published","message":"j1","tenant":"d","token":7,"now":20,"result":"applied","status":"available"}"#;
    let (code, v) = trace_cli("statuses", &format!("{head}\n{claim}\n{wrong}\n"), &[]);
    assert_eq!(code, Some(1));
    let d = &v["files"][0]["divergence"];
    assert_eq!((d["conformance"].as_str(), d["expected"].as_str()), (Some("C4"), Some("status completed")));
    assert_eq!(d["rows"][0]["status"], "running");
    // The token fence alone: w1's own write applies with the status the header calls completed.
    let right = wrong.replace("available", "completed");
    let (code, v) = trace_cli("token-fence", &format!("{head}\n{claim}\n{right}\n"), &[]);
    assert_eq!((code, v["files"][0]["verdict"].as_str()), (Some(0), Some("consistent")), "{v}");
    // A relay that never claimed the job, presenting w1's token, answers no lease of its own:
    // its write applying is a stale write (S1).
    let other = right.replace("\"w1\"", "\"w2\"");
    let (code, v) = trace_cli("other-relay", &format!("{head}\n{claim}\n{other}\n"), &[]);
    assert_eq!((code, v["files"][0]["divergence"]["property"].as_str()), (Some(1), Some("S1")), "{v}");
}

/// One name of the header may stand for two statuses no statement tells apart (River's and
/// Oban's `discarded` for FAILED and EXHAUSTED): a write's `status` agrees with either, a release
/// to it is read as the one the row can be in, and any other pair is refused as bad input.
#[test]
fn one_header_name_may_stand_for_failed_and_exhausted() {
    let head = r#"{"format":"outbox-check-trace","version":2,"max_attempts":1,"design":{"attempts_counted":"claim","write_fence":"token"},"statuses":{"available":"PENDING","running":"IN_FLIGHT","completed":"PUBLISHED","discarded":["FAILED","EXHAUSTED"]}}"#;
    let claim = |id: &str, token: u32, now: u32| {
        format!(
            r#"{{"event":"claim","relay":"w1","tenant":"d","batch":1,"lease_ms":100,"now":{now},"leases":[{{"message":"{id}","token":{token},"attempts":1}}]}}"#
        )
    };
    let failed = r#"{"event":"write","relay":"w1","write":"mark_failed","message":"j1","tenant":"d","token":7,"now":20,"code":"rejected","result":"applied","status":"discarded"}"#;
    // j2's budget (1) is spent: the rescuer's release to `discarded` is read as EXHAUSTED, and
    // w1's late completion then matches nothing.
    let release = r#"{"event":"release","relay":"rescuer","message":"j2","now":500,"to":"discarded","fence":"expired","result":"applied"}"#;
    let late = r#"{"event":"write","relay":"w1","write":"mark_published","message":"j2","tenant":"d","token":8,"now":600,"result":"stale"}"#;
    let text = format!("{head}\n{}\n{failed}\n{}\n{release}\n{late}\n", claim("j1", 7, 10), claim("j2", 8, 30));
    let (code, v) = trace_cli("discarded", &text, &[]);
    assert_eq!((code, v["files"][0]["verdict"].as_str()), (Some(0), Some("consistent")), "{v}");
    // The name still says something: a completion reported as `discarded` is a divergence.
    let wrong = failed.replace("mark_failed", "mark_published").replace(r#""code":"rejected","#, "");
    let (code, v) = trace_cli("discarded-wrong", &format!("{head}\n{}\n{wrong}\n", claim("j1", 7, 10)), &[]);
    assert_eq!(code, Some(1), "{v}");
    let d = &v["files"][0]["divergence"];
    assert_eq!((d["conformance"].as_str(), d["expected"].as_str()), (Some("C4"), Some("status completed")));
    // Statuses a statement tells apart never share a name.
    let bad = head.replace(r#"["FAILED","EXHAUSTED"]"#, r#"["PENDING","IN_FLIGHT"]"#);
    let file = std::env::temp_dir().join(format!("outbox-check-shared-bad-{}.jsonl", std::process::id()));
    std::fs::write(&file, format!("{bad}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check")).arg("trace").arg(&file).output().unwrap();
    std::fs::remove_file(&file).ok();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("statuses: 'discarded' maps to PENDING and IN_FLIGHT; a name may stand for two"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// The header's `relays`: once every relay it lists has logged after a skip-locked claim,
/// nothing can excuse a row the claim passed over — not even a relay it does not list. Without
/// the list, a relay seen for the first time may have begun its first statement at any time.
#[test]
fn declared_relays_settle_a_skip_that_an_unlisted_relay_would_excuse() {
    let body = [
        r#"{"event":"enqueue","tenant":"acme","aggregate":"o1","expected_version":0,"message":"m1","now":0,"result":"applied"}"#,
        r#"{"event":"enqueue","tenant":"acme","aggregate":"o2","expected_version":0,"message":"m2","now":10,"result":"applied"}"#,
        r#"{"event":"claim","relay":"relay-b","tenant":"other","batch":1,"lease_ms":30000,"now":900,"leases":[]}"#,
        // relay-a's next statement began after the enqueues (decision 102).
        r#"{"event":"claim","relay":"relay-a","tenant":"other","batch":1,"lease_ms":30000,"now":950,"leases":[]}"#,
        r#"{"event":"claim","relay":"relay-a","tenant":"acme","batch":1,"lease_ms":30000,"now":1000,"leases":[{"message":"m2","token":"1","attempts":1}]}"#,
        r#"{"event":"publish","relay":"relay-a","message":"m2","key":"m2","answer":"ack","token":"1"}"#,
        r#"{"event":"claim","relay":"relay-b","tenant":"other","batch":1,"lease_ms":30000,"now":1100,"leases":[]}"#,
        r#"{"event":"claim","relay":"relay-c","tenant":"acme","batch":1,"lease_ms":30000,"now":1000,"leases":[{"message":"m1","token":"1","attempts":1}]}"#,
    ]
    .join("\n");
    let open = format!(
        "{}\n{body}\n",
        r#"{"format":"outbox-check-trace","version":2,"max_attempts":3,"concurrency":"skip-locked"}"#
    );
    assert!(verdict("open", &open).is_ok(), "relay-c's first claim may have held m1 during relay-a's");
    let listed = format!(
        "{}\n{body}\n",
        r#"{"format":"outbox-check-trace","version":2,"max_attempts":3,"concurrency":"skip-locked","relays":["relay-a","relay-b"]}"#
    );
    assert_eq!(verdict("listed", &listed), Err((Some("C1".to_string()), 6)));
}

/// A write whose outcome the relay never learnt, then a claim of its row that counts attempts
/// wrong: if the write applied, the claim takes a terminal row (S4); if not, it is a claim that
/// miscounts (C2). The history shows one of the two and not which: the divergence names both
/// (`otherwise`), and says S4 alone only where the write is known to have applied.
#[test]
fn resolutions_that_fail_differently_are_all_named() {
    let head = r#"{"format":"outbox-check-trace","version":2,"max_attempts":3,"relays":["r1","r2"]}"#;
    let events = |write: &str| {
        let write = format!(
            r#"{{"event":"write","relay":"r1","write":"mark_published","message":"m1","tenant":"t","token":"1","now":20,"result":"{write}"}}"#
        );
        [
            r#"{"event":"enqueue","tenant":"t","aggregate":"a","expected_version":0,"message":"m1","now":0,"result":"applied"}"#.to_string(),
            r#"{"event":"claim","relay":"r1","tenant":"t","batch":1,"lease_ms":100,"now":10,"leases":[{"message":"m1","token":"1","attempts":1}]}"#.to_string(),
            r#"{"event":"publish","relay":"r1","message":"m1","key":"m1","answer":"ack","token":"1"}"#.to_string(),
            write,
            r#"{"event":"claim","relay":"r2","tenant":"t","batch":1,"lease_ms":100,"now":200,"leases":[{"message":"m1","token":"2","attempts":5}]}"#.to_string(),
        ]
        .join("\n")
    };
    let last = |v: &serde_json::Value| v["files"][0]["divergences"].as_array().unwrap().last().unwrap().clone();
    let finding = |d: &serde_json::Value| d["property"].as_str().or(d["conformance"].as_str()).unwrap().to_string();
    let (code, unknown) = trace_cli("unknown", &format!("{head}\n{}\n", events("unknown")), &["--all"]);
    let d = last(&unknown);
    assert_eq!((code, d["line"].as_u64()), (Some(1), Some(6)), "{unknown:#}");
    let mut named: Vec<String> = d["otherwise"]
        .as_array()
        .map(|o| o.iter().map(|s| s.as_str().unwrap()[..2].to_string()).collect())
        .unwrap_or_default();
    named.push(finding(&d));
    named.sort();
    assert_eq!(named, ["C2", "S4"], "{d:#}");
    // Known to have applied: the claim took a PUBLISHED row, S4 and nothing else; known not to
    // have applied (the write left out): the miscount, C2 and nothing else.
    for (write, alone) in [("applied", "S4"), ("stale", "C2")] {
        let (_, known) = trace_cli(write, &format!("{head}\n{}\n", events(write)), &["--all"]);
        let d = last(&known);
        assert_eq!((finding(&d), d.get("otherwise").is_none()), (alone.to_string(), true), "{d:#}");
    }
}

/// A design whose rescuer takes a lease only once its expiry has passed (Graphile Worker's
/// `locked_at < now() - interval '4 hours'`, `maintenance.after_expiry`): an unlock recorded at
/// the very instant the lease expires is not what the design does, one a tick later is; under a
/// design whose rescuer takes a lease at its expiry (Oban's) the first is consistent too.
#[test]
fn an_unlock_at_the_instant_of_expiry_is_flagged_where_the_design_waits_past_it() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/");
    let head = r#"{"format":"outbox-check-trace","version":2,"max_attempts":3}"#;
    let enqueue = r#"{"event":"enqueue","tenant":"t","aggregate":"a","expected_version":0,"message":"m1","now":0,"result":"applied"}"#;
    let claim = r#"{"event":"claim","relay":"w1","tenant":"t","batch":1,"lease_ms":100,"now":10,"leases":[{"message":"m1","attempts":1}]}"#;
    let unlock = |now: u32, next: &str| {
        format!(
            r#"{{"event":"release","relay":"rescuer","message":"m1","now":{now},"to":"PENDING",{next}"fence":"expired","result":"applied"}}"#
        )
    };
    let graphile = format!("{examples}graphile-worker.toml");
    // Every divergence (`--all`): Graphile's design hands out no token, which S2 names on the
    // claim; what matters here is whether the release (line 4) is one.
    let release_flagged = |name: &str, design: &str, release: String| {
        let (_, v) =
            trace_cli(name, &format!("{head}\n{enqueue}\n{claim}\n{release}\n"), &["--design", design, "--all"]);
        let divergences = v["files"][0]["divergences"].as_array().cloned().unwrap_or_default();
        divergences.iter().find(|d| d["line"] == 4).map(|d| d["conformance"].as_str().unwrap_or_default().to_string())
    };
    // Graphile's unlock sets `run_at = now()`: the row is due at the unlock.
    assert_eq!(release_flagged("after-expiry-late", &graphile, unlock(111, r#""next_attempt_at":111,"#)), None);
    assert_eq!(
        release_flagged("after-expiry-at", &graphile, unlock(110, r#""next_attempt_at":110,"#)).as_deref(),
        Some("C3")
    );
    assert_eq!(release_flagged("at-expiry", &format!("{examples}oban.toml"), unlock(110, "")), None);
}
