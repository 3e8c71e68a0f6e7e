//! `make bench-compare`: this controller and the upstream Go
//! cloud-controller-manager (built from `k8s.io/cloud-provider` by
//! `hack/build-upstream-ccm.sh`, with the `bench` in-memory cloud of
//! `tests/upstream-ccm`) run the same scenarios against one kube-apiserver,
//! alternating, and the ratios are printed. Ours runs as two processes, the
//! release controller and the release fake provider; upstream as one.
//!
//! Scenarios per run, N objects (BENCH_COMPARE_SIZES, default 1000):
//! N kubelet-style Nodes registered at once until all are initialised; N
//! LoadBalancer Services (Ensure takes BENCH_COMPARE_ENSURE_MS, default 50)
//! until all have an address; one Node added until every load balancer was
//! updated (`UpdatedLoadBalancer` Events); all Services deleted until all
//! are gone. RSS once settled with N Nodes + N Services, CPU of the whole
//! run. Profiles (BENCH_COMPARE_PROFILES, default `unthrottled,defaults`):
//! `defaults` runs each with its own defaults, `unthrottled` lifts the
//! client-side limits with 8 node and 10 service workers on both. Each
//! implementation runs BENCH_COMPARE_RUNS times (default 2), alternating.
//! It reports; it asserts nothing about speed.
//!
//! Two more scenarios (BENCH_COMPARE_SCENARIOS, default
//! `standard,quota,steady`; `standard` is the above): `quota` (quota.rs),
//! N Nodes registered at once under a cloud API quota until all are
//! initialised or a deadline passes; `steady` (steady.rs), kubelet-sized
//! Nodes heartbeating and LoadBalancer Services for a window: cloud calls
//! per Node-hour, provider mutations, CPU and RSS.
//!
//! For node initialisation alone at a size where N Services would take
//! long: BENCH_COMPARE_NODE_INIT_ONLY=1 with BENCH_COMPARE_ONLY=ours,
//! `minimal-client` or `upstream` (one invocation each; no table), and
//! BENCH_COMPARE_KUBELET_SIZED=1 for Nodes the size kubelets make them.

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

mod process;
mod quota;
mod report;
mod run;
mod steady;
mod workload;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ccm_testsupport::procfs::{self, cpu_seconds};
use ccm_testsupport::{TestEnv, UNINITIALIZED, free_port, kubelet_node, lb_service, unique_name};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Event as CoreEvent, Namespace, Node, NodeCondition, NodeStatus, Service,
};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

use process::build;
use report::{Measure, floor_row, row, secs};
use run::run_once;

/// How long one phase may take before the run is abandoned.
const PHASE_DEADLINE: Duration = Duration::from_secs(1800);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Implementation {
    Ours,
    Upstream,
    /// The floor for node initialisation (unthrottled only): client-go
    /// with protobuf making the same two writes per Node, the bench cloud
    /// in process at zero latency (`upstream-ccm node-init-floor`,
    /// tests/upstream-ccm/floor.go).
    Floor,
}

impl Implementation {
    fn label(self) -> &'static str {
        match self {
            Implementation::Ours => "ours",
            Implementation::Upstream => "upstream",
            Implementation::Floor => "minimal-client",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Profile {
    Defaults,
    Unthrottled,
}

impl Profile {
    fn parse(s: &str) -> Profile {
        match s {
            "defaults" => Profile::Defaults,
            "unthrottled" => Profile::Unthrottled,
            other => panic!("BENCH_COMPARE_PROFILES: unknown profile {other:?}"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Profile::Defaults => "defaults",
            Profile::Unthrottled => "unthrottled",
        }
    }

    /// The flags that make the profile, per implementation.
    fn flags(self, imp: Implementation) -> Vec<&'static str> {
        match (self, imp) {
            (Profile::Defaults, _) => vec![],
            (Profile::Unthrottled, Implementation::Ours) => vec![
                "--kube-api-qps=0",
                "--concurrent-node-syncs=8",
                "--concurrent-service-syncs=10",
            ],
            // client-go reads a QPS of 0 as its default of 5; a negative
            // one turns the limiter off.
            (Profile::Unthrottled, Implementation::Upstream) => vec![
                "--kube-api-qps=-1",
                "--concurrent-node-syncs=8",
                "--concurrent-service-syncs=10",
            ],
            (Profile::Unthrottled, Implementation::Floor) => vec!["--workers=8"],
        }
    }
}

struct Binaries {
    controller: PathBuf,
    fake: PathBuf,
    upstream: PathBuf,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A burst of N creations: how long until all were served, latencies.
#[derive(Debug, Default, Clone)]
struct Burst {
    total: Duration,
    p50: Duration,
    p99: Duration,
    /// p99 of the first quarter created.
    first_quarter_p99: Duration,
    writes_per_object: f64,
}

impl Burst {
    /// `created[i]` and `served[i]` of the i-th object in creation order.
    fn of(start: Instant, created: &[Instant], served: &[Instant], writes: usize) -> Burst {
        let lat: Vec<Duration> = created
            .iter()
            .zip(served)
            .map(|(c, s)| s.saturating_duration_since(*c))
            .collect();
        let quarter = lat.len().div_ceil(4);
        let mut first: Vec<Duration> = lat[..quarter].to_vec();
        first.sort();
        let mut all = lat.clone();
        all.sort();
        let last = served.iter().max().copied().unwrap_or(start);
        Burst {
            total: last - start,
            p50: percentile(&all, 0.5),
            p99: percentile(&all, 0.99),
            first_quarter_p99: percentile(&first, 0.99),
            writes_per_object: writes as f64 / created.len().max(1) as f64,
        }
    }
}

#[derive(Debug, Default, Clone)]
struct RunResult {
    node_init: Burst,
    lb_create: Burst,
    fan_out: Option<Duration>,
    lb_delete: Option<Duration>,
    rss_mib: f64,
    cpu_s: f64,
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = env_list("BENCH_COMPARE_SIZES", "1000")
        .iter()
        .map(|s| s.parse().expect("BENCH_COMPARE_SIZES: numbers"))
        .collect();
    let profiles: Vec<Profile> = env_list("BENCH_COMPARE_PROFILES", "unthrottled,defaults")
        .iter()
        .map(|s| Profile::parse(s))
        .collect();
    let runs: usize = env_or("BENCH_COMPARE_RUNS", 2);
    let ensure_ms: u64 = env_or("BENCH_COMPARE_ENSURE_MS", 50);
    // One side only (`ours`, `minimal-client` or `upstream`), to look into
    // it; no table.
    let only = std::env::var("BENCH_COMPARE_ONLY").ok();
    if let Some(o) = &only {
        let sides = [
            Implementation::Ours,
            Implementation::Floor,
            Implementation::Upstream,
        ];
        assert!(
            sides.iter().any(|i| i.label() == o),
            "BENCH_COMPARE_ONLY: unknown side {o:?} (ours, minimal-client or upstream)"
        );
    }
    assert!(
        only.is_some() || env_or("BENCH_COMPARE_NODE_INIT_ONLY", 0) == 0,
        "BENCH_COMPARE_NODE_INIT_ONLY=1 needs BENCH_COMPARE_ONLY (ours, minimal-client or upstream): \
         the tables compare scenarios it skips"
    );
    // The minimal client's node-init run (BENCH_COMPARE_FLOOR=0: skip it).
    let floor = env_or("BENCH_COMPARE_FLOOR", 1) != 0;
    // BENCH_COMPARE_SCENARIOS: `standard` (the scenarios above), `quota`
    // (quota.rs), `steady` (steady.rs).
    let scenarios = env_list("BENCH_COMPARE_SCENARIOS", "standard,quota,steady");
    for s in &scenarios {
        assert!(
            ["standard", "quota", "steady"].contains(&s.as_str()),
            "BENCH_COMPARE_SCENARIOS: unknown scenario {s:?} (standard, quota, steady)"
        );
    }
    let standard = scenarios.iter().any(|s| s == "standard");
    let bins = Binaries {
        controller: repo().join("target/release/cloud-controller-manager"),
        fake: repo().join("target/release/fake-provider"),
        upstream: repo().join("target/upstream-ccm/bin/upstream-ccm"),
    };
    build(&bins);
    let env = TestEnv::get();
    let admin = env.admin_client().await.unwrap();

    let mut results: BTreeMap<(usize, Profile, Implementation), Vec<RunResult>> = BTreeMap::new();
    for &n in sizes.iter().filter(|_| standard) {
        for &profile in &profiles {
            for round in 0..runs {
                // Alternate which goes first, so neither always gets the
                // warmer apiserver.
                // The minimal client runs unthrottled only, between them.
                let order = if round % 2 == 0 {
                    [
                        Implementation::Ours,
                        Implementation::Floor,
                        Implementation::Upstream,
                    ]
                } else {
                    [
                        Implementation::Upstream,
                        Implementation::Floor,
                        Implementation::Ours,
                    ]
                };
                for imp in order {
                    if only.as_deref().is_some_and(|o| o != imp.label())
                        || (imp == Implementation::Floor
                            && (profile != Profile::Unthrottled || !floor))
                    {
                        continue;
                    }
                    eprintln!(
                        "{n} objects, {}, run {}: {}",
                        profile.label(),
                        round + 1,
                        imp.label()
                    );
                    let r = run_once(imp, profile, n, &bins, env, &admin, ensure_ms).await;
                    results.entry((n, profile, imp)).or_default().push(r);
                }
            }
        }
    }

    let quotas = scenarios
        .iter()
        .any(|s| s == "quota")
        .then(|| quota::run_all(only.as_deref(), &bins, env, &admin));
    let quotas = match quotas {
        Some(f) => Some(f.await),
        None => None,
    };
    let steadies = scenarios
        .iter()
        .any(|s| s == "steady")
        .then(|| steady::run_all(only.as_deref(), ensure_ms, &bins, env, &admin));
    let steadies = match steadies {
        Some(f) => Some(f.await),
        None => None,
    };

    if only.is_some() {
        return;
    }
    println!();
    println!(
        "Machine: {} cores; Ensure latency {ensure_ms} ms on both sides; {}. Ratio = upstream ÷ ours (above 1: ours faster or smaller).",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        if standard {
            format!(
                "{runs} runs each in the standard scenarios, alternating; quota and steady state once each"
            )
        } else {
            "quota and steady state once each".to_owned()
        }
    );
    if let Some(q) = &quotas {
        quota::print(q);
    }
    if let Some(s) = &steadies {
        steady::print(s);
    }
    for &n in sizes.iter().filter(|_| standard) {
        for &profile in &profiles {
            let ours = &results[&(n, profile, Implementation::Ours)];
            let up = &results[&(n, profile, Implementation::Upstream)];
            println!();
            println!("### {n} objects, {}", profile.label());
            println!(
                "ours: {:?}; upstream: {:?}",
                profile.flags(Implementation::Ours),
                profile.flags(Implementation::Upstream)
            );
            println!();
            println!("| measurement | ours | upstream | upstream ÷ ours |");
            println!("|---|---|---|---|");
            let f = |v: &[RunResult], g: &dyn Fn(&RunResult) -> f64| {
                v.iter().map(g).collect::<Vec<f64>>()
            };
            row(
                "Nodes registered → all initialised",
                &f(ours, &|r| secs(r.node_init.total)),
                &f(up, &|r| secs(r.node_init.total)),
                " s",
            );
            row(
                "node init latency p50",
                &f(ours, &|r| secs(r.node_init.p50)),
                &f(up, &|r| secs(r.node_init.p50)),
                " s",
            );
            row(
                "node init latency p99",
                &f(ours, &|r| secs(r.node_init.p99)),
                &f(up, &|r| secs(r.node_init.p99)),
                " s",
            );
            row(
                "node init p99, first quarter",
                &f(ours, &|r| secs(r.node_init.first_quarter_p99)),
                &f(up, &|r| secs(r.node_init.first_quarter_p99)),
                " s",
            );
            row(
                "API writes per Node",
                &f(ours, &|r| r.node_init.writes_per_object),
                &f(up, &|r| r.node_init.writes_per_object),
                "",
            );
            row(
                "LB Services created → all have ingress",
                &f(ours, &|r| secs(r.lb_create.total)),
                &f(up, &|r| secs(r.lb_create.total)),
                " s",
            );
            row(
                "LB latency p50",
                &f(ours, &|r| secs(r.lb_create.p50)),
                &f(up, &|r| secs(r.lb_create.p50)),
                " s",
            );
            row(
                "LB latency p99",
                &f(ours, &|r| secs(r.lb_create.p99)),
                &f(up, &|r| secs(r.lb_create.p99)),
                " s",
            );
            row(
                "LB p99, first quarter",
                &f(ours, &|r| secs(r.lb_create.first_quarter_p99)),
                &f(up, &|r| secs(r.lb_create.first_quarter_p99)),
                " s",
            );
            row(
                "API writes per Service",
                &f(ours, &|r| r.lb_create.writes_per_object),
                &f(up, &|r| r.lb_create.writes_per_object),
                "",
            );
            if ours.iter().all(|r| r.fan_out.is_some()) && up.iter().all(|r| r.fan_out.is_some()) {
                row(
                    "one Node added → all LBs updated",
                    &f(ours, &|r| secs(r.fan_out.unwrap())),
                    &f(up, &|r| secs(r.fan_out.unwrap())),
                    " s",
                );
            }
            if ours.iter().chain(up).all(|r| r.lb_delete.is_some()) {
                row(
                    "LB Services deleted → all gone",
                    &f(ours, &|r| secs(r.lb_delete.unwrap())),
                    &f(up, &|r| secs(r.lb_delete.unwrap())),
                    " s",
                );
            }
            row(
                "RSS settled, N Nodes + N Services (ours: controller + provider)",
                &f(ours, &|r| r.rss_mib),
                &f(up, &|r| r.rss_mib),
                " MiB",
            );
            row(
                "CPU, whole run (ours: controller + provider)",
                &f(ours, &|r| r.cpu_s),
                &f(up, &|r| r.cpu_s),
                " s",
            );
            if let Some(min) = results.get(&(n, profile, Implementation::Floor)) {
                println!();
                println!(
                    "Node initialisation against a minimal client (client-go with protobuf, the same two writes per Node, the bench cloud in process at zero latency; {:?}). Ratio = minimal ÷ each: the target for ours is at least 0.83 (within 1.2x).",
                    profile.flags(Implementation::Floor)
                );
                println!();
                println!(
                    "| measurement | minimal client | ours | upstream | minimal ÷ ours | minimal ÷ upstream |"
                );
                println!("|---|---|---|---|---|---|");
                let rows: [(&str, &str, &Measure); 4] = [
                    ("Nodes registered → all initialised", " s", &|r| {
                        secs(r.node_init.total)
                    }),
                    ("node init latency p50", " s", &|r| secs(r.node_init.p50)),
                    ("node init p99, first quarter", " s", &|r| {
                        secs(r.node_init.first_quarter_p99)
                    }),
                    ("API writes per Node", "", &|r| {
                        r.node_init.writes_per_object
                    }),
                ];
                for (what, unit, g) in rows {
                    floor_row(what, min, ours, up, unit, g);
                }
            }
        }
    }
}
