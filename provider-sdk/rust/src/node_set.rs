//! The nodes of load balancer calls as one shared value. A controller sends
//! the same node set with every EnsureLoadBalancer and UpdateLoadBalancer
//! until the set changes: with 1,000 Services over 1,000 Nodes, copying,
//! encoding and decoding the set for every call was most of the CPU of
//! both processes. A [`NodeSet`] is built once, shared by its clones,
//! encoded at most once (the client copies those bytes into each request),
//! and named by an id derived from that encoding, which lets a provider
//! with `CAPABILITY_NODE_SETS` receive it once (PutNodeSet) and then only
//! its id.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use prost::Message;
use prost::bytes::Bytes;
use prost::encoding;

use crate::proto::NodeRef;

/// `nodes` in EnsureLoadBalancerRequest, UpdateLoadBalancerRequest and
/// PutNodeSetRequest.
pub(crate) const NODES_TAG: u32 = 3;

/// Nodes for load balancer calls. Cheap to clone: clones share the nodes,
/// their encoding and their id.
#[derive(Clone)]
pub struct NodeSet {
    inner: Arc<Inner>,
}

/// At least one of `nodes` and `encoded` is set at construction: each is
/// made from the other.
#[derive(Default)]
struct Inner {
    /// Set at construction, or decoded from `encoded` on first use.
    nodes: OnceLock<Vec<NodeRef>>,
    /// Each node as field 3 of the request, in order.
    encoded: OnceLock<Bytes>,
    id: OnceLock<String>,
    len: usize,
}

impl NodeSet {
    pub fn new(nodes: Vec<NodeRef>) -> Self {
        NodeSet {
            inner: Arc::new(Inner {
                len: nodes.len(),
                nodes: OnceLock::from(nodes),
                ..Inner::default()
            }),
        }
    }

    /// A set kept as its encoding only, each node encoded as it comes and
    /// dropped: for a sender, which reads the nodes no more once they are
    /// encoded. A node's labels and annotations as maps take several times
    /// their encoding. [`Self::nodes`] decodes them (once) if asked.
    pub fn encoded_from(nodes: impl IntoIterator<Item = NodeRef>) -> Self {
        let mut buf = Vec::new();
        let mut len = 0;
        for n in nodes {
            encoding::message::encode(NODES_TAG, &n, &mut buf);
            len += 1;
        }
        NodeSet {
            inner: Arc::new(Inner {
                encoded: OnceLock::from(Bytes::from(buf)),
                len,
                ..Inner::default()
            }),
        }
    }

    pub fn nodes(&self) -> &[NodeRef] {
        self.inner.nodes.get_or_init(|| {
            // The bytes are this set's own encoding: they decode.
            NodeSetBytes::decode(self.encoded().clone())
                .map(|d| d.nodes)
                .unwrap_or_default()
        })
    }

    /// How many nodes, without decoding them.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Each node, decoded one at a time and not kept: for a reader that
    /// goes through the set once (a provider building its own backend
    /// list), so that the decoded set, several times its encoding, is
    /// never held whole. [`Self::nodes`] decodes once and keeps.
    pub fn each(&self) -> impl Iterator<Item = NodeRef> + '_ {
        let decoded = self.inner.nodes.get();
        let mut rest: &[u8] = match decoded {
            Some(_) => &[],
            None => self.encoded(),
        };
        let from_bytes = std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            // This set's own encoding (it decodes): field 3's key, then
            // each node length-delimited.
            encoding::decode_key(&mut rest).ok()?;
            NodeRef::decode_length_delimited(&mut rest).ok()
        });
        decoded.into_iter().flatten().cloned().chain(from_bytes)
    }

    /// Whether [`Self::nodes`] decoded the set (or it was built decoded).
    #[cfg(test)]
    pub(crate) fn is_decoded(&self) -> bool {
        self.inner.nodes.get().is_some()
    }

    /// The nodes as an owned list (a copy).
    pub fn to_vec(&self) -> Vec<NodeRef> {
        self.nodes().to_vec()
    }

    /// `sha256-` and the hex SHA-256 of the nodes as encoded: the same
    /// nodes in the same order always have the same id.
    pub fn id(&self) -> &str {
        self.inner.id.get_or_init(|| {
            let digest = ring::digest::digest(&ring::digest::SHA256, self.encoded());
            let mut id = String::with_capacity(7 + 64);
            id.push_str("sha256-");
            for b in digest.as_ref() {
                id.push_str(&format!("{b:02x}"));
            }
            id
        })
    }

    /// The nodes as field 3 of a request, encoded on first use.
    pub(crate) fn encoded(&self) -> &Bytes {
        self.inner.encoded.get_or_init(|| {
            let nodes = self.nodes();
            let len = nodes
                .iter()
                .map(|n| encoding::message::encoded_len(NODES_TAG, n))
                .sum();
            let mut buf = Vec::with_capacity(len);
            for n in nodes {
                encoding::message::encode(NODES_TAG, n, &mut buf);
            }
            buf.into()
        })
    }
}

/// Any message whose field 3 is the nodes: how [`NodeSet::encoded`]
/// decodes back.
#[derive(Clone, PartialEq, prost::Message)]
struct NodeSetBytes {
    #[prost(message, repeated, tag = "3")]
    nodes: Vec<NodeRef>,
}

impl Default for NodeSet {
    fn default() -> Self {
        NodeSet::new(Vec::new())
    }
}

impl Deref for NodeSet {
    type Target = [NodeRef];

    fn deref(&self) -> &[NodeRef] {
        self.nodes()
    }
}

impl From<Vec<NodeRef>> for NodeSet {
    fn from(nodes: Vec<NodeRef>) -> Self {
        NodeSet::new(nodes)
    }
}

impl From<&NodeSet> for NodeSet {
    fn from(set: &NodeSet) -> Self {
        set.clone()
    }
}

impl PartialEq for NodeSet {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) || self.nodes() == other.nodes()
    }
}

impl fmt::Debug for NodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeSet")
            .field("nodes", &self.inner.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeRef {
        NodeRef {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_id_follows_the_nodes() {
        let ab = NodeSet::new(vec![node("a"), node("b")]);
        let again = NodeSet::new(vec![node("a"), node("b")]);
        let other = NodeSet::new(vec![node("a"), node("c")]);
        assert_eq!(ab.id(), again.id());
        assert_ne!(ab.id(), other.id());
        assert_ne!(NodeSet::default().id(), ab.id());
        assert!(
            ab.id().starts_with("sha256-") && ab.id().len() == 71,
            "{}",
            ab.id()
        );
        assert!(crate::validate::node_set_id("id", ab.id()).is_ok());
    }

    #[test]
    fn a_set_kept_encoded_is_the_same_set() {
        let nodes = vec![node("a"), node("b")];
        let kept = NodeSet::encoded_from(nodes.clone());
        let whole = NodeSet::new(nodes);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept.encoded(), whole.encoded());
        assert_eq!(kept.id(), whole.id());
        assert!(kept.inner.nodes.get().is_none(), "decoded before asked");
        assert_eq!(kept.nodes(), whole.nodes());
        assert!(NodeSet::encoded_from([]).is_empty());
    }

    #[test]
    fn each_reads_the_nodes_without_keeping_them() {
        let mut labelled = node("b");
        labelled.labels.insert("zone".into(), "z1".into());
        let nodes = vec![node("a"), labelled, node("c")];
        let kept = NodeSet::encoded_from(nodes.clone());
        assert_eq!(kept.each().collect::<Vec<_>>(), nodes);
        assert!(!kept.is_decoded(), "each() kept the decoded set");
        let whole = NodeSet::new(nodes.clone());
        assert_eq!(whole.each().collect::<Vec<_>>(), nodes);
        assert_eq!(NodeSet::encoded_from([]).each().count(), 0);
    }
}
