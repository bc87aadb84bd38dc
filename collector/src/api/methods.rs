//! Which methods each path serves, for the `Allow` header of a 405 answer
//! (RFC 9110 requires it). The OpenAPI test checks this table against the
//! document's paths, so the two cannot drift apart.

/// Path patterns (`*` is one segment, a trailing `**` the rest of the path)
/// with the methods they serve; an entry is used only when the routes have
/// already answered 405, so the demo's paths are harmless outside demo mode.
/// HEAD is served wherever GET is; OPTIONS is the
/// CORS preflight of the ingestion paths.
const TABLE: &[(&str, &str)] = &[
    ("/healthz", "GET, HEAD"),
    ("/readyz", "GET, HEAD"),
    ("/metrics", "GET, HEAD"),
    ("/v1/openapi.json", "GET, HEAD"),
    ("/v1/sdk/sites/*/config", "GET, HEAD"),
    ("/v1/events/track", "OPTIONS, POST"),
    ("/v1/e", "OPTIONS, POST"),
    ("/v1/events/batch", "OPTIONS, POST"),
    ("/v1/events/sites/*", "GET, HEAD"),
    ("/v1/sites", "GET, HEAD, POST"),
    ("/v1/sites/*", "DELETE, GET, HEAD, PATCH"),
    ("/v1/sites/*/export", "GET, HEAD"),
    ("/v1/sites/*/deliveries", "GET, HEAD"),
    ("/v1/sites/*/integrations", "GET, HEAD, POST"),
    ("/v1/sites/*/integrations/*", "DELETE"),
    ("/v1/sites/*/integrations/*/test", "POST"),
    ("/v1/sites/*/integrations/*/deliveries", "GET, HEAD"),
    ("/v1/sites/*/reports", "GET, HEAD, POST"),
    ("/v1/sites/*/reports/*", "DELETE, GET, HEAD, PATCH"),
    ("/v1/sites/*/reports/*/send", "POST"),
    ("/v1/sites/*/reports/*/runs", "GET, HEAD"),
    ("/v1/report-runs/*", "GET, HEAD"),
    ("/v1/analytics/sites/*/dashboard", "GET, HEAD"),
    ("/v1/analytics/sites/*/conversions", "GET, HEAD"),
    ("/v1/analytics/sites/*/ab-testing", "GET, HEAD"),
    ("/v1/keys", "GET, HEAD, POST"),
    ("/v1/keys/*", "DELETE"),
    ("/p/**", "GET, HEAD"),
    (crate::assets::BAIT_PATHS[0], "GET, HEAD"),
    (crate::assets::BAIT_PATHS[1], "GET, HEAD"),
    ("/demo", "GET, HEAD"),
    ("/demo/**", "GET, HEAD"),
];

/// The `Allow` value of a path the server serves, `None` for an unknown path.
pub fn allowed(path: &str) -> Option<&'static str> {
    TABLE.iter().find(|(pattern, _)| matches(pattern, path)).map(|(_, allow)| *allow)
}

fn matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some("**"), Some(_)) => return true,
            (Some("*"), Some(s)) if !s.is_empty() => {}
            (Some(w), Some(s)) if w == s => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_match_exactly() {
        assert_eq!(allowed("/v1/sites"), Some("GET, HEAD, POST"));
        assert_eq!(allowed("/v1/sites/s_1"), Some("DELETE, GET, HEAD, PATCH"));
        assert_eq!(allowed("/v1/sites/s_1/reports/r_1/send"), Some("POST"));
        assert_eq!(allowed("/p/postern.js"), Some("GET, HEAD"));
        assert_eq!(allowed("/v1/sites/"), None);
        assert_eq!(allowed("/v1/sites//export"), None);
        assert_eq!(allowed("/v1/sites/s_1/nothing"), None);
        assert_eq!(allowed("/v1/keyss"), None);
    }
}
