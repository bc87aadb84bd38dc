//! Building the server: open the store, start the writer, bind the listener
//! (before anything is printed, so port 0 works), serve until SIGTERM/SIGINT,
//! then drain the write queue.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use analytics::store::Durability;

use crate::config::Config;
use crate::geo::CountryResolver;
use crate::ingest::writer;
use crate::metrics::Metrics;
use crate::rate_limit::RateLimiter;
use crate::state::AppState;
use crate::{api, connections, delivery, demo, gateway, jobs, storage, telemetry};

/// How long open connections get to finish once shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Runs `f` on a thread of its own, outside the runtime: opening a store or
/// a connection blocks, and on PostgreSQL it waits on the driver's runtime,
/// which a runtime thread may not do. Nothing is served while startup waits.
fn outside_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
}

/// The writer's wait for more events on PostgreSQL (`--group-wait-ms`).
const POSTGRES_GROUP_WAIT: Duration = Duration::from_millis(1);

pub async fn run(config: Config) -> anyhow::Result<()> {
    let geo = CountryResolver::new(config.country_header.clone(), config.geoip_db.as_deref())?;
    let (store, ingest_writer, outbox_writer) = outside_runtime(|| -> anyhow::Result<_> {
        let store = storage::open(&config)?;
        let ingest = store.open_writer(config.durability).context("opening the write connection")?;
        let outbox = store.open_writer(Durability::Full).context("opening the outbox's write connection")?;
        Ok((Arc::new(store), ingest, outbox))
    })?;
    let metrics = Arc::new(Metrics::default());
    // On PostgreSQL part of a group's cost on the server is per statement,
    // not per event, and several nodes each commit a share of the traffic: a
    // short wait makes their groups larger (measured in e5b5174). Every
    // request waits it out when a node's clients cannot fill a group, so it
    // is kept short (1 ms beat 3 ms on three nodes, measured in cad6b68).
    let group_wait = config.group_wait.unwrap_or(if store.is_shared() { POSTGRES_GROUP_WAIT } else { Duration::ZERO });
    let (writer, writer_thread) = writer::start(ingest_writer, config.queue_capacity, group_wait, metrics.clone()).context("starting the writer")?;
    connections::raise_open_files_limit(config.max_connections);
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let limiter = RateLimiter::new(&store);
    let ctx = Arc::new(AppState { config, store, writer, limiter, metrics, directory: Default::default(), geo, demo_site: Default::default(), tasks: Default::default() });

    // Handlers go in before the listening line: a SIGTERM sent as soon as we
    // announce readiness must already mean a graceful stop.
    let shutdown = shutdown_signal()?;
    if ctx.config.demo {
        let site = demo::start(&ctx, addr).await.context("seeding the demo data")?;
        let _ = ctx.demo_site.set(site);
    }
    println!("postern listening on http://{addr}");

    // What other nodes sharing the database change, this one forgets at once.
    let listening = {
        let changed = Arc::downgrade(&ctx);
        ctx.store.listen(move |change| {
            if let Some(ctx) = changed.upgrade() {
                ctx.directory.forget(change);
            }
        })
    };
    let jobs = jobs::spawn_all(&ctx);
    let deliveries = delivery::Worker::start(&ctx.store, outbox_writer, &ctx.config.delivery, &ctx.tasks).context("starting the delivery worker")?;
    serve(listener, ctx.clone(), shutdown).await;
    for job in jobs {
        job.abort();
    }
    drop(listening);
    // Sends in flight finish and are recorded, so nothing is sent twice after a restart.
    deliveries.stop().await;
    tracing::info!("stopped accepting; committing queued writes");
    writer_thread.drain_and_stop().await;
    tracing::info!("shutdown complete");
    Ok(())
}

async fn serve(listener: TcpListener, ctx: Arc<AppState>, shutdown: impl std::future::Future<Output = ()>) {
    let routes = api::routes(ctx.clone());
    let graceful = GracefulShutdown::new();
    let builder = connections::builder(&ctx.config);
    let body_timeout = ctx.config.body_read_timeout;
    let acceptor = connections::Acceptor::new(listener, ctx.config.max_connections);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer, permit) = tokio::select! {
            accepted = acceptor.accept() => accepted,
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = {
            let (ctx, routes) = (ctx.clone(), routes.clone());
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (ctx, routes) = (ctx.clone(), routes.clone());
                let req = req.map(|body| connections::Deadline::new(body, body_timeout));
                async move { Ok::<_, Infallible>(gateway::handle(ctx, routes, peer, req).await) }
            })
        };
        let conn = graceful.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, peer = telemetry::client_addr(peer), "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(acceptor);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
    }
}

/// Resolves at SIGTERM or SIGINT; the handlers are installed when this is called.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}

