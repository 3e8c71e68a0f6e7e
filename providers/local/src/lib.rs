//! `local-provider`: a cloud provider for ccm-rs whose cloud is the machine
//! it runs on. Instances come from an inventory file, load balancers are L4
//! proxies (TCP and UDP) listening on addresses from a local pool, and routes
//! are entries in a kernel routing table.

pub mod proxy;
