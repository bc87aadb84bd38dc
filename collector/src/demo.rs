//! `serve --demo`: a demo account with a site, a dashboard user, a fresh API
//! key, and five weeks of realistic synthetic history (seeded once, then kept).

use std::net::SocketAddr;

use analytics::accounts::{self, Role};
use analytics::report::{self, Draft, Trigger};
use analytics::model::{BlockerType, Device, EventType, NewEvent, Scope, Site};
use analytics::sites::{self, NewSite};
use chrono::{DateTime, Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::auth::hash_password;
use crate::state::AppState;

pub const ACCOUNT: &str = "demo";
pub const SITE_NAME: &str = "The Daily Courier";
pub const SITE_DOMAIN: &str = "localhost";
pub const USER_EMAIL: &str = "demo@postern.local";
pub const USER_PASSWORD: &str = "postern-demo";
const KEY_NAME: &str = "demo";
const HISTORY_DAYS: i64 = 35;
const SESSIONS_PER_DAY: u32 = 600;
const EVENTS_PER_WRITE: usize = 500;
/// The seeded report's past runs (its weekly occurrences within the history).
const REPORT_RUNS: usize = 4;

/// Seeds the demo (once) and returns the demo site's id.
pub async fn start(ctx: &AppState, addr: SocketAddr) -> anyhow::Result<uuid::Uuid> {
    let now = Utc::now();
    let password_hash = hash_password(USER_PASSWORD)?;
    let (site, created, key) = ctx
        .writer
        .apply(move |c| {
            let account = accounts::ensure_account(c, ACCOUNT, now)?;
            let existing = sites::list(c, account)?.into_iter().find(|s| s.name == SITE_NAME);
            let created = existing.is_none();
            let site = match existing {
                Some(s) => s,
                None => {
                    let tz = chrono_tz::Europe::Paris;
                    let new = NewSite { account_id: account, name: SITE_NAME, domain: SITE_DOMAIN, timezone: tz, revenue_per_mille: Some(2.5) };
                    let site = sites::create(c, &new, now)?;
                    // The demo publisher site (www-demo) has a subscribe page: the "offer"
                    // variant links to it, and the page itself never shows the wall.
                    let mut wall = site.wall.clone();
                    for v in wall["variants"].as_array_mut().into_iter().flatten().filter(|v| v["name"] == "offer") {
                        v["subscribe_url"] = json!("/demo/subscribe.html");
                        v["subscribe_text"] = json!("Subscribe for an ad-free Courier");
                    }
                    wall["excluded_paths"] = json!(["/demo/subscribe.html"]);
                    sites::update(c, account, site.id, &sites::SiteChanges { wall: Some(wall), ..Default::default() })?
                }
            };
            if created {
                // A second run keeps the user (and whatever password it was given).
                let _ = accounts::create_user(c, account, USER_EMAIL, &password_hash, Role::Admin, now);
            }
            // The secret of an older key cannot be shown again: rotate it.
            accounts::revoke_keys_named(c, account, KEY_NAME, now)?;
            let key = accounts::create_key(c, account, KEY_NAME, &Scope::ALL, now)?;
            Ok((site, created, key.secret))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;

    if created {
        let events = history(&site, now);
        let total = events.len();
        for chunk in events.chunks(EVENTS_PER_WRITE) {
            ctx.writer.ingest(chunk.to_vec()).await.map_err(|e| anyhow::anyhow!("{}", e.message))?;
        }
        tracing::info!(events = total, days = HISTORY_DAYS, "demo history seeded");
        let runs = seed_report(ctx, &site, now).await?;
        tracing::info!(runs, "demo report seeded");
    }

    let host = if addr.ip().is_unspecified() { SocketAddr::from(([127, 0, 0, 1], addr.port())) } else { addr };
    let base = format!("http://{host}");
    let id = site.id;
    let port = host.port();
    println!(
        "\nDemo ready: site \"{SITE_NAME}\" ({SITE_DOMAIN}), id {id}, {HISTORY_DAYS} days of synthetic history.\n\
         Demo publisher site (shows the wall to blocked visitors): http://localhost:{port}/demo/\n\
         Dashboard user: {USER_EMAIL} / {USER_PASSWORD}\n\
         API key (shown once, a new one at every demo start): {key}\n\n\
         Try:\n  \
         export POSTERN_KEY={key}\n  \
         curl -H \"Authorization: Bearer $POSTERN_KEY\" {base}/v1/sites\n  \
         curl -H \"Authorization: Bearer $POSTERN_KEY\" '{base}/v1/analytics/sites/{id}/dashboard?days=30'\n  \
         curl -H \"Authorization: Bearer $POSTERN_KEY\" '{base}/v1/analytics/sites/{id}/conversions?days=14&granularity=day'\n  \
         curl -H \"Authorization: Bearer $POSTERN_KEY\" {base}/v1/analytics/sites/{id}/ab-testing\n  \
         curl -H \"Authorization: Bearer $POSTERN_KEY\" '{base}/v1/events/sites/{id}?event_type=conversion_allowlist&limit=5'\n"
    );
    Ok(id)
}

/// A weekly e-mail report to the demo user, as if made when the history
/// began, with a run stored for each of its occurrences since (the latest
/// included, so the scheduler owes nothing at start-up). The runs are
/// generated from the seeded history like any run, but handed to no outbox:
/// the demo needs no mail server and no delivery fails. The next occurrence
/// after start-up is generated and sent like any other.
async fn seed_report(ctx: &AppState, site: &Site, now: DateTime<Utc>) -> anyhow::Result<usize> {
    let api_err = |e: crate::error::ApiError| anyhow::anyhow!("{}", e.message);
    let body = json!({
        "name": "Weekly numbers",
        "type": "weekly",
        "recipients": [{"email": USER_EMAIL, "role": "Admin"}],
        "channels": ["email"],
        "format": "pdf",
    });
    let draft = Draft::from_json(body.as_object().expect("an object"), None).map_err(|e| anyhow::anyhow!("the demo report: {}", e.message))?;
    let (site_id, since) = (site.id, now - Duration::days(HISTORY_DAYS));
    let config = ctx.writer.apply(move |c| report::create(c, site_id, draft, since)).await.map_err(api_err)?;
    let mut occurrences = Vec::new();
    let mut at = now;
    while let Some(o) = config.due(site, at).filter(|_| occurrences.len() < REPORT_RUNS) {
        at = o.at - Duration::seconds(1);
        occurrences.push(o);
    }
    let count = occurrences.len();
    for o in occurrences.into_iter().rev() {
        let (site, config) = (site.clone(), config.clone());
        let period = config.period_on(&site, o.date);
        let doc = ctx.read(move |c| report::build(c, &site, &config, &period, Trigger::Schedule, Some(o.at), o.at)).await.map_err(api_err)?;
        ctx.writer
            .apply(move |c| {
                report::insert_run(c, &doc, Some(o.date), o.at)?;
                // Handed over (to nothing): never picked up for delivery later.
                report::mark_enqueued(c, doc.id, o.at)
            })
            .await
            .map_err(api_err)?;
    }
    Ok(count)
}

/// Synthetic sessions: more traffic in the evening and on weekdays, ad
/// blockers more common on desktops, and variants that convert differently.
fn history(site: &Site, now: DateTime<Utc>) -> Vec<NewEvent> {
    const COUNTRIES: [(&str, u32); 10] =
        [("FR", 30), ("US", 18), ("DE", 12), ("GB", 9), ("BE", 7), ("CA", 6), ("ES", 6), ("IT", 5), ("CH", 4), ("ZZ", 3)];
    const HOUR_WEIGHTS: [u32; 24] = [2, 1, 1, 1, 1, 2, 4, 7, 9, 8, 7, 7, 8, 7, 6, 6, 6, 7, 8, 9, 10, 9, 6, 4];
    let variants = site.variant_names();
    let mut rng = StdRng::seed_from_u64(20_261_120);
    let mut events = Vec::new();
    let start = now - Duration::days(HISTORY_DAYS);
    for day in 0..=HISTORY_DAYS {
        let day_start = start + Duration::days(day);
        let weekday_factor = if matches!(chrono::Datelike::weekday(&day_start), chrono::Weekday::Sat | chrono::Weekday::Sun) { 0.7 } else { 1.0 };
        let sessions = (f64::from(SESSIONS_PER_DAY) * weekday_factor * rng.random_range(0.85..1.15)) as u32;
        for _ in 0..sessions {
            let hour = pick(&mut rng, &HOUR_WEIGHTS.map(|w| ((), w)).iter().enumerate().map(|(h, (_, w))| (h, *w)).collect::<Vec<_>>());
            let t = day_start.date_naive().and_hms_opt(hour as u32, rng.random_range(0..60), rng.random_range(0..60));
            let Some(t) = t.map(|t| t.and_utc()) else { continue };
            if t > now - Duration::minutes(5) {
                continue;
            }
            let device = pick(&mut rng, &[(Device::Desktop, 58), (Device::Mobile, 34), (Device::Tablet, 8)]);
            let country = pick(&mut rng, &COUNTRIES);
            let session = Session { site, id: format!("demo{:016x}", rng.random::<u64>()), device, country };
            let page = |rng: &mut StdRng| format!("https://{SITE_DOMAIN}/articles/{}", rng.random_range(1..40));
            events.push(session.event(EventType::Pageview, t, &page(&mut rng), json!({})));
            let adblock_share = match device {
                Device::Desktop => 0.34,
                Device::Mobile => 0.14,
                Device::Tablet => 0.22,
            };
            if rng.random_bool(adblock_share) {
                let blocker = pick(&mut rng, &[(BlockerType::Extension, 70), (BlockerType::Network, 20), (BlockerType::Browser, 10)]);
                let at = t + Duration::seconds(2);
                events.push(session.event(EventType::AdblockDetected, at, &page(&mut rng), json!({"blocker_type": blocker.as_str()})));
                if rng.random_bool(0.95) && !variants.is_empty() {
                    let variant = &variants[rng.random_range(0..variants.len())];
                    let meta = json!({"variant": variant, "blocker_type": blocker.as_str()});
                    events.push(session.event(EventType::WallDisplayed, at + Duration::seconds(1), &page(&mut rng), meta.clone()));
                    if rng.random_bool(0.3) {
                        events.push(session.event(EventType::WallHelpOpened, at + Duration::seconds(8), &page(&mut rng), meta.clone()));
                    }
                    let rate = match variant.as_str() {
                        "control" => 0.11,
                        "emotional" => 0.16,
                        _ => 0.13,
                    };
                    if rng.random_bool(rate) {
                        if rng.random_bool(0.15) {
                            events.push(session.event(EventType::VerificationFailed, at + Duration::seconds(20), &page(&mut rng), meta.clone()));
                        }
                        events.push(session.event(EventType::ConversionAllowlist, at + Duration::seconds(40), &page(&mut rng), meta));
                    } else if variant == "offer" && rng.random_bool(0.04) {
                        events.push(session.event(EventType::ConversionSubscribe, at + Duration::seconds(30), &page(&mut rng), meta));
                    } else if rng.random_bool(0.5) {
                        events.push(session.event(EventType::WallDismissed, at + Duration::seconds(6), &page(&mut rng), meta));
                    }
                }
            }
            for extra in 0..rng.random_range(0..3) {
                events.push(session.event(EventType::Pageview, t + Duration::minutes(2 + extra * 3), &page(&mut rng), json!({})));
            }
        }
    }
    events
}

struct Session<'a> {
    site: &'a Site,
    id: String,
    device: Device,
    country: &'static str,
}

impl Session<'_> {
    fn event(&self, event_type: EventType, at: DateTime<Utc>, page_url: &str, mut metadata: serde_json::Value) -> NewEvent {
        metadata["device_type"] = json!(self.device.as_str());
        let variant = metadata.get("variant").and_then(|v| v.as_str()).map(str::to_owned);
        NewEvent {
            site_seq: self.site.seq,
            session_id: self.id.clone(),
            event_type,
            page_url: page_url.to_owned(),
            metadata: Some(metadata.to_string()),
            device: self.device,
            country: self.country.to_owned(),
            variant,
            forced_variant: false,
            client_event_id: None,
            occurred_at: at,
            received_at: at,
        }
    }
}

fn pick<T: Copy>(rng: &mut StdRng, weighted: &[(T, u32)]) -> T {
    let total: u32 = weighted.iter().map(|(_, w)| w).sum();
    let mut x = rng.random_range(0..total);
    for (item, w) in weighted {
        if x < *w {
            return *item;
        }
        x -= w;
    }
    weighted[0].0
}
