//! Words and pages a person reads that every engine shares: counts, the names of
//! configurations, the command that reproduces a check, and a history drawn as HTML.
//! Presentation only: no outbox rule lives here.

use std::fmt::Write as _;

/// "1 step", "2 steps": a count and its noun, in the right number.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A file-system friendly name for a fleet: `reference-x2`, `seed-v2+legacy-v1`.
pub fn fleet_slug(fleet: &[String]) -> String {
    if !fleet.is_empty() && fleet.iter().all(|d| *d == fleet[0]) {
        format!("{}-x{}", fleet[0], fleet.len())
    } else {
        fleet.join("+")
    }
}

/// The folder name of a whole configuration: the fleet, then every bound that differs from
/// `check`'s defaults (`reference-x2-m2-f-broker-drop`), so counterexamples of one
/// configuration never overwrite another's.
pub fn config_slug(config: &crate::world::WorldConfig) -> String {
    let fleet: Vec<String> = config.relays.iter().map(|r| r.design.name().to_string()).collect();
    let mut slug = fleet_slug(&fleet);
    if config.messages != 1 {
        slug += &format!("-m{}", config.messages);
    }
    if config.tenants != 1 {
        slug += &format!("-t{}", config.tenants);
    }
    if config.max_attempts != 3 {
        slug += &format!("-b{}", config.max_attempts);
    }
    let faults = config.faults.names();
    if faults.len() != crate::world::Faults::NAMES.len() {
        slug += &format!("-f-{}", if faults.is_empty() { "none".to_string() } else { faults.join("+") });
    }
    if config.enqueue_actions {
        slug += "-enqueues";
    }
    if config.requeues > 0 {
        slug += &format!("-rq{}", config.requeues);
    }
    slug
}

/// The `outbox-check check` command that reproduces a configuration's check.
pub fn check_command(config: &crate::world::WorldConfig) -> String {
    let designs: Vec<&str> = config.relays.iter().map(|r| r.design.argument()).collect();
    let files = config.relays.iter().any(|r| matches!(r.design, crate::design::Design::Custom(_)));
    let fleet = if designs.iter().all(|d| *d == designs[0]) {
        format!("--{} {} --relays {}", if files { "design" } else { "variant" }, designs[0], designs.len())
    } else {
        format!("--fleet {}", designs.join(","))
    };
    let faults = config.faults.names();
    let faults = if faults.len() == crate::world::Faults::NAMES.len() {
        "all".to_string()
    } else if faults.is_empty() {
        "none".into()
    } else {
        faults.join(",")
    };
    let mut line = format!(
        "outbox-check check {fleet} --messages {} --tenants {} --max-attempts {} --faults {faults}",
        config.messages, config.tenants, config.max_attempts
    );
    if config.requeues > 0 {
        line += &format!(" --requeues {}", config.requeues);
    }
    if config.enqueue_actions {
        line += " --enqueues";
    }
    // The model's time scale, where it is not the default (lease 2, backoff 1–4, skew a lease).
    if config.lease.0 != 2 {
        line += &format!(" --lease {}", config.lease.0);
    }
    if config.backoff_base.0 != 1 {
        line += &format!(" --backoff-base {}", config.backoff_base.0);
    }
    if config.backoff_cap.0 != 4 {
        line += &format!(" --backoff-cap {}", config.backoff_cap.0);
    }
    if let Some(skew) = config.relays.iter().map(|r| r.skew).find(|s| *s != 0).filter(|s| *s != config.lease.0 as i64) {
        line += &format!(" --skew {skew}");
    }
    line
}

/// Escapes text for HTML.
fn html_text(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `outbox-check trace --html`: one self-contained page (no script, no network) drawing a history
/// as Porcupine's visualiser draws a linearizability check — one lane per relay over the
/// history's commit order, each lease a bar from its claim to the relay's write (or the end),
/// publications and writes as marks, and the divergences highlighted with their sentences.
pub fn trace_html(
    name: &str,
    header: &crate::trace::Header,
    events: &[(usize, crate::trace::Event)],
    divergences: &[crate::oracle::Divergence],
) -> String {
    use crate::trace::{Event as T, PublishAnswer, WriteReport};
    const STEP: usize = 40;
    const LEFT: usize = 150;
    const SLOT: usize = 28;
    // Lanes: the application (enqueues) first if it logged any, the relays in order of first
    // appearance, then the maintenance jobs.
    let mut lanes: Vec<String> = Vec::new();
    let lane_of = |lanes: &mut Vec<String>, who: &str| -> usize {
        lanes.iter().position(|l| l == who).unwrap_or_else(|| {
            lanes.push(who.to_string());
            lanes.len() - 1
        })
    };
    if events.iter().any(|(_, e)| matches!(e, T::Enqueue { .. })) {
        lanes.push("application".into());
    }
    for (_, e) in events {
        match e {
            T::Claim { relay, .. } | T::Publish { relay, .. } | T::Write { relay, .. } => {
                lane_of(&mut lanes, relay);
            }
            _ => {}
        }
    }
    let who = |e: &T| -> Option<String> {
        Some(match e {
            T::Enqueue { .. } => "application".into(),
            T::Claim { relay, .. } | T::Publish { relay, .. } | T::Write { relay, .. } => relay.clone(),
            T::Release { relay, .. } => relay.clone().unwrap_or_else(|| "maintenance".into()),
            T::Reap { .. } => "reaper".into(),
            T::Schedule { .. } => "scheduler".into(),
            T::Requeue { .. } => "operator".into(),
            T::Clock { .. } | T::Fault { .. } => return None,
        })
    };
    // Leases: (lane, message, token, start x, end x, slot, ended how).
    struct Bar {
        lane: usize,
        message: String,
        token: Option<String>,
        start: usize,
        end: Option<usize>,
        slot: usize,
    }
    let mut bars: Vec<Bar> = Vec::new();
    let mut marks: Vec<(usize, usize, usize, &'static str, String)> = Vec::new(); // (x index, lane, slot, class, title)
    let divergent: std::collections::BTreeSet<usize> = divergences.iter().map(|d| d.line).collect();
    let mut line_x: Vec<(usize, usize)> = Vec::new();
    for (x, (line, e)) in events.iter().enumerate() {
        line_x.push((*line, x));
        let Some(actor) = who(e) else { continue };
        let lane = lane_of(&mut lanes, &actor);
        let free_slot = |bars: &[Bar], lane: usize| {
            (0..).find(|s| !bars.iter().any(|b| b.lane == lane && b.end.is_none() && b.slot == *s)).unwrap_or(0)
        };
        let open_bar = |bars: &[Bar], message: &str, token: Option<&String>| -> Option<usize> {
            bars.iter().rposition(|b| {
                b.lane == lane
                    && b.end.is_none()
                    && b.message == message
                    && (token.is_none() || b.token.as_ref() == token)
            })
        };
        match e {
            T::Claim { leases, now, outcome, .. } => {
                if leases.is_empty() {
                    let what = if *outcome == crate::trace::Outcome::Unknown {
                        "claim of unknown outcome"
                    } else {
                        "claim of no row"
                    };
                    marks.push((x, lane, 0, "claim", format!("line {line}: {what} at t={now}")));
                }
                for l in leases {
                    let slot = free_slot(&bars, lane);
                    bars.push(Bar {
                        lane,
                        message: l.message.clone(),
                        token: l.token.clone(),
                        start: x,
                        end: None,
                        slot,
                    });
                    let token = l.token.as_ref().map(|t| format!(" token {t}")).unwrap_or_default();
                    marks.push((
                        x,
                        lane,
                        slot,
                        "claim",
                        format!("line {line}: claims {}{token} at t={now}, attempts {}", l.message, l.attempts),
                    ));
                }
            }
            T::Publish { message, answer, token, .. } => {
                let slot = open_bar(&bars, message, token.as_ref()).map_or(0, |i| bars[i].slot);
                let class = match answer {
                    PublishAnswer::Ack => "ack",
                    PublishAnswer::Timeout => "timeout",
                    PublishAnswer::Unavailable | PublishAnswer::Rejected => "nack",
                };
                marks.push((x, lane, slot, class, format!("line {line}: publishes {message}: {}", answer.as_str())));
            }
            T::Write { write, message, token, now, result, .. } => {
                let slot = match open_bar(&bars, message, token.as_ref()) {
                    Some(i) => {
                        bars[i].end = Some(x);
                        bars[i].slot
                    }
                    None => 0,
                };
                let class = match result {
                    WriteReport::Applied => "applied",
                    WriteReport::Stale => "stale",
                    WriteReport::Unknown => "unknown",
                };
                marks.push((
                    x,
                    lane,
                    slot,
                    class,
                    format!("line {line}: {write} {message} at t={now}: {}", result.as_str()),
                ));
            }
            T::Release { message, now, to, result, fence, .. } => {
                marks.push((
                    x,
                    lane,
                    0,
                    if result == "applied" { "release" } else { "stale" },
                    format!("line {line}: release of {message} to {to} ({fence} fence) at t={now}: {result}"),
                ));
            }
            T::Reap { now, messages } => {
                marks.push((
                    x,
                    lane,
                    0,
                    "release",
                    format!(
                        "line {line}: reap at t={now}: {}",
                        if messages.is_empty() { "nothing".to_string() } else { messages.join(", ") }
                    ),
                ));
            }
            T::Schedule { now, messages } => marks.push((
                x,
                lane,
                0,
                "release",
                format!("line {line}: scheduler at t={now}: {} claimable again", messages.join(", ")),
            )),
            T::Requeue { message, result } => {
                marks.push((x, lane, 0, "release", format!("line {line}: requeue of {message}: {result}")))
            }
            T::Enqueue { message, now, result, .. } => {
                marks.push((x, lane, 0, "enqueue", format!("line {line}: enqueues {message} at t={now}: {result}")))
            }
            T::Clock { .. } | T::Fault { .. } => {}
        }
    }
    let slots: Vec<usize> =
        (0..lanes.len()).map(|l| bars.iter().filter(|b| b.lane == l).map(|b| b.slot + 1).max().unwrap_or(1)).collect();
    let mut lane_top = Vec::new();
    let mut y = 40;
    for s in &slots {
        lane_top.push(y);
        y += 24 + s * SLOT;
    }
    let width = LEFT + (events.len() + 1) * STEP + 20;
    let height = y + 10;
    let x_of = |x: usize| LEFT + x * STEP + STEP / 2;
    let mut svg = String::new();
    let _ = writeln!(svg, r#"<svg width="{width}" height="{height}" role="img" aria-label="the history drawn">"#);
    // The divergences' columns first, under everything.
    for (line, x) in &line_x {
        if divergent.contains(line) {
            let _ = writeln!(
                svg,
                r#"<rect class="divergent-column" data-line="{line}" x="{}" y="20" width="{STEP}" height="{}"/>"#,
                x_of(*x) - STEP / 2,
                height - 20
            );
        }
    }
    for (l, name) in lanes.iter().enumerate() {
        let top = lane_top[l];
        let h = 24 + slots[l] * SLOT;
        let _ = writeln!(
            svg,
            r#"<g class="lane" data-lane="{n}"><rect class="lane-bg" x="0" y="{top}" width="{width}" height="{h}"/><text class="lane-name" x="8" y="{ty}">{n}</text></g>"#,
            n = html_text(name),
            ty = top + 14
        );
    }
    // The axis: every fifth event's line number.
    for (line, x) in line_x.iter().step_by(5) {
        let _ = writeln!(svg, r#"<text class="axis" x="{}" y="30">{line}</text>"#, x_of(*x) - 4);
    }
    let last = events.len();
    for b in &bars {
        let top = lane_top[b.lane] + 26 + b.slot * SLOT;
        let (x0, x1) = (x_of(b.start), x_of(b.end.unwrap_or(last)));
        let token = b.token.as_ref().map(|t| format!(" · token {t}")).unwrap_or_default();
        let open = if b.end.is_none() { " open" } else { "" };
        let _ = writeln!(
            svg,
            r#"<g class="lease{open}" data-message="{m}"><rect x="{x0}" y="{top}" width="{w}" height="12" rx="3"/><text x="{tx}" y="{ty}">{m}{t}</text><title>lease of {m}{t}</title></g>"#,
            m = html_text(&b.message),
            t = html_text(&token),
            w = (x1 - x0).max(4),
            tx = x0 + 4,
            ty = top - 3
        );
    }
    for (x, lane, slot, class, title) in &marks {
        let (cx, cy) = (x_of(*x), lane_top[*lane] + 32 + slot * SLOT);
        let line = line_x[*x].0;
        let hit = if divergent.contains(&line) { " divergent" } else { "" };
        let shape = match *class {
            "ack" | "timeout" | "nack" => format!(r#"<circle cx="{cx}" cy="{cy}" r="5"/>"#),
            "claim" => format!(r#"<rect x="{}" y="{}" width="3" height="14"/>"#, cx - 1, cy - 7),
            "release" | "enqueue" => format!(r#"<path d="M{cx} {} l6 6 l-6 6 l-6 -6 z"/>"#, cy - 6),
            _ => format!(r#"<rect x="{}" y="{}" width="10" height="10"/>"#, cx - 5, cy - 5),
        };
        let _ = writeln!(
            svg,
            r#"<g class="mark {class}{hit}" data-line="{line}">{shape}<title>{}</title></g>"#,
            html_text(title)
        );
    }
    svg.push_str("</svg>\n");
    let mut list = String::new();
    for d in divergences {
        let named = d.blame.to_string();
        let said = d.said();
        let _ = writeln!(
            list,
            r#"<li class="divergence {kind}" data-line="{line}"><b>line {line}</b> · <b>{named}</b>{safe}<br>{said}</li>"#,
            kind = d.blame.kind(),
            line = d.line,
            named = html_text(&named),
            safe = if d.blame.is_safety() { "" } else { " (no safety property broken)" },
            said = html_text(&said)
        );
    }
    let verdict = if divergences.is_empty() {
        format!("consistent with the model ({} events)", events.len())
    } else {
        format!("{} divergence{}", divergences.len(), if divergences.len() == 1 { "" } else { "s" })
    };
    let design = header.variant.clone().unwrap_or_else(|| "reference".into());
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>outbox-check trace: {title}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }} .sub {{ color: #555; margin-bottom: 10px; }}
.scroll {{ overflow-x: auto; border: 1px solid #ccc; }}
.lane-bg {{ fill: #fafafa; stroke: #e3e3e3; }} .lane:nth-of-type(even) .lane-bg {{ fill: #f2f4f7; }}
.lane-name {{ font-weight: 600; font-size: 12px; fill: #333; }} .axis {{ font-size: 10px; fill: #888; }}
.lease rect {{ fill: #9cc3e6; stroke: #4a7fb0; }} .lease.open rect {{ fill: #cfe0f0; stroke-dasharray: 3 2; }}
.lease text {{ font-size: 9px; fill: #123; }}
.mark.claim rect {{ fill: #4a7fb0; }} .mark.ack circle {{ fill: #2e9d4b; }} .mark.timeout circle {{ fill: #e69b2e; }}
.mark.nack circle {{ fill: #999; }} .mark.applied rect {{ fill: #1f6e35; }} .mark.stale rect, .mark.stale path {{ fill: #bbb; }}
.mark.unknown rect {{ fill: #e69b2e; }} .mark.release path {{ fill: #7a4fb0; }} .mark.enqueue path {{ fill: #555; }}
.mark.divergent * {{ stroke: #d11; stroke-width: 3; }} .divergent-column {{ fill: #fde3e3; }}
li.divergence {{ margin: 6px 0; padding: 6px 8px; border-left: 4px solid #d11; background: #fff5f5; list-style: none; }}
li.divergence.conformance {{ border-color: #e69b2e; background: #fffaf0; }}
.legend span {{ margin-right: 14px; }}
</style></head><body>
<h1>{title}: {verdict}</h1>
<div class="sub">design {design} · budget {budget} · claims {claims} · one column per event, in the order the history committed them (line numbers above)</div>
<div class="legend"><span>▮ claim</span><span style="color:#4a7fb0">▬ lease</span><span style="color:#2e9d4b">● ack</span><span style="color:#e69b2e">● timeout</span><span style="color:#999">● unavailable / rejected</span><span style="color:#1f6e35">■ write applied</span><span style="color:#999">■ stale</span><span style="color:#e69b2e">■ unknown</span><span style="color:#7a4fb0">◆ release, reap, requeue</span><span style="color:#d11">red: a divergence</span></div>
<div class="scroll">
{svg}</div>
<h2 style="font-size:16px">Divergences</h2>
<ul id="divergences">
{list}</ul>
{none}
</body></html>
"#,
        title = html_text(name),
        verdict = html_text(&verdict),
        design = html_text(&design),
        budget = header.max_attempts,
        claims = match header.claims() {
            crate::trace::Concurrency::Serial => "serial",
            crate::trace::Concurrency::SkipLocked => "skip-locked",
        },
        none = if divergences.is_empty() { "<p>No divergence: every event is one the model allows.</p>" } else { "" },
    )
}

/// `text` broken at spaces into lines of at most `width` characters (a longer word stays whole).
pub fn wrap(text: &str, width: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines.join("\n")
}
