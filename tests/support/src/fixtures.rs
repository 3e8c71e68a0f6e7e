//! Objects tests create, as the cluster's other components would.

use k8s_openapi::api::core::v1::{Node, NodeSpec, Service, ServicePort, ServiceSpec, Taint};
use kube::api::ObjectMeta;

/// The taint a kubelet with `--cloud-provider=external` registers with.
pub const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A Node as `kubelet --cloud-provider=external` registers it: its hostname
/// label, no providerID, and the [`UNINITIALIZED`] taint for the cloud
/// controller to remove.
pub fn kubelet_node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: UNINITIALIZED.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A `type: LoadBalancer` Service with one TCP port.
pub fn lb_service(name: &str, port: i32) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The IP addresses a Service's status shows (`status.loadBalancer.ingress[*].ip`).
pub fn ingress_ips(svc: &Service) -> Vec<String> {
    svc.status
        .iter()
        .filter_map(|s| s.load_balancer.as_ref())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.clone())
        .collect()
}

/// A Service as the provider contract carries it: TCP port 80 on node
/// port 30080, traffic policy Cluster, no session affinity.
pub fn proto_service(namespace: &str, name: &str, uid: &str) -> ccm_proto::v1::Service {
    use ccm_proto::v1::{Protocol, ServicePort, SessionAffinity, TrafficPolicy};
    ccm_proto::v1::Service {
        namespace: namespace.into(),
        name: name.into(),
        uid: uid.into(),
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
