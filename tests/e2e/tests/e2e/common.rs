//! The harness the controller e2e tests share: the real apiserver, the
//! fake provider on a fresh socket, and the controller running in-process
//! as a ServiceAccount bound to exactly the shipped ClusterRole; and the
//! one way to reach that apiserver, [`ControlPlane`], which holds the lock.

use ccm_fake_provider::{FakeCloud, FakeConfig};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::TestEnv;
use clap::Parser;
use cloud_controller_manager::config::Options;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, oneshot};

/// Held exclusively by tests that run a controller (it acts on every Node,
/// Service and PersistentVolume it sees) or create those kinds of objects,
/// shared by the others.
static LOCK: RwLock<()> = RwLock::const_new(());

/// A test's hold on the process's control plane: the only way the tests
/// reach it, so none can forget the lock. An exclusive hold deletes, when
/// dropped, the Nodes, Services and PersistentVolumes created while it was
/// held, which under the lock only its test can have created (its
/// controller creates none of these kinds), and nothing else.
pub struct ControlPlane {
    env: &'static TestEnv,
    /// Exclusive holds: the objects that existed when the hold began.
    before: Option<Existing>,
    // Dropped after `drop` has run: the lock outlives the clean-up.
    _shared: Option<RwLockReadGuard<'static, ()>>,
    _exclusive: Option<RwLockWriteGuard<'static, ()>>,
}

/// The uids of the kinds an exclusive hold cleans up.
pub(crate) struct Existing {
    nodes: BTreeSet<String>,
    services: BTreeSet<String>,
    volumes: BTreeSet<String>,
}

impl Existing {
    pub(crate) async fn now(admin: &Client) -> Existing {
        Existing {
            nodes: uids(&Api::<Node>::all(admin.clone())).await,
            services: uids(&Api::<Service>::all(admin.clone())).await,
            volumes: uids(&Api::<PersistentVolume>::all(admin.clone())).await,
        }
    }
}

/// How long the clean-up of an exclusive hold may take.
const CLEANUP: std::time::Duration = std::time::Duration::from_secs(30);

impl ControlPlane {
    /// For a test that runs a controller or creates Nodes, Services of type
    /// LoadBalancer or PersistentVolumes: no other test holds the control
    /// plane meanwhile.
    pub async fn exclusive() -> ControlPlane {
        let guard = LOCK.write().await;
        let env = control_plane();
        let admin = env.admin_client().await.unwrap();
        let before = Existing::now(&admin).await;
        ControlPlane {
            env,
            before: Some(before),
            _shared: None,
            _exclusive: Some(guard),
        }
    }

    /// For a test that runs no controller and creates none of the objects
    /// controllers act on: other such tests run alongside.
    pub async fn shared() -> ControlPlane {
        let guard = LOCK.read().await;
        Self::with_shared(guard)
    }

    /// [`ControlPlane::shared`] for a test outside a tokio runtime.
    pub fn shared_blocking() -> ControlPlane {
        let guard = LOCK.blocking_read();
        Self::with_shared(guard)
    }

    fn with_shared(guard: RwLockReadGuard<'static, ()>) -> ControlPlane {
        ControlPlane {
            env: control_plane(),
            before: None,
            _shared: Some(guard),
            _exclusive: None,
        }
    }

    pub fn env(&self) -> &'static TestEnv {
        self.env
    }
}

/// The only call of [`TestEnv::get`] in the tests: everything else goes
/// through a [`ControlPlane`].
#[allow(clippy::disallowed_methods)]
fn control_plane() -> &'static TestEnv {
    TestEnv::get()
}

async fn uids<K>(api: &Api<K>) -> BTreeSet<String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|o| o.meta().uid.clone())
        .collect()
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let Some(before) = self.before.take() else {
            return;
        };
        let env = self.env;
        // Clients are bound to the runtime that made them, and this may run
        // inside the test's (current-thread) runtime or while it unwinds: a
        // thread with a runtime of its own does the deleting.
        let cleaned = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                tokio::time::timeout(CLEANUP, delete_created(env, &before))
                    .await
                    .map_err(|_| format!("not done within {CLEANUP:?}"))?
            })
        })
        .join();
        match cleaned {
            Ok(Ok(())) => {}
            // Never a panic here: it may run while a failed test unwinds.
            Ok(Err(e)) => eprintln!("deleting what the test created: {e}"),
            Err(_) => eprintln!("deleting what the test created: the clean-up panicked"),
        }
    }
}

/// Deletes the Nodes, Services and PersistentVolumes whose uid is not in
/// `before`, finalizers first (no kube-controller-manager runs here to
/// remove the apiserver's pv-protection one, and a stopped controller
/// cannot remove its own).
pub(crate) async fn delete_created(env: &TestEnv, before: &Existing) -> Result<(), String> {
    let admin = env.admin_client().await.map_err(|e| format!("{e:#}"))?;
    delete_new(Api::<Node>::all(admin.clone()), &before.nodes, false).await?;
    for svc in Api::<Service>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
    {
        if svc
            .metadata
            .uid
            .as_ref()
            .is_some_and(|u| !before.services.contains(u))
        {
            let ns = svc.metadata.namespace.clone().unwrap_or_default();
            let api = Api::<Service>::namespaced(admin.clone(), &ns);
            delete_one(&api, &svc, true).await?;
        }
    }
    delete_new(Api::<PersistentVolume>::all(admin), &before.volumes, true).await
}

async fn delete_new<K>(
    api: Api<K>,
    before: &BTreeSet<String>,
    unfinalize: bool,
) -> Result<(), String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    for o in all.items {
        if o.meta().uid.as_ref().is_some_and(|u| !before.contains(u)) {
            delete_one(&api, &o, unfinalize).await?;
        }
    }
    Ok(())
}

/// Deletes `o`, of this uid only (a namesake created since is left alone);
/// gone already is fine.
async fn delete_one<K>(api: &Api<K>, o: &K, unfinalize: bool) -> Result<(), String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let name = o.meta().name.clone().unwrap_or_default();
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
    if unfinalize && o.meta().finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
        let patch = json!({"metadata": {"uid": o.meta().uid, "finalizers": null}});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            && !gone(&e)
        {
            return Err(format!("removing the finalizers of {name}: {e}"));
        }
    }
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: o.meta().uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(format!("deleting {name}: {e}")),
    }
}

pub const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// The pod network the route controller is responsible for.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16,fd00:10:244::/56";
pub use ccm_testsupport::{
    DEADLINE, UNINITIALIZED, eventually, eventually_within, free_port, kubelet_node, lb_service,
    wait_until,
};

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
        let ns = env.namespace(&admin, "ccm").await.unwrap();
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

pub fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

/// Events about the Node `node` with `reason`.
pub async fn events_for(admin: &Client, node: &str, reason: &str) -> Vec<Event> {
    events_in(admin, "default", node, reason).await
}

/// Events about the object `name` in `namespace` with `reason`.
pub async fn events_in(admin: &Client, namespace: &str, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(admin.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// `GET path` on the controller's admin port: the whole HTTP/1.0 answer.
pub async fn admin_get(port: u16, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .await
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// A provider process on a socket of its own, killed when dropped.
pub struct Provider {
    pub child: Child,
    pub log: PathBuf,
    pub endpoint: String,
    pub _dir: tempfile::TempDir,
    /// Files it needs (its binary, its configuration), if any.
    pub _files: Option<tempfile::TempDir>,
    /// How it was started, to start it again.
    command: Vec<std::ffi::OsString>,
    env: Vec<(String, PathBuf)>,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    /// `program args --endpoint=unix://<fresh dir>/provider.sock`.
    pub fn spawn(program: &Path, args: &[String], env: &[(&str, PathBuf)]) -> Provider {
        Self::spawn_wrapped(&[], program, args, env)
    }

    /// As [`Provider::spawn`], started through `wrapper` (for example
    /// `unshare -rn sh -c '…; exec "$0" "$@"'`), which execs into the
    /// provider.
    pub fn spawn_wrapped(
        wrapper: &[&str],
        program: &Path,
        args: &[String],
        env: &[(&str, PathBuf)],
    ) -> Provider {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}/provider.sock", dir.path().display());
        let log = dir.path().join("provider.log");
        let mut command: Vec<std::ffi::OsString> = wrapper.iter().map(|w| w.into()).collect();
        command.push(program.into());
        command.extend(args.iter().map(|a| a.into()));
        command.push(format!("--endpoint={endpoint}").into());
        let env: Vec<(String, PathBuf)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let child = Self::start(&command, &env, &log);
        Provider {
            child,
            log,
            endpoint,
            _dir: dir,
            _files: None,
            command,
            env,
        }
    }

    fn start(command: &[std::ffi::OsString], env: &[(String, PathBuf)], log: &Path) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..]).stdout(Stdio::null()).stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    /// SIGTERM, and waits (without blocking the runtime, which may run
    /// the controller the provider is draining) until it has exited.
    pub async fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the provider did not exit within 30s of SIGTERM; log:\n{}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Starts it again as before, on the same socket (its log goes on).
    pub fn start_again(&mut self) {
        self.child = Self::start(&self.command, &self.env, &self.log);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn wait_ready(&self) {
        let client =
            ProviderClient::connect_lazy(&self.endpoint, ClientOptions::default()).unwrap();
        eventually("the provider to answer its handshake", || async {
            client
                .handshake()
                .await
                .map(|_| ())
                .map_err(|e| format!("{e}; log:\n{}", self.log()))
        })
        .await;
    }
}

/// A controller identity for a separate process: the ServiceAccount
/// `ns/cloud-controller-manager` bound to the shipped ClusterRole and, with
/// `lease`, to the shipped leader-election Role in kube-system (its Lease
/// name changed to `lease`); a kubeconfig as that identity written to
/// `kubeconfig`.
pub async fn process_identity(
    env: &TestEnv,
    admin: &Client,
    ns: &str,
    lease: Option<&str>,
    kubeconfig: &Path,
) {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
    let sa = "cloud-controller-manager";
    let shipped = |file: &str| {
        std::fs::read_to_string(format!(
            "{}/../../deploy/base/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let role: ClusterRole = serde_yaml::from_str(&shipped("clusterrole.yaml")).unwrap();
    env.grant_cluster_role(admin, ns, sa, role.rules.unwrap())
        .await
        .unwrap();
    if let Some(lease) = lease {
        let mut le: Role = serde_yaml::from_str(&shipped("role-leader-election.yaml")).unwrap();
        let role_name = ccm_testsupport::unique_name("le");
        le.metadata.name = Some(role_name.clone());
        for name in le
            .rules
            .iter_mut()
            .flatten()
            .flat_map(|r| r.resource_names.iter_mut().flatten())
        {
            if name == "cloud-controller-manager" {
                *name = lease.to_owned();
            }
        }
        Api::<Role>::namespaced(admin.clone(), "kube-system")
            .create(&PostParams::default(), &le)
            .await
            .unwrap();
        let binding = RoleBinding {
            metadata: kube::api::ObjectMeta {
                name: Some(role_name.clone()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: role_name,
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: sa.into(),
                namespace: Some(ns.to_owned()),
                ..Default::default()
            }]),
        };
        Api::<RoleBinding>::namespaced(admin.clone(), "kube-system")
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    env.write_service_account_kubeconfig(ns, sa, kubeconfig)
        .await
        .unwrap();
}

/// The YAML documents of a rendered manifest, empty ones left out.
pub fn docs(manifests: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(manifests)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_yaml::Value| !v.is_null())
        .collect()
}

/// The first document of `kind`.
pub fn find<'a>(docs: &'a [serde_yaml::Value], kind: &str) -> &'a serde_yaml::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// Deletes the Service and waits until it is gone (its load balancer
/// finalizer released).
pub async fn delete_service_and_wait(services: &Api<Service>, name: &str) {
    services
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service gone (finalizer released)", || async {
        match services.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(s) => Err(format!("{:?}", s.metadata.finalizers)),
        }
    })
    .await;
}
