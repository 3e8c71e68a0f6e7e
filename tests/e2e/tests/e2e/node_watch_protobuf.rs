//! The Node watch reads the apiserver's protobuf and decodes each Node as
//! its projection: the same projection, field for field, as the Node read
//! as JSON, for Nodes that use every field the projection keeps; and the
//! events kube-rs's watcher would give.

use std::time::Duration;

use cloud_controller_manager::k8s::node_list_watch::watch_nodes;
use cloud_controller_manager::k8s::projected::{project, same_but_for_version};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::Event;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// A Node with every field the projection keeps set, and some it drops.
fn rich_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "z1"},
            "annotations": {"alpha.kubernetes.io/provided-node-ip": "10.0.0.1", "empty": ""},
            "finalizers": ["example.com/hold"]
        },
        "spec": {
            "providerID": format!("fake://{name}"),
            "podCIDR": "10.244.1.0/24",
            "podCIDRs": ["10.244.1.0/24", "fd00:1::/64"],
            "unschedulable": true,
            "taints": [
                {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
                {"key": "example.com/no-value", "effect": "NoExecute", "timeAdded": "2026-11-01T00:00:00Z"}
            ]
        }
    }))
    .unwrap()
}

fn kubelet_status(heartbeat: &str) -> serde_json::Value {
    let c = |t: &str, s: &str, reason: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": "m",
               "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-11-01T00:00:00Z"})
    };
    json!({"status": {
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "h"}],
        "conditions": [c("Ready", "True", "KubeletReady"), c("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                       c("NetworkUnavailable", "False", "RouteCreated")],
        "capacity": {"cpu": "8"},
        "images": [{"names": ["registry.example/app@sha256:0"], "sizeBytes": 1}]
    }})
}

/// The next event about a Node named with `prefix` (other tests' Nodes may
/// be in the cluster).
async fn next_event(
    events: &mut (impl Stream<Item = Result<Event<Node>, kube::runtime::watcher::Error>> + Unpin),
    prefix: &str,
) -> Event<Node> {
    loop {
        let event = tokio::time::timeout(WAIT, events.next())
            .await
            .expect("a Node event in time")
            .expect("the watch goes on")
            .expect("no watch error");
        let name = match &event {
            Event::Apply(n) | Event::Delete(n) | Event::InitApply(n) => n.metadata.name.clone(),
            Event::Init | Event::InitDone => continue,
        };
        if name.is_some_and(|n| n.starts_with(prefix)) {
            return event;
        }
    }
}

#[tokio::test]
async fn protobuf_nodes_decode_as_the_projection_of_their_json() {
    let control_plane = crate::common::ControlPlane::exclusive().await;
    let client = control_plane.env().admin_client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let prefix = ccm_testsupport::unique_name("pb");
    let names = [format!("{prefix}-rich"), format!("{prefix}-bare")];
    nodes
        .create(&PostParams::default(), &rich_node(&names[0]))
        .await
        .unwrap();
    let status = kubelet_status("2026-11-28T00:00:00Z");
    nodes
        .patch_status(&names[0], &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let bare: Node = serde_json::from_value(json!({"metadata": {"name": names[1]}})).unwrap();
    nodes.create(&PostParams::default(), &bare).await.unwrap();
    // Deleting: deletionTimestamp set, held by the finalizer.
    nodes
        .delete(&names[0], &DeleteParams::default())
        .await
        .unwrap();

    // The listing.
    let mut events = Box::pin(watch_nodes(client.clone()));
    for _ in &names {
        let Event::InitApply(listed) = next_event(&mut events, &prefix).await else {
            panic!("the listing first");
        };
        let name = listed.metadata.name.clone().unwrap();
        let json = nodes.get(&name).await.unwrap();
        assert_eq!(listed, project(&json), "{name} listed");
    }
    let rich = project(&nodes.get(&names[0]).await.unwrap());
    assert!(rich.metadata.deletion_timestamp.is_some());
    let conditions = rich.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert_eq!(conditions.len(), 2, "Ready and NetworkUnavailable kept");

    // A heartbeat is an Apply with nothing changed but the version.
    nodes
        .patch_status(
            &names[0],
            &PatchParams::default(),
            &Patch::Merge(&kubelet_status("2026-11-28T00:01:00Z")),
        )
        .await
        .unwrap();
    let Event::Apply(beat) = next_event(&mut events, &prefix).await else {
        panic!("an Apply");
    };
    assert_ne!(
        beat.metadata.resource_version,
        rich.metadata.resource_version
    );
    assert!(same_but_for_version(&beat, &rich));
    assert_eq!(beat, project(&nodes.get(&names[0]).await.unwrap()));

    // A label is a change.
    let label = json!({"metadata": {"labels": {"team": "a"}}});
    nodes
        .patch(&names[1], &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let Event::Apply(labelled) = next_event(&mut events, &prefix).await else {
        panic!("an Apply");
    };
    assert_eq!(labelled, project(&nodes.get(&names[1]).await.unwrap()));

    // Deleted.
    nodes
        .delete(&names[1], &DeleteParams::default())
        .await
        .unwrap();
    let Event::Delete(gone) = next_event(&mut events, &prefix).await else {
        panic!("a Delete");
    };
    assert_eq!(gone.metadata.name.as_deref(), Some(names[1].as_str()));

    // Let the first go (the control plane deletes what is left).
    let release = json!({"metadata": {"finalizers": null}});
    nodes
        .patch(&names[0], &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
}
