//! The explorer in a real browser: headless Chromium, driven over WebDriver by chromedriver,
//! opens `outbox-check explore` at a counterexample, steps through it, and checks what the page
//! shows. Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them); without
//! them it prints NOT RUN, and fails instead under `OUTBOX_CHECK_REQUIRE_BROWSER=1`.
//!
//! The screenshots (the S1 counterexample's last step, L3's lasso) land in `$CARGO_TARGET_TMPDIR/explorer-legacy-v1-{S1,L3}.png` (under
//! `target/tmp/` by default); with
//! `OUTBOX_CHECK_WRITE_REPORTS=1` also in `reports/`.

mod common;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod process;

use process::{free_port, Killed};

/// One HTTP/1.1 request with a JSON body; the JSON answer.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Option<Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    // chromedriver keeps the connection open: read the headers, then Content-Length bytes.
    let mut response = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        response.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&response);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok())
            });
            if length.is_some_and(|len| body.len() >= len) || (length.is_none() && body.ends_with("0\r\n\r\n")) {
                break;
            }
        }
    }
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        // Chunks: a hex size line, the bytes, CRLF; a zero size ends.
        let (mut rest, mut joined) = (body, String::new());
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            joined.push_str(tail.get(..size)?);
            rest = tail.get(size + 2..)?;
        }
        return serde_json::from_str(&joined).ok();
    }
    serde_json::from_str(body).ok()
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} did not come up in 30 s");
}

fn which(program: &str) -> Option<String> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| format!("{dir}/{program}"))
        .find(|path| std::path::Path::new(path).exists())
}

struct Browser {
    port: u16,
    session: String,
    _driver: Killed,
}

impl Browser {
    fn start(chromium: &str, chromedriver: &str) -> Browser {
        let port = free_port();
        let driver = Killed(
            Command::new(chromedriver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver starts"),
        );
        wait_for("chromedriver", || http(port, "GET", "/status", None).is_some_and(|s| s["value"]["ready"] == true));
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1400"],
            },
        }}});
        let created = http(port, "POST", "/session", Some(&capabilities)).expect("chromedriver answers");
        let session =
            created["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {created}")).to_string();
        Browser { port, session, _driver: driver }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let answer =
            http(self.port, method, &format!("/session/{}{path}", self.session), body).expect("chromedriver answers");
        answer["value"].clone()
    }

    fn open(&self, url: &str) {
        self.call("POST", "/url", Some(&json!({ "url": url })));
    }

    fn text(&self) -> String {
        self.call("POST", "/execute/sync", Some(&json!({ "script": "return document.body.innerText", "args": [] })))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Waits until the page's text contains every one of `needles`; returns the text.
    fn wait_text(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut text = String::new();
        while Instant::now() < deadline {
            text = self.text();
            if needles.iter().all(|n| text.contains(n)) {
                return text;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the page never showed {needles:?}; it shows:\n{text}");
    }

    fn screenshot(&self) -> Vec<u8> {
        let encoded = self.call("GET", "/screenshot", None);
        base64_decode(encoded.as_str().expect("a base64 screenshot"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http(self.port, "DELETE", &format!("/session/{}", self.session), None);
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter_map(value).collect();
    digits
        .chunks(4)
        .flat_map(|c| {
            let n = c.iter().enumerate().fold(0u32, |n, (i, d)| n | (u32::from(*d) << (18 - 6 * i)));
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            bytes.into_iter().take(c.len().saturating_sub(1)).collect::<Vec<_>>()
        })
        .collect()
}

/// Chromium and chromedriver, or None after saying visibly that the test did not run (and failing
/// under OUTBOX_CHECK_REQUIRE_BROWSER=1).
fn browser_tools() -> Option<(String, String)> {
    let (Some(chromium), Some(chromedriver)) = (which("chromium"), which("chromedriver")) else {
        assert!(
            std::env::var("OUTBOX_CHECK_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "OUTBOX_CHECK_REQUIRE_BROWSER=1 but chromium or chromedriver is not installed"
        );
        common::not_run(
            "the browser test needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
        );
        return None;
    };
    Some((chromium, chromedriver))
}

#[test]
fn the_explorer_steps_through_a_counterexample_in_chromium() {
    let Some((chromium, chromedriver)) = browser_tools() else { return };
    // The shortest S1 counterexample of legacy-v1, as `check` reports it.
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(["check", "--variant", "legacy-v1", "--json", "--quiet", "--no-liveness"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).expect("check --json");
    let s1 = report["properties"].as_array().unwrap().iter().find(|p| p["id"] == "S1").expect("S1").clone();
    let path: Vec<String> = s1["explorer_path"].as_str().unwrap().split('/').map(String::from).collect();
    let steps = s1["counterexample"].as_array().unwrap().clone();
    // The path opens with the initial state's index, then one action index per step.
    assert_eq!(path.len(), steps.len() + 1);

    let port = free_port();
    let _explorer = Killed(
        Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .args(["explore", "--variant", "legacy-v1", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the explorer", || TcpStream::connect(("127.0.0.1", port)).is_ok());
    let browser = Browser::start(&chromium, &chromedriver);

    let script = |js: &str| browser.call("POST", "/execute/sync", Some(&json!({ "script": js, "args": [] })));
    // The path the page shows: the initial state, then one line per step.
    let shown_path = || -> Vec<String> {
        let lines =
            script("return [...document.querySelectorAll('#path > li')].map(li => li.querySelector('a').textContent)");
        lines
            .as_array()
            .map(|l| l.iter().map(|t| t.as_str().unwrap_or_default().to_string()).collect())
            .unwrap_or_default()
    };
    // Step by step: the page at each prefix of the path shows the steps so far in check's words.
    for i in 1..=steps.len() {
        browser.open(&format!("http://127.0.0.1:{port}/#/steps/{}", path[..=i].join("/")));
        let expected: Vec<String> = std::iter::once("the initial state".to_string())
            .chain(steps[..i].iter().map(|s| {
                s["text"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect::<Vec<_>>().join("; ")
            }))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut shown = shown_path();
        while shown != expected && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            shown = shown_path();
        }
        assert_eq!(shown, expected, "step {i}");
    }
    // Clicking a next step takes it: from the step before the last, the last step's link.
    browser.open(&format!("http://127.0.0.1:{port}/#/steps/{}", path[..steps.len()].join("/")));
    let last_index = path.last().unwrap();
    // A new hash re-renders the same page: wait for the shorter path before clicking.
    wait_for("the step before the last", || shown_path().len() == steps.len());
    wait_for("the next steps", || {
        script(&format!("return !!document.querySelector('#next li[data-index=\"{last_index}\"] a')")) == json!(true)
    });
    script(&format!("document.querySelector('#next li[data-index=\"{last_index}\"] a').click(); return 0"));
    wait_for("the clicked step", || shown_path().len() == steps.len() + 1);
    // At the end of the path: S1 broken at this state, the table with the write's change
    // highlighted, the last step in check's words with the relay's clock beside true time.
    let text = browser.wait_text(&["broken at this state", "S1 no stale terminal write succeeds"]);
    let here = script("return document.querySelector('#properties tr[data-id=\"S1\"]').dataset.here");
    assert_eq!(here, json!("broken"), "{text}");
    let clean = script("return document.querySelector('#properties tr[data-id=\"S5\"]').dataset.here");
    assert_eq!(clean, json!("clean"));
    let view = script("const s = document.querySelector('svg.outbox-state'); return s ? s.textContent : ''");
    let view = view.as_str().unwrap_or_default().to_string();
    assert!(
        view.contains("the table")
            && view.contains("status")
            && view.contains("lease until")
            && view.contains("consumer"),
        "{view}"
    );
    let last = steps.last().unwrap()["text"][0].as_str().unwrap_or_default();
    assert!(view.contains(last), "the explorer's last step agrees with check's: {last}\n{view}");
    assert!(text.contains("runs 2 ahead"), "r1's clock beside true time: {text}");
    let changed =
        script("return [...document.querySelectorAll('svg.outbox-state rect.changed')].map(r => r.dataset.field)");
    assert!(
        changed.as_array().is_some_and(|c| c.iter().any(|f| f == "status")),
        "the write's status change is highlighted: {changed}"
    );
    let violated = script(
        "const t = document.querySelector('svg.outbox-state [data-violated]'); return t ? t.dataset.violated : ''",
    );
    assert_eq!(violated, json!("S1"));
    // L1–L3 from the background check: legacy-v1 breaks L2 and L3 (as check finds), each with
    // its lasso; the page fills them in by itself when the check is done.
    let verdict =
        |id: &str| script(&format!("return document.querySelector('#properties tr[data-id=\"{id}\"]').dataset.check"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while verdict("L3") == json!("checking") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
    }
    for (id, expected) in [("L1", "holds"), ("L2", "violated"), ("L3", "violated")] {
        assert_eq!(verdict(id), json!(expected), "{id}");
    }
    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG screenshot");
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("explorer-legacy-v1-S1.png");
    std::fs::write(&target, &png).unwrap();
    if std::env::var("OUTBOX_CHECK_WRITE_REPORTS").as_deref() == Ok("1") {
        std::fs::write(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/explorer-legacy-v1-S1.png"),
            &png,
        )
        .unwrap();
    }
    // L3's lasso opens from its link, the cycle drawn on the path.
    script("document.querySelector('#properties tr[data-id=\"L3\"] a').click(); return 0");
    wait_for("L3's lasso", || script("return !!document.querySelector('#path li.cycle-start')") == json!(true));
    let here = script("return document.querySelector('#properties tr[data-id=\"L3\"]').dataset.here");
    assert_eq!(here, json!("lasso"));
    let png = browser.screenshot();
    std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("explorer-legacy-v1-L3.png"), &png).unwrap();
    if std::env::var("OUTBOX_CHECK_WRITE_REPORTS").as_deref() == Ok("1") {
        std::fs::write(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/explorer-legacy-v1-L3.png"),
            &png,
        )
        .unwrap();
    }
}

/// `trace --html` in a real browser: the page a history draws shows a lane per relay, a bar
/// per lease, the divergence highlighted with its sentence — and needs no network.
#[test]
fn the_history_page_shows_lanes_leases_and_the_divergence_in_chromium() {
    let Some((chromium, chromedriver)) = browser_tools() else { return };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = root.join("tests/traces/invalid-s1-stale-write-applied.jsonl");
    let page = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-invalid-s1-stale-write-applied.html");
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .args(["trace", "--all", "--html"])
        .arg(&page)
        .arg(&fixture)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("src=") && !html.contains("href=") && !html.contains("url(") && !html.contains("<script"),
        "the page is self-contained"
    );

    let browser = Browser::start(&chromium, &chromedriver);
    browser.open(&format!("file://{}", page.display()));
    let text = browser.wait_text(&["Divergences", "S1 no stale terminal write succeeds"]);
    assert!(text.contains("line 9"), "the divergence's line: {text}");
    let count = |selector: &str| {
        browser
            .call(
                "POST",
                "/execute/sync",
                Some(
                    &json!({ "script": format!("return document.querySelectorAll('{selector}').length"), "args": [] }),
                ),
            )
            .as_u64()
            .unwrap_or(0)
    };
    // The fixture: relay-a and relay-b, one lease each of m1, relay-a's late write applied.
    let lanes: Value = browser.call("POST", "/execute/sync", Some(&json!({ "script": "return [...document.querySelectorAll('g.lane')].map(g => g.dataset.lane)", "args": [] })));
    assert_eq!(lanes, json!(["application", "relay-a", "relay-b"]));
    assert_eq!(count("g.lease"), 2);
    assert_eq!(count("g.mark.divergent"), 1);
    assert_eq!(count("rect.divergent-column"), 1);
    let marked: Value = browser.call(
        "POST",
        "/execute/sync",
        Some(&json!({ "script": "return document.querySelector('g.mark.divergent title').textContent", "args": [] })),
    );
    assert!(marked.as_str().unwrap_or_default().contains("mark_published m1"), "{marked}");

    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG screenshot");
    std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-invalid-s1-stale-write-applied.png"),
        &png,
    )
    .unwrap();
    if std::env::var("OUTBOX_CHECK_WRITE_REPORTS").as_deref() == Ok("1") {
        std::fs::write(root.join("reports/trace-invalid-s1-stale-write-applied.png"), &png).unwrap();
    }
}
