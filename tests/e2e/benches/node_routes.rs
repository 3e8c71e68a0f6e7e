//! Benchmark: how long the node-route-controller takes to converge N Nodes'
//! routes (default 1,000) from an empty cloud route table, against the real
//! kube-apiserver and the fake provider, and how many provider calls it
//! makes: once with the Nodes already there when the controller starts (one
//! full reconcile), once with the Nodes created while it runs (the
//! node-change path). `cargo bench -p ccm-e2e --bench node_routes`
//! (BENCH_NODES=N). It reports; it asserts nothing about speed.

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use ccm_fake_provider::{FakeConfig, Method};
use ccm_testsupport::{TestEnv, unique_name};
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use kube::Api;
use kube::api::{DeleteParams, ListParams};

fn pod_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 1 + i / 256, i % 256)
}

async fn create_nodes(nodes: &Api<Node>, run: &str, n: usize) {
    support::create_nodes(nodes, run, n, |i| NodeSpec {
        pod_cidr: Some(pod_cidr(i)),
        pod_cidrs: Some(vec![pod_cidr(i)]),
        ..Default::default()
    })
    .await;
}

/// Nodes of the run whose NetworkUnavailable is False/RouteCreated.
async fn routed(nodes: &Api<Node>, run: &str) -> usize {
    nodes
        .list(&ListParams::default().labels(&format!("bench-run={run}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c.type_ == "NetworkUnavailable"
                            && c.reason.as_deref() == Some("RouteCreated")
                    })
                })
        })
        .count()
}

async fn run(n: usize, nodes_first: bool) {
    let env = TestEnv::get();
    let admin = env.admin_client().await.unwrap();
    let nodes: Api<Node> = Api::all(admin.clone());
    let provider = support::provider(FakeConfig::default());
    let fake = &provider.fake;
    let run_label = unique_name("routes");
    if nodes_first {
        create_nodes(&nodes, &run_label, n).await;
    }
    let start = Instant::now();
    let controller = support::controller(
        &provider,
        &[
            "--controllers=route",
            "--cluster-cidr=10.0.0.0/8",
            "--kube-api-qps=0",
        ],
    )
    .await;
    if !nodes_first {
        create_nodes(&nodes, &run_label, n).await;
    }
    let deadline = Instant::now() + Duration::from_secs(900);
    while fake.dump().routes.len() < n {
        assert!(Instant::now() < deadline, "routes did not converge");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let routes_done = start.elapsed();
    while routed(&nodes, &run_label).await < n {
        assert!(Instant::now() < deadline, "conditions did not converge");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let all_done = start.elapsed();
    println!(
        "{n} nodes {}: all routes after {routes_done:.2?}, all NetworkUnavailable=False after {all_done:.2?}; provider calls: ListRoutes {}, CreateRoute {} ({:.2} per node), DeleteRoute {}",
        if nodes_first {
            "present at start"
        } else {
            "created while running"
        },
        fake.calls_of(Method::ListRoutes).len(),
        fake.calls_of(Method::CreateRoute).len(),
        fake.calls_of(Method::CreateRoute).len() as f64 / n as f64,
        fake.calls_of(Method::DeleteRoute).len(),
    );
    controller.stop().await;
    drop(provider);
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("bench-run={run_label}")),
        )
        .await
        .unwrap();
}

#[tokio::main]
async fn main() {
    support::init_tracing();
    let n = support::env_count("BENCH_NODES", 1000);
    run(n, true).await;
    run(n, false).await;
}
