//! cloud-node-controller's decisions, without I/O: what one reconcile of
//! a Node does ([`plan`]), the initialisation patch of a tainted Node and
//! the address list the provider's answer implies.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ccm_provider_sdk::proto::{self, NodeAddressType};
use k8s_openapi::api::core::v1::{Node, NodeAddress, Taint};

use crate::k8s::node::*;

/// Why a node cannot be initialised yet. The node keeps its taint and is
/// retried with backoff.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InitError {
    #[error("cloud provider does not set node provider ID for node {0}")]
    NoProviderId(String),
    #[error("provided node ip for node {node:?} is not valid: {reason}")]
    ProvidedNodeIp { node: String, reason: String },
}

/// What initialisation changes on the Node's metadata and spec.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InitChanges {
    /// Set only when the Node has none.
    pub provider_id: Option<String>,
    /// Labels to add or overwrite.
    pub labels: BTreeMap<String, String>,
    /// The taints that remain (every uninitialized taint removed).
    pub taints: Vec<Taint>,
    /// Additional labels dropped, with why; logged, never applied.
    pub dropped_labels: Vec<String>,
}

fn is_reserved_label(key: &str) -> bool {
    // Upstream's regex (^|\.)(kubernetes|k8s)\.io/ on the key's prefix.
    let prefix = match key.split_once('/') {
        Some((p, _)) => p,
        None => return false,
    };
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")))
}

/// The initialisation of a tainted Node from the provider's metadata, as
/// upstream's `syncNode` computes it (providerID only if empty, GA and beta
/// topology labels, filtered additional labels that never overwrite, taint
/// removal).
/// What one reconcile of a Node does.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A tainted Node this process initialised: the cache has not shown
    /// our write yet (our writes come back through the watch after the
    /// triggers they caused). Not work.
    AlreadyInitialised,
    /// Ask the provider about it, then [`init_changes`].
    Initialise,
    /// An initialised Node: add these GA labels (none: nothing to write).
    FixLabels(BTreeMap<String, String>),
}

/// The plan for `node`; `initialised_by_us`: this process initialised it
/// (by uid) and the cache has not shown it untainted since.
pub fn plan(node: &Node, initialised_by_us: bool) -> Plan {
    match (has_taint(node, UNINITIALIZED_TAINT), initialised_by_us) {
        (true, true) => Plan::AlreadyInitialised,
        (true, false) => Plan::Initialise,
        (false, _) => Plan::FixLabels(ga_label_fixes(node)),
    }
}

impl InitChanges {
    /// The metadata+spec merge patch, conditional on `resource_version`:
    /// if the kubelet (or anyone) changed the Node since, it fails with
    /// 409 and the retry starts from the cache instead of overwriting
    /// their taints.
    pub fn patch(&self, resource_version: Option<&str>) -> serde_json::Value {
        let mut spec = serde_json::json!({ "taints": self.taints });
        if let Some(pid) = &self.provider_id {
            spec["providerID"] = serde_json::json!(pid);
        }
        serde_json::json!({
            "metadata": {
                "resourceVersion": resource_version,
                "labels": self.labels,
            },
            "spec": spec,
        })
    }
}

pub fn init_changes(node: &Node, meta: &proto::InstanceMetadata) -> Result<InitChanges, InitError> {
    let node_name = name(node).to_owned();
    let mut changes = InitChanges::default();
    if provider_id(node).is_empty() {
        if meta.provider_id.is_empty() {
            return Err(InitError::NoProviderId(node_name));
        }
        changes.provider_id = Some(meta.provider_id.clone());
    }
    if let Some(ips) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVIDED_NODE_IP_ANNOTATION))
    {
        addresses_for_provided_ips(ips, &meta.node_addresses).map_err(|reason| {
            InitError::ProvidedNodeIp {
                node: node_name.clone(),
                reason,
            }
        })?;
    }
    for (value, labels) in [
        (
            &meta.instance_type,
            [LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE],
        ),
        (&meta.zone, [LABEL_ZONE_BETA, LABEL_ZONE]),
        (&meta.region, [LABEL_REGION_BETA, LABEL_REGION]),
    ] {
        if !value.is_empty() {
            for l in labels {
                changes.labels.insert(l.to_owned(), value.clone());
            }
        }
    }
    let existing = node.metadata.labels.clone().unwrap_or_default();
    let mut additional: Vec<_> = meta.additional_labels.iter().collect();
    additional.sort();
    for (k, v) in additional {
        if is_reserved_label(k) {
            changes
                .dropped_labels
                .push(format!("{k}: kubernetes.io and k8s.io labels are reserved"));
        } else if let Some(old) = existing.get(k) {
            if old != v {
                changes
                    .dropped_labels
                    .push(format!("{k}: the node already has it with value {old:?}"));
            }
        } else {
            changes.labels.insert(k.clone(), v.clone());
        }
    }
    changes.taints = taints(node)
        .iter()
        .filter(|t| t.key != UNINITIALIZED_TAINT)
        .cloned()
        .collect();
    Ok(changes)
}

/// For an initialised Node: GA labels copied from beta ones where missing or
/// different (upstream's label reconciliation). Empty when nothing to do.
pub fn ga_label_fixes(node: &Node) -> BTreeMap<String, String> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut fixes = BTreeMap::new();
    for (beta, ga) in [
        (LABEL_ZONE_BETA, LABEL_ZONE),
        (LABEL_REGION_BETA, LABEL_REGION),
        (LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE),
    ] {
        if let Some(v) = labels.get(beta)
            && labels.get(ga) != Some(v)
        {
            fixes.insert(ga.to_owned(), v.clone());
        }
    }
    fixes
}

/// Parses the kubelet's provided-node-ip annotation: one IP, or two of
/// different families, comma-separated, neither unspecified when two.
fn parse_provided_ips(s: &str) -> Result<Vec<IpAddr>, String> {
    let parts: Vec<&str> = s.split(',').collect();
    if parts.len() > 2 {
        return Err(format!("failed to parse node IP {s:?}: at most two IPs"));
    }
    let ips: Vec<IpAddr> = parts
        .iter()
        .map(|p| {
            p.parse::<IpAddr>()
                .map_err(|e| format!("failed to parse node IP {s:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    if ips.len() == 2 {
        if ips[0].is_ipv4() == ips[1].is_ipv4() {
            return Err(format!(
                "failed to parse node IP {s:?}: two IPs must be of different families"
            ));
        }
        if ips.iter().any(|ip| ip.is_unspecified()) {
            return Err(format!(
                "failed to parse node IP {s:?}: unspecified address in a dual-stack pair"
            ));
        }
    }
    Ok(ips)
}

/// Upstream's `GetNodeAddressesFromNodeIP`: the cloud addresses matching the
/// provided IPs first, then every cloud address of a type none of them has.
fn addresses_for_provided_ips(
    provided: &str,
    cloud: &[proto::NodeAddress],
) -> Result<Vec<proto::NodeAddress>, String> {
    let ips = parse_provided_ips(provided)?;
    let mut chosen: Vec<proto::NodeAddress> = Vec::new();
    for ip in &ips {
        let matches: Vec<_> = cloud
            .iter()
            .filter(|a| a.address.parse::<IpAddr>().ok() == Some(*ip))
            .cloned()
            .collect();
        if matches.is_empty() {
            return Err(format!(
                "failed to get node address from cloud provider that matches ip: {ip}"
            ));
        }
        chosen.extend(matches);
    }
    let matched_types: Vec<i32> = chosen.iter().map(|a| a.r#type).collect();
    chosen.extend(
        cloud
            .iter()
            .filter(|a| !matched_types.contains(&a.r#type))
            .cloned(),
    );
    Ok(chosen)
}

/// The addresses the Node should have given the provider's answer, or `None`
/// when nothing should be written: the provider returned none (never clear
/// addresses on an empty answer), the provided-node-ip cannot be honoured, or
/// the Node already has exactly these.
pub fn desired_addresses(
    node: &Node,
    cloud: &[proto::NodeAddress],
) -> Result<Option<Vec<NodeAddress>>, String> {
    if cloud.is_empty() {
        return Ok(None);
    }
    let mut chosen = match node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVIDED_NODE_IP_ANNOTATION))
    {
        Some(ips) => addresses_for_provided_ips(ips, cloud)?,
        None => cloud.to_vec(),
    };
    let hostname = NodeAddressType::Hostname as i32;
    if !chosen.iter().any(|a| a.r#type == hostname) {
        // Keep the kubelet's hostname when the cloud has none.
        chosen.extend(
            addresses(node)
                .iter()
                .filter(|a| a.type_ == "Hostname")
                .map(|a| proto::NodeAddress {
                    r#type: hostname,
                    address: a.address.clone(),
                }),
        );
    }
    let desired: Vec<NodeAddress> = chosen
        .iter()
        .filter_map(|a| {
            Some(NodeAddress {
                type_: address_type_to_k8s(a.r#type)?.to_owned(),
                address: a.address.clone(),
            })
        })
        .collect();
    if desired == addresses(node) {
        return Ok(None);
    }
    Ok(Some(desired))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(t: NodeAddressType, a: &str) -> proto::NodeAddress {
        proto::NodeAddress {
            r#type: t as i32,
            address: a.into(),
        }
    }

    fn tainted(name: &str) -> Node {
        crate::testing::tainted_node(name)
    }

    #[test]
    fn one_plan_per_reconcile() {
        let n = tainted("n1");
        assert_eq!(plan(&n, false), Plan::Initialise);
        assert_eq!(
            plan(&n, true),
            Plan::AlreadyInitialised,
            "our write not seen yet"
        );
        let mut done = n.clone();
        done.spec.as_mut().unwrap().taints = None;
        assert!(matches!(plan(&done, true), Plan::FixLabels(_)));
    }

    #[test]
    fn the_init_patch_is_guarded_by_the_version_given() {
        let changes = init_changes(&tainted("n1"), &meta()).unwrap();
        let patch = changes.patch(Some("8"));
        assert_eq!(patch["metadata"]["resourceVersion"], "8");
        assert_eq!(patch["spec"]["providerID"], "fake://i-1");
        assert_eq!(
            patch["spec"]["taints"],
            serde_json::json!([{"effect": "NoSchedule", "key": "dedicated"}])
        );
    }

    fn meta() -> proto::InstanceMetadata {
        proto::InstanceMetadata {
            provider_id: "fake://i-1".into(),
            instance_type: "m1".into(),
            zone: "z1".into(),
            region: "r1".into(),
            node_addresses: vec![
                addr(NodeAddressType::InternalIp, "10.0.0.1"),
                addr(NodeAddressType::InternalIp, "10.0.0.2"),
                addr(NodeAddressType::ExternalIp, "203.0.113.1"),
            ],
            additional_labels: [
                ("team".to_string(), "b".to_string()),
                ("example.com/rack".to_string(), "r7".to_string()),
                ("node.kubernetes.io/evil".to_string(), "x".to_string()),
                ("sub.k8s.io/evil".to_string(), "x".to_string()),
            ]
            .into(),
        }
    }

    #[test]
    fn init_sets_provider_id_labels_and_removes_only_the_uninitialized_taint() {
        let c = init_changes(&tainted("n1"), &meta()).unwrap();
        assert_eq!(c.provider_id.as_deref(), Some("fake://i-1"));
        let keys: Vec<&str> = c.labels.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            vec![
                LABEL_INSTANCE_TYPE_BETA,
                "example.com/rack",
                LABEL_REGION_BETA,
                LABEL_ZONE_BETA,
                LABEL_INSTANCE_TYPE,
                LABEL_REGION,
                LABEL_ZONE,
            ]
        );
        assert_eq!(c.taints.len(), 1);
        assert_eq!(c.taints[0].key, "dedicated");
        // Reserved domains dropped; an existing label never overwritten.
        assert_eq!(c.dropped_labels.len(), 3, "{:?}", c.dropped_labels);
        assert!(!c.labels.contains_key("team"));
    }

    #[test]
    fn existing_provider_id_is_kept_and_missing_one_is_an_error() {
        let mut n = tainted("n1");
        n.spec.as_mut().unwrap().provider_id = Some("fake://own".into());
        assert_eq!(init_changes(&n, &meta()).unwrap().provider_id, None);
        let mut m = meta();
        m.provider_id.clear();
        assert!(
            init_changes(&n, &m).is_ok(),
            "node's own providerID suffices"
        );
        assert_eq!(
            init_changes(&tainted("n2"), &m).unwrap_err().to_string(),
            "cloud provider does not set node provider ID for node n2"
        );
    }

    #[test]
    fn provided_node_ip_must_match_a_cloud_address() {
        let mut n = tainted("n1");
        n.metadata.annotations = Some(
            [(
                PROVIDED_NODE_IP_ANNOTATION.to_string(),
                "10.0.0.2".to_string(),
            )]
            .into(),
        );
        let want = vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.2".into(),
            },
            NodeAddress {
                type_: "ExternalIP".into(),
                address: "203.0.113.1".into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: "kubelet-host".into(),
            },
        ];
        assert_eq!(
            desired_addresses(&n, &meta().node_addresses).unwrap(),
            Some(want)
        );
        n.metadata.annotations = Some(
            [(
                PROVIDED_NODE_IP_ANNOTATION.to_string(),
                "10.9.9.9".to_string(),
            )]
            .into(),
        );
        let err = init_changes(&n, &meta()).unwrap_err().to_string();
        assert!(err.contains("matches ip: 10.9.9.9"), "{err}");
        for bad in [
            "10.0.0.1,10.0.0.2",
            "x",
            "10.0.0.1, ::1",
            "1.1.1.1,::1,2.2.2.2",
        ] {
            assert!(parse_provided_ips(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_provided_ips("10.0.0.1,fd00::1").unwrap().len(), 2);
    }

    #[test]
    fn addresses_are_never_cleared_and_unchanged_lists_are_not_rewritten() {
        let n = tainted("n1");
        assert_eq!(desired_addresses(&n, &[]).unwrap(), None);
        let cloud = vec![addr(NodeAddressType::InternalIp, "10.0.0.1")];
        let desired = desired_addresses(&n, &cloud).unwrap().unwrap();
        assert_eq!(desired.len(), 2, "kubelet hostname kept: {desired:?}");
        let mut done = n.clone();
        done.status.as_mut().unwrap().addresses = Some(desired);
        assert_eq!(desired_addresses(&done, &cloud).unwrap(), None);
    }

    #[test]
    fn ga_labels_follow_beta_ones() {
        let mut n = tainted("n1");
        n.metadata.labels = Some(
            [
                (LABEL_ZONE_BETA.to_string(), "z1".to_string()),
                (LABEL_ZONE.to_string(), "old".to_string()),
                (LABEL_REGION_BETA.to_string(), "r1".to_string()),
                (LABEL_REGION.to_string(), "r1".to_string()),
            ]
            .into(),
        );
        assert_eq!(
            ga_label_fixes(&n),
            [(LABEL_ZONE.to_string(), "z1".to_string())].into()
        );
    }
}

#[cfg(test)]
mod proptests {
    use ccm_provider_sdk::validate;
    use proptest::collection::{hash_map, vec};
    use proptest::prelude::*;

    use super::*;
    use crate::arb;

    /// Instance metadata as the SDK lets it through (its answer checks).
    fn arb_metadata() -> BoxedStrategy<proto::InstanceMetadata> {
        (
            prop_oneof![Just(String::new()), "[a-z]{1,5}://[!-~]{1,12}"],
            arb::label_value(),
            arb::label_value(),
            arb::label_value(),
            vec(
                (1i32..=5, prop_oneof![arb::ip_text(), arb::dns_name()])
                    .prop_map(|(r#type, address)| proto::NodeAddress { r#type, address }),
                0..4,
            ),
            hash_map(
                prop_oneof![
                    arb::label_key(),
                    Just(LABEL_ZONE.to_owned()),
                    Just("node-role.kubernetes.io/x".to_owned()),
                ],
                arb::label_value(),
                0..4,
            ),
        )
            .prop_map(
                |(provider_id, instance_type, zone, region, node_addresses, additional_labels)| {
                    proto::InstanceMetadata {
                        provider_id,
                        instance_type,
                        zone,
                        region,
                        node_addresses,
                        additional_labels,
                    }
                },
            )
            .prop_filter("the SDK's answer checks", |m| {
                validate::node_addresses("a", &m.node_addresses).is_ok()
            })
            .boxed()
    }

    fn with_provided_ip(node: Node, ip: Option<String>) -> Node {
        let mut node = node;
        if let Some(ip) = ip {
            node.metadata
                .annotations
                .get_or_insert_default()
                .insert(PROVIDED_NODE_IP_ANNOTATION.to_owned(), ip);
        }
        node
    }

    proptest! {
        /// The initialisation patch of any Node from any accepted answer
        /// sets only labels the apiserver takes, never a reserved or an
        /// existing additional label, and the providerID only when missing.
        #[test]
        fn init_changes_are_writable_and_overwrite_nothing(
            node in arb::node(),
            meta in arb_metadata(),
            provided in proptest::option::of(prop_oneof![arb::ip_text(), arb::text()]),
        ) {
            let node = with_provided_ip(node, provided);
            match init_changes(&node, &meta) {
                Ok(c) => {
                    for (k, v) in &c.labels {
                        prop_assert!(validate::label_key("k", k).is_ok() && validate::label_value("v", v).is_ok());
                    }
                    let existing = node.metadata.labels.clone().unwrap_or_default();
                    for (k, v) in &meta.additional_labels {
                        if is_reserved_label(k) {
                            prop_assert!(!c.labels.contains_key(k) || [LABEL_ZONE, LABEL_REGION, LABEL_INSTANCE_TYPE, LABEL_ZONE_BETA, LABEL_REGION_BETA, LABEL_INSTANCE_TYPE_BETA].contains(&k.as_str()));
                        } else if existing.get(k).is_some_and(|old| old != v) {
                            prop_assert!(c.labels.get(k) != Some(v) || meta.zone == *v || meta.region == *v || meta.instance_type == *v);
                        }
                    }
                    match &c.provider_id {
                        Some(id) => {
                            prop_assert!(provider_id(&node).is_empty());
                            prop_assert_eq!(id, &meta.provider_id);
                        }
                        None => prop_assert!(!provider_id(&node).is_empty()),
                    }
                    prop_assert!(c.taints.iter().all(|t| t.key != UNINITIALIZED_TAINT));
                }
                Err(InitError::NoProviderId(_)) => {
                    prop_assert!(provider_id(&node).is_empty() && meta.provider_id.is_empty());
                }
                Err(InitError::ProvidedNodeIp { .. }) => {
                    prop_assert!(node.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(PROVIDED_NODE_IP_ANNOTATION)));
                }
            }
        }

        /// Addresses are never cleared, only of known types, and the
        /// provided node IP comes first when honoured.
        #[test]
        fn desired_addresses_are_known_and_never_empty(
            node in arb::node(),
            meta in arb_metadata(),
            provided in proptest::option::of(prop_oneof![arb::ip_text(), arb::text()]),
        ) {
            let node = with_provided_ip(node, provided.clone());
            if let Ok(Some(addresses)) = desired_addresses(&node, &meta.node_addresses) {
                prop_assert!(!addresses.is_empty());
                for a in &addresses {
                    prop_assert!(["Hostname", "InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS"].contains(&a.type_.as_str()));
                }
                if let Some(first) = provided.as_deref().and_then(|p| p.split(',').next()) {
                    prop_assert_eq!(addresses[0].address.parse::<IpAddr>().ok(), first.parse::<IpAddr>().ok());
                }
            }
        }
    }
}
