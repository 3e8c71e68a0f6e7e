//! RoutesService: the cluster's pod-network routes, listed across pages,
//! created and deleted one at a time per destination CIDR.

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::proto::{Capability, CreateRouteRequest, DeleteRouteRequest, ListRoutesRequest, Route};
use crate::validate;

/// A change to the route to `route`'s destination CIDR, the route's
/// idempotency key.
fn mutation(cluster_name: &str, route: &Route) -> Rpc {
    Rpc::mutation(format!("route/{cluster_name}/{}", route.destination_cidr))
        .needs(Capability::Routes)
}

impl ProviderClient {
    /// Every route of `cluster_name`, following all pages.
    pub async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>, ClientError> {
        self.require(Capability::Routes).await?;
        let request = ListRoutesRequest {
            cluster_name: cluster_name.to_owned(),
            ..Default::default()
        };
        self.all_pages(request, |i, route| {
            validate::route(&format!("routes[{i}]"), &Some(route))
        })
        .await
    }

    pub async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: Route,
    ) -> Result<Option<Route>, ClientError> {
        let rpc = mutation(cluster_name, &route);
        let request = CreateRouteRequest {
            cluster_name: cluster_name.to_owned(),
            name_hint: name_hint.to_owned(),
            route: Some(route),
        };
        self.call(rpc, request, |r| Ok(r.route)).await
    }

    pub async fn delete_route(&self, cluster_name: &str, route: Route) -> Result<(), ClientError> {
        let rpc = mutation(cluster_name, &route);
        let request = DeleteRouteRequest {
            cluster_name: cluster_name.to_owned(),
            route: Some(route),
        };
        self.call(rpc, request, |_| Ok(())).await
    }
}
