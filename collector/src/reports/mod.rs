//! Generating reports and handing them to delivery: the scheduler job, "send
//! now", and the message (e-mails per recipient, chat text, webhook data) built
//! from a stored run.
//!
//! Exactly once: a scheduled run is stored under a key unique per report and
//! occurrence, and handed to the delivery outbox in the same transaction, with
//! a dedupe key derived from the run id. A tick that finds the run already
//! stored does nothing, so restarts and overlapping ticks never send twice.

pub mod render;

use std::sync::atomic::Ordering;

use analytics::accounts::Role;
use analytics::report::{self, Channel, Format, ReportConfig, RunDocument, Trigger};
use analytics::sites;
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::config::Config;
use crate::delivery::{self, Attachment, Email, Notification};
use crate::error::ApiError;
use crate::state::Ctx;

/// A run generated this long after its scheduled time is a catch-up (the
/// collector was down or paused), not an on-time run.
const ON_TIME: chrono::Duration = chrono::Duration::minutes(10);

/// The scheduler job: generates every report whose latest occurrence has no
/// run yet, then hands any stored run still waiting to delivery. A report that
/// fails is logged and retried on the next pass; the others still go out.
pub async fn run_due(ctx: Ctx) -> anyhow::Result<()> {
    let now = ctx.config.now();
    let configs = ctx.read(report::scheduled).await.map_err(api_err)?;
    for (config, site_id) in configs {
        if let Err(e) = generate_due(&ctx, config.clone(), site_id, now).await {
            tracing::error!(report = %config.id, site = %site_id, error = %format!("{e:#}"), "report generation failed");
        }
    }
    retry_unenqueued(&ctx, now).await?;
    ctx.metrics.report_passes.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

async fn generate_due(ctx: &Ctx, config: ReportConfig, site_id: uuid::Uuid, now: DateTime<Utc>) -> anyhow::Result<()> {
    let Some(site) = ctx.read(move |c| sites::get(c, site_id)).await.map_err(api_err)? else { return Ok(()) };
    let Some(o) = config.due(&site, now) else { return Ok(()) };
    let id = config.id;
    if ctx.read(move |c| report::has_run(c, id, o.date)).await.map_err(api_err)? {
        return Ok(());
    }
    let trigger = if now - o.at > ON_TIME { Trigger::CatchUp } else { Trigger::Schedule };
    let period = config.period_on(&site, o.date);
    let doc = {
        let (site, config) = (site.clone(), config.clone());
        ctx.read(move |c| report::build(c, &site, &config, &period, trigger, Some(o.at), now)).await.map_err(api_err)?
    };
    let notification = build_notification(ctx, &config, &doc).await?;
    let stored = ctx
        .writer
        .apply(move |c| {
            let inserted = report::insert_run(c, &doc, Some(o.date), now)?;
            if inserted {
                delivery::enqueue(c, &notification)?;
                report::mark_enqueued(c, doc.id, now)?;
            }
            Ok(inserted)
        })
        .await
        .map_err(api_err)?;
    if stored {
        ctx.metrics.report_runs.fetch_add(1, Ordering::Relaxed);
        tracing::info!(report = %config.id, site = %site.id, occurrence = %o.date, trigger = trigger.as_str(), "report generated");
    }
    Ok(())
}

/// Hands stored runs that were never enqueued to delivery (idempotent: the
/// dedupe key is the run's). Generation enqueues in the same transaction, so
/// this only finds runs stored while delivery could not take them.
async fn retry_unenqueued(ctx: &Ctx, now: DateTime<Utc>) -> anyhow::Result<()> {
    for doc in ctx.read(report::unenqueued).await.map_err(api_err)? {
        let (site_id, report_id) = (doc.site.id, doc.report_id);
        let Some(config) = ctx.read(move |c| report::get(c, site_id, report_id)).await.map_err(api_err)? else { continue };
        let notification = build_notification(ctx, &config, &doc).await?;
        let run_id = doc.id;
        ctx.writer
            .apply(move |c| {
                delivery::enqueue(c, &notification)?;
                report::mark_enqueued(c, run_id, now)
            })
            .await
            .map_err(api_err)?;
    }
    Ok(())
}

/// "Send now": a run of the period that ended, stored and handed to delivery.
pub async fn send_now(ctx: &Ctx, site: analytics::model::Site, config: ReportConfig) -> Result<RunDocument, ApiError> {
    let now = ctx.config.now();
    let today = now.with_timezone(&site.timezone).date_naive();
    let period = config.period_on(&site, today);
    let doc = {
        let config = config.clone();
        ctx.read(move |c| report::build(c, &site, &config, &period, Trigger::Manual, None, now)).await?
    };
    let notification = build_notification(ctx, &config, &doc).await.map_err(ApiError::internal)?;
    let stored = doc.clone();
    ctx.writer
        .apply(move |c| {
            report::insert_run(c, &doc, None, now)?;
            delivery::enqueue(c, &notification)?;
            report::mark_enqueued(c, doc.id, now)
        })
        .await?;
    ctx.metrics.report_runs.fetch_add(1, Ordering::Relaxed);
    Ok(stored)
}

/// Renders the notification (HTML, text, PDF) off the async threads.
async fn build_notification(ctx: &Ctx, config: &ReportConfig, doc: &RunDocument) -> anyhow::Result<Notification> {
    let (settings, config, doc) = (ctx.config.clone(), config.clone(), doc.clone());
    tokio::task::spawn_blocking(move || notification(&settings, &config, &doc)).await?
}

fn api_err(e: ApiError) -> anyhow::Error {
    anyhow::anyhow!("{}", e.message)
}

/// Where an Admin changes a report (the dashboard's report page).
pub fn manage_url(config: &Config, site_id: uuid::Uuid, report_id: uuid::Uuid) -> String {
    format!("{}/dashboard/sites/{site_id}/reports/{report_id}", config.public_url)
}

/// The outbox key of a run's deliveries: a run is handed to delivery once.
pub fn dedupe_key(run_id: uuid::Uuid) -> String {
    format!("report-run:{run_id}")
}

/// The file name, without extension, of a run's attachment or download.
pub fn file_stem(doc: &RunDocument) -> String {
    format!("postern-{}-{}-{}", doc.kind.as_str(), doc.period.start, doc.period.end)
}

fn attachment(doc: &RunDocument) -> anyhow::Result<Option<Attachment>> {
    let stem = file_stem(doc);
    let (ext, content_type, bytes) = match doc.format {
        Format::Html => return Ok(None),
        Format::Pdf => ("pdf", "application/pdf", render::pdf(doc)?),
        Format::Csv => ("csv", "text/csv; charset=utf-8", render::csv(doc).into_bytes()),
        Format::Json => ("json", "application/json", serde_json::to_vec_pretty(doc)?),
    };
    Ok(Some(Attachment { filename: format!("{stem}.{ext}"), content_type: content_type.to_owned(), bytes }))
}

/// The delivery of a run: an e-mail per recipient (Admins get the link to
/// change the report), the chat text and key figures, and the webhook data.
pub fn notification(config: &Config, report: &ReportConfig, doc: &RunDocument) -> anyhow::Result<Notification> {
    let subject = render::subject(doc);
    let manage = manage_url(config, doc.site.id, doc.report_id);
    let spec = &report.draft.spec;
    let mut emails = Vec::new();
    if spec.channels.contains(&Channel::Email) {
        let attachment = attachment(doc)?;
        for r in &spec.recipients {
            let link = (r.role == Role::Admin).then_some(manage.as_str());
            emails.push(Email {
                to: r.email.clone(),
                subject: subject.clone(),
                html: render::html(doc, link),
                text: render::text(doc, link),
                attachments: attachment.clone().into_iter().collect(),
            });
        }
    }
    let (sessions, conversions) = doc.content.headline();
    let figures = serde_json::to_value(&doc.content)?;
    let data = json!({
        "sessions": sessions,
        "conversions": conversions,
        "report_id": doc.report_id,
        "run_id": doc.id,
        "type": doc.kind.as_str(),
        "period": {"start": doc.period.start, "end": doc.period.end},
        "report": figures.get(doc.kind.as_str()).cloned().unwrap_or_default(),
    });
    let channels = spec
        .channels
        .iter()
        .filter_map(|c| match c {
            Channel::Email => None,
            Channel::Slack => Some(delivery::Channel::Slack),
            Channel::Webhook => Some(delivery::Channel::Webhook),
        })
        .collect();
    Ok(Notification {
        site_id: doc.site.id.to_string(),
        event: doc.kind.event().to_owned(),
        dedupe_key: dedupe_key(doc.id),
        subject,
        text: render::text(doc, None),
        summary: render::summary(doc),
        data,
        emails,
        channels,
    })
}

#[cfg(test)]
mod tests {
    use analytics::report::content::{Change, Daily, Kpis};
    use analytics::report::{Content, Dates, Draft, SiteRef};
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;
    use crate::config::ServeArgs;

    fn fixture(format: &str) -> (Config, ReportConfig, RunDocument) {
        let config = Config::from_args(&ServeArgs { public_url: Some("https://stats.example.com/".into()), ..Default::default() }).unwrap();
        let body = json!({
            "type": "daily",
            "recipients": [{"email": "ana@example.com", "role": "Admin"}, {"email": "bob@example.com", "role": "Reader"}],
            "channels": ["email", "slack", "webhook"],
            "format": format
        });
        let draft = Draft::from_json(body.as_object().unwrap(), None).unwrap();
        let now = Utc.with_ymd_and_hms(2026, 11, 20, 7, 0, 0).unwrap();
        let report = ReportConfig { id: uuid::Uuid::new_v4(), site_id: uuid::Uuid::new_v4(), draft, created_at: now, updated_at: now };
        let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 19).unwrap();
        let doc = RunDocument {
            id: uuid::Uuid::now_v7(),
            report_id: report.id,
            report_name: "Daily report".into(),
            kind: report.draft.kind,
            format: report.draft.spec.format,
            site: SiteRef {
                id: report.site_id,
                name: "The <Daily> Courier".into(),
                domain: "courier.example.com".into(),
                timezone: "Europe/Paris".into(),
                revenue_per_1000_pageviews: None,
            },
            period: Dates { start: day, end: day },
            trigger: Trigger::Schedule,
            scheduled_for: Some("2026-11-20T07:00:00.000Z".into()),
            generated_at: "2026-11-20T07:00:01.000Z".into(),
            content: Content::Daily(Daily {
                kpis: Kpis { sessions: 1200, adblock_detected: 300, adblock_share: 25.0, walls_displayed: 200, conversions: 30, conversion_rate: 15.0 },
                sessions_change: serde_json::from_value::<Change>(json!({"previous": 1000, "difference": 200, "percent": 20.0})).unwrap(),
                top_event: None,
                top_device: None,
            }),
        };
        (config, report, doc)
    }

    #[test]
    fn admins_get_a_link_to_change_the_report_and_readers_do_not() {
        let (config, report, doc) = fixture("html");
        let m = notification(&config, &report, &doc).unwrap();
        assert_eq!(m.event, "daily_report");
        assert_eq!(m.dedupe_key, format!("report-run:{}", doc.id));
        assert_eq!(m.subject, "The <Daily> Courier: Daily report for Thursday 19 November 2026");
        assert_eq!(m.channels, vec![delivery::Channel::Slack, delivery::Channel::Webhook]);
        assert_eq!((m.data["sessions"].as_u64(), m.data["conversions"].as_u64()), (Some(1200), Some(30)));
        let link = format!("https://stats.example.com/dashboard/sites/{}/reports/{}", doc.site.id, doc.report_id);
        let [admin, reader] = &m.emails[..] else { panic!("two e-mails expected: {:?}", m.emails) };
        assert_eq!((admin.to.as_str(), reader.to.as_str()), ("ana@example.com", "bob@example.com"));
        assert!(admin.html.contains(&link) && admin.text.contains(&link));
        assert!(!reader.html.contains("/dashboard/") && !reader.text.contains("/dashboard/"));
        assert!(admin.html.contains("The &lt;Daily&gt; Courier"), "names are escaped");
        assert!(admin.text.contains("- Sessions: 1,200 (+20.00% vs 1,000 the day before)"), "{}", admin.text);
        assert!(admin.attachments.is_empty());
        assert!(!m.text.contains("/dashboard/"), "the chat text is for everyone");
        assert_eq!(m.summary[0], ("Sessions".to_owned(), "1,200 (+20.00% vs 1,000 the day before)".to_owned()));
    }

    #[test]
    fn csv_and_json_formats_attach_the_figures() {
        let (config, report, doc) = fixture("csv");
        let m = notification(&config, &report, &doc).unwrap();
        let a = &m.emails[0].attachments[0];
        assert_eq!(a.filename, "postern-daily-2026-11-19-2026-11-19.csv");
        assert_eq!(
            String::from_utf8(a.bytes.clone()).unwrap(),
            "period_start,period_end,sessions,adblock_detected,walls_displayed,conversions,conversion_rate\n2026-11-19,2026-11-19,1200,300,200,30,15.00\n"
        );
        let (config, mut report, doc) = fixture("json");
        report.draft.spec.channels = vec![Channel::Webhook];
        let m = notification(&config, &report, &doc).unwrap();
        assert!(m.emails.is_empty(), "no email channel, no e-mails");
        let (_, report, doc) = fixture("json");
        let m = notification(&config, &report, &doc).unwrap();
        let parsed: RunDocument = serde_json::from_slice(&m.emails[0].attachments[0].bytes).unwrap();
        assert_eq!(parsed, doc);
    }
}
