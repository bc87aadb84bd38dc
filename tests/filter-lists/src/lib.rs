//! Test-only crate: see `tests/filter_lists.rs` and `README.md`.
//!
//! `bait.json` (next to this crate's `Cargo.toml`) is the single source of truth for the
//! SDK's bait element and bait request path, and for the list of Postern's own URLs that
//! filter lists must not block.

/// The contents of `bait.json`, embedded at compile time for Rust consumers.
pub const BAIT_JSON: &str = include_str!("../bait.json");
