//! Swarm testing: each seed draws its own fault profile — which faults are on, at what rates,
//! and when each crash, pause and partition happens — from a ChaCha stream of that seed, so a
//! sweep covers quiet and violent runs alike. The profile is plain data, printed with a failing
//! seed, so a reader sees what the run went through.

use super::SimConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Who a partition cuts a relay off from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    Database,
    Broker,
}

/// One scheduled fault: it starts at `at` (simulated ms) and lasts `for_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Scheduled {
    /// The relay's process dies with everything in memory; it restarts after `for_ms`.
    Kill { relay: u16, at: u64, for_ms: u64 },
    /// The relay stops (a GC pause, a frozen VM) and resumes after `for_ms`, past its lease.
    Pause { relay: u16, at: u64, for_ms: u64 },
    /// Packets between the relay and `peer` are dropped, both ways.
    Partition { relay: u16, peer: Peer, at: u64, for_ms: u64 },
}

impl Scheduled {
    pub fn at(&self) -> u64 {
        match *self {
            Scheduled::Kill { at, .. } | Scheduled::Pause { at, .. } | Scheduled::Partition { at, .. } => at,
        }
    }
}

/// The faults of one run. Rates are per statement (database) or per publication (broker), and
/// apply only until the fault window ends.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultProfile {
    /// Broker: dropped before storing (the relay times out).
    pub broker_drop: f64,
    /// Broker: stored, but the acknowledgement is lost (the relay times out).
    pub broker_lost_ack: f64,
    /// Broker: stored twice and acknowledged.
    pub broker_duplicate: f64,
    /// Broker: refused for now, nothing stored.
    pub broker_unavailable: f64,
    /// Broker: rejected for good.
    pub broker_reject: f64,
    /// Broker: unavailable for every publication in this window (ms from, ms to).
    pub broker_outage: Option<(u64, u64)>,
    /// Broker: unavailable for ever (SPEC L2): no heal for the broker.
    pub permanent_outage: bool,
    /// Database: the connection dies before the statement runs.
    pub db_lost_before: f64,
    /// Database: the statement commits, the reply is lost.
    pub db_lost_after: f64,
    /// Each relay's clock minus the true clock, in ms (read only by designs that take `now`
    /// from the relay).
    pub skew: Vec<i64>,
    /// Crashes, pauses and partitions, in order of start.
    pub schedule: Vec<Scheduled>,
}

impl FaultProfile {
    /// No fault at all.
    pub fn quiet(relays: usize) -> FaultProfile {
        FaultProfile {
            broker_drop: 0.0,
            broker_lost_ack: 0.0,
            broker_duplicate: 0.0,
            broker_unavailable: 0.0,
            broker_reject: 0.0,
            broker_outage: None,
            permanent_outage: false,
            db_lost_before: 0.0,
            db_lost_after: 0.0,
            skew: vec![0; relays],
            schedule: Vec::new(),
        }
    }

    /// The profile seed `seed` draws: each kind of fault is on with probability one half, at a
    /// rate drawn from its range; one seed in twenty gets a permanent broker outage.
    pub fn draw(seed: u64, config: &SimConfig) -> FaultProfile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let relays = config.designs.len();
        let window = config.fault_window_ms;
        let lease = config.lease_ms;
        let on = |rng: &mut ChaCha8Rng, max: f64| if rng.gen_bool(0.5) { rng.gen_range(0.0..max) } else { 0.0 };
        let mut profile = FaultProfile {
            broker_drop: on(&mut rng, 0.3),
            broker_lost_ack: on(&mut rng, 0.3),
            broker_duplicate: on(&mut rng, 0.3),
            broker_unavailable: on(&mut rng, 0.3),
            broker_reject: on(&mut rng, 0.05),
            broker_outage: None,
            permanent_outage: false,
            db_lost_before: on(&mut rng, 0.15),
            db_lost_after: on(&mut rng, 0.15),
            skew: vec![0; relays],
            schedule: Vec::new(),
        };
        if rng.gen_bool(0.3) {
            let from = rng.gen_range(0..window);
            profile.broker_outage = Some((from, (from + rng.gen_range(lease..4 * lease)).min(window)));
        }
        profile.permanent_outage = rng.gen_bool(0.05);
        if rng.gen_bool(0.5) {
            for skew in profile.skew.iter_mut() {
                *skew = rng.gen_range(-(lease as i64)..=lease as i64);
            }
        }
        let relay = |rng: &mut ChaCha8Rng| rng.gen_range(0..relays as u16);
        if rng.gen_bool(0.5) {
            for _ in 0..rng.gen_range(1..=3) {
                let (relay, at) = (relay(&mut rng), rng.gen_range(0..window));
                profile.schedule.push(Scheduled::Kill { relay, at, for_ms: rng.gen_range(10..2 * lease) });
            }
        }
        if rng.gen_bool(0.5) {
            for _ in 0..rng.gen_range(1..=3) {
                let (relay, at) = (relay(&mut rng), rng.gen_range(0..window));
                // Past the lease, so another relay may take the row over meanwhile.
                profile.schedule.push(Scheduled::Pause { relay, at, for_ms: rng.gen_range(lease..3 * lease) });
            }
        }
        if rng.gen_bool(0.5) {
            for _ in 0..rng.gen_range(1..=4) {
                let (relay, at) = (relay(&mut rng), rng.gen_range(0..window));
                let peer = if rng.gen_bool(0.5) { Peer::Database } else { Peer::Broker };
                profile.schedule.push(Scheduled::Partition { relay, peer, at, for_ms: rng.gen_range(50..2 * lease) });
            }
        }
        profile.schedule.sort_by_key(Scheduled::at);
        profile
    }

    /// The fault kinds this profile turns on, by name.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        let mut rate = |r: f64, name| {
            if r > 0.0 {
                kinds.push(name)
            }
        };
        rate(self.broker_drop, "broker-drop");
        rate(self.broker_lost_ack, "broker-lost-ack");
        rate(self.broker_duplicate, "broker-duplicate");
        rate(self.broker_unavailable, "broker-unavailable");
        rate(self.broker_reject, "broker-reject");
        rate(self.db_lost_before, "db-lost-before");
        rate(self.db_lost_after, "db-lost-after");
        if self.broker_outage.is_some() {
            kinds.push("broker-outage");
        }
        if self.permanent_outage {
            kinds.push("permanent-outage");
        }
        if self.skew.iter().any(|s| *s != 0) {
            kinds.push("clock-skew");
        }
        for (name, present) in [
            ("kill", self.schedule.iter().any(|s| matches!(s, Scheduled::Kill { .. }))),
            ("pause", self.schedule.iter().any(|s| matches!(s, Scheduled::Pause { .. }))),
            ("partition", self.schedule.iter().any(|s| matches!(s, Scheduled::Partition { .. }))),
        ] {
            if present {
                kinds.push(name);
            }
        }
        kinds
    }
}
