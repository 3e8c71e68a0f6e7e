//! Kubernetes helpers every controller shares: the Node watch in protobuf
//! and its cache, Node writes, Node accessors and well-known keys (the
//! generic watch and write helpers are `ccm_runtime::watch`'s;
//! `write_text` is named here too).

pub mod node;
pub mod node_list_watch;
pub mod node_store;
pub mod node_wire;
pub mod node_write;
pub mod projected;

pub use ccm_runtime::watch::write_text;

/// An object's labels or annotations as the contract's map.
pub fn string_map<M: FromIterator<(String, String)>>(
    m: &Option<std::collections::BTreeMap<String, String>>,
) -> M {
    m.iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
