//! Test support: one real kube-apiserver per test process, started on demand.
//!
//! The first call to [`TestEnv::get`] spawns `ccm-testenv` (kube-apiserver and
//! embedded etcd built from `tests/testenv`, see `hack/build-testenv.sh`) and
//! waits for its "ready" line. Every later call in the same process reuses it.
//! The control plane is stopped when the process exits, including after
//! panicking tests; if the process is killed outright, the kernel delivers
//! SIGTERM to the control plane (`PR_SET_PDEATHSIG`).
//!
//! Clients are cheap and bound to the tokio runtime that created them, so each
//! test makes its own with [`TestEnv::admin_client`] or
//! [`TestEnv::service_account_client`]. Tests isolate themselves with
//! [`unique_name`] and [`TestEnv::namespace`] so they can run in parallel.
//!
//! Set `CCM_TEST_KUBECONFIG` to run against an already running control plane
//! (for example one started by `make testenv`) instead of starting one.

pub mod audit;
pub mod fixtures;
pub mod hybrid;
pub mod poll;
pub mod procfs;
pub mod raw;
pub mod recorder;
pub mod steady;

pub use fixtures::{UNINITIALIZED, ingress_ips, kubelet_node, lb_service, proto_service};
pub use poll::{DEADLINE, eventually, eventually_within, poll_until, wait_until};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{ObjectMeta, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde::Deserialize;

/// The "ready" line ccm-testenv prints on stdout.
#[derive(Debug, Clone, Deserialize)]
pub struct ReadyLine {
    pub kubeconfig: PathBuf,
    pub url: String,
    pub data_dir: PathBuf,
    pub pid: u32,
    /// Whether the data directory held an earlier run's state (kept with
    /// `--keep`), whose CA, certificates, tokens and etcd data were reused.
    #[serde(default)]
    pub reused: bool,
}

/// A running control plane.
#[derive(Debug)]
pub struct TestEnv {
    kubeconfig: PathBuf,
    url: String,
    /// Present when this process started the control plane.
    pid: Option<u32>,
    /// Its audit log of writes: always for a control plane this process
    /// started; for `CCM_TEST_KUBECONFIG`, when `CCM_TEST_AUDIT_LOG` names it.
    audit: Option<audit::AuditLog>,
}

static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
static CHILD: Mutex<Option<Child>> = Mutex::new(None);

impl TestEnv {
    /// The process-wide control plane, started on first use.
    ///
    /// Panics with the reason if it cannot be started: every test that needs
    /// it would fail anyway, and the message says what to do.
    pub fn get() -> &'static TestEnv {
        match ENV.get_or_init(|| Self::start().map_err(|e| format!("{e:#}"))) {
            Ok(env) => env,
            Err(e) => panic!("test control plane unavailable: {e}"),
        }
    }

    fn start() -> anyhow::Result<TestEnv> {
        if let Some(path) = std::env::var_os("CCM_TEST_KUBECONFIG") {
            let path = PathBuf::from(path);
            let kc = Kubeconfig::read_from(&path)
                .with_context(|| format!("reading CCM_TEST_KUBECONFIG={}", path.display()))?;
            let url = kc
                .clusters
                .first()
                .and_then(|c| c.cluster.as_ref())
                .and_then(|c| c.server.clone())
                .ok_or_else(|| anyhow!("{} names no server", path.display()))?;
            return Ok(TestEnv {
                kubeconfig: path,
                url,
                pid: None,
                audit: std::env::var_os("CCM_TEST_AUDIT_LOG").map(audit::AuditLog::at),
            });
        }
        let audit_dir = log_dir()?.join(unique_name("audit"));
        let (flags, audit) = audit::apiserver_flags(&audit_dir)?;
        let mut args = vec!["--"];
        args.extend(flags.iter().map(String::as_str));
        let (child, ready) = spawn_testenv(&testenv_binary()?, &args)?;
        *CHILD.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        Ok(TestEnv {
            kubeconfig: ready.kubeconfig,
            url: ready.url,
            pid: Some(ready.pid),
            audit: Some(audit),
        })
    }

    /// A handle on a control plane the caller started with [`spawn_testenv`]
    /// and stops itself (the handle owns no process), for tests that need
    /// their own apiserver, e.g. to restart it or to have two clusters.
    pub fn attach(ready: &ReadyLine) -> TestEnv {
        TestEnv {
            audit: None,
            kubeconfig: ready.kubeconfig.clone(),
            url: ready.url.clone(),
            pid: Some(ready.pid),
        }
    }

    /// The control plane's audit log of writes (see [`audit`]).
    pub fn audit_log(&self) -> anyhow::Result<&audit::AuditLog> {
        self.audit.as_ref().ok_or_else(|| {
            anyhow!(
                "no audit log: with CCM_TEST_KUBECONFIG, set CCM_TEST_AUDIT_LOG to the apiserver's audit log (`make testenv` prints it)"
            )
        })
    }

    /// This handle with the audit log its control plane was started with
    /// ([`audit::apiserver_flags`]).
    pub fn with_audit_log(mut self, log: audit::AuditLog) -> TestEnv {
        self.audit = Some(log);
        self
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The control plane's pid, if this process started it.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Client configuration as the cluster admin (`system:masters`).
    pub async fn admin_config(&self) -> anyhow::Result<Config> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)?;
        Ok(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
    }

    /// A client as the cluster admin.
    pub async fn admin_client(&self) -> anyhow::Result<Client> {
        Ok(Client::try_from(self.admin_config().await?)?)
    }

    /// A client that authenticates as `system:serviceaccount:<ns>:<name>` with
    /// a token from the TokenRequest API, so it has exactly the RBAC granted to
    /// that ServiceAccount. The ServiceAccount is created if missing.
    pub async fn service_account_client(&self, ns: &str, name: &str) -> anyhow::Result<Client> {
        Ok(Client::try_from(
            self.service_account_config(ns, name).await?,
        )?)
    }

    /// The configuration behind [`Self::service_account_client`].
    pub async fn service_account_config(&self, ns: &str, name: &str) -> anyhow::Result<Config> {
        let token = self.service_account_token(ns, name).await?;
        let mut config = self.admin_config().await?;
        config.auth_info = AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        };
        Ok(config)
    }

    /// Writes to `path` a kubeconfig for a separate process: this
    /// apiserver, as the ServiceAccount `ns/name` (a fresh token).
    pub async fn write_service_account_kubeconfig(
        &self,
        ns: &str,
        name: &str,
        path: &Path,
    ) -> anyhow::Result<()> {
        let token = self.service_account_token(ns, name).await?;
        let mut kc = Kubeconfig::read_from(&self.kubeconfig)?;
        for a in &mut kc.auth_infos {
            a.auth_info = Some(AuthInfo {
                token: Some(token.clone().into()),
                ..Default::default()
            });
        }
        std::fs::write(path, serde_json::to_vec(&kc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }

    /// A fresh token (TokenRequest, one hour) of the ServiceAccount
    /// `ns/name`, created if missing.
    pub async fn service_account_token(&self, ns: &str, name: &str) -> anyhow::Result<String> {
        let admin = self.admin_client().await?;
        let sas: Api<ServiceAccount> = Api::namespaced(admin, ns);
        if sas.get_opt(name).await?.is_none() {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            };
            sas.create(&PostParams::default(), &sa).await?;
        }
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        Ok(sas
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .with_context(|| format!("TokenRequest for {ns}/{name}"))?
            .status
            .ok_or_else(|| anyhow!("TokenRequest for {ns}/{name} returned no status"))?
            .token)
    }

    /// Binds the existing ClusterRole `role` (such as a bootstrap role) to
    /// a ServiceAccount, in effect when this returns.
    pub async fn bind_cluster_role(
        &self,
        admin: &Client,
        sa_ns: &str,
        sa_name: &str,
        role: &str,
    ) -> anyhow::Result<()> {
        let role = Api::<ClusterRole>::all(admin.clone()).get(role).await?;
        bind(admin, sa_ns, sa_name, &role).await
    }

    /// Creates a namespace with a unique name. Namespaces are never deleted:
    /// no namespace controller runs, so they would stay Terminating anyway.
    pub async fn namespace(&self, client: &Client, prefix: &str) -> anyhow::Result<String> {
        let name = unique_name(prefix);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(name)
    }

    /// Grants `rules` to a ServiceAccount through a new ClusterRole and
    /// binding, in effect when this returns.
    pub async fn grant_cluster_role(
        &self,
        admin: &Client,
        sa_ns: &str,
        sa_name: &str,
        rules: Vec<PolicyRule>,
    ) -> anyhow::Result<String> {
        let name = unique_name(sa_name);
        let role = ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            rules: Some(rules),
            ..Default::default()
        };
        let role = Api::<ClusterRole>::all(admin.clone())
            .create(&PostParams::default(), &role)
            .await?;
        bind(admin, sa_ns, sa_name, &role).await?;
        Ok(name)
    }
}

/// Binds `role` to the ServiceAccount `sa_ns/sa_name` and waits until the
/// binding is in effect ([`until_allowed`] its first rule).
async fn bind(
    admin: &Client,
    sa_ns: &str,
    sa_name: &str,
    role: &ClusterRole,
) -> anyhow::Result<()> {
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(unique_name(sa_name)),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.metadata.name.clone().unwrap_or_default(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa_name.into(),
            namespace: Some(sa_ns.into()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    match role.rules.as_ref().and_then(|r| r.first()) {
        Some(rule) => until_allowed(admin, sa_ns, sa_name, rule, None).await,
        None => Ok(()),
    }
}

/// Waits until the apiserver's authorizer allows the ServiceAccount
/// `sa_ns/sa_name` what `rule` grants (its first verb on its first
/// resource or URL), in `namespace` for a namespaced Role.
///
/// A Role or binding takes effect when the authorizer's informers see it, a
/// moment after its create returns: a client started right away can be
/// denied once, and a test counting denials would count that.
pub async fn until_allowed(
    admin: &Client,
    sa_ns: &str,
    sa_name: &str,
    rule: &PolicyRule,
    namespace: Option<&str>,
) -> anyhow::Result<()> {
    let first = |v: Option<&Vec<String>>| v.and_then(|v| v.first()).cloned();
    let verb = rule.verbs.first().cloned();
    let mut spec = SubjectAccessReviewSpec {
        user: Some(format!("system:serviceaccount:{sa_ns}:{sa_name}")),
        groups: Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{sa_ns}"),
            "system:authenticated".into(),
        ]),
        ..Default::default()
    };
    if let Some(path) = first(rule.non_resource_urls.as_ref()) {
        spec.non_resource_attributes = Some(NonResourceAttributes {
            path: Some(path),
            verb,
        });
    } else {
        let resource = first(rule.resources.as_ref()).unwrap_or_default();
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
            None => (resource, None),
        };
        spec.resource_attributes = Some(ResourceAttributes {
            group: first(rule.api_groups.as_ref()),
            resource: Some(resource),
            subresource,
            name: first(rule.resource_names.as_ref()),
            namespace: namespace.map(str::to_owned),
            verb,
            ..Default::default()
        });
    }
    let review = SubjectAccessReview {
        spec,
        ..Default::default()
    };
    let reviews = Api::<SubjectAccessReview>::all(admin.clone());
    let allowed = poll_until(
        DEADLINE,
        poll::INTERVAL,
        || async {
            let answer = reviews.create(&PostParams::default(), &review).await?;
            Ok::<_, kube::Error>(answer.status.is_some_and(|s| s.allowed))
        },
        |r| !matches!(r, Ok(false)),
    )
    .await?;
    if !allowed {
        bail!("timed out after {DEADLINE:?} waiting for {sa_ns}/{sa_name} to be allowed {rule:?}");
    }
    Ok(())
}

/// A DNS-1123 name unique within this test run: prefix, process id, counter
/// and clock, so parallel tests and parallel test binaries never collide.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() % 1_000_000_000)
        .unwrap_or_default();
    let prefix: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(30)
        .collect();
    format!("{prefix}-{}-{n}-{micros}", std::process::id())
}

/// Where the ccm-testenv binary is: `$CCM_TESTENV_BIN`, else
/// `target/testenv/bin/ccm-testenv` in the workspace (`make testenv-bin`).
pub fn testenv_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("CCM_TESTENV_BIN") {
        return Ok(PathBuf::from(p));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("target/testenv/bin/ccm-testenv");
    if !bin.exists() {
        bail!(
            "{} not found: run `make testenv-bin` (or hack/build-testenv.sh) first, or set CCM_TESTENV_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

/// Spawns ccm-testenv with `args` and waits for its ready line. Its stderr
/// goes to a log file under `target/testenv/logs/`, named in any error.
///
/// The child gets SIGTERM if the thread that spawned it dies, so it is spawned
/// from a thread that lives as long as the process.
pub fn spawn_testenv(bin: &Path, args: &[&str]) -> anyhow::Result<(Child, ReadyLine)> {
    let log_dir = log_dir()?;
    let log_path = log_dir.join(format!("{}.log", unique_name("ccm-testenv")));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    set_parent_death_signal(&mut cmd);
    let mut child =
        spawn_from_immortal_thread(cmd).with_context(|| format!("spawning {}", bin.display()))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next();
        let _ = tx.send(first);
        // Keep draining so the child never blocks on a full pipe.
        for _ in lines {}
    });
    let deadline = Duration::from_secs(
        std::env::var("CCM_TESTENV_START_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(180),
    );
    let tail = |p: &Path| failure_summary(&std::fs::read_to_string(p).unwrap_or_default());
    match rx.recv_timeout(deadline) {
        Ok(Some(Ok(line))) => {
            let ready: ReadyLine = serde_json::from_str(&line)
                .with_context(|| format!("unexpected first line from ccm-testenv: {line}"))?;
            Ok((child, ready))
        }
        Ok(_) => {
            let status = child.wait()?;
            bail!(
                "ccm-testenv exited ({status}) before ready; log {}:\n{}",
                log_path.display(),
                tail(&log_path)
            )
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "ccm-testenv not ready within {deadline:?}; log {}:\n{}",
                log_path.display(),
                tail(&log_path)
            )
        }
    }
}

/// `target/testenv/logs/`, where control planes' logs go.
pub fn log_dir() -> anyhow::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testenv/logs");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// What a failed ccm-testenv start printed, cause first: a Go panic's stack
/// fills the last lines, so the lines that say why (our own error line, the
/// `panic:` line, etcd's panic- and fatal-level records with their `error`
/// field) are picked out of the whole log, then the last 15 lines follow.
fn failure_summary(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let causes: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| {
            l.starts_with("ccm-testenv: error: ")
                || l.starts_with("panic: ")
                || l.starts_with("fatal error: ")
                || l.contains(r#""level":"panic""#)
                || l.contains(r#""level":"fatal""#)
        })
        .take(5)
        .collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
    if causes.is_empty() {
        tail
    } else {
        format!("cause:\n{}\nlast lines:\n{tail}", causes.join("\n"))
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `cargo` (the one running the tests), at the workspace root, for tests
/// that build the binaries they run as processes.
///
/// Without the variables cargo sets for a test binary (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`, …): build scripts that watch one of them (ring's watches
/// `CARGO_MANIFEST_DIR`) would otherwise see it change between this build
/// and the outer `cargo test`, and every run would rebuild ring, rustls, kube
/// and the controller, twice.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            )
        {
            cmd.env_remove(key);
        }
    }
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    cmd
}

/// The workspace's target directory: `$CARGO_TARGET_DIR`, else `target/`
/// at the workspace root.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// The binary `bin` of the workspace package `package`, built now with
/// [`cargo`] (debug profile) so it is never stale, for tests that run it as
/// a process. Built once per test process and pair; the path is the one
/// cargo reports for the artifact. Panics if the build fails (its errors
/// are on stderr).
pub fn built_binary(package: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<(String, String), PathBuf>> = Mutex::new(BTreeMap::new());
    // Held during the build: a second caller waits for it rather than
    // starting the same cargo build.
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let key = (package.to_owned(), bin.to_owned());
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let out = cargo()
        .args([
            "build",
            "--locked",
            "--message-format=json-render-diagnostics",
        ])
        .args(["-p", package, "--bin", bin])
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running cargo build -p {package} --bin {bin}: {e}"));
    assert!(
        out.status.success(),
        "cargo build -p {package} --bin {bin}: {}",
        out.status
    );
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == bin)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo build -p {package} --bin {bin} reported no executable"));
    built.insert(key, path.clone());
    path
}

/// Spawns `cmd` so that it gets SIGTERM when the test process dies, even
/// outright (`PR_SET_PDEATHSIG`, from a thread that lives as long as the
/// process): for helper processes a test starts and must never outlive it.
pub fn spawn_tied(mut cmd: Command) -> std::io::Result<Child> {
    set_parent_death_signal(&mut cmd);
    spawn_from_immortal_thread(cmd)
}

/// Sends SIGTERM and waits for the child to exit, returning its exit status.
pub fn terminate(child: &mut Child, grace: Duration) -> std::io::Result<std::process::ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Ok(status);
    }
    let pid = libc::pid_t::try_from(child.id()).unwrap_or(libc::pid_t::MAX);
    send_sigterm(pid);
    let deadline = std::time::Instant::now() + grace;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if std::time::Instant::now() >= deadline {
            child.kill()?;
            return child.wait();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[allow(unsafe_code)]
fn send_sigterm(pid: libc::pid_t) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// PR_SET_PDEATHSIG fires when the spawning *thread* exits. Test threads come
/// and go, so children that must live as long as the process are spawned by
/// one thread that never returns.
fn spawn_from_immortal_thread(mut cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<std::sync::mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("ccm-testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The sender lives in a static, so this loop never ends.
            })
            .expect("spawning the spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = std::sync::mpsc::channel();
    let sent = spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((std::mem::replace(&mut cmd, Command::new("")), reply_tx));
    if sent.is_err() {
        return Err(std::io::Error::other("spawner thread is gone"));
    }
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("spawner thread is gone"))?
}

// Runs from atexit, after the test harness returned: stdout may be gone, so
// nothing here prints.
#[allow(unsafe_code)]
#[ctor::dtor]
unsafe fn stop_control_plane_at_exit() {
    let child = CHILD.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(mut child) = child {
        let _ = terminate(&mut child, Duration::from_secs(30));
    }
}

#[cfg(test)]
mod tests {
    use super::failure_summary;

    #[test]
    fn a_failed_start_leads_with_its_cause_not_the_stack() {
        let mut log = String::from(
            "{\"level\":\"panic\",\"msg\":\"failed to create WAL\",\"error\":\"no space left on device\"}\npanic: failed to create WAL\n",
        );
        for i in 0..40 {
            log.push_str(&format!("\tframe {i}\n"));
        }
        let s = failure_summary(&log);
        assert!(s.starts_with("cause:\n{\"level\":\"panic\""), "{s}");
        assert!(
            s.contains("no space left on device\"}\npanic: failed to create WAL\nlast lines:"),
            "{s}"
        );
        assert!(
            s.ends_with("\tframe 39") && !s.contains("frame 24\n"),
            "{s}"
        );
        assert_eq!(failure_summary("a\nb"), "a\nb", "no cause: the tail alone");
    }
}
