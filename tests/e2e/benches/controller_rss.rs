//! Benchmark: the controller process's resident memory, idle and with N
//! Nodes and N LoadBalancer Services (default 5,000 each) in its caches,
//! against the real kube-apiserver and the fake provider. The real binary
//! runs as a child process; RSS is read from /proc. `cargo bench -p ccm-e2e
//! --bench controller_rss` (BENCH_OBJECTS=N). It reports; it asserts nothing.

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccm_fake_provider::{FakeCloud, FakeConfig, Method};
use ccm_testsupport::procfs::rss_kib;
use ccm_testsupport::{TestEnv, unique_name};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Service};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// RSS after it stopped moving for a few seconds (caches filled, work done).
async fn settled_rss(pid: u32) -> u64 {
    let mut last = 0;
    let mut stable = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = rss_kib(pid);
        if now.abs_diff(last) < 512 {
            stable += 1;
            if stable >= 3 {
                return now;
            }
        } else {
            stable = 0;
        }
        last = now;
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_OBJECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--locked",
            "--release",
            "-p",
            "cloud-controller-manager",
        ])
        .current_dir(repo())
        .status()
        .unwrap();
    assert!(status.success());
    let env = TestEnv::get();
    let admin = env.admin_client().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/p.sock", dir.path().display());
    let fake = FakeCloud::new(FakeConfig {
        lb_ip_pool: "10.128.0.0/16".into(),
        call_log_capacity: 100_000,
        ..FakeConfig::default()
    })
    .unwrap();
    tokio::spawn(fake.clone().serve(endpoint.clone(), std::future::pending()));

    /// Kills the controller however the benchmark ends.
    struct Guard(std::process::Child);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = Command::new(repo().join("target/release/cloud-controller-manager"))
        .arg(format!("--kubeconfig={}", env.kubeconfig().display()))
        .arg(format!("--provider-endpoint={endpoint}"))
        .args([
            "--kube-api-qps=0",
            "--leader-elect=false",
            "--secure-port=0",
            "--concurrent-service-syncs=20",
            "--cluster-cidr=10.0.0.0/8",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _guard = Guard(child);
    let idle = settled_rss(pid).await;

    let run = unique_name("rss");
    let nodes: Api<Node> = Api::all(admin.clone());
    let start = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let nodes = nodes.clone();
            let run = run.clone();
            async move {
                // Initialised kubelet-style Nodes of realistic size.
                let node = Node {
                    metadata: ObjectMeta {
                        name: Some(format!("{run}-{i}")),
                        labels: Some(
                            [
                                ("bench-run".to_string(), run.clone()),
                                ("kubernetes.io/hostname".to_string(), format!("{run}-{i}")),
                                (
                                    "topology.kubernetes.io/zone".to_string(),
                                    "fake-zone-a".into(),
                                ),
                                (
                                    "node.kubernetes.io/instance-type".to_string(),
                                    "fake.medium".into(),
                                ),
                            ]
                            .into(),
                        ),
                        ..Default::default()
                    },
                    spec: Some(NodeSpec {
                        provider_id: Some(format!("fake://{run}-{i}")),
                        pod_cidr: Some(format!("10.{}.{}.0/24", 1 + i / 256, i % 256)),
                        pod_cidrs: Some(vec![format!("10.{}.{}.0/24", 1 + i / 256, i % 256)]),
                        ..Default::default()
                    }),
                    status: Some(NodeStatus {
                        addresses: Some(vec![NodeAddress {
                            type_: "InternalIP".into(),
                            address: format!("172.16.{}.{}", i / 250, i % 250 + 1),
                        }]),
                        conditions: Some(vec![NodeCondition {
                            type_: "Ready".into(),
                            status: "True".into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                };
                nodes.create(&PostParams::default(), &node).await.unwrap();
            }
        })
        .await;
    let ns = env.namespace(&admin, "rss").await.unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    // 5,000 would not fit the 2,768 node ports.
    support::create_lb_services(&services, n, Some(false)).await;
    // Converged: every Service has a load balancer and every Node a route.
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let dump = fake.dump();
        if dump.load_balancers.len() >= n && dump.routes.len() >= n {
            break;
        }
        assert!(Instant::now() < deadline, "did not converge");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let converged = start.elapsed();
    let loaded = settled_rss(pid).await;
    println!(
        "controller RSS: idle {:.1} MiB; with {n} Nodes + {n} LoadBalancer Services (all ensured and routed after {converged:.1?}) {:.1} MiB; provider Ensure calls {}",
        idle as f64 / 1024.0,
        loaded as f64 / 1024.0,
        fake.calls_of(Method::EnsureLoadBalancer).len(),
    );
}
