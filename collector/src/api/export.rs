//! Exports of a site's analytics as a downloadable file: CSV, JSON, PDF or
//! the complete-history ZIP.
//!
//! The parameters are all checked before the answer starts, so every bad
//! request is a clean 400. CSV and ZIP are then streamed: a blocking task
//! writes them on a pooled read connection into a bounded channel that feeds
//! the HTTP body, so memory stays flat however long the period, and a client
//! that goes away stops the query.

use std::io;

use analytics::export::{self, zip::Archive, Selection, Summary};
use analytics::model::{Device, Scope, Site};
use analytics::period::Period;
use bytes::Bytes;
use chrono::{Days, NaiveDate, Utc};
use http::header::{HeaderValue, CONTENT_DISPOSITION, CONTENT_TYPE};
use http::StatusCode;
use tokio::sync::mpsc;
use warp::reply::Response;
use warp::Reply;

use super::analytics::MAX_DAYS;
use super::sites::load_site;
use super::Query;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Ctx;

/// The period when `start` and `end` are absent: the last 30 days.
const DEFAULT_DAYS: u32 = 30;
/// Bytes collected before a chunk goes to the client, and chunks in flight.
const CHUNK: usize = 64 * 1024;
const CHUNKS_IN_FLIGHT: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Csv,
    Json,
    Pdf,
    Zip,
}

impl Format {
    fn parse(s: &str) -> Option<Format> {
        match s.to_ascii_lowercase().as_str() {
            "csv" => Some(Format::Csv),
            "json" => Some(Format::Json),
            "pdf" => Some(Format::Pdf),
            "zip" => Some(Format::Zip),
            _ => None,
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Json => "json",
            Format::Pdf => "pdf",
            Format::Zip => "zip",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8",
            Format::Json => "application/json",
            Format::Pdf => "application/pdf",
            Format::Zip => "application/zip",
        }
    }
}

/// GET /v1/sites/:id/export
pub async fn export_get(id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let request = ExportRequest::parse(&q)?;
    let site = load_site(&ctx, &p, &id).await?;
    request.respond(&ctx, site).await
}

/// An export's parameters, checked before the site is looked up. The
/// dashboard's download button goes through the same two steps.
pub struct ExportRequest {
    format: Format,
    device: Option<Device>,
    countries: Vec<String>,
    start: Option<NaiveDate>,
    end: Option<NaiveDate>,
}

impl ExportRequest {
    pub fn parse(q: &Query) -> Result<ExportRequest, ApiError> {
        let format = match q.get("format").map(str::trim).filter(|f| !f.is_empty()) {
            None => return Err(ApiError::required("format")),
            Some(f) => Format::parse(f).ok_or_else(|| ApiError::invalid("format", "invalid", "format must be csv, json, pdf or zip"))?,
        };
        let device = q
            .get("device")
            .filter(|d| !d.is_empty())
            .map(|d| Device::parse(d).ok_or_else(|| ApiError::invalid("device", "invalid", "device must be one of desktop, mobile, tablet")))
            .transpose()?;
        Ok(ExportRequest { format, device, countries: countries(q)?, start: date(q, "start")?, end: date(q, "end")? })
    }

    /// The file of `site` (already checked to be the caller's).
    pub async fn respond(self, ctx: &Ctx, site: Site) -> Result<Response, ApiError> {
        let ExportRequest { format, device, countries, start, end } = self;
        let period = period(&site, start, end)?;
        let sel = Selection { period, device, countries };
        let file_name = sel.file_name(&site, format.extension());

        let body = match format {
            Format::Json => {
                let export = ctx
                    .read(move |c| Ok(export::json::build(&sel, &Summary::load(c, &site, &sel)?)))
                    .await?;
                let json = serde_json::to_vec_pretty(&export).map_err(ApiError::internal)?;
                warp::reply::Response::new(json.into())
            }
            Format::Pdf => {
                let pdf = ctx.read(move |c| export::render_pdf(&site, &sel, &Summary::load(c, &site, &sel)?)).await?;
                warp::reply::Response::new(pdf.into())
            }
            Format::Csv => stream(ctx, move |c, out| export::csv::write(c, &site, &sel, out).map(drop)),
            Format::Zip => {
                let raw_retention_days = ctx.config.raw_retention_days;
                stream(ctx, move |c, out| {
                    let archive = Archive { site: &site, selection: &sel, generated_at: Utc::now(), raw_retention_days };
                    export::zip::write(c, &archive, out).map(drop)
                })
            }
        };
        let mut res = body.into_response();
        *res.status_mut() = StatusCode::OK;
        let headers = res.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
        let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\"")).map_err(ApiError::internal)?;
        headers.insert(CONTENT_DISPOSITION, disposition);
        Ok(res)
    }
}

/// Runs `write` on a read connection in a blocking task and answers with
/// what it writes, chunk by chunk, as it writes it.
fn stream<F>(ctx: &Ctx, write: F) -> Response
where
    F: FnOnce(&analytics::Connection, &mut ChannelWriter) -> analytics::Result<()> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<io::Result<Bytes>>(CHUNKS_IN_FLIGHT);
    let store = ctx.store.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = ChannelWriter { tx, buf: Vec::with_capacity(CHUNK) };
        let result = store.read(|c| write(c, &mut out)).and_then(|()| Ok(out.send()?));
        if let Err(e) = result {
            // The status line has gone out: all that is left is to cut the body
            // short, which the client sees as an incomplete download.
            tracing::warn!(error = %e, "export stopped");
            let _ = out.tx.blocking_send(Err(io::Error::other(e.to_string())));
        }
    });
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    warp::reply::stream(body).into_response()
}

/// An `io::Write` that hands the bytes to the response body in chunks; it
/// blocks while the client is slower than the query, and fails once the
/// client has gone.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client closed the connection"))
    }
}

impl io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn date(q: &Query, name: &str) -> Result<Option<NaiveDate>, ApiError> {
    let Some(raw) = q.get(name).map(str::trim).filter(|s| !s.is_empty()) else { return Ok(None) };
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .map(Some)
        .map_err(|_| ApiError::invalid(name, "invalid", format!("{name} must be a date YYYY-MM-DD")))
}

/// The period from `start` and `end` (either may be absent), at most
/// `MAX_DAYS` long: the aggregate retention.
fn period(site: &Site, start: Option<NaiveDate>, end: Option<NaiveDate>) -> Result<Period, ApiError> {
    let back = |d: NaiveDate| d.checked_sub_days(Days::new(u64::from(DEFAULT_DAYS - 1))).unwrap_or(d);
    let (start, end) = match (start, end) {
        (Some(s), Some(e)) => (s, e),
        (Some(s), None) => (s, Period::last_days(1, site.timezone, Utc::now()).end),
        (None, Some(e)) => (back(e), e),
        (None, None) => {
            let p = Period::last_days(DEFAULT_DAYS, site.timezone, Utc::now());
            (p.start, p.end)
        }
    };
    if start > end {
        return Err(ApiError::invalid("start", "out_of_range", "start must not be after end"));
    }
    if (end - start).num_days() >= i64::from(MAX_DAYS) {
        return Err(ApiError::invalid("start", "out_of_range", format!("a period covers at most {MAX_DAYS} days")));
    }
    Ok(Period::new(start, end, site.timezone))
}

/// `country` may repeat; each is an ISO 3166 alpha-2 code (any case).
fn countries(q: &Query) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<String> = Vec::new();
    for raw in q.all("country") {
        let code = raw.trim().to_ascii_uppercase();
        if code.is_empty() {
            continue;
        }
        if code.len() != 2 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(ApiError::invalid("country", "invalid", "country must be a two-letter ISO 3166 code"));
        }
        if !out.contains(&code) {
            out.push(code);
        }
    }
    Ok(out)
}
