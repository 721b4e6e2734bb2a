//! `check`: model-check a fleet exhaustively and say, for every property of SPEC §7, whether it
//! holds — with the shortest counterexample where it does not.
//!
//! Safety and reachability: the complete check is the search of [`crate::graph`] on two
//! threads over the world with the safety abstractions, each step's outcome a label of its
//! edge; shortest paths — examples of the reachability properties first, counterexamples after
//! — come from a single-threaded breadth-first search of the exact normalised model
//! ([`bfs_paths`]). Liveness runs the lasso search of [`crate::liveness`] on the graph the
//! complete check kept, where it could keep it, else on a graph of its own.

use crate::liveness::{check_l1, check_l2, check_l3, Graph, LassoVerdict};
use crate::outbox::{replay, replay_with, OutboxModel, ReplayStep, REACHABILITY, SAFETY_NAMES};
use outbox_check::world::{Action, WorldConfig};
use serde::Serialize;
use stateright::Model;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct CheckOptions {
    pub threads: usize,
    /// Stop the whole check — every search, liveness included — after this long; what is not
    /// decided by then is reported as unknown and the check as incomplete. Any length is
    /// accepted (one too large to add to the clock means no limit).
    pub timeout: Option<Duration>,
    /// Stop the same way when this process holds more than this many bytes (checked in every
    /// phase).
    pub max_memory: Option<u64>,
    /// Check L1–L3 (the complete check keeps its graph for them, and L2 searches a second).
    pub liveness: bool,
    /// The liveness graph's size limit; past it liveness is reported as not checked.
    pub liveness_states_max: usize,
    /// Search only this part of the state space (safety and reachability; no liveness).
    pub shard: Option<crate::graph::Shard>,
    /// Divide the complete check among these workers by owner ([`crate::cluster`]; safety and
    /// reachability, no liveness).
    pub workers: Option<crate::cluster::Workers>,
    /// Let the complete check erase what only the safety properties the first exact search
    /// already broke read (on by default; off only to show that it changes no verdict).
    pub settle: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            threads: 2,
            timeout: None,
            max_memory: None,
            liveness: true,
            liveness_states_max: 50_000_000,
            shard: None,
            workers: None,
            settle: true,
        }
    }
}

/// The limits of one check: a deadline and a memory ceiling, read by every phase.
pub struct Budget {
    deadline: Option<Instant>,
    max_memory: Option<u64>,
    /// Why the check stopped early, once it has.
    stopped: std::sync::Mutex<Option<String>>,
}

impl Budget {
    pub fn new(started: Instant, options: &CheckOptions) -> Budget {
        Budget {
            deadline: options.timeout.and_then(|t| started.checked_add(t)),
            max_memory: options.max_memory,
            stopped: std::sync::Mutex::new(None),
        }
    }

    /// `Some(reason)` once the deadline has passed or memory is over the ceiling (and from then
    /// on).
    pub fn exceeded(&self) -> Option<String> {
        let mut stopped = self.stopped.lock().expect("an unpoisoned lock");
        if stopped.is_none() {
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                *stopped = Some("the check stopped at its --timeout".to_string());
            } else if let (Some(limit), Some(held)) = (self.max_memory, memory_resident()) {
                if held > limit {
                    *stopped = Some(format!(
                        "the check stopped when it held {:.2} GB, over --max-memory {:.2} GB",
                        held as f64 / 1e9,
                        limit as f64 / 1e9
                    ));
                }
            }
        }
        stopped.clone()
    }
}

/// This process's resident memory in bytes (Linux; `None` elsewhere).
pub fn memory_resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Safety,
    Reachability,
    Liveness,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Holds,
    Violated,
    Reached,
    Unreached,
    /// The search stopped before it could decide (timeout, memory, or a graph over the size
    /// limit), or the path it found did not replay in the plain world (a checker bug).
    Unknown,
    /// A safety property nothing in the run could have broken: its witness (a situation in
    /// which the property's check could fail) was never reached. Not a verdict of "holds".
    NotExercised,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct PropertyResult {
    pub id: String,
    pub name: String,
    pub kind: Kind,
    pub status: Verdict,
    /// The path, replayed with real relay names and true times; for liveness, the prefix then
    /// the cycle.
    pub counterexample: Option<Vec<ReplayStep>>,
    /// For liveness: the step where the repeated cycle starts (1-based).
    pub cycle_from: Option<usize>,
    /// The path as the explorer's action indices (`0/3/1/…`), to open at `/#/steps/…`.
    pub explorer_path: Option<String>,
    /// Why the verdict is unknown or the property not exercised, when it is.
    pub note: Option<String>,
    /// For liveness: the message the lasso keeps from its goal.
    pub message: Option<u32>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct CheckReport {
    pub fleet: Vec<String>,
    pub config: WorldConfig,
    pub states: usize,
    pub unique_states: usize,
    /// An upper bound on the probability that the complete check missed a state: it keeps each
    /// state as a 64-bit fingerprint, and two distinct states with one fingerprint would make
    /// the second look visited ([`collision_bound`]).
    #[serde(default)]
    pub collision_bound: f64,
    pub max_depth: usize,
    /// Wall time of the safety and reachability check: the complete check and the searches for
    /// shortest paths (liveness not included).
    pub seconds: f64,
    /// Wall time of the complete safety check alone, whose counts `states` and `unique_states`
    /// are.
    pub search_seconds: f64,
    /// States the exact searches for shortest paths visited (before and after the complete check).
    pub path_search_states: usize,
    pub complete: bool,
    pub liveness_states: Option<usize>,
    /// The part of the search this run covered, when it was one shard of several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// When this report merges the reports of a sharded search: how many shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_shards: Option<u32>,
    /// When the complete check was divided among workers: the states each kept and expanded,
    /// in worker order (their sum is `unique_states`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_states: Option<Vec<usize>>,
    /// How far apart, in the model's ticks, a message's first and last publication can be: what
    /// a broker's deduplication window must cover ([`publication_span`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publication_span: Option<PublicationSpan>,
    pub properties: Vec<PropertyResult>,
}

/// The birthday bound for `unique` states kept as 64-bit fingerprints: the probability that
/// some two of them share one is at most `unique·(unique−1)/2 / 2⁶⁴` (a union bound over the
/// pairs, each colliding with probability 2⁻⁶⁴ for a well-mixed hash). TLC reports the same kind
/// of figure; 23.7 M states give about 1.5·10⁻⁵.
pub fn collision_bound(unique: usize) -> f64 {
    let n = unique as f64;
    (n * (n - 1.0).max(0.0) / 2.0 / 2f64.powi(64)).min(1.0)
}

/// [`outbox_check::core::Policy::publication_span`] of a fleet: the longest over its designs, or why
/// none bounds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PublicationSpan {
    /// Publications one message can have at most.
    pub publications: Option<u32>,
    /// The longest time from the first to the last, in the model's ticks (a relay polls every
    /// tick).
    pub ticks: Option<u64>,
    /// Why no window covers every republication, where none does.
    pub unbounded: Option<String>,
}

/// The longest span between a message's first and last publication in `config`'s fleet, with
/// its lease, backoff and budget and a poll every tick.
pub fn publication_span(config: &WorldConfig) -> PublicationSpan {
    let mut worst = PublicationSpan { publications: Some(0), ticks: Some(0), unbounded: None };
    for i in 0..config.relays.len() {
        match config.policy(i).publication_span(config.lease, config.max_attempts, config.tick) {
            Ok(span) => {
                worst.publications = worst.publications.map(|p| p.max(span.publications));
                worst.ticks = worst.ticks.map(|t| t.max(span.longest.0));
            }
            Err(reason) => {
                return PublicationSpan {
                    publications: None,
                    ticks: None,
                    unbounded: Some(format!("{}: {reason}", config.relays[i].design.name())),
                }
            }
        }
    }
    worst
}

/// Which part of a sharded search a report covers: shard `index` of `count`, split at `depth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ShardInfo {
    pub index: u32,
    pub count: u32,
    pub depth: usize,
}

impl CheckReport {
    /// Some safety or liveness property is violated.
    pub fn violated(&self) -> bool {
        self.properties.iter().any(|p| p.status == Verdict::Violated)
    }

    /// Some property `verify` gates on ([`outbox_check::core::Property::gated`]) is violated.
    pub fn violated_gated(&self) -> bool {
        self.properties.iter().any(|p| p.status == Verdict::Violated && outbox_check::core::Property::gated_id(&p.id))
    }

    /// Every safety and liveness property was decided (held, violated or not exercised).
    pub fn decided(&self) -> bool {
        self.complete && self.properties.iter().all(|p| p.status != Verdict::Unknown)
    }

    pub fn property(&self, id: &str) -> Option<&PropertyResult> {
        self.properties.iter().find(|p| p.id == id)
    }
}

/// States the first, exact search may visit while it looks for an example of every
/// reachability property (a path to each, shortest); what it has not found by then the complete
/// check looks for.
pub const DISCOVERY_STATES: usize = 200_000;

/// Model-checks `config`. `progress` is called now and then with (states, unique states).
///
/// Three searches: a breadth-first search of the exact model (the normalised world) for the
/// shortest example of each reachability property, stopped once it has them all (or after
/// [`DISCOVERY_STATES`]); the complete check of the safety properties ([`crate::graph`]), over
/// the world with the safety abstractions, tracking only the reachability flags the first
/// search did not find; and, for what the complete check found
/// and the first search did not, a breadth-first search of the exact model again for the
/// shortest path to it. The abstractions only ever add violations, so a property the complete
/// check finds holding holds; a violation it reports is confirmed by an exact path, or the
/// verdict is unknown.
pub fn check(config: &WorldConfig, options: &CheckOptions, progress: &(dyn Fn(usize, usize) + Sync)) -> CheckReport {
    assert!(options.workers.is_none(), "a check divided among workers can fail to start: use try_check");
    try_check(config, options, progress).expect("a check in this process")
}

/// [`check`], with the complete check divided among [`CheckOptions::workers`] where set: an
/// error (one line) where the workers could not start — an address taken or unreachable.
pub fn try_check(
    config: &WorldConfig,
    options: &CheckOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<CheckReport, String> {
    let started = Instant::now();
    let budget = Budget::new(started, options);
    let exact = OutboxModel::new(config.clone());
    let reachability: BTreeSet<&'static str> = REACHABILITY.iter().map(|r| r.name()).collect();
    let everything: BTreeSet<&'static str> = SAFETY_NAMES.iter().copied().chain(reachability.iter().copied()).collect();
    let (mut paths, mut path_search_states) = bfs_paths(
        &exact,
        &everything,
        &|found| reachability.iter().all(|r| found.contains(r)),
        Some(DISCOVERY_STATES),
        Some(&budget),
    );
    let tracked = REACHABILITY
        .iter()
        .enumerate()
        .filter(|(_, r)| paths.iter().all(|(n, _, _)| *n != r.name()))
        .fold(0u16, |mask, (i, _)| mask | 1 << i);
    // The safety properties the exact search has already broken: the complete check need not
    // look at them again, and erases what only they read (World::abstract_for_safety).
    let settled = if options.settle {
        SAFETY_NAMES
            .iter()
            .enumerate()
            .filter(|(_, name)| paths.iter().any(|(n, _, _)| n == *name))
            .fold(0u16, |mask, (i, _)| mask | 1 << i)
    } else {
        0
    };

    // The complete check: every state, edges labelled with what each step broke and reached
    // (see crate::graph). Its graph is the liveness graph too, kept as it is built: the
    // abstractions change nothing a step or a liveness check reads.
    let search_started = Instant::now();
    let stop = || budget.exceeded().is_some();
    let normalisation =
        outbox_check::world::Abstraction { tracked: tracked & outbox_check::world::ABSTRACTION_READS, settled };
    let share = options.liveness && options.shard.is_none() && options.workers.is_none();
    let job = crate::graph::Explore {
        config,
        normalisation: Some(normalisation),
        threads: options.threads.max(1),
        keep_graph: share,
        graph_limit: options.liveness_states_max,
        limit_stops: false,
        shard: options.shard,
    };
    let mut worker_states = None;
    let mut found = match &options.workers {
        None => crate::graph::explore(&job, &stop, progress),
        Some(workers) => match crate::cluster::explore(config, Some(normalisation), workers, &stop, progress) {
            Ok((found, counts)) => {
                worker_states = Some(counts.iter().map(|c| c.unique).collect());
                found
            }
            Err(problem) => return Err(format!("the search workers could not run: {problem}")),
        },
    };
    let shared = share.then(|| match found.graph.take() {
        Some(graph) if found.complete => Ok(graph),
        _ => Err(crate::liveness::TooLarge { states: found.unique, budget: budget.exceeded() }),
    });
    let search_seconds = search_started.elapsed().as_secs_f64();
    let discovered: BTreeSet<&'static str> = SAFETY_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| found.violated & (1 << i) != 0)
        .map(|(_, n)| *n)
        .chain(
            REACHABILITY
                .iter()
                .enumerate()
                .filter(|(i, _)| found.reached & tracked & (1 << i) != 0)
                .map(|(_, r)| r.name()),
        )
        .collect();
    let missing: BTreeSet<&'static str> =
        discovered.into_iter().filter(|name| paths.iter().all(|(n, _, _)| n != name)).collect();
    let mut unconfirmed = BTreeSet::new();
    if !missing.is_empty() {
        let (more, seen) = bfs_paths(&exact, &missing, &|found| found.len() == missing.len(), None, Some(&budget));
        path_search_states += seen;
        unconfirmed = missing.iter().copied().filter(|name| more.iter().all(|(n, _, _)| n != name)).collect();
        paths.extend(more);
    }
    let stopped = budget.exceeded();
    let complete = stopped.is_none();
    let seconds = started.elapsed().as_secs_f64();
    let path_of = |name: &str| paths.iter().find(|(n, _, _)| *n == name);
    // Every path is replayed in the plain world before it is reported: one that does not show
    // what it claims is a bug of the reductions, never a finding.
    let confirmed = |id: &str, actions: &[Action]| -> Result<Vec<ReplayStep>, String> {
        let steps = replay(config, actions);
        let real: Vec<Action> = steps.iter().map(|s| s.action).collect();
        crate::replay::confirm(config, id, &real, None, None).map_err(|e| {
            format!("checker bug: the path found does not replay in the plain world ({e}); please report it")
        })
    };

    let mut properties = Vec::new();
    for (i, name) in SAFETY_NAMES.iter().enumerate() {
        let id = outbox_check::core::Property::SAFETY[i].id();
        let witness = crate::outbox::witness_of(id).expect("every safety property has a witness");
        let exercised = path_of(witness.name()).is_some();
        let replayed = path_of(name).map(|(_, actions, encoded)| (confirmed(id, actions), encoded.clone()));
        let (status, counterexample, explorer_path, note) = match replayed {
            Some((Ok(steps), encoded)) => (Verdict::Violated, Some(steps), Some(encoded), None),
            Some((Err(bug), _)) => (Verdict::Unknown, None, None, Some(bug)),
            None if unconfirmed.contains(name) && !complete => (
                Verdict::Unknown,
                None,
                None,
                stopped
                    .clone()
                    .map(|s| format!("{s}: the complete check flagged it, and the search for its path was cut short")),
            ),
            None if unconfirmed.contains(name) => (
                Verdict::Unknown,
                None,
                None,
                Some("the abstract check flags it, but the exact world has no path to it".to_string()),
            ),
            None if !complete => (Verdict::Unknown, None, None, stopped.clone()),
            None if !exercised => (Verdict::NotExercised, None, None, Some(not_exercised_reason(config, witness))),
            None => (Verdict::Holds, None, None, None),
        };
        properties.push(PropertyResult {
            id: id.to_string(),
            name: name[id.len() + 1..].to_string(),
            kind: Kind::Safety,
            status,
            counterexample,
            cycle_from: None,
            explorer_path,
            note,
            message: None,
        });
    }
    for r in REACHABILITY.iter() {
        let (id, name) = r.name().split_once(' ').unwrap_or((r.name(), r.name()));
        let replayed = path_of(r.name()).map(|(_, actions, encoded)| (confirmed(id, actions), encoded.clone()));
        let (status, counterexample, explorer_path, note) = match replayed {
            Some((Ok(steps), encoded)) => (Verdict::Reached, Some(steps), Some(encoded), None),
            Some((Err(bug), _)) => (Verdict::Unknown, None, None, Some(bug)),
            None if !complete => (Verdict::Unknown, None, None, stopped.clone()),
            None => (
                Verdict::Unreached,
                None,
                None,
                (id == "R-order" && config.messages < 2)
                    .then(|| "needs two events of one aggregate: --messages 2".to_string()),
            ),
        };
        properties.push(PropertyResult {
            id: id.to_string(),
            name: name.to_string(),
            kind: Kind::Reachability,
            status,
            counterexample,
            cycle_from: None,
            explorer_path,
            note,
            message: None,
        });
    }
    let mut liveness_states = None;
    if options.liveness {
        let (results, states) = liveness(config, options, shared, &budget);
        liveness_states = states;
        properties.extend(results);
    }
    Ok(CheckReport {
        fleet: config.relays.iter().map(|r| r.design.name().to_string()).collect(),
        config: config.clone(),
        states: found.generated,
        unique_states: found.unique,
        collision_bound: collision_bound(found.unique),
        max_depth: found.max_depth,
        merged_shards: None,
        publication_span: Some(publication_span(config)),
        shard: options.shard.map(|s| ShardInfo {
            index: s.index,
            count: s.count,
            depth: found.shard_depth.unwrap_or(0),
        }),
        seconds,
        search_seconds,
        path_search_states,
        complete: budget.exceeded().is_none(),
        liveness_states,
        worker_states,
        properties,
    })
}

/// Combines the reports of the shards of one sharded search (`check --shard I/N`, every `I`
/// once) into the verdict of the whole search. Safety and reachability are decided as by one
/// unsharded check when every shard completed: a property is violated (or a situation
/// reached) where any shard found it, with the shortest of their paths; it holds only where
/// every shard completed without breaking it and some shard reached its witness. Liveness is
/// not decided by a sharded run. Returns the problem, in one line, where the reports are not
/// the shards of one search.
pub fn merge_shards(reports: Vec<(String, CheckReport)>) -> Result<CheckReport, String> {
    let Some((first_name, first)) = reports.first() else { return Err("no shard reports given".into()) };
    let Some(info) = first.shard else {
        return Err(format!("{first_name} is not a shard's report (it was written without --shard)"));
    };
    let mut seen = vec![None::<&str>; info.count as usize];
    for (name, report) in &reports {
        let Some(shard) = report.shard else {
            return Err(format!("{name} is not a shard's report (it was written without --shard)"));
        };
        if shard.count != info.count {
            return Err(format!(
                "{name} is shard {}/{} but {first_name} is one of {}",
                shard.index, shard.count, info.count
            ));
        }
        if shard.depth != info.depth {
            return Err(format!(
                "{name} split the search at depth {} but {first_name} at depth {}: the shards of one check split at one depth",
                shard.depth, info.depth
            ));
        }
        if report.config != first.config || report.fleet != first.fleet {
            return Err(format!(
                "{name} checked another configuration than {first_name} ({})",
                report.fleet.join(", ")
            ));
        }
        if let Some(other) = seen[shard.index as usize].replace(name) {
            return Err(format!("shard {}/{} is given twice: {other} and {name}", shard.index, shard.count));
        }
    }
    let absent: Vec<String> =
        seen.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| format!("{i}/{}", info.count)).collect();
    if !absent.is_empty() {
        return Err(format!(
            "shards missing: {} (every shard of the search is needed for its verdict)",
            absent.join(", ")
        ));
    }
    let complete = reports.iter().all(|(_, r)| r.complete);
    let shortest = |found: Vec<&PropertyResult>| {
        found.into_iter().min_by_key(|p| p.counterexample.as_ref().map_or(usize::MAX, |c| c.len())).cloned()
    };
    let mut properties = Vec::new();
    for p in first.properties.iter().filter(|p| p.kind != Kind::Liveness) {
        let all: Vec<&PropertyResult> = reports.iter().filter_map(|(_, r)| r.property(&p.id)).collect();
        let with = |v: Verdict| all.iter().copied().filter(|q| q.status == v).collect::<Vec<_>>();
        let merged = if let Some(found) = shortest(with(Verdict::Violated)).or_else(|| shortest(with(Verdict::Reached)))
        {
            found
        } else if let Some(unknown) = with(Verdict::Unknown).first() {
            (*unknown).clone()
        } else if let Some(holds) = with(Verdict::Holds).first() {
            (*holds).clone()
        } else {
            all[0].clone()
        };
        properties.push(merged);
    }
    let sum = |f: &dyn Fn(&CheckReport) -> usize| reports.iter().map(|(_, r)| f(r)).sum::<usize>();
    let longest = |f: &dyn Fn(&CheckReport) -> f64| reports.iter().map(|(_, r)| f(r)).fold(0.0, f64::max);
    Ok(CheckReport {
        fleet: first.fleet.clone(),
        config: first.config.clone(),
        states: sum(&|r| r.states),
        unique_states: sum(&|r| r.unique_states),
        collision_bound: collision_bound(sum(&|r| r.unique_states)),
        max_depth: reports.iter().map(|(_, r)| r.max_depth).max().unwrap_or(0),
        seconds: longest(&|r| r.seconds),
        search_seconds: longest(&|r| r.search_seconds),
        path_search_states: sum(&|r| r.path_search_states),
        complete,
        liveness_states: None,
        shard: None,
        worker_states: None,
        merged_shards: Some(info.count),
        publication_span: first.publication_span.clone(),
        properties,
    })
}

/// One property over the model's worlds of a fleet: violated where any world breaks it,
/// unknown where any could not decide, holds where some world exercised it and none broke it,
/// and not exercised otherwise.
pub fn merged(id: &str, reports: &[CheckReport]) -> Verdict {
    let verdicts: Vec<&Verdict> = reports.iter().filter_map(|r| r.property(id)).map(|p| &p.status).collect();
    if verdicts.contains(&&Verdict::Violated) {
        Verdict::Violated
    } else if verdicts.contains(&&Verdict::Unknown) {
        Verdict::Unknown
    } else if verdicts.contains(&&Verdict::Holds) {
        Verdict::Holds
    } else if verdicts.contains(&&Verdict::NotExercised) {
        Verdict::NotExercised
    } else {
        Verdict::Unknown
    }
}

/// Why a safety property's witness was not reached, in the configuration's terms.
fn not_exercised_reason(config: &WorldConfig, witness: outbox_check::core::Situation) -> String {
    let hint = match witness.exercises_id() {
        "S9" if config.tenants < 2 => " (one tenant: no row or write of another tenant exists; try --tenants 2)",
        "S9" if !config.faults.has(outbox_check::world::Fault::MisroutedWrite) => {
            " (no claim meets another tenant's row, and mis-routed writes are off)"
        }
        "S10" if !config.enqueue_actions => {
            " (every message is in the table from the start: no enqueue is attempted; try --enqueues)"
        }
        "S11" => " (no row is recorded FAILED or EXHAUSTED while another relay holds a lease of it that it may still publish)",
        _ => "",
    };
    let (_, situation) = witness.name().split_once(' ').unwrap_or(("", witness.name()));
    format!("not exercised: \"{situation}\" never happens in this configuration{hint}")
}

/// Breadth-first from the initial state until `enough` of the properties in `targets` are
/// discovered; returns for each the shortest path, as actions and as the explorer's encoded
/// action indices.
pub fn shortest_paths_until(
    model: &OutboxModel,
    targets: &BTreeSet<&'static str>,
    enough: usize,
) -> Vec<(&'static str, Vec<Action>, String)> {
    bfs_paths(model, targets, &|found| found.len() >= enough, None, None).0
}

/// A path to a discovery: the property's name, the actions, the explorer's encoded path.
pub type Path = (&'static str, Vec<Action>, String);

/// Breadth-first from the initial state, noting the first (so shortest) path to each property
/// of `targets` (a violated `always`, a reached `sometimes`), until `done` says the names found
/// so far are enough, the graph is exhausted, `max_states` states have been seen, or `budget`
/// is spent. Returns the paths and the number of states seen.
pub fn bfs_paths(
    model: &OutboxModel,
    targets: &BTreeSet<&'static str>,
    done: &dyn Fn(&BTreeSet<&'static str>) -> bool,
    max_states: Option<usize>,
    budget: Option<&Budget>,
) -> (Vec<Path>, usize) {
    use std::collections::VecDeque;
    // Keys are fingerprints already: hashing them again is wasted work.
    type HashMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<crate::graph::PassThrough>>;
    let fp = outbox_check::world::fingerprint::<outbox_check::world::World>;
    let properties: Vec<_> = model.properties().into_iter().filter(|p| targets.contains(p.name)).collect();
    let violated = |p: &stateright::Property<OutboxModel>, w: &outbox_check::world::World| match p.expectation {
        stateright::Expectation::Sometimes => (p.condition)(model, w),
        _ => !(p.condition)(model, w),
    };
    let mut found: Vec<(&'static str, Vec<usize>)> = Vec::new();
    let mut names: BTreeSet<&'static str> = BTreeSet::new();
    let init = model.init_states().remove(0);
    let init_fp = fp(&init);
    let mut parent: HashMap<u64, Option<(u64, usize)>> = HashMap::default();
    parent.insert(init_fp, None);
    let mut queue = VecDeque::from([(init_fp, init)]);
    let path_to = |parent: &HashMap<u64, Option<(u64, usize)>>, mut at: u64| {
        let mut indices = Vec::new();
        while let Some(Some((p, i))) = parent.get(&at) {
            indices.push(*i);
            at = *p;
        }
        indices.reverse();
        indices
    };
    let mut actions = Vec::new();
    let mut popped = 0usize;
    while let Some((at, state)) = queue.pop_front() {
        for p in &properties {
            if !names.contains(p.name) && violated(p, &state) {
                names.insert(p.name);
                found.push((p.name, path_to(&parent, at)));
            }
        }
        if done(&names) || max_states.is_some_and(|max| parent.len() >= max) {
            break;
        }
        popped += 1;
        if popped.is_multiple_of(1024) && budget.is_some_and(|b| b.exceeded().is_some()) {
            break;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for (i, action) in actions.drain(..).enumerate() {
            let Some(next) = model.next_state(&state, action) else { continue };
            let next_fp = fp(&next);
            if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(next_fp) {
                e.insert(Some((at, i)));
                queue.push_back((next_fp, next));
            }
        }
    }
    let seen = parent.len();
    let paths = found
        .into_iter()
        .map(|(name, indices)| {
            let mut state = model.init_states().remove(0);
            let mut path_actions = Vec::new();
            let mut all = Vec::new();
            for i in &indices {
                all.clear();
                model.actions(&state, &mut all);
                let action = all[*i];
                path_actions.push(action);
                state = model.next_state(&state, action).expect("a model step");
            }
            let encoded = std::iter::once("0".to_string())
                .chain(indices.iter().map(|i| i.to_string()))
                .collect::<Vec<_>>()
                .join("/");
            (name, path_actions, encoded)
        })
        .collect();
    (paths, seen)
}

/// The explorer's encoded path (`0/3/1/…`, or `outage/0/…` in L2's world) of a path of
/// plain-world actions: at each step, the model action whose replay is that step. `None` where
/// the model has no such step.
pub fn explorer_path_of(config: &WorldConfig, real: &[Action]) -> Option<String> {
    let model = OutboxModel::new(config.clone());
    let mut state = model.init_states().remove(0);
    let (mut chosen, mut indices, mut next) = (Vec::new(), Vec::new(), Vec::new());
    for (k, target) in real.iter().enumerate() {
        next.clear();
        model.actions(&state, &mut next);
        let i = next.iter().position(|&a| {
            let mut trial = chosen.clone();
            trial.push(a);
            replay(config, &trial).get(k).is_some_and(|s| s.action == *target)
        })?;
        chosen.push(next[i]);
        indices.push(i.to_string());
        state = model.next_state(&state, next[i])?;
    }
    let root = if config.permanent_outage { "outage/0" } else { "0" };
    Some(std::iter::once(root.to_string()).chain(indices).collect::<Vec<_>>().join("/"))
}

/// The flags that give `check` the world every mutant is checked in: three relays competing for
/// one message, the third reusing the first one's id (a restarted relay while its paused
/// predecessor still lives: one owner holding two attempts), a second tenant (so a write can be
/// mis-routed to it), one operator requeue, every fault.
pub const MUTANT_WORLD: &str = "--relays 3 --messages 1 --tenants 2 --requeues 1 --shared-owner";

/// The world of [`MUTANT_WORLD`], as `check` builds it from those flags (a test runs `check`
/// with them on every mutant). `reference` keeps every safety property in this world (a test
/// checks it), so a violation here is the mutant's doing.
pub fn mutant_config(design: outbox_check::design::Design) -> WorldConfig {
    let mut config = WorldConfig::fleet(&[design, design, design], 1, 2, 3, outbox_check::world::Faults::all());
    config.relays[2].owner = config.relays[0].owner;
    config.requeues = 1;
    config
}

/// The world a property's path runs in: L2 is judged under a permanent broker outage, the
/// rest in the configuration itself.
pub fn world_of(config: &WorldConfig, id: &str) -> WorldConfig {
    let mut world = config.clone();
    world.permanent_outage |= id == outbox_check::core::Property::L2.id();
    world
}

/// L1–L3: on the complete check's own graph where it was kept (`shared`), else on a graph of
/// their own; L2 always on the graph of the world with a permanent outage.
fn liveness(
    config: &WorldConfig,
    options: &CheckOptions,
    shared: Option<Result<Graph, crate::liveness::TooLarge>>,
    budget: &Budget,
) -> (Vec<PropertyResult>, Option<usize>) {
    let states_max = options.liveness_states_max;
    let threads = options.threads.max(1);
    use outbox_check::core::Property as P;
    // `normalisation`: the graph's, whose relay order the lasso's steps follow.
    let result = |p: P, verdict: Option<LassoVerdict>, world: &WorldConfig, normalisation, note: Option<String>| {
        let (mut status, mut counterexample, mut cycle_from, mut note, mut message) =
            (Verdict::Unknown, None, None, note, None);
        let mut explorer_path = None;
        match verdict {
            None => {}
            Some(LassoVerdict { lasso: None, .. }) => status = Verdict::Holds,
            Some(LassoVerdict { lasso: Some(lasso), message: m }) => {
                let mut actions = lasso.prefix.clone();
                actions.extend(lasso.cycle.iter().copied());
                let steps = replay_with(world, &actions, normalisation);
                let real: Vec<Action> = steps.iter().map(|s| s.action).collect();
                let from = lasso.prefix.len() + 1;
                match crate::replay::confirm(world, p.id(), &real, Some(from), m.map(|m| m.0)) {
                    Ok(_) => {
                        explorer_path = explorer_path_of(world, &real);
                        (status, counterexample, cycle_from, message) =
                            (Verdict::Violated, Some(steps), Some(from), m.map(|m| m.0));
                    }
                    Err(e) => {
                        note = Some(format!(
                            "checker bug: the lasso found does not replay in the plain world ({e}); please report it"
                        ));
                    }
                }
            }
        }
        PropertyResult {
            id: p.id().to_string(),
            name: p.sentence().to_string(),
            kind: Kind::Liveness,
            status,
            counterexample,
            cycle_from,
            explorer_path,
            note,
            message,
        }
    };
    let mut out = Vec::new();
    let stop = || budget.exceeded();
    let main = shared.unwrap_or_else(|| Graph::build(config, states_max, threads, &stop));
    let states = main.as_ref().ok().map(Graph::len);
    let outage = world_of(config, P::L2.id());
    // L1 and L3 on the main graph, and L2's graph with its check, side by side.
    let (l1, l3, l2) = std::thread::scope(|scope| {
        let l2 =
            scope.spawn(|| Graph::build(&outage, states_max, threads, &stop).map(|graph| check_l2(&graph, &outage)));
        let (l1, l3) = match &main {
            Ok(graph) => {
                let l3 = scope.spawn(|| check_l3(graph, config));
                (Some(check_l1(graph, config)), Some(l3.join().expect("the L3 search")))
            }
            Err(_) => (None, None),
        };
        (l1, l3, l2.join().expect("the L2 search"))
    });
    let own = crate::liveness::LIVENESS_NORMALISATION;
    match &main {
        Ok(graph) => {
            out.push(result(P::L1, l1, config, graph.normalisation(), None));
            out.push(result(P::L3, l3, config, graph.normalisation(), None));
        }
        Err(stopped) => {
            let note = format!("not checked: {}", stopped.reason("the liveness graph"));
            out.push(result(P::L1, None, config, own, Some(note.clone())));
            out.push(result(P::L3, None, config, own, Some(note)));
        }
    }
    match l2 {
        Ok(verdict) => out.insert(1, result(P::L2, Some(verdict), &outage, own, None)),
        Err(stopped) => out.insert(
            1,
            result(P::L2, None, &outage, own, Some(format!("not checked: {}", stopped.reason("the outage graph")))),
        ),
    }
    (out, states)
}
