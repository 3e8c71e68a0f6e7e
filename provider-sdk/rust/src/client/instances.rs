//! InstancesService: whether a node's instance exists, is shut down, and
//! its metadata.

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::proto::{
    Capability, InstanceExistence, InstanceExistsRequest, InstanceMetadata,
    InstanceMetadataRequest, InstanceShutdownRequest, InstanceShutdownState, NodeRef, Warning,
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

    /// The instance's metadata, without the warnings about the Node.
    pub async fn instance_metadata(&self, node: NodeRef) -> Result<InstanceMetadata, ClientError> {
        Ok(self.instance_metadata_answer(node).await?.metadata)
    }

    /// The instance's metadata and what the provider wants the user to know
    /// about the Node. A providerID must be of a scheme the provider owns
    /// (its `GetProviderInfo.provider_id_scheme` or `provider_id_schemes`):
    /// another cloud's written onto a Node would make it unmanageable by
    /// either. Warnings are the first
    /// [`MAX_NODE_WARNINGS`](validate::MAX_NODE_WARNINGS): they tell, and a
    /// provider's excess is no reason to leave a Node uninitialised.
    pub async fn instance_metadata_answer(
        &self,
        node: NodeRef,
    ) -> Result<MetadataAnswer, ClientError> {
        let handshake = self.handshake().await?;
        let schemes = handshake.schemes();
        let request = InstanceMetadataRequest { node: Some(node) };
        self.call(read(), request, |mut r| {
            let metadata = validate::required("metadata", &r.metadata)?.clone();
            answers::instance_metadata(&metadata)?;
            let pid = &metadata.provider_id;
            if !pid.is_empty() && !validate::is_owned_provider_id(pid, &schemes) {
                return Err(validate::violation(
                    "metadata.provider_id",
                    format!(
                        "{pid:?} is not of a scheme the provider owns ({})",
                        schemes.join(", ")
                    ),
                ));
            }
            r.warnings.truncate(validate::MAX_NODE_WARNINGS);
            Ok(MetadataAnswer {
                metadata,
                warnings: r.warnings,
            })
        })
        .await
    }
}

/// An `InstanceMetadata` answer: the metadata, and warnings about the Node
/// (contract 1.2.0) for the controller to publish as Warning Events on it.
#[derive(Debug, Clone, PartialEq)]
pub struct MetadataAnswer {
    pub metadata: InstanceMetadata,
    pub warnings: Vec<Warning>,
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
