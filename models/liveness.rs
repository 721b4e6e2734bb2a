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

use outbox_check::core::{MessageId, Status};
use outbox_check::relay::Effect;
use outbox_check::world::{Abstraction, Action, Fault, World, WorldConfig};
use std::collections::HashMap;

/// The maintenance jobs, each weakly fair: enabled in a run's cycle, it runs there.
const MAINTENANCE: [Action; 5] =
    [Action::Reap, Action::Rescue, Action::RescueRead, Action::RescueWrite, Action::Schedule { node: None }];

/// The maintenance job an action is, as [`MAINTENANCE`] lists them (the scheduler on any node
/// is one job).
fn job_of(action: Action) -> Option<usize> {
    let kind = match action {
        Action::Schedule { .. } => Action::Schedule { node: None },
        other => other,
    };
    MAINTENANCE.iter().position(|job| *job == kind)
}

/// How the liveness graph normalises its states: with the safety abstractions and no
/// reachability flag tracked.
pub const LIVENESS_NORMALISATION: Option<Abstraction> = Some(Abstraction::LIVENESS);

/// What the liveness checks read of one state, a byte per message after a byte of flags:
/// [`PAUSES`] and the maintenance jobs enabled ([`JOB`] bits); per message [`PRESENT`],
/// [`TERMINAL`], [`EXHAUSTED`], [`PUBLISHED`], [`DELIVERABLE`].
#[derive(Clone, Debug, Default)]
pub struct Summary(smallvec::SmallVec<[u8; 8]>);

const PAUSES: u8 = 1;
const JOB: u8 = 2;
const PRESENT: u8 = 1;
const TERMINAL: u8 = 2;
const EXHAUSTED: u8 = 4;
const PUBLISHED: u8 = 8;
const DELIVERABLE: u8 = 16;

impl Summary {
    /// The summary of `world`, whose enabled steps are `actions`.
    pub fn of(world: &World, config: &WorldConfig, actions: &[Action]) -> Summary {
        let mut flags = if pauses(world, config) { PAUSES } else { 0 };
        for j in actions.iter().filter_map(|a| job_of(*a)) {
            flags |= JOB << j;
        }
        let mut bytes = smallvec::smallvec![flags];
        for m in 0..config.messages {
            let m = MessageId(m);
            let mut b = 0;
            if let Some(status) = row_status(world, m) {
                b |= PRESENT;
                b |= if status.is_terminal() { TERMINAL } else { 0 };
                b |= if status == Status::Exhausted { EXHAUSTED } else { 0 };
                b |= if status == Status::Published { PUBLISHED } else { 0 };
            }
            if deliverable(world, config, m) {
                b |= DELIVERABLE;
            }
            bytes.push(b);
        }
        Summary(bytes)
    }
}

/// A step's class, as the fairness conditions read it: [`FAULT`], [`TICK`], the maintenance
/// job it is ([`EDGE_JOB`] bits), and its relay plus one from bit [`RELAY_SHIFT`] (0: none).
pub fn class_of(action: Action, config: &WorldConfig) -> u16 {
    let mut class = if is_fault(action, config.permanent_outage) { FAULT } else { 0 };
    if action == Action::Tick {
        class |= TICK;
    }
    if let Some(j) = job_of(action) {
        class |= EDGE_JOB << j;
    }
    if let Some(r) = relay_of(action) {
        class |= (r + 1) << RELAY_SHIFT;
    }
    class
}

const FAULT: u16 = 1;
const TICK: u16 = 2;
const EDGE_JOB: u16 = 4;
const RELAY_SHIFT: u16 = 7;

/// The explored graph, built by [`crate::graph::explore`]: states by number (breadth-first
/// order), each with its parent in the search tree (for paths), its edges in the order of
/// [`World::actions`] and what the liveness checks read of it. The worlds themselves are not
/// kept: a path is rebuilt by replaying its steps' positions from the initial state.
pub struct Graph {
    config: WorldConfig,
    normalisation: Option<Abstraction>,
    stride: usize,
    /// Edges of state `i`: `offsets[i]..offsets[i + 1]`.
    offsets: Vec<u32>,
    targets: Vec<u32>,
    classes: Vec<u16>,
    /// The parent of state `i + 1` and the position of the step from it.
    parents: Vec<(u32, u16)>,
    summaries: Vec<u8>,
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

/// The actions of a path given as steps' positions (in [`World::actions`]) from the initial
/// state, under `normalisation`.
fn actions_at(config: &WorldConfig, normalisation: Option<Abstraction>, positions: &[u16]) -> Vec<Action> {
    let facts = outbox_check::world::FleetFacts::of(config);
    let mut world = crate::graph::initial(config, &facts, normalisation);
    let mut path = Vec::with_capacity(positions.len());
    let mut enabled = Vec::new();
    for &k in positions {
        enabled.clear();
        world.actions(config, &mut enabled);
        let action = enabled[k as usize];
        path.push(action);
        world = crate::graph::successor(config, &facts, normalisation, &world, action).0;
    }
    path
}

impl Graph {
    pub fn new(config: &WorldConfig, normalisation: Option<Abstraction>) -> Graph {
        Graph {
            config: config.clone(),
            normalisation,
            stride: config.messages as usize + 1,
            offsets: vec![0],
            targets: Vec::new(),
            classes: Vec::new(),
            parents: Vec::new(),
            summaries: Vec::new(),
        }
    }

    /// Explores every state reachable from the initial world, up to `states_max`, with the
    /// liveness normalisation ([`LIVENESS_NORMALISATION`]): the safety abstractions change only
    /// ghost counters and flags no liveness check reads, never a step, so they merge states
    /// liveness cannot tell apart. A path of this graph names relay slots as this
    /// normalisation ordered them: replay it with [`crate::outbox::replay_with`] and the same.
    pub fn build(
        config: &WorldConfig,
        states_max: usize,
        threads: usize,
        stop: &(dyn Fn() -> Option<String> + Sync),
    ) -> Result<Graph, TooLarge> {
        Graph::build_with(config, LIVENESS_NORMALISATION, states_max, threads, stop).map(|(graph, _)| graph)
    }

    /// [`Graph::build`] under `normalisation`, returning the search's findings too.
    pub fn build_with(
        config: &WorldConfig,
        normalisation: Option<Abstraction>,
        states_max: usize,
        threads: usize,
        stop: &(dyn Fn() -> Option<String> + Sync),
    ) -> Result<(Graph, crate::graph::Explored), TooLarge> {
        let job = crate::graph::Explore {
            config,
            normalisation,
            threads,
            keep_graph: true,
            graph_limit: states_max,
            limit_stops: true,
            shard: None,
        };
        let mut found = crate::graph::explore(&job, &|| stop().is_some(), &|_, _| {});
        match found.graph.take() {
            Some(graph) => Ok((graph, found)),
            None => Err(TooLarge { states: found.unique, budget: stop() }),
        }
    }

    pub(crate) fn add_parent(&mut self, from: u32, position: u16) {
        self.parents.push((from, position));
    }

    pub(crate) fn add_state(&mut self, targets: &[u32], classes: &[u16], summary: Summary) {
        self.targets.extend_from_slice(targets);
        self.classes.extend_from_slice(classes);
        self.offsets.push(self.targets.len() as u32);
        self.summaries.extend_from_slice(&summary.0);
    }

    pub(crate) fn finish(&mut self, states: usize) {
        debug_assert_eq!(self.offsets.len(), states + 1);
        self.targets.shrink_to_fit();
        self.classes.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The normalisation the graph was built under: its paths name relay slots as it ordered
    /// them (replay them with [`crate::outbox::replay_with`] and this).
    pub fn normalisation(&self) -> Option<Abstraction> {
        self.normalisation
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the graph holds.
    pub fn bytes(&self) -> usize {
        self.offsets.capacity() * 4
            + self.targets.capacity() * 4
            + self.classes.capacity() * 2
            + self.parents.capacity() * 8
            + self.summaries.capacity()
    }

    fn edges(&self, state: u32) -> std::ops::Range<usize> {
        self.offsets[state as usize] as usize..self.offsets[state as usize + 1] as usize
    }

    fn flags(&self, state: u32) -> u8 {
        self.summaries[state as usize * self.stride]
    }

    fn message(&self, state: u32, m: MessageId) -> u8 {
        self.summaries[state as usize * self.stride + 1 + m.0 as usize]
    }

    /// Position of edge `e` among its state's steps.
    fn position(&self, from: u32, e: usize) -> u16 {
        (e - self.offsets[from as usize] as usize) as u16
    }

    /// The steps' positions from the initial state to `state`.
    fn positions_to(&self, mut state: u32) -> Vec<u16> {
        let mut path = Vec::new();
        while state != 0 {
            let (parent, position) = self.parents[state as usize - 1];
            path.push(position);
            state = parent;
        }
        path.reverse();
        path
    }

    /// Searches a fair lasso inside the states `allowed` marks (those allowed on the cycle)
    /// whose component is reachable backwards through them from a state `start_ok` marks (for
    /// L3); returns the first found.
    fn fair_lasso(&self, allowed: &[bool], start_ok: Option<&[bool]>) -> Option<Lasso> {
        let n = self.len();
        // A fault-free step between allowed states: no fault, no pause past a lease.
        let fault_free = |from: u32, e: usize| {
            let class = self.classes[e];
            allowed[from as usize]
                && allowed[self.targets[e] as usize]
                && class & FAULT == 0
                && !(class & TICK != 0 && self.flags(from) & PAUSES != 0)
        };
        let components = tarjan(n, self, &fault_free);
        // For L3: the states fault-free steps reach from a marked one, so a component none of
        // them reaches is passed over at once.
        let reached_from_start = start_ok.map(|ok| {
            let mut reached = ok.to_vec();
            let mut queue: std::collections::VecDeque<u32> = (0..n as u32).filter(|&i| ok[i as usize]).collect();
            while let Some(s) = queue.pop_front() {
                for e in self.edges(s) {
                    let t = self.targets[e] as usize;
                    if !reached[t] && fault_free(s, e) {
                        reached[t] = true;
                        queue.push_back(t as u32);
                    }
                }
            }
            reached
        });
        let relays = self.config.relays.len();
        let mut member = vec![u32::MAX; n];
        for (c, component) in components.iter().enumerate() {
            for &i in component {
                member[i as usize] = c as u32;
            }
            let c = c as u32;
            let member = &member;
            let fault_free = &fault_free;
            let internal_classes = component.iter().flat_map(|&i| {
                self.edges(i)
                    .filter(move |&e| fault_free(i, e) && member[self.targets[e] as usize] == c)
                    .map(|e| self.classes[e])
            });
            let mut seen_classes = 0u64; // tick, jobs, relays
            for class in internal_classes {
                if class & TICK != 0 {
                    seen_classes |= 1;
                }
                seen_classes |= u64::from((class >> 2) & 0x1f) << 1;
                let relay = class >> RELAY_SHIFT;
                if relay > 0 && relay < 58 {
                    seen_classes |= 1 << (5 + relay);
                }
            }
            if seen_classes & 1 == 0 {
                continue;
            }
            if !(0..relays).all(|r| seen_classes & (1 << (6 + r)) != 0) {
                continue;
            }
            // Weak fairness for the maintenance jobs: each one enabled somewhere in the
            // component runs in it.
            let enabled = component.iter().fold(0u8, |acc, &i| acc | self.flags(i) >> 1) & 0x1f;
            if u64::from(enabled) & (seen_classes >> 1) != u64::from(enabled) {
                continue;
            }
            let jobs: Vec<u16> = (0..5).filter(|j| enabled & (1 << j) != 0).map(|j| EDGE_JOB << j).collect();
            if reached_from_start.as_ref().is_some_and(|r| component.iter().all(|&i| !r[i as usize])) {
                continue;
            }
            let entry = match start_ok {
                None => component[0],
                Some(ok) => match self.backward_start(fault_free, member, c, ok) {
                    Some(start) => start,
                    None => continue,
                },
            };
            let mut prefix = self.positions_to(entry);
            let target = component[0];
            if entry != target {
                prefix.extend(self.bfs_path(fault_free, entry, &|i| i == target, None).0);
            }
            let cycle = self.fair_cycle(fault_free, member, c, target, relays, &jobs);
            let mut all = prefix.clone();
            all.extend(&cycle);
            let actions = actions_at(&self.config, self.normalisation, &all);
            let (prefix, cycle) = actions.split_at(prefix.len());
            return Some(Lasso { prefix: prefix.to_vec(), cycle: cycle.to_vec() });
        }
        None
    }

    /// The lowest-numbered state marked in `ok` from which component `c` is reachable through
    /// fault-free steps.
    fn backward_start(
        &self,
        fault_free: &dyn Fn(u32, usize) -> bool,
        member: &[u32],
        c: u32,
        ok: &[bool],
    ) -> Option<u32> {
        let n = self.len();
        // Reverse edges of the fault-free graph, as a compact adjacency list.
        let mut count = vec![0u32; n + 1];
        for from in 0..n as u32 {
            for e in self.edges(from) {
                if fault_free(from, e) {
                    count[self.targets[e] as usize + 1] += 1;
                }
            }
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut sources = vec![0u32; count[n] as usize];
        for from in 0..n as u32 {
            for e in self.edges(from) {
                if fault_free(from, e) {
                    let t = self.targets[e] as usize;
                    sources[fill[t] as usize] = from;
                    fill[t] += 1;
                }
            }
        }
        let mut seen = vec![false; n];
        let mut queue: std::collections::VecDeque<u32> = (0..n as u32).filter(|&i| member[i as usize] == c).collect();
        for &i in &queue {
            seen[i as usize] = true;
        }
        let mut found: Option<u32> = None;
        while let Some(s) = queue.pop_front() {
            if ok[s as usize] && found.is_none_or(|f| s < f) {
                found = Some(s);
            }
            for &p in &sources[count[s as usize] as usize..count[s as usize + 1] as usize] {
                if !seen[p as usize] {
                    seen[p as usize] = true;
                    queue.push_back(p);
                }
            }
        }
        found
    }

    /// Shortest non-empty path from `from` to a state satisfying `goal`, through fault-free
    /// steps (within component `within` when given): the steps' positions and the state it
    /// ends in.
    fn bfs_path(
        &self,
        fault_free: &dyn Fn(u32, usize) -> bool,
        from: u32,
        goal: &dyn Fn(u32) -> bool,
        within: Option<(&[u32], u32)>,
    ) -> (Vec<u16>, u32) {
        // Nodes are (state, depth > 0) so a path back to `from` itself is found too.
        let mut back: HashMap<(u32, bool), ((u32, bool), u16)> = HashMap::new();
        let start = (from, false);
        let mut queue = std::collections::VecDeque::from([start]);
        let mut seen = std::collections::HashSet::from([start]);
        while let Some(node) = queue.pop_front() {
            for e in self.edges(node.0) {
                let t = self.targets[e];
                if !fault_free(node.0, e) || within.is_some_and(|(member, c)| member[t as usize] != c) {
                    continue;
                }
                let next = (t, true);
                if !seen.insert(next) {
                    continue;
                }
                back.insert(next, (node, self.position(node.0, e)));
                if goal(t) {
                    let mut path = Vec::new();
                    let mut at = next;
                    while at != start {
                        let (p, k) = back[&at];
                        path.push(k);
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

    /// A cycle from `start` through component `c` that ticks, steps every relay and runs every
    /// maintenance job of `jobs` (their edge classes: those enabled somewhere in it).
    fn fair_cycle(
        &self,
        fault_free: &dyn Fn(u32, usize) -> bool,
        member: &[u32],
        c: u32,
        start: u32,
        relays: usize,
        jobs: &[u16],
    ) -> Vec<u16> {
        let mut wanted: Vec<Box<dyn Fn(u16) -> bool>> = vec![Box::new(|class| class & TICK != 0)];
        for r in 0..relays {
            wanted.push(Box::new(move |class| class >> RELAY_SHIFT == r as u16 + 1));
        }
        for &job in jobs {
            wanted.push(Box::new(move |class| class & job != 0));
        }
        let within = Some((member, c));
        let wanted_edge = |i: u32, want: &dyn Fn(u16) -> bool| {
            self.edges(i).find(|&e| fault_free(i, e) && member[self.targets[e] as usize] == c && want(self.classes[e]))
        };
        let mut cycle = Vec::new();
        let mut at = start;
        for want in &wanted {
            if wanted_edge(at, want.as_ref()).is_none() {
                let (path, end) = self.bfs_path(fault_free, at, &|i| wanted_edge(i, want.as_ref()).is_some(), within);
                cycle.extend(path);
                at = end;
            }
            if let Some(e) = wanted_edge(at, want.as_ref()) {
                cycle.push(self.position(at, e));
                at = self.targets[e];
            }
        }
        if at != start {
            let (path, _) = self.bfs_path(fault_free, at, &|i| i == start, within);
            cycle.extend(path);
        }
        cycle
    }
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

/// A step that is a fault of SPEC §6. Under a permanent outage the broker's refusal is the
/// environment, not a fault that stops.
/// Whether a step is a fault (a fair run's cycle has none; L3's run begins after the last one).
pub fn is_fault(action: Action, outage: bool) -> bool {
    match action.fault() {
        // Under a permanent outage the broker's refusal is the world, not a fault that stops.
        Some(Fault::BrokerUnavailable) => !outage,
        Some(_) => true,
        None => false,
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
        current && row.is_some_and(|r| r.status == Status::InFlight && r.lease_expires_at.is_some_and(|at| at <= later))
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

/// Strongly connected components, through the edges `keep` admits, with at least one internal
/// edge (iterative Tarjan); each component's states in ascending order.
fn tarjan(n: usize, graph: &Graph, keep: &dyn Fn(u32, usize) -> bool) -> Vec<Vec<u32>> {
    let mut index = vec![u32::MAX; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut components = Vec::new();
    let mut counter = 0u32;
    for root in 0..n {
        if index[root] != u32::MAX || !graph.edges(root as u32).any(|e| keep(root as u32, e)) {
            continue;
        }
        let mut call: Vec<(u32, usize)> = vec![(root as u32, graph.edges(root as u32).start)];
        index[root] = counter;
        low[root] = counter;
        counter += 1;
        stack.push(root as u32);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut next)) = call.last_mut() {
            let vu = v as usize;
            let end = graph.edges(v).end;
            while *next < end && !keep(v, *next) {
                *next += 1;
            }
            if *next < end {
                let w = graph.targets[*next];
                *next += 1;
                let wu = w as usize;
                if index[wu] == u32::MAX {
                    index[wu] = counter;
                    low[wu] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[wu] = true;
                    call.push((w, graph.edges(w).start));
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
                    let cyclic = component.len() > 1 || graph.edges(v).any(|e| keep(v, e) && graph.targets[e] == v);
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
    use outbox_check::core::WriteKind;
    let Some(row) = world.outbox.row(m) else { return false };
    if row.status.is_terminal() {
        return false;
    }
    let latest = world.auditor.ghost(m).map(|g| g.claims).unwrap_or(0);
    // A lease that has already expired is the reaper's or the next claim's, whatever its holder
    // is about to do.
    let live = row.status == Status::InFlight && row.lease_expires_at.is_some_and(|at| at > world.now);
    // Some relay's claim may still take it: its design's budget predicate, not the strict one.
    let budget_left =
        (0..config.relays.len()).any(|r| !config.policy(r).budget.spent(row.attempts, config.max_attempts));
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

impl Graph {
    /// Each state's byte of message `m`, through `test`.
    fn marked(&self, m: MessageId, test: impl Fn(u8) -> bool) -> Vec<bool> {
        (0..self.len() as u32).map(|i| test(self.message(i, m))).collect()
    }
}

/// L1 for every message of `graph`.
pub fn check_l1(graph: &Graph, config: &WorldConfig) -> LassoVerdict {
    first_message(config, |m| graph.fair_lasso(&graph.marked(m, |b| b & PRESENT != 0 && b & TERMINAL == 0), None))
}

/// L2 on a graph built with `permanent_outage`.
pub fn check_l2(graph: &Graph, config: &WorldConfig) -> LassoVerdict {
    // A message the application has not enqueued (yet, or ever) owes nothing.
    first_message(config, |m| graph.fair_lasso(&graph.marked(m, |b| b & PRESENT != 0 && b & EXHAUSTED == 0), None))
}

/// L3 for every message of `graph`.
pub fn check_l3(graph: &Graph, config: &WorldConfig) -> LassoVerdict {
    first_message(config, |m| {
        let start = graph.marked(m, |b| b & DELIVERABLE != 0);
        graph.fair_lasso(&graph.marked(m, |b| b & PUBLISHED == 0), Some(&start))
    })
}

/// Confirms in the plain world that a replayed lasso breaks `property` for message `m`:
/// `worlds[i]` is the world before `actions[i]` (and the last one after them all), the cycle is
/// `actions[start..]`. See [`crate::replay`] for what is confirmed.
pub fn confirm_lasso(
    config: &WorldConfig,
    property: outbox_check::core::Property,
    m: MessageId,
    actions: &[Action],
    worlds: &[World],
    start: usize,
) -> Result<(), String> {
    use outbox_check::core::Property as P;
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
    for (j, job) in MAINTENANCE.iter().enumerate() {
        let enabled = worlds[start..].iter().any(|w| {
            let mut enabled = Vec::new();
            w.actions(config, &mut enabled);
            enabled.iter().any(|a| job_of(*a) == Some(j))
        });
        if enabled && !cycle.iter().any(|a| job_of(*a) == Some(j)) {
            return Err(format!("\"{job}\" has work in the cycle but never runs"));
        }
    }
    if let Some(i) = worlds[start..].iter().position(|w| !goal_fails(w)) {
        return Err(format!("{} holds for {m} after step {} of the cycle", property.id(), start + i));
    }
    // The cycle returns to where it began: the same state under the exact reductions.
    let facts = outbox_check::world::FleetFacts::of(config);
    let canonical = |w: &World| {
        let mut w = w.clone();
        w.normalise_by(config, &facts, LIVENESS_NORMALISATION);
        w.step = Default::default();
        outbox_check::world::fingerprint(&w)
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
