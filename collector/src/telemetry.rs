//! Logging: structured lines on stderr, level from `RUST_LOG` (default info).
//! Stdout is kept for what scripts read (the listening address, new keys).
//! Client addresses appear in log lines only while `--log-client-ip` is on.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter).with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

/// Whether log lines name client addresses; set once from the configuration.
static LOG_CLIENT_ADDR: AtomicBool = AtomicBool::new(true);

pub fn log_client_addresses(on: bool) {
    LOG_CLIENT_ADDR.store(on, Ordering::Relaxed);
}

/// A client address as a log field: left out of the line (`None` records
/// nothing) when addresses are not logged.
pub fn client_addr<T: std::fmt::Display>(addr: T) -> Option<tracing::field::DisplayValue<T>> {
    LOG_CLIENT_ADDR.load(Ordering::Relaxed).then(|| tracing::field::display(addr))
}
