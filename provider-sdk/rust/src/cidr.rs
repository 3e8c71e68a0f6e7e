//! CIDRs (`address/prefix`) as the contract writes them: one strict parser
//! for the controller, the request validation and providers, on `ipnet`.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

pub use ipnet::IpNet;

/// A CIDR as written: an address and a prefix length within its family.
/// The address may have host bits set (`10.244.1.5/24`, as Kubernetes takes
/// a pod CIDR or a source range); [`Cidr::network`] clears them, and
/// [`Cidr::is_network`] tells whether there were any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr(IpNet);

/// Why a text is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("expected a network and a prefix length, such as 10.244.1.0/24")]
    NoPrefix,
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    Address(String),
    #[error("the prefix length must be a number from 0 to {max}")]
    PrefixLength { max: u8 },
}

impl Cidr {
    /// Strict parsing: `a.b.c.d/n` or `x::y/n`, the address as the standard
    /// library reads it (no leading zeros in an IPv4 octet) and the prefix
    /// in decimal without sign or leading zero, as other languages' CIDR
    /// parsers take it. ipnet's own `FromStr` is laxer on both counts
    /// (`010.0.0.0/08`), so only its value type is used here.
    pub fn parse(s: &str) -> Result<Cidr, CidrError> {
        let (addr, prefix) = s.split_once('/').ok_or(CidrError::NoPrefix)?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Address(addr.to_owned()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let canonical = !prefix.is_empty()
            && prefix.bytes().all(|b| b.is_ascii_digit())
            && (prefix.len() == 1 || !prefix.starts_with('0'));
        let prefix_len = Some(prefix)
            .filter(|_| canonical)
            .and_then(|p| p.parse::<u8>().ok())
            .ok_or(CidrError::PrefixLength { max })?;
        Cidr::new(addr, prefix_len)
    }

    /// `addr/prefix_len`, refused when the prefix is too long for the family.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Cidr, CidrError> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        IpNet::new(addr, prefix_len)
            .map(Cidr)
            .map_err(|_| CidrError::PrefixLength { max })
    }

    /// The address as written.
    pub fn addr(&self) -> IpAddr {
        self.0.addr()
    }

    pub fn prefix_len(&self) -> u8 {
        self.0.prefix_len()
    }

    pub fn is_ipv6(&self) -> bool {
        matches!(self.0, IpNet::V6(_))
    }

    /// The same prefix with the host bits cleared: `10.244.1.5/24` is
    /// `10.244.1.0/24`.
    pub fn network(&self) -> Cidr {
        Cidr(self.0.trunc())
    }

    /// Whether no host bits are set.
    pub fn is_network(&self) -> bool {
        self.0.trunc() == self.0
    }

    /// Whether every address of `other` is in this one; never across
    /// families.
    pub fn contains(&self, other: &Cidr) -> bool {
        self.0.contains(&other.0)
    }

    /// Whether `ip` is in this network; never across families.
    pub fn contains_ip(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cidr::parse(s)
    }
}

impl From<Cidr> for IpNet {
    fn from(c: Cidr) -> IpNet {
        c.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        Cidr::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_as_written() {
        for s in [
            "10.244.1.0/24",
            "0.0.0.0/0",
            "192.0.2.7/32",
            "10.244.1.5/24",
            "fd00:10:244:1::/64",
            "::/0",
            "2001:db8::1/128",
        ] {
            assert_eq!(cidr(s).to_string(), s);
        }
        assert_eq!(cidr("10.244.1.5/24").addr().to_string(), "10.244.1.5");
        assert_eq!(cidr("10.244.1.5/24").prefix_len(), 24);
        assert!(cidr("fd00::/8").is_ipv6());
    }

    #[test]
    fn malformed_text_is_refused_with_the_reason() {
        let no_prefix = ["", "10.244.1.0", "garbage"];
        for s in no_prefix {
            assert_eq!(Cidr::parse(s), Err(CidrError::NoPrefix), "{s:?}");
        }
        for s in ["10.244.1/24", " 10.244.1.0/24", "010.0.0.0/8", "x/1"] {
            assert!(
                matches!(Cidr::parse(s), Err(CidrError::Address(_))),
                "{s:?}"
            );
        }
        for (s, max) in [
            ("10.244.1.0/", 32),
            ("10.244.1.0/33", 32),
            ("10.244.1.0/-1", 32),
            ("10.244.1.0/+24", 32),
            ("10.244.1.0/08", 32),
            ("10.244.1.0/24/1", 32),
            ("fd00::/129", 128),
            ("fd00::/256", 128),
            ("fd00::/064", 128),
        ] {
            assert_eq!(
                Cidr::parse(s),
                Err(CidrError::PrefixLength { max }),
                "{s:?}"
            );
        }
    }

    #[test]
    fn networks_and_containment() {
        assert_eq!(cidr("10.244.1.5/24").network(), cidr("10.244.1.0/24"));
        assert_eq!(cidr("10.0.0.1/0").network().to_string(), "0.0.0.0/0");
        assert_eq!(
            cidr("fd00:10:244:1::1/64").network().to_string(),
            "fd00:10:244:1::/64"
        );
        assert!(cidr("10.244.1.0/24").is_network());
        assert!(!cidr("10.244.1.5/24").is_network());
        assert!(cidr("10.244.0.0/16").contains(&cidr("10.244.1.0/24")));
        assert!(cidr("10.244.0.0/16").contains(&cidr("10.244.0.0/16")));
        assert!(!cidr("10.244.1.0/24").contains(&cidr("10.244.0.0/16")));
        assert!(!cidr("0.0.0.0/0").contains(&cidr("::/128")));
        assert!(!cidr("::/0").contains(&cidr("10.0.0.0/8")));
        assert!(cidr("10.9.9.9/8").contains_ip("10.0.0.1".parse().unwrap()));
        assert!(!cidr("10.0.0.0/8").contains_ip("11.0.0.1".parse().unwrap()));
        assert!(!cidr("0.0.0.0/0").contains_ip("::1".parse().unwrap()));
        assert_eq!(
            Cidr::new("10.0.0.0".parse().unwrap(), 33),
            Err(CidrError::PrefixLength { max: 32 })
        );
    }
}
