//! service-lb-controller: a cloud load balancer for every `type:
//! LoadBalancer` Service without a `loadBalancerClass`, with upstream's
//! finalizer, events and retry semantics, plus a `LoadBalancerReady`
//! condition on the Service saying where its load balancer stands.
//!
//! Two loops share one record per Service:
//! - the Service reconciler (`--concurrent-service-syncs` workers) ensures
//!   or deletes the load balancer when the Service changes in a way that
//!   matters (upstream's `needsUpdate`);
//! - the backend loop watches the node set and calls UpdateLoadBalancer
//!   once per Service whose backends changed, bounded by the same number.
//!
//! A Service's record is an async mutex held across its provider call, so
//! an Ensure and an Update for one Service never interleave and the later
//! one always sends the newest node set.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::proto::{self, ErrorReason};
use ccm_provider_sdk::{ClientError, LbOutcome, NodeSet};
use futures::TryStreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::Patch;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde_json::{Value, json};

mod backends;
mod decide;
mod orphans;

use crate::context::Context;
use crate::request_id;
use ccm_runtime::Action;
use ccm_runtime::backoff::Backoff;
use decide::{SpecError, Standing};

/// The backend loop starts its pass once the node set has been quiet this
/// long: a Node's join (created, then given its providerID and labels a
/// few milliseconds later) becomes one update per Service, not three.
const BACKEND_QUIET: Duration = Duration::from_millis(100);

/// ... and at the latest this long after the first change, so a node set
/// that never stops changing (a pool scaling) still gets one pass a second.
const BACKEND_COALESCE_MAX: Duration = Duration::from_secs(1);

/// The shortest and longest wait a provider's RETRY_AFTER can ask for.
const RETRY_AFTER_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(600));

/// Why one sync failed. The text is what the Warning event says after
/// "Error syncing load balancer: ".
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{0}")]
    Spec(#[from] SpecError),
    #[error("failed to {op}: {source}")]
    Provider {
        op: &'static str,
        source: ClientError,
    },
    #[error("failed to {op}: {source}")]
    Kube {
        op: &'static str,
        source: kube::Error,
    },
}

fn provider(op: &'static str) -> impl FnOnce(ClientError) -> SyncError {
    move |source| SyncError::Provider { op, source }
}

fn kube_op(op: &'static str) -> impl FnOnce(kube::Error) -> SyncError {
    move |source| SyncError::Kube { op, source }
}

impl SyncError {
    /// The delay the provider asked for (RetryInfo), honoured within
    /// [`RETRY_AFTER_BOUNDS`]: a zero delay must not become a busy loop,
    /// nor a huge one a Service forgotten for days.
    fn retry_delay(&self) -> Option<Duration> {
        match self {
            SyncError::Provider { source, .. } => source
                .provider_error()?
                .retry_after_delay()
                .map(|d| d.clamp(RETRY_AFTER_BOUNDS.0, RETRY_AFTER_BOUNDS.1)),
            _ => None,
        }
    }

    /// Input that fails the same way until someone changes the Service:
    /// retried only at the longest backoff (a change to the Service
    /// triggers a sync at once anyway).
    fn needs_a_change(&self) -> bool {
        match self {
            SyncError::Spec(_) => true,
            SyncError::Provider { source, .. } => matches!(
                source.provider_error().and_then(|e| e.reason()),
                Some(ErrorReason::InvalidServiceSpec | ErrorReason::InvalidAnnotation)
            ),
            _ => false,
        }
    }

    /// The condition reason: the contract's error reason in CamelCase where
    /// there is one.
    fn condition_reason(&self) -> &'static str {
        match self {
            SyncError::Spec(_) => "InvalidServiceSpec",
            SyncError::Kube { .. } => "KubernetesAPIError",
            SyncError::Provider { source, .. } => match source {
                ClientError::InvalidResponse { .. } => "InvalidProviderAnswer",
                ClientError::Unsupported(_) | ClientError::Endpoint(_) => "ProviderError",
                ClientError::Refused { .. } => "NotLeader",
                ClientError::Provider(e) => match e.reason() {
                    Some(ErrorReason::RetryAfter | ErrorReason::OperationPending) => "Provisioning",
                    Some(ErrorReason::InvalidServiceSpec) => "InvalidServiceSpec",
                    Some(ErrorReason::InvalidAnnotation) => "InvalidAnnotation",
                    Some(ErrorReason::QuotaExceeded) => "QuotaExceeded",
                    Some(ErrorReason::ConflictingResource) => "ConflictingResource",
                    Some(ErrorReason::CloudUnavailable) => "CloudUnavailable",
                    Some(ErrorReason::CredentialsInvalid) => "CredentialsInvalid",
                    Some(ErrorReason::InvalidRequest) => "InvalidRequest",
                    Some(ErrorReason::NotLeader) => "NotLeader",
                    _ => match e.code() {
                        tonic::Code::DeadlineExceeded => "ProviderTimeout",
                        tonic::Code::Unavailable => "ProviderUnavailable",
                        _ => "ProviderError",
                    },
                },
            },
        }
    }
}

/// What this process last did for one Service.
#[derive(Debug, Default)]
struct Record {
    uid: String,
    /// `decide::fingerprint` of the last Service whose Ensure succeeded;
    /// `None` forces the next sync to Ensure.
    ensured: Option<u64>,
    /// The backends the load balancer was last given.
    backends: Option<decide::BackendDigest>,
    /// The provider said another controller handles it.
    elsewhere: bool,
    /// After a failure: no new attempt before the instant while the
    /// Service is unchanged in every way that matters (fingerprint and
    /// whether it needs cleanup). Our own status writes come back as
    /// watch events; without this they would retry at once and defeat
    /// both the backoff and the provider's RetryInfo.
    retry: Option<(u64, bool, tokio::time::Instant)>,
    /// The Service as last sent to EnsureLoadBalancer, kept while its load
    /// balancer may exist (whatever that Ensure answered): a Service that
    /// vanishes without a reconciled delete still gets an
    /// EnsureLoadBalancerDeleted, with what its Ensure was given.
    sent: Option<proto::Service>,
}

/// The backend nodes as sent to the provider, with their digest.
#[derive(Clone)]
struct Backends {
    nodes: NodeSet,
    digest: decide::BackendDigest,
}

/// The controller's state beside the shared [`Context`].
pub struct Lb {
    ctx: Arc<Context>,
    records: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Record>>>>,
    backoff: Backoff,
    /// (uid, annotation key) pairs already reported as unknown.
    reported_annotations: Mutex<HashSet<(String, String)>>,
    /// Bumped by the node watch after each change it applied to the cache.
    node_generation: tokio::sync::watch::Receiver<u64>,
    /// The backends as sent to the provider and their digest, keyed by the
    /// node generation they were built at: a burst of Ensures shares one
    /// conversion (and one NodeSet) instead of converting every Node once
    /// per Service.
    backend_cache: Mutex<Option<(u64, Backends)>>,
    /// Asks the reconciler for a full sync of a Service.
    resync: mpsc::UnboundedSender<ObjectRef<Service>>,
}

impl Lb {
    fn new(
        ctx: Arc<Context>,
        node_generation: tokio::sync::watch::Receiver<u64>,
        resync: mpsc::UnboundedSender<ObjectRef<Service>>,
    ) -> Arc<Self> {
        Arc::new(Lb {
            ctx,
            node_generation,
            records: Mutex::default(),
            backoff: Backoff::new(Duration::from_secs(5), Duration::from_secs(300)),
            reported_annotations: Mutex::default(),
            backend_cache: Mutex::default(),
            resync,
        })
    }

    fn record(&self, key: &str) -> Arc<tokio::sync::Mutex<Record>> {
        self.records
            .lock()
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    /// The backend nodes now, and their digest (see `backend_cache`).
    fn current_backends(&self) -> Backends {
        // The generation first: the cache read after it is at least as new,
        // so what is kept under it is never older than it says.
        let generation = *self.node_generation.borrow();
        let mut cache = self.backend_cache.lock();
        if let Some((g, backends)) = cache.as_ref()
            && *g == generation
        {
            return backends.clone();
        }
        let nodes = self.ctx.nodes.state();
        let nodes = decide::backends(nodes.iter().map(|n| n.as_ref()));
        let backends = Backends {
            digest: decide::backend_set(&nodes),
            nodes: NodeSet::new(nodes),
        };
        *cache = Some((generation, backends.clone()));
        backends
    }

    /// The records of Services the cache no longer has (deleted without a
    /// reconciled delete): one whose load balancer may exist, or that a
    /// sync holds right now (its Ensure may be in flight), is handed to the
    /// reconciler, which finds the Service gone and deletes the load
    /// balancer ([`vanished`]); the others are dropped.
    fn forget_vanished(&self, services: &[Arc<Service>]) {
        let present: HashSet<String> = services.iter().map(|s| decide::key(s)).collect();
        let mut gone = Vec::new();
        self.records.lock().retain(|key, record| {
            if present.contains(key) {
                return true;
            }
            match record.try_lock() {
                Ok(r) if r.sent.is_none() => false,
                _ => {
                    gone.push(key.clone());
                    true
                }
            }
        });
        for key in gone {
            self.resync_key(&key);
        }
    }

    /// Asks the reconciler for a sync of the Service `key` names.
    fn resync_key(&self, key: &str) {
        if let Some((ns, name)) = key.split_once('/') {
            let _ = self.resync.unbounded_send(ObjectRef::new(name).within(ns));
        }
    }

    fn forget(&self, key: &str) {
        self.records.lock().remove(key);
    }

    fn services_api(&self, svc: &Service) -> Api<Service> {
        Api::namespaced(
            self.ctx.client.clone(),
            svc.metadata.namespace.as_deref().unwrap_or_default(),
        )
    }

    /// One strategic-merge patch through the status subresource, as
    /// upstream: finalizers and status both, so RBAC needs only
    /// `services/status: patch`. A Service already gone is not an error.
    async fn patch_status(
        &self,
        svc: &Service,
        patch: Value,
        op: &'static str,
    ) -> Result<(), SyncError> {
        self.patch_status_if_present(svc, patch, op)
            .await
            .map(|_| ())
    }

    /// [`Lb::patch_status`], saying whether the Service was still there
    /// (false: it is gone, nothing was written).
    async fn patch_status_if_present(
        &self,
        svc: &Service,
        patch: Value,
        op: &'static str,
    ) -> Result<bool, SyncError> {
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        let written = crate::k8s::write_unread(&self.services_api(svc), "patch_status", |r| {
            r.patch_subresource(
                "status",
                name,
                &self.ctx.patch_params(),
                &Patch::Strategic(patch),
            )
        })
        .await;
        match written {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(kube_op(op)(e)),
        }
    }

    async fn event(&self, svc: &Service, type_: EventType, reason: &str, note: String) {
        let action = match reason {
            r if r.starts_with("Delet") => "DeleteLoadBalancer",
            r if r.starts_with("Update") => "UpdateLoadBalancer",
            _ => "EnsureLoadBalancer",
        };
        self.ctx.event(svc, type_, reason, note, action).await;
    }

    async fn provider_warnings(&self, svc: &Service, warnings: &[proto::Warning]) {
        for w in warnings {
            let reason = if w.reason.is_empty() {
                "ProviderWarning"
            } else {
                &w.reason
            };
            self.event(svc, EventType::Warning, reason, w.message.clone())
                .await;
        }
    }

    /// One Warning per unknown annotation key under the provider's
    /// prefixes, once per Service uid, naming the closest known key.
    async fn report_unknown_annotations(&self, svc: &Service) {
        let Ok(handshake) = self.ctx.provider.handshake().await else {
            return;
        };
        let schema = &handshake.annotations;
        let uid = svc.metadata.uid.clone().unwrap_or_default();
        for (key, closest) in decide::unknown_annotations(svc, schema) {
            let new = self
                .reported_annotations
                .lock()
                .insert((uid.clone(), key.clone()));
            if !new {
                continue;
            }
            let hint = match closest {
                Some(k) => format!("; did you mean {k}?"),
                None => String::new(),
            };
            self.event(
                svc,
                EventType::Warning,
                "UnknownAnnotation",
                format!(
                    "Annotation {key} is not one provider {} understands and is ignored{hint}",
                    handshake.info.name
                ),
            )
            .await;
        }
    }

    /// Writes the condition (and, with `ingress`, the ingress) when either
    /// differs from what the Service shows; says whether it wrote.
    async fn publish(
        &self,
        svc: &Service,
        standing: &Standing,
        ingress: Option<Vec<k8s_openapi::api::core::v1::LoadBalancerIngress>>,
    ) -> Result<bool, SyncError> {
        let mut status = serde_json::Map::new();
        if let Some(c) = decide::condition_update(svc, standing, Time(now())) {
            status.insert("conditions".into(), json!([c]));
        }
        if let Some(ingress) = ingress
            && !decide::ingress_equal(decide::ingress(svc), &ingress)
        {
            status.insert("loadBalancer".into(), json!({ "ingress": ingress }));
        }
        if status.is_empty() {
            return Ok(false);
        }
        self.patch_status(
            svc,
            json!({ "status": status }),
            "update load balancer status",
        )
        .await?;
        Ok(true)
    }

    /// Ensures the load balancer. `record` is this Service's, held.
    async fn ensure(&self, svc: &Service, record: &mut Record) -> Result<Action, SyncError> {
        let key = decide::key(svc);
        self.event(
            svc,
            EventType::Normal,
            "EnsuringLoadBalancer",
            "Ensuring load balancer".into(),
        )
        .await;
        self.report_unknown_annotations(svc).await;
        let request = decide::to_proto(svc)?;

        // The finalizer goes on before the cloud is called, so no load
        // balancer can exist that a deletion would not see.
        let mut first = serde_json::Map::new();
        let mut condition_ours = decide::condition(svc).is_some();
        if !decide::has_finalizer(svc) {
            first.insert(
                "metadata".into(),
                json!({ "finalizers": [decide::FINALIZER] }),
            );
        }
        if decide::condition(svc).is_none() {
            let provisioning = Standing::not_ready(
                "Provisioning",
                "Ensuring the load balancer with the provider",
            );
            if let Some(c) = decide::condition_update(svc, &provisioning, Time(now())) {
                first.insert("status".into(), json!({ "conditions": [c] }));
                condition_ours = true;
            }
        }
        if !first.is_empty()
            && !self
                .patch_status_if_present(
                    svc,
                    Value::Object(first),
                    "add load balancer cleanup finalizer",
                )
                .await?
        {
            // Deleted since the cache showed it (a create quickly followed
            // by a delete): no finalizer could go on, so a load balancer
            // created now would be seen by no deletion, and the deletion
            // itself is never reconciled. Nothing to do.
            tracing::info!(service = %key, "service deleted before its finalizer was added; not ensuring a load balancer");
            return Ok(Action::await_change());
        }

        let backends = self.current_backends();
        if backends.nodes.is_empty() {
            self.event(
                svc,
                EventType::Warning,
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer".into(),
            )
            .await;
        }
        record.backends = Some(backends.digest);
        record.sent = Some(request.clone());
        let answer = self
            .ctx
            .provider
            .ensure_load_balancer(&self.ctx.cluster_name, request, &backends.nodes)
            .await
            .map_err(provider("ensure load balancer"))?;
        self.provider_warnings(svc, &answer.warnings).await;
        let fingerprint = decide::fingerprint(svc);
        match answer.outcome {
            LbOutcome::ImplementedElsewhere(message) => {
                tracing::info!(service = %key, message, "load balancer implemented elsewhere");
                if condition_ours {
                    // Another controller owns this load balancer and its
                    // status: our Provisioning condition would stand
                    // forever. The finalizer stays, as upstream's, so a
                    // deletion is still passed to the provider.
                    let remove = json!({ "status": { "conditions": [
                        { "type": decide::CONDITION, "$patch": "delete" }
                    ] } });
                    self.patch_status(svc, remove, "remove the load balancer condition")
                        .await?;
                }
                record.elsewhere = true;
                record.ensured = Some(fingerprint);
                Ok(Action::await_change())
            }
            LbOutcome::Done(status) => {
                record.elsewhere = false;
                self.event(
                    svc,
                    EventType::Normal,
                    "EnsuredLoadBalancer",
                    "Ensured load balancer".into(),
                )
                .await;
                // An empty ingress is a success, as upstream (only a
                // missing status is an error): the load balancer exists
                // and takes backend updates; it has no address to show.
                let standing = if status.ingress.is_empty() {
                    Standing::not_ready(
                        "EnsuredWithoutAddress",
                        "The provider ensured the load balancer and published no address for it",
                    )
                } else {
                    Standing::ready()
                };
                self.publish(svc, &standing, Some(decide::ingress_from_proto(&status)))
                    .await?;
                record.ensured = Some(fingerprint);
                Ok(Action::await_change())
            }
        }
    }

    /// Deletes the load balancer of the Service that `svc` replaced under
    /// the same name, described by `old` as its last Ensure was sent.
    async fn delete_replaced(&self, svc: &Service, old: proto::Service) -> Result<(), SyncError> {
        let old_uid = old.uid.clone();
        let warnings = self
            .ctx
            .provider
            .ensure_load_balancer_deleted(&self.ctx.cluster_name, old)
            .await
            .map_err(provider("delete the load balancer of the replaced Service"))?;
        self.provider_warnings(svc, &warnings).await;
        tracing::info!(service = %decide::key(svc), %old_uid, "deleted the load balancer of the Service this one replaced");
        Ok(())
    }

    /// Deletes the load balancer, then the finalizer, ingress and
    /// condition. Nothing is removed unless the provider said the load
    /// balancer is gone.
    async fn delete(&self, svc: &Service) -> Result<Action, SyncError> {
        // The delete needs the Service's identity, not a valid spec.
        let request = decide::to_proto_ref(svc);
        let exists = self
            .ctx
            .provider
            .get_load_balancer(&self.ctx.cluster_name, request.clone())
            .await
            .map_err(provider("check if load balancer exists before cleanup"))?;
        if exists.is_some() {
            self.event(
                svc,
                EventType::Normal,
                "DeletingLoadBalancer",
                "Deleting load balancer".into(),
            )
            .await;
            let warnings = self
                .ctx
                .provider
                .ensure_load_balancer_deleted(&self.ctx.cluster_name, request)
                .await
                .map_err(provider("delete load balancer"))?;
            self.provider_warnings(svc, &warnings).await;
        }
        let mut patch = serde_json::Map::new();
        if decide::has_finalizer(svc) {
            patch.insert(
                "metadata".into(),
                json!({ "$deleteFromPrimitiveList/finalizers": [decide::FINALIZER] }),
            );
        }
        let mut status = serde_json::Map::new();
        if decide::condition(svc).is_some() {
            status.insert(
                "conditions".into(),
                json!([{ "type": decide::CONDITION, "$patch": "delete" }]),
            );
        }
        if !decide::ingress(svc).is_empty() {
            status.insert("loadBalancer".into(), json!({ "ingress": null }));
        }
        if !status.is_empty() {
            patch.insert("status".into(), Value::Object(status));
        }
        if !patch.is_empty() {
            self.patch_status(
                svc,
                Value::Object(patch),
                "remove load balancer cleanup finalizer",
            )
            .await?;
        }
        self.event(
            svc,
            EventType::Normal,
            "DeletedLoadBalancer",
            "Deleted load balancer".into(),
        )
        .await;
        self.forget(&decide::key(svc));
        Ok(Action::await_change())
    }

    /// Reports a failed sync (event and condition) and picks the delay
    /// before the retry.
    async fn failed(&self, svc: &Service, err: SyncError, deleting: bool) -> Duration {
        let key = decide::key(svc);
        self.event(
            svc,
            EventType::Warning,
            "SyncLoadBalancerFailed",
            format!("Error syncing load balancer: {err}"),
        )
        .await;
        if !matches!(err, SyncError::Kube { .. }) {
            let standing = if deleting {
                Standing::not_ready("DeletionFailed", err.to_string())
            } else {
                Standing::not_ready(err.condition_reason(), err.to_string())
            };
            if let Err(e) = self.publish(svc, &standing, None).await {
                tracing::warn!(service = %key, error = %e, "could not record the failure on the Service");
            }
        }
        let delay = if let Some(d) = err.retry_delay() {
            d
        } else if err.needs_a_change() {
            self.backoff.max()
        } else {
            self.backoff.failed(&key)
        };
        tracing::warn!(service = %key, error = %err, retry_in = ?delay, "error processing service (retrying)");
        delay
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

impl Lb {
    fn has_record(&self, key: &str) -> bool {
        self.records.lock().contains_key(key)
    }
}

async fn reconcile(svc: Arc<Service>, lb: Arc<Lb>) -> Action {
    let id = request_id::service(&svc);
    measured(&lb, id, sync(svc, lb.clone())).await
}

/// Runs one turn of the queue under its request id and counts it in the
/// queue metrics: the action, and whether it failed.
async fn measured(lb: &Lb, id: String, turn: impl Future<Output = (Action, bool)>) -> Action {
    let started = std::time::Instant::now();
    let (action, failed) = request_id::scoped(id, turn).await;
    lb.ctx
        .metrics
        .queues
        .processed("service", started.elapsed(), failed);
    action
}

/// A Service the cache no longer has: deleted, or deleted while the watch
/// was broken. Its finalizer normally holds the deletion until [`Lb::delete`]
/// ran, but a DELETE that races the finalizer's addition removes the
/// Service anyway, both requests answered with success
/// (kubernetes/kubernetes#77988), and a user may remove the finalizer by
/// hand. Upstream deletes the load balancer from its cache of the Service
/// (`processServiceDeletion`); so does this, from what the Ensure was sent,
/// when this process sent one.
async fn vanished(key: ObjectRef<Service>, lb: Arc<Lb>) -> Action {
    let Some(namespace) = key.namespace.clone() else {
        return Action::await_change();
    };
    let id = format!("{namespace}/{}", key.name);
    let Some(record) = lb.records.lock().get(&id).cloned() else {
        return Action::await_change();
    };
    let mut record = record.lock().await;
    let Some(sent) = record.sent.clone() else {
        drop(record);
        lb.forget(&id);
        return Action::await_change();
    };
    // What events and request ids refer to: the Service as it was.
    let svc = Service {
        metadata: kube::api::ObjectMeta {
            namespace: Some(namespace),
            name: Some(key.name.clone()),
            uid: Some(sent.uid.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let turn = async {
        let deleted = lb
            .ctx
            .provider
            .ensure_load_balancer_deleted(&lb.ctx.cluster_name, sent)
            .await;
        match deleted {
            Ok(warnings) => {
                lb.provider_warnings(&svc, &warnings).await;
                tracing::info!(service = %id, uid = ?svc.metadata.uid, "service gone without a reconciled delete (finalizer bypassed); deleted its load balancer");
                lb.event(
                    &svc,
                    EventType::Normal,
                    "DeletedLoadBalancer",
                    "Deleted load balancer".into(),
                )
                .await;
                lb.backoff.succeeded(&id);
                // Emptied as well as forgotten: the backend loop may hold
                // this record and must find nothing to update.
                *record = Record::default();
                drop(record);
                lb.forget(&id);
                (Action::await_change(), false)
            }
            Err(e) => {
                let delay = lb.backoff.failed(&id);
                tracing::warn!(service = %id, error = %e, retry_in = ?delay, "deleting the load balancer of a Service gone without a reconciled delete (retrying)");
                (Action::requeue(delay), true)
            }
        }
    };
    measured(&lb, request_id::service(&svc), turn).await
}

/// One sync of one Service: the action, and whether it failed.
async fn sync(svc: Arc<Service>, lb: Arc<Lb>) -> (Action, bool) {
    let key = decide::key(&svc);
    if !decide::needs_cleanup(&svc) && !decide::wants_load_balancer(&svc) && !lb.has_record(&key) {
        // Most Services: not ours, and never were.
        return (Action::await_change(), false);
    }
    let uid = svc.metadata.uid.clone().unwrap_or_default();
    let record = lb.record(&key);
    let mut record = record.lock().await;
    if record.uid != uid {
        // A new Service under an old name: the old one's load balancer goes
        // (as upstream's processServiceDeletion), and nothing we did
        // applies to the new one.
        if !record.elsewhere
            && let Some(old) = record.sent.clone()
            && let Err(e) = lb.delete_replaced(&svc, old).await
        {
            let delay = lb.backoff.failed(&key);
            tracing::warn!(service = %key, error = %e, retry_in = ?delay, "deleting the load balancer of the Service this one replaced");
            return (Action::requeue(delay), true);
        }
        *record = Record {
            uid: uid.clone(),
            ..Record::default()
        };
    }
    // Whether the cloud may have a load balancer for it from this process.
    let may_exist = record.sent.is_some();
    let fingerprint = decide::fingerprint(&svc);
    let cleanup = decide::needs_cleanup(&svc);
    if let Some((f, c, at)) = record.retry
        && (f, c) == (fingerprint, cleanup)
    {
        let now = tokio::time::Instant::now();
        if now < at {
            return (Action::requeue(at - now), false);
        }
    }
    let outcome = if cleanup {
        Some((lb.delete(&svc).await, true))
    } else if decide::wants_load_balancer(&svc) {
        // Not the Service's condition: the cache may not show our own
        // status write yet, and upstream does not re-ensure on status
        // changes either.
        let current = record.ensured == Some(fingerprint) && decide::has_finalizer(&svc);
        tracing::debug!(service = %key, current, ?record, fingerprint, "sync");
        if current {
            None
        } else {
            Some((lb.ensure(&svc, &mut record).await, false))
        }
    } else if may_exist {
        // We sent it an Ensure in this process and its finalizer was
        // removed by someone else: delete anyway rather than leak.
        let r = lb.delete(&svc).await;
        if let Err(e) = &r {
            lb.event(
                &svc,
                EventType::Warning,
                "DeleteLoadBalancerFailed",
                format!("Error deleting load balancer: {e}"),
            )
            .await;
        }
        Some((r, true))
    } else {
        None
    };
    match outcome {
        None => (Action::await_change(), false),
        Some((Ok(action), _)) => {
            lb.backoff.succeeded(&key);
            record.retry = None;
            (action, false)
        }
        Some((Err(e), deleting)) => {
            if !deleting {
                record.ensured = None;
            }
            let delay = lb.failed(&svc, e, deleting).await;
            record.retry = Some((fingerprint, cleanup, tokio::time::Instant::now() + delay));
            (Action::requeue(delay), true)
        }
    }
}

/// Runs the controller until the process stops. Call once the node cache
/// has synced, so no Service is ensured with a partial node set.
pub async fn run(
    ctx: Arc<Context>,
    node_changes: tokio::sync::watch::Receiver<u64>,
    workers: u16,
    orphan_sweep: Option<Duration>,
) {
    let client = ctx.client.clone();
    let (resync, resync_requests) = mpsc::unbounded();
    let lb = Lb::new(ctx, node_changes.clone(), resync);
    let (store, writer) = reflector::store();
    let synced = tokio::sync::watch::Sender::new(false);
    let synced_rx = synced.subscribe();
    let (watched, cached) = (lb.clone(), store.clone());
    let services = crate::k8s::applied_once_stored(
        watcher(Api::<Service>::all(client), watcher::Config::default())
            .default_backoff()
            .modify(|s: &mut Service| s.metadata.managed_fields = None)
            .reflect(writer)
            .inspect_ok(move |ev| match ev {
                // Gone from the cache: see `vanished`.
                watcher::Event::Delete(svc) => {
                    let key = decide::key(svc);
                    if watched.has_record(&key) {
                        watched.resync_key(&key);
                    }
                }
                // A relist drops what was deleted while the watch was
                // broken without a Delete event.
                watcher::Event::InitDone => {
                    watched.forget_vanished(&cached.state());
                    synced.send_replace(true);
                }
                _ => {}
            }),
    );
    let backends = backends::follow_nodes(lb.clone(), store.clone(), node_changes, workers.into());
    let sweeper = orphans::sweep_periodically(lb.clone(), store.clone(), synced_rx, orphan_sweep);
    let (reconciling, vanishing) = (lb.clone(), lb.clone());
    let controller = ccm_runtime::controller::legacy(
        "service",
        lb.ctx.metrics.queues.clone(),
        move |svc| reconcile(svc, reconciling.clone()),
        move |key| vanished(key, vanishing.clone()),
    )
    .store(store.clone())
    .changes(crate::k8s::references(services, "services"))
    .resyncs(resync_requests)
    .workers(workers.into())
    .run();
    tokio::join!(controller, backends, sweeper);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use ccm_fake_provider::FakeConfig;
    use kube::api::ObjectMeta;

    /// A node generation that never moves: these tests never change nodes.
    fn unchanging() -> tokio::sync::watch::Receiver<u64> {
        tokio::sync::watch::channel(0).1
    }

    fn backend(name: &str) -> k8s_openapi::api::core::v1::Node {
        k8s_openapi::api::core::v1::Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The apiserver's answer for a Service that is gone.
    fn not_found() -> (u16, Value) {
        let status = json!({"kind": "Status", "status": "Failure",
                            "reason": "NotFound", "code": 404,
                            "message": "services \"web\" not found"});
        (404, status)
    }

    /// The controller's state over `client` and `provider`, with one
    /// backend Node that never changes; the receiver gets its resyncs.
    fn lb_over(
        client: kube::Client,
        provider: &Provider,
    ) -> (Arc<Lb>, mpsc::UnboundedReceiver<ObjectRef<Service>>) {
        let (resync, resyncs) = mpsc::unbounded();
        let lb = Lb::new(
            context(client, provider, vec![backend("n1")]),
            unchanging(),
            resync,
        );
        (lb, resyncs)
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let asked = |d: Duration| SyncError::Provider {
            op: "ensure load balancer",
            source: ClientError::Provider(ccm_provider_sdk::ProviderError::retry_after("wait", d)),
        };
        assert_eq!(
            asked(Duration::from_secs(7)).retry_delay(),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            asked(Duration::ZERO).retry_delay(),
            Some(RETRY_AFTER_BOUNDS.0),
            "zero is not a busy loop"
        );
        assert_eq!(
            asked(Duration::from_secs(86_400)).retry_delay(),
            Some(RETRY_AFTER_BOUNDS.1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_sweeps_the_records_of_vanished_services_are_still_dropped() {
        let provider = fake_provider(FakeConfig::default());
        let (client, _api) = accepting_api();
        let (resync, _) = mpsc::unbounded();
        let lb = Lb::new(context(client, &provider, vec![]), unchanging(), resync);
        lb.record("ns/gone");
        let (store, _writer) = reflector::store::<Service>();
        let (synced, synced_rx) = tokio::sync::watch::channel(false);
        let tidy = tokio::spawn(orphans::sweep_periodically(
            lb.clone(),
            store,
            synced_rx,
            None,
        ));
        tokio::time::sleep(orphans::TIDY_PERIOD * 2).await;
        assert!(
            lb.has_record("ns/gone"),
            "nothing is dropped before the cache synced"
        );
        synced.send_replace(true);
        tokio::time::sleep(orphans::TIDY_PERIOD + Duration::from_secs(1)).await;
        assert!(
            !lb.has_record("ns/gone"),
            "dropped once the cache says it is gone"
        );
        tidy.abort();
    }

    #[tokio::test]
    async fn a_new_service_gets_finalizer_then_load_balancer_then_ingress() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, api) = accepting_api();
        let (lb, _) = lb_over(client, &provider);
        let svc = Arc::new(lb_service());

        let (_, failed) = sync(svc.clone(), lb.clone()).await;
        assert!(!failed);
        assert_eq!(
            api.writes(),
            [
                "PATCH /api/v1/namespaces/ns/services/web/status",
                "PATCH /api/v1/namespaces/ns/services/web/status",
            ]
        );
        let writes: Vec<Call> = api.all().into_iter().filter(|c| !c.is_event()).collect();
        assert_eq!(
            writes[0].body["metadata"]["finalizers"],
            json!([decide::FINALIZER]),
            "the finalizer goes on before the cloud is called"
        );
        assert_eq!(
            writes[0].content_type,
            "application/strategic-merge-patch+json"
        );
        let ingress = &writes[1].body["status"]["loadBalancer"]["ingress"][0]["ip"];
        assert!(
            ingress
                .as_str()
                .is_some_and(|ip| ip.starts_with("192.0.2.")),
            "{ingress}"
        );
        assert_eq!(writes[1].body["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            api.event_reasons(),
            ["EnsuringLoadBalancer", "EnsuredLoadBalancer"]
        );
        let lbs = provider.fake.dump().load_balancers;
        assert_eq!(lbs.len(), 1);

        // The Service as the cache shows it after our first write (the
        // finalizer; the status not yet): no second Ensure.
        let mut cached = (*svc).clone();
        cached.metadata.finalizers = Some(vec![decide::FINALIZER.into()]);
        let svc = Arc::new(cached);
        let ensures = provider
            .fake
            .calls_of(ccm_fake_provider::Method::EnsureLoadBalancer);
        sync(svc, lb).await;
        assert_eq!(
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::EnsureLoadBalancer)
                .len(),
            ensures.len()
        );
    }

    #[tokio::test]
    async fn implemented_elsewhere_leaves_no_condition_of_ours() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        // The apiserver answers a patch with the whole object, which a
        // deletion directive alone is not.
        let (client, api) = mock_api(|call| {
            if call.body.to_string().contains("$patch") {
                (200, serde_json::to_value(lb_service()).unwrap())
            } else {
                (200, call.body.clone())
            }
        });
        let (lb, _) = lb_over(client, &provider);
        let mut svc = lb_service();
        svc.metadata.annotations = Some(
            [(
                ccm_fake_provider::ANNOTATION_IMPLEMENTED_ELSEWHERE.to_owned(),
                "true".to_owned(),
            )]
            .into(),
        );
        let (action, failed) = sync(Arc::new(svc), lb).await;
        assert!(!failed);
        assert_eq!(action, Action::await_change());
        let writes: Vec<Call> = api.all().into_iter().filter(|c| !c.is_event()).collect();
        assert_eq!(writes.len(), 2, "{writes:?}");
        // The finalizer (kept, as upstream, so a deletion is still seen)
        // and the Provisioning condition went on before the call...
        assert_eq!(
            writes[0].body["status"]["conditions"][0]["reason"],
            "Provisioning"
        );
        // ...and the condition comes off again: another controller owns
        // this load balancer and its status.
        assert_eq!(
            writes[1].body,
            json!({"status": {"conditions": [{"type": decide::CONDITION, "$patch": "delete"}]}})
        );
        assert!(writes[1].body["status"].get("loadBalancer").is_none());
        assert!(provider.fake.dump().load_balancers.is_empty());
        assert!(
            !api.event_reasons()
                .iter()
                .any(|r| r == "EnsuredLoadBalancer")
        );
    }

    #[tokio::test]
    async fn a_service_deleted_before_its_finalizer_went_on_gets_no_load_balancer() {
        // The cache still shows the Service; the API server no longer has
        // it (created and deleted at once).
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, api) = mock_api(|call| {
            if call.line().ends_with("/status") {
                not_found()
            } else {
                (200, call.body.clone())
            }
        });
        let (lb, _) = lb_over(client, &provider);
        let (action, failed) = sync(Arc::new(lb_service()), lb.clone()).await;
        assert!(!failed);
        assert_eq!(action, Action::await_change());
        assert_eq!(
            api.writes(),
            ["PATCH /api/v1/namespaces/ns/services/web/status"],
            "only the finalizer was tried"
        );
        assert!(
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::EnsureLoadBalancer)
                .is_empty(),
            "the cloud is not called for a Service that is gone"
        );
        assert!(provider.fake.dump().load_balancers.is_empty());
        // Nothing recorded as ensured: no backend update will target it.
        let record = lb.record("ns/web");
        assert_eq!(record.lock().await.ensured, None);
    }

    #[tokio::test]
    async fn a_service_gone_despite_its_finalizer_loses_its_load_balancer() {
        // The finalizer went on (200) and the load balancer was made, but a
        // DELETE racing the finalizer's addition removed the Service anyway
        // (kubernetes/kubernetes#77988): the status write after the Ensure
        // finds it gone, and then the cache drops it.
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let status_writes = std::sync::atomic::AtomicUsize::new(0);
        let (client, api) = mock_api(move |call| {
            if call.line().ends_with("/status")
                && status_writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0
            {
                not_found()
            } else {
                (200, call.body.clone())
            }
        });
        let (lb, mut resyncs) = lb_over(client, &provider);
        let (_, failed) = sync(Arc::new(lb_service()), lb.clone()).await;
        assert!(!failed);
        assert_eq!(provider.fake.dump().load_balancers.len(), 1);

        // The cache no longer has it: a watch Delete, or a relist without it.
        lb.forget_vanished(&[]);
        let again = resyncs
            .try_recv()
            .expect("the vanished Service is handed back to the reconciler");
        assert_eq!(again, ObjectRef::new("web").within("ns"));
        // Its turn comes and the store does not have it.
        assert_eq!(vanished(again, lb.clone()).await, Action::await_change());
        assert!(
            provider.fake.dump().load_balancers.is_empty(),
            "deleted with what the Ensure was sent"
        );
        assert!(!lb.has_record("ns/web"));
        assert_eq!(
            api.event_reasons().last().map(String::as_str),
            Some("DeletedLoadBalancer")
        );
        // Nothing more to do: a second turn finds no record.
        assert_eq!(
            vanished(ObjectRef::new("web").within("ns"), lb.clone()).await,
            Action::await_change()
        );
        assert_eq!(
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::EnsureLoadBalancerDeleted)
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn a_vanished_service_whose_delete_fails_is_retried_and_never_forgotten() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, _api) = accepting_api();
        let (lb, _) = lb_over(client, &provider);
        let (_, failed) = sync(Arc::new(lb_service()), lb.clone()).await;
        assert!(!failed);
        provider.fake.inject_error(
            ccm_fake_provider::Method::EnsureLoadBalancerDeleted,
            ccm_fake_provider::ErrorInjection::new(
                ccm_fake_provider::ErrorKind::CloudUnavailable,
                "cloud API down",
            ),
        );
        let key = || ObjectRef::new("web").within("ns");
        assert_eq!(
            vanished(key(), lb.clone()).await,
            Action::requeue(Duration::from_secs(5))
        );
        assert_eq!(provider.fake.dump().load_balancers.len(), 1);
        assert!(lb.has_record("ns/web"), "kept for the retry");
        // A tidy pass meanwhile keeps it too.
        lb.forget_vanished(&[]);
        assert!(lb.has_record("ns/web"));
        provider.fake.clear_faults();
        assert_eq!(vanished(key(), lb.clone()).await, Action::await_change());
        assert!(provider.fake.dump().load_balancers.is_empty());
    }

    #[tokio::test]
    async fn a_failed_ensure_backs_off_and_says_why() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        provider.fake.inject_error(
            ccm_fake_provider::Method::EnsureLoadBalancer,
            ccm_fake_provider::ErrorInjection::new(
                ccm_fake_provider::ErrorKind::QuotaExceeded,
                "no more load balancers",
            ),
        );
        let (client, api) = accepting_api();
        let (lb, _) = lb_over(client, &provider);
        let (action, failed) = sync(Arc::new(lb_service()), lb).await;
        assert!(failed);
        assert_eq!(action, Action::requeue(Duration::from_secs(5)));
        let condition =
            api.all().into_iter().rfind(|c| !c.is_event()).unwrap().body["status"]["conditions"][0]
                .clone();
        assert_eq!(condition["reason"], "QuotaExceeded");
        assert!(
            api.event_reasons()
                .contains(&"SyncLoadBalancerFailed".to_owned())
        );
        assert!(provider.fake.dump().load_balancers.is_empty());
    }
}
