//! Write a cloud provider for ccm-rs.
//!
//! A provider implements plain async traits, one per contract service
//! ([`Identity`] is required; [`Instances`], [`LoadBalancers`], [`Routes`],
//! [`Zones`] and [`Clusters`] are opt-in) and hands them to
//! [`ProviderServer`]. The SDK owns the plumbing: the Unix socket (stale
//! socket cleanup, mode 0600 by default), capabilities derived from what is
//! implemented, Identity + `grpc.health.v1` + reflection on the same socket,
//! request validation, deadline and cancellation propagation
//! ([`CallContext::cancellation`]), fencing tokens of the leader that sent a
//! mutation ([`CallContext::fencing_token`]), 16 MiB message
//! limits, errors with exactly the contract's codes and reasons
//! ([`ProviderError`]), `tracing` spans carrying the controller's request id,
//! and graceful shutdown on SIGTERM.
//!
//! The same crate ships `ProviderClient`, which the controller uses.
//!
//! # Features
//!
//! - `server` (default): [`ProviderServer`], what a provider needs.
//! - `client`: `ProviderClient`, what the controller needs.
//!
//! Both sides share the contract types ([`proto`]), the errors
//! ([`error`]), the provider-facing types ([`provider`]), the validation
//! of requests and answers ([`validate`]) and the socket handling
//! ([`endpoint`]); neither depends on the other.
//!
//! # A complete provider
//!
//! ```no_run
//! use ccm_provider_sdk::proto::{InstanceMetadata, NodeAddress, NodeAddressType, NodeRef};
//! use ccm_provider_sdk::{
//!     CallContext, Existence, Identity, Instances, ProviderError, ProviderInfo,
//!     ProviderResult, ProviderServer, ShutdownState,
//! };
//!
//! /// Every node named "vm-<n>" is an instance; nothing else exists.
//! struct TinyCloud;
//!
//! impl Identity for TinyCloud {
//!     fn info(&self) -> ProviderInfo {
//!         ProviderInfo {
//!             name: "tiny".into(),
//!             vendor_version: "0.1.0".into(),
//!             provider_id_scheme: "tiny".into(),
//!             ..Default::default()
//!         }
//!     }
//! }
//!
//! // The SDK refuses a Node whose providerID has another scheme before it
//! // reaches this code: NOT_EXISTS is only ever said about our own instances.
//! fn instance_id(node: &NodeRef) -> Option<String> {
//!     let id = node.provider_id.strip_prefix("tiny://").unwrap_or(&node.name);
//!     id.starts_with("vm-").then(|| id.to_owned())
//! }
//!
//! impl Instances for TinyCloud {
//!     async fn instance_exists(&self, _: CallContext, node: NodeRef) -> ProviderResult<Existence> {
//!         Ok(match instance_id(&node) {
//!             Some(_) => Existence::Exists,
//!             None => Existence::NotExists,
//!         })
//!     }
//!
//!     async fn instance_shutdown(&self, _: CallContext, node: NodeRef) -> ProviderResult<ShutdownState> {
//!         instance_id(&node)
//!             .map(|_| ShutdownState::Running)
//!             .ok_or_else(|| ProviderError::instance_not_found(format!("no instance for {}", node.name)))
//!     }
//!
//!     async fn instance_metadata(&self, _: CallContext, node: NodeRef) -> ProviderResult<InstanceMetadata> {
//!         let id = instance_id(&node)
//!             .ok_or_else(|| ProviderError::instance_not_found(format!("no instance for {}", node.name)))?;
//!         Ok(InstanceMetadata {
//!             provider_id: format!("tiny://{id}"),
//!             instance_type: "tiny.small".into(),
//!             node_addresses: vec![NodeAddress {
//!                 r#type: NodeAddressType::InternalIp as i32,
//!                 address: "10.0.0.10".into(),
//!             }],
//!             zone: "tiny-a".into(),
//!             region: "tiny".into(),
//!             ..Default::default()
//!         })
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     ProviderServer::new(TinyCloud)
//!         .with_instances(TinyCloud)
//!         .serve_until_signal("unix:///var/run/cloud-provider/provider.sock")
//!         .await?;
//!     Ok(())
//! }
//! ```

pub mod build_version;
pub mod cidr;
#[cfg(feature = "client")]
pub mod client;
pub mod contract_version;
pub mod endpoint;
pub mod error;
pub mod fencing;
pub mod node_set;
#[cfg(feature = "server")]
pub mod paginate;
pub mod provider;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod state_file;
pub mod trace_context;
pub mod validate;

/// The generated contract types (`ccmrs.cloudprovider.v1`).
pub use ccm_proto::v1 as proto;

pub use cidr::{Cidr, CidrError};
#[cfg(feature = "client")]
pub use client::{ClientError, ClientOptions, Handshake, ProviderClient, RequestScope};
pub use contract_version::ContractVersion;
pub use endpoint::{ServeError, bind_socket, socket_path};
pub use error::{Outcome, ProviderError, ProviderResult};
pub use fencing::FencingToken;
pub use node_set::NodeSet;
pub use provider::{
    BatchAnswers, CallContext, Cancellation, Clusters, Existence, Identity, InstanceAnswer,
    InstanceQuery, InstanceQuestion, Instances, LbAnswer, LbOutcome, LoadBalancerEntry,
    LoadBalancers, MetadataAnswer, ProviderInfo, Readiness, Routes, ShutdownState, Volumes,
    Warnings, Zones, cluster_scoped_load_balancer_name, default_load_balancer_name,
};
#[cfg(feature = "server")]
pub use server::ProviderServer;

/// Both sides accept messages up to this size (the contract's minimum).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The default provider endpoint.
pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/cloud-provider/provider.sock";
