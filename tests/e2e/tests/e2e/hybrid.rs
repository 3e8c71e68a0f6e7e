//! A hybrid cluster (issue 28, docs/hybrid.md) end to end: one controller,
//! two real provider processes on their own sockets. "onprem" is the local
//! provider (owns `local://`, the default provider, also serves class
//! `example.com/onprem`); "cloud" is the fake provider (owns `fake://`,
//! serves class `example.com/cloud`, declines Services without a class),
//! and the controller adds platform `cloud` to it
//! (`--cloud-provider-platforms cloud=cloud`).
//!
//! What each provider was asked is read from a recording pass-through on
//! its socket ([`ccm_testsupport::recorder`]): every call's method and
//! request id, which names the Node or Service it is about. So "zero calls
//! about the other's Nodes" is counted, not inferred.
//!
//! The phases: Nodes of each kind initialised by their owner only;
//! Services routed by class and by default, a class nobody serves left
//! alone; one provider SIGSTOPped for a minute while the other keeps
//! initialising Nodes and serving load balancers, no Node deleted, and
//! everything converging once it is resumed; Services changing class
//! (LoadBalancer class A → ClusterIP → LoadBalancer class B, back to back)
//! deleted at the old provider and ensured at the new one; nothing leaked
//! at either provider; and a quiet window with zero provider mutations and
//! zero controller writes.
//!
//! Every address is on loopback: the local provider's load balancers
//! listen on 127.202.0.0/24 and every Node's InternalIP is in 127.0.5.0/24.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::hybrid::{
    CLOUD_CLASS, ONPREM_CLASS, ONPREM_FINALIZER, Recorders, Side, cloud_node, fake_instances,
    inventory as inventory_of, service,
};
use ccm_testsupport::recorder::Recorded;
use ccm_testsupport::steady::{kubelet_heartbeats, kubelet_ready};
use ccm_testsupport::{built_binary, eventually_within, unique_name};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::oneshot;

const CLUSTER: &str = "hybrid";
const UNSERVED_CLASS: &str = "example.com/elsewhere";
const VIP_RANGE: &str = "127.202.0.0/24";
const CLOUD_POOL: &str = "192.0.2.0/24";
/// The Nodes' InternalIPs: `NODE_NET.N`.
const NODE_NET: &str = "127.0.5";
/// How long one provider is SIGSTOPped (the minute).
const STOPPED: Duration = Duration::from_secs(60);
/// How long converging anything else may take; it takes seconds.
const CONVERGE: Duration = Duration::from_secs(30);
/// The quiet window after convergence.
const QUIET: Duration = Duration::from_secs(6);

/// Whether `ip` is one of `side`'s load balancer addresses.
fn owns_address(side: Side, ip: &str) -> bool {
    match side {
        Side::Onprem => ip.starts_with("127.202.0."),
        Side::Cloud => ip.starts_with("192.0.2."),
    }
}

/// One provider process and a client straight to its socket (for the
/// test's own listings, never recorded).
struct Provided {
    side: Side,
    process: Provider,
    direct: ProviderClient,
}

impl Provided {
    fn new(side: Side, process: Provider) -> Provided {
        let direct =
            ProviderClient::connect_lazy(&process.endpoint, ClientOptions::default()).unwrap();
        Provided {
            side,
            process,
            direct,
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.process.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", self.side.name());
    }

    /// Its load balancers of the cluster, by Service uid, with their first
    /// ingress address.
    async fn load_balancers(&self) -> BTreeMap<String, String> {
        self.direct
            .list_load_balancers(CLUSTER)
            .await
            .unwrap_or_else(|e| panic!("listing {}'s load balancers: {e}", self.side.name()))
            .into_iter()
            .map(|lb| {
                let ip = lb
                    .status
                    .as_ref()
                    .and_then(|s| s.ingress.first())
                    .map(|i| i.ip.clone())
                    .unwrap_or_default();
                (lb.service_uid, ip)
            })
            .collect()
    }
}

/// The cluster: the control plane held exclusively, both providers, the
/// controller running in-process as its ServiceAccount bound to the
/// shipped ClusterRole.
struct Hybrid {
    admin: Client,
    ns: String,
    admin_port: u16,
    onprem: Provided,
    cloud: Provided,
    /// What each provider was asked: the controller dials these.
    recorders: Recorders,
    /// Every Node registered, with its owner and uid.
    nodes: BTreeMap<String, (Side, String)>,
    /// Every Service created, by name, with the provider that must serve it
    /// now (`None`: nobody).
    services: BTreeMap<String, Option<Side>>,
    /// The provider SIGSTOPped now, if any: the test asks it nothing.
    stopped: Option<Side>,
    stop_controller: Option<oneshot::Sender<()>>,
    controller: Option<tokio::task::JoinHandle<Result<(), cloud_controller_manager::RunError>>>,
    /// Sockets, the inventory and the fake's instances.
    _files: tempfile::TempDir,
    control_plane: ControlPlane,
}

/// The machines: `onprem-N` in the local provider's inventory and
/// `cloud-N` declared in the fake, each with a loopback InternalIP.
struct Machines {
    onprem: Vec<String>,
    cloud: Vec<String>,
}

impl Machines {
    fn new(n: usize) -> Machines {
        Machines {
            onprem: (1..=n)
                .map(|i| unique_name(&format!("onprem-{i}")))
                .collect(),
            cloud: (1..=n)
                .map(|i| unique_name(&format!("cloud-{i}")))
                .collect(),
        }
    }
}

impl Hybrid {
    async fn start(machines: &Machines) -> Hybrid {
        let ControllerAccount {
            control_plane,
            admin,
            ns,
            sa,
        } = ControllerAccount::new("hybrid", &["clusterrole.yaml"]).await;

        let files = tempfile::tempdir().unwrap();
        let inventory = files.path().join("inventory.yaml");
        std::fs::write(&inventory, inventory_of(&machines.onprem, NODE_NET)).unwrap();
        let instances = files.path().join("instances.json");
        std::fs::write(&instances, fake_instances(&machines.cloud, NODE_NET)).unwrap();
        let mut local_flags = vec![
            format!("--inventory={}", inventory.display()),
            format!("--vip-range={VIP_RANGE}"),
            "--inventory-poll-interval=100ms".to_owned(),
        ];
        local_flags.extend(Side::Onprem.provider_flags());
        let local = Provider::spawn(
            &built_binary("ccm-local-provider", "local-provider"),
            &local_flags,
            &[],
        );
        let mut fake_flags = vec![
            format!("--instances-file={}", instances.display()),
            format!("--lb-ip-pool={CLOUD_POOL}"),
        ];
        fake_flags.extend(Side::Cloud.provider_flags());
        let fake = Provider::spawn(
            &built_binary("ccm-fake-provider", "fake-provider"),
            &fake_flags,
            &[],
        );
        local.wait_ready().await;
        fake.wait_ready().await;
        let recorders = Recorders::start(files.path(), &local.endpoint, &fake.endpoint).unwrap();
        let onprem = Provided::new(Side::Onprem, local);
        let cloud = Provided::new(Side::Cloud, fake);

        let admin_port = free_port();
        let mut args = vec!["cloud-controller-manager".to_owned()];
        args.extend(recorders.controller_flags());
        args.extend([
            format!("--cluster-name={CLUSTER}"),
            // The local provider routes nothing without a route table.
            "--controllers=*,-route".to_owned(),
            "--node-monitor-period=200ms".to_owned(),
            // Periodic passes within the quiet window: address refreshes
            // ask each provider about each of its Nodes every second.
            "--node-status-update-frequency=1s".to_owned(),
            "--load-balancer-orphan-sweep-period=1s".to_owned(),
            "--leader-elect=false".to_owned(),
            "--secure-port=0".to_owned(),
            format!("--admin-port={admin_port}"),
            "--bind-address=127.0.0.1".to_owned(),
        ]);
        let (stop_controller, stopped) = oneshot::channel();
        let controller = run_controller(sa, args, stopped);
        Hybrid {
            admin,
            ns,
            admin_port,
            onprem,
            cloud,
            recorders,
            nodes: BTreeMap::new(),
            services: BTreeMap::new(),
            stopped: None,
            stop_controller: Some(stop_controller),
            controller: Some(controller),
            _files: files,
            control_plane,
        }
    }

    fn side(&self, side: Side) -> &Provided {
        match side {
            Side::Onprem => &self.onprem,
            Side::Cloud => &self.cloud,
        }
    }

    /// SIGSTOPs `side`'s process.
    fn hang(&mut self, side: Side) {
        self.side(side).signal("-STOP");
        self.stopped = Some(side);
    }

    /// SIGCONTs it.
    fn resume(&mut self, side: Side) {
        self.side(side).signal("-CONT");
        self.stopped = None;
    }

    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    fn services_api(&self) -> Api<Service> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Registers a Node as `kubelet --cloud-provider=external` does: a
    /// cloud one with the platform label, or with its `fake://` providerID
    /// already set (`--provider-id`); an onprem one with neither. Then it
    /// posts Ready, as the kubelet does once up.
    async fn register(&mut self, name: &str, side: Side, with_provider_id: bool) {
        let node = match side {
            Side::Onprem => kubelet_node(name),
            Side::Cloud => cloud_node(name, with_provider_id),
        };
        let created = self
            .nodes_api()
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
        kubelet_ready(&self.admin, name).await.unwrap();
        self.nodes
            .insert(name.to_owned(), (side, created.uid().unwrap()));
    }

    /// Waits (up to `within`) until each of `names` is initialised by its
    /// owner: no uninitialized taint, its owner's providerID.
    async fn wait_initialised(&self, names: &[&str], within: Duration) {
        for name in names {
            let side = self.nodes[*name].0;
            eventually_within(
                within,
                Duration::from_millis(50),
                &format!("{name} initialised by {}", side.name()),
                || async {
                    let n = self
                        .nodes_api()
                        .get(name)
                        .await
                        .map_err(|e| e.to_string())?;
                    let id = n.spec.as_ref().and_then(|s| s.provider_id.clone());
                    let ok = !has_taint(&n, UNINITIALIZED)
                        && id
                            .as_deref()
                            .is_some_and(|id| id.starts_with(side.scheme()));
                    ok.then_some(())
                        .ok_or_else(|| format!("providerID {id:?}, taints {:?}", n.spec))
                },
            )
            .await;
        }
    }

    /// Creates a LoadBalancer Service of `class` (none: the default
    /// provider's); `serve` says who must serve it.
    async fn create_service(&mut self, name: &str, class: Option<&str>, serve: Option<Side>) {
        self.services_api()
            .create(&PostParams::default(), &service(name, class))
            .await
            .unwrap();
        self.services.insert(name.to_owned(), serve);
    }

    /// LoadBalancer class A → ClusterIP → LoadBalancer `class`, back to
    /// back (the class cannot change while the type stays LoadBalancer).
    async fn change_class(&mut self, name: &str, class: Option<&str>, serve: Side) {
        let api = self.services_api();
        let pp = PatchParams::default();
        let to_cluster_ip = json!({"spec": {"type": "ClusterIP", "loadBalancerClass": null}});
        api.patch(name, &pp, &Patch::Merge(to_cluster_ip))
            .await
            .unwrap();
        let back = json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": class}});
        api.patch(name, &pp, &Patch::Merge(back)).await.unwrap();
        self.services.insert(name.to_owned(), Some(serve));
    }

    /// Waits (up to `within`) until `name` is served by `side` only: its
    /// load balancer there and nowhere else (not checked at a provider that
    /// is stopped: the final listing does), that provider's finalizer and
    /// no other, and the load balancer's address in its status.
    async fn wait_served(&self, name: &str, side: Side, within: Duration) {
        let other = side.other();
        eventually_within(
            within,
            Duration::from_millis(100),
            &format!("{name} served by {} only", side.name()),
            || async {
                let svc = self
                    .services_api()
                    .get(name)
                    .await
                    .map_err(|e| e.to_string())?;
                let uid = svc.uid().unwrap();
                let here = self.side(side).load_balancers().await;
                let there = if self.stopped == Some(other) {
                    BTreeMap::new()
                } else {
                    self.side(other).load_balancers().await
                };
                let shown = ingress_ips(&svc);
                let finalizers = svc.finalizers().to_vec();
                let lb = here.get(&uid);
                let ok = lb.is_some_and(|ip| owns_address(side, ip) && shown == [ip.clone()])
                    && !there.contains_key(&uid)
                    && finalizers == [side.finalizer()];
                ok.then_some(()).ok_or_else(|| {
                    format!(
                        "{} has {lb:?}, {} has {:?}; status {shown:?}, finalizers {finalizers:?}",
                        side.name(),
                        other.name(),
                        there.get(&uid)
                    )
                })
            },
        )
        .await;
    }

    /// The controller's `/readyz`.
    async fn readyz(&self) -> Result<String, String> {
        admin_get(self.admin_port, "/readyz").await
    }

    async fn stop(mut self) {
        let _ = self.stop_controller.take().unwrap().send(());
        self.controller.take().unwrap().await.unwrap().unwrap();
        // Both providers stop with the hold (dropped after this).
        drop(self.control_plane);
    }
}

/// The calls about Nodes in `calls`, by Node name.
fn by_node(calls: &[Recorded]) -> BTreeMap<String, Vec<&Recorded>> {
    let mut out: BTreeMap<String, Vec<&Recorded>> = BTreeMap::new();
    for c in calls {
        if let Some(n) = c.node() {
            out.entry(n.to_owned()).or_default().push(c);
        }
    }
    out
}

/// The calls about Services in `calls`, by `namespace/name`.
fn by_service(calls: &[Recorded]) -> BTreeMap<String, Vec<&Recorded>> {
    let mut out: BTreeMap<String, Vec<&Recorded>> = BTreeMap::new();
    for c in calls {
        if let Some((key, _uid)) = c.service() {
            out.entry(key.to_owned()).or_default().push(c);
        }
    }
    out
}

impl Hybrid {
    /// Every call about a Node went to its owner, each owner was asked
    /// about each of its Nodes, and each provider was asked nothing about
    /// the other's: prints the counts.
    fn assert_nodes_asked_of_their_owner_only(&self, phase: &str) {
        let owners: BTreeMap<String, Side> = self
            .nodes
            .iter()
            .map(|(node, (owner, _))| (node.clone(), *owner))
            .collect();
        let foreign = self.recorders.calls_about_foreign_nodes(&owners);
        for side in Side::BOTH {
            let calls = self.recorders.calls(side);
            let asked = by_node(&calls);
            let own: usize = asked
                .iter()
                .filter(|(node, _)| owners.get(*node) == Some(&side))
                .map(|(_, cs)| cs.len())
                .sum();
            println!(
                "hybrid {phase}: {} was asked {own} calls about its {} Nodes, {} about others",
                side.name(),
                owners.values().filter(|o| **o == side).count(),
                foreign
                    .iter()
                    .filter(|f| f.starts_with(&format!("{} ", side.name())))
                    .count()
            );
            for (node, owner) in &owners {
                if *owner == side {
                    assert!(
                        asked
                            .get(node)
                            .is_some_and(|cs| cs.iter().any(|c| c.method == "InstanceMetadata")),
                        "{} was never asked InstanceMetadata about its Node {node}",
                        side.name()
                    );
                }
            }
        }
        assert!(
            foreign.is_empty(),
            "providers were asked about Nodes they do not own: {foreign:#?}"
        );
    }

    /// Calls about each Service went only to the providers that served it
    /// (both, for one that changed provider); none about a Service nobody
    /// serves.
    fn assert_services_asked_of_their_providers_only(&self, moved: &[&str]) {
        let onprem = self.recorders.calls(Side::Onprem);
        let cloud = self.recorders.calls(Side::Cloud);
        let asked = [
            (Side::Onprem, by_service(&onprem)),
            (Side::Cloud, by_service(&cloud)),
        ];
        for (name, serve) in &self.services {
            let key = format!("{}/{name}", self.ns);
            let who: BTreeSet<Side> = asked
                .iter()
                .filter(|(_, by)| by.contains_key(&key))
                .map(|(side, _)| *side)
                .collect();
            let want: BTreeSet<Side> = if moved.contains(&name.as_str()) {
                BTreeSet::from([Side::Onprem, Side::Cloud])
            } else {
                serve.iter().copied().collect()
            };
            assert_eq!(
                who,
                want,
                "the providers asked about Service {key} (calls: {:?})",
                asked
                    .iter()
                    .filter_map(|(side, by)| by.get(&key).map(|cs| (
                        side.name(),
                        cs.iter().map(|c| &c.method).collect::<Vec<_>>()
                    )))
                    .collect::<Vec<_>>()
            );
        }
    }

    /// Every Node registered is still there, with the same uid.
    async fn assert_no_node_deleted(&self) {
        let now: BTreeMap<String, String> = self
            .nodes_api()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|n| (n.name_any(), n.uid().unwrap()))
            .collect();
        let gone: Vec<&String> = self
            .nodes
            .iter()
            .filter(|(name, (_, uid))| now.get(*name) != Some(uid))
            .map(|(name, _)| name)
            .collect();
        assert!(gone.is_empty(), "Nodes deleted: {gone:?}");
    }
}

#[tokio::test]
async fn two_providers_each_serve_their_own_nodes_and_classes_and_survive_the_other_hanging() {
    let started = Instant::now();
    let machines = Machines::new(3);
    let mut h = Hybrid::start(&machines).await;
    let (on, cl) = (&machines.onprem, &machines.cloud);

    // Nodes: two of each kind. cloud-1 by its platform label, cloud-2 by
    // the providerID its kubelet set; onprem ones by default.
    h.register(&on[0], Side::Onprem, false).await;
    h.register(&on[1], Side::Onprem, false).await;
    h.register(&cl[0], Side::Cloud, false).await;
    h.register(&cl[1], Side::Cloud, true).await;
    h.wait_initialised(&[&on[0], &on[1], &cl[0], &cl[1]], CONVERGE)
        .await;
    h.assert_nodes_asked_of_their_owner_only("initialised");
    eventually_within(CONVERGE, Duration::from_millis(100), "ready", || async {
        let body = h.readyz().await?;
        (body.starts_with("HTTP/1.0 200")
            && body.contains("provider-ready:onprem")
            && body.contains("provider-ready:cloud"))
        .then_some(())
        .ok_or(body)
    })
    .await;
    let metrics = admin_get(h.admin_port, "/metrics").await.unwrap();
    for side in ["onprem", "cloud"] {
        assert!(
            metrics.lines().any(
                |l| l.starts_with("ccm_provider_request_duration_seconds_count")
                    && l.contains(&format!("provider=\"{side}\""))
            ),
            "no provider call metric labelled provider=\"{side}\""
        );
    }
    println!("hybrid: four Nodes initialised at {:?}", started.elapsed());

    // Services: by class, by default, and a class nobody here serves.
    h.create_service("elsewhere", Some(UNSERVED_CLASS), None)
        .await;
    h.create_service("web", None, Some(Side::Onprem)).await;
    h.create_service("shop", Some(CLOUD_CLASS), Some(Side::Cloud))
        .await;
    h.create_service("intranet", Some(ONPREM_CLASS), Some(Side::Onprem))
        .await;
    h.wait_served("web", Side::Onprem, CONVERGE).await;
    h.wait_served("shop", Side::Cloud, CONVERGE).await;
    h.wait_served("intranet", Side::Onprem, CONVERGE).await;
    println!("hybrid: three Services served at {:?}", started.elapsed());

    // onprem (the default provider) hangs for a minute.
    h.hang(Side::Onprem);
    let stopped = Instant::now();
    h.register(&cl[2], Side::Cloud, false).await;
    h.register(&on[2], Side::Onprem, false).await;
    h.create_service("shop-2", Some(CLOUD_CLASS), Some(Side::Cloud))
        .await;
    h.create_service("web-2", None, Some(Side::Onprem)).await;
    // The other keeps working, well within the stop.
    h.wait_initialised(&[&cl[2]], CONVERGE).await;
    let node_took = stopped.elapsed();
    h.wait_served("shop-2", Side::Cloud, CONVERGE).await;
    let lb_took = stopped.elapsed();
    eventually_within(
        CONVERGE,
        Duration::from_millis(200),
        "/readyz naming the hung provider",
        || async {
            let body = h.readyz().await?;
            (!body.starts_with("HTTP/1.0 200")
                && body.contains("[-] provider-ready:onprem failed")
                && body.contains("[+] provider-ready:cloud ok"))
            .then_some(())
            .ok_or(body)
        },
    )
    .await;
    assert!(
        stopped.elapsed() < STOPPED,
        "the checks above outlasted the stop ({:?})",
        stopped.elapsed()
    );
    // ... and the hung one's work waits: nothing is asked of anyone else.
    let waiting = h.nodes_api().get(&on[2]).await.unwrap();
    assert!(has_taint(&waiting, UNINITIALIZED), "{waiting:?}");
    let web2 = h.services_api().get("web-2").await.unwrap();
    assert!(ingress_ips(&web2).is_empty(), "{:?}", web2.status);
    // (The finalizer goes on before the provider is asked, as upstream's.)
    assert!(
        web2.finalizers().iter().all(|f| f == ONPREM_FINALIZER),
        "{:?}",
        web2.finalizers()
    );
    println!(
        "hybrid: with onprem stopped, cloud initialised a Node in {node_took:?} and served a load balancer in {lb_took:?}"
    );
    // The deliberate stop: the rest of the minute.
    tokio::time::sleep(STOPPED.saturating_sub(stopped.elapsed())).await;
    h.resume(Side::Onprem);
    let resumed = Instant::now();
    h.wait_initialised(&[&on[2]], CONVERGE).await;
    h.wait_served("web-2", Side::Onprem, CONVERGE).await;
    println!(
        "hybrid: onprem resumed after {:?}; converged {:?} later",
        resumed.duration_since(stopped),
        resumed.elapsed()
    );
    h.assert_no_node_deleted().await;
    eventually_within(
        CONVERGE,
        Duration::from_millis(200),
        "ready again",
        || async {
            let body = h.readyz().await?;
            body.starts_with("HTTP/1.0 200").then_some(()).ok_or(body)
        },
    )
    .await;

    // Class changes, back to back: cloud → onprem's class, default
    // (onprem) → cloud's class.
    h.create_service("mover-a", Some(CLOUD_CLASS), Some(Side::Cloud))
        .await;
    h.create_service("mover-b", None, Some(Side::Onprem)).await;
    h.wait_served("mover-a", Side::Cloud, CONVERGE).await;
    h.wait_served("mover-b", Side::Onprem, CONVERGE).await;
    h.change_class("mover-a", Some(ONPREM_CLASS), Side::Onprem)
        .await;
    h.change_class("mover-b", Some(CLOUD_CLASS), Side::Cloud)
        .await;
    h.wait_served("mover-a", Side::Onprem, CONVERGE).await;
    h.wait_served("mover-b", Side::Cloud, CONVERGE).await;
    for (name, old) in [("mover-a", Side::Cloud), ("mover-b", Side::Onprem)] {
        let key = format!("{}/{name}", h.ns);
        let deleted = h
            .recorders
            .calls(old)
            .iter()
            .filter(|c| c.method == "EnsureLoadBalancerDeleted")
            .filter(|c| c.service().is_some_and(|(k, _)| k == key))
            .count();
        assert!(
            deleted > 0,
            "{name}'s load balancer was never deleted at {}",
            old.name()
        );
    }
    println!("hybrid: two Services moved at {:?}", started.elapsed());

    // Nothing leaked: each provider has exactly the load balancers of the
    // Services it serves now.
    let uids: BTreeMap<String, String> = h
        .services_api()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| (s.name_any(), s.uid().unwrap()))
        .collect();
    for side in Side::BOTH {
        let want: BTreeSet<&str> = h
            .services
            .iter()
            .filter(|(_, serve)| **serve == Some(side))
            .map(|(name, _)| uids[name].as_str())
            .collect();
        let lbs = h.side(side).load_balancers().await;
        let have: BTreeSet<&str> = lbs.keys().map(String::as_str).collect();
        assert_eq!(
            have,
            want,
            "{}'s load balancers (by Service uid; Services {uids:?})",
            side.name()
        );
        println!(
            "hybrid: {} holds {} load balancers",
            side.name(),
            have.len()
        );
    }
    // The class nobody here serves was left alone.
    let elsewhere = h.services_api().get("elsewhere").await.unwrap();
    assert!(
        elsewhere.finalizers().is_empty() && ingress_ips(&elsewhere).is_empty(),
        "a Service of a class nobody serves must be left alone: {:?} {:?}",
        elsewhere.finalizers(),
        elsewhere.status
    );
    h.assert_services_asked_of_their_providers_only(&["mover-a", "mover-b"]);

    // Quiet: once neither provider has been asked to change anything for
    // a while, kubelet heartbeats alone make no provider mutation and no
    // controller write, though both providers are still asked.
    let lull = Duration::from_secs(3);
    eventually_within(
        CONVERGE,
        Duration::from_millis(250),
        "no provider mutation for 3 s",
        || async {
            match h
                .recorders
                .last_mutation()
                .map(|t| t.elapsed().unwrap_or_default())
            {
                Some(since) if since < lull => Err(format!("the last {since:?} ago")),
                _ => Ok(()),
            }
        },
    )
    .await;
    let names: Vec<String> = h.nodes.keys().cloned().collect();
    let window = kubelet_heartbeats(&h.admin, &names, QUIET).await.unwrap();
    let audit = h.control_plane.env().audit_log().unwrap();
    audit.sync(&h.admin).await.unwrap();
    let user = format!("system:serviceaccount:{}:cloud-controller-manager", h.ns);
    let writes: Vec<String> = audit
        .writes_by(&user, window.from, window.to)
        .unwrap()
        .iter()
        .map(|w| w.to_string())
        .collect();
    for side in Side::BOTH {
        let calls: Vec<Recorded> = h
            .recorders
            .calls(side)
            .into_iter()
            .filter(|c| window.contains(c.at))
            .collect();
        assert!(
            calls.iter().any(|c| c.method == "InstanceMetadata"),
            "{} was not asked anything about its Nodes in the quiet window: {:?}",
            side.name(),
            calls.iter().map(|c| &c.method).collect::<Vec<_>>()
        );
        println!(
            "hybrid quiet window: {} answered {} calls, {} mutations",
            side.name(),
            calls.len(),
            calls.iter().filter(|c| c.mutates()).count()
        );
    }
    let mutations = h.recorders.mutations(&window);
    println!(
        "hybrid quiet window: {} provider mutations, {} controller writes",
        mutations.len(),
        writes.len()
    );
    assert!(
        mutations.is_empty() && writes.is_empty(),
        "a quiet window must make no provider mutations and no controller writes: {mutations:#?}\n{writes:#?}"
    );
    h.assert_nodes_asked_of_their_owner_only("end");
    h.assert_no_node_deleted().await;

    // Deleting every Service deletes every load balancer at both.
    for name in h.services.keys() {
        delete_service_and_wait(&h.services_api(), name).await;
    }
    for side in Side::BOTH {
        let left = h.side(side).load_balancers().await;
        assert!(left.is_empty(), "{} still holds {left:?}", side.name());
    }
    println!("hybrid: done in {:?}", started.elapsed());
    h.stop().await;
}
