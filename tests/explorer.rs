//! `outbox-check explore` serves stateright's explorer; fetch a state over HTTP and check it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod process;

use process::{free_port, Killed};

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
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
        if get(port, "/.status").is_some() {
            return (server, port);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the explorer did not answer on port {port}");
}

#[test]
fn the_explorer_serves_the_model_and_steps_through_a_counterexample() {
    let (_server, port) = start(&["explore", "--variant", "legacy-v1", "--messages", "1"]);
    let (status, body) = get(port, "/.status").expect("status");
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON status");
    let names: Vec<String> =
        json["properties"].as_array().unwrap().iter().map(|p| p[1].as_str().unwrap_or_default().to_string()).collect();
    assert!(names.iter().any(|n| n == "S1 no stale terminal write succeeds"), "{names:?}");

    // The initial state's successors, each with its action and the step in words.
    let (status, body) = get(port, "/.states/0").expect("states");
    assert_eq!(status, 200, "{body}");
    let steps: serde_json::Value = serde_json::from_str(&body).expect("JSON states");
    let actions: Vec<String> = steps.as_array().unwrap().iter().map(|s| s["action"].as_str().unwrap_or_default().to_string()).collect();
    // Each named by what it does from this state.
    assert!(actions.iter().any(|a| a == "r0 claims for tenant0: m0 token #0 attempts 0"), "{actions:?}");

    // legacy-v1's S1 counterexample, by the path `check` prints: claim, publish, the other relay
    // claims, the first relay's write applies. The last state says which property broke.
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(["check", "--variant", "legacy-v1", "--messages", "1", "--no-liveness", "--json"])
        .output()
        .expect("check runs");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON report");
    let s1 = report["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S1").unwrap();
    let path = s1["explorer_path"].as_str().expect("an explorer path");
    let (status, body) = get(port, &format!("/.states/{path}")).expect("states along the path");
    assert_eq!(status, 200, "{body}");
    let (parent, _) = path.rsplit_once('/').unwrap();
    let (_, body) = get(port, &format!("/.states/{parent}")).expect("the step before");
    let before: serde_json::Value = serde_json::from_str(&body).unwrap();
    let index: usize = path.rsplit('/').next().unwrap().parse().unwrap();
    let step = &before[index];
    let outcome = step["outcome"].as_str().unwrap_or_default();
    assert!(outcome.contains("VIOLATION S1"), "{step}");
    // The stock page's text carries no clock (its states keep time relative to now, which is not
    // the true time check reports); the state behind "Complete State?" is written for a person
    // and says what the last step broke.
    assert!(!outcome.contains("now="), "{outcome}");
    // Each next step is named by what it does, not by stateright's action name.
    let action = step["action"].as_str().unwrap_or_default();
    assert!(action.starts_with("r0 mark_published(m0") || action.contains("mark_published(m0"), "{action}");
    let state = step["state"].as_str().unwrap_or_default();
    assert!(state.contains("VIOLATED by the last step: S1") && state.contains("table:"), "{state}");
    assert!(!state.contains("violations: []") && !state.contains("Some("), "{state}");
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
