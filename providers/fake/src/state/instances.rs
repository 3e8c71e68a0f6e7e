//! Instances: declared or auto-created, looked up by name or providerID,
//! removed for good.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ccm_provider_sdk::ProviderResult;
use ccm_provider_sdk::proto::{InstanceMetadata, NodeAddress, NodeAddressType, NodeRef, Zone};
use serde::{Deserialize, Serialize};

use super::{PROVIDER_ID_PREFIX, State, not_found};
use crate::Error;

/// The kind of an instance address, spelled as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddressType {
    Hostname,
    #[serde(rename = "InternalIP")]
    InternalIp,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    InternalDNS,
    ExternalDNS,
}

impl AddressType {
    fn to_proto(self) -> NodeAddressType {
        match self {
            AddressType::Hostname => NodeAddressType::Hostname,
            AddressType::InternalIp => NodeAddressType::InternalIp,
            AddressType::ExternalIp => NodeAddressType::ExternalIp,
            AddressType::InternalDNS => NodeAddressType::InternalDns,
            AddressType::ExternalDNS => NodeAddressType::ExternalDns,
        }
    }

    fn from_proto(t: i32) -> Option<AddressType> {
        Some(match NodeAddressType::try_from(t).ok()? {
            NodeAddressType::Hostname => AddressType::Hostname,
            NodeAddressType::InternalIp => AddressType::InternalIp,
            NodeAddressType::ExternalIp => AddressType::ExternalIp,
            NodeAddressType::InternalDns => AddressType::InternalDNS,
            NodeAddressType::ExternalDns => AddressType::ExternalDNS,
            NodeAddressType::Unspecified => return None,
        })
    }
}

/// One address of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    #[serde(rename = "type")]
    pub kind: AddressType,
    pub address: String,
}

impl Address {
    pub(super) fn to_proto(&self) -> NodeAddress {
        NodeAddress {
            r#type: self.kind.to_proto() as i32,
            address: self.address.clone(),
        }
    }

    /// `None` for an address of unspecified type.
    pub(super) fn from_proto(a: &NodeAddress) -> Option<Address> {
        Some(Address {
            kind: AddressType::from_proto(a.r#type)?,
            address: a.address.clone(),
        })
    }
}

/// An instance to declare (instances file, admin API, [`crate::FakeCloud`]).
/// Unset fields take the configured defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceSpec {
    /// The node name the instance answers to.
    pub name: String,
    /// The cloud id (providerID `fake://<id>`); defaults to the name.
    pub id: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub region: Option<String>,
    /// Empty means "allocate": an InternalIP from 10.0.0.0/8 and a Hostname.
    pub addresses: Vec<Address>,
    /// Extra node labels (`InstanceMetadata.additional_labels`).
    pub labels: BTreeMap<String, String>,
    pub shutdown: bool,
}

impl InstanceSpec {
    /// A spec with only a name; everything else defaulted.
    pub fn named(name: impl Into<String>) -> Self {
        InstanceSpec {
            name: name.into(),
            ..Default::default()
        }
    }
}

/// An instance as the cloud knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub name: String,
    pub id: String,
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub addresses: Vec<Address>,
    pub labels: BTreeMap<String, String>,
    pub shutdown: bool,
    /// Whether it was created by a lookup rather than declared.
    pub auto_created: bool,
}

impl Instance {
    fn metadata(&self) -> InstanceMetadata {
        InstanceMetadata {
            provider_id: self.provider_id.clone(),
            instance_type: self.instance_type.clone(),
            node_addresses: self.addresses.iter().map(Address::to_proto).collect(),
            zone: self.zone.clone(),
            region: self.region.clone(),
            additional_labels: self.labels.clone().into_iter().collect(),
        }
    }
}

impl State {
    /// Declares (or replaces) an instance; it exists again even if it was
    /// removed before.
    pub(crate) fn add_instance(
        &mut self,
        spec: InstanceSpec,
        auto_created: bool,
    ) -> Result<Instance, Error> {
        if spec.name.is_empty() {
            return Err(Error::InvalidInstance("name is required".to_owned()));
        }
        let id = spec.id.clone().unwrap_or_else(|| spec.name.clone());
        if let Some(owner) = self.ids.get(&id)
            && *owner != spec.name
        {
            return Err(Error::InvalidInstance(format!(
                "id {id} already belongs to instance {owner}"
            )));
        }
        let addresses = if spec.addresses.is_empty() {
            self.next_address += 1;
            // 10.0.0.10 onwards: deterministic for a given creation order.
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 9)) + self.next_address);
            vec![
                Address {
                    kind: AddressType::InternalIp,
                    address: ip.to_string(),
                },
                Address {
                    kind: AddressType::Hostname,
                    address: spec.name.clone(),
                },
            ]
        } else {
            spec.addresses
        };
        let instance = Instance {
            provider_id: format!("{PROVIDER_ID_PREFIX}{id}"),
            id: id.clone(),
            instance_type: spec
                .instance_type
                .unwrap_or_else(|| self.config.instance_type.clone()),
            zone: spec.zone.unwrap_or_else(|| self.config.zone.clone()),
            region: spec.region.unwrap_or_else(|| self.config.region.clone()),
            addresses,
            labels: spec.labels,
            shutdown: spec.shutdown,
            auto_created,
            name: spec.name.clone(),
        };
        if let Some(old) = self.instances.insert(spec.name.clone(), instance.clone()) {
            self.ids.remove(&old.id);
        }
        self.ids.insert(id.clone(), spec.name.clone());
        self.removed.remove(&spec.name);
        self.removed.remove(&id);
        self.dirty = true;
        Ok(instance)
    }

    /// Deletes an instance for good: it stays gone under auto-create, as a
    /// deleted VM would. Returns whether it existed.
    pub(crate) fn remove_instance(&mut self, name: &str) -> bool {
        self.dirty |= self.removed.insert(name.to_owned());
        match self.instances.remove(name) {
            Some(old) => {
                self.ids.remove(&old.id);
                self.removed.insert(old.id);
                self.dirty = true;
                true
            }
            None => false,
        }
    }

    pub(crate) fn set_shutdown(&mut self, name: &str, shutdown: bool) -> Result<(), Error> {
        let instance = self
            .instances
            .get_mut(name)
            .ok_or_else(|| Error::UnknownInstance(name.to_owned()))?;
        instance.shutdown = shutdown;
        self.dirty = true;
        Ok(())
    }

    pub(crate) fn instances(&self) -> Vec<Instance> {
        self.instances.values().cloned().collect()
    }

    /// Finds the node's instance: by providerID when set, else by name;
    /// creates it when auto-create is on and it was never removed.
    pub(super) fn resolve(&mut self, node: &NodeRef) -> Option<&Instance> {
        let name = if node.provider_id.is_empty() {
            if self.instances.contains_key(&node.name) {
                return self.instances.get(&node.name);
            }
            if self.removed.contains(&node.name) || !self.config.auto_create_instances {
                return None;
            }
            self.add_instance(InstanceSpec::named(&node.name), true)
                .ok()?
                .name
        } else {
            // A foreign scheme is not ours to create or answer for.
            let id = node.provider_id.strip_prefix(PROVIDER_ID_PREFIX)?;
            if let Some(name) = self.ids.get(id) {
                return self.instances.get(name);
            }
            if self.removed.contains(id)
                || self.removed.contains(&node.name)
                || !self.config.auto_create_instances
                || self.instances.contains_key(&node.name)
            {
                return None;
            }
            // The fake restarted under a cluster whose nodes already carry
            // providerIDs: recreate the instance with the same id.
            let spec = InstanceSpec {
                id: Some(id.to_owned()),
                ..InstanceSpec::named(&node.name)
            };
            self.add_instance(spec, true).ok()?.name
        };
        self.instances.get(&name)
    }

    pub(crate) fn instance_exists(&mut self, node: &NodeRef) -> bool {
        self.resolve(node).is_some()
    }

    pub(crate) fn instance_shutdown(&mut self, node: &NodeRef) -> ProviderResult<bool> {
        self.resolve(node)
            .map(|i| i.shutdown)
            .ok_or_else(|| not_found(&node.name))
    }

    pub(crate) fn instance_metadata(&mut self, node: &NodeRef) -> ProviderResult<InstanceMetadata> {
        let hide_zone = self.config.zones_only_via_zones_service;
        let mut meta = self
            .resolve(node)
            .map(Instance::metadata)
            .ok_or_else(|| not_found(&node.name))?;
        if hide_zone {
            meta.zone.clear();
            meta.region.clear();
        }
        Ok(meta)
    }

    pub(crate) fn zone_of(&mut self, node: &NodeRef) -> ProviderResult<Zone> {
        self.resolve(node)
            .map(|i| Zone {
                failure_domain: i.zone.clone(),
                region: i.region.clone(),
            })
            .ok_or_else(|| {
                not_found(if node.provider_id.is_empty() {
                    &node.name
                } else {
                    &node.provider_id
                })
            })
    }
}
