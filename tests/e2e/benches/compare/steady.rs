//! The steady-state scenario: N kubelet-sized Nodes and M LoadBalancer
//! Services, converged, then a window in which the kubelets heartbeat
//! (status updates at a fixed rate, nothing else changes) with
//! `--node-status-update-frequency` the same on both sides. What the
//! window costs: cloud calls (per Node-hour), provider mutations, CPU;
//! RSS at its end.

use super::*;

use super::process::{Calls, Setup, by_method, settled_rss, since, start_with, total};
use super::workload::*;

use kube::api::{Patch, PatchParams};

/// What the scenario is run with (BENCH_COMPARE_STEADY_*).
#[derive(Debug, Clone)]
pub(crate) struct SteadyConfig {
    pub(crate) nodes: usize,
    pub(crate) services: usize,
    pub(crate) window: Duration,
    /// Node status updates per second, over all Nodes.
    pub(crate) heartbeats_per_s: f64,
    /// `--node-status-update-frequency` on both sides.
    pub(crate) status_frequency: String,
}

#[derive(Debug, Clone)]
pub(crate) struct SteadyResult {
    /// The window's length as run.
    pub(crate) window: Duration,
    /// Heartbeats sent in the window.
    pub(crate) heartbeats: usize,
    /// Cloud calls in the window, by method.
    pub(crate) calls: Calls,
    /// CPU in the window, per process (ours: controller, provider).
    pub(crate) cpu_s: Vec<f64>,
    /// RSS at the window's end, per process, MiB.
    pub(crate) rss_mib: Vec<f64>,
}

/// Methods that change the cloud.
const MUTATIONS: [&str; 5] = [
    "EnsureLoadBalancer",
    "UpdateLoadBalancer",
    "EnsureLoadBalancerDeleted",
    "CreateRoute",
    "DeleteRoute",
];

impl SteadyResult {
    pub(crate) fn per_node_hour(&self, nodes: usize) -> f64 {
        total(&self.calls).calls as f64 / nodes as f64 / (self.window.as_secs_f64() / 3600.0)
    }

    pub(crate) fn mutations(&self) -> u64 {
        self.calls
            .iter()
            .filter(|(m, _)| MUTATIONS.contains(&m.as_str()))
            .map(|(_, c)| c.calls)
            .sum()
    }
}

/// Renews every condition's heartbeat of `names` round-robin at `rate`
/// per second for `length`, as kubelets posting an unchanged status do
/// (a strategic-merge status patch); returns how many were sent. At most
/// 64 in flight: when the apiserver is slower, the rate falls.
async fn heartbeats(nodes: &Api<Node>, names: &[String], rate: f64, length: Duration) -> usize {
    let start = tokio::time::Instant::now();
    let count = (rate * length.as_secs_f64()) as usize;
    let pp = PatchParams {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    };
    futures::stream::iter(0..count)
        .map(|k| {
            let (nodes, pp) = (nodes.clone(), pp.clone());
            let name = &names[k % names.len()];
            async move {
                tokio::time::sleep_until(start + Duration::from_secs_f64(k as f64 / rate)).await;
                if start.elapsed() > length {
                    return 0;
                }
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                // Without lastTransitionTime the merge keeps it: only the
                // heartbeats move.
                let mut conditions = kubelet_conditions(&now, "");
                for c in conditions.as_array_mut().unwrap() {
                    c.as_object_mut().unwrap().remove("lastTransitionTime");
                }
                let patch = serde_json::json!({"status": {"conditions": conditions}});
                nodes
                    .patch_status(name, &pp, &Patch::Strategic(patch))
                    .await
                    .unwrap();
                1
            }
        })
        .buffer_unordered(64)
        .fold(0, |a, b| async move { a + b })
        .await
}

/// One run of the steady-state scenario against `imp`.
pub(crate) async fn steady_once(
    imp: Implementation,
    cfg: &SteadyConfig,
    ensure_ms: u64,
    bins: &Binaries,
    env: &TestEnv,
    admin: &Client,
) -> SteadyResult {
    let run = unique_name("steady");
    let nodes: Api<Node> = Api::all(admin.clone());
    let ns = env.namespace(admin, "steady").await.unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let label = format!("bench-run={run}");
    let mut node_events =
        watch_until_init(nodes.clone(), watcher::Config::default().labels(&label)).await;
    let mut svc_events = watch_until_init(services.clone(), watcher::Config::default()).await;
    let setup = Setup {
        ensure_ms,
        controllers: Some("cloud-node,cloud-node-lifecycle,service"),
        flags: vec![format!(
            "--node-status-update-frequency={}",
            cfg.status_frequency
        )],
        count_calls: true,
        ..Setup::default()
    };
    // Unthrottled towards the apiserver so that converging 5,000 Nodes
    // does not take upstream's 20 QPS half an hour; the window writes
    // nothing.
    let procs = start_with(imp, Profile::Unthrottled, bins, env.kubeconfig(), &setup).await;
    let pids = procs.pids_controller_first();
    canary_node_initialised(&nodes, &mut node_events, &run).await;
    serve_and_delete_canary_service(&services, &mut svc_events).await;

    // Converge: every Node initialised, every Service served.
    let names: Vec<String> = (0..cfg.nodes).map(|i| format!("{run}-{i}")).collect();
    let t = Instant::now();
    create_all(&nodes, cfg.nodes, |i| {
        kubelet_sized_node(&names[i], &run, i)
    })
    .await;
    served(&mut node_events, &names, |n| !tainted(n)).await;
    let svc_names: Vec<String> = (0..cfg.services).map(|i| format!("lb-{i}")).collect();
    create_all(&services, cfg.services, |i| {
        bench_service(&svc_names[i], cfg.services)
    })
    .await;
    served(&mut svc_events, &svc_names, has_ingress).await;
    drop(node_events);
    settled_rss(&pids).await;
    eprintln!("  {} steady: converged in {:.1?}", imp.label(), t.elapsed());

    // The window.
    let calls_before = procs.cloud_calls().await;
    let cpu_before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let start = Instant::now();
    let sent = heartbeats(&nodes, &names, cfg.heartbeats_per_s, cfg.window).await;
    let window = start.elapsed();
    let calls = since(&procs.cloud_calls().await, &calls_before);
    let cpu_s: Vec<f64> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, b)| cpu_seconds(*p) - b)
        .collect();
    let rss_mib: Vec<f64> = pids
        .iter()
        .map(|p| procfs::rss_kib(*p) as f64 / 1024.0)
        .collect();
    let result = SteadyResult {
        window,
        heartbeats: sent,
        calls,
        cpu_s,
        rss_mib,
    };
    eprintln!(
        "  {} steady: {sent} heartbeats in {window:.1?}; cloud calls {} ({:.2} per Node-hour, {} mutations); cpu {:?} s; rss {:?} MiB",
        imp.label(),
        by_method(&result.calls),
        result.per_node_hour(cfg.nodes),
        result.mutations(),
        result.cpu_s,
        result.rss_mib
    );

    // Services go while the controller runs (their finalizers), then the
    // Nodes and the namespace.
    for s in &svc_names {
        services.delete(s, &DeleteParams::default()).await.unwrap();
    }
    let all_gone = async {
        while !services
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::time::timeout(PHASE_DEADLINE, all_gone)
        .await
        .expect("every Service deleted");
    procs.stop();
    clean_up(admin, &nodes, &label, &ns).await;
    result
}

pub(crate) struct SteadyRuns {
    pub(crate) cfg: SteadyConfig,
    pub(crate) ours: Option<SteadyResult>,
    pub(crate) upstream: Option<SteadyResult>,
}

/// BENCH_COMPARE_STEADY_NODES (default 5000) kubelet-sized Nodes,
/// BENCH_COMPARE_STEADY_SERVICES (1000) Services, a window of
/// BENCH_COMPARE_STEADY_SECS (600) with BENCH_COMPARE_STEADY_HEARTBEATS
/// (200) status updates per second and
/// `--node-status-update-frequency=`BENCH_COMPARE_STEADY_STATUS_FREQUENCY
/// (1m); ours first, then upstream.
pub(crate) async fn run_all(
    only: Option<&str>,
    ensure_ms: u64,
    bins: &Binaries,
    env: &TestEnv,
    admin: &Client,
) -> SteadyRuns {
    let cfg = SteadyConfig {
        nodes: env_or("BENCH_COMPARE_STEADY_NODES", 5000),
        services: env_or("BENCH_COMPARE_STEADY_SERVICES", 1000),
        window: Duration::from_secs(env_or("BENCH_COMPARE_STEADY_SECS", 600)),
        heartbeats_per_s: env_or("BENCH_COMPARE_STEADY_HEARTBEATS", 200.0),
        status_frequency: env_or("BENCH_COMPARE_STEADY_STATUS_FREQUENCY", "1m".to_owned()),
    };
    let sample = serde_json::to_vec(&kubelet_sized_node("steady-sample-node-0000", "r", 0))
        .unwrap()
        .len();
    let (mut ours, mut upstream) = (None, None);
    for imp in [Implementation::Ours, Implementation::Upstream] {
        if only.is_some_and(|o| o != imp.label()) {
            continue;
        }
        eprintln!(
            "steady state, {} Nodes ({sample} bytes each as JSON) + {} Services, {:.0?}: {}",
            cfg.nodes,
            cfg.services,
            cfg.window,
            imp.label()
        );
        let r = steady_once(imp, &cfg, ensure_ms, bins, env, admin).await;
        match imp {
            Implementation::Ours => ours = Some(r),
            _ => upstream = Some(r),
        }
    }
    SteadyRuns {
        cfg,
        ours,
        upstream,
    }
}

pub(crate) fn print(runs: &SteadyRuns) {
    let (Some(ours), Some(up)) = (&runs.ours, &runs.upstream) else {
        return;
    };
    let cfg = &runs.cfg;
    println!();
    println!(
        "### Steady state: {} kubelet-sized Nodes + {} LoadBalancer Services, {:.0?} window, {} heartbeats/s, --node-status-update-frequency={}",
        cfg.nodes, cfg.services, cfg.window, cfg.heartbeats_per_s, cfg.status_frequency
    );
    println!();
    println!("| measurement | ours | upstream | upstream ÷ ours |");
    println!("|---|---|---|---|");
    let ratio = |o: f64, u: f64| {
        if o > 0.0 {
            format!("{:.2}", u / o)
        } else {
            "n/a (ours 0)".to_owned()
        }
    };
    let rate = |r: &SteadyResult| r.heartbeats as f64 / r.window.as_secs_f64();
    println!(
        "| heartbeats (Node status updates) per second, achieved | {:.1} | {:.1} | |",
        rate(ours),
        rate(up)
    );
    let (o, u) = (total(&ours.calls), total(&up.calls));
    println!(
        "| cloud calls in the window | {} | {} | {} |",
        o.calls,
        u.calls,
        ratio(o.calls as f64, u.calls as f64)
    );
    let (on, un) = (ours.per_node_hour(cfg.nodes), up.per_node_hour(cfg.nodes));
    println!(
        "| cloud calls per Node-hour | {on:.2} | {un:.2} | {} |",
        ratio(on, un)
    );
    println!(
        "| provider mutations in the window | {} | {} | |",
        ours.mutations(),
        up.mutations()
    );
    println!(
        "| controller CPU in the window | {:.2} s | {:.2} s | {} |",
        ours.cpu_s[0],
        up.cpu_s[0],
        ratio(ours.cpu_s[0], up.cpu_s[0])
    );
    let o_all: f64 = ours.cpu_s.iter().sum();
    println!(
        "| CPU in the window, controller + provider | {o_all:.2} s | {:.2} s | {} |",
        up.cpu_s[0],
        ratio(o_all, up.cpu_s[0])
    );
    println!(
        "| CPU per Node update (controller + provider) | {:.3} ms | {:.3} ms | |",
        o_all * 1000.0 / ours.heartbeats.max(1) as f64,
        up.cpu_s[0] * 1000.0 / up.heartbeats.max(1) as f64
    );
    println!(
        "| controller RSS at the end | {:.1} MiB | {:.1} MiB | {} |",
        ours.rss_mib[0],
        up.rss_mib[0],
        ratio(ours.rss_mib[0], up.rss_mib[0])
    );
    let o_rss: f64 = ours.rss_mib.iter().sum();
    println!(
        "| RSS, controller + provider | {o_rss:.1} MiB ({}) | {:.1} MiB | {} |",
        ours.rss_mib
            .iter()
            .map(|c| format!("{c:.1}"))
            .collect::<Vec<_>>()
            .join(" + "),
        up.rss_mib[0],
        ratio(o_rss, up.rss_mib[0])
    );
    println!();
    println!(
        "Cloud calls in the window by method: ours {}; upstream {}.",
        by_method(&ours.calls),
        by_method(&up.calls)
    );
}
