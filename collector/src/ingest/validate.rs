//! Turns a JSON track body into a `TrackInput`, or says precisely which field
//! is wrong and why (DESIGN §5.5). Pure: no I/O.

use analytics::model::{BlockerType, Device, EventType};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::ApiError;

pub const MAX_PAGE_URL: usize = 2048;
pub const MAX_METADATA_BYTES: usize = 2048;
pub const MAX_VARIANT_LEN: usize = 64;
const SESSION_ID_LEN: std::ops::RangeInclusive<usize> = 8..=128;
const KNOWN_FIELDS: [&str; 7] = ["session_id", "site_id", "event_type", "page_url", "metadata", "event_id", "timestamp"];

#[derive(Debug, Clone, PartialEq)]
pub struct TrackInput {
    pub site_id: Uuid,
    pub session_id: String,
    pub event_type: EventType,
    /// As sent: the stored event keeps the client's spelling.
    pub page_url: String,
    pub page_host: String,
    pub metadata: Map<String, Value>,
    pub device: Option<Device>,
    pub variant: Option<String>,
    pub forced_variant: bool,
    pub event_id: Option<Uuid>,
    pub timestamp: Option<DateTime<Utc>>,
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A field's value, treating `null` as absent.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn required_str<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a str, ApiError> {
    match field(obj, name) {
        None => Err(ApiError::required(name)),
        Some(Value::String(s)) if s.is_empty() => Err(ApiError::required(name)),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ApiError::invalid(name, "invalid", format!("{name} must be a string"))),
    }
}

fn optional_str<'a>(obj: &'a Map<String, Value>, name: &str, path: &str) -> Result<Option<&'a str>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::invalid(path, "invalid", format!("{path} must be a string"))),
    }
}

pub fn parse_track(body: &Value) -> Result<TrackInput, ApiError> {
    let obj = body
        .as_object()
        .ok_or_else(|| ApiError::invalid("body", "invalid", "the body must be a JSON object"))?;

    let session_id = required_str(obj, "session_id")?;
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

    let site_id = required_str(obj, "site_id")?;
    let site_id = Uuid::parse_str(site_id).map_err(|_| ApiError::invalid("site_id", "invalid", "site_id must be a UUID"))?;

    let event_type = required_str(obj, "event_type")?;
    let event_type = EventType::parse(event_type).ok_or_else(|| {
        let all: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        ApiError::invalid("event_type", "invalid", format!("event_type must be one of {}", all.join(", ")))
    })?;

    let page_url = required_str(obj, "page_url")?;
    if page_url.len() > MAX_PAGE_URL {
        return Err(ApiError::invalid("page_url", "too_long", "page_url is longer than 2048 characters"));
    }
    let page_host = url::Url::parse(page_url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .and_then(|u| u.host_str().map(str::to_owned))
        .ok_or_else(|| ApiError::invalid("page_url", "invalid", "page_url must be an absolute http(s) URL"))?;

    let metadata = match field(obj, "metadata") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(ApiError::invalid("metadata", "invalid", "metadata must be an object")),
    };
    if serde_json::to_string(&metadata).map_or(0, |s| s.len()) > MAX_METADATA_BYTES {
        return Err(ApiError::invalid("metadata", "too_long", "metadata is larger than 2 KiB once serialized"));
    }
    if let Some(b) = optional_str(&metadata, "blocker_type", "metadata.blocker_type")? {
        if BlockerType::parse(b).is_none() {
            return Err(ApiError::invalid(
                "metadata.blocker_type",
                "invalid",
                "metadata.blocker_type must be one of extension, network, browser, unknown",
            ));
        }
    }
    let device = optional_str(&metadata, "device_type", "metadata.device_type")?
        .map(|d| {
            Device::parse(d).ok_or_else(|| {
                ApiError::invalid("metadata.device_type", "invalid", "metadata.device_type must be one of desktop, mobile, tablet")
            })
        })
        .transpose()?;
    let variant = optional_str(&metadata, "variant", "metadata.variant")?;
    if let Some(v) = variant {
        if v.is_empty() || v.len() > MAX_VARIANT_LEN || !v.chars().all(is_token_char) {
            return Err(ApiError::invalid(
                "metadata.variant",
                "invalid",
                "metadata.variant must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -",
            ));
        }
    }
    let forced_variant = match field(&metadata, "forced_variant") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid("metadata.forced_variant", "invalid", "metadata.forced_variant must be a boolean"))
        }
    };

    let event_id = optional_str(obj, "event_id", "event_id")?
        .map(|s| Uuid::parse_str(s).map_err(|_| ApiError::invalid("event_id", "invalid", "event_id must be a UUID")))
        .transpose()?;

    let timestamp = optional_str(obj, "timestamp", "timestamp")?
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::invalid("timestamp", "invalid", "timestamp must be an ISO 8601 date-time with an offset"))
        })
        .transpose()?;

    if let Some(unknown) = obj.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(unknown.clone(), "unknown_field", format!("unknown field {unknown}")));
    }

    Ok(TrackInput {
        site_id,
        session_id: session_id.to_owned(),
        event_type,
        page_url: page_url.to_owned(),
        page_host,
        device,
        variant: variant.map(str::to_owned),
        forced_variant,
        metadata,
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

    fn error_of(mut body: Value, change: impl FnOnce(&mut Map<String, Value>)) -> (String, String) {
        change(body.as_object_mut().unwrap());
        let e = parse_track(&body).unwrap_err();
        assert_eq!(e.status, 400);
        (e.field.unwrap(), e.reason.to_owned())
    }

    #[test]
    fn a_valid_body_parses() {
        let t = parse_track(&valid()).unwrap();
        assert_eq!(t.event_type, EventType::AdblockDetected);
        assert_eq!(t.device, Some(Device::Mobile));
        assert_eq!(t.variant.as_deref(), Some("emotional"));
        assert!(!t.forced_variant);
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
            ("site_id", json!("not-a-uuid"), "site_id", "invalid"),
            ("event_type", json!("click"), "event_type", "invalid"),
            ("page_url", json!("/relative"), "page_url", "invalid"),
            ("page_url", json!("ftp://example.com/"), "page_url", "invalid"),
            ("page_url", json!(format!("https://e.com/{}", "a".repeat(2048))), "page_url", "too_long"),
            ("metadata", json!([1]), "metadata", "invalid"),
            ("metadata", json!({"blob": "x".repeat(2100)}), "metadata", "too_long"),
            ("metadata", json!({"blocker_type": "dns"}), "metadata.blocker_type", "invalid"),
            ("metadata", json!({"device_type": "tv"}), "metadata.device_type", "invalid"),
            ("metadata", json!({"variant": "no spaces please"}), "metadata.variant", "invalid"),
            ("metadata", json!({"forced_variant": "yes"}), "metadata.forced_variant", "invalid"),
            ("event_id", json!("nope"), "event_id", "invalid"),
            ("timestamp", json!("yesterday"), "timestamp", "invalid"),
            ("siteId", json!("x"), "siteId", "unknown_field"),
        ];
        for (key, value, field, reason) in cases {
            let got = error_of(valid(), |o| drop(o.insert(key.into(), value.clone())));
            assert_eq!(got, (field.to_owned(), reason.to_owned()), "{key} = {value}");
        }
    }

    #[test]
    fn the_body_must_be_an_object() {
        let e = parse_track(&json!([1, 2])).unwrap_err();
        assert_eq!((e.field.as_deref(), e.reason), (Some("body"), "invalid"));
    }
}
