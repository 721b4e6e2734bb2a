//! The README's commands work as written and leave the repository as it was: every line of its
//! `sh` blocks (but the test command itself) runs from the repository's root with the built
//! binary, ends with a verdict (exit 0 or 1, never 2 or a panic), and `git status --porcelain` is
//! the same afterwards as before. In CI the tree is a clean clone, so "the same" is "empty".

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
    let out = Command::new("git").args(["status", "--porcelain", "--untracked-files=all"]).current_dir(root).output().expect("git runs");
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
    let commands = readme_commands(&std::fs::read_to_string(root.join("README.md")).unwrap());
    assert!(commands.len() >= 4, "the README's sh blocks: {commands:?}");
    let before = porcelain(root);
    let pg = std::env::var("OUTBOX_CHECK_PG_URL").ok().filter(|u| !u.is_empty());
    let mut ran = 0;
    for command in &commands {
        let mut words: Vec<&str> = command.split_whitespace().collect();
        assert!(!command.contains(['\'', '"', '|', '>', '<', '&', ';']), "a README command the test cannot run as is: {command}");
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
        if args.contains(&"postgres") && pg.is_none() && env.is_empty() {
            common::not_run(&format!("`{command}` needs OUTBOX_CHECK_PG_URL"));
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
            .args(&args)
            .arg("--quiet")
            .envs(env)
            .current_dir(root)
            .output()
            .unwrap();
        let code = out.status.code();
        assert!(matches!(code, Some(0 | 1)), "`{command}` ended {code:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(porcelain(root), before, "`{command}` changed the repository");
        ran += 1;
    }
    assert!(ran >= 3, "{ran} README commands ran");
}
