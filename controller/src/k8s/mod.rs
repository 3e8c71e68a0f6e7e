//! Kubernetes helpers every controller shares: Node accessors and
//! well-known keys.

pub mod node;

/// An object's labels or annotations as the contract's map.
pub fn string_map<M: FromIterator<(String, String)>>(
    m: &Option<std::collections::BTreeMap<String, String>>,
) -> M {
    m.iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
