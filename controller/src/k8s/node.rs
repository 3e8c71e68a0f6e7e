//! Node accessors and well-known keys shared by every controller, and the
//! slim view of a Node the provider gets.

use ccm_provider_sdk::proto::{self, NodeAddressType};
use k8s_openapi::api::core::v1::{Node, NodeAddress, Taint};

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
pub const PROVIDED_NODE_IP_ANNOTATION: &str = "alpha.kubernetes.io/provided-node-ip";

pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const LABEL_INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
pub const LABEL_REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";

pub fn name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

pub fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

pub fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

pub fn has_taint(node: &Node, key: &str) -> bool {
    taints(node).iter().any(|t| t.key == key)
}

pub fn addresses(node: &Node) -> &[NodeAddress] {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
}

/// The Node's Ready condition status: "True", "False" or "Unknown" (also
/// when the condition is missing).
pub fn ready_status(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
        .unwrap_or("Unknown")
}

pub fn address_type_to_k8s(t: i32) -> Option<&'static str> {
    Some(match NodeAddressType::try_from(t).ok()? {
        NodeAddressType::Hostname => "Hostname",
        NodeAddressType::InternalIp => "InternalIP",
        NodeAddressType::ExternalIp => "ExternalIP",
        NodeAddressType::InternalDns => "InternalDNS",
        NodeAddressType::ExternalDns => "ExternalDNS",
        NodeAddressType::Unspecified => return None,
    })
}

fn address_type_from_k8s(t: &str) -> NodeAddressType {
    match t {
        "Hostname" => NodeAddressType::Hostname,
        "InternalIP" => NodeAddressType::InternalIp,
        "ExternalIP" => NodeAddressType::ExternalIp,
        "InternalDNS" => NodeAddressType::InternalDns,
        "ExternalDNS" => NodeAddressType::ExternalDns,
        _ => NodeAddressType::Unspecified,
    }
}

/// The slim view of a Node the provider gets.
pub fn node_ref(node: &Node) -> proto::NodeRef {
    proto::NodeRef {
        name: name(node).to_owned(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        provider_id: provider_id(node).to_owned(),
        addresses: addresses(node)
            .iter()
            .filter(|a| address_type_from_k8s(&a.type_) != NodeAddressType::Unspecified)
            .map(|a| proto::NodeAddress {
                r#type: address_type_from_k8s(&a.type_) as i32,
                address: a.address.clone(),
            })
            .collect(),
        labels: super::string_map(&node.metadata.labels),
        annotations: super::string_map(&node.metadata.annotations),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;
    use kube::api::ObjectMeta;

    #[test]
    fn node_refs_carry_identity_and_skip_unknown_address_types() {
        let n = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some([("team".to_string(), "a".to_string())].into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: "kubelet-host".into(),
                    },
                    NodeAddress {
                        type_: "Weird".into(),
                        address: "x".into(),
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = node_ref(&n);
        assert_eq!(r.name, "n1");
        assert_eq!(r.addresses.len(), 1);
        assert_eq!(r.labels["team"], "a");
    }
}
