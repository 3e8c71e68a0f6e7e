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

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

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

/// The processes of one implementation, killed however the run ends.
struct Running {
    children: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl Running {
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    fn stop(mut self) {
        for child in &mut self.children {
            let _ = ccm_testsupport::terminate(child, Duration::from_secs(20));
        }
        self.children.clear();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(program: &Path, args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(Stdio::null()).stderr(log);
    ccm_testsupport::spawn_tied(cmd).unwrap_or_else(|e| panic!("{}: {e}", program.display()))
}

/// `PUT path` with a JSON body on a loopback HTTP/1.1 server.
async fn put_json(port: u16, path: &str, body: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let req = format!(
                "PUT {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.unwrap();
            assert!(
                answer.starts_with("HTTP/1.1 2"),
                "PUT {path}: {}",
                answer.lines().next().unwrap_or_default()
            );
            return;
        }
        assert!(Instant::now() < deadline, "fake provider admin API not up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Binaries {
    controller: PathBuf,
    fake: PathBuf,
    upstream: PathBuf,
}

async fn start(
    imp: Implementation,
    profile: Profile,
    bins: &Binaries,
    kubeconfig: &Path,
    ensure_ms: u64,
) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let logs = repo().join("target/bench-compare");
    std::fs::create_dir_all(&logs).unwrap();
    let mut children = Vec::new();
    if imp == Implementation::Floor {
        let mut args = vec![
            "node-init-floor".to_owned(),
            format!("--kubeconfig={}", kubeconfig.display()),
        ];
        args.extend(profile.flags(imp).iter().map(|s| s.to_string()));
        children.push(spawn(
            &bins.upstream,
            &args,
            &logs.join("node-init-floor.log"),
        ));
        return Running {
            children,
            _dir: dir,
        };
    }
    let mut args: Vec<String> = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        "--controllers=cloud-node,service".into(),
        "--configure-cloud-routes=false".into(),
    ];
    args.extend(profile.flags(imp).iter().map(|s| s.to_string()));
    match imp {
        Implementation::Ours => {
            let endpoint = format!("unix://{}/provider.sock", dir.path().display());
            let admin = free_port();
            children.push(spawn(
                &bins.fake,
                &[
                    format!("--endpoint={endpoint}"),
                    format!("--admin-listen=127.0.0.1:{admin}"),
                    "--lb-ip-pool=10.128.0.0/16".into(),
                ],
                &logs.join("fake-provider.log"),
            ));
            put_json(
                admin,
                "/faults/latency",
                &format!(r#"{{"method": "EnsureLoadBalancer", "ms": {ensure_ms}}}"#),
            )
            .await;
            args.push(format!("--provider-endpoint={endpoint}"));
            args.push("--secure-port=0".into());
            children.push(spawn(&bins.controller, &args, &logs.join("controller.log")));
        }
        Implementation::Upstream => {
            let config = dir.path().join("cloud.json");
            std::fs::write(
                &config,
                format!(
                    r#"{{"latency": {{"EnsureLoadBalancer": "{ensure_ms}ms"}}, "lbIPPool": "10.128.0.0/16"}}"#
                ),
            )
            .unwrap();
            args.extend([
                "--cloud-provider=bench".into(),
                format!("--cloud-config={}", config.display()),
                "--secure-port=0".into(),
            ]);
            children.push(spawn(&bins.upstream, &args, &logs.join("upstream-ccm.log")));
        }
        Implementation::Floor => unreachable!("started above"),
    }
    Running {
        children,
        _dir: dir,
    }
}

fn rss_mib(pid: u32) -> f64 {
    procfs::rss_kib(pid) as f64 / 1024.0
}

/// The summed RSS of `pids` once it stopped moving (3 samples a second
/// apart within 1 MiB), at most 30 s.
async fn settled_rss(pids: &[u32]) -> f64 {
    let total = || pids.iter().map(|p| rss_mib(*p)).sum::<f64>();
    let mut last = total();
    let mut stable = 0;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = total();
        if (now - last).abs() < 1.0 {
            stable += 1;
            if stable >= 3 {
                return now;
            }
        } else {
            stable = 0;
        }
        last = now;
    }
    last
}

/// A Node as a kubelet registers it, Ready, tainted for the cloud
/// controller, labelled with the run.
fn ready_node(name: &str, run: &str) -> Node {
    let mut n = kubelet_node(name);
    n.metadata
        .labels
        .get_or_insert_default()
        .insert("bench-run".into(), run.into());
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED))
}

fn has_ingress(s: &Service) -> bool {
    s.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
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

/// Creates `count` objects with at most 32 requests in flight; returns the
/// time each create was answered, in creation order.
async fn create_all<K, F>(api: &Api<K>, count: usize, make: F) -> Vec<Instant>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(usize) -> K,
{
    let objects: Vec<K> = (0..count).map(make).collect();
    let mut created = vec![Instant::now(); count];
    let answered: Vec<(usize, Instant)> = futures::stream::iter(objects.into_iter().enumerate())
        .map(|(i, o)| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &o).await.unwrap();
                (i, Instant::now())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for (i, at) in answered {
        created[i] = at;
    }
    created
}

/// Waits for every object `names` lists to satisfy `done` on a watch that
/// was running before they were created; returns when each first did, and
/// how many changes the watch saw after each one's creation.
async fn served<K>(
    events: &mut (impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Unpin),
    names: &[String],
    done: impl Fn(&K) -> bool,
) -> (Vec<Instant>, usize)
where
    K: kube::Resource + Clone,
{
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut at: Vec<Option<Instant>> = vec![None; names.len()];
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut left = names.len();
    let deadline = tokio::time::Instant::now() + PHASE_DEADLINE;
    while left > 0 {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("{left} of {} not served in time", names.len()))
            .expect("watch ended");
        // A watch that fell behind (410 Gone at 5,000 objects) relists:
        // what changed meanwhile arrives as InitApply, seen late.
        let Ok(Event::Apply(o) | Event::InitApply(o)) = ev else {
            continue;
        };
        let name = o.name_any();
        let Some(&i) = index.get(name.as_str()) else {
            continue;
        };
        *seen.entry(name).or_default() += 1;
        if at[i].is_none() && done(&o) {
            at[i] = Some(Instant::now());
            left -= 1;
        }
    }
    // The first event of each is its creation.
    let writes = seen.values().map(|v| v.saturating_sub(1)).sum();
    (at.into_iter().map(Option::unwrap).collect(), writes)
}

async fn watch_until_init<K>(
    api: Api<K>,
    cfg: watcher::Config,
) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Unpin
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let mut events = watcher::watcher(api, cfg).boxed();
    while !matches!(events.try_next().await.unwrap(), Some(Event::InitDone)) {}
    events
}

/// A LoadBalancer Service of a burst of `n`. Above 2,500 without node
/// ports: the default range (30000–32767) has 2,768, and the apiserver
/// refuses the rest ("failed to allocate a nodePort: range is full").
fn bench_service(name: &str, n: usize) -> Service {
    let mut s = lb_service(name, 80);
    if n > 2500 {
        s.spec.as_mut().unwrap().allocate_load_balancer_node_ports = Some(false);
    }
    s
}

/// A canary Service served and deleted: the service controller is up and
/// synced.
async fn serve_and_delete_canary_service(
    services: &Api<Service>,
    svc_events: &mut (impl futures::Stream<Item = Result<Event<Service>, watcher::Error>> + Unpin),
) {
    services
        .create(&PostParams::default(), &lb_service("canary", 80))
        .await
        .unwrap();
    served(svc_events, &["canary".to_owned()], has_ingress).await;
    services
        .delete("canary", &DeleteParams::default())
        .await
        .unwrap();
    let gone = async {
        loop {
            if services.get_opt("canary").await.unwrap().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(PHASE_DEADLINE, gone)
        .await
        .expect("canary Service deleted");
}

/// The next run starts from an empty cluster.
async fn clean_up(admin: &Client, nodes: &Api<Node>, label: &str, ns: &str) {
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(label),
        )
        .await
        .unwrap();
    Api::<Namespace>::all(admin.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// One run of every scenario against `imp`.
async fn run_once(
    imp: Implementation,
    profile: Profile,
    n: usize,
    bins: &Binaries,
    env: &TestEnv,
    admin: &Client,
    ensure_ms: u64,
) -> RunResult {
    let run = unique_name("cmp");
    let nodes: Api<Node> = Api::all(admin.clone());
    let ns = env.namespace(admin, "cmp").await.unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let label = format!("bench-run={run}");
    let mut node_events =
        watch_until_init(nodes.clone(), watcher::Config::default().labels(&label)).await;
    let mut svc_events = watch_until_init(services.clone(), watcher::Config::default()).await;

    let procs = start(imp, profile, bins, env.kubeconfig(), ensure_ms).await;
    let pids = procs.pids();

    // Up and synced: a canary Node initialised, a canary Service served.
    let canary = format!("{run}-canary");
    nodes
        .create(&PostParams::default(), &ready_node(&canary, &run))
        .await
        .unwrap();
    served(&mut node_events, std::slice::from_ref(&canary), |n| {
        !tainted(n)
    })
    .await;
    if imp != Implementation::Floor {
        serve_and_delete_canary_service(&services, &mut svc_events).await;
    }

    // Node initialisation.
    let names: Vec<String> = (0..n).map(|i| format!("{run}-{i}")).collect();
    let start_nodes = Instant::now();
    let created = create_all(&nodes, n, |i| ready_node(&names[i], &run)).await;
    let (served_at, writes) = served(&mut node_events, &names, |n| !tainted(n)).await;
    let node_init = Burst::of(start_nodes, &created, &served_at, writes);
    eprintln!(
        "  {} {}: node init {:?}",
        imp.label(),
        profile.label(),
        node_init.total
    );
    // The minimal client is compared on node initialisation only.
    if imp == Implementation::Floor {
        procs.stop();
        clean_up(admin, &nodes, &label, &ns).await;
        return RunResult {
            node_init,
            ..Default::default()
        };
    }

    // Load balancer creation.
    let svc_names: Vec<String> = (0..n).map(|i| format!("lb-{i}")).collect();
    let start_lbs = Instant::now();
    let created = create_all(&services, n, |i| bench_service(&svc_names[i], n)).await;
    let (served_at, writes) = served(&mut svc_events, &svc_names, has_ingress).await;
    let lb_create = Burst::of(start_lbs, &created, &served_at, writes);
    eprintln!(
        "  {} {}: lb create {:?}",
        imp.label(),
        profile.label(),
        lb_create.total
    );
    let rss = settled_rss(&pids).await;
    let each: Vec<String> = pids
        .iter()
        .map(|p| {
            let r = procfs::rss(*p);
            let mib = |kib: u64| kib as f64 / 1024.0;
            format!(
                "{:.1} (anon {:.1}, file {:.1})",
                mib(r.total_kib),
                mib(r.anon_kib),
                mib(r.file_kib)
            )
        })
        .collect();
    eprintln!(
        "  {} {}: rss {rss:.1} MiB ({} MiB by process)",
        imp.label(),
        profile.label(),
        each.join(" + ")
    );

    // Fan-out: one Node more; every load balancer is updated.
    // Up to 1,000 only: it counts one Event per load balancer, and at
    // 5,000 both controllers' event queues (upstream's broadcaster holds
    // 1,000) drop some of a burst that size.
    let fan_out = if profile == Profile::Unthrottled && n <= 1000 {
        let events: Api<CoreEvent> = Api::namespaced(admin.clone(), &ns);
        let mut updated = watch_until_init(
            events,
            watcher::Config::default().fields("reason=UpdatedLoadBalancer"),
        )
        .await;
        let start = Instant::now();
        nodes
            .create(
                &PostParams::default(),
                &ready_node(&format!("{run}-extra"), &run),
            )
            .await
            .unwrap();
        let mut seen = HashSet::new();
        let deadline = tokio::time::Instant::now() + PHASE_DEADLINE;
        while seen.len() < n {
            match tokio::time::timeout_at(deadline, updated.next())
                .await
                .expect("every load balancer updated in time")
            {
                Some(Ok(Event::Apply(e) | Event::InitApply(e))) => {
                    if let Some(name) = e.involved_object.name {
                        seen.insert(name);
                    }
                }
                Some(_) => {}
                None => panic!("event watch ended"),
            }
        }
        let took = start.elapsed();
        eprintln!("  {} {}: fan-out {took:?}", imp.label(), profile.label());
        Some(took)
    } else {
        None
    };

    // Deletion: every Service gone (finalizers released after the cloud
    // delete). Measured unthrottled only: at the defaults the finalizers
    // are removed by hand first, as the client-side limit would only
    // measure itself again (at 20 QPS, minutes).
    if profile == Profile::Defaults {
        let names: Vec<String> = svc_names.clone();
        futures::stream::iter(names)
            .for_each_concurrent(32, |name| {
                let services = services.clone();
                async move {
                    let _ = services
                        .patch(
                            &name,
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(
                                serde_json::json!({"metadata": {"finalizers": null}}),
                            ),
                        )
                        .await;
                }
            })
            .await;
    }
    let start_delete = Instant::now();
    // At 5,000 the apiserver may cut one DeleteCollection off (its 60 s
    // request timeout); it is idempotent, so it is asked again.
    for attempt in 1..=5 {
        match services
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
        {
            Ok(_) => break,
            Err(e) if attempt < 5 => eprintln!("  delete collection: {e}; again"),
            Err(e) => panic!("delete collection: {e}"),
        }
    }
    let all_gone = async {
        loop {
            if services
                .list(&ListParams::default().limit(1))
                .await
                .unwrap()
                .items
                .is_empty()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(PHASE_DEADLINE, all_gone)
        .await
        .expect("every Service deleted");
    let lb_delete = (profile == Profile::Unthrottled).then(|| start_delete.elapsed());
    eprintln!(
        "  {} {}: lb delete {lb_delete:?}",
        imp.label(),
        profile.label()
    );

    let each: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let cpu_s = each.iter().sum();
    let by_process: Vec<String> = each.iter().map(|c| format!("{c:.2}")).collect();
    eprintln!(
        "  {} {}: cpu {cpu_s:.2} s ({} s by process)",
        imp.label(),
        profile.label(),
        by_process.join(" + ")
    );
    procs.stop();

    clean_up(admin, &nodes, &label, &ns).await;
    RunResult {
        node_init,
        lb_create,
        fan_out,
        lb_delete,
        rss_mib: rss,
        cpu_s,
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The runs' range, "lo–hi" (one value when they agree).
fn range(v: &[f64], unit: &str) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if (hi - lo).abs() < 1e-9 {
        format!("{lo:.2}{unit}")
    } else {
        format!("{lo:.2}–{hi:.2}{unit}")
    }
}

/// One table row: the mean of ours and of upstream, their runs' range,
/// and upstream ÷ ours (above 1: ours is faster or smaller).
fn row(what: &str, ours: &[f64], upstream: &[f64], unit: &str) {
    let (o, u) = (mean(ours.iter().copied()), mean(upstream.iter().copied()));
    println!(
        "| {what} | {} | {} | {:.2} |",
        range(ours, unit),
        range(upstream, unit),
        if o > 0.0 { u / o } else { f64::NAN }
    );
}

/// One figure of a run.
type Measure = dyn Fn(&RunResult) -> f64;

/// A row of the minimal-client table: each side's range and the minimal
/// client's mean ÷ each side's.
fn floor_row(
    what: &str,
    min: &[RunResult],
    ours: &[RunResult],
    up: &[RunResult],
    unit: &str,
    g: &Measure,
) {
    let vals = |v: &[RunResult]| v.iter().map(g).collect::<Vec<f64>>();
    let (m, o, u) = (vals(min), vals(ours), vals(up));
    let ratio = |a: &[f64], b: &[f64]| mean(a.iter().copied()) / mean(b.iter().copied());
    println!(
        "| {what} | {} | {} | {} | {:.2} | {:.2} |",
        range(&m, unit),
        range(&o, unit),
        range(&u, unit),
        ratio(&m, &o),
        ratio(&m, &u)
    );
}

fn build(bins: &Binaries) {
    // Without cargo's per-crate variables, which would rebuild ring and
    // everything above it on every run (see ccm_testsupport::cargo).
    let status = ccm_testsupport::cargo()
        .args([
            "build",
            "--locked",
            "--release",
            "-p",
            "cloud-controller-manager",
            "-p",
            "ccm-fake-provider",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "cargo build --release");
    assert!(
        bins.upstream.exists(),
        "{} missing: run hack/build-upstream-ccm.sh (make bench-compare does)",
        bins.upstream.display()
    );
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
    // One side only (`ours` or `upstream`), to look into it; no table.
    let only = std::env::var("BENCH_COMPARE_ONLY").ok();
    // The minimal client's node-init run (BENCH_COMPARE_FLOOR=0: skip it).
    let floor = env_or("BENCH_COMPARE_FLOOR", 1) != 0;
    let bins = Binaries {
        controller: repo().join("target/release/cloud-controller-manager"),
        fake: repo().join("target/release/fake-provider"),
        upstream: repo().join("target/upstream-ccm/bin/upstream-ccm"),
    };
    build(&bins);
    let env = TestEnv::get();
    let admin = env.admin_client().await.unwrap();

    let mut results: BTreeMap<(usize, Profile, Implementation), Vec<RunResult>> = BTreeMap::new();
    for &n in &sizes {
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

    if only.is_some() {
        return;
    }
    println!();
    println!(
        "Machine: {} cores; Ensure latency {ensure_ms} ms on both sides; {runs} runs each, alternating. Ratio = upstream ÷ ours (above 1: ours faster or smaller).",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    for &n in &sizes {
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
