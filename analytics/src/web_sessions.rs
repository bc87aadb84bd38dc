//! Dashboard login sessions, kept server-side: the browser holds a random
//! token in an HttpOnly cookie, the database only its SHA-256, together with
//! the session's CSRF token and its expiry.

use chrono::{DateTime, Duration, Utc};
use rand::Rng;
use crate::db::{params, Connection, OptionalExtension};

use crate::accounts::{hash_secret, ms, user_from_row, User, USER_COLUMNS};
use crate::Result;

/// A session as a request sees it.
#[derive(Debug, Clone)]
pub struct WebSession {
    pub user: User,
    pub csrf_token: String,
    pub expires_at: DateTime<Utc>,
}

/// A freshly opened session: the token exists only here and in the cookie.
pub struct NewWebSession {
    pub token: String,
    pub csrf_token: String,
}

/// 32 random bytes as hex: unguessable, and safe in a cookie or a form field.
pub fn random_token() -> String {
    hex::encode(rand::rng().random::<[u8; 32]>())
}

/// Opens a session for `user_id` lasting `ttl`, and drops expired ones on the way.
pub fn open(conn: &Connection, user_id: i64, ttl: Duration, now: DateTime<Utc>) -> Result<NewWebSession> {
    conn.execute("DELETE FROM dashboard_sessions WHERE expires_at <= ?1", [ms(now)])?;
    let new = NewWebSession { token: random_token(), csrf_token: random_token() };
    conn.execute(
        "INSERT INTO dashboard_sessions (token_hash, user_id, csrf_token, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![hash_secret(&new.token).to_vec(), user_id, new.csrf_token, ms(now), ms(now + ttl)],
    )?;
    Ok(new)
}

/// The live session holding this token, with its user.
pub fn find(conn: &Connection, token: &str, now: DateTime<Utc>) -> Result<Option<WebSession>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {USER_COLUMNS}, s.csrf_token, s.expires_at FROM dashboard_sessions s
             JOIN users ON users.id = s.user_id JOIN accounts ON accounts.id = users.account_id
             WHERE s.token_hash = ?1 AND s.expires_at > ?2"
        ))?
        .query_row(params![hash_secret(token).to_vec(), ms(now)], |r| {
            Ok(WebSession { user: user_from_row(r)?, csrf_token: r.get(6)?, expires_at: crate::accounts::from_ms(r.get(7)?) })
        })
        .optional()?)
}

/// Ends the session holding this token (nothing happens if there is none).
pub fn close(conn: &Connection, token: &str) -> Result<()> {
    conn.execute("DELETE FROM dashboard_sessions WHERE token_hash = ?1", [hash_secret(token).to_vec()])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounts::{create_user, ensure_account, Role};
    use crate::store::testing::temp_store;
    use crate::store::Durability;

    #[test]
    fn sessions_are_found_by_token_until_they_expire_or_close() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let (user, a, b) = w
            .run(|c| {
                let account = ensure_account(c, "acme", now)?;
                let user = create_user(c, account, "ann@example.com", "hash", Role::Reader, now)?;
                Ok((user, open(c, user, Duration::hours(1), now)?, open(c, user, Duration::minutes(1), now)?))
            })
            .unwrap();
        assert_ne!(a.token, b.token);
        assert_ne!(a.token, a.csrf_token);

        let found = store.read(|c| find(c, &a.token, now)).unwrap().expect("open session");
        assert_eq!((found.user.id, found.user.role, found.user.account_name.as_str()), (user, Role::Reader, "acme"));
        assert_eq!(found.csrf_token, a.csrf_token);
        assert!(store.read(|c| find(c, "not-a-token", now)).unwrap().is_none());

        let later = now + Duration::minutes(2);
        assert!(store.read(|c| find(c, &b.token, later)).unwrap().is_none(), "expired");
        // Opening another session sweeps the expired one away.
        w.run(|c| open(c, user, Duration::hours(1), later)).unwrap();
        let rows: i64 = store.read(|c| Ok(c.query_row("SELECT count(*) FROM dashboard_sessions", (), |r| r.get(0))?)).unwrap();
        assert_eq!(rows, 2);

        w.run(|c| close(c, &a.token)).unwrap();
        assert!(store.read(|c| find(c, &a.token, now)).unwrap().is_none(), "closed");
    }
}
