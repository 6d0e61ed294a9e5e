//! Where webhooks may be sent: the guard against server-side request
//! forgery, and the HTTP client deliveries go through.
//!
//! A webhook URL is chosen by an API key's holder, and the server sends to
//! it from inside the operator's network. So by default a delivery goes
//! only to `https` URLs whose host is a public address, and the rule is
//! applied where the connection is made, not only when the URL is given:
//!
//! - [`TargetPolicy::check_url`]: the scheme, no user name or password, a
//!   host, and an IP-literal host's address (reqwest resolves no
//!   literal, so this is their only check: run it before every request).
//! - [`VettedResolver`]: the resolver of the [`delivery_client`]. It fails
//!   a lookup when *any* address a name resolves to is not allowed, so the
//!   connection goes to exactly the addresses checked (no window for a
//!   name to resolve differently between the check and the connection).
//! - [`delivery_client`]: no proxy (a proxy would resolve the name itself,
//!   unchecked), no redirects (a 3xx is a failed delivery).
//!
//! [`TargetPolicy::allow_private`] admits loopback and private addresses
//! (tests, receivers inside the operator's network), and plain `http`;
//! never link-local addresses (where cloud metadata services answer),
//! multicast, broadcast or the unspecified address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::{Ipv4Net, Ipv6Net};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// How long a delivery may take to connect, at most.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a delivery whose whole request may take `timeout` may take to
/// connect.
pub(super) fn connect_timeout(timeout: Duration) -> Duration {
    CONNECT_TIMEOUT.min(timeout)
}

/// The `User-Agent` of deliveries.
const USER_AGENT: &str = concat!("petstore-webhooks/", env!("CARGO_PKG_VERSION"));

/// Which targets deliveries may go to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Also `http`, loopback and private addresses
    /// (`--webhook-allow-private-targets`).
    pub allow_private: bool,
}

/// Why a webhook URL is refused. Its `Display` is the message for the
/// user who gave the URL.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetRefused {
    /// Not a URL at all.
    #[error("not a URL: {0}")]
    NotAUrl(String),
    /// A scheme other than those allowed.
    #[error("not {allowed}: the URL's scheme is {scheme}")]
    Scheme {
        /// The URL's scheme.
        scheme: String,
        /// What is allowed: `https` (or `http or https`).
        allowed: &'static str,
    },
    /// A user name or password in the URL (it would be sent to the
    /// receiver, and is no way to authenticate deliveries: signatures are).
    #[error("the URL has a user name or password")]
    Userinfo,
    /// No host.
    #[error("the URL has no host")]
    NoHost,
    /// Port 0, which no endpoint listens on (a connection to it always
    /// fails, so every delivery would).
    #[error("the URL's port is 0, which nothing can be delivered to")]
    PortZero,
    /// The host is, or resolves to, an address deliveries may not go to.
    #[error("{}", address_refused(.host.as_deref(), *.addr, .what))]
    Address {
        /// The host's name, when it is one (not an address).
        host: Option<String>,
        /// The address refused.
        addr: IpAddr,
        /// What kind of address it is, e.g. "a private address".
        what: &'static str,
    },
    /// The host's name does not resolve.
    #[error("{host} does not resolve: {reason}")]
    DoesNotResolve {
        /// The name.
        host: String,
        /// Why not, as the resolver says.
        reason: String,
    },
}

fn address_refused(host: Option<&str>, addr: IpAddr, what: &str) -> String {
    match host {
        Some(host) => format!("{host} resolves to {addr}, {what}"),
        None => format!("{addr} is {what}"),
    }
}

/// A range of special-purpose addresses (IANA's IPv4 and IPv6
/// special-purpose address registries), as the policy treats it.
struct Special {
    /// What an address of the range is, for messages.
    what: &'static str,
    /// Whether `allow_private` admits it.
    private_use: bool,
}

const THIS_NETWORK: Special = never("not a host's address (\"this network\")");
const UNSPECIFIED: Special = never("the unspecified address");
const LOOPBACK: Special = private("a loopback address");
const PRIVATE: Special = private("a private address");
const UNIQUE_LOCAL: Special = private("a private address (unique local)");
const SHARED: Special = never("a carrier-grade NAT address");
const LINK_LOCAL: Special = never("a link-local address (where cloud metadata services answer)");
const PROTOCOL: Special = never("an address reserved for IETF protocols");
const DOCUMENTATION: Special = never("an address reserved for documentation");
const BENCHMARKING: Special = never("an address reserved for benchmarks");
const RELAY: Special = never("a 6to4 relay address");
const MULTICAST: Special = never("a multicast address");
const RESERVED: Special = never("a reserved or broadcast address");
const DISCARD: Special = never("a discard-only address");
const IPV4_COMPATIBLE: Special = never("a deprecated IPv4-compatible address");
const LOCAL_NAT64: Special = never("a local-use NAT64 address");
const SEGMENT_ROUTING: Special = never("a segment routing (SRv6) address");
const SITE_LOCAL: Special = never("a deprecated site-local address");

const fn never(what: &'static str) -> Special {
    Special {
        what,
        private_use: false,
    }
}

const fn private(what: &'static str) -> Special {
    Special {
        what,
        private_use: true,
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix)
}

const fn v6(segments: [u16; 8], prefix: u8) -> Ipv6Net {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Net::new_assert(Ipv6Addr::new(a, b, c, d, e, f, g, h), prefix)
}

/// The IPv4 special-purpose ranges; no range is inside another.
const SPECIAL_V4: &[(Ipv4Net, Special)] = &[
    (v4(0, 0, 0, 0, 8), THIS_NETWORK),
    (v4(10, 0, 0, 0, 8), PRIVATE),
    (v4(100, 64, 0, 0, 10), SHARED),
    (v4(127, 0, 0, 0, 8), LOOPBACK),
    (v4(169, 254, 0, 0, 16), LINK_LOCAL),
    (v4(172, 16, 0, 0, 12), PRIVATE),
    (v4(192, 0, 0, 0, 24), PROTOCOL),
    (v4(192, 0, 2, 0, 24), DOCUMENTATION),
    (v4(192, 88, 99, 0, 24), RELAY),
    (v4(192, 168, 0, 0, 16), PRIVATE),
    (v4(198, 18, 0, 0, 15), BENCHMARKING),
    (v4(198, 51, 100, 0, 24), DOCUMENTATION),
    (v4(203, 0, 113, 0, 24), DOCUMENTATION),
    (v4(224, 0, 0, 0, 4), MULTICAST),
    // Includes 255.255.255.255, the broadcast address.
    (v4(240, 0, 0, 0, 4), RESERVED),
];

/// The IPv6 special-purpose ranges, the first match counting (`::` and
/// `::1` are inside `::/96`). The ranges that embed an IPv4 address
/// (IPv4-mapped, NAT64, 6to4) are not here: their IPv4 address is checked.
const SPECIAL_V6: &[(Ipv6Net, Special)] = &[
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), UNSPECIFIED),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), LOOPBACK),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 96), IPV4_COMPATIBLE),
    (v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), LOCAL_NAT64),
    (v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), DISCARD),
    // Includes Teredo (2001::/32), whose IPv4 address is obfuscated.
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), PROTOCOL),
    (v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), DOCUMENTATION),
    (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), DOCUMENTATION),
    (v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), SEGMENT_ROUTING),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), UNIQUE_LOCAL),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), LINK_LOCAL),
    (v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), SITE_LOCAL),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), MULTICAST),
];

const NAT64: Ipv6Net = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
const SIX_TO_FOUR: Ipv6Net = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);

/// The special-purpose range `ip` is in, if any.
fn special(ip: IpAddr) -> Option<&'static Special> {
    match ip {
        IpAddr::V4(v4) => SPECIAL_V4
            .iter()
            .find(|(net, _)| net.contains(&v4))
            .map(|(_, special)| special),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => special(IpAddr::V4(v4)),
            None => SPECIAL_V6
                .iter()
                .find(|(net, _)| net.contains(&v6))
                .map(|(_, special)| special),
        },
    }
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped
/// (`::ffff:a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4
/// (`2002:AABB:CCDD::/48`). Connecting to one reaches that IPv4 address
/// (or its network), so it is judged as that address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let octets = ip.octets();
    let at = |i: usize| Ipv4Addr::new(octets[i], octets[i + 1], octets[i + 2], octets[i + 3]);
    if let Some(mapped) = ip.to_ipv4_mapped() {
        Some(mapped)
    } else if NAT64.contains(&ip) {
        Some(at(12))
    } else if SIX_TO_FOUR.contains(&ip) {
        Some(at(2))
    } else {
        None
    }
}

/// Whether deliveries may go to `ip`: any public address; with
/// `allow_private` also loopback and private ones.
pub fn is_allowed(ip: IpAddr, allow_private: bool) -> bool {
    refusal(ip, allow_private).is_none()
}

/// What `ip` is, when deliveries may not go to it.
fn refusal(ip: IpAddr, allow_private: bool) -> Option<&'static str> {
    special(ip)
        .filter(|special| !(allow_private && special.private_use))
        .map(|special| special.what)
}

impl TargetPolicy {
    /// `text` as a webhook URL, if it may be one: `https` (or `http` when
    /// private targets are allowed), no user name or password, a host, and
    /// for a host that is an IP address, an allowed one. A host that is a
    /// name is checked when it is resolved
    /// ([`TargetPolicy::resolve_and_check`], [`VettedResolver`]).
    pub fn check_url(&self, text: &str) -> Result<Url, TargetRefused> {
        let url = Url::parse(text).map_err(|e| TargetRefused::NotAUrl(e.to_string()))?;
        self.check_scheme(&url)?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(TargetRefused::Userinfo);
        }
        if url.port() == Some(0) {
            return Err(TargetRefused::PortZero);
        }
        match url.host() {
            None => Err(TargetRefused::NoHost),
            Some(Host::Domain(_)) => Ok(()),
            Some(Host::Ipv4(addr)) => self.check_literal(addr.into()),
            Some(Host::Ipv6(addr)) => self.check_literal(addr.into()),
        }?;
        Ok(url)
    }

    /// Checks `url` (from [`TargetPolicy::check_url`]) the way a delivery
    /// will: its host resolved now, every address allowed. What a new
    /// subscription's URL must pass.
    pub async fn resolve_and_check(&self, url: &Url) -> Result<(), TargetRefused> {
        match url.host() {
            None => Err(TargetRefused::NoHost),
            Some(Host::Domain(name)) => self.vetted_addresses(name).await.map(drop),
            Some(Host::Ipv4(addr)) => self.check_literal(addr.into()),
            Some(Host::Ipv6(addr)) => self.check_literal(addr.into()),
        }
    }

    fn check_scheme(&self, url: &Url) -> Result<(), TargetRefused> {
        let allowed = match (url.scheme(), self.allow_private) {
            ("https", _) | ("http", true) => return Ok(()),
            (_, false) => "https",
            (_, true) => "http or https",
        };
        Err(TargetRefused::Scheme {
            scheme: url.scheme().to_owned(),
            allowed,
        })
    }

    fn check_literal(&self, addr: IpAddr) -> Result<(), TargetRefused> {
        match refusal(addr, self.allow_private) {
            None => Ok(()),
            Some(what) => Err(TargetRefused::Address {
                host: None,
                addr,
                what,
            }),
        }
    }

    /// The addresses `name` resolves to (with the system's resolver), if
    /// every one is allowed.
    async fn vetted_addresses(&self, name: &str) -> Result<Vec<SocketAddr>, TargetRefused> {
        let does_not_resolve = |reason: String| TargetRefused::DoesNotResolve {
            host: name.to_owned(),
            reason,
        };
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, 0))
            .await
            .map_err(|e| does_not_resolve(e.to_string()))?
            .collect();
        if addrs.is_empty() {
            return Err(does_not_resolve("no address".to_owned()));
        }
        // One refused address refuses the name: a connection may go to any.
        for addr in &addrs {
            if let Some(what) = refusal(addr.ip(), self.allow_private) {
                return Err(TargetRefused::Address {
                    host: Some(name.to_owned()),
                    addr: addr.ip(),
                    what,
                });
            }
        }
        Ok(addrs)
    }
}

/// The resolver of [`delivery_client`]: the system's, failing a lookup
/// when any address is not allowed by its policy (the error names it).
#[derive(Clone, Copy, Debug)]
pub struct VettedResolver {
    policy: TargetPolicy,
}

impl VettedResolver {
    /// A resolver that admits what `policy` admits.
    pub fn new(policy: TargetPolicy) -> VettedResolver {
        VettedResolver { policy }
    }
}

impl Resolve for VettedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let addrs = policy.vetted_addresses(name.as_str()).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client deliveries go through: names resolved by a
/// [`VettedResolver`] for `policy`, no proxy, no redirect, `https` only
/// unless private targets are allowed, rustls with the system's roots, a
/// whole request bounded by `timeout` (connecting by at most 5 s of it).
///
/// An IP-literal host is not resolved, so it is not checked here: check
/// each URL with [`TargetPolicy::check_url`] before sending to it.
pub fn delivery_client(
    policy: TargetPolicy,
    timeout: Duration,
) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(VettedResolver::new(policy)))
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout(timeout))
        .timeout(timeout)
        .https_only(!policy.allow_private)
        .user_agent(USER_AGENT)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const PUBLIC: &[&str] = &[
        "1.1.1.1",
        "8.8.8.8",
        "93.184.215.14",
        "2606:4700:4700::1111",
        "2a00:1450:4001:82a::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ];

    /// How each range's edges, and the addresses just outside them, are
    /// treated.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Expect {
        /// Allowed always: in no special-purpose range (unallocated space
        /// included: nothing routes there).
        Public,
        /// Allowed only with `allow_private`.
        Private,
        /// Never allowed.
        Never,
    }
    use Expect::*;

    const EDGES: &[(&str, Expect)] = &[
        ("0.0.0.0", Never),
        ("0.255.255.255", Never),
        ("1.0.0.0", Public),
        ("9.255.255.255", Public),
        ("10.0.0.0", Private),
        ("10.255.255.255", Private),
        ("11.0.0.0", Public),
        ("100.63.255.255", Public),
        ("100.64.0.0", Never),
        ("100.127.255.255", Never),
        ("100.128.0.0", Public),
        ("126.255.255.255", Public),
        ("127.0.0.0", Private),
        ("127.0.0.1", Private),
        ("127.255.255.255", Private),
        ("128.0.0.0", Public),
        ("169.253.255.255", Public),
        ("169.254.0.0", Never),
        ("169.254.169.254", Never),
        ("169.254.255.255", Never),
        ("169.255.0.0", Public),
        ("172.15.255.255", Public),
        ("172.16.0.0", Private),
        ("172.31.255.255", Private),
        ("172.32.0.0", Public),
        ("191.255.255.255", Public),
        ("192.0.0.0", Never),
        ("192.0.0.255", Never),
        ("192.0.1.0", Public),
        ("192.0.1.255", Public),
        ("192.0.2.0", Never),
        ("192.0.2.255", Never),
        ("192.0.3.0", Public),
        ("192.88.98.255", Public),
        ("192.88.99.0", Never),
        ("192.88.99.255", Never),
        ("192.88.100.0", Public),
        ("192.167.255.255", Public),
        ("192.168.0.0", Private),
        ("192.168.255.255", Private),
        ("192.169.0.0", Public),
        ("198.17.255.255", Public),
        ("198.18.0.0", Never),
        ("198.19.255.255", Never),
        ("198.20.0.0", Public),
        ("198.51.99.255", Public),
        ("198.51.100.0", Never),
        ("198.51.100.255", Never),
        ("198.51.101.0", Public),
        ("203.0.112.255", Public),
        ("203.0.113.0", Never),
        ("203.0.113.255", Never),
        ("203.0.114.0", Public),
        ("223.255.255.255", Public),
        ("224.0.0.0", Never),
        ("239.255.255.255", Never),
        ("240.0.0.0", Never),
        ("255.255.255.255", Never),
        ("::", Never),
        ("::1", Private),
        ("::2", Never),
        ("::ffff:ffff", Never),
        ("::1:0:0", Public),
        ("::fffe:ffff:ffff", Public),
        ("64:ff9b:0:ffff:ffff:ffff:ffff:ffff", Public),
        ("64:ff9b:1::", Never),
        ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", Never),
        ("64:ff9b:2::", Public),
        ("ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
        ("100::", Never),
        ("100::ffff:ffff:ffff:ffff", Never),
        ("100:0:0:1::", Public),
        ("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
        ("2001::", Never),
        ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        ("2001:200::", Public),
        ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", Public),
        ("2001:db8::", Never),
        ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        ("2001:db9::", Public),
        ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
        ("3fff::", Never),
        ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        ("3fff:1000::", Public),
        ("5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
        ("5f00::", Never),
        ("5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        ("5f01::", Public),
        ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
        ("fc00::", Private),
        ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private),
        ("fe00::", Public),
        ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
        ("fe80::", Never),
        ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        ("fec0::", Never),
        ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        ("ff00::", Never),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        // IPv4 inside IPv6: judged as the IPv4 address.
        ("::ffff:0.0.0.0", Never),
        ("::ffff:10.0.0.1", Private),
        ("::ffff:127.0.0.1", Private),
        ("::ffff:169.254.169.254", Never),
        ("::ffff:255.255.255.255", Never),
        ("64:ff9b::", Never),
        ("64:ff9b::a00:1", Private),
        ("64:ff9b::a9fe:a9fe", Never),
        ("64:ff9b::ffff:ffff", Never),
        ("2002::", Never),
        ("2002:7f00:1::", Private),
        ("2002:a9fe:a9fe::1", Never),
        ("2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Never),
        ("2003::", Public),
    ];

    #[test]
    fn each_range_is_refused_at_its_edges_and_not_beyond_them() {
        let addresses = EDGES
            .iter()
            .map(|(text, expect)| (text.parse::<IpAddr>().unwrap(), *expect))
            .chain(PUBLIC.iter().map(|text| (text.parse().unwrap(), Public)));
        for (addr, expect) in addresses {
            let got = (is_allowed(addr, false), is_allowed(addr, true));
            let want = match expect {
                Public => (true, true),
                Private => (false, true),
                Never => (false, false),
            };
            assert_eq!(got, want, "{addr}: expected {expect:?}");
        }
    }

    /// Every range of the tables has its first and last address among the
    /// edges above.
    #[test]
    fn the_edges_cover_every_range() {
        let edges: Vec<IpAddr> = EDGES
            .iter()
            .map(|(text, _)| text.parse().unwrap())
            .collect();
        let v4 = SPECIAL_V4
            .iter()
            .map(|(net, _)| (IpAddr::V4(net.network()), IpAddr::V4(net.broadcast())));
        let v6 = SPECIAL_V6
            .iter()
            .map(|(net, _)| *net)
            .chain([NAT64, SIX_TO_FOUR])
            .map(|net| (IpAddr::V6(net.network()), IpAddr::V6(net.broadcast())));
        for (first, last) in v4.chain(v6) {
            assert!(edges.contains(&first), "{first} is not among the edges");
            assert!(edges.contains(&last), "{last} is not among the edges");
        }
    }

    const STRICT: TargetPolicy = TargetPolicy {
        allow_private: false,
    };
    const PRIVATE_ALLOWED: TargetPolicy = TargetPolicy {
        allow_private: true,
    };

    #[test]
    fn urls_are_https_without_userinfo_and_not_at_a_refused_address() {
        let refused =
            |policy: TargetPolicy, url: &str| policy.check_url(url).unwrap_err().to_string();
        assert!(STRICT.check_url("https://hooks.example.com/in?x=1").is_ok());
        assert!(STRICT.check_url("https://8.8.8.8:8443/").is_ok());
        assert!(STRICT.check_url("https://[2606:4700:4700::1111]/").is_ok());

        assert_eq!(
            refused(STRICT, "http://hooks.example.com/"),
            "not https: the URL's scheme is http"
        );
        assert_eq!(
            refused(PRIVATE_ALLOWED, "ftp://hooks.example.com/"),
            "not http or https: the URL's scheme is ftp"
        );
        assert!(
            PRIVATE_ALLOWED
                .check_url("http://hooks.example.com/")
                .is_ok()
        );
        for userinfo in [
            "https://me@hooks.example.com/",
            "https://me:pw@hooks.example.com/",
        ] {
            assert_eq!(
                refused(STRICT, userinfo),
                "the URL has a user name or password"
            );
        }
        assert_eq!(
            refused(PRIVATE_ALLOWED, "http://127.0.0.1:0/in"),
            "the URL's port is 0, which nothing can be delivered to"
        );
        assert!(refused(STRICT, "hooks.example.com/in").starts_with("not a URL"));
        assert!(refused(STRICT, "https://").starts_with("not a URL"));

        assert_eq!(
            refused(STRICT, "https://10.0.0.1/"),
            "10.0.0.1 is a private address"
        );
        assert!(PRIVATE_ALLOWED.check_url("https://10.0.0.1/").is_ok());
        assert!(PRIVATE_ALLOWED.check_url("http://[::1]:8080/").is_ok());
        assert!(refused(STRICT, "https://[::ffff:127.0.0.1]/").contains("loopback"));
        // Other spellings of an address are addresses too.
        assert!(refused(STRICT, "https://0x7f.1/").contains("127.0.0.1"));
        assert!(refused(STRICT, "https://2130706433/").contains("127.0.0.1"));
        for never in [
            "https://169.254.169.254/",
            "https://[fe80::1]/",
            "https://224.0.0.1/",
        ] {
            assert!(PRIVATE_ALLOWED.check_url(never).is_err(), "{never}");
        }
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_unless_private_targets_are_allowed() {
        let url = STRICT.check_url("https://localhost:8443/").unwrap();
        let error = STRICT.resolve_and_check(&url).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "localhost resolves to 127.0.0.1, a loopback address"
        );
        PRIVATE_ALLOWED.resolve_and_check(&url).await.unwrap();

        let literal = PRIVATE_ALLOWED.check_url("https://10.1.2.3/").unwrap();
        let error = STRICT.resolve_and_check(&literal).await.unwrap_err();
        assert_eq!(error.to_string(), "10.1.2.3 is a private address");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_refused() {
        // `.invalid` never resolves (RFC 2606).
        let url = STRICT.check_url("https://no-such-host.invalid/").unwrap();
        let error = STRICT.resolve_and_check(&url).await.unwrap_err();
        assert!(
            matches!(&error, TargetRefused::DoesNotResolve { host, .. } if host == "no-such-host.invalid"),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .starts_with("no-such-host.invalid does not resolve")
        );
    }

    /// A loopback HTTP server answering every request with `answer`; it
    /// counts the connections it accepts and sends back what it was sent.
    async fn serve(
        answer: &'static str,
    ) -> (u16, Arc<AtomicUsize>, tokio::sync::mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (requests, received) = tokio::sync::mpsc::channel(8);
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut request = vec![0; 4096];
                let n = stream.read(&mut request).await.unwrap_or(0);
                let _ = requests
                    .send(String::from_utf8_lossy(&request[..n]).into_owned())
                    .await;
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        (port, accepted, received)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

    /// The whole chain of an error's messages.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(next) = source {
            text.push_str(": ");
            text.push_str(&next.to_string());
            source = next.source();
        }
        text
    }

    #[tokio::test]
    async fn the_delivery_client_connects_to_no_refused_address() {
        let (port, accepted, _) = serve(OK).await;
        let strict = delivery_client(STRICT, Duration::from_secs(5)).unwrap();

        let error = strict
            .get(format!("https://localhost:{port}/"))
            .send()
            .await
            .unwrap_err();
        let message = chain(&error);
        assert!(
            message.contains("localhost resolves to 127.0.0.1, a loopback address"),
            "{message}"
        );
        // Plain http is not even tried.
        assert!(
            strict
                .get(format!("http://localhost:{port}/"))
                .send()
                .await
                .is_err()
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn with_private_targets_allowed_it_delivers_to_loopback_as_itself() {
        let (port, accepted, mut received) = serve(OK).await;
        let client = delivery_client(PRIVATE_ALLOWED, Duration::from_secs(5)).unwrap();
        let response = client
            .post(format!("http://localhost:{port}/hook"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        let request = received.recv().await.unwrap().to_ascii_lowercase();
        let agent = format!(
            "user-agent: petstore-webhooks/{}",
            env!("CARGO_PKG_VERSION")
        );
        assert!(request.contains(&agent), "{request}");
    }

    #[tokio::test]
    async fn a_redirect_is_an_answer_not_followed() {
        let (port, accepted, _) = serve(
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/\r\ncontent-length: 0\r\n\
             connection: close\r\n\r\n",
        )
        .await;
        let client = delivery_client(PRIVATE_ALLOWED, Duration::from_secs(5)).unwrap();
        let response = client
            .get(format!("http://localhost:{port}/"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 302);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }
}
