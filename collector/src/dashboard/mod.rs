//! The web dashboard under `/dashboard/`: server-rendered HTML pages
//! (minijinja templates compiled into the binary), a session cookie instead of
//! an API key, a CSRF token on every form, and the Admin/Reader roles checked
//! here, on the server, for every change.
//!
//! Pages read through the same `analytics` functions as the API, so the
//! numbers always agree. Errors are the API's `ApiError` values, rendered as
//! an HTML page instead of a JSON body; a missing session sends the browser to
//! the login page.

mod chart;
mod exports;
mod flash;
mod integrations;
mod keys;
mod login;
mod preview;
mod reports;
mod settings;
mod sites;
mod templates;
mod wall;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use analytics::accounts::Role;
use analytics::web_sessions::{self, WebSession};
use bytes::Bytes;
use chrono::Utc;
use http::{HeaderValue, StatusCode};
use minijinja::Value;
use serde::Serialize;
use warp::filters::BoxedFilter;
use warp::path::FullPath;
use warp::reply::Response;
use warp::{Filter, Reply};

use crate::error::ApiError;
use crate::state::Ctx;

use flash::{Flash, FlashPage, SessionRef};
pub use login::LoginThrottle;
pub use preview::{live_draft, preview_token};

/// The cookie that carries the session token.
pub const SESSION_COOKIE: &str = "postern_session";
/// Form bodies are small; anything bigger is refused with 413.
const FORM_LIMIT: usize = 64 * 1024;

pub use crate::gateway::ClientAddr;

/// The signed-in user of a request.
#[derive(Debug, Clone)]
pub struct Viewer {
    session: WebSession,
    /// What the request's cookie token gives: the session's name in the
    /// database and the key of its one-time messages.
    token: SessionRef,
}

impl Viewer {
    fn account_id(&self) -> i64 {
        self.session.user.account_id
    }

    fn is_admin(&self) -> bool {
        self.session.user.role == Role::Admin
    }

    /// Every change needs an Admin; a Reader is refused with 403.
    fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::forbidden(None, "admin_only", "only an Admin can change this; your role is Reader"))
        }
    }

    /// A form must carry this session's CSRF token.
    fn check_csrf(&self, form: &Form) -> Result<(), ApiError> {
        if form.get("csrf").is_some_and(|t| same(t, &self.session.csrf_token)) {
            Ok(())
        } else {
            Err(csrf_refused())
        }
    }

    /// Keeps a one-time message for the page this form redirects to, on the
    /// write connection of the change it reports.
    fn flash(&self, c: &analytics::Connection, f: &Flash) -> analytics::Result<()> {
        flash::keep(c, &self.token, f)
    }

    /// This session's one-time message for `page`, if it has one.
    async fn take_flash(&self, ctx: &Ctx, page: FlashPage) -> Result<Option<Flash>, ApiError> {
        flash::take(ctx, &self.token, page).await
    }

    /// What every page's layout needs to know about the viewer.
    fn context(&self) -> Value {
        minijinja::context! {
            email => self.session.user.email,
            account => self.session.user.account_name,
            role => self.session.user.role.as_str(),
            is_admin => self.is_admin(),
            csrf => self.session.csrf_token,
        }
    }
}

/// The start of every change: a signed-in viewer, the form (413 past the
/// limit), its CSRF token, then the role (Admin), each refused with its own
/// error in that order.
fn admin_change(viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<(Viewer, Form), ApiError> {
    let viewer = viewer?;
    let form = form?;
    viewer.check_csrf(&form)?;
    viewer.require_admin()?;
    Ok((viewer, form))
}

fn csrf_refused() -> ApiError {
    ApiError::forbidden(Some("csrf"), "csrf", "the form's security token is missing or stale; reload the page and try again")
}

/// Compares two secrets in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A URL-encoded form body.
#[derive(Debug, Default)]
pub struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Form {
        Form(url::form_urlencoded::parse(body).into_owned().collect())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.0.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// A text field, trimmed; empty counts as absent.
    fn text(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }
}

/// Every dashboard route, plus `/` sending people to the dashboard.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Result<Response, ApiError>,)> {
    use warp::{get, path, post};
    let throttle = Arc::new(LoginThrottle::default());
    let c = move || {
        let ctx = ctx.clone();
        warp::any().map(move || ctx.clone())
    };
    let t = move || {
        let throttle = throttle.clone();
        warp::any().map(move || throttle.clone())
    };
    let v = {
        let c = c.clone();
        move || c().and(warp::cookie::optional::<String>(SESSION_COOKIE)).then(viewer)
    };

    let auth = path!("dashboard" / "login")
        .and(get())
        .and(c())
        .and(warp::cookie::optional::<String>(SESSION_COOKIE))
        .and(warp::header::headers_cloned())
        .and(query())
        .then(login::login_page)
        .or(path!("dashboard" / "login")
            .and(post())
            .and(c())
            .and(t())
            .and(client_addr())
            .and(warp::header::headers_cloned())
            .and(form())
            .then(login::login_submit))
        .unify()
        .or(path!("dashboard" / "logout").and(post()).and(c()).and(v()).and(warp::header::headers_cloned()).and(form()).then(login::logout))
        .unify()
        .boxed();

    let site_pages = path!("dashboard")
        .and(get())
        .and(c())
        .and(v())
        .then(sites::sites_page)
        .or(path!("dashboard" / "sites").and(post()).and(c()).and(v()).and(form()).then(sites::sites_create))
        .unify()
        .or(path!("dashboard" / "sites" / String).and(get()).and(c()).and(v()).and(query()).then(sites::site_page))
        .unify()
        .or(path!("dashboard" / "sites" / String / "wall").and(get()).and(c()).and(v()).and(query()).then(wall::wall_page))
        .unify()
        .or(path!("dashboard" / "sites" / String / "wall").and(post()).and(c()).and(v()).and(form()).then(wall::wall_save))
        .unify()
        .or(path!("dashboard" / "sites" / String / "settings")
            .and(get())
            .and(c())
            .and(v())
            .and(warp::header::headers_cloned())
            .and(query())
            .then(settings::settings_page))
        .unify()
        .or(path!("dashboard" / "sites" / String / "settings")
            .and(post())
            .and(c())
            .and(v())
            .and(warp::header::headers_cloned())
            .and(form())
            .then(settings::settings_save))
        .unify()
        .or(path!("dashboard" / "sites" / String / "export").and(get()).and(c()).and(v()).then(exports::export_page))
        .unify()
        .or(path!("dashboard" / "sites" / String / "export" / "download")
            .and(get())
            .and(c())
            .and(v())
            .and(query())
            .then(exports::export_download))
        .unify()
        .or(path!("dashboard" / "sites" / String / "integrations").and(get()).and(c()).and(v()).then(integrations::integrations_page))
        .unify()
        .or(path!("dashboard" / "sites" / String / "integrations")
            .and(post())
            .and(c())
            .and(v())
            .and(form())
            .then(integrations::integrations_create))
        .unify()
        .or(path!("dashboard" / "sites" / String / "integrations" / String / "log")
            .and(get())
            .and(c())
            .and(v())
            .then(integrations::integration_log))
        .unify()
        .or(path!("dashboard" / "sites" / String / "integrations" / String / "test")
            .and(post())
            .and(c())
            .and(v())
            .and(form())
            .then(integrations::integrations_test))
        .unify()
        .or(path!("dashboard" / "sites" / String / "integrations" / String / "delete")
            .and(post())
            .and(c())
            .and(v())
            .and(form())
            .then(integrations::integrations_delete))
        .unify()
        .or(path!("dashboard" / "sites" / String / "delete").and(post()).and(c()).and(v()).and(form()).then(settings::site_delete))
        .unify()
        .boxed();

    let key_pages = path!("dashboard" / "settings" / "api")
        .and(get())
        .and(c())
        .and(v())
        .then(keys::keys_page)
        .or(path!("dashboard" / "settings" / "api" / "keys").and(post()).and(c()).and(v()).and(form()).then(keys::keys_create))
        .unify()
        .or(path!("dashboard" / "settings" / "api" / "keys" / String / "revoke")
            .and(post())
            .and(c())
            .and(v())
            .and(form())
            .then(keys::keys_revoke))
        .unify()
        .boxed();

    let report_pages = path!("dashboard" / "sites" / String / "reports")
        .and(get())
        .and(c())
        .and(v())
        .and(query())
        .then(reports::reports_page)
        .or(path!("dashboard" / "sites" / String / "reports").and(post()).and(c()).and(v()).and(form()).then(reports::reports_create))
        .unify()
        .or(path!("dashboard" / "sites" / String / "reports" / String).and(get()).and(c()).and(v()).and(query()).then(reports::report_page))
        .unify()
        .or(path!("dashboard" / "sites" / String / "reports" / String).and(post()).and(c()).and(v()).and(form()).then(reports::report_save))
        .unify()
        .or(path!("dashboard" / "sites" / String / "reports" / String / "send").and(post()).and(c()).and(v()).and(form()).then(reports::report_send))
        .unify()
        .or(path!("dashboard" / "sites" / String / "reports" / String / "delete")
            .and(post())
            .and(c())
            .and(v())
            .and(form())
            .then(reports::report_delete))
        .unify()
        .or(path!("dashboard" / "sites" / String / "reports" / String / "runs" / String)
            .and(get())
            .and(c())
            .and(v())
            .and(query())
            .then(reports::run_file))
        .unify()
        .boxed();

    let preview_pages = path!("dashboard" / "sites" / String / "wall" / "preview")
        .and(post())
        .and(c())
        .and(v())
        .and(form())
        .then(preview::preview_create)
        .or(path!("dashboard" / "sites" / String / "wall" / "preview" / String)
            .and(get())
            .and(c())
            .and(v())
            .and(query())
            .then(preview::preview_page))
        .unify()
        .or(path!("dashboard" / "sites" / String / "wall" / "preview" / String / ..)
            .and(get())
            .and(path::tail())
            .and(c())
            .and(query())
            .then(preview::sandbox_get))
        .unify()
        .or(path!("dashboard" / "sites" / String / "wall" / "preview" / String / ..)
            .and(post())
            .and(path::tail())
            .then(|_, _, tail| preview::sandbox_post(tail)))
        .unify()
        .boxed();

    let assets = path!("dashboard" / "assets" / String).and(get()).map(templates::asset);
    let unknown = warp::path("dashboard").and(warp::any()).map(|| Err(ApiError::not_found("path", "there is no such page")));

    let pages = auth.or(site_pages).unify().or(key_pages).unify().or(report_pages).unify().or(preview_pages).unify().or(assets).unify().or(unknown).unify();
    let home = path::end().and(get()).map(|| Ok(redirect("/dashboard/")));

    warp::path::full()
        .and(pages)
        .map(|full: FullPath, r: Result<Response, ApiError>| Ok(r.unwrap_or_else(|e| error_page(e, full.as_str()))))
        .or(home)
        .unify()
        .boxed()
}

fn client_addr() -> impl Filter<Extract = (Option<IpAddr>,), Error = Infallible> + Clone {
    warp::ext::optional::<ClientAddr>().map(|a: Option<ClientAddr>| a.map(|a| a.0))
}

/// The form body, or 413 past the limit.
fn form() -> impl Filter<Extract = (Result<Form, ApiError>,), Error = warp::Rejection> + Clone {
    crate::api::body(FORM_LIMIT).map(|b: Result<Bytes, ApiError>| b.map(|b| Form::parse(&b)))
}

fn query() -> impl Filter<Extract = (crate::api::Query,), Error = Infallible> + Clone {
    crate::api::query()
}

/// The session behind the cookie; without one the request is unauthenticated
/// and its page sends the browser to the login form.
async fn viewer(ctx: Ctx, token: Option<String>) -> Result<Viewer, ApiError> {
    let token_ref = token.as_deref().map(SessionRef::new);
    let session = session(ctx, token).await?;
    token_ref.map(|token| Viewer { session, token }).ok_or_else(|| ApiError::unauthenticated("required", "please sign in"))
}

/// The live session behind the cookie's token.
async fn session(ctx: Ctx, token: Option<String>) -> Result<WebSession, ApiError> {
    let sign_in = || ApiError::unauthenticated("required", "please sign in");
    let token = token.filter(|t| !t.is_empty() && t.len() <= 128).ok_or_else(sign_in)?;
    ctx.read(move |c| web_sessions::find(c, &token, Utc::now())).await?.ok_or_else(sign_in)
}

/// Renders a page with the layout's viewer block filled in.
fn page(status: StatusCode, template: &str, viewer: Option<&Viewer>, ctx: Value) -> Result<Response, ApiError> {
    let viewer = viewer.map(Viewer::context).unwrap_or(Value::UNDEFINED);
    let body = templates::render(template, minijinja::context! { viewer => viewer, ..ctx })?;
    Ok(html(status, body))
}

fn html(status: StatusCode, body: String) -> Response {
    let mut res = warp::reply::with_status(warp::reply::html(body), status).into_response();
    let h = res.headers_mut();
    // Pages show account data and one-time secrets: never cache them.
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'self'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    res
}

/// 303 See Other: after a form, the browser follows with a GET.
fn redirect(location: &str) -> Response {
    let mut res = warp::reply::with_status(warp::reply(), StatusCode::SEE_OTHER).into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        res.headers_mut().insert(http::header::LOCATION, v);
    }
    res
}

/// An error as a page: a missing session goes to the login form (coming back
/// here afterwards, for pages that can be reloaded), anything else is shown.
fn error_page(e: ApiError, path: &str) -> Response {
    if e.status == StatusCode::UNAUTHORIZED && e.field.as_deref() == Some("Authorization") {
        let next: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
        return redirect(&format!("/dashboard/login?next={next}"));
    }
    let retry_after = e.retry_after;
    let ctx = minijinja::context! { status => e.status.as_u16(), title => e.status.canonical_reason(), message => e.message };
    let mut res = page(e.status, "error.html", None, ctx)
        .unwrap_or_else(|_| warp::reply::with_status(e.message.clone(), e.status).into_response());
    if let Some(secs) = retry_after {
        res.headers_mut().insert(http::header::RETRY_AFTER, secs.into());
    }
    res
}

/// A refused form's error for `form_errors.html`: the message, and the field
/// it is shown next to.
fn form_error(e: &ApiError) -> Value {
    minijinja::context! { field => e.field, message => e.message }
}

/// A value for a template from anything serializable.
fn value<T: Serialize>(v: &T) -> Value {
    Value::from_serialize(v)
}
