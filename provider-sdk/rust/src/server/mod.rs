//! Serving a provider: [`ProviderServer`] wires the provider's traits to
//! the contract services (one adapter file per service, sharing the
//! request plumbing of `request.rs`), and serves them with health and
//! reflection on the Unix socket until shutdown.

mod clusters;
#[cfg(feature = "logging")]
mod flags;
mod identity;
mod instances;
mod load_balancers;
#[cfg(feature = "logging")]
mod logging;
mod request;
mod routes;
mod supervise;
mod volumes;
mod zones;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::server::NamedService;
use tonic::service::RoutesBuilder;

pub use crate::endpoint::{ServeError, bind_socket, socket_path};
use crate::proto::{self, *};
use crate::provider::{Clusters, Identity, Instances, LoadBalancers, Routes, Volumes, Zones};
use crate::{MAX_MESSAGE_BYTES, endpoint};
#[cfg(feature = "logging")]
pub use flags::{IdentityFlags, UnclassedServicesFlag};
#[cfg(feature = "logging")]
pub use logging::{LogFormat, init_logging};
pub use supervise::{Stopped, Supervisor};

/// Gives a generated service server the contract's message limits; every
/// service is built through it, so none falls back to tonic's 4 MiB.
macro_rules! limited {
    ($server:expr) => {
        $server
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    };
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
        let svc = limited!(instances_service_server::InstancesServiceServer::new(
            instances::InstancesAdapter {
                provider: Arc::new(provider),
                schemes: {
                    let info = self.identity.info();
                    match info.provider_id_schemes() {
                        s if s.is_empty() => vec![info.provider_id_scheme],
                        s => s,
                    }
                },
            }
        ));
        // Every provider with instances serves the batch: natively, or by
        // the default fan-out to its single methods.
        self.add(svc, &[Capability::Instances, Capability::InstancesBatch]);
        self
    }

    pub fn with_load_balancers<T: LoadBalancers>(mut self, provider: T) -> Self {
        let mut caps = vec![Capability::LoadBalancers, Capability::NodeSets];
        if provider.supports_listing() {
            caps.push(Capability::ListLoadBalancers);
        }
        let svc = limited!(
            load_balancer_service_server::LoadBalancerServiceServer::new(
                load_balancers::LbAdapter {
                    provider: Arc::new(provider),
                    sets: Default::default(),
                }
            )
        );
        self.add(svc, &caps);
        self
    }

    pub fn with_routes<T: Routes>(mut self, provider: T) -> Self {
        let mut caps = vec![Capability::Routes];
        if provider.uses_target_node_addresses() {
            caps.push(Capability::RoutesTargetNodeAddresses);
        }
        let svc = limited!(routes_service_server::RoutesServiceServer::new(
            routes::RoutesAdapter(Arc::new(provider))
        ));
        self.add(svc, &caps);
        self
    }

    pub fn with_zones<T: Zones>(mut self, provider: T) -> Self {
        let svc = limited!(zones_service_server::ZonesServiceServer::new(
            zones::ZonesAdapter(Arc::new(provider))
        ));
        self.add(svc, &[Capability::Zones]);
        self
    }

    pub fn with_clusters<T: Clusters>(mut self, provider: T) -> Self {
        let svc = limited!(clusters_service_server::ClustersServiceServer::new(
            clusters::ClustersAdapter(Arc::new(provider))
        ));
        self.add(svc, &[Capability::Clusters]);
        self
    }

    pub fn with_volumes<T: Volumes>(mut self, provider: T) -> Self {
        let svc = limited!(volumes_service_server::VolumesServiceServer::new(
            volumes::VolumesAdapter(Arc::new(provider))
        ));
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
        let path = endpoint::socket_path(endpoint)?;
        let listener = endpoint::bind_socket(&path, self.socket_mode).await?;
        self.serve_listener(listener, &path, shutdown).await
    }

    async fn serve_listener(
        mut self,
        listener: UnixListener,
        path: &Path,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let (health, health_svc) = tonic_health::server::health_reporter();
        let identity_svc = limited!(identity_service_server::IdentityServiceServer::new(
            identity::IdentityAdapter {
                identity: self.identity.clone(),
                capabilities: self.capabilities.clone(),
            }
        ));
        health
            .set_serving::<identity_service_server::IdentityServiceServer<identity::IdentityAdapter<I>>>()
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

/// Completes on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = int.recv() => tracing::info!("SIGINT: draining"),
    }
}
