//! The Reports tab: a site's report configurations (list, create, edit,
//! delete, send now) and each report's run history, every run viewable as
//! HTML and downloadable as PDF and JSON. Admin report e-mails link to a
//! report's page here (`reports::manage_url`).
//!
//! The form is turned into the same JSON body the API takes and checked by
//! `Draft::from_json`, so the dashboard accepts and refuses exactly what the
//! API does; a refusal is shown next to its field with what was typed kept.

use std::collections::BTreeMap;

use analytics::accounts::Role;
use analytics::integrations::{self, Integration, Kind};
use analytics::model::{Device, EventType, Site};
use analytics::outbox::{self, Delivery};
use analytics::report::config::{weekday_name, Frequency, Schedule};
use analytics::report::{self, Channel, Draft, Format, Invalid, Metric, ReportConfig, ReportType, RunDocument, RunSummary};
use chrono::{DateTime, Utc, Weekday};
use chrono_tz::Tz;
use http::{HeaderValue, StatusCode};
use serde::Serialize;
use serde_json::{json, Map, Value as Json};
use uuid::Uuid;
use warp::reply::Response;

use super::sites::site_of;
use super::{admin_change, page, redirect, Form, Viewer};
use crate::api::Query;
use crate::error::ApiError;
use crate::reports::{self, render};
use crate::state::Ctx;

/// Runs listed per page of a report's history.
const RUNS_PER_PAGE: u32 = 20;
/// Empty recipient rows offered below the filled ones (the form needs no script).
const SPARE_RECIPIENT_ROWS: usize = 2;
const WEEKDAYS: [Weekday; 7] = [Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri, Weekday::Sat, Weekday::Sun];

#[derive(Debug, Clone, Serialize)]
struct RecipientRow {
    email: String,
    role: String,
}

/// The report form as typed: what a refused form is shown again with.
#[derive(Debug, Clone, Serialize)]
struct ReportForm {
    name: String,
    kind: String,
    enabled: bool,
    metrics: Vec<String>,
    filter_start: String,
    filter_end: String,
    filter_device: String,
    filter_countries: String,
    filter_event: String,
    frequency: String,
    weekday: String,
    day_of_month: String,
    time: String,
    recipients: Vec<RecipientRow>,
    channels: Vec<String>,
    format: String,
}

fn frequency_parts(f: Frequency) -> (&'static str, &'static str, u32) {
    match f {
        Frequency::Daily => ("daily", "monday", 1),
        Frequency::Weekly(w) => ("weekly", weekday_name(w), 1),
        Frequency::Monthly(d) => ("monthly", "monday", d),
    }
}

impl ReportForm {
    /// A new report: daily at 08:00 by e-mail, as HTML.
    fn new_report() -> ReportForm {
        let mut form = ReportForm::from_draft(&Draft {
            name: String::new(),
            kind: ReportType::Daily,
            enabled: true,
            spec: report::Spec {
                metrics: Vec::new(),
                filters: Default::default(),
                schedule: ReportType::Daily.default_schedule(),
                recipients: Vec::new(),
                channels: vec![Channel::Email],
                format: Format::Html,
            },
        });
        form.metrics = [Metric::Sessions, Metric::Conversions, Metric::ConversionRate].map(|m| m.as_str().to_owned()).to_vec();
        form
    }

    fn from_draft(d: &Draft) -> ReportForm {
        let spec = &d.spec;
        let (frequency, weekday, day) = frequency_parts(spec.schedule.frequency);
        ReportForm {
            name: d.name.clone(),
            kind: d.kind.as_str().to_owned(),
            enabled: d.enabled,
            metrics: spec.metrics.iter().map(|m| m.as_str().to_owned()).collect(),
            filter_start: spec.filters.start.map(|s| s.to_string()).unwrap_or_default(),
            filter_end: spec.filters.end.map(|s| s.to_string()).unwrap_or_default(),
            filter_device: spec.filters.device.map(|d| d.as_str().to_owned()).unwrap_or_default(),
            filter_countries: spec.filters.countries.join(", "),
            filter_event: spec.filters.event.map(|e| e.as_str().to_owned()).unwrap_or_default(),
            frequency: frequency.to_owned(),
            weekday: weekday.to_owned(),
            day_of_month: day.to_string(),
            time: spec.schedule.time.format("%H:%M").to_string(),
            recipients: spec.recipients.iter().map(|r| RecipientRow { email: r.email.clone(), role: r.role.as_str().to_owned() }).collect(),
            channels: spec.channels.iter().map(|c| c.as_str().to_owned()).collect(),
            format: spec.format.as_str().to_owned(),
        }
    }

    fn from_form(f: &Form) -> ReportForm {
        let text = |name: &str| f.get(name).map(str::trim).unwrap_or_default().to_owned();
        let recipients = f
            .all("recipient_email")
            .zip(f.all("recipient_role"))
            .map(|(email, role)| RecipientRow { email: email.trim().to_owned(), role: role.to_owned() })
            .collect();
        ReportForm {
            name: text("name"),
            kind: text("type"),
            enabled: f.get("enabled").is_some(),
            metrics: f.all("metrics").map(str::to_owned).collect(),
            filter_start: text("filter_start"),
            filter_end: text("filter_end"),
            filter_device: text("filter_device"),
            filter_countries: text("filter_countries"),
            filter_event: text("filter_event"),
            frequency: text("frequency"),
            weekday: text("weekday"),
            day_of_month: text("day_of_month"),
            time: text("time"),
            recipients,
            channels: f.all("channels").map(str::to_owned).collect(),
            format: text("format"),
        }
    }

    /// The API body this form stands for, and the form row of each recipient
    /// in it (blank rows are left out). `existing` is the type of the report
    /// being edited: a type cannot change, so the form does not send one.
    ///
    /// Metrics and filters belong to custom reports, and a daily, weekly or
    /// monthly report's frequency is its type: the form sends them only then,
    /// so switching the type does not trip over fields the new type ignores.
    fn body(&self, existing: Option<ReportType>) -> (Map<String, Json>, Vec<usize>) {
        let mut b = Map::new();
        let kind = existing.or_else(|| ReportType::parse(&self.kind));
        if existing.is_none() {
            b.insert("type".into(), json!(self.kind));
        }
        if existing.is_some() || !self.name.is_empty() {
            b.insert("name".into(), json!(self.name));
        }
        b.insert("enabled".into(), json!(self.enabled));
        if kind == Some(ReportType::Custom) {
            b.insert("metrics".into(), json!(self.metrics));
            let mut filters = Map::new();
            for (key, v) in [("start", &self.filter_start), ("end", &self.filter_end), ("device", &self.filter_device), ("event", &self.filter_event)] {
                if !v.is_empty() {
                    filters.insert(key.into(), json!(v));
                }
            }
            let countries: Vec<&str> = self.filter_countries.split([',', ' ', ';']).filter(|c| !c.is_empty()).collect();
            if !countries.is_empty() {
                filters.insert("countries".into(), json!(countries));
            }
            b.insert("filters".into(), Json::Object(filters));
        }
        let frequency = match kind {
            Some(ReportType::Custom) => self.frequency.as_str(),
            Some(k) => frequency_parts(k.default_schedule().frequency).0,
            None => "",
        };
        let mut schedule = Map::new();
        schedule.insert("time".into(), json!(self.time));
        if kind == Some(ReportType::Custom) {
            schedule.insert("frequency".into(), json!(self.frequency));
        }
        match frequency {
            "weekly" => {
                schedule.insert("weekday".into(), json!(self.weekday));
            }
            "monthly" => {
                let day = self.day_of_month.parse::<u64>().map_or_else(|_| json!(self.day_of_month), |d| json!(d));
                schedule.insert("day_of_month".into(), day);
            }
            _ => {}
        }
        b.insert("schedule".into(), Json::Object(schedule));
        let mut rows = Vec::new();
        let mut recipients = Vec::new();
        for (i, r) in self.recipients.iter().enumerate() {
            if !r.email.is_empty() {
                rows.push(i);
                recipients.push(json!({"email": r.email, "role": r.role}));
            }
        }
        b.insert("recipients".into(), Json::Array(recipients));
        b.insert("channels".into(), json!(self.channels));
        b.insert("format".into(), json!(self.format));
        (b, rows)
    }

    /// The form with spare blank recipient rows to fill in. Only trailing
    /// blank rows are replaced, so a refusal still points at the right row.
    fn with_spare_rows(mut self) -> ReportForm {
        while self.recipients.last().is_some_and(|r| r.email.is_empty()) {
            self.recipients.pop();
        }
        let first_role = if self.recipients.is_empty() { "Admin" } else { "Reader" };
        for i in 0..SPARE_RECIPIENT_ROWS {
            let role = if i == 0 { first_role } else { "Reader" };
            self.recipients.push(RecipientRow { email: String::new(), role: role.to_owned() });
        }
        self
    }

    /// Reads and checks the form the way the API reads and checks a body.
    fn draft(&self, base: Option<&Draft>) -> Result<Draft, FieldError> {
        let (body, rows) = self.body(base.map(|b| b.kind));
        Draft::from_json(&body, base).map_err(|e| FieldError::new(e, &rows))
    }
}

/// A refusal pinned to the form control it is about.
#[derive(Debug, Clone)]
struct FieldError {
    control: String,
    message: String,
}

impl FieldError {
    /// Maps the API field (`schedule.time`, `recipients[1].email` …) to the
    /// form control; `rows` gives the form row of each listed recipient.
    fn new(e: Invalid, rows: &[usize]) -> FieldError {
        let field = e.field.as_str();
        let control = if let Some(rest) = field.strip_prefix("recipients[") {
            let (index, tail) = rest.split_once(']').unwrap_or((rest, ""));
            match (index.parse::<usize>().ok().and_then(|i| rows.get(i)), tail) {
                (Some(row), ".role") => format!("recipient_role_{row}"),
                (Some(row), _) => format!("recipient_email_{row}"),
                (None, _) => "recipients".to_owned(),
            }
        } else {
            let base = field.split('[').next().unwrap_or(field);
            match base {
                "filters.countries" => "filter_countries".to_owned(),
                b if b.starts_with("filters.") => format!("filter_{}", &b["filters.".len()..]),
                "filters" => "filters".to_owned(),
                b if b.starts_with("schedule.") => b["schedule.".len()..].to_owned(),
                "schedule" => "time".to_owned(),
                b => b.to_owned(),
            }
        };
        FieldError { control, message: e.message }
    }

    /// The template's `errors` map (control → message), empty without a refusal.
    fn view(e: Option<&FieldError>) -> minijinja::Value {
        let errors: BTreeMap<&str, &str> = e.map(|e| (e.control.as_str(), e.message.as_str())).into_iter().collect();
        minijinja::Value::from_serialize(&errors)
    }
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// "Every Monday at 08:00", in words.
fn schedule_text(s: &Schedule) -> String {
    let when = match s.frequency {
        Frequency::Daily => "Every day".to_owned(),
        Frequency::Weekly(w) => {
            let name = weekday_name(w);
            format!("Every {}{}", name[..1].to_ascii_uppercase(), &name[1..])
        }
        Frequency::Monthly(d) => format!("On the {} of each month", ordinal(d)),
    };
    format!("{when} at {}", s.time.format("%H:%M"))
}

fn local_time(at: DateTime<Utc>, tz: Tz) -> String {
    at.with_timezone(&tz).format("%a %-d %b %Y, %H:%M %Z").to_string()
}

/// Which of the site's integrations a report's slack and webhook channels reach.
fn reached(integrations: &[Integration], kind: Kind, event: &str) -> Vec<String> {
    integrations.iter().filter(|i| i.kind == kind && i.events.iter().any(|e| e == event)).map(|i| i.name.clone()).collect()
}

fn config_view(site: &Site, c: &ReportConfig, integrations: &[Integration], now: DateTime<Utc>) -> minijinja::Value {
    let spec = &c.draft.spec;
    let event = c.draft.kind.event();
    let next = c.draft.enabled.then(|| local_time(spec.schedule.next_after(site.timezone, now).at, site.timezone));
    let channels: Vec<_> = spec
        .channels
        .iter()
        .map(|ch| {
            let targets = match ch {
                Channel::Email => None,
                Channel::Slack => Some(reached(integrations, Kind::Slack, event)),
                Channel::Webhook => Some(reached(integrations, Kind::Webhook, event)),
            };
            minijinja::context! { name => ch.as_str(), targets => targets }
        })
        .collect();
    let f = &spec.filters;
    let mut filters = Vec::new();
    if let (Some(s), Some(e)) = (f.start, f.end) {
        filters.push(format!("{s} to {e}"));
    }
    if let Some(d) = f.device {
        filters.push(d.as_str().to_owned());
    }
    if !f.countries.is_empty() {
        filters.push(f.countries.join(", "));
    }
    if let Some(e) = f.event {
        filters.push(format!("event {}", e.as_str()));
    }
    minijinja::context! {
        id => c.id.to_string(),
        name => c.draft.name,
        kind => c.draft.kind.as_str(),
        event => event,
        enabled => c.draft.enabled,
        schedule => schedule_text(&spec.schedule),
        next_run => next,
        channels => channels,
        recipients => spec.recipients.iter().map(|r| minijinja::context! { email => r.email, role => r.role.as_str() }).collect::<Vec<_>>(),
        format => spec.format.as_str(),
        metrics => spec.metrics.iter().map(|m| m.label()).collect::<Vec<_>>(),
        filters => filters,
    }
}

fn site_view(site: &Site) -> minijinja::Value {
    minijinja::context! { id => site.id.to_string(), name => site.name, timezone => site.timezone.name() }
}

/// The choices the report form offers.
fn choices(integrations: &[Integration]) -> minijinja::Value {
    let of_kind = |kind: Kind| {
        integrations
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| minijinja::context! { name => i.name, events => i.events })
            .collect::<Vec<_>>()
    };
    minijinja::context! {
        types => ReportType::ALL.map(|t| minijinja::context! { value => t.as_str(), label => t.title() }),
        metrics => Metric::ALL.map(|m| minijinja::context! { value => m.as_str(), label => m.label() }),
        devices => Device::ALL.map(Device::as_str),
        events => EventType::ALL.map(EventType::as_str),
        weekdays => WEEKDAYS.map(weekday_name),
        roles => [Role::Admin, Role::Reader].map(Role::as_str),
        max_recipients => analytics::report::config::MAX_RECIPIENTS,
        formats => ["html", "pdf", "csv", "json"],
        slack => of_kind(Kind::Slack),
        webhook => of_kind(Kind::Webhook),
    }
}

async fn site_integrations(ctx: &Ctx, site: &Site) -> Result<Vec<Integration>, ApiError> {
    let seq = site.seq;
    ctx.read(move |c| integrations::list(c, seq)).await
}

/// The tab: every report of the site and, for an Admin, the form for a new one.
async fn render_list(
    ctx: &Ctx,
    viewer: &Viewer,
    site: Site,
    status: StatusCode,
    form: ReportForm,
    error: Option<FieldError>,
    notice: Option<&str>,
) -> Result<Response, ApiError> {
    let site_id = site.id;
    let configs = ctx.read(move |c| report::list(c, site_id)).await?;
    let integrations = site_integrations(ctx, &site).await?;
    let now = ctx.config.now();
    let views: Vec<_> = configs.iter().map(|c| config_view(&site, c, &integrations, now)).collect();
    let ctx = minijinja::context! {
        nav => "sites",
        site => site_view(&site),
        reports => views,
        form => minijinja::Value::from_serialize(form.with_spare_rows()),
        errors => FieldError::view(error.as_ref()),
        error => error.map(|e| e.message),
        choices => choices(&integrations),
        notice => notice,
    };
    page(status, "reports.html", Some(viewer), ctx)
}

/// GET /dashboard/sites/:id/reports
pub async fn reports_page(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, q: Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let notice = q.get("deleted").map(|_| "The report is deleted. Its runs stay stored.");
    render_list(&ctx, &viewer, site, StatusCode::OK, ReportForm::new_report(), None, notice).await
}

/// POST /dashboard/sites/:id/reports
pub async fn reports_create(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let (viewer, form) = admin_change(viewer, form)?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let typed = ReportForm::from_form(&form);
    let draft = match typed.draft(None) {
        Ok(d) => d,
        Err(e) => return render_list(&ctx, &viewer, site, StatusCode::BAD_REQUEST, typed, Some(e), None).await,
    };
    let (site_id, now) = (site.id, ctx.config.now());
    let created = ctx.writer.apply(move |c| report::create(c, site_id, draft, now)).await?;
    Ok(redirect(&format!("/dashboard/sites/{site_id}/reports/{}?created=1", created.id)))
}

async fn report_of(ctx: &Ctx, viewer: &Viewer, id: &str, rid: &str) -> Result<(Site, ReportConfig), ApiError> {
    let site = site_of(ctx, viewer, id).await?;
    let not_found = || ApiError::not_found("rid", "no report with this id on this site (it may have been deleted)");
    let rid = Uuid::parse_str(rid).map_err(|_| not_found())?;
    let site_id = site.id;
    let config = ctx.read(move |c| report::get(c, site_id, rid)).await?.ok_or_else(not_found)?;
    Ok((site, config))
}

/// A run with its deliveries; their errors (what the receiver answered) only
/// for Admins, as in the integrations' delivery log.
fn run_view(r: &RunSummary, deliveries: &[Delivery], tz: Tz, detailed: bool) -> minijinja::Value {
    let at = |s: &str| DateTime::parse_from_rfc3339(s).map(|t| local_time(t.with_timezone(&Utc), tz)).unwrap_or_else(|_| s.to_owned());
    minijinja::context! {
        id => r.id.to_string(),
        created => at(&r.created_at),
        created_at => r.created_at,
        period => if r.period.start == r.period.end { r.period.start.to_string() } else { format!("{} – {}", r.period.start, r.period.end) },
        trigger => r.trigger.replace('_', " "),
        enqueued => r.enqueued_at.is_some(),
        deliveries => deliveries.iter().map(|d| minijinja::context! {
            channel => d.channel.as_str(),
            recipient => d.recipient,
            state => d.state,
            attempts => d.attempts.len(),
            error => d.last_error.as_ref().filter(|_| detailed),
        }).collect::<Vec<_>>(),
    }
}

struct Notices<'a> {
    created: bool,
    saved: bool,
    sent: Option<&'a str>,
}

/// A report's page: its settings (a form an Admin can change), send now,
/// delete, and the run history.
#[allow(clippy::too_many_arguments)]
async fn render_report(
    ctx: &Ctx,
    viewer: &Viewer,
    site: Site,
    config: ReportConfig,
    status: StatusCode,
    form: ReportForm,
    error: Option<FieldError>,
    notices: Notices<'_>,
    offset: u64,
) -> Result<Response, ApiError> {
    let (config_id, seq) = (config.id, site.seq);
    let (runs, total) = ctx
        .read(move |c| {
            let (runs, total) = report::list_runs(c, config_id, RUNS_PER_PAGE, offset)?;
            let runs = runs
                .into_iter()
                .map(|r| Ok((outbox::of_notification(c, seq, &reports::dedupe_key(r.id))?, r)))
                .collect::<analytics::Result<Vec<_>>>()?;
            Ok((runs, total))
        })
        .await?;
    let integrations = site_integrations(ctx, &site).await?;
    let now = ctx.config.now();
    let sent = notices.sent.and_then(|s| runs.iter().find(|(_, r)| r.id.to_string() == s)).map(|(d, r)| run_view(r, d, site.timezone, viewer.is_admin()));
    let per_page = u64::from(RUNS_PER_PAGE);
    let ctx = minijinja::context! {
        nav => "sites",
        site => site_view(&site),
        report => config_view(&site, &config, &integrations, now),
        runs => runs.iter().map(|(d, r)| run_view(r, d, site.timezone, viewer.is_admin())).collect::<Vec<_>>(),
        total => total,
        newer => (offset > 0).then(|| offset.saturating_sub(per_page)),
        older => (offset + per_page < total).then_some(offset + per_page),
        form => minijinja::Value::from_serialize(form.with_spare_rows()),
        errors => FieldError::view(error.as_ref()),
        error => error.map(|e| e.message),
        choices => choices(&integrations),
        // `serve --demo` stores past runs of a report with recipients but hands
        // them to no outbox: only those runs have recipients and no deliveries.
        demo_history => ctx.demo_site.get() == Some(&site.id) && !config.draft.spec.recipients.is_empty(),
        created => notices.created,
        saved => notices.saved,
        sent => sent,
    };
    page(status, "report.html", Some(viewer), ctx)
}

/// GET /dashboard/sites/:id/reports/:rid — where Admin report e-mails link to.
pub async fn report_page(id: String, rid: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, q: Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let offset = q.int("offset", 0u64, u64::from(u32::MAX))?.unwrap_or(0);
    let (site, config) = report_of(&ctx, &viewer, &id, &rid).await?;
    let form = ReportForm::from_draft(&config.draft);
    let notices = Notices { created: q.get("created").is_some(), saved: q.get("saved").is_some(), sent: q.get("sent") };
    render_report(&ctx, &viewer, site, config, StatusCode::OK, form, None, notices, offset).await
}

/// POST /dashboard/sites/:id/reports/:rid — saves the report's settings.
pub async fn report_save(
    id: String,
    rid: String,
    ctx: Ctx,
    viewer: Result<Viewer, ApiError>,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let (viewer, form) = admin_change(viewer, form)?;
    let (site, config) = report_of(&ctx, &viewer, &id, &rid).await?;
    let typed = ReportForm::from_form(&form);
    let draft = match typed.draft(Some(&config.draft)) {
        Ok(d) => d,
        Err(e) => {
            let notices = Notices { created: false, saved: false, sent: None };
            return render_report(&ctx, &viewer, site, config, StatusCode::BAD_REQUEST, typed, Some(e), notices, 0).await;
        }
    };
    let (site_id, config_id, now) = (site.id, config.id, ctx.config.now());
    ctx.writer.apply(move |c| report::update(c, site_id, config_id, draft, now)).await?;
    Ok(redirect(&format!("/dashboard/sites/{site_id}/reports/{config_id}?saved=1")))
}

/// POST /dashboard/sites/:id/reports/:rid/send — "send now", like the API's.
pub async fn report_send(
    id: String,
    rid: String,
    ctx: Ctx,
    viewer: Result<Viewer, ApiError>,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let (viewer, _) = admin_change(viewer, form)?;
    let (site, config) = report_of(&ctx, &viewer, &id, &rid).await?;
    let (site_id, config_id) = (site.id, config.id);
    let run = reports::send_now(&ctx, site, config).await?;
    Ok(redirect(&format!("/dashboard/sites/{site_id}/reports/{config_id}?sent={}#runs", run.id)))
}

/// POST /dashboard/sites/:id/reports/:rid/delete
pub async fn report_delete(
    id: String,
    rid: String,
    ctx: Ctx,
    viewer: Result<Viewer, ApiError>,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let (viewer, _) = admin_change(viewer, form)?;
    let (site, config) = report_of(&ctx, &viewer, &id, &rid).await?;
    let (site_id, config_id, now) = (site.id, config.id, ctx.config.now());
    ctx.writer.apply(move |c| report::delete(c, site_id, config_id, now)).await?;
    Ok(redirect(&format!("/dashboard/sites/{site_id}/reports?deleted=1")))
}

fn with_headers(mut res: Response, content_type: &'static str, disposition: Option<String>) -> Response {
    let h = res.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    if let Some(v) = disposition.and_then(|d| HeaderValue::from_str(&d).ok()) {
        h.insert(http::header::CONTENT_DISPOSITION, v);
    }
    res
}

/// GET /dashboard/sites/:id/reports/:rid/runs/:run_id?format=html|pdf|json —
/// a stored run as `GET /v1/report-runs/:run_id` renders it: HTML to read,
/// PDF and JSON as downloads. Readers too: looking changes nothing.
pub async fn run_file(
    id: String,
    rid: String,
    run_id: String,
    ctx: Ctx,
    viewer: Result<Viewer, ApiError>,
    q: Query,
) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let format = q.get("format").unwrap_or("html");
    if !["json", "html", "pdf"].contains(&format) {
        return Err(ApiError::invalid("format", "invalid", "format must be html, pdf or json"));
    }
    let (_, config) = report_of(&ctx, &viewer, &id, &rid).await?;
    let not_found = || ApiError::not_found("run_id", "no run of this report with this id");
    let run_id = Uuid::parse_str(&run_id).map_err(|_| not_found())?;
    let doc: RunDocument = ctx.read(move |c| report::get_run(c, run_id)).await?.filter(|d| d.report_id == config.id).ok_or_else(not_found)?;
    let stem = reports::file_stem(&doc);
    match format {
        "html" => {
            let mut res = with_headers(Response::new(render::html(&doc, None).into()), "text/html; charset=utf-8", None);
            // The report is the e-mail's markup: inline styles, no script, nothing fetched.
            res.headers_mut().insert(
                "content-security-policy",
                HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'; form-action 'none'; base-uri 'none'"),
            );
            Ok(res)
        }
        "json" => {
            let body = serde_json::to_vec_pretty(&doc).map_err(ApiError::internal)?;
            Ok(with_headers(Response::new(body.into()), "application/json", Some(format!("attachment; filename=\"{stem}.json\""))))
        }
        _ => {
            let bytes = tokio::task::spawn_blocking(move || render::pdf(&doc)).await.map_err(ApiError::internal)??;
            Ok(with_headers(Response::new(bytes.into()), "application/pdf", Some(format!("attachment; filename=\"{stem}.pdf\""))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> ReportForm {
        let body: String = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
        ReportForm::from_form(&Form::parse(body.as_bytes()))
    }

    #[test]
    fn a_refusal_points_at_the_form_control_that_caused_it() {
        let typed = form(&[
            ("type", "daily"),
            ("time", "08:00"),
            ("recipient_email", "ana@example.com"),
            ("recipient_role", "Admin"),
            ("recipient_email", ""),
            ("recipient_role", "Reader"),
            ("recipient_email", "not-an-address"),
            ("recipient_role", "Reader"),
            ("channels", "email"),
            ("format", "html"),
        ]);
        let e = typed.draft(None).unwrap_err();
        assert_eq!(e.control, "recipient_email_2", "the third row; the blank second row is skipped");
        assert_eq!(e.message, "email must be an e-mail address such as ana@example.com");

        let e = form(&[("type", "custom"), ("frequency", "weekly"), ("weekday", "friday"), ("time", "25:00"), ("channels", "slack"), ("format", "csv"), ("metrics", "sessions")])
            .draft(None)
            .unwrap_err();
        assert_eq!((e.control.as_str(), e.message.as_str()), ("time", "schedule.time must be HH:MM (24-hour clock)"));

        let e = form(&[("type", "custom"), ("frequency", "daily"), ("time", "07:30"), ("channels", "webhook"), ("format", "json"), ("metrics", "by_device"), ("filter_countries", "FR, D1")])
            .draft(None)
            .unwrap_err();
        assert_eq!((e.control.as_str(), e.message.as_str()), ("filter_countries", "a country is a two-letter ISO 3166 code"));

        let e = form(&[("type", "custom"), ("frequency", "daily"), ("time", "07:30"), ("channels", "webhook"), ("format", "json")]).draft(None).unwrap_err();
        assert_eq!((e.control.as_str(), e.message.as_str()), ("metrics", "choose at least one metric"));
    }

    #[test]
    fn a_form_reads_as_the_api_body_and_a_stored_report_reads_back_as_the_form() {
        let typed = form(&[
            ("name", "Friday numbers"),
            ("type", "custom"),
            ("enabled", "on"),
            ("metrics", "sessions"),
            ("metrics", "by_country"),
            ("filter_device", "mobile"),
            ("filter_countries", "fr de"),
            ("filter_event", ""),
            ("frequency", "monthly"),
            ("weekday", "monday"),
            ("day_of_month", "15"),
            ("time", "09:45"),
            ("recipient_email", "ana@example.com"),
            ("recipient_role", "Reader"),
            ("channels", "email"),
            ("channels", "slack"),
            ("format", "pdf"),
        ]);
        let draft = typed.draft(None).unwrap();
        let api = json!({
            "name": "Friday numbers", "type": "custom", "enabled": true, "metrics": ["sessions", "by_country"],
            "filters": {"device": "mobile", "countries": ["FR", "DE"]},
            "schedule": {"frequency": "monthly", "day_of_month": 15, "time": "09:45"},
            "recipients": [{"email": "ana@example.com", "role": "Reader"}], "channels": ["email", "slack"], "format": "pdf"
        });
        assert_eq!(draft, Draft::from_json(api.as_object().unwrap(), None).unwrap());
        assert_eq!(schedule_text(&draft.spec.schedule), "On the 15th of each month at 09:45");
        let back = ReportForm::from_draft(&draft);
        assert_eq!(back.draft(Some(&draft)).unwrap(), draft, "saving an unchanged form changes nothing");
        assert_eq!(back.filter_countries, "FR, DE");

        // A weekly report keeps its weekday; the form's frequency field is for custom reports.
        let weekly = form(&[("type", "weekly"), ("frequency", "daily"), ("weekday", "friday"), ("time", "07:00"), ("channels", "webhook"), ("format", "html")])
            .draft(None)
            .unwrap();
        assert_eq!(weekly.spec.schedule.frequency, Frequency::Weekly(Weekday::Fri));
        assert_eq!((weekly.name.as_str(), weekly.enabled), ("Weekly report", false));
    }
}
