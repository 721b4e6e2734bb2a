//! The complete safety check divided among workers by owner, on timely dataflow: each state
//! belongs to one worker (the high half of its fingerprint, modulo the workers), which alone keeps
//! it in its visited set and expands it; successors travel to their owners. The workers may be
//! threads of one process or processes on several machines (timely's cluster: one `host:port` a
//! process, every process started with its index), so N workers each store and expand about 1/N
//! of the space. Nothing here is a protocol of ours: timely carries the states and decides when
//! a depth is over.
//!
//! The search is breadth-first by timely's timestamps: a state arrives at its owner stamped with
//! its depth, and the owner handles a depth only once timely says no state of that depth is in
//! flight anywhere, so a state is first kept at its breadth-first depth, as in
//! [`crate::graph::explore`]. What the workers found (generated, unique, deepest depth, the
//! properties broken and situations reached) is summed over every worker and given to every
//! process; each worker's own count of states is kept to show the division.

use crate::graph::{initial, successor, Explored};
use outbox_check::world::{Abstraction, FleetFacts, World, WorldConfig};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Where the workers run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workers {
    /// `threads` workers in this process.
    Here { threads: usize },
    /// `threads` workers in each process of a cluster; this process is `process` of `hosts`
    /// (one `host:port` each, the same list in every process).
    Cluster { threads: usize, process: usize, hosts: Vec<String> },
}

impl Workers {
    fn config(&self) -> timely::Config {
        let communication = match self {
            Workers::Here { threads: 1 } => timely::CommunicationConfig::Thread,
            Workers::Here { threads } => timely::CommunicationConfig::Process(*threads),
            Workers::Cluster { threads, process, hosts } => timely::CommunicationConfig::Cluster {
                threads: *threads,
                process: *process,
                addresses: hosts.clone(),
                report: false,
                zerocopy: false,
                log_fn: Arc::new(|_| None),
            },
        };
        timely::Config { communication, worker: timely::WorkerConfig::default() }
    }
}

/// What one worker found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkerCounts {
    pub worker: usize,
    pub generated: usize,
    pub unique: usize,
    pub max_depth: usize,
    pub violated: u16,
    pub reached: u16,
    pub complete: bool,
}

/// The complete safety search on `workers`. `stop` is asked about every 100 ms whether the
/// budget is spent (the search then ends incomplete); `progress` is told (generated, unique) of
/// this process's workers as often. Returns what every worker found, summed, and each worker's
/// own counts in worker order; an error where timely could not start (a host unreachable, a port
/// taken).
pub fn explore(
    config: &WorldConfig,
    normalisation: Option<Abstraction>,
    workers: &Workers,
    stop: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(Explored, Vec<WorkerCounts>), String> {
    let stopped = Arc::new(AtomicBool::new(false));
    let generated = Arc::new(AtomicUsize::new(0));
    let unique = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let local = match workers {
        Workers::Here { threads } | Workers::Cluster { threads, .. } => *threads,
    };
    let shared = (config.clone(), stopped.clone(), generated.clone(), unique.clone(), finished.clone());
    // timely's networking prints its waits for the other processes on stdout, where our --json
    // goes: stderr takes them until the search is over.
    let _quiet = matches!(workers, Workers::Cluster { .. }).then(StdoutToStderr::new).flatten();
    // timely connects the processes before it returns the workers: it runs on a thread of its
    // own, so that the check's limits still apply while a process of --hosts has not come up.
    let (started, guards) = std::sync::mpsc::channel();
    let timely_config = workers.config();
    std::thread::spawn(move || {
        let result = timely::execute(timely_config, move |worker| {
            let (config, stopped, generated, unique, finished) = shared.clone();
            // Counted however the worker ends, a panic too (a peer process gone).
            let _done = Done(finished);
            let counts = search(worker, &config, normalisation, &stopped, &generated, &unique);
            gather(worker, counts)
        });
        let _ = started.send(result);
    });
    let guards = loop {
        match guards.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(result) => break result?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if stop() => {
                return Err("not every process of --hosts connected before the check's limit".to_string());
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Err("timely did not start".to_string()),
        }
    };
    while finished.load(Ordering::Relaxed) < local {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if stop() {
            stopped.store(true, Ordering::Relaxed);
        }
        progress(generated.load(Ordering::Relaxed), unique.load(Ordering::Relaxed));
    }
    let mut results = Vec::new();
    for result in guards.join() {
        results.push(result.map_err(|e| format!("a search worker failed: {e}"))?);
    }
    let mut all: Vec<WorkerCounts> = results.into_iter().next().unwrap_or_default();
    all.sort_by_key(|c| c.worker);
    let explored = Explored {
        generated: all.iter().map(|c| c.generated).sum(),
        unique: all.iter().map(|c| c.unique).sum(),
        max_depth: all.iter().map(|c| c.max_depth).max().unwrap_or(0),
        violated: all.iter().fold(0, |v, c| v | c.violated),
        reached: all.iter().fold(0, |r, c| r | c.reached),
        complete: all.iter().all(|c| c.complete),
        shard_depth: None,
        graph_dropped: false,
        graph: None,
    };
    progress(explored.generated, explored.unique);
    Ok((explored, all))
}

/// Counts a worker as finished when it is dropped.
struct Done(Arc<AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sends what is written to stdout to stderr while it lives (see [`explore`]).
struct StdoutToStderr {
    saved: i32,
}

impl StdoutToStderr {
    fn new() -> Option<StdoutToStderr> {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: dup and dup2 on the process's own standard descriptors; the saved copy is
        // restored and closed on drop.
        let saved = unsafe { libc::dup(1) };
        (saved >= 0 && unsafe { libc::dup2(2, 1) } >= 0).then_some(StdoutToStderr { saved })
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: as in new.
        unsafe {
            libc::dup2(self.saved, 1);
            libc::close(self.saved);
        }
    }
}

/// A state on its way to its owner. Within a process timely moves it as it is; between processes
/// it travels as its JSON (the world's serde form skips default fields, which a
/// non-self-describing encoding such as timely's bincode cannot read back).
#[derive(Clone)]
struct Wire(World);

impl serde::Serialize for Wire {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = serde_json::to_vec(&self.0).map_err(serde::ser::Error::custom)?;
        serde::Serialize::serialize(&bytes, serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Wire {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Wire, D::Error> {
        let bytes: Vec<u8> = serde::Deserialize::deserialize(deserializer)?;
        serde_json::from_slice(&bytes).map(Wire).map_err(serde::de::Error::custom)
    }
}

/// A depth's states waiting at their owner, and their fingerprints.
type Waiting = (Vec<(u64, Wire)>, hashbrown::HashSet<u64>);

/// The owner of a state: the high half of its fingerprint (the visited set's buckets use the
/// low bits).
fn owner(fingerprint: u64) -> u64 {
    fingerprint >> 32
}

/// One worker's part of the search.
fn search(
    worker: &mut timely::worker::Worker,
    config: &WorldConfig,
    normalisation: Option<Abstraction>,
    stopped: &Arc<AtomicBool>,
    generated_here: &Arc<AtomicUsize>,
    unique_here: &Arc<AtomicUsize>,
) -> WorkerCounts {
    use std::cell::RefCell;
    use std::rc::Rc;
    use timely::dataflow::channels::pact::Exchange;
    use timely::dataflow::operators::generic::operator::Operator;
    use timely::dataflow::operators::{Concat, ConnectLoop, Feedback, Probe, ToStream};

    let index = worker.index();
    let counts = Rc::new(RefCell::new(WorkerCounts { worker: index, complete: true, ..Default::default() }));
    let facts = FleetFacts::of(config);
    let start = initial(config, &facts, normalisation);
    let first = outbox_check::world::fingerprint(&start);
    let seed: Vec<(u64, Wire)> = if index == 0 { vec![(first, Wire(start))] } else { Vec::new() };
    let mine = counts.clone();
    let config = config.clone();
    let stopped = stopped.clone();
    let (generated_here, unique_here) = (generated_here.clone(), unique_here.clone());
    let probe = worker.dataflow::<u32, _, _>(move |scope| {
        let (handle, cycle) = scope.feedback(1u32);
        let mut visited: hashbrown::HashSet<u64> = hashbrown::HashSet::new();
        let mut sent: hashbrown::HashSet<u64> = hashbrown::HashSet::new();
        let mut waiting: std::collections::BTreeMap<u32, Waiting> = Default::default();
        let mut actions = Vec::new();
        let stream = seed.to_stream(scope).container::<Vec<(u64, Wire)>>().concat(cycle).unary_notify(
            Exchange::new(|(fp, _): &(u64, Wire)| owner(*fp)),
            "Expand",
            Vec::new(),
            move |input, output, notify| {
                // A state arriving is kept once per depth, and not at all where this worker has
                // expanded it already (at an earlier depth): only a depth's new states wait.
                input.for_each_time(|time, data| {
                    let (states, seen) = waiting.entry(*time.time()).or_default();
                    for batch in data {
                        for (fp, state) in batch.drain(..) {
                            if !visited.contains(&fp) && seen.insert(fp) {
                                states.push((fp, state));
                            }
                        }
                    }
                    notify.notify_at(time.retain(output.output_index()));
                });
                notify.for_each(|time, _, _| {
                    let Some((states, _)) = waiting.remove(time.time()) else { return };
                    let depth = *time.time() as usize;
                    let mut c = mine.borrow_mut();
                    let mut session = output.session(&time);
                    for (fp, Wire(state)) in states {
                        if !visited.insert(fp) {
                            continue;
                        }
                        c.unique += 1;
                        unique_here.fetch_add(1, Ordering::Relaxed);
                        c.max_depth = c.max_depth.max(depth);
                        if stopped.load(Ordering::Relaxed) {
                            c.complete = false;
                            continue;
                        }
                        actions.clear();
                        state.actions(&config, &mut actions);
                        c.generated += actions.len();
                        generated_here.fetch_add(actions.len(), Ordering::Relaxed);
                        for &action in &actions {
                            let (next, violated, reached) = successor(&config, &facts, normalisation, &state, action);
                            c.violated |= violated;
                            c.reached |= reached;
                            // Each state goes to its owner once from here, at the first (so the
                            // least) depth this worker met it.
                            let fp = outbox_check::world::fingerprint(&next);
                            if sent.insert(fp) {
                                session.give((fp, Wire(next)));
                            }
                        }
                    }
                });
            },
        );
        let (probe, stream) = stream.probe();
        stream.connect_loop(handle);
        probe
    });
    while worker.step_or_park(None) {
        if probe.done() {
            break;
        }
    }
    while worker.step() {}
    let counts = *counts.borrow();
    counts
}

/// Every worker's counts, given to every worker.
fn gather(worker: &mut timely::worker::Worker, counts: WorkerCounts) -> Vec<WorkerCounts> {
    use std::cell::RefCell;
    use std::rc::Rc;
    use timely::dataflow::operators::vec::Broadcast;
    use timely::dataflow::operators::{Inspect, Probe, ToStream};
    let all: Rc<RefCell<Vec<WorkerCounts>>> = Default::default();
    let seen = all.clone();
    let probe = worker.dataflow::<u32, _, _>(move |scope| {
        vec![counts]
            .to_stream(scope)
            .container::<Vec<WorkerCounts>>()
            .broadcast()
            .inspect(move |c| seen.borrow_mut().push(*c))
            .probe()
            .0
    });
    while !probe.done() {
        worker.step();
    }
    let all = all.borrow().clone();
    all
}
