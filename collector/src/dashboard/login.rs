//! Signing in and out, and login throttling.
//!
//! The login form has no session yet, so its CSRF token is a double-submit
//! cookie: a random value set with the form and expected back in it.
//!
//! Every attempt is counted before its password is checked, so a burst of
//! parallel guesses gets no more checks than sequential ones; the checks
//! themselves run a few at a time ([`PasswordSlots`]). The counts are per
//! e-mail address and client address together (someone guessing from one
//! place locks out that place only), with a higher ceiling per e-mail address
//! from anywhere and one per client address. They are kept in the database
//! ([`analytics::shared`]), so guesses spread over several nodes count
//! together and a restart forgets none.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use analytics::accounts;
use analytics::web_sessions;
use chrono::Utc;
use http::{HeaderMap, HeaderValue, StatusCode};
use warp::reply::Response;

use super::{page, redirect, same, Form, Viewer, SESSION_COOKIE};
use crate::api::Query;
use crate::auth::PasswordSlots;
use crate::error::ApiError;
use crate::state::Ctx;

const LOGIN_COOKIE: &str = "postern_login";
/// How long a session lasts after signing in.
const SESSION_HOURS: i64 = 12;
/// Sign-in attempts are counted over this window...
const THROTTLE_WINDOW_SECS: i64 = 15 * 60;
/// ...and past this many for one e-mail address from one client address,
const MAX_ATTEMPTS_PER_EMAIL_AND_ADDRESS: u32 = 5;
/// or this many for one e-mail address from anywhere (20 client addresses at
/// their limit: one guesser alone cannot lock the account out everywhere),
const MAX_ATTEMPTS_PER_EMAIL: u32 = 100;
/// or this many from one client address whatever the e-mail, further attempts
/// are refused until the window ends.
const MAX_ATTEMPTS_PER_ADDRESS: u32 = 20;

/// The slots password checks run in (per node: they bound this machine's CPU).
pub struct LoginThrottle {
    slots: PasswordSlots,
}

impl Default for LoginThrottle {
    fn default() -> LoginThrottle {
        LoginThrottle { slots: PasswordSlots::per_cpu() }
    }
}

/// Counts an attempt against every key at once, unless one of them is at its
/// limit: then nothing is counted and the seconds to wait are returned.
async fn begin(ctx: &Ctx, keys: &[(String, u32)], now: i64) -> Result<Result<(), u64>, ApiError> {
    let keys = keys.to_vec();
    ctx.writer.apply(move |c| analytics::shared::begin_sign_in(c, &keys, THROTTLE_WINDOW_SECS, now)).await
}

/// Takes back an attempt [`begin`] counted (it succeeded, or its password was
/// never checked); `forgive` also forgets the earlier ones of the first key.
async fn give_back(ctx: &Ctx, keys: &[(String, u32)], now: i64, forgive: bool) -> Result<(), ApiError> {
    let keys: Vec<String> = keys.iter().map(|(k, _)| k.clone()).collect();
    ctx.writer
        .apply(move |c| {
            analytics::shared::give_back_sign_in(c, &keys, now)?;
            match keys.first().filter(|_| forgive) {
                Some(pair) => analytics::shared::clear_sign_in(c, pair),
                None => Ok(()),
            }
        })
        .await
}

/// The throttle's keys for one attempt, each with its limit; the first is the
/// (e-mail, address) pair.
fn throttle_keys(email: &str, addr: Option<IpAddr>) -> Vec<(String, u32)> {
    let place = addr.map_or_else(|| "unknown".to_owned(), |ip| crate::rate_limit::client_network(ip).to_string());
    vec![
        (format!("pair:{place} {email}"), MAX_ATTEMPTS_PER_EMAIL_AND_ADDRESS),
        (format!("email:{email}"), MAX_ATTEMPTS_PER_EMAIL),
        (format!("addr:{place}"), MAX_ATTEMPTS_PER_ADDRESS),
    ]
}

/// Only a path inside the dashboard may be the place to return to.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with("/dashboard") && !n.contains("//") && !n.contains('\\') => n,
        _ => "/dashboard/",
    }
}

fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Cookies get `Secure` when the browser uses https.
fn cookie(secure: bool, name: &str, value: &str, path: &str, same_site: &str, max_age: i64) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{secure}"))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn login_form(status: StatusCode, secure: bool, token: &str, email: &str, next: &str, error: Option<&str>) -> Result<Response, ApiError> {
    let ctx = minijinja::context! { csrf => token, email => email, next => next, error => error };
    let mut res = page(status, "login.html", None, ctx)?;
    res.headers_mut()
        .append(http::header::SET_COOKIE, cookie(secure, LOGIN_COOKIE, token, "/dashboard/login", "Strict", 3600));
    Ok(res)
}

/// GET /dashboard/login
pub async fn login_page(ctx: Ctx, session: Option<String>, headers: HeaderMap, q: Query) -> Result<Response, ApiError> {
    let next = safe_next(q.get("next")).to_owned();
    let secure = ctx.config.https(&headers);
    if super::session(ctx, session).await.is_ok() {
        return Ok(redirect(&next));
    }
    login_form(StatusCode::OK, secure, &web_sessions::random_token(), "", &next, None)
}

/// POST /dashboard/login
pub async fn login_submit(
    ctx: Ctx,
    throttle: Arc<LoginThrottle>,
    addr: Option<IpAddr>,
    headers: HeaderMap,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let form = form?;
    let secure = ctx.config.https(&headers);
    let expected = cookie_value(&headers, LOGIN_COOKIE);
    if !form.get("csrf").zip(expected.as_deref()).is_some_and(|(a, b)| same(a, b)) {
        return Err(super::csrf_refused());
    }
    let token = expected.unwrap_or_default();
    let next = safe_next(form.get("next")).to_owned();
    let email = form.text("email").unwrap_or_default().to_lowercase();
    let password = form.get("password").unwrap_or_default().to_owned();
    if email.is_empty() || password.is_empty() {
        let msg = "Enter your e-mail address and password.";
        return login_form(StatusCode::BAD_REQUEST, secure, &token, &email, &next, Some(msg));
    }

    let now = Utc::now().timestamp();
    let keys = throttle_keys(&email, addr);
    if let Err(wait) = begin(&ctx, &keys, now).await? {
        // The form again, so the message sits where the user is looking and they can retry later.
        let msg = format!("Too many failed sign-ins. Try again in {} minutes.", wait.div_ceil(60));
        let mut res = login_form(StatusCode::TOO_MANY_REQUESTS, secure, &token, &email, &next, Some(&msg))?;
        res.headers_mut().insert(http::header::RETRY_AFTER, wait.into());
        return Ok(res);
    }

    let lookup = email.clone();
    let user = ctx.read(move |c| accounts::find_user_by_email(c, &lookup)).await?;
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    let Some(matched) = throttle.slots.verify(password, hash).await? else {
        give_back(&ctx, &keys, now, false).await?;
        ctx.metrics.password_checks_refused.fetch_add(1, Ordering::Relaxed);
        let msg = "Too many people are signing in at this moment. Try again in a few seconds.";
        let mut res = login_form(StatusCode::SERVICE_UNAVAILABLE, secure, &token, &email, &next, Some(msg))?;
        res.headers_mut().insert(http::header::RETRY_AFTER, 1.into());
        return Ok(res);
    };
    ctx.metrics.password_verifications.fetch_add(1, Ordering::Relaxed);

    let Some(user) = user.filter(|_| matched) else {
        return login_form(StatusCode::UNAUTHORIZED, secure, &token, &email, &next, Some("Wrong e-mail address or password."));
    };
    // A success is no failure, and forgives this place's earlier failures for this e-mail.
    give_back(&ctx, &keys, now, true).await?;
    let ttl = chrono::Duration::hours(SESSION_HOURS);
    let session = ctx.writer.apply(move |c| web_sessions::open(c, user.id, ttl, Utc::now())).await?;
    let mut res = redirect(&next);
    let h = res.headers_mut();
    h.append(http::header::SET_COOKIE, cookie(secure, SESSION_COOKIE, &session.token, "/dashboard", "Lax", ttl.num_seconds()));
    h.append(http::header::SET_COOKIE, cookie(secure, LOGIN_COOKIE, "", "/dashboard/login", "Strict", 0));
    Ok(res)
}

/// POST /dashboard/logout
pub async fn logout(ctx: Ctx, viewer: Result<Viewer, ApiError>, headers: HeaderMap, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let viewer = viewer?;
    viewer.check_csrf(&form?)?;
    let token = cookie_value(&headers, SESSION_COOKIE).unwrap_or_default();
    let secure = ctx.config.https(&headers);
    ctx.writer.apply(move |c| web_sessions::close(c, &token)).await?;
    let mut res = redirect("/dashboard/login");
    res.headers_mut().append(http::header::SET_COOKIE, cookie(secure, SESSION_COOKIE, "", "/dashboard", "Lax", 0));
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_place_guessing_an_email_locks_out_that_place_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = analytics::Store::open(dir.path().join("throttle.db")).unwrap();
        let mut writer = store.open_writer(analytics::store::Durability::Normal).unwrap();
        let mut begin = |email: &str, ip: &str| {
            let keys = throttle_keys(email, Some(ip.parse().unwrap()));
            writer.run(|c| analytics::shared::begin_sign_in(c, &keys, THROTTLE_WINDOW_SECS, 0)).unwrap()
        };
        for _ in 0..MAX_ATTEMPTS_PER_EMAIL_AND_ADDRESS {
            begin("ann@example.com", "203.0.113.7").unwrap();
        }
        assert!(begin("ann@example.com", "203.0.113.7").is_err());
        assert_eq!(begin("ann@example.com", "198.51.100.9"), Ok(()));
        assert_eq!(begin("bob@example.com", "203.0.113.7"), Ok(()));
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let pair = |s: &str| throttle_keys("ann@example.com", Some(s.parse().unwrap()))[0].0.clone();
        assert_eq!(pair("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), pair("2001:db8:1:2::1"));
        assert_ne!(pair("2001:db8:1:2::1"), pair("2001:db8:1:3::1"));
        assert_eq!(pair("::ffff:192.0.2.1"), pair("192.0.2.1"));
    }

    #[test]
    fn only_dashboard_paths_are_returned_to() {
        assert_eq!(safe_next(Some("/dashboard/sites/x?days=7")), "/dashboard/sites/x?days=7");
        for bad in ["https://evil.example/", "//evil.example", "/dashboard//evil", "/v1/keys", "/dashboard\\x"] {
            assert_eq!(safe_next(Some(bad)), "/dashboard/", "{bad}");
        }
        assert_eq!(safe_next(None), "/dashboard/");
    }
}
