//! SQL stores: the schemas under `migrations/` and the migrator that applies them.
//!
//! The `Store` trait and the SQL bindings of the core's operations land here next (issue #5);
//! this module so far owns the schemas: each engine's migrations, applied in order and recorded,
//! so a populated V1 table becomes V2 without losing a row.

pub mod migrate;
pub mod postgres;
