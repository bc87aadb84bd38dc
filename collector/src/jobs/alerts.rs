//! The alerts job: for every live site, checks each alert's condition over
//! the hourly rollups and, when a condition starts to hold, enqueues one
//! notification (with the numbers behind it) to the integrations subscribed
//! to it. The state and the notification are written in one transaction, so
//! an alert fires once per condition, across checks and restarts.
//!
//! Thresholds (docs/api.md, Alerts): the last 24 complete UTC hours are
//! compared with the 7 days before them.

use analytics::ab::VariantResult;
use analytics::alerts::{self, State};
use analytics::model::{Site, SiteStatus};
use analytics::query::{self, Counters};
use analytics::store::Durability;
use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::delivery::{self, Channel, Notification};
use crate::state::Ctx;

/// Hours in the recent window and in the baseline before it.
const RECENT_HOURS: i64 = 24;
const BASELINE_HOURS: i64 = 7 * 24;
/// Sessions (for the ad-block share) or walls (for the conversion rate) each
/// window needs before a change means anything.
const MIN_VOLUME: u64 = 50;
/// Ad-block spike: the share rises by at least this many points, and by half.
const SPIKE_POINTS: f64 = 10.0;
const SPIKE_RATIO: f64 = 1.5;
/// Conversion drop: the rate falls to at most this fraction of the baseline.
const DROP_RATIO: f64 = 0.7;

pub async fn run(ctx: Ctx) -> anyhow::Result<()> {
    let now = Utc::now();
    let no_data_hours = ctx.config.alert_no_data_hours;
    let sites = ctx.read(analytics::alerts::live_sites).await.map_err(|e| anyhow::anyhow!(e.message))?;
    let store = ctx.store.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut writer = store.open_writer(Durability::Full).context("opening the alerts' write connection")?;
        for site in sites {
            let checks = store.read(|c| evaluate(c, &site, now, no_data_hours)).context("evaluating alerts")?;
            for check in checks {
                let fired = writer.run(|c| apply(c, &site, &check, now))?;
                if fired {
                    tracing::info!(site = %site.id, alert = check.alert, "alert fired");
                }
            }
        }
        Ok(())
    })
    .await?
}

/// One alert's verdict for one site at one check.
#[derive(Debug)]
struct Check {
    alert: &'static str,
    holds: bool,
    /// What the condition is about when it differs between firings (the winning variant).
    key: Option<String>,
    subject: String,
    text: String,
    summary: Vec<(String, String)>,
    data: serde_json::Value,
}

fn evaluate(conn: &analytics::Connection, site: &Site, now: DateTime<Utc>, no_data_hours: u32) -> analytics::Result<Vec<Check>> {
    let hour = now.timestamp().div_euclid(3600);
    let recent = alerts::counters(conn, site.seq, hour - RECENT_HOURS, hour)?;
    let baseline = alerts::counters(conn, site.seq, hour - RECENT_HOURS - BASELINE_HOURS, hour - RECENT_HOURS)?;
    let winner = query::ab_testing(conn, site, None)?.into_iter().find(|v| v.is_winner == Some(true));
    let last = alerts::last_event_hour(conn, site.seq)?;
    Ok(vec![
        adblock_rate_spike(site, &recent, &baseline),
        conversion_rate_drop(site, &recent, &baseline),
        ab_test_winner(site, winner.as_ref()),
        no_data(site, last, now, no_data_hours),
    ])
}

fn counts(c: &Counters) -> serde_json::Value {
    json!({ "sessions": c.sessions, "adblock_detected": c.adblock, "walls_displayed": c.walls, "conversions": c.conversions })
}

fn adblock_rate_spike(site: &Site, recent: &Counters, baseline: &Counters) -> Check {
    let (now_share, was_share) = (recent.adblock_share(), baseline.adblock_share());
    let holds = recent.sessions >= MIN_VOLUME
        && baseline.sessions >= MIN_VOLUME
        && now_share >= was_share + SPIKE_POINTS
        && now_share >= was_share * SPIKE_RATIO;
    Check {
        alert: "adblock_rate_spike",
        holds,
        key: None,
        subject: format!("Ad-block rate spike on {}", site.name),
        text: format!(
            "{now_share:.1}% of sessions had an ad blocker over the last 24 hours ({} of {}), up from {was_share:.1}% over the 7 days before ({} of {}).",
            recent.adblock, recent.sessions, baseline.adblock, baseline.sessions
        ),
        summary: vec![
            ("Ad-block share, last 24 h".into(), format!("{now_share:.1}%")),
            ("Ad-block share, previous 7 days".into(), format!("{was_share:.1}%")),
            ("Sessions, last 24 h".into(), recent.sessions.to_string()),
        ],
        data: json!({
            "sessions": recent.sessions,
            "conversions": recent.conversions,
            "adblock_share": now_share,
            "baseline_adblock_share": was_share,
            "last_24h": counts(recent),
            "previous_7_days": counts(baseline),
        }),
    }
}

fn conversion_rate_drop(site: &Site, recent: &Counters, baseline: &Counters) -> Check {
    let (now_rate, was_rate) = (recent.conversion_rate(), baseline.conversion_rate());
    let holds = recent.walls >= MIN_VOLUME && baseline.walls >= MIN_VOLUME && was_rate > 0.0 && now_rate <= was_rate * DROP_RATIO;
    Check {
        alert: "conversion_rate_drop",
        holds,
        key: None,
        subject: format!("Conversion rate drop on {}", site.name),
        text: format!(
            "The wall converted {now_rate:.1}% of the time over the last 24 hours ({} of {} walls), down from {was_rate:.1}% over the 7 days before ({} of {}).",
            recent.conversions, recent.walls, baseline.conversions, baseline.walls
        ),
        summary: vec![
            ("Conversion rate, last 24 h".into(), format!("{now_rate:.1}%")),
            ("Conversion rate, previous 7 days".into(), format!("{was_rate:.1}%")),
            ("Walls displayed, last 24 h".into(), recent.walls.to_string()),
        ],
        data: json!({
            "sessions": recent.sessions,
            "conversions": recent.conversions,
            "conversion_rate": now_rate,
            "baseline_conversion_rate": was_rate,
            "last_24h": counts(recent),
            "previous_7_days": counts(baseline),
        }),
    }
}

fn ab_test_winner(site: &Site, winner: Option<&VariantResult>) -> Check {
    let Some(w) = winner else {
        return Check {
            alert: "ab_test_winner",
            holds: false,
            key: None,
            subject: String::new(),
            text: String::new(),
            summary: Vec::new(),
            data: json!({}),
        };
    };
    Check {
        alert: "ab_test_winner",
        holds: true,
        key: Some(w.name.clone()),
        subject: format!("A/B test winner on {}: {}", site.name, w.name),
        text: format!(
            "Wall variant \"{}\" wins: {:.2}% conversion rate ({} of {} walls), {:.2}% confidence.",
            w.name, w.conversion_rate, w.conversions, w.impressions, w.confidence
        ),
        summary: vec![
            ("Variant".into(), w.name.clone()),
            ("Conversion rate".into(), format!("{:.2}%", w.conversion_rate)),
            ("Confidence".into(), format!("{:.2}%", w.confidence)),
        ],
        data: json!({
            "sessions": w.impressions,
            "conversions": w.conversions,
            "variant": w.name,
            "conversion_rate": w.conversion_rate,
            "confidence": w.confidence,
            "lift": w.lift,
        }),
    }
}

fn no_data(site: &Site, last_hour: Option<i64>, now: DateTime<Utc>, threshold_hours: u32) -> Check {
    // Silence counts from the end of the hour of the last event: rollups are hourly.
    let silent_hours = last_hour.map(|h| (now.timestamp() - (h + 1) * 3600).div_euclid(3600));
    let holds = site.status == SiteStatus::Active && silent_hours.is_some_and(|s| s >= i64::from(threshold_hours));
    let since = last_hour.map(|h| analytics::model::iso(analytics::period::hour_start(h + 1)));
    let silent = silent_hours.unwrap_or(0);
    Check {
        alert: "no_data",
        holds,
        key: None,
        subject: format!("No data from {} for {silent} hours", site.name),
        text: format!(
            "No event has reached Postern from {} ({}) for {silent} hours (the alert threshold is {threshold_hours}). The SDK may be broken or removed from the pages.",
            site.name, site.domain
        ),
        summary: vec![("Hours without events".into(), silent.to_string()), ("Threshold".into(), format!("{threshold_hours} h"))],
        data: json!({
            "sessions": 0,
            "conversions": 0,
            "hours_without_data": silent,
            "threshold_hours": threshold_hours,
            "last_event_before": since,
        }),
    }
}

/// Records the check's state and, on the transition that fires, enqueues the
/// notification, in the caller's transaction. Returns whether it fired.
fn apply(conn: &analytics::Connection, site: &Site, check: &Check, now: DateTime<Utc>) -> analytics::Result<bool> {
    let before = alerts::state(conn, site.seq, check.alert)?;
    let fires = match &check.key {
        Some(key) => check.holds && before.fired_key.as_deref() != Some(key.as_str()),
        None => check.holds && !before.active,
    };
    let after = State { active: check.holds, fired_key: if fires { check.key.clone() } else { before.fired_key.clone() } };
    if after != before {
        alerts::set_state(conn, site.seq, check.alert, &after, now)?;
    }
    if fires {
        let n = Notification {
            site_id: site.id.to_string(),
            event: check.alert.to_owned(),
            dedupe_key: format!("alert:{}:{}:{}", site.id, check.alert, now.timestamp_millis()),
            subject: check.subject.clone(),
            text: check.text.clone(),
            summary: check.summary.clone(),
            data: check.data.clone(),
            emails: Vec::new(),
            channels: vec![Channel::Slack, Channel::Webhook],
        };
        delivery::enqueue(conn, &n)?;
    }
    Ok(fires)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        Site {
            seq: 1,
            id: uuid::Uuid::nil(),
            account_id: 1,
            name: "Courier".into(),
            domain: "courier.test".into(),
            status: SiteStatus::Active,
            timezone: chrono_tz::Tz::UTC,
            revenue_per_mille: None,
            wall: json!({}),
            keep_utm: false,
            created_at: Utc::now(),
        }
    }

    fn c(sessions: u64, adblock: u64, walls: u64, conversions: u64) -> Counters {
        Counters { sessions, adblock, walls, dismissed: 0, conversions }
    }

    #[test]
    fn a_spike_needs_volume_ten_points_and_half_again() {
        let s = site();
        assert!(adblock_rate_spike(&s, &c(100, 40, 0, 0), &c(700, 140, 0, 0)).holds, "40% vs 20%");
        assert!(!adblock_rate_spike(&s, &c(100, 29, 0, 0), &c(700, 140, 0, 0)).holds, "29% vs 20%: under 10 points");
        assert!(!adblock_rate_spike(&s, &c(100, 65, 0, 0), &c(700, 420, 0, 0)).holds, "65% vs 60%: not half again");
        assert!(!adblock_rate_spike(&s, &c(40, 40, 0, 0), &c(700, 0, 0, 0)).holds, "too few recent sessions");
        let check = adblock_rate_spike(&s, &c(100, 40, 0, 0), &c(700, 140, 0, 0));
        assert!(check.text.contains("40.0%") && check.text.contains("20.0%"), "{}", check.text);
        assert_eq!(check.data["adblock_share"], 40.0);
    }

    #[test]
    fn a_drop_is_to_seventy_percent_of_the_baseline_rate() {
        let s = site();
        assert!(conversion_rate_drop(&s, &c(0, 0, 100, 7), &c(0, 0, 500, 50)).holds, "7% vs 10%");
        assert!(!conversion_rate_drop(&s, &c(0, 0, 100, 8), &c(0, 0, 500, 50)).holds, "8% vs 10%");
        assert!(!conversion_rate_drop(&s, &c(0, 0, 100, 0), &c(0, 0, 500, 0)).holds, "no baseline rate");
        assert!(!conversion_rate_drop(&s, &c(0, 0, 49, 0), &c(0, 0, 500, 50)).holds, "too few walls");
    }

    #[test]
    fn no_data_counts_whole_silent_hours_after_the_last_events_hour() {
        let s = site();
        let now = DateTime::from_timestamp(100 * 3600 + 1800, 0).unwrap();
        // Last event in hour 96: silent since the start of hour 97, 3.5 hours ago.
        assert!(no_data(&s, Some(96), now, 3).holds);
        assert!(!no_data(&s, Some(96), now, 4).holds);
        assert!(!no_data(&s, None, now, 1).holds, "a site that never had data is not silent");
        let paused = Site { status: SiteStatus::Paused, ..site() };
        assert!(!no_data(&paused, Some(10), now, 1).holds, "a paused site is expected to be silent");
        assert_eq!(no_data(&s, Some(96), now, 3).data["hours_without_data"], 3);
    }
}
