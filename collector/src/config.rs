//! `Config`: everything `postern serve` can be told, from flags, `POSTERN_*`
//! environment variables and an optional TOML file (in that order of precedence).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use analytics::store::Durability;
use anyhow::Context;
use clap::Args;
use serde::Deserialize;

#[derive(Debug, Clone)]
pub struct Config {
    pub db: PathBuf,
    pub listen: SocketAddr,
    /// Requests per minute per address (and per key) on ingestion paths; 0 disables.
    pub rate_limit_ingest: u32,
    /// Requests per minute per key on the other endpoints; 0 disables.
    pub rate_limit_api: u32,
    pub durability: Durability,
    /// How many writes may wait for the writer before ingestion answers 503.
    pub queue_capacity: usize,
    /// Header set by a trusted proxy with the visitor's country (for example `CF-IPCountry`).
    pub country_header: Option<String>,
    /// Header set by a trusted proxy with the client address (for example `X-Forwarded-For`).
    pub client_ip_header: Option<String>,
    pub demo: bool,
    /// Raw events older than this many days are deleted.
    pub raw_retention_days: u32,
    /// Hourly rollups older than this many days are deleted.
    pub rollup_retention_days: u32,
}

/// The serve flags. Every one also reads `POSTERN_<NAME>` from the environment.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// SQLite database file (created if missing) [default: postern.db]
    #[arg(long, env = "POSTERN_DB")]
    pub db: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port [default: 127.0.0.1:8080]
    #[arg(long, env = "POSTERN_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Ingestion requests per minute per client address; 0 disables [default: 1000]
    #[arg(long, env = "POSTERN_RATE_LIMIT_INGEST")]
    pub rate_limit_ingest: Option<u32>,
    /// API requests per minute per key; 0 disables [default: 100]
    #[arg(long, env = "POSTERN_RATE_LIMIT_API")]
    pub rate_limit_api: Option<u32>,
    /// full: every acknowledged event is synced to disk; normal: survives a process crash only [default: full]
    #[arg(long, env = "POSTERN_DURABILITY", value_parser = ["full", "normal"])]
    pub durability: Option<String>,
    /// Writes that may wait for the database writer before ingestion answers 503 [default: 8192]
    #[arg(long, env = "POSTERN_QUEUE_CAPACITY")]
    pub queue_capacity: Option<usize>,
    /// Header a trusted proxy sets to the visitor's ISO country code
    #[arg(long, env = "POSTERN_COUNTRY_HEADER")]
    pub country_header: Option<String>,
    /// Header a trusted proxy sets to the client address (the last entry is used)
    #[arg(long, env = "POSTERN_CLIENT_IP_HEADER")]
    pub client_ip_header: Option<String>,
    /// Seed a demo account, site and history, and print a working API key
    #[arg(long, env = "POSTERN_DEMO")]
    pub demo: bool,
    /// Days raw events are kept [default: 90]
    #[arg(long, env = "POSTERN_RAW_RETENTION_DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub raw_retention_days: Option<u32>,
    /// Days hourly aggregates are kept [default: 730]
    #[arg(long, env = "POSTERN_ROLLUP_RETENTION_DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub rollup_retention_days: Option<u32>,
    /// TOML file with any of the settings above (snake_case keys)
    #[arg(long, env = "POSTERN_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    db: Option<PathBuf>,
    listen: Option<SocketAddr>,
    rate_limit_ingest: Option<u32>,
    rate_limit_api: Option<u32>,
    durability: Option<String>,
    queue_capacity: Option<usize>,
    country_header: Option<String>,
    client_ip_header: Option<String>,
    demo: Option<bool>,
    raw_retention_days: Option<u32>,
    rollup_retention_days: Option<u32>,
}

impl Config {
    pub fn from_args(args: &ServeArgs) -> anyhow::Result<Config> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let durability = match args.durability.clone().or(file.durability).as_deref() {
            None | Some("full") => Durability::Full,
            Some("normal") => Durability::Normal,
            Some(other) => anyhow::bail!("durability must be full or normal, not {other}"),
        };
        Ok(Config {
            db: args.db.clone().or(file.db).unwrap_or_else(|| PathBuf::from("postern.db")),
            listen: args.listen.or(file.listen).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            rate_limit_ingest: args.rate_limit_ingest.or(file.rate_limit_ingest).unwrap_or(1000),
            rate_limit_api: args.rate_limit_api.or(file.rate_limit_api).unwrap_or(100),
            durability,
            queue_capacity: args.queue_capacity.or(file.queue_capacity).unwrap_or(8192).max(1),
            country_header: args.country_header.clone().or(file.country_header),
            client_ip_header: args.client_ip_header.clone().or(file.client_ip_header),
            demo: args.demo || file.demo.unwrap_or(false),
            raw_retention_days: args.raw_retention_days.or(file.raw_retention_days).unwrap_or(90).max(1),
            rollup_retention_days: args.rollup_retention_days.or(file.rollup_retention_days).unwrap_or(730).max(1),
        })
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_defaults_fill_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("postern.toml");
        std::fs::write(&path, "db = \"from-file.db\"\nrate_limit_api = 5\nlisten = \"0.0.0.0:9000\"\n").unwrap();
        let args = ServeArgs { rate_limit_api: Some(7), config: Some(path), ..Default::default() };
        let c = Config::from_args(&args).unwrap();
        assert_eq!(c.db, PathBuf::from("from-file.db"));
        assert_eq!(c.rate_limit_api, 7);
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.rate_limit_ingest, 1000);
        assert_eq!(c.durability, Durability::Full);
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("postern.toml");
        std::fs::write(&path, "rate_limit = 5\n").unwrap();
        let err = Config::from_args(&ServeArgs { config: Some(path), ..Default::default() }).unwrap_err();
        assert!(format!("{err:#}").contains("rate_limit"), "{err:#}");
    }
}
