//! InstancesService: requests checked, then the provider's [`Instances`].
//!
//! A Node whose providerID has a scheme the provider does not own (or is
//! not a providerID) is
//! refused before the provider sees it: a provider can only know that its
//! own instance is gone, and an answer of NOT_EXISTS about another cloud's
//! instance would make the controller delete the Node.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{bad_answer, call, context, invalid_request};
use crate::error::ProviderError;
use crate::proto::*;
use crate::provider::{Existence, Instances, ShutdownState};
use crate::validate::{self, answers};

pub(super) struct InstancesAdapter<T> {
    pub(super) provider: Arc<T>,
    /// The schemes the provider owns: its `provider_id_scheme` and any
    /// others it announces.
    pub(super) schemes: Vec<String>,
}

impl<T> InstancesAdapter<T> {
    /// The request's Node, checked, and only if this provider may judge it.
    fn node(&self, node: &Option<NodeRef>) -> Result<NodeRef, Status> {
        let node = validate::node_ref("node", node).map_err(invalid_request)?;
        if !node.provider_id.is_empty()
            && !validate::is_owned_provider_id(&node.provider_id, &self.schemes)
        {
            let schemes = self
                .schemes
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            let what = if self.schemes.len() == 1 {
                "scheme"
            } else {
                "schemes"
            };
            return Err(ProviderError::invalid_request(
                "node.provider_id",
                format!(
                    "{:?} is not a providerID of this provider ({what} {schemes}); it can only answer for its own instances",
                    node.provider_id
                ),
            )
            .to_status());
        }
        Ok(node)
    }
}

#[tonic::async_trait]
impl<T: Instances> instances_service_server::InstancesService for InstancesAdapter<T> {
    async fn instance_exists(
        &self,
        req: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        let ctx = context(&req)?;
        let node = self.node(&req.get_ref().node)?;
        let existence = match call(
            "InstanceExists",
            &ctx,
            self.provider.instance_exists(ctx.clone(), node),
        )
        .await?
        {
            Existence::Exists => InstanceExistence::Exists,
            Existence::NotExists => InstanceExistence::NotExists,
        };
        Ok(Response::new(InstanceExistsResponse {
            existence: existence as i32,
        }))
    }

    async fn instance_shutdown(
        &self,
        req: Request<InstanceShutdownRequest>,
    ) -> Result<Response<InstanceShutdownResponse>, Status> {
        let ctx = context(&req)?;
        let node = self.node(&req.get_ref().node)?;
        let state = match call(
            "InstanceShutdown",
            &ctx,
            self.provider.instance_shutdown(ctx.clone(), node),
        )
        .await?
        {
            ShutdownState::Running => InstanceShutdownState::Running,
            ShutdownState::ShutDown => InstanceShutdownState::ShutDown,
        };
        Ok(Response::new(InstanceShutdownResponse {
            state: state as i32,
        }))
    }

    async fn instance_metadata(
        &self,
        req: Request<InstanceMetadataRequest>,
    ) -> Result<Response<InstanceMetadataResponse>, Status> {
        let ctx = context(&req)?;
        let node = self.node(&req.get_ref().node)?;
        let metadata = call(
            "InstanceMetadata",
            &ctx,
            self.provider.instance_metadata(ctx.clone(), node),
        )
        .await?;
        let warnings = ctx.warnings.take();
        // A provider bug must not reach the controller as a valid answer.
        answers::instance_metadata(&metadata).map_err(bad_answer("an invalid InstanceMetadata"))?;
        if !metadata.provider_id.is_empty()
            && !validate::is_owned_provider_id(&metadata.provider_id, &self.schemes)
        {
            return Err(bad_answer("an invalid InstanceMetadata")(
                validate::Violation {
                    field: "metadata.provider_id".into(),
                    problem: format!(
                        "{:?} is not of a scheme the provider owns (announce it with ProviderInfo::also_owns)",
                        metadata.provider_id
                    ),
                },
            ));
        }
        validate::node_warnings("warnings", &warnings)
            .map_err(bad_answer("invalid warnings about the node"))?;
        Ok(Response::new(InstanceMetadataResponse {
            metadata: Some(metadata),
            warnings,
        }))
    }

    /// Not served yet: the provider does not announce
    /// CAPABILITY_INSTANCES_BATCH, so the controller asks the single calls.
    async fn batch_instances(
        &self,
        _: Request<BatchInstancesRequest>,
    ) -> Result<Response<BatchInstancesResponse>, Status> {
        Err(Status::unimplemented("BatchInstances is not implemented"))
    }
}
