//! SQL profiles: the user's own schema and statements, run as written against the core of the
//! design the profile declares. A profile that does what its design says agrees; one that does
//! not is caught and shrunk to a script of its own statements that pastes into SQLite; a bad
//! profile is one line and exit 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

const JOBS: &str = "docs/examples/jobs/jobs.profile.toml";

/// A copy of the example profile beside its schema, with `edit` applied to its text.
fn variant_of(name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A folder per profile: the tests run in parallel, and each copies the schema beside it.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiles").join(name.trim_end_matches(".toml"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("docs/examples/jobs/schema.sql"), dir.join("schema.sql")).unwrap();
    std::fs::copy(root.join("docs/examples/job-queue-by-id.toml"), dir.join("job-queue-by-id.toml")).unwrap();
    let text = std::fs::read_to_string(root.join(JOBS)).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(text)).unwrap();
    path
}

#[test]
fn a_profile_that_does_what_its_design_says_agrees() {
    let out = run(&["conform", "--profile", JOBS, "--store", "sqlite", "--cases", "300", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let report = json(&out);
    assert_eq!(report["verdict"], "agrees");
    assert_eq!(report["variant"], "reference");
    assert_eq!(report["profile"], JOBS);
    assert!(report["operations"].as_u64().unwrap() > 1000, "{report}");
    // Every schedule that matters replays on it as on the reference core.
    let schedules = report["schedules"].as_array().unwrap();
    assert!(schedules.len() >= 20, "{} schedules", schedules.len());
    assert!(
        schedules.iter().all(|s| s["divergence"].is_null() && s["operations"].as_u64().unwrap() > 0),
        "{schedules:?}"
    );
    assert!(schedules.iter().any(|s| s["property"] == "S1") && schedules.iter().any(|s| s["property"] == "R-S6"));
    // The by-id twin does what the by-id design it declares does — and so breaks what that
    // design breaks: S1 and S4 along the design's own counterexamples (exit 1, "violated").
    let out = run(&[
        "conform",
        "--profile",
        "docs/examples/jobs/jobs-by-id.profile.toml",
        "--store",
        "sqlite",
        "--cases",
        "300",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let report = json(&out);
    assert_eq!(report["variant"], "job-queue-by-id");
    assert_eq!(report["verdict"], "violated");
    assert!(report["divergence"].is_null());
    let schedules = report["schedules"].as_array().unwrap();
    assert!(schedules.iter().all(|s| s["divergence"].is_null()), "{schedules:?}");
    for p in ["S1", "S4"] {
        assert!(schedules.iter().any(|s| s["property"] == p && s["design_breaks"] == true), "{p}");
    }
    // The reference design breaks nothing but S11 (its reaper's false failure, which fails
    // nothing: decision 77), so nothing else is marked for the reference profile, and it agrees.
    let out = run(&["conform", "--profile", JOBS, "--store", "sqlite", "--cases", "20", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let schedules = json(&out)["schedules"].as_array().unwrap().clone();
    let marked: Vec<&serde_json::Value> = schedules.iter().filter(|s| s["design_breaks"] == true).collect();
    assert!(marked.iter().all(|s| s["property"] == "S11"), "{marked:?}");
    assert!(!marked.is_empty(), "the reaper's S11 is replayed against the SQL too");
}

/// What a world of one tenant and a budget of 3 hid from conform (issue 27, items 1 and 2):
/// each part below was `agrees` (or, for the by-id twin, only the design's own breaks) before.
#[test]
fn conform_presents_two_tenants_misrouted_writes_other_budgets_and_the_backoffs_cap() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let conform = |profile: &Path| {
        let out = run(&["conform", "--profile", profile.to_str().unwrap(), "--store", "sqlite", "--json"]);
        (out.status.code(), json(&out))
    };
    // Statements that do exactly what a design without the tenant check does: that design
    // breaks S9 with two tenants, so the run is violated, with S9 the design's.
    let no_tenant = variant_of("no-tenant.toml", |t| {
        t.replace("design = \"reference\"", "design = \"reference-no-tenant.toml\"")
            .replace("WHERE tenant = :tenant AND state IN", "WHERE state IN")
            .replace(" AND tenant = :tenant AND state = 'running'", " AND state = 'running'")
    });
    let design = std::fs::read_to_string(root.join("models/designs/reference.toml")).unwrap();
    let design = design
        .replace("tenant_scoped = true", "tenant_scoped = false")
        .replace("checks_tenant = true", "checks_tenant = false")
        .replace("name = \"reference\"", "name = \"reference-no-tenant\"");
    assert_eq!(
        design.matches("= false").count(),
        std::fs::read_to_string(root.join("models/designs/reference.toml")).unwrap().matches("= false").count() + 2
    );
    std::fs::write(no_tenant.parent().unwrap().join("reference-no-tenant.toml"), design).unwrap();
    let (code, report) = conform(&no_tenant);
    assert_eq!((code, report["verdict"].as_str()), (Some(1), Some("violated")), "{report}");
    assert!(report["divergence"].is_null(), "{}", report["divergence"]);
    let schedules = report["schedules"].as_array().unwrap();
    assert!(
        schedules.iter().any(|s| s["property"] == "S9" && s["design_breaks"] == true && s["divergence"].is_null()),
        "{schedules:?}"
    );
    // Declared reference, writes that ignore the tenant: a random write with the other tenant's
    // id and the isolation world's S9 schedules both catch it.
    let writes = variant_of("writes-ignore-tenant.toml", |t| {
        t.replace(" AND tenant = :tenant AND state = 'running'", " AND state = 'running'")
    });
    let (code, report) = conform(&writes);
    assert_eq!((code, report["verdict"].as_str()), (Some(1), Some("diverged")), "{report}");
    assert_eq!(report["divergence"]["op"]["misrouted"], true, "{}", report["divergence"]);
    let schedules = report["schedules"].as_array().unwrap();
    assert!(schedules.iter().any(|s| s["property"] == "S9" && !s["divergence"].is_null()), "{schedules:?}");
    // The by-id twin computes its backoff in SQL: without the cap, a retry ladder under a budget
    // of 8 or more reaches the point where the cap applies.
    let dir = no_tenant.parent().unwrap().parent().unwrap().join("no-cap");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("docs/examples/jobs/schema.sql"), dir.join("schema.sql")).unwrap();
    std::fs::copy(root.join("docs/examples/job-queue-by-id.toml"), dir.join("job-queue-by-id.toml")).unwrap();
    let by_id = std::fs::read_to_string(root.join("docs/examples/jobs/jobs-by-id.profile.toml")).unwrap();
    let uncapped = by_id
        .replace("\"../job-queue-by-id.toml\"", "\"job-queue-by-id.toml\"")
        .replace(" OR :backoff_base_ms * (CAST(1 AS BIGINT) << (attempt - 1)) > :backoff_cap_ms THEN", " THEN");
    assert_eq!(uncapped.matches(":backoff_cap_ms").count() + 2, by_id.matches(":backoff_cap_ms").count());
    std::fs::write(dir.join("no-cap.profile.toml"), uncapped).unwrap();
    let (code, report) = conform(&dir.join("no-cap.profile.toml"));
    assert_eq!((code, report["verdict"].as_str()), (Some(1), Some("diverged")), "{report}");
    let divergence = &report["divergence"];
    assert!(divergence["budget"].as_u64().unwrap() >= 8, "{divergence}");
    assert!(divergence["expected"].as_str().unwrap().contains("next_attempt_at"), "{divergence}");
    // What ran is reported: the example exercises everything listed; with its budget written
    // into the SQL, budgets other than 3 cannot run, and the report says so.
    let (code, report) = conform(&root.join(JOBS));
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["not_exercised"], serde_json::json!([]), "{}", report["exercised"]);
    let exercised = &report["exercised"];
    assert!(exercised["budgets"].as_array().unwrap().len() > 3, "{exercised}");
    for key in ["misrouted_writes", "retries_at_the_cap", "stale_enqueues", "superseded_writes", "budgets_spent"] {
        assert!(exercised[key].as_u64().unwrap() > 0, "{key}: {exercised}");
    }
    let fixed = variant_of("fixed-budget.toml", |t| t.replace(":max_attempts", "3"));
    let (code, report) = conform(&fixed);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["exercised"]["budgets"], serde_json::json!([3]));
    let missing = report["not_exercised"].as_array().unwrap();
    assert!(missing.iter().any(|m| m == "a budget other than 3 (no statement takes :max_attempts)"), "{missing:?}");
}

/// An edit of a profile's text, making one of the cases below.
type Edit = fn(String) -> String;

#[test]
fn sql_that_does_not_do_what_its_design_says_is_caught_with_a_script_that_pastes() {
    let cases: [(&str, Edit, &str); 4] = [
        // The claim forgets the retry clock.
        ("no-retry-clock.toml", |t| t.replace("AND (run_at IS NULL OR run_at <= :now)", ""), "claim"),
        // Completion by id alone, declared as the reference design.
        (
            "by-id.toml",
            |t| t.replace(" AND state = 'running' AND locked_by = :owner AND lock_token = :token", ""),
            "mark_",
        ),
        // The claim forgets the budget.
        ("no-budget.toml", |t| t.replace("AND attempt < :max_attempts", ""), "claim"),
        // The claim takes live leases.
        ("steals.toml", |t| t.replace("AND (locked_until IS NULL OR locked_until <= :now)", ""), "claim"),
    ];
    // The schedules name what the by-id statements let through, with the interleaving.
    let by_id = variant_of("by-id-schedules.toml", |t| {
        t.replace(" AND state = 'running' AND locked_by = :owner AND lock_token = :token", "")
    });
    let report =
        json(&run(&["conform", "--profile", by_id.to_str().unwrap(), "--store", "sqlite", "--cases", "20", "--json"]));
    let s1 = report["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["property"] == "S1" && !s["divergence"].is_null())
        .expect("an S1 schedule diverges");
    let d = &s1["divergence"];
    assert!(d["finding"].as_str().unwrap().starts_with("your statements let this stale mark_"), "{d}");
    assert!(d["interleaving"].as_array().unwrap().len() >= 3 && d["step"].as_u64().unwrap() >= 3, "{d}");
    // The claim that forgets the retry clock: S7's schedule names it, step by step, and its
    // statements paste.
    let no_clock =
        variant_of("no-retry-clock-schedules.toml", |t| t.replace("AND (run_at IS NULL OR run_at <= :now)", ""));
    let out =
        run(&["conform", "--profile", no_clock.to_str().unwrap(), "--store", "sqlite", "--cases", "20", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let report = json(&out);
    let s7 = report["schedules"].as_array().unwrap().iter().find(|s| s["property"] == "S7").expect("an S7 schedule");
    let d7 = &s7["divergence"];
    assert!(
        d7["finding"].as_str().unwrap().contains("before its retry time")
            && d7["finding"].as_str().unwrap().ends_with("(S7)"),
        "{d7}"
    );
    for (profile, d) in [(&by_id, d), (&no_clock, d7)] {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(&std::fs::read_to_string(profile.with_file_name("schema.sql")).unwrap()).unwrap();
        for line in d["sql"].as_array().unwrap() {
            let line = line.as_str().unwrap();
            assert!(!line.contains(':'), "{line}");
            let mut stmt = db.prepare(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let mut rows = stmt.raw_query();
            while rows.next().unwrap().is_some() {}
        }
    }
    for (name, edit, at) in cases {
        let profile = variant_of(name, edit);
        let out =
            run(&["conform", "--profile", profile.to_str().unwrap(), "--store", "sqlite", "--cases", "500", "--json"]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", String::from_utf8_lossy(&out.stdout));
        let report = json(&out);
        let d = &report["divergence"];
        let ops = d["ops"].as_array().unwrap();
        assert!(ops.len() <= 12, "{name}: shrunk to {} steps", ops.len());
        let op = d["op"]["op"].as_str().unwrap();
        assert!(
            op.starts_with(at.trim_end_matches('_')) || (at == "mark_" && op == "write"),
            "{name}: diverged at {op}"
        );
        // The script is the profile's own statements with the values written in: it runs, as
        // is, after the schema.
        let sql: Vec<String> = d["sql"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect();
        assert!(sql.iter().all(|l| !l.contains(':') && l.contains("jobs")), "{name}: {sql:?}");
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(&std::fs::read_to_string(profile.with_file_name("schema.sql")).unwrap()).unwrap();
        for line in &sql {
            let mut stmt = db.prepare(line).unwrap_or_else(|e| panic!("{name}: {line}: {e}"));
            let mut rows = stmt.raw_query();
            while rows.next().unwrap().is_some() {}
        }
    }
}

#[test]
fn a_bad_profile_is_one_line_and_exit_2() {
    let cases: [(&str, Edit, &[&str]); 14] = [
        (
            "observe-typo.toml",
            |t| t.replace("[statuses]", "[observe]\nmark_publishd = \"returning\"\n\n[statuses]"),
            &["observe.mark_publishd", "mark_published"],
        ),
        (
            "observe-value.toml",
            |t| t.replace("[statuses]", "[observe]\nmark_published = \"gone\"\n\n[statuses]"),
            &["observe.mark_published", "row-gone"],
        ),
        ("wrong-type.toml", |t| t.replace("design = \"reference\"", "design = 3"), &["design", "invalid type"]),
        (
            "does-not-parse.toml",
            |t| {
                t.replace(
                    "UPDATE jobs SET locked_until = NULL, locked_by = NULL, state = 'discarded'",
                    "UPDATE jobs SET SET locked_until = NULL, state = 'discarded'",
                )
            },
            &["statements.mark_failed", "syntax error"],
        ),
        (
            "no-such-column.toml",
            |t| t.replace("finished AS published_at", "finish_time AS published_at"),
            &["statements.rows", "finish_time"],
        ),
        (
            "counter-token.toml",
            |t| t.replace("lock_token = lock_token + 1", "lock_token = :token"),
            &["statements.claim", ":token", "random"],
        ),
        (
            "clock.toml",
            |t| t.replace("finished = :now", "finished = CURRENT_TIMESTAMP"),
            &["statements.mark_published", "CURRENT_TIMESTAMP", ":now"],
        ),
        (
            "unixepoch.toml",
            |t| t.replace("locked_until <= :now)\n", "locked_until <= unixepoch())\n"),
            &["statements.claim", "unixepoch()"],
        ),
        ("unknown-key.toml", |t| t.replace("[statuses]", "colour = \"blue\"\n[statuses]"), &["unknown field `colour`"]),
        (
            "unknown-param.toml",
            |t| t.replacen("VALUES (:id,", "VALUES (:job_id,", 1),
            &["statements.enqueue", ":job_id", ":tenant"],
        ),
        ("no-status.toml", |t| t.replace("state AS status,", ""), &["statements.rows", "status"]),
        (
            "bad-mapping.toml",
            |t| t.replace("[statuses]", "[columns]\npublished = \"finished\"\n\n[statuses]"),
            &["columns.published", "published_at"],
        ),
        (
            "no-schema.toml",
            |t| t.replace("schema = \"schema.sql\"", "schema = \"missing.sql\""),
            &["schema = \"missing.sql\"", "cannot read"],
        ),
        (
            "bad-design.toml",
            |t| t.replace("design = \"reference\"", "design = \"referense\""),
            &["design = \"referense\""],
        ),
    ];
    // Every problem of a profile in one run, one line each.
    let many = variant_of("many.toml", |t| {
        t.replace("finished = :now", "finished = CURRENT_TIMESTAMP")
            .replacen("VALUES (:id,", "VALUES (:job_id,", 1)
            .replace("[statuses]", "[observe]\nmark_publishd = \"returning\"\n\n[statuses]")
    });
    let out = run(&["conform", "--profile", many.to_str().unwrap(), "--store", "sqlite"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 3, "{err}");
    for says in ["observe.mark_publishd", "statements.enqueue: parameter :job_id", "CURRENT_TIMESTAMP"] {
        assert!(err.contains(says), "{err} should say {says}");
    }
    for (name, edit, says) in cases {
        let profile = variant_of(name, edit);
        let out = run(&["conform", "--profile", profile.to_str().unwrap(), "--store", "sqlite", "--cases", "20"]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        for s in says {
            assert!(err.contains(s), "{name}: {err} should say {s}");
        }
    }
}

/// The same profile on a real PostgreSQL server, in a scratch schema dropped afterwards: the
/// example agrees, the by-id statements declared as reference are caught, a statement the
/// server cannot run is one line and exit 2, and no scratch schema is left behind.
#[test]
fn a_profile_runs_on_postgresql_in_a_scratch_schema() {
    let Some(url) = common::pg_url("the PostgreSQL profile tests") else { return };
    // Each run's pids, to look for the scratch schemas it marked afterwards.
    let pids = std::cell::RefCell::new(Vec::new());
    let pg = |args: &[&str]| {
        let child = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .args(args)
            .args(["--store", "postgres", "--database-url", &url])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        pids.borrow_mut().push(child.id());
        child.wait_with_output().unwrap()
    };
    // The PostgreSQL form of the example (its claim locks and skips): random sequences,
    // schedules and four relays with a flaky broker and killed backends all agree.
    let out = pg(&["conform", "--profile", "docs/examples/jobs/jobs.pg.profile.toml", "--cases", "60", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    assert_eq!(report["verdict"], "agrees");
    let c = &report["concurrent"];
    assert!(c["oracle"].is_null() && c["not_terminal"] == serde_json::json!([]), "{c}");
    assert!(c["kills"].as_u64().unwrap() > 0 && c["events"].as_u64().unwrap() > 800, "{c}");
    // The SQLite form's claim has no FOR UPDATE SKIP LOCKED: on PostgreSQL two relays' claims
    // take the same rows (the second UPDATE waits for the first and then overwrites its lease),
    // and the oracle names it on the recorded history.
    let caught = (1..=3).any(|seed| {
        let out = pg(&["conform", "--profile", JOBS, "--cases", "5", "--seed", &seed.to_string(), "--json"]);
        let report = json(&out);
        let c = &report["concurrent"];
        if let Some(history) = c["history"].as_str() {
            let _ = std::fs::remove_file(history);
        }
        out.status.code() == Some(1) && c["oracle"].as_str().is_some_and(|o| o.contains("S6 one live lease"))
    });
    assert!(caught, "the claim without SKIP LOCKED was not caught in three runs");
    let lie = variant_of("pg-by-id.toml", |t| {
        t.replace(" AND state = 'running' AND locked_by = :owner AND lock_token = :token", "")
    });
    let out = pg(&["conform", "--profile", lie.to_str().unwrap(), "--cases", "60", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["verdict"], "diverged");
    // SQLite's two-argument MAX is not PostgreSQL's: the server's own words, on one line.
    let max =
        variant_of("pg-max.toml", |t| t.replace("ELSE :retry_at END", "ELSE :now + MAX(1, :retry_at - :now) END"));
    let out = pg(&["conform", "--profile", max.to_str().unwrap(), "--cases", "5"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // Both statements that use it, one line each.
    assert!(err.contains("statements.mark_ambiguous") && err.contains("statements.mark_retry"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 2, "{err}");
    // The run works in a scratch database of its own: `public.jobs` there is the scratch
    // database's table, so a schema-qualified statement runs as written.
    let qualified = variant_of("pg-public.toml", |t| {
        t.replace(
            "UPDATE jobs SET locked_until = NULL, locked_by = NULL, state = 'completed'",
            "UPDATE public.jobs SET locked_until = NULL, locked_by = NULL, state = 'completed'",
        )
    });
    // (The claim has no SKIP LOCKED: the concurrent run may find S6; the sequences agree.)
    let out = pg(&["conform", "--profile", qualified.to_str().unwrap(), "--cases", "20", "--json"]);
    assert_ne!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    assert!(report["divergence"].is_null(), "{report}");
    if let Some(history) = report["concurrent"]["history"].as_str() {
        let _ = std::fs::remove_file(history);
    }
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for pid in pids.borrow().iter() {
        let marker = format!("outbox-check scratch schema (pid {pid})");
        let left: i64 = client
            .query_one(
                "SELECT (SELECT count(*) FROM pg_namespace WHERE obj_description(oid, 'pg_namespace') = $1)
                      + (SELECT count(*) FROM pg_database WHERE shobj_description(oid, 'pg_database') = $1)",
                &[&marker],
            )
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "the run with pid {pid} left its scratch schema or database");
    }
}

/// One seed, one run: the same profile and seed give the same cases, operations and divergence.
#[test]
fn a_profile_run_is_deterministic() {
    let profile = variant_of("determinism.toml", |t| {
        t.replace(" AND state = 'running' AND locked_by = :owner AND lock_token = :token", "")
    });
    let once = |seed: &str| {
        let mut v = json(&run(&[
            "conform",
            "--profile",
            profile.to_str().unwrap(),
            "--store",
            "sqlite",
            "--cases",
            "200",
            "--seed",
            seed,
            "--json",
        ]));
        v["seconds"] = serde_json::Value::Null;
        v["operations_per_second"] = serde_json::Value::Null;
        v
    };
    let (a, b) = (once("7"), once("7"));
    assert_eq!(a, b);
    assert_eq!(a["verdict"], "diverged");
}

/// A migrations directory stands for the DDL file: its .sql files applied in version order.
#[test]
fn a_migrations_directory_is_applied_in_version_order() {
    let profile = variant_of("migrations.toml", |t| t.replace("schema = \"schema.sql\"", "schema = \"migrations\""));
    let dir = profile.with_file_name("migrations");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ddl = std::fs::read_to_string(profile.with_file_name("schema.sql")).unwrap();
    let (table, index) = ddl.split_once("CREATE INDEX").unwrap();
    // V10 sorts after V2 by number, not by name: the index needs the table.
    std::fs::write(dir.join("V2__jobs.sql"), table).unwrap();
    std::fs::write(dir.join("V10__index.sql"), format!("CREATE INDEX{index}")).unwrap();
    std::fs::write(dir.join("README.md"), "not SQL").unwrap();
    let out = run(&["conform", "--profile", profile.to_str().unwrap(), "--store", "sqlite", "--cases", "50", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Out of order, the schema fails on one line.
    std::fs::rename(dir.join("V10__index.sql"), dir.join("V1__index.sql")).unwrap();
    let out = run(&["conform", "--profile", profile.to_str().unwrap(), "--store", "sqlite", "--cases", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("schema = migrations/V1__index.sql: no such table: main.jobs")
    );
}

/// A profile without `[statuses]` reads its table in the status names of its design file.
#[test]
fn a_profile_takes_its_status_names_from_its_design_file() {
    let profile = variant_of("named-by-design.toml", |t| {
        let start = t.find("[statuses]").unwrap();
        let end = t.find("[statements]").unwrap();
        format!("{}{}", &t[..start], &t[end..]).replace("design = \"reference\"", "design = \"jobs-design.toml\"")
    });
    std::fs::write(
        profile.with_file_name("jobs-design.toml"),
        "name = \"jobs-design\"\nbased_on = \"reference\"\n[statuses]\npending = \"available\"\nin_flight = \"running\"\npublished = \"completed\"\nambiguous = \"unknown\"\nfailed = \"discarded\"\nexhausted = \"dead\"\n",
    )
    .unwrap();
    let out = run(&["conform", "--profile", profile.to_str().unwrap(), "--store", "sqlite", "--cases", "50", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["variant"], "jobs-design");
}

/// Every example profile in docs/examples gives, on each database, the verdict recorded in
/// reports/profiles.json, with the properties its declared design breaks by itself.
#[test]
fn every_example_profile_gives_the_verdict_recorded_in_reports() {
    let recorded: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/profiles.json")).unwrap(),
    )
    .unwrap();
    let profiles = recorded["profiles"].as_object().unwrap();
    // Every profile in docs/examples is recorded.
    let mut found = Vec::new();
    for dir in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples")).unwrap() {
        let dir = dir.unwrap().path();
        if dir.is_dir() {
            for f in std::fs::read_dir(&dir).unwrap() {
                let name = f.unwrap().file_name().to_string_lossy().to_string();
                if name.ends_with(".profile.toml") {
                    found.push(format!("docs/examples/{}/{name}", dir.file_name().unwrap().to_string_lossy()));
                }
            }
        }
    }
    found.sort();
    let mut listed: Vec<String> = profiles.keys().cloned().collect();
    listed.sort();
    assert_eq!(found, listed, "reports/profiles.json lists every example profile");
    let url = common::pg_url("the example profiles on PostgreSQL");
    for (profile, stores) in profiles {
        for (store, want) in stores.as_object().unwrap() {
            let mut args =
                vec!["conform", "--profile", profile.as_str(), "--store", store.as_str(), "--cases", "100", "--json"];
            if store == "postgres" {
                let Some(url) = &url else { continue };
                args.extend(["--database-url", url.as_str()]);
            }
            let out = run(&args);
            if want["verdict"] == "does not run" {
                assert_eq!(out.status.code(), Some(2), "{profile} on {store}");
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    err.trim_end().lines().count() == 1 && err.contains(want["why"].as_str().unwrap()),
                    "{profile} on {store}: {err}"
                );
                continue;
            }
            let report = json(&out);
            assert_eq!(
                report["verdict"],
                want["verdict"],
                "{profile} on {store}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert_eq!(
                out.status.code(),
                Some(if want["verdict"] == "agrees" { 0 } else { 1 }),
                "{profile} on {store}"
            );
            let mut breaks: Vec<String> = report["schedules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["design_breaks"] == true && s["divergence"].is_null() && s["stopped"].is_null())
                .map(|s| s["property"].as_str().unwrap().to_string())
                .collect();
            breaks.sort();
            breaks.dedup();
            let want_breaks: Vec<String> =
                want["design_breaks"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
            assert_eq!(breaks, want_breaks, "{profile} on {store}");
            if let Some(history) = report["concurrent"]["history"].as_str() {
                let _ = std::fs::remove_file(history);
            }
        }
    }
}

/// The visibility-timeout example observes its DELETE by the row being gone and mark_failed by
/// the row's version: a DELETE that forgets the receipt lets a stale completion apply, and is
/// caught so; observing by a version the SELECT does not give is one line and exit 2.
#[test]
fn writes_observed_by_the_row_being_gone_or_its_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiles/visibility");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("docs/examples/visibility/schema.sql"), dir.join("schema.sql")).unwrap();
    std::fs::copy(
        root.join("docs/examples/visibility-timeout.toml"),
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiles/visibility-timeout.toml"),
    )
    .unwrap();
    let text = std::fs::read_to_string(root.join("docs/examples/visibility/visibility.profile.toml")).unwrap();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let forgets = write("forgets-receipt.toml", text.replace("AND state = 'reading' AND receipt = :token\"", "\""));
    assert_ne!(std::fs::read_to_string(&forgets).unwrap(), text, "the edit applies");
    let out =
        run(&["conform", "--profile", forgets.to_str().unwrap(), "--store", "sqlite", "--cases", "300", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let report = json(&out);
    let s1 = report["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["property"] == "S1" && !s["divergence"].is_null())
        .expect("an S1 schedule diverges");
    assert!(
        s1["divergence"]["finding"]
            .as_str()
            .unwrap()
            .starts_with("your statements let this stale mark_published apply"),
        "{s1}"
    );
    let no_version = write("no-version.toml", text.replace(", version AS row_version", ""));
    let out = run(&["conform", "--profile", no_version.to_str().unwrap(), "--store", "sqlite", "--cases", "5"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.trim_end().lines().count() == 1 && err.contains("observe.mark_failed") && err.contains("row_version"),
        "{err}"
    );
}

/// A rescuer's statements are held against the design's rescuer: the typical job queue's
/// by-id rescuer agrees with a design that says "by id", and the same statements declared as a
/// token-fenced rescuer are caught moving a row they read that is no longer what they read.
#[test]
fn a_rescuers_statements_are_held_against_the_designs_rescuer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out =
        run(&["conform", "--profile", "docs/examples/jobs/job-queue.profile.toml", "--store", "sqlite", "--json"]);
    let report = json(&out);
    assert!(report["divergence"].is_null(), "{}", report["divergence"]);
    assert_eq!(report["verdict"], "violated");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiles/rescuer/jobs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("docs/examples/jobs/schema.sql"), dir.join("schema.sql")).unwrap();
    let design = std::fs::read_to_string(root.join("docs/examples/job-queue.toml")).unwrap();
    let token = design
        .replace("fence = \"id\"", "fence = \"token\"")
        .replace("name = \"job-queue\"", "name = \"job-queue-token-rescuer\"");
    assert_ne!(token, design);
    std::fs::write(dir.parent().unwrap().join("job-queue.toml"), token).unwrap();
    std::fs::copy(root.join("docs/examples/jobs/job-queue.profile.toml"), dir.join("job-queue.profile.toml")).unwrap();
    let out = run(&[
        "conform",
        "--profile",
        dir.join("job-queue.profile.toml").to_str().unwrap(),
        "--store",
        "sqlite",
        // A rescue of a row claimed since its read needs a read, an expiry, a claim and the
        // move in that order: a few hundred cases find it (256 did before the sequences also
        // had to present other tenants, budgets and retry ladders).
        "--cases",
        "1000",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(report["verdict"], "diverged");
    let d = &report["divergence"];
    assert!(d["ops"].as_array().unwrap().iter().any(|op| op["op"] == "rescue"), "{d}");
    assert!(
        d["sql"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().contains("state = CASE WHEN attempt >=")),
        "{d}"
    );
}

const NATIVE: &str = "docs/examples/native/native.profile.toml";

/// `conform --json` of a profile on the PostgreSQL server at `url`.
fn conform_json_on(url: &str, profile: &Path, cases: &str) -> Output {
    run(&[
        "conform",
        "--profile",
        profile.to_str().unwrap(),
        "--store",
        "postgres",
        "--database-url",
        url,
        "--cases",
        cases,
        "--json",
    ])
}

/// A copy of the native example (schema and profile), each edited.
fn native_variant(name: &str, schema: impl Fn(String) -> String, profile: impl Fn(String) -> String) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiles").join(name.trim_end_matches(".toml"));
    std::fs::create_dir_all(&dir).unwrap();
    let ddl = std::fs::read_to_string(root.join("docs/examples/native/schema.sql")).unwrap();
    std::fs::write(dir.join("schema.sql"), schema(ddl)).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, profile(std::fs::read_to_string(root.join(NATIVE)).unwrap())).unwrap();
    path
}

/// PostgreSQL SQL as its authors write it runs unchanged in the run's scratch database: a
/// schema, enums, uuid ids, timestamps from now(), an interval, an array of ids, a PL/pgSQL
/// claim, `RETURNING *` with jsonb and array columns. The run's clock stands in for now(); a
/// clock it cannot stand in for is one line naming where it is; and the runs can still fail.
#[test]
fn real_postgresql_sql_runs_as_written() {
    let Some(url) = common::pg_url("the native PostgreSQL profile tests") else { return };
    let pg = |profile: &Path, cases: &str| conform_json_on(&url, profile, cases);
    // As written: agrees, and says what it did not read.
    let out = pg(Path::new(NATIVE), "60");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let report = json(&out);
    assert_eq!(report["verdict"], "agrees");
    assert_eq!(report["fields"]["not_read"], serde_json::json!(["task_id", "max_attempts", "payload", "tags"]));
    assert_eq!(report["fields"]["not_compared"], serde_json::json!([]));
    assert_eq!(report["scratch"], "database", "the role here may create databases");
    if let Some(history) = report["concurrent"]["history"].as_str() {
        let _ = std::fs::remove_file(history);
    }
    // A queue that keeps no tenant: one tenant in the random sequences, the schedules of two
    // not replayed (and said), and a lease's tenant is its row's.
    let single = native_variant(
        "native-single.toml",
        |s| {
            s.replace("    tenant       integer NOT NULL,\n", "")
                .replace("d.tenant = p_tenant AND ", "")
                .replace("(tenant, state, run_at)", "(state, run_at)")
        },
        |p| {
            p.replace(" AND tenant = :tenant", "")
                .replace("(id, task_id, tenant, max_attempts)", "(id, task_id, max_attempts)")
                .replace(":tenant, :max_attempts)", ":max_attempts)")
                .replace("tenant_id = \"tenant\"\n", "")
        },
    );
    let out = pg(&single, "60");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let report = json(&out);
    assert_eq!(report["fields"]["not_compared"], serde_json::json!(["tenant_id"]));
    assert!(!report["schedules_not_run"].as_array().unwrap().is_empty(), "{report}");
    assert!(report["schedules"].as_array().unwrap().len() > 10, "{report}");
    // A completion that no longer checks the token is caught through the uuid array.
    let lax = native_variant("native-lax.toml", |s| s, |p| p.replacen(" AND lock_token = :token\"\"\"", "\"\"\"", 1));
    let out = pg(&lax, "60");
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(report["verdict"], "diverged");
    assert!(report["divergence"].to_string().contains("ANY(ARRAY['00000000-0000-0000-0000-"), "{report}");
    // The claim's LIMIT written in: the run asks for no more rows than it takes.
    let one = native_variant(
        "native-limit.toml",
        |s| s.replace("LIMIT p_batch", "LIMIT 1").replace("p_lease interval, p_batch integer", "p_lease interval"),
        |p| {
            p.replace(
                "queue.claim(:tenant, :owner, :lease_ms, :batch)",
                "queue.claim(:tenant, :owner, :lease_ms) LIMIT 1",
            )
        },
    );
    let out = pg(&one, "40");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    // Leases of an hour: the run's times scale, and still agree; an expiry checked against the
    // real clock in the claim is refused, naming the function.
    let hour = native_variant("native-hour.toml", |s| s, |p| p.replace("lease = \"30s\"", "lease = \"1h\""));
    assert_eq!(pg(&hour, "40").status.code(), Some(0));
    let real = native_variant("native-real-clock.toml", |s| s.replacen("<= now()", "<= pg_catalog.now()", 1), |p| p);
    let out = pg(&real, "5");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("function queue.claim(") && err.contains("pg_catalog.now()"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // A default that is syntax, not a function, reads the real clock: named, exit 2.
    let default = native_variant(
        "native-default.toml",
        |s| {
            s.replace(
                "created      timestamptz NOT NULL DEFAULT now()",
                "created timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP",
            )
        },
        |p| p,
    );
    let err = String::from_utf8_lossy(&pg(&default, "5").stderr).to_string();
    assert!(err.contains("column jobs.created DEFAULT CURRENT_TIMESTAMP"), "{err}");
    // A function that sets its own search path reads pg_catalog's now(): named, exit 2.
    let pinned = native_variant(
        "native-pinned.toml",
        |s| {
            s.replace(
                "RETURNS SETOF queue.jobs LANGUAGE plpgsql AS",
                "RETURNS SETOF queue.jobs LANGUAGE plpgsql SET search_path = pg_catalog, queue AS",
            )
        },
        |p| p,
    );
    let out = pg(&pinned, "5");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sets its own search_path"));
    // A label the enum does not have is the profile's problem, named.
    let label = native_variant("native-label.toml", |s| s.replace("ENUM ('timeout', ", "ENUM ("), |p| p);
    let out = pg(&label, "20");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("queue.failure"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A design with a scheduler (River's JobSchedule, Oban's stage_jobs) takes the profile's
/// `schedule` statement: run as time passes in the random sequences and where the model
/// checker's paths run it. A scheduler that waits one step too long is caught; a profile without
/// the statement says where the paths stop and what no case ran, and still gives a verdict.
#[test]
fn a_schedulers_statement_is_held_against_the_designs_scheduler() {
    let Some(url) = common::pg_url("the scheduler profile tests") else { return };
    // The scheduler keeps the time a job became due as the claim's order key (decision 92):
    // `created`, which the claim orders by once `run_at` is cleared.
    let schedule = "schedule = \"\"\"\nUPDATE queue.jobs SET created = run_at, run_at = NULL\n WHERE state IN ('available', 'unknown') AND run_at <= now()\nRETURNING *\"\"\"\nrows = ";
    let variant = |name: &str, statement: &str| {
        let path = native_variant(
            name,
            |s| s.replace("AND (d.run_at IS NULL OR d.run_at <= now())", "AND d.run_at IS NULL"),
            |p| p.replace("design = \"reference\"", "design = \"scheduler.toml\"").replace("rows = ", statement),
        );
        std::fs::write(
            path.with_file_name("scheduler.toml"),
            "name = \"reference-scheduler\"\nbased_on = \"reference\"\n[maintenance]\nscheduler = true\n",
        )
        .unwrap();
        path
    };
    let pg = |profile: &Path| conform_json_on(&url, profile, "100");
    let out = pg(&variant("sched.toml", schedule));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    assert_eq!(report["verdict"], "agrees");
    assert!(report["exercised"]["schedules"].as_u64().unwrap() > 0, "{report}");
    // The concurrent run's relays and the scheduler beside them: every message ends terminal (a
    // retried one only once the scheduler moved it) and the oracle, reading the scheduler's
    // steps, finds the history consistent with the design.
    let c = &report["concurrent"];
    assert!(c["oracle"].is_null() && c["not_terminal"] == serde_json::json!([]), "{c}");
    assert!(report["schedules"].as_array().unwrap().iter().all(|s| s["stopped"].is_null()), "{report}");
    // `<` where the design says "has passed": a row due exactly now is left waiting.
    let strict = variant("sched-strict.toml", &schedule.replace("run_at <= now()", "run_at < now()"));
    let out = pg(&strict);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(json(&out)["verdict"], "diverged");
    // No statement: paths stop where the design's scheduler runs, and the report says so.
    let none = variant("sched-none.toml", "rows = ");
    let out = pg(&none);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    let stopped: Vec<&str> =
        report["schedules"].as_array().unwrap().iter().filter_map(|s| s["stopped"].as_str()).collect();
    assert!(
        !stopped.is_empty() && stopped.iter().all(|s| s.ends_with("your profile has no schedule statement")),
        "{report}"
    );
    assert!(report["not_exercised"].to_string().contains("no schedule statement"), "{report}");
    assert!(report["concurrent_not_run"].as_str().unwrap().contains("no schedule statement"), "{report}");
}

/// The report starts with its verdict and what to do; `--quiet` is that line, the first
/// counterexample and the file holding every script.
#[test]
fn the_verdict_comes_first_and_quiet_is_short() {
    let out = run(&["conform", "--profile", JOBS, "--store", "sqlite", "--cases", "30"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("agrees: the SQL of docs/examples/jobs/jobs.profile.toml does what reference does"),
        "{text}"
    );
    let lie = variant_of("quiet-lie.toml", |t| t.replace(" AND lock_token = :token", ""));
    let out = run(&["conform", "--profile", lie.to_str().unwrap(), "--store", "sqlite", "--cases", "100", "--quiet"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("diverged: ") && first.contains("fix the statements"), "{text}");
    assert!(text.lines().count() < 25, "{text}");
    assert!(!text.contains("UPDATE jobs"), "the scripts go to the file: {text}");
    let path = text.lines().last().unwrap().split("every SQL script of this report: ").nth(1).expect("the file's path");
    let scripts = std::fs::read_to_string(path).unwrap();
    assert!(scripts.contains("UPDATE jobs SET") && scripts.contains("-- the random sequences' shrunk divergence"));
    std::fs::remove_file(path).unwrap();
}

const RIVER: &str = "docs/examples/river/river.profile.toml";

/// A copy of River's example (its design, migrations and profile), the profile edited.
fn river_variant(name: &str, profile: impl Fn(String) -> String) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/river");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiles").join(name.trim_end_matches(".toml"));
    std::fs::create_dir_all(dir.join("migrations")).unwrap();
    std::fs::copy(root.join("design.toml"), dir.join("design.toml")).unwrap();
    for f in std::fs::read_dir(root.join("migrations")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join("migrations").join(f.file_name())).unwrap();
    }
    let path = dir.join(name);
    std::fs::write(&path, profile(std::fs::read_to_string(root.join("river.profile.toml")).unwrap())).unwrap();
    path
}

/// River's queries run byte for byte — sqlc's parameters, River's template markers, the ids its
/// sequence gives, jsonb, boolean and timestamp arrays, a write that returns its row either
/// way, a rescuer whose Go code picks the state — and get a verdict about River's SQL; the same
/// run fails where the statements are changed, and a format slip is one line each.
#[test]
fn rivers_sql_runs_as_its_authors_wrote_it() {
    let Some(url) = common::pg_url("River's profile") else { return };
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(RIVER)).unwrap();
    // The statements are River's own: sqlc's syntax and the template markers are in the file.
    for written in ["@max_to_lock::integer", "sqlc.narg('now')", "sqlc.embed(river_job)", "/* TEMPLATE: schema */"] {
        assert!(text.contains(written), "{written}");
    }
    let out = conform_json_on(&url, Path::new(RIVER), "60");
    let report = json(&out);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(report["verdict"], "violated", "{report}");
    assert!(report["divergence"].is_null(), "{report}");
    let exercised = &report["exercised"];
    for situation in ["rescues", "schedules", "budgets_spent"] {
        assert!(exercised[situation].as_u64().unwrap() > 0, "{situation}: {exercised}");
    }
    // Observed by the row changing: counted by the rows it returns, every write would apply.
    let counted = river_variant("river-counted.toml", |p| p.replace("= \"row-changed\"", "= \"returning\""));
    let out = conform_json_on(&url, &counted, "60");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["verdict"], "diverged");
    // A result written whatever the job's state now is (River's guard dropped) is caught.
    let lax = river_variant("river-lax.toml", |p| {
        p.replace(
            "            WHEN river_job.state = 'running'\n            THEN job_input.state",
            "            WHEN true\n            THEN job_input.state",
        )
        .replace("\n      AND (river_job.state = 'running' OR job_input.metadata_do_merge)", "")
    });
    assert_eq!(std::fs::read_to_string(&lax).unwrap().matches("WHEN true").count(), 5);
    let out = conform_json_on(&url, &lax, "60");
    assert_eq!(json(&out)["verdict"], "diverged");
    // Format slips, one line each: a template with no text; a [parameters] name no statement
    // has, one mapped onto a value the statement does not get, a table for no statement.
    let untemplated = river_variant("river-untemplated.toml", |p| p.replace("[templates]\nschema = \"\"\n", ""));
    let out = conform_json_on(&url, &untemplated, "5");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/* TEMPLATE: schema */") && err.contains("statements.claim"), "{err}");
    let slips = river_variant("river-slips.toml", |p| {
        p.replace("max = 1000\n", "max = 1000\nmax_to_lok = \":batch\"\n")
            .replace("after_id = 0\n", "after_id = \":owner\"\n")
            .replace(
                "[parameters.rescue]\n",
                "[parameters.rescue_all]\nx = 1\n\n[parameters.mark_published.3]\ny = 1\n\n[parameters.rescue]\n",
            )
    });
    let out = conform_json_on(&url, &slips, "5");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for said in [
        "parameters.rescue_all.x: your profile has no statements.rescue_all",
        "parameters.mark_published.3.y: statements.mark_published is 1 statement, and there is no statement 3",
        "parameters.max_to_lok",
        ":owner (given by [parameters] after_id",
    ] {
        assert!(err.contains(said), "{said}: {err}");
    }
    assert!(err.lines().all(|l| !l.trim().is_empty()), "{err}");
}

const UNDERWAY: &str = "docs/examples/underway/underway.profile.toml";

/// A copy of underway's profile, changed by `profile`, beside a copy of its migrations.
fn underway_variant(name: &str, profile: impl Fn(String) -> String) -> PathBuf {
    example_variant("underway", "underway.profile.toml", "../underway.toml", name, profile)
}

/// A copy of the profile `file` of example `example` (docs/examples/EXAMPLE), changed by
/// `profile`, beside a copy of its migrations; its design, `design`, by its whole path.
fn example_variant(example: &str, file: &str, design: &str, name: &str, profile: impl Fn(String) -> String) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples").join(example);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiles").join(name.trim_end_matches(".toml"));
    std::fs::create_dir_all(dir.join("migrations")).unwrap();
    for f in std::fs::read_dir(root.join("migrations")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join("migrations").join(f.file_name())).unwrap();
    }
    let whole = root.join(design);
    let text = std::fs::read_to_string(root.join(file))
        .unwrap()
        .replace(&format!("design = {design:?}"), &format!("design = {:?}", whole.to_str().unwrap()));
    let path = dir.join(name);
    std::fs::write(&path, profile(text)).unwrap();
    path
}

/// underway's own SQL (its migrations, sqlx's queries of src/queue.rs) does what its design
/// file says; each result is several statements in one transaction that holds only where every
/// one changed a row. A completion no longer fenced by the attempt is caught, and so is a result
/// whose first statement matches nothing while the rest would apply.
#[test]
fn underways_sql_runs_as_its_authors_wrote_it() {
    let Some(url) = common::pg_url("underway's profile") else { return };
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(UNDERWAY)).unwrap();
    // The statements are underway's own: sqlx's column overrides and `$n` are in the file.
    for written in ["c.id as \"id: TaskId\"", "c.current_attempt as \"attempt_number!\"", "set local search_path"] {
        assert!(
            text.contains(written)
                || std::fs::read_to_string(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("docs/examples/underway/migrations/20240921151751_0.sql")
                )
                .unwrap()
                .contains(written),
            "{written}"
        );
    }
    let out = conform_json_on(&url, Path::new(UNDERWAY), "60");
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(report["verdict"], "agrees", "{report}");
    let c = &report["concurrent"];
    assert!(c["oracle"].is_null() && c["not_terminal"] == serde_json::json!([]), "{c}");
    for situation in ["budgets_spent", "superseded_writes", "reaps"] {
        assert!(report["exercised"][situation].as_u64().unwrap() > 0, "{situation}: {report}");
    }
    // Completion's second statement, the task's update, without `current_attempt = $4` (`$4 > 0`
    // keeps the parameter): still fenced, by the first — a superseded worker's attempt row was
    // failed by the claim that took the task back, so it matches nothing and the transaction
    // holds neither. Without the first statement's `attempt_number = $4` as well, a superseded
    // worker's completion applies.
    let task_unfenced = |p: String| {
        p.replacen(
            "              and state = $5\n              and current_attempt = $4\n",
            "              and state = $5\n              and $4 > 0\n",
            1,
        )
    };
    let half = underway_variant("underway-half.toml", task_unfenced);
    assert!(std::fs::read_to_string(&half).unwrap().contains("and $4 > 0"));
    let out = conform_json_on(&url, &half, "60");
    assert_eq!(json(&out)["verdict"], "agrees", "{}", String::from_utf8_lossy(&out.stdout));
    let unfenced = underway_variant("underway-unfenced.toml", |p| {
        task_unfenced(p).replacen(
            "              and attempt_number = $4\n              and state = $5\n",
            "              and $4 > 0\n              and state = $5\n",
            1,
        )
    });
    assert_eq!(std::fs::read_to_string(&unfenced).unwrap().matches("and $4 > 0").count(), 2);
    let out = conform_json_on(&url, &unfenced, "60");
    let report = json(&out);
    assert_eq!(report["verdict"], "diverged", "{report}");
    if let Some(history) = report["concurrent"]["history"].as_str() {
        let _ = std::fs::remove_file(history);
    }
    // The attempt's row looked for in another state: the first statement of every retry matches
    // nothing, so the retry must not hold although its later statements would change the task.
    let unmatched = underway_variant("underway-unmatched.toml", |p| {
        p.replacen("[parameters.mark_retry.1]\n\"$2\" = \"outbox\"\n\"$3\" = \"failed\"\n\"$4\" = \"publication failed\"\n\"$5\" = \":token\"\n\"$6\" = \"in_progress\"", "[parameters.mark_retry.1]\n\"$2\" = \"outbox\"\n\"$3\" = \"failed\"\n\"$4\" = \"publication failed\"\n\"$5\" = \":token\"\n\"$6\" = \"succeeded\"", 1)
    });
    assert!(std::fs::read_to_string(&unmatched).unwrap().contains("\"$6\" = \"succeeded\""));
    let out = conform_json_on(&url, &unmatched, "60");
    let report = json(&out);
    assert_eq!(report["verdict"], "diverged", "{report}");
    let d = &report["divergence"];
    assert_eq!(d["expected"], "applied → PENDING", "{d}");
    assert!(d["got"].as_str().unwrap().starts_with("stale"), "{d}");
    // The script shows the write's transaction, rolled back.
    assert!(d["sql"].to_string().contains("ROLLBACK;"), "{d}");
    if let Some(history) = report["concurrent"]["history"].as_str() {
        let _ = std::fs::remove_file(history);
    }
    // A write the concurrent run's relays send, left out: a reason in the report, not exit 2.
    let no_ambiguous = underway_variant("underway-no-ambiguous.toml", |p| {
        let start = p.find("mark_ambiguous = [").unwrap();
        let end = start + p[start..].find("\n]\n").unwrap() + 3;
        let cut = format!("{}{}", &p[..start], &p[end..]);
        let start = cut.find("[parameters.mark_ambiguous.1]").unwrap();
        let end = cut.find("# record_failure, then mark_failed").unwrap();
        format!("{}{}", &cut[..start], &cut[end..])
    });
    let out = conform_json_on(&url, &no_ambiguous, "20");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    assert!(report["concurrent"].is_null(), "{report}");
    assert!(report["concurrent_not_run"].as_str().unwrap().contains("no mark_ambiguous statement"), "{report}");
}

const OBAN: &str = "docs/examples/oban/oban.profile.toml";
/// A real queue's SQL that does what its design says, and breaks what the design breaks: the
/// verdict is violated with no divergence, each situation was exercised, and S1, S2 and S4 are
/// replayed on the SQL along the design's own counterexamples. The report, for more.
fn violated_along_the_designs_paths(out: &Output, situations: &[&str], queue: &str) -> serde_json::Value {
    let report = json(out);
    assert_eq!(report["verdict"], "violated", "{report}");
    assert!(report["divergence"].is_null(), "{report}");
    for situation in situations {
        assert!(report["exercised"][situation].as_u64().unwrap() > 0, "{situation}: {report}");
    }
    let broken: Vec<&str> = report["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["design_breaks"] == true && s["divergence"].is_null())
        .map(|s| s["property"].as_str().unwrap())
        .collect();
    for property in ["S1", "S2", "S4"] {
        assert!(broken.contains(&property), "{property} replayed on {queue}'s SQL: {broken:?}");
    }
    report
}

const GRAPHILE: &str = "docs/examples/graphile-worker/graphile-worker.profile.toml";

/// Graphile Worker's own SQL (its migrations, the query texts of src/sql/*.ts with the
/// TypeScript template filled in) does what its design file says: a failure write whose JSON
/// parameter is built around the run's values, a delay Graphile computes in seconds, a rescuer
/// that unlocks every lock older than 4 hours in one statement. Its SQL replays the design's
/// own S1 and S4: a job unlocked and taken again is deleted by the first attempt's completion.
/// Each of three edits to Graphile's statements is caught.
#[test]
fn graphile_workers_sql_runs_as_its_authors_wrote_it() {
    let Some(url) = common::pg_url("Graphile Worker's profile") else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(GRAPHILE)).unwrap();
    for written in
        ["from ${escapedWorkerSchema}._private_jobs as jobs", "from json_array_elements($2::json) as els(el)"]
    {
        assert!(text.contains(written), "{written}");
    }
    let migration = std::fs::read_to_string(root.join("docs/examples/graphile-worker/migrations/000016.sql")).unwrap();
    assert!(migration.contains(":::GRAPHILE_WORKER_SCHEMA.job_spec"), "the migrations are Graphile's, unedited");
    let out = conform_json_on(&url, Path::new(GRAPHILE), "60");
    let report = violated_along_the_designs_paths(&out, &["budgets_spent", "rescues", "superseded_writes"], "Graphile");
    assert!(report["concurrent_not_run"].as_str().unwrap().contains("rescue_all"), "{report}");
    // Each edit diverges: the unlock at the instant a lock turns 4 hours old (`<=`), the failure
    // write without `locked_by = $1`, and an unlock that leaves `run_at` as it was.
    let edits: [(&str, &str, &str); 3] = [
        (
            "graphile-at-expiry.toml",
            "where locked_at < ${now} - interval '4 hours'\n)",
            "where locked_at <= ${now} - interval '4 hours'\n)",
        ),
        (
            "graphile-unfenced.toml",
            "where id = (el->>'jobId')::bigint and locked_by = $1::text;",
            "where id = (el->>'jobId')::bigint and (locked_by = $1::text or true);",
        ),
        ("graphile-no-restamp.toml", "run_at = greatest(run_at, ${now})", "run_at = run_at"),
    ];
    for (name, from, to) in edits {
        let variant =
            example_variant("graphile-worker", "graphile-worker.profile.toml", "../graphile-worker.toml", name, |p| {
                assert!(p.contains(from), "{from}");
                p.replace(from, to)
            });
        let out = conform_json_on(&url, &variant, "60");
        let report = json(&out);
        assert_eq!(report["verdict"], "diverged", "{name}: {report}");
        // A write in the JSON is named as the statement it runs.
        if name == "graphile-unfenced.toml" {
            let op = &report["divergence"]["op"];
            assert!(op["op"] == "write" && op["kind"].as_str().is_some_and(|k| k.starts_with("mark_")), "{op}");
        }
    }
}

/// Oban's SQL — the statements Ecto sends for its migrations and its Basic engine, recorded
/// unchanged — does what docs/examples/oban.toml says, and along the design's own
/// counterexamples breaks what the model checker says it breaks. Each edit diverges: a Lifeline
/// without its second statement (jobs past their budget stay `executing`), a claim that no
/// longer checks `attempt < max_attempts`, a Stager that stages only jobs due strictly before
/// now, a completion fenced on `executing`.
#[test]
fn obans_sql_runs_as_ecto_sends_it() {
    let Some(url) = common::pg_url("Oban's profile") else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(OBAN)).unwrap();
    for written in [
        "WITH \"subset\" AS (SELECT so0.\"id\" AS \"id\" FROM \"public\".\"oban_jobs\" AS so0",
        "\"errors\" = o0.\"errors\" || $1",
    ] {
        assert!(text.contains(written), "{written}");
    }
    let migration = std::fs::read_to_string(root.join("docs/examples/oban/migrations/01_v01.sql")).unwrap();
    assert!(migration.contains("CREATE TYPE \"public\".oban_job_state AS ENUM"), "Oban's own DDL");
    let out = conform_json_on(&url, Path::new(OBAN), "60");
    let report =
        violated_along_the_designs_paths(&out, &["budgets_spent", "rescues", "schedules", "superseded_writes"], "Oban");
    // The Lifeline's statements name the jobs they moved and where to, so the concurrent run
    // records its rescues in the history: the oracle finds S2 (no token) and nothing of the
    // rescuer's.
    let c = &report["concurrent"];
    let findings: Vec<&str> = c["findings"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(findings.iter().any(|f| f.contains("S2")), "{c}");
    assert!(!findings.iter().any(|f| f.contains("\"rescuer\"")), "{c}");
    if let Some(history) = c["history"].as_str() {
        let _ = std::fs::remove_file(history);
    }
    // A Lifeline that takes jobs half an hour early is caught by the oracle on its history.
    let early = example_variant("oban", "oban.profile.toml", "../oban.toml", "oban-early.toml", |p| {
        p.replacen("(o0.\"attempted_at\" < $2)", "(o0.\"attempted_at\" < $2::timestamp + interval '30 minutes')", 1)
    });
    let c = json(&conform_json_on(&url, &early, "60"))["concurrent"].clone();
    assert!(
        c["findings"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().contains("\"relay\":\"rescuer\"")),
        "{c}"
    );
    if let Some(history) = c["history"].as_str() {
        let _ = std::fs::remove_file(history);
    }
    let rescue_first = "RETURNING o0.\"id\", o0.\"queue\", o0.\"state\"''',\n";
    let edits: [(&str, &str, &str); 4] = [
        (
            "oban-no-discard.toml",
            "''',\n'''\nUPDATE \"public\".\"oban_jobs\" AS o0 SET \"state\" = $1, \"discarded_at\"",
            "",
        ),
        ("oban-claim-no-budget.toml", " AND (o0.\"attempt\" < o0.\"max_attempts\")", ""),
        ("oban-stage-strict.toml", "(so0.\"scheduled_at\" <= $2)", "(so0.\"scheduled_at\" < $2)"),
        (
            "oban-complete-fenced.toml",
            "SET \"state\" = $1, \"completed_at\" = $2 WHERE (o0.\"id\" = $3)",
            "SET \"state\" = $1, \"completed_at\" = $2 WHERE (o0.\"id\" = $3) AND o0.\"state\" = 'executing'",
        ),
    ];
    for (name, from, to) in edits {
        let variant = example_variant("oban", "oban.profile.toml", "../oban.toml", name, |p| {
            assert!(p.contains(from), "{from}");
            if name == "oban-no-discard.toml" {
                // The Lifeline's first statement alone.
                let start = p.find("rescue_all = [\n").unwrap();
                let first_end = start + p[start..].find(rescue_first).unwrap() + rescue_first.len() - 2;
                let end = start + p[start..].find("]\n# outbox-check").unwrap() + 2;
                let one = p[start + "rescue_all = [\n".len()..first_end].to_string();
                let p = format!("{}rescue_all = {one}\n{}", &p[..start], &p[end..]);
                p.replace(
                    "[parameters.rescue_all.2]\n\"$1\" = \"discarded\"\n\"$2\" = \":now\"\n\"$3\" = \":horizon\"\n",
                    "",
                )
            } else {
                p.replace(from, to)
            }
        });
        // A job past its budget stuck, or claimed, is rarer than one case in sixty: the default
        // number of cases.
        let out = conform_json_on(&url, &variant, "256");
        assert_eq!(json(&out)["verdict"], "diverged", "{name}: {}", json(&out));
    }
}

/// Constants of `[parameters]` bound as the server types their parameters — a composite value
/// with one of the run's values among its fields, an interval, a float, an array of several
/// elements, NULL — checked by the table itself (a CHECK constraint the enqueue must meet).
#[test]
fn parameters_bind_composites_intervals_floats_arrays_and_null() {
    let Some(url) = common::pg_url("the [parameters] constants test") else { return };
    let schema = |s: String| {
        s + "\nCREATE TYPE queue.retry_policy AS (tries integer, base_ms integer, factor float8);\n\
             ALTER TABLE queue.jobs\n\
               ADD COLUMN policy queue.retry_policy NOT NULL DEFAULT ROW(0, 0, 0),\n\
               ADD COLUMN pause interval NOT NULL DEFAULT interval '1 day',\n\
               ADD COLUMN weight float8 NOT NULL DEFAULT 0,\n\
               ADD COLUMN labels text[] NOT NULL DEFAULT '{}',\n\
               ADD COLUMN note text DEFAULT 'unset',\n\
               ADD CONSTRAINT constants_bound CHECK ((policy).tries = max_attempts AND (policy).base_ms = 1000\n\
                 AND (policy).factor = 2.5 AND pause = interval '15 minutes' AND weight = 0.5\n\
                 AND labels = ARRAY['a', 'b'] AND note IS NULL);\n"
    };
    let profile = |weight: &str| {
        let weight = weight.to_string();
        move |p: String| {
            p.replace(
                "(id, task_id, tenant, max_attempts)",
                "(id, task_id, tenant, max_attempts, policy, pause, weight, labels, note)",
            )
            .replace(":tenant, :max_attempts)", ":tenant, :max_attempts, :policy, :pause, :weight, :labels, :note)")
                + &format!(
                    "\n[parameters.enqueue]\npolicy = [\":max_attempts\", 1000, 2.5]\npause = \"15m\"\nweight = {weight}\nlabels = [\"a\", \"b\"]\nnote = \":null\"\n"
                )
        }
    };
    let bound = native_variant("native-constants.toml", schema, profile("0.5"));
    let out = conform_json_on(&url, &bound, "30");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["verdict"], "agrees");
    // One constant off, and the table refuses the enqueue.
    let off = native_variant("native-constants-off.toml", schema, profile("0.25"));
    let out = conform_json_on(&url, &off, "30");
    assert_ne!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("constants_bound")
            || String::from_utf8_lossy(&out.stderr).contains("constants_bound")
    );
}
