//! Reports of a check a person can read: counterexamples as Markdown with a Mermaid sequence
//! diagram, as JSON and as ITF, and the verdict matrix of `verify`. Presentation only: no outbox
//! rule lives here.

use crate::check::{CheckReport, Kind, PropertyResult, Verdict};
use crate::outbox::ReplayStep;
use outbox_check::report::{check_command, config_slug, count};
use outbox_check::world::{DbFate, Event};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A counterexample file as `check --out` writes it (`<property>.json`), read back for
/// `outbox-check replay`.
pub struct CounterexampleFile {
    pub fleet: Vec<String>,
    /// The world the path runs in.
    pub config: outbox_check::world::WorldConfig,
    pub id: String,
    pub actions: Vec<outbox_check::world::Action>,
    pub cycle_from: Option<usize>,
    pub message: Option<u32>,
}

impl CounterexampleFile {
    /// Reads the file's JSON; the error names what is missing or malformed.
    pub fn parse(text: &str) -> Result<CounterexampleFile, String> {
        use serde::Deserialize;
        #[derive(Deserialize)]
        struct Step {
            action: outbox_check::world::Action,
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
            config: outbox_check::world::WorldConfig,
            world: Option<outbox_check::world::WorldConfig>,
            property: Property,
        }
        let file: File =
            serde_json::from_str(text).map_err(|e| format!("not a counterexample file of outbox-check check: {e}"))?;
        let steps = file
            .property
            .counterexample
            .ok_or_else(|| format!("{} has no counterexample in this file", file.property.id))?;
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
pub fn mermaid(
    steps: &[ReplayStep],
    relays: usize,
    cycle_from: Option<usize>,
    property: Option<(&str, &str)>,
) -> String {
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
            let _ =
                writeln!(out, "    Note over DB: ✗ {id} {} — never, however long the loop runs", mermaid_text(name));
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
    let at =
        |now: u64| if now == true_now { format!("now={now}") } else { format!("now={now} (true time t={true_now})") };
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
            let got: Vec<String> = leases
                .iter()
                .map(|l| format!("{} token {} attempts {}", l.message_id, l.token.0, l.attempts))
                .collect();
            let mut s = format!("    r{relay}->>DB: claim at {}\n", at(request.now.0));
            if *db == DbFate::Ok {
                let _ = writeln!(
                    s,
                    "    DB-->>r{relay}: {}",
                    if got.is_empty() { "nothing".into() } else { got.join(", ") }
                );
            } else {
                let _ = writeln!(s, "    DB--xr{relay}: {}{}", got.join(", "), lost(db));
            }
            s
        }
        Event::Published { relay, lease, fate, .. } => {
            let answer = fate.words();
            format!(
                "    r{relay}->>Broker: publish {} key {}\n    Broker-->>r{relay}: {answer}\n",
                lease.message_id, lease.message_id
            )
        }
        Event::Wrote { relay, request, result, db, .. } => {
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
        Event::SessionEnded { relay, now, messages } => format!(
            "    Note over r{relay}: session ends at t={}, lease on {} ends\n",
            now.0,
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Event::LeaseReleased { relay, message, cleared } => {
            format!(
                "    r{relay}->>DB: release {message}'s lease by owner: {}\n",
                if *cleared { "cleared" } else { "no match" }
            )
        }
        Event::LeaseRenewed { relay, until, messages } => format!(
            "    r{relay}->>DB: heartbeat: {}'s lease to t={}\n",
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "),
            until.0
        ),
        Event::Scheduled { now, messages, .. } => format!(
            "    Note over DB: scheduler at t={}: {} claimable again\n",
            now.0,
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Event::Reaped { now, messages } => format!(
            "    Note over DB: reaper at t={}: {} → EXHAUSTED\n",
            now.0,
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Event::Ticked { now } => format!("    Note over DB: t={}\n", now.0),
        Event::Requeued { message_id, result } => {
            format!("    Note over DB: operator requeues {message_id}: {result}\n")
        }
        Event::RescueRead { now, lease } => {
            format!(
                "    Note over DB: rescuer at t={} reads {}'s expired lease (token {})\n",
                now.0, lease.message_id, lease.token
            )
        }
        Event::Rescued { request, result } => format!(
            "    Note over DB: rescuer at t={} moves {} to {}{} (fence: {}): {result}\n",
            request.now.0,
            request.lease.message_id,
            request.to,
            request.retry_at.map_or(String::new(), |at| format!(" to retry at t={}", at.0)),
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
        let _ = writeln!(
            out,
            "Step through it in the explorer: run `{explore}` and open <http://127.0.0.1:3000/#/steps/{path}>.\n"
        );
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
    let _ = writeln!(
        out,
        "\n```mermaid\n{}```",
        mermaid(steps, report.config.relays.len(), property.cycle_from, Some((&property.id, &property.name)))
    );
    out
}

/// Writes every violated property's counterexample (and the ordering example, which SPEC wants
/// shown) under `dir/<fleet>/`, as `.md`, `.json` and `.trace.jsonl` (the oracle's format).
/// Returns the files written.
pub fn write_counterexamples(report: &CheckReport, dir: &Path, command: &str) -> std::io::Result<Vec<PathBuf>> {
    let folder = dir.join(config_slug(&report.config));
    let mut written = Vec::new();
    for property in &report.properties {
        let shown =
            property.status == Verdict::Violated || property.id == "R-order" && property.status == Verdict::Reached;
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
            let (_, mut events) = outbox_check::world::World::new_with_events(&report.config);
            events.extend(steps.iter().flat_map(|s| s.events.iter().cloned()));
            let (header, trace) = outbox_check::trace::from_world(&report.config, &events);
            let file = folder.join(format!("{}.trace.jsonl", property.id));
            std::fs::write(&file, outbox_check::trace::to_jsonl(&header, &trace))?;
            written.push(file);
            // And as ITF, the informal trace format of Apalache and Quint.
            let itf = folder.join(format!("{}.itf.json", property.id));
            let description =
                format!("{} {}: shortest counterexample for {}", property.id, property.name, report.fleet.join(" + "));
            let body = to_itf(&report.config, steps, &description, command);
            std::fs::write(&itf, serde_json::to_string_pretty(&body).expect("JSON of plain values"))?;
            written.push(itf);
        }
    }
    Ok(written)
}

/// Writes `dir/index.md` — the verdict matrix (each fleet's verdicts over its worlds, as
/// [`crate::check::merged`] combines them) and one section per finding, each with its shortest
/// counterexample in words and as a diagram and the command that reproduces it — and every
/// counterexample under `dir/counterexamples/<configuration>/`.
pub fn write_index(dir: &Path, fleets: &[(&str, &[CheckReport], &[String])], messages: u32) -> std::io::Result<()> {
    use outbox_check::core::Property;
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
    let _ = writeln!(out, "\nProperty names: {}.", Property::legend(", "));
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
                let _ = writeln!(
                    out,
                    "Reproduce: `{command}` ([details](counterexamples/{}/{}.md))\n",
                    config_slug(&report.config),
                    property.id
                );
                for step in steps {
                    if property.cycle_from == Some(step.index) {
                        out.push_str("\n*Then, forever:*\n\n");
                    }
                    let _ = writeln!(out, "{}. {}", step.index, step.text.join("; "));
                }
                let _ = writeln!(
                    out,
                    "\n```mermaid\n{}```",
                    mermaid(
                        steps,
                        report.config.relays.len(),
                        property.cycle_from,
                        Some((&property.id, &property.name))
                    )
                );
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
pub fn to_itf(
    config: &outbox_check::world::WorldConfig,
    steps: &[crate::outbox::ReplayStep],
    description: &str,
    command: &str,
) -> serde_json::Value {
    use outbox_check::world::World;
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
                    "lease_expires_at": r.lease_expires_at.map_or(-1, |t| i64::try_from(t.0).unwrap_or(i64::MAX)),
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
                    Some((_, outbox_check::relay::Effect::Claim { .. })) => "claim".into(),
                    Some((_, outbox_check::relay::Effect::Publish { lease, .. })) => {
                        format!("publish m{} #{}", lease.message_id.0, lease.token.0)
                    }
                    Some((_, outbox_check::relay::Effect::Write { request })) => {
                        format!("{} m{} #{}", request.kind.name(), request.lease.message_id.0, request.lease.token.0)
                    }
                    Some((_, outbox_check::relay::Effect::Done)) => "idle".into(),
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
