//! Opt-in cluster access for the provider (`--provider-service-account`):
//! with the RBAC of deploy/components/provider-cluster-access applied as
//! shipped, the controller writes a kubeconfig of the provider's own
//! ServiceAccount, and a client built from it reads Nodes and nothing else;
//! the controller itself can mint tokens for that one ServiceAccount only.
//! A controller without the right to mint keeps running its controllers
//! and writes nothing until it gets it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use ccm_fake_provider::FakeConfig;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;

use crate::common::{Harness, UNINITIALIZED, admin_get, eventually, free_port, has_taint, repo};

/// Each test's own bound: a hang fails here instead of holding the lock.
const TEST_DEADLINE: Duration = Duration::from_secs(50);

const COMPONENT: &str = "deploy/components/provider-cluster-access";

fn shipped<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = repo().join(COMPONENT).join(file);
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The provider's ServiceAccount as shipped, in `ns`; its name.
async fn create_provider_account(h: &Harness) -> String {
    let mut sa: ServiceAccount = shipped("serviceaccount-provider.yaml");
    sa.metadata.namespace = Some(h.ns.clone());
    Api::<ServiceAccount>::namespaced(h.admin.clone(), &h.ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    sa.metadata.name.unwrap()
}

/// The provider's ClusterRole as shipped, bound to its ServiceAccount in
/// the harness's namespace.
async fn grant_provider_role(h: &Harness, provider_sa: &str) {
    let role: ClusterRole = shipped("clusterrole-provider.yaml");
    h.env()
        .grant_cluster_role(&h.admin, &h.ns, provider_sa, role.rules.unwrap())
        .await
        .unwrap();
}

/// The controller's token Role and its binding as shipped, moved to the
/// harness's namespace (where the controller's ServiceAccount is).
async fn grant_token_role(h: &Harness) {
    let mut role: Role = shipped("role-provider-token.yaml");
    role.metadata.namespace = Some(h.ns.clone());
    Api::<Role>::namespaced(h.admin.clone(), &h.ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let mut binding: RoleBinding = shipped("rolebinding-provider-token.yaml");
    binding.metadata.namespace = Some(h.ns.clone());
    for s in binding.subjects.iter_mut().flatten() {
        assert_eq!(
            s.name, "cloud-controller-manager",
            "the controller's account"
        );
        s.namespace = Some(h.ns.clone());
    }
    Api::<RoleBinding>::namespaced(h.admin.clone(), &h.ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The tests count the controller's denied token requests.
    let rule = &role.rules.as_ref().unwrap()[0];
    ccm_testsupport::until_allowed(
        &h.admin,
        &h.ns,
        "cloud-controller-manager",
        rule,
        Some(&h.ns),
    )
    .await
    .unwrap();
}

fn access_flags(h: &Harness, provider_sa: &str, dir: &Path, admin_port: u16) -> Vec<String> {
    vec![
        format!("--provider-service-account={provider_sa}"),
        format!("--provider-service-account-namespace={}", h.ns),
        format!("--provider-kubeconfig-dir={}", dir.display()),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--admin-port={admin_port}"),
    ]
}

/// Waits for the kubeconfig the controller writes (it is written last, so
/// what it names exists once it does).
async fn wait_for_kubeconfig(dir: &Path) -> Kubeconfig {
    let path = dir.join("kubeconfig");
    eventually("the provider's kubeconfig", || async {
        if !path.exists() {
            return Err(format!("no {}", path.display()));
        }
        Kubeconfig::read_from(&path).map_err(|e| e.to_string())
    })
    .await
}

fn forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    match r {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: want 403 Forbidden, got {other:?}"),
    }
}

/// `ccm_provider_token_requests_total{result}` on the admin port.
async fn token_requests(port: u16, result: &str) -> u64 {
    let body = admin_get(port, "/metrics").await.unwrap_or_default();
    let series = format!("ccm_provider_token_requests_total{{result=\"{result}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn provider_kubeconfig_reads_nodes_and_nothing_else() {
    tokio::time::timeout(TEST_DEADLINE, async {
        let mut h = Harness::start(FakeConfig::default(), &[]).await;
        // Restarted with the flags once the RBAC is there.
        h.stop_controller().await;
        let provider_sa = create_provider_account(&h).await;
        grant_provider_role(&h, &provider_sa).await;
        grant_token_role(&h).await;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let flags = access_flags(&h, &provider_sa, dir.path(), port);
        h.start_controller(&flags.iter().map(String::as_str).collect::<Vec<_>>());

        let kubeconfig = wait_for_kubeconfig(dir.path()).await;
        // Relative paths: the directory may be mounted anywhere.
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.token_file.as_deref(),
            Some(dir.path().join("token").to_str().unwrap()),
            "tokenFile, resolved next to the kubeconfig"
        );
        for file in ["token", "ca.crt", "kubeconfig"] {
            let mode = std::fs::metadata(dir.path().join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o640, "{file}: {mode:o}");
        }
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        let provider = Client::try_from(config).unwrap();

        // It is the provider's own identity, not the controller's.
        let review = Api::<SelfSubjectReview>::all(provider.clone())
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .unwrap();
        let username = review.status.unwrap().user_info.unwrap().username.unwrap();
        assert_eq!(
            username,
            format!("system:serviceaccount:{}:{provider_sa}", h.ns)
        );

        // Nodes: list, get and watch (an event arrives for a new Node).
        let nodes = Api::<Node>::all(provider.clone());
        let listed = nodes.list(&ListParams::default()).await.unwrap();
        let version = listed.metadata.resource_version.unwrap();
        let mut events = nodes
            .watch(&WatchParams::default().timeout(20), &version)
            .await
            .unwrap()
            .boxed();
        let name = ccm_testsupport::unique_name("provider-access");
        h.register_node(&name).await;
        loop {
            match events.try_next().await.unwrap() {
                Some(WatchEvent::Added(n)) if n.metadata.name.as_deref() == Some(&name) => break,
                Some(_) => continue,
                None => panic!("the watch ended without the new Node"),
            }
        }
        nodes.get(&name).await.unwrap();

        // Nothing else: no Node writes, no Secrets, no Events, no Services.
        forbidden(
            "patch a Node",
            nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
                )
                .await,
        );
        forbidden(
            "delete a Node",
            nodes.delete(&name, &Default::default()).await,
        );
        let secrets = Api::<Secret>::namespaced(provider.clone(), &h.ns);
        forbidden("get a Secret", secrets.get("anything").await);
        forbidden("list Secrets", secrets.list(&ListParams::default()).await);
        forbidden(
            "list Secrets everywhere",
            Api::<Secret>::all(provider.clone())
                .list(&ListParams::default())
                .await,
        );
        let core_event: CoreEvent = serde_json::from_value(json!({
            "metadata": {"generateName": "provider-"},
            "involvedObject": {"kind": "Node", "name": name},
            "reason": "Test", "message": "from the provider", "type": "Normal",
        }))
        .unwrap();
        forbidden(
            "create a core/v1 Event",
            Api::<CoreEvent>::namespaced(provider.clone(), "default")
                .create(&PostParams::default(), &core_event)
                .await,
        );
        let event: Event = serde_json::from_value(json!({
            "metadata": {"generateName": "provider-"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "provider", "reportingInstance": "provider",
            "action": "Test", "reason": "Test", "type": "Normal",
            "regarding": {"kind": "Node", "name": name},
        }))
        .unwrap();
        forbidden(
            "create an events.k8s.io Event",
            Api::<Event>::namespaced(provider.clone(), "default")
                .create(&PostParams::default(), &event)
                .await,
        );
        forbidden(
            "list Services",
            Api::<Service>::all(provider.clone())
                .list(&ListParams::default())
                .await,
        );
        forbidden(
            "mint a token with the provider's own",
            Api::<ServiceAccount>::namespaced(provider.clone(), &h.ns)
                .create_token_request(
                    &provider_sa,
                    &PostParams::default(),
                    &TokenRequest::default(),
                )
                .await,
        );

        // The controller's identity mints for the provider's account and no
        // other: not another account of its namespace, not its own, not a
        // namesake elsewhere.
        let controller = Client::try_from(h.sa.clone()).unwrap();
        let other = "someone-else";
        Api::<ServiceAccount>::namespaced(h.admin.clone(), &h.ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": other}})).unwrap(),
            )
            .await
            .unwrap();
        let in_ns = Api::<ServiceAccount>::namespaced(controller.clone(), &h.ns);
        in_ns
            .create_token_request(
                &provider_sa,
                &PostParams::default(),
                &TokenRequest::default(),
            )
            .await
            .expect("the controller mints for the provider's account");
        for sa in [other, "cloud-controller-manager"] {
            forbidden(
                &format!("the controller minting for {sa}"),
                in_ns
                    .create_token_request(sa, &PostParams::default(), &TokenRequest::default())
                    .await,
            );
        }
        forbidden(
            "the controller minting in another namespace",
            Api::<ServiceAccount>::namespaced(controller, "default")
                .create_token_request(
                    &provider_sa,
                    &PostParams::default(),
                    &TokenRequest::default(),
                )
                .await,
        );

        assert!(token_requests(port, "ok").await >= 1);
        assert_eq!(token_requests(port, "error").await, 0);
        h.stop().await;
    })
    .await
    .expect("within the test's deadline");
}

/// Without the token Role the controller cannot mint: its controllers run
/// anyway (a Node is initialised), each failure is counted, no kubeconfig
/// is written; once the Role exists, a retry writes it.
#[tokio::test]
async fn a_controller_that_cannot_mint_runs_its_controllers_and_retries() {
    tokio::time::timeout(TEST_DEADLINE, async {
        let mut h = Harness::start(FakeConfig::default(), &[]).await;
        h.stop_controller().await;
        let provider_sa = create_provider_account(&h).await;
        grant_provider_role(&h, &provider_sa).await;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let flags = access_flags(&h, &provider_sa, dir.path(), port);
        h.start_controller(&flags.iter().map(String::as_str).collect::<Vec<_>>());

        let name = ccm_testsupport::unique_name("no-access");
        h.register_node(&name).await;
        h.wait_for(&name, "initialised", |n| {
            n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
        })
        .await;
        eventually("a failed token request counted", || async {
            match token_requests(port, "error").await {
                0 => Err("none yet".to_owned()),
                n => Ok(n),
            }
        })
        .await;
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "nothing written without a token"
        );

        grant_token_role(&h).await;
        wait_for_kubeconfig(dir.path()).await;
        assert!(token_requests(port, "ok").await >= 1);
        h.stop().await;
    })
    .await
    .expect("within the test's deadline");
}
