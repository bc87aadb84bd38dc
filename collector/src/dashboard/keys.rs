//! Settings → API: the account's keys (prefix, scopes, last use), Generate API
//! Key (the secret shown once) and revoking.

use analytics::accounts;
use analytics::model::{iso, ApiKey, Scope};
use chrono::Utc;
use http::StatusCode;
use uuid::Uuid;
use warp::reply::Response;

use super::{admin_change, page, redirect, Flash, FlashPage, Form, Viewer};
use crate::error::ApiError;
use crate::state::Ctx;

const MAX_NAME_LEN: usize = 100;

fn key_view(k: &ApiKey) -> minijinja::Value {
    minijinja::context! {
        id => k.id.to_string(),
        name => k.name,
        prefix => k.prefix,
        scopes => k.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        created_at => iso(k.created_at),
        last_used_at => k.last_used_at.map(iso),
        revoked => k.revoked_at.is_some(),
    }
}

async fn render(
    ctx: &Ctx,
    viewer: &Viewer,
    status: StatusCode,
    created: Option<minijinja::Value>,
    error: Option<String>,
) -> Result<Response, ApiError> {
    let account = viewer.account_id();
    let keys = ctx.read(move |c| accounts::list_keys(c, account)).await?;
    let views: Vec<_> = keys.iter().map(key_view).collect();
    let scopes = Scope::ALL.map(Scope::as_str);
    let ctx = minijinja::context! { nav => "api", keys => views, scopes => scopes, created => created, error => error };
    page(status, "keys.html", Some(viewer), ctx)
}

/// GET /dashboard/settings/api — with the new key's secret once, right after
/// Generate API Key.
pub async fn keys_page(ctx: Ctx, viewer: Result<Viewer, ApiError>) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let created = match viewer.take_flash(&ctx, FlashPage::Keys).await? {
        Some(Flash::Key { name, secret }) => Some(minijinja::context! { secret => secret, name => name }),
        _ => None,
    };
    render(&ctx, &viewer, StatusCode::OK, created, None).await
}

/// POST /dashboard/settings/api/keys — Generate API Key, then 303 to the keys
/// page, which shows the secret once (a reload shows it no more and creates
/// no other key); after that only its prefix is ever shown.
pub async fn keys_create(ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let (viewer, form) = admin_change(viewer, form)?;
    let name = form.text("name").unwrap_or("API key").to_owned();
    if name.chars().count() > MAX_NAME_LEN {
        return render(&ctx, &viewer, StatusCode::BAD_REQUEST, None, Some(format!("The name is longer than {MAX_NAME_LEN} characters."))).await;
    }
    let scopes: Option<Vec<Scope>> = form.all("scopes").map(Scope::parse).collect();
    let scopes = match scopes {
        Some(s) if !s.is_empty() => s,
        _ => return render(&ctx, &viewer, StatusCode::BAD_REQUEST, None, Some("Choose at least one scope.".to_owned())).await,
    };
    let account = viewer.account_id();
    let flasher = viewer.clone();
    ctx.writer
        .apply(move |c| {
            let new = accounts::create_key(c, account, &name, &scopes, Utc::now())?;
            flasher.flash(c, &Flash::Key { name: new.key.name, secret: new.secret })
        })
        .await?;
    Ok(redirect("/dashboard/settings/api#created-title"))
}

/// POST /dashboard/settings/api/keys/:id/revoke
pub async fn keys_revoke(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let (viewer, _) = admin_change(viewer, form)?;
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::not_found("id", "no API key with this id"))?;
    let account = viewer.account_id();
    ctx.writer.apply(move |c| accounts::revoke_key(c, account, id, Utc::now())).await?;
    // The gateway caches keys for a few seconds; a revoked key must stop at once.
    ctx.directory.forget_keys(&ctx.store).await;
    Ok(redirect("/dashboard/settings/api"))
}
