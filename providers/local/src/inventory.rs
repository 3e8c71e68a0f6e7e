//! The machines this provider knows: an inventory file (YAML) naming, for
//! each Node, its instance id, type, zone, region, addresses and whether it
//! runs. The file is re-read when it changes; an unreadable or invalid
//! version is reported and the previous one kept, so a half-written file
//! never makes every instance vanish (which would delete every Node).
//!
//! ```yaml
//! instances:
//!   - node: worker-1          # metadata.name of the Node
//!     id: i-1                 # providerID local://i-1; default: the node name
//!     type: local.small       # node.kubernetes.io/instance-type
//!     zone: local-a           # topology.kubernetes.io/zone
//!     region: local           # topology.kubernetes.io/region
//!     state: running          # or shutdown: the Node is tainted
//!     addresses:
//!       - {type: InternalIP, address: 127.0.1.1}
//!       - {type: Hostname, address: worker-1}
//! ```

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::proto::{NodeAddress, NodeAddressType};
use parking_lot::RwLock;
use serde::Deserialize;

/// Why an inventory was refused.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("inventory {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("inventory {path}: {reason}")]
    Invalid { path: String, reason: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    instances: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    node: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, rename = "type")]
    instance_type: Option<String>,
    #[serde(default)]
    zone: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    state: State,
    #[serde(default)]
    addresses: Vec<AddressEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddressEntry {
    #[serde(rename = "type")]
    kind: AddressKind,
    address: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
enum AddressKind {
    Hostname,
    InternalIP,
    ExternalIP,
    InternalDNS,
    ExternalDNS,
}

impl AddressKind {
    fn proto(self) -> NodeAddressType {
        match self {
            AddressKind::Hostname => NodeAddressType::Hostname,
            AddressKind::InternalIP => NodeAddressType::InternalIp,
            AddressKind::ExternalIP => NodeAddressType::ExternalIp,
            AddressKind::InternalDNS => NodeAddressType::InternalDns,
            AddressKind::ExternalDNS => NodeAddressType::ExternalDns,
        }
    }
}

/// Whether an instance runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Running,
    Shutdown,
}

/// One machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub node: String,
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub state: State,
    pub addresses: Vec<NodeAddress>,
}

impl Instance {
    /// The address a load balancer or route reaches the machine on: the
    /// first InternalIP, else the first ExternalIP.
    pub fn reachable_ip(&self) -> Option<IpAddr> {
        reachable_ip(&self.addresses)
    }
}

/// The first InternalIP of `addresses`, else the first ExternalIP.
pub fn reachable_ip(addresses: &[NodeAddress]) -> Option<IpAddr> {
    reachable_ip_where(addresses, |_| true)
}

/// As [`reachable_ip`], among the addresses `wanted` accepts (a family).
pub fn reachable_ip_where(
    addresses: &[NodeAddress],
    wanted: impl Fn(&IpAddr) -> bool,
) -> Option<IpAddr> {
    let of = |kind: NodeAddressType| {
        addresses
            .iter()
            .filter(|a| a.r#type == kind as i32)
            .filter_map(|a| a.address.parse().ok())
            .find(|ip| wanted(ip))
    };
    of(NodeAddressType::InternalIp).or_else(|| of(NodeAddressType::ExternalIp))
}

/// An inventory as parsed: instances by node name and by id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Machines {
    by_node: BTreeMap<String, Instance>,
    node_of_id: BTreeMap<String, String>,
}

impl Machines {
    /// Parses and checks an inventory: node names and ids unique, addresses
    /// of IP types valid IPs.
    pub fn parse(text: &str) -> Result<Machines, String> {
        let file: File = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        let mut machines = Machines::default();
        let mut ids = HashSet::new();
        for (i, e) in file.instances.into_iter().enumerate() {
            let at = format!("instances[{i}]");
            if e.node.is_empty() {
                return Err(format!("{at}.node: must not be empty"));
            }
            let id = e.id.unwrap_or_else(|| e.node.clone());
            if id.is_empty() || id.contains('/') {
                return Err(format!(
                    "{at}.id: {id:?} must be non-empty and contain no '/'"
                ));
            }
            if !ids.insert(id.clone()) {
                return Err(format!("{at}.id: {id:?} appears twice"));
            }
            let mut addresses = Vec::new();
            for (j, a) in e.addresses.into_iter().enumerate() {
                let ip_kind = matches!(a.kind, AddressKind::InternalIP | AddressKind::ExternalIP);
                if ip_kind && a.address.parse::<IpAddr>().is_err() {
                    return Err(format!(
                        "{at}.addresses[{j}]: {:?} is not an IP address",
                        a.address
                    ));
                }
                addresses.push(NodeAddress {
                    r#type: a.kind.proto() as i32,
                    address: a.address,
                });
            }
            let instance = Instance {
                node: e.node.clone(),
                id: id.clone(),
                instance_type: e.instance_type.unwrap_or_else(|| "local".to_owned()),
                zone: e.zone,
                region: e.region,
                state: e.state,
                addresses,
            };
            if machines.by_node.insert(e.node.clone(), instance).is_some() {
                return Err(format!("{at}.node: {:?} appears twice", e.node));
            }
            machines.node_of_id.insert(id, e.node);
        }
        Ok(machines)
    }

    /// The instance of a Node: by the id in its providerID (already known to
    /// be of this provider's scheme, or empty), else by its name.
    pub fn find(&self, provider_id: &str, node_name: &str) -> Option<&Instance> {
        match provider_id.strip_prefix(crate::PROVIDER_ID_PREFIX) {
            Some(id) if !id.is_empty() => self
                .node_of_id
                .get(id)
                .and_then(|node| self.by_node.get(node)),
            _ => self.by_node.get(node_name),
        }
    }

    pub fn by_node(&self, node_name: &str) -> Option<&Instance> {
        self.by_node.get(node_name)
    }

    pub fn len(&self) -> usize {
        self.by_node.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }
}

/// The inventory file and what it said last time it was valid.
#[derive(Debug, Clone)]
pub struct Inventory {
    path: PathBuf,
    current: Arc<RwLock<Loaded>>,
}

#[derive(Debug)]
struct Loaded {
    text: String,
    machines: Arc<Machines>,
    /// The last reload's error, while the file stays invalid.
    error: Option<String>,
}

impl Inventory {
    /// Reads the file; at start an unreadable or invalid file is an error.
    pub fn open(path: impl Into<PathBuf>) -> Result<Inventory, InventoryError> {
        let path = path.into();
        let text = read(&path)?;
        let machines = Machines::parse(&text).map_err(|reason| InventoryError::Invalid {
            path: path.display().to_string(),
            reason,
        })?;
        Ok(Inventory {
            path,
            current: Arc::new(RwLock::new(Loaded {
                text,
                machines: Arc::new(machines),
                error: None,
            })),
        })
    }

    /// An inventory that is not backed by a file (tests).
    pub fn fixed(machines: Machines) -> Inventory {
        Inventory {
            path: PathBuf::new(),
            current: Arc::new(RwLock::new(Loaded {
                text: String::new(),
                machines: Arc::new(machines),
                error: None,
            })),
        }
    }

    pub fn machines(&self) -> Arc<Machines> {
        self.current.read().machines.clone()
    }

    /// Why the file on disk is not in use, while it is not.
    pub fn error(&self) -> Option<String> {
        self.current.read().error.clone()
    }

    /// Reads the file again; whether the machines changed. An unreadable or
    /// invalid file keeps the previous machines and is remembered as the
    /// error.
    pub fn reload(&self) -> bool {
        if self.path.as_os_str().is_empty() {
            return false;
        }
        let text = match read(&self.path) {
            Ok(t) => t,
            Err(e) => return self.refuse(e.to_string()),
        };
        if text == self.current.read().text {
            self.current.write().error = None;
            return false;
        }
        match Machines::parse(&text) {
            Ok(machines) => {
                let mut current = self.current.write();
                let changed = *current.machines != machines;
                if changed {
                    tracing::info!(
                        path = %self.path.display(),
                        instances = machines.len(),
                        "inventory changed"
                    );
                }
                *current = Loaded {
                    text,
                    machines: Arc::new(machines),
                    error: None,
                };
                changed
            }
            Err(reason) => self.refuse(format!("inventory {}: {reason}", self.path.display())),
        }
    }

    fn refuse(&self, error: String) -> bool {
        let mut current = self.current.write();
        if current.error.as_deref() != Some(error.as_str()) {
            tracing::error!(%error, "keeping the previous inventory");
        }
        current.error = Some(error);
        false
    }

    /// Re-reads the file every `period` until `stop` completes.
    pub async fn follow(self, period: Duration, stop: impl Future<Output = ()>) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {
                    self.reload();
                }
            }
        }
    }
}

fn read(path: &Path) -> Result<String, InventoryError> {
    std::fs::read_to_string(path).map_err(|source| InventoryError::Read {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "
instances:
  - node: a
    id: i-a
    type: local.small
    zone: z1
    region: r
    addresses:
      - {type: InternalIP, address: 127.0.1.1}
      - {type: Hostname, address: a}
  - node: b
    state: shutdown
";

    #[test]
    fn finds_by_provider_id_then_by_name() {
        let m = Machines::parse(TWO).unwrap();
        assert_eq!(m.find("local://i-a", "other").unwrap().node, "a");
        assert_eq!(m.find("", "a").unwrap().id, "i-a");
        assert!(
            m.find("local://a", "a").is_none(),
            "the id wins over the name"
        );
        let b = m.find("", "b").unwrap();
        assert_eq!((b.id.as_str(), b.state), ("b", State::Shutdown));
        assert_eq!(b.instance_type, "local");
        assert_eq!(
            m.by_node("a").unwrap().reachable_ip(),
            Some("127.0.1.1".parse().unwrap())
        );
        assert_eq!(b.reachable_ip(), None);
    }

    #[test]
    fn refuses_what_it_cannot_trust() {
        let cases = [
            (
                "instances: [{node: a}, {node: a, id: x}]",
                "\"a\" appears twice",
            ),
            (
                "instances: [{node: a, id: x}, {node: b, id: x}]",
                "\"x\" appears twice",
            ),
            ("instances: [{node: ''}]", "must not be empty"),
            ("instances: [{node: a, id: 'x/y'}]", "contain no '/'"),
            (
                "instances: [{node: a, addresses: [{type: InternalIP, address: nope}]}]",
                "not an IP address",
            ),
            (
                "instances: [{node: a, sate: running}]",
                "unknown field `sate`",
            ),
            (
                "instances: [{node: a, state: stopped}]",
                "unknown variant `stopped`",
            ),
            (
                "instances: [{node: a, addresses: [{type: Internal, address: x}]}]",
                "unknown variant",
            ),
        ];
        for (text, want) in cases {
            let err = Machines::parse(text).unwrap_err();
            assert!(
                err.contains(want),
                "{text}: {err:?} should contain {want:?}"
            );
        }
    }

    #[test]
    fn an_invalid_rewrite_keeps_the_previous_machines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inventory.yaml");
        std::fs::write(&path, TWO).unwrap();
        let inv = Inventory::open(&path).unwrap();
        assert_eq!(inv.machines().len(), 2);
        std::fs::write(&path, "instances: [{node: a}, {node: a}]").unwrap();
        assert!(!inv.reload());
        assert_eq!(inv.machines().len(), 2);
        assert!(inv.error().unwrap().contains("appears twice"));
        std::fs::remove_file(&path).unwrap();
        assert!(!inv.reload());
        assert_eq!(inv.machines().len(), 2, "a missing file deletes nothing");
        std::fs::write(&path, "instances: [{node: a}]").unwrap();
        assert!(inv.reload());
        assert_eq!(inv.machines().len(), 1);
        assert_eq!(inv.error(), None);
    }
}
