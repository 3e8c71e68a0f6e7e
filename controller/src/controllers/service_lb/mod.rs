//! service-lb-controller: a cloud load balancer for every `type:
//! LoadBalancer` Service its provider serves, with upstream's finalizer,
//! events and retry semantics, plus a `LoadBalancerReady` condition on the
//! Service saying where its load balancer stands. With one provider, that
//! is every such Service without a `loadBalancerClass`, as upstream (and
//! the classes the provider declares); with several (docs/hybrid.md), one
//! instance runs per provider and [`routing`] says which Services are its.
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
//!
//! The reconciler is the runtime's [`Reconcile`]: one sync asks
//! [`decide::plan`] once what to do (which writes, provider calls and
//! Events, and when to come back) and executes it: [`ensure`] and
//! [`delete`] run its steps, [`status`] does the writes and Events,
//! [`retry`] picks the wait after a failure.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::NodeSet;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use parking_lot::Mutex;

mod backends;
mod decide;
mod delete;
mod ensure;
mod error;
mod orphans;
mod retry;
mod routing;
mod status;

use crate::context::Context;
use crate::k8s::node;
use crate::request_id;
use ccm_runtime::{Action, Reconcile};
use decide::{Due, Record, Retry, Step};
pub use error::SyncError;
pub use retry::Failed;

/// The backend loop starts its pass once the node set has been quiet this
/// long: a Node's join (created, then given its providerID and labels a
/// few milliseconds later) becomes one update per Service, not three.
const BACKEND_QUIET: Duration = Duration::from_millis(100);

/// ... and at the latest this long after the first change, so a node set
/// that never stops changing (a pool scaling) still gets one pass a second.
const BACKEND_COALESCE_MAX: Duration = Duration::from_secs(1);

/// The backend nodes as sent to the provider, with their digest.
#[derive(Clone)]
struct Backends {
    /// Kept encoded only (`NodeSet::encoded_from`): the controller sends
    /// the nodes and never reads them again.
    nodes: NodeSet,
    digest: decide::BackendDigest,
    /// The first names, for Events ([`decide::node_names_for_event`]).
    names: Arc<str>,
}

/// See [`Lb::queues`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Queues {
    services: &'static str,
    nodes: &'static str,
}

impl Queues {
    fn of(provider: Option<&str>) -> Queues {
        // Made once per instance, one instance per configured provider:
        // the leak is bounded, and metric labels must be `'static`.
        let named = |queue: &'static str| match provider {
            None => queue,
            Some(p) => Box::leak(format!("{queue}:{p}").into_boxed_str()),
        };
        Queues {
            services: named("service"),
            nodes: named("node"),
        }
    }
}

/// The controller's state beside the shared [`Context`].
pub struct Lb {
    ctx: Arc<Context>,
    /// The finalizer this provider's load balancers hold their Services
    /// with ([`crate::providers::Scope::finalizer`]).
    finalizer: String,
    /// The provider's name, on every log line and Event, with several
    /// providers; `None` with one (its lines and Events are as before).
    provider_name: Option<String>,
    /// The work queues' names (`workqueue_*{name=…}`): the Services' and
    /// the backend loop's, upstream's with one provider, `<name>:<provider>`
    /// with several (docs/hybrid.md).
    queues: Queues,
    records: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Record>>>>,
    /// (uid, annotation key) pairs already reported as unknown.
    reported_annotations: Mutex<HashSet<(String, String)>>,
    /// The Services reported as served by several providers, by key: the
    /// uid and the reason reported, so each is reported once while it lasts.
    reported_ambiguous: Mutex<HashMap<String, (String, String)>>,
    /// Bumped after each change to the node cache or to the routing that
    /// may change the backends.
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
        let provider_name = ctx
            .scope
            .is_hybrid()
            .then(|| ctx.scope.provider().to_owned());
        Arc::new(Lb {
            finalizer: ctx.scope.finalizer(),
            queues: Queues::of(provider_name.as_deref()),
            provider_name,
            ctx,
            node_generation,
            records: Mutex::default(),
            reported_annotations: Mutex::default(),
            reported_ambiguous: Mutex::default(),
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

    /// The record of `key`: made if `make`, else only one that exists.
    fn record_if(&self, key: &str, make: bool) -> Option<Arc<tokio::sync::Mutex<Record>>> {
        if make {
            return Some(self.record(key));
        }
        self.records.lock().get(key).cloned()
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
        let scope = &self.ctx.scope;
        let chosen = decide::backends(
            nodes
                .iter()
                .map(|n| n.as_ref())
                .filter(|n| scope.backend(n)),
        );
        // Each Node's NodeRef is hashed and encoded as it is made, then
        // dropped: the set's NodeRefs together, their labels and
        // annotations as maps, are several times the encoding kept.
        let mut hashes = Vec::with_capacity(chosen.len());
        let set = NodeSet::encoded_from(chosen.iter().map(|n| {
            let r = node::node_ref(n);
            hashes.push(decide::backend_hash(&r));
            r
        }));
        let backends = Backends {
            digest: decide::backend_digest(hashes),
            names: decide::node_names_for_event(chosen.iter().map(|n| node::name(n))).into(),
            nodes: set,
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
        self.reported_ambiguous
            .lock()
            .retain(|key, _| present.contains(key));
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

    fn has_record(&self, key: &str) -> bool {
        self.records.lock().contains_key(key)
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

impl Reconcile for Lb {
    type Key = ObjectRef<Service>;
    type Object = Service;
    type Error = Failed;

    async fn reconcile(&self, svc: Arc<Service>) -> Result<Action, Failed> {
        self.sync(svc).await
    }

    fn error_policy(&self, key: &ObjectRef<Service>, failed: &Failed, failures: u32) -> Action {
        let delay = failed.delay(failures);
        let key = ccm_runtime::controller::KeyName::key_name(key);
        tracing::warn!(service = %key, provider = self.provider_name.as_deref(), error = %failed.error, retry_in = ?delay, "{}", failed.what);
        Action::requeue(delay)
    }

    async fn gone(&self, key: ObjectRef<Service>) -> Result<Action, Failed> {
        self.vanished(key).await
    }

    /// The Service's, with its uid: the one in the cache, else (a Service
    /// gone) the one its Ensure was sent for.
    fn request_id(&self, key: &ObjectRef<Service>, svc: Option<&Service>) -> Option<String> {
        if let Some(svc) = svc {
            return Some(request_id::service(svc));
        }
        let record = self.records.lock().get(&delete::record_key(key)).cloned();
        let uid = record.and_then(|r| r.try_lock().ok()?.sent.as_ref().map(|s| s.uid.clone()));
        Some(request_id::service(&delete::gone_service(key, uid)))
    }
}

impl Lb {
    /// One sync of one Service.
    async fn sync(&self, mut svc: Arc<Service>) -> Result<Action, Failed> {
        let key = decide::key(&svc);
        let (route, routed) = self.route(&svc);
        self.report_ambiguity(&svc, &route).await;
        let Some(record) = self.record_if(&key, decide::concerns_us(&svc, &routed)) else {
            // Most Services: not ours, and never were.
            return Ok(Action::await_change());
        };
        let mut record = record.lock().await;
        let decide::Plan {
            fresh_record,
            delete_replaced,
            fingerprint,
            cleanup,
            step,
        } = decide::plan(
            &svc,
            &routed,
            &record,
            tokio::time::Instant::now(),
            Time(now()),
        );
        if fresh_record {
            // A new Service under an old name (or a first sync): the old
            // one's load balancer goes, and nothing we did applies to the
            // new one.
            if let Some(old) = delete_replaced {
                self.delete_replaced(&svc, old)
                    .await
                    .map_err(Failed::replaced)?;
            }
            *record = Record::fresh(svc.metadata.uid.clone().unwrap_or_default());
        }
        let (result, deleted) = match step {
            Step::Nothing => return Ok(Action::await_change()),
            Step::NotYet(wait) => return Ok(Action::not_yet(wait)),
            Step::Current => {
                tracing::debug!(service = %key, provider = self.provider_name.as_deref(), current = true, ?record, fingerprint, "sync");
                return Ok(Action::await_change());
            }
            Step::Ensure(ensure) => {
                tracing::debug!(service = %key, provider = self.provider_name.as_deref(), current = false, ?record, fingerprint, "sync");
                (
                    self.ensure(&mut svc, &mut record, ensure, fingerprint)
                        .await,
                    None,
                )
            }
            Step::Delete(delete) => (self.delete(&svc, &delete, &mut record).await, Some(delete)),
        };
        match result {
            Ok(action) => {
                record.retry = None;
                Ok(action)
            }
            Err(SyncError::Stale { op }) => {
                // Nothing was written: the Service changed since this sync
                // read it, and the watch brings the newer version, which
                // is decided afresh (with several providers, its new
                // provider may have written its status since).
                tracing::debug!(service = %key, provider = self.provider_name.as_deref(), op, "the service changed since it was read; deciding again on its newer version");
                record.retry = None;
                if deleted.is_none() {
                    record.ensured = None;
                }
                Ok(Action::await_change())
            }
            Err(e) => {
                if let Some(event) = deleted.as_ref().and_then(|d| d.failure_event(&e)) {
                    self.event(&svc, event).await;
                }
                if deleted.is_none() {
                    record.ensured = None;
                }
                self.report_failure(&svc, &e, deleted.is_some()).await;
                let not_before = Due::default();
                record.retry = Some(Retry {
                    fingerprint,
                    cleanup,
                    not_before: not_before.clone(),
                });
                Err(Failed::sync(e, not_before))
            }
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
    let (resync, resync_requests) = mpsc::unbounded();
    // The backends change with the node set and with the routing (the
    // Nodes a provider owns, when its backends are only those).
    let backend_changes = tokio::sync::watch::Sender::new(0u64);
    let lb = Lb::new(ctx, backend_changes.subscribe(), resync);
    // Before any sync reads the routing: a change after this is followed.
    let identity_changes = lb.ctx.scope.routing().read().identity_changes();
    let synced = tokio::sync::watch::Sender::new(false);
    let synced_rx = synced.subscribe();
    let watched = lb.clone();
    let (store, services) = ccm_runtime::watch::reflected_observed(
        Api::<Service>::all(lb.ctx.client.clone()),
        "services",
        |_| {},
        move |ev, cached| match ev {
            // Gone from the cache: see `vanished`.
            watcher::Event::Delete(svc) => {
                let key = decide::key(svc);
                if watched.has_record(&key) {
                    watched.resync_key(&key);
                }
            }
            // A relist drops what was deleted while the watch was broken
            // without a Delete event.
            watcher::Event::InitDone => {
                watched.forget_vanished(&cached.state());
                synced.send_replace(true);
            }
            _ => {}
        },
    );
    let node_changes = backends::relay(node_changes, backend_changes.clone());
    let backends = backends::follow_nodes(
        lb.clone(),
        store.clone(),
        backend_changes.subscribe(),
        workers.into(),
    );
    let routing = routing::follow(lb.clone(), store.clone(), identity_changes, backend_changes);
    let sweeper = orphans::sweep_periodically(lb.clone(), store.clone(), synced_rx, orphan_sweep);
    let controller = super::runner(&lb.ctx, lb.clone(), lb.queues.services)
        .store(store.clone())
        .changes(services)
        .resyncs(resync_requests)
        .workers(workers.into())
        .run();
    tokio::join!(controller, node_changes, backends, routing, sweeper);
}

#[cfg(test)]
mod hybrid_tests;
#[cfg(test)]
mod tests;
