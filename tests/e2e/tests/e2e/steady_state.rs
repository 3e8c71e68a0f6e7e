//! The steady state, end to end, for every controller at once: once Nodes
//! are initialised, routed and serving load balancers and volumes are
//! labelled, a window in which kubelets heartbeat and nothing else changes
//! makes zero provider mutations and zero controller writes, while every
//! periodic pass still runs (the provider is still asked).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use ccm_fake_provider::{FakeConfig, Method, VOLUME_DRIVERS};
use ccm_testsupport::unique_name;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Node, NodeSpec, PersistentVolume, PersistentVolumeSpec, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

/// Every periodic pass at least once a second, so a few seconds of quiet
/// cover several of each.
const FLAGS: &[&str] = &[
    "--controllers=*,pv-label",
    "--route-reconciliation-period=1s",
    "--node-status-update-frequency=1s",
    "--load-balancer-orphan-sweep-period=1s",
    "--cluster-name=steady",
];
const QUIET: Duration = Duration::from_secs(6);

async fn kubelet_node_with_cidr(h: &Harness, name: &str, cidr: &str) {
    let mut node = kubelet_node(name);
    node.spec = Some(NodeSpec {
        pod_cidr: Some(cidr.into()),
        pod_cidrs: Some(vec![cidr.into()]),
        ..node.spec.unwrap()
    });
    h.nodes()
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    h.set_ready(name, "True").await;
}

fn routed_and_initialised(n: Option<&Node>) -> bool {
    let Some(n) = n else { return false };
    let initialised = n.spec.as_ref().is_some_and(|s| {
        s.provider_id.is_some() && !s.taints.iter().flatten().any(|t| t.key == UNINITIALIZED)
    });
    let routed = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "NetworkUnavailable"))
        .is_some_and(|c| c.reason.as_deref() == Some("RouteCreated"));
    initialised && routed
}

#[tokio::test]
async fn a_converged_cluster_is_quiet_while_kubelets_heartbeat() {
    let started = std::time::SystemTime::now();
    let port = free_port();
    let admin = format!("--admin-port={port}");
    let flags: Vec<&str> = FLAGS
        .iter()
        .copied()
        .chain([admin.as_str(), "--bind-address=127.0.0.1"])
        .collect();
    let h = Harness::start_with_roles(
        FakeConfig::default(),
        &flags,
        &["clusterrole.yaml", "clusterrole-pv-labels.yaml"],
    )
    .await;
    let nodes: Vec<String> = (1..=3)
        .map(|i| unique_name(&format!("steady{i}")))
        .collect();
    for (i, n) in nodes.iter().enumerate() {
        kubelet_node_with_cidr(&h, n, &format!("10.244.{}.0/24", i + 1)).await;
    }
    let services: Api<Service> = Api::namespaced(h.admin.clone(), &h.ns);
    for name in ["web", "api"] {
        services
            .create(&PostParams::default(), &lb_service(name, 80))
            .await
            .unwrap();
    }
    let volumes: Api<PersistentVolume> = Api::all(h.admin.clone());
    let volume = unique_name("steady-pv");
    volumes
        .create(
            &PostParams::default(),
            &PersistentVolume {
                metadata: ObjectMeta {
                    name: Some(volume.clone()),
                    ..Default::default()
                },
                spec: Some(PersistentVolumeSpec {
                    capacity: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity("1Gi".into()),
                    )])),
                    access_modes: Some(vec!["ReadWriteOnce".into()]),
                    csi: Some(CSIPersistentVolumeSource {
                        driver: VOLUME_DRIVERS[0].into(),
                        volume_handle: "vol-steady".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // Converged: Nodes initialised and routed, both Services serving, the
    // volume labelled.
    for n in &nodes {
        h.wait_for(n, "initialised and routed", routed_and_initialised)
            .await;
    }
    for name in ["web", "api"] {
        eventually(&format!("{name} has an address"), || async {
            let s = services.get(name).await.unwrap();
            let ingress = s
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .is_some_and(|i| !i.is_empty());
            if ingress {
                Ok(())
            } else {
                Err(format!("{:?}", s.status))
            }
        })
        .await;
    }
    eventually("the volume is labelled", || async {
        let labels = volumes.get(&volume).await.unwrap().labels().clone();
        if labels.contains_key("topology.kubernetes.io/zone") {
            Ok(())
        } else {
            Err(format!("{labels:?}"))
        }
    })
    .await;
    // Settled: one more full route pass and address refresh after the last
    // change (a Service status or Node condition just written is itself a
    // change the controllers see once).
    let settled = h.fake.calls().last().map(|c| c.seq).unwrap_or(0);
    eventually("a full route pass after convergence", || async {
        let again = h
            .fake
            .calls_of(Method::ListRoutes)
            .iter()
            .filter(|c| c.seq > settled)
            .count();
        if again >= 2 {
            Ok(())
        } else {
            Err(format!("{again} ListRoutes since"))
        }
    })
    .await;

    // The audit log sees the controller's writes (so "none" below means
    // none): converging took Node, Service status and Event writes.
    let audit = h.env().audit_log().unwrap();
    audit.sync(&h.admin).await.unwrap();
    let converging: std::collections::BTreeSet<String> = audit
        .writes_by(&h.controller_user(), started, std::time::SystemTime::now())
        .unwrap()
        .into_iter()
        .map(|w| w.resource)
        .collect();
    for resource in ["nodes", "nodes/status", "services/status", "events"] {
        assert!(
            converging.contains(resource),
            "the audit log shows no controller write to {resource} while converging: {converging:?}"
        );
    }

    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let node_syncs = || async move {
        let metrics = admin_get(port, "/metrics").await.unwrap();
        series(&metrics, r#"workqueue_adds_total{name="Nodes"} "#)
    };
    let synced_before = node_syncs().await;
    assert!(synced_before > 0.0, "no cloud-node queue series to compare");
    let quiet = h.quiet_window(&names, QUIET).await;
    quiet.assert_quiet(&[
        Method::ListRoutes,
        Method::BatchInstances,
        Method::ListLoadBalancers,
    ]);
    // Not even a look: a heartbeat changes nothing a controller reads, so
    // none is woken (cloud-node's queue took every Node update before).
    assert_eq!(
        node_syncs().await,
        synced_before,
        "kubelet heartbeats put Nodes on cloud-node's queue"
    );

    // And the quiet was not deafness: a real change is still acted on.
    let before = h.fake.calls_of(Method::DeleteRoute).len();
    h.nodes()
        .delete(&nodes[2], &Default::default())
        .await
        .unwrap();
    eventually("the deleted Node's route goes", || async {
        let after = h.fake.calls_of(Method::DeleteRoute).len();
        if after > before {
            Ok(())
        } else {
            Err(format!("{after} DeleteRoute calls"))
        }
    })
    .await;
    h.stop().await;
}
