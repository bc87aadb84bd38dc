//! Postern's storage and analytics: the SQLite store with its migrations, the
//! write path that turns events into sessions and hourly rollups, the read-side
//! queries, and the A/B statistics.
//!
//! Architecture invariant: this crate knows nothing of HTTP, warp or tokio.

// SQLite is used through rusqlite's safe API only, as documented.
#![forbid(unsafe_code)]

pub mod ab;
pub mod accounts;
pub mod alerts;
mod error;
pub mod export;
pub mod model;
pub mod period;
pub mod integrations;
pub mod outbox;
pub mod query;
pub mod report;
pub mod retention;
pub mod sites;
pub mod store;
pub mod web_sessions;
pub mod write;

pub use error::{Error, Result};
pub use rusqlite::Connection;
pub use store::Store;
