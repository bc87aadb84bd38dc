//! `postern`: the collector binary.

mod api;
mod assets;
mod auth;
mod cli;
mod compression;
mod config;
mod connections;
mod dashboard;
mod demo;
mod delivery;
mod directory;
mod error;
#[cfg(test)]
mod fuzz;
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
mod storage;
mod supervisor;
mod telemetry;

use clap::Parser;

fn main() -> std::process::ExitCode {
    tune_allocator();
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

/// glibc's malloc keeps what a burst freed: one arena per thread (up to eight
/// per core), and a trim threshold that grows each time a large block is
/// freed. Under ingestion load that held 3-6 MB more at the peak than two
/// arenas and fixed 128 KiB thresholds (1a78d1a). Set before
/// any thread starts.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; no thread exists yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// One worker (the default on two CPUs) is a current-thread runtime: the main
/// thread serves HTTP and runs the jobs. A multi-thread runtime with one
/// worker served ~5 % fewer durable requests per second (f0db65f).
fn serve(args: &config::ServeArgs) -> anyhow::Result<()> {
    let config = config::Config::from_args(args)?;
    telemetry::log_client_addresses(config.log_client_ip);
    let mut runtime = if config.workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut multi = tokio::runtime::Builder::new_multi_thread();
        multi.worker_threads(config.workers);
        multi
    };
    runtime.enable_all().build()?.block_on(startup::run(config))
}
