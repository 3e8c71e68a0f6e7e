//! node-route-controller: one cloud route per Node pod CIDR, inside the
//! cluster CIDRs only, and each Node's NetworkUnavailable condition.
//!
//! A full reconcile (ListRoutes, then deletes, then creates) runs every
//! `--route-reconciliation-period`, start to start, as upstream. Between
//! them, a Node change (added, deleted, new pod CIDRs or addresses) is
//! acted on within about a second by reconciling against the last listing,
//! kept current with our own creates and deletes: prompt, without listing
//! the cloud's routes more than once per period.
//!
//! With several providers each has its own instance and route table: it
//! routes the pod CIDRs of the Nodes it owns only, and leaves a listed
//! route to any other Node alone (that Node is not gone).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccm_provider_sdk::proto::{self, Capability};
use ccm_runtime::{Action, KeyName, Reconcile};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Patch;
use kube::runtime::events::EventType;
use serde_json::json;

mod decide;

use decide::{Addresses, Cidr, Plan, RouteNode, network};

use crate::context::Context;
use crate::k8s::{self, node};
use crate::request_id;

/// Cloud route operations in flight at most, as upstream.
const MAX_IN_FLIGHT: usize = 200;
/// How long a Node change waits for more before the routes follow.
const CHANGE_COALESCE: Duration = Duration::from_secs(1);

pub struct Routes {
    ctx: Arc<Context>,
    cluster: Vec<Cidr>,
    addresses: Addresses,
    /// The last listing, updated with our own creates and deletes.
    known: tokio::sync::Mutex<Option<Vec<proto::Route>>>,
}

/// The Nodes whose routes one reconcile decides.
struct Owned {
    infos: Vec<RouteNode>,
    by_name: BTreeMap<String, Arc<Node>>,
    /// Every other Node's name (several providers: not ours to route, and
    /// not gone either).
    others: BTreeSet<String>,
}

impl Routes {
    fn nodes(&self) -> Owned {
        let (mine, others): (Vec<_>, Vec<_>) = self
            .ctx
            .nodes
            .state()
            .into_iter()
            .partition(|n| self.ctx.scope.owns_node(n));
        Owned {
            infos: mine.iter().map(|n| RouteNode::from_node(n)).collect(),
            by_name: mine
                .into_iter()
                .map(|n| (node::name(&n).to_owned(), n))
                .collect(),
            others: others.iter().map(|n| node::name(n).to_owned()).collect(),
        }
    }

    /// One reconcile. `list`: ask the provider for its routes first (a
    /// full reconcile); otherwise use the last listing.
    async fn sync(&self, list: bool) -> Result<(), ccm_provider_sdk::ClientError> {
        self.ctx.metrics.route_syncs.inc();
        let mut known = self.known.lock().await;
        if list || known.is_none() {
            let listing = self.ctx.provider.list_routes(&self.ctx.cluster_name);
            *known = Some(
                request_id::scoped(request_id::routes(&self.ctx.cluster_name), listing).await?,
            );
        }
        let routes = known.as_mut().expect("listed above");
        let owned = self.nodes();
        let plan = decide::plan_owned(
            &self.cluster,
            &owned.infos,
            &owned.others,
            routes,
            self.addresses,
        );
        if plan.delete.is_empty() && plan.create.is_empty() && !list {
            return Ok(());
        }
        self.apply(plan, routes, &owned.by_name).await;
        Ok(())
    }

    async fn apply(
        &self,
        plan: Plan,
        routes: &mut Vec<proto::Route>,
        nodes: &BTreeMap<String, Arc<Node>>,
    ) {
        let ctx = &self.ctx;
        // Deletes first, always: a create for a destination just freed
        // must not meet the old route. (A route whose addresses changed is
        // deleted only for a provider that cannot update it in place.)
        let deleted: Vec<proto::Route> = futures::stream::iter(plan.delete)
            .map(|r| async move {
                let deleting = ctx.provider.delete_route(&ctx.cluster_name, r.clone());
                match request_id::scoped(request_id::route(&r.name), deleting).await {
                    Ok(()) => {
                        tracing::info!(route = %r.name, destination = %r.destination_cidr, target = %r.target_node, "deleted route");
                        Some(r)
                    }
                    Err(e) => {
                        tracing::warn!(route = %r.name, destination = %r.destination_cidr, error = %e, "could not delete route");
                        None
                    }
                }
            })
            .buffer_unordered(MAX_IN_FLIGHT)
            .filter_map(|r| async move { r })
            .collect()
            .await;
        routes.retain(|r| !deleted.contains(r));

        let results: Vec<(decide::Create, Result<Option<proto::Route>, String>)> =
            futures::stream::iter(plan.create)
                .map(|c| async move {
                    let started = Instant::now();
                    let creating =
                        ctx.provider
                            .create_route(&ctx.cluster_name, &c.name_hint, c.route.clone());
                    let r = request_id::scoped(request_id::node_named(&c.node), creating).await;
                    let r = match r {
                        Ok(created) => Ok(created),
                        Err(e) => {
                            let message = format!(
                                "Could not create route {} {} for node {} after {:?}: {e}",
                                c.name_hint,
                                c.route.destination_cidr,
                                c.node,
                                started.elapsed()
                            );
                            if let Some(n) = nodes.get(&c.node) {
                                ctx.event(
                                    n.as_ref(),
                                    EventType::Warning,
                                    "FailedToCreateRoute",
                                    message.clone(),
                                    "CreateRoute",
                                )
                                .await;
                            }
                            Err(message)
                        }
                    };
                    (c, r)
                })
                .buffer_unordered(MAX_IN_FLIGHT)
                .collect()
                .await;
        let mut created_all: BTreeMap<String, bool> = plan.condition_nodes;
        let mut now_routed: Vec<proto::Route> = Vec::new();
        for (c, r) in results {
            match r {
                Ok(created) => {
                    if c.in_place {
                        tracing::info!(node = %c.node, destination = %c.route.destination_cidr, "updated route in place");
                    } else {
                        tracing::info!(node = %c.node, destination = %c.route.destination_cidr, "created route");
                    }
                    now_routed.push(created.unwrap_or(c.route));
                }
                Err(message) => {
                    tracing::warn!("{message}");
                    created_all.insert(c.node, false);
                }
            }
        }
        // The provider now has these routes, in place of any it listed
        // for the same node and destination (an in-place update).
        let replaced: std::collections::BTreeSet<(&str, Option<Cidr>)> = now_routed
            .iter()
            .map(|r| (r.target_node.as_str(), network(&r.destination_cidr)))
            .collect();
        routes.retain(|r| {
            !replaced.contains(&(r.target_node.as_str(), network(&r.destination_cidr)))
        });
        routes.extend(now_routed);
        futures::stream::iter(created_all)
            .for_each_concurrent(MAX_IN_FLIGHT, |(name, ok)| async move {
                if let Some(n) = nodes.get(&name) {
                    self.set_condition(n, ok).await;
                }
            })
            .await;
    }

    /// NetworkUnavailable, patched only when status or reason differ.
    async fn set_condition(&self, n: &Node, routes_created: bool) {
        let (status, reason, message) = decide::network_condition(routes_created);
        if decide::condition_current(n, status, reason) {
            return;
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let patch = json!({"status": {"conditions": [{
            "type": decide::NETWORK_UNAVAILABLE,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }]}});
        let written = k8s::node_write::write_node(&self.ctx.client, "patch_status", |r| {
            let pp = self.ctx.patch_params();
            r.patch_subresource("status", node::name(n), &pp, &Patch::Strategic(patch))
        })
        .await;
        if let Err(e) = written {
            tracing::warn!(node = node::name(n), error = %e, "could not update the NetworkUnavailable condition");
        }
    }
}

/// A pass over the whole node set: the queue's keys (one worker, so one
/// pass at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// Every `--route-reconciliation-period`: ListRoutes first.
    Full,
    /// After Node changes: against the last listing.
    NodesChanged,
}

impl KeyName for Pass {
    fn key_name(&self) -> String {
        match self {
            Pass::Full => "routes".into(),
            Pass::NodesChanged => "routes-after-node-changes".into(),
        }
    }
}

impl Reconcile for Routes {
    type Key = Pass;
    type Object = Pass;
    type Error = ccm_provider_sdk::ClientError;

    async fn reconcile(&self, pass: Arc<Pass>) -> Result<Action, Self::Error> {
        self.sync(*pass == Pass::Full).await?;
        Ok(Action::await_change())
    }

    /// No retry: the next full pass comes with the period.
    fn error_policy(&self, pass: &Pass, e: &Self::Error, _failures: u32) -> Action {
        match pass {
            Pass::Full => tracing::warn!(error = %e, "error listing routes; retrying next period"),
            Pass::NodesChanged => tracing::warn!(error = %e, "error listing routes"),
        }
        Action::await_change()
    }

    /// Each route call carries its route's or Node's id; the listing
    /// carries `routes/<cluster>`.
    fn request_id(&self, _: &Pass, _: Option<&Self::Object>) -> Option<String> {
        None
    }
}

/// Runs the controller until the process stops. Call once the node cache
/// has synced.
pub async fn run(
    ctx: Arc<Context>,
    cluster: Vec<Cidr>,
    period: Duration,
    mut node_changes: tokio::sync::watch::Receiver<u64>,
) {
    let addresses = match ctx.provider.handshake().await {
        Ok(h) => Addresses::of_provider(
            h.has(Capability::RoutesTargetNodeAddresses),
            &h.info.contract_version,
        ),
        Err(_) => Addresses::Ignored,
    };
    let routes = Routes {
        ctx: ctx.clone(),
        cluster,
        addresses,
        known: tokio::sync::Mutex::new(None),
    };
    // Start to start. A pass longer than the period does not queue up
    // missed ones: the key is in progress, so it goes round once more.
    let full = futures::stream::unfold(tokio::time::Instant::now(), move |next| async move {
        tokio::time::sleep_until(next).await;
        let now = tokio::time::Instant::now();
        Some((Pass::Full, (next + period).max(now)))
    });
    node_changes.mark_unchanged();
    // The watch's end (sender dropped) ends the controller.
    let changed = futures::stream::unfold(node_changes, |mut changes| async move {
        changes.changed().await.ok()?;
        tokio::time::sleep(CHANGE_COALESCE).await;
        changes.mark_unchanged();
        Some((Pass::NodesChanged, changes))
    });
    super::runner(&ctx, Arc::new(routes), "Routes")
        .lookup(|pass| Some(Arc::new(*pass)))
        .changes(changed)
        .resyncs(full)
        .run()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use ccm_fake_provider::FakeConfig;
    use ccm_fake_provider::Method;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};
    use kube::api::ObjectMeta;

    fn node(name: &str, pod_cidr: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidrs: Some(vec![pod_cidr.into()]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A Node with an InternalIP, as the routes of a provider with
    /// CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES carry.
    fn addressed(name: &str, pod_cidr: &str, ip: &str) -> Node {
        let mut n = node(name, pod_cidr);
        n.status = Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            }]),
            ..Default::default()
        });
        n
    }

    fn route_calls(provider: &Provider) -> (usize, usize) {
        (
            provider.fake.calls_of(Method::DeleteRoute).len(),
            provider.fake.calls_of(Method::CreateRoute).len(),
        )
    }

    /// Issue 25, finding 1: a provider listing its routes without the
    /// addresses they were created with had every route deleted and created
    /// again by every full reconcile, each deletion an outage of that
    /// Node's pod CIDR.
    #[tokio::test]
    async fn a_listing_without_addresses_does_not_replace_routes_in_steady_state() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, _api) = accepting_api();
        let ctx = context(
            client,
            &provider,
            vec![
                addressed("n1", "10.244.1.0/24", "10.0.0.1"),
                addressed("n2", "10.244.2.0/24", "10.0.0.2"),
            ],
        );
        let routes = Routes {
            ctx,
            cluster: vec![Cidr::parse("10.244.0.0/16").unwrap()],
            addresses: Addresses::UpdateInPlace,
            known: tokio::sync::Mutex::new(None),
        };
        routes.sync(true).await.unwrap();
        assert_eq!(route_calls(&provider), (0, 2), "converged: two creates");
        for _ in 0..3 {
            routes.sync(true).await.unwrap();
            routes.sync(false).await.unwrap();
        }
        assert_eq!(
            route_calls(&provider),
            (0, 2),
            "(DeleteRoute, CreateRoute) calls after three more full reconciles"
        );
    }

    /// A Node whose address changed: one CreateRoute updates its route in
    /// place where the provider's contract has that rule, with no moment
    /// without a route; a provider declaring 1.0.0 gets delete, then create.
    #[tokio::test]
    async fn a_changed_address_is_one_create_in_place_and_no_delete() {
        for (mode, want) in [
            (Addresses::UpdateInPlace, (0, 1)),
            (Addresses::Replace, (1, 1)),
        ] {
            let provider = fake_provider(FakeConfig::default());
            ready(&provider).await;
            let routes_for = |ip: &str| {
                let (client, _api) = accepting_api();
                Routes {
                    ctx: context(
                        client,
                        &provider,
                        vec![addressed("n1", "10.244.1.0/24", ip)],
                    ),
                    cluster: vec![Cidr::parse("10.244.0.0/16").unwrap()],
                    addresses: mode,
                    known: tokio::sync::Mutex::new(None),
                }
            };
            routes_for("10.0.0.1").sync(true).await.unwrap();
            provider.fake.clear_calls();
            let moved = routes_for("10.0.0.9");
            moved.sync(true).await.unwrap();
            assert_eq!(route_calls(&provider), want, "{mode:?}");
            let cloud = provider.fake.dump().routes;
            assert_eq!(cloud.len(), 1, "{mode:?}: {cloud:?}");
            assert_eq!(cloud[0].target_node_addresses[0].address, "10.0.0.9");
            // The listing now matches: nothing more to do.
            provider.fake.clear_calls();
            moved.sync(true).await.unwrap();
            assert_eq!(route_calls(&provider), (0, 0), "{mode:?}");
        }
    }

    #[tokio::test]
    async fn a_route_per_pod_cidr_then_the_condition_and_no_repeat() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, api) = accepting_api();
        let ctx = context(
            client,
            &provider,
            vec![node("n1", "10.244.1.0/24"), node("n2", "10.244.2.0/24")],
        );
        let routes = Routes {
            ctx,
            cluster: vec![Cidr::parse("10.244.0.0/16").unwrap()],
            addresses: Addresses::Ignored,
            known: tokio::sync::Mutex::new(None),
        };
        routes.sync(true).await.unwrap();

        let mut cloud: Vec<(String, String)> = provider
            .fake
            .dump()
            .routes
            .into_iter()
            .map(|r| (r.target_node, r.destination_cidr))
            .collect();
        cloud.sort();
        assert_eq!(
            cloud,
            [
                ("n1".to_owned(), "10.244.1.0/24".to_owned()),
                ("n2".to_owned(), "10.244.2.0/24".to_owned())
            ]
        );
        let mut writes = api.writes();
        writes.sort();
        assert_eq!(
            writes,
            [
                "PATCH /api/v1/nodes/n1/status",
                "PATCH /api/v1/nodes/n2/status"
            ]
        );
        let condition = &api.all()[0].body["status"]["conditions"][0];
        assert_eq!(condition["type"], "NetworkUnavailable");
        assert_eq!(condition["status"], "False");

        // A second pass against the last listing creates nothing more.
        routes.sync(false).await.unwrap();
        assert_eq!(
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::CreateRoute)
                .len(),
            2
        );
    }

    /// Several providers: each routes its own Nodes' pod CIDRs only, and a
    /// route in its table to another provider's Node stays (that Node is
    /// not gone); a route to a Node that no longer exists goes.
    #[tokio::test]
    async fn a_provider_routes_its_own_nodes_and_leaves_the_others_routes() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        for (node, cidr) in [("theirs", "10.244.2.0/24"), ("gone", "10.244.3.0/24")] {
            provider
                .client
                .create_route(
                    "kubernetes",
                    node,
                    proto::Route {
                        target_node: node.into(),
                        destination_cidr: cidr.into(),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
        }
        provider.fake.clear_calls();
        let (client, api) = accepting_api();
        let routing = two_providers();
        let ctx = hybrid_context(
            client,
            &provider,
            vec![
                node("mine", "10.244.1.0/24"),
                on_platform(node("theirs", "10.244.2.0/24"), "b"),
            ],
            &routing,
            "a",
        );
        let routes = Routes {
            ctx,
            cluster: vec![Cidr::parse("10.244.0.0/16").unwrap()],
            addresses: Addresses::Ignored,
            known: tokio::sync::Mutex::new(None),
        };
        routes.sync(true).await.unwrap();
        let mut cloud: Vec<String> = provider
            .fake
            .dump()
            .routes
            .into_iter()
            .map(|r| r.target_node)
            .collect();
        cloud.sort();
        assert_eq!(cloud, ["mine", "theirs"]);
        assert_eq!(api.writes(), ["PATCH /api/v1/nodes/mine/status"]);
    }
}
