//! Who is calling: API keys from the `Authorization: Bearer` header, browser
//! origins for key-less ingestion, scopes, and dashboard password hashing.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use analytics::accounts;
use analytics::model::{ApiKey, Scope, Site};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use chrono::Utc;
use http::HeaderMap;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::state::AppState;

/// An authenticated API key, put in the request's extensions by the gateway.
#[derive(Debug, Clone)]
pub struct Principal {
    pub key: ApiKey,
}

impl Principal {
    pub fn account_id(&self) -> i64 {
        self.key.account_id
    }

    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.key.has_scope(scope) {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                Some("Authorization"),
                "insufficient_scope",
                format!("this API key lacks the {} scope", scope.as_str()),
            ))
        }
    }
}

/// The bearer token, `None` when there is no Authorization header.
pub fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthenticated("invalid", "the Authorization header is not valid text"))?;
    // The scheme name is case-insensitive (RFC 7235).
    let token = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthenticated("invalid", "expected Authorization: Bearer <API key>"))?;
    Ok(Some(token))
}

/// Looks the token up; unknown and revoked keys are refused alike in status,
/// with a reason that tells the owner what happened.
pub async fn authenticate(state: &AppState, token: &str) -> Result<Principal, ApiError> {
    if !token.starts_with(accounts::KEY_PREFIX) || token.len() > 128 {
        return Err(ApiError::unauthenticated("invalid", "unknown API key"));
    }
    let key = state
        .directory
        .key(&state.store, token)
        .await?
        .ok_or_else(|| ApiError::unauthenticated("invalid", "unknown API key"))?;
    if key.revoked_at.is_some() {
        return Err(ApiError::unauthenticated("revoked", "this API key has been revoked"));
    }
    let now = Utc::now();
    // Record use at most once a minute per key, without making the request wait.
    if key.last_used_at.is_none_or(|t| (now - t).num_seconds() >= 60) {
        let id = key.id;
        state.writer.apply_later(move |c| accounts::touch_key(c, id, now));
        state.directory.mark_used(&key, now);
    }
    Ok(Principal { key: (*key).clone() })
}

/// True when `host` is the site's domain or one of its subdomains.
pub fn host_matches(host: &str, domain: &str) -> bool {
    // Bytes, not chars, and no lowercase copies: this runs on every event
    // sent from a browser.
    let (host, domain) = (host.trim_end_matches('.').as_bytes(), domain.trim_end_matches('.').as_bytes());
    let Some(cut) = host.len().checked_sub(domain.len()) else {
        return false;
    };
    host[cut..].eq_ignore_ascii_case(domain) && (cut == 0 || host[cut - 1] == b'.')
}

/// The domains of every live site, for the CORS answer to each event: a host
/// is looked up with each of its parent domains (`a.b.example.com`,
/// `b.example.com`, `example.com`), so the cost does not grow with the
/// number of sites. `matches(host)` holds exactly when `host_matches(host, d)`
/// does for some domain `d`.
#[derive(Debug, Default)]
pub struct SiteDomains(HashSet<String>);

impl SiteDomains {
    pub fn new(domains: impl IntoIterator<Item = String>) -> SiteDomains {
        SiteDomains(domains.into_iter().map(|d| d.trim_end_matches('.').to_ascii_lowercase()).collect())
    }

    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        let lower;
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = host.to_ascii_lowercase();
            &lower
        } else {
            host
        };
        self.0.contains(host) || host.match_indices('.').any(|(i, _)| self.0.contains(&host[i + 1..]))
    }
}

/// A request's `Origin` header as ingestion reads it, once per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// No readable header, or `null` (sandboxed frames, file: pages): the
    /// page URL speaks for the event instead.
    Absent,
    /// The host the header names, `None` when it names none.
    Host(Option<String>),
}

impl Origin {
    pub fn read(headers: &HeaderMap) -> Origin {
        match headers.get(http::header::ORIGIN).and_then(|v| v.to_str().ok()) {
            None | Some("null") => Origin::Absent,
            Some(o) => Origin::Host(origin_host(o)),
        }
    }

    /// The host, when it is the domain (or a subdomain) of a live site.
    pub fn site_host(&self, domains: &SiteDomains) -> Option<&str> {
        match self {
            Origin::Host(Some(h)) if domains.matches(h) => Some(h),
            _ => None,
        }
    }
}

/// The host of an `Origin` header (`https://www.example.com:8443` → `www.example.com`).
pub fn origin_host(origin: &str) -> Option<String> {
    if let Some(host) = plain_http_host(origin) {
        return Some(host.to_owned());
    }
    let url = url::Url::parse(origin).ok()?;
    url.host_str().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
}

/// The host of an absolute http(s) URL (`https://news.example.com/a?b` →
/// `news.example.com`), as the URL parser reads it; `None` for any other URL.
pub fn http_url_host(url: &str) -> Option<String> {
    if let Some(host) = plain_http_host(url) {
        return Some(host.to_owned());
    }
    url::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .and_then(|u| u.host_str().map(str::to_owned))
}

/// The host of the URL browsers send with every event, read without the URL
/// parser: `http(s)://host[:port]`, then the end or a path, query or fragment,
/// with a lowercase ASCII host (IDNA applied). `None` for anything else, which
/// the parser reads (and normalises) instead.
fn plain_http_host(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (host, port) = authority.split_once(':').unwrap_or((authority, "80"));
    let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.';
    (matches!(scheme, "http" | "https")
        && host.bytes().all(plain)
        // A last label that starts with a digit may be an IPv4 address
        // in one of its odd forms (`0x7f.1`): the parser normalises those.
        && host.trim_end_matches('.').rsplit('.').next().is_some_and(|l| l.starts_with(|c: char| c.is_ascii_lowercase()))
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok())
    .then_some(host)
}

/// Decides whether a browser (no key) may send events for `site`: its Origin,
/// or without one the page URL, must be on the site's domain.
pub fn authorize_browser(origin: &Origin, page_url_host: Option<&str>, site: &Site) -> Result<(), ApiError> {
    let host = match origin {
        Origin::Absent => page_url_host,
        Origin::Host(h) => h.as_deref(),
    };
    match host {
        Some(h) if host_matches(h, &site.domain) => Ok(()),
        Some(h) => Err(ApiError::unauthenticated(
            "origin_mismatch",
            format!("{h} is not the site's domain {}; send an API key with the ingest scope", site.domain),
        )),
        None => Err(ApiError::unauthenticated("required", "an API key or a browser Origin on the site's domain is required")),
    }
}

/// Hashes a dashboard password with argon2id and a random salt.
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>()).map_err(|e| anyhow::anyhow!("making a salt: {e}"))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("hashing the password: {e}"))
}

/// True when `password` matches an argon2 hash made by [`hash_password`].
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
}

/// The server's password checks run at most this many at a time. Each one
/// holds 19 MiB and a core for tens of milliseconds: without a limit, a burst
/// of sign-ins would take every blocking thread (and the memory), and every
/// database read waiting for one.
pub struct PasswordSlots {
    slots: Arc<Semaphore>,
}

impl PasswordSlots {
    pub fn new(slots: usize) -> PasswordSlots {
        PasswordSlots { slots: Arc::new(Semaphore::new(slots.max(1))) }
    }

    /// Two per CPU: enough for people signing in, not for a flood.
    pub fn per_cpu() -> PasswordSlots {
        PasswordSlots::new(2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Checks `password` against `hash` on the blocking pool while holding a
    /// slot. Without a hash (no such user) it checks a throwaway hash instead
    /// and answers false, so an unknown e-mail takes as long to refuse as a
    /// wrong password and addresses cannot be probed. `None` when every slot
    /// is taken (nothing was checked; the caller asks to try again).
    pub async fn verify(&self, password: String, hash: Option<String>) -> Result<Option<bool>, ApiError> {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Ok(None);
        };
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            match hash {
                Some(hash) => verify_password(&password, &hash),
                None => {
                    let _ = verify_password(&password, decoy_hash());
                    false
                }
            }
        })
        .await
        .map(Some)
        .map_err(ApiError::internal)
    }
}

fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| hash_password("not a real password").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_match_but_lookalikes_do_not() {
        assert!(host_matches("example.com", "example.com"));
        assert!(host_matches("www.Example.com", "example.com"));
        assert!(host_matches("a.b.example.com.", "example.com"));
        assert!(!host_matches("badexample.com", "example.com"));
        assert!(!host_matches("example.com.evil.net", "example.com"));
        assert!(!host_matches("com", "example.com"));
        assert!(!host_matches(".example.com", "xample.com"));
        assert!(host_matches("café.example.com", "EXAMPLE.com"));
        assert!(!host_matches("é.com", "xé.com"));
    }

    #[test]
    fn the_domain_set_agrees_with_host_matches() {
        let domains = [
            "example.com", "EXAMPLE.com", "example.com.", "xample.com", "xé.com", "b.example.com", "com", "localhost",
            "127.0.0.1", "::1", ".com", "", "Café.fr", "a..b.example.com",
        ];
        let hosts = [
            "example.com", "www.Example.com", "a.b.example.com.", "badexample.com", "example.com.evil.net", "com", ".example.com",
            "café.example.com", "é.com", "xé.com", "b.example.com", "localhost", "127.0.0.1", "::1", "", ".", "a..com", "x.café.fr",
            "x.Café.fr", "a..b.example.com", "EXAMPLE.COM..",
        ];
        for d in domains {
            let one = SiteDomains::new([d.to_owned()]);
            for h in hosts {
                assert_eq!(one.matches(h), host_matches(h, d), "{h} against {d}");
            }
        }
        let all = SiteDomains::new(domains[..4].iter().map(|d| d.to_string()));
        for h in hosts {
            assert_eq!(all.matches(h), domains[..4].iter().any(|d| host_matches(h, d)), "{h}");
        }
        assert!(!SiteDomains::default().matches("example.com"));
    }

    #[test]
    fn the_origin_is_read_once_for_cors_and_the_site_check() {
        let site_domains = SiteDomains::new(["example.com".to_owned()]);
        let mut h = HeaderMap::new();
        assert_eq!(Origin::read(&h), Origin::Absent);
        h.insert("origin", "null".parse().unwrap());
        assert_eq!(Origin::read(&h), Origin::Absent);
        h.insert("origin", http::HeaderValue::from_bytes(b"https://caf\xc3\xa9.example.com").unwrap());
        assert_eq!(Origin::read(&h), Origin::Absent);
        h.insert("origin", "https://www.example.com:8443".parse().unwrap());
        assert_eq!(Origin::read(&h).site_host(&site_domains), Some("www.example.com"));
        h.insert("origin", "https://evil.net".parse().unwrap());
        assert_eq!(Origin::read(&h).site_host(&site_domains), None);
        h.insert("origin", "garbage".parse().unwrap());
        assert_eq!(Origin::read(&h), Origin::Host(None));
        assert_eq!(Origin::read(&h).site_host(&site_domains), None);
    }

    #[test]
    fn origin_hosts_drop_scheme_and_port() {
        assert_eq!(origin_host("https://www.example.com:8443").as_deref(), Some("www.example.com"));
        assert_eq!(origin_host("http://[::1]:80").as_deref(), Some("::1"));
        assert_eq!(origin_host("null"), None);
        // What the quick path reads and what the URL parser reads agree.
        for origin in [
            "https://news.example.com",
            "http://localhost:8080",
            "https://a-b.example.co.uk.",
            "HTTPS://WWW.Example.COM",
            "https://www.example.com/path",
            "https://user@example.com",
            "https://example.com:80x",
            "https://127.0.0.1:3000",
            "https://0x7f.1",
            "https://xn--caf-dma.fr",
            "https://café.fr",
            "ftp://example.com",
            "https://a..b.example.com",
            "https://.example.com",
            "https://-x.example.com:443",
            "https://example.com:",
            "https://example.com:99999",
            "https://example.com:+80",
        ] {
            let parsed = url::Url::parse(origin).ok().and_then(|u| u.host_str().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned()));
            assert_eq!(origin_host(origin), parsed, "{origin}");
        }
    }

    #[test]
    fn page_url_hosts_read_without_the_parser_agree_with_it() {
        for page in [
            "https://news.example.com/article/12?utm=x#top",
            "http://localhost:8080/",
            "https://e.com",
            "https://e.com?q",
            "https://e.com#f",
            "https://e.com/café",
            "https://e.com/a b",
            "https://E.com/",
            "https://e.com\\evil.test/",
            "https://user:pw@e.com/",
            "https://e.com:443/x",
            "https://e.com:/x",
            "https://e.com:65536/",
            "https://127.0.0.1/",
            "https://0x7f.1/",
            "https://[::1]:8080/",
            "https://xn--caf-dma.fr/",
            "https://café.fr/",
            "https:e.com/",
            "https:///e.com/",
            " https://e.com/",
            "https://e.com/\tx",
            "ftp://e.com/",
            "mailto:a@e.com",
            "/relative",
        ] {
            let parsed = url::Url::parse(page).ok().filter(|u| matches!(u.scheme(), "http" | "https")).and_then(|u| u.host_str().map(str::to_owned));
            assert_eq!(http_url_host(page), parsed, "{page}");
        }
        assert_eq!(plain_http_host("https://news.example.com/article/12?utm=x#top"), Some("news.example.com"));
    }

    #[test]
    fn passwords_verify_against_their_hash_only() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("correct horsE", &hash));
        assert!(!verify_password("correct horse", "not a hash"));
    }

    #[tokio::test]
    async fn password_checks_beyond_the_slots_are_refused_without_hashing() {
        let hash = hash_password("correct horse").unwrap();
        let slots = PasswordSlots::new(2);
        // Two checks in flight take both slots (each holds one until its hash is done).
        let held: Vec<_> = (0..2).map(|_| slots.slots.clone().try_acquire_owned().unwrap()).collect();
        assert_eq!(slots.verify("correct horse".into(), Some(hash.clone())).await.unwrap(), None, "no third check at once");
        drop(held);
        assert_eq!(slots.verify("correct horse".into(), Some(hash.clone())).await.unwrap(), Some(true));
        assert_eq!(slots.verify("wrong".into(), Some(hash)).await.unwrap(), Some(false));
        assert_eq!(slots.verify("not a real password".into(), None).await.unwrap(), Some(false), "no user, no match, even with the decoy's password");
        assert_eq!(slots.slots.available_permits(), 2, "every slot is given back");
    }

    #[test]
    fn bearer_tokens_parse_strictly() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h).unwrap(), None);
        h.insert("authorization", "Bearer pst_abc".parse().unwrap());
        assert_eq!(bearer_token(&h).unwrap(), Some("pst_abc"));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h).unwrap_err().status, 401);
        h.insert("authorization", "Bearer ".parse().unwrap());
        assert!(bearer_token(&h).is_err());
    }
}
