//! What the binary sends for each `Accept-Encoding`, decompressed and compared
//! with the files it embeds: the SDK (when `scripts/build-sdk` ran before the
//! build, as `scripts/test` does), the demo site and the dashboard's assets
//! (always embedded); answers compressed as they are sent (JSON, streamed CSV
//! exports) and those that must not be (small, ingestion, ZIP).

use std::io::Read;
use std::path::{Path, PathBuf};

use reqwest::blocking::{Client, Response};
use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One answer with its raw (still coded) body.
struct Raw {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect()
    }

    /// The body decoded as its `Content-Encoding` says.
    fn decoded(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self.header("content-encoding") {
            None => out.extend_from_slice(&self.body),
            Some("gzip") => {
                flate2::read::GzDecoder::new(self.body.as_slice()).read_to_end(&mut out).expect("valid gzip");
            }
            Some("br") => {
                brotli::Decompressor::new(self.body.as_slice(), 4096).read_to_end(&mut out).expect("valid brotli");
            }
            Some(other) => panic!("unexpected content-encoding {other}"),
        }
        out
    }
}

/// A client that neither asks for nor decodes any coding by itself.
fn client() -> Client {
    Client::builder().no_gzip().no_brotli().build().unwrap()
}

fn fetch(app: &TestApp, method: Method, path: &str, headers: &[(&str, &str)]) -> Raw {
    let mut req = client().request(method, app.url(path)).bearer_auth(&app.key);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let res: Response = req.send().expect("HTTP request");
    let (status, headers) = (res.status().as_u16(), res.headers().clone());
    Raw { status, headers, body: res.bytes().expect("body").to_vec() }
}

/// The strong ETag the server gives a form: the first 16 bytes of its SHA-256, quoted.
fn etag_of(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Checks every coding of one embedded file against its source, its ETags
/// and the 304 (`validated`; a file named after its content has neither),
/// and HEAD.
#[track_caller]
fn serves_every_form(app: &TestApp, path: &str, source: &[u8], validated: bool) {
    let get = |accept: Option<&str>| {
        let headers: Vec<(&str, &str)> = accept.map(|a| vec![("accept-encoding", a)]).unwrap_or_default();
        let a = fetch(app, Method::GET, path, &headers);
        assert_eq!(a.status, 200, "{path} with {accept:?}");
        assert!(a.all("vary").iter().any(|v| v.eq_ignore_ascii_case("accept-encoding")), "{path}: Vary {:?}", a.all("vary"));
        assert_eq!(a.decoded(), source, "{path} with {accept:?}: decoded body differs from the embedded file");
        assert_eq!(a.header("content-length"), Some(a.body.len().to_string().as_str()), "{path} with {accept:?}");
        let etag = validated.then(|| etag_of(&a.body));
        assert_eq!(a.header("etag"), etag.as_deref(), "{path} with {accept:?}: a strong ETag of the bytes sent, when validated");
        a
    };
    let br = get(Some("gzip, deflate, br, zstd"));
    assert_eq!(br.header("content-encoding"), Some("br"), "{path}: brotli preferred");
    let gzip = get(Some("gzip"));
    assert_eq!(gzip.header("content-encoding"), Some("gzip"), "{path}");
    assert_eq!(get(Some("br;q=0.5, gzip;q=0.9")).header("content-encoding"), Some("gzip"), "{path}: q-values honoured");
    for accept in [None, Some("identity"), Some("br;q=0, gzip;q=0"), Some("*;q=0")] {
        assert_eq!(get(accept).header("content-encoding"), None, "{path} with {accept:?}");
    }
    let identity = get(None);
    assert!(br.body.len() < gzip.body.len() && gzip.body.len() < identity.body.len(), "{path}: br {} < gzip {} < identity {}", br.body.len(), gzip.body.len(), identity.body.len());
    let head = fetch(app, Method::HEAD, path, &[("accept-encoding", "br")]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for name in ["content-encoding", "content-length", "content-type", "etag", "cache-control", "vary"] {
        assert_eq!(head.all(name), br.all(name), "{path}: HEAD's {name}");
    }
    if !validated {
        assert!(br.header("cache-control").is_some_and(|c| c.contains("immutable")), "{path}: {:?}", br.header("cache-control"));
        let a = fetch(app, Method::GET, path, &[("accept-encoding", "br"), ("if-none-match", "*")]);
        assert_eq!((a.status, a.decoded()), (200, source.to_vec()), "{path}: nothing to revalidate against");
        return;
    }
    let tags = [br.header("etag"), gzip.header("etag"), identity.header("etag")];
    assert!(tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2], "{path}: one ETag per form: {tags:?}");

    // A client holding the form it would get again: 304, no body.
    let brotli_tag = br.header("etag").unwrap();
    for held in [brotli_tag.to_owned(), format!("W/{brotli_tag}"), format!("\"0000\", {brotli_tag}"), "*".to_owned()] {
        let a = fetch(app, Method::GET, path, &[("accept-encoding", "br"), ("if-none-match", &held)]);
        assert_eq!(a.status, 304, "{path} with If-None-Match {held}");
        assert!(a.body.is_empty(), "{path}: a 304 has no body");
        assert_eq!(a.header("etag"), Some(brotli_tag), "{path}");
        assert!(a.all("vary").iter().any(|v| v.eq_ignore_ascii_case("accept-encoding")), "{path}");
        assert_eq!(a.header("cache-control"), br.header("cache-control"), "{path}");
    }
    // Its brotli form is not what a gzip-only client holds.
    let a = fetch(app, Method::GET, path, &[("accept-encoding", "gzip"), ("if-none-match", brotli_tag)]);
    assert_eq!(a.status, 200, "{path}: another form's ETag does not match");
    assert_eq!(a.decoded(), source);
}

#[test]
fn the_demo_site_and_dashboard_files_are_served_precompressed() {
    let app = TestApp::spawn_with(&["--demo", "--rate-limit-api", "0", "--rate-limit-ingest", "0"]);
    for (path, source) in [
        ("/demo/style.css", root().join("www-demo/style.css")),
        ("/dashboard/assets/app.css", root().join("collector/src/dashboard/assets/app.css")),
        ("/dashboard/assets/app.js", root().join("collector/src/dashboard/assets/app.js")),
        ("/dashboard/assets/wall.js", root().join("collector/src/dashboard/assets/wall.js")),
    ] {
        serves_every_form(&app, path, &std::fs::read(&source).unwrap(), true);
    }
    // The demo's pages are templates (its site id is filled in): compressed as they are sent.
    let page = fetch(&app, Method::GET, "/demo/", &[("accept-encoding", "gzip")]);
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-encoding"), Some("gzip"));
    let html = String::from_utf8(page.decoded()).unwrap();
    assert!(html.contains("data-site-id=\"") && !html.contains("{{POSTERN_SITE_ID}}"), "{html}");
}

/// Every file of `sdk-wasm/dist` (the loader names the others), or nothing in
/// a binary built before `scripts/build-sdk`.
#[test]
fn every_sdk_file_is_served_precompressed_with_timing_allowed() {
    let app = TestApp::spawn();
    let loader = fetch(&app, Method::GET, "/p/v1.js", &[]);
    if loader.status == 503 {
        // The binary was built without the SDK: sdk.rs checks that answer.
        return;
    }
    let dist = root().join("sdk-wasm/dist");
    let mut files: Vec<String> = std::fs::read_dir(&dist).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert!(files.contains(&"v1.js".to_owned()) && files.len() >= 3, "dist holds the loader and what it loads: {files:?}");
    for file in &files {
        let path = format!("/p/{file}");
        // Only the loader keeps its name from one release to the next.
        serves_every_form(&app, &path, &std::fs::read(dist.join(file)).unwrap(), file == "v1.js");
        let a = fetch(&app, Method::GET, &path, &[("accept-encoding", "br")]);
        assert_eq!(a.header("timing-allow-origin"), Some("*"), "{path}: pages may measure what it cost");
        assert_eq!(a.header("access-control-allow-origin"), Some("*"), "{path}");
        assert_no_rate_limit_headers(&a, &path);
    }
}

/// Every visitor downloads the SDK's files and probe answers: no header a
/// script cannot use (the rate-limit ones come back on a 429, `rate_limits.rs`).
#[track_caller]
fn assert_no_rate_limit_headers(a: &Raw, path: &str) {
    let names: Vec<&str> = a.headers.keys().map(|k| k.as_str()).filter(|k| k.starts_with("x-ratelimit")).collect();
    assert!(names.is_empty(), "{path}: {names:?}");
}

#[test]
fn the_sdk_probe_answers_carry_no_rate_limit_headers_but_the_site_config_does() {
    let app = TestApp::spawn();
    for path in ["/p/echo.js?n=abc", "/ads/300x250-banner_300x250.js?n=abc", "/ads/160x600-skyscraper_160x600.js?n=abc"] {
        let a = fetch(&app, Method::GET, path, &[]);
        assert_eq!(a.status, 200, "{path}");
        assert!(String::from_utf8_lossy(&a.body).contains("abc"), "{path}: the nonce comes back");
        assert_no_rate_limit_headers(&a, path);
    }
    let site = app.create_site("news.example.com", "UTC");
    let config = fetch(&app, Method::GET, &format!("/v1/sdk/sites/{}/config", id(&site)), &[]);
    assert_eq!(config.status, 200);
    assert_eq!(config.header("x-ratelimit-limit"), Some("6000"), "an API endpoint keeps the spec's headers");
}

#[test]
fn json_answers_of_512_bytes_or_more_are_compressed_small_ones_and_ingestion_are_not() {
    let app = TestApp::spawn();
    let plain = fetch(&app, Method::GET, "/v1/openapi.json", &[]);
    assert_eq!(plain.header("content-encoding"), None);
    assert!(plain.body.len() > 100 * 1024, "the OpenAPI document is large: {}", plain.body.len());
    for (accept, coding) in [("br", "br"), ("gzip", "gzip"), ("gzip;q=0.5, br;q=0.4", "gzip")] {
        let a = fetch(&app, Method::GET, "/v1/openapi.json", &[("accept-encoding", accept)]);
        assert_eq!(a.status, 200);
        assert_eq!(a.header("content-encoding"), Some(coding), "{accept}");
        assert!(a.all("vary").iter().any(|v| v.eq_ignore_ascii_case("accept-encoding")));
        assert_eq!(a.decoded(), plain.body, "{accept}");
        assert!(a.body.len() * 5 < plain.body.len(), "{accept}: {} of {} bytes", a.body.len(), plain.body.len());
    }
    let head = fetch(&app, Method::HEAD, "/v1/openapi.json", &[("accept-encoding", "gzip")]);
    assert_eq!((head.status, head.header("content-encoding"), head.body.len()), (200, Some("gzip"), 0));

    let site = app.create_site("news.example.com", "UTC");
    let small = fetch(&app, Method::GET, "/v1/sites/00000000-0000-4000-8000-000000000000", &[("accept-encoding", "gzip, br")]);
    assert_eq!(small.status, 404);
    assert!(small.body.len() < 512, "an error is a small answer: {}", small.body.len());
    assert_eq!(small.header("content-encoding"), None, "under 512 B: sent as is");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&small.body).unwrap()["error"]["code"], "NOT_FOUND");

    // The site config every walled visitor fetches: about 600 B, compressed
    // whole and sent with its length (no chunked framing).
    let path = format!("/v1/sdk/sites/{}/config", id(&site));
    let plain = fetch(&app, Method::GET, &path, &[]);
    assert!((512..1024).contains(&plain.body.len()), "{}", plain.body.len());
    for (accept, coding) in [("gzip, deflate, br, zstd", "br"), ("gzip", "gzip")] {
        let a = fetch(&app, Method::GET, &path, &[("accept-encoding", accept)]);
        assert_eq!((a.status, a.header("content-encoding")), (200, Some(coding)), "{accept}");
        assert_eq!(a.header("content-length"), Some(a.body.len().to_string().as_str()), "{accept}");
        assert_eq!(a.header("transfer-encoding"), None, "{accept}");
        assert_eq!(a.decoded(), plain.body, "{accept}");
        assert!(a.body.len() * 10 < plain.body.len() * 7, "{accept}: {} of {} bytes", a.body.len(), plain.body.len());
    }

    let body = event(&id(&site), "session-one", "pageview", json!({}));
    let mut req = client().post(app.url("/v1/events/track")).bearer_auth(&app.key).header("accept-encoding", "gzip, br");
    req = req.json(&body);
    let res = req.send().unwrap();
    assert_eq!(res.status().as_u16(), 201);
    assert!(res.headers().get("content-encoding").is_none(), "ingestion answers are never compressed");
}

#[test]
fn csv_exports_are_compressed_as_they_stream_and_zip_exports_are_not() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let now = chrono::Utc::now();
    for (i, device) in ["desktop", "mobile", "tablet"].iter().enumerate() {
        for day in 0..20u64 {
            let when = now - chrono::Duration::days(day as i64);
            let meta = json!({"metadata": {"device_type": device}, "timestamp": when.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)});
            track_ok(&app, event(&site, &format!("session-{i}-{day}"), "pageview", meta));
        }
    }
    let path = format!("/v1/sites/{site}/export?format=csv");
    let plain = fetch(&app, Method::GET, &path, &[]);
    assert_eq!(plain.status, 200, "{}", String::from_utf8_lossy(&plain.body));
    assert_eq!(plain.header("content-encoding"), None);
    assert!(String::from_utf8_lossy(&plain.body).lines().count() > 40, "one row per day and device");
    for coding in ["br", "gzip"] {
        let a = fetch(&app, Method::GET, &path, &[("accept-encoding", coding)]);
        assert_eq!(a.status, 200);
        assert_eq!(a.header("content-encoding"), Some(coding));
        assert_eq!(a.header("content-length"), None, "still streamed");
        assert_eq!(a.header("content-disposition"), plain.header("content-disposition"));
        assert_eq!(a.decoded(), plain.body, "{coding}");
    }
    let zip = fetch(&app, Method::GET, &format!("/v1/sites/{site}/export?format=zip"), &[("accept-encoding", "gzip, br")]);
    assert_eq!(zip.status, 200);
    assert_eq!(zip.header("content-encoding"), None, "a ZIP is compressed already");
    assert!(zip.body.starts_with(b"PK"), "a ZIP archive");
}
