//! What the nodes serving one database keep together, so that any node can
//! serve any request (DESIGN §12): rate-limit windows of verified keys,
//! sign-in attempts, one-time dashboard messages and wall-preview drafts.
//! Each is a few rows swept as they expire, a bounded number at a time, so
//! no call scans a table. Times are Unix seconds.

use uuid::Uuid;

use crate::db::{params, Connection, OptionalExtension};
use crate::Result;

/// A fixed window after one count: whether the units were taken, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub allowed: bool,
    pub count: u32,
    /// When the window ends (it started `window_secs` before).
    pub expires_at: i64,
}

/// Counts `n` units against `bucket` in `table` (one of two with the same
/// columns) in one statement: a window that has ended starts again at `now`;
/// the units are added only if the window stays within the limit, and `took`
/// says whether they were. The SET expressions all read the row as it was,
/// on both engines.
fn count(c: &Connection, table: &str, bucket: &str, n: u32, limit: u32, window_secs: i64, now: i64) -> Result<Window> {
    let sql = format!(
        "INSERT INTO {table} (bucket, expires_at, count, took)
         VALUES (?1, CAST(?2 AS BIGINT) + CAST(?3 AS BIGINT),
                 CASE WHEN CAST(?4 AS BIGINT) <= CAST(?5 AS BIGINT) THEN ?4 ELSE 0 END,
                 CASE WHEN CAST(?4 AS BIGINT) <= CAST(?5 AS BIGINT) THEN ?4 ELSE 0 END)
         ON CONFLICT (bucket) DO UPDATE SET
             took = CASE WHEN {table}.expires_at <= ?2 THEN excluded.took
                         WHEN {table}.count + ?4 <= ?5 THEN ?4 ELSE 0 END,
             count = CASE WHEN {table}.expires_at <= ?2 THEN excluded.count
                          WHEN {table}.count + ?4 <= ?5 THEN {table}.count + ?4 ELSE {table}.count END,
             expires_at = CASE WHEN {table}.expires_at <= ?2 THEN excluded.expires_at ELSE {table}.expires_at END
         RETURNING expires_at, count, took"
    );
    c.prepare_cached(&sql)?.query_row(params![bucket, now, window_secs, n, limit], |r| {
        Ok(Window { expires_at: r.get(0)?, count: r.get(1)?, allowed: r.get::<_, i64>(2)? > 0 || n == 0 })
    })
}

/// Counts `n` requests against `bucket`'s rate window of `window_secs`:
/// all of them, or none when they would take it past `limit`.
pub fn count_requests(c: &Connection, bucket: &str, n: u32, limit: u32, window_secs: i64, now: i64) -> Result<Window> {
    count(c, "rate_windows", bucket, n, limit, window_secs, now)
}

/// Deletes up to `max` rate windows that ended by `now`; returns how many.
pub fn sweep_windows(c: &Connection, now: i64, max: u32) -> Result<usize> {
    c.prepare_cached("DELETE FROM rate_windows WHERE bucket IN (SELECT bucket FROM rate_windows WHERE expires_at <= ?1 LIMIT ?2)")?.execute(params![now, max])
}

/// Expired rows each write to a table of sign-in attempts, messages or
/// drafts deletes first: more than such a write can leave behind.
const SWEEP: u32 = 64;

/// Counts a sign-in attempt against every key (with its limit) at once,
/// unless one is at its limit: then nothing is counted and the seconds until
/// the latest such window ends are returned. Keys are counted in sorted
/// order, so two nodes counting the same keys never wait for each other in a circle.
pub fn begin_sign_in(c: &Connection, keys: &[(String, u32)], window_secs: i64, now: i64) -> Result<Result<(), u64>> {
    c.prepare_cached("DELETE FROM sign_in_attempts WHERE bucket IN (SELECT bucket FROM sign_in_attempts WHERE expires_at <= ?1 LIMIT ?2)")?
        .execute(params![now, SWEEP])?;
    let mut sorted: Vec<&(String, u32)> = keys.iter().collect();
    sorted.sort();
    let mut taken = Vec::new();
    let mut wait = None;
    for (key, limit) in sorted {
        let w = count(c, "sign_in_attempts", key, 1, *limit, window_secs, now)?;
        if w.allowed {
            taken.push(key.clone());
        } else {
            wait = wait.max(Some((w.expires_at - now).max(1) as u64));
        }
    }
    match wait {
        Some(wait) => {
            give_back_sign_in(c, &taken, now)?;
            Ok(Err(wait))
        }
        None => Ok(Ok(())),
    }
}

/// Takes back an attempt counted against `keys` in their live windows.
pub fn give_back_sign_in(c: &Connection, keys: &[String], now: i64) -> Result<()> {
    let mut st = c.prepare_cached("UPDATE sign_in_attempts SET count = count - 1 WHERE bucket = ?1 AND expires_at > ?2 AND count > 0")?;
    for key in keys {
        st.execute(params![key, now])?;
    }
    Ok(())
}

/// Forgets every attempt counted against `key`.
pub fn clear_sign_in(c: &Connection, key: &str) -> Result<()> {
    c.execute("DELETE FROM sign_in_attempts WHERE bucket = ?1", [key])?;
    Ok(())
}

/// Keeps `sealed` as the one message of `session` (a hash of its token) for
/// the page named `page`, replacing an older one, until `expires_at`.
pub fn put_flash(c: &Connection, session: &[u8; 32], page: &str, sealed: &[u8], expires_at: i64, now: i64) -> Result<()> {
    c.execute("DELETE FROM dashboard_flashes WHERE session IN (SELECT session FROM dashboard_flashes WHERE expires_at <= ?1 LIMIT ?2)", params![now, SWEEP])?;
    c.execute(
        "INSERT INTO dashboard_flashes (session, page, sealed, expires_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session) DO UPDATE SET page = excluded.page, sealed = excluded.sealed, expires_at = excluded.expires_at",
        params![&session[..], page, sealed, expires_at],
    )?;
    Ok(())
}

/// Whether `session` has a live message for `page` (a read, so that pages
/// without one write nothing).
pub fn has_flash(c: &Connection, session: &[u8; 32], page: &str, now: i64) -> Result<bool> {
    c.prepare_cached("SELECT 1 FROM dashboard_flashes WHERE session = ?1 AND page = ?2 AND expires_at > ?3")?
        .query_row(params![&session[..], page, now], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// Takes `session`'s live message for `page`: the first call gets it, any
/// later one (on any node) nothing.
pub fn take_flash(c: &Connection, session: &[u8; 32], page: &str, now: i64) -> Result<Option<Vec<u8>>> {
    c.query_row("DELETE FROM dashboard_flashes WHERE session = ?1 AND page = ?2 AND expires_at > ?3 RETURNING sealed", params![&session[..], page, now], |r| {
        r.get(0)
    })
    .optional()
}

/// A wall draft being previewed.
pub struct Draft<'a> {
    /// The SHA-256 of the token that opens it.
    pub token: &'a [u8; 32],
    pub site: Uuid,
    /// The SHA-256 of the token of the session that made it.
    pub session: &'a [u8; 32],
    pub wall: &'a str,
    pub expires_at: i64,
}

/// Keeps `draft`; the session's oldest drafts go so that it keeps at most `per_session`.
pub fn put_draft(c: &Connection, draft: &Draft<'_>, per_session: u32, now: i64) -> Result<()> {
    c.execute("DELETE FROM wall_drafts WHERE token IN (SELECT token FROM wall_drafts WHERE expires_at <= ?1 LIMIT ?2)", params![now, SWEEP])?;
    c.execute(
        "INSERT INTO wall_drafts (token, site, session, wall, seq, expires_at)
         VALUES (?1, ?2, ?3, ?4, (SELECT coalesce(max(seq), 0) + 1 FROM wall_drafts WHERE session = ?3), ?5)",
        params![&draft.token[..], draft.site.to_string(), &draft.session[..], draft.wall, draft.expires_at],
    )?;
    c.execute(
        "DELETE FROM wall_drafts WHERE session = ?1
         AND seq <= (SELECT max(seq) FROM wall_drafts WHERE session = ?1) - CAST(?2 AS BIGINT)",
        params![&draft.session[..], per_session],
    )?;
    Ok(())
}

/// The live draft of `site` kept under `token` (a hash of it).
pub fn draft(c: &Connection, token: &[u8; 32], site: Uuid, now: i64) -> Result<Option<String>> {
    c.prepare_cached("SELECT wall FROM wall_drafts WHERE token = ?1 AND site = ?2 AND expires_at > ?3")?
        .query_row(params![&token[..], site.to_string(), now], |r| r.get(0))
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{postgres_store, temp_store};
    use crate::store::Durability;
    use crate::Store;

    /// The checks, on SQLite and (when a cluster is named) on PostgreSQL.
    fn on_both(check: impl Fn(&Store)) {
        let (_dir, store) = temp_store();
        check(&store);
        if let Some((_db, store)) = postgres_store() {
            check(&store);
        }
    }

    fn write<T>(store: &Store, f: impl FnOnce(&Connection) -> Result<T>) -> T {
        store.open_writer(Durability::Normal).unwrap().run(f).unwrap()
    }

    #[test]
    fn a_window_counts_up_to_its_limit_then_starts_again() {
        on_both(|store| {
            let w = |n, now| write(store, |c| count_requests(c, "key:a", n, 3, 60, now));
            assert_eq!(w(1, 1000), Window { allowed: true, count: 1, expires_at: 1060 });
            assert_eq!(w(2, 1010), Window { allowed: true, count: 3, expires_at: 1060 });
            assert_eq!(w(1, 1059), Window { allowed: false, count: 3, expires_at: 1060 });
            assert_eq!(w(1, 1060), Window { allowed: true, count: 1, expires_at: 1120 }, "a new window");
            assert_eq!(w(3, 1061), Window { allowed: false, count: 1, expires_at: 1120 }, "a batch takes all or nothing");
            assert_eq!(w(4, 2000), Window { allowed: false, count: 0, expires_at: 2060 }, "more than the limit at once");
            assert_eq!(write(store, |c| count_requests(c, "key:b", 1, 3, 60, 2000)).count, 1, "buckets are apart");
            assert_eq!(write(store, |c| sweep_windows(c, 2060, 1)), 1, "a bounded sweep");
            assert_eq!(write(store, |c| sweep_windows(c, 2060, 10)), 1);
            assert_eq!(write(store, |c| sweep_windows(c, 2060, 10)), 0);
        });
    }

    #[test]
    fn a_refused_sign_in_counts_against_none_of_its_keys() {
        on_both(|store| {
            let keys = vec![("email:a".to_owned(), 3), ("addr:1".to_owned(), 10)];
            for _ in 0..3 {
                assert_eq!(write(store, |c| begin_sign_in(c, &keys, 900, 1000)), Ok(()));
            }
            assert_eq!(write(store, |c| begin_sign_in(c, &keys, 900, 1100)), Err(800));
            write(store, |c| give_back_sign_in(c, &["email:a".to_owned()], 1100));
            assert_eq!(write(store, |c| begin_sign_in(c, &keys, 900, 1100)), Ok(()), "an attempt given back");
            let addr_only = vec![("addr:1".to_owned(), 4)];
            assert_eq!(write(store, |c| begin_sign_in(c, &addr_only, 900, 1100)), Err(800), "4 counted, the refused one not");
            write(store, |c| clear_sign_in(c, "addr:1"));
            assert_eq!(write(store, |c| begin_sign_in(c, &addr_only, 900, 1100)), Ok(()));
            assert_eq!(write(store, |c| begin_sign_in(c, &keys, 900, 1900)), Ok(()), "a new window");
        });
    }

    #[test]
    fn a_message_is_taken_once_by_its_own_session_and_page() {
        on_both(|store| {
            let (s1, s2) = ([1; 32], [2; 32]);
            write(store, |c| put_flash(c, &s1, "keys", b"one", 1300, 1000));
            assert!(!write(store, |c| has_flash(c, &s2, "keys", 1000)));
            assert!(!write(store, |c| has_flash(c, &s1, "integrations", 1000)));
            assert!(write(store, |c| has_flash(c, &s1, "keys", 1000)));
            assert_eq!(write(store, |c| take_flash(c, &s1, "keys", 1000)), Some(b"one".to_vec()));
            assert_eq!(write(store, |c| take_flash(c, &s1, "keys", 1000)), None, "shown once");
            write(store, |c| put_flash(c, &s1, "keys", b"two", 1300, 1000));
            write(store, |c| put_flash(c, &s1, "keys", b"three", 1300, 1000));
            assert_eq!(write(store, |c| take_flash(c, &s1, "keys", 1000)), Some(b"three".to_vec()));
            write(store, |c| put_flash(c, &s1, "keys", b"late", 1300, 1000));
            assert_eq!(write(store, |c| take_flash(c, &s1, "keys", 1300)), None, "expired");
        });
    }

    #[test]
    fn drafts_are_per_site_and_bounded_per_session() {
        on_both(|store| {
            let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
            let (s1, s2) = ([1; 32], [2; 32]);
            let put = |token: u8, session: &[u8; 32], wall: &str| {
                write(store, |c| put_draft(c, &Draft { token: &[token; 32], site: a, session, wall, expires_at: 1300 }, 2, 1000))
            };
            put(1, &s1, "first");
            assert_eq!(write(store, |c| draft(c, &[1; 32], a, 1000)).as_deref(), Some("first"));
            assert_eq!(write(store, |c| draft(c, &[1; 32], b, 1000)), None, "a token opens its own site's draft only");
            assert_eq!(write(store, |c| draft(c, &[1; 32], a, 1300)), None, "expired");
            put(2, &s2, "other");
            put(3, &s1, "second");
            put(4, &s1, "third");
            assert_eq!(write(store, |c| draft(c, &[1; 32], a, 1000)), None, "the session's oldest made room");
            for token in [2, 3, 4] {
                assert!(write(store, |c| draft(c, &[token; 32], a, 1000)).is_some(), "{token}");
            }
        });
    }
}
