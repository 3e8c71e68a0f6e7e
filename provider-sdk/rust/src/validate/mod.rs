//! Contract validation shared by both sides: the server checks requests
//! before a provider sees them, the client checks answers before the
//! controller acts on them. Every failure names the offending field.
//!
//! `fields` holds the checks of single values (names, IPs, labels),
//! `messages` those of whole contract messages built from them, and
//! `answers` what both sides check of a provider's answers.

pub(crate) mod answers;
mod fields;
mod messages;
#[cfg(test)]
mod proptests;

pub use answers::{
    MAX_LOAD_BALANCER_CLASSES, MAX_NODE_WARNINGS, MAX_PLATFORMS, MAX_PROVIDER_ID_SCHEMES,
    MAX_REASON_BYTES, identity_lists, is_owned_provider_id, is_warning_reason,
    load_balancer_classes, node_warnings, owned_schemes, platforms, provider_id_schemes, scheme,
    serves_unclassed, split_provider_id, unclassed_services,
};
pub use fields::*;
pub use messages::*;

/// A contract violation: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Violation {
    pub field: String,
    pub problem: String,
}

pub type Checked<T = ()> = Result<T, Violation>;

pub(crate) fn violation(field: impl Into<String>, problem: impl Into<String>) -> Violation {
    Violation {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Runs `check` with an empty field name, and again with `field()` only if
/// it fails: checks that run for every node of every load balancer call
/// build no field names while the input is valid.
pub(crate) fn lazily<T>(
    check: impl Fn(&str) -> Checked<T>,
    field: impl FnOnce() -> String,
) -> Checked<T> {
    check("").or_else(|_| check(&field()))
}

/// Most queries one `BatchInstances` call may carry (contract 1.4.0).
pub const MAX_BATCH_QUERIES: usize = 500;
/// Longest object name accepted (Kubernetes' DNS-1123 subdomain limit).
pub const MAX_NAME_BYTES: usize = 253;
/// Largest total size of one object's annotations (Kubernetes' limit).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Longest label value (Kubernetes' limit).
pub const MAX_LABEL_VALUE_BYTES: usize = 63;
/// Longest label key: a 253-byte prefix, '/', a 63-byte name.
pub const MAX_LABEL_KEY_BYTES: usize = 253 + 1 + 63;
/// Most addresses one instance's metadata may list (a Node's
/// status.addresses): enough for every private IP of a large cloud
/// instance with many network interfaces.
pub const MAX_NODE_ADDRESSES: usize = 1024;
/// Most additional labels one instance's metadata may ask for.
pub const MAX_ADDITIONAL_LABELS: usize = 256;
