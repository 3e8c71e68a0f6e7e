//! Two providers behind one controller (issue 28, docs/hybrid.md):
//! "onprem", the local provider (owns `local://`, the default provider,
//! also serves class [`ONPREM_CLASS`]), and "cloud", the fake provider
//! (owns `fake://`, serves [`CLOUD_CLASS`], declines Services without a
//! class; platform `cloud` by the controller's flag). Each provider sits
//! behind a recording pass-through ([`ccm_testsupport::recorder`]), so the
//! counts cover both alike: each provider's load balancers (listed with
//! ListLoadBalancers on its own socket), the mutations it was sent in the
//! quiet window, and calls about Nodes it does not own.
//!
//! Every Node's InternalIP is on loopback (127.0.6.0/24, declared in the
//! inventory and the fake's instances), and the local provider's load
//! balancers listen on 127.203.0.0/16: its health checks stay on loopback.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::recorder::{Recorded, Recorder, socket_of};
use ccm_testsupport::steady::{kubelet_heartbeats, kubelet_ready};
use ccm_testsupport::{ingress_ips, kubelet_node, lb_service, poll_until};
use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;

use crate::cluster::{CONTROLLER_USER, Cluster, FINALIZER, is_initialised, key};
use crate::count::{Census, LULL, POLL, QUIET, Quiet, Tally, last_retry_due};
use crate::process::{Controller, LocalProvider, Provider};
use crate::{Rng, RunDir, SETTLE, scale};

pub const CLOUD_CLASS: &str = "example.com/cloud";
pub const ONPREM_CLASS: &str = "example.com/onprem";
pub const PLATFORM_KEY: &str = "cloudprovider.kubernetes.io/platform";
/// The finalizer of the provider that is not the default.
pub const CLOUD_FINALIZER: &str = "cloud.provider.ccm-rs.io/load-balancer-cleanup";
const VIP_RANGE: &str = "127.203.0.0/16";
const PORT: i32 = 8080;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    Onprem,
    Cloud,
}

impl Side {
    pub const BOTH: [Side; 2] = [Side::Onprem, Side::Cloud];

    pub fn name(self) -> &'static str {
        match self {
            Side::Onprem => "onprem",
            Side::Cloud => "cloud",
        }
    }

    pub fn finalizer(self) -> &'static str {
        match self {
            Side::Onprem => FINALIZER,
            Side::Cloud => CLOUD_FINALIZER,
        }
    }

    /// The class that moves a Service to this provider.
    pub fn class(self) -> &'static str {
        match self {
            Side::Onprem => ONPREM_CLASS,
            Side::Cloud => CLOUD_CLASS,
        }
    }

    pub fn other(self) -> Side {
        match self {
            Side::Onprem => Side::Cloud,
            Side::Cloud => Side::Onprem,
        }
    }
}

/// The provider that must serve `svc` now: a LoadBalancer not being
/// deleted, by its class (none: onprem, the default).
pub fn served_by(svc: &Service) -> Option<Side> {
    if svc.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return None;
    }
    match spec.load_balancer_class.as_deref() {
        None | Some(ONPREM_CLASS) => Some(Side::Onprem),
        Some(CLOUD_CLASS) => Some(Side::Cloud),
        Some(_) => None,
    }
}

fn holds(svc: &Service, finalizer: &str) -> bool {
    svc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
}

/// A LoadBalancer Service of `class` (none: the default provider's).
pub fn service(name: &str, class: Option<&str>) -> Service {
    let mut svc = lb_service(name, PORT);
    svc.spec.as_mut().unwrap().load_balancer_class = class.map(str::to_owned);
    svc
}

/// The machines of both providers: `onprem-N` in the local provider's
/// inventory, `cloud-N` declared in the fake (even ones registered with
/// the platform label, odd ones with the providerID their kubelet set).
pub struct Machines {
    pub onprem: Vec<String>,
    pub cloud: Vec<String>,
}

impl Machines {
    pub fn new(n: usize) -> Machines {
        assert!(n <= 100, "addresses for 100 machines per side");
        Machines {
            onprem: (0..n).map(|i| format!("onprem-{i}")).collect(),
            cloud: (0..n).map(|i| format!("cloud-{i}")).collect(),
        }
    }

    fn write(&self, inventory: &Path, instances: &Path) {
        let mut inv = String::from("instances:\n");
        for (i, node) in self.onprem.iter().enumerate() {
            inv.push_str(&format!(
                "  - node: {node}\n    zone: local-a\n    region: local\n    addresses:\n      - {{type: InternalIP, address: 127.0.6.{}}}\n",
                i + 1
            ));
        }
        std::fs::write(inventory, inv).unwrap();
        let specs: Vec<_> = self
            .cloud
            .iter()
            .enumerate()
            .map(|(i, node)| {
                json!({"name": node, "addresses": [
                    {"type": "InternalIP", "address": format!("127.0.6.{}", 101 + i)},
                ]})
            })
            .collect();
        std::fs::write(instances, json!(specs).to_string()).unwrap();
    }

    /// The Node machine `i` of `side` registers: an onprem one as a plain
    /// kubelet does, a cloud one with the platform label or its providerID.
    pub fn node(&self, side: Side, i: usize) -> Node {
        let name = match side {
            Side::Onprem => return kubelet_node(&self.onprem[i]),
            Side::Cloud => &self.cloud[i],
        };
        let mut node = kubelet_node(name);
        if i.is_multiple_of(2) {
            node.metadata
                .labels
                .get_or_insert_default()
                .insert(PLATFORM_KEY.into(), "cloud".into());
        } else {
            node.spec.as_mut().unwrap().provider_id = Some(format!("fake://{name}"));
        }
        node
    }
}

/// The setup: an apiserver, both providers with their pass-throughs, one
/// controller of cluster [`HybridWorld::CLUSTER`].
pub struct HybridWorld {
    pub tally: Tally,
    pub rng: Rng,
    pub scale: usize,
    pub machines: Machines,
    pub controller: Controller,
    pub onprem: LocalProvider,
    pub cloud: Provider,
    onprem_calls: Recorder,
    cloud_calls: Recorder,
    pub cluster: Cluster,
    /// The Nodes registered, with their owner (the scenario fills it).
    pub registered: BTreeMap<String, Side>,
    pub run: RunDir,
}

impl HybridWorld {
    pub const CLUSTER: &'static str = "chaos";
    pub const NS: &'static str = "apps";

    /// `machines` per provider; `cloud_flags` are more fake-provider flags.
    pub async fn new(scenario: &str, machines: usize, cloud_flags: &[&str]) -> HybridWorld {
        let run = RunDir::new(scenario);
        let (rng, seed) = Rng::seeded();
        let mut tally = Tally::new(scenario);
        tally.extra("seed", seed);
        let cluster =
            Cluster::start(Self::CLUSTER, run.tmp.path().join("apiserver"), &run.logs).await;
        cluster.namespace(Self::NS).await;
        let machines = Machines::new(machines);
        let inventory = run.logs.join("inventory.yaml");
        let instances = run.logs.join("instances.json");
        machines.write(&inventory, &instances);
        let sockets = run.tmp.path();
        let class = format!("--load-balancer-class={ONPREM_CLASS}");
        let onprem = LocalProvider::start(
            "onprem",
            sockets,
            &run.logs,
            &inventory,
            VIP_RANGE,
            &[&class],
        )
        .await;
        let instances_flag = format!("--instances-file={}", instances.display());
        let class = format!("--load-balancer-class={CLOUD_CLASS}");
        let mut flags = vec![
            instances_flag.as_str(),
            class.as_str(),
            "--unclassed-services=declined",
        ];
        flags.extend_from_slice(cloud_flags);
        let cloud = Provider::start(sockets, &run.logs, &flags).await;
        let onprem_calls = Recorder::start(
            &sockets.join("onprem-recorded.sock"),
            &socket_of(&onprem.endpoint),
        )
        .unwrap();
        let cloud_calls = Recorder::start(
            &sockets.join("cloud-recorded.sock"),
            &socket_of(&cloud.endpoint),
        )
        .unwrap();
        let providers = [
            format!("--provider=onprem={}", onprem_calls.endpoint),
            format!("--provider=cloud={}", cloud_calls.endpoint),
        ];
        let controller = Controller::start_with_providers(
            "controller",
            &cluster.kubeconfig,
            &[&providers[0], &providers[1]],
            Self::CLUSTER,
            run.logs.join("controller.log"),
            &[
                "--default-provider=onprem",
                "--cloud-provider-platforms=cloud=cloud",
            ],
        );
        HybridWorld {
            tally,
            rng,
            scale: scale(),
            machines,
            controller,
            onprem,
            cloud,
            onprem_calls,
            cloud_calls,
            cluster,
            registered: BTreeMap::new(),
            run,
        }
    }

    pub fn logs(&self) -> String {
        self.run.logs.display().to_string()
    }

    fn calls(&self, side: Side) -> Vec<Recorded> {
        match side {
            Side::Onprem => self.onprem_calls.calls(),
            Side::Cloud => self.cloud_calls.calls(),
        }
    }

    fn endpoint(&self, side: Side) -> &str {
        match side {
            Side::Onprem => &self.onprem.endpoint,
            Side::Cloud => &self.cloud.endpoint,
        }
    }

    /// The cluster's load balancers at `side`, by Service uid, with their
    /// first address (asked on the provider's own socket: not recorded).
    async fn load_balancers(&self, side: Side) -> BTreeMap<String, String> {
        let client = ProviderClient::connect_lazy(self.endpoint(side), ClientOptions::default())
            .expect("a client");
        client
            .list_load_balancers(Self::CLUSTER)
            .await
            .unwrap_or_else(|e| panic!("listing {}'s load balancers: {e}", side.name()))
            .into_iter()
            .map(|lb| {
                let ip = lb
                    .status
                    .and_then(|s| s.ingress.into_iter().next())
                    .map(|i| i.ip)
                    .unwrap_or_default();
                (lb.service_uid, ip)
            })
            .collect()
    }

    /// How the Services and both providers' load balancers disagree: a
    /// Service served by a provider must have its load balancer there (its
    /// address in the status) and that provider's finalizer; a finalizer of
    /// a provider that no longer serves the Service is a clean-up not done
    /// (stuck); a load balancer no Service accounts for is leaked.
    pub async fn census(&self) -> Census {
        let services = self.cluster.all_services().await;
        let mut c = Census::default();
        for side in Side::BOTH {
            let lbs = self.load_balancers(side).await;
            let mut accounted = BTreeSet::new();
            for svc in &services {
                let uid = svc.metadata.uid.clone().unwrap_or_default();
                let finalized = holds(svc, side.finalizer());
                if served_by(svc) == Some(side) {
                    accounted.insert(uid.clone());
                    match lbs.get(&uid) {
                        None => c.missing.push(format!(
                            "{} (uid {uid}): no load balancer at {}",
                            key(svc),
                            side.name()
                        )),
                        Some(ip) if ingress_ips(svc) != [ip.clone()] => c.missing.push(format!(
                            "{}: shows {:?}, its load balancer at {} has {ip}",
                            key(svc),
                            ingress_ips(svc),
                            side.name()
                        )),
                        Some(_) if !finalized => c.missing.push(format!(
                            "{}: served by {} without its finalizer {}",
                            key(svc),
                            side.name(),
                            side.finalizer()
                        )),
                        Some(_) => {}
                    }
                } else if finalized {
                    accounted.insert(uid.clone());
                    c.stuck.push(format!(
                        "{} (uid {uid}) holds {} though {} does not serve it (load balancer {})",
                        key(svc),
                        side.finalizer(),
                        side.name(),
                        if lbs.contains_key(&uid) {
                            "present"
                        } else {
                            "gone"
                        }
                    ));
                }
            }
            for uid in lbs.keys() {
                if !accounted.contains(uid) {
                    let of = services
                        .iter()
                        .find(|s| s.metadata.uid.as_ref() == Some(uid))
                        .map_or_else(|| "a Service gone".to_owned(), key);
                    c.leaked
                        .push(format!("at {}: for {of} (uid {uid})", side.name()));
                }
            }
        }
        c
    }

    /// Polls the census until it is clean or `within` passed.
    pub async fn settle(&self, within: Duration) -> (Census, Duration) {
        let started = Instant::now();
        let c = poll_until(within, POLL, || self.census(), Census::clean).await;
        (c, started.elapsed())
    }

    /// Calls either provider received about a Node the other owns (or
    /// nobody registered).
    fn calls_about_foreign_nodes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for side in Side::BOTH {
            for c in self.calls(side) {
                if let Some(node) = c.node()
                    && self.registered.get(node) != Some(&side)
                {
                    out.push(format!("{} asked {} about {node}", side.name(), c.method));
                }
            }
        }
        out
    }

    /// After convergence: once neither provider was sent a mutation for a
    /// [`LULL`] and no retry the controller logged is due, [`QUIET`] of
    /// kubelet heartbeats; the mutations either provider was sent and the
    /// controller's writes meanwhile.
    pub async fn quiet(&self, within: Duration) -> Quiet {
        let nodes: Vec<String> = self
            .cluster
            .all_nodes()
            .await
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        let deadline = Instant::now() + within;
        loop {
            let last = Side::BOTH
                .iter()
                .flat_map(|s| self.calls(*s))
                .filter(Recorded::mutates)
                .map(|c| c.at)
                .max();
            let lull = last.is_none_or(|t| t.elapsed().unwrap_or_default() >= LULL);
            let log = std::fs::read_to_string(&self.controller.proc.log).unwrap_or_default();
            let retries_due = last_retry_due(&log)
                .and_then(|due| due.checked_add(Duration::from_secs(1)))
                .is_some_and(|due| due > SystemTime::now());
            if (lull && !retries_due) || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let window = kubelet_heartbeats(&self.cluster.admin, &nodes, QUIET)
            .await
            .expect("kubelet heartbeats");
        let audit = &self.cluster.apiserver.audit;
        audit
            .sync(&self.cluster.admin)
            .await
            .expect("audit log sync");
        let writes = audit
            .writes_by(CONTROLLER_USER, window.from, window.to)
            .expect("reading the audit log")
            .into_iter()
            .filter(|w| w.resource != "leases")
            .map(|w| w.to_string())
            .collect();
        let mut mutations = Vec::new();
        for side in Side::BOTH {
            mutations.extend(
                self.calls(side)
                    .into_iter()
                    .filter(|c| c.mutates() && c.at >= window.from && c.at < window.to)
                    .map(|c| format!("{}: {} ({})", side.name(), c.method, c.request_id)),
            );
        }
        Quiet { mutations, writes }
    }

    /// Deletes every Service that wants a load balancer or holds either
    /// finalizer, then waits (bounded) until both providers hold none.
    async fn teardown(&self, within: Duration) -> Census {
        for svc in self.cluster.all_services().await {
            let ours =
                served_by(&svc).is_some() || Side::BOTH.iter().any(|s| holds(&svc, s.finalizer()));
            if ours {
                let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
                self.cluster
                    .delete_service(ns, svc.metadata.name.as_deref().unwrap_or_default())
                    .await;
            }
        }
        let (c, _) = self.settle(within).await;
        c
    }

    /// The end of the scenario: every Node posts Ready, the system
    /// converges, every registered Node is initialised by its owner and
    /// none is deleted, neither provider was asked about the other's
    /// Nodes, a quiet window is quiet, and deleting every Service leaves
    /// no load balancer at either provider. Prints the line; every count
    /// must be 0.
    pub async fn finish(mut self) {
        self.controller.assert_running();
        for n in self.cluster.all_nodes().await {
            let name = n.metadata.name.unwrap_or_default();
            kubelet_ready(&self.cluster.admin, &name)
                .await
                .unwrap_or_else(|e| panic!("posting Ready for {name}: {e}"));
        }
        let (c, took) = self.settle(SETTLE).await;
        self.tally.census("converged", &c);
        self.tally.extra("settled_ms", took.as_millis());

        let names: Vec<String> = self.registered.keys().cloned().collect();
        let cluster = &self.cluster;
        let nodes = poll_until(
            SETTLE,
            POLL,
            || cluster.all_nodes(),
            |nodes| {
                names.iter().all(|name| {
                    nodes
                        .iter()
                        .any(|n| n.metadata.name.as_ref() == Some(name) && is_initialised(n))
                })
            },
        )
        .await;
        let present: BTreeMap<String, &Node> = nodes
            .iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
            .collect();
        let mut deleted = Vec::new();
        for (name, side) in &self.registered {
            match present.get(name) {
                // Every machine stays in its provider's inventory: none may go.
                None => deleted.push(name.clone()),
                Some(n) if !is_initialised(n) => self
                    .tally
                    .details
                    .push(format!("node {name} never initialised")),
                Some(n) => {
                    let id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
                    let scheme = match side {
                        Side::Onprem => "local://",
                        Side::Cloud => "fake://",
                    };
                    if !id.is_some_and(|id| id.starts_with(scheme)) {
                        self.tally.details.push(format!(
                            "node {name} of {} has providerID {id:?}",
                            side.name()
                        ));
                    }
                }
            }
        }
        self.tally.wrongly_deleted(&deleted);
        let foreign = self.calls_about_foreign_nodes();
        self.tally.extra("calls_about_foreign_nodes", foreign.len());
        self.tally.details.extend(foreign);
        for side in Side::BOTH {
            self.tally
                .extra(&format!("{}_calls", side.name()), self.calls(side).len());
        }

        let q = self.quiet(SETTLE).await;
        self.tally.quiet(&q);
        let c = self.teardown(SETTLE).await;
        self.tally.census("teardown", &c);
        self.controller.assert_running();
        self.tally.finish(&self.logs());
    }
}
