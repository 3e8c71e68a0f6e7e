//! The range load balancer addresses come from, and picking a free one.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ccm_provider_sdk::Cidr;

/// A CIDR of addresses that are local to this machine (the default, a
/// 127.x range, is bindable without privileges on Linux).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VipRange {
    network: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for VipRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let cidr =
            Cidr::parse(s).map_err(|_| format!("{s:?} is not a CIDR such as 127.200.0.0/24"))?;
        if !cidr.is_network() {
            return Err(format!("{s:?} has host bits set"));
        }
        Ok(VipRange {
            network: cidr.addr(),
            prefix: cidr.prefix_len(),
        })
    }
}

impl std::fmt::Display for VipRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl VipRange {
    fn bits(&self) -> u32 {
        if self.network.is_ipv4() { 32 } else { 128 }
    }

    fn first(&self) -> u128 {
        let host_bits = self.bits() - u32::from(self.prefix);
        let mask = if host_bits >= 128 {
            0
        } else {
            !0u128 << host_bits
        };
        to_u128(self.network) & mask
    }

    fn last(&self) -> u128 {
        let host_bits = self.bits() - u32::from(self.prefix);
        self.first()
            | if host_bits >= 128 {
                !0
            } else {
                (1u128 << host_bits) - 1
            }
    }

    fn ip(&self, n: u128) -> IpAddr {
        if self.network.is_ipv4() {
            IpAddr::V4((n as u32).into())
        } else {
            IpAddr::V6(n.into())
        }
    }

    /// Whether `ip` is one this range hands out.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.network.is_ipv4() && {
            let n = to_u128(ip);
            n >= self.usable_first() && n <= self.usable_last()
        }
    }

    /// The network and broadcast addresses of ranges wider than /31 are
    /// not handed out, as a cloud would not.
    fn usable_first(&self) -> u128 {
        if self.bits() - u32::from(self.prefix) >= 2 {
            self.first() + 1
        } else {
            self.first()
        }
    }

    fn usable_last(&self) -> u128 {
        if self.network.is_ipv4() && self.bits() - u32::from(self.prefix) >= 2 {
            self.last() - 1
        } else {
            self.last()
        }
    }

    /// `wanted` when it is in the range and free, else the lowest free
    /// address; `None` when every address is taken.
    pub fn allocate(&self, used: &BTreeSet<IpAddr>, wanted: Option<IpAddr>) -> Option<IpAddr> {
        if let Some(w) = wanted
            && self.contains(w)
            && !used.contains(&w)
        {
            return Some(w);
        }
        let mut n = self.usable_first();
        // Bounded by the number of addresses in use: each step passes one.
        loop {
            let ip = self.ip(n);
            if !used.contains(&ip) {
                return Some(ip);
            }
            if n >= self.usable_last() {
                return None;
            }
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn hands_out_the_lowest_free_host_address() {
        let r: VipRange = "127.200.0.0/30".parse().unwrap();
        let mut used = BTreeSet::new();
        let a = r.allocate(&used, None).unwrap();
        assert_eq!(a, ip("127.200.0.1"));
        used.insert(a);
        assert_eq!(r.allocate(&used, None), Some(ip("127.200.0.2")));
        used.insert(ip("127.200.0.2"));
        assert_eq!(
            r.allocate(&used, None),
            None,
            "network and broadcast are not handed out"
        );
        used.remove(&a);
        assert_eq!(
            r.allocate(&used, Some(ip("127.200.0.2"))),
            Some(a),
            "a taken wish is not granted"
        );
        assert_eq!(
            r.allocate(&BTreeSet::new(), Some(ip("127.200.0.2"))),
            Some(ip("127.200.0.2"))
        );
        assert_eq!(
            r.allocate(&BTreeSet::new(), Some(ip("10.0.0.1"))),
            Some(a),
            "outside the range"
        );
    }

    #[test]
    fn single_addresses_and_ipv6() {
        let one: VipRange = "127.0.0.9/32".parse().unwrap();
        assert_eq!(one.allocate(&BTreeSet::new(), None), Some(ip("127.0.0.9")));
        let v6: VipRange = "::1/128".parse().unwrap();
        assert_eq!(v6.allocate(&BTreeSet::new(), None), Some(ip("::1")));
        assert!(
            "127.200.0.1/24"
                .parse::<VipRange>()
                .unwrap_err()
                .contains("host bits")
        );
        assert!("127.200.0.0".parse::<VipRange>().is_err());
        assert!("127.200.0.0/33".parse::<VipRange>().is_err());
    }
}
