//! Checks of whole contract messages (nodes, Services, load balancer
//! status, volumes, routes), built from the single-value checks.

use std::net::IpAddr;

use super::fields::{
    annotations, cidr, ip, is_dns_subdomain, known_enum, labels, name, optional_enum, required,
};
use super::{Checked, lazily, violation};
use crate::proto::{
    IpFamily, IpFamilyPolicy, LoadBalancerStatus, NodeAddress, NodeAddressType, NodeRef, Protocol,
    Route, Service, SessionAffinity, TrafficPolicy,
};

pub fn node_address(field: &str, a: &NodeAddress) -> Checked {
    let ty: NodeAddressType = lazily(|f| known_enum(f, a.r#type), || format!("{field}.type"))?;
    if a.address.is_empty() {
        return Err(violation(format!("{field}.address"), "is required"));
    }
    if matches!(
        ty,
        NodeAddressType::InternalIp | NodeAddressType::ExternalIp
    ) {
        lazily(|f| ip(f, &a.address), || format!("{field}.address"))?;
    } else if !is_dns_subdomain(&a.address) {
        // The contract says a DNS name: a provider may put it in a DNS
        // record or a command line as it is.
        return Err(violation(
            format!("{field}.address"),
            format!("{:?} is not a DNS name", a.address),
        ));
    }
    Ok(())
}

pub fn node_addresses(field: &str, addresses: &[NodeAddress]) -> Checked {
    for (i, a) in addresses.iter().enumerate() {
        lazily(|f| node_address(f, a), || format!("{field}[{i}]"))?;
    }
    Ok(())
}

pub fn node_ref(field: &str, node: &Option<NodeRef>) -> Checked<NodeRef> {
    let n = required(field, node)?;
    node_fields(field, n)?;
    Ok(n.clone())
}

/// A `BatchInstancesRequest`'s own rules (contract 1.4.0): 1 to
/// [`MAX_BATCH_QUERIES`](super::MAX_BATCH_QUERIES) queries, each with a key
/// of 1 to [`MAX_NAME_BYTES`](super::MAX_NAME_BYTES) bytes given once and a
/// question. A query's node is checked as the single calls check theirs,
/// query by query: one bad Node does not fail the batch.
pub fn batch_queries(queries: &[crate::proto::InstanceQuery]) -> Checked {
    use super::{MAX_BATCH_QUERIES, MAX_NAME_BYTES};
    if queries.is_empty() || queries.len() > MAX_BATCH_QUERIES {
        return Err(violation(
            "queries",
            format!(
                "has {} queries; 1 to {MAX_BATCH_QUERIES} are allowed",
                queries.len()
            ),
        ));
    }
    let mut keys = std::collections::HashSet::with_capacity(queries.len());
    for (i, q) in queries.iter().enumerate() {
        if q.key.is_empty() || q.key.len() > MAX_NAME_BYTES {
            return Err(violation(
                format!("queries[{i}].key"),
                format!("must be 1 to {MAX_NAME_BYTES} bytes"),
            ));
        }
        if !keys.insert(q.key.as_str()) {
            return Err(violation(
                format!("queries[{i}].key"),
                format!("{:?} is given twice; keys must be distinct", q.key),
            ));
        }
        if crate::provider::InstanceQuestion::from_proto(q.question).is_none() {
            return Err(violation(
                format!("queries[{i}].question"),
                format!("{} is not a question", q.question),
            ));
        }
    }
    Ok(())
}

/// Every node of a load balancer call is checked, so a call with 1,000
/// backends checks 1,000 nodes: without copying them, and with field names
/// (`nodes[i].labels[k]`) built only for a part that fails.
pub fn node_refs(field: &str, nodes: &[NodeRef]) -> Checked {
    for (i, n) in nodes.iter().enumerate() {
        lazily(|f| node_fields(f, n), || format!("{field}[{i}]"))?;
    }
    Ok(())
}

fn node_fields(field: &str, n: &NodeRef) -> Checked {
    lazily(|f| name(f, &n.name), || format!("{field}.name"))?;
    lazily(
        |f| node_addresses(f, &n.addresses),
        || format!("{field}.addresses"),
    )?;
    lazily(|f| labels(f, &n.labels), || format!("{field}.labels"))?;
    lazily(
        |f| annotations(f, &n.annotations),
        || format!("{field}.annotations"),
    )
}

pub fn load_balancer_status(field: &str, status: &LoadBalancerStatus) -> Checked {
    for (i, ing) in status.ingress.iter().enumerate() {
        let f = format!("{field}.ingress[{i}]");
        if ing.ip.is_empty() && ing.hostname.is_empty() {
            return Err(violation(f, "neither ip nor hostname is set"));
        }
        // What the apiserver accepts in status.loadBalancer.ingress[] (no
        // IPv4-mapped address), canonical as every IP of the contract: the
        // controller writes the status as it is.
        if !ing.ip.is_empty() {
            ip(&format!("{f}.ip"), &ing.ip)?;
        }
        if !ing.hostname.is_empty() {
            if !is_dns_subdomain(&ing.hostname) {
                return Err(violation(
                    format!("{f}.hostname"),
                    format!("{:?} is not a DNS name", ing.hostname),
                ));
            }
            if looks_like_ip(&ing.hostname) {
                return Err(violation(
                    format!("{f}.hostname"),
                    format!("{:?} is an IP address; use ip", ing.hostname),
                ));
            }
        }
        optional_enum::<crate::proto::IpMode>(&format!("{f}.ip_mode"), ing.ip_mode)?;
        if ing.ip_mode != 0 && ing.ip.is_empty() {
            return Err(violation(
                format!("{f}.ip_mode"),
                "is set without ip (Kubernetes allows ipMode only with an ip)",
            ));
        }
        for (j, p) in ing.ports.iter().enumerate() {
            known_enum::<Protocol>(&format!("{f}.ports[{j}].protocol"), p.protocol)?;
        }
    }
    Ok(())
}

/// An IP address as the apiserver reads one (Go's `ParseIPSloppy`), which
/// also takes IPv4 octets with leading zeros: "010.0.0.1" is no hostname.
fn looks_like_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok() || {
        let octets: Vec<&str> = s.split('.').collect();
        octets.len() == 4
            && octets.iter().all(|o| {
                (1..=3).contains(&o.len())
                    && o.bytes().all(|b| b.is_ascii_digit())
                    && o.parse::<u16>().is_ok_and(|n| n <= 255)
            })
    }
}

/// A Service as the reads and the delete need it: its identity, and any
/// ports well-formed, but none required (a Service whose ports were dropped
/// must still lose its load balancer).
pub fn service_ref(field: &str, service: &Option<Service>) -> Checked<Service> {
    let s = required(field, service)?;
    service_fields(field, s)?;
    Ok(s.clone())
}

/// A Service as EnsureLoadBalancer and UpdateLoadBalancer need it: at
/// least one port.
pub fn service(field: &str, service: &Option<Service>) -> Checked<Service> {
    let s = required(field, service)?;
    service_fields(field, s)?;
    if s.ports.is_empty() {
        return Err(violation(
            format!("{field}.ports"),
            "at least one port is required",
        ));
    }
    Ok(s.clone())
}

fn service_fields(field: &str, s: &Service) -> Checked {
    name(&format!("{field}.namespace"), &s.namespace)?;
    name(&format!("{field}.name"), &s.name)?;
    name(&format!("{field}.uid"), &s.uid)?;
    labels(&format!("{field}.labels"), &s.labels)?;
    annotations(&format!("{field}.annotations"), &s.annotations)?;
    for (i, p) in s.ports.iter().enumerate() {
        let f = format!("{field}.ports[{i}]");
        known_enum::<Protocol>(&format!("{f}.protocol"), p.protocol)?;
        if !(1..=65535).contains(&p.port) {
            return Err(violation(
                format!("{f}.port"),
                format!("{} is not 1-65535", p.port),
            ));
        }
        if !(0..=65535).contains(&p.node_port) {
            return Err(violation(
                format!("{f}.node_port"),
                format!("{} is not 0-65535", p.node_port),
            ));
        }
    }
    for (i, r) in s.load_balancer_source_ranges.iter().enumerate() {
        cidr(&format!("{field}.load_balancer_source_ranges[{i}]"), r)?;
    }
    known_enum::<TrafficPolicy>(
        &format!("{field}.external_traffic_policy"),
        s.external_traffic_policy,
    )?;
    optional_enum::<TrafficPolicy>(
        &format!("{field}.internal_traffic_policy"),
        s.internal_traffic_policy,
    )?;
    known_enum::<SessionAffinity>(&format!("{field}.session_affinity"), s.session_affinity)?;
    for (i, f) in s.ip_families.iter().enumerate() {
        known_enum::<IpFamily>(&format!("{field}.ip_families[{i}]"), *f)?;
    }
    optional_enum::<IpFamilyPolicy>(&format!("{field}.ip_family_policy"), s.ip_family_policy)?;
    if !s.load_balancer_ip.is_empty() {
        ip(&format!("{field}.load_balancer_ip"), &s.load_balancer_ip)?;
    }
    for (i, c) in s.cluster_ips.iter().enumerate() {
        if c != "None" {
            ip(&format!("{field}.cluster_ips[{i}]"), c)?;
        }
    }
    if let Some(status) = &s.status {
        load_balancer_status(&format!("{field}.status"), status)?;
    }
    Ok(())
}

pub fn volume(field: &str, volume: &Option<crate::proto::Volume>) -> Checked<crate::proto::Volume> {
    let v = required(field, volume)?;
    name(&format!("{field}.name"), &v.name)?;
    name(&format!("{field}.driver"), &v.driver)?;
    name(&format!("{field}.volume_id"), &v.volume_id)?;
    labels(&format!("{field}.labels"), &v.labels)?;
    Ok(v.clone())
}

pub fn route(field: &str, route: &Option<Route>) -> Checked<Route> {
    let r = required(field, route)?;
    cidr(&format!("{field}.destination_cidr"), &r.destination_cidr)?;
    if !r.blackhole {
        name(&format!("{field}.target_node"), &r.target_node)?;
    }
    node_addresses(
        &format!("{field}.target_node_addresses"),
        &r.target_node_addresses,
    )?;
    Ok(r.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ServicePort;
    use crate::validate::MAX_ANNOTATIONS_BYTES;

    fn service_fixture() -> Service {
        Service {
            namespace: "default".into(),
            name: "web".into(),
            uid: "0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11".into(),
            ports: vec![ServicePort {
                protocol: Protocol::Tcp as i32,
                port: 80,
                node_port: 30080,
                ..Default::default()
            }],
            external_traffic_policy: TrafficPolicy::Cluster as i32,
            session_affinity: SessionAffinity::None as i32,
            ..Default::default()
        }
    }

    #[test]
    fn a_broken_node_of_many_is_named_by_its_index() {
        let node = |name: &str| NodeRef {
            name: name.into(),
            addresses: vec![NodeAddress {
                r#type: NodeAddressType::InternalIp as i32,
                address: "10.0.0.1".into(),
            }],
            ..Default::default()
        };
        let mut nodes: Vec<NodeRef> = (0..5).map(|i| node(&format!("n{i}"))).collect();
        node_refs("nodes", &nodes).unwrap();
        nodes[3].addresses[0].address = "not-an-ip".into();
        let err = node_refs("nodes", &nodes).unwrap_err();
        assert_eq!(err.field, "nodes[3].addresses[0].address", "{err}");
        nodes[1].name.clear();
        let err = node_refs("nodes", &nodes).unwrap_err();
        assert_eq!(err.field, "nodes[1].name", "the first one that fails");
    }

    #[test]
    fn a_complete_service_passes() {
        service("service", &Some(service_fixture())).unwrap();
    }

    #[test]
    fn each_broken_service_field_is_named() {
        type Breaker = Box<dyn Fn(&mut Service)>;
        let cases: Vec<(&str, Breaker)> = vec![
            ("service.uid", Box::new(|s| s.uid.clear())),
            ("service.ports", Box::new(|s| s.ports.clear())),
            (
                "service.ports[0].protocol",
                Box::new(|s| s.ports[0].protocol = 0),
            ),
            (
                "service.ports[0].protocol",
                Box::new(|s| s.ports[0].protocol = 99),
            ),
            (
                "service.ports[0].port",
                Box::new(|s| s.ports[0].port = 70000),
            ),
            (
                "service.load_balancer_source_ranges[0]",
                Box::new(|s| s.load_balancer_source_ranges = vec!["10.0.0.0/33".into()]),
            ),
            (
                "service.external_traffic_policy",
                Box::new(|s| s.external_traffic_policy = 0),
            ),
            (
                "service.load_balancer_ip",
                Box::new(|s| s.load_balancer_ip = "1.2.3".into()),
            ),
            (
                "service.annotations",
                Box::new(|s| {
                    s.annotations
                        .insert("big".into(), "x".repeat(MAX_ANNOTATIONS_BYTES));
                }),
            ),
            (
                "service.labels[k]",
                Box::new(|s| {
                    s.labels.insert("k".into(), "v".repeat(64));
                }),
            ),
        ];
        for (field, break_it) in cases {
            let mut s = service_fixture();
            break_it(&mut s);
            let err = service("service", &Some(s)).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        assert_eq!(service("service", &None).unwrap_err().field, "service");
    }

    /// Found by proptests::an_accepted_status_is_one_kubernetes_accepts:
    /// each of these passed, and the apiserver refuses each in the
    /// Service's status, so the Service never showed its address.
    #[test]
    fn statuses_kubernetes_refuses_are_refused() {
        let one = |ip: &str, hostname: &str, ip_mode: crate::proto::IpMode| LoadBalancerStatus {
            ingress: vec![crate::proto::LoadBalancerIngress {
                ip: ip.into(),
                hostname: hostname.into(),
                ip_mode: ip_mode as i32,
                ports: vec![],
            }],
        };
        use crate::proto::IpMode::{Unspecified, Vip};
        for (status, field) in [
            (one("", "0", Vip), "s.ingress[0].ip_mode"),
            (one("", "lb.example.com", Vip), "s.ingress[0].ip_mode"),
            (one("", "010.0.0.1", Unspecified), "s.ingress[0].hostname"),
            (one("::ffff:1.2.3.4", "", Vip), "s.ingress[0].ip"),
        ] {
            let err = load_balancer_status("s", &status).unwrap_err();
            assert_eq!(err.field, field, "{status:?}");
        }
        for ok in [
            one("1.2.3.4", "", Vip),
            one("", "lb.example.com", Unspecified),
            one("", "1.2.3.4444", Unspecified),
            one("2001:db8::1", "lb.example.com", Vip),
        ] {
            load_balancer_status("s", &ok).unwrap();
        }
    }

    /// Issue 25, finding 9: the contract says DNS names for the DNS address
    /// types and canonical text for IPs; both were taken as anything.
    #[test]
    fn dns_addresses_are_dns_names_and_ips_are_canonical() {
        let a = |t: NodeAddressType, address: &str| NodeAddress {
            r#type: t as i32,
            address: address.into(),
        };
        use NodeAddressType::{ExternalDns, ExternalIp, Hostname, InternalDns, InternalIp};
        for bad in [
            a(Hostname, "$(rm -rf /)"),
            a(InternalDns, "-bad-.example"),
            a(ExternalDns, "Upper.Example"),
            a(Hostname, "n1."),
            a(InternalIp, "fd00:0:0:0:0:0:0:1"),
            a(InternalIp, "FD00::1"),
            a(ExternalIp, "::ffff:192.0.2.1"),
        ] {
            let err = node_address("a", &bad).unwrap_err();
            assert_eq!(err.field, "a.address", "{bad:?}");
        }
        for ok in [
            a(Hostname, "n1"),
            a(InternalDns, "n1.internal.example"),
            a(InternalIp, "fd00::1"),
            a(ExternalIp, "192.0.2.1"),
        ] {
            node_address("a", &ok).unwrap();
        }
        let ingress = |ip: &str| LoadBalancerStatus {
            ingress: vec![crate::proto::LoadBalancerIngress {
                ip: ip.into(),
                ..Default::default()
            }],
        };
        for bad in ["2001:DB8::1", "2001:db8:0:0:0:0:0:1", "2001:db8::0:1"] {
            let err = load_balancer_status("s", &ingress(bad)).unwrap_err();
            assert_eq!(err.field, "s.ingress[0].ip", "{bad}");
            assert!(err.problem.contains("canonical"), "{err}");
        }
        let mut s = service_fixture();
        s.load_balancer_ip = "::ffff:1.2.3.4".into();
        let err = service("service", &Some(s)).unwrap_err();
        assert_eq!(err.field, "service.load_balancer_ip");
        assert!(err.problem.contains("IPv4-mapped"), "{err}");
    }

    #[test]
    fn node_addresses_of_ip_types_must_parse() {
        let bad = NodeAddress {
            r#type: NodeAddressType::InternalIp as i32,
            address: "not-an-ip".into(),
        };
        assert_eq!(node_address("a", &bad).unwrap_err().field, "a.address");
        let host = NodeAddress {
            r#type: NodeAddressType::Hostname as i32,
            address: "node-1".into(),
        };
        assert!(node_address("a", &host).is_ok());
    }
}
