//! What the provider keeps across restarts (`--state-file`): every load
//! balancer's configuration and address, every route, and the newest
//! fencing token per cluster, as JSON in a versioned envelope, rewritten
//! atomically after every change. A file this provider did not write is
//! refused at start, never taken for an empty cloud (which would leak every
//! address and listener it described).

use std::net::IpAddr;
use std::path::PathBuf;

use ccm_provider_sdk::proto::{NodeAddress, NodeAddressType};
use ccm_provider_sdk::state_file::Envelope;
use serde::{Deserialize, Serialize};

/// The state file's envelope: its `format`, the version this provider
/// writes and reads, and the key the state is under.
pub const ENVELOPE: Envelope = Envelope {
    format: "ccm-local-provider-state",
    version: 1,
    payload: "state",
    writer: "local-provider",
};

#[derive(Debug, thiserror::Error)]
#[error("state file {path}: {reason}")]
pub struct StateError {
    pub path: String,
    pub reason: String,
}

/// A load balancer as configured, enough to start its proxy again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LbRecord {
    pub cluster: String,
    pub uid: String,
    pub namespace: String,
    pub service: String,
    pub name: String,
    pub vip: IpAddr,
    pub listeners: Vec<ListenerRecord>,
    pub backends: Vec<BackendRecord>,
    /// CIDRs; empty allows every client.
    pub source_ranges: Vec<String>,
    /// ClientIP affinity's timeout; `None` is no affinity.
    pub affinity_timeout_seconds: Option<u32>,
    /// The Service's healthCheckNodePort; `None` checks with a TCP connect.
    pub health_check_node_port: Option<u16>,
    pub max_qps: Option<u32>,
    pub idle_timeout_ms: u64,
    pub health_interval_ms: u64,
    pub health_timeout_ms: u64,
    pub unhealthy_threshold: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerRecord {
    /// "TCP" or "UDP".
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendRecord {
    pub node: String,
    pub ip: IpAddr,
}

/// A route as programmed into the kernel table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRecord {
    pub cluster: String,
    pub name: String,
    pub destination: String,
    pub target_node: String,
    pub gateway: IpAddr,
    /// The target_node_addresses the route was created with, listed back
    /// as they came (a listing without them made the controller replace
    /// the route on every reconcile). Absent in files of older versions.
    #[serde(default)]
    pub target_node_addresses: Vec<AddressRecord>,
}

/// One target node address: the contract's NodeAddressType name
/// (`NODE_ADDRESS_TYPE_INTERNAL_IP`) and the address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressRecord {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

impl AddressRecord {
    pub fn from_proto(a: &NodeAddress) -> Self {
        AddressRecord {
            kind: NodeAddressType::try_from(a.r#type)
                .unwrap_or(NodeAddressType::Unspecified)
                .as_str_name()
                .to_owned(),
            address: a.address.clone(),
        }
    }

    pub fn to_proto(&self) -> NodeAddress {
        NodeAddress {
            r#type: NodeAddressType::from_str_name(&self.kind)
                .unwrap_or(NodeAddressType::Unspecified) as i32,
            address: self.address.clone(),
        }
    }
}

/// The newest fencing token seen for a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderRecord {
    pub cluster: String,
    pub term: u64,
    pub holder: String,
}

/// Everything kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub load_balancers: Vec<LbRecord>,
    pub routes: Vec<RouteRecord>,
    pub leaders: Vec<LeaderRecord>,
}

/// Where the state is kept; `None` keeps it in memory only.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: Option<PathBuf>,
}

impl StateFile {
    pub fn new(path: Option<PathBuf>) -> StateFile {
        StateFile { path }
    }

    fn error(&self, reason: impl std::fmt::Display) -> StateError {
        StateError {
            path: self
                .path
                .as_ref()
                .map_or_else(String::new, |p| p.display().to_string()),
            reason: reason.to_string(),
        }
    }

    /// What the file holds; nothing when there is no file yet (which is
    /// then written at once, so an unusable path fails at start).
    pub fn load(&self) -> Result<Saved, StateError> {
        let Some(path) = &self.path else {
            return Ok(Saved::default());
        };
        match ENVELOPE.read(path).map_err(|e| self.error(e))? {
            Some(saved) => Ok(saved),
            None => {
                self.save(&Saved::default())?;
                Ok(Saved::default())
            }
        }
    }

    pub fn save(&self, saved: &Saved) -> Result<(), StateError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        ENVELOPE.write(path, saved).map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_did_not_write() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(Some(dir.path().join("state.json")));
        assert_eq!(file.load().unwrap(), Saved::default());
        let saved = Saved {
            routes: vec![RouteRecord {
                cluster: "c".into(),
                name: "r".into(),
                destination: "10.244.1.0/24".into(),
                target_node: "n1".into(),
                gateway: "127.0.1.1".parse().unwrap(),
                target_node_addresses: vec![AddressRecord::from_proto(&NodeAddress {
                    r#type: NodeAddressType::InternalIp as i32,
                    address: "127.0.1.1".into(),
                })],
            }],
            ..Saved::default()
        };
        file.save(&saved).unwrap();
        assert_eq!(file.load().unwrap(), saved);
        assert_eq!(
            saved.routes[0].target_node_addresses[0].to_proto().r#type,
            NodeAddressType::InternalIp as i32
        );
        // A file written before routes kept their addresses still loads.
        let mut old: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("state.json")).unwrap()).unwrap();
        old["state"]["routes"][0]
            .as_object_mut()
            .unwrap()
            .remove("target_node_addresses");
        std::fs::write(dir.path().join("state.json"), old.to_string()).unwrap();
        assert!(
            file.load().unwrap().routes[0]
                .target_node_addresses
                .is_empty()
        );
        for (bytes, want) in [
            (&b"{"[..], "not JSON"),
            (b"{\"format\": \"x\"}", "not a local-provider state file"),
            (
                b"{\"format\": \"ccm-local-provider-state\", \"version\": 9}",
                "version 9",
            ),
            (
                b"{\"format\": \"ccm-local-provider-state\", \"version\": 1, \"state\": {}}",
                "invalid contents",
            ),
        ] {
            std::fs::write(dir.path().join("state.json"), bytes).unwrap();
            let err = file.load().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
