//! InstancesService: requests checked, then the provider's [`Instances`].

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{bad_answer, call, context, invalid_request};
use crate::proto::*;
use crate::provider::{Existence, Instances, ShutdownState};
use crate::validate::{self, answers};

pub(super) struct InstancesAdapter<T>(pub(super) Arc<T>);

#[tonic::async_trait]
impl<T: Instances> instances_service_server::InstancesService for InstancesAdapter<T> {
    async fn instance_exists(
        &self,
        req: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        let ctx = context(&req);
        let node = validate::node_ref("node", &req.get_ref().node).map_err(invalid_request)?;
        let existence = match call(
            "InstanceExists",
            &ctx,
            self.0.instance_exists(ctx.clone(), node),
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
        let ctx = context(&req);
        let node = validate::node_ref("node", &req.get_ref().node).map_err(invalid_request)?;
        let state = match call(
            "InstanceShutdown",
            &ctx,
            self.0.instance_shutdown(ctx.clone(), node),
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
        let ctx = context(&req);
        let node = validate::node_ref("node", &req.get_ref().node).map_err(invalid_request)?;
        let metadata = call(
            "InstanceMetadata",
            &ctx,
            self.0.instance_metadata(ctx.clone(), node),
        )
        .await?;
        // A provider bug must not reach the controller as a valid answer.
        answers::instance_metadata(&metadata).map_err(bad_answer("an invalid InstanceMetadata"))?;
        Ok(Response::new(InstanceMetadataResponse {
            metadata: Some(metadata),
        }))
    }
}
