//! The retention job: raw events past the raw retention period, rollups past
//! the aggregate period, and the data of deleted sites. Each batch is its own
//! small write, so ingestion is served between batches.

use analytics::retention;
use chrono::{Duration, Utc};

use crate::state::Ctx;

/// Rows deleted per write: small enough to keep each transaction short.
const BATCH: usize = 2000;

pub async fn run(ctx: Ctx) -> anyhow::Result<()> {
    let now = Utc::now();
    let raw_cutoff = (now - Duration::days(i64::from(ctx.config.raw_retention_days))).timestamp_millis();
    let rollup_cutoff = (now - Duration::days(i64::from(ctx.config.rollup_retention_days))).timestamp() / 3600;

    let raw = repeat(&ctx, move |c| retention::purge_raw_events(c, raw_cutoff, BATCH)).await?;
    let mut rollups = 0;
    for site in ctx.read(retention::all_site_seqs).await? {
        rollups += repeat(&ctx, move |c| retention::purge_rollups(c, site, rollup_cutoff, BATCH)).await?;
    }
    let mut deleted_sites = 0;
    for site in ctx.read(retention::deleted_site_seqs).await? {
        deleted_sites += repeat(&ctx, move |c| retention::purge_deleted_site(c, site, BATCH)).await?;
        // One more call removes the emptied site row.
        repeat(&ctx, move |c| retention::purge_deleted_site(c, site, BATCH)).await?;
    }
    if raw + rollups + deleted_sites > 0 {
        tracing::info!(raw_events = raw, rollup_rows = rollups, deleted_site_rows = deleted_sites, "retention removed old data");
    }
    Ok(())
}

/// Calls `step` until it deletes fewer than a full batch; returns the total.
async fn repeat<F>(ctx: &Ctx, step: F) -> anyhow::Result<usize>
where
    F: Fn(&analytics::Connection) -> analytics::Result<usize> + Send + Sync + Copy + 'static,
{
    let mut total = 0;
    loop {
        let n = ctx.writer.maintain(step).await.map_err(|e| anyhow::anyhow!("{}", e.message))?;
        total += n;
        if n < BATCH {
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}
