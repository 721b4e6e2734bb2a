//! outbox-check: proves, or refutes with a counterexample, that a transactional-outbox relay with
//! fenced leases is safe.
//!
//! Dependencies point one way, towards [`core`]: the [`relay`] cycle imports only the core; the
//! [`world`] closes relays, table, broker and clock into one transition system; the engines
//! (model checker, simulations, SQL stores, trace oracle) and the CLI sit on top.

pub mod cleanup;
pub mod cli;
pub mod design;
pub mod e2e;
pub mod report;
pub mod core;
#[path = "../models/outbox.rs"]
pub mod model;
#[path = "../models/check.rs"]
pub mod check;
#[path = "../models/graph.rs"]
pub mod graph;
#[path = "../models/liveness.rs"]
pub mod liveness;
#[path = "../models/explorer.rs"]
pub mod explorer;
#[path = "../models/replay.rs"]
pub mod replay;
pub mod relay;
pub mod oracle;
pub mod search;
#[cfg(madsim)]
#[path = "../sims/mod.rs"]
pub mod sim;
pub mod store;
pub mod trace;
pub mod world;
