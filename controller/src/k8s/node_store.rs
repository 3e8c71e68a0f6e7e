//! The shared Node cache: every Node the watch has listed or seen since,
//! as its projection ([`super::projected`]), by name.
//!
//! kube-runtime's reflector applies a watch event by reference, so it
//! stores a clone of each object and the decoded one is dropped: at every
//! kubelet heartbeat, a whole Node copied and freed again. This cache takes
//! the decoded Node itself, and the Node watch hands subscribers the `Arc`
//! it holds.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;
use parking_lot::RwLock;

use super::node;

/// Reads the cache; clones share it.
#[derive(Clone, Default)]
pub struct NodeStore(Arc<RwLock<HashMap<String, Arc<Node>>>>);

impl NodeStore {
    /// A cache holding `nodes` and never written to again: for a controller
    /// run without the watch.
    #[cfg(test)]
    pub fn of(nodes: impl IntoIterator<Item = Node>) -> Self {
        let mut writer = NodeStoreWriter::default();
        for n in nodes {
            writer.apply(Arc::new(n));
        }
        writer.reader()
    }

    /// The Node `key` names (Nodes have no namespace).
    pub fn get(&self, key: &ObjectRef<Node>) -> Option<Arc<Node>> {
        self.named(&key.name)
    }

    pub fn named(&self, name: &str) -> Option<Arc<Node>> {
        self.0.read().get(name).cloned()
    }

    /// Every Node, in no particular order.
    pub fn state(&self) -> Vec<Arc<Node>> {
        self.0.read().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.0.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.read().is_empty()
    }
}

impl std::fmt::Debug for NodeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStore")
            .field("nodes", &self.len())
            .finish()
    }
}

/// Writes the cache, as kube-runtime's reflector does: a listing's Nodes
/// are held apart until the listing ends, then replace the cache whole.
#[derive(Default)]
pub struct NodeStoreWriter {
    store: NodeStore,
    listing: Option<HashMap<String, Arc<Node>>>,
}

impl NodeStoreWriter {
    pub fn reader(&self) -> NodeStore {
        self.store.clone()
    }

    /// Stores `n`, and returns the Node it replaced. (A Node already
    /// cached, as at every heartbeat, keeps its key: no name is copied.)
    pub fn apply(&mut self, n: Arc<Node>) -> Option<Arc<Node>> {
        let mut nodes = self.store.0.write();
        if let Some(slot) = nodes.get_mut(node::name(&n)) {
            return Some(std::mem::replace(slot, n));
        }
        nodes.insert(node::name(&n).to_owned(), n);
        None
    }

    pub fn delete(&mut self, n: &Node) {
        self.store.0.write().remove(node::name(n));
    }

    /// A listing starts: its Nodes go aside until [`Self::listed`].
    pub fn listing(&mut self) {
        self.listing = Some(HashMap::new());
    }

    pub fn listed_one(&mut self, n: Arc<Node>) {
        self.listing
            .get_or_insert_default()
            .insert(node::name(&n).to_owned(), n);
    }

    /// The listing is complete: it is the cache now.
    pub fn listed(&mut self) {
        let listed = self.listing.take().unwrap_or_default();
        *self.store.0.write() = listed;
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;

    fn node(name: &str, rv: &str) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_listing_replaces_the_cache_only_when_complete() {
        let mut w = NodeStoreWriter::default();
        let store = w.reader();
        assert!(w.apply(node("a", "1")).is_none());
        let replaced = w.apply(node("a", "2")).unwrap();
        assert_eq!(replaced.metadata.resource_version.as_deref(), Some("1"));

        w.listing();
        w.listed_one(node("b", "3"));
        assert!(
            store.named("b").is_none(),
            "visible before the listing ended"
        );
        assert!(store.named("a").is_some());
        w.listed();
        assert!(
            store.named("a").is_none(),
            "a Node gone from the listing stayed"
        );
        assert_eq!(store.len(), 1);
        let b = store.get(&ObjectRef::new("b")).unwrap();
        w.delete(&b);
        assert!(store.is_empty());
    }

    #[test]
    fn the_stored_node_is_the_one_applied() {
        let mut w = NodeStoreWriter::default();
        let n = node("a", "1");
        w.apply(n.clone());
        assert!(Arc::ptr_eq(&w.reader().named("a").unwrap(), &n));
        assert_eq!(NodeStore::of([(*n).clone()]).state().len(), 1);
    }
}
