//! Deterministic simulation with madsim (the crate `outbox_check_sims`; empty unless built with
//! `--cfg madsim`, which `.cargo/config.toml` sets): the real relay cycle, under simulated time, network,
//! crashes and broker behaviour, all driven by one seed.
//!
//! One run builds a small world of madsim nodes:
//!
//! - a **database** node serving the core (through the [`Auditor`](outbox_check::core::Auditor), which
//!   checks SPEC §7's safety properties at every statement) over simulated RPC, with the
//!   application's enqueues and, for designs that have one, the reaper job or the rescuer;
//! - a **broker** node that stores publications by idempotency key and feeds a consumer that
//!   counts effects and drops duplicates;
//! - one **relay** node per relay of the fleet, each running the sans-IO
//!   [`Cycle`](outbox_check::relay::Cycle) through async adapters — the same code the model checker
//!   steps.
//!
//! The seed draws a fault [`FaultProfile`](profile::FaultProfile) with ChaCha (swarm testing), and seeds
//! madsim's own generator (latencies, the rolls of each fault). Faults stop when the fault window
//! ends; then the heal phase runs until every row is terminal or the heal time is up, and L1 and
//! L3 (or L2, under a permanent broker outage) are checked on the table. The run's history is
//! written in the oracle's trace format and, for a single-design fleet, checked again by the
//! [`Oracle`](outbox_check::oracle::Oracle).
//!
//! Everything is bounded: simulated time ends at the heal deadline, and every relay loop waits
//! on simulated time between cycles.

#![cfg(madsim)]

pub mod profile;
pub mod run;
pub mod sweep;

use outbox_check::core::Duration;
use outbox_check::design::Design;
use outbox_check::world::{Faults, WorldConfig};
use serde::Serialize;

/// What one simulation runs: the fleet and its timing, in simulated milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    /// One design per relay.
    pub designs: Vec<Design>,
    pub messages: u32,
    pub tenants: u16,
    pub max_attempts: u32,
    pub batch: u32,
    pub lease_ms: u64,
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    /// An idle relay polls this often (plus up to as much jitter).
    pub poll_ms: u64,
    /// A relay gives a statement or a publication up as lost after this long.
    pub timeout_ms: u64,
    /// The reaper's and the rescuer's period (designs with one).
    pub reap_ms: u64,
    /// The application enqueues its messages evenly over this window.
    pub enqueue_window_ms: u64,
    /// Faults are injected until here.
    pub fault_window_ms: u64,
    /// The heal phase's length: if rows are still not terminal then, L1 fails.
    pub heal_ms: u64,
}

impl SimConfig {
    /// The default world: 1 s leases, 200 ms doubling to 3.2 s backoff, 8 s of faults.
    pub fn new(designs: Vec<Design>, messages: u32) -> SimConfig {
        SimConfig {
            designs,
            messages,
            tenants: 1,
            max_attempts: 3,
            batch: 4,
            lease_ms: 1000,
            backoff_base_ms: 200,
            backoff_cap_ms: 3200,
            poll_ms: 250,
            timeout_ms: 250,
            reap_ms: 500,
            enqueue_window_ms: 2000,
            fault_window_ms: 8000,
            heal_ms: 60_000,
        }
    }

    /// The fleet as the core sees it (policies, relay configs, message tenants).
    pub fn world(&self) -> WorldConfig {
        let mut world =
            WorldConfig::fleet(&self.designs, self.messages, self.tenants, self.max_attempts, Faults::none());
        world.batch = self.batch;
        world.lease = Duration(self.lease_ms);
        world.backoff_base = Duration(self.backoff_base_ms);
        world.backoff_cap = Duration(self.backoff_cap_ms);
        world
    }

    /// The fleet's name: the design, or the designs joined with `+`.
    pub fn fleet_name(&self) -> String {
        let mut names: Vec<&str> = self.designs.iter().map(|d| d.name()).collect();
        names.dedup();
        names.join("+")
    }

    /// The single design every relay runs, if they all run one.
    pub fn single_design(&self) -> Option<Design> {
        let first = *self.designs.first()?;
        self.designs.iter().all(|d| *d == first).then_some(first)
    }

    /// The `outbox-check sim` flags that select this world.
    pub fn command_line(&self) -> String {
        let fleet = match self.single_design() {
            Some(d @ outbox_check::design::Design::Custom(_)) => {
                format!("--design {} --relays {}", d.argument(), self.designs.len())
            }
            Some(d) => format!("--variant {} --relays {}", d.name(), self.designs.len()),
            None => format!("--fleet {}", self.designs.iter().map(|d| d.argument()).collect::<Vec<_>>().join(",")),
        };
        format!("{fleet} --messages {} --tenants {} --max-attempts {}", self.messages, self.tenants, self.max_attempts)
    }
}
