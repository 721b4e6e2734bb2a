//! Users read our output: no Rust Debug text reaches a person. Every committed report and every
//! command's text output is scanned for the shapes Debug formatting leaves (`Some(`, `None`,
//! `Instant(`, `MessageId(`, `{ reason:` …).

use std::path::Path;
use std::process::Command;

const DEBUG: [&str; 10] = [
    "Some(",
    "None",
    "Instant(",
    "MessageId(",
    "LeaseToken(",
    "RelayId(",
    "TenantId(",
    "{ reason:",
    "Duration(",
    "Ok((",
];

fn debug_in(what: &str, text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| DEBUG.iter().any(|d| line.contains(d)))
        .map(|line| format!("{what}: {}", line.chars().take(160).collect::<String>()))
        .collect()
}

#[test]
fn no_report_or_message_carries_debug_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    // The committed reports a person reads.
    let mut stack = vec![root.join("reports")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.extend(debug_in(&path.display().to_string(), &std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    // What the commands print for a person (text, not --json).
    let commands: &[&[&str]] = &[
        &["check", "--variant", "legacy-v1", "--quiet"],
        &["check", "--variant", "seed-tenant", "--quiet"],
        &["check", "--fleet", "seed-v2,legacy-v1", "--quiet", "--no-liveness"],
        &["verify", "--quiet", "--sim-seeds", "30", "--messages", "1"],
        &["sim", "--variant", "legacy-v1", "--seed", "3", "--no-write", "--quiet"],
        &["sim", "--variant", "legacy-v1", "--seeds", "30", "--no-write", "--quiet"],
        &["conform", "--store", "sqlite", "--variant", "legacy-v1", "--against", "reference", "--cases", "50"],
        &["replay", "reports/counterexamples/legacy-v1-x2-m2/S1.json"],
        &["replay", "reports/counterexamples/legacy-v1-x2-m2/L2.json"],
        &["mutants", "--quiet"],
        &["variants"],
    ];
    for args in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .args(*args)
            .current_dir(root)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        found.extend(debug_in(&args.join(" "), &text));
    }
    // The oracle on every fixture, every divergence listed, and the page it draws.
    for entry in std::fs::read_dir(root.join("tests/traces")).unwrap() {
        let path = entry.unwrap().path();
        let page = std::env::temp_dir().join(format!("outbox-check-nodebug-{}.html", std::process::id()));
        let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .args(["trace", "--all", "--quiet", "--html"])
            .arg(&page)
            .arg(&path)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        found.extend(debug_in(&path.display().to_string(), &text));
        found.extend(debug_in(&page.display().to_string(), &std::fs::read_to_string(&page).unwrap_or_default()));
        std::fs::remove_file(&page).ok();
    }
    assert!(found.is_empty(), "Debug text reaches a person:\n{}", found.join("\n"));
}

/// The explorer's state at every path check prints, and at every next step from each, carries no
/// Debug text either (the page shows these strings as they are).
#[test]
fn the_explorer_carries_no_debug_text() {
    use outbox_check::design::{Design, Variant};
    use outbox_check::world::WorldConfig;
    let mut found = Vec::new();
    for variant in [Variant::LegacyV1, Variant::Reference] {
        let config = WorldConfig::small(Design::Variant(variant), 2, 1);
        let explorer = outbox_check_models::explorer::Explorer::new(config.clone());
        let options = outbox_check_models::check::CheckOptions { threads: 1, ..Default::default() };
        let report = outbox_check_models::check::check(&config, &options, &|_, _| {});
        let paths: Vec<String> = std::iter::once("0".to_string())
            .chain(report.properties.iter().filter_map(|p| p.explorer_path.clone()))
            .collect();
        let _ = explorer.checked.set(report);
        for path in paths {
            let view = explorer.view(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let pretty = serde_json::to_string_pretty(&view).unwrap().replace("\\n", "\n");
            found.extend(debug_in(&format!("explorer {variant:?} {path}"), &pretty));
        }
    }
    assert!(found.is_empty(), "Debug text in the explorer:\n{}", found.join("\n"));
}
