//! The Service as the provider is told about it: the contract's message,
//! validated as the provider's SDK would, with errors naming the Service
//! field to fix.

use ccm_provider_sdk::{proto, validate};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};

use super::{SOURCE_RANGES_ANNOTATION, ingress, spec};

/// A Service field the provider cannot be told about as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SpecError {
    pub field: String,
    pub problem: String,
}

/// The contract's own checks, run on the Service's fields under their
/// Kubernetes names: what the provider would refuse is refused here, naming
/// the field the user can fix.
impl From<validate::Violation> for SpecError {
    fn from(v: validate::Violation) -> Self {
        SpecError {
            field: v.field,
            problem: v.problem,
        }
    }
}

fn spec_error(field: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        problem: problem.into(),
    }
}

pub(super) fn parse_cidr(s: &str) -> Option<String> {
    crate::cidr::Cidr::parse(s).ok().map(|c| c.to_string())
}

/// The source ranges as canonical CIDRs: `spec.loadBalancerSourceRanges`,
/// else the comma-separated annotation (as upstream's
/// `GetLoadBalancerSourceRanges`). Current apiservers reject invalid
/// ranges at admission, but objects stored by older ones (which accepted
/// leading zeros such as "010.0.0.0/8") survive through validation
/// ratcheting: those are an error naming the entry rather than a guess.
pub fn source_ranges(svc: &Service) -> Result<Vec<String>, SpecError> {
    let from_spec = spec(svc)
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .unwrap_or_default();
    let (field, entries): (String, Vec<String>) = if !from_spec.is_empty() {
        ("spec.loadBalancerSourceRanges".into(), from_spec)
    } else if let Some(a) = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SOURCE_RANGES_ANNOTATION))
        .filter(|a| !a.trim().is_empty())
    {
        (
            format!("metadata.annotations[{SOURCE_RANGES_ANNOTATION}]"),
            a.split(',').map(str::to_owned).collect(),
        )
    } else {
        return Ok(Vec::new());
    };
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            parse_cidr(e.trim()).ok_or_else(|| {
                spec_error(
                    format!("{field}[{i}]"),
                    format!("{:?} is not a CIDR such as 10.0.0.0/8", e.trim()),
                )
            })
        })
        .collect()
}

fn protocol(p: Option<&str>) -> Option<proto::Protocol> {
    match p.unwrap_or("TCP") {
        "TCP" => Some(proto::Protocol::Tcp),
        "UDP" => Some(proto::Protocol::Udp),
        "SCTP" => Some(proto::Protocol::Sctp),
        _ => None,
    }
}

pub(super) fn protocol_name(p: i32) -> &'static str {
    match proto::Protocol::try_from(p) {
        Ok(proto::Protocol::Udp) => "UDP",
        Ok(proto::Protocol::Sctp) => "SCTP",
        _ => "TCP",
    }
}

fn traffic_policy(p: Option<&str>) -> proto::TrafficPolicy {
    match p {
        Some("Local") => proto::TrafficPolicy::Local,
        Some("Cluster") => proto::TrafficPolicy::Cluster,
        _ => proto::TrafficPolicy::Unspecified,
    }
}

/// The Service as GetLoadBalancer and EnsureLoadBalancerDeleted need it,
/// which never fails: the full description when it converts (ports may be
/// empty), else its identity alone (namespace, name, uid, labels and
/// annotations). A Service whose type changed and whose ports were dropped,
/// or whose spec became invalid, still loses its load balancer.
pub fn to_proto_ref(svc: &Service) -> proto::Service {
    convert(svc, false).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "describing the Service by its identity only");
        let mut identity = svc.clone();
        identity.spec = None;
        identity.status = None;
        if let Some(a) = identity.metadata.annotations.as_mut() {
            a.remove(SOURCE_RANGES_ANNOTATION);
        }
        convert(&identity, false).unwrap_or_else(|_| {
            // Labels or annotations the contract refuses (an apiserver
            // never stores such): namespace, name and uid alone.
            identity.metadata.labels = None;
            identity.metadata.annotations = None;
            convert(&identity, false).unwrap_or_default()
        })
    })
}

/// The Service as EnsureLoadBalancer and UpdateLoadBalancer need it: valid,
/// with at least one port.
pub fn to_proto(svc: &Service) -> Result<proto::Service, SpecError> {
    convert(svc, true)
}

fn convert(svc: &Service, require_ports: bool) -> Result<proto::Service, SpecError> {
    let meta = &svc.metadata;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    validate::name("metadata.namespace", &namespace)?;
    validate::name("metadata.name", &name)?;
    validate::name("metadata.uid", &uid)?;
    let labels = crate::k8s::string_map(&meta.labels);
    let annotations = crate::k8s::string_map(&meta.annotations);
    validate::labels("metadata.labels", &labels)?;
    validate::annotations("metadata.annotations", &annotations)?;
    let s = spec(svc).cloned().unwrap_or_default();
    let ports = s
        .ports
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, p)| {
            let protocol = protocol(p.protocol.as_deref()).ok_or_else(|| {
                spec_error(
                    format!("spec.ports[{i}].protocol"),
                    format!("{:?} is not TCP, UDP or SCTP", p.protocol),
                )
            })?;
            if !(1..=65535).contains(&p.port) {
                return Err(spec_error(
                    format!("spec.ports[{i}].port"),
                    format!("{} is not 1-65535", p.port),
                ));
            }
            let node_port = p.node_port.unwrap_or_default();
            if !(0..=65535).contains(&node_port) {
                return Err(spec_error(
                    format!("spec.ports[{i}].nodePort"),
                    format!("{node_port} is not 0-65535"),
                ));
            }
            Ok(proto::ServicePort {
                name: p.name.clone().unwrap_or_default(),
                protocol: protocol as i32,
                port: p.port,
                node_port,
                app_protocol: p.app_protocol.clone().unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, SpecError>>()?;
    if require_ports && ports.is_empty() {
        return Err(spec_error(
            "spec.ports",
            "a load balancer needs at least one port",
        ));
    }
    let ip_families = s
        .ip_families
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, f)| match f.as_str() {
            "IPv4" => Ok(proto::IpFamily::Ipv4 as i32),
            "IPv6" => Ok(proto::IpFamily::Ipv6 as i32),
            _ => Err(spec_error(
                format!("spec.ipFamilies[{i}]"),
                format!("{f:?} is not IPv4 or IPv6"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let load_balancer_ip = s.load_balancer_ip.clone().unwrap_or_default();
    if !load_balancer_ip.is_empty() {
        // The apiserver does not check this deprecated field.
        validate::ip("spec.loadBalancerIP", &load_balancer_ip)?;
    }
    let cluster_ips = s.cluster_ips.clone().unwrap_or_default();
    for (i, ip) in cluster_ips.iter().enumerate() {
        if ip != "None" {
            validate::ip(&format!("spec.clusterIPs[{i}]"), ip)?;
        }
    }
    let ip_family_policy = match s.ip_family_policy.as_deref() {
        Some("SingleStack") => proto::IpFamilyPolicy::SingleStack,
        Some("PreferDualStack") => proto::IpFamilyPolicy::PreferDualStack,
        Some("RequireDualStack") => proto::IpFamilyPolicy::RequireDualStack,
        _ => proto::IpFamilyPolicy::Unspecified,
    };
    let external = match traffic_policy(s.external_traffic_policy.as_deref()) {
        proto::TrafficPolicy::Unspecified => proto::TrafficPolicy::Cluster,
        p => p,
    };
    Ok(proto::Service {
        namespace,
        name,
        uid,
        labels,
        annotations,
        ports,
        load_balancer_class: s.load_balancer_class.clone(),
        load_balancer_source_ranges: source_ranges(svc)?,
        external_traffic_policy: external as i32,
        internal_traffic_policy: traffic_policy(s.internal_traffic_policy.as_deref()) as i32,
        health_check_node_port: s.health_check_node_port.unwrap_or_default(),
        session_affinity: match s.session_affinity.as_deref() {
            Some("ClientIP") => proto::SessionAffinity::ClientIp,
            _ => proto::SessionAffinity::None,
        } as i32,
        session_affinity_timeout_seconds: s
            .session_affinity_config
            .and_then(|c| c.client_ip)
            .and_then(|c| c.timeout_seconds),
        ip_families,
        ip_family_policy: ip_family_policy as i32,
        allocate_load_balancer_node_ports: s.allocate_load_balancer_node_ports,
        load_balancer_ip,
        cluster_ips,
        status: Some(proto::LoadBalancerStatus {
            // The current status is a hint for the provider and the Ensure
            // rewrites it: entries the contract refuses (written by someone
            // else, or kept from older apiserver rules) are left out
            // rather than failing the Ensure that would replace them.
            ingress: ingress(svc)
                .iter()
                .map(ingress_to_proto)
                .filter(ingress_acceptable)
                .collect(),
        }),
    })
}

/// Whether the contract accepts `i` as an ingress point.
pub(super) fn ingress_acceptable(i: &proto::LoadBalancerIngress) -> bool {
    let one = proto::LoadBalancerStatus {
        ingress: vec![i.clone()],
    };
    validate::load_balancer_status("status", &one).is_ok()
}

pub(super) fn ingress_to_proto(i: &LoadBalancerIngress) -> proto::LoadBalancerIngress {
    proto::LoadBalancerIngress {
        ip: i.ip.clone().unwrap_or_default(),
        hostname: i.hostname.clone().unwrap_or_default(),
        ip_mode: match i.ip_mode.as_deref() {
            Some("VIP") => proto::IpMode::Vip,
            Some("Proxy") => proto::IpMode::Proxy,
            _ => proto::IpMode::Unspecified,
        } as i32,
        ports: i
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some(proto::PortStatus {
                    port: p.port,
                    protocol: protocol(Some(&p.protocol))? as i32,
                    error: p.error.clone().unwrap_or_default(),
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServiceSpec, ServiceStatus};

    use crate::testing::lb_service;

    #[test]
    fn source_ranges_are_strict_and_name_the_entry() {
        let mut s = lb_service();
        assert_eq!(source_ranges(&s).unwrap(), Vec::<String>::new());
        s.metadata.annotations = Some(
            [(
                SOURCE_RANGES_ANNOTATION.to_owned(),
                " 10.0.0.0/8, 2001:db8::/32".to_owned(),
            )]
            .into(),
        );
        assert_eq!(
            source_ranges(&s).unwrap(),
            vec!["10.0.0.0/8", "2001:db8::/32"]
        );
        s.spec.as_mut().unwrap().load_balancer_source_ranges =
            Some(vec!["192.168.0.0/16".into(), "010.1.0.0/16".into()]);
        let e = source_ranges(&s).unwrap_err();
        assert_eq!(e.field, "spec.loadBalancerSourceRanges[1]");
        assert!(e.problem.contains("010.1.0.0/16"), "{e}");
        s.spec.as_mut().unwrap().load_balancer_source_ranges = None;
        s.metadata.annotations = Some(
            [(
                SOURCE_RANGES_ANNOTATION.to_owned(),
                "10.0.0.0/33".to_owned(),
            )]
            .into(),
        );
        assert_eq!(
            source_ranges(&s).unwrap_err().field,
            format!("metadata.annotations[{SOURCE_RANGES_ANNOTATION}][0]")
        );
    }

    #[test]
    fn to_proto_carries_the_service() {
        let mut s = lb_service();
        s.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
        s.spec.as_mut().unwrap().health_check_node_port = Some(31000);
        let p = to_proto(&s).unwrap();
        assert_eq!(p.uid, "u-1");
        assert_eq!(p.ports[0].port, 80);
        assert_eq!(p.ports[0].node_port, 30080);
        assert_eq!(
            p.external_traffic_policy,
            proto::TrafficPolicy::Local as i32
        );
        assert_eq!(p.health_check_node_port, 31000);
        ccm_provider_sdk::validate::service("service", &Some(p)).expect("valid per the contract");
        s.spec.as_mut().unwrap().ports = Some(vec![]);
        assert_eq!(to_proto(&s).unwrap_err().field, "spec.ports");
    }

    /// Found by proptests::what_is_sent_is_what_the_provider_accepts: each
    /// of these was sent as it was and refused by the provider's SDK as a
    /// malformed request (the apiserver stores loadBalancerIP "foo" as it
    /// is, and a status another controller wrote may hold anything). Now
    /// the Service's own field is named, or the stale entry left out.
    /// Issue 25, finding 9: "::ffff:1.2.3.4" was forwarded while
    /// "010.001.002.003" was refused; both are IPs in a form other than
    /// the canonical one the contract sends, and both are refused naming
    /// the field.
    #[test]
    fn a_load_balancer_ip_not_in_canonical_form_is_refused() {
        for (ip, problem) in [
            ("::ffff:1.2.3.4", "IPv4-mapped"),
            ("010.001.002.003", "not an IP address"),
            ("2001:DB8::1", "canonical"),
            ("2001:db8:0:0:0:0:0:1", "canonical"),
        ] {
            let mut s = lb_service();
            s.spec.as_mut().unwrap().load_balancer_ip = Some(ip.into());
            let err = to_proto(&s).unwrap_err();
            assert_eq!(err.field, "spec.loadBalancerIP", "{ip}");
            assert!(err.problem.contains(problem), "{ip}: {}", err.problem);
        }
        for ip in ["1.2.3.4", "2001:db8::1"] {
            let mut s = lb_service();
            s.spec.as_mut().unwrap().load_balancer_ip = Some(ip.into());
            assert_eq!(to_proto(&s).unwrap().load_balancer_ip, ip);
        }
    }

    #[test]
    fn what_the_provider_would_refuse_is_named_here() {
        type Breaker = Box<dyn Fn(&mut Service)>;
        fn spec(s: &mut Service) -> &mut ServiceSpec {
            s.spec.as_mut().unwrap()
        }
        let cases: Vec<(&str, Breaker)> = vec![
            (
                "spec.ports[0].port",
                Box::new(|s| spec(s).ports.as_mut().unwrap()[0].port = 0),
            ),
            (
                "spec.ports[0].nodePort",
                Box::new(|s| spec(s).ports.as_mut().unwrap()[0].node_port = Some(70000)),
            ),
            (
                "spec.loadBalancerIP",
                Box::new(|s| spec(s).load_balancer_ip = Some("foo".into())),
            ),
            (
                "spec.clusterIPs[0]",
                Box::new(|s| spec(s).cluster_ips = Some(vec![String::new()])),
            ),
            (
                "spec.ipFamilies[0]",
                Box::new(|s| spec(s).ip_families = Some(vec!["IPv5".into()])),
            ),
            (
                "metadata.labels[]",
                Box::new(|s| s.metadata.labels = Some([(String::new(), "x".into())].into())),
            ),
            ("metadata.uid", Box::new(|s| s.metadata.uid = None)),
        ];
        for (field, break_it) in cases {
            let mut s = lb_service();
            break_it(&mut s);
            assert_eq!(to_proto(&s).unwrap_err().field, field);
            // Reads and deletes still describe the Service validly when
            // its identity is valid.
            if field != "metadata.uid" {
                let r = to_proto_ref(&s);
                ccm_provider_sdk::validate::service_ref("service", &Some(r)).unwrap();
            }
        }
        let mut s = lb_service();
        s.status = Some(ServiceStatus {
            load_balancer: Some(k8s_openapi::api::core::v1::LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress::default(),
                    LoadBalancerIngress {
                        ip: Some("192.0.2.1".into()),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        });
        let p = to_proto(&s).unwrap();
        assert_eq!(
            p.status.as_ref().unwrap().ingress.len(),
            1,
            "the empty entry is left out"
        );
        ccm_provider_sdk::validate::service("service", &Some(p)).unwrap();
    }
}
