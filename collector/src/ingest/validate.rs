//! Turns a JSON track body into a `TrackInput`, or says precisely which field
//! is wrong and why (DESIGN §5.5). Pure: no I/O.
//!
//! The body is read straight into its fields, not into a `serde_json::Value`:
//! strings are borrowed from the request bytes (unless they hold escapes), and
//! `metadata` is read into a list of its entries and written once as the JSON
//! to store, as a `serde_json::Map` would have it. Whatever a field holds is
//! still read by the same deserializer with the same checks as a `Value` would
//! be, so malformed JSON is refused with the same message.

use std::borrow::Cow;
use std::fmt;

use analytics::model::{BlockerType, Device, EventType};
use chrono::{DateTime, Utc};
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::parse_json;
use crate::error::ApiError;

pub const MAX_PAGE_URL: usize = 2048;
pub const MAX_METADATA_BYTES: usize = 2048;
pub const MAX_VARIANT_LEN: usize = 64;
/// Most events one batch may carry.
pub const MAX_BATCH_EVENTS: usize = 500;
const SESSION_ID_LEN: std::ops::RangeInclusive<usize> = 8..=128;

#[derive(Debug, Clone, PartialEq)]
pub struct TrackInput {
    pub site_id: Uuid,
    pub session_id: String,
    pub event_type: EventType,
    /// As sent: the stored event keeps the client's spelling, without the
    /// query string and fragment ([`stored_page_url`]).
    pub page_url: String,
    pub page_host: String,
    pub metadata: Metadata,
    pub device: Option<Device>,
    pub variant: Option<String>,
    pub forced_variant: bool,
    pub event_id: Option<Uuid>,
    pub timestamp: Option<DateTime<Utc>>,
}

/// An event's metadata: the JSON of the object as sent (compact, keys in the
/// order sent, a repeated key where it first stood with its last value), and
/// what it held under `device_type`.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    json: String,
    device_type: SentDevice,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum SentDevice {
    Absent,
    /// A device's own name, as stored.
    Exact(Device),
    /// `null`, or a device named with other capitals.
    Other,
}

impl Metadata {
    /// The JSON to store: the object with `device_type` set to the device the
    /// event is counted under, exactly as a `serde_json::Map` would serialize
    /// with it.
    pub fn stored(mut self, device: Device) -> String {
        let name = device.as_str();
        match self.device_type {
            SentDevice::Exact(d) if d == device => self.json,
            // A map puts a new key last.
            SentDevice::Absent => {
                self.json.pop();
                if self.json.len() > 1 {
                    self.json.push(',');
                }
                self.json.push_str("\"device_type\":\"");
                self.json.push_str(name);
                self.json.push_str("\"}");
                self.json
            }
            // Rare (the SDK sends lower case): the object is read again.
            SentDevice::Exact(_) | SentDevice::Other => {
                let mut map: Map<String, Value> = serde_json::from_str(&self.json).unwrap_or_default();
                map.insert("device_type".into(), Value::String(name.into()));
                Value::Object(map).to_string()
            }
        }
    }
}

/// Parses and validates a track body.
pub fn parse_track(bytes: &[u8]) -> Result<TrackInput, ApiError> {
    parse_json::<Body>(bytes)?.0.map_or_else(|| Err(not_an_object()), validate)
}

/// Parses a batch body; each event is validated on its own, in order.
pub fn parse_batch(bytes: &[u8]) -> Result<Vec<Result<TrackInput, ApiError>>, ApiError> {
    let Batch::Items(items) = parse_json::<Batch>(bytes)? else {
        return Err(ApiError::invalid("body", "invalid", "the body must be a JSON array of events"));
    };
    if items.is_empty() {
        return Err(ApiError::invalid("body", "required", "the batch holds no events"));
    }
    if items.len() > MAX_BATCH_EVENTS {
        return Err(ApiError::invalid("body", "too_long", format!("a batch holds at most {MAX_BATCH_EVENTS} events")));
    }
    Ok(items
        .into_iter()
        .map(|item| item.0.map_or_else(|| Err(not_an_object()), validate))
        .collect())
}

/// The page URL as it is stored: without its fragment and query string
/// (where tokens, e-mail addresses and search terms travel), except, when the
/// site keeps them, the query's `utm_*` parameters in their order.
pub fn stored_page_url(mut url: String, keep_utm: bool) -> String {
    // A fragment may hold a `?`: it goes first.
    if let Some(hash) = url.find('#') {
        url.truncate(hash);
    }
    let Some(question) = url.find('?') else { return url };
    let kept: Vec<&str> = if keep_utm {
        url[question + 1..].split('&').filter(|p| p.starts_with("utm_")).collect()
    } else {
        Vec::new()
    };
    if kept.is_empty() {
        url.truncate(question);
        return url;
    }
    format!("{}?{}", &url[..question], kept.join("&"))
}

fn not_an_object() -> ApiError {
    ApiError::invalid("body", "invalid", "the body must be a JSON object")
}

/// A JSON value as validation reads it: strings borrowed from the body
/// unless they hold escapes, arrays, objects and numbers as a `Value`.
enum Scalar<'a> {
    Null,
    Bool(bool),
    Str(Cow<'a, str>),
    Other(Value),
}

/// A track body's fields. A repeated key keeps its last value, as a
/// `serde_json::Map` does; the first unknown key is kept for the error.
#[derive(Default)]
struct Fields<'a> {
    session_id: Option<Scalar<'a>>,
    site_id: Option<Scalar<'a>>,
    event_type: Option<Scalar<'a>>,
    page_url: Option<Scalar<'a>>,
    metadata: Option<MetaField<'a>>,
    event_id: Option<Scalar<'a>>,
    timestamp: Option<Scalar<'a>>,
    unknown: Option<String>,
}

/// A body: its fields, or `None` when it is not a JSON object.
struct Body<'a>(Option<Fields<'a>>);

/// The `metadata` field: its entries when it is an object.
enum MetaField<'a> {
    Null,
    Object(Vec<Entry<'a>>),
    Other,
}

type Entry<'a> = (Text<'a>, Scalar<'a>);

/// A string, borrowed from the body unless it holds escapes.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Text<'a>(Cow<'a, str>);

enum Batch<'a> {
    Items(Vec<Body<'a>>),
    Other,
}

enum Key {
    SessionId,
    SiteId,
    EventType,
    PageUrl,
    Metadata,
    EventId,
    Timestamp,
    Unknown(String),
}

/// Reads (and checks) a value of a type validation does not look into,
/// exactly as a `Value` would be read.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<Value>()?.is_some() {}
    Ok(())
}

fn skip_map<'de, A: MapAccess<'de>>(map: A) -> Result<(), A::Error> {
    Value::deserialize(MapAccessDeserializer::new(map)).map(drop)
}

/// Visitor methods for every JSON value but the ones a visitor reads itself.
macro_rules! other_values {
    ($other:expr; $($method:ident($t:ty)),*) => {
        $(fn $method<E: de::Error>(self, _: $t) -> Result<Self::Value, E> {
            Ok($other)
        })*
    };
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(Scalar::Other(n.into()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(Scalar::Other(n.into()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Other(n.into()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Value::deserialize(SeqAccessDeserializer::new(seq)).map(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Value::deserialize(MapAccessDeserializer::new(map)).map(Scalar::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for MetaField<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetaField<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MetaField::Null)
            }
            other_values!(MetaField::Other; visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64), visit_str(&str));
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| MetaField::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                dedupe(&mut entries);
                Ok(MetaField::Object(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
                    "session_id" => Key::SessionId,
                    "site_id" => Key::SiteId,
                    "event_type" => Key::EventType,
                    "page_url" => Key::PageUrl,
                    "metadata" => Key::Metadata,
                    "event_id" => Key::EventId,
                    "timestamp" => Key::Timestamp,
                    other => Key::Unknown(other.to_owned()),
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Body<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Body<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Body(None))
            }
            other_values!(Body(None); visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64), visit_str(&str));
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| Body(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut f = Fields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::SessionId => f.session_id = Some(map.next_value()?),
                        Key::SiteId => f.site_id = Some(map.next_value()?),
                        Key::EventType => f.event_type = Some(map.next_value()?),
                        Key::PageUrl => f.page_url = Some(map.next_value()?),
                        Key::Metadata => f.metadata = Some(map.next_value()?),
                        Key::EventId => f.event_id = Some(map.next_value()?),
                        Key::Timestamp => f.timestamp = Some(map.next_value()?),
                        Key::Unknown(name) => {
                            map.next_value::<Value>()?;
                            f.unknown.get_or_insert(name);
                        }
                    }
                }
                Ok(Body(Some(f)))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Batch<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Batch<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Batch::Other)
            }
            other_values!(Batch::Other; visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64), visit_str(&str));
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Batch::Items(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                skip_map(map).map(|()| Batch::Other)
            }
        }
        d.deserialize_any(V)
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A top-level field as a string: `null` means absent.
fn required_str<'f>(value: &'f Option<Scalar<'_>>, name: &str) -> Result<&'f str, ApiError> {
    match value {
        None | Some(Scalar::Null) => Err(ApiError::required(name)),
        Some(Scalar::Str(s)) if s.is_empty() => Err(ApiError::required(name)),
        Some(Scalar::Str(s)) => Ok(s),
        Some(_) => Err(ApiError::invalid(name, "invalid", format!("{name} must be a string"))),
    }
}

fn optional_str<'f>(value: &'f Option<Scalar<'_>>, name: &str) -> Result<Option<&'f str>, ApiError> {
    match value {
        None | Some(Scalar::Null) => Ok(None),
        Some(Scalar::Str(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::invalid(name, "invalid", format!("{name} must be a string"))),
    }
}

/// A metadata field's value, treating `null` as absent.
fn meta<'m, 'a>(metadata: &'m [Entry<'a>], name: &str) -> Option<&'m Scalar<'a>> {
    metadata.iter().find(|(k, _)| k.0 == name).map(|(_, v)| v).filter(|v| !matches!(v, Scalar::Null))
}

fn meta_str<'m>(metadata: &'m [Entry<'_>], name: &str, path: &str) -> Result<Option<&'m str>, ApiError> {
    match meta(metadata, name) {
        None => Ok(None),
        Some(Scalar::Str(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::invalid(path, "invalid", format!("{path} must be a string"))),
    }
}

/// Keeps each key once, where it first stood, with its last value, as a
/// `serde_json::Map` does with a repeated key. Sorting (stable, so a key's
/// places stay in order) keeps it n log n whatever the body holds.
fn dedupe(entries: &mut Vec<Entry<'_>>) {
    // Metadata mostly holds a few distinct keys: then nothing is allocated.
    let n = entries.len();
    if n <= 16 && (1..n).all(|i| entries[..i].iter().all(|(k, _)| *k != entries[i].0)) {
        return;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| entries[a].0.cmp(&entries[b].0));
    // Each later place of a key hands its value to the first, so the last one stays.
    let mut kept = vec![true; n];
    let mut first = order[0];
    for &i in &order[1..] {
        if entries[i].0 == entries[first].0 {
            entries[first].1 = std::mem::replace(&mut entries[i].1, Scalar::Null);
            kept[i] = false;
        } else {
            first = i;
        }
    }
    let mut kept = kept.into_iter();
    entries.retain(|_| kept.next() == Some(true));
}

/// The entries as a JSON object, written as a `serde_json::Map` writes itself.
struct Entries<'m, 'a>(&'m [Entry<'a>]);

impl Serialize for Entries<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (&*k.0, v)))
    }
}

impl Serialize for Scalar<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scalar::Null => s.serialize_unit(),
            Scalar::Bool(b) => s.serialize_bool(*b),
            Scalar::Str(t) => s.serialize_str(t),
            Scalar::Other(v) => v.serialize(s),
        }
    }
}

/// The checks, in the order their errors take precedence.
fn validate(obj: Fields<'_>) -> Result<TrackInput, ApiError> {
    let session_id = required_str(&obj.session_id, "session_id")?;
    if session_id.len() > *SESSION_ID_LEN.end() {
        return Err(ApiError::invalid("session_id", "too_long", "session_id is longer than 128 characters"));
    }
    if session_id.len() < *SESSION_ID_LEN.start() || !session_id.chars().all(is_token_char) {
        return Err(ApiError::invalid(
            "session_id",
            "invalid",
            "session_id must be 8 to 128 characters of A-Z, a-z, 0-9, _ and -",
        ));
    }

    let site_id = required_str(&obj.site_id, "site_id")?;
    let site_id = Uuid::parse_str(site_id).map_err(|_| ApiError::invalid("site_id", "invalid", "site_id must be a UUID"))?;

    let event_type = required_str(&obj.event_type, "event_type")?;
    let event_type = EventType::parse(event_type).ok_or_else(|| {
        let all: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        ApiError::invalid("event_type", "invalid", format!("event_type must be one of {}", all.join(", ")))
    })?;

    let page_url = required_str(&obj.page_url, "page_url")?;
    if page_url.len() > MAX_PAGE_URL {
        return Err(ApiError::invalid("page_url", "too_long", "page_url is longer than 2048 characters"));
    }
    let page_host = crate::auth::http_url_host(page_url)
        .ok_or_else(|| ApiError::invalid("page_url", "invalid", "page_url must be an absolute http(s) URL"))?;

    let metadata = match obj.metadata {
        None | Some(MetaField::Null) => Vec::new(),
        Some(MetaField::Object(entries)) => entries,
        Some(MetaField::Other) => return Err(ApiError::invalid("metadata", "invalid", "metadata must be an object")),
    };
    // Values read from JSON always serialize back.
    let metadata_json = serde_json::to_string(&Entries(&metadata)).unwrap_or_default();
    if metadata_json.len() > MAX_METADATA_BYTES {
        return Err(ApiError::invalid("metadata", "too_long", "metadata is larger than 2 KiB once serialized"));
    }
    if let Some(b) = meta_str(&metadata, "blocker_type", "metadata.blocker_type")? {
        if BlockerType::parse(b).is_none() {
            return Err(ApiError::invalid(
                "metadata.blocker_type",
                "invalid",
                "metadata.blocker_type must be one of extension, network, browser, unknown",
            ));
        }
    }
    let sent_device = meta_str(&metadata, "device_type", "metadata.device_type")?;
    let device = sent_device
        .map(|d| {
            Device::parse(d).ok_or_else(|| {
                ApiError::invalid("metadata.device_type", "invalid", "metadata.device_type must be one of desktop, mobile, tablet")
            })
        })
        .transpose()?;
    let device_type = match (device, sent_device) {
        (Some(d), Some(sent)) if sent == d.as_str() => SentDevice::Exact(d),
        _ if metadata.iter().any(|(k, _)| k.0 == "device_type") => SentDevice::Other,
        _ => SentDevice::Absent,
    };
    let variant = meta_str(&metadata, "variant", "metadata.variant")?;
    if let Some(v) = variant {
        if v.is_empty() || v.len() > MAX_VARIANT_LEN || !v.chars().all(is_token_char) {
            return Err(ApiError::invalid(
                "metadata.variant",
                "invalid",
                "metadata.variant must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -",
            ));
        }
    }
    let variant = variant.map(str::to_owned);
    let forced_variant = match meta(&metadata, "forced_variant") {
        None => false,
        Some(Scalar::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid("metadata.forced_variant", "invalid", "metadata.forced_variant must be a boolean"))
        }
    };

    let event_id = optional_str(&obj.event_id, "event_id")?
        .map(|s| Uuid::parse_str(s).map_err(|_| ApiError::invalid("event_id", "invalid", "event_id must be a UUID")))
        .transpose()?;

    let timestamp = optional_str(&obj.timestamp, "timestamp")?
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::invalid("timestamp", "invalid", "timestamp must be an ISO 8601 date-time with an offset"))
        })
        .transpose()?;

    if let Some(unknown) = obj.unknown {
        let message = format!("unknown field {unknown}");
        return Err(ApiError::invalid(unknown, "unknown_field", message));
    }

    Ok(TrackInput {
        site_id,
        session_id: session_id.to_owned(),
        event_type,
        page_url: page_url.to_owned(),
        page_host,
        device,
        variant,
        forced_variant,
        metadata: Metadata { json: metadata_json, device_type },
        event_id,
        timestamp,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn valid() -> Value {
        json!({
            "session_id": "sess_12345678",
            "site_id": "6f1c2f4e-8f5b-4a57-9a43-2b0c1e0d9a11",
            "event_type": "adblock_detected",
            "page_url": "https://news.example.com/a?b=c",
            "metadata": {"blocker_type": "extension", "device_type": "Mobile", "variant": "emotional"}
        })
    }

    fn parse(body: &Value) -> Result<TrackInput, ApiError> {
        parse_track(body.to_string().as_bytes())
    }

    fn error_of(mut body: Value, change: impl FnOnce(&mut Map<String, Value>)) -> (String, String) {
        change(body.as_object_mut().unwrap());
        let e = parse(&body).unwrap_err();
        assert_eq!(e.status, 400);
        (e.field.unwrap(), e.reason.to_owned())
    }

    fn refusal(e: ApiError) -> (u16, String, &'static str, String) {
        (e.status.as_u16(), e.field.unwrap_or_default(), e.reason, e.message)
    }

    #[test]
    fn stored_page_urls_lose_their_query_and_fragment_but_utm_when_kept() {
        let cases = [
            ("https://e.com/path?token=x&utm_source=y#frag", "https://e.com/path", "https://e.com/path?utm_source=y"),
            ("https://e.com/path", "https://e.com/path", "https://e.com/path"),
            ("https://e.com/p?", "https://e.com/p", "https://e.com/p"),
            ("https://e.com?a=1", "https://e.com", "https://e.com"),
            ("https://e.com/p#a?utm_source=frag", "https://e.com/p", "https://e.com/p"),
            (
                "https://e.com/p?utm_source=news&email=a%40b.c&utm_medium=mail&UTM_X=1&xutm_y=2#t",
                "https://e.com/p",
                "https://e.com/p?utm_source=news&utm_medium=mail",
            ),
            ("https://e.com/caf\u{e9}?q=1", "https://e.com/caf\u{e9}", "https://e.com/caf\u{e9}"),
        ];
        for (sent, without, with_utm) in cases {
            assert_eq!(stored_page_url(sent.to_owned(), false), without, "{sent}");
            assert_eq!(stored_page_url(sent.to_owned(), true), with_utm, "{sent} keeping utm");
        }
    }

    #[test]
    fn a_valid_body_parses() {
        let t = parse(&valid()).unwrap();
        assert_eq!(t.event_type, EventType::AdblockDetected);
        assert_eq!(t.device, Some(Device::Mobile));
        assert_eq!(t.variant.as_deref(), Some("emotional"));
        assert!(!t.forced_variant);
        assert_eq!(t.metadata.json, valid()["metadata"].to_string());
    }

    #[test]
    fn each_required_field_is_named_when_missing() {
        for f in ["session_id", "site_id", "event_type", "page_url"] {
            assert_eq!(error_of(valid(), |o| drop(o.remove(f))), (f.to_owned(), "required".to_owned()));
            assert_eq!(error_of(valid(), |o| drop(o.insert(f.into(), Value::Null))), (f.to_owned(), "required".to_owned()));
        }
    }

    #[test]
    fn bad_values_are_named_with_a_reason() {
        let cases: Vec<(&str, Value, &str, &str)> = vec![
            ("session_id", json!("short"), "session_id", "invalid"),
            ("session_id", json!("x".repeat(129)), "session_id", "too_long"),
            ("session_id", json!("has space 123"), "session_id", "invalid"),
            ("session_id", json!(12345678), "session_id", "invalid"),
            ("session_id", json!(["sess_12345678"]), "session_id", "invalid"),
            ("session_id", json!({"a": 1}), "session_id", "invalid"),
            ("site_id", json!("not-a-uuid"), "site_id", "invalid"),
            ("event_type", json!("click"), "event_type", "invalid"),
            ("page_url", json!("/relative"), "page_url", "invalid"),
            ("page_url", json!("ftp://example.com/"), "page_url", "invalid"),
            ("page_url", json!(format!("https://e.com/{}", "a".repeat(2048))), "page_url", "too_long"),
            ("metadata", json!([1]), "metadata", "invalid"),
            ("metadata", json!("{}"), "metadata", "invalid"),
            ("metadata", json!({"blob": "x".repeat(2100)}), "metadata", "too_long"),
            ("metadata", json!({"blocker_type": "dns"}), "metadata.blocker_type", "invalid"),
            ("metadata", json!({"device_type": "tv"}), "metadata.device_type", "invalid"),
            ("metadata", json!({"variant": "no spaces please"}), "metadata.variant", "invalid"),
            ("metadata", json!({"forced_variant": "yes"}), "metadata.forced_variant", "invalid"),
            ("event_id", json!("nope"), "event_id", "invalid"),
            ("event_id", json!(7), "event_id", "invalid"),
            ("timestamp", json!("yesterday"), "timestamp", "invalid"),
            ("siteId", json!("x"), "siteId", "unknown_field"),
        ];
        for (key, value, field, reason) in cases {
            let got = error_of(valid(), |o| drop(o.insert(key.into(), value.clone())));
            assert_eq!(got, (field.to_owned(), reason.to_owned()), "{key} = {value}");
        }
    }

    #[test]
    fn the_first_failing_check_wins() {
        // Checks run in a fixed order, whatever the order of the keys.
        let body = br#"{"zz": 1, "timestamp": "x", "metadata": 1, "page_url": "/", "event_type": "x", "site_id": "x", "session_id": 1}"#;
        assert_eq!(refusal(parse_track(body).unwrap_err()).1, "session_id");
        let mut v = valid();
        v["metadata"] = json!({"forced_variant": 1, "variant": "a b", "device_type": "tv", "blocker_type": "dns"});
        v["event_id"] = json!("nope");
        v["zz"] = json!(1);
        assert_eq!(refusal(parse(&v).unwrap_err()).1, "metadata.blocker_type");
        v["metadata"] = json!({"blob": "x".repeat(2100), "blocker_type": "dns"});
        assert_eq!(refusal(parse(&v).unwrap_err()).1, "metadata");
        v["metadata"] = json!({});
        assert_eq!(refusal(parse(&v).unwrap_err()).1, "event_id");
        v["event_id"] = Value::Null;
        assert_eq!(refusal(parse(&v).unwrap_err()), (400, "zz".into(), "unknown_field", "unknown field zz".into()));
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_first_place() {
        // As a serde_json::Map does: the value is replaced where the key first stood.
        let body = br#"{"session_id": "x", "site_id": "6f1c2f4e-8f5b-4a57-9a43-2b0c1e0d9a11", "event_type": "pageview",
            "page_url": "https://e.com/", "session_id": "sess_12345678",
            "metadata": {"variant": "a b", "device_type": "tablet", "variant": "b"}}"#;
        let t = parse_track(body).unwrap();
        assert_eq!(t.session_id, "sess_12345678");
        assert_eq!(t.variant.as_deref(), Some("b"));
        assert_eq!(t.metadata.json, r#"{"variant":"b","device_type":"tablet"}"#);
        let later_null = br#"{"session_id": "sess_12345678", "site_id": "6f1c2f4e-8f5b-4a57-9a43-2b0c1e0d9a11",
            "event_type": "pageview", "page_url": "https://e.com/", "session_id": null}"#;
        assert_eq!(refusal(parse_track(later_null).unwrap_err()).1, "session_id");
        let unknowns = br#"{"b": 1, "session_id": "sess_12345678", "site_id": "6f1c2f4e-8f5b-4a57-9a43-2b0c1e0d9a11",
            "event_type": "pageview", "page_url": "https://e.com/", "a": 2, "b": 3}"#;
        assert_eq!(refusal(parse_track(unknowns).unwrap_err()).1, "b");
    }

    #[test]
    fn null_means_absent() {
        let mut v = valid();
        for f in ["metadata", "event_id", "timestamp"] {
            v[f] = Value::Null;
        }
        let t = parse(&v).unwrap();
        assert!(t.metadata.json == "{}" && t.event_id.is_none() && t.timestamp.is_none());
        v["metadata"] = json!({"device_type": null, "variant": null, "forced_variant": null, "blocker_type": null});
        let t = parse(&v).unwrap();
        assert_eq!((t.device, t.variant, t.forced_variant), (None, None, false));
        // Kept as sent: the stored metadata shows the nulls.
        assert_eq!(t.metadata.json, r#"{"device_type":null,"variant":null,"forced_variant":null,"blocker_type":null}"#);
    }

    #[test]
    fn escaped_strings_and_keys_are_read_unescaped() {
        let body = br#"{"session_\u0069d": "sess\u005f12345678", "site_id": "6f1c2f4e-8f5b-4a57-9a43-2b0c1e0d9a11",
            "event_type": "page\u0076iew", "page_url": "https:\/\/e.com\/caf\u00e9",
            "metadata": {"v\u0061riant": "\u0041b"}}"#;
        let t = parse_track(body).unwrap();
        assert_eq!(t.session_id, "sess_12345678");
        assert_eq!(t.event_type, EventType::Pageview);
        assert_eq!(t.page_url, "https://e.com/café");
        assert_eq!(t.variant.as_deref(), Some("Ab"));
        assert_eq!(t.metadata.json, r#"{"variant":"Ab"}"#);
    }

    #[test]
    fn metadata_is_stored_as_a_map_would_serialize_it() {
        let many: String = (0..40).map(|i| format!(r#""k{}": {i}, "#, i % 7)).collect();
        for metadata in [
            r#"{}"#,
            r#"{ "variant" : "b" , "device_type":"desktop" }"#,
            r#"{"a": 1, "b": 2, "a": 3, "c": {"x": 1, "x": [2]}, "b": null, "a": true}"#,
            r#"{"n": [0, -0, 1.0, 1e5, -2.5e-3, 12345678901234567890, -9223372036854775808, 1.5e300]}"#,
            r#"{"\u0061": "caf\u00e9 \"q\" \\ \/ \t", "é": "ü", "a": "\ud83d\ude00"}"#,
            r#"{"nested": {"b": 1, "a": {"z": [], "y": {}}}, "list": [{"k": "v"}, null, false]}"#,
            &format!(r#"{{{many}"last": 1}}"#),
        ] {
            let body = format!(
                r#"{{"session_id": "sess_12345678", "site_id": "6f1c2f4e-8f5b-4a57-9a43-2b0c1e0d9a11",
                "event_type": "pageview", "page_url": "https://e.com/", "metadata": {metadata}}}"#
            );
            let expected = serde_json::from_str::<Value>(&body).unwrap()["metadata"].to_string();
            assert_eq!(parse_track(body.as_bytes()).unwrap().metadata.json, expected, "{metadata}");
        }
    }

    #[test]
    fn stored_metadata_is_the_object_with_the_counted_device_set() {
        // What the JSON written once becomes, against the object serialized with the key set.
        for (metadata, device) in [
            (json!({}), Device::Desktop),
            (json!({"variant": "b", "x": [1, {"y": "é\"\n"}]}), Device::Mobile),
            (json!({"device_type": "tablet", "variant": "b"}), Device::Tablet),
            (json!({"device_type": "Tablet", "variant": "b"}), Device::Tablet),
            (json!({"device_type": null, "variant": "b"}), Device::Desktop),
            (json!({"variant": "b", "device_type": "mobile"}), Device::Mobile),
        ] {
            let mut v = valid();
            v["metadata"] = metadata.clone();
            let t = parse(&v).unwrap();
            let mut expected = metadata.as_object().unwrap().clone();
            expected.insert("device_type".into(), json!(device.as_str()));
            assert_eq!(t.metadata.stored(device), Value::Object(expected).to_string());
        }
    }

    #[test]
    fn the_body_must_be_an_object() {
        for body in ["[1, 2]", "\"x\"", "1", "-1", "1.5", "null", "true", " [] "] {
            let e = refusal(parse_track(body.as_bytes()).unwrap_err());
            assert_eq!(e, (400, "body".into(), "invalid", "the body must be a JSON object".into()), "{body}");
        }
        for body in ["", " \n\t"] {
            let e = refusal(parse_track(body.as_bytes()).unwrap_err());
            assert_eq!(e, (400, "body".into(), "required", "a JSON body is required".into()), "{body:?}");
        }
    }

    #[test]
    fn malformed_json_is_refused_as_a_value_parse_would_refuse_it() {
        let deep = format!(r#"{{"x": {}1{}}}"#, "[".repeat(200), "]".repeat(200));
        let bodies: Vec<&[u8]> = vec![
            b"{",
            b"{\"a\":}",
            b"{\"a\" 1}",
            b"{\"a\":1,}",
            b"{} x",
            b"[{}",
            b"nul",
            b"{\"session_id\": 1e400}",
            b"{\"zz\": [1, -1e999]}",
            b"{\"metadata\": {\"a\": 1e400}}",
            b"{\"metadata\": {\"a\": \"\\ud800\"}}",
            b"{\"site_id\": \"\\x\"}",
            b"{\"session_id\": \"\xff\"}",
            b"{\"\xff\": 1}",
            b"{\"page_url\": \"a\nb\"}",
            b"{1: 2}",
            deep.as_bytes(),
        ];
        for body in bodies {
            let expected = serde_json::from_slice::<Value>(body).unwrap_err();
            let e = refusal(parse_track(body).unwrap_err());
            assert_eq!(e, (400, "body".into(), "invalid", format!("malformed JSON: {expected}")), "{}", String::from_utf8_lossy(body));
            let batch = [b"[".as_slice(), body, b"]"].concat();
            let expected = serde_json::from_slice::<Value>(&batch).unwrap_err();
            let e = refusal(parse_batch(&batch).unwrap_err());
            assert_eq!(e.3, format!("malformed JSON: {expected}"));
        }
    }

    #[test]
    fn a_batch_is_a_non_empty_array_of_at_most_500_events() {
        let not_array = (400, "body".into(), "invalid", "the body must be a JSON array of events".into());
        for body in ["{}", "null", "\"[]\"", "3"] {
            assert_eq!(refusal(parse_batch(body.as_bytes()).unwrap_err()), not_array, "{body}");
        }
        assert_eq!(refusal(parse_batch(b"[]").unwrap_err()), (400, "body".into(), "required", "the batch holds no events".into()));
        assert_eq!(refusal(parse_batch(b"").unwrap_err()).2, "required");
        let items = |n: usize| format!("[{}]", vec![valid().to_string(); n].join(","));
        assert_eq!(parse_batch(items(500).as_bytes()).unwrap().len(), 500);
        let e = refusal(parse_batch(items(501).as_bytes()).unwrap_err());
        assert_eq!(e, (400, "body".into(), "too_long", "a batch holds at most 500 events".into()));
        // Malformed JSON anywhere wins over the count.
        let e = refusal(parse_batch(format!("{},", items(501).trim_end_matches(']')).as_bytes()).unwrap_err());
        assert!(e.3.starts_with("malformed JSON: "), "{e:?}");
    }

    #[test]
    fn each_batch_item_is_judged_on_its_own() {
        let mut bad = valid();
        bad["session_id"] = json!(1);
        let body = format!("[{}, [1], null, {}, {}]", valid(), bad, json!({"metadata": 1}));
        let out: Vec<_> = parse_batch(body.as_bytes()).unwrap().into_iter().map(|r| r.map_err(refusal)).collect();
        assert_eq!(out[0].as_ref().unwrap(), &parse(&valid()).unwrap());
        let not_object = (400, "body".into(), "invalid", "the body must be a JSON object".into());
        assert_eq!(out[1].as_ref().unwrap_err(), &not_object);
        assert_eq!(out[2].as_ref().unwrap_err(), &not_object);
        assert_eq!(out[3].as_ref().unwrap_err().1, "session_id");
        assert_eq!(out[4].as_ref().unwrap_err(), &(400, "session_id".into(), "required", "session_id is required".into()));
    }
}
