//! RoutesService: requests checked (no blackhole route is ever created),
//! the provider's [`Routes`] called, its listing paginated.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{call, cluster_name, context, invalid_request};
use crate::paginate;
use crate::proto::*;
use crate::provider::Routes;
use crate::validate::{self, Violation};

pub(super) struct RoutesAdapter<T>(pub(super) Arc<T>);

#[tonic::async_trait]
impl<T: Routes> routes_service_server::RoutesService for RoutesAdapter<T> {
    async fn list_routes(
        &self,
        req: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let all = call("ListRoutes", &ctx, self.0.list_routes(ctx.clone(), cluster)).await?;
        let (routes, next_page_token) = paginate::page(
            all,
            |r| r.destination_cidr.clone(),
            r.page_size,
            &r.page_token,
        )
        .map_err(invalid_request)?;
        Ok(Response::new(ListRoutesResponse {
            routes,
            next_page_token,
        }))
    }

    async fn create_route(
        &self,
        req: Request<CreateRouteRequest>,
    ) -> Result<Response<CreateRouteResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        validate::name("name_hint", &r.name_hint).map_err(invalid_request)?;
        let route = validate::route("route", &r.route).map_err(invalid_request)?;
        if route.blackhole {
            return Err(invalid_request(Violation {
                field: "route.blackhole".into(),
                problem: "cannot create a blackhole route".into(),
            }));
        }
        let created = call(
            "CreateRoute",
            &ctx,
            self.0
                .create_route(ctx.clone(), cluster, r.name_hint.clone(), route),
        )
        .await?;
        Ok(Response::new(CreateRouteResponse {
            route: Some(created),
        }))
    }

    async fn delete_route(
        &self,
        req: Request<DeleteRouteRequest>,
    ) -> Result<Response<DeleteRouteResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let route = validate::route("route", &r.route).map_err(invalid_request)?;
        call(
            "DeleteRoute",
            &ctx,
            self.0.delete_route(ctx.clone(), cluster, route),
        )
        .await?;
        Ok(Response::new(DeleteRouteResponse {}))
    }
}
