//! An in-memory directory of sites, site domains and API keys, so the hot
//! ingestion path does not ask the database on every event. Entries live a
//! few seconds (changes made by the admin CLI show up quickly) and the API's
//! own changes invalidate them at once, on every node sharing a PostgreSQL
//! database (announced through it). Misses are never cached, so the
//! directory only ever holds real sites and keys.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use analytics::model::{ApiKey, Site};
use analytics::{accounts, sites, Store};
use uuid::Uuid;

use crate::auth::SiteDomains;
use crate::error::ApiError;

/// How long a cached entry is trusted.
const TTL: Duration = Duration::from_secs(5);

struct Entry<T> {
    at: Instant,
    value: T,
}

impl<T: Clone> Entry<T> {
    fn fresh(&self) -> Option<T> {
        (self.at.elapsed() < TTL).then(|| self.value.clone())
    }

    /// For an expired entry: the first caller gets `None` and reloads it;
    /// until it has, the others get the old value. Without this every request
    /// in flight when an entry expires reads the database, each on a blocking
    /// thread with a read connection of its own.
    fn claim(entry: Option<&mut Entry<T>>) -> Option<T> {
        let entry = entry?;
        if entry.at.elapsed() < TTL {
            return Some(entry.value.clone());
        }
        entry.at = Instant::now();
        None
    }
}

#[derive(Default)]
pub struct Directory {
    sites: RwLock<HashMap<Uuid, Entry<Arc<Site>>>>,
    keys: RwLock<HashMap<[u8; 32], Entry<Arc<ApiKey>>>>,
    domains: RwLock<Option<Entry<Arc<SiteDomains>>>>,
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

async fn blocking<T, F>(store: &Arc<Store>, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&analytics::Connection) -> analytics::Result<T> + Send + 'static,
{
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.read(f)).await.map_err(ApiError::internal)?.map_err(ApiError::from)
}

/// Tells the other nodes; a failure only delays them to the entries' expiry.
async fn announce(store: &Arc<Store>, change: String) {
    let store = store.clone();
    match tokio::task::spawn_blocking(move || store.announce(&change)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot announce a change to the other nodes"),
        Err(e) => tracing::warn!(error = %e, "announcing a change failed"),
    }
}

impl Directory {
    /// A live site by id, whatever its account.
    pub async fn site(&self, store: &Arc<Store>, id: Uuid) -> Result<Option<Arc<Site>>, ApiError> {
        if let Some(site) = read(&self.sites).get(&id).and_then(Entry::fresh) {
            return Ok(Some(site));
        }
        if let Some(site) = Entry::claim(write(&self.sites).get_mut(&id)) {
            return Ok(Some(site));
        }
        let site = blocking(store, move |c| sites::get(c, id)).await?.map(Arc::new);
        match &site {
            Some(s) => write(&self.sites).insert(id, Entry { at: Instant::now(), value: s.clone() }),
            None => write(&self.sites).remove(&id),
        };
        Ok(site)
    }

    /// The key whose secret this is (revoked or not).
    pub async fn key(&self, store: &Arc<Store>, secret: &str) -> Result<Option<Arc<ApiKey>>, ApiError> {
        let hash = accounts::hash_secret(secret);
        if let Some(key) = read(&self.keys).get(&hash).and_then(Entry::fresh) {
            return Ok(Some(key));
        }
        if let Some(key) = Entry::claim(write(&self.keys).get_mut(&hash)) {
            return Ok(Some(key));
        }
        let owned = secret.to_owned();
        let key = blocking(store, move |c| accounts::find_key_by_secret(c, &owned)).await?.map(Arc::new);
        match &key {
            Some(k) => write(&self.keys).insert(hash, Entry { at: Instant::now(), value: k.clone() }),
            None => write(&self.keys).remove(&hash),
        };
        Ok(key)
    }

    /// The domains of every live site.
    pub async fn domains(&self, store: &Arc<Store>) -> Result<Arc<SiteDomains>, ApiError> {
        if let Some(d) = read(&self.domains).as_ref().and_then(Entry::fresh) {
            return Ok(d);
        }
        if let Some(d) = Entry::claim(write(&self.domains).as_mut()) {
            return Ok(d);
        }
        let domains = Arc::new(SiteDomains::new(blocking(store, sites::all_domains).await?));
        *write(&self.domains) = Some(Entry { at: Instant::now(), value: domains.clone() });
        Ok(domains)
    }

    /// Forgets a site (and the domain list) after it changed, here and on
    /// every node sharing the database.
    pub async fn forget_site(&self, store: &Arc<Store>, id: Uuid) {
        self.forget(&format!("site:{id}"));
        announce(store, format!("site:{id}")).await;
    }

    /// Forgets every cached key after one was revoked, here and on every node.
    pub async fn forget_keys(&self, store: &Arc<Store>) {
        self.forget("keys");
        announce(store, "keys".into()).await;
    }

    /// Forgets what an announced change names: `site:<id>`, `keys`, or `*` (everything).
    pub fn forget(&self, change: &str) {
        match change.strip_prefix("site:").map(Uuid::parse_str) {
            Some(Ok(id)) => {
                write(&self.sites).remove(&id);
                *write(&self.domains) = None;
            }
            _ if change == "keys" => write(&self.keys).clear(),
            _ => {
                write(&self.sites).clear();
                write(&self.keys).clear();
                *write(&self.domains) = None;
            }
        }
    }

    /// Records that a key was just used, so the once-a-minute touch is not repeated.
    pub fn mark_used(&self, key: &ApiKey, at: chrono::DateTime<chrono::Utc>) {
        let mut keys = write(&self.keys);
        if let Some(entry) = keys.values_mut().find(|e| e.value.id == key.id) {
            let mut updated = (*entry.value).clone();
            updated.last_used_at = Some(at);
            entry.value = Arc::new(updated);
        }
    }
}
