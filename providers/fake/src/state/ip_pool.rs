//! The load balancer address pool.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use crate::Error;

/// The usable addresses of an IPv4 CIDR.
#[derive(Debug, Clone)]
pub(crate) struct IpPool {
    first: u32,
    last: u32,
    used: BTreeSet<u32>,
    /// Every address below it is used; it is free or past `last`. Keeps
    /// finding the lowest free address from scanning the used ones (at
    /// 5,000 load balancers, a quadratic cost).
    lowest_free: u32,
}

impl IpPool {
    pub(crate) fn parse(cidr: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::InvalidPool(cidr.to_owned(), why.to_owned());
        let (addr, prefix) = cidr
            .split_once('/')
            .ok_or_else(|| bad("not address/prefix"))?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix: u32 = prefix.parse().map_err(|_| bad("bad prefix length"))?;
        if prefix > 30 {
            return Err(bad(
                "prefix must be /30 or shorter to have usable addresses",
            ));
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        let network = u32::from(addr) & mask;
        let broadcast = network | !mask;
        Ok(IpPool {
            first: network + 2,
            last: broadcast - 1,
            used: BTreeSet::new(),
            lowest_free: network + 2,
        })
    }

    pub(super) fn contains(&self, ip: Ipv4Addr) -> bool {
        (self.first..=self.last).contains(&u32::from(ip))
    }

    pub(super) fn is_free(&self, ip: Ipv4Addr) -> bool {
        self.contains(ip) && !self.used.contains(&u32::from(ip))
    }

    pub(super) fn take(&mut self, ip: Ipv4Addr) {
        self.used.insert(u32::from(ip));
        while self.lowest_free <= self.last && self.used.contains(&self.lowest_free) {
            self.lowest_free += 1;
        }
    }

    pub(super) fn release(&mut self, ip: Ipv4Addr) {
        let ip = u32::from(ip);
        if self.used.remove(&ip) {
            self.lowest_free = self.lowest_free.min(ip);
        }
    }

    /// The lowest free address (allocation is deterministic).
    pub(super) fn lowest_free(&self) -> Option<Ipv4Addr> {
        (self.lowest_free <= self.last).then(|| Ipv4Addr::from(self.lowest_free))
    }

    #[cfg(test)]
    fn allocate(&mut self) -> Option<Ipv4Addr> {
        let ip = self.lowest_free()?;
        self.take(ip);
        Some(ip)
    }

    pub(super) fn allocated(&self) -> Vec<Ipv4Addr> {
        self.used.iter().map(|a| Ipv4Addr::from(*a)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_skips_network_gateway_and_broadcast() {
        let mut p = IpPool::parse("10.1.2.0/30").unwrap();
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 1, 2, 2)));
        assert_eq!(p.allocate(), None);
        assert!(IpPool::parse("10.0.0.0/31").is_err());
        assert!(IpPool::parse("fd00::/64").is_err());
        assert!(IpPool::parse("10.0.0.0").is_err());
        let p = IpPool::parse("192.0.2.77/24").unwrap();
        assert_eq!(Ipv4Addr::from(p.first), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(Ipv4Addr::from(p.last), Ipv4Addr::new(192, 0, 2, 254));
    }

    #[test]
    fn the_pool_hands_out_the_lowest_free_address() {
        let ip = |d: u8| Ipv4Addr::new(10, 0, 0, d);
        let mut p = IpPool::parse("10.0.0.0/29").unwrap(); // .2 - .6
        p.take(ip(3));
        assert_eq!(p.allocate(), Some(ip(2)));
        assert_eq!(p.allocate(), Some(ip(4)), ".3 was taken by hand");
        p.release(ip(3));
        p.release(ip(3));
        assert_eq!(p.lowest_free(), Some(ip(3)));
        assert_eq!(p.allocate(), Some(ip(3)));
        p.take(ip(5));
        assert_eq!(p.allocate(), Some(ip(6)));
        assert_eq!(p.allocate(), None);
        p.release(ip(5));
        assert_eq!(p.allocate(), Some(ip(5)));
        assert_eq!(p.lowest_free(), None);
    }
}
