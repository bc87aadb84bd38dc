//! The visitor's country, resolved in memory from the request and then dropped
//! with the address (DESIGN §10: no IP address is ever stored).
//!
//! A trusted proxy's country header wins; otherwise the client address is
//! looked up in a MaxMind-format database file, when one is configured. Both
//! MaxMind's layout (`country.iso_code`) and the flat one of the DB-IP lite
//! files published by ip-location-db (`country_code`) are read.

use std::net::IpAddr;
use std::path::Path;

use analytics::model::UNKNOWN_COUNTRY;
use anyhow::Context;
use http::HeaderMap;
use maxminddb::{path, Reader};

pub struct CountryResolver {
    header: Option<String>,
    db: Option<Reader<Vec<u8>>>,
}

impl CountryResolver {
    pub fn new(header: Option<String>, db: Option<&Path>) -> anyhow::Result<CountryResolver> {
        let db = db
            .map(|p| Reader::open_readfile(p).with_context(|| format!("opening the country database {}", p.display())))
            .transpose()?;
        Ok(CountryResolver { header, db })
    }

    /// ISO 3166 alpha-2, or `ZZ` when nothing tells.
    pub fn country(&self, headers: &HeaderMap, ip: Option<IpAddr>) -> String {
        self.header_country(headers)
            .or_else(|| ip.and_then(|ip| self.database_country(ip)))
            .unwrap_or_else(|| UNKNOWN_COUNTRY.to_owned())
    }

    fn header_country(&self, headers: &HeaderMap) -> Option<String> {
        let value = headers.get(self.header.as_deref()?)?.to_str().ok()?;
        valid_code(value)
    }

    fn database_country(&self, ip: IpAddr) -> Option<String> {
        let found = self.db.as_ref()?.lookup(ip).ok()?;
        if !found.has_data() {
            return None;
        }
        let code: Option<String> = match found.decode_path(&path!["country", "iso_code"]) {
            Ok(Some(code)) => Some(code),
            _ => found.decode_path(&path!["country_code"]).ok().flatten(),
        };
        code.as_deref().and_then(valid_code)
    }
}

/// Proxies use `XX` (unknown) and `T1` (Tor) as non-country codes.
fn valid_code(raw: &str) -> Option<String> {
    let code = raw.trim().to_ascii_uppercase();
    (code.len() == 2 && code.bytes().all(|b| b.is_ascii_uppercase()) && code != "XX" && code != "T1").then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_codes_are_normalised_and_placeholders_refused() {
        assert_eq!(valid_code(" fr "), Some("FR".to_owned()));
        assert_eq!(valid_code("XX"), None);
        assert_eq!(valid_code("T1"), None);
        assert_eq!(valid_code("FRA"), None);
        assert_eq!(valid_code("F1"), None);
    }

    #[test]
    fn without_header_or_database_the_country_is_unknown() {
        let r = CountryResolver::new(Some("cf-ipcountry".into()), None).unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(r.country(&h, Some("8.8.8.8".parse().unwrap())), "ZZ");
        h.insert("cf-ipcountry", "de".parse().unwrap());
        assert_eq!(r.country(&h, None), "DE");
    }

    #[test]
    fn a_missing_database_file_is_a_clear_start_up_error() {
        let err = CountryResolver::new(None, Some(Path::new("/nonexistent/country.mmdb"))).err().unwrap();
        assert!(format!("{err:#}").contains("/nonexistent/country.mmdb"), "{err:#}");
    }
}
