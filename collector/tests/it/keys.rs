//! API keys: generation (secret shown once), listing without secrets, scope subsets, revocation and last use.

use std::time::{Duration, Instant};

use crate::support::*;
use reqwest::Method;
use serde_json::{json, Value};

fn revoke_as(app: &TestApp, key: &str, id: &str) -> Answer {
    app.send(app.request(Method::DELETE, &format!("/v1/keys/{id}")).bearer_auth(key))
}

/// The listed key with this id.
#[track_caller]
fn listed(app: &TestApp, id: &str) -> Value {
    let a = app.get("/v1/keys");
    a.expect(200);
    a.body["keys"]
        .as_array()
        .expect("keys array")
        .iter()
        .find(|k| k["id"].as_str() == Some(id))
        .unwrap_or_else(|| panic!("key {id} not listed: {}", a.text))
        .clone()
}

#[track_caller]
fn assert_scopes(v: &Value, expected: &[&str]) {
    let mut got: Vec<&str> = v["scopes"].as_array().expect("scopes array").iter().map(|s| s.as_str().expect("scope string")).collect();
    got.sort_unstable();
    let mut want = expected.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "{v}");
}

#[test]
fn create_shows_the_secret_once_with_its_prefix() {
    let app = TestApp::spawn();
    let a = app.post("/v1/keys", &json!({"name": "CI export", "scopes": ["read"]}));
    a.expect(201);
    let secret = a.body["key"].as_str().expect("the new key's secret").to_owned();
    assert!(secret.starts_with("pst_"), "{secret}");
    assert!(secret.len() > "pst_".len() + 16, "the secret must be long: {secret}");
    let prefix = a.body["prefix"].as_str().expect("prefix");
    assert!(prefix.starts_with("pst_"), "{prefix}");
    assert!(secret.starts_with(prefix), "prefix {prefix} must begin the secret {secret}");
    assert!(prefix.len() < secret.len(), "the prefix must not reveal the whole secret");
    let id = a.body["id"].as_str().expect("id");
    uuid::Uuid::parse_str(id).expect("key id is a UUID");
    assert_eq!(a.body["name"], "CI export");
    assert_scopes(&a.body, &["read"]);
    let created_at = a.body["created_at"].as_str().expect("created_at");
    assert!(created_at.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(created_at).is_ok(), "{created_at}");
    assert!(a.body["revoked_at"].is_null(), "{}", a.text);
    assert!(a.body["last_used_at"].is_null(), "{}", a.text);

    // The new key works, within its scopes.
    app.get_as(&secret, "/v1/sites").expect(200);
    let w = app.post_as(&secret, "/v1/sites", &json!({"name": "x", "domain": "x.example.com"}));
    w.expect(403);
    assert_eq!(w.error().0, "FORBIDDEN");
}

#[test]
fn every_generated_key_is_different() {
    let app = TestApp::spawn();
    let a = app.post("/v1/keys", &json!({}));
    let b = app.post("/v1/keys", &json!({}));
    a.expect(201);
    b.expect(201);
    assert_ne!(a.body["key"], b.body["key"]);
    assert_ne!(a.body["id"], b.body["id"]);
    assert_ne!(a.body["key"], json!(app.key));
}

#[test]
fn create_without_scopes_inherits_the_callers_scopes() {
    let app = TestApp::spawn();
    let a = app.post("/v1/keys", &json!({"name": "all"}));
    a.expect(201);
    assert_scopes(&a.body, &["read", "write", "ingest"]);

    let rw = app.admin(&["create-key", "--account", "acme", "--scopes", "read,write"]);
    let b = app.post_as(&rw, "/v1/keys", &json!({"name": "inherited"}));
    b.expect(201);
    assert_scopes(&b.body, &["read", "write"]);
}

#[test]
fn listing_never_shows_secrets() {
    let app = TestApp::spawn();
    let created = app.post("/v1/keys", &json!({"name": "secret keeper", "scopes": ["read", "ingest"]}));
    created.expect(201);
    let secret = created.body["key"].as_str().unwrap().to_owned();
    let a = app.get("/v1/keys");
    a.expect(200);
    let keys = a.body["keys"].as_array().expect("keys array");
    assert_eq!(keys.len(), 2, "the harness key and the new one: {}", a.text);
    for k in keys {
        assert!(k.get("key").is_none(), "a listed key must not carry its secret: {k}");
        assert!(k.get("secret").is_none() && k.get("secret_hash").is_none(), "{k}");
        for field in ["id", "name", "prefix", "created_at"] {
            assert!(k[field].is_string(), "listed key lacks {field}: {k}");
        }
        assert!(k["scopes"].is_array(), "{k}");
    }
    assert!(!a.text.contains(&secret), "the new secret appears in the listing: {}", a.text);
    assert!(!a.text.contains(&app.key), "the caller's own secret appears in the listing");
    let mine = listed(&app, created.body["id"].as_str().unwrap());
    assert_eq!(mine["name"], "secret keeper");
    assert_eq!(mine["prefix"], created.body["prefix"]);
    assert_scopes(&mine, &["read", "ingest"]);
}

#[test]
fn keys_list_only_the_callers_account() {
    let app = TestApp::spawn();
    let other = app.admin(&["create-key", "--account", "other"]);
    let theirs = app.post_as(&other, "/v1/keys", &json!({"name": "theirs"}));
    theirs.expect(201);
    let a = app.get("/v1/keys");
    a.expect(200);
    let ids: Vec<&str> = a.body["keys"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "acme has only the harness key: {}", a.text);
    assert!(!ids.contains(&theirs.body["id"].as_str().unwrap()));
    let b = app.get_as(&other, "/v1/keys");
    assert_eq!(b.body["keys"].as_array().unwrap().len(), 2, "{}", b.text);
}

#[test]
fn a_key_cannot_grant_scopes_it_lacks() {
    let app = TestApp::spawn();
    let rw = app.admin(&["create-key", "--account", "acme", "--scopes", "read,write"]);
    for scopes in [json!(["ingest"]), json!(["read", "ingest"]), json!(["read", "write", "ingest"])] {
        let a = app.post_as(&rw, "/v1/keys", &json!({"name": "escalate", "scopes": scopes}));
        a.expect(403);
        let (code, field, _) = a.error();
        assert_eq!(code, "FORBIDDEN", "{}", a.text);
        assert_eq!(field.as_deref(), Some("scopes"), "{}", a.text);
    }
    // A subset is fine.
    let ok = app.post_as(&rw, "/v1/keys", &json!({"name": "narrower", "scopes": ["read"]}));
    ok.expect(201);
    assert_scopes(&ok.body, &["read"]);
    // Only the harness key, the CLI key and the narrower one exist.
    assert_eq!(app.get("/v1/keys").body["keys"].as_array().unwrap().len(), 3);
}

#[test]
fn creating_keys_needs_the_write_scope() {
    let app = TestApp::spawn();
    let read = app.admin(&["create-key", "--account", "acme", "--scopes", "read"]);
    let a = app.post_as(&read, "/v1/keys", &json!({"scopes": ["read"]}));
    a.expect(403);
    assert_eq!(a.error().0, "FORBIDDEN");
    let ingest = app.admin(&["create-key", "--account", "acme", "--scopes", "ingest"]);
    let a = app.get_as(&ingest, "/v1/keys");
    a.expect(403);
    assert_eq!(a.error().0, "FORBIDDEN");
}

#[test]
fn create_validates_its_body() {
    let app = TestApp::spawn();
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"scopes": []}), "scopes", "invalid"),
        (json!({"scopes": ["admin"]}), "scopes", "invalid"),
        (json!({"scopes": "read"}), "scopes", "invalid"),
        (json!({"scopes": [1]}), "scopes", "invalid"),
        (json!({"name": ""}), "name", "invalid"),
        (json!({"name": 5}), "name", "invalid"),
        (json!({"name": "n".repeat(101)}), "name", "invalid"),
        (json!({"name": "ok", "expires": "never"}), "expires", "unknown_field"),
    ];
    for (body, field, reason) in cases {
        let a = app.post("/v1/keys", &body);
        assert_eq!(a.status.as_u16(), 400, "{body}: {}", a.text);
        let (code, f, r) = a.error();
        assert_eq!(code, "INVALID_REQUEST");
        assert_eq!(f.as_deref(), Some(field), "{body}: {}", a.text);
        assert_eq!(r, reason, "{body}");
    }
    let a = app.send(app.request(Method::POST, "/v1/keys").bearer_auth(&app.key).header("Content-Type", "application/json").body("{nope"));
    a.expect(400);
    assert_eq!(a.error().1.as_deref(), Some("body"));
    assert_eq!(app.get("/v1/keys").body["keys"].as_array().unwrap().len(), 1, "no key was created");
}

#[test]
fn a_revoked_key_is_refused_with_reason_revoked() {
    let app = TestApp::spawn();
    let created = app.post("/v1/keys", &json!({"name": "short-lived"}));
    created.expect(201);
    let secret = created.body["key"].as_str().unwrap().to_owned();
    let key_id = created.body["id"].as_str().unwrap().to_owned();
    app.get_as(&secret, "/v1/sites").expect(200);

    let a = app.delete(&format!("/v1/keys/{key_id}"));
    a.expect(204);
    assert!(a.text.is_empty(), "{:?}", a.text);

    let refused = app.get_as(&secret, "/v1/sites");
    refused.expect(401);
    let (code, field, reason) = refused.error();
    assert_eq!(code, "UNAUTHENTICATED");
    assert_eq!(field.as_deref(), Some("Authorization"));
    assert_eq!(reason, "revoked");

    // Ingestion refuses it too.
    let site = app.create_site("example.com", "UTC");
    let t = app.post_as(&secret, "/v1/events/track", &event(&id(&site), "session-0001", "adblock_detected", json!({})));
    t.expect(401);
    assert_eq!(t.error().2, "revoked");

    // The listing keeps it, marked revoked.
    let k = listed(&app, &key_id);
    let revoked_at = k["revoked_at"].as_str().unwrap_or_else(|| panic!("revoked_at must be set: {k}"));
    assert!(chrono::DateTime::parse_from_rfc3339(revoked_at).is_ok(), "{revoked_at}");

    // The caller's own key still works.
    app.get("/v1/sites").expect(200);
}

#[test]
fn a_key_can_revoke_itself() {
    let app = TestApp::spawn();
    let created = app.post("/v1/keys", &json!({"name": "self"}));
    let secret = created.body["key"].as_str().unwrap().to_owned();
    let id = created.body["id"].as_str().unwrap().to_owned();
    revoke_as(&app, &secret, &id).expect(204);
    let a = app.get_as(&secret, "/v1/keys");
    a.expect(401);
    assert_eq!(a.error().2, "revoked");
}

#[test]
fn revoking_unknown_or_foreign_keys_is_404() {
    let app = TestApp::spawn();
    let other = app.admin(&["create-key", "--account", "other"]);
    let theirs = app.post_as(&other, "/v1/keys", &json!({"name": "theirs"}));
    theirs.expect(201);
    let their_secret = theirs.body["key"].as_str().unwrap().to_owned();
    let their_id = theirs.body["id"].as_str().unwrap().to_owned();

    for path in [
        format!("/v1/keys/{their_id}"),
        format!("/v1/keys/{}", uuid::Uuid::new_v4()),
        "/v1/keys/not-a-uuid".to_owned(),
    ] {
        let a = app.delete(&path);
        a.expect(404);
        assert_eq!(a.error().0, "NOT_FOUND", "{path}");
    }
    // The other account's key still works.
    app.get_as(&their_secret, "/v1/sites").expect(200);
    let k = app.get_as(&other, "/v1/keys");
    let listed = k.body["keys"].as_array().unwrap().iter().find(|k| k["id"].as_str() == Some(&their_id)).cloned().unwrap();
    assert!(listed["revoked_at"].is_null(), "{listed}");
}

#[test]
fn revoking_needs_the_write_scope() {
    let app = TestApp::spawn();
    let created = app.post("/v1/keys", &json!({"name": "target"}));
    let id = created.body["id"].as_str().unwrap().to_owned();
    let read = app.admin(&["create-key", "--account", "acme", "--scopes", "read"]);
    let a = revoke_as(&app, &read, &id);
    a.expect(403);
    assert_eq!(a.error().0, "FORBIDDEN");
    assert!(listed(&app, &id)["revoked_at"].is_null());
}

#[test]
fn a_key_revokes_only_keys_whose_scopes_it_holds() {
    let app = TestApp::spawn();
    let make = |name: &str, scopes: &[&str]| {
        let a = app.post("/v1/keys", &json!({"name": name, "scopes": scopes}));
        a.expect(201);
        (a.body["key"].as_str().unwrap().to_owned(), a.body["id"].as_str().unwrap().to_owned())
    };
    let (writer, writer_id) = make("write only", &["write"]);
    let (read_write, _) = make("read and write", &["read", "write"]);
    let (_, ingest) = make("ingest", &["ingest"]);
    let (_, read) = make("read", &["read"]);
    let (_, all) = make("everything", &["read", "write", "ingest"]);
    let (_, twin) = make("another read and write", &["read", "write"]);

    // A write-only key cannot take down a key with a scope it does not hold.
    for (target, missing) in [(&ingest, "ingest"), (&read, "read"), (&all, "read"), (&twin, "read")] {
        let a = revoke_as(&app, &writer, target);
        a.expect(403);
        let (code, field, reason) = a.error();
        assert_eq!((code.as_str(), field.as_deref(), reason.as_str()), ("FORBIDDEN", Some("id"), "insufficient_scope"), "{}", a.text);
        assert!(a.body["error"]["message"].as_str().unwrap().contains(missing), "{}", a.text);
        assert!(listed(&app, target)["revoked_at"].is_null(), "refused means not revoked");
    }
    // Scopes held, equal or fewer: revoked.
    revoke_as(&app, &read_write, &read).expect(204);
    revoke_as(&app, &read_write, &twin).expect(204);
    assert!(listed(&app, &read)["revoked_at"].is_string() && listed(&app, &twin)["revoked_at"].is_string());
    // An unknown id is still 404, not 403, whatever the caller holds.
    assert_eq!(revoke_as(&app, &writer, &uuid::Uuid::new_v4().to_string()).expect(404).error().0, "NOT_FOUND");
    // Any key can revoke itself, and a key with every scope any key.
    revoke_as(&app, &writer, &writer_id).expect(204);
    revoke_as(&app, &app.key, &all).expect(204);
    revoke_as(&app, &app.key, &ingest).expect(204);
    assert!(listed(&app, &ingest)["revoked_at"].is_string());
}

#[test]
fn last_used_at_is_set_after_use() {
    let app = TestApp::spawn();
    let created = app.post("/v1/keys", &json!({"name": "tracked", "scopes": ["read"]}));
    created.expect(201);
    let secret = created.body["key"].as_str().unwrap().to_owned();
    let id = created.body["id"].as_str().unwrap().to_owned();
    assert!(listed(&app, &id)["last_used_at"].is_null(), "an unused key has no last_used_at");

    let before = chrono::Utc::now() - chrono::Duration::seconds(2);
    app.get_as(&secret, "/v1/sites").expect(200);

    // The use is recorded without making the request wait: poll briefly.
    let deadline = Instant::now() + Duration::from_secs(10);
    let used = loop {
        let k = listed(&app, &id);
        if let Some(t) = k["last_used_at"].as_str() {
            break t.to_owned();
        }
        assert!(Instant::now() < deadline, "last_used_at never set: {k}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(used.ends_with('Z'), "{used}");
    let t = chrono::DateTime::parse_from_rfc3339(&used).expect("ISO 8601").with_timezone(&chrono::Utc);
    assert!(t >= before && t <= chrono::Utc::now() + chrono::Duration::seconds(2), "last_used_at {used} should be about now");
}
