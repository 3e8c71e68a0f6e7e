//! InstancesService: requests checked, then the provider's [`Instances`].
//!
//! A Node whose providerID has another scheme (or is not a providerID) is
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
    /// The provider's `provider_id_scheme`.
    pub(super) scheme: String,
}

impl<T> InstancesAdapter<T> {
    /// The request's Node, checked, and only if this provider may judge it.
    fn node(&self, node: &Option<NodeRef>) -> Result<NodeRef, Status> {
        let node = validate::node_ref("node", node).map_err(invalid_request)?;
        if !node.provider_id.is_empty()
            && node
                .provider_id
                .strip_prefix(&self.scheme)
                .and_then(|rest| rest.strip_prefix("://"))
                .is_none_or(str::is_empty)
        {
            return Err(ProviderError::invalid_request(
                "node.provider_id",
                format!(
                    "{:?} is not a providerID of this provider (scheme {:?}); it can only answer for its own instances",
                    node.provider_id, self.scheme
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
        // A provider bug must not reach the controller as a valid answer.
        answers::instance_metadata(&metadata).map_err(bad_answer("an invalid InstanceMetadata"))?;
        Ok(Response::new(InstanceMetadataResponse {
            metadata: Some(metadata),
            warnings: Vec::new(),
        }))
    }
}
