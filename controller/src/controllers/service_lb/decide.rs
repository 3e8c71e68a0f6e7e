//! What the service-lb-controller decides about a Service, without I/O:
//! whether it wants a load balancer, what the provider is told about it,
//! which Nodes are backends, and the status the Service should show.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use ccm_provider_sdk::{proto, validate};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, Node, PortStatus, Service, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::k8s::node;

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// The taint cluster-autoscaler puts on a Node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
pub const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
/// The Service condition this controller owns (not upstream: see
/// docs/controller.md).
pub const CONDITION: &str = "LoadBalancerReady";

pub fn key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

fn spec(svc: &Service) -> Option<&ServiceSpec> {
    svc.spec.as_ref()
}

/// `type: LoadBalancer` without a `loadBalancerClass`.
pub fn wants_load_balancer(svc: &Service) -> bool {
    spec(svc).is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none()
    })
}

pub fn has_finalizer(svc: &Service) -> bool {
    svc.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// The load balancers no Service wants: none has the entry's uid, or the one
/// that has it neither wants a load balancer nor carries our finalizer (a
/// Service that still carries it is the normal delete path's).
pub fn orphans<'a>(
    listed: &'a [ccm_provider_sdk::LoadBalancerEntry],
    services: &[std::sync::Arc<Service>],
) -> Vec<&'a ccm_provider_sdk::LoadBalancerEntry> {
    let wanted: std::collections::HashSet<&str> = services
        .iter()
        .filter(|s| keeps_its_load_balancer(s))
        .filter_map(|s| s.metadata.uid.as_deref())
        .collect();
    listed
        .iter()
        .filter(|e| !wanted.contains(e.service_uid.as_str()))
        .collect()
}

/// The Service's load balancer is not an orphan: it wants one, or still
/// holds our finalizer (its delete is ours to reconcile).
pub fn keeps_its_load_balancer(svc: &Service) -> bool {
    wants_load_balancer(svc) || has_finalizer(svc)
}

/// The finalizer is present and the Service is being deleted or no longer
/// wants our load balancer. (Upstream checks only `type`, so a Service that
/// gains a `loadBalancerClass` would keep its LB; a class cannot be set on
/// an existing LoadBalancer Service, so the difference is moot in practice.)
pub fn needs_cleanup(svc: &Service) -> bool {
    has_finalizer(svc) && (svc.metadata.deletion_timestamp.is_some() || !wants_load_balancer(svc))
}

/// A hash of everything that makes upstream's `needsUpdate` true: two
/// Services with the same fingerprint need no new EnsureLoadBalancer.
pub fn fingerprint(svc: &Service) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let s = spec(svc).cloned().unwrap_or_default();
    wants_load_balancer(svc).hash(&mut h);
    svc.metadata.uid.hash(&mut h);
    svc.metadata
        .annotations
        .as_ref()
        .map(|a| a.iter().collect::<Vec<_>>())
        .hash(&mut h);
    s.load_balancer_source_ranges.hash(&mut h);
    for p in s.ports.iter().flatten() {
        (
            &p.name,
            &p.protocol,
            p.port,
            p.node_port,
            serde_json::to_string(&p.target_port).ok(),
            &p.app_protocol,
        )
            .hash(&mut h);
    }
    s.session_affinity.hash(&mut h);
    serde_json::to_string(&s.session_affinity_config)
        .ok()
        .hash(&mut h);
    s.load_balancer_ip.hash(&mut h);
    s.external_ips.hash(&mut h);
    s.external_traffic_policy.hash(&mut h);
    s.health_check_node_port.hash(&mut h);
    s.ip_families.as_ref().map(Vec::len).hash(&mut h);
    h.finish()
}

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

fn parse_cidr(s: &str) -> Option<String> {
    let (addr, len) = s.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if !len.bytes().all(|b| b.is_ascii_digit()) {
        return None; // Rust's integer parser alone takes "+8"
    }
    let len: u8 = len.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then(|| format!("{addr}/{len}"))
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

fn protocol_name(p: i32) -> &'static str {
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
fn ingress_acceptable(i: &proto::LoadBalancerIngress) -> bool {
    let one = proto::LoadBalancerStatus {
        ingress: vec![i.clone()],
    };
    validate::load_balancer_status("status", &one).is_ok()
}

/// `strconv.ParseBool`'s false values: only these keep a labelled node in.
fn is_false(v: &str) -> bool {
    matches!(v, "0" | "f" | "F" | "false" | "FALSE" | "False")
}

/// Upstream's stable node-set predicates: not being deleted, not excluded
/// by label, not about to be removed by cluster-autoscaler. Readiness is
/// deliberately not considered (a flapping kubelet must not churn LBs).
pub fn is_backend(n: &Node) -> bool {
    n.metadata.deletion_timestamp.is_none()
        && n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(EXCLUDE_LABEL))
            .is_none_or(|v| is_false(v))
        && !node::has_taint(n, TO_BE_DELETED_TAINT)
}

/// The backends among `nodes`, sorted by name so equal sets compare equal.
pub fn backends<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<proto::NodeRef> {
    let mut out: Vec<proto::NodeRef> = nodes
        .into_iter()
        .filter(|n| is_backend(n))
        .map(node::node_ref)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What decides whether backends changed, as a digest: each backend's name,
/// providerID (upstream's `nodesSufficientlyEqual`), and beyond upstream its
/// labels and addresses, which a provider may select or route by (a Node
/// gaining a provider's "ingress" label must reach UpdateLoadBalancer).
/// Annotations are left out: they change often and select nothing. Each
/// Service's record keeps only this digest: with 5,000 Services and 5,000
/// Nodes, a copy of the set per Service would be 25 million entries.
pub type BackendDigest = u64;

/// The digest of a backend set; the order of nodes, labels and addresses
/// does not matter.
pub fn backend_set(nodes: &[proto::NodeRef]) -> BackendDigest {
    let mut each: Vec<u64> = nodes
        .iter()
        .map(|n| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            n.name.hash(&mut h);
            n.provider_id.hash(&mut h);
            let labels: BTreeSet<(&String, &String)> = n.labels.iter().collect();
            labels.hash(&mut h);
            let addresses: BTreeSet<(i32, &String)> =
                n.addresses.iter().map(|a| (a.r#type, &a.address)).collect();
            addresses.hash(&mut h);
            h.finish()
        })
        .collect();
    each.sort_unstable();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    each.hash(&mut h);
    h.finish()
}

/// `names` for an event: at most 20, then how many more.
pub fn node_names_for_event(nodes: &[proto::NodeRef]) -> String {
    const MAX: usize = 20;
    let mut names: Vec<&str> = nodes.iter().take(MAX).map(|n| n.name.as_str()).collect();
    let more = nodes.len().saturating_sub(MAX);
    let more_text = format!("<{more} more>");
    if more > 0 {
        names.push(&more_text);
    }
    format!("[{}]", names.join(" "))
}

pub fn ingress(svc: &Service) -> &[LoadBalancerIngress] {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_deref())
        .unwrap_or_default()
}

fn ingress_to_proto(i: &LoadBalancerIngress) -> proto::LoadBalancerIngress {
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

/// The provider's status as Kubernetes writes it. The SDK has validated it.
pub fn ingress_from_proto(status: &proto::LoadBalancerStatus) -> Vec<LoadBalancerIngress> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    status
        .ingress
        .iter()
        .map(|i| LoadBalancerIngress {
            ip: opt(&i.ip),
            hostname: opt(&i.hostname),
            ip_mode: match proto::IpMode::try_from(i.ip_mode) {
                Ok(proto::IpMode::Vip) => Some("VIP".into()),
                Ok(proto::IpMode::Proxy) => Some("Proxy".into()),
                _ => None,
            },
            ports: (!i.ports.is_empty()).then(|| {
                i.ports
                    .iter()
                    .map(|p| PortStatus {
                        port: p.port,
                        protocol: protocol_name(p.protocol).into(),
                        error: opt(&p.error),
                    })
                    .collect()
            }),
        })
        .collect()
}

/// Upstream's `LoadBalancerStatusEqual`, which ignores order: the
/// apiserver defaults `ipMode` to VIP on IPv4/IPv6 ingress, so an unset
/// ipMode equals VIP.
pub fn ingress_equal(a: &[LoadBalancerIngress], b: &[LoadBalancerIngress]) -> bool {
    let norm = |v: &[LoadBalancerIngress]| -> BTreeSet<String> {
        v.iter()
            .map(|i| {
                let mut i = i.clone();
                if i.ip.is_some() && i.ip_mode.is_none() {
                    i.ip_mode = Some("VIP".into());
                }
                serde_json::to_string(&i).unwrap_or_default()
            })
            .collect()
    };
    a.len() == b.len() && norm(a) == norm(b)
}

/// Where the load balancer stands, for the Service's condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub ready: bool,
    /// CamelCase, as Condition.reason requires.
    pub reason: String,
    pub message: String,
}

impl Standing {
    pub fn ready() -> Self {
        Standing {
            ready: true,
            reason: "Ensured".into(),
            message: "The provider has ensured the load balancer".into(),
        }
    }

    pub fn not_ready(reason: &str, message: impl Into<String>) -> Self {
        Standing {
            ready: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

pub fn condition(svc: &Service) -> Option<&Condition> {
    svc.status
        .as_ref()
        .and_then(|s: &ServiceStatus| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == CONDITION))
}

/// Condition messages are limited to 32 KiB; ours are a sentence or an
/// error, but a provider's message is not under our control.
fn bounded(message: &str) -> String {
    const MAX: usize = 1024;
    if message.len() <= MAX {
        return message.to_owned();
    }
    let mut end = MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// The condition to write, or `None` when the Service already shows it.
/// The transition time moves only when the status flips.
pub fn condition_update(svc: &Service, standing: &Standing, now: Time) -> Option<Condition> {
    let status = if standing.ready { "True" } else { "False" };
    let generation = svc.metadata.generation;
    let message = bounded(&standing.message);
    let current = condition(svc);
    if let Some(c) = current
        && c.status == status
        && c.reason == standing.reason
        && c.message == message
        && c.observed_generation == generation
    {
        return None;
    }
    let last_transition_time = match current {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now,
    };
    Some(Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: standing.reason.clone(),
        message,
        observed_generation: generation,
        last_transition_time,
    })
}

/// Annotation keys under one of the provider's prefixes that it does not
/// know, each with the known key closest to it (if one is close enough to
/// be a typo).
pub fn unknown_annotations(
    svc: &Service,
    schema: &proto::AnnotationSchema,
) -> Vec<(String, Option<String>)> {
    let Some(annotations) = svc.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    annotations
        .keys()
        .filter(|k| schema.prefixes.iter().any(|p| k.starts_with(p.as_str())))
        .filter(|k| !schema.known_keys.contains(k))
        .map(|k| {
            let chars = k.chars().count();
            let close_enough = |known: &str| (known.len() / 4).max(2);
            let closest = schema
                .known_keys
                .iter()
                // The length difference is a lower bound of the distance:
                // keys too long or short to be close are never compared, so
                // a provider's huge known key costs no k x n table.
                .filter(|known| chars.abs_diff(known.chars().count()) <= close_enough(known))
                .map(|known| (edit_distance(k, known), known))
                .min()
                .filter(|(d, known)| *d <= close_enough(known))
                .map(|(_, known)| known.clone());
            (k.clone(), closest)
        })
        .collect()
}

/// Levenshtein distance with adjacent transpositions counted as one edit
/// (optimal string alignment): "intrenal" is one edit from "internal".
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use kube::api::ObjectMeta;

    use crate::testing::lb_service;

    fn node_with(name: &str, label: Option<&str>, taint: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: label.map(|v| [(EXCLUDE_LABEL.to_owned(), v.to_owned())].into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: taint.map(|k| {
                    vec![Taint {
                        key: k.into(),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn which_services_want_a_load_balancer() {
        let mut s = lb_service();
        assert!(wants_load_balancer(&s));
        s.spec.as_mut().unwrap().load_balancer_class = Some("other".into());
        assert!(!wants_load_balancer(&s));
        s.spec.as_mut().unwrap().load_balancer_class = None;
        s.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(!wants_load_balancer(&s));
        assert!(!needs_cleanup(&s), "no finalizer, nothing to clean");
        s.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert!(needs_cleanup(&s));
        let mut deleting = lb_service();
        deleting.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert!(!needs_cleanup(&deleting));
        deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert!(needs_cleanup(&deleting));
    }

    #[test]
    fn fingerprint_follows_upstream_needs_update() {
        let base = lb_service();
        let f = fingerprint(&base);
        let mut labels = base.clone();
        labels.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        labels.metadata.finalizers = Some(vec![FINALIZER.into()]);
        labels.spec.as_mut().unwrap().selector = Some([("app".to_owned(), "x".to_owned())].into());
        assert_eq!(
            fingerprint(&labels),
            f,
            "labels/finalizers/selector do not count"
        );
        let mut port = base.clone();
        port.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
        assert_ne!(fingerprint(&port), f);
        let mut ann = base.clone();
        ann.metadata.annotations = Some([("any".to_owned(), "thing".to_owned())].into());
        assert_ne!(fingerprint(&ann), f, "any annotation counts");
        let mut etp = base.clone();
        etp.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
        assert_ne!(fingerprint(&etp), f);
    }

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

    #[test]
    fn backend_predicates_match_upstream() {
        let nodes = [
            node_with("plain", None, None),
            node_with("excluded", Some("true"), None),
            node_with("excluded-empty", Some(""), None),
            node_with("excluded-garbage", Some("yes please"), None),
            node_with("included-false", Some("false"), None),
            node_with("included-zero", Some("0"), None),
            node_with("autoscaled-away", None, Some(TO_BE_DELETED_TAINT)),
            node_with("other-taint", None, Some("dedicated")),
        ];
        let names: Vec<String> = backends(&nodes).into_iter().map(|n| n.name).collect();
        assert_eq!(
            names,
            vec!["included-false", "included-zero", "other-taint", "plain"]
        );
        let mut deleting = node_with("deleting", None, None);
        deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert!(!is_backend(&deleting));
    }

    #[test]
    fn backend_digest_follows_names_provider_ids_labels_and_addresses() {
        let node = |name: &str, label: &str, address: &str| proto::NodeRef {
            name: name.into(),
            provider_id: format!("fake://{name}"),
            labels: [("pool".to_owned(), label.to_owned())].into(),
            annotations: [("changes".to_owned(), "often".to_owned())].into(),
            addresses: vec![proto::NodeAddress {
                r#type: proto::NodeAddressType::InternalIp as i32,
                address: address.into(),
            }],
            ..Default::default()
        };
        let a = node("a", "web", "10.0.0.1");
        let b = node("b", "web", "10.0.0.2");
        let d = backend_set(&[a.clone(), b.clone()]);
        assert_eq!(d, backend_set(&[b.clone(), a.clone()]), "order");
        assert_ne!(d, backend_set(std::slice::from_ref(&a)), "membership");
        let mut moved = b.clone();
        moved.provider_id = "fake://x".into();
        assert_ne!(d, backend_set(&[a.clone(), moved]), "providerID");
        assert_ne!(
            d,
            backend_set(&[a.clone(), node("b", "ingress", "10.0.0.2")]),
            "labels"
        );
        assert_ne!(
            d,
            backend_set(&[a.clone(), node("b", "web", "10.0.0.3")]),
            "addresses"
        );
        let mut noisy = b.clone();
        noisy.annotations.insert("changes".into(), "again".into());
        assert_eq!(d, backend_set(&[a, noisy]), "annotations do not count");
    }

    #[test]
    fn event_names_are_limited_to_twenty() {
        let nodes: Vec<proto::NodeRef> = (0..23)
            .map(|i| proto::NodeRef {
                name: format!("n{i}"),
                ..Default::default()
            })
            .collect();
        let text = node_names_for_event(&nodes);
        assert!(text.starts_with("[n0 n1 "), "{text}");
        assert!(text.ends_with("n19 <3 more>]"), "{text}");
    }

    #[test]
    fn ingress_round_trips_and_compares_like_upstream() {
        let status = proto::LoadBalancerStatus {
            ingress: vec![
                proto::LoadBalancerIngress {
                    ip: "192.0.2.1".into(),
                    ports: vec![proto::PortStatus {
                        port: 80,
                        protocol: proto::Protocol::Tcp as i32,
                        error: String::new(),
                    }],
                    ..Default::default()
                },
                proto::LoadBalancerIngress {
                    hostname: "lb.example.com".into(),
                    ..Default::default()
                },
            ],
        };
        let k8s = ingress_from_proto(&status);
        assert_eq!(k8s[0].ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(k8s[0].ports.as_ref().unwrap()[0].protocol, "TCP");
        assert_eq!(k8s[1].hostname.as_deref(), Some("lb.example.com"));
        let mut reversed = k8s.clone();
        reversed.reverse();
        reversed[1].ip_mode = Some("VIP".into()); // what the apiserver defaults
        assert!(ingress_equal(&k8s, &reversed));
        assert!(!ingress_equal(&k8s, &k8s[..1]));
    }

    #[test]
    fn condition_is_written_only_on_change() {
        let mut s = lb_service();
        let t0 = Time(Default::default());
        let provisioning = Standing::not_ready("Provisioning", "Ensuring load balancer");
        let c = condition_update(&s, &provisioning, t0.clone()).unwrap();
        assert_eq!(
            (c.status.as_str(), c.observed_generation),
            ("False", Some(3))
        );
        s.status = Some(ServiceStatus {
            conditions: Some(vec![c.clone()]),
            ..Default::default()
        });
        assert!(condition_update(&s, &provisioning, t0.clone()).is_none());
        let later = Time(t0.0 + std::time::Duration::from_secs(60));
        let failing = Standing::not_ready("CloudUnavailable", "boom");
        let f = condition_update(&s, &failing, later.clone()).unwrap();
        assert_eq!(
            f.last_transition_time, t0,
            "False stays False: no transition"
        );
        let r = condition_update(&s, &Standing::ready(), later.clone()).unwrap();
        assert_eq!((r.status.as_str(), r.last_transition_time), ("True", later));
        let long = Standing::not_ready("ProviderError", "x".repeat(5000));
        assert!(condition_update(&s, &long, t0).unwrap().message.len() < 1100);
    }

    #[test]
    fn unknown_annotation_keys_get_the_closest_known_key() {
        let schema = proto::AnnotationSchema {
            prefixes: vec!["lb.example.com/".into()],
            known_keys: vec![
                "lb.example.com/internal".into(),
                "lb.example.com/health-check-path".into(),
            ],
            ..Default::default()
        };
        let mut s = lb_service();
        s.metadata.annotations = Some(
            [
                ("lb.example.com/intrenal", "true"),
                ("lb.example.com/internal", "true"),
                ("lb.example.com/completely-different", "x"),
                ("other.example.com/intrenal", "x"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        let mut found = unknown_annotations(&s, &schema);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("lb.example.com/completely-different".to_owned(), None),
                (
                    "lb.example.com/intrenal".to_owned(),
                    Some("lb.example.com/internal".to_owned())
                ),
            ]
        );
        assert_eq!(edit_distance("health-check-paht", "health-check-path"), 1);
    }

    /// Found by review while writing the properties: the schema is the
    /// provider's, unchecked, and each unknown annotation built a table of
    /// its key's length times each known key's: gigabytes for a known key
    /// of a few megabytes.
    #[test]
    fn huge_known_keys_are_never_compared() {
        let schema = proto::AnnotationSchema {
            prefixes: vec!["lb.example.com/".into()],
            known_keys: vec![format!("lb.example.com/{}", "x".repeat(1_000_000))],
            ..Default::default()
        };
        let mut s = lb_service();
        s.metadata.annotations =
            Some([("lb.example.com/intrenal".to_owned(), "x".to_owned())].into());
        let started = std::time::Instant::now();
        assert_eq!(
            unknown_annotations(&s, &schema),
            vec![("lb.example.com/intrenal".to_owned(), None)]
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn orphans_are_load_balancers_no_service_wants() {
        let entry = |uid: &str| ccm_provider_sdk::LoadBalancerEntry {
            name: format!("lb-{uid}"),
            service_uid: uid.into(),
            service_namespace: "ns".into(),
            service_name: "web".into(),
            status: None,
        };
        let listed = vec![
            entry("live"),
            entry("gone"),
            entry("switched"),
            entry("leaving"),
        ];
        let with_uid = |uid: &str, type_: &str, finalizer: bool| {
            let mut s = lb_service();
            s.metadata.uid = Some(uid.into());
            s.spec.as_mut().unwrap().type_ = Some(type_.into());
            if finalizer {
                s.metadata.finalizers = Some(vec![FINALIZER.into()]);
            }
            std::sync::Arc::new(s)
        };
        let services = vec![
            with_uid("live", "LoadBalancer", false),
            // Type changed while we were down, finalizer removed by hand.
            with_uid("switched", "ClusterIP", false),
            // Type changed, finalizer still on: the delete path's.
            with_uid("leaving", "ClusterIP", true),
        ];
        let names: Vec<&str> = orphans(&listed, &services)
            .iter()
            .map(|e| e.service_uid.as_str())
            .collect();
        assert_eq!(names, ["gone", "switched"]);
        assert!(orphans(&[], &services).is_empty());
    }
}
