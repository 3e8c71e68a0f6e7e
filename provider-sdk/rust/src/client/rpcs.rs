//! The contract's unary RPCs as the call path sees them: each request type
//! knows its RPC's name, its generated client and the client method that
//! sends it, so a caller cannot pair a request with the wrong name or
//! method. [`ServiceClient::limited`] is the only way a generated client is
//! built, so every service gets the configured message limits (tonic's
//! default would cap answers at 4 MiB).

use std::future::Future;

use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::proto::clusters_service_client::ClustersServiceClient;
use crate::proto::identity_service_client::IdentityServiceClient;
use crate::proto::instances_service_client::InstancesServiceClient;
use crate::proto::load_balancer_service_client::LoadBalancerServiceClient;
use crate::proto::routes_service_client::RoutesServiceClient;
use crate::proto::volumes_service_client::VolumesServiceClient;
use crate::proto::zones_service_client::ZonesServiceClient;
use crate::proto::*;

/// A generated service client on the shared channel.
pub(super) trait ServiceClient {
    fn limited(channel: Channel, max_message_bytes: usize) -> Self;
}

/// A request message of a unary RPC.
pub(super) trait Unary: Sized + Send + 'static {
    /// The RPC's name as the contract spells it: observer label, log field,
    /// and the method named in an invalid-answer error.
    const METHOD: &'static str;
    type Client: ServiceClient;
    type Response;
    fn send(
        client: Self::Client,
        request: Request<Self>,
    ) -> impl Future<Output = Result<Response<Self::Response>, Status>> + Send;
}

macro_rules! service_clients {
    ($($client:ident),* $(,)?) => {$(
        impl ServiceClient for $client<Channel> {
            fn limited(channel: Channel, max_message_bytes: usize) -> Self {
                $client::new(channel)
                    .max_decoding_message_size(max_message_bytes)
                    .max_encoding_message_size(max_message_bytes)
            }
        }
    )*};
}

service_clients!(
    IdentityServiceClient,
    InstancesServiceClient,
    LoadBalancerServiceClient,
    RoutesServiceClient,
    ZonesServiceClient,
    VolumesServiceClient,
    ClustersServiceClient,
);

/// `"Name": Request -> Response, Client::method;` for each RPC.
macro_rules! unary_rpcs {
    ($($method:literal: $request:ident -> $response:ident, $client:ident::$send:ident;)*) => {$(
        impl Unary for $request {
            const METHOD: &'static str = $method;
            type Client = $client<Channel>;
            type Response = $response;
            fn send(
                mut client: Self::Client,
                request: Request<Self>,
            ) -> impl Future<Output = Result<Response<$response>, Status>> + Send {
                async move { client.$send(request).await }
            }
        }
    )*};
}

unary_rpcs! {
    "GetProviderInfo": GetProviderInfoRequest -> GetProviderInfoResponse, IdentityServiceClient::get_provider_info;
    "GetProviderCapabilities": GetProviderCapabilitiesRequest -> GetProviderCapabilitiesResponse, IdentityServiceClient::get_provider_capabilities;
    "Probe": ProbeRequest -> ProbeResponse, IdentityServiceClient::probe;

    "InstanceExists": InstanceExistsRequest -> InstanceExistsResponse, InstancesServiceClient::instance_exists;
    "InstanceShutdown": InstanceShutdownRequest -> InstanceShutdownResponse, InstancesServiceClient::instance_shutdown;
    "InstanceMetadata": InstanceMetadataRequest -> InstanceMetadataResponse, InstancesServiceClient::instance_metadata;

    "GetLoadBalancer": GetLoadBalancerRequest -> GetLoadBalancerResponse, LoadBalancerServiceClient::get_load_balancer;
    "GetLoadBalancerName": GetLoadBalancerNameRequest -> GetLoadBalancerNameResponse, LoadBalancerServiceClient::get_load_balancer_name;
    "EnsureLoadBalancerDeleted": EnsureLoadBalancerDeletedRequest -> EnsureLoadBalancerDeletedResponse, LoadBalancerServiceClient::ensure_load_balancer_deleted;
    "ListLoadBalancers": ListLoadBalancersRequest -> ListLoadBalancersResponse, LoadBalancerServiceClient::list_load_balancers;

    "ListRoutes": ListRoutesRequest -> ListRoutesResponse, RoutesServiceClient::list_routes;
    "CreateRoute": CreateRouteRequest -> CreateRouteResponse, RoutesServiceClient::create_route;
    "DeleteRoute": DeleteRouteRequest -> DeleteRouteResponse, RoutesServiceClient::delete_route;

    "GetZoneByProviderId": GetZoneByProviderIdRequest -> GetZoneByProviderIdResponse, ZonesServiceClient::get_zone_by_provider_id;
    "GetZoneByNodeName": GetZoneByNodeNameRequest -> GetZoneByNodeNameResponse, ZonesServiceClient::get_zone_by_node_name;

    "GetVolumeLabels": GetVolumeLabelsRequest -> GetVolumeLabelsResponse, VolumesServiceClient::get_volume_labels;

    "ListClusters": ListClustersRequest -> ListClustersResponse, ClustersServiceClient::list_clusters;
    "Master": MasterRequest -> MasterResponse, ClustersServiceClient::master;
}
