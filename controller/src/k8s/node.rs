//! Node accessors and well-known keys shared by every controller, and the
//! slim view of a Node the provider gets.

use ccm_provider_sdk::proto::{self, NodeAddressType};
use ccm_provider_sdk::validate;
use k8s_openapi::api::core::v1::{Node, NodeAddress, Taint};

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// The conditions controllers read: the node lifecycle `Ready`, the route
/// controller `NetworkUnavailable` (which it also writes).
pub const READY: &str = "Ready";
pub const NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";
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
        .and_then(|cs| cs.iter().find(|c| c.type_ == READY))
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

/// The slim view of a Node the provider gets. Addresses the contract
/// refuses are left out, with a warning naming the Node: the apiserver does
/// not check `status.addresses` (an InternalIP "not an ip" or a Hostname
/// "$(rm -rf /)" is stored as given), one such Node must not make every
/// request that lists it invalid, and a provider must never get what the
/// contract says it cannot (it may put a DNS name in a record or a command
/// line as it is).
pub fn node_ref(node: &Node) -> proto::NodeRef {
    let mut kept = Vec::new();
    for a in addresses(node) {
        let address = proto::NodeAddress {
            r#type: address_type_from_k8s(&a.type_) as i32,
            address: a.address.clone(),
        };
        match validate::node_address("address", &address) {
            Ok(()) => kept.push(address),
            // A type this contract does not know: not ours to judge.
            Err(_) if address.r#type == NodeAddressType::Unspecified as i32 => {}
            Err(e) => warn_left_out(name(node), &a.type_, &a.address, &e),
        }
    }
    proto::NodeRef {
        name: name(node).to_owned(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        provider_id: provider_id(node).to_owned(),
        addresses: kept,
        labels: super::string_map(&node.metadata.labels),
        annotations: super::string_map(&node.metadata.annotations),
    }
}

/// Once per Node, type and address while the process runs (a NodeRef is
/// built for every backend of every load balancer sync), in a bounded set.
fn warn_left_out(node: &str, type_: &str, address: &str, why: &validate::Violation) {
    use std::collections::HashSet;
    use std::sync::LazyLock;
    const REMEMBERED: usize = 4096;
    static WARNED: LazyLock<parking_lot::Mutex<HashSet<(String, String, String)>>> =
        LazyLock::new(Default::default);
    let shown: String = address.chars().take(256).collect();
    let key = (node.to_owned(), type_.to_owned(), shown.clone());
    {
        let mut warned = WARNED.lock();
        if warned.contains(&key) {
            return;
        }
        if warned.len() >= REMEMBERED {
            warned.clear();
        }
        warned.insert(key);
    }
    tracing::warn!(
        node,
        address_type = type_,
        address = ?shown,
        problem = %why.problem,
        "leaving a Node address the contract refuses out of what is sent to the provider"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;
    use kube::api::ObjectMeta;

    /// A Node named n1 with `addresses` (type, address) in its status.
    fn node_with_addresses(addresses: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(type_, address)| NodeAddress {
                            type_: (*type_).into(),
                            address: (*address).into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

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

    /// Found by proptests::node_refs_pass_the_contract: the apiserver
    /// stores any address text, and one InternalIP that is no IP made every
    /// EnsureLoadBalancer listing the Node, and the Node's own instance
    /// calls, invalid requests.
    #[test]
    fn addresses_the_contract_refuses_are_left_out() {
        let n = node_with_addresses(&[
            ("InternalIP", "not an ip"),
            ("ExternalIP", ""),
            ("Hostname", ""),
            ("InternalIP", "10.0.0.1"),
            ("InternalDNS", "n1.internal"),
        ]);
        let r = node_ref(&n);
        let kept: Vec<&str> = r.addresses.iter().map(|a| a.address.as_str()).collect();
        assert_eq!(kept, ["10.0.0.1", "n1.internal"]);
        validate::node_ref("node", &Some(r)).unwrap();
    }

    /// Issue 25, finding 9: Hostname and InternalDNS addresses were sent to
    /// providers verbatim though the contract says they are DNS names; a
    /// provider that puts one in a command line or a DNS record got
    /// "$(rm -rf /)". Now they are left out, as are IPs not in canonical
    /// form.
    #[test]
    fn dns_addresses_that_are_no_dns_names_are_never_sent() {
        let n = node_with_addresses(&[
            ("Hostname", "$(rm -rf /)"),
            ("InternalDNS", "-bad-.example"),
            ("ExternalDNS", "Upper.Example"),
            ("InternalIP", "fd00:0:0:0:0:0:0:1"),
            ("ExternalIP", "::ffff:192.0.2.1"),
            ("Hostname", "n1"),
            ("InternalDNS", "n1.internal.example"),
            ("InternalIP", "fd00::1"),
        ]);
        let r = node_ref(&n);
        let kept: Vec<&str> = r.addresses.iter().map(|a| a.address.as_str()).collect();
        assert_eq!(kept, ["n1", "n1.internal.example", "fd00::1"]);
        validate::node_ref("node", &Some(r)).unwrap();
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::arb;

    proptest! {
        /// Every Node the apiserver can store (it checks names, labels and
        /// annotations, not addresses) gives a NodeRef the provider
        /// accepts, so one Node cannot make a whole backend list invalid.
        #[test]
        fn node_refs_pass_the_contract(node in arb::node()) {
            let r = node_ref(&node);
            let checked = validate::node_ref("node", &Some(r.clone()));
            prop_assert!(checked.is_ok(), "{:?}", checked);
            prop_assert_eq!(r.name.as_str(), name(&node));
            prop_assert_eq!(r.provider_id.as_str(), provider_id(&node));
        }
    }
}
