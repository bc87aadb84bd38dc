//! Delivery of notifications (reports and alerts) by e-mail, Slack-type
//! incoming webhook and signed custom webhook, through the durable outbox.
//!
//! Producers call [`enqueue`] inside their own write transaction; the
//! [`worker`] sends what is due, retries with backoff, and records every
//! attempt. Nothing here blocks a producer on the network.

pub mod destination;
mod email;
mod slack;
mod webhook;
pub mod worker;

use analytics::integrations::{self, Integration, Kind};
use analytics::outbox::{self, NewDelivery};
use analytics::{sites, Connection};
use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

pub use worker::Worker;

/// Every event an integration can subscribe to: the reports, then the alerts.
pub const EVENTS: &[&str] = &[
    "daily_report",
    "weekly_report",
    "monthly_report",
    "custom_report",
    "adblock_rate_spike",
    "conversion_rate_drop",
    "ab_test_winner",
    "no_data",
];

/// Something to tell a site's people about, and how.
#[derive(Debug, Clone)]
pub struct Notification {
    pub site_id: String,
    /// `daily_report`, …, or an alert name (see [`EVENTS`]).
    pub event: String,
    /// Enqueuing the same key again does nothing.
    pub dedupe_key: String,
    pub subject: String,
    /// Plain text for chat messages.
    pub text: String,
    /// Label and value pairs shown as fields in chat messages.
    pub summary: Vec<(String, String)>,
    /// The webhook body's `data`.
    pub data: serde_json::Value,
    pub emails: Vec<Email>,
    pub channels: Vec<Channel>,
}

#[derive(Debug, Clone)]
pub struct Email {
    pub to: String,
    pub subject: String,
    pub html: String,
    pub text: String,
    pub attachments: Vec<Attachment>,
}

#[derive(Debug, Clone)]
pub struct Attachment {
    pub filename: String,
    pub content_type: String,
    pub bytes: Vec<u8>,
}

/// Integrations to reach: every one of the site's integrations of this kind
/// that subscribed to the notification's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Slack,
    Webhook,
}

/// Puts a notification in the outbox: one row per e-mail, per matching
/// integration of `channels`, and per e-mail integration subscribed to the
/// event (unless its address already is among `emails`), all in one savepoint.
/// Returns how many rows were created; 0 when `dedupe_key` was enqueued
/// before. Run it on a write connection.
pub fn enqueue(conn: &Connection, n: &Notification) -> analytics::Result<usize> {
    let site_id = Uuid::parse_str(&n.site_id).map_err(|_| analytics::Error::NotFound("site"))?;
    let site = sites::get(conn, site_id)?.ok_or(analytics::Error::NotFound("site"))?;
    let mut rows = Vec::new();
    for e in &n.emails {
        rows.push(email::delivery(e, None));
    }
    for integration in integrations::subscribed(conn, site.seq, Kind::Email, &n.event)? {
        if !n.emails.iter().any(|e| e.to.eq_ignore_ascii_case(&integration.target)) {
            rows.push(for_integration(&integration, n));
        }
    }
    for channel in &n.channels {
        let kind = match channel {
            Channel::Slack => Kind::Slack,
            Channel::Webhook => Kind::Webhook,
        };
        for integration in integrations::subscribed(conn, site.seq, kind, &n.event)? {
            rows.push(for_integration(&integration, n));
        }
    }
    let created = outbox::enqueue(conn, site.seq, &n.event, &n.dedupe_key, &rows, Utc::now())?;
    Ok(created.map_or(0, |ids| ids.len()))
}

/// Enqueues a test message to one integration; returns the delivery id.
pub fn enqueue_test(conn: &Connection, site_id: Uuid, integration: &Integration) -> analytics::Result<Uuid> {
    let n = Notification {
        site_id: site_id.to_string(),
        event: "test".to_owned(),
        dedupe_key: format!("test:{}", Uuid::new_v4()),
        subject: "Postern test message".to_owned(),
        text: format!("This is a test message from Postern for the integration \"{}\".", integration.name),
        summary: Vec::new(),
        data: json!({ "message": "test", "integration_id": integration.id }),
        emails: Vec::new(),
        channels: Vec::new(),
    };
    let mut row = for_integration(integration, &n);
    if integration.kind == Kind::Email {
        // So the test also proves attachments get through the mail relay.
        row.attachments.push(outbox::Attachment {
            filename: "postern-test.txt".to_owned(),
            content_type: "text/plain; charset=utf-8".to_owned(),
            bytes: b"Attachments from Postern reach you.\n".to_vec(),
        });
    }
    let ids = outbox::enqueue(conn, integration.site, &n.event, &n.dedupe_key, &[row], Utc::now())?;
    ids.and_then(|ids| ids.into_iter().next()).ok_or_else(|| analytics::Error::Conflict("test delivery not created".to_owned()))
}

fn for_integration(i: &Integration, n: &Notification) -> NewDelivery {
    let (channel, payload) = match i.kind {
        Kind::Email => return email::delivery(&email::from_notification(n, &i.target), Some(i.seq)),
        Kind::Slack => (outbox::Channel::Slack, slack::message(n)),
        Kind::Webhook => (outbox::Channel::Webhook, webhook::body(n)),
    };
    NewDelivery { channel, integration: Some(i.seq), recipient: i.name.clone(), payload: payload.to_string(), attachments: Vec::new() }
}

#[cfg(test)]
mod tests {
    use analytics::integrations::NewIntegration;
    use analytics::store::Durability;
    use analytics::{accounts, Store};

    use super::*;

    #[test]
    fn one_enqueue_makes_a_row_per_recipient_and_subscribed_integration_once_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("t.db")).unwrap();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let site = w
            .run(|c| {
                let account = accounts::ensure_account(c, "acme", now)?;
                let new = sites::NewSite { account_id: account, name: "S", domain: "s.test", timezone: chrono_tz::Tz::UTC, revenue_per_mille: None };
                let site = sites::create(c, &new, now)?;
                let daily = ["daily_report".to_owned()];
                let alerts = ["no_data".to_owned()];
                for (kind, target, events) in [
                    (Kind::Slack, "http://slack.test/", &daily),
                    (Kind::Webhook, "http://hook.test/", &daily),
                    (Kind::Webhook, "http://other.test/", &alerts),
                    (Kind::Email, "boss@s.test", &daily),
                    (Kind::Email, "a@s.test", &daily),
                ] {
                    integrations::create(c, &NewIntegration { site: site.seq, kind, name: target, target, events }, now)?;
                }
                Ok(site)
            })
            .unwrap();
        let mail = |to: &str| Email { to: to.into(), subject: "s".into(), html: "<p>h</p>".into(), text: "t".into(), attachments: Vec::new() };
        let n = Notification {
            site_id: site.id.to_string(),
            event: "daily_report".into(),
            dedupe_key: "daily:2026-11-20".into(),
            subject: "Daily".into(),
            text: "Yesterday".into(),
            summary: vec![("Sessions".into(), "10".into())],
            data: json!({"sessions": 10, "conversions": 1}),
            emails: vec![mail("a@s.test"), mail("b@s.test")],
            channels: vec![Channel::Slack, Channel::Webhook],
        };
        // Two e-mails, the Slack and the daily webhook, and boss@ (a@ is already a recipient).
        assert_eq!(w.run(|c| enqueue(c, &n)).unwrap(), 5);
        assert_eq!(w.run(|c| enqueue(c, &n)).unwrap(), 0, "the same dedupe key again is a no-op");
        let now = Utc::now();
        let rows = w.run(|c| outbox::claim(c, now, now + chrono::Duration::seconds(60), 100)).unwrap();
        let mut targets: Vec<(&str, &str)> = rows.iter().map(|r| (r.channel.as_str(), r.recipient.as_str())).collect();
        targets.sort();
        assert_eq!(targets, vec![
            ("email", "a@s.test"),
            ("email", "b@s.test"),
            ("email", "boss@s.test"),
            ("slack", "http://slack.test/"),
            ("webhook", "http://hook.test/")
        ]);
        let hook = rows.iter().find(|r| r.channel == outbox::Channel::Webhook).unwrap();
        let body: serde_json::Value = serde_json::from_str(&hook.payload).unwrap();
        assert_eq!(body, json!({"event": "daily_report", "site_id": site.id.to_string(), "data": {"sessions": 10, "conversions": 1}}));

        let unknown = Notification { site_id: Uuid::new_v4().to_string(), dedupe_key: "x".into(), ..n };
        assert!(matches!(w.run(|c| enqueue(c, &unknown)), Err(analytics::Error::NotFound("site"))));
    }
}
