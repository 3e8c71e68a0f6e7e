//! VolumesService: the request checked, the provider's [`Volumes`] called,
//! its labels checked.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{bad_answer, call, context, invalid_request};
use crate::proto::*;
use crate::provider::Volumes;
use crate::validate;

pub(super) struct VolumesAdapter<T>(pub(super) Arc<T>);

#[tonic::async_trait]
impl<T: Volumes> volumes_service_server::VolumesService for VolumesAdapter<T> {
    async fn get_volume_labels(
        &self,
        req: Request<GetVolumeLabelsRequest>,
    ) -> Result<Response<GetVolumeLabelsResponse>, Status> {
        let ctx = context(&req)?;
        let volume = validate::volume("volume", &req.get_ref().volume).map_err(invalid_request)?;
        let labels = call(
            "GetVolumeLabels",
            &ctx,
            self.0.get_volume_labels(ctx.clone(), volume),
        )
        .await?;
        // A provider bug must not reach the controller as a valid answer.
        validate::labels("labels", &labels).map_err(bad_answer("invalid volume labels"))?;
        Ok(Response::new(GetVolumeLabelsResponse {
            labels: labels.into_iter().collect(),
        }))
    }
}
