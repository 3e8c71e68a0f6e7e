//! `local-provider`: a cloud provider for ccm-rs whose cloud is the machine
//! it runs on. Instances come from an inventory file, load balancers are L4
//! proxies (TCP and UDP) listening on addresses from a local range, and
//! routes are entries in a kernel routing table.

pub mod annotations;
pub mod cloud;
pub mod instances;
pub mod inventory;
pub mod load_balancers;
pub mod metrics;
pub mod netlink;
pub mod proxy;
pub mod routes;
pub mod state;
pub mod vip;

pub use cloud::{Config, LabelSelector, LocalCloud};

/// providerIDs of this provider's instances start with this.
pub const PROVIDER_ID_PREFIX: &str = "local://";
