//! InstancesService: whether a node's instance exists, is shut down, and
//! its metadata.

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::proto::{
    Capability, InstanceExistence, InstanceExistsRequest, InstanceMetadata,
    InstanceMetadataRequest, InstanceShutdownRequest, InstanceShutdownState, NodeRef,
};
use crate::provider::{Existence, ShutdownState};
use crate::validate::{self, Checked, answers};

fn read() -> Rpc {
    Rpc::read().needs(Capability::Instances)
}

impl ProviderClient {
    /// Never returns `NotExists` unless the provider said exactly that.
    pub async fn instance_exists(&self, node: NodeRef) -> Result<Existence, ClientError> {
        let request = InstanceExistsRequest { node: Some(node) };
        self.call(read(), request, |r| existence(r.existence)).await
    }

    pub async fn instance_shutdown(&self, node: NodeRef) -> Result<ShutdownState, ClientError> {
        let request = InstanceShutdownRequest { node: Some(node) };
        self.call(read(), request, |r| shutdown_state(r.state))
            .await
    }

    /// The instance's metadata. A providerID must be of the provider's own
    /// scheme (its `GetProviderInfo.provider_id_scheme`): another cloud's
    /// written onto a Node would make it unmanageable by either.
    pub async fn instance_metadata(&self, node: NodeRef) -> Result<InstanceMetadata, ClientError> {
        let scheme = self.handshake().await?.info.provider_id_scheme.clone();
        let request = InstanceMetadataRequest { node: Some(node) };
        self.call(read(), request, |r| {
            let metadata = validate::required("metadata", &r.metadata)?;
            answers::instance_metadata(metadata)?;
            let pid = &metadata.provider_id;
            if !pid.is_empty()
                && pid
                    .strip_prefix(scheme.as_str())
                    .is_none_or(|rest| !rest.starts_with("://"))
            {
                return Err(validate::violation(
                    "metadata.provider_id",
                    format!("{pid:?} is not of the provider's own scheme {scheme}://"),
                ));
            }
            Ok(metadata.clone())
        })
        .await
    }
}

fn existence(value: i32) -> Checked<Existence> {
    Ok(match validate::known_enum("existence", value)? {
        InstanceExistence::Exists => Existence::Exists,
        InstanceExistence::NotExists => Existence::NotExists,
        InstanceExistence::Unspecified => unreachable!("known_enum rejects 0"),
    })
}

fn shutdown_state(value: i32) -> Checked<ShutdownState> {
    Ok(match validate::known_enum("state", value)? {
        InstanceShutdownState::Running => ShutdownState::Running,
        InstanceShutdownState::ShutDown => ShutdownState::ShutDown,
        InstanceShutdownState::Unspecified => unreachable!("known_enum rejects 0"),
    })
}
