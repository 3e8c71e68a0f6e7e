//! cloud-node and cloud-node-lifecycle controllers end to end: the real
//! kube-apiserver, the controller running with only the ClusterRole it ships
//! (deploy/base/clusterrole.yaml), and the fake provider over a Unix socket.
//!
//! The controllers act on every Node of the cluster, so the scenarios in this
//! file run one at a time (they share this process's control plane).

use std::time::Duration;

use ccm_fake_provider::{ErrorInjection, ErrorKind, FakeCloud, FakeConfig, Method};
use ccm_testsupport::{TestEnv, unique_name};
use clap::Parser;
use cloud_controller_manager::options::Options;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{Mutex, oneshot};

static SERIAL: Mutex<()> = Mutex::const_new(());

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
const DEADLINE: Duration = Duration::from_secs(60);

struct Harness {
    admin: Client,
    fake: FakeCloud,
    stop_controller: Option<oneshot::Sender<()>>,
    stop_fake: Option<oneshot::Sender<()>>,
    controller: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// The fake provider on a fresh socket and the controller running as a
    /// ServiceAccount bound to the shipped ClusterRole.
    async fn start(fake_config: FakeConfig, extra_flags: &[&str]) -> Harness {
        let env = TestEnv::get();
        let admin = env.admin_client().await.unwrap();
        let ns = env.namespace(&admin, "ccm").await.unwrap();
        let role: ClusterRole = serde_yaml::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../deploy/base/clusterrole.yaml"
            ))
            .unwrap(),
        )
        .unwrap();
        env.grant_cluster_role(&admin, &ns, "cloud-controller-manager", role.rules.unwrap())
            .await
            .unwrap();
        let sa = env
            .service_account_client(&ns, "cloud-controller-manager")
            .await
            .unwrap();

        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}/provider.sock", dir.path().display());
        let fake = FakeCloud::new(fake_config).unwrap();
        let (stop_fake, fake_stopped) = oneshot::channel::<()>();
        tokio::spawn(fake.clone().serve(endpoint.clone(), async {
            let _ = fake_stopped.await;
        }));

        let mut args = vec![
            "cloud-controller-manager".to_owned(),
            format!("--provider-endpoint={endpoint}"),
            "--node-monitor-period=200ms".to_owned(),
        ];
        args.extend(extra_flags.iter().map(|s| s.to_string()));
        let opts = Options::try_parse_from(args).unwrap();
        let enabled = opts.validate().unwrap();
        let (stop_controller, stopped) = oneshot::channel::<()>();
        let controller = tokio::spawn(async move {
            cloud_controller_manager::run(opts, enabled, sa, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Harness {
            admin,
            fake,
            stop_controller: Some(stop_controller),
            stop_fake: Some(stop_fake),
            controller: Some(controller),
            _dir: dir,
        }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    async fn stop(mut self) {
        let _ = self.stop_controller.take().unwrap().send(());
        self.controller.take().unwrap().await.unwrap();
        let _ = self.stop_fake.take().unwrap().send(());
    }

    async fn set_ready(&self, name: &str, status: &str) {
        let patch = json!({"status": {"conditions": [{
            "type": "Ready", "status": status, "reason": "Test",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}});
        self.nodes()
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .unwrap();
    }

    /// Polls the Node until `done` holds (or it is gone, if `done(None)`).
    async fn wait_for(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(Option<&Node>) -> bool,
    ) -> Option<Node> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let n = self.nodes().get_opt(name).await.unwrap();
            if done(n.as_ref()) {
                return n;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {name}: {what}; last seen {n:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn kubelet_node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: UNINITIALIZED.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

async fn events_for(admin: &Client, node: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(admin.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test]
async fn tainted_node_is_initialised_in_two_writes() {
    let _serial = SERIAL.lock().await;
    let h = Harness::start(FakeConfig::default(), &[]).await;
    let name = unique_name("init");

    // Count every write to this Node through a watch started before it exists.
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watcher::watcher(h.nodes(), cfg).boxed();
    while !matches!(
        changes.try_next().await.unwrap(),
        Some(WatchEvent::InitDone)
    ) {}
    h.nodes()
        .create(&PostParams::default(), &kubelet_node(&name))
        .await
        .unwrap();

    let mut versions = Vec::new();
    let node = tokio::time::timeout(DEADLINE, async {
        loop {
            match changes.try_next().await.unwrap() {
                Some(WatchEvent::Apply(n)) => {
                    versions.push(n.metadata.resource_version.clone().unwrap());
                    if !has_taint(&n, UNINITIALIZED) {
                        return n;
                    }
                }
                Some(_) => {}
                None => panic!("watch ended"),
            }
        }
    })
    .await
    .expect("node initialised");

    let instance = h
        .fake
        .instances()
        .into_iter()
        .find(|i| i.name == name)
        .unwrap();
    let spec = node.spec.clone().unwrap();
    assert_eq!(
        spec.provider_id.as_deref(),
        Some(instance.provider_id.as_str())
    );
    let labels = node.metadata.labels.clone().unwrap();
    for (k, v) in [
        ("topology.kubernetes.io/zone", "fake-zone-a"),
        ("failure-domain.beta.kubernetes.io/zone", "fake-zone-a"),
        ("topology.kubernetes.io/region", "fake-region"),
        ("failure-domain.beta.kubernetes.io/region", "fake-region"),
        ("node.kubernetes.io/instance-type", "fake.medium"),
        ("beta.kubernetes.io/instance-type", "fake.medium"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}");
    }
    let addresses: Vec<(String, String)> = node
        .status
        .clone()
        .unwrap()
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    let want: Vec<(String, String)> = instance
        .addresses
        .iter()
        .map(|a| {
            (
                serde_json::to_value(a.kind)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned(),
                a.address.clone(),
            )
        })
        .collect();
    assert_eq!(addresses, want);
    // The creation, then exactly two writes: addresses, then spec+labels.
    assert_eq!(versions.len(), 3, "resourceVersions seen: {versions:?}");
    // The not-ready taint the apiserver added is left alone.
    assert!(has_taint(&node, "node.kubernetes.io/not-ready"));

    let deadline = tokio::time::Instant::now() + DEADLINE;
    while events_for(&h.admin, &name, "Synced").await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no Synced event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.stop().await;
}

#[tokio::test]
async fn unknown_instance_keeps_the_taint_until_the_cloud_knows_it() {
    let _serial = SERIAL.lock().await;
    // Only the node controller: the lifecycle controller would (rightly)
    // delete a NotReady node whose instance does not exist.
    let h = Harness::start(
        FakeConfig {
            auto_create_instances: false,
            ..Default::default()
        },
        &["--controllers=cloud-node"],
    )
    .await;
    let name = unique_name("late");
    h.nodes()
        .create(&PostParams::default(), &kubelet_node(&name))
        .await
        .unwrap();

    // The provider is asked and says NOT_FOUND: the node stays tainted.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while h.fake.calls_of(Method::InstanceMetadata).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "provider never asked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = h.nodes().get(&name).await.unwrap();
    assert!(has_taint(&n, UNINITIALIZED));
    assert!(n.spec.unwrap().provider_id.is_none());

    // Once the instance exists, the retry initialises the node.
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&name))
        .unwrap();
    h.wait_for(&name, "initialised", |n| {
        n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn lifecycle_taints_shut_down_nodes_and_deletes_only_on_explicit_not_exists() {
    let _serial = SERIAL.lock().await;
    let h = Harness::start(
        FakeConfig::default(),
        &["--controllers=cloud-node-lifecycle"],
    )
    .await;
    let name = unique_name("life");
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&name))
        .unwrap();
    h.nodes()
        .create(&PostParams::default(), &kubelet_node(&name))
        .await
        .unwrap();

    // A Ready node is never tainted, even when the cloud says its instance
    // is shut down. Proof that a lifecycle pass saw it Ready: a witness Node,
    // created after ours was Ready, gets tainted in that same pass.
    h.set_ready(&name, "True").await;
    h.fake.shutdown_instance(&name).unwrap();
    let witness = unique_name("witness");
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&witness))
        .unwrap();
    h.fake.shutdown_instance(&witness).unwrap();
    h.nodes()
        .create(&PostParams::default(), &kubelet_node(&witness))
        .await
        .unwrap();
    h.set_ready(&witness, "False").await;
    h.wait_for(&witness, "witness tainted", |n| {
        n.is_some_and(|n| has_taint(n, SHUTDOWN))
    })
    .await;
    assert!(!has_taint(&h.nodes().get(&name).await.unwrap(), SHUTDOWN));

    // NotReady and shut down: tainted. Ready again: untainted.
    h.set_ready(&name, "False").await;
    h.wait_for(&name, "shutdown taint", |n| {
        n.is_some_and(|n| has_taint(n, SHUTDOWN))
    })
    .await;
    h.fake.start_instance(&name).unwrap();
    h.set_ready(&name, "True").await;
    h.wait_for(&name, "shutdown taint removed", |n| {
        n.is_some_and(|n| !has_taint(n, SHUTDOWN))
    })
    .await;

    // NotReady and the provider failing: never deleted, however often asked.
    h.set_ready(&name, "False").await;
    h.fake.inject_error(
        Method::InstanceExists,
        ErrorInjection::new(ErrorKind::CloudUnavailable, "cloud API down"),
    );
    h.fake.remove_instance(&name);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let failed = h
            .fake
            .calls_of(Method::InstanceExists)
            .into_iter()
            .filter(|c| c.outcome != ccm_fake_provider::CallOutcome::Ok)
            .count();
        if failed >= 5 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lifecycle controller not asking"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        h.nodes().get_opt(&name).await.unwrap().is_some(),
        "errors delete nothing"
    );

    // The provider recovers and says NOT_EXISTS: deleted, with an event.
    h.fake.clear_faults();
    h.wait_for(&name, "deleted", |n| n.is_none()).await;
    assert!(!events_for(&h.admin, &name, "DeletingNode").await.is_empty());
    h.stop().await;
}
