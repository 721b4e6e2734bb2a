//! Reports a person can read: counterexamples as Markdown with a Mermaid sequence diagram, and
//! as JSON. Presentation only: no outbox rule lives here.

use crate::check::{CheckReport, Kind, PropertyResult, Verdict};
use crate::model::ReplayStep;
use crate::world::{DbFate, Event};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

/// A counterexample file as `check --out` writes it (`<property>.json`), read back for
/// `outbox-check replay`.
pub struct CounterexampleFile {
    pub fleet: Vec<String>,
    /// The world the path runs in.
    pub config: crate::world::WorldConfig,
    pub id: String,
    pub actions: Vec<crate::world::Action>,
    pub cycle_from: Option<usize>,
    pub message: Option<u32>,
}

impl CounterexampleFile {
    /// Reads the file's JSON; the error names what is missing or malformed.
    pub fn parse(text: &str) -> Result<CounterexampleFile, String> {
        use serde::Deserialize;
        #[derive(Deserialize)]
        struct Step {
            action: crate::world::Action,
        }
        #[derive(Deserialize)]
        struct Property {
            id: String,
            counterexample: Option<Vec<Step>>,
            cycle_from: Option<usize>,
            #[serde(default)]
            message: Option<u32>,
        }
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            fleet: Vec<String>,
            config: crate::world::WorldConfig,
            world: Option<crate::world::WorldConfig>,
            property: Property,
        }
        let file: File = serde_json::from_str(text).map_err(|e| format!("not a counterexample file of outbox-check check: {e}"))?;
        let steps = file.property.counterexample.ok_or_else(|| format!("{} has no counterexample in this file", file.property.id))?;
        if file.config.relays.is_empty() {
            return Err("the configuration has no relay".into());
        }
        Ok(CounterexampleFile {
            fleet: file.fleet,
            config: file.world.unwrap_or_else(|| crate::check::world_of(&file.config, &file.property.id)),
            actions: steps.into_iter().map(|s| s.action).collect(),
            id: file.property.id,
            cycle_from: file.property.cycle_from,
            message: file.property.message,
        })
    }

    /// The file shows a reachability example, not a violation.
    pub fn kind_is_reachability(&self) -> bool {
        self.id.starts_with("R-")
    }
}

/// The Mermaid sequence diagram of a path: a lane per relay, the database and the broker. Only
/// the notes of `property` (id, name) are drawn on the steps; other properties the path also
/// breaks are listed once at the end. A lasso's cycle is drawn as a `loop`.
pub fn mermaid(steps: &[ReplayStep], relays: usize, cycle_from: Option<usize>, property: Option<(&str, &str)>) -> String {
    let mut out = String::from("sequenceDiagram\n");
    for r in 0..relays {
        let _ = writeln!(out, "    participant r{r}");
    }
    out.push_str("    participant DB\n    participant Broker\n");
    let mut others: Vec<&'static str> = Vec::new();
    let mut looping = false;
    for step in steps {
        if cycle_from == Some(step.index) {
            let _ = writeln!(out, "    loop forever, with no fault");
            looping = true;
        }
        for event in &step.events {
            out.push_str(&mermaid_event(event, step.now));
        }
        for v in &step.violations {
            if property.is_none_or(|(id, _)| v.property.id() == id) {
                let _ = writeln!(out, "    Note over DB: ✗ {} {}", v.property.id(), mermaid_text(&v.detail));
            } else if !others.contains(&v.property.id()) {
                others.push(v.property.id());
            }
        }
    }
    if looping {
        out.push_str("    end\n");
        if let Some((id, name)) = property {
            let _ = writeln!(out, "    Note over DB: ✗ {id} {} — never, however long the loop runs", mermaid_text(name));
        }
    }
    if !others.is_empty() {
        others.sort_unstable();
        let _ = writeln!(out, "    Note over DB: this path also breaks {} (see the steps)", others.join(", "));
    }
    out
}

fn mermaid_text(text: &str) -> String {
    text.replace([';', '#'], " ").replace("  ", " ")
}

fn mermaid_event(event: &Event, true_now: u64) -> String {
    // A relay's skewed clock gave the statement its now: say the true time beside it.
    let at = |now: u64| if now == true_now { format!("now={now}") } else { format!("now={now} (true time t={true_now})") };
    let lost = |db: &DbFate| match db {
        DbFate::Ok => "",
        DbFate::LostBefore => " (connection lost before it ran)",
        DbFate::LostAfter => " (committed, reply lost)",
    };
    match event {
        Event::Enqueued { request, result } => {
            format!("    Note over DB: app enqueues {} — {}\n", request.message_id, result)
        }
        Event::Claimed { relay, request, leases, db } => {
            let got: Vec<String> =
                leases.iter().map(|l| format!("{} token {} attempts {}", l.message_id, l.token.0, l.attempts)).collect();
            let mut s = format!("    r{relay}->>DB: claim at {}\n", at(request.now.0));
            if *db == DbFate::Ok {
                let _ = writeln!(s, "    DB-->>r{relay}: {}", if got.is_empty() { "nothing".into() } else { got.join(", ") });
            } else {
                let _ = writeln!(s, "    DB--xr{relay}: {}{}", got.join(", "), lost(db));
            }
            s
        }
        Event::Published { relay, lease, fate, .. } => {
            let answer = fate.words();
            format!("    r{relay}->>Broker: publish {} key {}\n    Broker-->>r{relay}: {answer}\n", lease.message_id, lease.message_id)
        }
        Event::Wrote { relay, request, result, db } => {
            let mut s = format!(
                "    r{relay}->>DB: {}({} token {}) at {}\n",
                request.kind.name(),
                request.lease.message_id,
                request.lease.token.0,
                at(request.now.0)
            );
            let answer = match result {
                Some(result) => result.to_string(),
                None => "not run".into(),
            };
            if *db == DbFate::Ok {
                let _ = writeln!(s, "    DB-->>r{relay}: {answer}");
            } else {
                let _ = writeln!(s, "    DB--xr{relay}: {answer}{}", lost(db));
            }
            s
        }
        Event::Finished { relay, message_id, result } => {
            format!("    Note over r{relay}: {message_id}: {}\n", result.as_str())
        }
        Event::Crashed { relay } => format!("    Note over r{relay}: crashes, restarts empty\n"),
        Event::Reaped { now, messages } => format!(
            "    Note over DB: reaper at t={}: {} → EXHAUSTED\n",
            now.0,
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Event::Ticked { now } => format!("    Note over DB: t={}\n", now.0),
        Event::Requeued { message_id, result } => format!("    Note over DB: operator requeues {message_id}: {result}\n"),
        Event::RescueRead { now, lease } => {
            format!("    Note over DB: rescuer at t={} reads {}'s expired lease (token {})\n", now.0, lease.message_id, lease.token)
        }
        Event::Rescued { request, result } => format!(
            "    Note over DB: rescuer at t={} moves {} to {} (fence: {}): {result}\n",
            request.now.0,
            request.lease.message_id,
            request.to,
            request.fence.name()
        ),
    }
}

/// The one sentence of what goes wrong on a counterexample: the violation's own words for a
/// safety property, the property that never comes true for a lasso.
pub fn what_goes_wrong(property: &PropertyResult) -> Option<String> {
    let steps = property.counterexample.as_ref()?;
    match property.kind {
        Kind::Liveness if property.id == "L3" => {
            // The run L3 speaks of begins after the path's last fault: from there nothing goes
            // wrong, and the message is still never published.
            let last_fault = steps.iter().rev().find(|s| crate::liveness::is_fault(s.action, false)).map(|s| s.index);
            let from = last_fault.map_or("from the start".to_string(), |i| format!("after the last fault (step {i})"));
            Some(format!(
                "{from} no fault happens, yet the message is never PUBLISHED: it was still deliverable then, and the fault-free steps that follow lose it — the cycle from step {} repeats forever without publishing it.",
                property.cycle_from.map(|c| c.to_string()).unwrap_or_default()
            ))
        }
        Kind::Liveness => Some(format!(
            "{} {} never comes true: after step {} the same fault-free steps repeat forever without it.",
            property.id,
            property.name,
            property.cycle_from.map(|c| c.to_string()).unwrap_or_default()
        )),
        Kind::Reachability => None,
        _ => steps
            .iter()
            .rev()
            .flat_map(|s| s.violations.iter())
            .find(|v| v.property.id() == property.id)
            .map(|v| format!("{}.", v.detail)),
    }
}

/// A counterexample in words and as a diagram, with the command that reproduces it.
pub fn counterexample_markdown(report: &CheckReport, property: &PropertyResult, command: &str) -> String {
    let mut out = String::new();
    let fleet = report.fleet.join(", ");
    let what = match property.kind {
        Kind::Reachability => "example",
        _ => "counterexample",
    };
    let _ = writeln!(out, "# {} {} — {what} for {fleet}\n", property.id, property.name);
    if let Some(sentence) = what_goes_wrong(property) {
        let _ = writeln!(out, "**What goes wrong:** {sentence}\n");
    }
    let _ = writeln!(
        out,
        "Fleet: {fleet} ({}, {}, budget {}, faults: {}). Reproduce:\n\n```sh\n{command}\n```\n",
        count(report.config.relays.len() as u64, "relay"),
        count(report.config.messages, "message"),
        report.config.max_attempts,
        report.config.faults.names().join(", ")
    );
    if let Some(path) = &property.explorer_path {
        let explore = command.replacen("outbox-check check", "outbox-check explore", 1);
        let _ = writeln!(out, "Step through it in the explorer: run `{explore}` and open <http://127.0.0.1:3000/#/steps/{path}>.\n");
    }
    let Some(steps) = &property.counterexample else {
        return out;
    };
    if property.kind == Kind::Liveness {
        let _ = writeln!(
            out,
            "A fair run that never satisfies the property: the steps up to {} happen once, then the steps from there on repeat forever with no fault.\n",
            property.cycle_from.map(|c| c.to_string()).unwrap_or_default()
        );
    } else {
        let _ = writeln!(out, "The shortest path ({}):\n", count(steps.len() as u64, "step"));
    }
    for step in steps {
        if property.cycle_from == Some(step.index) {
            out.push_str("\n*The cycle, repeated forever:*\n\n");
        }
        let _ = writeln!(out, "{}. {}", step.index, step.text.join("; "));
        for v in &step.violations {
            let _ = writeln!(out, "   - **✗ {}**", v);
        }
    }
    let _ = writeln!(out, "\n```mermaid\n{}```", mermaid(steps, report.config.relays.len(), property.cycle_from, Some((&property.id, &property.name))));
    out
}

/// Writes every violated property's counterexample (and the ordering example, which SPEC wants
/// shown) under `dir/<fleet>/`, as `.md`, `.json` and `.trace.jsonl` (the oracle's format).
/// Returns the files written.
pub fn write_counterexamples(report: &CheckReport, dir: &Path, command: &str) -> std::io::Result<Vec<PathBuf>> {
    let folder = dir.join(config_slug(&report.config));
    let mut written = Vec::new();
    for property in &report.properties {
        let shown = property.status == Verdict::Violated || property.id == "R-order" && property.status == Verdict::Reached;
        if !shown || property.counterexample.is_none() {
            continue;
        }
        std::fs::create_dir_all(&folder)?;
        let md = folder.join(format!("{}.md", property.id));
        std::fs::write(&md, counterexample_markdown(report, property, command))?;
        let json = folder.join(format!("{}.json", property.id));
        let body = serde_json::json!({
            "fleet": report.fleet, "config": report.config, "property": property, "command": command,
            // The world the path runs in (L2's has a permanent outage): what `replay` replays.
            "world": crate::check::world_of(&report.config, &property.id),
        });
        std::fs::write(&json, serde_json::to_string_pretty(&body).expect("JSON of plain values"))?;
        written.push(md);
        written.push(json);
        // The same path as the oracle's trace format, so another implementation can replay it.
        if let Some(steps) = &property.counterexample {
            let (_, mut events) = crate::world::World::new_with_events(&report.config);
            events.extend(steps.iter().flat_map(|s| s.events.iter().cloned()));
            let (header, trace) = crate::trace::from_world(&report.config, &events);
            let file = folder.join(format!("{}.trace.jsonl", property.id));
            std::fs::write(&file, crate::trace::to_jsonl(&header, &trace))?;
            written.push(file);
            // And as ITF, the informal trace format of Apalache and Quint.
            let itf = folder.join(format!("{}.itf.json", property.id));
            let description = format!("{} {}: shortest counterexample for {}", property.id, property.name, report.fleet.join(" + "));
            let body = to_itf(&report.config, steps, &description, command);
            std::fs::write(&itf, serde_json::to_string_pretty(&body).expect("JSON of plain values"))?;
            written.push(itf);
        }
    }
    Ok(written)
}

/// The `outbox-check check` command that reproduces a configuration's check.
pub fn check_command(config: &crate::world::WorldConfig) -> String {
    let designs: Vec<&str> = config.relays.iter().map(|r| r.design.argument()).collect();
    let files = config.relays.iter().any(|r| matches!(r.design, crate::core::Design::Custom(_)));
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

/// Writes `dir/index.md` — the verdict matrix (each fleet's verdicts over its worlds, as
/// [`crate::check::merged`] combines them) and one section per finding, each with its shortest
/// counterexample in words and as a diagram and the command that reproduces it — and every
/// counterexample under `dir/counterexamples/<configuration>/`.
pub fn write_index(dir: &Path, fleets: &[(&str, &[CheckReport], &[String])], messages: u32) -> std::io::Result<()> {
    use crate::core::Property;
    let examples = dir.join("counterexamples");
    let ids: Vec<&str> = Property::SAFETY.iter().chain(Property::LIVENESS.iter()).map(|p| p.id()).collect();
    let mut out = format!(
        "# outbox-check — findings\n\nGenerated by `outbox-check verify --report reports` (model checking: two relays, {}, every fault of SPEC §6, budget 3; and two tenants with the application's enqueues, for S9 and S10). ✓ holds: exercised, and true in every reachable state; ✗ violated — the link opens the shortest counterexample, replayed in the plain world; ✗s violated in simulation only (the first failing seed is in the table below); – not exercised (the reason is below the matrix); ? undecided.\n\n",
        count(messages, "message")
    );
    out.push_str("| fleet |");
    for id in &ids {
        let _ = write!(out, " {id} |");
    }
    out.push_str(" states |\n|---|");
    for _ in &ids {
        out.push_str("---|");
    }
    out.push_str("---:|\n");
    let mut notes = String::new();
    for (name, reports, simulated) in fleets {
        for report in reports.iter() {
            write_counterexamples(report, &examples, &check_command(&report.config))?;
        }
        let _ = write!(out, "| `{name}` |");
        for id in &ids {
            let verdict = crate::check::merged(id, reports);
            let decider = reports.iter().find(|r| r.property(id).is_some_and(|p| p.status == verdict));
            match verdict {
                // As the terminal shows it: violated in simulation only (the seed is below).
                _ if verdict != Verdict::Violated && simulated.iter().any(|s| s == id) => out.push_str(" ✗s |"),
                Verdict::Holds => out.push_str(" ✓ |"),
                Verdict::Violated => {
                    let slug = decider.map(|r| config_slug(&r.config)).unwrap_or_default();
                    let _ = write!(out, " [✗](counterexamples/{slug}/{id}.md) |");
                }
                Verdict::NotExercised => {
                    out.push_str(" – |");
                    if let Some(note) = decider.and_then(|r| r.property(id)).and_then(|p| p.note.clone()) {
                        let _ = writeln!(notes, "- `{name}` {id}: {note}");
                    }
                }
                _ => out.push_str(" ? |"),
            }
        }
        let _ = writeln!(out, " {} |", reports.iter().map(|r| r.unique_states).sum::<usize>());
    }
    if !notes.is_empty() {
        out.push_str("\nNot exercised:\n\n");
        out.push_str(&notes);
    }
    out.push_str("\nProperty names: S1 no stale terminal write succeeds, S2 fresh token per claim, S3 attempts within budget, S4 terminal is absorbing, S5 no invented confirmation, S6 one live lease, S7 retry clock respected, S8 stable idempotency key, S9 tenant isolation, S10 atomic enqueue, L1 every message eventually terminal, L2 EXHAUSTED within the budget under an outage, L3 delivered once faults stop.\n");
    for (name, reports, _) in fleets {
        for report in reports.iter() {
            let command = check_command(&report.config);
            for property in report.properties.iter().filter(|p| p.status == Verdict::Violated) {
                let _ = writeln!(out, "\n## `{name}` — {} {}\n", property.id, property.name);
                let Some(steps) = &property.counterexample else { continue };
                if let Some(last) = steps.iter().rev().find(|s| !s.violations.is_empty()) {
                    if let Some(v) = last.violations.iter().find(|v| v.property.id() == property.id) {
                        let _ = writeln!(out, "What goes wrong: {}.\n", v.detail);
                    }
                }
                let _ = writeln!(out, "Reproduce: `{command}` ([details](counterexamples/{}/{}.md))\n", config_slug(&report.config), property.id);
                for step in steps {
                    if property.cycle_from == Some(step.index) {
                        out.push_str("\n*Then, forever:*\n\n");
                    }
                    let _ = writeln!(out, "{}. {}", step.index, step.text.join("; "));
                }
                let _ = writeln!(out, "\n```mermaid\n{}```", mermaid(steps, report.config.relays.len(), property.cycle_from, Some((&property.id, &property.name))));
            }
        }
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("index.md"), out)
}

/// A counterexample in ITF (the informal trace format of Apalache and Quint,
/// <https://apalache-mc.org/docs/adr/015adr-trace.html>): one state per step, the initial state
/// first. Variables: `now`; `rows` (the table, a sequence of records); `relays` (what each relay
/// waits on); `action` (the step that led here, as `mbt::actionTaken` in Quint's convention);
/// `violations` (the properties broken by that step). Tokens are `#bigint`; an absent time or
/// owner is `-1` / `""` (ITF has no null).
pub fn to_itf(config: &crate::world::WorldConfig, steps: &[crate::model::ReplayStep], description: &str, command: &str) -> serde_json::Value {
    use crate::world::World;
    use serde_json::json;
    let state = |world: &World, index: usize, action: String, violations: Vec<String>| {
        let rows: Vec<serde_json::Value> = world
            .outbox
            .rows()
            .iter()
            .map(|r| {
                json!({
                    "message": format!("m{}", r.message_id.0),
                    "tenant": format!("tenant{}", r.tenant_id.0),
                    "status": r.status.as_str(),
                    "attempts": r.attempts,
                    "lease_owner": r.lease_owner.map(|o| format!("r{}", o.0)).unwrap_or_default(),
                    "lease_token": { "#bigint": r.lease_token.0.to_string() },
                    "lease_expires_at": r.lease_expires_at.map_or(-1, |t| t.0 as i64),
                    "next_attempt_at": r.next_attempt_at.map_or(-1, |t| t.0 as i64),
                    "last_failure_code": r.last_failure_code.map(|c| c.as_str()).unwrap_or(""),
                })
            })
            .collect();
        let relays: Vec<serde_json::Value> = world
            .relays
            .iter()
            .enumerate()
            .map(|(i, slot)| {
                let waits = match slot {
                    None => "idle".to_string(),
                    Some((_, crate::relay::Effect::Claim { .. })) => "claim".into(),
                    Some((_, crate::relay::Effect::Publish { lease, .. })) => format!("publish m{} #{}", lease.message_id.0, lease.token.0),
                    Some((_, crate::relay::Effect::Write { request })) => {
                        format!("{} m{} #{}", request.kind.name(), request.lease.message_id.0, request.lease.token.0)
                    }
                    Some((_, crate::relay::Effect::Done)) => "idle".into(),
                };
                json!({ "relay": format!("r{i}"), "design": config.relays[i].design.name(), "waits_on": waits })
            })
            .collect();
        json!({
            "#meta": { "index": index },
            "now": world.now.0,
            "rows": rows,
            "relays": relays,
            "action": action,
            "violations": violations,
        })
    };
    let mut world = World::new(config);
    let mut states = vec![state(&world, 0, "init".into(), Vec::new())];
    for step in steps {
        world.apply(config, step.action);
        let violations = step.violations.iter().map(|v| v.property.id().to_string()).collect();
        states.push(state(&world, step.index, step.text.join("; "), violations));
    }
    json!({
        "#meta": {
            "format": "ITF",
            "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
            "source": command,
            "description": description,
        },
        "vars": ["now", "rows", "relays", "action", "violations"],
        "states": states,
    })
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
        let free_slot = |bars: &[Bar], lane: usize| (0..).find(|s| !bars.iter().any(|b| b.lane == lane && b.end.is_none() && b.slot == *s)).unwrap_or(0);
        let open_bar = |bars: &[Bar], message: &str, token: Option<&String>| -> Option<usize> {
            bars.iter().rposition(|b| {
                b.lane == lane && b.end.is_none() && b.message == message && (token.is_none() || b.token.as_ref() == token)
            })
        };
        match e {
            T::Claim { leases, now, outcome, .. } => {
                if leases.is_empty() {
                    let what = if *outcome == crate::trace::Outcome::Unknown { "claim of unknown outcome" } else { "claim of no row" };
                    marks.push((x, lane, 0, "claim", format!("line {line}: {what} at t={now}")));
                }
                for l in leases {
                    let slot = free_slot(&bars, lane);
                    bars.push(Bar { lane, message: l.message.clone(), token: l.token.clone(), start: x, end: None, slot });
                    let token = l.token.as_ref().map(|t| format!(" token {t}")).unwrap_or_default();
                    marks.push((x, lane, slot, "claim", format!("line {line}: claims {}{token} at t={now}, attempts {}", l.message, l.attempts)));
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
                marks.push((x, lane, slot, class, format!("line {line}: {write} {message} at t={now}: {}", result.as_str())));
            }
            T::Release { message, now, to, result, fence, .. } => {
                marks.push((x, lane, 0, if result == "applied" { "release" } else { "stale" }, format!("line {line}: release of {message} to {to} ({fence} fence) at t={now}: {result}")));
            }
            T::Reap { now, messages } => {
                marks.push((x, lane, 0, "release", format!("line {line}: reap at t={now}: {}", if messages.is_empty() { "nothing".to_string() } else { messages.join(", ") })));
            }
            T::Requeue { message, result } => marks.push((x, lane, 0, "release", format!("line {line}: requeue of {message}: {result}"))),
            T::Enqueue { message, now, result, .. } => marks.push((x, lane, 0, "enqueue", format!("line {line}: enqueues {message} at t={now}: {result}"))),
            T::Clock { .. } | T::Fault { .. } => {}
        }
    }
    let slots: Vec<usize> = (0..lanes.len()).map(|l| bars.iter().filter(|b| b.lane == l).map(|b| b.slot + 1).max().unwrap_or(1)).collect();
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
            let _ = writeln!(svg, r#"<rect class="divergent-column" data-line="{line}" x="{}" y="20" width="{STEP}" height="{}"/>"#, x_of(*x) - STEP / 2, height - 20);
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
        let _ = writeln!(svg, r#"<g class="mark {class}{hit}" data-line="{line}">{shape}<title>{}</title></g>"#, html_text(title));
    }
    svg.push_str("</svg>\n");
    let mut list = String::new();
    for d in divergences {
        let named = d.property.map(|p| p.to_string()).or(d.conformance.map(|c| c.to_string())).unwrap_or_default();
        let said = if d.expected.is_empty() { d.got.clone() } else { format!("the model allows {}, the implementation reported {}", d.expected, d.got) };
        let _ = writeln!(
            list,
            r#"<li class="divergence {kind}" data-line="{line}"><b>line {line}</b> · <b>{named}</b>{safe}<br>{said}</li>"#,
            kind = d.kind,
            line = d.line,
            named = html_text(&named),
            safe = if d.kind == "conformance" { " (no safety property broken)" } else { "" },
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
