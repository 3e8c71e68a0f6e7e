//! The traits a provider implements: one per contract service. Only
//! [`Identity`] is required; every other service is opted into by handing an
//! implementation to [`crate::ProviderServer`], which also derives the
//! advertised capabilities from what was handed over.
//!
//! Requests are validated by the SDK before a method is called (REQUIRED
//! fields present, enums known, IPs and CIDRs parse), so implementations can
//! rely on them. Methods receive a [`CallContext`] with the controller's
//! request id and deadline; the future is dropped when the caller gives up.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::Notify;

use crate::ProviderResult;
use crate::fencing::FencingToken;
use crate::node_set::NodeSet;
use crate::proto::{
    AnnotationSchema, InstanceMetadata, LoadBalancerStatus, NodeRef, Route, Service, Volume,
    Warning, Zone,
};

/// Per-call information from the SDK.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The controller's `x-ccm-request-id`, or a generated one.
    pub request_id: String,
    /// The caller's W3C trace id (32 hex digits) from a valid
    /// `traceparent`, to join its trace; `None` without one.
    pub trace_id: Option<String>,
    /// When the caller stops waiting, if it said.
    pub deadline: Option<Instant>,
    /// Mutations from a controller running with leader election: who sent
    /// it, and in which term. A provider whose cloud offers conditional
    /// writes or tags records the newest token per cluster (or on the
    /// resource) and refuses an older one with
    /// [`ProviderError::not_leader`](crate::ProviderError::not_leader).
    pub fencing_token: Option<FencingToken>,
    /// Fires when the caller gives up (cancels, or its deadline passes)
    /// before the answer. The method's future is dropped then too; this is
    /// for work it handed to other tasks (a cloud operation being polled).
    pub cancellation: Cancellation,
    /// What the provider wants the user to know about the call's object;
    /// see [`CallContext::warn`].
    pub warnings: Warnings,
}

impl CallContext {
    /// Tells the user something about the Node of an `instance_metadata`
    /// call (contract 1.2.0): the controller publishes each warning as a
    /// Warning Event on the Node. `reason` is CamelCase, for example
    /// "MaintenanceScheduled"; no secrets in `message`. At most
    /// [`crate::validate::MAX_NODE_WARNINGS`]: the SDK refuses to send an
    /// answer with more, or with a malformed one, as a provider bug. Other
    /// methods ignore these: load balancer mutations return theirs in
    /// [`LbAnswer`].
    pub fn warn(&self, reason: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Warning {
            reason: reason.into(),
            message: message.into(),
        });
    }
}

/// Warnings collected during one call. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<std::sync::Mutex<Vec<Warning>>>);

impl Warnings {
    pub fn push(&self, w: Warning) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(w);
    }

    /// The warnings so far, leaving none.
    pub fn take(&self) -> Vec<Warning> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Whether the caller of one RPC has given up. Clones share the state.
#[derive(Debug, Clone, Default)]
pub struct Cancellation(Arc<CancellationState>);

#[derive(Debug, Default)]
struct CancellationState {
    cancelled: AtomicBool,
    notify: Notify,
}

impl Cancellation {
    /// True once the caller has given up.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// Completes when the caller gives up (never, if the call completes).
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }

    /// Marks the call as given up and wakes every waiter.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }
}

/// Who the provider is (`GetProviderInfo`).
#[derive(Debug, Clone, Default)]
pub struct ProviderInfo {
    /// DNS-1123 label, at most 63 characters.
    pub name: String,
    pub vendor_version: String,
    /// The providerID scheme, the part before `://`: of the providerIDs
    /// the provider sets by default.
    pub provider_id_scheme: String,
    /// Further schemes the provider owns (contract 1.2.0), for a cloud with
    /// several kinds of instance; see [`ProviderInfo::also_owns`].
    pub other_provider_id_schemes: Vec<String>,
    /// Whether resources are scoped by cluster name; `None` means true.
    pub has_cluster_id: Option<bool>,
    /// Diagnostics only; no secrets.
    pub manifest: std::collections::BTreeMap<String, String>,
    /// The `spec.loadBalancerClass` values whose Services the provider
    /// serves (contract 1.3.0); see [`ProviderInfo::serves_class`].
    pub load_balancer_classes: Vec<String>,
    /// Whether the provider serves Services without a class when the
    /// controller makes it the default (contract 1.3.0): `None` says
    /// nothing (served, as before 1.3.0), `Some(false)` declines them; see
    /// [`ProviderInfo::declines_unclassed`].
    pub serves_unclassed: Option<bool>,
    /// The KEP-5778 platforms the provider manages (contract 1.3.0); see
    /// [`ProviderInfo::manages_platform`].
    pub platforms: Vec<String>,
}

impl ProviderInfo {
    /// Owns providerIDs of `scheme` too (for example "hrobot" beside
    /// "hcloud"): a Node with one reaches the provider's [`Instances`]
    /// rather than being refused as another cloud's.
    pub fn also_owns(mut self, scheme: impl Into<String>) -> Self {
        self.other_provider_id_schemes.push(scheme.into());
        self
    }

    /// `GetProviderInfo.provider_id_schemes`: empty for one scheme (as
    /// before 1.2.0), else `provider_id_scheme` and then the others.
    pub fn provider_id_schemes(&self) -> Vec<String> {
        if self.other_provider_id_schemes.is_empty() {
            return Vec::new();
        }
        std::iter::once(&self.provider_id_scheme)
            .chain(&self.other_provider_id_schemes)
            .cloned()
            .collect()
    }

    /// Serves the LoadBalancer Services of `class` (for example
    /// "example.com/cloud", a DNS-subdomain prefix required): a controller
    /// running several providers sends them to this one (contract 1.3.0,
    /// `load_balancer_classes`; at most 32).
    pub fn serves_class(mut self, class: impl Into<String>) -> Self {
        self.load_balancer_classes.push(class.into());
        self
    }

    /// Never serves LoadBalancer Services without a class, even as the
    /// controller's default provider (contract 1.3.0, `unclassed_services`
    /// DECLINED): for a provider that implements only its named classes.
    pub fn declines_unclassed(mut self) -> Self {
        self.serves_unclassed = Some(false);
        self
    }

    /// Manages the Nodes of KEP-5778 platform `platform` (a DNS-1123
    /// label): a Node without a providerID whose
    /// `cloudprovider.kubernetes.io/platform` label or annotation names it
    /// is this provider's to initialise (contract 1.3.0, `platforms`; at
    /// most 16).
    pub fn manages_platform(mut self, platform: impl Into<String>) -> Self {
        self.platforms.push(platform.into());
        self
    }

    /// The `GetProviderInfo` answer of this identity, declaring `contract_version`.
    pub fn to_proto(&self, contract_version: &str) -> crate::proto::GetProviderInfoResponse {
        use crate::proto::UnclassedServices;
        crate::proto::GetProviderInfoResponse {
            name: self.name.clone(),
            vendor_version: self.vendor_version.clone(),
            provider_id_scheme: self.provider_id_scheme.clone(),
            contract_version: contract_version.to_owned(),
            has_cluster_id: self.has_cluster_id,
            manifest: self.manifest.clone().into_iter().collect(),
            provider_id_schemes: self.provider_id_schemes(),
            load_balancer_classes: self.load_balancer_classes.clone(),
            unclassed_services: match self.serves_unclassed {
                None => UnclassedServices::Unspecified,
                Some(true) => UnclassedServices::Served,
                Some(false) => UnclassedServices::Declined,
            } as i32,
            platforms: self.platforms.clone(),
        }
    }

    /// What `GetProviderInfo` checks of this identity before sending it
    /// (the lists: schemes, classes, platforms), for a provider to refuse
    /// a bad configuration at start rather than answer every handshake
    /// INTERNAL.
    pub fn check(&self) -> Result<(), crate::validate::Violation> {
        crate::validate::identity_lists(&self.to_proto(crate::proto::CONTRACT_VERSION))
    }
}

/// A provider's readiness (`Probe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Still initialising; expects to become ready.
    Starting(String),
    /// Cannot serve (for example invalid credentials); the message says why.
    NotReady(String),
}

/// Required: identity, optional annotation schema, readiness.
pub trait Identity: Send + Sync + 'static {
    fn info(&self) -> ProviderInfo;

    /// The Service annotations the provider understands.
    fn annotation_schema(&self) -> AnnotationSchema {
        AnnotationSchema::default()
    }

    /// Cheap readiness check; called often.
    fn probe(&self, ctx: CallContext) -> impl Future<Output = ProviderResult<Readiness>> + Send {
        let _ = ctx;
        async { Ok(Readiness::Ready) }
    }
}

/// Whether an instance exists. No "unspecified": a Rust provider cannot
/// answer the ambiguous zero value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existence {
    Exists,
    /// The cloud positively knows the instance is gone: the Node is deleted.
    NotExists,
}

/// Whether an instance is shut down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownState {
    Running,
    ShutDown,
}

/// `InstancesService` (InstancesV2 semantics). Prefer `node.provider_id`;
/// fall back to name, labels or annotations when it is empty. A Node whose
/// providerID has a scheme the provider does not own
/// ([`ProviderInfo::provider_id_scheme`] and
/// [`ProviderInfo::also_owns`]) never reaches these methods: the SDK
/// answers INVALID_ARGUMENT for it.
pub trait Instances: Send + Sync + 'static {
    fn instance_exists(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> impl Future<Output = ProviderResult<Existence>> + Send;

    /// An unknown instance is [`crate::ProviderError::instance_not_found`].
    fn instance_shutdown(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> impl Future<Output = ProviderResult<ShutdownState>> + Send;

    /// An unknown instance is [`crate::ProviderError::instance_not_found`].
    fn instance_metadata(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> impl Future<Output = ProviderResult<InstanceMetadata>> + Send;

    /// Answers many questions at once (`BatchInstances`, contract 1.4.0).
    /// Every provider with instances serves it: the default asks the single
    /// methods, at most [`BATCH_FAN_OUT`] at a time, each with its own
    /// context (so warnings stay with their Node). A cloud that can answer
    /// for many instances in one API call overrides it.
    ///
    /// The SDK has checked the request (1 to 500 queries, keys distinct)
    /// and refused, query by query, a Node the single calls would refuse
    /// (malformed, or a providerID of a scheme the provider does not own):
    /// those never reach this method. Return one result per query, keyed by
    /// [`InstanceQuery::key`], with an answer of the kind asked or the error
    /// the single call would return; the SDK checks each answer as it checks
    /// the single calls' (and turns a bad one, a missing one or one of the
    /// wrong kind into INTERNAL for that query). Fail the whole call only
    /// when no query could be answered (the cloud is unreachable, the quota
    /// spent).
    fn batch_instances(
        &self,
        ctx: CallContext,
        queries: Vec<InstanceQuery>,
    ) -> impl Future<Output = ProviderResult<BatchAnswers>> + Send {
        fan_out(self, ctx, queries)
    }
}

/// A batch's results: each query's key with its answer or error.
pub type BatchAnswers = Vec<(String, ProviderResult<InstanceAnswer>)>;

/// How many single calls the default [`Instances::batch_instances`] runs at
/// once.
pub const BATCH_FAN_OUT: usize = 16;

/// What one query of a batch asks (`InstanceQuestion` without
/// UNSPECIFIED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceQuestion {
    /// As `InstanceExists`.
    Existence,
    /// As `InstanceShutdown`.
    Shutdown,
    /// As `InstanceMetadata`.
    Metadata,
}

impl InstanceQuestion {
    /// The contract's value.
    pub fn to_proto(self) -> crate::proto::InstanceQuestion {
        match self {
            InstanceQuestion::Existence => crate::proto::InstanceQuestion::Existence,
            InstanceQuestion::Shutdown => crate::proto::InstanceQuestion::Shutdown,
            InstanceQuestion::Metadata => crate::proto::InstanceQuestion::Metadata,
        }
    }

    /// `None` for UNSPECIFIED and unknown values.
    pub fn from_proto(value: i32) -> Option<Self> {
        match crate::proto::InstanceQuestion::try_from(value).ok()? {
            crate::proto::InstanceQuestion::Existence => Some(InstanceQuestion::Existence),
            crate::proto::InstanceQuestion::Shutdown => Some(InstanceQuestion::Shutdown),
            crate::proto::InstanceQuestion::Metadata => Some(InstanceQuestion::Metadata),
            crate::proto::InstanceQuestion::Unspecified => None,
        }
    }

    /// The single call that asks the same.
    pub fn method(self) -> &'static str {
        match self {
            InstanceQuestion::Existence => "InstanceExists",
            InstanceQuestion::Shutdown => "InstanceShutdown",
            InstanceQuestion::Metadata => "InstanceMetadata",
        }
    }
}

/// One question of a batch about one Node's instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceQuery {
    /// Chosen by the caller, unique within the batch, 1 to 253 bytes.
    pub key: String,
    pub node: NodeRef,
    pub question: InstanceQuestion,
}

/// An `InstanceMetadata` answer: the metadata, and warnings about the Node
/// (contract 1.2.0) for the controller to publish as Warning Events on it.
#[derive(Debug, Clone, PartialEq)]
pub struct MetadataAnswer {
    pub metadata: InstanceMetadata,
    pub warnings: Vec<Warning>,
}

/// The answer to one query of a batch, of the kind its question asks.
#[derive(Debug, Clone, PartialEq)]
pub enum InstanceAnswer {
    Existence(Existence),
    Shutdown(ShutdownState),
    Metadata(MetadataAnswer),
}

impl InstanceAnswer {
    /// The question this answers.
    pub fn question(&self) -> InstanceQuestion {
        match self {
            InstanceAnswer::Existence(_) => InstanceQuestion::Existence,
            InstanceAnswer::Shutdown(_) => InstanceQuestion::Shutdown,
            InstanceAnswer::Metadata(_) => InstanceQuestion::Metadata,
        }
    }
}

/// The default batch: each query by its single method, [`BATCH_FAN_OUT`] at
/// a time. Public so a provider with a batch of its own can still answer
/// some batches this way.
pub async fn fan_out<T: Instances + ?Sized>(
    provider: &T,
    ctx: CallContext,
    queries: Vec<InstanceQuery>,
) -> ProviderResult<BatchAnswers> {
    use futures::stream::{self, StreamExt};
    let ctx = &ctx;
    Ok(stream::iter(queries)
        .map(|q| async move {
            // Its own warnings: the SDK hands each metadata answer's to its
            // Node only.
            let ctx = CallContext {
                warnings: Warnings::default(),
                ..ctx.clone()
            };
            let answer = match q.question {
                InstanceQuestion::Existence => provider
                    .instance_exists(ctx, q.node)
                    .await
                    .map(InstanceAnswer::Existence),
                InstanceQuestion::Shutdown => provider
                    .instance_shutdown(ctx, q.node)
                    .await
                    .map(InstanceAnswer::Shutdown),
                InstanceQuestion::Metadata => {
                    let warnings = ctx.warnings.clone();
                    provider
                        .instance_metadata(ctx, q.node)
                        .await
                        .map(|metadata| {
                            InstanceAnswer::Metadata(MetadataAnswer {
                                metadata,
                                warnings: warnings.take(),
                            })
                        })
                }
            };
            (q.key, answer)
        })
        .buffer_unordered(BATCH_FAN_OUT)
        .collect()
        .await)
}

/// A load balancer mutation's result: done, or handled by another controller.
#[derive(Debug, Clone, PartialEq)]
pub enum LbOutcome<T> {
    Done(T),
    /// `cloudprovider.ImplementedElsewhere`; the message is for humans.
    ImplementedElsewhere(String),
}

/// A load balancer mutation's answer with the warnings to show the user.
#[derive(Debug, Clone, PartialEq)]
pub struct LbAnswer<T> {
    pub outcome: LbOutcome<T>,
    pub warnings: Vec<Warning>,
}

impl<T> LbAnswer<T> {
    pub fn done(value: T) -> Self {
        LbAnswer {
            outcome: LbOutcome::Done(value),
            warnings: Vec::new(),
        }
    }

    pub fn implemented_elsewhere(message: impl Into<String>) -> Self {
        LbAnswer {
            outcome: LbOutcome::ImplementedElsewhere(message.into()),
            warnings: Vec::new(),
        }
    }

    pub fn warn(mut self, reason: impl Into<String>, message: impl Into<String>) -> Self {
        self.warnings.push(Warning {
            reason: reason.into(),
            message: message.into(),
        });
        self
    }
}

/// A load balancer in a listing (`ListLoadBalancers`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancerEntry {
    pub name: String,
    pub service_uid: String,
    pub service_namespace: String,
    pub service_name: String,
    pub status: Option<LoadBalancerStatus>,
}

/// `LoadBalancerService`. The idempotency key of every mutation is
/// `(cluster_name, service.uid)`.
pub trait LoadBalancers: Send + Sync + 'static {
    /// `None` when no load balancer exists for the Service.
    fn get_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
    ) -> impl Future<Output = ProviderResult<Option<LoadBalancerStatus>>> + Send;

    /// Must be a pure function of cluster name, Service namespace, name, uid
    /// and annotations (names from namespace and name are safe: the
    /// finalizer keeps a Service until its load balancer is deleted).
    /// The default is [`cluster_scoped_load_balancer_name`], so two clusters
    /// sharing a cloud account never claim one load balancer (upstream's
    /// default, [`default_load_balancer_name`], ignores the cluster).
    fn get_load_balancer_name(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
    ) -> impl Future<Output = ProviderResult<String>> + Send {
        let _ = ctx;
        async move {
            Ok(cluster_scoped_load_balancer_name(
                &cluster_name,
                &service.uid,
            ))
        }
    }

    /// `nodes` derefs to `[NodeRef]`, checked. It is shared, not copied: the
    /// SDK keeps the sets the controller puts (PutNodeSet), encoded, and
    /// hands the same set to every call that names it. Deref decodes it
    /// once and keeps it decoded; [`NodeSet::each`] reads it without
    /// keeping it.
    fn ensure_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
        nodes: NodeSet,
    ) -> impl Future<Output = ProviderResult<LbAnswer<LoadBalancerStatus>>> + Send;

    /// `nodes` as in [`LoadBalancers::ensure_load_balancer`].
    fn update_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
        nodes: NodeSet,
    ) -> impl Future<Output = ProviderResult<LbAnswer<()>>> + Send;

    /// Succeeds when nothing exists. Returns warnings only.
    fn ensure_load_balancer_deleted(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
    ) -> impl Future<Output = ProviderResult<Vec<Warning>>> + Send;

    /// Every load balancer created for `cluster_name`. Return `None` (the
    /// default) if listing is not supported; the SDK then does not advertise
    /// `CAPABILITY_LIST_LOAD_BALANCERS`. The SDK paginates the answer.
    fn list_load_balancers(
        &self,
        ctx: CallContext,
        cluster_name: String,
    ) -> impl Future<Output = ProviderResult<Vec<LoadBalancerEntry>>> + Send {
        let _ = (ctx, cluster_name);
        async { Err(crate::ProviderError::unimplemented("ListLoadBalancers")) }
    }

    /// Whether [`LoadBalancers::list_load_balancers`] is implemented.
    fn supports_listing(&self) -> bool {
        false
    }
}

/// The default load balancer name: `"a"` + the Service uid without dashes,
/// at most 32 characters, as upstream's `cloudprovider.DefaultLoadBalancerName`.
/// Providers that want cluster-scoped names use
/// [`cluster_scoped_load_balancer_name`].
pub fn default_load_balancer_name(_cluster_name: &str, service_uid: &str) -> String {
    let mut name: String = std::iter::once('a')
        .chain(service_uid.chars().filter(|c| *c != '-'))
        .collect();
    truncate_to_bytes(&mut name, 32);
    name
}

/// Cuts `s` to at most `max` bytes at a character boundary (a uid is any
/// text the contract accepts, not necessarily ASCII).
fn truncate_to_bytes(s: &mut String, max: usize) {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}

/// A name that two clusters never share: cluster name (sanitised, at most 20
/// characters) + `-` + the Service uid without dashes, at most 63
/// characters.
pub fn cluster_scoped_load_balancer_name(cluster_name: &str, service_uid: &str) -> String {
    let cluster: String = cluster_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(20)
        .collect();
    let mut name = format!(
        "{cluster}-{}",
        service_uid
            .chars()
            .filter(|c| *c != '-')
            .collect::<String>()
    );
    truncate_to_bytes(&mut name, 63);
    name
}

/// `RoutesService`. The idempotency key is `(cluster_name, destination_cidr)`.
pub trait Routes: Send + Sync + 'static {
    /// Every route of `cluster_name`; the SDK paginates the answer.
    fn list_routes(
        &self,
        ctx: CallContext,
        cluster_name: String,
    ) -> impl Future<Output = ProviderResult<Vec<Route>>> + Send;

    /// Succeeds when an identical route exists;
    /// [`crate::ProviderError::conflicting_resource`] when the destination is
    /// routed elsewhere. Returns the route as created (with its name).
    fn create_route(
        &self,
        ctx: CallContext,
        cluster_name: String,
        name_hint: String,
        route: Route,
    ) -> impl Future<Output = ProviderResult<Route>> + Send;

    /// Succeeds when the route does not exist.
    fn delete_route(
        &self,
        ctx: CallContext,
        cluster_name: String,
        route: Route,
    ) -> impl Future<Output = ProviderResult<()>> + Send;

    /// Whether routes use `target_node_addresses`
    /// (`CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES`). Contract 1.1.0 then asks
    /// that `list_routes` return each route with the addresses it was
    /// created with, and that `create_route` for a destination already
    /// routed to the same node update the route in place.
    fn uses_target_node_addresses(&self) -> bool {
        false
    }
}

/// `ZonesService` (optional, legacy).
pub trait Zones: Send + Sync + 'static {
    fn zone_by_provider_id(
        &self,
        ctx: CallContext,
        provider_id: String,
    ) -> impl Future<Output = ProviderResult<Zone>> + Send;

    fn zone_by_node_name(
        &self,
        ctx: CallContext,
        node_name: String,
    ) -> impl Future<Output = ProviderResult<Zone>> + Send;
}

/// `VolumesService` (optional): labels for PersistentVolumes provisioned
/// outside CSI (`cloudprovider.PVLabeler`).
pub trait Volumes: Send + Sync + 'static {
    /// The labels the volume's PersistentVolume should carry; empty for a
    /// volume the provider does not know. Keys and values must be valid
    /// Kubernetes labels (the SDK checks before answering).
    fn get_volume_labels(
        &self,
        ctx: CallContext,
        volume: Volume,
    ) -> impl Future<Output = ProviderResult<std::collections::BTreeMap<String, String>>> + Send;
}

/// `ClustersService` (optional, diagnostics).
pub trait Clusters: Send + Sync + 'static {
    fn list_clusters(
        &self,
        ctx: CallContext,
    ) -> impl Future<Output = ProviderResult<Vec<String>>> + Send;

    fn master(
        &self,
        ctx: CallContext,
        cluster_name: String,
    ) -> impl Future<Output = ProviderResult<String>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by proptests: a uid of multi-byte characters made both names
    /// panic (`String::truncate` inside a character) in the provider's
    /// GetLoadBalancerName.
    #[test]
    fn names_of_non_ascii_uids_are_cut_at_a_character() {
        let uid = "é".repeat(40);
        let name = default_load_balancer_name("c", &uid);
        assert_eq!(name, format!("a{}", "é".repeat(15)));
        let name = cluster_scoped_load_balancer_name("c", &uid);
        assert_eq!(name, format!("c-{}", "é".repeat(30)));
        assert_eq!(
            default_load_balancer_name("c", "0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11"),
            "a0b7d8a433c8e4d1b9d559e7d2f2c1a1"
        );
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    /// A uid as the SDK accepts it in a request: any non-empty text of at
    /// most 253 bytes (Kubernetes' are UUIDs, the contract does not insist).
    fn arb_uid() -> BoxedStrategy<String> {
        prop_oneof![
            "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            ".{1,80}",
        ]
        .prop_filter("a valid name", |s| crate::validate::name("uid", s).is_ok())
        .boxed()
    }

    proptest! {
        #[test]
        fn default_names_are_a_and_the_uid_cut_to_32_bytes(uid in arb_uid()) {
            let name = default_load_balancer_name("cluster", &uid);
            let full: String = std::iter::once('a').chain(uid.chars().filter(|c| *c != '-')).collect();
            prop_assert!(name.len() <= 32);
            prop_assert!(full.starts_with(&name));
            prop_assert!(name.len() == full.len().min(32) || name.len() + 4 > 32);
        }

        #[test]
        fn cluster_scoped_names_fit_63_bytes(cluster in ".{0,40}", uid in arb_uid()) {
            let name = cluster_scoped_load_balancer_name(&cluster, &uid);
            prop_assert!(name.len() <= 63);
            let sanitised: String = cluster
                .chars()
                .take(20)
                .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
                .collect();
            let prefix = format!("{sanitised}-");
            prop_assert!(name.starts_with(&prefix), "{:?} does not start with {:?}", name, prefix);
        }
    }
}
