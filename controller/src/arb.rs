//! Strategies for the controller's property tests: strings and Kubernetes
//! objects as users, older apiservers (whose stored objects survive
//! through validation ratcheting) or other controllers may have left them.
//! The properties live beside the code they test, in `mod proptests`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeSpec,
    NodeStatus, PortStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
    SessionAffinityConfig, Taint,
};
use kube::api::ObjectMeta;
use proptest::collection::{btree_map, vec};
use proptest::option::of;
use proptest::prelude::*;

/// An IP in canonical text, or in a form some parser takes and Rust's does
/// not (or the reverse).
pub fn ip_text() -> BoxedStrategy<String> {
    prop_oneof![
        4 => any::<IpAddr>().prop_map(|ip| ip.to_string()),
        1 => any::<[u8; 4]>().prop_map(|o| format!("{:03}.{}.{}.{}", o[0], o[1], o[2], o[3])),
        1 => any::<std::net::Ipv4Addr>().prop_map(|ip| format!("::ffff:{ip}")),
        1 => any::<std::net::Ipv6Addr>().prop_map(|ip| ip.to_string().to_uppercase()),
    ]
    .boxed()
}

pub fn cidr_text() -> BoxedStrategy<String> {
    (
        ip_text(),
        prop_oneof![
            4 => (0u8..=130).prop_map(|p| p.to_string()),
            1 => (0u8..=32).prop_map(|p| format!("+{p}")),
            1 => (0u8..=32).prop_map(|p| format!("0{p}")),
            1 => "[ -~]{0,4}",
        ],
        prop_oneof![6 => Just(""), 1 => Just(" ")],
    )
        .prop_map(|(ip, p, pad)| format!("{pad}{ip}/{p}{pad}"))
        .boxed()
}

/// A DNS-1123 subdomain.
pub fn dns_name() -> BoxedStrategy<String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?){0,3}".boxed()
}

/// A Kubernetes label value (also a label key's name part).
pub fn label_value() -> BoxedStrategy<String> {
    "([A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?)?".boxed()
}

pub fn label_key() -> BoxedStrategy<String> {
    (
        of(dns_name()),
        "[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?",
    )
        .prop_map(|(prefix, name)| match prefix {
            Some(p) => format!("{p}/{name}"),
            None => name,
        })
        .boxed()
}

/// Any string: mostly plausible values, some arbitrary Unicode, some past
/// the contract's limits.
pub fn text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "[a-zA-Z0-9._/:%+-]{0,24}",
        2 => ip_text(),
        1 => cidr_text(),
        1 => dns_name(),
        1 => Just(String::new()),
        1 => (250usize..260).prop_map(|n| "a".repeat(n)),
        1 => prop::sample::select(&[
            "None", " ", "fake://i-1", "é", "\u{0}", "1.2.3.4%eth0", "a b", "-a", "IPv4", "IPv6",
            "TCP", "UDP", "SCTP", "Local", "Cluster", "ClientIP", "VIP", "Proxy",
        ][..])
        .prop_map(str::to_owned),
    ]
    .boxed()
}

/// One of `known`, or any text.
pub fn one_of(known: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        4 => prop::sample::select(known).prop_map(str::to_owned),
        1 => text(),
    ]
    .boxed()
}

/// Labels as the apiserver stores them.
pub fn labels() -> BoxedStrategy<BTreeMap<String, String>> {
    btree_map(label_key(), label_value(), 0..4).boxed()
}

/// A metadata name: what the apiserver stores, sometimes not.
fn name() -> BoxedStrategy<Option<String>> {
    prop_oneof![6 => dns_name().prop_map(Some), 1 => of(text())].boxed()
}

fn service_port() -> BoxedStrategy<ServicePort> {
    (
        of(text()),
        of(one_of(&["TCP", "UDP", "SCTP"])),
        prop_oneof![4 => 1i32..=65535, 1 => any::<i32>()],
        of(prop_oneof![4 => 0i32..=65535, 1 => any::<i32>()]),
        of(text()),
    )
        .prop_map(
            |(name, protocol, port, node_port, app_protocol)| ServicePort {
                name,
                protocol,
                port,
                node_port,
                app_protocol,
                ..Default::default()
            },
        )
        .boxed()
}

pub fn ingress() -> BoxedStrategy<LoadBalancerIngress> {
    (
        of(prop_oneof![3 => ip_text(), 1 => text()]),
        of(prop_oneof![3 => dns_name(), 1 => text()]),
        of(one_of(&["VIP", "Proxy"])),
        of(vec(
            (any::<i32>(), one_of(&["TCP", "UDP", "SCTP"]), of(text())).prop_map(
                |(port, protocol, error)| PortStatus {
                    port,
                    protocol,
                    error,
                },
            ),
            0..3,
        )),
    )
        .prop_map(|(ip, hostname, ip_mode, ports)| LoadBalancerIngress {
            ip,
            hostname,
            ip_mode,
            ports,
        })
        .boxed()
}

fn annotations() -> BoxedStrategy<Option<BTreeMap<String, String>>> {
    let source_ranges = vec(prop_oneof![3 => cidr_text(), 1 => text()], 0..3).prop_map(|r| {
        (
            "service.beta.kubernetes.io/load-balancer-source-ranges".to_owned(),
            r.join(","),
        )
    });
    of(prop_oneof![
        8 => btree_map(prop_oneof![3 => label_key(), 1 => text()], text(), 0..3),
        3 => source_ranges.prop_map(|(k, v)| [(k, v)].into()),
        1 => Just([("big".to_owned(), "x".repeat(256 * 1024))].into()),
    ])
    .boxed()
}

/// A Service: metadata and spec as the apiserver stores them, with any
/// field possibly out of today's rules.
pub fn service() -> BoxedStrategy<Service> {
    let meta = (
        name(),
        name(),
        prop_oneof![6 => "[0-9a-f-]{36}".prop_map(Some), 1 => of(text())],
        prop_oneof![6 => labels(), 1 => btree_map(text(), text(), 0..2)],
        annotations(),
    )
        .prop_map(|(namespace, name, uid, labels, annotations)| ObjectMeta {
            namespace,
            name,
            uid,
            labels: Some(labels),
            annotations,
            ..Default::default()
        });
    let spec = (
        (
            of(one_of(&["LoadBalancer", "ClusterIP", "NodePort"])),
            of(vec(service_port(), 0..3)),
            of(vec(prop_oneof![3 => cidr_text(), 1 => text()], 0..3)),
            of(one_of(&["Cluster", "Local"])),
            of(one_of(&["Cluster", "Local"])),
            of(one_of(&["None", "ClientIP"])),
        ),
        (
            of(of(any::<i32>())),
            of(vec(one_of(&["IPv4", "IPv6"]), 0..3)),
            of(one_of(&[
                "SingleStack",
                "PreferDualStack",
                "RequireDualStack",
            ])),
            of(prop_oneof![3 => ip_text(), 1 => text()]),
            of(vec(
                prop_oneof![Just("None".to_owned()), ip_text(), text()],
                0..3,
            )),
            (of(any::<i32>()), of(text()), of(any::<bool>())),
        ),
    )
        .prop_map(
            |(
                (type_, ports, ranges, etp, itp, affinity),
                (timeout, families, policy, lb_ip, cluster_ips, (hcnp, class, alloc)),
            )| ServiceSpec {
                type_,
                ports,
                load_balancer_source_ranges: ranges,
                external_traffic_policy: etp,
                internal_traffic_policy: itp,
                session_affinity: affinity,
                session_affinity_config: timeout.map(|timeout_seconds| SessionAffinityConfig {
                    client_ip: Some(ClientIPConfig { timeout_seconds }),
                }),
                ip_families: families,
                ip_family_policy: policy,
                load_balancer_ip: lb_ip,
                cluster_ips,
                health_check_node_port: hcnp,
                load_balancer_class: class,
                allocate_load_balancer_node_ports: alloc,
                ..Default::default()
            },
        );
    let status = of(vec(ingress(), 0..3)).prop_map(|ingress| ServiceStatus {
        load_balancer: Some(LoadBalancerStatus { ingress }),
        ..Default::default()
    });
    (meta, of(spec), of(status))
        .prop_map(|(metadata, spec, status)| Service {
            metadata,
            spec,
            status,
        })
        .boxed()
}

pub fn node_address() -> BoxedStrategy<NodeAddress> {
    (
        one_of(&[
            "Hostname",
            "InternalIP",
            "ExternalIP",
            "InternalDNS",
            "ExternalDNS",
        ]),
        prop_oneof![3 => ip_text(), 1 => dns_name(), 1 => text()],
    )
        .prop_map(|(type_, address)| NodeAddress { address, type_ })
        .boxed()
}

/// A Node: name, labels and annotations as the apiserver checks them;
/// addresses, providerID and pod CIDRs, which it does not (or not fully),
/// anything.
pub fn node() -> BoxedStrategy<Node> {
    (
        dns_name(),
        of(text()),
        labels(),
        btree_map(label_key(), text(), 0..3),
        of(text()),
        of(vec(prop_oneof![3 => cidr_text(), 1 => text()], 0..3)),
        of(vec(node_address(), 0..4)),
        of(vec(one_of(&["ToBeDeletedByClusterAutoscaler", "a"]), 0..2)),
    )
        .prop_map(
            |(name, uid, labels, annotations, provider_id, pod_cidrs, addresses, taints)| Node {
                metadata: ObjectMeta {
                    name: Some(name),
                    uid,
                    labels: Some(labels),
                    annotations: Some(annotations),
                    ..Default::default()
                },
                spec: Some(NodeSpec {
                    provider_id,
                    pod_cidr: pod_cidrs.as_ref().and_then(|c| c.first().cloned()),
                    pod_cidrs,
                    taints: taints.map(|t| {
                        t.into_iter()
                            .map(|key| Taint {
                                key,
                                effect: "NoSchedule".into(),
                                ..Default::default()
                            })
                            .collect()
                    }),
                    ..Default::default()
                }),
                status: Some(NodeStatus {
                    addresses,
                    ..Default::default()
                }),
            },
        )
        .boxed()
}
