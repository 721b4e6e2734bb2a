//! outbox-check: proves, or refutes with a counterexample, that a transactional-outbox relay with
//! fenced leases is safe.
//!
//! This crate is the bottom of the workspace (docs/architecture.md). Dependencies point one way,
//! towards [`core`]: the [`relay`] cycle imports only the core; the [`world`] closes relays,
//! table, broker and clock into one transition system; the engines that need no search — the
//! SQL [`store`]s, the trace [`oracle`], the end-to-end runs ([`e2e`]) — sit on top. The model
//! checker (`models/`), the simulations (`sims/`) and the CLI (`src/cli/`) are crates of their
//! own that depend on this one, never the other way round.

pub mod cleanup;
pub mod core;
pub mod design;
pub mod e2e;
pub mod oracle;
pub mod record;
pub mod relay;
pub mod report;
pub mod search;
pub mod store;
pub mod trace;
pub mod world;
