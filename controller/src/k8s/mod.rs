//! Kubernetes helpers every controller shares: Node accessors and
//! well-known keys.

pub mod node;
