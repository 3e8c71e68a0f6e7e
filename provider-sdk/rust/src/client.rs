//! The client the controller uses to call a provider: a lazy connection over
//! the Unix socket (the controller may start first), a handshake on every
//! (re)connect, per-call deadlines and request ids, validated and typed
//! answers, and errors that say whether the operation may have happened.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Status};

use crate::MAX_MESSAGE_BYTES;
use crate::error::{Outcome, ProviderError};
use crate::proto::{self, *};
use crate::provider::{
    Existence, LbAnswer, LbOutcome, LoadBalancerEntry, Readiness, ShutdownState,
};
use crate::server::socket_path;
use crate::validate::{self, Checked, Violation};

thread_local! {
    /// The id `ProviderClient::request` last put on a request on this
    /// thread, for the log line of that call (the same id the provider
    /// logs, so both sides of a call can be matched).
    static LAST_REQUEST_ID: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Deadlines per RPC class.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Identity RPCs and `GetLoadBalancerName`.
    pub identity_timeout: Duration,
    /// Reads: instances, `GetLoadBalancer`, list pages, zones, clusters.
    pub read_timeout: Duration,
    /// Load balancer and route mutations.
    pub mutation_timeout: Duration,
    /// Largest message sent or received.
    pub max_message_bytes: usize,
    /// Page size asked of list RPCs.
    pub page_size: i32,
    /// Most calls in flight on the connection; `None` for no limit.
    pub max_concurrency: Option<usize>,
    /// Told about every call (method, code, duration).
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Asked before every mutation (load balancers, routes); `false`
    /// refuses it with [`ClientError::Refused`]. The controller's
    /// leader-election fence.
    pub mutation_gate: Option<Arc<dyn MutationGate>>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            identity_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(30),
            mutation_timeout: Duration::from_secs(300),
            max_message_bytes: MAX_MESSAGE_BYTES,
            page_size: 500,
            max_concurrency: None,
            observer: None,
            mutation_gate: None,
        }
    }
}

/// A failed call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The provider (or the transport) answered with a non-OK status.
    #[error("{0}")]
    Provider(ProviderError),
    /// The provider answered OK with something the contract forbids.
    #[error("invalid answer from provider to {method}: {violation}")]
    InvalidResponse {
        method: &'static str,
        violation: Violation,
    },
    /// The provider did not advertise the capability the call needs.
    #[error("provider does not support {0:?}")]
    Unsupported(Capability),
    #[error("invalid provider endpoint: {0}")]
    Endpoint(String),
    /// The mutation gate said no: nothing was sent.
    #[error("{method} not sent: this process may not make changes (not the leader)")]
    Refused { method: &'static str },
}

impl ClientError {
    /// Whether the operation may have happened. An invalid answer counts as
    /// unknown: the provider did something, we cannot tell what.
    pub fn outcome(&self) -> Outcome {
        match self {
            ClientError::Provider(e) => e.outcome(),
            ClientError::InvalidResponse { .. } => Outcome::Unknown,
            ClientError::Unsupported(_)
            | ClientError::Endpoint(_)
            | ClientError::Refused { .. } => Outcome::Final,
        }
    }

    /// The contract error, if the provider sent one.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            ClientError::Provider(e) => Some(e),
            _ => None,
        }
    }
}

/// Receives one observation per provider call, for metrics.
pub trait CallObserver: Send + Sync {
    /// `method` is the RPC name (`"InstanceExists"`), `code` the gRPC code
    /// of the answer (`Ok` on success).
    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration);

    /// A call is about to be sent (for in-flight gauges).
    fn started(&self, method: &'static str) {
        let _ = method;
    }

    /// A failed call carried the contract's error `reason`
    /// (`"CLOUD_UNAVAILABLE"`), or `None` when it had none.
    fn failed(&self, method: &'static str, reason: Option<&'static str>) {
        let _ = (method, reason);
    }
}

/// Decides whether mutations may be sent (see `ClientOptions::mutation_gate`).
pub trait MutationGate: Send + Sync {
    fn allows_mutations(&self) -> bool;
}

impl std::fmt::Debug for dyn MutationGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MutationGate")
    }
}

impl std::fmt::Debug for dyn CallObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallObserver")
    }
}

impl From<Status> for ClientError {
    fn from(s: Status) -> Self {
        ClientError::Provider(ProviderError::from_status(&s))
    }
}

/// A zone answer: present, and both values usable as label values (they
/// become topology labels).
fn check_zone(zone: &Option<Zone>) -> Result<Zone, Violation> {
    let z = validate::required("zone", zone)?;
    validate::label_value("zone.failure_domain", &z.failure_domain)?;
    validate::label_value("zone.region", &z.region)?;
    Ok(z.clone())
}

fn invalid(method: &'static str) -> impl Fn(Violation) -> ClientError {
    move |violation| ClientError::InvalidResponse { method, violation }
}

/// What the provider said about itself on the current connection.
#[derive(Debug, Clone)]
pub struct Handshake {
    pub info: GetProviderInfoResponse,
    pub capabilities: BTreeSet<Capability>,
    pub annotations: AnnotationSchema,
    /// Which connection this handshake was made on.
    pub connection: u64,
}

impl Handshake {
    pub fn has(&self, c: Capability) -> bool {
        self.capabilities.contains(&c)
    }
}

/// A provider client. Cheap to clone; clones share the connection and the
/// handshake.
#[derive(Clone)]
pub struct ProviderClient {
    channel: Channel,
    connections: Arc<AtomicU64>,
    handshake: Arc<tokio::sync::Mutex<Option<Arc<Handshake>>>>,
    opts: ClientOptions,
    request_id: Option<Arc<str>>,
    mutations: Arc<KeyLocks>,
}

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

impl ProviderClient {
    /// A client for `unix:///path`. Does not connect: the first call does,
    /// and every call after a broken connection reconnects.
    pub fn connect_lazy(endpoint: &str, opts: ClientOptions) -> Result<Self, ClientError> {
        let path = socket_path(endpoint).map_err(|e| ClientError::Endpoint(e.to_string()))?;
        let connections = Arc::new(AtomicU64::new(0));
        let counter = connections.clone();
        // The URI only sets :authority, which is "localhost" as the contract
        // prescribes for Unix sockets.
        let mut endpoint =
            Endpoint::from_static("http://localhost").connect_timeout(opts.identity_timeout);
        if let Some(n) = opts.max_concurrency {
            endpoint = endpoint.concurrency_limit(n);
        }
        let channel = endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            let counter = counter.clone();
            async move {
                check_socket_permissions(&path)?;
                let stream = tokio::net::UnixStream::connect(&path).await?;
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }));
        Ok(ProviderClient {
            channel,
            connections,
            handshake: Default::default(),
            opts,
            request_id: None,
            mutations: Default::default(),
        })
    }

    /// A clone whose calls carry `request_id` instead of a generated one.
    pub fn with_request_id(&self, request_id: impl Into<Arc<str>>) -> Self {
        let mut c = self.clone();
        c.request_id = Some(request_id.into());
        c
    }

    /// How many connections have been made so far.
    pub fn connection_count(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    fn request<T>(&self, msg: T, timeout: Duration) -> Request<T> {
        let mut req = Request::new(msg);
        req.set_timeout(timeout);
        let id = match &self.request_id {
            Some(id) => id.to_string(),
            None => format!(
                "ccm-{}-{}",
                std::process::id(),
                NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)
            ),
        };
        if let Ok(v) = id.parse() {
            req.metadata_mut().insert(proto::REQUEST_ID_METADATA, v);
        }
        LAST_REQUEST_ID.with(|last| *last.borrow_mut() = id);
        req
    }

    /// Awaits one RPC, reports it to the observer, and unwraps the answer.
    async fn observed<T>(
        &self,
        method: &'static str,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, ClientError> {
        // `request()` ran on this thread while the call's future was built,
        // just before this first poll: its id is the one to log.
        let request_id = LAST_REQUEST_ID.with(|last| last.borrow().clone());
        if let Some(o) = &self.opts.observer {
            o.started(method);
        }
        let started = std::time::Instant::now();
        let result = call.await;
        match &result {
            Ok(_) => {
                tracing::debug!(method, request_id, elapsed = ?started.elapsed(), "provider call")
            }
            Err(status) => tracing::info!(
                method,
                request_id,
                code = ?status.code(),
                message = status.message(),
                elapsed = ?started.elapsed(),
                "provider call failed"
            ),
        }
        if let Some(o) = &self.opts.observer {
            let code = result
                .as_ref()
                .map_or_else(|s| s.code(), |_| tonic::Code::Ok);
            o.observe(method, code, started.elapsed());
            if let Err(status) = &result {
                let reason = ProviderError::from_status(status)
                    .reason()
                    .map(crate::error::reason_str);
                o.failed(method, reason);
            }
        }
        Ok(result?.into_inner())
    }

    fn identity(&self) -> identity_service_client::IdentityServiceClient<Channel> {
        identity_service_client::IdentityServiceClient::new(self.channel.clone())
            .max_decoding_message_size(self.opts.max_message_bytes)
            .max_encoding_message_size(self.opts.max_message_bytes)
    }

    fn instances(&self) -> instances_service_client::InstancesServiceClient<Channel> {
        instances_service_client::InstancesServiceClient::new(self.channel.clone())
            .max_decoding_message_size(self.opts.max_message_bytes)
            .max_encoding_message_size(self.opts.max_message_bytes)
    }

    fn lbs(&self) -> load_balancer_service_client::LoadBalancerServiceClient<Channel> {
        load_balancer_service_client::LoadBalancerServiceClient::new(self.channel.clone())
            .max_decoding_message_size(self.opts.max_message_bytes)
            .max_encoding_message_size(self.opts.max_message_bytes)
    }

    fn routes(&self) -> routes_service_client::RoutesServiceClient<Channel> {
        routes_service_client::RoutesServiceClient::new(self.channel.clone())
            .max_decoding_message_size(self.opts.max_message_bytes)
            .max_encoding_message_size(self.opts.max_message_bytes)
    }

    /// The handshake for the current connection, made now if the connection
    /// is new (first call, or the provider restarted).
    pub async fn handshake(&self) -> Result<Arc<Handshake>, ClientError> {
        let mut current = self.handshake.lock().await;
        let before = self.connection_count();
        if let Some(h) = current.as_ref()
            && h.connection == before
            && before != 0
        {
            return Ok(h.clone());
        }
        let t = self.opts.identity_timeout;
        let info = self
            .observed(
                "GetProviderInfo",
                self.identity()
                    .get_provider_info(self.request(GetProviderInfoRequest {}, t)),
            )
            .await?;
        check_info(&info).map_err(invalid("GetProviderInfo"))?;
        let caps = self
            .observed(
                "GetProviderCapabilities",
                self.identity().get_provider_capabilities(self.request(
                    GetProviderCapabilitiesRequest {
                        controller_version: env!("CARGO_PKG_VERSION").to_owned(),
                    },
                    t,
                )),
            )
            .await?;
        let capabilities = caps
            .capabilities
            .iter()
            // Unknown values come from a newer provider; ignoring them is
            // the safe reading.
            .filter_map(|c| Capability::try_from(*c).ok())
            .filter(|c| *c != Capability::Unspecified)
            .collect();
        let h = Arc::new(Handshake {
            info,
            capabilities,
            annotations: caps.annotations.unwrap_or_default(),
            connection: self.connection_count(),
        });
        tracing::info!(
            provider = %h.info.name,
            version = %h.info.vendor_version,
            capabilities = ?h.capabilities,
            connection = h.connection,
            "provider handshake"
        );
        *current = Some(h.clone());
        Ok(h)
    }

    async fn require(&self, c: Capability) -> Result<(), ClientError> {
        if self.handshake().await?.has(c) {
            Ok(())
        } else {
            Err(ClientError::Unsupported(c))
        }
    }

    pub async fn probe(&self) -> Result<Readiness, ClientError> {
        let r = self
            .observed(
                "Probe",
                self.identity()
                    .probe(self.request(ProbeRequest {}, self.opts.identity_timeout)),
            )
            .await?;
        match ProbeState::try_from(r.state) {
            Ok(ProbeState::Ready) => Ok(Readiness::Ready),
            Ok(ProbeState::Starting) => Ok(Readiness::Starting(r.message)),
            Ok(ProbeState::NotReady) => Ok(Readiness::NotReady(r.message)),
            // UNSPECIFIED or unknown: not ready, and say why.
            _ => Ok(Readiness::NotReady(format!(
                "provider answered an unspecified probe state ({}): {}",
                r.state, r.message
            ))),
        }
    }

    /// Never returns `NotExists` unless the provider said exactly that.
    pub async fn instance_exists(&self, node: NodeRef) -> Result<Existence, ClientError> {
        self.require(Capability::Instances).await?;
        let r = self
            .observed(
                "InstanceExists",
                self.instances().instance_exists(self.request(
                    InstanceExistsRequest { node: Some(node) },
                    self.opts.read_timeout,
                )),
            )
            .await?;
        match validate::known_enum::<InstanceExistence>("existence", r.existence)
            .map_err(invalid("InstanceExists"))?
        {
            InstanceExistence::Exists => Ok(Existence::Exists),
            InstanceExistence::NotExists => Ok(Existence::NotExists),
            InstanceExistence::Unspecified => unreachable!("known_enum rejects 0"),
        }
    }

    pub async fn instance_shutdown(&self, node: NodeRef) -> Result<ShutdownState, ClientError> {
        self.require(Capability::Instances).await?;
        let r = self
            .observed(
                "InstanceShutdown",
                self.instances().instance_shutdown(self.request(
                    InstanceShutdownRequest { node: Some(node) },
                    self.opts.read_timeout,
                )),
            )
            .await?;
        match validate::known_enum::<InstanceShutdownState>("state", r.state)
            .map_err(invalid("InstanceShutdown"))?
        {
            InstanceShutdownState::Running => Ok(ShutdownState::Running),
            InstanceShutdownState::ShutDown => Ok(ShutdownState::ShutDown),
            InstanceShutdownState::Unspecified => unreachable!("known_enum rejects 0"),
        }
    }

    pub async fn instance_metadata(&self, node: NodeRef) -> Result<InstanceMetadata, ClientError> {
        self.require(Capability::Instances).await?;
        let r = self
            .observed(
                "InstanceMetadata",
                self.instances().instance_metadata(self.request(
                    InstanceMetadataRequest { node: Some(node) },
                    self.opts.read_timeout,
                )),
            )
            .await?;
        let m = validate::required("metadata", &r.metadata)
            .map_err(invalid("InstanceMetadata"))?
            .clone();
        check_metadata(&m).map_err(invalid("InstanceMetadata"))?;
        Ok(m)
    }

    /// Asks the mutation gate, after the per-key lock: a call that waited
    /// for another is still refused if the gate closed meanwhile.
    fn gate(&self, method: &'static str) -> Result<(), ClientError> {
        match &self.opts.mutation_gate {
            Some(gate) if !gate.allows_mutations() => Err(ClientError::Refused { method }),
            _ => Ok(()),
        }
    }

    /// `None` when the provider says no load balancer exists.
    pub async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, ClientError> {
        self.require(Capability::LoadBalancers).await?;
        let r = self
            .observed(
                "GetLoadBalancer",
                self.lbs().get_load_balancer(self.request(
                    GetLoadBalancerRequest {
                        cluster_name: cluster_name.to_owned(),
                        service: Some(service),
                    },
                    self.opts.read_timeout,
                )),
            )
            .await?;
        let check = invalid("GetLoadBalancer");
        match validate::known_enum::<LoadBalancerExistence>("existence", r.existence)
            .map_err(&check)?
        {
            LoadBalancerExistence::Exists => {
                let status = r.status.unwrap_or_default();
                validate::load_balancer_status("status", &status).map_err(&check)?;
                Ok(Some(status))
            }
            LoadBalancerExistence::NotExists => Ok(None),
            LoadBalancerExistence::Unspecified => unreachable!("known_enum rejects 0"),
        }
    }

    pub async fn get_load_balancer_name(
        &self,
        cluster_name: &str,
        service: Service,
    ) -> Result<String, ClientError> {
        self.require(Capability::LoadBalancers).await?;
        let r = self
            .observed(
                "GetLoadBalancerName",
                self.lbs().get_load_balancer_name(self.request(
                    GetLoadBalancerNameRequest {
                        cluster_name: cluster_name.to_owned(),
                        service: Some(service),
                    },
                    self.opts.identity_timeout,
                )),
            )
            .await?;
        validate::name("name", &r.name).map_err(invalid("GetLoadBalancerName"))?;
        Ok(r.name)
    }

    pub async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: Service,
        nodes: Vec<NodeRef>,
    ) -> Result<LbAnswer<LoadBalancerStatus>, ClientError> {
        self.require(Capability::LoadBalancers).await?;
        let _one_at_a_time = self
            .mutations
            .lock(format!("lb/{cluster_name}/{}", service.uid))
            .await;
        self.gate("EnsureLoadBalancer")?;
        let r = self
            .observed(
                "EnsureLoadBalancer",
                self.lbs().ensure_load_balancer(self.request(
                    EnsureLoadBalancerRequest {
                        cluster_name: cluster_name.to_owned(),
                        service: Some(service),
                        nodes,
                    },
                    self.opts.mutation_timeout,
                )),
            )
            .await?;
        let check = invalid("EnsureLoadBalancer");
        let outcome = match validate::required("result", &r.result).map_err(&check)? {
            ensure_load_balancer_response::Result::Status(s) => {
                validate::load_balancer_status("result.status", s).map_err(&check)?;
                LbOutcome::Done(s.clone())
            }
            ensure_load_balancer_response::Result::ImplementedElsewhere(e) => {
                LbOutcome::ImplementedElsewhere(e.message.clone())
            }
        };
        Ok(LbAnswer {
            outcome,
            warnings: r.warnings,
        })
    }

    pub async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: Service,
        nodes: Vec<NodeRef>,
    ) -> Result<LbAnswer<()>, ClientError> {
        self.require(Capability::LoadBalancers).await?;
        let _one_at_a_time = self
            .mutations
            .lock(format!("lb/{cluster_name}/{}", service.uid))
            .await;
        self.gate("UpdateLoadBalancer")?;
        let r = self
            .observed(
                "UpdateLoadBalancer",
                self.lbs().update_load_balancer(self.request(
                    UpdateLoadBalancerRequest {
                        cluster_name: cluster_name.to_owned(),
                        service: Some(service),
                        nodes,
                    },
                    self.opts.mutation_timeout,
                )),
            )
            .await?;
        let outcome =
            match validate::required("result", &r.result).map_err(invalid("UpdateLoadBalancer"))? {
                update_load_balancer_response::Result::Updated(_) => LbOutcome::Done(()),
                update_load_balancer_response::Result::ImplementedElsewhere(e) => {
                    LbOutcome::ImplementedElsewhere(e.message.clone())
                }
            };
        Ok(LbAnswer {
            outcome,
            warnings: r.warnings,
        })
    }

    /// Returns the provider's warnings.
    pub async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: Service,
    ) -> Result<Vec<Warning>, ClientError> {
        self.require(Capability::LoadBalancers).await?;
        let _one_at_a_time = self
            .mutations
            .lock(format!("lb/{cluster_name}/{}", service.uid))
            .await;
        self.gate("EnsureLoadBalancerDeleted")?;
        let r = self
            .observed(
                "EnsureLoadBalancerDeleted",
                self.lbs().ensure_load_balancer_deleted(self.request(
                    EnsureLoadBalancerDeletedRequest {
                        cluster_name: cluster_name.to_owned(),
                        service: Some(service),
                    },
                    self.opts.mutation_timeout,
                )),
            )
            .await?;
        Ok(r.warnings)
    }

    /// Every load balancer of `cluster_name`, following all pages.
    pub async fn list_load_balancers(
        &self,
        cluster_name: &str,
    ) -> Result<Vec<LoadBalancerEntry>, ClientError> {
        self.require(Capability::ListLoadBalancers).await?;
        let mut out = Vec::new();
        let mut pages = PageGuard::default();
        let mut token = String::new();
        loop {
            let r = self
                .observed(
                    "ListLoadBalancers",
                    self.lbs().list_load_balancers(self.request(
                        ListLoadBalancersRequest {
                            cluster_name: cluster_name.to_owned(),
                            page_size: self.opts.page_size,
                            page_token: token.clone(),
                        },
                        self.opts.read_timeout,
                    )),
                )
                .await?;
            pages
                .check(
                    r.load_balancers.len(),
                    self.opts.page_size,
                    &r.next_page_token,
                )
                .map_err(invalid("ListLoadBalancers"))?;
            for (i, lb) in r.load_balancers.into_iter().enumerate() {
                validate::name(&format!("load_balancers[{i}].service_uid"), &lb.service_uid)
                    .map_err(invalid("ListLoadBalancers"))?;
                out.push(LoadBalancerEntry {
                    name: lb.name,
                    service_uid: lb.service_uid,
                    service_namespace: lb.service_namespace,
                    service_name: lb.service_name,
                    status: lb.status,
                });
            }
            if r.next_page_token.is_empty() {
                return Ok(out);
            }
            token = r.next_page_token;
        }
    }

    /// Every route of `cluster_name`, following all pages.
    pub async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>, ClientError> {
        self.require(Capability::Routes).await?;
        let mut out = Vec::new();
        let mut pages = PageGuard::default();
        let mut token = String::new();
        loop {
            let r = self
                .observed(
                    "ListRoutes",
                    self.routes().list_routes(self.request(
                        ListRoutesRequest {
                            cluster_name: cluster_name.to_owned(),
                            page_size: self.opts.page_size,
                            page_token: token.clone(),
                        },
                        self.opts.read_timeout,
                    )),
                )
                .await?;
            pages
                .check(r.routes.len(), self.opts.page_size, &r.next_page_token)
                .map_err(invalid("ListRoutes"))?;
            for (i, route) in r.routes.into_iter().enumerate() {
                validate::route(&format!("routes[{i}]"), &Some(route.clone()))
                    .map_err(invalid("ListRoutes"))?;
                out.push(route);
            }
            if r.next_page_token.is_empty() {
                return Ok(out);
            }
            token = r.next_page_token;
        }
    }

    pub async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: Route,
    ) -> Result<Option<Route>, ClientError> {
        self.require(Capability::Routes).await?;
        let _one_at_a_time = self
            .mutations
            .lock(format!("route/{cluster_name}/{}", route.destination_cidr))
            .await;
        self.gate("CreateRoute")?;
        let r = self
            .observed(
                "CreateRoute",
                self.routes().create_route(self.request(
                    CreateRouteRequest {
                        cluster_name: cluster_name.to_owned(),
                        name_hint: name_hint.to_owned(),
                        route: Some(route),
                    },
                    self.opts.mutation_timeout,
                )),
            )
            .await?;
        Ok(r.route)
    }

    pub async fn delete_route(&self, cluster_name: &str, route: Route) -> Result<(), ClientError> {
        self.require(Capability::Routes).await?;
        let _one_at_a_time = self
            .mutations
            .lock(format!("route/{cluster_name}/{}", route.destination_cidr))
            .await;
        self.gate("DeleteRoute")?;
        self.observed(
            "DeleteRoute",
            self.routes().delete_route(self.request(
                DeleteRouteRequest {
                    cluster_name: cluster_name.to_owned(),
                    route: Some(route),
                },
                self.opts.mutation_timeout,
            )),
        )
        .await?;
        Ok(())
    }

    pub async fn zone_by_provider_id(&self, provider_id: &str) -> Result<Zone, ClientError> {
        self.require(Capability::Zones).await?;
        let r = self
            .observed(
                "GetZoneByProviderId",
                zones_service_client::ZonesServiceClient::new(self.channel.clone())
                    .get_zone_by_provider_id(self.request(
                        GetZoneByProviderIdRequest {
                            provider_id: provider_id.to_owned(),
                        },
                        self.opts.read_timeout,
                    )),
            )
            .await?;
        check_zone(&r.zone).map_err(invalid("GetZoneByProviderId"))
    }

    pub async fn zone_by_node_name(&self, node_name: &str) -> Result<Zone, ClientError> {
        self.require(Capability::Zones).await?;
        let r = self
            .observed(
                "GetZoneByNodeName",
                zones_service_client::ZonesServiceClient::new(self.channel.clone())
                    .get_zone_by_node_name(self.request(
                        GetZoneByNodeNameRequest {
                            node_name: node_name.to_owned(),
                        },
                        self.opts.read_timeout,
                    )),
            )
            .await?;
        check_zone(&r.zone).map_err(invalid("GetZoneByNodeName"))
    }

    /// The labels the volume's PersistentVolume should carry (validated as
    /// Kubernetes labels); empty when the provider has none.
    pub async fn get_volume_labels(
        &self,
        volume: Volume,
    ) -> Result<std::collections::BTreeMap<String, String>, ClientError> {
        self.require(Capability::VolumeLabels).await?;
        let r = self
            .observed(
                "GetVolumeLabels",
                volumes_service_client::VolumesServiceClient::new(self.channel.clone())
                    .get_volume_labels(self.request(
                        GetVolumeLabelsRequest {
                            volume: Some(volume),
                        },
                        self.opts.read_timeout,
                    )),
            )
            .await?;
        validate::labels("labels", &r.labels).map_err(invalid("GetVolumeLabels"))?;
        Ok(r.labels.into_iter().collect())
    }

    pub async fn list_clusters(&self) -> Result<Vec<String>, ClientError> {
        self.require(Capability::Clusters).await?;
        Ok(self
            .observed(
                "ListClusters",
                clusters_service_client::ClustersServiceClient::new(self.channel.clone())
                    .list_clusters(self.request(ListClustersRequest {}, self.opts.read_timeout)),
            )
            .await?
            .cluster_names)
    }

    pub async fn master(&self, cluster_name: &str) -> Result<String, ClientError> {
        self.require(Capability::Clusters).await?;
        let r = self
            .observed(
                "Master",
                clusters_service_client::ClustersServiceClient::new(self.channel.clone()).master(
                    self.request(
                        MasterRequest {
                            cluster_name: cluster_name.to_owned(),
                        },
                        self.opts.read_timeout,
                    ),
                ),
            )
            .await?;
        validate::name("address", &r.address).map_err(invalid("Master"))?;
        Ok(r.address)
    }
}

/// Refuses a socket that users other than the owner and group can reach:
/// whoever can connect can drive the cloud, so the provider must create it
/// 0600 or 0660 (the SDK does).
fn check_socket_permissions(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "provider socket {} is reachable by other users (mode {mode:04o}); it must be 0600 or 0660",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// One async mutex per idempotency key, so a client never has two
/// mutations of the same load balancer or route in flight (the contract's
/// promise to providers). Entries go away with their last user.
#[derive(Default)]
struct KeyLocks {
    locks: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Weak<tokio::sync::Mutex<()>>>,
    >,
}

impl KeyLocks {
    async fn lock(&self, key: String) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(&key).and_then(std::sync::Weak::upgrade) {
                Some(l) => l,
                None => {
                    let l = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(key, Arc::downgrade(&l));
                    l
                }
            }
        };
        lock.lock_owned().await
    }
}

/// Stops a provider that paginates wrongly from looping the client forever.
#[derive(Default)]
struct PageGuard {
    pages: usize,
    tokens: std::collections::HashSet<String>,
}

const MAX_PAGES: usize = 100_000;

impl PageGuard {
    fn check(&mut self, len: usize, asked: i32, next: &str) -> Checked {
        self.pages += 1;
        if asked > 0 && len > asked as usize {
            return Err(Violation {
                field: "page_size".into(),
                problem: format!("asked for at most {asked} entries, got {len}"),
            });
        }
        if !next.is_empty() && !self.tokens.insert(next.to_owned()) {
            return Err(Violation {
                field: "next_page_token".into(),
                problem: "repeats an earlier token".into(),
            });
        }
        if self.pages > MAX_PAGES {
            return Err(Violation {
                field: "next_page_token".into(),
                problem: format!("more than {MAX_PAGES} pages"),
            });
        }
        Ok(())
    }
}

fn check_info(info: &GetProviderInfoResponse) -> Checked {
    validate::name("name", &info.name)?;
    if info.name.len() > 63 {
        return Err(Violation {
            field: "name".into(),
            problem: "longer than 63 characters".into(),
        });
    }
    validate::name("provider_id_scheme", &info.provider_id_scheme)?;
    Ok(())
}

/// What both sides check of an `InstanceMetadata`.
pub(crate) fn check_metadata(m: &InstanceMetadata) -> Checked {
    validate::provider_id("metadata.provider_id", &m.provider_id)?;
    // These become label values on the Node.
    validate::label_value("metadata.instance_type", &m.instance_type)?;
    validate::label_value("metadata.zone", &m.zone)?;
    validate::label_value("metadata.region", &m.region)?;
    validate::node_addresses("metadata.node_addresses", &m.node_addresses)?;
    validate::labels("metadata.additional_labels", &m.additional_labels)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_mutation_per_key_at_a_time() {
        let locks = KeyLocks::default();
        let first = locks.lock("lb/k/uid-1".into()).await;
        // Another key is not held up.
        let other = locks.lock("lb/k/uid-2".into()).await;
        // The same key waits for the first holder.
        let second =
            tokio::time::timeout(Duration::from_millis(50), locks.lock("lb/k/uid-1".into())).await;
        assert!(second.is_err(), "second lock on the same key must wait");
        drop(first);
        let _second = tokio::time::timeout(Duration::from_secs(5), locks.lock("lb/k/uid-1".into()))
            .await
            .expect("released");
        drop(other);
        let live = locks
            .locks
            .lock()
            .unwrap()
            .values()
            .filter(|w| w.strong_count() > 0)
            .count();
        assert_eq!(live, 1, "only the held key stays");
    }
}
