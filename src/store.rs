//! SQL stores: the schemas under `migrations/`, the migrator that applies them, and the core's
//! operations bound to SQLite and PostgreSQL behind one [`Store`](bind::Store) trait.

pub mod bind;
pub mod migrate;
pub mod postgres;
pub mod profile;
pub mod sql;

pub use bind::{MemoryStore, PgStore, SqliteStore, Store, StoreError};
