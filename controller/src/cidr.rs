//! CIDRs as values: parsed strictly by the SDK's [`Cidr`], compared by
//! network and length.

pub use ccm_provider_sdk::Cidr;

/// `s` as its network (host bits cleared), so that `10.244.1.5/24` and
/// `10.244.1.0/24` name the same routes; `None` when `s` is not a CIDR.
pub fn network(s: &str) -> Option<Cidr> {
    Cidr::parse(s).ok().map(|c| c.network())
}

/// `--cluster-cidr`: one CIDR, or two of different families, as upstream.
pub fn parse_cluster_cidrs(flag: &str) -> Result<Vec<Cidr>, String> {
    let entries: Vec<&str> = flag.split(',').map(str::trim).collect();
    let cidrs = entries
        .iter()
        .map(|e| {
            network(e).ok_or_else(|| {
                format!(
                    "invalid --cluster-cidr {flag:?}: {e:?} is not a CIDR such as 10.244.0.0/16"
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    match cidrs.as_slice() {
        [_] => Ok(cidrs),
        [a, b] if a.is_ipv6() != b.is_ipv6() => Ok(cidrs),
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
    use std::net::IpAddr;

    use proptest::prelude::*;

    use super::*;
    use crate::arb;

    proptest! {
        /// Accepted input is an address and a decimal prefix; the value
        /// prints as its network, which parses back to itself.
        #[test]
        fn accepted_cidrs_round_trip(s in prop_oneof![arb::cidr_text(), arb::text()]) {
            if let Some(c) = network(&s) {
                let shown = c.to_string();
                prop_assert_eq!(network(&shown), Some(c));
                prop_assert_eq!(network(&shown).unwrap().to_string(), shown.clone());
                let (addr, len) = s.split_once('/').unwrap();
                prop_assert_eq!(len, c.prefix_len().to_string(), "prefix written canonically");
                let ip: IpAddr = addr.parse().unwrap();
                prop_assert_eq!(ip.is_ipv6(), c.is_ipv6());
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
            let outer = network(&format!("{ip}/{len}")).unwrap();
            let inside = network(&format!("{ip}/{inner}")).unwrap();
            prop_assert!(outer.contains(&outer));
            prop_assert!(outer.contains(&inside));
            prop_assert_eq!(inside.contains(&outer), inner == len);
            let other = if ip.is_ipv4() { "::/0" } else { "0.0.0.0/0" };
            prop_assert!(!network(other).unwrap().contains(&outer));
        }

        #[test]
        fn cluster_cidrs_are_one_or_a_dual_stack_pair(
            parts in proptest::collection::vec(prop_oneof![arb::cidr_text(), arb::text()], 1..4),
        ) {
            let flag = parts.join(",");
            match parse_cluster_cidrs(&flag) {
                Ok(c) => prop_assert!(c.len() == 1 || (c.len() == 2 && c[0].is_ipv6() != c[1].is_ipv6())),
                Err(e) => prop_assert!(e.contains(&format!("{flag:?}")) || e.contains("more than max"), "{}", e),
            }
        }
    }
}
