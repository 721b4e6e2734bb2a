//! Sweeps: many seeds on all cores, and the summary a person reads.

use super::run::{run, OracleVerdict, RunResult};
use super::SimConfig;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
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

    /// The seeds this shard runs, in order (for small sweeps: a sweep itself never lists them).
    pub fn list(&self) -> Vec<u64> {
        (0..self.len()).map(|i| self.nth(i)).collect()
    }

    /// How many seeds this shard runs.
    pub fn len(&self) -> u64 {
        if self.count <= self.shard {
            0
        } else {
            (self.count - self.shard - 1) / self.shards + 1
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th seed this shard runs (`i < len()`).
    pub fn nth(&self, i: u64) -> u64 {
        self.from + self.shard + i * self.shards
    }

    /// The range is one a person can run: the seeds exist and the shard holds at least one.
    pub fn validate(&self) -> Result<(), String> {
        if self.count > 0 && self.from.checked_add(self.count - 1).is_none() {
            return Err(format!(
                "--from {} with --seeds {} runs past the largest seed, {}",
                self.from,
                self.count,
                u64::MAX
            ));
        }
        if self.is_empty() {
            return Err(format!(
                "shard {}/{} of {} seed(s) holds no seed: nothing would run",
                self.shard, self.shards, self.count
            ));
        }
        Ok(())
    }
}

/// Runs every seed of `seeds` on `threads` threads and folds each result into the summary as
/// it comes, so a sweep's memory does not grow with its seeds. `failing` is called with each
/// failing run (its history still attached) as it is found; `tick` after every run.
pub fn sweep(
    config: &SimConfig,
    seeds: Seeds,
    threads: usize,
    failing: &(dyn Fn(&RunResult) + Sync),
    tick: &(dyn Fn(&RunResult) + Sync),
) -> Summary {
    let started = std::time::Instant::now();
    let next = AtomicU64::new(0);
    let total = seeds.len();
    let summary = Mutex::new(Summary::empty(config, seeds));
    std::thread::scope(|scope| {
        for _ in 0..(threads.max(1) as u64).min(total.max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let mut result = run(config, seeds.nth(i));
                if result.failed() {
                    failing(&result);
                }
                result.history = String::new();
                tick(&result);
                summary.lock().unwrap_or_else(|p| p.into_inner()).add(config, &result);
            });
        }
    });
    let mut summary = summary.into_inner().unwrap_or_else(|p| p.into_inner());
    summary.finish(started.elapsed().as_secs_f64());
    summary
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

/// The failing seeds a summary lists (the smallest ones); the rest are counted.
pub const FAILING_LISTED_MAX: usize = 1_000;

/// What a sweep found.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub fleet: String,
    pub config: SimConfig,
    pub seeds: Seeds,
    pub runs: u64,
    pub failed_runs: u64,
    /// Failed runs that broke a property `verify` gates on (every one but S11), or whose
    /// checkers contradicted each other.
    pub failed_gated_runs: u64,
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
    /// The failing seeds, smallest first, at most [`FAILING_LISTED_MAX`] of them.
    pub failing: Vec<Failing>,
    /// Failing seeds beyond those listed.
    pub failing_not_listed: u64,
    /// Publication latency (ms) → publications: percentiles without keeping every sample.
    #[serde(skip)]
    latencies: BTreeMap<u64, u64>,
}

impl Summary {
    /// A summary of no run yet.
    pub fn empty(config: &SimConfig, seeds: Seeds) -> Summary {
        Summary {
            fleet: config.fleet_name(),
            config: config.clone(),
            seeds,
            runs: 0,
            failed_runs: 0,
            failed_gated_runs: 0,
            violations: BTreeMap::new(),
            oracle: BTreeMap::new(),
            duplicates_delivered: 0,
            deduplicated: 0,
            duplicate_effects: 0,
            stale_refused: 0,
            unknown_outcomes: 0,
            attempts_histogram: BTreeMap::new(),
            publish_latency_p50_ms: None,
            publish_latency_p99_ms: None,
            permanent_outage_runs: 0,
            seconds: 0.0,
            runs_per_second: 0.0,
            failing: Vec::new(),
            failing_not_listed: 0,
            latencies: BTreeMap::new(),
        }
    }

    /// The summary of `results`, as if swept in `seconds`.
    pub fn new(config: &SimConfig, seeds: Seeds, results: &[RunResult], seconds: f64) -> Summary {
        let mut summary = Summary::empty(config, seeds);
        for r in results {
            summary.add(config, r);
        }
        summary.finish(seconds);
        summary
    }

    /// Folds one run in.
    pub fn add(&mut self, config: &SimConfig, r: &RunResult) {
        self.runs += 1;
        for v in &r.violations {
            *self.violations.entry(v.property.id().to_string()).or_insert(0) += 1;
        }
        let verdict = match r.oracle {
            OracleVerdict::Accepted => "accepted",
            OracleVerdict::Diverged { .. } => "diverged",
            OracleVerdict::NotChecked => "not_checked",
        };
        *self.oracle.entry(verdict.to_string()).or_insert(0) += 1;
        if r.oracle_contradicts() {
            *self.oracle.entry("contradictions".to_string()).or_insert(0) += 1;
        }
        for a in &r.stats.attempts {
            *self.attempts_histogram.entry(*a).or_insert(0) += 1;
        }
        for l in &r.stats.latency_ms {
            *self.latencies.entry(*l).or_insert(0) += 1;
        }
        self.duplicates_delivered += r.stats.duplicates_delivered;
        self.deduplicated += r.stats.deduplicated;
        self.duplicate_effects += r.stats.duplicate_effects;
        self.stale_refused += r.stats.stale_refused;
        self.unknown_outcomes += r.stats.unknown_outcomes;
        self.permanent_outage_runs += u64::from(r.profile.permanent_outage);
        if r.failed() {
            self.failed_runs += 1;
            self.failed_gated_runs += u64::from(r.failed_gated());
            let mut properties: Vec<String> = r.violations.iter().map(|v| v.property.id().to_string()).collect();
            let first = match (r.violations.first(), &r.oracle) {
                (Some(v), _) => v.to_string(),
                (None, OracleVerdict::Diverged { detail, .. }) => format!("the oracle rejected the history: {detail}"),
                (None, _) => String::new(),
            };
            if r.oracle_contradicts() {
                properties.push("oracle".into());
            }
            let at = self.failing.partition_point(|f| f.seed < r.seed);
            if at < FAILING_LISTED_MAX {
                self.failing.insert(
                    at,
                    Failing {
                        seed: r.seed,
                        properties,
                        first,
                        replay: replay_command(config, r.seed),
                        history_hash: r.history_hash.clone(),
                    },
                );
                if self.failing.len() > FAILING_LISTED_MAX {
                    self.failing.pop();
                    self.failing_not_listed += 1;
                }
            } else {
                self.failing_not_listed += 1;
            }
        }
    }

    /// Percentiles and rates, once every run is in.
    pub fn finish(&mut self, seconds: f64) {
        let samples: u64 = self.latencies.values().sum();
        let percentile = |p: u64| {
            if samples == 0 {
                return None;
            }
            // The sample at index (n − 1)·p/100 of the sorted samples.
            let index = (samples - 1) * p / 100;
            let mut seen = 0;
            self.latencies.iter().find_map(|(&ms, &n)| {
                seen += n;
                (seen > index).then_some(ms)
            })
        };
        self.publish_latency_p50_ms = percentile(50);
        self.publish_latency_p99_ms = percentile(99);
        self.seconds = seconds;
        self.runs_per_second = if seconds > 0.0 { self.runs as f64 / seconds } else { 0.0 };
    }
}

/// The command that replays one seed of this world.
pub fn replay_command(config: &SimConfig, seed: u64) -> String {
    format!("outbox-check sim {} --seed {seed}", config.command_line())
}
