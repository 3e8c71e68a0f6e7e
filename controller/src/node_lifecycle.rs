//! cloud-node-lifecycle-controller: deletes Nodes whose instance the provider
//! says is gone, and taints Nodes whose instance is shut down.
//!
//! One guard beyond upstream: a Node is deleted only on an explicit
//! `NOT_EXISTS` answer. Errors, timeouts, an unreachable provider or an
//! answer the contract does not allow (UNSPECIFIED) delete nothing; the Node
//! is looked at again on the next pass. The delete is also conditional on the
//! Node's uid, so a Node re-created under the same name is never removed.

use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::{Existence, ShutdownState};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Api;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::context::Context;
use crate::node;

fn shutdown_taint() -> Taint {
    Taint {
        key: node::SHUTDOWN_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }
}

fn is_shutdown_taint(t: &Taint) -> bool {
    t.key == node::SHUTDOWN_TAINT && t.effect == "NoSchedule"
}

/// Replaces the taint list, conditional on the resourceVersion we read.
async fn set_taints(ctx: &Context, n: &Node, taints: Vec<Taint>) -> Result<(), kube::Error> {
    Api::<Node>::all(ctx.client.clone())
        .patch(
            node::name(n),
            &ctx.patch_params(),
            &Patch::Merge(json!({
                "metadata": { "resourceVersion": n.metadata.resource_version },
                "spec": { "taints": taints },
            })),
        )
        .await
        .map(|_| ())
}

async fn delete(ctx: &Context, n: &Node) {
    let name = node::name(n);
    ctx.event(
        n,
        EventType::Normal,
        "DeletingNode",
        format!("Deleting node {name} because it does not exist in the cloud provider"),
        "DeleteNode",
    )
    .await;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: n.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match Api::<Node>::all(ctx.client.clone())
        .delete(name, &params)
        .await
    {
        Ok(_) => tracing::info!(node = name, "deleted node whose instance no longer exists"),
        Err(e) => {
            tracing::warn!(node = name, error = %e, "deleting node");
            ctx.event(
                n,
                EventType::Warning,
                "DeletingNodeFailed",
                format!("Failed deleting node {name}: {e}"),
                "DeleteNode",
            )
            .await;
        }
    }
}

/// One node, one pass.
pub async fn check(ctx: &Context, n: &Node) {
    let name = node::name(n);
    if node::ready_status(n) == "True" {
        // Ready nodes never cost a provider call.
        if node::taints(n).iter().any(is_shutdown_taint) {
            let rest = node::taints(n)
                .iter()
                .filter(|t| !is_shutdown_taint(t))
                .cloned()
                .collect();
            if let Err(e) = set_taints(ctx, n, rest).await {
                tracing::warn!(node = name, error = %e, "removing shutdown taint");
            }
        }
        return;
    }
    match ctx.provider.instance_exists(node::node_ref(n)).await {
        Err(e) => {
            tracing::warn!(node = name, error = %e, "error checking if node exists; not deleting it");
        }
        Ok(Existence::NotExists) => delete(ctx, n).await,
        Ok(Existence::Exists) => match ctx.provider.instance_shutdown(node::node_ref(n)).await {
            Ok(ShutdownState::ShutDown) if !node::taints(n).iter().any(is_shutdown_taint) => {
                let mut taints = node::taints(n).to_vec();
                taints.push(shutdown_taint());
                if let Err(e) = set_taints(ctx, n, taints).await {
                    tracing::warn!(node = name, error = %e, "adding shutdown taint");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(node = name, error = %e, "error checking if node is shut down")
            }
        },
    }
}

/// Checks every Node, serially, every `period` measured from the end of the
/// previous pass.
pub async fn run(ctx: Arc<Context>, period: Duration) {
    loop {
        for n in ctx.nodes.state() {
            check(&ctx, &n).await;
        }
        tokio::time::sleep(period).await;
    }
}
