//! Several providers behind one controller (docs/hybrid.md), the
//! machinery only: a provider down at start holds back its own
//! controllers and nothing else; each provider's checks, paths and metric
//! series carry its name; a Node no provider owns gets one Warning.
//! (hybrid.rs has the scenarios with two real provider processes.)

use ccm_fake_provider::{FakeCloud, FakeConfig, Method};
use ccm_provider_sdk::proto::{InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    CallContext, Existence, Identity, Instances, ProviderInfo, ProviderResult, ProviderServer,
    ShutdownState,
};
use ccm_testsupport::unique_name;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::oneshot;

use crate::common::*;

const PLATFORM: &str = "cloudprovider.kubernetes.io/platform";

/// The fake as a second cloud: it owns `other://` providerIDs (the same
/// instances, named the same).
#[derive(Clone)]
struct Other(FakeCloud);

fn to_fake(mut node: NodeRef) -> NodeRef {
    if let Some(id) = node.provider_id.strip_prefix("other://") {
        node.provider_id = format!("fake://{id}");
    }
    node
}

impl Identity for Other {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "other".into(),
            provider_id_scheme: "other".into(),
            ..Identity::info(&self.0)
        }
    }
}

impl Instances for Other {
    async fn instance_exists(&self, ctx: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        Instances::instance_exists(&self.0, ctx, to_fake(node)).await
    }

    async fn instance_shutdown(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<ShutdownState> {
        Instances::instance_shutdown(&self.0, ctx, to_fake(node)).await
    }

    async fn instance_metadata(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        let mut meta = Instances::instance_metadata(&self.0, ctx, to_fake(node)).await?;
        if let Some(id) = meta.provider_id.strip_prefix("fake://") {
            meta.provider_id = format!("other://{id}");
        }
        Ok(meta)
    }
}

/// Whether any of `fake`'s calls were about one of `nodes`.
fn asked_about(fake: &FakeCloud, nodes: &[&str]) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|c| {
            nodes
                .iter()
                .any(|n| c.request_id.contains(&format!("node/{n}")))
        })
        .map(|c| format!("{} {}", c.method.as_str(), c.request_id))
        .collect()
}

async fn until_admin(port: u16, path: &str, what: &str, ok: impl Fn(&str) -> bool) {
    eventually(what, || async {
        let body = admin_get(port, path).await?;
        if ok(&body) { Ok(()) } else { Err(body) }
    })
    .await;
}

fn tainted(n: &Node) -> bool {
    has_taint(n, UNINITIALIZED)
}

#[tokio::test]
async fn a_provider_down_at_start_holds_back_only_its_own_controllers() {
    // The control plane stays held until the test ends.
    let ControllerAccount {
        control_plane: _held,
        admin,
        sa,
        ..
    } = ControllerAccount::new("ccm", &["clusterrole.yaml"]).await;

    let dir = tempfile::tempdir().unwrap();
    let up_endpoint = format!("unix://{}/up.sock", dir.path().display());
    let down_endpoint = format!("unix://{}/down.sock", dir.path().display());
    let up = FakeCloud::new(FakeConfig::default()).unwrap();
    let (stop_up, up_stopped) = oneshot::channel::<()>();
    tokio::spawn(up.clone().serve(up_endpoint.clone(), async {
        let _ = up_stopped.await;
    }));

    let port = free_port();
    let args: Vec<String> = [
        "cloud-controller-manager".to_owned(),
        format!("--provider=up={up_endpoint}"),
        format!("--provider=down={down_endpoint}"),
        "--cloud-provider-platforms=down=down".to_owned(),
        "--controllers=cloud-node,cloud-node-lifecycle".to_owned(),
        "--node-monitor-period=200ms".to_owned(),
        "--provider-capability-refresh-period=300ms".to_owned(),
        "--leader-elect=false".to_owned(),
        "--secure-port=0".to_owned(),
        format!("--admin-port={port}"),
        "--bind-address=127.0.0.1".to_owned(),
    ]
    .into();
    let (stop_controller, stopped) = oneshot::channel();
    let controller = run_controller(sa, args, stopped);

    let nodes: Api<Node> = Api::all(admin.clone());
    let (mine, theirs, stray) = (unique_name("up"), unique_name("down"), unique_name("stray"));
    nodes
        .create(&PostParams::default(), &kubelet_node(&mine))
        .await
        .unwrap();
    let mut n = kubelet_node(&theirs);
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(PLATFORM.into(), "down".into());
    nodes.create(&PostParams::default(), &n).await.unwrap();
    let mut n = kubelet_node(&stray);
    n.spec.as_mut().unwrap().provider_id = Some(format!("nobody://{stray}"));
    nodes.create(&PostParams::default(), &n).await.unwrap();

    // "up" answers: its Node is initialised, the other's waits for "down".
    eventually("up's Node initialised", || async {
        let n = nodes.get(&mine).await.map_err(|e| e.to_string())?;
        if tainted(&n) {
            Err("tainted".to_owned())
        } else {
            Ok(())
        }
    })
    .await;
    assert!(
        tainted(&nodes.get(&theirs).await.unwrap()),
        "down's Node waits for down"
    );
    assert_eq!(asked_about(&up, &[&theirs, &stray]), Vec::<String>::new());
    until_admin(port, "/readyz", "readyz: up ready, down not", |b| {
        b.contains("[+] provider-ready:up ok")
            && b.contains("[-] provider-ready:down failed")
            && b.contains("[+] node-cache-synced ok")
            && b.starts_with("HTTP/1.0 500")
    })
    .await;
    let healthz = admin_get(port, "/healthz").await.unwrap();
    for want in [
        "[+] cloud-node-controller:up ok",
        "[+] cloud-node-lifecycle-controller:up ok",
    ] {
        assert!(healthz.contains(want), "{want}: {healthz}");
    }
    assert!(!healthz.contains(":down"), "{healthz}");
    assert!(
        admin_get(port, "/livez/provider:up")
            .await
            .unwrap()
            .starts_with("HTTP/1.0 200")
    );
    let down_live = admin_get(port, "/livez/provider:down").await.unwrap();
    assert!(
        down_live.starts_with("HTTP/1.0 500") && down_live.contains("provider:down failed"),
        "{down_live}"
    );
    let metrics = admin_get(port, "/metrics").await.unwrap();
    for want in [
        r#"ccm_provider_request_duration_seconds_count{service="Instances",method="BatchInstances",code="OK",provider="up"}"#,
        r#"running_managed_controllers{name="cloud-node",manager="cloud-controller-manager",provider="up"} 1"#,
        r#"workqueue_adds_total{name="Nodes:up"}"#,
    ] {
        assert!(metrics.contains(want), "{want} in {metrics}");
    }
    assert!(
        !metrics.contains(r#"manager="cloud-controller-manager",provider="down""#),
        "{metrics}"
    );
    // Not every provider has answered: a Node nobody owns yet is not
    // judged (down might own its scheme).
    assert!(
        events_for(&admin, &stray, "NoProviderOwnsNode")
            .await
            .is_empty()
    );

    // "down" comes up: its controllers start and take its Node.
    let other = FakeCloud::new(FakeConfig::default()).unwrap();
    let (stop_down, down_stopped) = oneshot::channel::<()>();
    let server = ProviderServer::new(Other(other.clone())).with_instances(Other(other.clone()));
    let serving = down_endpoint.clone();
    tokio::spawn(async move {
        server
            .serve(&serving, async {
                let _ = down_stopped.await;
            })
            .await
    });
    eventually("down's Node initialised by down", || async {
        let n = nodes.get(&theirs).await.map_err(|e| e.to_string())?;
        let id = n.spec.as_ref().and_then(|s| s.provider_id.clone());
        if !tainted(&n) && id == Some(format!("other://{theirs}")) {
            Ok(())
        } else {
            Err(format!("{id:?}"))
        }
    })
    .await;
    until_admin(port, "/readyz", "readyz: both ready", |b| {
        b.starts_with("HTTP/1.0 200") && b.contains("[+] cloud-node-controller:down ok")
    })
    .await;

    // Every provider answered: the stray Node gets its one Warning, however
    // often it changes. (A second stray's Warning, reported after the
    // first's updates by the one task, says those updates were seen.)
    eventually("NoProviderOwnsNode on the stray Node", || async {
        match events_for(&admin, &stray, "NoProviderOwnsNode").await.len() {
            0 => Err("none yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    for i in 0..3 {
        nodes
            .patch(
                &stray,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"bump": i.to_string()}}})),
            )
            .await
            .unwrap();
    }
    let second = unique_name("stray");
    let mut n = kubelet_node(&second);
    n.spec.as_mut().unwrap().provider_id = Some(format!("nobody://{second}"));
    nodes.create(&PostParams::default(), &n).await.unwrap();
    eventually("NoProviderOwnsNode on the second stray Node", || async {
        match events_for(&admin, &second, "NoProviderOwnsNode")
            .await
            .len()
        {
            0 => Err("none yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    let warnings = events_for(&admin, &stray, "NoProviderOwnsNode").await;
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].series.is_none(), "{warnings:#?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert!(
        warnings[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("\"nobody\""),
        "{warnings:#?}"
    );
    assert!(
        tainted(&nodes.get(&stray).await.unwrap()),
        "nobody initialises it"
    );

    // Nobody was asked about a Node that is not its own.
    assert_eq!(
        asked_about(&up, &[&theirs, &stray, &second]),
        Vec::<String>::new()
    );
    assert_eq!(
        asked_about(&other, &[&mine, &stray, &second]),
        Vec::<String>::new()
    );
    assert!(!other.calls_of(Method::InstanceMetadata).is_empty());

    let _ = stop_controller.send(());
    controller.await.unwrap().unwrap();
    let _ = stop_up.send(());
    let _ = stop_down.send(());
}
