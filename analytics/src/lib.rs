//! Postern's storage and analytics: the store (a SQLite file or a PostgreSQL
//! database, behind one [`Connection`]) with its migrations, the write path
//! that turns events into sessions and hourly rollups, the read-side queries,
//! and the A/B statistics.
//!
//! Architecture invariant: this crate knows nothing of HTTP or warp; tokio
//! only drives the PostgreSQL driver's connections, inside [`db`] and [`store`].

// SQLite is used through rusqlite's safe API only, as documented.
#![forbid(unsafe_code)]

pub mod ab;
pub mod db;
#[cfg(test)]
mod engine_tests;
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
pub mod shared;
pub mod sites;
pub mod store;
pub mod web_sessions;
pub mod write;

pub use error::{Error, Result};
pub use db::Connection;
pub use store::Store;
