//! The write path: the one write connection, group transactions, and the
//! per-event pipeline raw insert → session upsert → rollup upsert.
//!
//! A session counts in exactly one `rollup_hourly` row, the one keyed by its
//! first hour, device, country and variant. When an event changes the session
//! (a new flag, a variant, an earlier first hour) the writer takes the session's
//! old contribution out of its old row and puts the new one in, so late events
//! update the right hour exactly once per flag.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use uuid::Uuid;

use crate::model::{flags, Ack, NewEvent};
use crate::Result;

/// Owner of the write connection.
pub struct Writer {
    conn: Connection,
}

impl Writer {
    pub(crate) fn new(conn: Connection) -> Writer {
        Writer { conn }
    }

    /// Starts a group transaction: many commands, one commit.
    pub fn begin(&mut self) -> Result<Group<'_>> {
        Ok(Group { tx: self.conn.transaction()? })
    }

    /// Runs one change in its own transaction.
    pub fn run<T>(&mut self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut group = self.begin()?;
        let out = group.apply(f)?;
        group.commit()?;
        Ok(out)
    }
}

/// A transaction shared by several commands. Each command runs in its own
/// savepoint, so one failing command leaves the others' work in place.
pub struct Group<'a> {
    tx: Transaction<'a>,
}

impl Group<'_> {
    /// Stores events and updates sessions and rollups; one answer per event, in order.
    pub fn ingest(&mut self, events: &[NewEvent]) -> Result<Vec<Ack>> {
        self.apply(|conn| events.iter().map(|e| ingest_one(conn, e)).collect())
    }

    /// Runs `f` inside a savepoint of the group transaction.
    pub fn apply<T>(&mut self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let sp = self.tx.savepoint()?;
        let out = f(&sp)?;
        sp.commit()?;
        Ok(out)
    }

    pub fn commit(self) -> Result<()> {
        Ok(self.tx.commit()?)
    }
}

/// What a session contributes to the rollups, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionState {
    first_hour: i64,
    device: i64,
    country: String,
    variant: String,
    forced: bool,
    flags: u8,
}

impl SessionState {
    fn counters(&self) -> [i64; 6] {
        let has = |f: u8| i64::from(self.flags & f == f);
        [1, has(flags::ADBLOCK), has(flags::WALL), has(flags::DISMISSED), has(flags::CONVERTED), has(flags::WALL | flags::CONVERTED)]
    }

    fn same_row(&self, other: &SessionState) -> bool {
        self.first_hour == other.first_hour
            && self.device == other.device
            && self.country == other.country
            && self.variant == other.variant
    }
}

fn hour_of(t: chrono::DateTime<chrono::Utc>) -> i64 {
    t.timestamp().div_euclid(3600)
}

fn ingest_one(conn: &Connection, e: &NewEvent) -> Result<Ack> {
    if let Some(client_id) = &e.client_event_id {
        let existing = conn
            .prepare_cached("SELECT id, received_at FROM events WHERE site = ?1 AND client_event_id = ?2")?
            .query_row(params![e.site_seq, client_id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .optional()?;
        if let Some((id, received_ms)) = existing {
            return Ok(Ack {
                id: Uuid::parse_str(&id).map_err(|err| crate::Error::Corrupt(err.to_string()))?,
                received_at: chrono::DateTime::from_timestamp_millis(received_ms).unwrap_or(e.received_at),
                duplicate: true,
            });
        }
    }

    let id = Uuid::now_v7();
    let hour = hour_of(e.occurred_at);
    let old = load_session(conn, e.site_seq, &e.session_id)?;
    let mut new = old.clone().unwrap_or_else(|| SessionState {
        first_hour: hour,
        device: e.device.code(),
        country: e.country.clone(),
        variant: String::new(),
        forced: false,
        flags: 0,
    });
    new.first_hour = new.first_hour.min(hour);
    new.flags |= e.event_type.flag();
    if e.forced_variant {
        new.forced = true;
        new.variant.clear();
    } else if !new.forced && new.variant.is_empty() {
        if let Some(v) = &e.variant {
            new.variant = v.clone();
        }
    }

    conn.prepare_cached(
        "INSERT INTO events (id, site, session_id, event_type, page_url, metadata, country,
                             client_event_id, occurred_at, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        id.to_string(),
        e.site_seq,
        e.session_id,
        e.event_type.code(),
        e.page_url,
        e.metadata,
        new.country,
        e.client_event_id,
        e.occurred_at.timestamp_millis(),
        e.received_at.timestamp_millis(),
    ])?;

    conn.prepare_cached(
        "INSERT INTO sessions (site, session_id, first_hour, device, country, variant, forced, flags, last_seen)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (site, session_id) DO UPDATE SET
             first_hour = excluded.first_hour, variant = excluded.variant, forced = excluded.forced,
             flags = excluded.flags, last_seen = max(last_seen, excluded.last_seen)",
    )?
    .execute(params![
        e.site_seq,
        e.session_id,
        new.first_hour,
        new.device,
        new.country,
        new.variant,
        new.forced,
        new.flags,
        e.occurred_at.timestamp_millis(),
    ])?;

    match &old {
        None => bump_rollup(conn, e.site_seq, &new, new.counters())?,
        Some(old) if old.same_row(&new) => {
            if old.flags != new.flags {
                let (o, n) = (old.counters(), new.counters());
                bump_rollup(conn, e.site_seq, &new, std::array::from_fn(|i| n[i] - o[i]))?;
            }
        }
        Some(old) => {
            bump_rollup(conn, e.site_seq, old, old.counters().map(|c| -c))?;
            bump_rollup(conn, e.site_seq, &new, new.counters())?;
        }
    }

    conn.prepare_cached(
        "INSERT INTO event_counts_hourly (site, hour, event_type, device, country, events)
         VALUES (?1, ?2, ?3, ?4, ?5, 1)
         ON CONFLICT (site, hour, event_type, device, country) DO UPDATE SET events = events + 1",
    )?
    .execute(params![e.site_seq, hour, e.event_type.code(), new.device, new.country])?;

    Ok(Ack { id, received_at: e.received_at, duplicate: false })
}

fn load_session(conn: &Connection, site: i64, session_id: &str) -> Result<Option<SessionState>> {
    Ok(conn
        .prepare_cached(
            "SELECT first_hour, device, country, variant, forced, flags FROM sessions
             WHERE site = ?1 AND session_id = ?2",
        )?
        .query_row(params![site, session_id], |r| {
            Ok(SessionState {
                first_hour: r.get(0)?,
                device: r.get(1)?,
                country: r.get(2)?,
                variant: r.get(3)?,
                forced: r.get(4)?,
                flags: r.get(5)?,
            })
        })
        .optional()?)
}

fn bump_rollup(conn: &Connection, site: i64, s: &SessionState, d: [i64; 6]) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO rollup_hourly (site, hour, device, country, variant,
                                    sessions, adblock, walls, dismissed, conversions, wall_conversions)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (site, hour, device, country, variant) DO UPDATE SET
             sessions = sessions + excluded.sessions, adblock = adblock + excluded.adblock,
             walls = walls + excluded.walls, dismissed = dismissed + excluded.dismissed,
             conversions = conversions + excluded.conversions,
             wall_conversions = wall_conversions + excluded.wall_conversions",
    )?
    .execute(params![site, s.first_hour, s.device, s.country, s.variant, d[0], d[1], d[2], d[3], d[4], d[5]])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use crate::model::{Device, EventType, NewEvent, Site};
    use crate::period::Period;
    use crate::query::{self, Filter};
    use crate::store::{testing::temp_store, Durability};
    use crate::{accounts, sites, Store};

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        writer: super::Writer,
        site: Site,
    }

    fn fixture() -> Fixture {
        let (dir, store) = temp_store();
        let mut writer = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let site = writer
            .run(|c| {
                let account = accounts::ensure_account(c, "acme", now)?;
                let new = sites::NewSite {
                    account_id: account,
                    name: "Acme",
                    domain: "acme.test",
                    timezone: chrono_tz::Tz::UTC,
                    revenue_per_mille: None,
                };
                sites::create(c, &new, now)
            })
            .unwrap();
        Fixture { _dir: dir, store, writer, site }
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, h, m, 0).unwrap()
    }

    impl Fixture {
        fn send(&mut self, session: &str, t: EventType, when: DateTime<Utc>, variant: Option<&str>) -> crate::model::Ack {
            self.send_full(session, t, when, variant, false, None)
        }

        fn send_full(
            &mut self,
            session: &str,
            t: EventType,
            when: DateTime<Utc>,
            variant: Option<&str>,
            forced: bool,
            event_id: Option<&str>,
        ) -> crate::model::Ack {
            let e = NewEvent {
                site_seq: self.site.seq,
                session_id: session.into(),
                event_type: t,
                page_url: "https://acme.test/".into(),
                metadata: None,
                device: Device::Desktop,
                country: "FR".into(),
                variant: variant.map(str::to_owned),
                forced_variant: forced,
                client_event_id: event_id.map(str::to_owned),
                occurred_at: when,
                received_at: when,
            };
            let mut g = self.writer.begin().unwrap();
            let ack = g.ingest(&[e]).unwrap().remove(0);
            g.commit().unwrap();
            ack
        }

        fn hour_rows(&self) -> Vec<(i64, i64, i64, i64, i64, String)> {
            self.store
                .read(|c| {
                    let mut s = c.prepare(
                        "SELECT hour, sessions, adblock, walls, conversions, variant FROM rollup_hourly
                         WHERE sessions <> 0 OR walls <> 0 ORDER BY hour, variant",
                    )?;
                    let rows = s
                        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
                        .collect::<rusqlite::Result<_>>()?;
                    Ok(rows)
                })
                .unwrap()
        }
    }

    #[test]
    fn a_session_counts_once_and_each_flag_once() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(9, 0), None);
        f.send("s1", EventType::Pageview, at(9, 5), None);
        f.send("s1", EventType::AdblockDetected, at(9, 6), None);
        f.send("s1", EventType::AdblockDetected, at(9, 7), None);
        let h9 = at(9, 0).timestamp() / 3600;
        assert_eq!(f.hour_rows(), vec![(h9, 1, 1, 0, 0, String::new())]);
    }

    #[test]
    fn a_late_conversion_updates_the_first_hour_and_moves_to_the_variant_row() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(9, 50), None);
        f.send("s1", EventType::AdblockDetected, at(9, 51), None);
        f.send("s2", EventType::Pageview, at(10, 1), None);
        f.send("s1", EventType::WallDisplayed, at(10, 2), Some("emotional"));
        f.send("s1", EventType::ConversionAllowlist, at(11, 30), Some("emotional"));
        let (h9, h10) = (at(9, 0).timestamp() / 3600, at(10, 0).timestamp() / 3600);
        assert_eq!(
            f.hour_rows(),
            vec![(h9, 1, 1, 1, 1, "emotional".to_owned()), (h10, 1, 0, 0, 0, String::new())]
        );
        let period = Period::new(at(0, 0).date_naive(), at(0, 0).date_naive(), chrono_tz::Tz::UTC);
        let d = f.store.read(|c| query::dashboard(c, &f.site, &period, Filter::default())).unwrap();
        assert_eq!((d.metrics.sessions, d.metrics.adblock_detected, d.metrics.conversions), (2, 1, 1));
        assert_eq!(d.metrics.conversion_rate, 100.0);
        let ab = f.store.read(|c| query::ab_testing(c, &f.site, None)).unwrap();
        let emotional = ab.iter().find(|v| v.name == "emotional").unwrap();
        assert_eq!((emotional.impressions, emotional.conversions), (1, 1));
    }

    #[test]
    fn an_earlier_backfilled_event_moves_the_session_to_its_hour() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(12, 0), None);
        f.send("s1", EventType::AdblockDetected, at(8, 0), None);
        assert_eq!(f.hour_rows(), vec![(at(8, 0).timestamp() / 3600, 1, 1, 0, 0, String::new())]);
    }

    #[test]
    fn repeated_event_ids_are_stored_once() {
        let mut f = fixture();
        let a = f.send_full("s1", EventType::Pageview, at(9, 0), None, false, Some("e-1"));
        let b = f.send_full("s1", EventType::Pageview, at(9, 1), None, false, Some("e-1"));
        assert!(!a.duplicate);
        assert!(b.duplicate);
        assert_eq!(a.id, b.id);
        let n: i64 = f.store.read(|c| Ok(c.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?)).unwrap();
        assert_eq!(n, 1);
        let counted: i64 = f
            .store
            .read(|c| Ok(c.query_row("SELECT sum(events) FROM event_counts_hourly", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(counted, 1);
    }

    #[test]
    fn forced_variant_sessions_stay_out_of_ab_results() {
        let mut f = fixture();
        f.send_full("s1", EventType::WallDisplayed, at(9, 0), Some("offer"), true, None);
        f.send_full("s1", EventType::ConversionAllowlist, at(9, 1), Some("offer"), true, None);
        f.send("s2", EventType::WallDisplayed, at(9, 2), Some("offer"));
        let ab = f.store.read(|c| query::ab_testing(c, &f.site, None)).unwrap();
        let offer = ab.iter().find(|v| v.name == "offer").unwrap();
        assert_eq!((offer.impressions, offer.conversions), (1, 0));
        let period = Period::new(at(0, 0).date_naive(), at(0, 0).date_naive(), chrono_tz::Tz::UTC);
        let d = f.store.read(|c| query::dashboard(c, &f.site, &period, Filter::default())).unwrap();
        assert_eq!((d.metrics.walls_displayed, d.metrics.conversions), (2, 1));
    }

    #[test]
    fn a_failed_command_leaves_the_rest_of_the_group() {
        let mut f = fixture();
        let mut g = f.writer.begin().unwrap();
        let failed: crate::Result<()> = g.apply(|c| {
            c.execute("INSERT INTO accounts (name, created_at) VALUES ('x', 0)", [])?;
            Err(crate::Error::Conflict("boom".into()))
        });
        assert!(failed.is_err());
        g.apply(|c| Ok(c.execute("INSERT INTO accounts (name, created_at) VALUES ('y', 0)", [])?)).unwrap();
        g.commit().unwrap();
        let names: Vec<String> = f
            .store
            .read(|c| {
                let mut s = c.prepare("SELECT name FROM accounts ORDER BY name")?;
                let v = s.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
                Ok(v)
            })
            .unwrap();
        assert_eq!(names, vec!["acme", "y"]);
    }
}
