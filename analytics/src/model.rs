//! The domain vocabulary shared by the write path, the queries and the collector.

use std::fmt;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The closed list of event kinds (DESIGN §3). The numeric code is what the
/// events and counts tables store, so existing codes must never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    Pageview,
    AdblockDetected,
    WallDisplayed,
    WallDismissed,
    WallHelpOpened,
    VerificationFailed,
    ConversionAllowlist,
    ConversionSubscribe,
    /// The SDK's own files did not load while the collector answered: a
    /// blocker stopped the SDK itself, so no verdict could run.
    SdkBlocked,
}

impl EventType {
    pub const ALL: [EventType; 9] = [
        EventType::Pageview,
        EventType::AdblockDetected,
        EventType::WallDisplayed,
        EventType::WallDismissed,
        EventType::WallHelpOpened,
        EventType::VerificationFailed,
        EventType::ConversionAllowlist,
        EventType::ConversionSubscribe,
        EventType::SdkBlocked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Pageview => "pageview",
            EventType::AdblockDetected => "adblock_detected",
            EventType::WallDisplayed => "wall_displayed",
            EventType::WallDismissed => "wall_dismissed",
            EventType::WallHelpOpened => "wall_help_opened",
            EventType::VerificationFailed => "verification_failed",
            EventType::ConversionAllowlist => "conversion_allowlist",
            EventType::ConversionSubscribe => "conversion_subscribe",
            EventType::SdkBlocked => "sdk_blocked",
        }
    }

    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn from_code(code: i64) -> Option<EventType> {
        EventType::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// The session flag this event sets, if any.
    pub fn flag(self) -> u8 {
        match self {
            EventType::AdblockDetected => flags::ADBLOCK,
            EventType::WallDisplayed => flags::WALL,
            EventType::WallDismissed => flags::DISMISSED,
            EventType::ConversionAllowlist | EventType::ConversionSubscribe => flags::CONVERTED,
            EventType::Pageview | EventType::WallHelpOpened | EventType::VerificationFailed | EventType::SdkBlocked => 0,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Session flags: each is set at most once per session.
pub mod flags {
    pub const ADBLOCK: u8 = 1;
    pub const WALL: u8 = 2;
    pub const DISMISSED: u8 = 4;
    pub const CONVERTED: u8 = 8;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    Desktop,
    Mobile,
    Tablet,
}

impl Device {
    pub const ALL: [Device; 3] = [Device::Desktop, Device::Mobile, Device::Tablet];

    pub fn as_str(self) -> &'static str {
        match self {
            Device::Desktop => "desktop",
            Device::Mobile => "mobile",
            Device::Tablet => "tablet",
        }
    }

    /// Accepts the spec's capitalised names too ("Desktop").
    pub fn parse(s: &str) -> Option<Device> {
        Device::ALL.into_iter().find(|d| d.as_str().eq_ignore_ascii_case(s))
    }

    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn from_code(code: i64) -> Option<Device> {
        Device::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// Classifies a User-Agent header; anything unrecognised is a desktop.
    pub fn from_user_agent(ua: &str) -> Device {
        let ua = ua.to_ascii_lowercase();
        if ua.contains("ipad") || ua.contains("tablet") || (ua.contains("android") && !ua.contains("mobile")) {
            Device::Tablet
        } else if ua.contains("mobi") || ua.contains("iphone") || ua.contains("android") {
            Device::Mobile
        } else {
            Device::Desktop
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockerType {
    Extension,
    Network,
    Browser,
    Unknown,
}

impl BlockerType {
    pub const ALL: [BlockerType; 4] = [
        BlockerType::Extension,
        BlockerType::Network,
        BlockerType::Browser,
        BlockerType::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BlockerType::Extension => "extension",
            BlockerType::Network => "network",
            BlockerType::Browser => "browser",
            BlockerType::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<BlockerType> {
        BlockerType::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// The country used when none could be resolved.
pub const UNKNOWN_COUNTRY: &str = "ZZ";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SiteStatus {
    Active,
    Paused,
}

impl SiteStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SiteStatus::Active => "active",
            SiteStatus::Paused => "paused",
        }
    }

    pub fn parse(s: &str) -> Option<SiteStatus> {
        match s {
            "active" => Some(SiteStatus::Active),
            "paused" => Some(SiteStatus::Paused),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Site {
    /// Compact key used by the event tables.
    pub seq: i64,
    pub id: Uuid,
    pub account_id: i64,
    pub name: String,
    pub domain: String,
    pub status: SiteStatus,
    pub timezone: Tz,
    pub revenue_per_mille: Option<f64>,
    pub wall: serde_json::Value,
    /// Whether stored page URLs keep their `utm_*` query parameters (the
    /// rest of the query string and the fragment are never stored).
    pub keep_utm: bool,
    pub created_at: DateTime<Utc>,
}

impl Site {
    /// Whether the site's wall defines an A/B variant of this name.
    pub fn has_variant(&self, name: &str) -> bool {
        let variants = self.wall.get("variants").and_then(|v| v.as_array());
        variants.is_some_and(|vs| vs.iter().any(|v| v.get("name").and_then(|n| n.as_str()) == Some(name)))
    }

    /// The A/B variant names configured in the site's wall, in order.
    pub fn variant_names(&self) -> Vec<String> {
        self.wall
            .get("variants")
            .and_then(|v| v.as_array())
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v.get("name").and_then(|n| n.as_str()).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
    Ingest,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Write, Scope::Ingest];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Ingest => "ingest",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: Uuid,
    pub account_id: i64,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl ApiKey {
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// A validated event on its way to the writer.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub site_seq: i64,
    pub session_id: String,
    pub event_type: EventType,
    pub page_url: String,
    /// Serialized JSON object, as stored.
    pub metadata: Option<String>,
    pub device: Device,
    pub country: String,
    /// The wall variant the event reports, if any.
    pub variant: Option<String>,
    /// True when the variant was forced for testing: such sessions stay out of A/B results.
    pub forced_variant: bool,
    pub client_event_id: Option<String>,
    pub occurred_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
}

/// What the writer answers for each event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub id: Uuid,
    pub received_at: DateTime<Utc>,
    /// True when the `event_id` had already been stored: nothing new was counted.
    pub duplicate: bool,
}

/// A raw event as the list-events endpoint returns it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredEvent {
    pub id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    pub session_id: String,
    pub site_id: Uuid,
    pub event_type: &'static str,
    pub page_url: String,
    pub metadata: serde_json::Value,
    pub country: String,
    pub timestamp: String,
    pub received_at: String,
}

/// Formats an instant the way the API does: ISO 8601 UTC with a `Z`.
pub fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Where a report or a notification goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Email,
    Slack,
    Webhook,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Slack => "slack",
            Channel::Webhook => "webhook",
        }
    }

    /// Case-insensitive, as API clients send it.
    pub(crate) fn parse(s: &str) -> Option<Channel> {
        [Channel::Email, Channel::Slack, Channel::Webhook].into_iter().find(|c| c.as_str().eq_ignore_ascii_case(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_codes_round_trip() {
        for t in EventType::ALL {
            assert_eq!(EventType::from_code(t.code()), Some(t));
            assert_eq!(EventType::parse(t.as_str()), Some(t));
        }
        assert_eq!(EventType::parse("click"), None);
    }

    #[test]
    fn user_agents_classify() {
        let iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148";
        let ipad = "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X)";
        let android_tab = "Mozilla/5.0 (Linux; Android 14; SM-X710) AppleWebKit/537.36 Safari/537.36";
        let android_phone = "Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile Safari/537.36";
        let mac = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0) AppleWebKit/605.1.15 Safari/605.1.15";
        assert_eq!(Device::from_user_agent(iphone), Device::Mobile);
        assert_eq!(Device::from_user_agent(ipad), Device::Tablet);
        assert_eq!(Device::from_user_agent(android_tab), Device::Tablet);
        assert_eq!(Device::from_user_agent(android_phone), Device::Mobile);
        assert_eq!(Device::from_user_agent(mac), Device::Desktop);
        assert_eq!(Device::from_user_agent(""), Device::Desktop);
    }

    #[test]
    fn device_parse_accepts_spec_capitalisation() {
        assert_eq!(Device::parse("Tablet"), Some(Device::Tablet));
        assert_eq!(Device::parse("tv"), None);
    }
}

