//! Replaying a counterexample in the plain world: no normalisation, no abstraction.
//!
//! A verdict of "violated" is only as good as the path behind it. `check` finds its paths in the
//! reduced model, so before it says "violated" it replays each path here, step by step, in the
//! world as it is — real relay names, true time — and confirms the property breaks there. A
//! path that does not is a bug of the checker's reductions, reported as such, never as a
//! finding. `outbox-check replay FILE` runs the same confirmation on a file `check` wrote.
//!
//! - A safety property: the last step breaks it.
//! - A reachability property: the last step reaches the situation.
//! - A liveness property (a lasso): every step of the cycle is fault-free, the cycle lets time
//!   advance, the goal fails in every state of the cycle, and the state after the cycle is the
//!   state before it (compared under the exact reductions of `World::normalise`, which keep
//!   every comparison a rule can still make: the cycle can be repeated forever). For L3, the
//!   message is still deliverable where the fault-free, never-publishing suffix begins.

use crate::outbox::{describe_at, Broken, ReplayStep, REACHABILITY};
use outbox_check::core::{MessageId, Property, Status};
use outbox_check::world::{Action, World, WorldConfig};

/// Why a path does not replay as claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotReplayed(pub String);

impl std::fmt::Display for NotReplayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Replays `actions` (relays named as the fleet names them) in the plain world from the initial
/// state, checking that every action is enabled where it is taken. Returns the steps and the
/// worlds after each (the first is the initial world).
pub fn run(config: &WorldConfig, actions: &[Action]) -> Result<(Vec<ReplayStep>, Vec<World>), NotReplayed> {
    let mut world = World::new(config);
    let mut worlds = vec![world.clone()];
    let mut steps = Vec::with_capacity(actions.len());
    let mut enabled = Vec::new();
    for (index, &action) in actions.iter().enumerate() {
        enabled.clear();
        world.actions(config, &mut enabled);
        if !enabled.contains(&action) {
            return Err(NotReplayed(format!("step {}: \"{action}\" is not possible there", index + 1)));
        }
        let report = world.apply(config, action);
        steps.push(ReplayStep {
            index: index + 1,
            action,
            now: world.now.0,
            text: report.events.iter().map(|e| describe_at(config, world.now, e)).collect(),
            events: report.events,
            violations: report.violations.iter().map(Broken::from).collect(),
        });
        worlds.push(world.clone());
    }
    Ok((steps, worlds))
}

/// Confirms in the plain world that `actions` show what `id` claims (see the module doc).
/// `cycle_from` (1-based, liveness only) is the first step of the repeated cycle; `message` the
/// message the liveness property fails for.
pub fn confirm(
    config: &WorldConfig,
    id: &str,
    actions: &[Action],
    cycle_from: Option<usize>,
    message: Option<u32>,
) -> Result<Vec<ReplayStep>, NotReplayed> {
    let (steps, worlds) = run(config, actions)?;
    if let Some(r) = REACHABILITY.iter().find(|r| r.name().split(' ').next() == Some(id)) {
        let last = worlds.last().expect("the initial world at least");
        return if !steps.is_empty() && last.step.seen.has(*r) {
            Ok(steps)
        } else {
            Err(NotReplayed(format!("the last step does not reach \"{}\"", r.name())))
        };
    }
    let property = Property::parse(id).ok_or_else(|| NotReplayed(format!("'{id}' is no property")))?;
    if Property::SAFETY.contains(&property) {
        let broken = steps.last().is_some_and(|s| s.violations.iter().any(|v| v.property == property));
        return if broken {
            Ok(steps)
        } else {
            let got: Vec<&str> =
                steps.last().map(|s| s.violations.iter().map(|v| v.property.id()).collect()).unwrap_or_default();
            Err(NotReplayed(if got.is_empty() {
                format!("the last step breaks no property, not {id}")
            } else {
                format!("the last step breaks {}, not {id}", got.join(", "))
            }))
        };
    }
    let from =
        cycle_from.filter(|&c| c >= 1 && c <= steps.len()).ok_or_else(|| NotReplayed("no cycle to repeat".into()))?;
    let m = MessageId(message.ok_or_else(|| NotReplayed("the lasso names no message".into()))?);
    crate::liveness::confirm_lasso(config, property, m, actions, &worlds, from - 1).map_err(NotReplayed)?;
    Ok(steps)
}

/// The status of message `m` in `world`.
pub fn status(world: &World, m: MessageId) -> Option<Status> {
    world.outbox.row(m).map(|r| r.status)
}
