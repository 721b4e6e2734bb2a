//! The explorer: one page served by the binary (no network, no script from elsewhere) to step
//! through the model a state at a time, and an API that answers for one path.
//!
//! A path is the one `check` prints: `0/3/1/…`, the initial state then, for each step, the
//! index of the action among the model's next actions at that state. The explorer walks it in
//! the same normalised model `check` searched, and tells every step from the path replayed in
//! the plain world ([`crate::outbox::replay`]), so its words, relays and true times are the ones
//! `check`, the Markdown reports and the diagrams give. `outage/0/…` walks the world of L2, where
//! the broker is down for good.
//!
//! Property status is for the state shown: a safety property broken by the last step, broken
//! earlier on the path, or not broken on it; a reachability situation reached on the path or
//! not — beside the verdict over the whole model, from a check run once in the background.

use crate::check::{CheckReport, Verdict};
use crate::outbox::{replay, state_svg, OutboxModel, REACHABILITY, SAFETY_NAMES};
use outbox_check::world::{Action, WorldConfig};
use serde_json::{json, Value};
use stateright::Model;
use std::sync::{Arc, OnceLock};

/// The page: HTML, CSS and script in one file.
const PAGE: &str = include_str!("explorer.html");

/// The explorer of one fleet: the model `check` searches, L2's outage world, and the background
/// check's report once it is in.
pub struct Explorer {
    normal: OutboxModel,
    outage: OutboxModel,
    pub checked: Arc<OnceLock<CheckReport>>,
}

/// A request the explorer cannot answer: the path names no state.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadPath(String);

/// A path walked: whether it runs in the outage world, its actions, the states along it, and the
/// actions enabled at its end.
type Walked = (bool, Vec<Action>, Vec<outbox_check::world::World>, Vec<Action>);

impl Explorer {
    pub fn new(config: WorldConfig) -> Explorer {
        let outage = crate::check::world_of(&config, outbox_check::core::Property::L2.id());
        Explorer { normal: OutboxModel::new(config), outage: OutboxModel::new(outage), checked: Default::default() }
    }

    pub fn config(&self) -> &WorldConfig {
        &self.normal.config
    }

    /// The model actions a path names, in the world it names; the normalised states along it
    /// (the initial one first); and the actions enabled at its end.
    fn walk(&self, path: &str) -> Result<Walked, BadPath> {
        let path = path.trim_matches('/');
        let (outage, indices) = match path.strip_prefix("outage") {
            Some(rest) => (true, rest.trim_start_matches('/')),
            None => (false, path),
        };
        let model = if outage { &self.outage } else { &self.normal };
        let mut parts = indices.split('/').filter(|p| !p.is_empty());
        match parts.next() {
            None | Some("0") => {}
            Some(other) => return Err(BadPath(format!("the path starts at the initial state 0, not at {other:?}"))),
        }
        let mut states = vec![model.init_states().remove(0)];
        let (mut actions, mut next) = (Vec::new(), Vec::new());
        for (step, part) in parts.enumerate() {
            let state = states.last().expect("the initial state");
            let index: usize =
                part.parse().map_err(|_| BadPath(format!("step {}: {part:?} is not an action index", step + 1)))?;
            next.clear();
            model.actions(state, &mut next);
            let Some(&action) = next.get(index) else {
                return Err(BadPath(format!(
                    "step {}: there is no next action {index} (the state after step {step} has {})",
                    step + 1,
                    outbox_check::report::count(next.len() as u64, "next action")
                )));
            };
            actions.push(action);
            let after = model.next_state(state, action).expect("a model step");
            states.push(after);
        }
        next.clear();
        model.actions(states.last().expect("the initial state"), &mut next);
        Ok((outage, actions, states, next))
    }

    /// Everything the page shows at one path, as JSON.
    pub fn view(&self, path: &str) -> Result<Value, BadPath> {
        let (outage, actions, states, next) = self.walk(path)?;
        let config = if outage { &self.outage.config } else { &self.normal.config };
        let prefix = if outage { "outage/0" } else { "0" };
        let encoded = |indices: &[String]| {
            std::iter::once(prefix.to_string()).chain(indices.iter().cloned()).collect::<Vec<_>>().join("/")
        };
        let indices: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .filter(|p| !p.is_empty() && *p != "outage")
            .skip(1)
            .map(String::from)
            .collect();
        let steps = replay(config, &actions);
        let now = steps.last().map_or(0, |s| s.now);
        let steps_json: Vec<Value> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                json!({
                    "index": s.index,
                    "now": s.now,
                    "text": s.text,
                    "violations": s.violations.iter().map(|v| v.property.id()).collect::<Vec<_>>(),
                    "sentences": s.violations.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
                    "path": encoded(&indices[..=i]),
                })
            })
            .collect();
        // Each next action, told as the step it would be: its words, and what it would break.
        let next_json: Vec<Value> = next
            .iter()
            .enumerate()
            .map(|(i, &action)| {
                let mut trial = actions.clone();
                trial.push(action);
                let last = replay(config, &trial).pop().expect("one step more");
                let mut then = indices.clone();
                then.push(i.to_string());
                json!({
                    "index": i,
                    "text": last.text,
                    "violations": last.violations.iter().map(|v| v.property.id()).collect::<Vec<_>>(),
                    "path": encoded(&then),
                })
            })
            .collect();

        let checked = self.checked.get();
        let verdict_of = |id: &str| checked.and_then(|r| r.properties.iter().find(|p| p.id == id));
        let verdict_words = |p: Option<&crate::check::PropertyResult>| match p {
            None if checked.is_none() => ("checking", "being checked in the background".to_string()),
            None => ("unknown", "not checked".to_string()),
            Some(p) => match p.status {
                Verdict::Holds => ("holds", "holds in every run of this configuration".to_string()),
                Verdict::Violated if p.kind == crate::check::Kind::Liveness => (
                    "violated",
                    format!(
                        "violated: a fair run that never gets there, {} then a cycle from step {}",
                        outbox_check::report::count(p.counterexample.as_ref().map_or(0, Vec::len) as u64, "step"),
                        p.cycle_from.unwrap_or(1)
                    ),
                ),
                Verdict::Violated => (
                    "violated",
                    format!(
                        "violated: shortest counterexample {}",
                        outbox_check::report::count(p.counterexample.as_ref().map_or(0, Vec::len) as u64, "step")
                    ),
                ),
                Verdict::Reached => (
                    "reached",
                    format!(
                        "reached: shortest path {}",
                        outbox_check::report::count(p.counterexample.as_ref().map_or(0, Vec::len) as u64, "step")
                    ),
                ),
                Verdict::Unreached => ("unreached", "never reached in this configuration".to_string()),
                Verdict::NotExercised => {
                    ("not-exercised", p.note.clone().unwrap_or_else(|| "not exercised".to_string()))
                }
                Verdict::Unknown => ("unknown", format!("undecided: {}", p.note.clone().unwrap_or_default())),
            },
        };
        let mut properties = Vec::new();
        for (i, name) in SAFETY_NAMES.iter().enumerate() {
            let id = outbox_check::core::Property::SAFETY[i].id();
            let first = steps.iter().find(|s| s.violations.iter().any(|v| v.property.id() == id));
            let at_last = steps.last().is_some_and(|s| s.violations.iter().any(|v| v.property.id() == id));
            let (here, here_text) = match first {
                _ if at_last => ("broken", "broken at this state".to_string()),
                Some(s) => ("broken-earlier", format!("broken earlier on this path, at step {}", s.index)),
                None => ("clean", "not broken on this path".to_string()),
            };
            let p = verdict_of(id);
            let (check, check_text) = verdict_words(p);
            properties.push(json!({
                "id": id, "name": &name[id.len() + 1..], "kind": "safety",
                "here": here, "here_text": here_text, "check": check, "check_text": check_text,
                "check_path": p.and_then(|p| p.explorer_path.clone()),
            }));
        }
        // Reachability: the model's own condition at each state along the path.
        for r in REACHABILITY.iter() {
            let (id, name) = r.name().split_once(' ').unwrap_or((r.name(), r.name()));
            let first = states.iter().position(|s| s.step.seen.has(*r));
            let (here, here_text) = match first {
                Some(k) if k == actions.len() => ("reached", "reached by the last step".to_string()),
                Some(k) => ("reached-earlier", format!("reached on this path, at step {k}")),
                None => ("unreached", "not reached on this path".to_string()),
            };
            let p = verdict_of(id);
            let (check, check_text) = verdict_words(p);
            properties.push(json!({
                "id": id, "name": name, "kind": "reachability",
                "here": here, "here_text": here_text, "check": check, "check_text": check_text,
                "check_path": p.and_then(|p| p.explorer_path.clone()),
            }));
        }
        for live in
            [outbox_check::core::Property::L1, outbox_check::core::Property::L2, outbox_check::core::Property::L3]
        {
            let id = live.id();
            let p = verdict_of(id);
            let (check, check_text) = verdict_words(p);
            let lasso_path = p.and_then(|p| p.explorer_path.clone());
            let cycle_from = p.and_then(|p| p.cycle_from);
            // On its own lasso, the path shown is the run that breaks it.
            let on_lasso = lasso_path.as_deref().is_some_and(|l| l.trim_matches('/') == encoded(&indices));
            let (here, here_text) = if on_lasso {
                (
                    "lasso",
                    format!(
                        "this path is its lasso: from step {} the cycle repeats forever, with no fault",
                        cycle_from.unwrap_or(1)
                    ),
                )
            } else {
                ("runs", "decided over whole runs, not at one state".to_string())
            };
            properties.push(json!({
                "id": id, "name": live.sentence(), "kind": "liveness",
                "here": here, "here_text": here_text, "check": check, "check_text": check_text,
                "check_path": lasso_path, "cycle_from": cycle_from,
                "lasso": p.and_then(|p| p.counterexample.as_ref()).map(|c| c.iter().map(|s| s.text.join("; ")).collect::<Vec<_>>()),
                "world": if id == outbox_check::core::Property::L2.id() { "the broker down for good (L2's world)" } else { "the configuration's own faults" },
            }));
        }
        let cycle_from = properties.iter().find(|p| p["here"] == "lasso").and_then(|p| p["cycle_from"].as_u64());
        Ok(json!({
            "schema": "outbox-check/explore-state/v1",
            "fleet": config.relays.iter().map(|r| r.design.name()).collect::<Vec<_>>(),
            "world": if outage { "outage" } else { "normal" },
            "path": encoded(&indices),
            "now": now,
            "relays": config.relays.iter().enumerate().map(|(r, spec)| json!({
                "relay": format!("r{r}"), "design": spec.design.name(), "owner": spec.owner.to_string(),
                "skew": spec.skew, "clock": now as i64 + spec.skew,
            })).collect::<Vec<_>>(),
            "steps": steps_json,
            "cycle_from": cycle_from,
            "next": next_json,
            "svg": state_svg(config, &actions, None),
            "properties": properties,
            "checking": checked.is_none(),
        }))
    }

    /// Answers requests until the process ends.
    pub fn serve(&self, server: tiny_http::Server) {
        for request in server.incoming_requests() {
            let url = request.url().to_string();
            let (route, query) = url.split_once('?').unwrap_or((&url, ""));
            let (status, kind, body) = match route {
                "/" | "/index.html" => (200, "text/html; charset=utf-8", PAGE.to_string()),
                "/api/state" => {
                    let path =
                        query.split('&').find_map(|kv| kv.strip_prefix("path=")).unwrap_or("0").replace("%2F", "/");
                    match self.view(&path) {
                        Ok(view) => (200, "application/json", view.to_string()),
                        Err(error) => (400, "application/json", json!({ "error": error.to_string() }).to_string()),
                    }
                }
                _ => (404, "text/plain; charset=utf-8", format!("no page {route}: the explorer is at /")),
            };
            let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], kind.as_bytes()).expect("a valid header");
            let _ =
                request.respond(tiny_http::Response::from_string(body).with_status_code(status).with_header(header));
        }
    }
}
