//! cloud-node-controller: initialises Nodes that carry the uninitialized
//! taint (providerID, topology labels, addresses, taint removal) and keeps
//! initialised Nodes' addresses fresh.
//!
//! Writes per initialisation: one status patch for addresses (skipped when
//! they already match) and one patch of metadata+spec guarded by the Node's
//! resourceVersion. Addresses go first so the Node is never schedulable
//! before its addresses are right (upstream removes the taint first).

use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::ClientError;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::Patch;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::context::{Context, Error, retry_after};
use crate::node;

/// Writes the Node's addresses if they differ; returns the written Node.
async fn patch_addresses(
    ctx: &Context,
    n: &Node,
    cloud: &[ccm_provider_sdk::proto::NodeAddress],
) -> Result<Option<Node>, Error> {
    let Some(addresses) = node::desired_addresses(n, cloud).map_err(Error::Addresses)? else {
        return Ok(None);
    };
    let written = Api::<Node>::all(ctx.client.clone())
        .patch_status(
            node::name(n),
            &ctx.patch_params(),
            // A JSON merge patch replaces the whole list, which is what
            // addresses need (their strategic merge key is wrong upstream).
            &Patch::Merge(json!({ "status": { "addresses": addresses } })),
        )
        .await?;
    Ok(Some(written))
}

/// Zone and region from ZonesService when InstanceMetadata left them
/// empty and the provider has it (upstream's fallback to `Zones`).
async fn zone_fallback(
    ctx: &Context,
    n: &Node,
    mut meta: ccm_provider_sdk::proto::InstanceMetadata,
) -> Result<ccm_provider_sdk::proto::InstanceMetadata, Error> {
    if !meta.zone.is_empty() && !meta.region.is_empty() {
        return Ok(meta);
    }
    let has_zones = ctx
        .provider
        .handshake()
        .await
        .is_ok_and(|h| h.has(ccm_provider_sdk::proto::Capability::Zones));
    if !has_zones {
        return Ok(meta);
    }
    let provider_id = match node::provider_id(n) {
        "" => meta.provider_id.as_str(),
        id => id,
    };
    let zone = if provider_id.is_empty() {
        ctx.provider.zone_by_node_name(node::name(n)).await
    } else {
        ctx.provider.zone_by_provider_id(provider_id).await
    }
    .map_err(|source| Error::Zone {
        node: node::name(n).to_owned(),
        source,
    })?;
    if meta.zone.is_empty() {
        meta.zone = zone.failure_domain;
    }
    if meta.region.is_empty() {
        meta.region = zone.region;
    }
    Ok(meta)
}

async fn initialise(n: &Node, ctx: &Context) -> Result<(), Error> {
    let name = node::name(n).to_owned();
    tracing::info!(node = %name, "initializing node with cloud provider");
    let meta = match ctx.provider.instance_metadata(node::node_ref(n)).await {
        Ok(meta) => meta,
        Err(source) => {
            let undecodable = source.provider_error().is_some_and(|e| {
                // An answer over the message size limit never reaches us.
                e.code() == tonic::Code::ResourceExhausted && e.reason().is_none()
            });
            if matches!(source, ClientError::InvalidResponse { .. }) || undecodable {
                // A provider bug the user can only see here: say what was
                // wrong; nothing was written and the taint stays.
                ctx.event(
                    n,
                    EventType::Warning,
                    "ProviderAnswerRejected",
                    format!("Not initializing node: {source}"),
                    "InitializeNode",
                )
                .await;
            }
            return Err(Error::Metadata { node: name, source });
        }
    };
    let meta = zone_fallback(ctx, n, meta).await?;
    let changes = match node::init_changes(n, &meta) {
        Ok(c) => c,
        Err(e) => {
            ctx.event(
                n,
                EventType::Warning,
                "InitializationBlocked",
                format!("Not initializing node: {e}"),
                "InitializeNode",
            )
            .await;
            return Err(e.into());
        }
    };
    for dropped in &changes.dropped_labels {
        tracing::warn!(node = %name, "not applying additional label {dropped}");
    }
    // Guard the second write with the version our first one produced, so
    // only someone else's change in between makes it conflict.
    let resource_version = match patch_addresses(ctx, n, &meta.node_addresses).await? {
        Some(written) => written.metadata.resource_version,
        None => n.metadata.resource_version.clone(),
    };
    let mut spec = json!({ "taints": changes.taints });
    if let Some(pid) = &changes.provider_id {
        spec["providerID"] = json!(pid);
    }
    // The resourceVersion makes the patch conditional: if the kubelet (or
    // anyone) changed the Node since we read it, the patch fails with 409
    // and we retry from the cache instead of overwriting their taints.
    let patch = json!({
        "metadata": {
            "resourceVersion": resource_version,
            "labels": changes.labels,
        },
        "spec": spec,
    });
    Api::<Node>::all(ctx.client.clone())
        .patch(&name, &ctx.patch_params(), &Patch::Merge(patch))
        .await?;
    ctx.initialised
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.clone());
    tracing::info!(node = %name, "successfully initialized node with cloud provider");
    ctx.event(
        n,
        EventType::Normal,
        "Synced",
        "Node synced successfully".into(),
        "InitializeNode",
    )
    .await;
    Ok(())
}

async fn reconcile(n: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = sync(&n, &ctx).await;
    ctx.metrics
        .queues
        .processed("Nodes", started.elapsed(), result.is_err());
    result
}

async fn sync(n: &Arc<Node>, ctx: &Arc<Context>) -> Result<Action, Error> {
    let n = n.clone();
    let ctx = ctx.clone();
    let tainted = node::has_taint(&n, node::UNINITIALIZED_TAINT);
    {
        // Our own writes come back through the watch after the triggers
        // they caused: a tainted Node we already initialised is a stale
        // cache entry, not work. Once the cache shows the untainted Node, the
        // record goes; a taint added after that is new work.
        let mut done = ctx.initialised.lock().unwrap_or_else(|p| p.into_inner());
        if done.contains(node::name(&n)) {
            if tainted {
                return Ok(Action::await_change());
            }
            done.remove(node::name(&n));
        }
    }
    if tainted {
        initialise(&n, &ctx).await?;
    } else {
        let fixes = node::ga_label_fixes(&n);
        if !fixes.is_empty() {
            Api::<Node>::all(ctx.client.clone())
                .patch(
                    node::name(&n),
                    &ctx.patch_params(),
                    &Patch::Merge(json!({ "metadata": { "labels": fixes } })),
                )
                .await?;
        }
    }
    ctx.backoff.succeeded(node::name(&n));
    Ok(Action::await_change())
}

fn error_policy(n: Arc<Node>, err: &Error, ctx: Arc<Context>) -> Action {
    retry_after(&ctx, node::name(&n), err)
}

/// Runs the controller until the process stops, consuming the node cache's
/// stream.
pub async fn run(
    ctx: Arc<Context>,
    changes: impl futures::Stream<Item = Result<Node, kube::runtime::watcher::Error>> + Send + 'static,
    workers: usize,
) {
    let reader = ctx.nodes.clone();
    Controller::for_stream(changes, reader)
        .with_config(Config::default().concurrency(workers as u16))
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

/// Refreshes initialised Nodes' addresses every `period`, measured from the
/// end of the previous pass, as upstream's UpdateNodeStatus.
/// Call once the node cache has synced.
pub async fn refresh_addresses(ctx: Arc<Context>, period: Duration, workers: usize) {
    loop {
        let nodes: Vec<Arc<Node>> = ctx
            .nodes
            .state()
            .into_iter()
            .filter(|n| !node::has_taint(n, node::UNINITIALIZED_TAINT))
            .collect();
        futures::stream::iter(nodes)
            .for_each_concurrent(workers.max(1), |n| {
                let ctx = ctx.clone();
                async move {
                    match ctx.provider.instance_metadata(node::node_ref(&n)).await {
                        Ok(meta) => {
                            if let Err(e) = patch_addresses(&ctx, &n, &meta.node_addresses).await {
                                tracing::warn!(node = node::name(&n), error = %e, "updating node addresses");
                            }
                        }
                        Err(e) => tracing::warn!(
                            node = node::name(&n),
                            error = %e,
                            "error getting instance metadata for node addresses"
                        ),
                    }
                }
            })
            .await;
        tokio::time::sleep(period).await;
    }
}
