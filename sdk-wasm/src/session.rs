//! The visitor session (DESIGN §3): an id kept in localStorage with the time
//! of the last activity, renewed after 30 minutes of inactivity, plus which
//! funnel steps the session has already recorded so each is sent once, even
//! across page loads.
//!
//! Stored as `id|last_ms|flags|variant`: plain text, no JSON parser needed.

use alloc::string::String;

/// Inactivity after which a new session starts.
pub const TIMEOUT_MS: f64 = 30.0 * 60.0 * 1000.0;

/// Funnel steps already recorded in this session.
pub const ADBLOCK: u8 = 1;
pub const WALL: u8 = 2;
pub const CONVERTED: u8 = 4;
pub const DISMISSED: u8 = 8;

#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub id: String,
    pub last_ms: f64,
    pub flags: u8,
    /// The variant assigned when the session first saw the wall.
    pub variant: String,
}

impl Session {
    pub fn new(id: String, now_ms: f64) -> Session {
        Session { id, last_ms: now_ms, flags: 0, variant: String::new() }
    }

    pub fn parse(stored: &str) -> Option<Session> {
        let (id, rest) = cut(stored, b'|')?;
        let (last_ms, rest) = cut(rest, b'|')?;
        let (flags, variant) = cut(rest, b'|')?;
        let last_ms = parse_u64(last_ms.as_bytes())?;
        let flags = u8::try_from(parse_u64(flags.as_bytes())?).ok()?;
        if id.len() < 8 {
            return None;
        }
        Some(Session { id: id.into(), last_ms: last_ms as f64, flags, variant: variant.into() })
    }

    pub fn serialize(&self) -> String {
        let mut s = String::with_capacity(self.id.len() + 32);
        s.push_str(&self.id);
        s.push('|');
        push_u64(&mut s, self.last_ms as u64);
        s.push('|');
        push_u64(&mut s, u64::from(self.flags));
        s.push('|');
        s.push_str(&self.variant);
        s
    }

    /// The stored session if it is still active, else a new one; either way touched now.
    pub fn resume(stored: Option<Session>, now_ms: f64, new_id: impl FnOnce() -> String) -> Session {
        let mut s = match stored {
            Some(s) if now_ms - s.last_ms <= TIMEOUT_MS && s.last_ms <= now_ms + 60_000.0 => s,
            _ => Session::new(new_id(), now_ms),
        };
        s.last_ms = now_ms;
        s
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// `s` cut around the first `sep`, an ASCII byte. Stored text is cut
/// byte-wise: `str`'s searchers bring `core::fmt` with their panics, and
/// `core::str::from_utf8` on the pieces re-validates what is valid already.
pub fn cut(s: &str, sep: u8) -> Option<(&str, &str)> {
    debug_assert!(sep.is_ascii());
    let i = s.bytes().position(|b| b == sep)?;
    // SAFETY: `i` is the index of an ASCII byte of `s`, so both sides of it
    // are whole UTF-8 sequences and `i + 1 <= s.len()`.
    unsafe { Some((s.get_unchecked(..i), s.get_unchecked(i + 1..))) }
}

/// Decimal digits without `core::fmt`, which would weigh more than the rest
/// of this file (and without indexing, whose panics would bring it back).
pub fn push_u64(out: &mut String, n: u64) {
    if n >= 10 {
        push_u64(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// A decimal number of at least one digit, without `str::parse`'s error type.
pub fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| d.is_ascii_digit().then(|| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_storage_text() {
        let s = Session { id: "0b7e4c1e-3f2a-4d5b-9c8e-1a2b3c4d5e6f".into(), last_ms: 1_763_690_000_123.0, flags: WALL | ADBLOCK, variant: "emotional".into() };
        assert_eq!(Session::parse(&s.serialize()), Some(s));
        assert_eq!(Session::parse("short|1|0|"), None);
        assert_eq!(Session::parse("garbage"), None);
    }

    #[test]
    fn thirty_minutes_of_inactivity_start_a_new_session() {
        let old = Session { id: "aaaaaaaa-old".into(), last_ms: 1000.0, flags: WALL, variant: "control".into() };
        let kept = Session::resume(Some(old.clone()), 1000.0 + TIMEOUT_MS, || "bbbbbbbb-new".into());
        assert_eq!(kept.id, "aaaaaaaa-old");
        assert_eq!(kept.flags, WALL);
        assert_eq!(kept.last_ms, 1000.0 + TIMEOUT_MS);
        let renewed = Session::resume(Some(old), 1001.0 + TIMEOUT_MS, || "bbbbbbbb-new".into());
        assert_eq!(renewed.id, "bbbbbbbb-new");
        assert_eq!(renewed.flags, 0);
        assert!(renewed.variant.is_empty());
    }

    #[test]
    fn text_is_cut_at_ascii_bytes() {
        assert_eq!(cut("a|b|c", b'|'), Some(("a", "b|c")));
        assert_eq!(cut("é|", b'|'), Some(("é", "")));
        assert_eq!(cut("abc", b'|'), None);
    }

    #[test]
    fn digits_are_read_without_str_parse() {
        assert_eq!(parse_u64(b"1763690000123"), Some(1_763_690_000_123));
        assert_eq!(parse_u64(b"0"), Some(0));
        for bad in [&b""[..], b"12a", b"-1", b"18446744073709551616"] {
            assert_eq!(parse_u64(bad), None);
        }
    }

    #[test]
    fn digits_are_written_without_fmt() {
        for n in [0u64, 7, 10, 1_763_690_000_123, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }
}
