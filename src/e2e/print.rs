//! An end-to-end run's report as a person reads it.

use super::*;

/// The report in words, its verdict first.
pub fn print(report: &RunReport) {
    println!("{}", verdict(report));
    if let Some(command) = &report.relay_command {
        println!(
            "outbox-check e2e --relay — {} processes of `{command}`, judged black-box against {} over PostgreSQL and {}, seed {} (lease {}, backoff {}–{}, budget {})",
            report.relays,
            report.design,
            report.broker.name(),
            report.seed,
            secs(report.lease_ms),
            secs(report.backoff_ms[0]),
            secs(report.backoff_ms[1]),
            report.max_attempts
        );
    } else {
        println!(
        "outbox-check e2e — {}, {} relay processes × {} over PostgreSQL and {}, seed {} (lease {}, backoff {}–{}, polls every {}, budget {})",
        report.design,
        report.relays,
        crate::report::count(report.messages, "message"),
        report.broker.name(),
        report.seed,
        secs(report.lease_ms),
        secs(report.backoff_ms[0]),
        secs(report.backoff_ms[1]),
        secs(report.poll_ms),
        report.max_attempts
    );
    }
    if report.faults.is_empty() && report.relay_faults.is_empty() {
        println!("Faults: none.");
    } else {
        println!("Faults (drawn from seed {}; `--seed {}` runs the same schedule):", report.seed, report.seed);
        for f in &report.faults {
            println!("  {f}");
        }
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for f in &report.relay_faults {
            // "r0001's backend terminated between publish and write of m00000012": what happened.
            let what = f.split_once("'s ").map_or(f.as_str(), |(_, rest)| rest);
            *counts.entry(what.rsplit_once(" of ").map_or(what, |(what, _)| what)).or_default() += 1;
        }
        for (what, n) in counts {
            println!("  {n} × a relay's {what}");
        }
    }
    match (report.duplicate_window_ms, report.publication_span_ms, &report.publication_span_unbounded) {
        (None, _, _) => println!(
            "Deduplication: {} keeps no deduplication window — every copy it stored reaches the consumer, which must deduplicate by the message id.",
            report.broker.name()
        ),
        (Some(window), Some(span), _) => {
            let needed = span + report.longest_pause_ms;
            println!(
                "Deduplication: this design's publications of one message span at most {} (with relays paused up to {}: {}); the stream's duplicate_window is {} — {}.",
                secs(span),
                secs(report.longest_pause_ms),
                secs(needed),
                secs(window),
                if window > needed { "it covers them" } else { "too short: a late republication is stored again" }
            );
        }
        (Some(_), None, Some(reason)) => println!("Deduplication: no window covers every republication of this design — {reason}."),
        _ => {}
    }
    match &report.oracle {
        None => println!(
            "History: {} events of {} — the oracle accepts it.",
            report.events,
            crate::report::count(report.relays, "relay")
        ),
        Some(d) => println!(
            "History: {} events — the oracle finds {}{}; the first: {}",
            report.events,
            if report.broken.is_empty() { "no finding certain".to_string() } else { report.broken.join(", ") },
            if report.either.is_empty() {
                String::new()
            } else {
                format!(", and where unknown outcomes decide which: {}", report.either.join(", "))
            },
            d.lines().next().unwrap_or_default()
        ),
    }
    if report.oracle.is_some() && !report.oracle_fails_the_run {
        println!("  S11 alone: reported, not a failure of the run (decision 77 in docs/decisions.md).");
    }
    if let Some(path) = &report.history {
        println!("  written to {path} (check it again with `outbox-check trace {path}`)");
    }
    println!(
        "Broker: {} PUBLISHED, {} delivered at least once{}; {} in all, {} beyond a message's first.",
        report.published,
        report.published - report.published_not_delivered.len(),
        if report.published_not_delivered.is_empty() {
            " (S5 end to end holds)".to_string()
        } else {
            format!(" — S5 end to end VIOLATED: never delivered: {}", report.published_not_delivered.join(", "))
        },
        if report.deliveries == 1 { "1 delivery".to_string() } else { format!("{} deliveries", report.deliveries) },
        report.extra_deliveries.len()
    );
    for e in &report.extra_deliveries {
        println!("  {}", e.words);
    }
    if report.consumer_deduplicates && report.duplicate_effects() > 0 {
        println!(
            "  The consumer deduplicates by the message id (--consumer-deduplicates): {} second {} dropped, not a failure.",
            report.duplicate_effects(),
            if report.duplicate_effects() == 1 { "copy" } else { "copies" }
        );
    }
    // A user's relay: every status as its profile names it; the run's own: beside PUBLISHED.
    let others: Vec<String> = report
        .ended
        .iter()
        .filter(|(s, _)| report.relay_command.is_some() || s.as_str() != "PUBLISHED")
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    if !others.is_empty() {
        let which = if report.relay_command.is_some() { "The rows" } else { "The other rows" };
        println!("  {which} ended {}.", others.join(", "));
    }
    if !report.delivered_not_published.is_empty() {
        println!(
            "  Delivered though the row did not end PUBLISHED (stored, its acknowledgement lost, the budget then spent): {}",
            report.delivered_not_published.join(", ")
        );
    }
    if !report.deduplicated_by_broker.is_empty() {
        println!(
            "  {} publications answered as duplicates by the broker (inside its window): {}",
            report.deduplicated_by_broker.len(),
            report
                .deduplicated_by_broker
                .iter()
                .take(5)
                .map(|d| format!("{} by {} at t={}", d.message, d.relay, secs(d.at_ms.saturating_sub(CLOCK_OFFSET))))
                .collect::<Vec<_>>()
                .join(", ")
                + if report.deduplicated_by_broker.len() > 5 { ", …" } else { "" }
        );
    }
    for u in &report.unlogged_copies {
        println!("  {u}");
    }
    if !report.not_terminal.is_empty() {
        println!("Not terminal when the run ended: {}", report.not_terminal.join(", "));
    }
    if !report.stuck.is_empty() {
        println!(
            "L1 VIOLATED: waiting with the budget spent, so no claim takes them again: {}",
            report.stuck.join(", ")
        );
    }
    if !report.over_budget.is_empty() {
        println!("S3 VIOLATED: the broker stored more copies than the attempt budget allows publications:");
        for what in &report.over_budget {
            println!("  {what}");
        }
    }
    if !report.not_judged.is_empty() {
        println!("Not judged (black-box observation cannot see it):");
        for what in &report.not_judged {
            println!("  - {what}");
        }
    }
    if let Some(replay) = report.replay.as_ref().filter(|_| !report.passed()) {
        println!("Replay this schedule: {replay}");
    }
    println!(
        "Throughput: {} PUBLISHED in {}: {:.0} messages/s end to end.",
        report.published,
        secs((report.seconds * 1000.0) as u64),
        report.messages_per_second
    );
}

/// The run's verdict in one line: PASSED, or FAILED with what failed.
fn verdict(report: &RunReport) -> String {
    if report.passed() {
        format!(
            "PASSED: {}, every message ended terminal and was delivered, {}",
            if report.oracle.is_none() {
                "the oracle accepts the history"
            } else {
                "the oracle finds only S11, the false failure this design breaks by itself (reported, not a failure: decision 77)"
            },
            if report.duplicate_effects() == 0 {
                "none took effect twice".to_string()
            } else {
                format!("{} second copies dropped by the consumer's deduplication", report.duplicate_effects())
            }
        )
    } else {
        let mut failed = Vec::new();
        if report.oracle_fails_the_run {
            if !report.broken.is_empty() {
                failed.push(format!("the history breaks {}", report.broken.join(", ")));
            }
            if !report.either.is_empty() {
                failed.push(format!("the history breaks one of {}", report.either.join("; one of ")));
            }
            if report.broken.is_empty() && report.either.is_empty() {
                failed.push("the history diverges from the design".to_string());
            }
        }
        if report.duplicate_effects() > 0 && !report.consumer_deduplicates {
            failed.push(format!(
                "{} a duplicate effect",
                crate::report::count(report.duplicate_effects() as u64, "message")
            ));
        }
        if !report.published_not_delivered.is_empty() {
            failed.push("S5 end to end".to_string());
        }
        if !report.not_terminal.is_empty() {
            failed.push(format!("{} not terminal", crate::report::count(report.not_terminal.len() as u64, "message")));
        }
        // Named by the oracle's line above, or here.
        let named = |p: &str| report.oracle_fails_the_run && report.broken.iter().any(|b| b == p);
        if !report.stuck.is_empty() && !named("L1") {
            failed.push(format!("L1 ({} stuck with the budget spent)", report.stuck.len()));
        }
        if !report.over_budget.is_empty() && !named("S3") {
            failed.push(format!(
                "S3 ({} published more often than the budget)",
                crate::report::count(report.over_budget.len() as u64, "message")
            ));
        }
        format!("FAILED: {}", failed.join(", "))
    }
}
