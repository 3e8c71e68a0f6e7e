//! Benchmark (issue 28's target): with one of two providers hung, the
//! other's node-initialisation latency. A hybrid controller (the release
//! binary, as a process) with two real provider processes, as the hybrid
//! e2e test and the demo run them: "onprem", the local provider (owns
//! `local://`, the default provider) and "cloud", the fake provider (owns
//! `fake://`; its Nodes carry the platform label
//! `cloudprovider.kubernetes.io/platform=cloud`, and the controller runs
//! with `--cloud-provider-platforms cloud=cloud`).
//!
//! N Nodes of each provider (default 500; BENCH_NODES=N) are registered as
//! `kubelet --cloud-provider=external` registers them, interleaved, and
//! each Node's latency is measured from its create call's answer to the
//! first watch event showing it without the uninitialized taint. Each
//! measurement runs twice on fresh processes: (a) both providers healthy,
//! (b) the other provider SIGSTOPped (hung, not dead: its socket accepts,
//! nothing answers) after a warm-up Node of each provider was initialised
//! and before the Nodes register. It is done for each provider measured
//! and for two arrivals: every Node at once (32 creates in flight), and
//! paced (BENCH_RATE Nodes per second of each provider, default 10: 50 s
//! at the default N, longer than the controller's 30 s deadline of a
//! provider read, so the hung provider's calls time out and are retried
//! during the measurement).
//!
//! `cargo bench -p ccm-e2e --bench hybrid_isolation`. It reports p50, p99
//! and the ratio p99(b) / p99(a) against the target (1.5); it asserts
//! nothing about speed, only that the scenario is what it says: in (b) no
//! Node of the hung provider was initialised, and no Node was deleted.
//! Each run's logs stay in target/bench/hybrid_isolation/<run>/.

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::hybrid::{Side, cloud_node, controller_flags};
use ccm_testsupport::{TestEnv, UNINITIALIZED, eventually, kubelet_node, target_dir, unique_name};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};

/// How long any one watch event may take before the run is declared stuck.
const STUCK: Duration = Duration::from_secs(600);

/// The Node `run`-`side`-`i` as kubelet registers it: tainted, no
/// providerID; a cloud one with the platform label.
fn bench_node(side: Side, run: &str, i: &str) -> Node {
    let name = format!("{run}-{}-{i}", side.name());
    let mut node = match side {
        Side::Onprem => kubelet_node(&name),
        Side::Cloud => cloud_node(&name, false),
    };
    let labels = node.labels_mut();
    labels.insert("bench-run".into(), run.into());
    labels.insert("bench-side".into(), side.name().into());
    node
}

/// The side [`bench_node`] made `node` for.
fn side_of(node: &Node) -> Option<Side> {
    match node.labels().get("bench-side").map(String::as_str) {
        Some("onprem") => Some(Side::Onprem),
        Some("cloud") => Some(Side::Cloud),
        _ => None,
    }
}

/// How the measured Nodes arrive.
#[derive(Clone, Copy, Debug)]
enum Arrival {
    /// All at once, 32 creates in flight, onprem and cloud interleaved.
    Burst,
    /// One Node of each provider every 1/rate seconds.
    Paced(u32),
}

impl std::fmt::Display for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrival::Burst => write!(f, "all at once"),
            Arrival::Paced(rate) => write!(f, "paced, {rate}/s of each"),
        }
    }
}

/// The release binaries, built now so they are never stale.
struct Binaries {
    controller: PathBuf,
    local: PathBuf,
    fake: PathBuf,
}

fn build() -> Binaries {
    let status = ccm_testsupport::cargo()
        .args(["build", "--locked", "--release"])
        .args(["-p", "cloud-controller-manager"])
        .args(["-p", "ccm-local-provider", "-p", "ccm-fake-provider"])
        .status()
        .unwrap();
    assert!(status.success(), "cargo build --release: {status}");
    let release = target_dir().join("release");
    Binaries {
        controller: release.join("cloud-controller-manager"),
        local: release.join("local-provider"),
        fake: release.join("fake-provider"),
    }
}

/// A child process killed (SIGKILL, which also ends a stopped one) when
/// dropped, however the benchmark ends.
struct Proc {
    child: Child,
    name: &'static str,
}

impl Proc {
    fn spawn(name: &'static str, program: &Path, args: &[String], log: &Path) -> Proc {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        let child = ccm_testsupport::spawn_tied(cmd)
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        Proc { child, name }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", self.name);
    }

    /// Fails the run if it exited (a provider or the controller refusing
    /// its flags would otherwise show only as a stuck run).
    fn assert_running(&mut self, logs: &Path) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "{} exited ({status}); logs in {}",
                self.name,
                logs.display()
            );
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one run measured.
struct Measured {
    /// Latency of each of the measured provider's Nodes, sorted.
    latencies: Vec<Duration>,
    /// The same for the other provider's Nodes (empty when it was hung).
    other: Vec<Duration>,
    /// How many of the other provider's Nodes were initialised.
    other_initialised: usize,
    registered: Duration,
    all_measured_after: Duration,
    deleted: usize,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED))
}

async fn handshake(endpoint: &str, log: &Path) {
    let client = ProviderClient::connect_lazy(endpoint, ClientOptions::default()).unwrap();
    eventually(&format!("the provider on {endpoint} to answer"), || async {
        client.handshake().await.map(|_| ()).map_err(|e| {
            format!(
                "{e}; log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
    })
    .await;
}

/// One run on fresh processes: `measured`'s Nodes timed, the other
/// provider's registered alongside, SIGSTOPped first when `hang`.
async fn run(bins: &Binaries, n: usize, measured: Side, hang: bool, arrival: Arrival) -> Measured {
    let env = TestEnv::get();
    let admin = env.admin_client().await.unwrap();
    let run = unique_name("hyb");
    let logs = target_dir().join("bench/hybrid_isolation").join(&run);
    std::fs::create_dir_all(&logs).unwrap();
    let sockets = tempfile::tempdir().unwrap();
    let endpoint = |side: Side| format!("unix://{}/{}.sock", sockets.path().display(), side.name());

    // The local provider answers for the machines in its inventory only.
    let mut inventory = String::from("instances:\n");
    for i in std::iter::once("warm".to_string()).chain((0..n).map(|i| i.to_string())) {
        inventory.push_str(&format!(
            "  - {{node: {run}-onprem-{i}, zone: local-a, region: local}}\n"
        ));
    }
    let inventory_file = logs.join("inventory.yaml");
    std::fs::write(&inventory_file, inventory).unwrap();
    let mut onprem = Proc::spawn(
        "onprem (local-provider)",
        &bins.local,
        &[
            format!("--endpoint={}", endpoint(Side::Onprem)),
            format!("--inventory={}", inventory_file.display()),
        ],
        &logs.join("onprem.log"),
    );
    let mut cloud = Proc::spawn(
        "cloud (fake-provider)",
        &bins.fake,
        &[format!("--endpoint={}", endpoint(Side::Cloud))],
        &logs.join("cloud.log"),
    );
    handshake(&endpoint(Side::Onprem), &logs.join("onprem.log")).await;
    handshake(&endpoint(Side::Cloud), &logs.join("cloud.log")).await;
    let mut args = vec![format!("--kubeconfig={}", env.kubeconfig().display())];
    args.extend(controller_flags(
        &endpoint(Side::Onprem),
        &endpoint(Side::Cloud),
    ));
    args.extend([
        // The controllers that handle Nodes; the lifecycle one asks each
        // provider about its not-Ready Nodes every second, and each
        // provider's capabilities are read every 5 s: a hung provider
        // is asked all the while.
        "--controllers=cloud-node,cloud-node-lifecycle".into(),
        "--node-monitor-period=1s".into(),
        "--provider-capability-refresh-period=5s".into(),
        "--kube-api-qps=0".into(),
        "--concurrent-node-syncs=8".into(),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
    ]);
    let mut controller = Proc::spawn(
        "cloud-controller-manager",
        &bins.controller,
        &args,
        &logs.join("controller.log"),
    );

    let nodes: Api<Node> = Api::all(admin.clone());
    let cfg = watcher::Config::default().labels(&format!("bench-run={run}"));
    let mut events = watcher::watcher(nodes.clone(), cfg).boxed();
    while !matches!(events.try_next().await.unwrap(), Some(Event::InitDone)) {}

    // One Node of each provider first: once both are initialised, the
    // controller has both providers' identities and its controllers run.
    for side in [Side::Onprem, Side::Cloud] {
        nodes
            .create(&PostParams::default(), &bench_node(side, &run, "warm"))
            .await
            .unwrap();
    }
    let mut warm = std::collections::HashSet::new();
    while warm.len() < 2 {
        controller.assert_running(&logs);
        match tokio::time::timeout(Duration::from_secs(60), events.try_next()).await {
            Err(_) => panic!(
                "the warm-up Nodes were not initialised within 60s; logs in {}",
                logs.display()
            ),
            Ok(Ok(Some(Event::Apply(node)))) if !tainted(&node) => {
                warm.insert(node.name_any());
            }
            Ok(Ok(Some(_))) => {}
            Ok(other) => panic!("watch: {other:?}"),
        }
    }
    let hung = |onprem: &Proc, cloud: &Proc, sig: &str| {
        if hang {
            match measured.other() {
                Side::Onprem => onprem.signal(sig),
                Side::Cloud => cloud.signal(sig),
            }
        }
    };
    hung(&onprem, &cloud, "-STOP");

    let start = Instant::now();
    let creating = tokio::spawn(register(nodes.clone(), run.clone(), n, arrival));
    let mut initialised: HashMap<String, (Side, Instant)> = HashMap::new();
    let count = |m: &HashMap<String, (Side, Instant)>, side: Side| {
        m.values().filter(|(s, _)| *s == side).count()
    };
    let mut deleted = 0;
    while count(&initialised, measured) < n || (!hang && count(&initialised, measured.other()) < n)
    {
        let event = tokio::time::timeout(STUCK, events.try_next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no progress for {STUCK:?}: {} of {n} {} Nodes initialised; logs in {}",
                    count(&initialised, measured),
                    measured.name(),
                    logs.display()
                )
            })
            .unwrap();
        match event {
            Some(Event::Apply(node)) if !tainted(&node) => {
                let name = node.name_any();
                if let Some(side) = side_of(&node)
                    && !name.ends_with("-warm")
                {
                    initialised.entry(name).or_insert((side, Instant::now()));
                }
            }
            Some(Event::Delete(_)) => deleted += 1,
            Some(_) => {}
            None => panic!("watch ended"),
        }
    }
    let (created, registered) = creating.await.unwrap();
    onprem.assert_running(&logs);
    cloud.assert_running(&logs);
    controller.assert_running(&logs);
    let other_initialised = count(&initialised, measured.other());
    if hang {
        assert_eq!(
            other_initialised,
            0,
            "{} was SIGSTOPped, yet some of its Nodes were initialised; logs in {}",
            measured.other().name(),
            logs.display()
        );
    }
    let latencies = |side: Side| {
        let mut v: Vec<Duration> = initialised
            .iter()
            .filter(|(_, (s, _))| *s == side)
            .map(|(name, (_, at))| at.saturating_duration_since(created[name]))
            .collect();
        v.sort();
        v
    };
    let all_measured_after = initialised
        .values()
        .filter(|(s, _)| *s == measured)
        .map(|(_, at)| at.duration_since(start))
        .max()
        .unwrap_or_default();
    let result = Measured {
        latencies: latencies(measured),
        other: latencies(measured.other()),
        other_initialised,
        registered,
        all_measured_after,
        deleted,
    };

    drop(controller);
    hung(&onprem, &cloud, "-CONT");
    drop(onprem);
    drop(cloud);
    // The next run starts from an empty cluster (Nodes have no finalizer:
    // gone when the call returns).
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("bench-run={run}")),
        )
        .await
        .unwrap();
    result
}

/// Registers `n` Nodes of each provider as `arrival` says; answers when
/// each create call returned, and how long registering them all took.
async fn register(
    nodes: Api<Node>,
    run: String,
    n: usize,
    arrival: Arrival,
) -> (HashMap<String, Instant>, Duration) {
    let start = Instant::now();
    let create = |side: Side, i: usize| {
        let nodes = nodes.clone();
        let node = bench_node(side, &run, &i.to_string());
        async move {
            let created = nodes.create(&PostParams::default(), &node).await.unwrap();
            (created.name_any(), Instant::now())
        }
    };
    let sides = |i: usize| {
        if i.is_multiple_of(2) {
            Side::Onprem
        } else {
            Side::Cloud
        }
    };
    let created: HashMap<String, Instant> = match arrival {
        Arrival::Burst => {
            futures::stream::iter(0..2 * n)
                .map(|i| create(sides(i), i / 2))
                .buffer_unordered(32)
                .collect()
                .await
        }
        Arrival::Paced(rate) => {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
            let mut calls = tokio::task::JoinSet::new();
            for i in 0..n {
                tick.tick().await;
                calls.spawn(create(Side::Onprem, i));
                calls.spawn(create(Side::Cloud, i));
            }
            calls.join_all().await.into_iter().collect()
        }
    };
    (created, start.elapsed())
}

fn ms(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

fn describe(n: usize, measured: Side, hang: bool, arrival: Arrival, m: &Measured) -> String {
    let other = measured.other().name();
    let state = if hang {
        format!("{other} SIGSTOPped")
    } else {
        "both healthy".to_string()
    };
    let others = if hang {
        format!("{other}: {} of {n} initialised", m.other_initialised)
    } else {
        format!(
            "{other}: p50 {}, p99 {}",
            ms(quantile(&m.other, 0.5)),
            ms(quantile(&m.other, 0.99))
        )
    };
    format!(
        "{n} + {n} nodes ({arrival}), {state}: registered in {}; {} node init p50 {}, p99 {}, max {} (all {n} after {}); {others}; nodes deleted: {}",
        ms(m.registered),
        measured.name(),
        ms(quantile(&m.latencies, 0.5)),
        ms(quantile(&m.latencies, 0.99)),
        ms(quantile(&m.latencies, 1.0)),
        ms(m.all_measured_after),
        m.deleted,
    )
}

#[tokio::main]
async fn main() {
    support::init_tracing();
    let n = support::env_count("BENCH_NODES", 500);
    let rate = support::env_count("BENCH_RATE", 10) as u32;
    let bins = build();
    // The apiserver's first thousand Nodes register more slowly than the
    // next: a run nobody compares comes first.
    run(&bins, n, Side::Onprem, false, Arrival::Burst).await;
    let mut summary = Vec::new();
    for measured in [Side::Onprem, Side::Cloud] {
        for arrival in [Arrival::Burst, Arrival::Paced(rate)] {
            let healthy = run(&bins, n, measured, false, arrival).await;
            println!("{}", describe(n, measured, false, arrival, &healthy));
            let hung = run(&bins, n, measured, true, arrival).await;
            println!("{}", describe(n, measured, true, arrival, &hung));
            let (a, b) = (
                quantile(&healthy.latencies, 0.99),
                quantile(&hung.latencies, 0.99),
            );
            let ratio = b.as_secs_f64() / a.as_secs_f64();
            summary.push(format!(
                "{} node init p99 ({arrival}), {} SIGSTOPped / both healthy: {} / {} = {ratio:.2} (target ≤ 1.5: {})",
                measured.name(),
                measured.other().name(),
                ms(b),
                ms(a),
                if ratio <= 1.5 { "met" } else { "NOT met" },
            ));
        }
    }
    for line in summary {
        println!("{line}");
    }
}
