//! The controllers, one folder each: its pure decisions (`decide.rs`,
//! one plan per reconcile) and its I/O (`mod.rs`, a
//! [`ccm_runtime::Reconcile`] that executes the plan) side by side, with
//! its own state and error type. [`start`] is the one table from a
//! controller's name to its task; [`runner`] gives each the same queue,
//! metrics and request-id scope. docs/architecture.md: how to add one.

pub mod cloud_node;
pub mod node_lifecycle;
pub mod node_route;
pub mod pv_label;
pub mod service_lb;

use std::sync::Arc;

use ccm_provider_sdk::ProviderClient;
use ccm_provider_sdk::client::Lane;
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use kube::Client;

use ccm_runtime::events;
use ccm_runtime::{Controller, Reconcile};

use crate::config::{ControllerName, ControllersArgs};
use crate::context::Context;
use crate::k8s::node_store::NodeStore;
use crate::manager::metrics::ControllerMetrics;
use crate::providers::instances::BatchSettings;
use crate::request_id::ProviderScope;

/// Changed Nodes, as the shared Node watch delivers them.
pub type NodeEvents = BoxStream<'static, Arc<Node>>;

/// What the runtime hands to every controller it starts.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    pub provider: ProviderClient,
    /// The shared Node cache, synced before any controller starts.
    pub nodes: NodeStore,
    /// Bumped whenever the node set changes, for controllers that react to
    /// the set rather than to one Node.
    pub node_changes: tokio::sync::watch::Receiver<u64>,
    pub metrics: ControllerMetrics,
    /// `--dry-run-writes`: Events are counted, not published.
    pub dry_run: Option<crate::manager::dry_run::DryRun>,
    /// The provider's share of the cluster (all of it, with one provider).
    pub scope: crate::providers::Scope,
    /// How instance questions to the provider are batched (when it can).
    pub batch: BatchSettings,
}

/// The lane of the call budget the controller `name`'s provider calls wait
/// in: what a person waits for first (a Service's load balancer, a new
/// Node, a new volume's labels), then lifecycle checks, then periodic
/// work. The cloud-node controller's address refresh and the service-lb
/// controller's orphan sweeper take clones in [`Lane::Refresh`].
pub fn lane(name: ControllerName) -> Lane {
    match name {
        ControllerName::ServiceLb => Lane::LoadBalancers,
        ControllerName::CloudNode | ControllerName::PvLabel => Lane::NodeInit,
        ControllerName::CloudNodeLifecycle => Lane::Lifecycle,
        ControllerName::NodeRoute => Lane::Refresh,
    }
}

/// The controller `name` as one task that runs until the process stops.
/// `node_events` is its subscription to the Node watch when
/// [`ControllerName::follows_node_events`].
pub fn start(
    name: ControllerName,
    shared: &Shared,
    args: &ControllersArgs,
    allow_untagged_cloud: bool,
    node_events: Option<NodeEvents>,
) -> BoxFuture<'static, ()> {
    let ctx = Context::new(
        shared.client.clone(),
        crate::providers::ScopedProvider {
            client: shared.provider.in_lane(lane(name)),
            scope: shared.scope.clone(),
        },
        shared.nodes.clone(),
        args.cluster_name.clone(),
        name.canonical(),
        shared.metrics.clone(),
        shared
            .dry_run
            .clone()
            .map_or(events::Delivery::Queued, events::Delivery::DryRun),
    );
    match name {
        ControllerName::CloudNode => cloud_node::run(
            ctx,
            node_events.unwrap_or_else(|| {
                futures::StreamExt::boxed(futures::stream::pending::<Arc<Node>>())
            }),
            cloud_node::Settings {
                workers: args.concurrent_node_syncs.get(),
                status_period: args.node_status_update_frequency,
                status_workers: args.node_status_workers(),
                batch: shared.batch,
            },
        )
        .boxed(),
        ControllerName::CloudNodeLifecycle => {
            node_lifecycle::run(ctx, args.node_monitor_period, shared.batch).boxed()
        }
        ControllerName::ServiceLb => service_lb::run(
            ctx,
            shared.node_changes.clone(),
            args.concurrent_service_syncs.get(),
            orphan_sweep(args, allow_untagged_cloud),
        )
        .boxed(),
        ControllerName::NodeRoute => node_route::run(
            ctx,
            args.cluster_cidr.0.clone(),
            args.route_reconciliation_period,
            shared.node_changes.clone(),
        )
        .boxed(),
        ControllerName::PvLabel => pv_label::run(ctx).boxed(),
    }
}

/// The runner of `reconciler`: the work queue `queue` (its metrics are
/// `workqueue_*{name=queue}`; `queue:<provider>` with several providers),
/// each reconcile under its request id with its provider calls carrying
/// it.
pub(crate) fn runner<R: Reconcile>(
    ctx: &Context,
    reconciler: Arc<R>,
    queue: &'static str,
) -> Controller<R> {
    let queue = crate::providers::qualified(queue, ctx.scope.provider(), ctx.scope.is_hybrid());
    Controller::new(reconciler, queue, ctx.metrics.queues.clone()).scope(ProviderScope)
}

/// The orphan sweeper's period, if it runs. Not with the default cluster
/// name: two clusters that both kept it would each see the other's load
/// balancers as orphans.
fn orphan_sweep(args: &ControllersArgs, allow_untagged_cloud: bool) -> Option<std::time::Duration> {
    if args.load_balancer_orphan_sweep_period.is_zero() {
        return None;
    }
    if args.cluster_name == crate::config::DEFAULT_CLUSTER_NAME && !allow_untagged_cloud {
        tracing::warn!(
            "the load balancer orphan sweeper is off: --cluster-name is the default {:?}, which other clusters sharing the cloud account may use too; set --cluster-name (or --allow-untagged-cloud to sweep anyway)",
            crate::config::DEFAULT_CLUSTER_NAME
        );
        return None;
    }
    Some(args.load_balancer_orphan_sweep_period)
}
