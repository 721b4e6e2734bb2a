//! Shared by the tests that need a service: the PostgreSQL server's URL, or a NOT RUN line (a
//! failure instead under `OUTBOX_CHECK_REQUIRE_PG=1`, as .ci/run sets).

/// Says, where a person sees it, that a test did not run: straight to the process's stderr,
/// which the test harness does not capture (it captures `println!` and `eprintln!`), so the
/// line shows beside "ok" instead of hiding behind it. `.ci/run` lists these lines at the end.
#[allow(dead_code)]
pub fn not_run(what: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "NOT RUN: {what}");
}

#[allow(dead_code)]
pub fn pg_url(what: &str) -> Option<String> {
    match std::env::var("OUTBOX_CHECK_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("OUTBOX_CHECK_REQUIRE_PG").as_deref() != Ok("1"),
                "OUTBOX_CHECK_REQUIRE_PG=1 but OUTBOX_CHECK_PG_URL is not set"
            );
            not_run(&format!("{what} need OUTBOX_CHECK_PG_URL (e.g. postgresql://postgres@127.0.0.1:5432/test)"));
            None
        }
    }
}

/// The nats-server program, or a NOT RUN line (a failure instead under
/// `OUTBOX_CHECK_REQUIRE_NATS=1`, as .ci/run sets).
#[allow(dead_code)]
pub fn nats_server(what: &str) -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("nats-server")).find(|p| p.is_file()));
    let found = on_path.or_else(|| Some(std::path::PathBuf::from("/usr/sbin/nats-server")).filter(|p| p.is_file()));
    if found.is_none() {
        assert!(
            std::env::var("OUTBOX_CHECK_REQUIRE_NATS").as_deref() != Ok("1"),
            "OUTBOX_CHECK_REQUIRE_NATS=1 but nats-server is not installed (Debian's package nats-server)"
        );
        not_run(&format!("{what} need nats-server (Debian's package nats-server)"));
    }
    found
}

/// Runs `command` to its end, as `Command::output`, but gives up after `limit`: the process is
/// killed and the test fails with what it printed so far. A run that hangs then fails where a
/// person reads why, instead of holding the whole test run until CI's own limit.
#[allow(dead_code)]
pub fn output_within(command: &mut std::process::Command, limit: std::time::Duration) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the program starts");
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the program can be waited for") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{command:?} did not end within {} s; it printed: {}",
                limit.as_secs(),
                String::from_utf8_lossy(&stderr.join().unwrap_or_default())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let (stdout, stderr) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
    std::process::Output { status, stdout, stderr }
}

/// Where `value` departs from the e2e report's JSON Schema (docs/json/e2e.schema.json); empty
/// where it matches.
#[allow(dead_code)]
pub fn e2e_schema_errors(value: &serde_json::Value) -> Vec<String> {
    let schema: serde_json::Value = serde_json::from_str(include_str!("../../docs/json/e2e.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    validator.iter_errors(value).map(|e| format!("{e} at {}", e.instance_path())).collect()
}
