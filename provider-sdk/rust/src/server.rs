//! Serving a provider: the Unix socket, the contract services wired to the
//! provider's traits, health, reflection and graceful shutdown.

use std::future::Future;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::server::NamedService;
use tonic::service::RoutesBuilder;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::error::ProviderError;
use crate::proto::{self, *};
use crate::provider::{
    CallContext, Clusters, Existence, Identity, Instances, LbOutcome, LoadBalancers, Readiness,
    Routes, ShutdownState, Volumes, Zones,
};
use crate::validate::{self, Violation};
use crate::{MAX_MESSAGE_BYTES, paginate};

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("socket {0} is in use by a running server")]
    InUse(PathBuf),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Parses `unix:///abs/path` (or `unix:/abs/path`) into a path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, ServeError> {
    let bad = |reason: &str| ServeError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .ok_or_else(|| bad("only unix:///absolute/path endpoints are supported"))?;
    if !rest.starts_with('/') {
        return Err(bad("the socket path must be absolute"));
    }
    Ok(PathBuf::from(rest))
}

/// A provider ready to serve: [`Identity`] plus the optional services
/// handed to it. Capabilities are derived from what was handed over.
pub struct ProviderServer<I> {
    identity: Arc<I>,
    routes: RoutesBuilder,
    capabilities: Vec<Capability>,
    service_names: Vec<&'static str>,
    socket_mode: u32,
}

impl<I: Identity> ProviderServer<I> {
    pub fn new(identity: I) -> Self {
        ProviderServer {
            identity: Arc::new(identity),
            routes: RoutesBuilder::default(),
            capabilities: Vec::new(),
            service_names: Vec::new(),
            socket_mode: 0o600,
        }
    }

    fn add<S>(&mut self, svc: S, caps: &[Capability])
    where
        S: tower::Service<
                http::Request<tonic::body::Body>,
                Response = http::Response<tonic::body::Body>,
                Error = std::convert::Infallible,
            > + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.service_names.push(S::NAME);
        self.capabilities.extend_from_slice(caps);
        self.routes.add_service(svc);
    }

    pub fn with_instances<T: Instances>(mut self, provider: T) -> Self {
        let svc = instances_service_server::InstancesServiceServer::new(InstancesAdapter(
            Arc::new(provider),
        ))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.add(svc, &[Capability::Instances]);
        self
    }

    pub fn with_load_balancers<T: LoadBalancers>(mut self, provider: T) -> Self {
        let mut caps = vec![Capability::LoadBalancers];
        if provider.supports_listing() {
            caps.push(Capability::ListLoadBalancers);
        }
        let svc = load_balancer_service_server::LoadBalancerServiceServer::new(LbAdapter(
            Arc::new(provider),
        ))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.add(svc, &caps);
        self
    }

    pub fn with_routes<T: Routes>(mut self, provider: T) -> Self {
        let mut caps = vec![Capability::Routes];
        if provider.uses_target_node_addresses() {
            caps.push(Capability::RoutesTargetNodeAddresses);
        }
        let svc =
            routes_service_server::RoutesServiceServer::new(RoutesAdapter(Arc::new(provider)))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.add(svc, &caps);
        self
    }

    pub fn with_zones<T: Zones>(mut self, provider: T) -> Self {
        let svc = zones_service_server::ZonesServiceServer::new(ZonesAdapter(Arc::new(provider)))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.add(svc, &[Capability::Zones]);
        self
    }

    pub fn with_clusters<T: Clusters>(mut self, provider: T) -> Self {
        let svc = clusters_service_server::ClustersServiceServer::new(ClustersAdapter(Arc::new(
            provider,
        )))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.add(svc, &[Capability::Clusters]);
        self
    }

    pub fn with_volumes<T: Volumes>(mut self, provider: T) -> Self {
        let svc =
            volumes_service_server::VolumesServiceServer::new(VolumesAdapter(Arc::new(provider)))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.add(svc, &[Capability::VolumeLabels]);
        self
    }

    /// Permission bits of the socket file (default `0o600`; `0o660` when the
    /// controller runs as another user of the same group).
    pub fn socket_mode(mut self, mode: u32) -> Self {
        self.socket_mode = mode;
        self
    }

    /// The capabilities this server advertises.
    pub fn capabilities(&self) -> &[Capability] {
        &self.capabilities
    }

    /// Serves on `endpoint` until SIGTERM or SIGINT, then drains in-flight
    /// calls and removes the socket.
    pub async fn serve_until_signal(self, endpoint: &str) -> Result<(), ServeError> {
        self.serve(endpoint, shutdown_signal()).await
    }

    /// Serves on `endpoint` until `shutdown` completes.
    pub async fn serve(
        self,
        endpoint: &str,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let path = socket_path(endpoint)?;
        let listener = bind_socket(&path, self.socket_mode).await?;
        self.serve_listener(listener, &path, shutdown).await
    }

    async fn serve_listener(
        mut self,
        listener: UnixListener,
        path: &Path,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let (health, health_svc) = tonic_health::server::health_reporter();
        let identity_svc = identity_service_server::IdentityServiceServer::new(IdentityAdapter {
            identity: self.identity.clone(),
            capabilities: self.capabilities.clone(),
        });
        health
            .set_serving::<identity_service_server::IdentityServiceServer<IdentityAdapter<I>>>()
            .await;
        for name in &self.service_names {
            health
                .set_service_status(*name, tonic_health::ServingStatus::Serving)
                .await;
        }
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| ServeError::Endpoint {
                endpoint: path.display().to_string(),
                reason: format!("reflection: {e}"),
            })?;
        self.routes.add_service(identity_svc);
        self.routes.add_service(health_svc);
        self.routes.add_service(reflection);
        let info = self.identity.info();
        tracing::info!(
            socket = %path.display(),
            provider = %info.name,
            version = %info.vendor_version,
            capabilities = ?self.capabilities,
            "provider serving"
        );
        let result = tonic::transport::Server::builder()
            .add_routes(self.routes.routes())
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
            .await;
        let _ = std::fs::remove_file(path);
        tracing::info!("provider stopped");
        Ok(result?)
    }
}

/// Binds the socket: removes a stale socket left by a dead server, refuses
/// to touch a live one or a non-socket file, and sets the permission bits.
pub async fn bind_socket(path: &Path, mode: u32) -> Result<UnixListener, ServeError> {
    let io = |source| ServeError::Socket {
        path: path.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(ServeError::InUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(io)?;
        }
        Ok(_) => {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket; refusing to remove it",
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    Ok(listener)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = int.recv() => tracing::info!("SIGINT: draining"),
    }
}

/// The request id, deadline and span of one call.
fn context<T>(req: &Request<T>) -> CallContext {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let request_id = req
        .metadata()
        .get(proto::REQUEST_ID_METADATA)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| {
            format!(
                "sdk-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            )
        });
    let deadline = req
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .map(|d| Instant::now() + d);
    CallContext {
        request_id,
        deadline,
    }
}

/// Parses the `grpc-timeout` header: up to 8 digits and a unit.
pub(crate) fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (n, unit) = v.split_at(v.len() - 1);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn invalid(v: Violation) -> Status {
    ProviderError::invalid_request(v.field, v.problem).to_status()
}

/// Runs one provider call inside a span carrying method and request id, and
/// turns its error into the contract's status.
async fn call<T, F>(method: &'static str, ctx: &CallContext, f: F) -> Result<T, Status>
where
    F: Future<Output = Result<T, ProviderError>>,
{
    let span = tracing::info_span!("rpc", method, request_id = %ctx.request_id);
    let result = f.instrument(span.clone()).await;
    if let Err(e) = &result {
        span.in_scope(
            || tracing::debug!(code = ?e.code(), reason = ?e.reason(), error = %e, "call failed"),
        );
    }
    result.map_err(|e| e.to_status())
}

fn cluster_name(v: &str) -> Result<String, Status> {
    validate::name("cluster_name", v).map_err(invalid)?;
    Ok(v.to_owned())
}

struct IdentityAdapter<I> {
    identity: Arc<I>,
    capabilities: Vec<Capability>,
}

#[tonic::async_trait]
impl<I: Identity> identity_service_server::IdentityService for IdentityAdapter<I> {
    async fn get_provider_info(
        &self,
        _req: Request<GetProviderInfoRequest>,
    ) -> Result<Response<GetProviderInfoResponse>, Status> {
        let info = self.identity.info();
        Ok(Response::new(GetProviderInfoResponse {
            name: info.name,
            vendor_version: info.vendor_version,
            provider_id_scheme: info.provider_id_scheme,
            contract_version: proto::CONTRACT_VERSION.to_owned(),
            has_cluster_id: info.has_cluster_id,
            manifest: info.manifest.into_iter().collect(),
        }))
    }

    async fn get_provider_capabilities(
        &self,
        _req: Request<GetProviderCapabilitiesRequest>,
    ) -> Result<Response<GetProviderCapabilitiesResponse>, Status> {
        Ok(Response::new(GetProviderCapabilitiesResponse {
            capabilities: self.capabilities.iter().map(|c| *c as i32).collect(),
            annotations: Some(self.identity.annotation_schema()),
        }))
    }

    async fn probe(&self, req: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        let ctx = context(&req);
        let readiness = call("Probe", &ctx, self.identity.probe(ctx.clone())).await?;
        let (state, message) = match readiness {
            Readiness::Ready => (ProbeState::Ready, String::new()),
            Readiness::Starting(m) => (ProbeState::Starting, m),
            Readiness::NotReady(m) => (ProbeState::NotReady, m),
        };
        Ok(Response::new(ProbeResponse {
            state: state as i32,
            message,
        }))
    }
}

struct InstancesAdapter<T>(Arc<T>);

#[tonic::async_trait]
impl<T: Instances> instances_service_server::InstancesService for InstancesAdapter<T> {
    async fn instance_exists(
        &self,
        req: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        let ctx = context(&req);
        let node = validate::node_ref("node", &req.get_ref().node).map_err(invalid)?;
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
        let node = validate::node_ref("node", &req.get_ref().node).map_err(invalid)?;
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
        let node = validate::node_ref("node", &req.get_ref().node).map_err(invalid)?;
        let metadata = call(
            "InstanceMetadata",
            &ctx,
            self.0.instance_metadata(ctx.clone(), node),
        )
        .await?;
        // A provider bug must not reach the controller as a valid answer.
        crate::client::check_metadata(&metadata).map_err(|v| {
            ProviderError::internal(format!(
                "provider answered an invalid InstanceMetadata: {v}"
            ))
            .to_status()
        })?;
        Ok(Response::new(InstanceMetadataResponse {
            metadata: Some(metadata),
        }))
    }
}

struct LbAdapter<T>(Arc<T>);

#[tonic::async_trait]
impl<T: LoadBalancers> load_balancer_service_server::LoadBalancerService for LbAdapter<T> {
    async fn get_load_balancer(
        &self,
        req: Request<GetLoadBalancerRequest>,
    ) -> Result<Response<GetLoadBalancerResponse>, Status> {
        let ctx = context(&req);
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let service = validate::service("service", &r.service).map_err(invalid)?;
        let status = call(
            "GetLoadBalancer",
            &ctx,
            self.0.get_load_balancer(ctx.clone(), cluster, service),
        )
        .await?;
        Ok(Response::new(match status {
            Some(status) => GetLoadBalancerResponse {
                existence: LoadBalancerExistence::Exists as i32,
                status: Some(status),
            },
            None => GetLoadBalancerResponse {
                existence: LoadBalancerExistence::NotExists as i32,
                status: None,
            },
        }))
    }

    async fn get_load_balancer_name(
        &self,
        req: Request<GetLoadBalancerNameRequest>,
    ) -> Result<Response<GetLoadBalancerNameResponse>, Status> {
        let ctx = context(&req);
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let service = validate::service("service", &r.service).map_err(invalid)?;
        let name = call(
            "GetLoadBalancerName",
            &ctx,
            self.0.get_load_balancer_name(ctx.clone(), cluster, service),
        )
        .await?;
        if name.is_empty() {
            return Err(
                ProviderError::internal("provider answered an empty load balancer name")
                    .to_status(),
            );
        }
        Ok(Response::new(GetLoadBalancerNameResponse { name }))
    }

    async fn ensure_load_balancer(
        &self,
        req: Request<EnsureLoadBalancerRequest>,
    ) -> Result<Response<EnsureLoadBalancerResponse>, Status> {
        let ctx = context(&req);
        let r = req.into_inner();
        let cluster = cluster_name(&r.cluster_name)?;
        let service = validate::service("service", &r.service).map_err(invalid)?;
        validate::node_refs("nodes", &r.nodes).map_err(invalid)?;
        let answer = call(
            "EnsureLoadBalancer",
            &ctx,
            self.0
                .ensure_load_balancer(ctx.clone(), cluster, service, r.nodes),
        )
        .await?;
        let result = match answer.outcome {
            LbOutcome::Done(status) => {
                validate::load_balancer_status("status", &status).map_err(|v| {
                    ProviderError::internal(format!("provider answered an invalid status: {v}"))
                        .to_status()
                })?;
                ensure_load_balancer_response::Result::Status(status)
            }
            LbOutcome::ImplementedElsewhere(message) => {
                ensure_load_balancer_response::Result::ImplementedElsewhere(ImplementedElsewhere {
                    message,
                })
            }
        };
        Ok(Response::new(EnsureLoadBalancerResponse {
            result: Some(result),
            warnings: answer.warnings,
        }))
    }

    async fn update_load_balancer(
        &self,
        req: Request<UpdateLoadBalancerRequest>,
    ) -> Result<Response<UpdateLoadBalancerResponse>, Status> {
        let ctx = context(&req);
        let r = req.into_inner();
        let cluster = cluster_name(&r.cluster_name)?;
        let service = validate::service("service", &r.service).map_err(invalid)?;
        validate::node_refs("nodes", &r.nodes).map_err(invalid)?;
        let answer = call(
            "UpdateLoadBalancer",
            &ctx,
            self.0
                .update_load_balancer(ctx.clone(), cluster, service, r.nodes),
        )
        .await?;
        let result = match answer.outcome {
            LbOutcome::Done(()) => {
                update_load_balancer_response::Result::Updated(LoadBalancerUpdated {})
            }
            LbOutcome::ImplementedElsewhere(message) => {
                update_load_balancer_response::Result::ImplementedElsewhere(ImplementedElsewhere {
                    message,
                })
            }
        };
        Ok(Response::new(UpdateLoadBalancerResponse {
            result: Some(result),
            warnings: answer.warnings,
        }))
    }

    async fn ensure_load_balancer_deleted(
        &self,
        req: Request<EnsureLoadBalancerDeletedRequest>,
    ) -> Result<Response<EnsureLoadBalancerDeletedResponse>, Status> {
        let ctx = context(&req);
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let service = validate::service("service", &r.service).map_err(invalid)?;
        let warnings = call(
            "EnsureLoadBalancerDeleted",
            &ctx,
            self.0
                .ensure_load_balancer_deleted(ctx.clone(), cluster, service),
        )
        .await?;
        Ok(Response::new(EnsureLoadBalancerDeletedResponse {
            warnings,
        }))
    }

    async fn list_load_balancers(
        &self,
        req: Request<ListLoadBalancersRequest>,
    ) -> Result<Response<ListLoadBalancersResponse>, Status> {
        let ctx = context(&req);
        if !self.0.supports_listing() {
            return Err(
                ProviderError::unimplemented("ListLoadBalancers is not supported").to_status(),
            );
        }
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let all = call(
            "ListLoadBalancers",
            &ctx,
            self.0.list_load_balancers(ctx.clone(), cluster),
        )
        .await?;
        let (page, next_page_token) =
            paginate::page(all, |e| e.service_uid.clone(), r.page_size, &r.page_token)
                .map_err(invalid)?;
        Ok(Response::new(ListLoadBalancersResponse {
            load_balancers: page
                .into_iter()
                .map(|e| LoadBalancerSummary {
                    name: e.name,
                    service_uid: e.service_uid,
                    service_namespace: e.service_namespace,
                    service_name: e.service_name,
                    status: e.status,
                })
                .collect(),
            next_page_token,
        }))
    }
}

struct RoutesAdapter<T>(Arc<T>);

#[tonic::async_trait]
impl<T: Routes> routes_service_server::RoutesService for RoutesAdapter<T> {
    async fn list_routes(
        &self,
        req: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        let ctx = context(&req);
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let all = call("ListRoutes", &ctx, self.0.list_routes(ctx.clone(), cluster)).await?;
        let (routes, next_page_token) = paginate::page(
            all,
            |r| r.destination_cidr.clone(),
            r.page_size,
            &r.page_token,
        )
        .map_err(invalid)?;
        Ok(Response::new(ListRoutesResponse {
            routes,
            next_page_token,
        }))
    }

    async fn create_route(
        &self,
        req: Request<CreateRouteRequest>,
    ) -> Result<Response<CreateRouteResponse>, Status> {
        let ctx = context(&req);
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        validate::name("name_hint", &r.name_hint).map_err(invalid)?;
        let route = validate::route("route", &r.route).map_err(invalid)?;
        if route.blackhole {
            return Err(invalid(Violation {
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
        let ctx = context(&req);
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let route = validate::route("route", &r.route).map_err(invalid)?;
        call(
            "DeleteRoute",
            &ctx,
            self.0.delete_route(ctx.clone(), cluster, route),
        )
        .await?;
        Ok(Response::new(DeleteRouteResponse {}))
    }
}

struct ZonesAdapter<T>(Arc<T>);

#[tonic::async_trait]
impl<T: Zones> zones_service_server::ZonesService for ZonesAdapter<T> {
    async fn get_zone_by_provider_id(
        &self,
        req: Request<GetZoneByProviderIdRequest>,
    ) -> Result<Response<GetZoneByProviderIdResponse>, Status> {
        let ctx = context(&req);
        let id = req.get_ref().provider_id.clone();
        validate::name("provider_id", &id).map_err(invalid)?;
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
        let ctx = context(&req);
        let name = req.get_ref().node_name.clone();
        validate::name("node_name", &name).map_err(invalid)?;
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

struct VolumesAdapter<T>(Arc<T>);

#[tonic::async_trait]
impl<T: Volumes> volumes_service_server::VolumesService for VolumesAdapter<T> {
    async fn get_volume_labels(
        &self,
        req: Request<GetVolumeLabelsRequest>,
    ) -> Result<Response<GetVolumeLabelsResponse>, Status> {
        let ctx = context(&req);
        let volume = validate::volume("volume", &req.get_ref().volume).map_err(invalid)?;
        let labels = call(
            "GetVolumeLabels",
            &ctx,
            self.0.get_volume_labels(ctx.clone(), volume),
        )
        .await?;
        // A provider bug must not reach the controller as a valid answer.
        validate::labels("labels", &labels).map_err(|v| {
            ProviderError::internal(format!("provider answered invalid volume labels: {v}"))
                .to_status()
        })?;
        Ok(Response::new(GetVolumeLabelsResponse {
            labels: labels.into_iter().collect(),
        }))
    }
}

struct ClustersAdapter<T>(Arc<T>);

#[tonic::async_trait]
impl<T: Clusters> clusters_service_server::ClustersService for ClustersAdapter<T> {
    async fn list_clusters(
        &self,
        req: Request<ListClustersRequest>,
    ) -> Result<Response<ListClustersResponse>, Status> {
        let ctx = context(&req);
        let cluster_names = call("ListClusters", &ctx, self.0.list_clusters(ctx.clone())).await?;
        Ok(Response::new(ListClustersResponse { cluster_names }))
    }

    async fn master(
        &self,
        req: Request<MasterRequest>,
    ) -> Result<Response<MasterResponse>, Status> {
        let ctx = context(&req);
        let cluster = cluster_name(&req.get_ref().cluster_name)?;
        let address = call("Master", &ctx, self.0.master(ctx.clone(), cluster)).await?;
        Ok(Response::new(MasterResponse { address }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_header() {
        assert_eq!(parse_grpc_timeout("3000000u"), Some(Duration::from_secs(3)));
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            socket_path("unix:///run/p.sock").unwrap(),
            PathBuf::from("/run/p.sock")
        );
        assert_eq!(
            socket_path("unix:/run/p.sock").unwrap(),
            PathBuf::from("/run/p.sock")
        );
        assert!(socket_path("unix://relative.sock").is_err());
        assert!(socket_path("tcp://127.0.0.1:1").is_err());
    }
}
