//! The wall editor's live preview over HTTP: the editor's draft checked as
//! saving checks it, the preview page, and the sandbox the SDK talks to
//! (config = the draft, bait answered, events accepted and thrown away).

use reqwest::Method;
use serde_json::{json, Value};

use crate::dashboard::{create_user, csrf, Browser};
use crate::support::{event, id, Answer, TestApp};

/// The probe paths the SDK requests under its endpoint (each bait set's,
/// then the control's), as the filter-list test proves them.
fn probe_paths() -> Vec<String> {
    let bait: Value = serde_json::from_str(include_str!("../../../tests/filter-lists/bait.json")).unwrap();
    let sets = bait["sets"].as_array().unwrap().iter().chain([&bait["control"]]);
    sets.map(|s| s["request_path"].as_str().unwrap().to_owned()).collect()
}

fn bait_path() -> String {
    probe_paths().swap_remove(0)
}

/// An edited form of the default wall: a banner, a new title for `control`.
fn draft_form(token: &str) -> Vec<(&str, &str)> {
    vec![
        ("csrf", token),
        ("kind", "banner"),
        ("dismiss_after_seconds", "3"),
        ("color_background", "#fff8e1"),
        ("color_text", "#1a1a1a"),
        ("color_accent", "#8a1c1c"),
        ("v0_original", "control"), ("v0_name", "control"), ("v0_weight", "1"), ("v0_title", "Draft title"), ("v0_body", "Draft body."),
        ("v1_original", "emotional"), ("v1_name", "emotional"), ("v1_weight", "1"), ("v1_title", "We need you"), ("v1_body", "Really."),
        ("v2_original", "offer"), ("v2_name", "offer"), ("v2_weight", "1"), ("v2_title", "x"), ("v2_body", "y"), ("v2_remove", "on"),
    ]
}

/// A request as the SDK sends it: no cookie, no key.
fn bare(app: &TestApp, method: Method, path: &str) -> Answer {
    app.send(app.request(method, path))
}

fn signed_in<'a>(app: &'a TestApp, email: &str, role: &str) -> Browser<'a> {
    create_user(app, email, role);
    let mut b = Browser::new(app);
    b.login(email);
    b
}

#[test]
fn the_sandbox_serves_the_unsaved_draft_and_throws_events_away() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let saved = app.get(&format!("/v1/sites/{site}")).body["wall"].clone();
    let mut b = signed_in(&app, "ann@example.com", "admin");
    let editor = format!("/dashboard/sites/{site}/wall");
    let token = csrf(&b.get(&editor));

    let a = b.post(&format!("{editor}/preview"), &draft_form(&token));
    a.expect(201);
    assert_eq!(a.header("cache-control"), Some("no-store"));
    let url = a.body["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("{editor}/preview/")), "{url}");
    assert_eq!(a.body["variants"], json!(["control", "emotional"]));
    assert_eq!(app.get(&format!("/v1/sites/{site}")).body["wall"], saved, "previewing saves nothing");

    // The preview page loads the real SDK and points it at its own address.
    let page = b.get(&format!("{url}?variant=emotional"));
    page.expect(200);
    assert!(page.text.contains("<script src=\"/p/v1.js\""), "{}", page.text);
    assert!(page.text.contains(&format!("data-endpoint=\"{}\"", url.replace('/', "&#x2f;"))), "{}", page.text);
    assert!(page.text.contains("data-variant=\"emotional\""));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self' 'wasm-unsafe-eval'") && csp.contains("frame-ancestors 'self'"), "{csp}");
    assert!(!b.get(&format!("{url}?variant=nope")).text.contains("data-variant"), "unknown variants are left to the SDK's choice");

    // The SDK's config request, without cookies as the SDK sends it: the draft.
    let config = bare(&app, Method::GET, &format!("{url}/v1/sdk/sites/{site}/config"));
    config.expect(200);
    assert_eq!(config.header("cache-control"), Some("no-store"));
    assert_eq!(config.body["site_id"], site.as_str());
    assert_eq!(config.body["active"], true);
    let wall = &config.body["wall"];
    assert_eq!(wall["kind"], "banner");
    assert_eq!(wall["dismiss_after_seconds"], 3);
    assert_eq!(wall["colors"], json!({"background": "#fff8e1", "text": "#1a1a1a", "accent": "#8a1c1c"}));
    assert_eq!(wall["variants"][0]["title"], "Draft title");
    assert_eq!(wall["variants"].as_array().unwrap().len(), 2);
    // The public config still serves the saved wall.
    assert_eq!(bare(&app, Method::GET, &format!("/v1/sdk/sites/{site}/config")).body["wall"], saved);

    // The bait and the control are answered as the real paths answer them (so no blocker is imagined).
    for path in probe_paths() {
        let probe = bare(&app, Method::GET, &format!("{url}{path}?n=9f3a0c"));
        probe.expect(200);
        assert!(probe.text.contains("postern bait 9f3a0c"), "{path}: {}", probe.text);
    }

    // Events are accepted and thrown away; the same event sent to the real
    // endpoint is stored, so the count below could see one.
    let sdk_event = |event_id: &str| {
        let mut e = event(&site, "preview-session", "pageview", json!({"metadata": {"debug": true}}));
        e["event_id"] = json!(event_id);
        e.to_string()
    };
    let preview_id = "0b6e2f0c-6a55-4c4e-9a51-1b1f0d7c3a01";
    let real_id = "0b6e2f0c-6a55-4c4e-9a51-1b1f0d7c3a02";
    let sandboxed = app.send(app.request(Method::POST, &format!("{url}/v1/e")).header("Content-Type", "text/plain").body(sdk_event(preview_id)));
    sandboxed.expect(204);
    let real = app.send(app.request(Method::POST, "/v1/e").bearer_auth(&app.key).header("Content-Type", "text/plain").body(sdk_event(real_id)));
    real.expect(201);
    let stored = app.events(&site, "").body;
    assert_eq!(stored["total"], 1, "only the real event is stored: {stored}");
    assert_eq!(stored["events"][0]["event_id"], real_id, "{stored}");
}

#[test]
fn the_preview_needs_a_session_its_token_and_the_sites_account() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let other_key = app.admin(&["create-key", "--account", "someone-else"]);
    let theirs = app.post_as(&other_key, "/v1/sites", &json!({"name": "Theirs", "domain": "theirs.example", "timezone": "UTC"}));
    theirs.expect(201);
    let theirs = id(&theirs.body);
    let mut b = signed_in(&app, "ann@example.com", "admin");
    let editor = format!("/dashboard/sites/{site}/wall");
    let token = csrf(&b.get(&editor));

    // Without a session: 401 in the API's error shape (the editor's script reads it).
    let anonymous = app.send(app.request(Method::POST, &format!("{editor}/preview")).form(&draft_form(&token)));
    anonymous.expect(401);
    assert_eq!(anonymous.error().0, "UNAUTHENTICATED");
    // Without the CSRF token.
    let mut form = draft_form(&token);
    form[0] = ("csrf", "forged");
    let forged = b.post(&format!("{editor}/preview"), &form);
    forged.expect(403);
    assert_eq!(forged.error().1.as_deref(), Some("csrf"));
    // Another account's site does not exist for this user.
    let foreign = b.post(&format!("/dashboard/sites/{theirs}/wall/preview"), &draft_form(&token));
    foreign.expect(404);
    assert_eq!(foreign.error().0, "NOT_FOUND");

    let url = b.post(&format!("{editor}/preview"), &draft_form(&token)).body["url"].as_str().unwrap().to_owned();
    let token_of = url.rsplit('/').next().unwrap().to_owned();
    // The page needs the session: without one, the login form.
    let page = Browser::new(&app).get(&url);
    assert_eq!(page.status.as_u16(), 303);
    assert!(page.header("location").unwrap().starts_with("/dashboard/login?next="));
    // A token opens its own site's draft only, and an unknown token nothing.
    for path in [
        format!("/dashboard/sites/{theirs}/wall/preview/{token_of}/v1/sdk/sites/{theirs}/config"),
        format!("{url}/v1/sdk/sites/{theirs}/config"),
        format!("{editor}/preview/{}/v1/sdk/sites/{site}/config", "0".repeat(64)),
    ] {
        let a = bare(&app, Method::GET, &path);
        a.expect(404);
        assert_eq!(a.error().0, "NOT_FOUND", "{path}");
    }
    b.get(&format!("/dashboard/sites/{theirs}/wall/preview/{token_of}")).expect(404);
    // Nothing but the SDK's paths lives under the sandbox.
    bare(&app, Method::GET, &format!("{url}/v1/sites")).expect(404);
    bare(&app, Method::POST, &format!("{url}/v1/events/track")).expect(404);
    bare(&app, Method::GET, &format!("{url}/v1/sdk/sites/{site}/config")).expect(200);
    // The token opens the draft to whoever holds it: it stays out of the log.
    let logs = app.logs();
    assert!(logs.contains("/wall/preview/<token>/v1/sdk/sites/"), "preview requests are logged:\n{logs}");
    assert!(!logs.contains(&token_of), "the preview token was logged:\n{logs}");
}

#[test]
fn invalid_drafts_are_refused_as_saving_refuses_them() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let mut b = signed_in(&app, "ann@example.com", "admin");
    let editor = format!("/dashboard/sites/{site}/wall");
    let token = csrf(&b.get(&editor));
    let cases: [(&[(&str, &str)], &str, &str); 5] = [
        (&[("kind", "popup"), ("v0_name", "a"), ("v0_title", "t"), ("v0_body", "b")], "wall", "kind must be one of"),
        (&[("kind", "soft"), ("v0_name", "a b"), ("v0_title", "t"), ("v0_body", "b")], "wall.variants[0].name", "a variant needs a name"),
        (&[("kind", "soft"), ("v0_name", "a"), ("v0_title", "t"), ("v0_body", "b"), ("color_text", "red")], "wall", "text colour"),
        (&[("kind", "soft"), ("v0_name", "a"), ("v0_title", ""), ("v0_body", "b")], "wall", "needs a title"),
        (&[("kind", "soft"), ("v0_name", "a"), ("v0_title", "t"), ("v0_body", "b"), ("v1_name", "a"), ("v1_title", "t"), ("v1_body", "b")], "wall.variants[1].name", "appears twice"),
    ];
    for (pairs, field, message) in cases {
        let mut form = vec![("csrf", token.as_str())];
        form.extend_from_slice(pairs);
        let a = b.post(&format!("{editor}/preview"), &form);
        a.expect(400);
        let (code, f, reason) = a.error();
        assert_eq!((code.as_str(), f.as_deref(), reason.as_str()), ("INVALID_REQUEST", Some(field), "invalid"), "{pairs:?}");
        assert!(a.body["error"]["message"].as_str().unwrap().contains(message), "{pairs:?} should say {message:?}: {}", a.text);
        // The same form is refused by saving too.
        assert_eq!(b.post(&editor, &form).status.as_u16(), 400, "{pairs:?}");
    }
}

#[test]
fn a_reader_previews_but_cannot_save() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let saved = app.get(&format!("/v1/sites/{site}")).body["wall"].clone();
    let mut b = signed_in(&app, "rita@example.com", "reader");
    let editor = format!("/dashboard/sites/{site}/wall");
    let page = b.get(&editor);
    assert!(page.text.contains("id=\"preview-frame\"") && !page.text.contains("Save wall"));
    let token = csrf(&page);

    let a = b.post(&format!("{editor}/preview"), &draft_form(&token));
    a.expect(201);
    let url = a.body["url"].as_str().unwrap();
    b.get(url).expect(200);
    assert_eq!(bare(&app, Method::GET, &format!("{url}/v1/sdk/sites/{site}/config")).body["wall"]["kind"], "banner");

    let save = b.post(&editor, &draft_form(&token));
    save.expect(403);
    assert_eq!(app.get(&format!("/v1/sites/{site}")).body["wall"], saved);
}

/// Signs in on an app with these flags and mints a preview of the site's wall.
fn preview_of(app: &TestApp, site: &str) -> String {
    let mut b = signed_in(app, "ann@example.com", "admin");
    let editor = format!("/dashboard/sites/{site}/wall");
    let token = csrf(&b.get(&editor));
    let a = b.post(&format!("{editor}/preview"), &draft_form(&token));
    a.expect(201);
    a.body["url"].as_str().unwrap().to_owned()
}

/// The cookie-less requests the preview's SDK makes on one load: config, bait, an event.
fn sdk_load(app: &TestApp, url: &str, site: &str, n: usize) -> Vec<Answer> {
    vec![
        bare(app, Method::GET, &format!("{url}/v1/sdk/sites/{site}/config")),
        bare(app, Method::GET, &format!("{url}{}?n={n}", bait_path())),
        app.send(app.request(Method::POST, &format!("{url}/v1/e")).header("Content-Type", "text/plain").body("{}")),
    ]
}

#[test]
fn previews_do_not_use_up_the_addresss_public_limit_but_keep_their_own() {
    // The default public limit: 100 requests a minute per address.
    let app = TestApp::spawn_with(&["--rate-limit-api", "100", "--rate-limit-ingest", "0"]);
    let site = id(&app.create_site("news.example.com", "UTC"));
    let url = preview_of(&app, &site);
    // The site config has its own, larger budget (the SDK's files'); the
    // OpenAPI document counts against the address's public limit.
    let config = "/v1/openapi.json".to_owned();
    let remaining = |a: &Answer| a.header("x-ratelimit-remaining").unwrap().parse::<u32>().unwrap();
    let before = bare(&app, Method::GET, &config);
    before.expect(200);
    assert_eq!(before.header("x-ratelimit-limit"), Some("100"));
    for n in 0..120 {
        for a in sdk_load(&app, &url, &site, n) {
            assert!(a.status.is_success(), "preview load {n}: {} {}", a.status, a.text);
            assert_eq!(a.header("x-ratelimit-limit"), Some("1000"), "counted against the draft's own limit");
        }
    }
    // The address's public limit is untouched by those 360 requests, and still applies.
    let after = bare(&app, Method::GET, &config);
    after.expect(200);
    assert_eq!(remaining(&after), remaining(&before) - 1, "the preview loads took nothing from the address");
    for _ in 0..remaining(&after) {
        bare(&app, Method::GET, &config).expect(200);
    }
    let (code, _, _) = bare(&app, Method::GET, &config).expect(429).error();
    assert_eq!(code, "RATE_LIMITED");
    // A made-up token opens no draft: it is counted per address like any public request.
    let forged = format!("/dashboard/sites/{site}/wall/preview/{}/v1/sdk/sites/{site}/config", "0".repeat(64));
    bare(&app, Method::GET, &forged).expect(429);
    // The real draft still answers.
    bare(&app, Method::GET, &format!("{url}/v1/sdk/sites/{site}/config")).expect(200);

    // The draft's own limit: ten times the public one.
    let app = TestApp::spawn_with(&["--rate-limit-api", "5", "--rate-limit-ingest", "0"]);
    let site = id(&app.create_site("news.example.com", "UTC"));
    let url = preview_of(&app, &site);
    let config = format!("{url}/v1/sdk/sites/{site}/config");
    for _ in 0..50 {
        bare(&app, Method::GET, &config).expect(200);
    }
    let (code, _, _) = bare(&app, Method::GET, &config).expect(429).error();
    assert_eq!(code, "RATE_LIMITED");
}
