//! The one Node watch every controller shares, driven by the runtime.
//!
//! `managedFields` and `status.images` are stripped (they are most of a
//! Node's size and no controller reads them). The watch fills one store;
//! controllers that react to single Nodes get their own subscription,
//! controllers that react to the node set get a change counter. No
//! controller drives the watch, so none can freeze it for the others.
//!
//! Subscriptions carry the changed Node itself. (kube's `ReflectHandle`
//! carries a reference and looks it up in the store: for a Node deleted in
//! between it answers `Pending` without a waker, stalling its consumer.)

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::controllers::NodeEvents;

pub struct NodeWatch {
    store: Store<Node>,
    writer: reflector::store::Writer<Node>,
    subscribers: Vec<mpsc::UnboundedSender<Arc<Node>>>,
    synced: watch::Sender<bool>,
    changed: watch::Sender<u64>,
}

impl Default for NodeWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeWatch {
    pub fn new() -> Self {
        let (store, writer) = reflector::store();
        NodeWatch {
            store,
            writer,
            subscribers: Vec::new(),
            synced: watch::Sender::new(false),
            changed: watch::Sender::new(0),
        }
    }

    pub fn store(&self) -> Store<Node> {
        self.store.clone()
    }

    /// Becomes true once the first full listing is in the store. (Not
    /// `Store::wait_until_ready`: kube-runtime wakes only one of several
    /// concurrent waiters, and a controller's runner is already one.)
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Bumped whenever a Node is added, changed or deleted (after the store
    /// has the change).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Every Node the watch applies from now on, the initial listing
    /// included when subscribed before [`NodeWatch::drive`]. A subscriber
    /// that goes away is dropped; one that is slow only buffers.
    pub fn subscribe(&mut self) -> NodeEvents {
        let (tx, rx) = mpsc::unbounded();
        self.subscribers.push(tx);
        rx.boxed()
    }

    /// Runs the watch; retries with backoff on errors and never ends.
    pub async fn drive(self, client: Client) {
        let NodeWatch {
            writer,
            mut subscribers,
            synced,
            changed,
            ..
        } = self;
        let events = watcher(Api::<Node>::all(client), watcher::Config::default())
            .default_backoff()
            .modify(|n: &mut Node| {
                n.metadata.managed_fields = None;
                if let Some(s) = n.status.as_mut() {
                    s.images = None;
                }
            })
            .reflect(writer);
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "node watch error; retrying");
                    continue;
                }
            };
            match event {
                watcher::Event::InitDone => {
                    synced.send_replace(true);
                    changed.send_modify(|n| *n += 1);
                }
                watcher::Event::Delete(_) => changed.send_modify(|n| *n += 1),
                watcher::Event::Apply(node) => {
                    changed.send_modify(|n| *n += 1);
                    publish(&mut subscribers, node);
                }
                watcher::Event::InitApply(node) => publish(&mut subscribers, node),
                watcher::Event::Init => {}
            }
        }
    }
}

fn publish(subscribers: &mut Vec<mpsc::UnboundedSender<Arc<Node>>>, node: Node) {
    let node = Arc::new(node);
    subscribers.retain(|s| s.unbounded_send(node.clone()).is_ok());
}
