//! `outbox-check trace`: a recorded history checked by the oracle, in words, JSON or HTML.

use super::*;

/// How `trace` reports and stops.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TraceMode {
    pub(crate) strict: bool,
    pub(crate) json: bool,
    pub(crate) quiet: bool,
    /// Every divergence, going on from what the implementation reported.
    pub(crate) all: bool,
    /// Conformance findings are listed but do not fail the run.
    pub(crate) safety_only: bool,
}

impl TraceMode {
    /// How far the oracle goes after a divergence.
    fn oracle(&self) -> outbox_check::oracle::Mode {
        use outbox_check::oracle::Mode;
        match (self.all, self.safety_only) {
            (true, _) => Mode::All,
            (false, true) => Mode::SafetyOnly,
            (false, false) => Mode::First,
        }
    }
}

pub(crate) fn trace(
    files: &[std::path::PathBuf],
    variant: Option<Design>,
    mode: TraceMode,
    html: Option<&std::path::Path>,
) -> ExitCode {
    use outbox_check::oracle::Oracle;
    let stdin = |f: &std::path::Path| f.as_os_str() == "-";
    if files.iter().filter(|f| stdin(f)).count() > 1 {
        eprintln!("outbox-check: standard input ('-') can be read only once");
        return ExitCode::from(2);
    }
    if html.is_some() && files.len() != 1 {
        eprintln!("outbox-check: --html draws one history: give one file");
        return ExitCode::from(2);
    }
    // Every file is readable before the first is checked: a typo in the last name is found
    // before minutes spent on the others.
    for file in files.iter().filter(|f| !stdin(f)) {
        if let Err(error) = std::fs::File::open(file) {
            eprintln!("outbox-check: cannot read {}: {error}", file.display());
            return ExitCode::from(2);
        }
    }
    if let Some(out) = html {
        if let Err(problem) = writable_file(out) {
            eprintln!("outbox-check: --html {}: {problem}", out.display());
            return ExitCode::from(2);
        }
    }
    let bar = spinner(mode.quiet, "checking");
    let mut verdicts = Vec::new();
    let mut failed = false;
    for file in files {
        let (name, reader): (String, Box<dyn std::io::BufRead>) = if stdin(file) {
            ("(standard input)".to_string(), Box::new(std::io::BufReader::with_capacity(1 << 16, std::io::stdin())))
        } else {
            match std::fs::File::open(file) {
                Ok(f) => (file.display().to_string(), Box::new(std::io::BufReader::with_capacity(1 << 16, f))),
                Err(error) => {
                    bar.finish_and_clear();
                    eprintln!("outbox-check: cannot read {}: {error}", file.display());
                    return ExitCode::from(2);
                }
            }
        };
        // Parse and check line by line: a long history is never held in memory whole (except
        // to draw it, with --html).
        let mut kept: Vec<(usize, outbox_check::trace::Event)> = Vec::new();
        let mut header_seen = None;
        let slot: std::cell::RefCell<Option<Oracle>> = std::cell::RefCell::new(None);
        let checked = outbox_check::trace::stream_reader(
            &name,
            reader,
            outbox_check::trace::ReadOptions {
                strict: mode.strict,
                statuses: match variant {
                    Some(Design::Custom(c)) => c.statuses.as_ref(),
                    _ => None,
                },
            },
            |header| {
                let oracle = match variant {
                    Some(design) => {
                        crate::refuse_world_only_but(&[design], "trace", true)?;
                        Oracle::for_header(design, header)
                    }
                    None => Oracle::new(header)?,
                };
                *slot.borrow_mut() = Some(oracle.mode(mode.oracle()));
                header_seen = Some(header.clone());
                Ok(())
            },
            |line, event| {
                if line % 65_536 == 0 {
                    bar.set_message(format!("checking {name}: line {line}"));
                }
                let mut guard = slot.borrow_mut();
                let Some(oracle) = guard.as_mut() else { return false };
                let go_on = oracle.check_event(line, &event);
                if html.is_some() {
                    kept.push((line, event));
                }
                go_on
            },
        );
        let ignored = match checked {
            Ok((_, ignored)) => ignored,
            Err(error) => {
                bar.finish_and_clear();
                eprintln!("outbox-check: {error}");
                return ExitCode::from(2);
            }
        };
        if !ignored.is_empty() && !mode.json {
            let fields: Vec<String> =
                ignored.iter().map(|(path, line)| format!("{path} (first on line {line})")).collect();
            bar.suspend(|| {
                eprintln!("outbox-check: {name}: ignored fields the format does not know: {}", fields.join(", "))
            });
        }
        let ignored: Vec<&String> = ignored.keys().collect();
        let Some(oracle) = slot.into_inner() else {
            bar.finish_and_clear();
            eprintln!("outbox-check: {name}: no header");
            return ExitCode::from(2);
        };
        let verdict = oracle.verdict();
        let fails = verdict.fails();
        failed |= fails;
        let (divergences, accepted, stopped) = (&verdict.divergences, &verdict.accepted, verdict.stopped);
        if !mode.json {
            bar.suspend(|| {
                if divergences.is_empty() {
                    println!("{name}: consistent with the model ({} events)", accepted.events);
                } else {
                    let safety = divergences.iter().filter(|d| d.blame.is_safety()).count();
                    let what = match (safety, divergences.len() - safety) {
                        (0, c) => format!("{c} conformance finding{}", plural(c)),
                        (s, 0) => format!("{s} safety violation{}", plural(s)),
                        (s, c) => format!("{s} safety violation{}, {c} conformance finding{}", plural(s), plural(c)),
                    };
                    let verdict = if fails { "DIVERGES" } else { "no safety property broken" };
                    println!("{name}: {verdict} ({what})");
                    for d in divergences {
                        println!("  {d}");
                        for row in &d.rows {
                            println!("    row before: {}", outbox_check::oracle::row_words(row));
                        }
                    }
                    if stopped {
                        println!("  (stopped at the first divergence: --all lists every one)");
                    }
                }
                for r in &accepted.resolutions {
                    println!("  unknown outcome resolved as: {r}");
                }
                for n in &accepted.not_judged {
                    println!("  not judged: {n}");
                }
            });
        }
        if let (Some(out), Some(header)) = (html, &header_seen) {
            let page = outbox_check::report::trace_html(&name, header, &kept, divergences);
            if let Err(error) = std::fs::write(out, page) {
                bar.finish_and_clear();
                eprintln!("outbox-check: cannot write {}: {error}", out.display());
                return ExitCode::from(2);
            }
            if !mode.json {
                bar.suspend(|| println!("  drawn: {}", out.display()));
            }
        }
        verdicts.push(serde_json::json!({
            "file": name,
            "verdict": verdict.word(),
            "divergence": verdict.first(),
            "divergences": divergences,
            "accepted": accepted,
            "ignored_fields": ignored,
        }));
    }
    bar.finish_and_clear();
    if mode.json {
        // docs/trace-verdict.schema.json describes this object.
        let out = serde_json::json!({ "schema": outbox_check::oracle::VERDICT_SCHEMA, "files": verdicts });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `outbox-check trace`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace files (JSON Lines with a header line); `-` reads standard input.
    #[arg(required = true)]
    pub files: Vec<std::path::PathBuf>,
    /// Refuse fields the format does not know instead of ignoring them.
    #[arg(long)]
    pub strict: bool,
    /// Check against this design instead of the one the header names: a variant, a mutant
    /// or a design file (FILE.toml).
    #[arg(long, visible_alias = "design", value_name = "DESIGN", value_parser = parse_design)]
    pub variant: Option<Design>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress display (shown on a terminal while a long history is checked).
    #[arg(short, long)]
    pub quiet: bool,
    /// List every divergence, going on after each from what the implementation reported.
    #[arg(long)]
    pub all: bool,
    /// Conformance findings (C1-C8) are listed but exit 0; only a safety property fails.
    #[arg(long)]
    pub safety_only: bool,
    /// Draw the history as one self-contained HTML page: a lane per relay, each lease a bar,
    /// publications and writes as marks, the divergences highlighted. One file only.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<std::path::PathBuf>,
}

/// Runs `outbox-check trace`; returns the exit code.
pub fn run(args: Args) -> ExitCode {
    let Args { files, strict, variant, json, quiet, all, safety_only, html } = args;
    trace(&files, variant, TraceMode { strict, json, quiet, all, safety_only }, html.as_deref())
}
