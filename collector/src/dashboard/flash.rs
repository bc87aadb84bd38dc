//! One-time messages between a form and the page it redirects to. A form
//! that creates something answers 303 to a GET page (so reloading that page
//! creates nothing); what the page must show once — a new API key, a signing
//! secret — waits in the database, so that whichever node serves the page
//! finds it, bound to the web session, and is taken by the first matching
//! page. It is sealed with a key derived from the session's cookie token,
//! which the database never holds (only the token's SHA-256), so neither the
//! database nor a copy of it shows the secret; it never goes into a URL or a
//! log, and it is deleted when shown or after [`TTL`] (the key or
//! integration exists; it can be revoked and made again).

use analytics::accounts::hash_secret;
use chrono::Utc;
use rand::Rng;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::ApiError;
use crate::state::Ctx;

/// How long a message waits for its page, in seconds; the redirect follows at once.
const TTL: i64 = 5 * 60;

/// What a page shows once.
#[derive(Serialize, Deserialize)]
pub enum Flash {
    /// Settings → API: the new key's secret.
    Key { name: String, secret: String },
    /// A site's integrations: the new integration, and a webhook's signing secret.
    Integration { site: Uuid, name: String, secret: Option<String> },
}

/// The page a message is for.
pub enum FlashPage {
    Keys,
    Integrations(Uuid),
}

impl FlashPage {
    fn name(&self) -> String {
        match self {
            FlashPage::Keys => "keys".to_owned(),
            FlashPage::Integrations(site) => format!("integrations:{site}"),
        }
    }
}

impl Flash {
    fn page(&self) -> FlashPage {
        match self {
            Flash::Key { .. } => FlashPage::Keys,
            Flash::Integration { site, .. } => FlashPage::Integrations(*site),
        }
    }
}

/// What the server may keep of a session's cookie token while serving one
/// request: its hash (the session's name in the database) and the key its
/// messages are sealed with. Neither is ever stored or logged.
#[derive(Clone)]
pub struct SessionRef {
    pub id: [u8; 32],
    seal: [u8; 32],
}

impl std::fmt::Debug for SessionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionRef")
    }
}

impl SessionRef {
    pub fn new(token: &str) -> SessionRef {
        let seal = Sha256::new().chain_update(b"postern flash key\0").chain_update(token.as_bytes()).finalize().into();
        SessionRef { id: hash_secret(token), seal }
    }

    fn key(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &self.seal).expect("a 32-byte key"))
    }

    /// The message as stored: a random nonce, then the ciphertext bound to its page.
    fn seal(&self, page: &str, flash: &Flash) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = rand::rng().random();
        let mut text = serde_json::to_vec(flash).expect("a flash serializes");
        self.key().seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(page.as_bytes()), &mut text).expect("a short message seals");
        [&nonce[..], &text].concat()
    }

    /// The message again; `None` for anything this session did not seal for `page`.
    fn open(&self, page: &str, mut sealed: Vec<u8>) -> Option<Flash> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let mut text = sealed.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&sealed).ok()?;
        let plain = self.key().open_in_place(nonce, Aad::from(page.as_bytes()), &mut text).ok()?;
        serde_json::from_slice(plain).ok()
    }
}

/// Keeps `flash` for the session's next page, replacing an older one: on the
/// write connection, so that it goes with the change it reports in one transaction.
pub fn keep(c: &analytics::Connection, session: &SessionRef, flash: &Flash) -> analytics::Result<()> {
    let page = flash.page().name();
    let now = Utc::now().timestamp();
    analytics::shared::put_flash(c, &session.id, &page, &session.seal(&page, flash), now + TTL, now)
}

/// Takes the session's message for `page`, if it has one.
pub async fn take(ctx: &Ctx, session: &SessionRef, page: FlashPage) -> Result<Option<Flash>, ApiError> {
    let (id, name, now) = (session.id, page.name(), Utc::now().timestamp());
    let lookup = name.clone();
    // Most visits find nothing: a read answers them without a write.
    if !ctx.read(move |c| analytics::shared::has_flash(c, &id, &lookup, now)).await? {
        return Ok(None);
    }
    let taken = name.clone();
    let sealed = ctx.writer.apply(move |c| analytics::shared::take_flash(c, &id, &taken, now)).await?;
    Ok(sealed.and_then(|s| session.open(&name, s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_opens_only_for_its_session_and_page() {
        let (mine, theirs) = (SessionRef::new("token-1"), SessionRef::new("token-2"));
        let sealed = mine.seal("keys", &Flash::Key { name: "k".into(), secret: "s3cret".into() });
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"), "the secret is not stored as it is");
        assert!(matches!(mine.open("keys", sealed.clone()), Some(Flash::Key { secret, .. }) if secret == "s3cret"));
        assert!(theirs.open("keys", sealed.clone()).is_none(), "another session's key opens nothing");
        assert!(mine.open("integrations:x", sealed.clone()).is_none(), "bound to its page");
        assert!(mine.open("keys", sealed[..5].to_vec()).is_none());
        assert_ne!(mine.id, theirs.id);
        assert_ne!(mine.id, mine.seal, "the database's name for the session is not its key");
    }
}
