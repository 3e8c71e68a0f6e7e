//! `InstancesService` and `ZonesService`: answers from the inventory.
//!
//! A Node this provider's scheme names (or, before initialisation, a Node
//! name) that the inventory lacks does not exist, and the controller
//! deletes it: removing an entry from the file is how an instance is
//! deleted. The SDK refuses Nodes of other schemes before they get here,
//! so NOT_EXISTS is only ever said about our own instances.

use ccm_provider_sdk::proto::{InstanceMetadata, NodeRef, Zone};
use ccm_provider_sdk::{
    CallContext, Existence, Instances, ProviderError, ProviderResult, ShutdownState, Zones,
};

use crate::cloud::{LocalCloud, SCHEME};
use crate::inventory::{Instance, State};

impl LocalCloud {
    fn instance(&self, provider_id: &str, node_name: &str) -> ProviderResult<Instance> {
        self.inventory
            .machines()
            .find(provider_id, node_name)
            .cloned()
            .ok_or_else(|| {
                ProviderError::instance_not_found(format!(
                    "no instance for node {node_name:?} (providerID {provider_id:?}) in the inventory"
                ))
            })
    }
}

impl Instances for LocalCloud {
    async fn instance_exists(&self, _: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        Ok(
            match self
                .inventory
                .machines()
                .find(&node.provider_id, &node.name)
            {
                Some(_) => Existence::Exists,
                None => Existence::NotExists,
            },
        )
    }

    async fn instance_shutdown(
        &self,
        _: CallContext,
        node: NodeRef,
    ) -> ProviderResult<ShutdownState> {
        Ok(match self.instance(&node.provider_id, &node.name)?.state {
            State::Running => ShutdownState::Running,
            State::Shutdown => ShutdownState::ShutDown,
        })
    }

    async fn instance_metadata(
        &self,
        _: CallContext,
        node: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        let i = self.instance(&node.provider_id, &node.name)?;
        Ok(InstanceMetadata {
            provider_id: format!("{SCHEME}://{}", i.id),
            instance_type: i.instance_type,
            node_addresses: i.addresses,
            zone: i.zone,
            region: i.region,
            ..Default::default()
        })
    }
}

impl Zones for LocalCloud {
    async fn zone_by_provider_id(
        &self,
        _: CallContext,
        provider_id: String,
    ) -> ProviderResult<Zone> {
        let i = self.instance(&provider_id, "")?;
        Ok(Zone {
            failure_domain: i.zone,
            region: i.region,
        })
    }

    async fn zone_by_node_name(&self, _: CallContext, node_name: String) -> ProviderResult<Zone> {
        let i = self.instance("", &node_name)?;
        Ok(Zone {
            failure_domain: i.zone,
            region: i.region,
        })
    }
}
