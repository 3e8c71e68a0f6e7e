//! The fake cloud itself: instances, load balancers, routes and the IP pool,
//! as plain synchronous data. Everything here behaves like a *correct*
//! cloud; misbehaviour lives in [`crate::faults`]. Keeping this free of
//! async and gRPC makes the semantics unit-testable in isolation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;

use ccm_provider_sdk::{FencingToken, ProviderError, ProviderResult, Readiness};
use serde::{Deserialize, Serialize};

use crate::Error;

mod instances;
mod ip_pool;
mod load_balancers;
mod routes;
#[cfg(test)]
mod tests;
mod volumes;

pub use instances::{Address, AddressType, Instance, InstanceSpec};
use ip_pool::IpPool;
pub use load_balancers::{Backends, LbPort, LoadBalancer};
pub use routes::RouteRecord;

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
    /// The `spec.loadBalancerClass` values the fake declares it serves
    /// (contract 1.3.0, `GetProviderInfo.load_balancer_classes`).
    pub load_balancer_classes: Vec<String>,
    /// Whether it declares serving Services without a class as the
    /// controller's default (`None`: not said; `Some(false)`: declined).
    pub serves_unclassed: Option<bool>,
    /// The KEP-5778 platforms it declares it manages.
    pub platforms: Vec<String>,
    /// Whether BatchInstances is one cloud call (one call log entry, one
    /// quota token), as a describe call of many ids is. `false`: the SDK
    /// asks the single methods, so each question is logged as its own call
    /// (for tests that count a method's calls).
    pub native_batch: bool,
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
            load_balancer_classes: Vec::new(),
            serves_unclassed: None,
            platforms: Vec::new(),
            native_batch: true,
        }
    }
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
    /// The id of the node set `last_backends` was made from.
    last_nodes: String,
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
            last_nodes: String::new(),
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
