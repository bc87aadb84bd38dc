//! Where webhooks may go. Custom and Slack-type webhooks are URLs typed by
//! whoever holds a `write` key, so without a rule they would let that person
//! make the collector POST to its own host, the cloud's metadata service or
//! the private network behind it, and read the answers' status and timing
//! back. Only public addresses are reached, plus the ranges the operator
//! allows (`--webhook-allow-cidr`, for receivers on premises).
//!
//! The rule is applied when the connection is made, to the very addresses
//! connected to: the HTTP client's resolver ([`GuardedResolver`]) drops every
//! forbidden answer, so a name that changes its answer between a check and
//! the connection (DNS rebinding) gains nothing. Hosts written as addresses
//! never reach a resolver and are checked before sending
//! ([`Destinations::check_literal`]). Creating an integration checks too
//! ([`Destinations::check_url`]), for an early 400.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// How long a check at creation waits for DNS before leaving it to the send.
const CREATE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// IPv4 ranges no webhook reaches (IANA's special-purpose registry, minus the
/// few globally reachable entries), named for error messages.
const V4_FORBIDDEN: &[(Ipv4Net, &str)] = &[
    (Ipv4Net::new_assert(Ipv4Addr::new(0, 0, 0, 0), 8), "“this network” (0.0.0.0/8)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 0, 0), 8), "private (10.0.0.0/8)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), 10), "shared carrier-grade NAT (100.64.0.0/10)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8), "loopback (127.0.0.0/8)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(169, 254, 0, 0), 16), "link-local (169.254.0.0/16)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(172, 16, 0, 0), 12), "private (172.16.0.0/12)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(192, 0, 0, 0), 24), "IETF protocol assignments (192.0.0.0/24)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(192, 0, 2, 0), 24), "documentation (192.0.2.0/24)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(192, 88, 99, 0), 24), "6to4 relay anycast (192.88.99.0/24)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(192, 168, 0, 0), 16), "private (192.168.0.0/16)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 15), "benchmarking (198.18.0.0/15)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(198, 51, 100, 0), 24), "documentation (198.51.100.0/24)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(203, 0, 113, 0), 24), "documentation (203.0.113.0/24)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(224, 0, 0, 0), 4), "multicast (224.0.0.0/4)"),
    (Ipv4Net::new_assert(Ipv4Addr::new(240, 0, 0, 0), 4), "reserved (240.0.0.0/4)"),
];

/// IPv6 ranges no webhook reaches. Only global unicast (`2000::/3`) is
/// public at all; these are the special-purpose parts of it, and the named
/// parts of the rest (anything else outside `2000::/3` is "reserved").
const V6_FORBIDDEN: &[(Ipv6Net, &str)] = &[
    (Ipv6Net::new_assert(Ipv6Addr::UNSPECIFIED, 128), "unspecified (::)"),
    (Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128), "loopback (::1)"),
    (Ipv6Net::new_assert(Ipv6Addr::UNSPECIFIED, 96), "IPv4-compatible (::/96)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), "local-use NAT64 (64:ff9b:1::/48)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64), "discard-only (100::/64)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), "documentation (2001:db8::/32)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23), "IETF protocol assignments (2001::/23)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20), "documentation (3fff::/20)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), "unique local (fc00::/7)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), "link-local (fe80::/10)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), "site-local (fec0::/10)"),
    (Ipv6Net::new_assert(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), "multicast (ff00::/8)"),
];

const V6_GLOBAL_UNICAST: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);
const V6_NAT64: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);
const V6_6TO4: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16);

/// The special-purpose range `ip` is in, or `None` for a public address.
/// IPv6 addresses that carry an IPv4 address (IPv4-mapped `::ffff:0:0/96`,
/// NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) lead to that IPv4 address, and
/// are judged by it.
pub fn forbidden_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_range(v4),
        IpAddr::V6(v6) => v6_range(v6),
    }
}

fn v4_range(ip: Ipv4Addr) -> Option<&'static str> {
    V4_FORBIDDEN.iter().find(|(net, _)| net.contains(&ip)).map(|(_, name)| *name)
}

fn v6_range(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_range(v4);
    }
    let [_, b, c, _, _, _, g, h] = ip.segments();
    if V6_NAT64.contains(&ip) {
        return v4_range(Ipv4Addr::from((u32::from(g) << 16) | u32::from(h)));
    }
    if V6_6TO4.contains(&ip) {
        return v4_range(Ipv4Addr::from((u32::from(b) << 16) | u32::from(c)));
    }
    match V6_FORBIDDEN.iter().find(|(net, _)| net.contains(&ip)) {
        Some((_, name)) => Some(name),
        None if !V6_GLOBAL_UNICAST.contains(&ip) => Some("reserved (outside 2000::/3)"),
        None => None,
    }
}

/// An address webhooks may not reach, and why.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refused {
    #[error("{ip} is not a public address: {range}")]
    Address { ip: IpAddr, range: &'static str },
    #[error("{host} resolves to an address that is not public: {range}")]
    Name { host: String, range: &'static str },
}

/// The destinations rule: public addresses, plus the operator's allowed ranges.
#[derive(Debug, Clone)]
pub struct Destinations {
    allow: Arc<[IpNet]>,
}

impl Destinations {
    pub fn new(allow: &[IpNet]) -> Destinations {
        Destinations { allow: allow.into() }
    }

    /// Why `ip` may not be connected to, or `None` when it may.
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        // A socket connecting to ::ffff:a.b.c.d reaches a.b.c.d: the allowed
        // ranges are written for the address actually reached.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if self.allow.iter().any(|net| net.contains(&ip)) {
            return None;
        }
        forbidden_range(ip)
    }

    /// Checks a URL whose host is an address (no resolver will see it); a
    /// name passes here and is checked by [`GuardedResolver`] on connecting.
    pub fn check_literal(&self, url: &Url) -> Result<(), Refused> {
        let ip = match url.host() {
            Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
            Some(Host::Domain(_)) | None => return Ok(()),
        };
        match self.refusal(ip) {
            Some(range) => Err(Refused::Address { ip, range }),
            None => Ok(()),
        }
    }

    /// The check when an integration is created: its address, or every
    /// address its name resolves to now. A name that does not resolve (yet)
    /// passes: each send checks again anyway.
    pub async fn check_url(&self, url: &Url) -> Result<(), Refused> {
        self.check_literal(url)?;
        let Some(Host::Domain(host)) = url.host() else {
            return Ok(());
        };
        let port = url.port_or_known_default().unwrap_or(0);
        let answers = match tokio::time::timeout(CREATE_LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await {
            Ok(Ok(answers)) => answers,
            Ok(Err(_)) | Err(_) => return Ok(()),
        };
        for answer in answers {
            if let Some(range) = self.refusal(answer.ip()) {
                return Err(Refused::Name { host: host.to_owned(), range });
            }
        }
        Ok(())
    }

    /// The answers that may be connected to; an error when there were some
    /// and none may.
    fn filter(&self, host: &str, answers: impl IntoIterator<Item = SocketAddr>) -> Result<Vec<SocketAddr>, Refused> {
        let mut first_refusal = None;
        let permitted: Vec<SocketAddr> = answers
            .into_iter()
            .filter(|a| match self.refusal(a.ip()) {
                None => true,
                Some(range) => {
                    first_refusal.get_or_insert(range);
                    false
                }
            })
            .collect();
        match first_refusal {
            Some(range) if permitted.is_empty() => Err(Refused::Name { host: host.to_owned(), range }),
            _ => Ok(permitted),
        }
    }
}

/// The webhook client's resolver: the system's answers, minus every address
/// [`Destinations`] refuses, so a connection is only ever made to a permitted one.
pub struct GuardedResolver {
    destinations: Destinations,
}

impl GuardedResolver {
    pub fn new(destinations: Destinations) -> GuardedResolver {
        GuardedResolver { destinations }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let destinations = self.destinations.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let answers = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let permitted = destinations.filter(&host, answers)?;
            Ok(Box::new(permitted.into_iter()) as Addrs)
        })
    }
}

/// The refusal behind a failed request, when the resolver refused its host.
pub fn refusal_of<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e Refused> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused);
        }
        cause = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    #[test]
    fn special_purpose_addresses_are_refused_and_public_ones_are_not() {
        let table: &[(&str, Option<&str>)] = &[
            // IPv4
            ("127.0.0.1", Some("loopback")),
            ("127.255.255.254", Some("loopback")),
            ("0.0.0.0", Some("this network")),
            ("0.1.2.3", Some("this network")),
            ("10.0.0.1", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("192.168.1.1", Some("private")),
            ("100.64.0.1", Some("carrier-grade NAT")),
            ("100.127.255.254", Some("carrier-grade NAT")),
            ("169.254.169.254", Some("link-local")),
            ("192.0.0.8", Some("IETF protocol")),
            ("192.0.2.1", Some("documentation")),
            ("198.51.100.7", Some("documentation")),
            ("203.0.113.9", Some("documentation")),
            ("198.18.0.1", Some("benchmarking")),
            ("198.19.255.255", Some("benchmarking")),
            ("192.88.99.1", Some("6to4 relay")),
            ("224.0.0.1", Some("multicast")),
            ("239.255.255.250", Some("multicast")),
            ("240.0.0.1", Some("reserved")),
            ("255.255.255.255", Some("reserved")),
            ("8.8.8.8", None),
            ("93.184.215.14", None),
            ("172.15.255.255", None),
            ("172.32.0.1", None),
            ("100.63.255.255", None),
            ("100.128.0.1", None),
            ("169.253.255.255", None),
            ("198.17.255.255", None),
            ("198.20.0.1", None),
            ("223.255.255.255", None),
            // IPv6
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("::127.0.0.1", Some("IPv4-compatible")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:169.254.169.254", Some("link-local")),
            ("::ffff:10.1.2.3", Some("private")),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::7f00:1", Some("loopback")),
            ("64:ff9b::a9fe:a9fe", Some("link-local")),
            ("64:ff9b::808:808", None),
            ("64:ff9b:1::1", Some("local-use NAT64")),
            ("2002:7f00:1::1", Some("loopback")),
            ("2002:c0a8:101::1", Some("private")),
            ("2002:808:808::1", None),
            ("fc00::1", Some("unique local")),
            ("fd12:3456:789a::1", Some("unique local")),
            ("fe80::1", Some("link-local")),
            ("febf::1", Some("link-local")),
            ("fec0::1", Some("site-local")),
            ("ff02::1", Some("multicast")),
            ("ff0e::1", Some("multicast")),
            ("100::1", Some("discard-only")),
            ("2001:db8::1", Some("documentation")),
            ("2001::1", Some("IETF protocol")),
            ("2001:2::1", Some("IETF protocol")),
            ("3fff::1", Some("documentation")),
            ("4000::1", Some("reserved")),
            ("1::1", Some("reserved")),
            ("2001:4860:4860::8888", None),
            ("2a00:1450:4007:80e::200e", None),
            ("2606:4700::6810:84e5", None),
        ];
        for (text, expected) in table {
            let ip: IpAddr = text.parse().unwrap();
            let got = forbidden_range(ip);
            match expected {
                Some(part) => assert!(got.is_some_and(|r| r.contains(part)), "{text}: expected a {part} refusal, got {got:?}"),
                None => assert_eq!(got, None, "{text} is public"),
            }
        }
    }

    #[test]
    fn allowed_ranges_open_exactly_themselves_and_count_for_mapped_addresses() {
        let allow = [IpNet::from_str("127.0.0.0/8").unwrap(), IpNet::from_str("fd00:1::/64").unwrap()];
        let d = Destinations::new(&allow);
        for open in ["127.0.0.1", "127.9.9.9", "::ffff:127.0.0.1", "fd00:1::5", "8.8.8.8"] {
            assert_eq!(d.refusal(open.parse().unwrap()), None, "{open}");
        }
        for shut in ["::1", "10.0.0.1", "169.254.169.254", "fd00:2::5", "64:ff9b::7f00:1"] {
            assert!(d.refusal(shut.parse().unwrap()).is_some(), "{shut}");
        }
    }

    #[test]
    fn literal_hosts_are_checked_as_the_url_parser_reads_them() {
        let d = Destinations::new(&[]);
        for refused in [
            "http://127.0.0.1/x",
            "http://[::1]:8080/x",
            "http://[::ffff:127.0.0.1]/x",
            "http://[64:ff9b::7f00:1]/x",
            "http://169.254.169.254/latest/meta-data",
            "http://0x7f.1/x",
            "http://2130706433/x",
            "http://0/x",
            "https://10.0.0.1/x",
            "http://user:pw@192.168.0.1/x",
            "http://[fe80::1]/x",
            "http://[fc00::1]/x",
        ] {
            let url = Url::parse(refused).unwrap();
            assert!(matches!(d.check_literal(&url), Err(Refused::Address { .. })), "{refused} → {}", url);
        }
        for passed in ["http://8.8.8.8/x", "https://hooks.slack.com/services/T/B/X", "http://localhost/x"] {
            assert!(d.check_literal(&Url::parse(passed).unwrap()).is_ok(), "{passed} (names are the resolver's)");
        }
    }

    #[test]
    fn the_resolver_drops_forbidden_answers_and_refuses_when_none_is_left() {
        let d = Destinations::new(&[]);
        let answers = |list: &[&str]| list.iter().map(|a| SocketAddr::new(a.parse().unwrap(), 0)).collect::<Vec<_>>();
        // A name answering with a public and a private address (one way to rebind): only the public one is tried.
        assert_eq!(d.filter("mixed.test", answers(&["127.0.0.1", "93.184.215.14", "::1"])).unwrap(), answers(&["93.184.215.14"]));
        let err = d.filter("rebound.test", answers(&["127.0.0.1", "::1"])).unwrap_err();
        assert!(err.to_string().starts_with("rebound.test resolves to an address that is not public: loopback"), "{err}");
        assert_eq!(d.filter("nothing.test", Vec::new()).unwrap(), Vec::new());
    }

    #[tokio::test]
    async fn localhost_is_refused_when_the_connection_resolves_it_unless_allowed() {
        // `localhost` resolves through the system (here /etc/hosts), as a send would.
        let name = Name::from_str("localhost").unwrap();
        let err = match GuardedResolver::new(Destinations::new(&[])).resolve(name).await {
            Ok(addrs) => panic!("localhost must be refused, got {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e,
        };
        let refused = refusal_of(err.as_ref()).expect("the refusal is recognisable in the error");
        assert!(matches!(refused, Refused::Name { host, .. } if host == "localhost"), "{refused}");

        let allowed = GuardedResolver::new(Destinations::new(&[IpNet::from_str("127.0.0.0/8").unwrap()]));
        let addrs: Vec<SocketAddr> = allowed.resolve(Name::from_str("localhost").unwrap()).await.unwrap().collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_ipv4() && a.ip().is_loopback()), "{addrs:?}");
    }

    #[tokio::test]
    async fn creation_checks_names_by_what_they_resolve_to_now() {
        let d = Destinations::new(&[]);
        let err = d.check_url(&Url::parse("http://localhost:9/hook").unwrap()).await.unwrap_err();
        assert!(matches!(err, Refused::Name { .. }), "{err}");
        assert!(matches!(d.check_url(&Url::parse("http://[::1]/").unwrap()).await, Err(Refused::Address { .. })));
        // A name that does not resolve is left to the send-time check.
        assert!(d.check_url(&Url::parse("https://no-such-host.invalid/hook").unwrap()).await.is_ok());
    }
}
