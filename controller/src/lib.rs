//! The generic cloud-controller-manager: Kubernetes semantics here, every
//! cloud decision in the provider behind `--provider-endpoint`.
//!
//! - [`config`]: the flags, grouped and typed.
//! - [`manager`]: assembles the process: clients, admin server, leader
//!   election, the shared Node watch, supervision of the controllers.
//! - [`controllers`]: one folder per controller, decisions beside I/O,
//!   each run by `ccm_runtime`'s `Controller`.
//! - [`context`], [`request_id`]: what every controller is handed, and the
//!   request id its provider calls carry.
//! - [`k8s`]: Kubernetes helpers the controllers share.
//! - [`providers`]: which provider answers for which Node and Service
//!   when several are configured.
//! - [`telemetry`]: optional OTLP export of the reconcile spans.

#[cfg(test)]
mod arb;
pub mod cidr;
pub mod config;
pub mod context;
pub mod controllers;
pub mod k8s;
pub mod manager;
pub mod provider_info;
pub mod providers;
pub mod request_id;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod testing;

pub use manager::{RunError, run};
