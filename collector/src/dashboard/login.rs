//! Signing in and out, and login throttling.
//!
//! The login form has no session yet, so its CSRF token is a double-submit
//! cookie: a random value set with the form and expected back in it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

use analytics::accounts;
use analytics::web_sessions;
use chrono::Utc;
use http::{HeaderMap, HeaderValue, StatusCode};
use warp::reply::Response;

use super::{page, redirect, same, Form, Viewer, SESSION_COOKIE};
use crate::api::Query;
use crate::auth::{hash_password, verify_password};
use crate::error::ApiError;
use crate::state::Ctx;

const LOGIN_COOKIE: &str = "postern_login";
/// How long a session lasts after signing in.
const SESSION_HOURS: i64 = 12;
/// Failed logins are counted over this window...
const THROTTLE_WINDOW_SECS: i64 = 15 * 60;
/// ...and past this many for one e-mail address, or this many from one
/// client address, further attempts are refused until the window ends.
const MAX_FAILURES_PER_EMAIL: u32 = 5;
const MAX_FAILURES_PER_ADDRESS: u32 = 20;
/// Expired throttle windows are swept when the table grows past this.
const SWEEP_AT: usize = 10_000;

/// Failed logins per e-mail and per client address, in fixed windows.
#[derive(Default)]
pub struct LoginThrottle {
    failures: Mutex<HashMap<String, (i64, u32)>>,
}

impl LoginThrottle {
    /// Seconds to wait when any of these counters is at its limit.
    fn blocked(&self, keys: &[(String, u32)], now: i64) -> Option<u64> {
        let table = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter_map(|(key, limit)| table.get(key).filter(|(start, n)| now < start + THROTTLE_WINDOW_SECS && n >= limit))
            .map(|(start, _)| (start + THROTTLE_WINDOW_SECS - now).max(1) as u64)
            .max()
    }

    fn fail(&self, keys: &[(String, u32)], now: i64) {
        let mut table = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if table.len() > SWEEP_AT {
            table.retain(|_, (start, _)| now < *start + THROTTLE_WINDOW_SECS);
        }
        for (key, _) in keys {
            let entry = table.entry(key.clone()).or_insert((now, 0));
            if now >= entry.0 + THROTTLE_WINDOW_SECS {
                *entry = (now, 0);
            }
            entry.1 += 1;
        }
    }

    fn clear(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
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

/// Cookies get `Secure` when a TLS-terminating proxy says the browser used https.
fn cookie(headers: &HeaderMap, name: &str, value: &str, path: &str, same_site: &str, max_age: i64) -> HeaderValue {
    let secure = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{secure}"))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn login_form(status: StatusCode, headers: &HeaderMap, token: &str, email: &str, next: &str, error: Option<&str>) -> Result<Response, ApiError> {
    let ctx = minijinja::context! { csrf => token, email => email, next => next, error => error };
    let mut res = page(status, "login.html", None, ctx)?;
    res.headers_mut()
        .append(http::header::SET_COOKIE, cookie(headers, LOGIN_COOKIE, token, "/dashboard/login", "Strict", 3600));
    Ok(res)
}

/// GET /dashboard/login
pub async fn login_page(ctx: Ctx, session: Option<String>, headers: HeaderMap, q: Query) -> Result<Response, ApiError> {
    let next = safe_next(q.get("next")).to_owned();
    if super::session(ctx, session).await.is_ok() {
        return Ok(redirect(&next));
    }
    login_form(StatusCode::OK, &headers, &web_sessions::random_token(), "", &next, None)
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
        return login_form(StatusCode::BAD_REQUEST, &headers, &token, &email, &next, Some(msg));
    }

    let now = Utc::now().timestamp();
    let email_key = format!("email:{email}");
    let mut keys = vec![(email_key.clone(), MAX_FAILURES_PER_EMAIL)];
    if let Some(ip) = addr {
        keys.push((format!("addr:{ip}"), MAX_FAILURES_PER_ADDRESS));
    }
    if let Some(wait) = throttle.blocked(&keys, now) {
        // The form again, so the message sits where the user is looking and they can retry later.
        let msg = format!("Too many failed sign-ins. Try again in {} minutes.", wait.div_ceil(60));
        let mut res = login_form(StatusCode::TOO_MANY_REQUESTS, &headers, &token, &email, &next, Some(&msg))?;
        res.headers_mut().insert(http::header::RETRY_AFTER, wait.into());
        return Ok(res);
    }

    let lookup = email.clone();
    let user = ctx.read(move |c| accounts::find_user_by_email(c, &lookup)).await?;
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    let ok = tokio::task::spawn_blocking(move || match hash {
        Some(h) => verify_password(&password, &h),
        // Verify against a throwaway hash anyway, so an unknown e-mail takes as
        // long to refuse as a wrong password and addresses cannot be probed.
        None => {
            let _ = verify_password(&password, decoy_hash());
            false
        }
    })
    .await
    .map_err(ApiError::internal)?;

    let Some(user) = user.filter(|_| ok) else {
        throttle.fail(&keys, now);
        return login_form(StatusCode::UNAUTHORIZED, &headers, &token, &email, &next, Some("Wrong e-mail address or password."));
    };
    throttle.clear(&email_key);
    let ttl = chrono::Duration::hours(SESSION_HOURS);
    let session = ctx.writer.apply(move |c| web_sessions::open(c, user.id, ttl, Utc::now())).await?;
    let mut res = redirect(&next);
    let h = res.headers_mut();
    h.append(http::header::SET_COOKIE, cookie(&headers, SESSION_COOKIE, &session.token, "/dashboard", "Lax", ttl.num_seconds()));
    h.append(http::header::SET_COOKIE, cookie(&headers, LOGIN_COOKIE, "", "/dashboard/login", "Strict", 0));
    Ok(res)
}

/// POST /dashboard/logout
pub async fn logout(ctx: Ctx, viewer: Result<Viewer, ApiError>, headers: HeaderMap, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let viewer = viewer?;
    viewer.check_csrf(&form?)?;
    let token = cookie_value(&headers, SESSION_COOKIE).unwrap_or_default();
    ctx.writer.apply(move |c| web_sessions::close(c, &token)).await?;
    let mut res = redirect("/dashboard/login");
    res.headers_mut().append(http::header::SET_COOKIE, cookie(&headers, SESSION_COOKIE, "", "/dashboard", "Lax", 0));
    Ok(res)
}

fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| hash_password("not a real password").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_blocks_past_the_limit_until_the_window_ends() {
        let t = LoginThrottle::default();
        let keys = vec![("email:a".to_owned(), 3), ("addr:1".to_owned(), 10)];
        for _ in 0..3 {
            assert_eq!(t.blocked(&keys, 1000), None);
            t.fail(&keys, 1000);
        }
        assert_eq!(t.blocked(&keys, 1000), Some(THROTTLE_WINDOW_SECS as u64));
        assert_eq!(t.blocked(&keys, 1000 + THROTTLE_WINDOW_SECS), None);
        t.clear("email:a");
        assert_eq!(t.blocked(&keys, 1001), None);
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
