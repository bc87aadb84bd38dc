//! The retention job: raw events past the raw retention period, rollups past
//! the aggregate period, outbox rows settled more than 90 days ago (with their
//! attempts and attachments), and the data of deleted sites. Each batch is its
//! own small write, so ingestion is served between batches.

use analytics::outbox::{self, SETTLED_RETENTION_DAYS};
use analytics::retention;
use anyhow::Context;
use chrono::{DateTime, Duration, Utc};

use crate::state::Ctx;

/// Rows deleted per write: small enough to keep each transaction short.
const BATCH: usize = 2000;

pub async fn run(ctx: Ctx) -> anyhow::Result<()> {
    let now = Utc::now();
    let raw_cutoff = days_before(now, i64::from(ctx.config.raw_retention_days))?.timestamp_millis();
    let rollup_cutoff = days_before(now, i64::from(ctx.config.rollup_retention_days))?.timestamp() / 3600;
    let outbox_cutoff = days_before(now, SETTLED_RETENTION_DAYS)?.timestamp_millis();

    let store = ctx.store.clone();
    let mut raw = tokio::task::spawn_blocking(move || store.drop_expired_event_days(raw_cutoff)).await??;
    raw += repeat(&ctx, move |c| retention::purge_raw_events(c, raw_cutoff, BATCH)).await?;
    let sessions = purge_sessions(&ctx, raw_cutoff).await?;
    let mut rollups = 0;
    for site in ctx.read(retention::all_site_seqs).await? {
        rollups += repeat(&ctx, move |c| retention::purge_rollups(c, site, rollup_cutoff, BATCH)).await?;
    }
    let mut deleted_sites = 0;
    let deleted = ctx.read(retention::deleted_site_seqs).await?;
    if !deleted.is_empty() {
        deleted_sites += purge_deleted_sites_sessions(&ctx).await?;
    }
    for site in deleted {
        deleted_sites += repeat(&ctx, move |c| retention::purge_deleted_site(c, site, BATCH)).await?;
        // One more call removes the emptied site row.
        repeat(&ctx, move |c| retention::purge_deleted_site(c, site, BATCH)).await?;
    }
    let deliveries = purge_settled_deliveries(&ctx, outbox_cutoff).await?;
    if raw + sessions + rollups + deleted_sites + deliveries > 0 {
        tracing::info!(
            raw_events = raw,
            sessions,
            rollup_rows = rollups,
            deleted_site_rows = deleted_sites,
            deliveries,
            "retention removed old data"
        );
    }
    Ok(())
}

/// `now` less `days` days, or an error where that is no date.
fn days_before(now: DateTime<Utc>, days: i64) -> anyhow::Result<DateTime<Utc>> {
    Duration::try_days(days).and_then(|d| now.checked_sub_signed(d)).with_context(|| format!("{days} days before {now} is out of range"))
}

/// Outbox rows settled before the cutoff, with their attempts and
/// attachments, a batch per write. Pending rows stay whatever their age.
async fn purge_settled_deliveries(ctx: &Ctx, before_ms: i64) -> anyhow::Result<usize> {
    let mut total = 0;
    loop {
        let n = ctx.writer.apply(move |c| outbox::purge_settled(c, before_ms, BATCH)).await.map_err(|e| anyhow::anyhow!("{}", e.message))?;
        total += n;
        if n < BATCH {
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}

/// Sessions last seen before the raw cutoff, a window of BATCH sessions (in
/// arrival order) per write. Sessions arrive roughly in the order they are
/// last seen, so the first window with nothing to delete ends the pass.
async fn purge_sessions(ctx: &Ctx, before_ms: i64) -> anyhow::Result<usize> {
    let (mut after, mut total) = (0, 0);
    loop {
        let step = move |c: &analytics::Connection| retention::purge_old_sessions(c, after, before_ms, BATCH);
        match ctx.writer.maintain(step).await.map_err(|e| anyhow::anyhow!("{}", e.message))? {
            (n @ 1.., Some(last)) => {
                total += n;
                after = last;
            }
            _ => return Ok(total),
        }
        tokio::task::yield_now().await;
    }
}

/// The sessions of deleted sites: one pass over all sessions, a window of
/// BATCH per write. Must complete before a deleted site's row goes.
async fn purge_deleted_sites_sessions(ctx: &Ctx) -> anyhow::Result<usize> {
    let (mut after, mut total) = (0, 0);
    loop {
        let step = move |c: &analytics::Connection| retention::purge_deleted_sites_sessions(c, after, BATCH);
        match ctx.writer.maintain(step).await.map_err(|e| anyhow::anyhow!("{}", e.message))? {
            (n, Some(last)) => {
                total += n;
                after = last;
            }
            (_, None) => return Ok(total),
        }
        tokio::task::yield_now().await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutoffs_at_the_largest_settings_are_dates_and_absurd_ones_errors() {
        let now = Utc::now();
        let longest = i64::from(*crate::config::limits::RETENTION_DAYS.end());
        assert_eq!(days_before(now, longest).unwrap(), now - Duration::days(longest));
        assert!(days_before(now, 100_000_000).is_err(), "no panic past chrono's range");
        assert!(days_before(now, i64::MAX).is_err());
    }
}
