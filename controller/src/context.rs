//! What every controller shares: the Kubernetes client, the provider client,
//! the one Node cache, settings, and the error type with per-object backoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccm_provider_sdk::{ClientError, ProviderClient};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::runtime::{WatchStreamExt, controller::Action};
use kube::{Api, Client, Resource};

use crate::node::InitError;

/// Errors of one reconcile; each is retried with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("failed to get instance metadata for node {node}: {source}")]
    Metadata { node: String, source: ClientError },
    #[error("failed to get labels for volume {volume}: {source}")]
    VolumeLabels { volume: String, source: ClientError },
    #[error("failed to get zone from cloud provider for node {node}: {source}")]
    Zone { node: String, source: ClientError },
    #[error("failed to get node modifiers from cloud provider: {0}")]
    Init(#[from] InitError),
    #[error("{0}")]
    Addresses(String),
}

/// The shared Node cache: one watch, `managedFields` and `status.images`
/// stripped (they are most of a Node's size and no controller reads them).
/// The cloud-node controller consumes the watch's stream; every other
/// controller reads the same store.
pub struct NodeCache {
    pub store: Store<Node>,
    writer: reflector::store::Writer<Node>,
    synced: tokio::sync::watch::Sender<bool>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl NodeCache {
    pub fn new() -> Self {
        let (store, writer) = reflector::store();
        NodeCache {
            store,
            writer,
            synced: tokio::sync::watch::Sender::new(false),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Becomes true once the first full listing is in the store. (Not
    /// `Store::wait_until_ready`: kube-runtime wakes only one of several
    /// concurrent waiters, and the controller's runner is already one.)
    pub fn synced(&self) -> tokio::sync::watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Marked changed whenever a Node is added, changed or deleted (after
    /// the store has the change), for controllers that react to the node
    /// set rather than to one Node.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The watch feeding the store, yielding each changed Node. Whoever
    /// consumes it keeps the store current; it retries with backoff on
    /// errors and never ends.
    pub fn into_stream(
        self,
        client: Client,
    ) -> impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + 'static {
        watcher(Api::<Node>::all(client), watcher::Config::default())
            .default_backoff()
            .modify(|n: &mut Node| {
                n.metadata.managed_fields = None;
                if let Some(s) = n.status.as_mut() {
                    s.images = None;
                }
            })
            .reflect(self.writer)
            .inspect_ok(move |ev| match ev {
                watcher::Event::InitDone => {
                    self.synced.send_replace(true);
                    self.changed.send_modify(|n| *n += 1);
                }
                watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
                    self.changed.send_modify(|n| *n += 1);
                }
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
            })
            .applied_objects()
    }
}

impl Default for NodeCache {
    fn default() -> Self {
        Self::new()
    }
}

/// Drives a node stream when no controller consumes it.
pub async fn drain(stream: impl futures::Stream<Item = Result<Node, watcher::Error>>) {
    stream
        .for_each(|ev| async move {
            if let Err(e) = ev {
                tracing::warn!(error = %e, "node watch error; retrying");
            }
        })
        .await;
}

/// Exponential backoff per object key, reset on success. Nodes use 1 s
/// doubling to 5 min: upstream starts at 5 ms and caps at 1000 s, but a
/// cloud that failed once rarely answers 5 ms later, and 16 minutes is too
/// long to wait for a node that could be initialised. Services use
/// upstream's 5 s to 5 min.
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: Mutex::default(),
        }
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    pub fn failed(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = f.entry(key.to_owned()).or_insert(0);
        let delay = self.base.saturating_mul(1u32 << (*n).min(16)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// Settings and clients of one running controller.
pub struct Context {
    pub client: Client,
    pub provider: ProviderClient,
    pub nodes: Store<Node>,
    pub cluster_name: String,
    pub recorder: Recorder,
    pub backoff: Backoff,
    /// The field manager of this controller's writes.
    pub manager: &'static str,
    /// Nodes this process initialised whose untainted state the cache has
    /// not shown yet.
    pub initialised: Mutex<std::collections::HashSet<String>>,
    pub metrics: crate::metrics::ControllerMetrics,
}

impl Context {
    pub fn new(
        client: Client,
        provider: ProviderClient,
        nodes: Store<Node>,
        cluster_name: String,
        manager: &'static str,
        metrics: crate::metrics::ControllerMetrics,
    ) -> Arc<Self> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: manager.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Arc::new(Context {
            client,
            provider,
            nodes,
            cluster_name,
            recorder,
            backoff: Backoff::default(),
            manager,
            initialised: Mutex::default(),
            metrics,
        })
    }

    /// Patch parameters naming this controller as the field manager.
    pub fn patch_params(&self) -> kube::api::PatchParams {
        kube::api::PatchParams {
            field_manager: Some(self.manager.into()),
            ..Default::default()
        }
    }

    /// Publishes an Event; failures are logged, never fatal.
    pub async fn event<K>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(reason, error = %e, "failed to publish event");
        }
    }
}

/// Requeue after the object's backoff.
pub fn retry_after(ctx: &Context, key: &str, err: &Error) -> Action {
    let delay = ctx.backoff.failed(key);
    tracing::warn!(key, error = %err, retry_in = ?delay, "error syncing; requeuing");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let b = Backoff::default();
        let d: Vec<u64> = (0..12).map(|_| b.failed("n").as_secs()).collect();
        assert_eq!(d, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(b.failed("other").as_secs(), 1, "per key");
        b.succeeded("n");
        assert_eq!(b.failed("n").as_secs(), 1);
    }
}
