//! Contract validation shared by both sides: the server checks requests
//! before a provider sees them, the client checks answers before the
//! controller acts on them. Every failure names the offending field.

use std::net::IpAddr;

use crate::proto::{
    IpFamily, IpFamilyPolicy, LoadBalancerStatus, NodeAddress, NodeAddressType, NodeRef, Protocol,
    Route, Service, SessionAffinity, TrafficPolicy,
};

/// A contract violation: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Violation {
    pub field: String,
    pub problem: String,
}

pub type Checked<T = ()> = Result<T, Violation>;

fn violation(field: impl Into<String>, problem: impl Into<String>) -> Violation {
    Violation {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Longest object name accepted (Kubernetes' DNS-1123 subdomain limit).
pub const MAX_NAME_BYTES: usize = 253;
/// Largest total size of one object's annotations (Kubernetes' limit).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Longest label value (Kubernetes' limit).
pub const MAX_LABEL_VALUE_BYTES: usize = 63;
/// Longest label key: a 253-byte prefix, '/', a 63-byte name.
pub const MAX_LABEL_KEY_BYTES: usize = 253 + 1 + 63;

pub fn required<'a, T>(field: &str, value: &'a Option<T>) -> Checked<&'a T> {
    value
        .as_ref()
        .ok_or_else(|| violation(field, "is required"))
}

pub fn name(field: &str, value: &str) -> Checked {
    if value.is_empty() {
        return Err(violation(field, "is required"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(violation(
            field,
            format!("is {} bytes, more than {MAX_NAME_BYTES}", value.len()),
        ));
    }
    Ok(())
}

pub fn ip(field: &str, value: &str) -> Checked<IpAddr> {
    value
        .parse()
        .map_err(|_| violation(field, format!("{value:?} is not an IP address")))
}

/// Parses "address/prefix".
pub fn cidr(field: &str, value: &str) -> Checked<(IpAddr, u8)> {
    let bad = || violation(field, format!("{value:?} is not a CIDR"));
    let (addr, prefix) = value.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err(bad());
    }
    Ok((addr, prefix))
}

/// An enum field that must hold a known, non-zero value.
pub fn known_enum<E: TryFrom<i32>>(field: &str, value: i32) -> Checked<E> {
    if value == 0 {
        return Err(violation(field, "is UNSPECIFIED"));
    }
    E::try_from(value).map_err(|_| violation(field, format!("unknown enum value {value}")))
}

/// An enum field where zero means "unset" but other values must be known.
pub fn optional_enum<E: TryFrom<i32>>(field: &str, value: i32) -> Checked {
    if value != 0 && E::try_from(value).is_err() {
        return Err(violation(field, format!("unknown enum value {value}")));
    }
    Ok(())
}

/// Kubernetes' label-value syntax: empty, or at most 63 characters of
/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn label_value(field: &str, v: &str) -> Checked {
    if v.len() > MAX_LABEL_VALUE_BYTES {
        return Err(violation(
            field,
            format!(
                "label value is {} bytes, more than {MAX_LABEL_VALUE_BYTES}",
                v.len()
            ),
        ));
    }
    if !v.is_empty() && !is_label_name(v) {
        return Err(violation(
            field,
            format!("{v:?} is not a valid label value"),
        ));
    }
    Ok(())
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_NAME_BYTES
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Kubernetes' label-key syntax: an optional DNS-subdomain prefix and `/`,
/// then a name of at most 63 characters.
pub fn label_key(field: &str, k: &str) -> Checked {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if k.len() > MAX_LABEL_KEY_BYTES
        || !is_label_name(name)
        || prefix.is_some_and(|p| !is_dns_subdomain(p))
    {
        return Err(violation(field, format!("{k:?} is not a valid label key")));
    }
    Ok(())
}

pub fn labels<'a>(
    field: &str,
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Checked {
    for (k, v) in labels {
        let f = format!("{field}[{k}]");
        label_key(&f, k)?;
        label_value(&f, v)?;
    }
    Ok(())
}

/// A providerID: `<scheme>://<id>`, no whitespace.
pub fn provider_id(field: &str, v: &str) -> Checked {
    name(field, v)?;
    match v.split_once("://") {
        Some((scheme, id))
            if !scheme.is_empty() && !id.is_empty() && !v.chars().any(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err(violation(
            field,
            format!("{v:?} is not of the form <scheme>://<id>"),
        )),
    }
}

pub fn annotations<'a>(
    field: &str,
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Checked {
    let mut total = 0usize;
    for (k, v) in annotations {
        if k.is_empty() {
            return Err(violation(field, "annotation key is empty"));
        }
        total += k.len() + v.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        return Err(violation(
            field,
            format!("annotations total {total} bytes, more than {MAX_ANNOTATIONS_BYTES}"),
        ));
    }
    Ok(())
}

pub fn node_address(field: &str, a: &NodeAddress) -> Checked {
    let ty: NodeAddressType = known_enum(&format!("{field}.type"), a.r#type)?;
    if a.address.is_empty() {
        return Err(violation(format!("{field}.address"), "is required"));
    }
    if matches!(
        ty,
        NodeAddressType::InternalIp | NodeAddressType::ExternalIp
    ) {
        ip(&format!("{field}.address"), &a.address)?;
    }
    Ok(())
}

pub fn node_addresses(field: &str, addresses: &[NodeAddress]) -> Checked {
    for (i, a) in addresses.iter().enumerate() {
        node_address(&format!("{field}[{i}]"), a)?;
    }
    Ok(())
}

pub fn node_ref(field: &str, node: &Option<NodeRef>) -> Checked<NodeRef> {
    let n = required(field, node)?;
    name(&format!("{field}.name"), &n.name)?;
    node_addresses(&format!("{field}.addresses"), &n.addresses)?;
    labels(&format!("{field}.labels"), &n.labels)?;
    annotations(&format!("{field}.annotations"), &n.annotations)?;
    Ok(n.clone())
}

pub fn node_refs(field: &str, nodes: &[NodeRef]) -> Checked {
    for (i, n) in nodes.iter().enumerate() {
        node_ref(&format!("{field}[{i}]"), &Some(n.clone()))?;
    }
    Ok(())
}

pub fn load_balancer_status(field: &str, status: &LoadBalancerStatus) -> Checked {
    for (i, ing) in status.ingress.iter().enumerate() {
        let f = format!("{field}.ingress[{i}]");
        if ing.ip.is_empty() && ing.hostname.is_empty() {
            return Err(violation(f, "neither ip nor hostname is set"));
        }
        if !ing.ip.is_empty() {
            ip(&format!("{f}.ip"), &ing.ip)?;
        }
        if !ing.hostname.is_empty() {
            // What the apiserver accepts in status.loadBalancer.ingress[].hostname.
            if !is_dns_subdomain(&ing.hostname) {
                return Err(violation(
                    format!("{f}.hostname"),
                    format!("{:?} is not a DNS name", ing.hostname),
                ));
            }
            if ing.hostname.parse::<IpAddr>().is_ok() {
                return Err(violation(
                    format!("{f}.hostname"),
                    format!("{:?} is an IP address; use ip", ing.hostname),
                ));
            }
        }
        optional_enum::<crate::proto::IpMode>(&format!("{f}.ip_mode"), ing.ip_mode)?;
        for (j, p) in ing.ports.iter().enumerate() {
            known_enum::<Protocol>(&format!("{f}.ports[{j}].protocol"), p.protocol)?;
        }
    }
    Ok(())
}

pub fn service(field: &str, service: &Option<Service>) -> Checked<Service> {
    let s = required(field, service)?;
    name(&format!("{field}.namespace"), &s.namespace)?;
    name(&format!("{field}.name"), &s.name)?;
    name(&format!("{field}.uid"), &s.uid)?;
    labels(&format!("{field}.labels"), &s.labels)?;
    annotations(&format!("{field}.annotations"), &s.annotations)?;
    if s.ports.is_empty() {
        return Err(violation(
            format!("{field}.ports"),
            "at least one port is required",
        ));
    }
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
    Ok(s.clone())
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

    pub(crate) fn service_fixture() -> Service {
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

    #[test]
    fn label_syntax_is_kubernetes_syntax() {
        for ok in ["a", "example.com/rack", "team_1.x-y", "k8s.io/x"] {
            assert!(label_key("f", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Example.com/x",
            "a/b/c",
            "/x",
            "x/",
            "has space",
        ] {
            assert!(label_key("f", bad).is_err(), "{bad}");
        }
        assert!(label_value("f", "").is_ok());
        assert!(label_value("f", "zone-a_1.b").is_ok());
        for bad in ["-x", "x y", "x/y", &"v".repeat(64)] {
            assert!(label_value("f", bad).is_err(), "{bad}");
        }
        assert!(provider_id("f", "fake://i-1").is_ok());
        for bad in ["", "i-1", "://x", "fake://", "fake://a b"] {
            assert!(provider_id("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs_and_ips() {
        assert!(cidr("f", "10.0.0.0/8").is_ok());
        assert!(cidr("f", "fd00::/64").is_ok());
        for bad in ["10.0.0.0", "10.0.0.0/", "10.0.0/8", "fd00::/129", "x/1"] {
            assert!(cidr("f", bad).is_err(), "{bad}");
        }
        assert!(ip("f", "::1").is_ok());
        assert!(ip("f", "256.0.0.1").is_err());
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
