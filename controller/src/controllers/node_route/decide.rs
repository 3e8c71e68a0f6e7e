//! What the node-route-controller decides, without I/O: which cluster CIDRs
//! it is responsible for, which routes to delete and create, and each
//! Node's NetworkUnavailable condition.

use std::collections::{BTreeMap, BTreeSet};

use ccm_provider_sdk::ContractVersion;
use ccm_provider_sdk::proto::{self, NodeAddress};
use k8s_openapi::api::core::v1::Node;

pub use crate::cidr::{Cidr, network};
use crate::k8s::node;

/// Whether a route is ours to delete: its whole destination lies inside a
/// cluster CIDR. (Upstream also takes routes with only their first or last
/// address inside; a route reaching outside the cluster CIDRs is never
/// touched here.) An unparsable destination is never ours.
pub fn responsible(cluster: &[Cidr], destination: &str) -> bool {
    network(destination).is_some_and(|d| cluster.iter().any(|c| c.contains(&d)))
}

/// The parts of a Node routes depend on.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteNode {
    pub name: String,
    pub uid: String,
    pub pod_cidrs: Vec<String>,
    pub addresses: Vec<NodeAddress>,
}

impl RouteNode {
    pub fn from_node(n: &Node) -> RouteNode {
        let spec = n.spec.as_ref();
        let mut pod_cidrs = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
        if pod_cidrs.is_empty()
            && let Some(c) = spec.and_then(|s| s.pod_cidr.clone())
        {
            pod_cidrs.push(c);
        }
        RouteNode {
            name: node::name(n).to_owned(),
            uid: n.metadata.uid.clone().unwrap_or_default(),
            pod_cidrs,
            addresses: node::node_ref(n).addresses,
        }
    }
}

/// What a provider's routes do with target node addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Addresses {
    /// No CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES: none are sent, and
    /// listed ones are not compared.
    #[default]
    Ignored,
    /// The capability from a provider declaring a contract older than
    /// 1.1.0, where CreateRoute need not update an existing route: a route
    /// whose listed addresses differ from the Node's is deleted, then
    /// created again (the only way there; the destination is unrouted in
    /// between).
    Replace,
    /// The capability at contract 1.1.0 or later: CreateRoute of a
    /// destination routed to the same node updates it in place, so a
    /// changed address is one CreateRoute and no DeleteRoute.
    UpdateInPlace,
}

impl Addresses {
    /// From the provider's handshake: whether it advertises
    /// CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES, and its declared
    /// contract_version (one that does not parse gets no newer rule).
    pub fn of_provider(capability: bool, contract_version: &str) -> Addresses {
        let in_place = ContractVersion::parse(contract_version)
            .is_some_and(|v| v.has(ContractVersion::V1_1_0));
        match (capability, in_place) {
            (false, _) => Addresses::Ignored,
            (true, false) => Addresses::Replace,
            (true, true) => Addresses::UpdateInPlace,
        }
    }
}

/// One CreateRoute to make.
#[derive(Debug, Clone, PartialEq)]
pub struct Create {
    pub node: String,
    /// The Node's uid.
    pub name_hint: String,
    pub route: proto::Route,
    /// The route exists with other addresses and this call updates it in
    /// place ([`Addresses::UpdateInPlace`]).
    pub in_place: bool,
}

/// What one reconcile does.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub delete: Vec<proto::Route>,
    pub create: Vec<Create>,
    /// Nodes whose NetworkUnavailable condition this reconcile decides:
    /// those with pod CIDRs, and those with routes but no pod CIDRs
    /// (`false`: never "created").
    pub condition_nodes: BTreeMap<String, bool>,
}

fn address_set(a: &[NodeAddress]) -> BTreeSet<(i32, &str)> {
    a.iter().map(|a| (a.r#type, a.address.as_str())).collect()
}

/// Whether a listed route's addresses differ from the Node's. A route
/// listed without addresses has unknown ones, not different ones (a
/// provider of contract 1.0.0 need not list them): replacing it would
/// unroute its destination on every reconcile for nothing.
fn addresses_differ(listed: &proto::Route, node: &RouteNode) -> bool {
    !listed.target_node_addresses.is_empty()
        && address_set(&listed.target_node_addresses) != address_set(&node.addresses)
}

/// Upstream's reconcile, decided up front, over every Node (one
/// provider). `addresses`: whether the provider takes target node
/// addresses, and how a route whose addresses changed is brought up to
/// date.
#[cfg(test)]
pub fn plan(
    cluster: &[Cidr],
    nodes: &[RouteNode],
    routes: &[proto::Route],
    addresses: Addresses,
) -> Plan {
    plan_owned(cluster, nodes, &BTreeSet::new(), routes, addresses)
}

/// Upstream's reconcile for one provider, decided up front: `nodes` are
/// the Nodes it owns (all of them, with one provider), `others` the names
/// of every other Node in the cluster. `addresses`: whether the provider
/// takes target node addresses, and how a route whose addresses changed
/// is brought up to date. A listed route to one of `others` is left as it
/// is, whatever it looks like: that Node is not gone, only not this
/// provider's to judge.
pub fn plan_owned(
    cluster: &[Cidr],
    nodes: &[RouteNode],
    others: &BTreeSet<String>,
    routes: &[proto::Route],
    addresses: Addresses,
) -> Plan {
    let with_addresses = addresses != Addresses::Ignored;
    let mut plan = Plan::default();
    // (node, destination) of every route to keep.
    let mut keep: BTreeSet<(String, Cidr)> = BTreeSet::new();
    let by_node: BTreeMap<(&str, Cidr), &proto::Route> = routes
        .iter()
        .filter(|r| !r.blackhole && !r.target_node.is_empty())
        .filter_map(|r| Some(((r.target_node.as_str(), network(&r.destination_cidr)?), r)))
        .collect();
    for n in nodes {
        for pod_cidr in &n.pod_cidrs {
            let Some(want) = network(pod_cidr) else {
                tracing::warn!(node = %n.name, pod_cidr, "not a CIDR; no route for it");
                continue;
            };
            let current = by_node.get(&(n.name.as_str(), want));
            let changed = with_addresses && current.is_some_and(|r| addresses_differ(r, n));
            let in_place = changed && addresses == Addresses::UpdateInPlace;
            if current.is_some() && (!changed || in_place) {
                keep.insert((n.name.clone(), want));
            }
            if current.is_none() || changed {
                plan.create.push(Create {
                    node: n.name.clone(),
                    name_hint: n.uid.clone(),
                    route: proto::Route {
                        target_node: n.name.clone(),
                        target_node_addresses: if with_addresses {
                            n.addresses.clone()
                        } else {
                            Vec::new()
                        },
                        destination_cidr: pod_cidr.clone(),
                        ..Default::default()
                    },
                    in_place,
                });
            }
        }
        if !n.pod_cidrs.is_empty() {
            plan.condition_nodes.insert(n.name.clone(), true);
        }
    }
    for r in routes {
        if !responsible(cluster, &r.destination_cidr) || others.contains(r.target_node.as_str()) {
            continue;
        }
        let Some(dest) = network(&r.destination_cidr) else {
            continue;
        };
        if r.blackhole || !keep.contains(&(r.target_node.clone(), dest)) {
            plan.delete.push(r.clone());
        }
    }
    let known: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    for r in routes {
        if known.contains(r.target_node.as_str()) {
            plan.condition_nodes
                .entry(r.target_node.clone())
                .or_insert(false);
        }
    }
    plan
}

pub use crate::k8s::node::NETWORK_UNAVAILABLE;

/// The NetworkUnavailable condition's (status, reason, message).
pub fn network_condition(routes_created: bool) -> (&'static str, &'static str, &'static str) {
    if routes_created {
        ("False", "RouteCreated", "RouteController created a route")
    } else {
        (
            "True",
            "NoRouteCreated",
            "RouteController failed to create a route",
        )
    }
}

/// Whether the Node already shows (status, reason): upstream skips the
/// patch then.
pub fn condition_current(n: &Node, status: &str, reason: &str) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == NETWORK_UNAVAILABLE))
        .is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cidr::parse_cluster_cidrs;

    fn cidrs(s: &str) -> Vec<Cidr> {
        parse_cluster_cidrs(s).unwrap()
    }

    fn route(node: &str, cidr: &str) -> proto::Route {
        proto::Route {
            name: format!("r-{node}"),
            target_node: node.into(),
            destination_cidr: cidr.into(),
            ..Default::default()
        }
    }

    fn rn(name: &str, pod_cidrs: &[&str]) -> RouteNode {
        RouteNode {
            name: name.into(),
            uid: format!("uid-{name}"),
            pod_cidrs: pod_cidrs.iter().map(|s| s.to_string()).collect(),
            addresses: vec![NodeAddress {
                r#type: proto::NodeAddressType::InternalIp as i32,
                address: "10.0.0.1".into(),
            }],
        }
    }

    #[test]
    fn cluster_cidr_flag_as_upstream() {
        assert_eq!(cidrs("10.244.0.0/16").len(), 1);
        assert_eq!(cidrs(" 10.244.0.0/16 , fd00:10:244::/56").len(), 2);
        assert!(parse_cluster_cidrs("").unwrap_err().contains("not a CIDR"));
        assert!(parse_cluster_cidrs("10.244.0.0/33").is_err());
        assert!(parse_cluster_cidrs("010.244.0.0/16").is_err());
        assert!(
            parse_cluster_cidrs("10.244.0.0/16,10.245.0.0/16")
                .unwrap_err()
                .contains("not configured as dual stack")
        );
        assert!(
            parse_cluster_cidrs("10.0.0.0/16,fd00::/64,10.1.0.0/16")
                .unwrap_err()
                .contains("more than max allowed of 2")
        );
    }

    #[test]
    fn only_routes_wholly_inside_the_cluster_cidrs_are_ours() {
        let c = cidrs("10.244.0.0/16,fd00:10:244::/56");
        assert!(responsible(&c, "10.244.3.0/24"));
        assert!(responsible(&c, "10.244.0.0/16"));
        assert!(responsible(&c, "fd00:10:244:1::/64"));
        assert!(!responsible(&c, "10.245.0.0/24"));
        assert!(!responsible(&c, "10.244.0.0/15"), "reaches outside");
        assert!(!responsible(&c, "10.0.0.0/8"));
        assert!(!responsible(&c, "0.0.0.0/0"));
        assert!(!responsible(&c, "not a cidr"));
        assert!(!responsible(&c, "::/0"));
    }

    #[test]
    fn plan_creates_keeps_and_deletes_like_upstream() {
        let c = cidrs("10.244.0.0/16,fd00:10:244::/56");
        let nodes = vec![
            rn("a", &["10.244.1.0/24", "fd00:10:244:1::/64"]),
            rn("b", &["10.244.2.0/24"]),
            rn("no-cidr", &[]),
        ];
        let mut blackhole = route("", "10.244.9.0/24");
        blackhole.blackhole = true;
        let routes = vec![
            route("a", "10.244.1.0/24"),       // keep
            route("b", "10.244.7.0/24"),       // stale CIDR: delete
            route("gone", "10.244.8.0/24"),    // unknown node: delete
            blackhole.clone(),                 // blackhole: delete
            route("a", "192.168.0.0/24"),      // outside: never touched
            route("gone", "10.0.0.0/8"),       // reaches outside: never touched
            route("no-cidr", "10.244.5.0/24"), // node without pod CIDRs: delete
        ];
        let p = plan(&c, &nodes, &routes, Addresses::Ignored);
        let created: Vec<(&str, &str)> = p
            .create
            .iter()
            .map(|c| (c.node.as_str(), c.route.destination_cidr.as_str()))
            .collect();
        assert_eq!(
            created,
            vec![("a", "fd00:10:244:1::/64"), ("b", "10.244.2.0/24")]
        );
        assert_eq!(p.create[1].name_hint, "uid-b");
        assert!(p.create[1].route.target_node_addresses.is_empty());
        let deleted: Vec<&str> = p
            .delete
            .iter()
            .map(|r| r.destination_cidr.as_str())
            .collect();
        assert_eq!(
            deleted,
            vec![
                "10.244.7.0/24",
                "10.244.8.0/24",
                "10.244.9.0/24",
                "10.244.5.0/24"
            ]
        );
        assert_eq!(
            p.condition_nodes,
            BTreeMap::from([
                ("a".to_owned(), true),
                ("b".to_owned(), true),
                ("no-cidr".to_owned(), false)
            ])
        );
    }

    fn steady(p: &Plan) -> bool {
        p.create.is_empty() && p.delete.is_empty()
    }

    /// Issue 25, finding 1: a route listed without addresses was replaced
    /// (deleted, then created) on every reconcile.
    #[test]
    fn a_route_listed_without_addresses_is_kept() {
        let c = cidrs("10.244.0.0/16");
        let nodes = vec![rn("a", &["10.244.1.0/24"])];
        let routes = vec![route("a", "10.244.1.0/24")]; // no addresses listed
        for mode in [
            Addresses::Ignored,
            Addresses::Replace,
            Addresses::UpdateInPlace,
        ] {
            let p = plan(&c, &nodes, &routes, mode);
            assert_eq!(
                p,
                Plan {
                    condition_nodes: BTreeMap::from([("a".to_owned(), true)]),
                    ..Plan::default()
                },
                "{mode:?}"
            );
        }
    }

    #[test]
    fn a_route_listed_with_the_nodes_addresses_in_any_order_is_kept() {
        let c = cidrs("10.244.0.0/16");
        let mut a = rn("a", &["10.244.1.0/24"]);
        a.addresses.push(NodeAddress {
            r#type: proto::NodeAddressType::Hostname as i32,
            address: "a".into(),
        });
        let mut listed = route("a", "10.244.1.0/24");
        listed.target_node_addresses = a.addresses.iter().rev().cloned().collect();
        let p = plan(&c, &[a], &[listed], Addresses::UpdateInPlace);
        assert!(steady(&p), "{p:?}");
    }

    fn moved() -> (Vec<RouteNode>, Vec<proto::Route>) {
        let nodes = vec![rn("a", &["10.244.1.0/24"])];
        let mut listed = route("a", "10.244.1.0/24");
        listed.target_node_addresses = vec![NodeAddress {
            r#type: proto::NodeAddressType::InternalIp as i32,
            address: "10.0.0.99".into(),
        }];
        (nodes, vec![listed])
    }

    #[test]
    fn changed_addresses_are_updated_in_place_by_a_provider_of_1_1_0() {
        let c = cidrs("10.244.0.0/16");
        let (nodes, routes) = moved();
        let p = plan(&c, &nodes, &routes, Addresses::UpdateInPlace);
        assert!(p.delete.is_empty(), "never unrouted: {p:?}");
        assert_eq!(p.create.len(), 1);
        assert!(p.create[0].in_place);
        assert_eq!(p.create[0].route.target_node_addresses, nodes[0].addresses);
    }

    #[test]
    fn changed_addresses_are_replaced_for_a_provider_of_1_0_0() {
        let c = cidrs("10.244.0.0/16");
        let (nodes, routes) = moved();
        let p = plan(&c, &nodes, &routes, Addresses::Replace);
        assert_eq!(
            p.delete, routes,
            "CreateRoute need not update there: delete…"
        );
        assert_eq!(p.create.len(), 1, "…then create with the addresses");
        assert!(!p.create[0].in_place);
        assert_eq!(p.create[0].route.target_node_addresses, nodes[0].addresses);
        // Without the capability addresses are neither sent nor compared.
        let p = plan(&c, &nodes, &routes, Addresses::Ignored);
        assert!(steady(&p), "{p:?}");
    }

    #[test]
    fn the_mode_follows_the_capability_and_the_declared_contract() {
        assert_eq!(Addresses::of_provider(false, "1.1.0"), Addresses::Ignored);
        assert_eq!(Addresses::of_provider(true, "1.0.0"), Addresses::Replace);
        assert_eq!(Addresses::of_provider(true, "bogus"), Addresses::Replace);
        assert_eq!(Addresses::of_provider(true, "2.0.0"), Addresses::Replace);
        assert_eq!(
            Addresses::of_provider(true, "1.1.0"),
            Addresses::UpdateInPlace
        );
        assert_eq!(
            Addresses::of_provider(true, "1.4.2"),
            Addresses::UpdateInPlace
        );
    }

    #[test]
    fn equal_cidrs_compare_by_value() {
        let c = cidrs("10.244.0.0/16");
        let nodes = vec![rn("a", &["10.244.1.0/24"])];
        // The provider lists the host-bits form; it is the same network.
        let routes = vec![route("a", "10.244.1.7/24")];
        let p = plan(&c, &nodes, &routes, Addresses::Ignored);
        assert!(p.create.is_empty() && p.delete.is_empty(), "{p:?}");
    }

    /// Several providers: a route to another provider's Node (or to a Node
    /// nobody owns) is neither deleted nor counted as ours; a route to a
    /// Node that does not exist at all still goes.
    #[test]
    fn routes_to_nodes_another_provider_owns_are_left_alone() {
        let c = cidrs("10.244.0.0/16");
        let nodes = vec![rn("mine", &["10.244.1.0/24"])];
        let routes = vec![
            route("mine", "10.244.1.0/24"),
            route("theirs", "10.244.2.0/24"),
            route("gone", "10.244.3.0/24"),
        ];
        let others = BTreeSet::from(["theirs".to_owned()]);
        let p = plan_owned(&c, &nodes, &others, &routes, Addresses::Ignored);
        assert!(p.create.is_empty(), "{p:?}");
        assert_eq!(
            p.delete
                .iter()
                .map(|r| r.target_node.as_str())
                .collect::<Vec<_>>(),
            ["gone"]
        );
        assert_eq!(
            p.condition_nodes.keys().collect::<Vec<_>>(),
            ["mine"],
            "another's Node's condition is its own provider's"
        );
        // The same listing with one provider: "theirs" has no Node, so its
        // route goes too.
        let p = plan(&c, &nodes, &routes, Addresses::Ignored);
        assert_eq!(p.delete.len(), 2, "{p:?}");
    }

    #[test]
    fn condition_values_are_upstream_strings() {
        assert_eq!(
            network_condition(true),
            ("False", "RouteCreated", "RouteController created a route")
        );
        assert_eq!(
            network_condition(false),
            (
                "True",
                "NoRouteCreated",
                "RouteController failed to create a route"
            )
        );
    }
}

#[cfg(test)]
mod proptests {
    use ccm_provider_sdk::validate;
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;
    use crate::arb;

    fn arb_route() -> BoxedStrategy<proto::Route> {
        (
            arb::text(),
            prop_oneof![arb::dns_name(), arb::text()],
            prop_oneof![3 => arb::cidr_text(), 1 => arb::text()],
            any::<bool>(),
        )
            .prop_map(
                |(name, target_node, destination_cidr, blackhole)| proto::Route {
                    name,
                    target_node,
                    destination_cidr,
                    blackhole,
                    ..Default::default()
                },
            )
            .boxed()
    }

    proptest! {
        /// Whatever the Nodes' pod CIDRs and the provider's routes, every
        /// route created is one the provider accepts, and only routes
        /// inside the cluster CIDRs are deleted.
        #[test]
        fn plans_create_valid_routes_and_delete_only_ours(
            cluster in vec(arb::cidr_text(), 0..3),
            nodes in vec(arb::node(), 0..4),
            routes in vec(arb_route(), 0..5),
            mode in prop_oneof![
                Just(Addresses::Ignored),
                Just(Addresses::Replace),
                Just(Addresses::UpdateInPlace),
            ],
        ) {
            let cluster: Vec<Cidr> = cluster.iter().filter_map(|c| network(c)).collect();
            let nodes: Vec<RouteNode> = nodes.iter().map(RouteNode::from_node).collect();
            let plan = plan(&cluster, &nodes, &routes, mode);
            for c in &plan.create {
                let checked = validate::route("route", &Some(c.route.clone()));
                prop_assert!(checked.is_ok(), "{:?}", checked);
                prop_assert!(network(&c.route.destination_cidr).is_some());
            }
            for d in &plan.delete {
                prop_assert!(responsible(&cluster, &d.destination_cidr));
            }
            // A provider that updates in place never has a route to a Node
            // deleted only to be created again.
            if mode == Addresses::UpdateInPlace {
                for c in &plan.create {
                    let dest = network(&c.route.destination_cidr);
                    prop_assert!(!plan.delete.iter().any(|d| {
                        d.target_node == c.route.target_node
                            && network(&d.destination_cidr) == dest
                    }), "{:?}", plan);
                }
            }
        }
    }
}
