//! [`Harness`]: the fake provider on a fresh socket and the controller
//! running in-process as a ServiceAccount bound to the shipped ClusterRole,
//! on an exclusive hold of the control plane.

use ccm_fake_provider::{FakeCloud, FakeConfig};
use ccm_testsupport::TestEnv;
use clap::Parser;
use cloud_controller_manager::config::Options;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::oneshot;

use super::{CLUSTER_CIDR, ControlPlane, UNINITIALIZED, eventually, has_taint, kubelet_node};

pub struct Harness {
    pub admin: Client,
    /// The namespace of the controller's ServiceAccount, free for tests.
    pub ns: String,
    pub sa: kube::Config,
    pub endpoint: String,
    pub fake: FakeCloud,
    pub stop_controller: Option<oneshot::Sender<()>>,
    pub stop_fake: Option<oneshot::Sender<()>>,
    pub controller: Option<tokio::task::JoinHandle<()>>,
    pub _dir: tempfile::TempDir,
    /// Held from the start, released last (after its clean-up) when the
    /// harness is stopped or dropped.
    control_plane: ControlPlane,
}

/// Where every in-process controller scenario starts: the control plane
/// held exclusively, an admin client, a fresh namespace, and in it the
/// controller's ServiceAccount bound to each of `roles` (files in
/// deploy/base/), as the client config to run the controller with.
pub struct ControllerAccount {
    pub control_plane: ControlPlane,
    pub admin: Client,
    pub ns: String,
    pub sa: kube::Config,
}

impl ControllerAccount {
    /// The namespace's name starts with `ns_prefix`.
    pub async fn new(ns_prefix: &str, roles: &[&str]) -> ControllerAccount {
        // The controller's logs, shown for failing tests (RUST_LOG to tune).
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .try_init();
        let control_plane = ControlPlane::exclusive().await;
        let env = control_plane.env();
        let admin = env.admin_client().await.unwrap();
        let ns = env.namespace(&admin, ns_prefix).await.unwrap();
        for file in roles {
            let path = format!("{}/../../deploy/base/{file}", env!("CARGO_MANIFEST_DIR"));
            let role: ClusterRole =
                serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            env.grant_cluster_role(&admin, &ns, "cloud-controller-manager", role.rules.unwrap())
                .await
                .unwrap();
        }
        let sa = env
            .service_account_config(&ns, "cloud-controller-manager")
            .await
            .unwrap();
        ControllerAccount {
            control_plane,
            admin,
            ns,
            sa,
        }
    }
}

impl Harness {
    /// The fake provider on a fresh socket and the controller running as a
    /// ServiceAccount bound to the shipped ClusterRole.
    pub async fn start(fake_config: FakeConfig, extra_flags: &[&str]) -> Harness {
        Self::start_with_roles(fake_config, extra_flags, &["clusterrole.yaml"]).await
    }

    /// As [`Harness::start`], bound to each of `roles` (files in
    /// deploy/base/).
    pub async fn start_with_roles(
        fake_config: FakeConfig,
        extra_flags: &[&str],
        roles: &[&str],
    ) -> Harness {
        Self::setup(fake_config, extra_flags, roles, None).await
    }

    /// As [`Harness::start`], with the controller talking to a provider
    /// already serving on `endpoint` instead of the in-process fake
    /// (`fake` is then not served).
    pub async fn start_against(endpoint: &str, extra_flags: &[&str]) -> Harness {
        Self::setup(
            FakeConfig::default(),
            extra_flags,
            &["clusterrole.yaml"],
            Some(endpoint),
        )
        .await
    }

    async fn setup(
        fake_config: FakeConfig,
        extra_flags: &[&str],
        roles: &[&str],
        external: Option<&str>,
    ) -> Harness {
        let ControllerAccount {
            control_plane,
            admin,
            ns,
            sa,
        } = ControllerAccount::new("ccm", roles).await;
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeCloud::new(fake_config).unwrap();
        let (endpoint, stop_fake) = match external {
            Some(endpoint) => (endpoint.to_owned(), None),
            None => {
                let endpoint = format!("unix://{}/provider.sock", dir.path().display());
                let (stop_fake, fake_stopped) = oneshot::channel::<()>();
                tokio::spawn(fake.clone().serve(endpoint.clone(), async {
                    let _ = fake_stopped.await;
                }));
                (endpoint, Some(stop_fake))
            }
        };

        let (stop_controller, stopped) = oneshot::channel::<()>();
        let controller = spawn_controller(sa.clone(), args_for(&endpoint, extra_flags), stopped);
        Harness {
            admin,
            ns,
            sa,
            endpoint,
            fake,
            stop_controller: Some(stop_controller),
            stop_fake,
            controller: Some(controller),
            _dir: dir,
            control_plane,
        }
    }

    /// The control plane this harness holds exclusively.
    pub fn env(&self) -> &'static TestEnv {
        self.control_plane.env()
    }

    /// Stops the controller and starts a new one with `extra_flags`.
    pub async fn restart_controller(&mut self, extra_flags: &[&str]) {
        self.stop_controller().await;
        self.start_controller(extra_flags);
    }

    /// Stops the controller (its in-flight calls are cancelled).
    pub async fn stop_controller(&mut self) {
        let _ = self.stop_controller.take().unwrap().send(());
        self.controller.take().unwrap().await.unwrap();
    }

    /// Starts a controller after [`Harness::stop_controller`].
    pub fn start_controller(&mut self, extra_flags: &[&str]) {
        let (tx, rx) = oneshot::channel();
        self.stop_controller = Some(tx);
        self.controller = Some(spawn_controller(
            self.sa.clone(),
            args_for(&self.endpoint, extra_flags),
            rx,
        ));
    }

    /// Serves the same fake cloud (same state) on the socket again.
    pub fn start_provider(&mut self) {
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(self.fake.clone().serve(self.endpoint.clone(), async {
            let _ = stopped.await;
        }));
        self.stop_fake = Some(stop);
    }

    /// Stops the fake provider: its socket disappears.
    pub fn stop_provider(&mut self) {
        let _ = self.stop_fake.take().unwrap().send(());
    }

    /// Registers a Node the way `kubelet --cloud-provider=external` does.
    pub async fn register_node(&self, name: &str) {
        self.nodes()
            .create(&PostParams::default(), &kubelet_node(name))
            .await
            .unwrap();
    }

    /// How many of `names` no longer carry the uninitialized taint.
    pub async fn initialised_count(&self, names: &[String]) -> usize {
        self.nodes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|n| names.contains(n.metadata.name.as_ref().unwrap()))
            .filter(|n| !has_taint(n, UNINITIALIZED))
            .count()
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    pub async fn stop(mut self) {
        let _ = self.stop_controller.take().unwrap().send(());
        self.controller.take().unwrap().await.unwrap();
        if let Some(stop) = self.stop_fake.take() {
            let _ = stop.send(());
        }
    }

    pub async fn set_ready(&self, name: &str, status: &str) {
        let patch = json!({"status": {"conditions": [{
            "type": "Ready", "status": status, "reason": "Test",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}});
        self.nodes()
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .unwrap();
    }

    /// The user the controller acts as.
    pub fn controller_user(&self) -> String {
        format!("system:serviceaccount:{}:cloud-controller-manager", self.ns)
    }

    /// After convergence: `length` of kubelet heartbeats on `nodes` and
    /// nothing else changing. Returns what the provider was asked and what
    /// the controller wrote meanwhile (from the apiserver's audit log).
    pub async fn quiet_window(&self, nodes: &[&str], length: std::time::Duration) -> Quiet {
        let nodes: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
        let window = ccm_testsupport::steady::kubelet_heartbeats(&self.admin, &nodes, length)
            .await
            .unwrap();
        let audit = self.env().audit_log().unwrap();
        audit.sync(&self.admin).await.unwrap();
        let writes = audit
            .writes_by(&self.controller_user(), window.from, window.to)
            .unwrap();
        let calls = self
            .fake
            .calls()
            .into_iter()
            .filter(|c| window.contains_unix_ms(c.started_unix_ms))
            .collect();
        Quiet { calls, writes }
    }

    /// Polls the Node until `done` holds (or it is gone, if `done(None)`).
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(Option<&Node>) -> bool,
    ) -> Option<Node> {
        eventually(&format!("{name}: {what}"), || async {
            let n = self.nodes().get_opt(name).await.unwrap();
            if done(n.as_ref()) {
                Ok(n)
            } else {
                Err(format!("{n:#?}"))
            }
        })
        .await
    }
}

/// What happened during a [`Harness::quiet_window`].
#[derive(Debug)]
pub struct Quiet {
    /// The provider calls that arrived in the window.
    pub calls: Vec<ccm_fake_provider::CallRecord>,
    /// The controller's writes to the apiserver in the window.
    pub writes: Vec<ccm_testsupport::audit::Write>,
}

impl Quiet {
    pub fn count(&self, method: ccm_fake_provider::Method) -> usize {
        self.calls.iter().filter(|c| c.method == method).count()
    }

    /// Zero provider mutations and zero controller writes; `reads` are
    /// methods the window must have seen at least once, so the controllers
    /// were awake and chose to do nothing.
    pub fn assert_quiet(&self, reads: &[ccm_fake_provider::Method]) {
        let mutations: Vec<String> = self
            .calls
            .iter()
            .filter(|c| c.method.mutates())
            .map(|c| format!("{} ({})", c.method.as_str(), c.request_id))
            .collect();
        let writes: Vec<String> = self.writes.iter().map(|w| w.to_string()).collect();
        assert!(
            mutations.is_empty() && writes.is_empty(),
            "a quiet window must make no provider mutations and no controller writes; got {} mutations: {mutations:#?}\nand {} writes: {writes:#?}",
            mutations.len(),
            writes.len()
        );
        for m in reads {
            assert!(
                self.count(*m) > 0,
                "expected at least one {} call in the quiet window (the controller must still be working); calls: {:?}",
                m.as_str(),
                self.calls
                    .iter()
                    .map(|c| c.method.as_str())
                    .collect::<Vec<_>>()
            );
        }
    }
}

pub fn args_for(endpoint: &str, extra_flags: &[&str]) -> Vec<String> {
    let mut args = vec![
        "cloud-controller-manager".to_owned(),
        format!("--provider-endpoint={endpoint}"),
        "--node-monitor-period=200ms".to_owned(),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        // One controller per scenario, in-process: no Lease, no port (tests
        // that serve pass --secure-port or --admin-port).
        "--leader-elect=false".to_owned(),
        "--secure-port=0".to_owned(),
    ];
    args.extend(extra_flags.iter().map(|s| s.to_string()));
    args
}

pub fn spawn_controller(
    config: kube::Config,
    args: Vec<String>,
    stopped: oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<()> {
    let run = run_controller(config, args, stopped);
    tokio::spawn(async move { run.await.unwrap().unwrap() })
}

/// The controller's `run` in a task, its result kept.
pub fn run_controller(
    config: kube::Config,
    args: Vec<String>,
    stopped: oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<Result<(), cloud_controller_manager::RunError>> {
    let opts = Options::try_parse_from(args).unwrap();
    let enabled = opts.validate().unwrap();
    tokio::spawn(cloud_controller_manager::run(
        opts,
        enabled,
        config,
        async {
            let _ = stopped.await;
        },
    ))
}
