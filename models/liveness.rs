//! Liveness (SPEC §7 L1–L3) by lasso search under weak fairness.
//!
//! stateright's `eventually` is sound only on acyclic paths, and the outbox graph has cycles (a
//! quiet tick returns to the state it left). So this module builds the reachable graph of the
//! same normalised [`World`] itself and looks for a *fair lasso*: a reachable strongly connected
//! component of fault-free steps in which the goal never holds and which is fair.
//!
//! Fairness, stated: faults eventually stop (the cycle uses no crash, no lost connection, no
//! broker fault, and no pause past a lease: no tick that lets the lease a relay is still working
//! on expire — a finite prefix may use any); clock skew is a setting of the fleet, not a fault
//! that stops, so a fleet with skew is judged with its skew; time keeps advancing (the cycle ticks); every
//! relay keeps polling and finishing what it started (a relay always has an enabled step, so by
//! weak fairness the cycle contains a step of every relay); and a reaper with work runs (if the
//! component has a state where the reaper is enabled, the cycle reaps). A component with all of
//! these contains a cycle through all of them, so it is a fair infinite run; conversely every
//! fair run ends in such a component. That makes the check sound and complete for the bounded
//! configuration.
//!
//! - **L1** for message m: no fair lasso whose cycle keeps m non-terminal.
//! - **L2** in the world with a permanent broker outage: no fair lasso whose cycle keeps m from
//!   EXHAUSTED (publications within the budget are S3's, checked in the same world).
//! - **L3** for message m: no state s where m is still deliverable (not terminal, and either
//!   budget left or a live relay about to publish its current lease) from which fault-free
//!   steps that never publish m reach a fair component that never publishes m.

use crate::core::{MessageId, Status};
use crate::relay::Effect;
use crate::world::{Action, BrokerFate, DbFate, World, WorldConfig};
use std::collections::HashMap;

/// The maintenance jobs, each weakly fair: enabled in a run's cycle, it runs there.
const MAINTENANCE: [Action; 4] = [Action::Reap, Action::Rescue, Action::RescueRead, Action::RescueWrite];

/// How the liveness graph normalises its states: with the safety abstractions and no
/// reachability flag tracked.
pub const LIVENESS_NORMALISATION: Option<u16> = Some(0);

/// The explored graph: states by index, each with its parent (for paths) and its edges.
pub struct Graph {
    pub states: Vec<World>,
    parent: Vec<Option<(u32, Action)>>,
    edges: Vec<Vec<(u32, Action)>>,
}

/// The outcome of one liveness property.
#[derive(Clone, Debug)]
pub struct LassoVerdict {
    /// `None`: the property holds. Otherwise the prefix and the cycle of a fair run breaking it.
    pub lasso: Option<Lasso>,
    pub message: Option<MessageId>,
}

#[derive(Clone, Debug)]
pub struct Lasso {
    pub prefix: Vec<Action>,
    pub cycle: Vec<Action>,
}

/// Why the graph could not be built: it passed its size limit, or the check's budget (time,
/// memory) ran out while it was built.
#[derive(Debug)]
pub struct TooLarge {
    pub states: usize,
    pub budget: Option<String>,
}

impl TooLarge {
    /// In words, for a note: `graph` names which graph it was.
    pub fn reason(&self, graph: &str) -> String {
        match &self.budget {
            Some(reason) => format!("{reason} while {graph} was built ({} states)", self.states),
            None => format!("{graph} passed {} states", self.states),
        }
    }
}

impl Graph {
    /// Explores every state reachable from the initial world, up to `states_max`.
    ///
    /// States are normalised with the safety check's abstractions ([`LIVENESS_NORMALISATION`]):
    /// they change only ghost counters and flags no liveness check reads, never a step, so they
    /// merge states liveness cannot tell apart. A path of this graph names relay slots as this
    /// normalisation ordered them: replay it with [`crate::model::replay_with`] and the same.
    pub fn build(config: &WorldConfig, states_max: usize, stop: &dyn Fn() -> Option<String>) -> Result<Graph, TooLarge> {
        let facts = crate::world::FleetFacts::of(config);
        let mut init = World::new(config);
        init.normalise_by(config, &facts, LIVENESS_NORMALISATION);
        // States by fingerprint, as the checker dedups them; the states themselves live once, in
        // `graph.states`.
        let fingerprint = crate::world::fingerprint::<World>;
        let mut index: HashMap<u64, u32> = HashMap::new();
        index.insert(fingerprint(&init), 0);
        let mut graph = Graph { states: vec![init], parent: vec![None], edges: Vec::new() };
        let mut actions = Vec::new();
        let mut next = 0usize;
        while next < graph.states.len() {
            if next % 4096 == 0 {
                if let Some(reason) = stop() {
                    return Err(TooLarge { states: graph.states.len(), budget: Some(reason) });
                }
            }
            let state = graph.states[next].clone();
            actions.clear();
            state.actions(config, &mut actions);
            let mut out = Vec::with_capacity(actions.len());
            for &action in &actions {
                let mut successor = state.clone();
                successor.advance(config, action);
                successor.normalise_by(config, &facts, LIVENESS_NORMALISATION);
                successor.step = Default::default();
                let key = fingerprint(&successor);
                let target = match index.get(&key) {
                    Some(&i) => i,
                    None => {
                        let i = graph.states.len() as u32;
                        if graph.states.len() >= states_max {
                            return Err(TooLarge { states: graph.states.len(), budget: None });
                        }
                        index.insert(key, i);
                        graph.states.push(successor);
                        graph.parent.push(Some((next as u32, action)));
                        i
                    }
                };
                out.push((target, action));
            }
            graph.edges.push(out);
            next += 1;
        }
        Ok(graph)
    }

    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The actions from the initial state to `state`.
    fn path_to(&self, mut state: u32) -> Vec<Action> {
        let mut path = Vec::new();
        while let Some((parent, action)) = self.parent[state as usize] {
            path.push(action);
            state = parent;
        }
        path.reverse();
        path
    }

    /// Searches a fair lasso inside `inside` (states allowed on the cycle) whose component also
    /// satisfies `entry_ok` somewhere reachable backwards through `inside` (for L3); returns the
    /// first found.
    fn fair_lasso(
        &self,
        config: &WorldConfig,
        inside: &dyn Fn(&World) -> bool,
        start_ok: Option<&dyn Fn(&World) -> bool>,
    ) -> Option<Lasso> {
        let n = self.states.len();
        let allowed: Vec<bool> = self.states.iter().map(inside).collect();
        let fault_free: Vec<Vec<(u32, Action)>> = self
            .edges
            .iter()
            .enumerate()
            .map(|(i, out)| {
                if !allowed[i] {
                    return Vec::new();
                }
                let state = &self.states[i];
                out.iter()
                    .copied()
                    .filter(|&(t, a)| {
                        allowed[t as usize] && !is_fault(a, config.permanent_outage) && !(a == Action::Tick && pauses(state, config))
                    })
                    .collect()
            })
            .collect();
        let components = tarjan(n, &fault_free);
        let relays = config.relays.len();
        for component in components {
            let members: std::collections::HashSet<u32> = component.iter().copied().collect();
            let internal = |i: u32| fault_free[i as usize].iter().filter(|(t, _)| members.contains(t));
            let has_edge = |pred: &dyn Fn(Action) -> bool| component.iter().any(|&i| internal(i).any(|&(_, a)| pred(a)));
            if !has_edge(&|a| a == Action::Tick) {
                continue;
            }
            if !(0..relays).all(|r| has_edge(&|a| relay_of(a) == Some(r as u16))) {
                continue;
            }
            // Weak fairness for the maintenance jobs: each one enabled somewhere in the
            // component runs in it.
            let jobs: Vec<Action> = MAINTENANCE
                .into_iter()
                .filter(|job| {
                    component.iter().any(|&i| {
                        let mut acts = Vec::new();
                        self.states[i as usize].actions(config, &mut acts);
                        acts.contains(job)
                    })
                })
                .collect();
            if !jobs.iter().all(|job| has_edge(&|a| a == *job)) {
                continue;
            }
            // The component is fair. For L3 it must be reachable, through allowed fault-free
            // steps, from a state where the message was still deliverable.
            let entry = match start_ok {
                None => component[0],
                Some(ok) => match self.backward_start(&fault_free, &members, ok) {
                    Some(start) => start,
                    None => continue,
                },
            };
            let mut prefix = self.path_to(entry);
            let target = component[0];
            if entry != target {
                prefix.extend(self.bfs_path(&fault_free, entry, &|i| i == target, None).0);
            }
            let cycle = self.fair_cycle(&fault_free, &members, target, relays, &jobs);
            return Some(Lasso { prefix, cycle });
        }
        None
    }

    /// A state satisfying `ok` from which the component is reachable through `edges`.
    fn backward_start(
        &self,
        edges: &[Vec<(u32, Action)>],
        members: &std::collections::HashSet<u32>,
        ok: &dyn Fn(&World) -> bool,
    ) -> Option<u32> {
        let mut reverse: HashMap<u32, Vec<u32>> = HashMap::new();
        for (from, out) in edges.iter().enumerate() {
            for &(to, _) in out {
                reverse.entry(to).or_default().push(from as u32);
            }
        }
        let mut seen: std::collections::HashSet<u32> = members.clone();
        let mut queue: std::collections::VecDeque<u32> = members.iter().copied().collect();
        let mut found: Option<u32> = None;
        while let Some(s) = queue.pop_front() {
            if ok(&self.states[s as usize]) && found.is_none_or(|f| s < f) {
                found = Some(s);
            }
            for &p in reverse.get(&s).into_iter().flatten() {
                if seen.insert(p) {
                    queue.push_back(p);
                }
            }
        }
        found
    }

    /// Shortest non-empty path from `from` to a state satisfying `goal`, through `edges`
    /// (restricted to `within` when given): the actions and the state it ends in.
    fn bfs_path(
        &self,
        edges: &[Vec<(u32, Action)>],
        from: u32,
        goal: &dyn Fn(u32) -> bool,
        within: Option<&std::collections::HashSet<u32>>,
    ) -> (Vec<Action>, u32) {
        // Nodes are (state, depth > 0) so a path back to `from` itself is found too.
        let mut back: HashMap<(u32, bool), ((u32, bool), Action)> = HashMap::new();
        let start = (from, false);
        let mut queue = std::collections::VecDeque::from([start]);
        let mut seen = std::collections::HashSet::from([start]);
        while let Some(node) = queue.pop_front() {
            for &(t, a) in &edges[node.0 as usize] {
                if within.is_some_and(|w| !w.contains(&t)) {
                    continue;
                }
                let next = (t, true);
                if !seen.insert(next) {
                    continue;
                }
                back.insert(next, (node, a));
                if goal(t) {
                    let mut path = Vec::new();
                    let mut at = next;
                    while at != start {
                        let (p, a) = back[&at];
                        path.push(a);
                        at = p;
                    }
                    path.reverse();
                    return (path, t);
                }
                queue.push_back(next);
            }
        }
        (Vec::new(), from)
    }

    /// A cycle from `start` through the component that ticks, steps every relay and runs every
    /// maintenance job of `jobs` (those enabled somewhere in it).
    fn fair_cycle(
        &self,
        edges: &[Vec<(u32, Action)>],
        members: &std::collections::HashSet<u32>,
        start: u32,
        relays: usize,
        jobs: &[Action],
    ) -> Vec<Action> {
        let mut wanted: Vec<Box<dyn Fn(Action) -> bool>> = vec![Box::new(|a| a == Action::Tick)];
        for r in 0..relays {
            wanted.push(Box::new(move |a| relay_of(a) == Some(r as u16)));
        }
        for &job in jobs {
            wanted.push(Box::new(move |a| a == job));
        }
        let mut cycle = Vec::new();
        let mut at = start;
        for want in &wanted {
            let has_wanted = |i: u32| edges[i as usize].iter().any(|&(t, a)| members.contains(&t) && want(a));
            if !has_wanted(at) {
                let (path, end) = self.bfs_path(edges, at, &has_wanted, Some(members));
                cycle.extend(path);
                at = end;
            }
            if let Some(&(t, a)) = edges[at as usize].iter().find(|&&(t, a)| members.contains(&t) && want(a)) {
                cycle.push(a);
                at = t;
            }
        }
        if at != start {
            let (path, _) = self.bfs_path(edges, at, &|i| i == start, Some(members));
            cycle.extend(path);
        }
        cycle
    }
}

/// A step that is a fault of SPEC §6. Under a permanent outage the broker's refusal is the
/// environment, not a fault that stops.
/// Whether a step is a fault (a fair run's cycle has none; L3's run begins after the last one).
pub fn is_fault(action: Action, outage: bool) -> bool {
    match action {
        Action::Poll { db, .. } | Action::Write { db, .. } => db != DbFate::Ok,
        Action::MisroutedWrite { .. } => true,
        Action::Publish { fate, .. } => !(fate == BrokerFate::Ack || (outage && fate == BrokerFate::Unavailable)),
        Action::Crash { .. } => true,
        Action::Tick
        | Action::Reap
        | Action::Rescue
        | Action::RescueRead
        | Action::RescueWrite
        | Action::Enqueue { .. }
        | Action::Requeue { .. } => false,
    }
}

/// A tick here would be a pause past a lease (SPEC §6): some relay is still working on the
/// current lease of a row whose lease would expire by then.
fn pauses(world: &World, config: &WorldConfig) -> bool {
    let later = world.now.plus(config.tick);
    world.relays.iter().flatten().any(|(_, effect)| {
        let lease = match effect {
            Effect::Publish { lease, .. } => lease,
            Effect::Write { request } => &request.lease,
            Effect::Claim { .. } | Effect::Done => return false,
        };
        let current = world.auditor.ghost(lease.message_id).is_some_and(|g| g.claims == lease.claim_seq);
        let row = world.outbox.row(lease.message_id);
        current
            && row.is_some_and(|r| r.status == Status::InFlight && r.lease_expires_at.is_some_and(|at| at <= later))
    })
}

fn relay_of(action: Action) -> Option<u16> {
    match action {
        Action::Poll { relay, .. }
        | Action::Publish { relay, .. }
        | Action::Write { relay, .. }
        | Action::MisroutedWrite { relay } => Some(relay),
        _ => None,
    }
}

/// Strongly connected components with at least one internal edge (iterative Tarjan).
fn tarjan(n: usize, edges: &[Vec<(u32, Action)>]) -> Vec<Vec<u32>> {
    let mut index = vec![u32::MAX; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut components = Vec::new();
    let mut counter = 0u32;
    for root in 0..n {
        if index[root] != u32::MAX || edges[root].is_empty() {
            continue;
        }
        let mut call: Vec<(u32, usize)> = vec![(root as u32, 0)];
        index[root] = counter;
        low[root] = counter;
        counter += 1;
        stack.push(root as u32);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut next)) = call.last_mut() {
            let vu = v as usize;
            if *next < edges[vu].len() {
                let (w, _) = edges[vu][*next];
                *next += 1;
                let wu = w as usize;
                if index[wu] == u32::MAX {
                    index[wu] = counter;
                    low[wu] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[wu] = true;
                    call.push((w, 0));
                } else if on_stack[wu] {
                    low[vu] = low[vu].min(index[wu]);
                }
            } else {
                call.pop();
                if let Some(&(parent, _)) = call.last() {
                    low[parent as usize] = low[parent as usize].min(low[vu]);
                }
                if low[vu] == index[vu] {
                    let mut component = Vec::new();
                    loop {
                        let w = stack.pop().expect("tarjan stack");
                        on_stack[w as usize] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    let cyclic = component.len() > 1 || edges[vu].iter().any(|&(t, _)| t == v);
                    if cyclic {
                        component.sort_unstable();
                        components.push(component);
                    }
                }
            }
        }
    }
    components
}

fn row_status(world: &World, m: MessageId) -> Option<Status> {
    world.outbox.row(m).map(|r| r.status)
}

/// m is still deliverable: not terminal, and its fate not yet sealed — a relay is about to
/// publish its current lease or record a confirmation or a retry for it, or no relay holds its
/// live current lease and budget is left for another claim. (A relay about to record FAILED or
/// EXHAUSTED for it means the fault that decided it has already happened.)
fn deliverable(world: &World, config: &WorldConfig, m: MessageId) -> bool {
    use crate::core::WriteKind;
    let Some(row) = world.outbox.row(m) else { return false };
    if row.status.is_terminal() {
        return false;
    }
    let latest = world.auditor.ghost(m).map(|g| g.claims).unwrap_or(0);
    // A lease that has already expired is the reaper's or the next claim's, whatever its holder
    // is about to do.
    let live = row.status == Status::InFlight && row.lease_expires_at.is_some_and(|at| at > world.now);
    let budget_left = row.attempts < config.max_attempts;
    let pending = world.relays.iter().flatten().find_map(|(_, effect)| match effect {
        Effect::Publish { lease, .. } if lease.message_id == m && lease.claim_seq == latest => Some(None),
        Effect::Write { request } if request.lease.message_id == m && request.lease.claim_seq == latest => {
            Some(Some(request.kind))
        }
        _ => None,
    });
    match pending {
        // The holder's failure write still applies after expiry (the token is current), so it
        // races any takeover: the fault that decided it has happened.
        Some(Some(WriteKind::Failed { .. } | WriteKind::Exhausted { .. })) => false,
        Some(_) => live || budget_left,
        None => budget_left,
    }
}

/// The first message for which `find` finds a lasso.
fn first_message(config: &WorldConfig, mut find: impl FnMut(MessageId) -> Option<Lasso>) -> LassoVerdict {
    (0..config.messages)
        .map(MessageId)
        .find_map(|m| find(m).map(|lasso| LassoVerdict { lasso: Some(lasso), message: Some(m) }))
        .unwrap_or(LassoVerdict { lasso: None, message: None })
}

/// L1 for every message of `graph`.
pub fn check_l1(graph: &Graph, config: &WorldConfig) -> LassoVerdict {
    first_message(config, |m| graph.fair_lasso(config, &move |w: &World| row_status(w, m).is_some_and(|s| !s.is_terminal()), None))
}

/// L2 on a graph built with `permanent_outage`.
pub fn check_l2(graph: &Graph, config: &WorldConfig) -> LassoVerdict {
    // A message the application has not enqueued (yet, or ever) owes nothing.
    first_message(config, |m| {
        graph.fair_lasso(config, &move |w: &World| row_status(w, m).is_some_and(|s| s != Status::Exhausted), None)
    })
}

/// L3 for every message of `graph`.
pub fn check_l3(graph: &Graph, config: &WorldConfig) -> LassoVerdict {
    first_message(config, |m| {
        let start = move |w: &World| deliverable(w, config, m);
        graph.fair_lasso(config, &move |w: &World| row_status(w, m) != Some(Status::Published), Some(&start))
    })
}

/// Confirms in the plain world that a replayed lasso breaks `property` for message `m`:
/// `worlds[i]` is the world before `actions[i]` (and the last one after them all), the cycle is
/// `actions[start..]`. See [`crate::replay`] for what is confirmed.
pub fn confirm_lasso(
    config: &WorldConfig,
    property: crate::core::Property,
    m: MessageId,
    actions: &[Action],
    worlds: &[World],
    start: usize,
) -> Result<(), String> {
    use crate::core::Property as P;
    let goal_fails = |w: &World| match property {
        P::L1 => row_status(w, m).is_some_and(|s| !s.is_terminal()),
        P::L2 => row_status(w, m).is_some_and(|s| s != Status::Exhausted),
        _ => row_status(w, m) != Some(Status::Published),
    };
    let outage = config.permanent_outage;
    for (i, &action) in actions.iter().enumerate().skip(start) {
        if is_fault(action, outage) {
            return Err(format!("step {} of the cycle, \"{action}\", is a fault: faults must stop", i + 1));
        }
        if action == Action::Tick && pauses(&worlds[i], config) {
            return Err(format!("step {} of the cycle pauses a relay past its lease: a fault", i + 1));
        }
    }
    let cycle = &actions[start..];
    if !cycle.contains(&Action::Tick) {
        return Err("time does not advance in the cycle".into());
    }
    for job in MAINTENANCE {
        let enabled = worlds[start..].iter().any(|w| {
            let mut enabled = Vec::new();
            w.actions(config, &mut enabled);
            enabled.contains(&job)
        });
        if enabled && !cycle.contains(&job) {
            return Err(format!("\"{job}\" has work in the cycle but never runs"));
        }
    }
    if let Some(i) = worlds[start..].iter().position(|w| !goal_fails(w)) {
        return Err(format!("{} holds for {m} after step {} of the cycle", property.id(), start + i));
    }
    // The cycle returns to where it began: the same state under the exact reductions.
    let facts = crate::world::FleetFacts::of(config);
    let canonical = |w: &World| {
        let mut w = w.clone();
        w.normalise_by(config, &facts, LIVENESS_NORMALISATION);
        w.step = Default::default();
        crate::world::fingerprint(&w)
    };
    if canonical(&worlds[start]) != canonical(worlds.last().expect("worlds")) {
        return Err("the cycle does not return to the state it began in".into());
    }
    if property == P::L3 {
        // Where the fault-free, never-publishing run begins, the message was still deliverable.
        let begins = (0..=start).rev().take_while(|&i| {
            i == start || (!is_fault(actions[i], outage) && row_status(&worlds[i + 1], m) != Some(Status::Published))
        });
        if !begins.into_iter().any(|i| deliverable(&worlds[i], config, m)) {
            return Err(format!("{m} is no longer deliverable anywhere the fault-free run could begin"));
        }
    }
    Ok(())
}
