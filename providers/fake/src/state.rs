//! The fake cloud itself: instances, load balancers, routes and the IP pool,
//! as plain synchronous data. Everything here behaves like a *correct*
//! cloud; misbehaviour lives in [`crate::faults`]. Keeping this free of
//! async and gRPC makes the semantics unit-testable in isolation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;

use ccm_provider_sdk::proto::{
    InstanceMetadata, LoadBalancerIngress, LoadBalancerStatus, NodeAddress, NodeAddressType,
    NodeRef, PortStatus, Protocol, Route, Service, TrafficPolicy, Volume, Warning, Zone,
};
use ccm_provider_sdk::{
    FencingToken, LbAnswer, LoadBalancerEntry, NodeSet, ProviderError, ProviderResult, Readiness,
    cluster_scoped_load_balancer_name,
};
use serde::{Deserialize, Serialize};

use crate::Error;

/// The providerID scheme, and the prefix of every providerID the fake sets.
pub const PROVIDER_ID_SCHEME: &str = "fake";
const PROVIDER_ID_PREFIX: &str = "fake://";

/// The annotation prefix the fake owns (declared in its annotation schema).
pub const ANNOTATION_PREFIX: &str = "fake.ccm-rs.io/";
/// `"true"` or `"false"`: whether the load balancer is internal.
pub const ANNOTATION_INTERNAL: &str = "fake.ccm-rs.io/internal";
/// An absolute HTTP path (starting with `/`) for the health check.
pub const ANNOTATION_HEALTH_CHECK_PATH: &str = "fake.ccm-rs.io/health-check-path";
/// `"true"`: the load balancer is another controller's (the answer is
/// "implemented elsewhere"), as a load balancer class can say upstream.
pub const ANNOTATION_IMPLEMENTED_ELSEWHERE: &str = "fake.ccm-rs.io/implemented-elsewhere";
/// The volume drivers whose volumes the fake knows: its CSI driver name
/// and an in-tree-style plugin name.
pub const VOLUME_DRIVERS: [&str; 2] = ["fake.csi.ccm-rs.io", "kubernetes.io/fake-disk"];
/// Every annotation key the fake reads.
pub const KNOWN_ANNOTATIONS: [&str; 3] = [
    ANNOTATION_INTERNAL,
    ANNOTATION_HEALTH_CHECK_PATH,
    ANNOTATION_IMPLEMENTED_ELSEWHERE,
];

/// How the fake cloud starts. `Default` is what the binary uses without
/// flags: auto-created instances, a TEST-NET-1 address pool, one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FakeConfig {
    /// Whether an unknown node name gets an instance on first lookup, so
    /// any cluster "just works" without declaring its nodes.
    pub auto_create_instances: bool,
    pub zone: String,
    pub region: String,
    pub instance_type: String,
    /// The IPv4 CIDR load balancer addresses come from; the network address,
    /// the first host (gateway) and the broadcast address are never used.
    pub lb_ip_pool: String,
    /// What `ListClusters` answers.
    pub cluster_names: Vec<String>,
    /// Load balancer classes another controller handles: Services with one
    /// of them are answered "implemented elsewhere".
    pub implemented_elsewhere_classes: Vec<String>,
    /// Instances that exist from the start.
    pub instances: Vec<InstanceSpec>,
    /// How many calls the call log keeps (oldest dropped first).
    pub call_log_capacity: usize,
    /// InstanceMetadata leaves zone and region empty (only ZonesService
    /// knows them), as some older clouds do.
    pub zones_only_via_zones_service: bool,
    /// Keep the cloud (instances, load balancers, routes, the newest fencing
    /// token per cluster) in this JSON file, rewritten atomically after
    /// every change, so a fake killed outright
    /// comes back with the same cloud. An existing file is loaded at start
    /// and `instances` is then ignored (the file has the cloud as it was,
    /// removals included); a missing one starts the cloud from `instances`.
    /// Faults, readiness and the call log are never kept. One fake per file.
    pub state_file: Option<PathBuf>,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            auto_create_instances: true,
            zone: "fake-zone-a".to_owned(),
            region: "fake-region".to_owned(),
            instance_type: "fake.medium".to_owned(),
            lb_ip_pool: "192.0.2.0/24".to_owned(),
            cluster_names: vec!["kubernetes".to_owned()],
            implemented_elsewhere_classes: Vec::new(),
            instances: Vec::new(),
            call_log_capacity: 10_000,
            zones_only_via_zones_service: false,
            state_file: None,
        }
    }
}

/// The kind of an instance address, spelled as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddressType {
    Hostname,
    #[serde(rename = "InternalIP")]
    InternalIp,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    InternalDNS,
    ExternalDNS,
}

impl AddressType {
    fn to_proto(self) -> NodeAddressType {
        match self {
            AddressType::Hostname => NodeAddressType::Hostname,
            AddressType::InternalIp => NodeAddressType::InternalIp,
            AddressType::ExternalIp => NodeAddressType::ExternalIp,
            AddressType::InternalDNS => NodeAddressType::InternalDns,
            AddressType::ExternalDNS => NodeAddressType::ExternalDns,
        }
    }

    fn from_proto(t: i32) -> Option<AddressType> {
        Some(match NodeAddressType::try_from(t).ok()? {
            NodeAddressType::Hostname => AddressType::Hostname,
            NodeAddressType::InternalIp => AddressType::InternalIp,
            NodeAddressType::ExternalIp => AddressType::ExternalIp,
            NodeAddressType::InternalDns => AddressType::InternalDNS,
            NodeAddressType::ExternalDns => AddressType::ExternalDNS,
            NodeAddressType::Unspecified => return None,
        })
    }
}

/// One address of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    #[serde(rename = "type")]
    pub kind: AddressType,
    pub address: String,
}

/// An instance to declare (instances file, admin API, [`crate::FakeCloud`]).
/// Unset fields take the configured defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceSpec {
    /// The node name the instance answers to.
    pub name: String,
    /// The cloud id (providerID `fake://<id>`); defaults to the name.
    pub id: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub region: Option<String>,
    /// Empty means "allocate": an InternalIP from 10.0.0.0/8 and a Hostname.
    pub addresses: Vec<Address>,
    /// Extra node labels (`InstanceMetadata.additional_labels`).
    pub labels: BTreeMap<String, String>,
    pub shutdown: bool,
}

impl InstanceSpec {
    /// A spec with only a name; everything else defaulted.
    pub fn named(name: impl Into<String>) -> Self {
        InstanceSpec {
            name: name.into(),
            ..Default::default()
        }
    }
}

/// An instance as the cloud knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub name: String,
    pub id: String,
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub addresses: Vec<Address>,
    pub labels: BTreeMap<String, String>,
    pub shutdown: bool,
    /// Whether it was created by a lookup rather than declared.
    pub auto_created: bool,
}

impl Instance {
    fn metadata(&self) -> InstanceMetadata {
        InstanceMetadata {
            provider_id: self.provider_id.clone(),
            instance_type: self.instance_type.clone(),
            node_addresses: self
                .addresses
                .iter()
                .map(|a| NodeAddress {
                    r#type: a.kind.to_proto() as i32,
                    address: a.address.clone(),
                })
                .collect(),
            zone: self.zone.clone(),
            region: self.region.clone(),
            additional_labels: self.labels.clone().into_iter().collect(),
        }
    }
}

/// One port of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbPort {
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub port: i32,
    pub node_port: i32,
}

/// Node names receiving traffic, sorted. Load balancers given the same
/// nodes share one list: 1,000 load balancers over the same 1,000 Nodes
/// hold one copy of the names, not a million.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "Vec<String>", into = "Vec<String>")]
pub struct Backends(Arc<[String]>);

impl From<Vec<String>> for Backends {
    fn from(names: Vec<String>) -> Self {
        Backends(names.into())
    }
}

impl From<Backends> for Vec<String> {
    fn from(b: Backends) -> Self {
        b.0.to_vec()
    }
}

impl std::ops::Deref for Backends {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.0
    }
}

impl PartialEq for Backends {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl PartialEq<Vec<String>> for Backends {
    fn eq(&self, other: &Vec<String>) -> bool {
        *self.0 == **other
    }
}

impl<const N: usize> PartialEq<[&str; N]> for Backends {
    fn eq(&self, other: &[&str; N]) -> bool {
        self.0.len() == N && self.0.iter().zip(other).all(|(a, b)| a == b)
    }
}

/// A load balancer as the cloud knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadBalancer {
    pub cluster_name: String,
    pub service_uid: String,
    pub service_namespace: String,
    pub service_name: String,
    /// The cloud name (`cluster_scoped_load_balancer_name`).
    pub name: String,
    pub ip: Ipv4Addr,
    pub ports: Vec<LbPort>,
    pub backends: Backends,
    pub source_ranges: Vec<String>,
    pub internal: bool,
    pub health_check_path: Option<String>,
    /// The Service's annotations under [`ANNOTATION_PREFIX`].
    pub annotations: BTreeMap<String, String>,
    /// Bumped on every change, so tests can tell an idempotent call (no
    /// bump) from a rewrite that happened to produce the same state.
    pub generation: u64,
}

impl LoadBalancer {
    fn status(&self) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: self.ip.to_string(),
                ports: self
                    .ports
                    .iter()
                    .map(|p| PortStatus {
                        port: p.port,
                        protocol: protocol_from_name(&p.protocol) as i32,
                        error: String::new(),
                    })
                    .collect(),
                ..Default::default()
            }],
        }
    }
}

/// A route as the cloud knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteRecord {
    pub cluster_name: String,
    pub name: String,
    pub target_node: String,
    pub destination_cidr: String,
    /// The target_node_addresses of the route's latest CreateRoute, listed
    /// back as they came.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_node_addresses: Vec<Address>,
}

/// Everything the cloud holds, for assertions (`GET /state`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateDump {
    pub instances: Vec<Instance>,
    /// Names and ids removed on purpose; they stay gone under auto-create.
    pub removed: Vec<String>,
    pub load_balancers: Vec<LoadBalancer>,
    pub routes: Vec<RouteRecord>,
    /// Load balancer addresses in use.
    pub allocated_ips: Vec<Ipv4Addr>,
    /// The newest fencing token seen per cluster.
    #[serde(default)]
    pub leaders: Vec<LeaderRecord>,
}

/// The newest leader of one cluster the fake has heard from: mutations
/// carrying an older fencing token are refused (NOT_LEADER), as a cloud
/// with conditional writes would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    pub cluster_name: String,
    pub term: u64,
    pub holder: String,
}

/// The usable addresses of an IPv4 CIDR.
#[derive(Debug, Clone)]
pub(crate) struct IpPool {
    first: u32,
    last: u32,
    used: BTreeSet<u32>,
    /// Every address below it is used; it is free or past `last`. Keeps
    /// finding the lowest free address from scanning the used ones (at
    /// 5,000 load balancers, a quadratic cost).
    lowest_free: u32,
}

impl IpPool {
    pub(crate) fn parse(cidr: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::InvalidPool(cidr.to_owned(), why.to_owned());
        let (addr, prefix) = cidr
            .split_once('/')
            .ok_or_else(|| bad("not address/prefix"))?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix: u32 = prefix.parse().map_err(|_| bad("bad prefix length"))?;
        if prefix > 30 {
            return Err(bad(
                "prefix must be /30 or shorter to have usable addresses",
            ));
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        let network = u32::from(addr) & mask;
        let broadcast = network | !mask;
        Ok(IpPool {
            first: network + 2,
            last: broadcast - 1,
            used: BTreeSet::new(),
            lowest_free: network + 2,
        })
    }

    fn contains(&self, ip: Ipv4Addr) -> bool {
        (self.first..=self.last).contains(&u32::from(ip))
    }

    fn is_free(&self, ip: Ipv4Addr) -> bool {
        self.contains(ip) && !self.used.contains(&u32::from(ip))
    }

    fn take(&mut self, ip: Ipv4Addr) {
        self.used.insert(u32::from(ip));
        while self.lowest_free <= self.last && self.used.contains(&self.lowest_free) {
            self.lowest_free += 1;
        }
    }

    fn release(&mut self, ip: Ipv4Addr) {
        let ip = u32::from(ip);
        if self.used.remove(&ip) {
            self.lowest_free = self.lowest_free.min(ip);
        }
    }

    /// The lowest free address (allocation is deterministic).
    fn lowest_free(&self) -> Option<Ipv4Addr> {
        (self.lowest_free <= self.last).then(|| Ipv4Addr::from(self.lowest_free))
    }

    #[cfg(test)]
    fn allocate(&mut self) -> Option<Ipv4Addr> {
        let ip = self.lowest_free()?;
        self.take(ip);
        Some(ip)
    }

    fn allocated(&self) -> Vec<Ipv4Addr> {
        self.used.iter().map(|a| Ipv4Addr::from(*a)).collect()
    }
}

/// The whole cloud.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) config: FakeConfig,
    pub(crate) readiness: Readiness,
    pool: IpPool,
    /// By node name.
    instances: BTreeMap<String, Instance>,
    /// Cloud id to node name.
    ids: HashMap<String, String>,
    removed: BTreeSet<String>,
    next_address: u32,
    lbs: BTreeMap<(String, String), LoadBalancer>,
    routes: BTreeMap<(String, String), RouteRecord>,
    /// The newest fencing token seen, by cluster name.
    leaders: BTreeMap<String, FencingToken>,
    /// The backend list handed out last, shared by the next load balancer
    /// given the same nodes.
    last_backends: Backends,
    /// The nodes `last_backends` was made from.
    last_nodes: NodeSet,
    /// Set by every change to the cloud (not to readiness), cleared once
    /// the change is in the state file.
    pub(crate) dirty: bool,
}

/// The part of [`State`] a state file keeps: the cloud itself. The IP pool's
/// allocations and the id index follow from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Persisted {
    pub(crate) instances: Vec<Instance>,
    /// Names and ids removed on purpose.
    pub(crate) removed: Vec<String>,
    /// How many addresses 10.0.0.10 onwards were handed out already.
    pub(crate) next_address: u32,
    pub(crate) load_balancers: Vec<LoadBalancer>,
    pub(crate) routes: Vec<RouteRecord>,
    #[serde(default)]
    pub(crate) leaders: Vec<LeaderRecord>,
}

/// The parsed load balancer options of a Service.
struct LbOptions {
    internal: bool,
    health_check_path: Option<String>,
    annotations: BTreeMap<String, String>,
}

fn lb_options(service: &Service) -> ProviderResult<(LbOptions, Vec<Warning>)> {
    let mut warnings = Vec::new();
    let mut internal = false;
    let mut health_check_path = None;
    let mut annotations = BTreeMap::new();
    for (key, value) in &service.annotations {
        if !key.starts_with(ANNOTATION_PREFIX) {
            continue;
        }
        annotations.insert(key.clone(), value.clone());
        match key.as_str() {
            ANNOTATION_INTERNAL => {
                internal = match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(ProviderError::invalid_annotation(
                            key,
                            format!("{value:?} is not \"true\" or \"false\""),
                        ));
                    }
                }
            }
            ANNOTATION_HEALTH_CHECK_PATH => {
                if !value.starts_with('/') {
                    return Err(ProviderError::invalid_annotation(
                        key,
                        format!("{value:?} is not an absolute path (must start with \"/\")"),
                    ));
                }
                health_check_path = Some(value.clone());
            }
            // Unknown keys are the controller's to report: the fake
            // declares its keys in its annotation schema.
            _ => {}
        }
    }
    if health_check_path.is_some() && service.external_traffic_policy != TrafficPolicy::Local as i32
    {
        warnings.push(Warning {
            reason: "HealthCheckPathIgnored".to_owned(),
            message: format!(
                "{ANNOTATION_HEALTH_CHECK_PATH} is only used with externalTrafficPolicy: Local; \
                 with Cluster every node answers for every Service"
            ),
        });
    }
    for (i, p) in service.ports.iter().enumerate() {
        if p.protocol == Protocol::Sctp as i32 {
            return Err(ProviderError::invalid_service_spec(
                format!("spec.ports[{i}].protocol"),
                "the fake cloud's load balancers do not support SCTP",
            ));
        }
    }
    // HashMap iteration order must not leak into the answer.
    warnings.sort_by(|a, b| a.message.cmp(&b.message));
    Ok((
        LbOptions {
            internal,
            health_check_path,
            annotations,
        },
        warnings,
    ))
}

fn protocol_name(p: i32) -> String {
    Protocol::try_from(p)
        .map(|p| {
            p.as_str_name()
                .strip_prefix("PROTOCOL_")
                .unwrap_or("UNSPECIFIED")
                .to_owned()
        })
        .unwrap_or_else(|_| p.to_string())
}

fn protocol_from_name(name: &str) -> Protocol {
    Protocol::from_str_name(&format!("PROTOCOL_{name}")).unwrap_or(Protocol::Unspecified)
}

fn key(cluster: &str, other: &str) -> (String, String) {
    (cluster.to_owned(), other.to_owned())
}

fn not_found(what: &str) -> ProviderError {
    ProviderError::instance_not_found(format!("the fake cloud has no instance for {what}"))
}

impl State {
    pub(crate) fn new(config: FakeConfig) -> Result<Self, Error> {
        let pool = IpPool::parse(&config.lb_ip_pool)?;
        let mut state = State::empty(config, pool);
        for spec in state.config.instances.clone() {
            state.add_instance(spec, false)?;
        }
        Ok(state)
    }

    /// A cloud with nothing in it.
    fn empty(config: FakeConfig, pool: IpPool) -> Self {
        State {
            readiness: Readiness::Ready,
            pool,
            instances: BTreeMap::new(),
            ids: HashMap::new(),
            removed: BTreeSet::new(),
            next_address: 0,
            lbs: BTreeMap::new(),
            routes: BTreeMap::new(),
            leaders: BTreeMap::new(),
            last_backends: Backends::default(),
            last_nodes: NodeSet::default(),
            dirty: false,
            config,
        }
    }

    /// The cloud as a state file keeps it.
    pub(crate) fn persisted(&self) -> Persisted {
        Persisted {
            instances: self.instances(),
            removed: self.removed.iter().cloned().collect(),
            next_address: self.next_address,
            load_balancers: self.lbs.values().cloned().collect(),
            routes: self.routes.values().cloned().collect(),
            leaders: self.leader_records(),
        }
    }

    fn leader_records(&self) -> Vec<LeaderRecord> {
        self.leaders
            .iter()
            .map(|(cluster, t)| LeaderRecord {
                cluster_name: cluster.clone(),
                term: t.term,
                holder: t.holder.clone(),
            })
            .collect()
    }

    /// A mutation from `token` arrived for `cluster`: a newer term becomes
    /// the one every later write is checked against, so an older leader's
    /// call still running (or arriving late) cannot commit after it.
    pub(crate) fn saw_leader(&mut self, cluster: &str, token: Option<&FencingToken>) {
        let Some(token) = token else { return };
        let newest = FencingToken::newest(self.leaders.get(cluster).cloned(), token);
        if self.leaders.get(cluster) != Some(&newest) {
            self.leaders.insert(cluster.to_owned(), newest);
            self.dirty = true;
        }
    }

    /// Refuses a write whose token is superseded for `cluster`. Writes
    /// without a token (a controller without leader election) are
    /// accepted.
    pub(crate) fn check_leader(
        &self,
        cluster: &str,
        token: Option<&FencingToken>,
    ) -> ProviderResult<()> {
        match (token, self.leaders.get(cluster)) {
            (Some(t), Some(newest)) if t.is_superseded_by(newest) => {
                Err(ProviderError::not_leader(newest))
            }
            _ => Ok(()),
        }
    }

    /// The cloud of a state file under `config` (whose `instances` are
    /// ignored). Refuses anything a running fake could not have written:
    /// duplicate names, ids, load balancers, routes or addresses, and
    /// addresses outside the configured pool.
    pub(crate) fn restore(config: FakeConfig, saved: Persisted) -> Result<Self, String> {
        let pool = IpPool::parse(&config.lb_ip_pool).map_err(|e| e.to_string())?;
        let mut state = State::empty(config, pool);
        state.removed = saved.removed.into_iter().collect();
        state.next_address = saved.next_address;
        state.leaders = saved
            .leaders
            .into_iter()
            .map(|l| (l.cluster_name, FencingToken::new(l.term, l.holder)))
            .collect();
        for i in saved.instances {
            if i.name.is_empty() {
                return Err("an instance has no name".to_owned());
            }
            if let Some(owner) = state.ids.insert(i.id.clone(), i.name.clone()) {
                return Err(format!(
                    "instances {owner} and {} share the id {}",
                    i.name, i.id
                ));
            }
            if let Some(dup) = state.instances.insert(i.name.clone(), i) {
                return Err(format!("instance {} appears twice", dup.name));
            }
        }
        for lb in saved.load_balancers {
            let name = &lb.name;
            if !state.pool.contains(lb.ip) {
                return Err(format!(
                    "load balancer {name} has address {} outside the pool {}",
                    lb.ip, state.config.lb_ip_pool
                ));
            }
            if !state.pool.is_free(lb.ip) {
                return Err(format!(
                    "load balancer {name} has address {} of another load balancer",
                    lb.ip
                ));
            }
            state.pool.take(lb.ip);
            let k = key(&lb.cluster_name, &lb.service_uid);
            if state.lbs.insert(k, lb.clone()).is_some() {
                return Err(format!(
                    "two load balancers of cluster {} for service uid {}",
                    lb.cluster_name, lb.service_uid
                ));
            }
        }
        for r in saved.routes {
            let k = key(&r.cluster_name, &r.destination_cidr);
            if state.routes.insert(k, r.clone()).is_some() {
                return Err(format!(
                    "two routes of cluster {} for {}",
                    r.cluster_name, r.destination_cidr
                ));
            }
        }
        Ok(state)
    }

    /// Declares (or replaces) an instance; it exists again even if it was
    /// removed before.
    pub(crate) fn add_instance(
        &mut self,
        spec: InstanceSpec,
        auto_created: bool,
    ) -> Result<Instance, Error> {
        if spec.name.is_empty() {
            return Err(Error::InvalidInstance("name is required".to_owned()));
        }
        let id = spec.id.clone().unwrap_or_else(|| spec.name.clone());
        if let Some(owner) = self.ids.get(&id)
            && *owner != spec.name
        {
            return Err(Error::InvalidInstance(format!(
                "id {id} already belongs to instance {owner}"
            )));
        }
        let addresses = if spec.addresses.is_empty() {
            self.next_address += 1;
            // 10.0.0.10 onwards: deterministic for a given creation order.
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 9)) + self.next_address);
            vec![
                Address {
                    kind: AddressType::InternalIp,
                    address: ip.to_string(),
                },
                Address {
                    kind: AddressType::Hostname,
                    address: spec.name.clone(),
                },
            ]
        } else {
            spec.addresses
        };
        let instance = Instance {
            provider_id: format!("{PROVIDER_ID_PREFIX}{id}"),
            id: id.clone(),
            instance_type: spec
                .instance_type
                .unwrap_or_else(|| self.config.instance_type.clone()),
            zone: spec.zone.unwrap_or_else(|| self.config.zone.clone()),
            region: spec.region.unwrap_or_else(|| self.config.region.clone()),
            addresses,
            labels: spec.labels,
            shutdown: spec.shutdown,
            auto_created,
            name: spec.name.clone(),
        };
        if let Some(old) = self.instances.insert(spec.name.clone(), instance.clone()) {
            self.ids.remove(&old.id);
        }
        self.ids.insert(id.clone(), spec.name.clone());
        self.removed.remove(&spec.name);
        self.removed.remove(&id);
        self.dirty = true;
        Ok(instance)
    }

    /// Deletes an instance for good: it stays gone under auto-create, as a
    /// deleted VM would. Returns whether it existed.
    pub(crate) fn remove_instance(&mut self, name: &str) -> bool {
        self.dirty |= self.removed.insert(name.to_owned());
        match self.instances.remove(name) {
            Some(old) => {
                self.ids.remove(&old.id);
                self.removed.insert(old.id);
                self.dirty = true;
                true
            }
            None => false,
        }
    }

    pub(crate) fn set_shutdown(&mut self, name: &str, shutdown: bool) -> Result<(), Error> {
        let instance = self
            .instances
            .get_mut(name)
            .ok_or_else(|| Error::UnknownInstance(name.to_owned()))?;
        instance.shutdown = shutdown;
        self.dirty = true;
        Ok(())
    }

    pub(crate) fn instances(&self) -> Vec<Instance> {
        self.instances.values().cloned().collect()
    }

    /// Finds the node's instance: by providerID when set, else by name;
    /// creates it when auto-create is on and it was never removed.
    fn resolve(&mut self, node: &NodeRef) -> Option<&Instance> {
        let name = if node.provider_id.is_empty() {
            if self.instances.contains_key(&node.name) {
                return self.instances.get(&node.name);
            }
            if self.removed.contains(&node.name) || !self.config.auto_create_instances {
                return None;
            }
            self.add_instance(InstanceSpec::named(&node.name), true)
                .ok()?
                .name
        } else {
            // A foreign scheme is not ours to create or answer for.
            let id = node.provider_id.strip_prefix(PROVIDER_ID_PREFIX)?;
            if let Some(name) = self.ids.get(id) {
                return self.instances.get(name);
            }
            if self.removed.contains(id)
                || self.removed.contains(&node.name)
                || !self.config.auto_create_instances
                || self.instances.contains_key(&node.name)
            {
                return None;
            }
            // The fake restarted under a cluster whose nodes already carry
            // providerIDs: recreate the instance with the same id.
            let spec = InstanceSpec {
                id: Some(id.to_owned()),
                ..InstanceSpec::named(&node.name)
            };
            self.add_instance(spec, true).ok()?.name
        };
        self.instances.get(&name)
    }

    pub(crate) fn instance_exists(&mut self, node: &NodeRef) -> bool {
        self.resolve(node).is_some()
    }

    pub(crate) fn instance_shutdown(&mut self, node: &NodeRef) -> ProviderResult<bool> {
        self.resolve(node)
            .map(|i| i.shutdown)
            .ok_or_else(|| not_found(&node.name))
    }

    pub(crate) fn instance_metadata(&mut self, node: &NodeRef) -> ProviderResult<InstanceMetadata> {
        let hide_zone = self.config.zones_only_via_zones_service;
        let mut meta = self
            .resolve(node)
            .map(Instance::metadata)
            .ok_or_else(|| not_found(&node.name))?;
        if hide_zone {
            meta.zone.clear();
            meta.region.clear();
        }
        Ok(meta)
    }

    /// A volume of one of [`VOLUME_DRIVERS`] lives in the configured zone
    /// and region; any other volume is not the fake's (no labels).
    pub(crate) fn volume_labels(&self, volume: &Volume) -> BTreeMap<String, String> {
        if !VOLUME_DRIVERS.contains(&volume.driver.as_str()) {
            return BTreeMap::new();
        }
        BTreeMap::from([
            (
                "topology.kubernetes.io/zone".to_owned(),
                self.config.zone.clone(),
            ),
            (
                "topology.kubernetes.io/region".to_owned(),
                self.config.region.clone(),
            ),
        ])
    }

    pub(crate) fn zone_of(&mut self, node: &NodeRef) -> ProviderResult<Zone> {
        self.resolve(node)
            .map(|i| Zone {
                failure_domain: i.zone.clone(),
                region: i.region.clone(),
            })
            .ok_or_else(|| {
                not_found(if node.provider_id.is_empty() {
                    &node.name
                } else {
                    &node.provider_id
                })
            })
    }

    fn elsewhere(&self, service: &Service) -> Option<String> {
        if service
            .annotations
            .get(ANNOTATION_IMPLEMENTED_ELSEWHERE)
            .is_some_and(|v| v == "true")
        {
            return Some(format!(
                "{ANNOTATION_IMPLEMENTED_ELSEWHERE}: another controller owns this load balancer"
            ));
        }
        let class = service.load_balancer_class.as_ref()?;
        self.config
            .implemented_elsewhere_classes
            .contains(class)
            .then(|| format!("load balancer class {class} is handled by another controller"))
    }

    /// The address for a Service's load balancer, without taking it yet:
    /// the requested `loadBalancerIP`, else the current one, else the one
    /// the Service's status already shows (stable across fake restarts),
    /// else the lowest free one.
    fn choose_ip(&self, service: &Service, current: Option<Ipv4Addr>) -> ProviderResult<Ipv4Addr> {
        if !service.load_balancer_ip.is_empty() {
            let ip = match service.load_balancer_ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(ip)) => ip,
                _ => {
                    return Err(ProviderError::invalid_service_spec(
                        "spec.loadBalancerIP",
                        "the fake cloud only has IPv4 addresses",
                    ));
                }
            };
            if Some(ip) == current {
                return Ok(ip);
            }
            if !self.pool.contains(ip) {
                return Err(ProviderError::invalid_service_spec(
                    "spec.loadBalancerIP",
                    format!("{ip} is not in the pool {}", self.config.lb_ip_pool),
                ));
            }
            if !self.pool.is_free(ip) {
                return Err(ProviderError::conflicting_resource(format!(
                    "{ip} is in use by another load balancer"
                )));
            }
            return Ok(ip);
        }
        if let Some(ip) = current {
            return Ok(ip);
        }
        let from_status = service
            .status
            .iter()
            .flat_map(|s| &s.ingress)
            .filter_map(|i| i.ip.parse::<Ipv4Addr>().ok())
            .find(|ip| self.pool.is_free(*ip));
        if let Some(ip) = from_status {
            return Ok(ip);
        }
        self.pool.lowest_free().ok_or_else(|| {
            ProviderError::quota_exceeded(format!(
                "no free load balancer address in {}",
                self.config.lb_ip_pool
            ))
        })
    }

    pub(crate) fn ensure_lb(
        &mut self,
        cluster: &str,
        service: &Service,
        nodes: &NodeSet,
    ) -> ProviderResult<LbAnswer<LoadBalancerStatus>> {
        if let Some(message) = self.elsewhere(service) {
            return Ok(LbAnswer::implemented_elsewhere(message));
        }
        let (options, warnings) = lb_options(service)?;
        let k = key(cluster, &service.uid);
        let backends = self.backends(nodes);
        let existing = self.lbs.get(&k);
        let ip = self.choose_ip(service, existing.map(|lb| lb.ip))?;
        let generation = existing.map_or(0, |lb| lb.generation);
        let mut lb = LoadBalancer {
            cluster_name: cluster.to_owned(),
            service_uid: service.uid.clone(),
            service_namespace: service.namespace.clone(),
            service_name: service.name.clone(),
            name: cluster_scoped_load_balancer_name(cluster, &service.uid),
            ip,
            ports: service
                .ports
                .iter()
                .map(|p| LbPort {
                    name: p.name.clone(),
                    protocol: protocol_name(p.protocol),
                    port: p.port,
                    node_port: p.node_port,
                })
                .collect(),
            backends,
            source_ranges: service.load_balancer_source_ranges.clone(),
            internal: options.internal,
            health_check_path: options.health_check_path,
            annotations: options.annotations,
            generation,
        };
        if existing != Some(&lb) {
            self.dirty = true;
            lb.generation += 1;
            if let Some(old) = existing.map(|e| e.ip)
                && old != ip
            {
                self.pool.release(old);
            }
            self.pool.take(ip);
        }
        let status = lb.status();
        self.lbs.insert(k, lb);
        Ok(LbAnswer {
            outcome: ccm_provider_sdk::LbOutcome::Done(status),
            warnings,
        })
    }

    /// A missing load balancer is an `INTERNAL` error, not a silent create:
    /// `UpdateLoadBalancer` only touches backends, and a cloud cannot update
    /// what does not exist. The message says what to do; the controller's
    /// next sync calls `EnsureLoadBalancer`, which recreates it.
    pub(crate) fn update_lb(
        &mut self,
        cluster: &str,
        service: &Service,
        nodes: &NodeSet,
    ) -> ProviderResult<LbAnswer<()>> {
        if let Some(message) = self.elsewhere(service) {
            return Ok(LbAnswer::implemented_elsewhere(message));
        }
        let wanted = self.backends(nodes);
        let lb = self.lbs.get_mut(&key(cluster, &service.uid)).ok_or_else(|| {
            ProviderError::not_found(format!(
                "load balancer {} for service {}/{} does not exist; EnsureLoadBalancer creates it",
                cluster_scoped_load_balancer_name(cluster, &service.uid),
                service.namespace,
                service.name
            ))
        })?;
        if lb.backends != wanted {
            lb.backends = wanted;
            lb.generation += 1;
            self.dirty = true;
        }
        Ok(LbAnswer::done(()))
    }

    /// The sorted, distinct names of `nodes`, sharing the last list handed
    /// out when they are the same.
    fn backends(&mut self, nodes: &NodeSet) -> Backends {
        // Most calls carry the set the last one did (the SDK hands a
        // PutNodeSet's set to every call naming it): no sort then.
        if *nodes == self.last_nodes {
            return self.last_backends.clone();
        }
        self.last_nodes = nodes.clone();
        let names: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let same = names.len() == self.last_backends.len()
            && names
                .iter()
                .zip(self.last_backends.iter())
                .all(|(a, b)| a == b);
        if !same {
            self.last_backends = Backends(
                names
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
        self.last_backends.clone()
    }

    pub(crate) fn delete_lb(&mut self, cluster: &str, service: &Service) {
        if let Some(lb) = self.lbs.remove(&key(cluster, &service.uid)) {
            self.pool.release(lb.ip);
            self.dirty = true;
        }
    }

    /// Removes a load balancer by its cloud name, as someone using the
    /// cloud's console would; whether it existed.
    pub(crate) fn remove_lb_by_name(&mut self, name: &str) -> bool {
        let Some(k) = self
            .lbs
            .iter()
            .find(|(_, lb)| lb.name == name)
            .map(|(k, _)| k.clone())
        else {
            return false;
        };
        if let Some(lb) = self.lbs.remove(&k) {
            self.pool.release(lb.ip);
            self.dirty = true;
        }
        true
    }

    pub(crate) fn get_lb(&self, cluster: &str, service: &Service) -> Option<LoadBalancerStatus> {
        self.lbs
            .get(&key(cluster, &service.uid))
            .map(LoadBalancer::status)
    }

    pub(crate) fn list_lbs(&self, cluster: &str) -> Vec<LoadBalancerEntry> {
        self.lbs
            .values()
            .filter(|lb| lb.cluster_name == cluster)
            .map(|lb| LoadBalancerEntry {
                name: lb.name.clone(),
                service_uid: lb.service_uid.clone(),
                service_namespace: lb.service_namespace.clone(),
                service_name: lb.service_name.clone(),
                status: Some(lb.status()),
            })
            .collect()
    }

    /// Creates a route to an existing instance. The name is derived from
    /// the hint *and* the CIDR, so a dual-stack node's two routes differ.
    pub(crate) fn create_route(
        &mut self,
        cluster: &str,
        name_hint: &str,
        route: &Route,
    ) -> ProviderResult<Route> {
        let k = key(cluster, &route.destination_cidr);
        let addresses: Vec<Address> = route
            .target_node_addresses
            .iter()
            .filter_map(|a| {
                Some(Address {
                    kind: AddressType::from_proto(a.r#type)?,
                    address: a.address.clone(),
                })
            })
            .collect();
        if let Some(existing) = self.routes.get_mut(&k) {
            if existing.target_node == route.target_node {
                // The same node at other addresses: updated in place, as
                // the contract asks (the destination is never unrouted).
                if existing.target_node_addresses != addresses {
                    existing.target_node_addresses = addresses;
                    self.dirty = true;
                }
                let existing = existing.clone();
                return Ok(self.route_proto(&existing));
            }
            return Err(ProviderError::conflicting_resource(format!(
                "{} is already routed to node {} by route {}",
                route.destination_cidr, existing.target_node, existing.name
            )));
        }
        let target = NodeRef {
            name: route.target_node.clone(),
            ..Default::default()
        };
        if self.resolve(&target).is_none() {
            return Err(not_found(&route.target_node));
        }
        let cidr: String = route
            .destination_cidr
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let record = RouteRecord {
            cluster_name: cluster.to_owned(),
            name: format!("route-{name_hint}-{cidr}"),
            target_node: route.target_node.clone(),
            destination_cidr: route.destination_cidr.clone(),
            target_node_addresses: addresses,
        };
        let created = self.route_proto(&record);
        self.routes.insert(k, record);
        self.dirty = true;
        Ok(created)
    }

    pub(crate) fn delete_route(&mut self, cluster: &str, route: &Route) {
        if self
            .routes
            .remove(&key(cluster, &route.destination_cidr))
            .is_some()
        {
            self.dirty = true;
        }
    }

    /// A route is a blackhole when its target instance no longer exists.
    fn route_proto(&self, r: &RouteRecord) -> Route {
        Route {
            name: r.name.clone(),
            target_node: r.target_node.clone(),
            target_node_addresses: r
                .target_node_addresses
                .iter()
                .map(|a| NodeAddress {
                    r#type: a.kind.to_proto() as i32,
                    address: a.address.clone(),
                })
                .collect(),
            destination_cidr: r.destination_cidr.clone(),
            blackhole: !self.instances.contains_key(&r.target_node),
        }
    }

    pub(crate) fn list_routes(&self, cluster: &str) -> Vec<Route> {
        self.routes
            .values()
            .filter(|r| r.cluster_name == cluster)
            .map(|r| self.route_proto(r))
            .collect()
    }

    pub(crate) fn dump(&self) -> StateDump {
        StateDump {
            instances: self.instances(),
            removed: self.removed.iter().cloned().collect(),
            load_balancers: self.lbs.values().cloned().collect(),
            routes: self.routes.values().cloned().collect(),
            allocated_ips: self.pool.allocated(),
            leaders: self.leader_records(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccm_provider_sdk::LbOutcome;
    use ccm_provider_sdk::proto::{ErrorReason, ServicePort, SessionAffinity};

    fn state(config: FakeConfig) -> State {
        State::new(config).unwrap()
    }

    fn svc(uid: &str) -> Service {
        Service {
            namespace: "default".into(),
            name: format!("svc-{uid}"),
            uid: uid.into(),
            ports: vec![ServicePort {
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

    fn set<const N: usize>(nodes: [NodeRef; N]) -> NodeSet {
        NodeSet::new(nodes.into())
    }

    fn node(name: &str) -> NodeRef {
        NodeRef {
            name: name.into(),
            ..Default::default()
        }
    }

    fn ip_of(answer: LbAnswer<LoadBalancerStatus>) -> String {
        match answer.outcome {
            LbOutcome::Done(s) => s.ingress[0].ip.clone(),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn pool_skips_network_gateway_and_broadcast() {
        let mut p = IpPool::parse("10.1.2.0/30").unwrap();
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 1, 2, 2)));
        assert_eq!(p.allocate(), None);
        assert!(IpPool::parse("10.0.0.0/31").is_err());
        assert!(IpPool::parse("fd00::/64").is_err());
        assert!(IpPool::parse("10.0.0.0").is_err());
        let p = IpPool::parse("192.0.2.77/24").unwrap();
        assert_eq!(Ipv4Addr::from(p.first), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(Ipv4Addr::from(p.last), Ipv4Addr::new(192, 0, 2, 254));
    }

    #[test]
    fn the_pool_hands_out_the_lowest_free_address() {
        let ip = |d: u8| Ipv4Addr::new(10, 0, 0, d);
        let mut p = IpPool::parse("10.0.0.0/29").unwrap(); // .2 - .6
        p.take(ip(3));
        assert_eq!(p.allocate(), Some(ip(2)));
        assert_eq!(p.allocate(), Some(ip(4)), ".3 was taken by hand");
        p.release(ip(3));
        p.release(ip(3));
        assert_eq!(p.lowest_free(), Some(ip(3)));
        assert_eq!(p.allocate(), Some(ip(3)));
        p.take(ip(5));
        assert_eq!(p.allocate(), Some(ip(6)));
        assert_eq!(p.allocate(), None);
        p.release(ip(5));
        assert_eq!(p.allocate(), Some(ip(5)));
        assert_eq!(p.lowest_free(), None);
    }

    #[test]
    fn ips_are_kept_across_ensures_released_on_delete_and_run_out() {
        let mut s = state(FakeConfig {
            lb_ip_pool: "192.0.2.0/29".into(), // .2 - .6: five addresses
            ..Default::default()
        });
        let first = ip_of(s.ensure_lb("k", &svc("a"), &set([node("n1")])).unwrap());
        assert_eq!(first, "192.0.2.2");
        let again = ip_of(s.ensure_lb("k", &svc("a"), &set([node("n2")])).unwrap());
        assert_eq!(again, first);
        for uid in ["b", "c", "d", "e"] {
            s.ensure_lb("k", &svc(uid), &set([])).unwrap();
        }
        let err = s.ensure_lb("k", &svc("f"), &set([])).unwrap_err();
        assert_eq!(err.reason(), Some(ErrorReason::QuotaExceeded));
        // A failed ensure leaves nothing behind.
        assert!(s.get_lb("k", &svc("f")).is_none());
        s.delete_lb("k", &svc("a"));
        s.delete_lb("k", &svc("a"));
        assert!(s.get_lb("k", &svc("a")).is_none());
        assert_eq!(
            ip_of(s.ensure_lb("k", &svc("f"), &set([])).unwrap()),
            "192.0.2.2"
        );
    }

    #[test]
    fn ensure_is_idempotent_and_clusters_do_not_share() {
        let mut s = state(FakeConfig::default());
        let a = s
            .ensure_lb("k", &svc("a"), &set([node("n2"), node("n1")]))
            .unwrap();
        let gen1 = s.dump().load_balancers[0].generation;
        let b = s
            .ensure_lb("k", &svc("a"), &set([node("n1"), node("n2")]))
            .unwrap();
        assert_eq!(a, b);
        let lb = &s.dump().load_balancers[0];
        assert_eq!(lb.generation, gen1, "same input must not rewrite");
        assert_eq!(lb.backends, ["n1", "n2"]);
        let other = ip_of(s.ensure_lb("k2", &svc("a"), &set([])).unwrap());
        assert_ne!(other, ip_of(a));
        assert_eq!(s.list_lbs("k").len(), 1);
        assert_ne!(s.list_lbs("k")[0].name, s.list_lbs("k2")[0].name);
    }

    #[test]
    fn load_balancers_over_the_same_nodes_share_one_backend_list() {
        let mut s = state(FakeConfig::default());
        let nodes = [node("n2"), node("n1"), node("n1")];
        for uid in ["a", "b", "c"] {
            s.ensure_lb("k", &svc(uid), &set(nodes.clone())).unwrap();
        }
        s.update_lb("k", &svc("c"), &set([node("n3")])).unwrap();
        s.update_lb("k", &svc("b"), &set([node("n1"), node("n2")]))
            .unwrap();
        let lbs = s.dump().load_balancers;
        assert_eq!(lbs[0].backends, ["n1", "n2"]);
        assert!(Arc::ptr_eq(&lbs[0].backends.0, &lbs[1].backends.0));
        assert_eq!(lbs[2].backends, ["n3"]);
        // Stored as a plain list.
        let json = serde_json::to_value(&lbs[0]).unwrap();
        assert_eq!(json["backends"], serde_json::json!(["n1", "n2"]));
        let back: LoadBalancer = serde_json::from_value(json).unwrap();
        assert_eq!(back, lbs[0]);
    }

    #[test]
    fn update_changes_backends_and_fails_clearly_when_missing() {
        let mut s = state(FakeConfig::default());
        let err = s.update_lb("k", &svc("a"), &set([])).unwrap_err();
        assert!(err.message().contains("does not exist"), "{err}");
        s.ensure_lb("k", &svc("a"), &set([node("n1")])).unwrap();
        s.update_lb("k", &svc("a"), &set([node("n3")])).unwrap();
        assert_eq!(s.dump().load_balancers[0].backends, ["n3"]);
    }

    #[test]
    fn requested_and_previous_addresses_are_honoured() {
        let mut s = state(FakeConfig::default());
        let mut a = svc("a");
        a.load_balancer_ip = "192.0.2.50".into();
        assert_eq!(ip_of(s.ensure_lb("k", &a, &set([])).unwrap()), "192.0.2.50");
        let mut b = svc("b");
        b.load_balancer_ip = "192.0.2.50".into();
        let err = s.ensure_lb("k", &b, &set([])).unwrap_err();
        assert_eq!(err.reason(), Some(ErrorReason::ConflictingResource));
        b.load_balancer_ip = "10.9.9.9".into();
        let err = s.ensure_lb("k", &b, &set([])).unwrap_err();
        assert_eq!(err.reason(), Some(ErrorReason::InvalidServiceSpec));
        // Status from before a fake restart keeps the address.
        let mut c = svc("c");
        c.status = Some(LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: "192.0.2.77".into(),
                ..Default::default()
            }],
        });
        assert_eq!(ip_of(s.ensure_lb("k", &c, &set([])).unwrap()), "192.0.2.77");
    }

    #[test]
    fn annotations_are_validated_and_unknown_ones_warned_about() {
        let mut s = state(FakeConfig::default());
        let mut a = svc("a");
        a.annotations
            .insert(ANNOTATION_INTERNAL.into(), "maybe".into());
        let err = s.ensure_lb("k", &a, &set([])).unwrap_err();
        assert_eq!(err.reason(), Some(ErrorReason::InvalidAnnotation));
        assert_eq!(
            err.field_violations()[0].0,
            format!("metadata.annotations[{ANNOTATION_INTERNAL}]")
        );
        a.annotations
            .insert(ANNOTATION_INTERNAL.into(), "true".into());
        a.annotations
            .insert(ANNOTATION_HEALTH_CHECK_PATH.into(), "/healthz".into());
        a.annotations
            .insert("fake.ccm-rs.io/intrenal".into(), "true".into());
        a.annotations.insert("example.com/other".into(), "x".into());
        // Unknown keys are left to the controller (the annotation schema);
        // a health-check path without the Local policy is worth a warning.
        let answer = s.ensure_lb("k", &a, &set([])).unwrap();
        assert_eq!(answer.warnings.len(), 1);
        assert_eq!(answer.warnings[0].reason, "HealthCheckPathIgnored");
        a.external_traffic_policy = TrafficPolicy::Local as i32;
        assert!(s.ensure_lb("k", &a, &set([])).unwrap().warnings.is_empty());
        let mut sctp = svc("sctp");
        sctp.ports[0].protocol = Protocol::Sctp as i32;
        let err = s.ensure_lb("k", &sctp, &set([])).unwrap_err();
        assert_eq!(err.field_violations()[0].0, "spec.ports[0].protocol");
        let lb = &s.dump().load_balancers[0];
        assert!(lb.internal);
        assert_eq!(lb.health_check_path.as_deref(), Some("/healthz"));
        assert!(!lb.annotations.contains_key("example.com/other"));
    }

    #[test]
    fn other_classes_are_implemented_elsewhere() {
        let mut s = state(FakeConfig {
            implemented_elsewhere_classes: vec!["example.com/other".into()],
            ..Default::default()
        });
        let mut a = svc("a");
        a.load_balancer_class = Some("example.com/other".into());
        let answer = s.ensure_lb("k", &a, &set([])).unwrap();
        assert!(matches!(answer.outcome, LbOutcome::ImplementedElsewhere(_)));
        assert!(matches!(
            s.update_lb("k", &a, &set([])).unwrap().outcome,
            LbOutcome::ImplementedElsewhere(_)
        ));
        assert!(s.dump().load_balancers.is_empty());
        a.load_balancer_class = Some("example.com/mine".into());
        assert!(matches!(
            s.ensure_lb("k", &a, &set([])).unwrap().outcome,
            LbOutcome::Done(_)
        ));
    }

    #[test]
    fn auto_create_makes_instances_but_removed_ones_stay_gone() {
        let mut s = state(FakeConfig::default());
        assert!(s.instance_exists(&node("n1")));
        let md = s.instance_metadata(&node("n1")).unwrap();
        assert_eq!(md.provider_id, "fake://n1");
        assert_eq!(md.node_addresses[0].address, "10.0.0.10");
        assert_eq!(md.zone, "fake-zone-a");
        let md2 = s.instance_metadata(&node("n2")).unwrap();
        assert_eq!(md2.node_addresses[0].address, "10.0.0.11");
        assert!(s.remove_instance("n1"));
        assert!(!s.instance_exists(&node("n1")));
        let by_id = NodeRef {
            name: "n1".into(),
            provider_id: "fake://n1".into(),
            ..Default::default()
        };
        assert!(!s.instance_exists(&by_id));
        let err = s.instance_shutdown(&node("n1")).unwrap_err();
        assert_eq!(err.reason(), Some(ErrorReason::InstanceNotFound));
        // Declaring it again brings it back.
        s.add_instance(InstanceSpec::named("n1"), false).unwrap();
        assert!(s.instance_exists(&node("n1")));
    }

    #[test]
    fn without_auto_create_only_declared_instances_exist() {
        let mut s = state(FakeConfig {
            auto_create_instances: false,
            instances: vec![InstanceSpec {
                id: Some("i-123".into()),
                zone: Some("z9".into()),
                shutdown: true,
                ..InstanceSpec::named("declared")
            }],
            ..Default::default()
        });
        assert!(!s.instance_exists(&node("other")));
        assert!(s.instance_metadata(&node("other")).is_err());
        assert!(s.instance_shutdown(&node("declared")).unwrap());
        let by_id = NodeRef {
            name: "renamed".into(),
            provider_id: "fake://i-123".into(),
            ..Default::default()
        };
        assert_eq!(s.zone_of(&by_id).unwrap().failure_domain, "z9");
        let foreign = NodeRef {
            name: "declared".into(),
            provider_id: "aws:///i-123".into(),
            ..Default::default()
        };
        assert!(!s.instance_exists(&foreign));
        s.set_shutdown("declared", false).unwrap();
        assert!(!s.instance_shutdown(&node("declared")).unwrap());
        assert!(s.set_shutdown("nope", true).is_err());
    }

    #[test]
    fn provider_ids_recreate_instances_after_a_restart() {
        let mut s = state(FakeConfig::default());
        let n = NodeRef {
            name: "n1".into(),
            provider_id: "fake://i-42".into(),
            ..Default::default()
        };
        let md = s.instance_metadata(&n).unwrap();
        assert_eq!(md.provider_id, "fake://i-42");
    }

    #[test]
    fn restore_rebuilds_the_pool_and_index_and_refuses_inconsistencies() {
        let mut s = state(FakeConfig::default());
        s.ensure_lb("k", &svc("a"), &set([node("n1")])).unwrap();
        s.instance_exists(&node("n1"));
        s.remove_instance("gone");
        let saved = s.persisted();
        let mut back = State::restore(FakeConfig::default(), saved.clone()).unwrap();
        assert_eq!(back.dump(), s.dump());
        assert!(!back.dirty, "a restored cloud has nothing to write");
        // The pool knows .2 is taken; the id index finds n1 by providerID.
        assert_eq!(
            ip_of(back.ensure_lb("k", &svc("b"), &set([])).unwrap()),
            "192.0.2.3"
        );
        let by_id = NodeRef {
            name: "renamed".into(),
            provider_id: "fake://n1".into(),
            ..Default::default()
        };
        assert_eq!(
            back.instance_metadata(&by_id).unwrap().provider_id,
            "fake://n1"
        );
        assert!(!back.instance_exists(&node("gone")));

        let mut twice = saved.clone();
        twice.instances.push(twice.instances[0].clone());
        let err = State::restore(FakeConfig::default(), twice).unwrap_err();
        assert!(err.contains("share the id n1"), "{err}");
        let mut same_ip = saved.clone();
        let mut lb = same_ip.load_balancers[0].clone();
        lb.service_uid = "b".into();
        same_ip.load_balancers.push(lb);
        let err = State::restore(FakeConfig::default(), same_ip).unwrap_err();
        assert!(err.contains("192.0.2.2 of another load balancer"), "{err}");
    }

    fn route(cidr: &str, node: &str) -> Route {
        Route {
            target_node: node.into(),
            destination_cidr: cidr.into(),
            ..Default::default()
        }
    }

    #[test]
    fn routes_are_idempotent_conflict_and_turn_blackhole() {
        let mut s = state(FakeConfig::default());
        let r = s
            .create_route("k", "uid-1", &route("10.244.1.0/24", "n1"))
            .unwrap();
        assert_eq!(r.name, "route-uid-1-10-244-1-0-24");
        assert_eq!(
            s.create_route("k", "uid-1", &route("10.244.1.0/24", "n1"))
                .unwrap(),
            r
        );
        let err = s
            .create_route("k", "uid-2", &route("10.244.1.0/24", "n2"))
            .unwrap_err();
        assert_eq!(err.reason(), Some(ErrorReason::ConflictingResource));
        // Another cluster may use the same CIDR.
        s.create_route("k2", "uid-2", &route("10.244.1.0/24", "n2"))
            .unwrap();
        assert_eq!(s.list_routes("k").len(), 1);
        assert!(!s.list_routes("k")[0].blackhole);
        s.remove_instance("n1");
        assert!(s.list_routes("k")[0].blackhole);
        // Routes to a removed instance cannot be created.
        let err = s
            .create_route("k", "uid-1", &route("10.244.9.0/24", "n1"))
            .unwrap_err();
        assert_eq!(err.reason(), Some(ErrorReason::InstanceNotFound));
        s.delete_route("k", &route("10.244.1.0/24", "n1"));
        s.delete_route("k", &route("10.244.1.0/24", "n1"));
        assert!(s.list_routes("k").is_empty());
        assert_eq!(s.list_routes("k2").len(), 1);
    }
}
