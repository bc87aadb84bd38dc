//! Black-box tests of the `postern` binary: each `TestApp` starts the real
//! process on an ephemeral port with a temporary database and talks HTTP to it.

mod receivers;
mod support;

mod abuse;
mod analytics;
mod auth;
mod cli;
mod compression;
mod connections;
mod counting;
mod crash;
mod dashboard;
mod dashboard_reports;
mod data_safety;
mod delivery;
mod demo;
mod differential;
mod errors;
mod events;
mod exports;
mod geo;
mod headers;
mod keys;
mod limiter_memory;
mod multinode;
mod multinode_jobs;
mod openapi;
mod ops;
mod outbound;
mod privacy;
mod rate_limits;
mod reports;
mod restart;
mod retention;
mod sdk;
mod shared_state;
mod sign_in;
mod sites;
mod supervision;
mod wall_preview;
