//! The wall editor: kind, dismiss delay, colours, and per variant its name,
//! weight and texts. It edits the site's wall configuration, the same JSON
//! `PATCH /v1/sites/:id` accepts and `GET /v1/sdk/sites/:id/config` serves;
//! fields it does not know are kept as they are.

use analytics::sites::{self, SiteChanges};
use http::StatusCode;
use serde_json::{json, Map, Value as Json};
use warp::reply::Response;

use super::sites::site_of;
use super::{admin_change, page, redirect, Form, Viewer};
use crate::api::parse_wall;
use crate::error::ApiError;
use crate::state::Ctx;

pub const KINDS: [&str; 3] = ["soft", "hard", "banner"];
const MAX_VARIANTS: usize = 10;
const MAX_TITLE_LEN: usize = 200;
const MAX_BODY_LEN: usize = 2000;
const MAX_DISMISS_SECS: u64 = 600;
/// The colours a new wall starts with: dark text on white, a blue button
/// (contrast above 4.5:1 both ways).
const DEFAULT_COLORS: [(&str, &str); 3] = [("background", "#ffffff"), ("text", "#1a1a1a"), ("accent", "#0b57d0")];

fn color(wall: &Json, name: &str) -> String {
    wall.get("colors")
        .and_then(|c| c.get(name))
        .and_then(Json::as_str)
        .filter(|c| is_hex_color(c))
        .map(str::to_owned)
        .unwrap_or_else(|| DEFAULT_COLORS.iter().find(|(n, _)| *n == name).map_or("#000000", |(_, c)| *c).to_owned())
}

fn is_hex_color(c: &str) -> bool {
    c.len() == 7 && c.starts_with('#') && c[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

async fn render(ctx: &Ctx, viewer: &Viewer, site_id: &str, status: StatusCode, wall: &Json, error: Option<String>, saved: bool) -> Result<Response, ApiError> {
    let site = site_of(ctx, viewer, site_id).await?;
    let variants: Vec<Json> = wall.get("variants").and_then(Json::as_array).cloned().unwrap_or_default();
    let colors: Map<String, Json> = DEFAULT_COLORS.iter().map(|(n, _)| ((*n).to_owned(), json!(color(wall, n)))).collect();
    let ctx = minijinja::context! {
        nav => "sites",
        site => minijinja::context! { id => site.id.to_string(), name => site.name, domain => site.domain },
        kinds => KINDS,
        kind => wall.get("kind").and_then(Json::as_str).unwrap_or("soft"),
        dismiss_after_seconds => wall.get("dismiss_after_seconds").and_then(Json::as_u64).unwrap_or(5),
        colors => minijinja::Value::from_serialize(&colors),
        variants => minijinja::Value::from_serialize(&variants),
        new_index => variants.len(),
        can_add => variants.len() < MAX_VARIANTS,
        error => error,
        saved => saved,
    };
    page(status, "wall.html", Some(viewer), ctx)
}

/// GET /dashboard/sites/:id/wall
pub async fn wall_page(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, q: crate::api::Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?;
    render(&ctx, &viewer, &id, StatusCode::OK, &site.wall, None, q.get("saved").is_some()).await
}

/// POST /dashboard/sites/:id/wall
pub async fn wall_save(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let (viewer, form) = admin_change(viewer, form)?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let wall = match checked_wall(&site.wall, &form) {
        Ok(w) => w,
        Err(e) => return render(&ctx, &viewer, &id, e.status, &wall_from_form(&site.wall, &form), Some(e.message), false).await,
    };
    let (account, site_id) = (viewer.account_id(), site.id);
    let changes = SiteChanges { wall: Some(wall), ..Default::default() };
    ctx.writer.apply(move |c| sites::update(c, account, site_id, &changes)).await?;
    ctx.directory.forget_site(&ctx.store, site_id).await;
    Ok(redirect(&format!("/dashboard/sites/{site_id}/wall?saved=1")))
}

/// The wall the form describes, checked as saving checks it: the editor's
/// rules, then the API's own (so both doors accept the same walls). The live
/// preview uses it too, so it shows only what could be saved.
pub fn checked_wall(current: &Json, form: &Form) -> Result<Json, ApiError> {
    let wall = wall_from_form(current, form);
    validate(&wall).map_err(|message| ApiError::invalid("wall", "invalid", message))?;
    Ok(parse_wall(Some(&wall))?.unwrap_or(wall))
}

/// The edited wall: the form's fields over the current configuration.
fn wall_from_form(current: &Json, form: &Form) -> Json {
    let mut wall = current.as_object().cloned().unwrap_or_default();
    let old_variants: Vec<Json> = current.get("variants").and_then(Json::as_array).cloned().unwrap_or_default();
    if let Some(kind) = form.text("kind") {
        wall.insert("kind".into(), json!(kind));
    }
    if let Some(secs) = form.text("dismiss_after_seconds") {
        wall.insert("dismiss_after_seconds".into(), secs.parse::<u64>().map_or(json!(secs), |n| json!(n)));
    }
    let mut colors = wall.get("colors").and_then(Json::as_object).cloned().unwrap_or_default();
    for (name, _) in DEFAULT_COLORS {
        if let Some(c) = form.text(&format!("color_{name}")) {
            colors.insert(name.into(), json!(c.to_ascii_lowercase()));
        }
    }
    wall.insert("colors".into(), Json::Object(colors));

    let mut variants = Vec::new();
    for i in 0..=MAX_VARIANTS {
        let field = |f: &str| form.get(&format!("v{i}_{f}")).map(str::trim);
        let Some(name) = field("name") else { continue };
        let title = field("title").unwrap_or_default();
        let body = field("body").unwrap_or_default();
        // The blank row for a new variant is ignored until something is typed in it.
        if field("remove").is_some() || (name.is_empty() && title.is_empty() && body.is_empty()) {
            continue;
        }
        let mut v = old_variants
            .iter()
            .find(|o| o.get("name").and_then(Json::as_str) == field("original"))
            .and_then(Json::as_object)
            .cloned()
            .unwrap_or_default();
        v.insert("name".into(), json!(name));
        let weight = field("weight").unwrap_or("1");
        v.insert("weight".into(), weight.parse::<f64>().ok().and_then(|w| serde_json::Number::from_f64(w).map(Json::Number)).unwrap_or(json!(weight)));
        v.insert("title".into(), json!(title));
        v.insert("body".into(), json!(body));
        variants.push(Json::Object(v));
    }
    wall.insert("variants".into(), Json::Array(variants));
    Json::Object(wall)
}

/// What the editor checks beyond the API's rules: known kinds, a sane delay,
/// colours, and texts present and not too long.
fn validate(wall: &Json) -> Result<(), String> {
    let kind = wall.get("kind").and_then(Json::as_str).unwrap_or("soft");
    if !KINDS.contains(&kind) {
        return Err(format!("The kind must be one of {}.", KINDS.join(", ")));
    }
    if let Some(d) = wall.get("dismiss_after_seconds") {
        if d.as_u64().is_none_or(|d| d > MAX_DISMISS_SECS) {
            return Err(format!("The dismiss delay must be a whole number of seconds from 0 to {MAX_DISMISS_SECS}."));
        }
    }
    for (name, _) in DEFAULT_COLORS {
        if let Some(c) = wall.get("colors").and_then(|c| c.get(name)) {
            if !c.as_str().is_some_and(is_hex_color) {
                return Err(format!("The {name} colour must look like #1a2b3c."));
            }
        }
    }
    let variants = wall.get("variants").and_then(Json::as_array).map(Vec::as_slice).unwrap_or_default();
    if variants.is_empty() {
        return Err("Keep at least one variant.".into());
    }
    if variants.len() > MAX_VARIANTS {
        return Err(format!("A wall has at most {MAX_VARIANTS} variants."));
    }
    for v in variants {
        let name = v.get("name").and_then(Json::as_str).unwrap_or_default();
        let label = if name.is_empty() { "A new variant".to_owned() } else { format!("Variant {name}") };
        let text = |f: &str| v.get(f).and_then(Json::as_str).unwrap_or_default().chars().count();
        if text("title") == 0 || text("body") == 0 {
            return Err(format!("{label} needs a title and a text."));
        }
        if text("title") > MAX_TITLE_LEN || text("body") > MAX_BODY_LEN {
            return Err(format!("{label}: the title is limited to {MAX_TITLE_LEN} characters and the text to {MAX_BODY_LEN}."));
        }
        if !v.get("weight").and_then(Json::as_f64).is_some_and(|w| w.is_finite() && w >= 0.0) {
            return Err(format!("{label}: the weight must be a number of zero or more."));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Form {
        Form(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn the_form_edits_known_fields_and_keeps_the_rest() {
        let current = json!({
            "kind": "soft", "frequency": "session", "dismiss_after_seconds": 5,
            "variants": [{"name": "control", "weight": 1, "title": "T", "body": "B", "cta": "keep me"}, {"name": "old", "weight": 1, "title": "x", "body": "y"}]
        });
        let f = form(&[
            ("kind", "hard"), ("dismiss_after_seconds", "0"), ("color_accent", "#AA0000"),
            ("v0_original", "control"), ("v0_name", "control"), ("v0_weight", "2.5"), ("v0_title", "New title"), ("v0_body", "New body"),
            ("v1_original", "old"), ("v1_name", "old"), ("v1_weight", "1"), ("v1_title", "x"), ("v1_body", "y"), ("v1_remove", "on"),
            ("v2_name", "fresh"), ("v2_weight", "1"), ("v2_title", "Hi"), ("v2_body", "There"),
            ("v3_name", ""), ("v3_weight", "1"), ("v3_title", ""), ("v3_body", ""),
        ]);
        let wall = wall_from_form(&current, &f);
        assert_eq!(wall["kind"], "hard");
        assert_eq!(wall["frequency"], "session", "unknown fields are kept");
        assert_eq!(wall["dismiss_after_seconds"], 0);
        assert_eq!(wall["colors"]["accent"], "#aa0000");
        let v = wall["variants"].as_array().unwrap();
        assert_eq!(v.len(), 2, "{wall}");
        assert_eq!(v[0], json!({"name": "control", "weight": 2.5, "title": "New title", "body": "New body", "cta": "keep me"}));
        assert_eq!(v[1]["name"], "fresh");
        assert_eq!(validate(&wall), Ok(()));
    }

    #[test]
    fn bad_walls_are_explained() {
        let ok = json!({"kind": "soft", "variants": [{"name": "a", "weight": 1, "title": "t", "body": "b"}]});
        assert_eq!(validate(&ok), Ok(()));
        let mut w = ok.clone();
        w["kind"] = json!("popup");
        assert!(validate(&w).unwrap_err().contains("kind"));
        let mut w = ok.clone();
        w["colors"] = json!({"text": "red"});
        assert!(validate(&w).unwrap_err().contains("text colour"));
        let mut w = ok.clone();
        w["variants"][0]["title"] = json!("");
        assert!(validate(&w).unwrap_err().contains("needs a title"));
        let mut w = ok.clone();
        w["variants"][0]["weight"] = json!("heavy");
        assert!(validate(&w).unwrap_err().contains("weight"));
        let mut w = ok;
        w["variants"] = json!([]);
        assert!(validate(&w).is_err());
    }
}
