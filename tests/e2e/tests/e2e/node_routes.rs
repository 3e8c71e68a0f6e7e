//! node-route-controller end to end: the real kube-apiserver, the controller
//! with only the shipped ClusterRole and `--cluster-cidr` = [`CLUSTER_CIDR`],
//! the fake provider over a Unix socket.

use crate::common::*;
use ccm_fake_provider::{ErrorInjection, ErrorKind, Method};
use ccm_provider_sdk::proto;
use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::unique_name;
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

const FLAGS: &[&str] = &["--route-reconciliation-period=1s"];

/// A harness with [`FLAGS`]; an earlier scenario's Nodes went with its
/// harness, so one failure does not cascade.
async fn harness() -> Harness {
    Harness::start(ccm_fake_provider::FakeConfig::default(), FLAGS).await
}

impl Harness {
    async fn node_with_cidrs(&self, name: &str, cidrs: &[&str]) {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: cidrs.first().map(|c| c.to_string()),
                pod_cidrs: (!cidrs.is_empty())
                    .then(|| cidrs.iter().map(|c| c.to_string()).collect()),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.nodes()
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }

    /// The fake cloud's routes as (destination, target), sorted.
    fn routes(&self) -> Vec<(String, String)> {
        let mut r: Vec<(String, String)> = self
            .fake
            .dump()
            .routes
            .into_iter()
            .map(|r| (r.destination_cidr, r.target_node))
            .collect();
        r.sort();
        r
    }

    async fn wait_routes(&self, what: &str, want: &[(&str, &str)]) {
        let mut want: Vec<(String, String)> = want
            .iter()
            .map(|(c, n)| (c.to_string(), n.to_string()))
            .collect();
        want.sort();
        eventually(what, || async {
            let now = self.routes();
            if now == want {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await
    }

    async fn wait_network(&self, node: &str, status: &str, reason: &str) {
        self.wait_for(
            node,
            &format!("NetworkUnavailable={status}/{reason}"),
            |n| {
                n.and_then(|n| n.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "NetworkUnavailable"))
                    .is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason))
            },
        )
        .await;
    }

    fn provider_client(&self) -> ProviderClient {
        ProviderClient::connect_lazy(&self.endpoint, ClientOptions::default()).unwrap()
    }
}

#[tokio::test]
async fn routes_follow_nodes_and_never_leave_the_cluster_cidrs() {
    let h = harness().await;
    let started = std::time::Instant::now();
    let (a, b, c) = (unique_name("ra"), unique_name("rb"), unique_name("rc"));

    // Routes someone else made: one outside the cluster CIDRs (and one
    // reaching outside them), which must survive; one inside for a Node
    // that does not exist, which is an orphan.
    let client = h.provider_client();
    for (cidr, target) in [
        ("192.168.50.0/24", "vpn-gateway"),
        ("10.0.0.0/8", "legacy-router"),
        ("10.244.200.0/24", "ghost"),
    ] {
        client
            .create_route(
                "kubernetes",
                target,
                proto::Route {
                    target_node: target.into(),
                    destination_cidr: cidr.into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    h.node_with_cidrs(&a, &["10.244.1.0/24", "fd00:10:244:1::/64"])
        .await;
    h.node_with_cidrs(&b, &["10.244.2.0/24"]).await;
    h.node_with_cidrs(&c, &[]).await;
    h.wait_routes(
        "a dual-stack pair for a, one for b, the orphan gone, the outside routes kept",
        &[
            ("10.244.1.0/24", &a),
            ("fd00:10:244:1::/64", &a),
            ("10.244.2.0/24", &b),
            ("192.168.50.0/24", "vpn-gateway"),
            ("10.0.0.0/8", "legacy-router"),
        ],
    )
    .await;
    h.wait_network(&a, "False", "RouteCreated").await;
    h.wait_network(&b, "False", "RouteCreated").await;
    let hints: Vec<String> = h.fake.dump().routes.into_iter().map(|r| r.name).collect();
    let a_uid = h.nodes().get(&a).await.unwrap().metadata.uid.unwrap();
    assert!(
        hints.iter().any(|n| n.contains(&a_uid)),
        "the name hint is the Node's uid: {hints:?}"
    );

    // A pod CIDR assigned later (the only change the apiserver allows).
    h.nodes()
        .patch(
            &c,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]}}),
            ),
        )
        .await
        .unwrap();
    // b re-created with another pod CIDR: the old route goes, a new one comes.
    h.nodes()
        .delete(&b, &DeleteParams::default())
        .await
        .unwrap();
    h.node_with_cidrs(&b, &["10.244.22.0/24"]).await;
    // a deleted: both its routes go.
    h.nodes()
        .delete(&a, &DeleteParams::default())
        .await
        .unwrap();
    h.wait_routes(
        "c's new route, b's replaced, a's gone",
        &[
            ("10.244.3.0/24", &c),
            ("10.244.22.0/24", &b),
            ("192.168.50.0/24", "vpn-gateway"),
            ("10.0.0.0/8", "legacy-router"),
        ],
    )
    .await;
    h.wait_network(&c, "False", "RouteCreated").await;
    // Node changes are acted on from the last listing: the cloud's routes
    // are listed at most once per --route-reconciliation-period (1 s).
    let lists = h.fake.calls_of(Method::ListRoutes).len() as u64;
    let budget = started.elapsed().as_secs() + 1;
    assert!(lists <= budget, "{lists} listings in under {budget} s");
    h.stop().await;
}

#[tokio::test]
async fn a_failed_create_is_reported_then_recovered() {
    let h = harness().await;
    h.fake.inject_error(
        Method::CreateRoute,
        ErrorInjection::new(ErrorKind::QuotaExceeded, "route table full"),
    );
    let n = unique_name("rq");
    h.node_with_cidrs(&n, &["10.244.9.0/24"]).await;
    h.wait_network(&n, "True", "NoRouteCreated").await;
    let notes: Vec<String> = eventually("a FailedToCreateRoute event", || async {
        let e = events_for(&h.admin, &n, "FailedToCreateRoute").await;
        if e.is_empty() {
            Err("none".into())
        } else {
            Ok(e)
        }
    })
    .await
    .into_iter()
    .map(|e| e.note.unwrap_or_default())
    .collect();
    assert!(
        notes[0].starts_with("Could not create route ")
            && notes[0].contains(&format!("10.244.9.0/24 for node {n} after "))
            && notes[0].ends_with(": route table full"),
        "{notes:?}"
    );
    assert!(h.routes().is_empty());
    h.fake.clear_errors(None);
    h.wait_network(&n, "False", "RouteCreated").await;
    h.wait_routes("created after recovery", &[("10.244.9.0/24", &n)])
        .await;
    h.stop().await;
}

/// Issue 12, point 13: with default flags, 80 route creations that a hung
/// provider never answers take every concurrency slot; then the provider
/// stops answering anything (as a SIGSTOPped process). `/readyz` must
/// still answer within its probe deadline (2 s), and say not ready;
/// once the provider answers again, ready.
#[tokio::test]
async fn readyz_answers_in_time_while_a_hung_provider_holds_every_slot() {
    let mut h = harness().await;
    h.stop_controller().await;
    let port = free_port();
    h.start_controller(&[&format!("--admin-port={port}"), "--bind-address=127.0.0.1"]);
    eventually("the controller ready", || async {
        let body = admin_get(port, "/readyz").await?;
        body.starts_with("HTTP/1.0 200").then_some(()).ok_or(body)
    })
    .await;

    let hang = std::time::Duration::from_secs(120);
    h.fake.set_latency(Method::CreateRoute, hang);
    let names: Vec<String> = (0..80).map(|i| unique_name(&format!("hung{i}"))).collect();
    for (i, name) in names.iter().enumerate() {
        let cidr = format!("10.244.{}.0/24", 100 + i);
        h.node_with_cidrs(name, &[&cidr]).await;
    }
    eventually("64 CreateRoute calls in flight (every slot)", || async {
        let body = admin_get(port, "/metrics").await?;
        let in_flight: f64 = body
            .lines()
            .filter(|l| {
                l.starts_with("ccm_provider_requests_in_flight") && l.contains("CreateRoute")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        (in_flight >= 64.0)
            .then_some(())
            .ok_or(format!("{in_flight} in flight"))
    })
    .await;
    h.fake.set_latency(ccm_fake_provider::Target::All, hang);
    // A verdict from before the hang may be reused for this long.
    tokio::time::sleep(cloud_controller_manager::manager::admin::PROVIDER_CHECK_REUSE).await;

    let started = std::time::Instant::now();
    let body = admin_get(port, "/readyz").await.unwrap();
    let took = started.elapsed();
    assert!(
        took < cloud_controller_manager::manager::admin::READYZ_PROBE_DEADLINE
            + std::time::Duration::from_millis(500),
        "/readyz took {took:?}"
    );
    assert!(!body.starts_with("HTTP/1.0 200"), "{body}");
    assert!(body.contains("provider-ready failed"), "{body}");
    println!("/readyz with a hung provider and every slot taken: {took:?}");

    h.fake.clear_faults();
    eventually("ready again once the provider answers", || async {
        let body = admin_get(port, "/readyz").await?;
        body.starts_with("HTTP/1.0 200").then_some(()).ok_or(body)
    })
    .await;
    for name in &names {
        let _ = h.nodes().delete(name, &DeleteParams::default()).await;
    }
    h.stop().await;
}
