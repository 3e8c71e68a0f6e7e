//! The client against a provider that breaks the contract (written with the
//! raw generated server traits, since the SDK's traits make these answers
//! impossible): every bad answer becomes a typed error naming the field,
//! never a value the controller could act on, and nothing panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ccm_provider_sdk::proto::*;
use ccm_provider_sdk::{ClientError, ClientOptions, Outcome, ProviderClient};
use ccm_testsupport::raw::{RawIdentity, RawServer};
use tonic::{Request, Response, Status};

fn bad_identity() -> RawIdentity {
    let mut id = RawIdentity::new(
        "bad",
        &[
            Capability::Instances,
            Capability::LoadBalancers,
            Capability::Routes,
        ],
    );
    // 99 is a capability from the future: ignored, not an error.
    id.capabilities.push(99);
    id.probe = Some(ProbeResponse {
        state: 0,
        message: "?".into(),
    });
    id
}

struct BadInstances;

#[tonic::async_trait]
impl instances_service_server::InstancesService for BadInstances {
    /// Not announced (no CAPABILITY_INSTANCES_BATCH).
    async fn batch_instances(
        &self,
        _: Request<ccm_provider_sdk::proto::BatchInstancesRequest>,
    ) -> Result<Response<ccm_provider_sdk::proto::BatchInstancesResponse>, Status> {
        Err(Status::unimplemented("BatchInstances"))
    }

    async fn instance_exists(
        &self,
        r: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        // The bool-like bug: "false" for anything it does not know, and an
        // enum value from nowhere for the rest.
        let existence = if r.get_ref().node.as_ref().unwrap().name == "future" {
            7
        } else {
            0
        };
        Ok(Response::new(InstanceExistsResponse { existence }))
    }
    async fn instance_shutdown(
        &self,
        _: Request<InstanceShutdownRequest>,
    ) -> Result<Response<InstanceShutdownResponse>, Status> {
        Ok(Response::new(InstanceShutdownResponse { state: 0 }))
    }
    async fn instance_metadata(
        &self,
        req: Request<InstanceMetadataRequest>,
    ) -> Result<Response<InstanceMetadataResponse>, Status> {
        if req.into_inner().node.is_some_and(|n| n.name == "foreign") {
            // Well formed, but another cloud's: the provider says "bad".
            return Ok(Response::new(InstanceMetadataResponse {
                metadata: Some(InstanceMetadata {
                    provider_id: "aws:///eu-west-1a/i-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }));
        }
        Ok(Response::new(InstanceMetadataResponse {
            metadata: Some(InstanceMetadata {
                provider_id: "bad://i-1".into(),
                node_addresses: vec![NodeAddress {
                    r#type: NodeAddressType::InternalIp as i32,
                    address: "10.0.0.300".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
}

struct BadLbs;

#[tonic::async_trait]
impl load_balancer_service_server::LoadBalancerService for BadLbs {
    async fn get_load_balancer(
        &self,
        _: Request<GetLoadBalancerRequest>,
    ) -> Result<Response<GetLoadBalancerResponse>, Status> {
        Ok(Response::new(GetLoadBalancerResponse {
            existence: 0,
            status: None,
        }))
    }
    async fn get_load_balancer_name(
        &self,
        _: Request<GetLoadBalancerNameRequest>,
    ) -> Result<Response<GetLoadBalancerNameResponse>, Status> {
        Ok(Response::new(GetLoadBalancerNameResponse {
            name: String::new(),
        }))
    }
    async fn ensure_load_balancer(
        &self,
        _: Request<EnsureLoadBalancerRequest>,
    ) -> Result<Response<EnsureLoadBalancerResponse>, Status> {
        Ok(Response::new(EnsureLoadBalancerResponse {
            result: Some(ensure_load_balancer_response::Result::Status(
                LoadBalancerStatus {
                    ingress: vec![LoadBalancerIngress {
                        ip: "not-an-ip".into(),
                        ..Default::default()
                    }],
                },
            )),
            warnings: vec![],
        }))
    }
    async fn put_node_set(
        &self,
        _: Request<ccm_provider_sdk::proto::PutNodeSetRequest>,
    ) -> Result<Response<ccm_provider_sdk::proto::PutNodeSetResponse>, Status> {
        Err(Status::unimplemented("no node sets"))
    }

    async fn update_load_balancer(
        &self,
        _: Request<UpdateLoadBalancerRequest>,
    ) -> Result<Response<UpdateLoadBalancerResponse>, Status> {
        Ok(Response::new(UpdateLoadBalancerResponse {
            result: None,
            warnings: vec![],
        }))
    }
    async fn ensure_load_balancer_deleted(
        &self,
        _: Request<EnsureLoadBalancerDeletedRequest>,
    ) -> Result<Response<EnsureLoadBalancerDeletedResponse>, Status> {
        Ok(Response::new(EnsureLoadBalancerDeletedResponse::default()))
    }
    async fn list_load_balancers(
        &self,
        _: Request<ListLoadBalancersRequest>,
    ) -> Result<Response<ListLoadBalancersResponse>, Status> {
        Err(Status::unimplemented(""))
    }
}

#[derive(Default, Clone)]
struct LoopingRoutes {
    pages: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl routes_service_server::RoutesService for LoopingRoutes {
    async fn list_routes(
        &self,
        _: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        self.pages.fetch_add(1, Ordering::SeqCst);
        // Always the same token: a client that trusts it loops forever.
        Ok(Response::new(ListRoutesResponse {
            routes: vec![Route {
                target_node: "n".into(),
                destination_cidr: "10.244.0.0/24".into(),
                ..Default::default()
            }],
            next_page_token: "again".into(),
        }))
    }
    async fn create_route(
        &self,
        _: Request<CreateRouteRequest>,
    ) -> Result<Response<CreateRouteResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn delete_route(
        &self,
        _: Request<DeleteRouteRequest>,
    ) -> Result<Response<DeleteRouteResponse>, Status> {
        Err(Status::unimplemented(""))
    }
}

fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

fn field(e: ClientError) -> String {
    assert_eq!(e.outcome(), Outcome::Unknown, "{e:?}");
    match e {
        ClientError::InvalidResponse { violation, .. } => violation.field,
        other => panic!("expected an invalid-response error, got {other:?}"),
    }
}

#[tokio::test]
async fn contract_violations_in_answers_become_typed_errors_naming_the_field() {
    let routes = LoopingRoutes::default();
    let server = RawServer::start(
        tonic::transport::Server::builder()
            .add_service(bad_identity().server())
            .add_service(instances_service_server::InstancesServiceServer::new(
                BadInstances,
            ))
            .add_service(load_balancer_service_server::LoadBalancerServiceServer::new(BadLbs))
            .add_service(routes_service_server::RoutesServiceServer::new(
                routes.clone(),
            )),
    );
    let c = ProviderClient::connect_lazy(
        &server.endpoint,
        ClientOptions {
            page_size: 1,
            ..Default::default()
        },
    )
    .unwrap();

    assert_eq!(c.handshake().await.unwrap().capabilities.len(), 3);
    assert_eq!(
        field(c.instance_exists(node("n")).await.unwrap_err()),
        "existence"
    );
    assert_eq!(
        field(c.instance_exists(node("future")).await.unwrap_err()),
        "existence"
    );
    assert_eq!(
        field(c.instance_shutdown(node("n")).await.unwrap_err()),
        "state"
    );
    assert_eq!(
        field(c.instance_metadata(node("n")).await.unwrap_err()),
        "metadata.node_addresses[0].address"
    );
    assert_eq!(
        field(c.instance_metadata(node("foreign")).await.unwrap_err()),
        "metadata.provider_id",
        "a providerID of another scheme than the provider's own"
    );
    let svc = Service::default();
    assert_eq!(
        field(c.get_load_balancer("k", svc.clone()).await.unwrap_err()),
        "existence"
    );
    assert_eq!(
        field(
            c.get_load_balancer_name("k", svc.clone())
                .await
                .unwrap_err()
        ),
        "name"
    );
    assert_eq!(
        field(
            c.ensure_load_balancer("k", svc.clone(), vec![])
                .await
                .unwrap_err()
        ),
        "result.status.ingress[0].ip"
    );
    assert_eq!(
        field(c.update_load_balancer("k", svc, vec![]).await.unwrap_err()),
        "result"
    );
    assert_eq!(
        field(c.list_routes("k").await.unwrap_err()),
        "next_page_token"
    );
    assert_eq!(
        routes.pages.load(Ordering::SeqCst),
        2,
        "stopped at the repeat"
    );
    // An UNSPECIFIED probe state reads as not ready, with the reason.
    match c.probe().await.unwrap() {
        ccm_provider_sdk::Readiness::NotReady(m) => assert!(m.contains("unspecified"), "{m}"),
        other => panic!("{other:?}"),
    }

    server.stop().await;
}
