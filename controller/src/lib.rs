//! The generic cloud-controller-manager: Kubernetes semantics here, every
//! cloud decision in the provider behind `--provider-endpoint`.
//!
//! - [`config`]: the flags, grouped and typed.
//! - [`runtime`]: clients, admin server, leader election, supervision.
//! - [`controllers`]: one folder per controller, decisions beside I/O.
//! - [`k8s`]: Kubernetes helpers the controllers share.
//! - [`telemetry`]: optional OTLP export of the reconcile spans.

#[cfg(test)]
mod arb;
pub mod cidr;
pub mod config;
pub mod controllers;
pub mod k8s;
pub mod provider_info;
pub mod runtime;
pub mod telemetry;

pub use runtime::{RunError, run};
