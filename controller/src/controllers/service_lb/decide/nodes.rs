//! Which Nodes are a load balancer's backends, and when they changed.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use ccm_provider_sdk::proto;
use k8s_openapi::api::core::v1::Node;

use super::{EXCLUDE_LABEL, TO_BE_DELETED_TAINT};
use crate::k8s::node;

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
pub fn backends<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<&'a Node> {
    let mut out: Vec<&Node> = nodes.into_iter().filter(|n| is_backend(n)).collect();
    out.sort_by(|a, b| node::name(a).cmp(node::name(b)));
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

/// One backend's part of the digest ([`backend_digest`]).
pub fn backend_hash(n: &proto::NodeRef) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    n.name.hash(&mut h);
    n.provider_id.hash(&mut h);
    let labels: BTreeSet<(&String, &String)> = n.labels.iter().collect();
    labels.hash(&mut h);
    let addresses: BTreeSet<(i32, &String)> =
        n.addresses.iter().map(|a| (a.r#type, &a.address)).collect();
    addresses.hash(&mut h);
    h.finish()
}

/// The digest of a backend set from its backends' hashes, in any order.
pub fn backend_digest(mut each: Vec<u64>) -> BackendDigest {
    each.sort_unstable();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    each.hash(&mut h);
    h.finish()
}

/// The digest of a backend set; the order of nodes, labels and addresses
/// does not matter.
#[cfg(test)]
pub fn backend_set(nodes: &[proto::NodeRef]) -> BackendDigest {
    backend_digest(nodes.iter().map(backend_hash).collect())
}

/// `names` for an event: at most 20, then how many more.
pub fn node_names_for_event<'a>(all: impl ExactSizeIterator<Item = &'a str>) -> String {
    const MAX: usize = 20;
    let count = all.len();
    let mut names: Vec<&str> = all.take(MAX).collect();
    let more = count.saturating_sub(MAX);
    let more_text = format!("<{more} more>");
    if more > 0 {
        names.push(&more_text);
    }
    format!("[{}]", names.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

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
        let names: Vec<&str> = backends(&nodes).into_iter().map(node::name).collect();
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
        let names: Vec<String> = (0..23).map(|i| format!("n{i}")).collect();
        let text = node_names_for_event(names.iter().map(String::as_str));
        assert!(text.starts_with("[n0 n1 "), "{text}");
        assert!(text.ends_with("n19 <3 more>]"), "{text}");
    }
}
