//! cloud-node-controller: initialises Nodes that carry the uninitialized
//! taint (providerID, topology labels, addresses, taint removal) and keeps
//! initialised Nodes' addresses fresh.
//!
//! Writes per initialisation: one status patch for addresses (skipped when
//! they already match) and one patch of metadata+spec guarded by the Node's
//! resourceVersion. Addresses go first so the Node is never schedulable
//! before its addresses are right (upstream removes the taint first).
//!
//! Provider calls: one InstanceMetadata per initialisation and per refresh,
//! gathered into BatchInstances calls when the provider batches
//! ([`Instances`]); then as many Nodes wait for their answer at once as
//! fill the batches in flight, while their writes stay at `workers` at a
//! time. A Node this process initialised is not refreshed until a
//! refresh period has passed: its answer could not have changed anything.

mod decide;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::ClientError;
use ccm_provider_sdk::client::Lane;
use ccm_runtime::{Action, Reconcile, Singleton};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Patch;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::NodeEvents;
use crate::context::Context;
use crate::k8s::node;
use crate::k8s::node_write::{Written, write_node};
use crate::providers::instances::{BatchSettings, Instances};
use crate::request_id;
pub use decide::{
    InitChanges, InitError, Plan, desired_addresses, ga_label_fixes, init_changes, plan,
};

/// Why one Node could not be synced; retried with the Node's backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("failed to get instance metadata for node {node}: {source}")]
    Metadata { node: String, source: ClientError },
    #[error("failed to get zone from cloud provider for node {node}: {source}")]
    Zone { node: String, source: ClientError },
    #[error("failed to get node modifiers from cloud provider: {0}")]
    Init(#[from] InitError),
    #[error("{0}")]
    Addresses(String),
}

/// How the controller runs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Nodes initialised in parallel.
    pub workers: u16,
    /// Period of the address refresh of initialised Nodes.
    pub status_period: Duration,
    /// Nodes whose addresses are refreshed in parallel.
    pub status_workers: usize,
    /// How metadata questions are batched, when the provider batches.
    pub batch: BatchSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            workers: 8,
            status_period: Duration::from_secs(300),
            status_workers: 8,
            batch: BatchSettings::default(),
        }
    }
}

/// The controller's state.
pub struct CloudNode {
    ctx: Arc<Context>,
    /// Uids of the Nodes this process initialised whose untainted state the
    /// cache has not shown yet. By uid: a Node deleted and re-created under
    /// the same name is new work, however soon it comes back.
    initialised: Mutex<HashSet<String>>,
    /// When this process initialised each Node, for a refresh period: the
    /// address refresh leaves those alone. By uid, as `initialised`.
    initialised_at: Mutex<HashMap<String, Instant>>,
    /// The metadata questions of initialisations.
    instances: Instances,
    /// Initialisations writing at once (`workers`).
    writes: Semaphore,
}

impl CloudNode {
    pub fn new(ctx: Arc<Context>) -> Arc<Self> {
        Self::with(ctx, Settings::default())
    }

    pub fn with(ctx: Arc<Context>, settings: Settings) -> Arc<Self> {
        let instances = Instances::new(
            ctx.provider.clone(),
            settings.batch,
            ctx.metrics.instance_batches.clone(),
        );
        Arc::new(CloudNode {
            ctx,
            initialised: Mutex::default(),
            initialised_at: Mutex::default(),
            instances,
            writes: Semaphore::new(usize::from(settings.workers.max(1))),
        })
    }
}

/// Writes the Node's addresses if they differ; returns the written Node's
/// resourceVersion.
async fn patch_addresses(
    ctx: &Context,
    n: &Node,
    cloud: &[ccm_provider_sdk::proto::NodeAddress],
) -> Result<Option<Written>, Error> {
    let Some(addresses) = desired_addresses(n, cloud).map_err(Error::Addresses)? else {
        return Ok(None);
    };
    let written = write_node(&ctx.client, "patch_status", |r| {
        r.patch_subresource(
            "status",
            node::name(n),
            &ctx.patch_params(),
            // A JSON merge patch replaces the whole list, which is what
            // addresses need (their strategic merge key is wrong upstream).
            // Serialized from the typed list: a serde_json::Value of it
            // costs many times the list itself.
            &Patch::Merge(AddressesPatch {
                status: AddressesStatus {
                    addresses: &addresses,
                },
            }),
        )
    })
    .await?;
    Ok(Some(written))
}

/// `{"status": {"addresses": [...]}}`.
#[derive(Debug, serde::Serialize)]
struct AddressesPatch<'a> {
    status: AddressesStatus<'a>,
}

#[derive(Debug, serde::Serialize)]
struct AddressesStatus<'a> {
    addresses: &'a [k8s_openapi::api::core::v1::NodeAddress],
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

/// The provider's warnings about the Node (contract 1.2.0), as Warning
/// Events on it, as a load balancer's are on its Service. The client keeps
/// at most `MAX_NODE_WARNINGS`; a reason the API server could not take is
/// published as "ProviderWarning", the message cut by the recorder.
async fn provider_warnings(ctx: &Context, n: &Node, warnings: &[ccm_provider_sdk::proto::Warning]) {
    for w in warnings {
        let reason = if ccm_provider_sdk::validate::is_warning_reason(&w.reason) {
            w.reason.as_str()
        } else {
            "ProviderWarning"
        };
        ctx.event(
            n,
            EventType::Warning,
            reason,
            w.message.clone(),
            "InstanceMetadata",
        )
        .await;
    }
}

async fn initialise(n: &Node, state: &CloudNode) -> Result<(), Error> {
    let ctx = &state.ctx;
    let name = node::name(n).to_owned();
    tracing::info!(node = %name, "initializing node with cloud provider");
    let meta = match state.instances.metadata(node::node_ref(n)).await {
        Ok(answer) => {
            provider_warnings(ctx, n, &answer.warnings).await;
            answer.metadata
        }
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
    let changes = match init_changes(n, &meta) {
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
    // Never closed.
    let _writing = state.writes.acquire().await;
    // Guard the second write with the version our first one produced, so
    // only someone else's change in between makes it conflict.
    let resource_version = match patch_addresses(ctx, n, &meta.node_addresses).await? {
        Some(written) => written.resource_version,
        None => n.metadata.resource_version.clone(),
    };
    let patch = changes.patch(resource_version.as_deref());
    write_node(&ctx.client, "patch", |r| {
        r.patch(&name, &ctx.patch_params(), &Patch::Merge(patch))
    })
    .await?;
    state.initialised.lock().insert(uid(n).to_owned());
    state
        .initialised_at
        .lock()
        .insert(uid(n).to_owned(), Instant::now());
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

fn uid(n: &Node) -> &str {
    n.metadata.uid.as_deref().unwrap_or_default()
}

impl Reconcile for CloudNode {
    type Key = ObjectRef<Node>;
    type Object = Node;
    type Error = Error;

    /// Executes [`decide::plan`], for a Node this controller's provider
    /// owns (several providers: every other Node is another's).
    async fn reconcile(&self, n: Arc<Node>) -> Result<Action, Error> {
        if !self.ctx.scope.owns_node(&n) {
            return Ok(Action::await_change());
        }
        let initialised_by_us = {
            // Once the cache shows the untainted Node, the record goes; a
            // taint added after that is new work.
            let mut done = self.initialised.lock();
            let ours = done.contains(uid(&n));
            if ours && !node::has_taint(&n, node::UNINITIALIZED_TAINT) {
                done.remove(uid(&n));
            }
            ours
        };
        match plan(&n, initialised_by_us) {
            Plan::AlreadyInitialised => {}
            Plan::Initialise => initialise(&n, self).await?,
            Plan::FixLabels(fixes) if fixes.is_empty() => {}
            Plan::FixLabels(fixes) => {
                let ctx = &self.ctx;
                let patch = json!({ "metadata": { "labels": fixes } });
                write_node(&ctx.client, "patch", |r| {
                    r.patch(node::name(&n), &ctx.patch_params(), &Patch::Merge(patch))
                })
                .await?;
            }
        }
        Ok(Action::await_change())
    }

    fn request_id(&self, key: &Self::Key, _: Option<&Self::Object>) -> Option<String> {
        Some(request_id::node_named(&key.name))
    }
}

/// Runs the controller until the process stops: initialisation of the
/// Nodes `node_events` names, and the periodic address refresh.
pub async fn run(ctx: Arc<Context>, node_events: NodeEvents, settings: Settings) {
    let state = CloudNode::with(ctx.clone(), settings);
    // With a batching provider, enough Nodes wait for their metadata at
    // once to fill the batches; their writes stay at `workers`. Decided
    // at start: a provider that stops batching later is asked the single
    // calls by these workers, within --provider-max-concurrency.
    let workers = if state.instances.batches().await {
        usize::from(settings.workers).max(settings.batch.window())
    } else {
        settings.workers.into()
    };
    let initialise = super::runner(&ctx, state.clone(), "Nodes")
        .lookup({
            let nodes = ctx.nodes.clone();
            move |key| nodes.get(key)
        })
        .changes(node_events.map(|n| ObjectRef::from_obj(n.as_ref())))
        .workers(workers)
        .run();
    let nodes = ctx.nodes.clone();
    let refresh = AddressRefresh::new(state, &settings);
    let refresh = super::runner(&ctx, Arc::new(refresh), "NodeAddresses")
        .lookup(move |_| Some(Arc::new(nodes.state())))
        .resyncs(futures::stream::once(async { ADDRESS_REFRESH }))
        .run();
    futures::join!(initialise, refresh);
}

/// The address refresh's one key: a pass over every initialised Node.
const ADDRESS_REFRESH: Singleton = Singleton("node-addresses");

/// Refreshes initialised Nodes' addresses every `period`, measured from the
/// end of the previous pass, as upstream's UpdateNodeStatus; but not those
/// this process initialised within the last period.
struct AddressRefresh {
    state: Arc<CloudNode>,
    period: Duration,
    /// Nodes whose addresses are refreshed in parallel (without batches),
    /// and written in parallel.
    workers: usize,
    /// The refresh's own questions: a lane of their own (their batches do
    /// not wait behind initialisations').
    instances: Instances,
    writes: Semaphore,
}

impl AddressRefresh {
    fn new(state: Arc<CloudNode>, settings: &Settings) -> Self {
        let ctx = &state.ctx;
        // Periodic: its calls wait for the call budget behind
        // initialisation's.
        let instances = Instances::new(
            ctx.provider.in_lane(Lane::Refresh),
            settings.batch,
            ctx.metrics.instance_batches.clone(),
        );
        let workers = settings.status_workers.max(1);
        AddressRefresh {
            state,
            period: settings.status_period,
            workers,
            instances,
            writes: Semaphore::new(workers),
        }
    }
}

impl Reconcile for AddressRefresh {
    type Key = Singleton;
    type Object = Vec<Arc<Node>>;
    type Error = Infallible;

    async fn reconcile(&self, all: Arc<Vec<Arc<Node>>>) -> Result<Action, Infallible> {
        let ctx = &self.state.ctx;
        // Records of Nodes deleted before the cache showed them untainted.
        let present: HashSet<&str> = all.iter().map(|n| uid(n)).collect();
        self.state
            .initialised
            .lock()
            .retain(|u| present.contains(u.as_str()));
        // Initialised within the last period: its answer could not have
        // changed anything yet.
        let fresh: HashSet<String> = {
            let now = Instant::now();
            let mut at = self.state.initialised_at.lock();
            at.retain(|_, t| now.duration_since(*t) < self.period);
            at.keys().cloned().collect()
        };
        let nodes = all
            .iter()
            .filter(|n| !node::has_taint(n, node::UNINITIALIZED_TAINT))
            .filter(|n| ctx.scope.owns_node(n))
            .filter(|n| !fresh.contains(uid(n)));
        let parallel = if self.instances.batches().await {
            self.instances.settings().window()
        } else {
            self.workers
        };
        futures::stream::iter(nodes)
            .for_each_concurrent(parallel, |n| {
                request_id::scoped(request_id::node(n), async move {
                    match self.instances.metadata(node::node_ref(n)).await {
                        Ok(answer) => {
                            provider_warnings(ctx, n, &answer.warnings).await;
                            let meta = answer.metadata;
                            // Never closed.
                            let _writing = self.writes.acquire().await;
                            if let Err(e) = patch_addresses(ctx, n, &meta.node_addresses).await {
                                tracing::warn!(node = node::name(n), error = %e, "updating node addresses");
                            }
                        }
                        Err(e) => tracing::warn!(
                            node = node::name(n),
                            error = %e,
                            "error getting instance metadata for node addresses"
                        ),
                    }
                })
            })
            .await;
        Ok(Action::requeue(self.period))
    }

    /// Each Node's calls carry that Node's id.
    fn request_id(&self, _: &Singleton, _: Option<&Self::Object>) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use ccm_fake_provider::FakeConfig;

    fn tainted(name: &str) -> Node {
        tainted_node(name)
    }

    /// Answers the status patch with a newer resourceVersion, as the API
    /// server does.
    fn api() -> (kube::Client, Recorded) {
        mock_api(|call| {
            if call.path.contains("/status") {
                (
                    200,
                    json!({"metadata": {"name": "n1", "resourceVersion": "8"}}),
                )
            } else {
                (200, call.body.clone())
            }
        })
    }

    #[tokio::test]
    async fn initialisation_writes_addresses_then_metadata_guarded_by_our_version() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, api) = api();
        let n = tainted("n1");
        let state = CloudNode::new(context(client, &provider, vec![n.clone()]));
        state.reconcile(Arc::new(n.clone())).await.unwrap();

        assert_eq!(
            api.writes(),
            ["PATCH /api/v1/nodes/n1/status", "PATCH /api/v1/nodes/n1"]
        );
        let writes: Vec<Call> = api.all().into_iter().filter(|c| !c.is_event()).collect();
        assert!(writes[0].body["status"]["addresses"].is_array());
        let patch = &writes[1];
        assert_eq!(patch.content_type, "application/merge-patch+json");
        assert_eq!(
            patch.body["metadata"]["resourceVersion"], "8",
            "guarded by the version our own status write produced"
        );
        assert_eq!(patch.body["spec"]["providerID"], "fake://n1");
        assert_eq!(
            patch.body["metadata"]["labels"][node::LABEL_ZONE],
            "fake-zone-a"
        );
        assert_eq!(
            patch.body["spec"]["taints"],
            json!([{"effect": "NoSchedule", "key": "dedicated"}]),
            "only the uninitialized taint goes"
        );
        assert_eq!(api.event_reasons(), ["Synced"]);

        // The cache still shows the tainted Node: no second initialisation.
        state.reconcile(Arc::new(n.clone())).await.unwrap();
        assert_eq!(api.writes().len(), 2);
    }

    /// Contract 1.2.0: what the cloud says about a Node's instance becomes
    /// a Warning Event on the Node, at initialisation and at the address
    /// refresh.
    #[tokio::test]
    async fn the_providers_warnings_about_a_node_are_warning_events_on_it() {
        tokio::time::timeout(Duration::from_secs(30), async {
            let (provider, _) = metal_fake(FakeConfig::default());
            ready(&provider).await;
            let (client, api) = api();
            let n = tainted("maint-1");
            let state = CloudNode::new(context(client, &provider, vec![n.clone()]));
            state.reconcile(Arc::new(n.clone())).await.unwrap();
            assert_eq!(api.event_reasons(), ["MaintenanceScheduled", "Synced"]);
            let warning = api
                .all()
                .into_iter()
                .find(|c| c.is_event() && c.body["reason"] == "MaintenanceScheduled")
                .unwrap();
            assert_eq!(warning.body["type"], "Warning");
            assert_eq!(warning.body["action"], "InstanceMetadata");
            assert_eq!(
                warning.body["note"],
                "the machine of maint-1 is rebooted on Sunday"
            );
            assert_eq!(warning.body["regarding"]["name"], "maint-1");

            // A quiet Node gets none.
            let quiet = tainted("quiet-1");
            state.reconcile(Arc::new(quiet)).await.unwrap();
            assert_eq!(
                api.event_reasons(),
                ["MaintenanceScheduled", "Synced", "Synced"]
            );

            // The address refresh of an initialised Node says it too (a
            // repeat of the same warning on the same Node would extend its
            // Event series instead).
            let mut done = tainted("maint-2");
            done.spec.as_mut().unwrap().taints = None;
            let refresh = AddressRefresh::new(state.clone(), &Settings::default());
            refresh
                .reconcile(Arc::new(vec![Arc::new(done)]))
                .await
                .unwrap();
            assert_eq!(
                api.event_reasons(),
                [
                    "MaintenanceScheduled",
                    "Synced",
                    "Synced",
                    "MaintenanceScheduled"
                ]
            );
        })
        .await
        .expect("test took longer than 30 s");
    }

    /// Several providers: a Node another provider owns is neither
    /// initialised nor refreshed, and its provider is the only one asked.
    #[tokio::test]
    async fn another_providers_node_is_left_to_it() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        provider.fake.clear_calls();
        let (client, api) = api();
        let routing = two_providers();
        let theirs = on_platform(tainted("theirs"), "b");
        let state = CloudNode::new(hybrid_context(
            client,
            &provider,
            vec![theirs.clone()],
            &routing,
            "a",
        ));
        state.reconcile(Arc::new(theirs.clone())).await.unwrap();
        let mut initialised = theirs.clone();
        initialised.spec.as_mut().unwrap().taints = None;
        initialised.spec.as_mut().unwrap().provider_id = Some("other://theirs".into());
        let refresh = AddressRefresh::new(state.clone(), &Settings::default());
        refresh
            .reconcile(Arc::new(vec![Arc::new(initialised)]))
            .await
            .unwrap();
        assert!(api.all().is_empty(), "{:?}", api.all());
        assert!(
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::InstanceMetadata)
                .is_empty()
        );
        // Its own Node (no platform: the default provider's) it initialises.
        state.reconcile(Arc::new(tainted("mine"))).await.unwrap();
        assert_eq!(
            api.writes(),
            [
                "PATCH /api/v1/nodes/mine/status",
                "PATCH /api/v1/nodes/mine"
            ]
        );
    }

    /// Nothing done twice: the refresh does not ask about a Node this
    /// process initialised within the last period (the answer was just
    /// written), and does once the period has passed.
    #[tokio::test]
    async fn a_node_initialised_moments_ago_is_not_refreshed() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, _api) = api();
        let n = tainted("fresh");
        let state = CloudNode::new(context(client, &provider, vec![n.clone()]));
        state.reconcile(Arc::new(n.clone())).await.unwrap();
        let mut fresh = n.clone();
        fresh.spec.as_mut().unwrap().taints = None;
        let mut old = tainted("old");
        old.spec.as_mut().unwrap().taints = None;
        let all = Arc::new(vec![Arc::new(fresh), Arc::new(old)]);
        let refresh = AddressRefresh::new(state.clone(), &Settings::default());
        // The fake answers the batch natively: one BatchInstances call,
        // named after its Node when it carries one.
        let asked = || -> Vec<String> {
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::BatchInstances)
                .into_iter()
                .map(|c| c.request_id)
                .collect()
        };
        let questions = || state.ctx.metrics.instance_batches.sent().1;
        let before = questions();

        provider.fake.clear_calls();
        refresh.reconcile(all.clone()).await.unwrap();
        assert_eq!(asked(), ["node/old"], "only the Node not initialised here");
        assert_eq!(questions() - before, 1.0);

        // A period later it is refreshed as any other.
        let long_ago = Instant::now() - Settings::default().status_period;
        for t in state.initialised_at.lock().values_mut() {
            *t = long_ago;
        }
        provider.fake.clear_calls();
        refresh.reconcile(all).await.unwrap();
        assert_eq!(questions() - before, 3.0, "both: {:?}", asked());
        assert!(state.initialised_at.lock().is_empty(), "the record goes");
    }

    #[tokio::test]
    async fn an_unknown_instance_writes_nothing_and_keeps_the_taint() {
        let provider = fake_provider(FakeConfig {
            auto_create_instances: false,
            ..FakeConfig::default()
        });
        ready(&provider).await;
        let (client, api) = api();
        let n = tainted("ghost");
        let state = CloudNode::new(context(client, &provider, vec![n.clone()]));
        let err = state.reconcile(Arc::new(n.clone())).await.unwrap_err();
        assert!(matches!(err, Error::Metadata { .. }), "{err}");
        assert!(api.writes().is_empty(), "{:?}", api.writes());
        let action = state.error_policy(&ObjectRef::from_obj(&n), &err, 1);
        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
    }
}
