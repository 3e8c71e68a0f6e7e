//! Proof that the test control plane is a real kube-apiserver: the behaviours a
//! cloud-controller-manager relies on and a fake would get wrong.

use std::time::Duration;

use crate::common::ControlPlane;
use ccm_testsupport::{UNINITIALIZED, eventually, kubelet_node, unique_name};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::json;

/// Exclusive: these tests create Nodes, which a controller would act on.
async fn admin(control_plane: &ControlPlane) -> Client {
    control_plane
        .env()
        .admin_client()
        .await
        .expect("admin client for the test control plane")
}

#[tokio::test]
async fn node_registered_with_uninitialized_taint_is_watched_and_status_addresses_updated() {
    let control_plane = ControlPlane::exclusive().await;
    let client = admin(&control_plane).await;
    let nodes: Api<Node> = Api::all(client);
    let name = unique_name("node-taint");

    let created = nodes
        .create(&PostParams::default(), &kubelet_node(&name))
        .await
        .unwrap();
    let taints = created.spec.unwrap().taints.unwrap();
    let keys: Vec<(&str, &str)> = taints
        .iter()
        .map(|t| (t.key.as_str(), t.effect.as_str()))
        .collect();
    // Ours, plus the not-ready taint the real TaintNodesByCondition admission
    // plugin adds to every new Node: a fake apiserver would not.
    assert_eq!(
        keys,
        vec![
            (UNINITIALIZED, "NoSchedule"),
            ("node.kubernetes.io/not-ready", "NoSchedule")
        ]
    );
    assert!(
        created.metadata.resource_version.is_some(),
        "a real apiserver sets resourceVersion"
    );

    // Watch this one node, then change its addresses through /status.
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(nodes.clone(), cfg).boxed();
    // The initial listing must contain our node before we modify it.
    loop {
        match tokio::time::timeout(Duration::from_secs(30), events.try_next()).await {
            Ok(Ok(Some(Event::InitDone))) => break,
            Ok(Ok(Some(_))) => {}
            other => panic!("watch did not start: {other:?}"),
        }
    }

    let status = json!({ "status": { "addresses": [
        { "type": "InternalIP", "address": "10.1.2.3" },
        { "type": "Hostname", "address": name },
    ]}});
    nodes
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(status.clone()),
        )
        .await
        .unwrap();

    let want = vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: "10.1.2.3".into(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: name.clone(),
        },
    ];
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = events.try_next().await.unwrap() {
            if let Event::Apply(node) = ev
                && node.status.as_ref().and_then(|s| s.addresses.as_ref()) == Some(&want)
            {
                return node;
            }
        }
        panic!("watch ended");
    })
    .await
    .expect("watch delivers the status update within 30s");
    // The status subresource did not touch spec: the taint is still there.
    assert!(
        seen.spec
            .unwrap()
            .taints
            .unwrap()
            .iter()
            .any(|t| t.key == UNINITIALIZED)
    );

    // And the main resource ignores status: a status change sent to it is dropped.
    let ignored =
        json!({ "status": { "addresses": [{ "type": "InternalIP", "address": "192.0.2.1" }] }});
    let after = nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(ignored))
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().addresses.unwrap(), want);
}

#[tokio::test]
async fn service_account_without_rights_gets_403_on_node_delete() {
    let control_plane = ControlPlane::exclusive().await;
    let env = control_plane.env();
    let admin = admin(&control_plane).await;
    let ns = env.namespace(&admin, "rbac").await.unwrap();
    let nodes: Api<Node> = Api::all(admin.clone());
    let name = unique_name("node-rbac");
    nodes
        .create(&PostParams::default(), &kubelet_node(&name))
        .await
        .unwrap();

    let nobody = env.service_account_client(&ns, "nobody").await.unwrap();
    let err = Api::<Node>::all(nobody)
        .delete(&name, &DeleteParams::default())
        .await
        .expect_err("a ServiceAccount without RBAC must not delete Nodes");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status
                    .message
                    .contains(&format!("system:serviceaccount:{ns}:nobody")),
                "{}",
                status.message
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    assert!(
        nodes.get_opt(&name).await.unwrap().is_some(),
        "node survives"
    );

    // Granting exactly `delete nodes` makes the same call succeed: the 403 was RBAC.
    env.grant_cluster_role(
        &admin,
        &ns,
        "deleter",
        vec![k8s_openapi::api::rbac::v1::PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["nodes".into()]),
            verbs: vec!["delete".into()],
            ..Default::default()
        }],
    )
    .await
    .unwrap();
    let deleter = env.service_account_client(&ns, "deleter").await.unwrap();
    // RBAC caches refresh asynchronously.
    eventually("the granted delete to pass RBAC", || async {
        match Api::<Node>::all(deleter.clone())
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 403 => Err(s.message),
            Err(e) => panic!("delete as granted SA failed: {e:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn server_side_apply_conflicts_between_field_managers() {
    let control_plane = ControlPlane::exclusive().await;
    let client = admin(&control_plane).await;
    let nodes: Api<Node> = Api::all(client);
    let name = unique_name("node-ssa");
    let label = "ccm-rs.test/owner";

    let apply = |value: &str| {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": name, "labels": { label: value } },
        })
    };
    nodes
        .patch(
            &name,
            &PatchParams::apply("manager-a"),
            &Patch::Apply(apply("a")),
        )
        .await
        .unwrap();

    let err = nodes
        .patch(
            &name,
            &PatchParams::apply("manager-b"),
            &Patch::Apply(apply("b")),
        )
        .await
        .expect_err("manager-b must conflict with manager-a's field");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert_eq!(status.reason, "Conflict");
            assert!(status.message.contains("manager-a"), "{}", status.message);
        }
        other => panic!("expected 409 Conflict, got {other:?}"),
    }
    let node = nodes.get(&name).await.unwrap();
    assert_eq!(node.metadata.labels.unwrap()[label], "a");

    // Forcing takes ownership; managedFields records the new owner.
    let node = nodes
        .patch(
            &name,
            &PatchParams::apply("manager-b").force(),
            &Patch::Apply(apply("b")),
        )
        .await
        .unwrap();
    assert_eq!(node.metadata.labels.as_ref().unwrap()[label], "b");
    let owners: Vec<_> = node
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.to_string().contains(label))
        })
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(owners, vec!["manager-b".to_owned()]);

    // Optimistic concurrency: a write with a stale resourceVersion is rejected.
    let mut stale = nodes.get(&name).await.unwrap();
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"bump": "1"}}})),
        )
        .await
        .unwrap();
    stale
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("bump".into(), "2".into());
    let err = nodes
        .replace(&name, &PostParams::default(), &stale)
        .await
        .expect_err("stale resourceVersion must conflict");
    assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
}
