//! Provider processes on sockets of their own, and controller identities
//! for separate processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::TestEnv;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::PostParams;
use kube::{Api, Client};

use super::eventually;

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
        let rule = &le.rules.as_ref().unwrap()[0];
        ccm_testsupport::until_allowed(admin, ns, sa, rule, Some("kube-system"))
            .await
            .unwrap();
    }
    env.write_service_account_kubeconfig(ns, sa, kubeconfig)
        .await
        .unwrap();
}
