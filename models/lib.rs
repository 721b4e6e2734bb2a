//! The model checker of outbox-check (the crate `outbox_check_models`): the world of the library
//! (`outbox_check::world`) explored exhaustively, its properties judged, its counterexamples
//! replayed and shown.
//!
//! - [`outbox`] — the stateright `Model` over the world; the properties and reachability list.
//! - [`check`] — `outbox-check check`: the complete check, shortest counterexamples, verdicts.
//! - [`graph`] — the complete check's own search over fingerprints, and sharding.
//! - [`cluster`] — the same search divided among workers by owner, on timely dataflow.
//! - [`liveness`] — L1–L3 by a fair-lasso search under weak fairness.
//! - [`replay`] — a path of the reduced model back in the fleet's own names and times.
//! - [`explorer`] — the interactive explorer's HTTP front.
//! - [`conform`] — SQL conformance: random sequences and the checker's schedules run on a store.
//! - [`report`] — counterexamples as Markdown, Mermaid, JSON and ITF; `verify`'s matrix.
//!
//! It depends on the library only; nothing here restates an outbox rule.

pub mod check;
pub mod cluster;
pub mod conform;
pub mod explorer;
pub mod graph;
pub mod liveness;
pub mod outbox;
pub mod replay;
pub mod report;
