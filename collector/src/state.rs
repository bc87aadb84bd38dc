//! `AppState`: the handles every part of the server shares, passed explicitly.

use std::sync::Arc;

use analytics::Store;

use crate::config::Config;
use crate::directory::Directory;
use crate::error::ApiError;
use crate::geo::CountryResolver;
use crate::ingest::writer::WriterHandle;
use crate::metrics::Metrics;
use crate::rate_limit::RateLimiter;

pub struct AppState {
    pub config: Config,
    pub store: Arc<Store>,
    pub writer: WriterHandle,
    pub limiter: RateLimiter,
    pub metrics: Arc<Metrics>,
    pub directory: Directory,
    pub geo: CountryResolver,
    /// The demo site's id, once `serve --demo` has created it (the demo pages name it).
    pub demo_site: std::sync::OnceLock<uuid::Uuid>,
    /// The supervised background tasks' health, for `/readyz` and `/metrics`.
    pub tasks: crate::supervisor::Tasks,
}

pub type Ctx = Arc<AppState>;

impl AppState {
    /// Runs a read on a pooled read-only connection, off the async threads.
    pub async fn read<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&analytics::Connection) -> analytics::Result<T> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.read(f))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::from)
    }
}
