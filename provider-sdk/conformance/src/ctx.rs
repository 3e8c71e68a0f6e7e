//! The state shared by the cases of one run: the connection, what the
//! provider said about itself, the run id, fixtures, what the run created,
//! and the assertion helpers.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccm_provider_sdk::error::reason_str;
use ccm_provider_sdk::proto::{
    self, Capability, ErrorReason, GetProviderCapabilitiesRequest, GetProviderInfoRequest,
    GetProviderInfoResponse, NodeAddress, NodeAddressType, NodeRef, Protocol, Route, Service,
    ServicePort, SessionAffinity, TrafficPolicy,
};
use ccm_provider_sdk::{ContractVersion, MAX_MESSAGE_BYTES, ProviderError};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt;

use crate::{Config, Outcome};

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Fail(String),
    Skip(String),
}

pub(crate) type CaseResult<T = ()> = Result<T, Verdict>;

macro_rules! fail {
    ($($t:tt)*) => {
        return Err($crate::ctx::Verdict::Fail(format!($($t)*)))
    };
}

macro_rules! check {
    ($cond:expr, $($t:tt)*) => {
        if !$cond {
            return Err($crate::ctx::Verdict::Fail(format!($($t)*)));
        }
    };
}

/// One RPC on a fresh raw client, retried while the provider answers
/// RETRY_AFTER or OPERATION_PENDING (bounded by the case timeout).
macro_rules! rpc {
    ($cx:expr, $client:ident . $method:ident ( $msg:expr )) => {{
        let cx = $cx;
        let msg = $msg;
        cx.retrying(|| {
            let mut c = cx.$client();
            let r = cx.req(msg.clone());
            async move { c.$method(r).await }
        })
        .await
    }};
}

/// One RPC on a fresh raw client, no retries.
macro_rules! once {
    ($cx:expr, $client:ident . $method:ident ( $msg:expr )) => {{
        let cx = $cx;
        let r = cx.req($msg);
        cx.$client().$method(r).await.map(|r| r.into_inner())
    }};
}

pub(crate) use {check, fail, once, rpc};

/// Which error reasons a negative case accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reasons<'a> {
    /// The status MUST carry an ErrorInfo with one of these reasons.
    Required(&'a [ErrorReason]),
    /// An ErrorInfo, if present, must carry one of these reasons.
    IfPresent(&'a [ErrorReason]),
}

pub(crate) const INVALID_REASONS: Reasons<'static> = Reasons::IfPresent(&[
    ErrorReason::InvalidRequest,
    ErrorReason::InvalidServiceSpec,
    ErrorReason::InvalidAnnotation,
]);

/// Everything the run created, to delete at the end.
#[derive(Default)]
struct Created {
    services: BTreeMap<String, Service>,
    routes: BTreeMap<String, Route>,
}

pub(crate) struct Ctx {
    pub channel: Channel,
    pub path: PathBuf,
    pub config: Config,
    pub run_id: String,
    pub cluster: String,
    pub info: GetProviderInfoResponse,
    /// `info.contract_version`, parsed; `None` when it does not parse.
    pub declared: Option<ContractVersion>,
    /// Raw capability values, as advertised (duplicates and unknowns kept).
    pub caps: Vec<i32>,
    known_node: tokio::sync::OnceCell<Result<NodeRef, Verdict>>,
    second_known_node: tokio::sync::OnceCell<Result<NodeRef, Verdict>>,
    created: Mutex<Created>,
    seq: AtomicU32,
    /// Where this run's /28 route CIDRs start inside 100.64.0.0/10.
    route_base: u32,
}

fn generate_run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mixed = (nanos as u64) ^ ((std::process::id() as u64) << 32) ^ (nanos >> 64) as u64;
    // FNV-style mixing so consecutive runs differ in the leading digits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in mixed.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", h as u32)
}

fn hash32(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// A channel to the Unix socket at `path`, with `:authority` = `authority`.
pub(crate) fn uds_channel(path: PathBuf, authority: &str) -> Result<Channel, String> {
    let endpoint = Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| format!("authority {authority:?}: {e}"))?
        .connect_timeout(Duration::from_secs(5));
    Ok(
        endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        })),
    )
}

/// "code NotFound, reason X, message "...""; for failure messages.
pub(crate) fn describe(s: &Status) -> String {
    let reason = match s.get_error_details().error_info() {
        Some(info) => format!("reason {} (domain {})", info.reason, info.domain),
        None => "no ErrorInfo".to_owned(),
    };
    format!("code {:?}, {reason}, message {:?}", s.code(), s.message())
}

fn short<T: Debug>(v: &T) -> String {
    let mut s = format!("{v:?}");
    if s.len() > 300 {
        let mut end = 300;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

/// The answer, or a failure naming the call and what came back.
pub(crate) fn ok<T>(what: &str, res: Result<T, Status>) -> CaseResult<T> {
    res.map_err(|s| Verdict::Fail(format!("{what}: expected OK, got {}", describe(&s))))
}

/// Asserts `res` is an error with one of `codes` and reasons per `reasons`.
pub(crate) fn expect_error<T: Debug>(
    what: &str,
    res: Result<T, Status>,
    codes: &[Code],
    reasons: Reasons<'_>,
) -> CaseResult {
    let names = |codes: &[Code]| {
        codes
            .iter()
            .map(|c| format!("{c:?}"))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    let status = match res {
        Ok(v) => fail!(
            "{what}: expected code {}, got OK: {}",
            names(codes),
            short(&v)
        ),
        Err(s) => s,
    };
    check!(
        codes.contains(&status.code()),
        "{what}: expected code {}, got {}",
        names(codes),
        describe(&status)
    );
    let (allowed, required) = match reasons {
        Reasons::Required(r) => (r, true),
        Reasons::IfPresent(r) => (r, false),
    };
    let allowed_names = allowed
        .iter()
        .map(|r| reason_str(*r))
        .collect::<Vec<_>>()
        .join(" or ");
    match status.get_error_details().error_info() {
        None if required => fail!(
            "{what}: expected ErrorInfo with reason {allowed_names}, got {}",
            describe(&status)
        ),
        None => {}
        Some(info) => {
            check!(
                info.domain == proto::ERROR_DOMAIN,
                "{what}: expected ErrorInfo domain {:?}, got {}",
                proto::ERROR_DOMAIN,
                describe(&status)
            );
            check!(
                allowed.iter().any(|r| reason_str(*r) == info.reason),
                "{what}: expected reason {allowed_names}, got {}",
                describe(&status)
            );
        }
    }
    Ok(())
}

impl Ctx {
    /// Connects and fetches identity and capabilities. On failure returns
    /// (run id, cluster name, why).
    pub async fn connect(config: Config) -> Result<Ctx, (String, String, String)> {
        let run_id = config.run_id.clone().unwrap_or_else(generate_run_id);
        let cluster = config
            .cluster_name
            .clone()
            .unwrap_or_else(|| format!("conformance-{run_id}"));
        let fail = |why: String| (run_id.clone(), cluster.clone(), why);
        let path =
            ccm_provider_sdk::socket_path(&config.endpoint).map_err(|e| fail(e.to_string()))?;
        let channel = uds_channel(path.clone(), "localhost").map_err(fail)?;
        let mut cx = Ctx {
            channel,
            path,
            config,
            run_id: run_id.clone(),
            cluster: cluster.clone(),
            info: Default::default(),
            declared: None,
            caps: Vec::new(),
            known_node: Default::default(),
            second_known_node: Default::default(),
            created: Default::default(),
            seq: AtomicU32::new(0),
            route_base: hash32(&run_id) % ((1 << 18) - 4096),
        };
        cx.info = cx
            .identity()
            .get_provider_info(cx.req(GetProviderInfoRequest {}))
            .await
            .map_err(|s| fail(format!("GetProviderInfo: {}", describe(&s))))?
            .into_inner();
        cx.declared = ContractVersion::parse(&cx.info.contract_version);
        if let Some(id) = &cx.config.missing_provider_id {
            let owned = ccm_provider_sdk::validate::owned_schemes(&cx.info);
            if !ccm_provider_sdk::validate::is_owned_provider_id(id, &owned) {
                return Err(fail(format!(
                    "--missing-provider-id {id:?} is not <scheme>://<id> with a scheme the provider owns ({})",
                    owned.join(", ")
                )));
            }
        }
        cx.caps = cx
            .identity()
            .get_provider_capabilities(cx.req(GetProviderCapabilitiesRequest {
                controller_version: format!("conformance-{}", env!("CARGO_PKG_VERSION")),
            }))
            .await
            .map_err(|s| fail(format!("GetProviderCapabilities: {}", describe(&s))))?
            .into_inner()
            .capabilities;
        Ok(cx)
    }

    pub fn has(&self, c: Capability) -> bool {
        self.caps.contains(&(c as i32))
    }

    pub fn next(&self) -> u32 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub fn req<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        r.set_timeout(self.config.timeout);
        let id = format!("conformance-{}-{}", self.run_id, self.next());
        if let Ok(v) = id.parse() {
            r.metadata_mut().insert(proto::REQUEST_ID_METADATA, v);
        }
        r
    }

    /// Calls `f` until it answers something other than RETRY_AFTER or
    /// OPERATION_PENDING; the case timeout bounds the loop.
    pub async fn retrying<T, F, Fut>(&self, mut f: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        loop {
            match f().await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) => {
                    let e = ProviderError::from_status(&s);
                    let wait = match e.reason() {
                        Some(ErrorReason::RetryAfter) => {
                            e.retry_after_delay().unwrap_or(Duration::from_secs(1))
                        }
                        Some(ErrorReason::OperationPending) => Duration::from_secs(1),
                        _ => return Err(s),
                    };
                    tokio::time::sleep(
                        wait.clamp(Duration::from_millis(50), Duration::from_secs(30)),
                    )
                    .await;
                }
            }
        }
    }

    pub fn identity(&self) -> proto::identity_service_client::IdentityServiceClient<Channel> {
        proto::identity_service_client::IdentityServiceClient::new(self.channel.clone())
    }

    pub fn instances(&self) -> proto::instances_service_client::InstancesServiceClient<Channel> {
        proto::instances_service_client::InstancesServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    pub fn lb(&self) -> proto::load_balancer_service_client::LoadBalancerServiceClient<Channel> {
        proto::load_balancer_service_client::LoadBalancerServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    pub fn routes(&self) -> proto::routes_service_client::RoutesServiceClient<Channel> {
        proto::routes_service_client::RoutesServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    pub fn zones(&self) -> proto::zones_service_client::ZonesServiceClient<Channel> {
        proto::zones_service_client::ZonesServiceClient::new(self.channel.clone())
    }

    pub fn volumes(&self) -> proto::volumes_service_client::VolumesServiceClient<Channel> {
        proto::volumes_service_client::VolumesServiceClient::new(self.channel.clone())
    }

    pub fn clusters(&self) -> proto::clusters_service_client::ClustersServiceClient<Channel> {
        proto::clusters_service_client::ClustersServiceClient::new(self.channel.clone())
    }

    // ---- fixtures ----

    /// A valid synthetic Service with a uid unique to this run and call.
    pub fn service(&self, tag: &str) -> Service {
        let n = self.next();
        Service {
            namespace: "conformance".into(),
            name: format!("conformance-{}-{tag}", self.run_id),
            // UUID-shaped; the run id and the sequence both fall within the
            // first 31 characters, which default LB names keep.
            uid: format!("{}-{n:04x}-4c0f-8c0f-000000000000", self.run_id),
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp as i32,
                port: 80,
                node_port: 30080,
                ..Default::default()
            }],
            external_traffic_policy: TrafficPolicy::Cluster as i32,
            session_affinity: SessionAffinity::None as i32,
            ..Default::default()
        }
    }

    /// Synthetic nodes named after the run: `conformance-<run>-node-<i>`.
    pub fn nodes(&self, range: std::ops::Range<usize>) -> Vec<NodeRef> {
        range.map(|i| self.node(i)).collect()
    }

    pub fn node(&self, i: usize) -> NodeRef {
        NodeRef {
            name: format!("conformance-{}-node-{i}", self.run_id),
            uid: format!("{}-{:04x}-4e0d-8e0d-000000000000", self.run_id, i & 0xffff),
            addresses: vec![NodeAddress {
                r#type: NodeAddressType::InternalIp as i32,
                address: format!("100.64.{}.{}", (i / 250) % 250, i % 250 + 1),
            }],
            ..Default::default()
        }
    }

    /// A node whose instance cannot exist: `--missing-provider-id`, or an
    /// invented one of the provider's scheme.
    pub fn missing_node(&self) -> NodeRef {
        let name = format!("conformance-missing-{}", self.run_id);
        NodeRef {
            provider_id: match &self.config.missing_provider_id {
                Some(id) => id.clone(),
                None => format!("{}://{name}", self.info.provider_id_scheme),
            },
            name,
            ..Default::default()
        }
    }

    /// A /28 in 100.64.0.0/10 unique to this run and call.
    pub fn route_cidr(&self) -> String {
        let slot = (self.route_base + self.next()) & 0x3_ffff;
        let addr = std::net::Ipv4Addr::from(0x6440_0000u32 | (slot << 4));
        format!("{addr}/28")
    }

    /// The node the positive instance cases use: the first `--node`, or
    /// `conformance-node-1` if it exists (skip otherwise).
    pub async fn known_node(&self) -> CaseResult<NodeRef> {
        self.known_node
            .get_or_init(|| self.resolve_node(0))
            .await
            .clone()
    }

    /// A second existing node (route conflicts need two targets): the
    /// second `--node`, or `conformance-node-2` if it exists.
    pub async fn second_known_node(&self) -> CaseResult<NodeRef> {
        self.second_known_node
            .get_or_init(|| self.resolve_node(1))
            .await
            .clone()
    }

    async fn resolve_node(&self, i: usize) -> CaseResult<NodeRef> {
        let (name, explicit) = match self.config.nodes.get(i) {
            Some(n) => (n.clone(), true),
            None => (format!("conformance-node-{}", i + 1), false),
        };
        let node = NodeRef {
            name: name.clone(),
            ..Default::default()
        };
        if !self.has(Capability::Instances) {
            // Nothing to confirm it with; routes-only providers get the name.
            return Ok(node);
        }
        let r = once!(
            self,
            instances.instance_exists(proto::InstanceExistsRequest {
                node: Some(node.clone())
            })
        );
        let r = ok(&format!("InstanceExists({name})"), r)?;
        match proto::InstanceExistence::try_from(r.existence) {
            Ok(proto::InstanceExistence::Exists) => Ok(node),
            Ok(proto::InstanceExistence::NotExists) if !explicit => Err(Verdict::Skip(format!(
                "no known node: {name:?} does not exist (pass --node NAME{})",
                if i > 0 { " twice" } else { "" }
            ))),
            _ => Err(Verdict::Fail(format!(
                "InstanceExists({name}): expected EXISTS for a known node, got {}",
                r.existence
            ))),
        }
    }

    // ---- bookkeeping of what the run created ----

    pub fn track_service(&self, s: &Service) {
        let mut c = self.created.lock();
        c.services.insert(s.uid.clone(), s.clone());
    }

    pub fn untrack_service(&self, s: &Service) {
        let mut c = self.created.lock();
        c.services.remove(&s.uid);
    }

    pub fn track_route(&self, r: &Route) {
        let mut c = self.created.lock();
        c.routes.insert(r.destination_cidr.clone(), r.clone());
    }

    pub fn untrack_route(&self, r: &Route) {
        let mut c = self.created.lock();
        c.routes.remove(&r.destination_cidr);
    }

    /// Deletes what the run created and did not see deleted. `None` when
    /// there was nothing to clean up.
    pub async fn cleanup(&self) -> Option<Outcome> {
        let created = std::mem::take(&mut *self.created.lock());
        if created.services.is_empty() && created.routes.is_empty() {
            return None;
        }
        let mut problems = Vec::new();
        for (uid, service) in created.services {
            let msg = proto::EnsureLoadBalancerDeletedRequest {
                cluster_name: self.cluster.clone(),
                service: Some(service),
            };
            let r = tokio::time::timeout(self.config.case_timeout, async {
                rpc!(self, lb.ensure_load_balancer_deleted(msg))
            })
            .await;
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(s)) => problems.push(format!(
                    "EnsureLoadBalancerDeleted(uid {uid}): {}",
                    describe(&s)
                )),
                Err(_) => problems.push(format!("EnsureLoadBalancerDeleted(uid {uid}): timed out")),
            }
        }
        for (cidr, route) in created.routes {
            let msg = proto::DeleteRouteRequest {
                cluster_name: self.cluster.clone(),
                route: Some(route),
            };
            let r = tokio::time::timeout(self.config.case_timeout, async {
                rpc!(self, routes.delete_route(msg))
            })
            .await;
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(s)) => problems.push(format!("DeleteRoute({cidr}): {}", describe(&s))),
                Err(_) => problems.push(format!("DeleteRoute({cidr}): timed out")),
            }
        }
        Some(if problems.is_empty() {
            Outcome::Passed
        } else {
            Outcome::Failed(problems.join("; "))
        })
    }
}
