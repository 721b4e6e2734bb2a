//! `outbox-check record`: the database-side recorder in a test database, around statements run
//! by hand as an integration test would run them, from sessions of their own.

use std::path::Path;
use std::process::{Command, Output};

mod common;

const NATIVE: &str = "docs/examples/native";

fn outbox_check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A database of the test's own, dropped when it ends (also when it fails).
struct Scratch {
    admin: String,
    name: String,
    url: String,
}

impl Scratch {
    fn new(url: &str, name: &str) -> Scratch {
        let name = format!("outbox_check_{name}_{}", std::process::id());
        let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        // The same server, the scratch database (the URL's last segment names the database).
        let inside = format!("{}/{name}", url.rsplit_once('/').unwrap().0);
        Scratch { admin: url.to_string(), name, url: inside }
    }

    fn session(&self, application: &str) -> postgres::Client {
        let mut config: postgres::Config = self.url.parse().unwrap();
        config.application_name(application);
        config.connect(postgres::NoTls).unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

const JOB_1: &str = "00000000-0000-0000-0000-000000000001";
const JOB_2: &str = "00000000-0000-0000-0000-000000000002";

/// Statements an integration test of the native example's queue runs, from an application
/// session and two workers: two jobs enqueued; worker-a takes the first and completes it with
/// its token. With `by_id`, worker-a then takes the second with a lease of 20 ms, worker-b takes
/// it back once that expired, and worker-a completes it by id alone — a stale completion that
/// applies.
fn integration_test(db: &Scratch, by_id: bool) {
    let mut app = db.session("app");
    let mut a = db.session("worker-a");
    let mut b = db.session("worker-b");
    for id in [JOB_1, JOB_2] {
        app.execute(
            "INSERT INTO queue.jobs (id, task_id, tenant, max_attempts) \
             VALUES ($1::text::uuid, (SELECT id FROM queue.tasks WHERE identifier = 'send_email'), 1, 3)",
            &[&id],
        )
        .unwrap();
    }
    let claim = "SELECT lock_token FROM queue.claim(1, 1, $1::text::interval, 1)";
    let token: i64 = a.query_one(claim, &[&"30 seconds"]).unwrap().get(0);
    let done = a
        .execute(
            "UPDATE queue.jobs SET state = 'completed', locked_by = NULL, locked_until = NULL, finished = now() \
              WHERE id = $1::text::uuid AND state = 'running' AND lock_token = $2",
            &[&JOB_1, &token],
        )
        .unwrap();
    assert_eq!(done, 1);
    if by_id {
        a.query_one(claim, &[&"20 milliseconds"]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(80));
        b.query_one(claim, &[&"30 seconds"]).unwrap();
        let late = a
            .execute(
                "UPDATE queue.jobs SET state = 'completed', locked_by = NULL, locked_until = NULL, finished = now() \
                  WHERE id = $1::text::uuid",
                &[&JOB_2],
            )
            .unwrap();
        assert_eq!(late, 1);
    }
}

/// `record start` needs consent; it then logs every change the sessions commit, `record stop`
/// writes a history the oracle reads and removes every object it installed — the user's table
/// and rows untouched. The history of a correct run is consistent with the design; the one with
/// a completion by id after the lease moved on breaks S1, found black-box.
#[test]
fn record_turns_a_hand_run_integration_test_into_a_checked_history() {
    let Some(url) = common::pg_url("the recorder test") else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = std::fs::read_to_string(root.join(NATIVE).join("schema.sql")).unwrap();
    let profile = format!("{NATIVE}/native.profile.toml");
    for by_id in [false, true] {
        let db = Scratch::new(&url, if by_id { "record_by_id" } else { "record" });
        db.session("setup").batch_execute(&schema).unwrap();
        let refused = outbox_check(&["record", "start", "--database-url", &db.url, "--table", "queue.jobs"]);
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
        assert!(text(&refused).contains("--install"), "{}", text(&refused));
        let start = outbox_check(&["record", "start", "--database-url", &db.url, "--table", "queue.jobs", "--install"]);
        assert_eq!(start.status.code(), Some(0), "{}", text(&start));
        let again = outbox_check(&["record", "start", "--database-url", &db.url, "--table", "queue.jobs", "--install"]);
        assert_eq!(again.status.code(), Some(2), "{}", text(&again));
        integration_test(&db, by_id);
        let history = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("recorded-{by_id}.jsonl"));
        let stop_recording = || {
            outbox_check(&[
                "record",
                "stop",
                "--database-url",
                &db.url,
                "--profile",
                &profile,
                "--out",
                history.to_str().unwrap(),
            ])
        };
        let stop = stop_recording();
        assert_eq!(stop.status.code(), Some(0), "{}", text(&stop));
        assert!(text(&stop).contains("worker-a") && text(&stop).contains("not seen by a recorder"), "{}", text(&stop));
        // Nothing of the recorder is left; the user's rows are.
        let mut check = db.session("check");
        let left: i64 = check
            .query_one(
                "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'outbox_check_recorder') \
                      + (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'outbox_check_recorder%')",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(left, 0);
        let rows: i64 = check.query_one("SELECT count(*) FROM queue.jobs", &[]).unwrap().get(0);
        assert_eq!(rows, 2);
        let recorded = std::fs::read_to_string(&history).unwrap();
        let claims = recorded.lines().filter(|l| l.contains("\"event\":\"claim\"")).count();
        assert_eq!(claims, if by_id { 3 } else { 1 }, "{recorded}");
        let trace = outbox_check(&["trace", "--json", history.to_str().unwrap(), "--design", "reference"]);
        let verdict: serde_json::Value =
            serde_json::from_slice(&trace.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&trace)));
        let file = &verdict["files"][0];
        if by_id {
            assert_eq!(trace.status.code(), Some(1), "{verdict}");
            assert_eq!(file["divergence"]["property"], "S1", "{verdict}\n{recorded}");
        } else {
            assert_eq!(
                (trace.status.code(), file["verdict"].as_str()),
                (Some(0), Some("consistent")),
                "{verdict}\n{recorded}"
            );
        }
        let _ = std::fs::remove_file(&history);
        // Stopping twice: no recording is running.
        let twice = stop_recording();
        assert_eq!(twice.status.code(), Some(2), "{}", text(&twice));
        assert!(!history.exists());
    }
}
