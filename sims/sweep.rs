//! Sweeps: many seeds on all cores, and the summary a person reads.

use super::run::{run, OracleVerdict, RunResult};
use super::SimConfig;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The seeds of a sweep: `count` seeds from `from`, of which shard `index` of `shards` keeps
/// every `shards`-th (so shards split a sweep evenly and together cover it exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Seeds {
    pub from: u64,
    pub count: u64,
    pub shard: u64,
    pub shards: u64,
}

impl Seeds {
    pub fn all(from: u64, count: u64) -> Seeds {
        Seeds { from, count, shard: 0, shards: 1 }
    }

    pub fn list(&self) -> Vec<u64> {
        (self.from..self.from.saturating_add(self.count)).filter(|s| (s - self.from) % self.shards == self.shard).collect()
    }
}

/// Runs every seed on `threads` threads; results come back in seed order. Passing runs drop
/// their history (only failing ones are kept, to be written out). `tick` is called after each run.
pub fn sweep(config: &SimConfig, seeds: &[u64], threads: usize, tick: &(dyn Fn(&RunResult) + Sync)) -> Vec<RunResult> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<RunResult>>> = Mutex::new(vec![None; seeds.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1).min(seeds.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(i) else { break };
                let mut result = run(config, seed);
                if !result.failed() {
                    result.history = String::new();
                }
                tick(&result);
                results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(result);
            });
        }
    });
    results.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().flatten().collect()
}

/// A failing seed and how to replay it.
#[derive(Clone, Debug, Serialize)]
pub struct Failing {
    pub seed: u64,
    pub properties: Vec<String>,
    pub first: String,
    pub replay: String,
    pub history_hash: String,
}

/// What a sweep found.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub fleet: String,
    pub config: SimConfig,
    pub seeds: Seeds,
    pub runs: u64,
    pub failed_runs: u64,
    /// Property id → runs that broke it.
    pub violations: BTreeMap<String, u64>,
    /// The oracle's verdicts on the histories: accepted, diverged, not_checked (mixed fleets),
    /// and contradictions (it rejected a history the auditor accepted: a checker is wrong).
    pub oracle: BTreeMap<String, u64>,
    pub duplicates_delivered: u64,
    pub deduplicated: u64,
    pub duplicate_effects: u64,
    pub stale_refused: u64,
    pub unknown_outcomes: u64,
    /// Final `attempts` → messages.
    pub attempts_histogram: BTreeMap<u32, u64>,
    pub publish_latency_p50_ms: Option<u64>,
    pub publish_latency_p99_ms: Option<u64>,
    /// Runs with a permanent broker outage (where L2 is checked instead of L3).
    pub permanent_outage_runs: u64,
    pub seconds: f64,
    pub runs_per_second: f64,
    pub failing: Vec<Failing>,
}

impl Summary {
    pub fn new(config: &SimConfig, seeds: Seeds, results: &[RunResult], seconds: f64) -> Summary {
        let mut violations = BTreeMap::new();
        let mut oracle = BTreeMap::new();
        let mut attempts_histogram = BTreeMap::new();
        let mut latencies = Vec::new();
        let mut failing = Vec::new();
        for r in results {
            for v in &r.violations {
                *violations.entry(v.property.id().to_string()).or_insert(0) += 1;
            }
            let verdict = match r.oracle {
                OracleVerdict::Accepted => "accepted",
                OracleVerdict::Diverged { .. } => "diverged",
                OracleVerdict::NotChecked => "not_checked",
            };
            *oracle.entry(verdict.to_string()).or_insert(0) += 1;
            if r.oracle_contradicts() {
                *oracle.entry("contradictions".to_string()).or_insert(0) += 1;
            }
            for a in &r.stats.attempts {
                *attempts_histogram.entry(*a).or_insert(0) += 1;
            }
            latencies.extend(&r.stats.latency_ms);
            if r.failed() {
                let mut properties: Vec<String> = r.violations.iter().map(|v| v.property.id().to_string()).collect();
                let first = match (r.violations.first(), &r.oracle) {
                    (Some(v), _) => v.to_string(),
                    (None, OracleVerdict::Diverged { detail, .. }) => format!("the oracle rejected the history: {detail}"),
                    (None, _) => String::new(),
                };
                if r.oracle_contradicts() {
                    properties.push("oracle".into());
                }
                failing.push(Failing {
                    seed: r.seed,
                    properties,
                    first,
                    replay: replay_command(config, r.seed),
                    history_hash: r.history_hash.clone(),
                });
            }
        }
        latencies.sort_unstable();
        let percentile = |p: usize| (!latencies.is_empty()).then(|| latencies[(latencies.len() - 1) * p / 100]);
        let sum = |f: fn(&RunResult) -> u64| results.iter().map(f).sum::<u64>();
        Summary {
            fleet: config.fleet_name(),
            config: config.clone(),
            seeds,
            runs: results.len() as u64,
            failed_runs: failing.len() as u64,
            violations,
            oracle,
            duplicates_delivered: sum(|r| r.stats.duplicates_delivered),
            deduplicated: sum(|r| r.stats.deduplicated),
            duplicate_effects: sum(|r| r.stats.duplicate_effects),
            stale_refused: sum(|r| r.stats.stale_refused),
            unknown_outcomes: sum(|r| r.stats.unknown_outcomes),
            attempts_histogram,
            publish_latency_p50_ms: percentile(50),
            publish_latency_p99_ms: percentile(99),
            permanent_outage_runs: results.iter().filter(|r| r.profile.permanent_outage).count() as u64,
            seconds,
            runs_per_second: if seconds > 0.0 { results.len() as f64 / seconds } else { 0.0 },
            failing,
        }
    }
}

/// The command that replays one seed of this world.
pub fn replay_command(config: &SimConfig, seed: u64) -> String {
    format!("outbox-check sim {} --seed {seed}", config.command_line())
}
