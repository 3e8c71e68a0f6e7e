//! CIDRs as values: parsed strictly, compared by network and length.

use std::net::IpAddr;

/// A parsed CIDR, normalised to its network address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    network: u128,
    len: u8,
    v6: bool,
}

impl Cidr {
    /// Strict parsing: `a.b.c.d/n` or `x::y/n`, no leading zeros.
    pub fn parse(s: &str) -> Option<Cidr> {
        let (addr, len) = s.split_once('/')?;
        if len.is_empty() || len.starts_with('+') || (len.len() > 1 && len.starts_with('0')) {
            return None;
        }
        let len: u8 = len.parse().ok()?;
        let (bits, v6, width) = match addr.parse::<IpAddr>().ok()? {
            IpAddr::V4(a) => (u128::from(u32::from(a)), false, 32),
            IpAddr::V6(a) => (u128::from(a), true, 128),
        };
        if len > width {
            return None;
        }
        let host_bits = u32::from(width - len);
        let mask = if host_bits >= 128 {
            0
        } else {
            !((1u128 << host_bits) - 1)
        };
        Some(Cidr {
            network: bits & mask & Self::width_mask(v6),
            len,
            v6,
        })
    }

    fn width_mask(v6: bool) -> u128 {
        if v6 { u128::MAX } else { u128::from(u32::MAX) }
    }

    fn last(&self) -> u128 {
        let width = if self.v6 { 128 } else { 32 };
        let host_bits = u32::from(width - self.len);
        let hosts = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        self.network | (hosts & Self::width_mask(self.v6))
    }

    pub fn contains_range(&self, other: &Cidr) -> bool {
        self.v6 == other.v6
            && self.len <= other.len
            && other.network >= self.network
            && other.last() <= self.last()
    }

    pub fn is_v6(&self) -> bool {
        self.v6
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addr: IpAddr = if self.v6 {
            std::net::Ipv6Addr::from(self.network).into()
        } else {
            std::net::Ipv4Addr::from(self.network as u32).into()
        };
        write!(f, "{addr}/{}", self.len)
    }
}

/// `--cluster-cidr`: one CIDR, or two of different families, as upstream.
pub fn parse_cluster_cidrs(flag: &str) -> Result<Vec<Cidr>, String> {
    let entries: Vec<&str> = flag.split(',').map(str::trim).collect();
    let cidrs = entries
        .iter()
        .map(|e| {
            Cidr::parse(e).ok_or_else(|| {
                format!(
                    "invalid --cluster-cidr {flag:?}: {e:?} is not a CIDR such as 10.244.0.0/16"
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    match cidrs.as_slice() {
        [_] => Ok(cidrs),
        [a, b] if a.v6 != b.v6 => Ok(cidrs),
        [_, _] => Err(format!(
            "len of ClusterCIDRs==2 and they are not configured as dual stack (at least one from each IPFamily): {flag:?}"
        )),
        _ => Err(format!(
            "length of clusterCIDRs is:{} more than max allowed of 2",
            cidrs.len()
        )),
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::arb;

    proptest! {
        /// Accepted input is an address and a decimal prefix; the value
        /// prints as its network, which parses back to itself.
        #[test]
        fn accepted_cidrs_round_trip(s in prop_oneof![arb::cidr_text(), arb::text()]) {
            if let Some(c) = Cidr::parse(&s) {
                let shown = c.to_string();
                prop_assert_eq!(Cidr::parse(&shown), Some(c));
                prop_assert_eq!(Cidr::parse(&shown).unwrap().to_string(), shown.clone());
                let (addr, len) = s.split_once('/').unwrap();
                prop_assert_eq!(len, c.len.to_string(), "prefix written canonically");
                let ip: IpAddr = addr.parse().unwrap();
                prop_assert_eq!(ip.is_ipv6(), c.is_v6());
                // What the route controller sends, the SDK accepts.
                prop_assert!(ccm_provider_sdk::validate::cidr("c", &s).is_ok());
                prop_assert!(ccm_provider_sdk::validate::cidr("c", &shown).is_ok());
            }
        }

        #[test]
        fn a_network_contains_itself_and_what_is_inside(
            ip in any::<IpAddr>(),
            len in 0u8..=128,
            extra in 0u8..=128,
        ) {
            let width = if ip.is_ipv4() { 32 } else { 128 };
            let (len, inner) = (len.min(width), (len.saturating_add(extra)).min(width));
            let outer = Cidr::parse(&format!("{ip}/{len}")).unwrap();
            let inside = Cidr::parse(&format!("{ip}/{inner}")).unwrap();
            prop_assert!(outer.contains_range(&outer));
            prop_assert!(outer.contains_range(&inside));
            prop_assert_eq!(inside.contains_range(&outer), inner == len);
            let other = if ip.is_ipv4() { "::/0" } else { "0.0.0.0/0" };
            prop_assert!(!Cidr::parse(other).unwrap().contains_range(&outer));
        }

        #[test]
        fn cluster_cidrs_are_one_or_a_dual_stack_pair(
            parts in proptest::collection::vec(prop_oneof![arb::cidr_text(), arb::text()], 1..4),
        ) {
            let flag = parts.join(",");
            match parse_cluster_cidrs(&flag) {
                Ok(c) => prop_assert!(c.len() == 1 || (c.len() == 2 && c[0].is_v6() != c[1].is_v6())),
                Err(e) => prop_assert!(e.contains(&format!("{flag:?}")) || e.contains("more than max"), "{}", e),
            }
        }
    }
}
