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

    pub async fn instance_metadata(&self, node: NodeRef) -> Result<InstanceMetadata, ClientError> {
        let request = InstanceMetadataRequest { node: Some(node) };
        self.call(read(), request, |r| {
            let metadata = validate::required("metadata", &r.metadata)?;
            answers::instance_metadata(metadata)?;
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
