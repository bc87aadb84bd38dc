//! Accounts, dashboard users and API keys.
//!
//! An API key is shown once at creation; only its SHA-256 is stored, with a
//! short visible prefix so people can tell their keys apart.

use chrono::{DateTime, Utc};
use rand::Rng;
use crate::db::{params, Connection, OptionalExtension, Row};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::model::{ApiKey, Scope};
use crate::{Error, Result};

/// Every key starts with this, so secret scanners and people recognise it.
pub const KEY_PREFIX: &str = "pst_";
const KEY_RANDOM_LEN: usize = 40;
/// How many characters of a key are kept visible in listings.
const VISIBLE_LEN: usize = KEY_PREFIX.len() + 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Reader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Reader => "reader",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s.to_ascii_lowercase().as_str() {
            "admin" => Some(Role::Admin),
            "reader" => Some(Role::Reader),
            _ => None,
        }
    }
}

pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_ms(v: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(v).unwrap_or_default()
}

/// Returns the id of the account named `name`, creating it if needed.
pub fn ensure_account(conn: &Connection, name: &str, now: DateTime<Utc>) -> Result<i64> {
    conn.execute(
        "INSERT INTO accounts (name, created_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        params![name, ms(now)],
    )?;
    Ok(conn.query_row("SELECT id FROM accounts WHERE name = ?1", [name], |r| r.get(0))?)
}

pub fn create_user(
    conn: &Connection,
    account_id: i64,
    email: &str,
    password_hash: &str,
    role: Role,
    now: DateTime<Utc>,
) -> Result<i64> {
    conn.query_row(
        "INSERT INTO users (account_id, email, password_hash, role, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT DO NOTHING RETURNING id",
        params![account_id, email, password_hash, role.as_str(), ms(now)],
        |r| r.get(0),
    )
    .optional()?
    .ok_or_else(|| Error::Conflict(format!("a user with e-mail {email} already exists")))
}

/// A dashboard user, with the account it belongs to.
#[derive(Debug, Clone)]
pub struct User {
    pub id: i64,
    pub account_id: i64,
    pub account_name: String,
    pub email: String,
    pub role: Role,
    pub password_hash: String,
}

pub(crate) const USER_COLUMNS: &str =
    "users.id, users.account_id, accounts.name, users.email, users.role, users.password_hash";

pub(crate) fn user_from_row(r: &Row<'_>) -> crate::Result<User> {
    let role: String = r.get(4)?;
    Ok(User {
        id: r.get(0)?,
        account_id: r.get(1)?,
        account_name: r.get(2)?,
        email: r.get(3)?,
        // The schema's CHECK allows only admin and reader; anything else gets the lesser role.
        role: Role::parse(&role).unwrap_or(Role::Reader),
        password_hash: r.get(5)?,
    })
}

/// The user with this e-mail (compared without regard to case).
pub fn find_user_by_email(conn: &Connection, email: &str) -> Result<Option<User>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {USER_COLUMNS} FROM users JOIN accounts ON accounts.id = users.account_id WHERE users.email = ?1"
        ))?
        .query_row([email.trim()], user_from_row)
        .optional()?)
}

/// A freshly generated key: the secret is only ever available here.
pub struct NewKey {
    pub key: ApiKey,
    pub secret: String,
}

pub fn create_key(
    conn: &Connection,
    account_id: i64,
    name: &str,
    scopes: &[Scope],
    now: DateTime<Utc>,
) -> Result<NewKey> {
    let mut rng = rand::rng();
    let random: String = (0..KEY_RANDOM_LEN)
        .map(|_| {
            const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            ALPHABET[rng.random_range(0..ALPHABET.len())] as char
        })
        .collect();
    let secret = format!("{KEY_PREFIX}{random}");
    let mut scopes = scopes.to_vec();
    scopes.sort();
    scopes.dedup();
    let key = ApiKey {
        id: Uuid::new_v4(),
        account_id,
        name: name.to_owned(),
        prefix: secret[..VISIBLE_LEN].to_owned(),
        scopes,
        created_at: now,
        last_used_at: None,
        revoked_at: None,
    };
    conn.execute(
        "INSERT INTO api_keys (id, account_id, name, prefix, secret_hash, scopes, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            key.id.to_string(),
            account_id,
            key.name,
            key.prefix,
            hash_secret(&secret).to_vec(),
            scopes_to_text(&key.scopes),
            ms(now)
        ],
    )?;
    Ok(NewKey { key, secret })
}

pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn scopes_to_text(scopes: &[Scope]) -> String {
    scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
}

const KEY_COLUMNS: &str = "id, account_id, name, prefix, scopes, created_at, last_used_at, revoked_at";

fn key_from_row(r: &Row<'_>) -> crate::Result<ApiKey> {
    let id: String = r.get(0)?;
    let scopes: String = r.get(4)?;
    Ok(ApiKey {
        id: Uuid::parse_str(&id).unwrap_or_default(),
        account_id: r.get(1)?,
        name: r.get(2)?,
        prefix: r.get(3)?,
        scopes: scopes.split(',').filter_map(Scope::parse).collect(),
        created_at: from_ms(r.get(5)?),
        last_used_at: r.get::<_, Option<i64>>(6)?.map(from_ms),
        revoked_at: r.get::<_, Option<i64>>(7)?.map(from_ms),
    })
}

/// Finds the key whose secret this is, revoked or not.
pub fn find_key_by_secret(conn: &Connection, secret: &str) -> Result<Option<ApiKey>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE secret_hash = ?1"))?
        .query_row([hash_secret(secret).to_vec()], key_from_row)
        .optional()?)
}

/// The account's keys, newest first.
pub fn list_keys(conn: &Connection, account_id: i64) -> Result<Vec<ApiKey>> {
    let mut stmt =
        conn.prepare(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE account_id = ?1 ORDER BY created_at DESC, id"))?;
    let keys = stmt.query_map([account_id], key_from_row)?.collect::<crate::Result<_>>()?;
    Ok(keys)
}

/// One key of the account, revoked or not.
pub fn find_key(conn: &Connection, account_id: i64, id: Uuid) -> Result<Option<ApiKey>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1 AND account_id = ?2"))?
        .query_row(params![id.to_string(), account_id], key_from_row)
        .optional()?)
}

/// Revokes a key of the account. Revoking twice is harmless.
pub fn revoke_key(conn: &Connection, account_id: i64, id: Uuid, now: DateTime<Utc>) -> Result<()> {
    let found = conn.execute(
        "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?3) WHERE id = ?1 AND account_id = ?2",
        params![id.to_string(), account_id, ms(now)],
    )?;
    if found == 0 {
        return Err(Error::NotFound("key"));
    }
    Ok(())
}

/// Revokes every live key of the account with this name (used to rotate the demo key).
pub fn revoke_keys_named(conn: &Connection, account_id: i64, name: &str, now: DateTime<Utc>) -> Result<usize> {
    Ok(conn.execute(
        "UPDATE api_keys SET revoked_at = ?3 WHERE account_id = ?1 AND name = ?2 AND revoked_at IS NULL",
        params![account_id, name, ms(now)],
    )?)
}

pub fn touch_key(conn: &Connection, id: Uuid, now: DateTime<Utc>) -> Result<()> {
    conn.execute("UPDATE api_keys SET last_used_at = ?2 WHERE id = ?1", params![id.to_string(), ms(now)])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::temp_store;

    #[test]
    fn keys_are_found_by_secret_only_and_revocable() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(crate::store::Durability::Normal).unwrap();
        let now = Utc::now();
        let (account, new) = w
            .run(|c| {
                let account = ensure_account(c, "acme", now)?;
                assert_eq!(ensure_account(c, "acme", now)?, account);
                Ok((account, create_key(c, account, "ci", &[Scope::Read, Scope::Read, Scope::Ingest], now)?))
            })
            .unwrap();
        assert!(new.secret.starts_with(KEY_PREFIX));
        assert_eq!(new.secret.len(), KEY_PREFIX.len() + KEY_RANDOM_LEN);
        assert!(new.secret.starts_with(&new.key.prefix));
        assert_eq!(new.key.scopes, vec![Scope::Read, Scope::Ingest]);

        let found = store.read(|c| find_key_by_secret(c, &new.secret)).unwrap().unwrap();
        assert_eq!(found.id, new.key.id);
        assert!(store.read(|c| find_key_by_secret(c, "pst_wrong")).unwrap().is_none());

        w.run(|c| revoke_key(c, account, new.key.id, now)).unwrap();
        let found = store.read(|c| find_key_by_secret(c, &new.secret)).unwrap().unwrap();
        assert!(found.revoked_at.is_some());
        let other = w.run(|c| ensure_account(c, "other", now)).unwrap();
        assert!(matches!(w.run(|c| revoke_key(c, other, new.key.id, now)), Err(Error::NotFound(_))));
        assert_eq!(store.read(|c| find_key(c, account, new.key.id)).unwrap().map(|k| k.scopes), Some(vec![Scope::Read, Scope::Ingest]));
        assert!(store.read(|c| find_key(c, other, new.key.id)).unwrap().is_none(), "another account's key is not found");
    }

    #[test]
    fn duplicate_user_email_is_a_conflict() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(crate::store::Durability::Normal).unwrap();
        let now = Utc::now();
        let result = w.run(|c| {
            let a = ensure_account(c, "acme", now)?;
            create_user(c, a, "Ann@example.com", "h", Role::Admin, now)?;
            create_user(c, a, "ann@example.com", "h", Role::Reader, now)
        });
        assert!(matches!(result, Err(Error::Conflict(_))), "{result:?}");
    }
}
