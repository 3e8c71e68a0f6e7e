//! The contract's unary RPCs as the call path sees them: each request type
//! knows its RPC's name, its generated client and the client method that
//! sends it, so a caller cannot pair a request with the wrong name or
//! method. [`ServiceClient::limited`] is the only way a generated client is
//! built, so every service gets the configured message limits (tonic's
//! default would cap answers at 4 MiB), and every RPC its own bound on the
//! answer: no single instance's metadata needs 16 MiB, only listings do.

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
    /// Sends requests up to `max_request_bytes`, decodes answers up to
    /// `max_answer_bytes` (tonic refuses a larger one from its length
    /// prefix, before reading it).
    fn limited(channel: Channel, max_request_bytes: usize, max_answer_bytes: usize) -> Self;
}

/// The largest answer of an RPC whose answer is a few scalars: existence,
/// shutdown state, a name, a zone, an address, a route.
pub const SMALL_ANSWER_BYTES: usize = 64 * 1024;
/// The largest answer of an RPC about one object: an instance's metadata,
/// a load balancer's status and warnings, the provider's own description.
pub const OBJECT_ANSWER_BYTES: usize = 1024 * 1024;
/// The largest answer of an RPC that carries a collection (a page of a
/// listing, all clusters, a volume's labels): the contract's message bound.
pub const LISTING_ANSWER_BYTES: usize = crate::MAX_MESSAGE_BYTES;

/// A request message of a unary RPC.
pub(super) trait Unary: Sized + Send + 'static {
    /// The RPC's name as the contract spells it: observer label, log field,
    /// and the method named in an invalid-answer error.
    const METHOD: &'static str;
    /// The largest answer accepted (and no more than the configured
    /// message limit).
    const MAX_ANSWER_BYTES: usize;
    type Client: ServiceClient;
    type Response: Send + 'static;
    fn send(
        client: Self::Client,
        request: Request<Self>,
    ) -> impl Future<Output = Result<Response<Self::Response>, Status>> + Send;
}

macro_rules! service_clients {
    ($($client:ident),* $(,)?) => {$(
        impl ServiceClient for $client<Channel> {
            fn limited(channel: Channel, max_request_bytes: usize, max_answer_bytes: usize) -> Self {
                $client::new(channel)
                    .max_decoding_message_size(max_answer_bytes)
                    .max_encoding_message_size(max_request_bytes)
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

/// `"Name": Request -> Response (answer bound), Client::method;` for each
/// RPC.
macro_rules! unary_rpcs {
    ($($method:literal: $request:ident -> $response:ident ($max:ident), $client:ident::$send:ident;)*) => {$(
        impl Unary for $request {
            const METHOD: &'static str = $method;
            const MAX_ANSWER_BYTES: usize = $max;
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
    "GetProviderInfo": GetProviderInfoRequest -> GetProviderInfoResponse (OBJECT_ANSWER_BYTES), IdentityServiceClient::get_provider_info;
    "GetProviderCapabilities": GetProviderCapabilitiesRequest -> GetProviderCapabilitiesResponse (OBJECT_ANSWER_BYTES), IdentityServiceClient::get_provider_capabilities;
    "Probe": ProbeRequest -> ProbeResponse (SMALL_ANSWER_BYTES), IdentityServiceClient::probe;

    "InstanceExists": InstanceExistsRequest -> InstanceExistsResponse (SMALL_ANSWER_BYTES), InstancesServiceClient::instance_exists;
    "InstanceShutdown": InstanceShutdownRequest -> InstanceShutdownResponse (SMALL_ANSWER_BYTES), InstancesServiceClient::instance_shutdown;
    "InstanceMetadata": InstanceMetadataRequest -> InstanceMetadataResponse (OBJECT_ANSWER_BYTES), InstancesServiceClient::instance_metadata;
    "BatchInstances": BatchInstancesRequest -> BatchInstancesResponse (LISTING_ANSWER_BYTES), InstancesServiceClient::batch_instances;

    "GetLoadBalancer": GetLoadBalancerRequest -> GetLoadBalancerResponse (OBJECT_ANSWER_BYTES), LoadBalancerServiceClient::get_load_balancer;
    "GetLoadBalancerName": GetLoadBalancerNameRequest -> GetLoadBalancerNameResponse (SMALL_ANSWER_BYTES), LoadBalancerServiceClient::get_load_balancer_name;
    "EnsureLoadBalancerDeleted": EnsureLoadBalancerDeletedRequest -> EnsureLoadBalancerDeletedResponse (OBJECT_ANSWER_BYTES), LoadBalancerServiceClient::ensure_load_balancer_deleted;
    "ListLoadBalancers": ListLoadBalancersRequest -> ListLoadBalancersResponse (LISTING_ANSWER_BYTES), LoadBalancerServiceClient::list_load_balancers;

    "ListRoutes": ListRoutesRequest -> ListRoutesResponse (LISTING_ANSWER_BYTES), RoutesServiceClient::list_routes;
    "CreateRoute": CreateRouteRequest -> CreateRouteResponse (SMALL_ANSWER_BYTES), RoutesServiceClient::create_route;
    "DeleteRoute": DeleteRouteRequest -> DeleteRouteResponse (SMALL_ANSWER_BYTES), RoutesServiceClient::delete_route;

    "GetZoneByProviderId": GetZoneByProviderIdRequest -> GetZoneByProviderIdResponse (SMALL_ANSWER_BYTES), ZonesServiceClient::get_zone_by_provider_id;
    "GetZoneByNodeName": GetZoneByNodeNameRequest -> GetZoneByNodeNameResponse (SMALL_ANSWER_BYTES), ZonesServiceClient::get_zone_by_node_name;

    "GetVolumeLabels": GetVolumeLabelsRequest -> GetVolumeLabelsResponse (LISTING_ANSWER_BYTES), VolumesServiceClient::get_volume_labels;

    "ListClusters": ListClustersRequest -> ListClustersResponse (LISTING_ANSWER_BYTES), ClustersServiceClient::list_clusters;
    "Master": MasterRequest -> MasterResponse (SMALL_ANSWER_BYTES), ClustersServiceClient::master;
}
