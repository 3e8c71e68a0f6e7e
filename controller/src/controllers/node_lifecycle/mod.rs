//! cloud-node-lifecycle-controller: deletes Nodes whose instance the provider
//! says is gone, and taints Nodes whose instance is shut down.
//!
//! One guard beyond upstream: a Node is deleted only on an explicit
//! `NOT_EXISTS` answer. Errors, timeouts, an unreachable provider or an
//! answer the contract does not allow (UNSPECIFIED) delete nothing; the Node
//! is looked at again on the next pass. The delete is also conditional on the
//! Node's uid, so a Node re-created under the same name is never removed,
//! and a Node whose providerID is another cloud's (or malformed) is never
//! asked about at all: the provider can only know its own instances.
//!
//! A pass asks about the NotReady Nodes only. With a provider that batches
//! (CAPABILITY_INSTANCES_BATCH) it asks whether each exists, all in
//! batches, then whether those that exist are shut down, in batches again;
//! otherwise it checks one Node after the other with the single calls, as
//! upstream.

mod decide;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::{ClientError, Existence, ShutdownState};
use ccm_runtime::{Action, Reconcile, Singleton};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Api;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::events::EventType;
use serde_json::json;

use std::collections::HashSet;

use parking_lot::Mutex;

use crate::context::Context;
use crate::k8s::{self, node};
use crate::providers::instances::{BatchSettings, Instances};
use crate::request_id;
pub use decide::{Ownership, Plan, ownership, plan, taints_for};

/// The controller's state.
pub struct Lifecycle {
    ctx: Arc<Context>,
    /// Node uids already told they are not the provider's to judge.
    reported_not_ours: Mutex<HashSet<String>>,
    /// The existence and shutdown questions.
    instances: Instances,
}

impl Lifecycle {
    pub fn new(ctx: Arc<Context>) -> Self {
        Self::with(ctx, BatchSettings::default())
    }

    pub fn with(ctx: Arc<Context>, batch: BatchSettings) -> Self {
        let instances = Instances::new(
            ctx.provider.clone(),
            batch,
            ctx.metrics.instance_batches.clone(),
        );
        Lifecycle {
            ctx,
            reported_not_ours: Mutex::default(),
            instances,
        }
    }

    /// Whether the Node is to be asked about: the provider's, NotReady,
    /// and judgeable. A Ready Node's shutdown taint goes here, without a
    /// question.
    async fn due(&self, n: &Node) -> bool {
        let ctx = &self.ctx;
        if !ctx.scope.owns_node(n) {
            return false;
        }
        if let Plan::Ready { untaint } = plan(n) {
            if let Some(taints) = untaint
                && let Err(e) = set_taints(ctx, n, taints).await
            {
                tracing::warn!(node = node::name(n), error = %e, "removing shutdown taint");
            }
            return false;
        }
        self.judgeable(n).await
    }

    /// Whether the provider may judge the Node's instance; says once per
    /// Node (a Warning event) when it may not.
    async fn judgeable(&self, n: &Node) -> bool {
        let handshake = match self.ctx.provider.handshake().await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(node = node::name(n), error = %e, "no provider handshake; not checking node");
                return false;
            }
        };
        let Ownership::NotOurs(why) = ownership(node::provider_id(n), &handshake.schemes()) else {
            return true;
        };
        let uid = n.metadata.uid.clone().unwrap_or_default();
        if self.reported_not_ours.lock().insert(uid) {
            tracing::warn!(
                node = node::name(n),
                "{why}; this controller never deletes or taints it"
            );
            self.ctx
                .event(
                    n,
                    EventType::Warning,
                    "ProviderIDNotOurs",
                    format!("Not checking the node with the cloud provider: {why}"),
                    "CheckNode",
                )
                .await;
        }
        false
    }
}

/// Replaces the taint list, conditional on the resourceVersion we read.
async fn set_taints(ctx: &Context, n: &Node, taints: Vec<Taint>) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": { "resourceVersion": n.metadata.resource_version },
        "spec": { "taints": taints },
    });
    k8s::node_write::write_node(&ctx.client, "patch", |r| {
        r.patch(node::name(n), &ctx.patch_params(), &Patch::Merge(patch))
    })
    .await
    .map(drop)
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

/// A Ready Node without the shutdown taint: nothing to ask or write. Most
/// Nodes of a pass are, so they are passed over before a request id and a
/// span are made for each (which cost the steady state measurably:
/// docs/benchmarks.md).
fn settled(n: &Node) -> bool {
    matches!(plan(n), Plan::Ready { untaint: None })
}

/// One node, one pass. A Node this provider does not own (several
/// providers) is not looked at: only its owner ever judges it.
pub async fn check(state: &Lifecycle, n: &Node) {
    if !state.due(n).await {
        return;
    }
    let exists = state.instances.exists(node::node_ref(n)).await;
    if on_existence(&state.ctx, n, exists).await {
        let shutdown = state.instances.shutdown(node::node_ref(n)).await;
        on_shutdown(&state.ctx, n, shutdown).await;
    }
}

/// Acts on the answer to whether the Node's instance exists: deletes the
/// Node on an explicit `NotExists`, nothing else. Whether it exists (to
/// be asked whether it is shut down).
async fn on_existence(ctx: &Context, n: &Node, exists: Result<Existence, ClientError>) -> bool {
    match exists {
        Err(e) => {
            tracing::warn!(node = node::name(n), error = %e, "error checking if node exists; not deleting it");
            false
        }
        Ok(Existence::NotExists) => {
            delete(ctx, n).await;
            false
        }
        Ok(Existence::Exists) => true,
    }
}

/// Acts on the answer to whether the Node's instance is shut down: taints
/// a shut-down one.
async fn on_shutdown(ctx: &Context, n: &Node, state: Result<ShutdownState, ClientError>) {
    match state {
        Ok(ShutdownState::ShutDown) => {
            if let Some(taints) = taints_for(n, true)
                && let Err(e) = set_taints(ctx, n, taints).await
            {
                tracing::warn!(node = node::name(n), error = %e, "adding shutdown taint");
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(node = node::name(n), error = %e, "error checking if node is shut down")
        }
    }
}

/// One pass over `nodes` with a provider that batches: existence of every
/// due Node (in batches), then shutdown of those that exist (in batches),
/// then what the answers call for, Node by Node under its request id.
/// `window`: questions outstanding at once.
async fn batched_pass(state: &Lifecycle, nodes: &[Arc<Node>], window: usize) {
    let ctx = &state.ctx;
    // Owned, so the questions' futures borrow nothing per item.
    let mut due: Vec<Arc<Node>> = Vec::new();
    for n in nodes.iter().filter(|n| !settled(n)) {
        if request_id::scoped(request_id::node(n), state.due(n)).await {
            due.push(n.clone());
        }
    }
    let answers: Vec<_> = futures::stream::iter(due)
        .map(|n| async move {
            let exists = state.instances.exists(node::node_ref(&n)).await;
            (n, exists)
        })
        .buffered(window)
        .collect()
        .await;
    let mut existing = Vec::new();
    for (n, exists) in answers {
        if request_id::scoped(request_id::node(&n), on_existence(ctx, &n, exists)).await {
            existing.push(n);
        }
    }
    let answers: Vec<_> = futures::stream::iter(existing)
        .map(|n| async move {
            let shutdown = state.instances.shutdown(node::node_ref(&n)).await;
            (n, shutdown)
        })
        .buffered(window)
        .collect()
        .await;
    for (n, shutdown) in answers {
        request_id::scoped(request_id::node(&n), on_shutdown(ctx, &n, shutdown)).await;
    }
}

/// The controller's one key: a pass over every Node.
const PASS: Singleton = Singleton("node-lifecycle");

/// Passes over every Node, each `period` after the previous one ended:
/// [`check`] on one after the other, or a [`batched_pass`] when the
/// provider batches. A check logs what went wrong and waits for the next
/// pass: nothing is retried sooner, and nothing is deleted on an error.
struct Passes {
    lifecycle: Lifecycle,
    period: Duration,
}

impl Reconcile for Passes {
    type Key = Singleton;
    type Object = Vec<Arc<Node>>;
    type Error = Infallible;

    async fn reconcile(&self, nodes: Arc<Vec<Arc<Node>>>) -> Result<Action, Infallible> {
        let instances = &self.lifecycle.instances;
        if instances.batches().await {
            batched_pass(&self.lifecycle, &nodes, instances.settings().window()).await;
        } else {
            for n in nodes.iter().filter(|n| !settled(n)) {
                request_id::scoped(request_id::node(n), check(&self.lifecycle, n)).await;
            }
        }
        Ok(Action::requeue(self.period))
    }

    /// Each Node's check carries that Node's id.
    fn request_id(&self, _: &Singleton, _: Option<&Self::Object>) -> Option<String> {
        None
    }
}

/// Checks every Node every `period` measured from the end of the previous
/// pass; `batch`: how questions are batched when the provider batches.
pub async fn run(ctx: Arc<Context>, period: Duration, batch: BatchSettings) {
    let passes = Passes {
        lifecycle: Lifecycle::with(ctx.clone(), batch),
        period,
    };
    let nodes = ctx.nodes.clone();
    super::runner(&ctx, Arc::new(passes), "NodeLifecycle")
        .lookup(move |_| Some(Arc::new(nodes.state())))
        .resyncs(futures::stream::once(async { PASS }))
        .run()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
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
        let state = Lifecycle::new(context(client, &provider, vec![]));
        check(&state, &node("gone", "Unknown", &[])).await;
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
        let state = Lifecycle::new(context(client, &provider, vec![]));
        check(&state, &node("maybe", "False", &[])).await;
        assert!(api.all().is_empty(), "{:?}", api.writes());
    }

    #[tokio::test]
    async fn shut_down_instances_are_tainted_and_ready_nodes_cost_no_call() {
        let provider = cloud(&["sleepy"]);
        ready(&provider).await;
        provider.fake.shutdown_instance("sleepy").unwrap();
        let (client, api) = accepting_api();
        let state = Lifecycle::new(context(client, &provider, vec![]));
        check(&state, &node("sleepy", "False", &["dedicated"])).await;
        let patch = api.all().pop().expect("a patch");
        assert_eq!(patch.line(), "PATCH /api/v1/nodes/sleepy");
        assert_eq!(patch.body["metadata"]["resourceVersion"], "3");
        assert_eq!(patch.body["spec"]["taints"][1]["key"], node::SHUTDOWN_TAINT);

        provider.fake.clear_calls();
        check(&state, &node("sleepy", "True", &[node::SHUTDOWN_TAINT])).await;
        assert_eq!(api.all().pop().unwrap().body["spec"]["taints"], json!([]));
        assert!(provider.fake.calls_of(Method::InstanceExists).is_empty());
    }

    /// With a provider that batches, a pass asks whether every NotReady
    /// Node exists in a few batches, then whether only those that exist are
    /// shut down, and acts on each answer as the single calls' would be.
    #[tokio::test]
    async fn a_batched_pass_asks_existence_then_shutdown_of_those_that_exist() {
        let provider = cloud(&["sleepy", "awake", "ready"]);
        ready(&provider).await;
        assert!(
            provider
                .client
                .handshake()
                .await
                .unwrap()
                .has(ccm_provider_sdk::proto::Capability::InstancesBatch)
        );
        provider.fake.shutdown_instance("sleepy").unwrap();
        provider.fake.clear_calls();
        let (client, api) = accepting_api();
        let ctx = context(client, &provider, vec![]);
        let passes = Passes {
            lifecycle: Lifecycle::new(ctx.clone()),
            period: Duration::from_secs(5),
        };
        let nodes: Vec<Arc<Node>> = [
            node("gone-a", "Unknown", &[]),
            node("gone-b", "False", &[]),
            node("sleepy", "False", &["dedicated"]),
            node("awake", "Unknown", &[]),
            node("ready", "True", &[]),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        passes.reconcile(Arc::new(nodes)).await.unwrap();

        let deleted: Vec<String> = api
            .all()
            .into_iter()
            .filter(|c| c.method == http::Method::DELETE)
            .map(|c| c.line())
            .collect();
        assert_eq!(
            deleted,
            ["DELETE /api/v1/nodes/gone-a", "DELETE /api/v1/nodes/gone-b"]
        );
        let patches: Vec<Call> = api
            .all()
            .into_iter()
            .filter(|c| c.method == http::Method::PATCH)
            .collect();
        assert_eq!(patches.len(), 1, "{patches:?}");
        assert_eq!(patches[0].line(), "PATCH /api/v1/nodes/sleepy");
        assert_eq!(
            patches[0].body["spec"]["taints"][1]["key"],
            node::SHUTDOWN_TAINT
        );
        // Four existence questions, two shutdown ones (the gone and the
        // Ready are not asked), in a few batches and no single call.
        let (batches, questions) = ctx.metrics.instance_batches.sent();
        assert_eq!(questions, 6.0);
        assert!((2..=4).contains(&batches), "{batches} batches");
        assert_eq!(
            provider.fake.calls_of(Method::BatchInstances).len() as u64,
            batches
        );
        for m in [Method::InstanceExists, Method::InstanceShutdown] {
            assert!(provider.fake.calls_of(m).is_empty(), "{m:?}");
        }
    }

    /// An error for one Node in a batch deletes nothing, as the single
    /// call's error.
    #[tokio::test]
    async fn a_batched_error_deletes_nothing() {
        let provider = cloud(&[]);
        ready(&provider).await;
        provider.fake.inject_error(
            Method::InstanceExists,
            ErrorInjection::new(ErrorKind::CloudUnavailable, "cloud down"),
        );
        let (client, api) = accepting_api();
        let passes = Passes {
            lifecycle: Lifecycle::new(context(client, &provider, vec![])),
            period: Duration::from_secs(5),
        };
        let nodes = vec![Arc::new(node("maybe", "False", &[]))];
        passes.reconcile(Arc::new(nodes)).await.unwrap();
        assert!(api.all().is_empty(), "{:?}", api.writes());
    }

    /// Several providers: only the owner ever judges a Node, and another
    /// provider's Node is not even reported as foreign (it is not).
    #[tokio::test]
    async fn another_providers_node_is_never_looked_at() {
        let provider = cloud(&[]);
        ready(&provider).await;
        let (client, api) = accepting_api();
        let routing = two_providers();
        let state = Lifecycle::new(hybrid_context(client, &provider, vec![], &routing, "a"));
        let mut theirs = node("theirs", "Unknown", &[]);
        theirs.spec.as_mut().unwrap().provider_id = Some("other://theirs".into());
        let mut recovered = on_platform(node("recovered", "True", &[node::SHUTDOWN_TAINT]), "b");
        recovered.spec.as_mut().unwrap().provider_id = None;
        let mut unclaimed = node("unclaimed", "Unknown", &[]);
        unclaimed.spec.as_mut().unwrap().provider_id = Some("aws:///i-1".into());
        for n in [&theirs, &recovered, &unclaimed] {
            check(&state, n).await;
        }
        assert!(api.all().is_empty(), "{:?}", api.all());
        for m in [Method::InstanceExists, Method::InstanceShutdown] {
            assert!(provider.fake.calls_of(m).is_empty(), "{m:?}");
        }
        // Its own Node, gone from the cloud, it does judge.
        check(&state, &node("mine", "Unknown", &[])).await;
        assert_eq!(api.event_reasons(), ["DeletingNode"]);
    }

    #[tokio::test]
    async fn a_foreign_or_malformed_provider_id_is_never_judged() {
        let provider = cloud(&[]);
        ready(&provider).await;
        let (client, api) = accepting_api();
        let state = Lifecycle::new(context(client, &provider, vec![]));
        let mut foreign = node("elsewhere", "False", &[]);
        foreign.spec.as_mut().unwrap().provider_id = Some("aws:///us-east-1a/i-0123".into());
        let mut garbage = node("garbled", "Unknown", &[]);
        garbage.spec.as_mut().unwrap().provider_id = Some("garbage".into());
        for _ in 0..3 {
            check(&state, &foreign).await;
            check(&state, &garbage).await;
        }
        assert!(api.writes().is_empty(), "{:?}", api.writes());
        assert_eq!(
            api.event_reasons(),
            ["ProviderIDNotOurs", "ProviderIDNotOurs"],
            "once per node"
        );
        assert!(provider.fake.calls_of(Method::InstanceExists).is_empty());
    }

    /// Contract 1.2.0: a provider owning several schemes judges a Node of
    /// each; a NotReady Node of its second scheme is checked, not reported
    /// as another cloud's.
    #[tokio::test]
    async fn a_node_of_any_scheme_the_provider_owns_is_judged() {
        tokio::time::timeout(std::time::Duration::from_secs(30), async {
            let (provider, _) = metal_fake(FakeConfig {
                auto_create_instances: false,
                ..FakeConfig::default()
            });
            ready(&provider).await;
            let (client, api) = accepting_api();
            let state = Lifecycle::new(context(client, &provider, vec![]));
            let mut metal = node("metal", "False", &[]);
            metal.spec.as_mut().unwrap().provider_id = Some("fake-metal://321".into());
            assert!(state.judgeable(&metal).await);
            check(&state, &metal).await;
            assert!(api.event_reasons().is_empty(), "{:?}", api.event_reasons());
            assert!(api.writes().is_empty(), "running: {:?}", api.writes());
            // Another cloud's is still not judged.
            let mut foreign = node("elsewhere", "False", &[]);
            foreign.spec.as_mut().unwrap().provider_id = Some("aws:///us-east-1a/i-0123".into());
            assert!(!state.judgeable(&foreign).await);
        })
        .await
        .expect("test took longer than 30 s");
    }
}
