//! One-time messages between a form and the page it redirects to. A form
//! that creates something answers 303 to a GET page (so reloading that page
//! creates nothing); what the page must show once — a new API key, a signing
//! secret — waits here, bound to the web session, and is taken by the first
//! matching page. It is kept in memory only: a secret never goes into a URL,
//! a log or the database, and a restart in between loses it (the key or
//! integration exists; it can be revoked and made again).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use uuid::Uuid;

/// How long a message waits for its page; the redirect follows at once.
const TTL: Duration = Duration::from_secs(5 * 60);
/// Messages kept in all (one per session); past this the expired go first,
/// then the oldest.
const MAX_FLASHES: usize = 1024;

/// What a page shows once.
pub enum Flash {
    /// Settings → API: the new key's secret.
    Key { name: String, secret: String },
    /// A site's integrations: the new integration, and a webhook's signing secret.
    Integration { site: Uuid, name: String, secret: Option<String> },
}

/// The waiting messages, by session (its CSRF token names it).
#[derive(Default)]
pub struct Flashes(Mutex<HashMap<String, (Flash, Instant)>>);

impl std::fmt::Debug for Flashes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Flashes")
    }
}

impl Flashes {
    /// Keeps `flash` for the session's next page; it replaces an older one.
    pub fn put(&self, session: &str, flash: Flash) {
        let now = Instant::now();
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if all.len() >= MAX_FLASHES {
            all.retain(|_, (_, at)| now.duration_since(*at) < TTL);
        }
        if all.len() >= MAX_FLASHES {
            if let Some(oldest) = all.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone()) {
                all.remove(&oldest);
            }
        }
        all.insert(session.to_owned(), (flash, now));
    }

    /// Takes the session's message if `wanted` says this page shows it.
    pub fn take(&self, session: &str, wanted: impl Fn(&Flash) -> bool) -> Option<Flash> {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (flash, at) = all.get(session)?;
        if at.elapsed() >= TTL {
            all.remove(session);
            return None;
        }
        if !wanted(flash) {
            return None;
        }
        all.remove(session).map(|(f, _)| f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &str) -> Flash {
        Flash::Key { name: "k".into(), secret: secret.into() }
    }

    fn is_key(f: &Flash) -> bool {
        matches!(f, Flash::Key { .. })
    }

    #[test]
    fn a_message_is_taken_once_by_its_own_session_and_page() {
        let flashes = Flashes::default();
        flashes.put("s1", key("one"));
        assert!(flashes.take("s2", is_key).is_none(), "another session sees nothing");
        assert!(flashes.take("s1", |f| matches!(f, Flash::Integration { .. })).is_none(), "another page leaves it");
        assert!(matches!(flashes.take("s1", is_key), Some(Flash::Key { secret, .. }) if secret == "one"));
        assert!(flashes.take("s1", is_key).is_none(), "shown once");
        flashes.put("s1", key("two"));
        flashes.put("s1", key("three"));
        assert!(matches!(flashes.take("s1", is_key), Some(Flash::Key { secret, .. }) if secret == "three"));
    }

    #[test]
    fn the_store_is_bounded() {
        let flashes = Flashes::default();
        for i in 0..MAX_FLASHES + 10 {
            flashes.put(&format!("s{i}"), key("x"));
        }
        assert_eq!(flashes.0.lock().unwrap().len(), MAX_FLASHES);
        assert!(flashes.take("s0", is_key).is_none(), "the oldest made room");
        assert!(flashes.take(&format!("s{}", MAX_FLASHES + 9), is_key).is_some());
    }
}
