//! Benchmark: how long the service-lb-controller takes to give N
//! LoadBalancer Services created at once (default 1,000) their ingress,
//! against the real kube-apiserver and the fake provider with 50 ms of
//! latency on every EnsureLoadBalancer; the provider calls and API writes
//! each Service cost; and how long deleting them all takes (every load
//! balancer gone from the fake cloud).
//! `cargo bench -p ccm-e2e --bench lb_services` (BENCH_SERVICES=N,
//! BENCH_ENSURE_MS=M to change). It reports; it asserts nothing about speed.

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ccm_fake_provider::{FakeConfig, Method};
use ccm_testsupport::TestEnv;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};

fn has_ingress(s: &Service) -> bool {
    s.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

async fn run(n: usize, ensure_latency: Duration, flags: &[&str]) {
    let env = TestEnv::get();
    let admin = env.admin_client().await.unwrap();
    // A /20 pool: 4,094 addresses.
    let provider = support::provider(FakeConfig {
        lb_ip_pool: "10.200.0.0/20".into(),
        ..FakeConfig::default()
    });
    let fake = &provider.fake;
    fake.set_latency(Method::EnsureLoadBalancer, ensure_latency);
    let mut all_flags = vec!["--controllers=service"];
    all_flags.extend_from_slice(flags);
    let controller = support::controller(&provider, &all_flags).await;

    let ns = env.namespace(&admin, "bench").await.unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let mut events = watcher::watcher(services.clone(), watcher::Config::default()).boxed();
    while !matches!(events.try_next().await.unwrap(), Some(Event::InitDone)) {}

    let start = Instant::now();
    support::create_lb_services(&services, n, None).await;
    let created = start.elapsed();

    // Every Apply after the one that created a Service is a write to it.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut ready = std::collections::HashSet::new();
    while ready.len() < n {
        match tokio::time::timeout(Duration::from_secs(900), events.try_next())
            .await
            .expect("progress")
            .unwrap()
        {
            Some(Event::Apply(s)) => {
                *seen.entry(s.name_any()).or_default() += 1;
                if has_ingress(&s) {
                    ready.insert(s.name_any());
                }
            }
            Some(_) => {}
            None => panic!("watch ended"),
        }
    }
    let total = start.elapsed();
    let writes: usize = seen.values().map(|v| v - 1).sum();
    let per = |m: Method| fake.calls_of(m).len() as f64 / n as f64;
    println!(
        "{n} Services, EnsureLoadBalancer {ensure_latency:?}, flags {flags:?}: created in {created:.2?}, all with ingress after {total:.2?} ({:.1} Services/s); API writes per Service: {:.2}; provider calls per Service: Ensure {:.2}, Update {:.2}, Get {:.2}",
        n as f64 / total.as_secs_f64(),
        writes as f64 / n as f64,
        per(Method::EnsureLoadBalancer),
        per(Method::UpdateLoadBalancer),
        per(Method::GetLoadBalancer),
    );

    // Deleting: every Service gone and every load balancer deleted.
    let start = Instant::now();
    services
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    loop {
        let left = services
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "  deleted all {n} in {:.2?}; load balancers left in the fake cloud: {}; EnsureLoadBalancerDeleted calls per Service: {:.2}",
        start.elapsed(),
        fake.dump().load_balancers.len(),
        per(Method::EnsureLoadBalancerDeleted),
    );
    controller.stop().await;
    drop(provider);
}

#[tokio::main]
async fn main() {
    support::init_tracing();
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let n = env("BENCH_SERVICES", 1000) as usize;
    let latency = Duration::from_millis(env("BENCH_ENSURE_MS", 50));
    // Three backends, so Ensure carries a realistic node list.
    let admin = TestEnv::get().admin_client().await.unwrap();
    for i in 0..3 {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(format!("bench-backend-{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Node>::all(admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    // Our 10 workers under upstream's 20 QPS limit; then without it,
    // at upstream's one worker and at 50.
    run(n, latency, &["--kube-api-qps=20", "--kube-api-burst=30"]).await;
    run(
        n,
        latency,
        &["--kube-api-qps=0", "--concurrent-service-syncs=1"],
    )
    .await;
    run(
        n,
        latency,
        &["--kube-api-qps=0", "--concurrent-service-syncs=50"],
    )
    .await;
}
