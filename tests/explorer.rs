//! `outbox-check explore` serves its own page and answers for one path at a time: fetch states
//! over HTTP and hold them against what `check` reports for the same configuration.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod process;

use process::{free_port, Killed};

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

fn state(port: u16, path: &str) -> Value {
    let (status, body) = get(port, &format!("/api/state?path={path}")).expect("the explorer answers");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).expect("JSON state")
}

fn start(args: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(args)
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let server = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if get(port, "/").is_some() {
            return (server, port);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the explorer did not answer on port {port}");
}

fn check_report(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .arg("check")
        .args(args)
        .args(["--json", "--quiet"])
        .output()
        .expect("check runs");
    serde_json::from_slice(&output.stdout).expect("JSON report")
}

/// What a path of check's says of each safety property at its last state.
fn expected_here(steps: &[Value], id: &str) -> &'static str {
    let breaks = |s: &Value| s["violations"].as_array().unwrap().iter().any(|v| v["property"] == id);
    match steps.iter().position(breaks) {
        _ if steps.last().is_some_and(breaks) => "broken",
        Some(_) => "broken-earlier",
        None => "clean",
    }
}

#[test]
fn the_explorer_tells_each_path_as_check_does_and_gives_each_property_at_the_state() {
    let (_server, port) = start(&["explore", "--variant", "legacy-v1", "--messages", "1"]);
    let (status, page) = get(port, "/").expect("the page");
    assert_eq!(status, 200);
    // One page, nothing fetched from elsewhere.
    assert!(
        page.contains("outbox-check explorer") && !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );

    // The initial state's next steps, each named by what it does, in true time.
    let initial = state(port, "0");
    let next: Vec<String> =
        initial["next"].as_array().unwrap().iter().map(|n| n["text"][0].as_str().unwrap().to_string()).collect();
    assert!(next.iter().any(|a| a == "r0 claims for tenant0 at now=0: m0 token #0 attempts 0"), "{next:?}");
    // legacy-v1's second relay runs a lease ahead: its clock is shown beside true time.
    assert!(next.iter().any(|a| a.contains("r1's own clock, which runs 2 ahead: true time t=0")), "{next:?}");
    assert_eq!(initial["relays"][1]["skew"], 2);

    // The whole-model verdicts come from a check in the background: wait for it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let view = loop {
        let view = state(port, "0");
        if view["checking"] == false || Instant::now() > deadline {
            break view;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(view["checking"], false, "the background check did not finish");
    // Every counterexample, lasso and reachability path check prints opens at its last step, told in
    // check's words, with each safety property's status at that state.
    let report = check_report(&["--variant", "legacy-v1", "--messages", "1"]);
    for p in report["properties"].as_array().unwrap() {
        let shown = view["properties"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["id"] == p["id"])
            .unwrap_or_else(|| panic!("{} not shown", p["id"]));
        assert_eq!(shown["check"].as_str().unwrap().replace('-', "_"), p["status"].as_str().unwrap(), "{}", p["id"]);
        assert_eq!(shown["check_path"], p["explorer_path"], "{}", p["id"]);
    }
    let mut opened = 0;
    for p in report["properties"].as_array().unwrap() {
        let Some(path) = p["explorer_path"].as_str() else { continue };
        let view = state(port, path);
        let steps = p["counterexample"].as_array().unwrap();
        let told: Vec<&Value> = view["steps"].as_array().unwrap().iter().map(|s| &s["text"]).collect();
        let checked: Vec<&Value> = steps.iter().map(|s| &s["text"]).collect();
        assert_eq!(told, checked, "{}: the explorer's path against check's", p["id"]);
        for q in view["properties"].as_array().unwrap().iter().filter(|q| q["kind"] == "safety") {
            let id = q["id"].as_str().unwrap();
            assert_eq!(q["here"], expected_here(steps, id), "{} at the end of {}'s path", id, p["id"]);
        }
        if p["kind"] == "liveness" {
            // On its own lasso, a liveness property says so, with where the cycle starts.
            let own = view["properties"].as_array().unwrap().iter().find(|q| q["id"] == p["id"]).unwrap();
            assert_eq!(own["here"], "lasso", "{own}");
            assert_eq!(view["cycle_from"], p["cycle_from"]);
        }
        opened += 1;
    }
    assert!(opened >= 10, "only {opened} paths to open");
    let s1 = report["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S1").unwrap();
    let view = state(port, s1["explorer_path"].as_str().unwrap());
    let s1_here = view["properties"].as_array().unwrap().iter().find(|q| q["id"] == "S1").unwrap();
    assert_eq!(s1_here["here"], "broken");
    assert!(view["svg"].as_str().unwrap().contains("data-violated='S1'"));
}

#[test]
fn a_path_that_names_no_state_is_a_one_line_error() {
    let (_server, port) = start(&["explore", "--variant", "reference", "--messages", "1"]);
    for (path, says) in [
        ("0/99", "there is no next action 99"),
        ("1", "starts at the initial state 0"),
        ("0/x", "is not an action index"),
    ] {
        let (status, body) = get(port, &format!("/api/state?path={path}")).unwrap();
        assert_eq!(status, 400, "{path}");
        let error: Value = serde_json::from_str(&body).unwrap();
        let line = error["error"].as_str().unwrap();
        assert!(line.contains(says) && !line.contains('\n'), "{path}: {line}");
    }
    assert_eq!(get(port, "/nothing-here").unwrap().0, 404);
}

#[test]
fn a_port_in_use_is_one_line_and_exit_2() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(["explore", "--variant", "reference", "--port", &port.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("cannot listen"), "{err}");
}
