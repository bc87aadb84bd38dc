//! What a report configuration is made of, and how a JSON body becomes one:
//! every field is checked here, and a refusal names the field and the reason.

use chrono::{NaiveDate, NaiveTime, Weekday};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::accounts::Role;
use crate::model::{Device, EventType};

/// Most recipients one report may have.
pub const MAX_RECIPIENTS: usize = 50;
/// Most countries a custom report may filter on.
pub const MAX_COUNTRIES: usize = 50;
/// Longest period a custom report's fixed filter may cover.
pub const MAX_PERIOD_DAYS: i64 = 731;
const MAX_NAME_LEN: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportType {
    Daily,
    Weekly,
    Monthly,
    Custom,
}

impl ReportType {
    pub const ALL: [ReportType; 4] = [ReportType::Daily, ReportType::Weekly, ReportType::Monthly, ReportType::Custom];

    pub fn as_str(self) -> &'static str {
        match self {
            ReportType::Daily => "daily",
            ReportType::Weekly => "weekly",
            ReportType::Monthly => "monthly",
            ReportType::Custom => "custom",
        }
    }

    pub fn parse(s: &str) -> Option<ReportType> {
        ReportType::ALL.into_iter().find(|t| t.as_str().eq_ignore_ascii_case(s))
    }

    /// The delivery event name (`daily_report` …).
    pub fn event(self) -> &'static str {
        match self {
            ReportType::Daily => "daily_report",
            ReportType::Weekly => "weekly_report",
            ReportType::Monthly => "monthly_report",
            ReportType::Custom => "custom_report",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            ReportType::Daily => "Daily report",
            ReportType::Weekly => "Weekly report",
            ReportType::Monthly => "Monthly report",
            ReportType::Custom => "Custom report",
        }
    }

    /// The schedule a new report of this type gets: 08:00 in the site's timezone,
    /// every day, every Monday, or on the 1st.
    pub fn default_schedule(self) -> Schedule {
        let frequency = match self {
            ReportType::Daily | ReportType::Custom => Frequency::Daily,
            ReportType::Weekly => Frequency::Weekly(Weekday::Mon),
            ReportType::Monthly => Frequency::Monthly(1),
        };
        Schedule { frequency, time: NaiveTime::from_hms_opt(8, 0, 0).unwrap_or_default() }
    }
}

/// The metric choices of a custom report (SPEC: Sessions, Ad Blockers Detected,
/// Walls Displayed, Conversions, Conversion Rate, By Device, By Country, By A/B Variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Sessions,
    AdblockDetected,
    WallsDisplayed,
    Conversions,
    ConversionRate,
    ByDevice,
    ByCountry,
    ByVariant,
}

impl Metric {
    pub const ALL: [Metric; 8] = [
        Metric::Sessions,
        Metric::AdblockDetected,
        Metric::WallsDisplayed,
        Metric::Conversions,
        Metric::ConversionRate,
        Metric::ByDevice,
        Metric::ByCountry,
        Metric::ByVariant,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Sessions => "sessions",
            Metric::AdblockDetected => "adblock_detected",
            Metric::WallsDisplayed => "walls_displayed",
            Metric::Conversions => "conversions",
            Metric::ConversionRate => "conversion_rate",
            Metric::ByDevice => "by_device",
            Metric::ByCountry => "by_country",
            Metric::ByVariant => "by_variant",
        }
    }

    /// The spec's display name.
    pub fn label(self) -> &'static str {
        match self {
            Metric::Sessions => "Sessions",
            Metric::AdblockDetected => "Ad Blockers Detected",
            Metric::WallsDisplayed => "Walls Displayed",
            Metric::Conversions => "Conversions",
            Metric::ConversionRate => "Conversion Rate",
            Metric::ByDevice => "By Device",
            Metric::ByCountry => "By Country",
            Metric::ByVariant => "By A/B Variant",
        }
    }

    /// Accepts the API name (`adblock_detected`) or the spec's label ("Ad Blockers Detected").
    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s || m.label().eq_ignore_ascii_case(s))
    }
}

/// Custom report filters. A fixed `start`/`end` makes every run report that
/// period; without them a run reports the period that ended (see `Frequency`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filters {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<NaiveDate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<NaiveDate>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "device_name")]
    pub device: Option<Device>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub countries: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "event_name")]
    pub event: Option<EventType>,
}

mod device_name {
    use super::*;
    pub fn serialize<S: serde::Serializer>(d: &Option<Device>, s: S) -> Result<S::Ok, S::Error> {
        d.map(Device::as_str).serialize(s)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Device>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.and_then(|s| Device::parse(&s)))
    }
}

mod event_name {
    use super::*;
    pub fn serialize<S: serde::Serializer>(e: &Option<EventType>, s: S) -> Result<S::Ok, S::Error> {
        e.map(EventType::as_str).serialize(s)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<EventType>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.and_then(|s| EventType::parse(&s)))
    }
}

/// How often a report is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frequency {
    Daily,
    Weekly(Weekday),
    /// Day of the month, 1 to 28 so that every month has it.
    Monthly(u32),
}

/// When a report is sent: a frequency and a local time of day in the site's timezone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ScheduleRepr", into = "ScheduleRepr")]
pub struct Schedule {
    pub frequency: Frequency,
    pub time: NaiveTime,
}

/// The wire and storage shape of a schedule.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ScheduleRepr {
    frequency: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weekday: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    day_of_month: Option<u32>,
    time: String,
}

impl From<Schedule> for ScheduleRepr {
    fn from(s: Schedule) -> Self {
        let (frequency, weekday, day_of_month) = match s.frequency {
            Frequency::Daily => ("daily", None, None),
            Frequency::Weekly(w) => ("weekly", Some(weekday_name(w).to_owned()), None),
            Frequency::Monthly(d) => ("monthly", None, Some(d)),
        };
        ScheduleRepr { frequency: frequency.to_owned(), weekday, day_of_month, time: s.time.format("%H:%M").to_string() }
    }
}

impl TryFrom<ScheduleRepr> for Schedule {
    type Error = String;
    fn try_from(r: ScheduleRepr) -> Result<Self, String> {
        let frequency = match r.frequency.as_str() {
            "daily" => Frequency::Daily,
            "weekly" => Frequency::Weekly(r.weekday.as_deref().and_then(parse_weekday).ok_or("bad weekday")?),
            "monthly" => Frequency::Monthly(r.day_of_month.filter(|d| (1..=28).contains(d)).ok_or("bad day")?),
            _ => return Err("bad frequency".into()),
        };
        let time = NaiveTime::parse_from_str(&r.time, "%H:%M").map_err(|e| e.to_string())?;
        Ok(Schedule { frequency, time })
    }
}

pub fn weekday_name(w: Weekday) -> &'static str {
    match w {
        Weekday::Mon => "monday",
        Weekday::Tue => "tuesday",
        Weekday::Wed => "wednesday",
        Weekday::Thu => "thursday",
        Weekday::Fri => "friday",
        Weekday::Sat => "saturday",
        Weekday::Sun => "sunday",
    }
}

fn parse_weekday(s: &str) -> Option<Weekday> {
    let s = s.to_ascii_lowercase();
    [Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri, Weekday::Sat, Weekday::Sun]
        .into_iter()
        .find(|w| weekday_name(*w) == s || weekday_name(*w)[..3] == s)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipient {
    pub email: String,
    #[serde(with = "role_name")]
    pub role: Role,
}

mod role_name {
    use super::*;
    pub fn serialize<S: serde::Serializer>(r: &Role, s: S) -> Result<S::Ok, S::Error> {
        r.as_str().serialize(s)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
        Ok(Role::parse(&String::deserialize(d)?).unwrap_or(Role::Reader))
    }
}

pub use crate::model::Channel;

/// The document format a report is delivered in (the e-mail body is always
/// HTML with a plain-text alternative; pdf, csv and json add an attachment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Html,
    Pdf,
    Csv,
    Json,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Csv => "csv",
            Format::Json => "json",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        [Format::Html, Format::Pdf, Format::Csv, Format::Json].into_iter().find(|f| f.as_str().eq_ignore_ascii_case(s))
    }
}

/// Everything about a report except its identity: stored as one JSON column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub metrics: Vec<Metric>,
    pub filters: Filters,
    pub schedule: Schedule,
    pub recipients: Vec<Recipient>,
    pub channels: Vec<Channel>,
    pub format: Format,
}

/// A refused field: the API turns it into a 400 with `details.field` and `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub reason: &'static str,
    pub message: String,
}

fn invalid(field: impl Into<String>, reason: &'static str, message: impl Into<String>) -> Invalid {
    Invalid { field: field.into(), reason, message: message.into() }
}

fn required(field: &str) -> Invalid {
    invalid(field, "required", format!("{field} is required"))
}

/// The fields a create or update body may carry.
pub const FIELDS: &[&str] =
    &["name", "type", "enabled", "metrics", "filters", "schedule", "recipients", "channels", "format"];

/// A configuration as created or changed: name, type, enabled and the spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub name: String,
    pub kind: ReportType,
    pub enabled: bool,
    pub spec: Spec,
}

impl Draft {
    /// Reads a create body (`base` = None) or applies an update body to `base`.
    /// The type of an existing report cannot change.
    pub fn from_json(obj: &Map<String, Value>, base: Option<&Draft>) -> Result<Draft, Invalid> {
        if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(invalid(k.clone(), "unknown_field", format!("unknown field {k}")));
        }
        let kind = match (obj.get("type"), base) {
            (None, None) => return Err(required("type")),
            (None, Some(b)) => b.kind,
            (Some(v), base) => {
                let kind = v
                    .as_str()
                    .and_then(ReportType::parse)
                    .ok_or_else(|| invalid("type", "invalid", "type must be daily, weekly, monthly or custom"))?;
                if base.is_some_and(|b| b.kind != kind) {
                    return Err(invalid("type", "invalid", "the type of a report cannot change; create a new report"));
                }
                kind
            }
        };
        let name = match obj.get("name") {
            None => base.map_or_else(|| kind.title().to_owned(), |b| b.name.clone()),
            Some(v) => {
                let raw = v.as_str().ok_or_else(|| invalid("name", "invalid", "name must be a string"))?;
                // The documented limit is the name as sent, the spaces trimmed after it included.
                if raw.chars().count() > MAX_NAME_LEN {
                    return Err(invalid("name", "too_long", "name is longer than 200 characters"));
                }
                let s = raw.trim();
                if s.is_empty() {
                    return Err(required("name"));
                }
                s.to_owned()
            }
        };
        let enabled = match obj.get("enabled") {
            None => base.is_none_or(|b| b.enabled),
            Some(v) => v.as_bool().ok_or_else(|| invalid("enabled", "invalid", "enabled must be true or false"))?,
        };
        let metrics = match obj.get("metrics") {
            None => base.map(|b| b.spec.metrics.clone()),
            Some(v) => Some(parse_metrics(v)?),
        };
        let metrics = match (kind, metrics) {
            (ReportType::Custom, None) => return Err(required("metrics")),
            (ReportType::Custom, Some(m)) => m,
            (_, Some(m)) if !m.is_empty() => {
                return Err(invalid("metrics", "invalid", "metrics are chosen for custom reports only"))
            }
            _ => Vec::new(),
        };
        let filters = match obj.get("filters") {
            None => base.map(|b| b.spec.filters.clone()).unwrap_or_default(),
            Some(v) => parse_filters(v)?,
        };
        if kind != ReportType::Custom && filters != Filters::default() {
            return Err(invalid("filters", "invalid", "filters apply to custom reports only"));
        }
        let schedule = match obj.get("schedule") {
            None => base.map_or_else(|| kind.default_schedule(), |b| b.spec.schedule),
            Some(v) => parse_schedule(v, kind)?,
        };
        let recipients = match obj.get("recipients") {
            None => base.map(|b| b.spec.recipients.clone()).unwrap_or_default(),
            Some(v) => parse_recipients(v)?,
        };
        let channels = match obj.get("channels") {
            None => base.map_or_else(|| vec![Channel::Email], |b| b.spec.channels.clone()),
            Some(v) => parse_channels(v)?,
        };
        if channels.contains(&Channel::Email) && recipients.is_empty() {
            return Err(invalid("recipients", "required", "the email channel needs at least one recipient"));
        }
        let format = match obj.get("format") {
            None => base.map_or(Format::Html, |b| b.spec.format),
            Some(v) => v
                .as_str()
                .and_then(Format::parse)
                .ok_or_else(|| invalid("format", "invalid", "format must be html, pdf, csv or json"))?,
        };
        Ok(Draft { name, kind, enabled, spec: Spec { metrics, filters, schedule, recipients, channels, format } })
    }
}

fn parse_metrics(v: &Value) -> Result<Vec<Metric>, Invalid> {
    let list = v.as_array().ok_or_else(|| invalid("metrics", "invalid", "metrics must be an array"))?;
    if list.is_empty() {
        return Err(invalid("metrics", "required", "choose at least one metric"));
    }
    let mut out = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let metric = m.as_str().and_then(Metric::parse).ok_or_else(|| {
            invalid(
                format!("metrics[{i}]"),
                "invalid",
                "a metric is one of sessions, adblock_detected, walls_displayed, conversions, conversion_rate, by_device, by_country, by_variant",
            )
        })?;
        if !out.contains(&metric) {
            out.push(metric);
        }
    }
    Ok(out)
}

fn parse_date(v: &Value, field: &str) -> Result<NaiveDate, Invalid> {
    v.as_str()
        .and_then(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok())
        .ok_or_else(|| invalid(field, "invalid", format!("{field} must be a date YYYY-MM-DD")))
}

fn parse_filters(v: &Value) -> Result<Filters, Invalid> {
    let obj = v.as_object().ok_or_else(|| invalid("filters", "invalid", "filters must be an object"))?;
    if let Some(k) = obj.keys().find(|k| !["start", "end", "device", "countries", "event"].contains(&k.as_str())) {
        return Err(invalid(format!("filters.{k}"), "unknown_field", format!("unknown filter {k}")));
    }
    let start = obj.get("start").filter(|v| !v.is_null()).map(|v| parse_date(v, "filters.start")).transpose()?;
    let end = obj.get("end").filter(|v| !v.is_null()).map(|v| parse_date(v, "filters.end")).transpose()?;
    match (start, end) {
        (Some(_), None) => return Err(invalid("filters.end", "required", "filters.end is required with filters.start")),
        (None, Some(_)) => return Err(invalid("filters.start", "required", "filters.start is required with filters.end")),
        (Some(s), Some(e)) if e < s => {
            return Err(invalid("filters.end", "out_of_range", "filters.end must not be before filters.start"))
        }
        (Some(s), Some(e)) if (e - s).num_days() >= MAX_PERIOD_DAYS => {
            return Err(invalid("filters.end", "out_of_range", "the period may cover at most 731 days"))
        }
        _ => {}
    }
    let device = match obj.get("device").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(Device::parse)
                .ok_or_else(|| invalid("filters.device", "invalid", "filters.device must be desktop, mobile or tablet"))?,
        ),
    };
    let mut countries = Vec::new();
    if let Some(v) = obj.get("countries").filter(|v| !v.is_null()) {
        let list = v.as_array().ok_or_else(|| invalid("filters.countries", "invalid", "filters.countries must be an array"))?;
        if list.len() > MAX_COUNTRIES {
            return Err(invalid("filters.countries", "too_long", "at most 50 countries"));
        }
        for (i, c) in list.iter().enumerate() {
            let code = c
                .as_str()
                .filter(|s| s.len() == 2 && s.bytes().all(|b| b.is_ascii_alphabetic()))
                .ok_or_else(|| invalid(format!("filters.countries[{i}]"), "invalid", "a country is a two-letter ISO 3166 code"))?
                .to_ascii_uppercase();
            if !countries.contains(&code) {
                countries.push(code);
            }
        }
    }
    let event = match obj.get("event").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(EventType::parse)
                .ok_or_else(|| invalid("filters.event", "invalid", "filters.event must be one of the event types"))?,
        ),
    };
    Ok(Filters { start, end, device, countries, event })
}

fn parse_schedule(v: &Value, kind: ReportType) -> Result<Schedule, Invalid> {
    let obj = v.as_object().ok_or_else(|| invalid("schedule", "invalid", "schedule must be an object"))?;
    if let Some(k) = obj.keys().find(|k| !["frequency", "weekday", "day_of_month", "time"].contains(&k.as_str())) {
        return Err(invalid(format!("schedule.{k}"), "unknown_field", format!("unknown schedule field {k}")));
    }
    let default = kind.default_schedule();
    let frequency_name = match obj.get("frequency") {
        None => match default.frequency {
            Frequency::Daily => "daily",
            Frequency::Weekly(_) => "weekly",
            Frequency::Monthly(_) => "monthly",
        },
        Some(v) => v
            .as_str()
            .filter(|s| ["daily", "weekly", "monthly"].contains(s))
            .ok_or_else(|| invalid("schedule.frequency", "invalid", "schedule.frequency must be daily, weekly or monthly"))?,
    };
    let expected = match kind {
        ReportType::Daily => Some("daily"),
        ReportType::Weekly => Some("weekly"),
        ReportType::Monthly => Some("monthly"),
        ReportType::Custom => None,
    };
    if expected.is_some_and(|e| e != frequency_name) {
        return Err(invalid(
            "schedule.frequency",
            "invalid",
            format!("a {} report is sent {}", kind.as_str(), expected.unwrap_or_default()),
        ));
    }
    let frequency = match frequency_name {
        "daily" => {
            if obj.contains_key("weekday") || obj.contains_key("day_of_month") {
                return Err(invalid("schedule.frequency", "invalid", "weekday and day_of_month go with weekly and monthly schedules"));
            }
            Frequency::Daily
        }
        "weekly" => {
            if obj.contains_key("day_of_month") {
                return Err(invalid("schedule.day_of_month", "invalid", "day_of_month goes with monthly schedules"));
            }
            let weekday = match obj.get("weekday") {
                None => Weekday::Mon,
                Some(v) => v.as_str().and_then(parse_weekday).ok_or_else(|| {
                    invalid("schedule.weekday", "invalid", "schedule.weekday must be monday … sunday")
                })?,
            };
            Frequency::Weekly(weekday)
        }
        _ => {
            if obj.contains_key("weekday") {
                return Err(invalid("schedule.weekday", "invalid", "weekday goes with weekly schedules"));
            }
            let day = match obj.get("day_of_month") {
                None => 1,
                Some(v) => v
                    .as_u64()
                    .filter(|d| (1..=28).contains(d))
                    .ok_or_else(|| invalid("schedule.day_of_month", "out_of_range", "schedule.day_of_month must be 1 to 28"))?
                    as u32,
            };
            Frequency::Monthly(day)
        }
    };
    let time = match obj.get("time") {
        None => default.time,
        Some(v) => v
            .as_str()
            .filter(|s| s.len() == 5)
            .and_then(|s| NaiveTime::parse_from_str(s, "%H:%M").ok())
            .ok_or_else(|| invalid("schedule.time", "invalid", "schedule.time must be HH:MM (24-hour clock)"))?,
    };
    Ok(Schedule { frequency, time })
}

/// A plausible mailbox address: one `@`, a non-empty local part, a domain with a dot.
fn valid_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else { return false };
    s.len() <= 254
        && !local.is_empty()
        && local.len() <= 64
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control() || "<>,;\"()[]\\".contains(c))
}

fn parse_recipients(v: &Value) -> Result<Vec<Recipient>, Invalid> {
    let list = v.as_array().ok_or_else(|| invalid("recipients", "invalid", "recipients must be an array"))?;
    if list.len() > MAX_RECIPIENTS {
        return Err(invalid("recipients", "too_long", "at most 50 recipients"));
    }
    let mut out: Vec<Recipient> = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let field = format!("recipients[{i}]");
        let obj = r.as_object().ok_or_else(|| invalid(&field, "invalid", "a recipient is an object with email and role"))?;
        if let Some(k) = obj.keys().find(|k| !["email", "role"].contains(&k.as_str())) {
            return Err(invalid(format!("{field}.{k}"), "unknown_field", format!("unknown recipient field {k}")));
        }
        let email = match obj.get("email") {
            None => return Err(required(&format!("{field}.email"))),
            Some(v) => v.as_str().map(str::trim).filter(|s| valid_email(s)).ok_or_else(|| {
                invalid(format!("{field}.email"), "invalid", "email must be an e-mail address such as ana@example.com")
            })?,
        };
        let role = match obj.get("role") {
            None => return Err(required(&format!("{field}.role"))),
            Some(v) => v
                .as_str()
                .and_then(Role::parse)
                .ok_or_else(|| invalid(format!("{field}.role"), "invalid", "role must be Admin or Reader"))?,
        };
        if out.iter().any(|o| o.email.eq_ignore_ascii_case(email)) {
            return Err(invalid(format!("{field}.email"), "invalid", format!("{email} is listed twice")));
        }
        out.push(Recipient { email: email.to_owned(), role });
    }
    Ok(out)
}

fn parse_channels(v: &Value) -> Result<Vec<Channel>, Invalid> {
    let list = v.as_array().ok_or_else(|| invalid("channels", "invalid", "channels must be an array"))?;
    if list.is_empty() {
        return Err(invalid("channels", "required", "choose at least one channel"));
    }
    let mut out = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let channel = c
            .as_str()
            .and_then(Channel::parse)
            .ok_or_else(|| invalid(format!("channels[{i}]"), "invalid", "a channel is email, slack or webhook"))?;
        if !out.contains(&channel) {
            out.push(channel);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(v: Value) -> Result<Draft, Invalid> {
        Draft::from_json(v.as_object().unwrap(), None)
    }

    fn refused(v: Value) -> (String, &'static str) {
        let e = draft(v).unwrap_err();
        (e.field, e.reason)
    }

    #[test]
    fn defaults_follow_the_type() {
        let d = draft(json!({"type": "weekly", "recipients": [{"email": "a@example.com", "role": "Admin"}]})).unwrap();
        assert_eq!(d.name, "Weekly report");
        assert_eq!(d.spec.schedule, Schedule { frequency: Frequency::Weekly(Weekday::Mon), time: NaiveTime::from_hms_opt(8, 0, 0).unwrap() });
        assert_eq!(d.spec.channels, vec![Channel::Email]);
        assert_eq!(d.spec.format, Format::Html);
        assert_eq!(d.spec.recipients[0].role, Role::Admin);
        let m = draft(json!({"type": "monthly", "channels": ["webhook"]})).unwrap();
        assert_eq!(m.spec.schedule.frequency, Frequency::Monthly(1));
    }

    #[test]
    fn custom_reports_take_metrics_filters_and_schedule() {
        let d = draft(json!({
            "type": "custom",
            "metrics": ["Sessions", "conversion_rate", "By A/B Variant"],
            "filters": {"start": "2026-10-01", "end": "2026-10-31", "device": "Mobile", "countries": ["fr", "DE"], "event": "wall_displayed"},
            "schedule": {"frequency": "weekly", "weekday": "friday", "time": "17:30"},
            "channels": ["slack"],
            "format": "csv"
        }))
        .unwrap();
        assert_eq!(d.spec.metrics, vec![Metric::Sessions, Metric::ConversionRate, Metric::ByVariant]);
        assert_eq!(d.spec.filters.device, Some(Device::Mobile));
        assert_eq!(d.spec.filters.countries, vec!["FR".to_owned(), "DE".to_owned()]);
        assert_eq!(d.spec.schedule.frequency, Frequency::Weekly(Weekday::Fri));
        // The stored form reads back identically.
        let stored = serde_json::to_string(&d.spec).unwrap();
        assert_eq!(serde_json::from_str::<Spec>(&stored).unwrap(), d.spec);
    }

    #[test]
    fn bad_fields_are_named() {
        let r = json!([{"email": "a@example.com", "role": "admin"}]);
        assert_eq!(refused(json!({})), ("type".into(), "required"));
        assert_eq!(refused(json!({"type": "hourly"})), ("type".into(), "invalid"));
        assert_eq!(refused(json!({"type": "daily"})), ("recipients".into(), "required"));
        assert_eq!(refused(json!({"type": "daily", "recipients": r, "colour": 1})), ("colour".into(), "unknown_field"));
        assert_eq!(refused(json!({"type": "custom", "recipients": r})), ("metrics".into(), "required"));
        assert_eq!(refused(json!({"type": "custom", "recipients": r, "metrics": ["pageviews"]})), ("metrics[0]".into(), "invalid"));
        assert_eq!(refused(json!({"type": "daily", "recipients": r, "metrics": ["sessions"]})), ("metrics".into(), "invalid"));
        assert_eq!(
            refused(json!({"type": "daily", "recipients": [{"email": "not-an-address", "role": "admin"}]})),
            ("recipients[0].email".into(), "invalid")
        );
        assert_eq!(refused(json!({"type": "daily", "recipients": [{"email": "a@example.com"}]})), ("recipients[0].role".into(), "required"));
        assert_eq!(
            refused(json!({"type": "daily", "recipients": [{"email": "a@example.com", "role": "owner"}]})),
            ("recipients[0].role".into(), "invalid")
        );
        assert_eq!(refused(json!({"type": "daily", "recipients": r, "schedule": {"time": "8:00"}})), ("schedule.time".into(), "invalid"));
        assert_eq!(refused(json!({"type": "daily", "recipients": r, "schedule": {"time": "24:00"}})), ("schedule.time".into(), "invalid"));
        assert_eq!(
            refused(json!({"type": "daily", "recipients": r, "schedule": {"frequency": "weekly"}})),
            ("schedule.frequency".into(), "invalid")
        );
        assert_eq!(
            refused(json!({"type": "monthly", "recipients": r, "schedule": {"day_of_month": 31}})),
            ("schedule.day_of_month".into(), "out_of_range")
        );
        assert_eq!(refused(json!({"type": "daily", "recipients": r, "channels": []})), ("channels".into(), "required"));
        assert_eq!(refused(json!({"type": "daily", "recipients": r, "channels": ["fax"]})), ("channels[0]".into(), "invalid"));
        assert_eq!(refused(json!({"type": "daily", "recipients": r, "format": "docx"})), ("format".into(), "invalid"));
        assert_eq!(
            refused(json!({"type": "custom", "metrics": ["sessions"], "recipients": r, "filters": {"start": "2026-10-02", "end": "2026-10-01"}})),
            ("filters.end".into(), "out_of_range")
        );
        assert_eq!(
            refused(json!({"type": "custom", "metrics": ["sessions"], "recipients": r, "filters": {"countries": ["FRA"]}})),
            ("filters.countries[0]".into(), "invalid")
        );
        assert_eq!(refused(json!({"type": "weekly", "recipients": r, "filters": {"device": "mobile"}})), ("filters".into(), "invalid"));
    }

    #[test]
    fn an_update_keeps_what_it_does_not_name() {
        let base = draft(json!({"type": "daily", "recipients": [{"email": "a@example.com", "role": "reader"}]})).unwrap();
        let changed = Draft::from_json(json!({"schedule": {"time": "06:15"}}).as_object().unwrap(), Some(&base)).unwrap();
        assert_eq!(changed.spec.schedule.time, NaiveTime::from_hms_opt(6, 15, 0).unwrap());
        assert_eq!(changed.spec.recipients, base.spec.recipients);
        let e = Draft::from_json(json!({"type": "weekly"}).as_object().unwrap(), Some(&base)).unwrap_err();
        assert_eq!((e.field.as_str(), e.reason), ("type", "invalid"));
    }
}
