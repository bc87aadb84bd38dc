//! Content coding of what the warp routes answer, chosen by the request's
//! `Accept-Encoding` (q-values, `identity` and `*` as RFC 9110 §12.5.3 says;
//! brotli preferred over gzip when both are equally acceptable):
//! - files embedded in the binary carry their brotli and gzip forms, made at
//!   build time (`build.rs`), on the response as an [`Embedded`] extension: the
//!   form chosen is sent with its strong ETag, and `If-None-Match` gets a 304;
//! - other answers of a compressible type above [`MIN_SIZE`] (JSON, HTML, CSV
//!   exports, which stay streamed) are compressed as they are sent.
//!
//! Ingestion never comes here: the gateway answers it itself, and its answers
//! are a few dozen bytes.

use std::convert::Infallible;

use async_compression::tokio::bufread::{BrotliEncoder, GzipEncoder};
use async_compression::Level;
use futures_util::TryStreamExt;
use http::header::{ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH, VARY};
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::io::AsyncReadExt;
use tokio_util::io::{ReaderStream, StreamReader};
use tower_service::Service;
use warp::reply::Response;
use warp::Reply;

/// Smaller answers are sent as they are: a coding's own overhead and the
/// time to apply it buy little on a few hundred bytes. The site config every
/// walled visitor fetches (about 600 B) is above it: 613 → 335 B with brotli.
pub const MIN_SIZE: u64 = 512;

/// Answers of a known size up to this are compressed whole and sent with
/// their `Content-Length`; larger and streamed ones as they are produced.
const BUFFERED_MAX: u64 = 256 * 1024;

/// Brotli quality for answers compressed as they are sent: 11 (the build's)
/// costs ~100 times as much CPU as 4 for a few per cent fewer bytes.
const DYNAMIC_BROTLI_QUALITY: i32 = 4;

/// One form of an embedded file: its bytes and their strong ETag (quoted).
#[derive(Debug)]
pub struct Form {
    pub bytes: &'static [u8],
    pub etag: &'static str,
}

/// An embedded file as `build.rs` made it: as is, and its gzip and brotli
/// forms when they are smaller.
#[derive(Debug)]
pub struct Embedded {
    pub identity: Form,
    pub gzip: Option<Form>,
    pub br: Option<Form>,
}

impl Embedded {
    /// A 200 with the file as is; the gateway's call of [`serve`] puts the
    /// form the client accepts in its place. A file cached as `immutable`
    /// (named after its content) gets no ETag: no browser revalidates it, and
    /// every first visit would download the header (44 B) for nothing.
    pub fn reply(&'static self, content_type: &'static str, cache_control: &'static str) -> Response {
        let mut res = Response::new(self.identity.bytes.into());
        let h = res.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(CACHE_CONTROL, HeaderValue::from_static(cache_control));
        if !cache_control.contains("immutable") {
            h.insert(ETAG, HeaderValue::from_static(self.identity.etag));
        }
        res.extensions_mut().insert(EmbeddedReply(self));
        res
    }
}

/// Marks a response whose body is an embedded file.
#[derive(Clone, Copy)]
struct EmbeddedReply(&'static Embedded);

/// A content coding this server can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Brotli,
    Gzip,
    Identity,
}

impl Coding {
    fn token(self) -> &'static str {
        match self {
            Coding::Brotli => "br",
            Coding::Gzip => "gzip",
            Coding::Identity => "identity",
        }
    }
}

/// What a request's `Accept-Encoding` allows: a weight per coding, in
/// thousandths (q=0.5 is 500; 0 means "not acceptable").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    br: u16,
    gzip: u16,
    identity: u16,
}

impl Accepted {
    /// No header: identity only. RFC 9110 lets a server assume any coding,
    /// but a client that sends no `Accept-Encoding` (curl, scripts) may not
    /// decode one. An empty header also means identity only. Identity not
    /// named (nor `*`) is acceptable, but after any coding the client names.
    pub fn read(headers: &HeaderMap) -> Accepted {
        let mut accepted = Accepted { br: 0, gzip: 0, identity: 1 };
        let (mut br, mut gzip, mut identity, mut any) = (None, None, None, None);
        for value in headers.get_all(ACCEPT_ENCODING) {
            let Ok(value) = value.to_str() else { continue };
            for item in value.split(',') {
                let mut parts = item.split(';');
                let coding = parts.next().unwrap_or_default().trim();
                if coding.is_empty() {
                    continue;
                }
                let Some(q) = weight(parts) else { continue };
                let slot = match coding.to_ascii_lowercase().as_str() {
                    "br" => &mut br,
                    "gzip" | "x-gzip" => &mut gzip,
                    "identity" => &mut identity,
                    "*" => &mut any,
                    _ => continue,
                };
                *slot = Some(q);
            }
        }
        // `*` stands for every coding not named, identity included.
        accepted.br = br.or(any).unwrap_or(0);
        accepted.gzip = gzip.or(any).unwrap_or(0);
        accepted.identity = identity.or(any).unwrap_or(accepted.identity);
        accepted
    }

    /// The most acceptable of the codings offered (identity is always
    /// offered); on equal weights brotli, then gzip, then identity. When the
    /// client accepts none of them, identity all the same: RFC 9110 §12.1
    /// lets a server disregard the header rather than answer 406.
    pub fn choose(self, br: bool, gzip: bool) -> Coding {
        let offers = [(Coding::Brotli, br, self.br), (Coding::Gzip, gzip, self.gzip), (Coding::Identity, true, self.identity)];
        let mut best = (Coding::Identity, 0);
        for (coding, offered, q) in offers {
            if offered && q > best.1 {
                best = (coding, q);
            }
        }
        best.0
    }
}

/// The weight of one `Accept-Encoding` item from its parameters (default
/// 1); `None` for a malformed one, which is ignored.
fn weight<'a>(params: impl Iterator<Item = &'a str>) -> Option<u16> {
    let mut q = 1000;
    for param in params {
        let Some((name, value)) = param.split_once('=') else { return None };
        if !name.trim().eq_ignore_ascii_case("q") {
            continue;
        }
        q = qvalue(value.trim())?;
    }
    Some(q)
}

/// `0`, `1`, `0.5`, `1.000`: at most three decimals, at most 1.
fn qvalue(text: &str) -> Option<u16> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = frac.bytes().chain(std::iter::repeat(b'0')).take(3).fold(0u16, |n, b| n * 10 + u16::from(b - b'0'));
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Calls the routes with `req`, then codes the answer as the request accepts.
pub async fn serve<S, B>(mut routes: S, req: Request<B>) -> Response
where
    S: Service<Request<B>, Response = Response, Error = Infallible>,
{
    let accepted = Accepted::read(req.headers());
    let if_none_match = req.headers().get(IF_NONE_MATCH).cloned();
    let res = routes.call(req).await.unwrap_or_else(|never| match never {});
    match res.extensions().get::<EmbeddedReply>().copied() {
        Some(EmbeddedReply(file)) => embedded(file, accepted, if_none_match.as_ref(), res),
        None => dynamic(accepted, res).await,
    }
}

/// The form of an embedded file the client accepts, or a 304 when it
/// already holds that form.
fn embedded(file: &'static Embedded, accepted: Accepted, if_none_match: Option<&HeaderValue>, mut res: Response) -> Response {
    if res.status() != StatusCode::OK {
        return res;
    }
    let coding = accepted.choose(file.br.is_some(), file.gzip.is_some());
    let form = match coding {
        Coding::Brotli => file.br.as_ref(),
        Coding::Gzip => file.gzip.as_ref(),
        Coding::Identity => None,
    }
    .unwrap_or(&file.identity);
    let h = res.headers_mut();
    h.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    let validated = h.contains_key(ETAG);
    if validated {
        h.insert(ETAG, HeaderValue::from_static(form.etag));
    }
    if coding != Coding::Identity {
        h.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
    }
    if validated && if_none_match.is_some_and(|tags| matches_etag(tags, form.etag)) {
        *res.status_mut() = StatusCode::NOT_MODIFIED;
        *res.body_mut() = warp::reply::Response::default().into_body();
        res.headers_mut().remove(CONTENT_LENGTH);
        return res;
    }
    *res.body_mut() = Response::new(form.bytes.into()).into_body();
    res
}

/// `If-None-Match`: `*`, or a list of entity tags compared weakly (RFC 9110 §13.1.2).
fn matches_etag(header: &HeaderValue, etag: &str) -> bool {
    let Ok(list) = header.to_str() else { return false };
    list.split(',').map(str::trim).any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

/// Compresses, as it is sent, an answer of a compressible type that is not
/// known to be small.
async fn dynamic(accepted: Accepted, res: Response) -> Response {
    if res.headers().contains_key(CONTENT_ENCODING) || !compressible(res.headers()) {
        return res;
    }
    let size = res.body().size_hint();
    if res.body().is_end_stream() || size.exact().is_some_and(|n| n < MIN_SIZE) {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    parts.headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    let coding = accepted.choose(true, true);
    if coding == Coding::Identity {
        return Response::from_parts(parts, body);
    }
    parts.headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
    parts.headers.remove(CONTENT_LENGTH);
    // A strong ETag names the bytes, and these are not the route's any more.
    if let Some(tag) = parts.headers.get(ETAG).and_then(|t| t.to_str().ok()).filter(|t| !t.starts_with("W/")) {
        if let Ok(weak) = HeaderValue::from_str(&format!("W/{tag}")) {
            parts.headers.insert(ETAG, weak);
        }
    }
    if size.exact().is_some_and(|n| n <= BUFFERED_MAX) {
        return match body.collect().await {
            Ok(whole) => {
                let coded = encode_whole(coding, &whole.to_bytes()).await;
                parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(coded.len()));
                Response::from_parts(parts, coded.into())
            }
            Err(e) => crate::error::ApiError::internal(format_args!("an answer's body failed before it was compressed: {e}")).into_response(),
        };
    }
    let input = StreamReader::new(body.into_data_stream().map_err(std::io::Error::other));
    let coded = match coding {
        Coding::Brotli => warp::reply::stream(ReaderStream::new(BrotliEncoder::with_quality(input, Level::Precise(DYNAMIC_BROTLI_QUALITY)))).into_response(),
        _ => warp::reply::stream(ReaderStream::new(GzipEncoder::new(input))).into_response(),
    };
    Response::from_parts(parts, coded.into_body())
}

async fn encode_whole(coding: Coding, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / 2);
    // Reading from memory into memory cannot fail.
    let read = match coding {
        Coding::Brotli => BrotliEncoder::with_quality(bytes, Level::Precise(DYNAMIC_BROTLI_QUALITY)).read_to_end(&mut out).await,
        _ => GzipEncoder::new(bytes).read_to_end(&mut out).await,
    };
    debug_assert!(read.is_ok());
    out
}

/// Text compresses; archives, PDFs, images and wasm (already compressed or
/// embedded with their forms) are left alone, as is what asks for it.
fn compressible(headers: &HeaderMap) -> bool {
    if headers.get(CACHE_CONTROL).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("no-transform")) {
        return false;
    }
    let Some(kind) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let kind = kind.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    kind.starts_with("text/") && kind != "text/event-stream"
        || matches!(kind.as_str(), "application/json" | "application/javascript" | "application/x-ndjson" | "image/svg+xml")
        || kind.ends_with("+json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(value: &str) -> Accepted {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
        Accepted::read(&h)
    }

    #[test]
    fn brotli_is_preferred_when_equally_acceptable() {
        assert_eq!(accepted("gzip, deflate, br, zstd").choose(true, true), Coding::Brotli);
        assert_eq!(accepted("br;q=1.0, gzip;q=1").choose(true, true), Coding::Brotli);
        assert_eq!(accepted("gzip, deflate, br").choose(false, true), Coding::Gzip, "no brotli form");
        assert_eq!(accepted("gzip, deflate, br").choose(false, false), Coding::Identity);
    }

    #[test]
    fn q_values_are_honoured() {
        assert_eq!(accepted("br;q=0.5, gzip;q=0.8").choose(true, true), Coding::Gzip);
        assert_eq!(accepted("br;q=0.5, gzip;q=0.8").choose(false, false), Coding::Identity);
        assert_eq!(accepted("gzip;q=0.001").choose(true, true), Coding::Gzip, "a named coding beats identity not named");
        assert_eq!(accepted("br;q=0, gzip").choose(true, true), Coding::Gzip);
        assert_eq!(accepted("br;q=0.001").choose(true, true), Coding::Brotli, "any weight above 0 beats a coding not listed");
        assert_eq!(accepted("gzip;q=0.2, identity;q=0.5").choose(true, true), Coding::Identity);
        assert_eq!(accepted("GZIP; Q=0.9").choose(true, true), Coding::Gzip, "case-insensitive");
        assert_eq!(accepted("x-gzip").choose(true, true), Coding::Gzip);
    }

    #[test]
    fn identity_and_star_follow_the_rfc() {
        let none = Accepted::read(&HeaderMap::new());
        assert_eq!(none.choose(true, true), Coding::Identity, "no header: identity");
        assert_eq!(accepted("").choose(true, true), Coding::Identity, "empty header: identity");
        assert_eq!(accepted("*").choose(true, true), Coding::Brotli);
        assert_eq!(accepted("*;q=0.5, br;q=0").choose(true, true), Coding::Gzip, "* covers what is not named");
        assert_eq!(accepted("identity;q=0, gzip;q=0.1").choose(true, true), Coding::Gzip);
        assert_eq!(accepted("*;q=0").choose(true, true), Coding::Identity, "nothing acceptable: the header is disregarded");
        assert_eq!(accepted("deflate, zstd").choose(true, true), Coding::Identity, "identity is acceptable unless excluded");
    }

    #[test]
    fn malformed_items_are_ignored() {
        assert_eq!(accepted("br;q=2, gzip").choose(true, true), Coding::Gzip, "q above 1");
        assert_eq!(accepted("br;q=0.5555, gzip;q=0.1").choose(true, true), Coding::Gzip, "four decimals");
        assert_eq!(accepted("br;q, gzip;q=0.1").choose(true, true), Coding::Gzip, "no value");
        assert_eq!(accepted("br;q=abc").choose(true, true), Coding::Identity);
        assert_eq!(accepted(",, ;q=1, br").choose(true, true), Coding::Brotli);
    }

    #[test]
    fn if_none_match_compares_weakly_and_knows_star() {
        let tag = "\"0123abcd\"";
        for header in ["\"0123abcd\"", "W/\"0123abcd\"", "\"x\", \"0123abcd\"", "*"] {
            assert!(matches_etag(&HeaderValue::from_str(header).unwrap(), tag), "{header}");
        }
        for header in ["\"0123abce\"", "0123abcd", ""] {
            assert!(!matches_etag(&HeaderValue::from_str(header).unwrap(), tag), "{header}");
        }
    }

    #[test]
    fn only_text_is_compressed_as_it_is_sent() {
        let typed = |kind: &str| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_TYPE, HeaderValue::from_str(kind).unwrap());
            compressible(&h)
        };
        for kind in ["application/json", "text/html; charset=utf-8", "text/csv; charset=utf-8", "application/problem+json", "text/plain; version=0.0.4"] {
            assert!(typed(kind), "{kind}");
        }
        for kind in ["application/zip", "application/pdf", "application/wasm", "image/png", "application/octet-stream", "text/event-stream"] {
            assert!(!typed(kind), "{kind}");
        }
    }
}
