//! Integrations: where a site's notifications go (an e-mail address, a
//! Slack-type incoming webhook or a signed custom webhook), each subscribed to
//! a chosen list of events.
//!
//! A webhook's signing secret is generated here and stored as is (the sender
//! needs it to sign); the API shows it once, at creation.

use chrono::{DateTime, Utc};
use rand::Rng;
use crate::db::{params, Connection, OptionalExtension, Row};
use uuid::Uuid;

use crate::accounts::{from_ms, ms};
use crate::{Error, Result};

/// Every webhook secret starts with this, so people and secret scanners recognise it.
pub const SECRET_PREFIX: &str = "whsec_";
const SECRET_RANDOM_BYTES: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Email,
    Slack,
    Webhook,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Email => "email",
            Kind::Slack => "slack",
            Kind::Webhook => "webhook",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "email" => Some(Kind::Email),
            "slack" => Some(Kind::Slack),
            "webhook" => Some(Kind::Webhook),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Integration {
    pub seq: i64,
    pub id: Uuid,
    pub site: i64,
    pub kind: Kind,
    pub name: String,
    /// The URL, or the e-mail address.
    pub target: String,
    /// The webhook signing secret; `None` for the other kinds.
    pub secret: Option<String>,
    pub events: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

pub struct NewIntegration<'a> {
    pub site: i64,
    pub kind: Kind,
    pub name: &'a str,
    pub target: &'a str,
    pub events: &'a [String],
}

pub fn create(conn: &Connection, n: &NewIntegration<'_>, now: DateTime<Utc>) -> Result<Integration> {
    let secret = (n.kind == Kind::Webhook).then(|| {
        let bytes: [u8; SECRET_RANDOM_BYTES] = rand::rng().random();
        format!("{SECRET_PREFIX}{}", hex::encode(bytes))
    });
    let id = Uuid::new_v4();
    let events = serde_json::to_string(n.events).map_err(|e| Error::Corrupt(e.to_string()))?;
    let seq = conn.query_row(
        "INSERT INTO integrations (id, site, kind, name, target, secret, events, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING seq",
        params![id.to_string(), n.site, n.kind.as_str(), n.name, n.target, secret, events, ms(now)],
        |r| r.get(0),
    )?;
    Ok(Integration {
        seq,
        id,
        site: n.site,
        kind: n.kind,
        name: n.name.to_owned(),
        target: n.target.to_owned(),
        secret,
        events: n.events.to_vec(),
        created_at: now,
        deleted_at: None,
    })
}

const COLUMNS: &str = "seq, id, site, kind, name, target, secret, events, created_at, deleted_at";

fn from_row(r: &Row<'_>) -> crate::Result<Integration> {
    let id: String = r.get(1)?;
    let kind: String = r.get(3)?;
    let events: String = r.get(7)?;
    let corrupt = |what: &str| crate::Error::Corrupt(format!("integration: {what}"));
    Ok(Integration {
        seq: r.get(0)?,
        id: Uuid::parse_str(&id).map_err(|_| corrupt("integrations.id"))?,
        site: r.get(2)?,
        kind: Kind::parse(&kind).ok_or_else(|| corrupt("integrations.kind"))?,
        name: r.get(4)?,
        target: r.get(5)?,
        secret: r.get(6)?,
        events: serde_json::from_str(&events).map_err(|_| corrupt("integrations.events"))?,
        created_at: from_ms(r.get(8)?),
        deleted_at: r.get::<_, Option<i64>>(9)?.map(from_ms),
    })
}

/// The site's live integrations, oldest first.
pub fn list(conn: &Connection, site: i64) -> Result<Vec<Integration>> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM integrations WHERE site = ?1 AND deleted_at IS NULL ORDER BY seq"))?;
    let rows = stmt.query_map([site], from_row)?.collect::<crate::Result<_>>()?;
    Ok(rows)
}

/// One of the site's integrations, deleted ones included (their history stays readable).
pub fn get(conn: &Connection, site: i64, id: Uuid) -> Result<Option<Integration>> {
    let sql = format!("SELECT {COLUMNS} FROM integrations WHERE site = ?1 AND id = ?2");
    Ok(conn.query_row(&sql, params![site, id.to_string()], from_row).optional()?)
}

pub fn get_by_seq(conn: &Connection, seq: i64) -> Result<Option<Integration>> {
    let sql = format!("SELECT {COLUMNS} FROM integrations WHERE seq = ?1");
    Ok(conn.query_row(&sql, [seq], from_row).optional()?)
}

/// The site's live integrations of `kind` that receive `event`.
pub fn subscribed(conn: &Connection, site: i64, kind: Kind, event: &str) -> Result<Vec<Integration>> {
    Ok(list(conn, site)?.into_iter().filter(|i| i.kind == kind && i.events.iter().any(|e| e == event)).collect())
}

/// Marks the integration deleted; its pending deliveries are dropped when due.
pub fn delete(conn: &Connection, site: i64, id: Uuid, now: DateTime<Utc>) -> Result<()> {
    let n = conn.execute(
        "UPDATE integrations SET deleted_at = ?3 WHERE site = ?1 AND id = ?2 AND deleted_at IS NULL",
        params![site, id.to_string(), ms(now)],
    )?;
    if n == 0 {
        return Err(Error::NotFound("integration"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{testing::temp_store, Durability};

    #[test]
    fn webhooks_get_a_secret_and_subscriptions_filter_by_kind_and_event() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let events = vec!["daily_report".to_owned(), "no_data".to_owned()];
        let (hook, slack) = w
            .run(|c| {
                let hook = create(c, &NewIntegration { site: 1, kind: Kind::Webhook, name: "h", target: "http://h.test/", events: &events }, now)?;
                let slack = create(c, &NewIntegration { site: 1, kind: Kind::Slack, name: "s", target: "http://s.test/", events: &events[..1] }, now)?;
                Ok((hook, slack))
            })
            .unwrap();
        let secret = hook.secret.clone().unwrap();
        assert!(secret.starts_with(SECRET_PREFIX) && secret.len() == SECRET_PREFIX.len() + 48, "{secret}");
        assert_eq!(slack.secret, None);
        store
            .read(|c| {
                assert_eq!(subscribed(c, 1, Kind::Webhook, "no_data")?.len(), 1);
                assert!(subscribed(c, 1, Kind::Slack, "no_data")?.is_empty());
                assert!(subscribed(c, 2, Kind::Webhook, "no_data")?.is_empty());
                assert_eq!(get(c, 1, hook.id)?.unwrap().secret.as_deref(), Some(secret.as_str()));
                Ok(())
            })
            .unwrap();
        w.run(|c| delete(c, 1, hook.id, now)).unwrap();
        assert!(matches!(w.run(|c| delete(c, 1, hook.id, now)), Err(Error::NotFound(_))));
        store
            .read(|c| {
                assert_eq!(list(c, 1)?.len(), 1);
                assert!(get(c, 1, hook.id)?.unwrap().deleted_at.is_some());
                Ok(())
            })
            .unwrap();
    }
}
