//! The one Node watch every controller shares, driven by the manager.
//!
//! Nodes are listed and watched in protobuf and decoded as their projection
//! ([`crate::k8s::projected`], [`crate::k8s::node_list_watch`]): the fields
//! controllers read. The watch fills one store; controllers that
//! react to single Nodes get their own subscription, controllers that react
//! to the node set get a change counter. A change the projection does not
//! show (a kubelet's heartbeat, new images) reaches the store, for its
//! resourceVersion, and no controller. No controller drives the watch, so
//! none can freeze it for the others.
//!
//! Subscriptions carry the changed Node itself, the `Arc` the store holds.
//! (kube's `ReflectHandle` carries a reference and looks it up in the
//! store: for a Node deleted in between it answers `Pending` without a
//! waker, stalling its consumer.)

use std::sync::Arc;

use futures::channel::mpsc;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::controllers::NodeEvents;
use crate::k8s::node_store::{NodeStore, NodeStoreWriter};
use crate::k8s::{node_list_watch, projected};

pub struct NodeWatch {
    store: NodeStore,
    writer: NodeStoreWriter,
    subscribers: Subscribers,
    synced: watch::Sender<bool>,
    changed: Arc<watch::Sender<u64>>,
}

/// Adds subscribers to a [`NodeWatch`], before or while it runs.
#[derive(Clone)]
pub struct Subscribers {
    store: NodeStore,
    synced: watch::Receiver<bool>,
    senders: Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<Node>>>>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Subscribers {
    /// Every Node the watch applies from now on. Subscribed once the cache
    /// has synced, it first gets every Node in the cache, so a controller
    /// started late sees the Nodes that already exist. A subscriber that
    /// goes away is dropped; one that is slow only buffers.
    pub fn subscribe(&self) -> NodeEvents {
        let (tx, rx) = mpsc::unbounded();
        // Under the lock the watch publishes with: a Node applied before is
        // in the store, one applied after is sent (both at worst).
        let mut senders = self.senders.lock();
        if *self.synced.borrow() {
            for n in self.store.state() {
                let _ = tx.unbounded_send(n);
            }
        }
        senders.push(tx);
        rx.boxed()
    }

    /// Hands `nodes` to every subscriber again, and counts a change of the
    /// node set: their owners changed (a provider's identity did) without
    /// the Nodes changing, so the controllers look at them again. Nothing
    /// before the cache has synced (subscribers get the listing then), and
    /// nothing for no Nodes.
    pub fn resend(&self, nodes: &[Arc<Node>]) {
        if nodes.is_empty() || !*self.synced.borrow() {
            return;
        }
        self.senders
            .lock()
            .retain(|s| nodes.iter().all(|n| s.unbounded_send(n.clone()).is_ok()));
        self.changed.send_modify(|n| *n += 1);
    }

    fn publish(&self, node: Arc<Node>) {
        self.senders
            .lock()
            .retain(|s| s.unbounded_send(node.clone()).is_ok());
    }
}

impl Default for NodeWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeWatch {
    pub fn new() -> Self {
        let writer = NodeStoreWriter::default();
        let store = writer.reader();
        let synced = watch::Sender::new(false);
        let changed = Arc::new(watch::Sender::new(0));
        NodeWatch {
            subscribers: Subscribers {
                store: store.clone(),
                synced: synced.subscribe(),
                senders: Arc::default(),
                changed: changed.clone(),
            },
            store,
            writer,
            synced,
            changed,
        }
    }

    pub fn store(&self) -> NodeStore {
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

    /// Subscribes to changed Nodes; see [`Subscribers::subscribe`].
    pub fn subscribe(&mut self) -> NodeEvents {
        self.subscribers.subscribe()
    }

    /// A handle for subscribing while the watch runs.
    pub fn subscribers(&self) -> Subscribers {
        self.subscribers.clone()
    }

    /// Runs the watch; retries with backoff on errors and never ends.
    pub async fn drive(self, client: Client) {
        let NodeWatch {
            writer,
            subscribers,
            synced,
            changed,
            ..
        } = self;
        let events = node_list_watch::watch_nodes(client).default_backoff();
        let events = reflect_changes(events, writer);
        follow(events, &subscribers, &synced, &changed).await;
    }
}

/// Applies `events` to the store behind `writer`, and passes on what it
/// stored but the Applies that change nothing but the resourceVersion.
/// A listing's Nodes are not passed on: subscribers get them from the
/// store at `InitDone`.
fn reflect_changes<E>(
    events: impl Stream<Item = Result<watcher::Event<Node>, E>>,
    mut writer: NodeStoreWriter,
) -> impl Stream<Item = Result<watcher::Event<Arc<Node>>, E>> {
    use watcher::Event::*;
    events.try_filter_map(move |event| {
        let passed = match event {
            Apply(n) => {
                let n = Arc::new(n);
                let unchanged = (writer.apply(n.clone()))
                    .is_some_and(|old| projected::same_but_for_version(&old, &n));
                (!unchanged).then_some(Apply(n))
            }
            Delete(n) => {
                writer.delete(&n);
                Some(Delete(Arc::new(n)))
            }
            Init => {
                writer.listing();
                None
            }
            InitApply(n) => {
                writer.listed_one(Arc::new(n));
                None
            }
            InitDone => {
                writer.listed();
                Some(InitDone)
            }
        };
        futures::future::ready(Ok(passed))
    })
}

/// Publishes what the reflected watch `events` applies, once the store has
/// it: a controller that looks a published Node up in the store and finds
/// nothing drops it, so a Node registered while the watch was broken (an
/// apiserver restart) would never be initialised. A listing's Nodes are
/// published at its end as the store holds them, not kept a second time
/// while it lasts (at startup, every Node in the cluster).
async fn follow(
    events: impl Stream<Item = Result<watcher::Event<Arc<Node>>, watcher::Error>>,
    subscribers: &Subscribers,
    synced: &watch::Sender<bool>,
    changed: &watch::Sender<u64>,
) {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(node)) => {
                changed.send_modify(|n| *n += 1);
                subscribers.publish(node);
            }
            Ok(watcher::Event::Delete(_)) => changed.send_modify(|n| *n += 1),
            Ok(watcher::Event::InitDone) => {
                synced.send_replace(true);
                changed.send_modify(|n| *n += 1);
                for node in subscribers.store.state() {
                    subscribers.publish(node);
                }
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Err(e) => tracing::warn!(error = %e, "node watch error; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use kube::api::ObjectMeta;

    use super::*;

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Lets the spawned watch task handle what was sent.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    /// Runs `nw` as `drive` does, over the events sent on the returned
    /// sender instead of a watch.
    fn driven(
        nw: NodeWatch,
    ) -> (
        mpsc::UnboundedSender<Result<watcher::Event<Node>, watcher::Error>>,
        tokio::task::JoinHandle<()>,
    ) {
        let NodeWatch {
            writer,
            subscribers,
            synced,
            changed,
            ..
        } = nw;
        let (tx, rx) = mpsc::unbounded();
        let task = tokio::spawn(async move {
            let events = reflect_changes(rx, writer);
            follow(events, &subscribers, &synced, &changed).await
        });
        (tx, task)
    }

    #[tokio::test]
    async fn a_relists_nodes_reach_subscribers_only_once_the_store_has_them() {
        use watcher::Event::*;
        let mut nw = NodeWatch::new();
        let store = nw.store();
        let mut sub = nw.subscribe();
        let (tx, task) = driven(nw);
        let send = |e: watcher::Event<Node>| tx.unbounded_send(Ok(e)).unwrap();
        let has = |name: &str| store.named(name).is_some();

        send(Init);
        send(InitApply(node("n1")));
        settle().await;
        assert!(!has("n1"));
        assert!(
            sub.next().now_or_never().is_none(),
            "published before stored"
        );
        send(InitDone);
        settle().await;
        assert_eq!(
            sub.next()
                .now_or_never()
                .flatten()
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("n1")
        );
        assert!(has("n1"));

        // A relist (the apiserver restarted): n2 was registered meanwhile.
        send(Init);
        send(InitApply(node("n1")));
        send(InitApply(node("n2")));
        settle().await;
        assert!(!has("n2"), "the store holds a relist back until InitDone");
        assert!(
            sub.next().now_or_never().is_none(),
            "published before stored"
        );
        send(InitDone);
        settle().await;
        let mut got = Vec::new();
        while let Some(Some(n)) = sub.next().now_or_never() {
            let stored = store.named(crate::k8s::node::name(&n)).unwrap();
            assert!(Arc::ptr_eq(&n, &stored), "the store's own, not a copy");
            got.push(n.metadata.name.clone().unwrap());
        }
        got.sort();
        assert_eq!(got, ["n1", "n2"]);

        send(Apply(node("n3")));
        settle().await;
        assert_eq!(
            sub.next()
                .now_or_never()
                .flatten()
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("n3")
        );
        assert!(has("n3"));
        drop(tx);
        task.await.unwrap();
    }

    /// A heartbeat (a change the projection does not show) updates the
    /// store's resourceVersion, which conditional writes are made against,
    /// and wakes no controller; a change of anything kept does.
    #[tokio::test]
    async fn only_changes_a_controller_can_see_are_published() {
        use watcher::Event::*;
        let mut nw = NodeWatch::new();
        let store = nw.store();
        let mut sub = nw.subscribe();
        let mut changes = nw.changes();
        let (tx, task) = driven(nw);
        let send = |e: watcher::Event<Node>| tx.unbounded_send(Ok(e)).unwrap();
        let at = |rv: &str, zone: &str| {
            let mut n = node("n1");
            n.metadata.resource_version = Some(rv.into());
            n.metadata.labels = Some([("zone".to_string(), zone.to_string())].into());
            n
        };
        let version = || {
            store
                .named("n1")
                .and_then(|n| n.metadata.resource_version.clone())
        };
        send(Init);
        send(InitApply(at("1", "a")));
        send(InitDone);
        settle().await;
        assert!(sub.next().now_or_never().flatten().is_some());
        changes.mark_unchanged();

        send(Apply(at("2", "a")));
        settle().await;
        assert_eq!(version().as_deref(), Some("2"));
        assert!(
            sub.next().now_or_never().is_none(),
            "a heartbeat was published"
        );
        assert!(
            !changes.has_changed().unwrap(),
            "a heartbeat counted as a change"
        );

        send(Apply(at("3", "b")));
        settle().await;
        assert_eq!(version().as_deref(), Some("3"));
        let got = sub.next().now_or_never().flatten().unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some("3"));
        assert!(changes.has_changed().unwrap());
        drop(tx);
        task.await.unwrap();
    }

    /// Nodes whose owner changed reach every subscriber again, and the
    /// node set counts as changed; no Nodes, nothing (not even the count).
    #[test]
    fn resent_nodes_reach_every_subscriber_and_count_as_a_change() {
        let nw = NodeWatch::new();
        let subscribers = nw.subscribers();
        let mut changes = nw.changes();
        let (mut a, b) = (subscribers.subscribe(), subscribers.subscribe());
        let n1 = Arc::new(node("n1"));
        subscribers.resend(std::slice::from_ref(&n1));
        assert!(
            a.next().now_or_never().is_none() && !changes.has_changed().unwrap(),
            "nothing before the cache has synced"
        );
        nw.synced.send_replace(true);
        drop(b);
        subscribers.resend(&[]);
        assert!(!changes.has_changed().unwrap());
        assert_eq!(subscribers.senders.lock().len(), 2);
        subscribers.resend(&[n1.clone(), Arc::new(node("n2"))]);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        let names: Vec<String> = std::iter::from_fn(|| a.next().now_or_never().flatten())
            .map(|n| n.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["n1", "n2"]);
        assert_eq!(
            subscribers.senders.lock().len(),
            1,
            "a subscriber gone is dropped"
        );
    }
}
