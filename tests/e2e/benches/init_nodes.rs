//! Benchmark: how long the controller takes to initialise N Nodes registered
//! at once (default 1,000), against the real kube-apiserver and the fake
//! provider at zero latency, and how many API writes each Node cost.
//! `cargo bench -p ccm-e2e --bench init_nodes` (BENCH_NODES=N to change N).
//! It reports; it asserts nothing about speed.

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ccm_fake_provider::{FakeConfig, Method};
use ccm_testsupport::{TestEnv, unique_name};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use kube::Api;
use kube::runtime::watcher::{self, Event};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

async fn run(n: usize, flags: &[&str]) {
    let env = TestEnv::get();
    let admin = env.admin_client().await.unwrap();
    let provider = support::provider(FakeConfig::default());
    let fake = &provider.fake;
    let mut all_flags = vec!["--controllers=cloud-node"];
    all_flags.extend_from_slice(flags);
    let controller = support::controller(&provider, &all_flags).await;

    let run_label = unique_name("bench");
    let nodes: Api<Node> = Api::all(admin.clone());
    let cfg = watcher::Config::default().labels(&format!("bench-run={run_label}"));
    let mut events = watcher::watcher(nodes.clone(), cfg).boxed();
    while !matches!(events.try_next().await.unwrap(), Some(Event::InitDone)) {}

    let start = Instant::now();
    support::create_nodes(&nodes, &run_label, n, |_| NodeSpec {
        taints: Some(vec![Taint {
            key: UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]),
        ..Default::default()
    })
    .await;
    let registered = start.elapsed();

    // Every Apply after the one that created a Node is a write to it.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut done = 0;
    while done < n {
        match tokio::time::timeout(Duration::from_secs(600), events.try_next())
            .await
            .expect("progress")
            .unwrap()
        {
            Some(Event::Apply(node)) => {
                let name = node.metadata.name.clone().unwrap();
                *seen.entry(name).or_default() += 1;
                let tainted = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED));
                if !tainted {
                    done += 1;
                }
            }
            Some(_) => {}
            None => panic!("watch ended"),
        }
    }
    let total = start.elapsed();
    let writes: usize = seen.values().map(|v| v - 1).sum();
    let max_writes = seen.values().map(|v| v - 1).max().unwrap_or(0);
    println!(
        "{n} nodes, flags {flags:?}: registered in {registered:.2?}, all initialised after {total:.2?} ({:.1} nodes/s); API writes per node: mean {:.2}, max {max_writes}; provider InstanceMetadata calls: {}",
        n as f64 / total.as_secs_f64(),
        writes as f64 / n as f64,
        fake.calls_of(Method::InstanceMetadata).len(),
    );
    controller.stop().await;
    drop(provider);
    // The next run starts from an empty cluster.
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let nodes = nodes.clone();
            let name = format!("{run_label}-{i}");
            async move {
                nodes.delete(&name, &Default::default()).await.unwrap();
            }
        })
        .await;
}

#[tokio::main]
async fn main() {
    support::init_tracing();
    let n = support::env_count("BENCH_NODES", 1000);
    // Upstream's defaults (20 QPS, burst 30, one worker), then limits lifted.
    run(
        n,
        &[
            "--kube-api-qps=20",
            "--kube-api-burst=30",
            "--concurrent-node-syncs=1",
        ],
    )
    .await;
    run(n, &["--kube-api-qps=0", "--concurrent-node-syncs=8"]).await;
}
