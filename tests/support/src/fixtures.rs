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
