//! No scratch schema or database outlives its run: SIGINT and SIGTERM during `conform --store
//! postgres` drop the run's schema (a profile's: its database) before it exits; a run killed outright (SIGKILL) leaves one, which the
//! next run's first connection or `conform --clean-up` drops — and a schema outbox-check did not
//! make is never touched. Needs `OUTBOX_CHECK_PG_URL` (NOT RUN without it; a failure without it
//! under `OUTBOX_CHECK_REQUIRE_PG=1`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
mod process;

/// The two tests run one after the other: every run's first connection drops what killed runs
/// left, so a run of one test would clean up the other's SIGKILLed schema before it looks.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn client(url: &str) -> postgres::Client {
    outbox_check::store::postgres::check_url(url, false).unwrap().connect(postgres::NoTls).unwrap()
}

/// The scratch schemas and databases the process `pid` made that still exist.
fn schemas_of(db: &mut postgres::Client, pid: u32) -> Vec<String> {
    db.query(
        "SELECT nspname::text FROM pg_namespace WHERE obj_description(oid, 'pg_namespace') = $1
          UNION ALL SELECT datname::text FROM pg_database WHERE shobj_description(oid, 'pg_database') = $1",
        &[&format!("{} (pid {pid})", outbox_check::store::postgres::MARKER)],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// A SQL profile's run works in a scratch database of its own, the built-in SQL's in a schema.
const PROFILE: [&str; 2] = ["--profile", "docs/examples/native/native.profile.toml"];

/// A long conformance run (of `args`: a profile, or none), started and waited for until it
/// holds a scratch schema or database.
fn long_run(url: &str, db: &mut postgres::Client, args: &[&str]) -> process::Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(["conform", "--store", "postgres", "--cases", "1000000", "--quiet", "--database-url", url])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    while schemas_of(db, pid).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "the run made no scratch schema in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Well into the run: cases are being checked in the schema.
    std::thread::sleep(Duration::from_millis(300));
    process::Killed(child)
}

/// Waits until no session holds the advisory lock of `pid`'s scratch schemas: a SIGKILLed
/// client's backend notices its closed socket and ends a moment later.
fn wait_for_lock_release(db: &mut postgres::Client, pid: u32) {
    let started = Instant::now();
    for schema in schemas_of(db, pid) {
        let key = u64::from_str_radix(&schema[13..], 16).unwrap() as u32;
        loop {
            // The two-key form of an advisory lock: class and key as oids, objsubid 2.
            let sql = format!(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = {} AND objid = {key} AND objsubid = 2",
                0x6f62_6f78_u32
            );
            let held: i64 = db.query_one(sql.as_str(), &[]).unwrap().get(0);
            if held == 0 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the killed run's session held its lock for 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn signal(child: &process::Killed, signal: i32) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, signal) }, 0);
}

#[test]
fn sigint_and_sigterm_drop_the_scratch_schema_before_exiting() {
    let Some(url) = common::pg_url("the scratch-schema signal tests") else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut db = client(&url);
    for (sig, code, args) in
        [(libc::SIGINT, 130, &[][..]), (libc::SIGTERM, 143, &[][..]), (libc::SIGINT, 130, &PROFILE[..])]
    {
        let mut run = long_run(&url, &mut db, args);
        let pid = run.0.id();
        signal(&run, sig);
        let status = run.0.wait().unwrap();
        assert_eq!(status.code(), Some(code), "signal {sig}: exit status {status:?}");
        assert!(schemas_of(&mut db, pid).is_empty(), "signal {sig} left {:?}", schemas_of(&mut db, pid));
    }
}

/// A run of `args` SIGKILLed leaves its scratch schema or database; `--clean-up` drops it.
fn killed_then_cleaned_up(url: &str, db: &mut postgres::Client, args: &[&str]) {
    let mut run = long_run(url, db, args);
    let pid = run.0.id();
    signal(&run, libc::SIGKILL);
    run.0.wait().unwrap();
    assert!(!schemas_of(db, pid).is_empty(), "SIGKILL cannot clean up: the scratch space should still be there");
    wait_for_lock_release(db, pid);
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(["conform", "--store", "postgres", "--clean-up", "--database-url", url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("dropped"), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(schemas_of(db, pid).is_empty(), "clean-up left {:?}", schemas_of(db, pid));
}

#[test]
fn a_killed_runs_schema_is_dropped_by_clean_up_and_a_foreign_schema_is_kept() {
    let Some(url) = common::pg_url("the scratch-schema signal tests") else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut db = client(&url);
    // A schema with outbox-check's name pattern but not its marker: never ours to drop.
    let foreign = "outbox_check_00000000deadbeef";
    db.batch_execute(&format!("DROP SCHEMA IF EXISTS {foreign}; CREATE SCHEMA {foreign}")).unwrap();
    killed_then_cleaned_up(&url, &mut db, &[]);
    let kept: i64 = db.query_one("SELECT count(*) FROM pg_namespace WHERE nspname = $1", &[&foreign]).unwrap().get(0);
    assert_eq!(kept, 1, "clean-up dropped a schema outbox-check did not make");
    db.batch_execute(&format!("DROP SCHEMA {foreign}")).unwrap();

    // A profile's scratch database, likewise.
    killed_then_cleaned_up(&url, &mut db, &PROFILE);

    // And without --clean-up: the next run's first connection drops what a killed run left.
    let mut run = long_run(&url, &mut db, &[]);
    let pid = run.0.id();
    signal(&run, libc::SIGKILL);
    run.0.wait().unwrap();
    assert!(!schemas_of(&mut db, pid).is_empty());
    wait_for_lock_release(&mut db, pid);
    let next = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(["conform", "--store", "postgres", "--cases", "2", "--quiet", "--database-url", &url])
        .output()
        .unwrap();
    assert_eq!(next.status.code(), Some(0), "{}", String::from_utf8_lossy(&next.stderr));
    assert!(schemas_of(&mut db, pid).is_empty(), "the next run left {:?}", schemas_of(&mut db, pid));
}
