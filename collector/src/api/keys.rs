//! API keys of the caller's account: list, generate, revoke.

use analytics::accounts;
use analytics::model::{iso, ApiKey, Scope};
use bytes::Bytes;
use chrono::Utc;
use http::StatusCode;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;
use warp::reply::Response;

use super::{json_object, json_reply, no_content, reject_unknown};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Ctx;

#[derive(Serialize)]
struct KeyView {
    id: Uuid,
    name: String,
    prefix: String,
    scopes: Vec<Scope>,
    created_at: String,
    last_used_at: Option<String>,
    revoked_at: Option<String>,
}

impl From<&ApiKey> for KeyView {
    fn from(k: &ApiKey) -> Self {
        KeyView {
            id: k.id,
            name: k.name.clone(),
            prefix: k.prefix.clone(),
            scopes: k.scopes.clone(),
            created_at: iso(k.created_at),
            last_used_at: k.last_used_at.map(iso),
            revoked_at: k.revoked_at.map(iso),
        }
    }
}

/// GET /v1/keys
pub async fn keys_list(ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let account = p.account_id();
    let keys = ctx.read(move |c| accounts::list_keys(c, account)).await?;
    let views: Vec<KeyView> = keys.iter().map(KeyView::from).collect();
    Ok(json_reply(StatusCode::OK, &json!({ "keys": views })))
}

/// POST /v1/keys
///
/// A key can only create keys with scopes it has itself, so a `write` key
/// cannot mint itself more rights.
pub async fn keys_create(ctx: Ctx, p: Result<Principal, ApiError>, body: Result<Bytes, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let body = body?;
    let obj = if body.iter().all(u8::is_ascii_whitespace) { Default::default() } else { json_object(&body)? };
    let name = match obj.get("name") {
        None | Some(Value::Null) => "API key".to_owned(),
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= 100 => s.trim().to_owned(),
        Some(_) => return Err(ApiError::invalid("name", "invalid", "name must be a string of 1 to 100 characters")),
    };
    let scopes = match obj.get("scopes") {
        None | Some(Value::Null) => p.key.scopes.clone(),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|s| {
                s.as_str()
                    .and_then(Scope::parse)
                    .ok_or_else(|| ApiError::invalid("scopes", "invalid", "scopes must be a list of read, write, ingest"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(ApiError::invalid("scopes", "invalid", "scopes must be a non-empty list of read, write, ingest")),
    };
    if let Some(extra) = scopes.iter().find(|s| !p.key.has_scope(**s)) {
        return Err(ApiError::forbidden(
            Some("scopes"),
            "insufficient_scope",
            format!("this API key cannot grant the {} scope it does not have", extra.as_str()),
        ));
    }
    reject_unknown(&obj, &["name", "scopes"])?;
    let account = p.account_id();
    let new = ctx.writer.apply(move |c| accounts::create_key(c, account, &name, &scopes, Utc::now())).await?;
    let mut view = serde_json::to_value(KeyView::from(&new.key)).map_err(ApiError::internal)?;
    view["key"] = json!(new.secret);
    Ok(json_reply(StatusCode::CREATED, &view))
}

/// DELETE /v1/keys/:id
///
/// A key can revoke itself, and any key whose scopes it holds all of: a
/// `write` key cannot take down a stronger key it could not have created.
pub async fn keys_revoke(id: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let not_found = || ApiError::not_found("id", "no API key with this id");
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let account = p.account_id();
    if id != p.key.id {
        let target = ctx.read(move |c| accounts::find_key(c, account, id)).await?.ok_or_else(not_found)?;
        if let Some(extra) = target.scopes.iter().find(|s| !p.key.has_scope(**s)) {
            return Err(ApiError::forbidden(
                Some("id"),
                "insufficient_scope",
                format!("this API key cannot revoke a key with the {} scope it does not have", extra.as_str()),
            ));
        }
    }
    ctx.writer
        .apply(move |c| accounts::revoke_key(c, account, id, Utc::now()))
        .await
        .map_err(|e| if e.status == StatusCode::NOT_FOUND { not_found() } else { e })?;
    ctx.directory.forget_keys(&ctx.store).await;
    Ok(no_content())
}
