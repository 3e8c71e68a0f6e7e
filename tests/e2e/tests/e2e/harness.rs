//! The harness itself: what an exclusive hold on the control plane deletes.

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::PostParams;

use crate::common::{ControlPlane, Existing, delete_created, kubelet_node, lb_service};
use ccm_testsupport::unique_name;

/// Each step's deadline (waiting for the lock is not a step).
const STEP: std::time::Duration = std::time::Duration::from_secs(30);

/// The clean-up deletes the Nodes and Services created after its snapshot
/// and leaves alone those that existed before (the harnesses used to
/// delete every Node in the cluster, and every Service in a `ccm-`
/// namespace); dropping the hold deletes what was created while it was
/// held.
#[tokio::test]
async fn the_clean_up_deletes_only_what_was_created_since_its_snapshot() {
    let held = ControlPlane::exclusive().await;
    let (old_node, ns) = tokio::time::timeout(STEP, snapshot_then_clean_up(&held))
        .await
        .expect("within the deadline");

    // Dropping the hold deletes what was created while it was held.
    drop(held);
    let held = ControlPlane::exclusive().await;
    let admin = held.env().admin_client().await.unwrap();
    let gone = async {
        assert!(
            Api::<Node>::all(admin.clone())
                .get_opt(&old_node)
                .await
                .unwrap()
                .is_none(),
            "deleted when the hold was dropped"
        );
        assert!(
            Api::<Service>::namespaced(admin, &ns)
                .get_opt("old")
                .await
                .unwrap()
                .is_none(),
            "deleted when the hold was dropped"
        );
    };
    tokio::time::timeout(STEP, gone)
        .await
        .expect("within the deadline");
}

/// Creates a Node and a Service, snapshots, creates two more and cleans up
/// after the snapshot; returns the first Node's name and the namespace.
async fn snapshot_then_clean_up(held: &ControlPlane) -> (String, String) {
    let env = held.env();
    let admin = env.admin_client().await.unwrap();
    let ns = env.namespace(&admin, "cleanup").await.unwrap();
    let nodes = Api::<Node>::all(admin.clone());
    let services = Api::<Service>::namespaced(admin.clone(), &ns);
    let (old_node, new_node) = (unique_name("old"), unique_name("new"));
    let pp = PostParams::default();
    nodes.create(&pp, &kubelet_node(&old_node)).await.unwrap();
    services.create(&pp, &lb_service("old", 80)).await.unwrap();

    let before = Existing::now(&admin).await;
    nodes.create(&pp, &kubelet_node(&new_node)).await.unwrap();
    let mut new_svc = lb_service("new", 80);
    // A finalizer nobody will remove, as a stopped controller leaves one.
    new_svc.metadata.finalizers = Some(vec!["example.com/stuck".into()]);
    services.create(&pp, &new_svc).await.unwrap();
    delete_created(env, &before).await.unwrap();

    assert!(nodes.get_opt(&old_node).await.unwrap().is_some(), "kept");
    assert!(services.get_opt("old").await.unwrap().is_some(), "kept");
    assert!(nodes.get_opt(&new_node).await.unwrap().is_none(), "deleted");
    assert!(services.get_opt("new").await.unwrap().is_none(), "deleted");

    (old_node, ns)
}
