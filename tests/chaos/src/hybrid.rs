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
use std::time::{Duration, Instant};

use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::hybrid::{
    CLOUD_CLASS, ONPREM_CLASS, Recorders, Side, cloud_node, fake_instances, inventory,
};
use ccm_testsupport::steady::kubelet_ready;
use ccm_testsupport::{ingress_ips, kubelet_node, poll_until};
use k8s_openapi::api::core::v1::{Node, Service};

use crate::cluster::{CONTROLLER_USER, Cluster, is_initialised, key};
use crate::count::{self, Census, POLL, Quiet, Tally};
use crate::process::{Controller, LocalProvider, Provider};
use crate::{Rng, RunDir, SETTLE, scale};

const VIP_RANGE: &str = "127.203.0.0/16";
/// The Nodes' InternalIPs: `NODE_NET.N`.
const NODE_NET: &str = "127.0.6";

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

/// The machines of both providers: `onprem-N` in the local provider's
/// inventory, `cloud-N` declared in the fake (even ones registered with
/// the platform label, odd ones with the providerID their kubelet set).
pub struct Machines {
    pub onprem: Vec<String>,
    pub cloud: Vec<String>,
}

impl Machines {
    pub fn new(n: usize) -> Machines {
        Machines {
            onprem: (0..n).map(|i| format!("onprem-{i}")).collect(),
            cloud: (0..n).map(|i| format!("cloud-{i}")).collect(),
        }
    }

    fn write(&self, inventory_file: &Path, instances_file: &Path) {
        std::fs::write(inventory_file, inventory(&self.onprem, NODE_NET)).unwrap();
        std::fs::write(instances_file, fake_instances(&self.cloud, NODE_NET)).unwrap();
    }

    /// The Node machine `i` of `side` registers: an onprem one as a plain
    /// kubelet does, a cloud one with the platform label or its providerID.
    pub fn node(&self, side: Side, i: usize) -> Node {
        match side {
            Side::Onprem => kubelet_node(&self.onprem[i]),
            Side::Cloud => cloud_node(&self.cloud[i], !i.is_multiple_of(2)),
        }
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
    /// What each provider was sent: the controller dials these.
    sent: Recorders,
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
        let onprem_flags = Side::Onprem.provider_flags();
        let onprem_flags: Vec<&str> = onprem_flags.iter().map(String::as_str).collect();
        let onprem = LocalProvider::start(
            "onprem",
            sockets,
            &run.logs,
            &inventory,
            VIP_RANGE,
            &onprem_flags,
        )
        .await;
        let mut flags = vec![format!("--instances-file={}", instances.display())];
        flags.extend(Side::Cloud.provider_flags());
        flags.extend(cloud_flags.iter().map(|f| f.to_string()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let cloud = Provider::start(sockets, &run.logs, &flags).await;
        let sent = Recorders::start(sockets, &onprem.endpoint, &cloud.endpoint).unwrap();
        let providers = sent.controller_flags();
        let providers: Vec<&str> = providers.iter().map(String::as_str).collect();
        let controller = Controller::start_with_providers(
            "controller",
            &cluster.kubeconfig,
            &providers,
            Self::CLUSTER,
            run.logs.join("controller.log"),
            &[],
        );
        HybridWorld {
            tally,
            rng,
            scale: scale(),
            machines,
            controller,
            onprem,
            cloud,
            sent,
            cluster,
            registered: BTreeMap::new(),
            run,
        }
    }

    pub fn logs(&self) -> String {
        self.run.logs.display().to_string()
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
                    if !id.is_some_and(|id| id.starts_with(side.scheme())) {
                        self.tally.details.push(format!(
                            "node {name} of {} has providerID {id:?}",
                            side.name()
                        ));
                    }
                }
            }
        }
        self.tally.wrongly_deleted(&deleted);
        let foreign = self.sent.calls_about_foreign_nodes(&self.registered);
        self.tally.extra("calls_about_foreign_nodes", foreign.len());
        self.tally.details.extend(foreign);
        for side in Side::BOTH {
            self.tally.extra(
                &format!("{}_calls", side.name()),
                self.sent.calls(side).len(),
            );
        }

        let q: Quiet = count::quiet(
            &self.cluster,
            &self.sent,
            &self.controller.proc.log,
            CONTROLLER_USER,
            SETTLE,
        )
        .await;
        self.tally.quiet(&q);
        let c = self.teardown(SETTLE).await;
        self.tally.census("teardown", &c);
        self.controller.assert_running();
        self.tally.finish(&self.logs());
    }
}
