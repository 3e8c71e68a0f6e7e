//! cloud-node-lifecycle-controller: deletes Nodes whose instance the provider
//! says is gone, and taints Nodes whose instance is shut down.
//!
//! One guard beyond upstream: a Node is deleted only on an explicit
//! `NOT_EXISTS` answer. Errors, timeouts, an unreachable provider or an
//! answer the contract does not allow (UNSPECIFIED) delete nothing; the Node
//! is looked at again on the next pass. The delete is also conditional on the
//! Node's uid, so a Node re-created under the same name is never removed.

mod decide;

use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::{Existence, ShutdownState};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Api;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::events::EventType;
use serde_json::json;

use super::context::Context;
use crate::k8s::node;
pub use decide::taints_for;

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
        if let Some(taints) = taints_for(n, false)
            && let Err(e) = set_taints(ctx, n, taints).await
        {
            tracing::warn!(node = name, error = %e, "removing shutdown taint");
        }
        return;
    }
    match ctx.provider.instance_exists(node::node_ref(n)).await {
        Err(e) => {
            tracing::warn!(node = name, error = %e, "error checking if node exists; not deleting it");
        }
        Ok(Existence::NotExists) => delete(ctx, n).await,
        Ok(Existence::Exists) => match ctx.provider.instance_shutdown(node::node_ref(n)).await {
            Ok(ShutdownState::ShutDown) => {
                if let Some(taints) = taints_for(n, true)
                    && let Err(e) = set_taints(ctx, n, taints).await
                {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::*;
    use ccm_fake_provider::{ErrorInjection, ErrorKind, FakeConfig, InstanceSpec, Method};
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
    use kube::api::ObjectMeta;

    fn node(name: &str, ready: &str, taints: &[&str]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some("3".into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(format!("fake://{name}")),
                taints: Some(
                    taints
                        .iter()
                        .map(|k| Taint {
                            key: (*k).into(),
                            effect: "NoSchedule".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn cloud(instances: &[&str]) -> Provider {
        fake_provider(FakeConfig {
            auto_create_instances: false,
            instances: instances.iter().map(|n| InstanceSpec::named(*n)).collect(),
            ..FakeConfig::default()
        })
    }

    #[tokio::test]
    async fn a_gone_instance_deletes_its_node_by_uid() {
        let provider = cloud(&[]);
        ready(&provider).await;
        let (client, api) = accepting_api();
        let ctx = context(client, &provider, vec![]);
        check(&ctx, &node("gone", "Unknown", &[])).await;
        let delete = api
            .all()
            .into_iter()
            .find(|c| c.method == http::Method::DELETE)
            .expect("a delete");
        assert_eq!(delete.line(), "DELETE /api/v1/nodes/gone");
        assert_eq!(delete.body["preconditions"]["uid"], "uid-gone");
        assert_eq!(api.event_reasons(), ["DeletingNode"]);
    }

    #[tokio::test]
    async fn an_error_deletes_nothing() {
        let provider = cloud(&[]);
        ready(&provider).await;
        provider.fake.inject_error(
            Method::InstanceExists,
            ErrorInjection::new(ErrorKind::CloudUnavailable, "cloud down"),
        );
        let (client, api) = accepting_api();
        let ctx = context(client, &provider, vec![]);
        check(&ctx, &node("maybe", "False", &[])).await;
        assert!(api.all().is_empty(), "{:?}", api.writes());
    }

    #[tokio::test]
    async fn shut_down_instances_are_tainted_and_ready_nodes_cost_no_call() {
        let provider = cloud(&["sleepy"]);
        ready(&provider).await;
        provider.fake.shutdown_instance("sleepy").unwrap();
        let (client, api) = accepting_api();
        let ctx = context(client, &provider, vec![]);
        check(&ctx, &node("sleepy", "False", &["dedicated"])).await;
        let patch = api.all().pop().expect("a patch");
        assert_eq!(patch.line(), "PATCH /api/v1/nodes/sleepy");
        assert_eq!(patch.body["metadata"]["resourceVersion"], "3");
        assert_eq!(patch.body["spec"]["taints"][1]["key"], node::SHUTDOWN_TAINT);

        provider.fake.clear_calls();
        check(&ctx, &node("sleepy", "True", &[node::SHUTDOWN_TAINT])).await;
        assert_eq!(api.all().pop().unwrap().body["spec"]["taints"], json!([]));
        assert!(provider.fake.calls_of(Method::InstanceExists).is_empty());
    }
}
