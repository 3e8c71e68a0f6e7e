//! ZonesService: requests checked, then the provider's [`Zones`].

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{call, context, invalid_request};
use crate::proto::*;
use crate::provider::Zones;
use crate::validate;

pub(super) struct ZonesAdapter<T>(pub(super) Arc<T>);

#[tonic::async_trait]
impl<T: Zones> zones_service_server::ZonesService for ZonesAdapter<T> {
    async fn get_zone_by_provider_id(
        &self,
        req: Request<GetZoneByProviderIdRequest>,
    ) -> Result<Response<GetZoneByProviderIdResponse>, Status> {
        let ctx = context(&req)?;
        let id = req.get_ref().provider_id.clone();
        validate::name("provider_id", &id).map_err(invalid_request)?;
        let zone = call(
            "GetZoneByProviderId",
            &ctx,
            self.0.zone_by_provider_id(ctx.clone(), id),
        )
        .await?;
        Ok(Response::new(GetZoneByProviderIdResponse {
            zone: Some(zone),
        }))
    }

    async fn get_zone_by_node_name(
        &self,
        req: Request<GetZoneByNodeNameRequest>,
    ) -> Result<Response<GetZoneByNodeNameResponse>, Status> {
        let ctx = context(&req)?;
        let name = req.get_ref().node_name.clone();
        validate::name("node_name", &name).map_err(invalid_request)?;
        let zone = call(
            "GetZoneByNodeName",
            &ctx,
            self.0.zone_by_node_name(ctx.clone(), name),
        )
        .await?;
        Ok(Response::new(GetZoneByNodeNameResponse {
            zone: Some(zone),
        }))
    }
}
