//! The README's and docs/' commands work as written and leave the repository as it was: every
//! line of their `sh` blocks (but the test command itself) runs from the repository's root with
//! the built binary, ends with a verdict (exit 0 or 1, never 2 or a panic), and `git status
//! --porcelain` is the same afterwards as before. In CI the tree is a clean clone, so "the same"
//! is "empty". The CLI synopsis of docs/cli.md matches every `--help`, and the counterexample the
//! README shows is what `check` prints.

use std::process::Command;

mod common;

/// The commands of the README's ```sh blocks, comments dropped.
fn readme_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let command = trimmed.split(" #").next().unwrap_or("").trim();
        if !command.is_empty() && !command.starts_with('#') {
            commands.push(command.to_string());
        }
    }
    commands
}

fn porcelain(root: &std::path::Path) -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git status: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_readme_command_works_and_leaves_git_status_as_it_was() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if !root.join(".git").exists() {
        common::not_run("the README commands test needs a git checkout");
        return;
    }
    let readme = readme_commands(&std::fs::read_to_string(root.join("README.md")).unwrap());
    assert!(readme.len() >= 4, "the README's sh blocks: {readme:?}");
    let mut commands = readme;
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for doc in docs {
        commands.extend(readme_commands(&std::fs::read_to_string(doc).unwrap()));
    }
    let before = porcelain(root);
    let pg = std::env::var("OUTBOX_CHECK_PG_URL").ok().filter(|u| !u.is_empty());
    let mut ran = 0;
    for command in &commands {
        let mut words: Vec<&str> = command.split_whitespace().collect();
        assert!(
            !command.contains(['\'', '"', '|', '>', '<', '&', ';']),
            "a README command the test cannot run as is: {command}"
        );
        let mut env = Vec::new();
        while words.first().is_some_and(|w| w.contains('=') && !w.starts_with('-')) {
            let (k, v) = words.remove(0).split_once('=').unwrap();
            env.push((k.to_string(), v.to_string()));
        }
        let args: Vec<&str> = match words.as_slice() {
            ["cargo", "test", ..] => continue,
            ["cargo", "run", "--release", "--", rest @ ..] => rest.to_vec(),
            ["outbox-check", rest @ ..] => rest.to_vec(),
            _ => panic!("a README command that is neither outbox-check nor cargo: {command}"),
        };
        // A file the docs put under /tmp goes under the tests' own scratch folder: the run
        // leaves nothing behind outside target/.
        let scratch = |a: &str| match a.strip_prefix("/tmp/") {
            Some(rest) => format!("{}/{rest}", env!("CARGO_TARGET_TMPDIR")),
            None => a.to_string(),
        };
        let args: Vec<String> = args.iter().map(|a| scratch(a)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if args.contains(&"postgres") && pg.is_none() && env.is_empty() {
            common::not_run(&format!("`{command}` needs OUTBOX_CHECK_PG_URL"));
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .args(&args)
            .arg("--quiet")
            .envs(env)
            .current_dir(root)
            .output()
            .unwrap();
        let code = out.status.code();
        assert!(matches!(code, Some(0 | 1)), "`{command}` ended {code:?}: {}", String::from_utf8_lossy(&out.stderr));
        if args == ["verify"] {
            // The main job at its default bounds: every verdict as reports/expectations.json pins.
            assert_eq!(code, Some(0), "`{command}`:\n{}", String::from_utf8_lossy(&out.stdout));
        }
        assert_eq!(porcelain(root), before, "`{command}` changed the repository");
        ran += 1;
    }
    assert!(ran >= 3, "{ran} README commands ran");
}

/// docs/cli.md's synopsis agrees with `--help`: for every command it lists, the long options it
/// names are exactly those the command's `--help` lists.
#[test]
fn the_cli_synopsis_lists_exactly_the_options_of_each_help() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/cli.md")).unwrap();
    let block = doc.split("## Synopsis\n\n```\n").nth(1).and_then(|b| b.split("```").next()).expect("a synopsis block");
    let mut synopsis: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    let mut current = String::new();
    let options = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(str::to_string)
            .collect()
    };
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("outbox-check ") {
            current = rest.split_whitespace().next().unwrap().to_string();
        }
        synopsis.entry(current.clone()).or_default().extend(options(line));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .arg("--help")
        .output()
        .unwrap();
    let commands: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 9, "{commands:?}");
    for command in &commands {
        let help = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .args([command, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        // Each option, and its visible aliases ("[alias: --design]"), which clap prints on the
        // option's line or, where the help goes on the next line, at the end of its description.
        let mut listed = std::collections::BTreeSet::new();
        for l in help.lines() {
            if l.trim_start().starts_with('-') {
                listed.extend(options(l.split("  ").find(|p| !p.trim().is_empty()).unwrap_or_default()));
            }
            if let Some((_, alias)) = l.rsplit_once("[alias") {
                listed.extend(options(alias));
            }
        }
        listed.remove("--help");
        let doc_has = synopsis.get(command).unwrap_or_else(|| panic!("docs/cli.md's synopsis has no `{command}`"));
        assert_eq!(doc_has, &listed, "`outbox-check {command}`: docs/cli.md's synopsis against --help");
    }
}

/// The counterexample the README shows "as it prints" is the one `check` prints today: every line
/// of the block from the verdict to the explorer link, and the command the README names.
#[test]
fn the_readme_counterexample_is_what_check_prints() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section =
        readme.split("## A counterexample, as it prints").nth(1).expect("the README's counterexample section");
    let command = section.split('`').find(|w| w.starts_with("outbox-check check ")).expect("the command it names");
    let block = section.split("```text\n").nth(1).and_then(|b| b.split("```").next()).expect("its text block");
    let shown: Vec<&str> = block.lines().skip_while(|l| !l.trim_start().starts_with("VIOLATED")).collect();
    assert!(shown.len() >= 4 && shown.last().unwrap().trim_start().starts_with("explorer:"), "{shown:?}");
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(&args)
        .arg("--quiet")
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "`{command}` finds a violation");
    let printed = String::from_utf8(out.stdout).unwrap();
    for line in shown {
        assert!(
            printed.lines().any(|p| p == line),
            "the README shows a line `{command}` does not print:\n{line}\n\nit printed:\n{printed}"
        );
    }
}

/// docs/designs.md, the catalogue of the designs, names every variant and every mutant with the
/// mistake and the properties the code says it should break.
#[test]
fn the_design_catalogue_lists_every_variant_and_mutant() {
    use outbox_check::design::{Mutant, Variant};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/designs.md")).unwrap();
    for v in Variant::ALL {
        assert!(
            doc.contains(&format!("`{}`", v.name())) || doc.contains(&format!("**{}**", v.name())),
            "{} missing",
            v.name()
        );
    }
    for m in Mutant::ALL {
        let kills: Vec<&str> = m.expected_kills().to_vec();
        let row = format!("| `{}` | {} | {} |", m.name(), m.mistake(), kills.join(", "));
        assert!(doc.contains(&row), "docs/designs.md lacks the row {row}");
    }
}
