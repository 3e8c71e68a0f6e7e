//! Provider answers upstream accepts and we must too, or refuse as upstream
//! does (issue 12, points 4 and 5), with providers that wrap the fake cloud
//! and change one answer.

use crate::common::*;
use ccm_fake_provider::{FakeCloud, FakeConfig};
use ccm_provider_sdk::proto::{InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    CallContext, Existence, Identity, Instances, ProviderInfo, ProviderResult, ProviderServer,
    ShutdownState,
};
use ccm_testsupport::unique_name;
use kube::api::PostParams;
use tokio::sync::oneshot;

/// The fake, except: no providerID in InstanceMetadata for a Node that has
/// one, `has_cluster_id` as configured, and (contract 1.2.0) a warning about
/// every Node when `warns`.
#[derive(Clone)]
struct Variant {
    fake: FakeCloud,
    has_cluster_id: Option<bool>,
    warns: bool,
}

impl Identity for Variant {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            has_cluster_id: self.has_cluster_id,
            ..self.fake.info()
        }
    }
}

impl Instances for Variant {
    async fn instance_exists(&self, ctx: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        self.fake.instance_exists(ctx, node).await
    }

    async fn instance_shutdown(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<ShutdownState> {
        self.fake.instance_shutdown(ctx, node).await
    }

    async fn instance_metadata(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        let had_one = !node.provider_id.is_empty();
        if self.warns {
            ctx.warn(
                "MaintenanceScheduled",
                format!("the machine of {} is rebooted on Sunday", node.name),
            );
        }
        let mut meta = self.fake.instance_metadata(ctx, node).await?;
        if had_one {
            meta.provider_id.clear();
        }
        Ok(meta)
    }
}

/// Replaces the harness's provider with `variant` on the same socket.
async fn serve_variant(h: &mut Harness, variant: Variant) -> oneshot::Sender<()> {
    h.stop_provider();
    let path = h.endpoint.trim_start_matches("unix://").to_owned();
    wait_until("the fake's socket gone", || async {
        !std::path::Path::new(&path).exists()
    })
    .await;
    let (stop, stopped) = oneshot::channel::<()>();
    let endpoint = h.endpoint.clone();
    tokio::spawn(async move {
        ProviderServer::new(variant.clone())
            .with_instances(variant)
            .serve(&endpoint, async {
                let _ = stopped.await;
            })
            .await
    });
    stop
}

/// Point 5: a Node that already has its providerID is initialised although
/// the provider's metadata carries none (upstream accepts that).
#[tokio::test]
async fn metadata_without_provider_id_initialises_a_node_that_has_one() {
    let mut h = Harness::start(FakeConfig::default(), &["--controllers=cloud-node"]).await;
    let variant = Variant {
        fake: h.fake.clone(),
        has_cluster_id: Some(true),
        warns: false,
    };
    let _stop = serve_variant(&mut h, variant).await;
    let name = unique_name("hasid");
    let mut n = kubelet_node(&name);
    n.spec.as_mut().unwrap().provider_id = Some(format!("fake://{name}"));
    h.nodes().create(&PostParams::default(), &n).await.unwrap();
    let n = h
        .wait_for(&name, "initialised", |n| {
            n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
        })
        .await
        .unwrap();
    assert_eq!(
        n.spec.unwrap().provider_id.as_deref(),
        Some(format!("fake://{name}").as_str()),
        "kept"
    );
    let labels = n.metadata.labels.unwrap_or_default();
    assert_eq!(labels["topology.kubernetes.io/zone"], "fake-zone-a");
    h.stop().await;
}

/// Point 4: a provider without a cluster id stops the start with
/// upstream's words, unless --allow-untagged-cloud.
#[tokio::test]
async fn an_untagged_cloud_is_refused_unless_allowed() {
    let mut h = Harness::start(FakeConfig::default(), &["--controllers=cloud-node"]).await;
    h.stop_controller().await;
    let variant = Variant {
        fake: h.fake.clone(),
        has_cluster_id: Some(false),
        warns: false,
    };
    let _stop = serve_variant(&mut h, variant).await;
    let (_keep, stopped) = oneshot::channel();
    let refused = run_controller(
        h.sa.clone(),
        args_for(&h.endpoint, &["--controllers=cloud-node"]),
        stopped,
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(
        refused.to_string().contains(
            "no ClusterID found.  A ClusterID is required for the cloud provider to function properly.  This check can be bypassed by setting the allow-untagged-cloud option"
        ),
        "{refused}"
    );
    h.start_controller(&["--controllers=cloud-node", "--allow-untagged-cloud"]);
    let name = unique_name("untagged");
    h.register_node(&name).await;
    h.wait_for(&name, "initialised", |n| {
        n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
    })
    .await;
    h.stop().await;
}

/// Contract 1.2.0: what the cloud says about a Node's instance is a Warning
/// Event on the Node, written by the controller with its own identity.
#[tokio::test]
async fn the_clouds_warning_about_a_node_is_a_warning_event_on_it() {
    let mut h = Harness::start(FakeConfig::default(), &["--controllers=cloud-node"]).await;
    let variant = Variant {
        fake: h.fake.clone(),
        has_cluster_id: Some(true),
        warns: true,
    };
    let _stop = serve_variant(&mut h, variant).await;
    let name = unique_name("warned");
    h.register_node(&name).await;
    h.wait_for(&name, "initialised", |n| {
        n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
    })
    .await;
    let e = ccm_testsupport::poll::eventually("a MaintenanceScheduled event", || async {
        events_for(&h.admin, &name, "MaintenanceScheduled")
            .await
            .into_iter()
            .next()
            .ok_or_else(|| "none".to_owned())
    })
    .await;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.action.as_deref(), Some("InstanceMetadata"));
    assert_eq!(
        e.note.as_deref(),
        Some(format!("the machine of {name} is rebooted on Sunday").as_str())
    );
    h.stop().await;
}
