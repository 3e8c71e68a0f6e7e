//! Providers on the raw generated gRPC traits, for tests of what the SDK's
//! own traits make impossible to send (answers that break the contract,
//! huge error texts). The shared part is the identity service and the
//! serving on a Unix socket; each test writes only the answers it breaks.

use ccm_proto::v1::{self as proto, *};
use tokio::net::UnixListener;
use tonic::{Request, Response, Status};

/// An identity service with fixed answers.
#[derive(Clone, Debug)]
pub struct RawIdentity {
    pub info: GetProviderInfoResponse,
    /// Raw values: a test may announce one from the future.
    pub capabilities: Vec<i32>,
    /// What `Probe` answers; `None` answers UNIMPLEMENTED.
    pub probe: Option<ProbeResponse>,
}

impl RawIdentity {
    /// `name` as name and providerID scheme, vendor version "0", this
    /// contract version, `capabilities`, and a probe answering READY.
    pub fn new(name: &str, capabilities: &[Capability]) -> RawIdentity {
        RawIdentity {
            info: GetProviderInfoResponse {
                name: name.into(),
                vendor_version: "0".into(),
                provider_id_scheme: name.into(),
                contract_version: proto::CONTRACT_VERSION.into(),
                ..Default::default()
            },
            capabilities: capabilities.iter().map(|c| *c as i32).collect(),
            probe: Some(ProbeResponse {
                state: ProbeState::Ready as i32,
                message: String::new(),
            }),
        }
    }

    pub fn server(self) -> identity_service_server::IdentityServiceServer<RawIdentity> {
        identity_service_server::IdentityServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl identity_service_server::IdentityService for RawIdentity {
    async fn get_provider_info(
        &self,
        _: Request<GetProviderInfoRequest>,
    ) -> Result<Response<GetProviderInfoResponse>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn get_provider_capabilities(
        &self,
        _: Request<GetProviderCapabilitiesRequest>,
    ) -> Result<Response<GetProviderCapabilitiesResponse>, Status> {
        Ok(Response::new(GetProviderCapabilitiesResponse {
            capabilities: self.capabilities.clone(),
            annotations: None,
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        self.probe
            .clone()
            .map(Response::new)
            .ok_or_else(|| Status::unimplemented("unused"))
    }
}

/// How a listing-only load balancer service lists (see [`ListingOnly`]).
#[tonic::async_trait]
pub trait RawListing: Send + Sync + 'static {
    async fn list(
        &self,
        request: Request<ListLoadBalancersRequest>,
    ) -> Result<Response<ListLoadBalancersResponse>, Status>;
}

/// A load balancer service that only lists and deletes, as the orphan
/// sweep does: each delete succeeds and is counted in `deletes`; every
/// other call answers UNIMPLEMENTED.
pub struct ListingOnly<T> {
    listing: T,
    deletes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl<T: RawListing> ListingOnly<T> {
    pub fn server(
        listing: T,
        deletes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) -> load_balancer_service_server::LoadBalancerServiceServer<Self> {
        load_balancer_service_server::LoadBalancerServiceServer::new(ListingOnly {
            listing,
            deletes,
        })
    }
}

fn unused<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("unused"))
}

#[tonic::async_trait]
impl<T: RawListing> load_balancer_service_server::LoadBalancerService for ListingOnly<T> {
    async fn get_load_balancer(
        &self,
        _: Request<GetLoadBalancerRequest>,
    ) -> Result<Response<GetLoadBalancerResponse>, Status> {
        unused()
    }
    async fn get_load_balancer_name(
        &self,
        _: Request<GetLoadBalancerNameRequest>,
    ) -> Result<Response<GetLoadBalancerNameResponse>, Status> {
        unused()
    }
    async fn ensure_load_balancer(
        &self,
        _: Request<EnsureLoadBalancerRequest>,
    ) -> Result<Response<EnsureLoadBalancerResponse>, Status> {
        unused()
    }
    async fn put_node_set(
        &self,
        _: Request<PutNodeSetRequest>,
    ) -> Result<Response<PutNodeSetResponse>, Status> {
        unused()
    }
    async fn update_load_balancer(
        &self,
        _: Request<UpdateLoadBalancerRequest>,
    ) -> Result<Response<UpdateLoadBalancerResponse>, Status> {
        unused()
    }
    async fn ensure_load_balancer_deleted(
        &self,
        _: Request<EnsureLoadBalancerDeletedRequest>,
    ) -> Result<Response<EnsureLoadBalancerDeletedResponse>, Status> {
        self.deletes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Response::new(EnsureLoadBalancerDeletedResponse::default()))
    }
    async fn list_load_balancers(
        &self,
        request: Request<ListLoadBalancersRequest>,
    ) -> Result<Response<ListLoadBalancersResponse>, Status> {
        self.listing.list(request).await
    }
}

/// A raw provider serving on a fresh Unix socket (in a directory of its
/// own) until [`RawServer::stop`], or until dropped.
pub struct RawServer {
    /// `unix://…`, for `ProviderClient::connect_lazy`.
    pub endpoint: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
    _dir: tempfile::TempDir,
}

impl RawServer {
    /// Serves `routes` (a `tonic::transport::Server::builder()` with the
    /// services added); needs a tokio runtime.
    pub fn start(routes: tonic::transport::server::Router) -> RawServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("provider.sock");
        let listener = UnixListener::bind(&path).expect("binding a fresh socket");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(routes.serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            async {
                let _ = stopped.await;
            },
        ));
        RawServer {
            endpoint: format!("unix://{}", path.display()),
            stop: Some(stop),
            server: Some(server),
            _dir: dir,
        }
    }

    /// Stops serving and waits for the server to end; panics if it failed.
    pub async fn stop(mut self) {
        let _ = self.stop.take().expect("stopped once").send(());
        self.server
            .take()
            .expect("stopped once")
            .await
            .expect("the server task")
            .expect("the server");
    }
}
