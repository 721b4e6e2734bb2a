//! Seeded random walks through the [`World`]: the cheapest engine, and the one the property tests
//! use. A walk picks, at every step, one of the enabled actions with a deterministic generator and
//! records the first violation of each property. Same seed, same walk.

use crate::core::{Property, Violation};
use crate::world::{Action, World, WorldConfig};
use serde::Serialize;

/// A small, deterministic generator (splitmix64), so a walk is the same on every platform.
#[derive(Clone, Debug)]
pub struct Walker(u64);

impl Walker {
    pub fn new(seed: u64) -> Walker {
        Walker(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        crate::core::random_token(self.0)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A walk that broke a property: the actions up to and including the breaking one.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub property: Property,
    pub seed: u64,
    pub actions: Vec<Action>,
    pub violation: Violation,
}

/// Walks up to `steps_max` steps from the initial world; returns the first violation of each
/// property broken on the way, in property order.
pub fn walk(config: &WorldConfig, seed: u64, steps_max: usize) -> Vec<Finding> {
    let mut world = World::new(config);
    let mut walker = Walker::new(seed);
    let mut taken = Vec::new();
    let mut enabled = Vec::new();
    let mut findings: Vec<Finding> = Vec::new();
    for _ in 0..steps_max {
        enabled.clear();
        world.actions(config, &mut enabled);
        if enabled.is_empty() {
            break;
        }
        let action = enabled[walker.below(enabled.len())];
        taken.push(action);
        for violation in world.apply(config, action).violations {
            if findings.iter().all(|f| f.property != violation.property) {
                findings.push(Finding { property: violation.property, seed, actions: taken.clone(), violation });
            }
        }
    }
    findings.sort_by_key(|f| f.property);
    findings
}

/// Walks seeds `0..seeds`; returns the shortest finding of each property broken, in property order.
pub fn search(config: &WorldConfig, seeds: u64, steps_max: usize) -> Vec<Finding> {
    let mut best: Vec<Finding> = Vec::new();
    for seed in 0..seeds {
        for finding in walk(config, seed, steps_max) {
            match best.iter_mut().find(|b| b.property == finding.property) {
                Some(b) if finding.actions.len() < b.actions.len() => *b = finding,
                Some(_) => {}
                None => best.push(finding),
            }
        }
    }
    best.sort_by_key(|f| f.property);
    best
}
