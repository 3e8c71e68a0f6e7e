//! node-route-controller: one cloud route per Node pod CIDR, inside the
//! cluster CIDRs only, and each Node's NetworkUnavailable condition.
//!
//! A full reconcile (ListRoutes, then deletes, then creates) runs every
//! `--route-reconciliation-period`, start to start, as upstream. Between
//! them, a Node change (added, deleted, new pod CIDRs or addresses) is
//! acted on within about a second by reconciling against the last listing,
//! kept current with our own creates and deletes: prompt, without listing
//! the cloud's routes more than once per period.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccm_provider_sdk::proto::{self, Capability};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::Patch;
use kube::runtime::events::EventType;
use serde_json::json;

mod decide;

use decide::{Cidr, Plan, RouteNode};

use super::context::Context;
use super::request_id;
use crate::k8s::{self, node};

/// Cloud route operations in flight at most, as upstream.
const MAX_IN_FLIGHT: usize = 200;
/// How long a Node change waits for more before the routes follow.
const CHANGE_COALESCE: Duration = Duration::from_secs(1);

pub struct Routes {
    ctx: Arc<Context>,
    cluster: Vec<Cidr>,
    with_addresses: bool,
    /// The last listing, updated with our own creates and deletes.
    known: tokio::sync::Mutex<Option<Vec<proto::Route>>>,
}

impl Routes {
    fn nodes(&self) -> (Vec<RouteNode>, BTreeMap<String, Arc<Node>>) {
        let all = self.ctx.nodes.state();
        let infos = all.iter().map(|n| RouteNode::from_node(n)).collect();
        let by_name = all
            .into_iter()
            .map(|n| (node::name(&n).to_owned(), n))
            .collect();
        (infos, by_name)
    }

    /// One reconcile. `list`: ask the provider for its routes first (a
    /// full reconcile); otherwise use the last listing.
    async fn reconcile(&self, list: bool) -> Result<(), ccm_provider_sdk::ClientError> {
        self.ctx.metrics.route_syncs.inc();
        let started = Instant::now();
        let result = self.reconcile_once(list).await;
        self.ctx
            .metrics
            .queues
            .processed("Routes", started.elapsed(), result.is_err());
        result
    }

    async fn reconcile_once(&self, list: bool) -> Result<(), ccm_provider_sdk::ClientError> {
        let mut known = self.known.lock().await;
        if list || known.is_none() {
            let listing = self.ctx.provider.list_routes(&self.ctx.cluster_name);
            *known = Some(
                request_id::scoped(request_id::routes(&self.ctx.cluster_name), listing).await?,
            );
        }
        let routes = known.as_mut().expect("listed above");
        let (nodes, by_name) = self.nodes();
        let plan = decide::plan(&self.cluster, &nodes, routes, self.with_addresses);
        if plan.delete.is_empty() && plan.create.is_empty() && !list {
            return Ok(());
        }
        self.apply(plan, routes, &by_name).await;
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
        // must not meet the old route.
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
        for (c, r) in results {
            match r {
                Ok(created) => {
                    tracing::info!(node = %c.node, destination = %c.route.destination_cidr, "created route");
                    routes.push(created.unwrap_or(c.route));
                }
                Err(message) => {
                    tracing::warn!("{message}");
                    created_all.insert(c.node, false);
                }
            }
        }
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
        let nodes = Api::<Node>::all(self.ctx.client.clone());
        let written = k8s::write_unread(&nodes, "patch_status", |r| {
            let pp = self.ctx.patch_params();
            r.patch_subresource("status", node::name(n), &pp, &Patch::Strategic(patch))
        })
        .await;
        if let Err(e) = written {
            tracing::warn!(node = node::name(n), error = %e, "could not update the NetworkUnavailable condition");
        }
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
    let with_addresses = ctx
        .provider
        .handshake()
        .await
        .is_ok_and(|h| h.has(Capability::RoutesTargetNodeAddresses));
    let routes = Routes {
        ctx,
        cluster,
        with_addresses,
        known: tokio::sync::Mutex::new(None),
    };
    node_changes.mark_unchanged();
    let mut next_full = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next_full) => {
                next_full += period;
                if let Err(e) = routes.reconcile(true).await {
                    tracing::warn!(error = %e, "error listing routes; retrying next period");
                }
                // The full reconcile saw every change so far.
                node_changes.mark_unchanged();
            }
            changed = node_changes.changed() => {
                if changed.is_err() {
                    return;
                }
                tokio::time::sleep(CHANGE_COALESCE).await;
                node_changes.mark_unchanged();
                if let Err(e) = routes.reconcile(false).await {
                    tracing::warn!(error = %e, "error listing routes");
                }
            }
        }
        // A reconcile longer than the period does not queue up missed ones.
        let now = tokio::time::Instant::now();
        if next_full < now {
            next_full = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::*;
    use ccm_fake_provider::FakeConfig;
    use k8s_openapi::api::core::v1::NodeSpec;
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
            with_addresses: false,
            known: tokio::sync::Mutex::new(None),
        };
        routes.reconcile(true).await.unwrap();

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
        routes.reconcile(false).await.unwrap();
        assert_eq!(
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::CreateRoute)
                .len(),
            2
        );
    }
}
