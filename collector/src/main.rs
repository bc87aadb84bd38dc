//! `postern`: the collector binary.

mod api;
mod assets;
mod auth;
mod cli;
mod config;
mod dashboard;
mod demo;
mod delivery;
mod directory;
mod error;
mod gateway;
mod geo;
mod html;
mod ingest;
mod jobs;
mod metrics;
mod rate_limit;
mod reports;
mod startup;
mod state;
mod telemetry;

use clap::Parser;

fn main() -> std::process::ExitCode {
    telemetry::init();
    let cli = cli::Cli::parse();
    let result = match cli.command {
        Some(cli::Command::Admin(cmd)) => cli::run_admin(cmd),
        Some(cli::Command::Serve(args)) => serve(&args),
        None => serve(&cli.serve),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("postern: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn serve(args: &config::ServeArgs) -> anyhow::Result<()> {
    let config = config::Config::from_args(args)?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(startup::run(config))
}
