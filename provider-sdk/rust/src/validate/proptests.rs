//! Property tests of contract validation, the gate both sides put on what
//! the other sends: arbitrary messages never make a check panic; a refusal
//! names a field under the path it was given; whatever is accepted has the
//! properties the contract (`proto/ccmrs/cloudprovider/v1`) documents and
//! Kubernetes will accept where the controller writes it; and each way of
//! breaking a valid message is refused naming the broken field.
//!
//! The number of cases is proptest's: 256, or `PROPTEST_CASES` (`make fuzz`).

use std::collections::HashMap;
use std::net::IpAddr;

use proptest::collection::{hash_map, vec};
use proptest::prelude::*;

use super::answers;
use super::*;
use crate::proto::{
    InstanceMetadata, IpMode, LoadBalancerIngress, LoadBalancerStatus, NodeAddress,
    NodeAddressType, NodeRef, PortStatus, Protocol, Route, Service, ServicePort,
};

// ---------------------------------------------------------------------------
// Strategies: what a peer might send.
// ---------------------------------------------------------------------------

/// An IP in its canonical text, or in a form some parser accepts and
/// Rust's does not (or the reverse).
fn arb_ip_text() -> BoxedStrategy<String> {
    prop_oneof![
        4 => any::<IpAddr>().prop_map(|ip| ip.to_string()),
        1 => any::<[u8; 4]>().prop_map(|o| format!("{:03}.{}.{}.{}", o[0], o[1], o[2], o[3])),
        1 => any::<std::net::Ipv4Addr>().prop_map(|ip| format!("::ffff:{ip}")),
        1 => any::<std::net::Ipv6Addr>().prop_map(|ip| ip.to_string().to_uppercase()),
    ]
    .boxed()
}

fn arb_cidr_text() -> BoxedStrategy<String> {
    (
        arb_ip_text(),
        prop_oneof![
            4 => (0u8..=130).prop_map(|p| p.to_string()),
            1 => (0u8..=32).prop_map(|p| format!("+{p}")),
            1 => (0u8..=32).prop_map(|p| format!("0{p}")),
            1 => "[ -~]{0,4}",
        ],
    )
        .prop_map(|(ip, p)| format!("{ip}/{p}"))
        .boxed()
}

/// An IP as the contract sends one: canonical, never IPv4-mapped.
fn arb_canonical_ip() -> BoxedStrategy<IpAddr> {
    any::<IpAddr>()
        .prop_map(|ip| match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        })
        .boxed()
}

/// A DNS-1123 subdomain.
fn arb_dns_name() -> BoxedStrategy<String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?){0,3}".boxed()
}

/// A Kubernetes label value (also a label key's name part).
fn arb_label_name() -> BoxedStrategy<String> {
    "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?".boxed()
}

fn arb_label_key() -> BoxedStrategy<String> {
    (proptest::option::of(arb_dns_name()), arb_label_name())
        .prop_map(|(prefix, name)| match prefix {
            Some(p) => format!("{p}/{name}"),
            None => name,
        })
        .boxed()
}

/// Any string a peer might send: mostly plausible values, some arbitrary
/// Unicode, some at or past the limits.
pub(crate) fn arb_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "[a-zA-Z0-9._/:%+-]{0,24}",
        2 => arb_ip_text(),
        1 => arb_cidr_text(),
        1 => arb_dns_name(),
        1 => arb_label_key(),
        1 => Just(String::new()),
        1 => (1usize..400).prop_map(|n| "a".repeat(n)),
        1 => prop::sample::select(&[
            "None", " ", "fake://i-1", "fake://", "://x", "é", "\u{0}", "1.2.3.4%eth0",
            "fe80::1%eth0", "1.2.3.4 ", "a b", "A", "-a", "a-",
        ][..]).prop_map(str::to_owned),
    ]
    .boxed()
}

/// An enum field as it travels: usually a known value, sometimes not.
fn arb_enum_value() -> BoxedStrategy<i32> {
    prop_oneof![4 => 0i32..6, 1 => any::<i32>()].boxed()
}

fn arb_string_map() -> BoxedStrategy<HashMap<String, String>> {
    hash_map(
        prop_oneof![2 => arb_label_key(), 1 => arb_text()],
        prop_oneof![2 => arb_label_name(), 1 => arb_text()],
        0..4,
    )
    .boxed()
}

fn arb_node_address() -> BoxedStrategy<NodeAddress> {
    (arb_enum_value(), prop_oneof![arb_text(), arb_dns_name()])
        .prop_map(|(r#type, address)| NodeAddress { r#type, address })
        .boxed()
}

fn arb_port_status() -> BoxedStrategy<PortStatus> {
    (
        any::<i32>(),
        prop_oneof![3 => 1i32..=3, 1 => arb_enum_value()],
        arb_text(),
    )
        .prop_map(|(port, protocol, error)| PortStatus {
            port,
            protocol,
            error,
        })
        .boxed()
}

/// Mostly plausible ingress points (a status is refused whole for one bad
/// entry, so the properties need many all-plausible ones).
fn arb_ingress() -> BoxedStrategy<LoadBalancerIngress> {
    (
        prop_oneof![
            2 => Just(String::new()),
            3 => any::<IpAddr>().prop_map(|ip| ip.to_string()),
            1 => arb_ip_text(),
            1 => arb_text(),
        ],
        prop_oneof![
            2 => Just(String::new()),
            3 => arb_dns_name(),
            1 => arb_ip_text(),
            1 => arb_text(),
        ],
        prop_oneof![3 => 0i32..=2, 1 => arb_enum_value()],
        vec(arb_port_status(), 0..3),
    )
        .prop_map(|(ip, hostname, ip_mode, ports)| LoadBalancerIngress {
            ip,
            hostname,
            ip_mode,
            ports,
        })
        .boxed()
}

pub(crate) fn arb_load_balancer_status() -> BoxedStrategy<LoadBalancerStatus> {
    vec(arb_ingress(), 0..4)
        .prop_map(|ingress| LoadBalancerStatus { ingress })
        .boxed()
}

fn arb_instance_metadata() -> BoxedStrategy<InstanceMetadata> {
    (
        prop_oneof![Just(String::new()), "[a-z]{1,6}://[!-~]{1,20}", arb_text()],
        prop_oneof![arb_label_name(), arb_text()],
        vec(arb_node_address(), 0..4),
        prop_oneof![arb_label_name(), arb_text()],
        prop_oneof![arb_label_name(), arb_text()],
        arb_string_map(),
    )
        .prop_map(
            |(provider_id, instance_type, node_addresses, zone, region, additional_labels)| {
                InstanceMetadata {
                    provider_id,
                    instance_type,
                    node_addresses,
                    zone,
                    region,
                    additional_labels,
                }
            },
        )
        .boxed()
}

fn arb_node_ref() -> BoxedStrategy<NodeRef> {
    (
        arb_text(),
        arb_text(),
        arb_text(),
        vec(arb_node_address(), 0..3),
        arb_string_map(),
        arb_string_map(),
    )
        .prop_map(
            |(name, uid, provider_id, addresses, labels, annotations)| NodeRef {
                name,
                uid,
                provider_id,
                addresses,
                labels,
                annotations,
            },
        )
        .boxed()
}

fn arb_route() -> BoxedStrategy<Route> {
    (
        arb_text(),
        arb_text(),
        vec(arb_node_address(), 0..3),
        prop_oneof![arb_cidr_text(), arb_text()],
        any::<bool>(),
    )
        .prop_map(
            |(name, target_node, target_node_addresses, destination_cidr, blackhole)| Route {
                name,
                target_node,
                target_node_addresses,
                destination_cidr,
                blackhole,
            },
        )
        .boxed()
}

fn arb_service_port() -> BoxedStrategy<ServicePort> {
    (
        arb_text(),
        arb_enum_value(),
        prop_oneof![1i32..=65535, any::<i32>()],
        prop_oneof![0i32..=65535, any::<i32>()],
        arb_text(),
    )
        .prop_map(
            |(name, protocol, port, node_port, app_protocol)| ServicePort {
                name,
                protocol,
                port,
                node_port,
                app_protocol,
            },
        )
        .boxed()
}

/// Any Service: every field arbitrary.
fn arb_service() -> BoxedStrategy<Service> {
    (
        (
            arb_text(),
            arb_text(),
            arb_text(),
            arb_string_map(),
            arb_string_map(),
        ),
        (
            vec(arb_service_port(), 0..3),
            vec(prop_oneof![arb_cidr_text(), arb_text()], 0..3),
            arb_enum_value(),
            arb_enum_value(),
            arb_enum_value(),
        ),
        (
            vec(arb_enum_value(), 0..3),
            arb_enum_value(),
            prop_oneof![Just(String::new()), arb_ip_text(), arb_text()],
            vec(
                prop_oneof![Just("None".to_owned()), arb_ip_text(), arb_text()],
                0..3,
            ),
            proptest::option::of(arb_load_balancer_status()),
        ),
    )
        .prop_map(
            |(
                (namespace, name, uid, labels, annotations),
                (ports, ranges, etp, itp, affinity),
                (ip_families, ip_family_policy, load_balancer_ip, cluster_ips, status),
            )| Service {
                namespace,
                name,
                uid,
                labels,
                annotations,
                ports,
                load_balancer_source_ranges: ranges,
                external_traffic_policy: etp,
                internal_traffic_policy: itp,
                session_affinity: affinity,
                ip_families,
                ip_family_policy,
                load_balancer_ip,
                cluster_ips,
                status,
                ..Default::default()
            },
        )
        .boxed()
}

/// A Service the contract accepts.
fn arb_valid_service() -> BoxedStrategy<Service> {
    (
        (arb_dns_name(), arb_dns_name(), "[a-f0-9-]{1,36}"),
        hash_map(
            arb_label_key(),
            prop_oneof![Just(String::new()), arb_label_name()],
            0..3,
        ),
        hash_map(arb_label_key(), ".{0,20}", 0..3),
        vec(
            (1u8..=3, 1i32..=65535, 0i32..=65535).prop_map(|(protocol, port, node_port)| {
                ServicePort {
                    protocol: protocol.into(),
                    port,
                    node_port,
                    ..Default::default()
                }
            }),
            1..3,
        ),
        vec(
            (any::<IpAddr>(), 0u8..=32).prop_map(|(ip, p)| format!("{ip}/{p}")),
            0..3,
        ),
        (1i32..=2, 0i32..=2, 1i32..=2),
        proptest::option::of(arb_canonical_ip()),
    )
        .prop_map(
            |((namespace, name, uid), labels, annotations, ports, ranges, enums, ip)| {
                let (etp, itp, affinity) = enums;
                Service {
                    namespace,
                    name,
                    uid,
                    labels,
                    annotations,
                    ports,
                    load_balancer_source_ranges: ranges,
                    external_traffic_policy: etp,
                    internal_traffic_policy: itp,
                    session_affinity: affinity,
                    load_balancer_ip: ip.map(|ip| ip.to_string()).unwrap_or_default(),
                    ..Default::default()
                }
            },
        )
        .boxed()
}

// ---------------------------------------------------------------------------
// Oracles: the rules as the contract and Kubernetes state them, written
// independently of the checks under test.
// ---------------------------------------------------------------------------

/// Kubernetes' label-value (and label-key name) syntax.
fn is_label_value(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    s.is_empty()
        || (s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
            && s.chars().all(ok_char))
}

fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    !name.is_empty()
        && is_label_value(name)
        && prefix.is_none_or(|p| {
            p.len() <= 253
                && p.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && l.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                })
        })
}

/// Go's `netutils.ParseIPSloppy`, which the apiserver uses to tell an IP
/// from a hostname: IPv4 octets may have leading zeros.
fn is_ip_sloppy(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok() || {
        let parts: Vec<&str> = s.split('.').collect();
        parts.len() == 4
            && parts.iter().all(|p| {
                (1..=3).contains(&p.len())
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && p.parse::<u16>().is_ok_and(|n| n <= 255)
            })
    }
}

/// What the apiserver's `ValidateLoadBalancerStatus` accepts of one
/// ingress, which the controller writes to the Service unchanged.
fn kubernetes_accepts_ingress(i: &LoadBalancerIngress) -> bool {
    // The apiserver's strict IP check: Rust's parser takes no leading zeros
    // either; an IPv4-mapped IPv6 address is refused.
    let ip_ok = i.ip.is_empty()
        || match i.ip.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_none(),
            Ok(IpAddr::V4(_)) => true,
            Err(_) => false,
        };
    // ipMode "may only be specified when the ip field is specified".
    let mode_ok = i.ip_mode == 0 || !i.ip.is_empty();
    let hostname_ok = i.hostname.is_empty()
        || (super::fields::is_dns_subdomain(&i.hostname) && !is_ip_sloppy(&i.hostname));
    ip_ok && mode_ok && hostname_ok
}

fn check_field(result: Checked<impl Sized>, prefix: &str) -> Result<(), TestCaseError> {
    if let Err(v) = result {
        prop_assert!(
            v.field.starts_with(prefix),
            "violation {v} does not name a field under {prefix}"
        );
        prop_assert!(!v.problem.is_empty());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Properties.
// ---------------------------------------------------------------------------

proptest! {
    #[test]
    fn every_check_names_a_field_under_its_path(
        s in arb_service(),
        n in arb_node_ref(),
        r in arb_route(),
        m in arb_instance_metadata(),
        status in arb_load_balancer_status(),
    ) {
        check_field(service("service", &Some(s.clone())), "service")?;
        check_field(service_ref("service", &Some(s)), "service")?;
        check_field(node_ref("node", &Some(n)), "node")?;
        check_field(route("route", &Some(r)), "route")?;
        check_field(answers::instance_metadata(&m), "metadata.")?;
        check_field(load_balancer_status("status", &status), "status.")?;
    }

    /// What is accepted is an IP in its canonical text, never IPv4-mapped
    /// (issue 25, finding 9); every canonical IP that is not mapped is.
    #[test]
    fn ips_are_canonical_text(s in prop_oneof![arb_ip_text(), arb_text()]) {
        let canonical = s.parse::<IpAddr>().ok().filter(|a| {
            a.to_string() == s && !matches!(a, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
        });
        match ip("f", &s) {
            Ok(ip) => prop_assert_eq!(canonical, Some(ip)),
            Err(v) => {
                prop_assert_eq!(v.field, "f");
                prop_assert!(canonical.is_none(), "{s:?} refused: {}", v.problem);
            }
        }
    }

    #[test]
    fn cidrs_are_an_address_and_a_decimal_prefix_within_its_family(
        s in prop_oneof![arb_cidr_text(), arb_text()],
    ) {
        if let Ok((addr, prefix)) = cidr("f", &s) {
            let (a, p) = s.split_once('/').unwrap();
            prop_assert_eq!(a.parse::<IpAddr>().ok(), Some(addr));
            let width = if addr.is_ipv4() { 32 } else { 128 };
            prop_assert!(prefix <= width);
            // The prefix is written as "address/prefix" writes it: digits,
            // no sign, no leading zero (what other languages' parsers take).
            prop_assert_eq!(p, prefix.to_string());
        }
    }

    #[test]
    fn label_syntax_is_exactly_kubernetes_syntax(
        k in prop_oneof![arb_label_key(), arb_text()],
        v in prop_oneof![arb_label_name(), arb_text()],
    ) {
        prop_assert_eq!(label_key("f", &k).is_ok(), is_label_key(&k), "key {:?}", k);
        prop_assert_eq!(label_value("f", &v).is_ok(), is_label_value(&v), "value {:?}", v);
    }

    #[test]
    fn provider_ids_are_scheme_and_id(
        v in prop_oneof!["[a-z][a-z0-9+.-]{0,8}://[!-~]{1,30}", arb_text()],
    ) {
        match provider_id("f", &v) {
            Ok(()) => {
                let (scheme, id) = v.split_once("://").unwrap();
                prop_assert!(!scheme.is_empty() && !id.is_empty());
                prop_assert!(v.len() <= MAX_NAME_BYTES);
                prop_assert!(!v.chars().any(char::is_whitespace));
            }
            Err(e) => {
                prop_assert_eq!(e.field, "f");
                let well_formed = v.split_once("://").is_some_and(|(s, id)| !s.is_empty() && !id.is_empty())
                    && !v.chars().any(char::is_whitespace)
                    && v.len() <= MAX_NAME_BYTES;
                prop_assert!(!well_formed, "{v:?} refused");
            }
        }
    }

    /// Contract 1.3.0: a class a provider serves is a label key with a
    /// DNS-subdomain prefix; a platform a DNS-1123 label.
    #[test]
    fn classes_are_prefixed_label_keys_and_platforms_dns_labels(
        class in prop_oneof![arb_label_key(), arb_text()],
        platform in prop_oneof![arb_dns_name(), arb_label_name(), arb_text()],
    ) {
        let prefixed = class.split_once('/').is_some_and(|(p, _)| !p.is_empty());
        prop_assert_eq!(
            load_balancer_class("f", &class).is_ok(),
            prefixed && is_label_key(&class),
            "class {:?}", class
        );
        let is_label = platform.len() <= 63
            && !platform.is_empty()
            && platform.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && platform.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && platform.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        prop_assert_eq!(dns_label("f", &platform).is_ok(), is_label, "platform {:?}", platform);
    }

    /// The lists of an identity are accepted exactly when every entry is
    /// valid, none is there twice and there are not too many; a refusal
    /// names the list or the entry.
    #[test]
    fn identity_lists_are_valid_distinct_and_bounded(
        classes in vec(prop_oneof![
            4 => (0u8..40).prop_map(|n| format!("example.com/c{n}")),
            1 => arb_label_key(),
        ], 0..36),
        platforms in vec(prop_oneof![4 => (0u8..20).prop_map(|n| format!("p{n}")), 1 => arb_text()], 0..20),
        unclassed in arb_enum_value(),
    ) {
        let info = crate::proto::GetProviderInfoResponse {
            provider_id_scheme: "fake".into(),
            load_balancer_classes: classes.clone(),
            platforms: platforms.clone(),
            unclassed_services: unclassed,
            ..Default::default()
        };
        let distinct = |v: &[String]| v.iter().enumerate().all(|(i, x)| !v[..i].contains(x));
        let classes_ok = classes.len() <= MAX_LOAD_BALANCER_CLASSES
            && distinct(&classes)
            && classes.iter().all(|c| c.contains('/') && !c.starts_with('/') && is_label_key(c));
        let platforms_ok = platforms.len() <= MAX_PLATFORMS
            && distinct(&platforms)
            && platforms.iter().all(|p| dns_label("p", p).is_ok());
        let result = identity_lists(&info);
        prop_assert_eq!(result.is_ok(), classes_ok && platforms_ok, "{:?}", result);
        if let Err(v) = result {
            let list = if classes_ok { "platforms" } else { "load_balancer_classes" };
            prop_assert!(v.field.starts_with(list), "{v}");
        }
        // The enum is never a reason to refuse the lists; a sender must
        // send a known value, a receiver reads the rest as UNSPECIFIED.
        prop_assert_eq!(
            unclassed_services(&info).is_ok(),
            crate::proto::UnclassedServices::try_from(unclassed).is_ok()
        );
        prop_assert_eq!(serves_unclassed(&info), unclassed != 2);
    }

    /// A status the SDK lets through is written to the Service as it is: the
    /// apiserver must take it, or the Service never shows its address.
    #[test]
    fn an_accepted_status_is_one_kubernetes_accepts(status in arb_load_balancer_status()) {
        if load_balancer_status("status", &status).is_ok() {
            for i in &status.ingress {
                prop_assert!(!i.ip.is_empty() || !i.hostname.is_empty());
                prop_assert!(kubernetes_accepts_ingress(i), "{i:?}");
                prop_assert!(i.ip_mode == 0 || IpMode::try_from(i.ip_mode).is_ok());
                for p in &i.ports {
                    prop_assert!(Protocol::try_from(p.protocol).is_ok_and(|p| p != Protocol::Unspecified));
                }
            }
        }
    }

    /// Instance metadata becomes the Node's providerID, labels and
    /// addresses: whatever is accepted can be written.
    #[test]
    fn accepted_instance_metadata_can_be_written_to_a_node(m in arb_instance_metadata()) {
        if answers::instance_metadata(&m).is_ok() {
            if !m.provider_id.is_empty() {
                prop_assert!(provider_id("p", &m.provider_id).is_ok());
            }
            for v in [&m.instance_type, &m.zone, &m.region] {
                prop_assert!(is_label_value(v), "{v:?}");
            }
            for (k, v) in &m.additional_labels {
                prop_assert!(is_label_key(k) && is_label_value(v), "{k:?}={v:?}");
            }
            for a in &m.node_addresses {
                let ty = NodeAddressType::try_from(a.r#type);
                prop_assert!(ty.is_ok_and(|t| t != NodeAddressType::Unspecified));
                prop_assert!(!a.address.is_empty());
                if matches!(ty, Ok(NodeAddressType::InternalIp | NodeAddressType::ExternalIp)) {
                    prop_assert!(a.address.parse::<IpAddr>().is_ok_and(|ip| ip.to_string() == a.address));
                } else {
                    // A DNS name, as the contract says (issue 25, finding 9).
                    prop_assert!(super::fields::is_dns_subdomain(&a.address), "{a:?}");
                }
            }
        }
    }

    #[test]
    fn an_accepted_route_has_a_cidr_and_a_target(r in arb_route()) {
        if let Ok(r) = route("route", &Some(r)) {
            prop_assert!(cidr("c", &r.destination_cidr).is_ok());
            prop_assert!(r.blackhole || !r.target_node.is_empty());
        }
    }

    #[test]
    fn valid_services_pass(s in arb_valid_service()) {
        let ok = service("service", &Some(s.clone()));
        prop_assert!(ok.is_ok(), "{:?}", ok);
        prop_assert!(service_ref("service", &Some(s)).is_ok());
    }

    /// Each way of breaking a valid Service is refused naming what broke.
    #[test]
    fn a_broken_service_field_is_named(
        s in arb_valid_service(),
        breakage in 0usize..12,
        junk in "[^0-9a-fA-F:.]{1,8}",
        big in 65536i32..,
    ) {
        let mut s = s;
        let field = match breakage {
            0 => { s.namespace.clear(); "service.namespace" }
            1 => { s.name = "n".repeat(MAX_NAME_BYTES + 1); "service.name" }
            2 => { s.uid.clear(); "service.uid" }
            3 => { s.ports[0].protocol = 0; "service.ports[0].protocol" }
            4 => { s.ports[0].port = -big; "service.ports[0].port" }
            5 => { s.ports[0].node_port = big; "service.ports[0].node_port" }
            6 => { s.load_balancer_source_ranges = vec![junk]; "service.load_balancer_source_ranges[0]" }
            7 => { s.external_traffic_policy = big; "service.external_traffic_policy" }
            8 => { s.session_affinity = 0; "service.session_affinity" }
            9 => { s.load_balancer_ip = junk; "service.load_balancer_ip" }
            10 => { s.cluster_ips = vec![junk]; "service.cluster_ips[0]" }
            _ => { s.ports.clear(); "service.ports" }
        };
        let err = service("service", &Some(s)).unwrap_err();
        prop_assert_eq!(err.field, field);
    }
}
