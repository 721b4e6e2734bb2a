//! The complete check's own search: every state reachable from the initial world, breadth-first,
//! on several threads, each state kept only as its 64-bit fingerprint.
//!
//! stateright's checkers judge a property on a *state*, so the model has to carry the last
//! step's outcome (which property it broke, which situation it reached) inside the state, and
//! every outcome splits a state in two. Here the outcome is a label of the *edge* instead: the
//! search ORs together what every step broke and reached, and the state is the world without its
//! last step. Nothing else changes: the same [`World`], the same steps, the same normalisation
//! ([`World::normalise_after`] with the safety abstractions of the reachability flags still
//! tracked), so the reachable worlds are exactly those of [`crate::outbox::OutboxModel`].
//!
//! What is kept per state:
//! - safety alone: its fingerprint in the visited set; the worlds of the frontier are the only
//!   whole states in memory, and paths are rebuilt by the exact search of
//!   [`crate::check::bfs_paths`] (a second, shortest-path search), as before;
//! - with the liveness graph ([`Explore::keep_graph`]): also its edges (target and the step's
//!   class), its parent in the search tree, and a byte per message of what the liveness
//!   checks read ([`crate::liveness`]). States are numbered in breadth-first order, the same on
//!   every run and with any number of threads.
//!
//! The threads expand a batch of the frontier side by side, looking up each successor in the
//! visited set as it stood before the batch; then one thread merges the batch in order, so the
//! numbering is the sequential one.
//!
//! **Shards.** With `shard = i/n` the search explores every state up to a depth `d` (the first
//! depth with at least [`SHARD_WIDTH`] × n states, found by the same search in every shard),
//! keeps of the states first met at depth `d` those whose fingerprint falls in shard i, and
//! explores onward from those only. Every reachable state beyond depth `d` lies below some
//! state of depth `d` on a shortest path, so if every shard completes, together they have
//! explored every state: a property violated or a situation reached anywhere is found by some
//! shard. A state below the frontier of two shards is explored by both (shards overlap, they
//! never miss).

use crate::liveness::Graph;
use crate::outbox::REACHABILITY;
use outbox_check::world::{Abstraction, Action, FleetFacts, World, WorldConfig};
use serde::{Deserialize, Serialize};

/// One of `count` parts of a search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// A shard's frontier is chosen at the first depth holding this many states per shard.
pub const SHARD_WIDTH: usize = 64;

/// What to explore and how.
pub struct Explore<'a> {
    pub config: &'a WorldConfig,
    /// `Some(tracked)`: the safety abstractions, leaving alone what the reachability flags in
    /// `tracked` read (see [`World::normalise_by`]).
    pub normalisation: Option<Abstraction>,
    pub threads: usize,
    /// Keep the graph for the liveness checks (edges, parents, what they read of each state).
    pub keep_graph: bool,
    /// Past this many states the graph is dropped (the search goes on without it) or, with
    /// `limit_stops`, the search stops.
    pub graph_limit: usize,
    pub limit_stops: bool,
    pub shard: Option<Shard>,
}

/// What the search found.
pub struct Explored {
    /// Successors computed, duplicates included.
    pub generated: usize,
    /// Distinct states (in a shard: those this shard visited).
    pub unique: usize,
    pub max_depth: usize,
    /// Bit `i`: some step broke `Property::SAFETY[i]`.
    pub violated: u16,
    /// Bit `i`: some step reached `REACHABILITY[i]`.
    pub reached: u16,
    /// The search ran to the end (not stopped by its budget).
    pub complete: bool,
    /// The depth at which a sharded search split.
    pub shard_depth: Option<usize>,
    /// The graph passed [`Explore::graph_limit`] and was not kept.
    pub graph_dropped: bool,
    pub graph: Option<Graph>,
}

/// The reachability flags a step reached, as bits in [`REACHABILITY`]'s order.
pub fn reached_bits(world: &World) -> u16 {
    REACHABILITY.iter().filter(|r| world.step.seen.has(**r)).fold(0, |bits, r| bits | r.bit())
}

/// The successor of `state` by `action`, as the search keeps it: normalised, its last step
/// cleared. Returns the step's outcome too: (violated, reached).
pub fn successor(
    config: &WorldConfig,
    facts: &FleetFacts,
    normalisation: Option<Abstraction>,
    state: &World,
    action: Action,
) -> (World, u16, u16) {
    let mut next = state.clone();
    next.advance(config, action);
    let (violated, reached) = (next.step.violated, reached_bits(&next));
    if let Some(abstraction) = normalisation {
        next.step.seen.mask(abstraction.tracked);
    }
    next.normalise_after(config, facts, normalisation, action);
    next.step = Default::default();
    (next, violated, reached)
}

/// The initial state as the search keeps it.
pub fn initial(config: &WorldConfig, facts: &FleetFacts, normalisation: Option<Abstraction>) -> World {
    let mut init = World::new(config);
    init.normalise_by(config, facts, normalisation);
    init.step = Default::default();
    init
}

type Visited<V> = hashbrown::HashMap<u64, V, std::hash::BuildHasherDefault<PassThrough>>;

/// One successor as a worker computed it.
struct Succ {
    fingerprint: u64,
    /// The state's number where the visited set held it before the batch, else `u32::MAX`.
    known: u32,
    /// The world, at the first of its kind in its thread's slice that the visited set did not
    /// hold before the batch.
    world: Option<World>,
}

/// One expanded state.
struct Expanded {
    succs: Vec<Succ>,
    violated: u16,
    reached: u16,
    /// For the liveness graph: each step's class, and what the checks read of the state.
    classes: Vec<u16>,
    summary: crate::liveness::Summary,
}

/// The first depth with at least [`SHARD_WIDTH`] × `count` new states (or one past the last
/// depth, where the graph ends sooner): the same in every shard.
fn shard_depth(config: &WorldConfig, facts: &FleetFacts, normalisation: Option<Abstraction>, count: u32) -> usize {
    let init = initial(config, facts, normalisation);
    let mut seen: Visited<()> = Visited::default();
    seen.insert(outbox_check::world::fingerprint(&init), ());
    let mut level = vec![init];
    let mut depth = 0;
    let mut actions = Vec::new();
    while !level.is_empty() && level.len() < SHARD_WIDTH * count as usize {
        let mut next_level = Vec::new();
        for state in &level {
            actions.clear();
            state.actions(config, &mut actions);
            for &action in &actions {
                let (next, _, _) = successor(config, facts, normalisation, state, action);
                if seen.insert(outbox_check::world::fingerprint(&next), ()).is_none() {
                    next_level.push(next);
                }
            }
        }
        level = next_level;
        depth += 1;
    }
    depth
}

/// Whether a state of the split depth belongs to `shard`.
fn owned(fingerprint: u64, shard: Shard) -> bool {
    // The high half: the visited set's buckets use the low bits.
    (fingerprint >> 32) % u64::from(shard.count) == u64::from(shard.index)
}

/// Explores; `stop` is asked every batch whether the budget is spent, `progress` told
/// (generated, unique) about every 200 ms.
pub fn explore(job: &Explore, stop: &(dyn Fn() -> bool + Sync), progress: &(dyn Fn(usize, usize) + Sync)) -> Explored {
    let config = job.config;
    let facts = FleetFacts::of(config);
    let norm = job.normalisation;
    let threads = job.threads.max(1);
    assert!(!(job.keep_graph && job.shard.is_some()), "a sharded search keeps no liveness graph");
    let split = job.shard.map(|s| shard_depth(config, &facts, norm, s.count));
    let init = initial(config, &facts, norm);
    if !job.keep_graph {
        return explore_states(job, &facts, split, init, stop, progress);
    }
    let fingerprint = outbox_check::world::fingerprint::<World>;
    let mut visited: Visited<u32> = Visited::default();
    visited.insert(fingerprint(&init), 0);
    let mut graph = job.keep_graph.then(|| Graph::new(config, norm));
    // The frontier: worlds with their depth, in state-number order.
    let mut frontier: std::collections::VecDeque<(World, u32)> = std::collections::VecDeque::from([(init, 0)]);
    let mut out = Explored {
        generated: 0,
        unique: 1,
        max_depth: 0,
        violated: 0,
        reached: 0,
        complete: true,
        shard_depth: split,
        graph_dropped: false,
        graph: None,
    };
    let batch_size = 1024 * threads;
    let mut reported = std::time::Instant::now();
    let visited = std::sync::RwLock::new(visited);
    // Expands a chunk of the frontier, looking up successors in the visited set as it stood
    // before the batch; the chunk's worlds are dropped by the thread that expands them.
    let expand = |chunk: Vec<(World, u32)>| -> Vec<(Expanded, u32)> {
        let visited = visited.read().expect("an unpoisoned visited set");
        let mut actions = Vec::new();
        let mut fresh: Visited<()> = Visited::default();
        chunk
            .into_iter()
            .map(|(state, depth)| {
                actions.clear();
                state.actions(config, &mut actions);
                let mut e = Expanded {
                    succs: Vec::with_capacity(actions.len()),
                    violated: 0,
                    reached: 0,
                    classes: Vec::new(),
                    summary: Default::default(),
                };
                if job.keep_graph {
                    e.summary = crate::liveness::Summary::of(&state, config, &actions);
                    e.classes = actions.iter().map(|&a| crate::liveness::class_of(a, config)).collect();
                }
                for &action in &actions {
                    let (next, violated, reached) = successor(config, &facts, norm, &state, action);
                    e.violated |= violated;
                    e.reached |= reached;
                    let fp = fingerprint(&next);
                    let succ = match visited.get(&fp) {
                        Some(&known) => Succ { fingerprint: fp, known, world: None },
                        None => Succ {
                            fingerprint: fp,
                            known: u32::MAX,
                            world: fresh.insert(fp, ()).is_none().then_some(next),
                        },
                    };
                    e.succs.push(succ);
                }
                (e, depth)
            })
            .collect()
    };
    with_workers(threads, &expand, |run| {
        while !frontier.is_empty() {
            if stop() {
                out.complete = false;
                break;
            }
            if graph.is_some() && out.unique > job.graph_limit {
                graph = None;
                out.graph_dropped = true;
                if job.limit_stops {
                    out.complete = false;
                    break;
                }
            }
            if reported.elapsed() >= std::time::Duration::from_millis(200) {
                progress(out.generated, out.unique);
                reported = std::time::Instant::now();
            }
            let take = level_batch(&frontier, batch_size);
            let batch_len = take;
            let expanded = run(&mut frontier, take).into_iter().flatten();
            let mut visited = visited.write().expect("an unpoisoned visited set");
            let first = out.unique - frontier.len() - batch_len;
            for (k, (e, depth)) in expanded.enumerate() {
                let from = (first + k) as u32;
                out.violated |= e.violated;
                out.reached |= e.reached;
                out.generated += e.succs.len();
                let depth = depth + 1;
                let mut targets = Vec::with_capacity(if graph.is_some() { e.succs.len() } else { 0 });
                for (edge, succ) in e.succs.into_iter().enumerate() {
                    let fp = succ.fingerprint;
                    let target = if succ.known != u32::MAX { Some(succ.known) } else { visited.get(&fp).copied() };
                    let target = match target {
                        Some(i) => i,
                        None => {
                            let i = out.unique as u32;
                            visited.insert(fp, i);
                            out.unique += 1;
                            let keep = match (split, job.shard) {
                                (Some(d), Some(s)) if depth as usize == d => owned(fp, s),
                                _ => true,
                            };
                            if keep {
                                let world = succ.world.expect("the first of a new state in its slice keeps its world");
                                out.max_depth = out.max_depth.max(depth as usize);
                                frontier.push_back((world, depth));
                            } else {
                                // Another shard's: never expanded here, so not counted among this
                                // shard's states either (sharded searches keep no graph).
                                out.unique -= 1;
                                visited.insert(fp, u32::MAX);
                            }
                            if let Some(g) = graph.as_mut() {
                                g.add_parent(from, edge as u16);
                            }
                            i
                        }
                    };
                    targets.push(target);
                }
                if let Some(g) = graph.as_mut() {
                    g.add_state(&targets, &e.classes, e.summary);
                }
            }
        }
    });
    progress(out.generated, out.unique);
    if let Some(mut g) = graph.filter(|_| out.complete) {
        g.finish(out.unique);
        out.graph = Some(g);
    }
    out
}

/// How many states from the front of the frontier the next batch takes: at most `size`, all of
/// one depth, so every state of a batch is first met at the same depth.
fn level_batch(frontier: &std::collections::VecDeque<(World, u32)>, size: usize) -> usize {
    let depth = frontier.front().map_or(0, |(_, d)| *d);
    frontier.iter().take(size).take_while(|(_, d)| *d == depth).count()
}

/// [`explore`] without the graph: the threads insert into the visited set themselves (a set of
/// fingerprints in [`SET_SHARDS`] locked parts), so nothing but the new worlds passes through
/// one thread. The order states are met in within a depth is the threads', which no count
/// depends on.
fn explore_states(
    job: &Explore,
    facts: &FleetFacts,
    split: Option<usize>,
    init: World,
    stop: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Explored {
    let config = job.config;
    let norm = job.normalisation;
    let threads = job.threads.max(1);
    let fingerprint = outbox_check::world::fingerprint::<World>;
    let sets: Vec<std::sync::Mutex<Visited<()>>> = (0..SET_SHARDS).map(|_| Default::default()).collect();
    let part = |fp: u64| (fp >> 56) as usize % SET_SHARDS;
    sets[part(fingerprint(&init))].lock().expect("an unpoisoned set").insert(fingerprint(&init), ());
    let mut frontier: std::collections::VecDeque<(World, u32)> = std::collections::VecDeque::from([(init, 0)]);
    let mut out = Explored {
        generated: 0,
        unique: 1,
        max_depth: 0,
        violated: 0,
        reached: 0,
        complete: true,
        shard_depth: split,
        graph_dropped: false,
        graph: None,
    };
    struct Part {
        new: Vec<(World, u32)>,
        generated: usize,
        violated: u16,
        reached: u16,
    }
    let expand = |chunk: Vec<(World, u32)>| -> Part {
        let mut p = Part { new: Vec::new(), generated: 0, violated: 0, reached: 0 };
        let mut actions = Vec::new();
        for (state, depth) in chunk {
            actions.clear();
            state.actions(config, &mut actions);
            p.generated += actions.len();
            let depth = depth + 1;
            for &action in &actions {
                let (next, violated, reached) = successor(config, facts, norm, &state, action);
                p.violated |= violated;
                p.reached |= reached;
                let fp = fingerprint(&next);
                let new = sets[part(fp)].lock().expect("an unpoisoned set").insert(fp, ()).is_none();
                let ours = match (split, job.shard) {
                    (Some(d), Some(s)) if depth as usize == d => owned(fp, s),
                    _ => true,
                };
                if new && ours {
                    p.new.push((next, depth));
                }
            }
        }
        p
    };
    let batch_size = 1024 * threads;
    let mut reported = std::time::Instant::now();
    with_workers(threads, &expand, |run| {
        while !frontier.is_empty() {
            if stop() {
                out.complete = false;
                break;
            }
            if reported.elapsed() >= std::time::Duration::from_millis(200) {
                progress(out.generated, out.unique);
                reported = std::time::Instant::now();
            }
            let take = level_batch(&frontier, batch_size);
            for p in run(&mut frontier, take) {
                out.generated += p.generated;
                out.violated |= p.violated;
                out.reached |= p.reached;
                out.unique += p.new.len();
                if let Some((_, d)) = p.new.first() {
                    out.max_depth = out.max_depth.max(*d as usize);
                }
                frontier.extend(p.new);
            }
        }
    });
    progress(out.generated, out.unique);
    out
}

/// Runs `body` with `threads` workers that live as long as it (a thread per batch would cost
/// the allocator a heap per batch). `body` gets `run(frontier, n)`: the first `n` states of the
/// frontier, split into a chunk per worker, expanded by `expand`; the chunks' results in order.
fn with_workers<R: Send>(
    threads: usize,
    expand: &(dyn Fn(Vec<(World, u32)>) -> R + Sync),
    body: impl FnOnce(&mut dyn FnMut(&mut std::collections::VecDeque<(World, u32)>, usize) -> Vec<R>),
) {
    std::thread::scope(|scope| {
        let (done_tx, done_rx) = std::sync::mpsc::channel::<(usize, R)>();
        let workers: Vec<std::sync::mpsc::Sender<Vec<(World, u32)>>> = (0..threads)
            .map(|w| {
                let (tx, rx) = std::sync::mpsc::channel::<Vec<(World, u32)>>();
                let done = done_tx.clone();
                scope.spawn(move || {
                    for chunk in rx {
                        if done.send((w, expand(chunk))).is_err() {
                            break;
                        }
                    }
                });
                tx
            })
            .collect();
        let mut run = |frontier: &mut std::collections::VecDeque<(World, u32)>, take: usize| -> Vec<R> {
            let chunk = take.div_ceil(threads).max(1);
            let mut sent = 0;
            while sent * chunk < take {
                let n = chunk.min(take - sent * chunk);
                workers[sent].send(frontier.drain(..n).collect()).expect("a live search thread");
                sent += 1;
            }
            let mut parts: Vec<Option<R>> = (0..sent).map(|_| None).collect();
            for _ in 0..sent {
                let (w, part) = done_rx.recv().expect("a live search thread");
                parts[w] = Some(part);
            }
            parts.into_iter().map(|p| p.expect("every chunk expanded")).collect()
        };
        body(&mut run);
        drop(workers);
    });
}

/// The visited set of [`explore_states`] is locked in this many parts.
const SET_SHARDS: usize = 64;

/// A hasher for keys that are fingerprints already: passes the `u64` through.
#[derive(Default)]
pub struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}
