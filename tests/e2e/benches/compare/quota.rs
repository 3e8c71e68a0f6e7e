//! The quota scenario: N Nodes registered at once under a cloud API quota
//! (a token bucket over cloud calls) until all are initialised, or until
//! the deadline. Ours: the fake provider's quota, answering QUOTA_EXCEEDED
//! with RetryInfo beyond it. Upstream: the bench cloud's, answering EC2's
//! `RequestLimitExceeded`, which upstream's cloud-node controller requeues
//! with its own backoff (not tuned here).

use super::*;

use super::process::{Calls, Count, Quota, Setup, by_method, since, start_with, total};
use super::workload::*;

#[derive(Debug, Clone)]
pub(crate) struct QuotaResult {
    /// Registration to the last Node initialised; None: not all by the
    /// deadline.
    pub(crate) total: Option<Duration>,
    pub(crate) initialised: usize,
    /// Cloud calls during the burst (after the canary), by method.
    pub(crate) calls: Calls,
    /// CPU of the whole run, each process (ours: controller, provider).
    pub(crate) cpu_s: Vec<f64>,
}

impl QuotaResult {
    pub(crate) fn cloud(&self) -> Count {
        total(&self.calls)
    }
}

/// One run of the quota scenario against `imp`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn quota_once(
    imp: Implementation,
    n: usize,
    quota: Quota,
    deadline: Duration,
    extra_ours: &[String],
    bins: &Binaries,
    env: &TestEnv,
    admin: &Client,
) -> QuotaResult {
    let run = unique_name("quota");
    let nodes: Api<Node> = Api::all(admin.clone());
    let label = format!("bench-run={run}");
    let mut node_events =
        watch_until_init(nodes.clone(), watcher::Config::default().labels(&label)).await;
    let setup = Setup {
        quota: Some(quota),
        count_calls: true,
        flags: if imp == Implementation::Ours {
            extra_ours.to_vec()
        } else {
            vec![]
        },
        ..Setup::default()
    };
    // Unthrottled towards the apiserver on both sides, so that the cloud's
    // quota is what limits.
    let procs = start_with(imp, Profile::Unthrottled, bins, env.kubeconfig(), &setup).await;
    let pids = procs.pids_controller_first();

    canary_node_initialised(&nodes, &mut node_events, &run).await;
    let before = procs.cloud_calls().await;

    let names: Vec<String> = (0..n).map(|i| format!("{run}-{i}")).collect();
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let start = Instant::now();
    let stop_at = tokio::time::Instant::now() + deadline;
    create_all(&nodes, n, |i| ready_node(&names[i], &run)).await;
    let mut done = vec![false; n];
    let mut initialised = 0;
    let mut last = start;
    let mut next_report = Instant::now() + Duration::from_secs(30);
    while initialised < n {
        let Ok(ev) = tokio::time::timeout_at(stop_at, node_events.next()).await else {
            break;
        };
        let Ok(Event::Apply(o) | Event::InitApply(o)) = ev.expect("watch ended") else {
            continue;
        };
        if let Some(&i) = index.get(o.name_any().as_str())
            && !done[i]
            && !tainted(&o)
        {
            done[i] = true;
            initialised += 1;
            last = Instant::now();
        }
        if Instant::now() >= next_report {
            eprintln!(
                "  {} quota {}/s: {initialised} of {n} after {:.0?}",
                imp.label(),
                quota.qps,
                start.elapsed()
            );
            next_report = Instant::now() + Duration::from_secs(30);
        }
    }
    let total_time = (initialised == n).then(|| last - start);
    let calls = since(&procs.cloud_calls().await, &before);
    let cpu_s: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let c = total(&calls);
    eprintln!(
        "  {} quota {}/s burst {}: {} of {n} initialised in {:.1?}; cloud calls {} ({} refused); cpu {:?} s; by method: {}",
        imp.label(),
        quota.qps,
        quota.burst,
        initialised,
        total_time.unwrap_or(deadline),
        c.calls,
        c.refused,
        cpu_s,
        by_method(&calls)
    );
    procs.stop();
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&label),
        )
        .await
        .unwrap();
    QuotaResult {
        total: total_time,
        initialised,
        calls,
        cpu_s,
    }
}

/// The scenario's settings (BENCH_COMPARE_QUOTA_*) and each quota's runs.
pub(crate) struct QuotaRuns {
    pub(crate) nodes: usize,
    pub(crate) deadline: Duration,
    pub(crate) extra_ours: Vec<String>,
    pub(crate) by_quota: Vec<(Quota, Option<QuotaResult>, Option<QuotaResult>)>,
}

/// Every quota of BENCH_COMPARE_QUOTAS (calls per second, default
/// `20,1`; burst BENCH_COMPARE_QUOTA_BURST, default one second's worth),
/// BENCH_COMPARE_QUOTA_NODES Nodes (default 5000), each run bounded by
/// BENCH_COMPARE_QUOTA_DEADLINE_S (default 600); ours gets
/// BENCH_COMPARE_QUOTA_OURS_FLAGS too (space-separated, default none).
/// Which side goes first alternates from one quota to the next.
pub(crate) async fn run_all(
    only: Option<&str>,
    bins: &Binaries,
    env: &TestEnv,
    admin: &Client,
) -> QuotaRuns {
    let nodes: usize = env_or("BENCH_COMPARE_QUOTA_NODES", 5000);
    let deadline = Duration::from_secs(env_or("BENCH_COMPARE_QUOTA_DEADLINE_S", 600));
    let burst: Option<u32> = std::env::var("BENCH_COMPARE_QUOTA_BURST")
        .ok()
        .map(|s| s.parse().expect("BENCH_COMPARE_QUOTA_BURST: a number"));
    let extra_ours: Vec<String> = std::env::var("BENCH_COMPARE_QUOTA_OURS_FLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let mut by_quota = Vec::new();
    for (k, qps) in env_list("BENCH_COMPARE_QUOTAS", "20,1").iter().enumerate() {
        let qps: f64 = qps.parse().expect("BENCH_COMPARE_QUOTAS: numbers");
        let quota = Quota {
            qps,
            burst: burst.unwrap_or(qps.ceil().max(1.0) as u32),
        };
        let order = if k % 2 == 0 {
            [Implementation::Ours, Implementation::Upstream]
        } else {
            [Implementation::Upstream, Implementation::Ours]
        };
        let (mut ours, mut up) = (None, None);
        for imp in order {
            if only.is_some_and(|o| o != imp.label()) {
                continue;
            }
            eprintln!(
                "quota {qps} calls/s (burst {}), {nodes} Nodes: {}",
                quota.burst,
                imp.label()
            );
            let r = quota_once(imp, nodes, quota, deadline, &extra_ours, bins, env, admin).await;
            match imp {
                Implementation::Ours => ours = Some(r),
                _ => up = Some(r),
            }
        }
        by_quota.push((quota, ours, up));
    }
    QuotaRuns {
        nodes,
        deadline,
        extra_ours,
        by_quota,
    }
}

pub(crate) fn print(runs: &QuotaRuns) {
    let n = runs.nodes;
    for (quota, ours, up) in &runs.by_quota {
        let (Some(ours), Some(up)) = (ours, up) else {
            continue;
        };
        println!();
        println!(
            "### {n} Nodes registered at once under a cloud quota of {} calls/s (burst {})",
            quota.qps, quota.burst
        );
        println!(
            "Both unthrottled towards the apiserver ({:?} / {:?}); ours also {:?}. Each run bounded by {:.0?}.",
            Profile::Unthrottled.flags(Implementation::Ours),
            Profile::Unthrottled.flags(Implementation::Upstream),
            runs.extra_ours,
            runs.deadline
        );
        println!();
        println!("| measurement | ours | upstream | upstream ÷ ours |");
        println!("|---|---|---|---|");
        let time = |r: &QuotaResult| match r.total {
            Some(t) => format!("{:.2} s", t.as_secs_f64()),
            None => format!(
                "not done in {:.0?}, {} of {n} initialised",
                runs.deadline, r.initialised
            ),
        };
        let ratio = match (ours.total, up.total) {
            (Some(o), Some(u)) => format!("{:.2}", u.as_secs_f64() / o.as_secs_f64()),
            (Some(o), None) => format!("> {:.2}", runs.deadline.as_secs_f64() / o.as_secs_f64()),
            _ => "n/a".to_owned(),
        };
        println!(
            "| Nodes registered → all initialised | {} | {} | {ratio} |",
            time(ours),
            time(up)
        );
        if ours.total.is_none() || up.total.is_none() {
            println!(
                "| Nodes initialised by the deadline | {} | {} | |",
                ours.initialised, up.initialised
            );
        }
        let (o, u) = (ours.cloud(), up.cloud());
        let r = |a: u64, b: u64| {
            if a > 0 {
                format!("{:.2}", b as f64 / a as f64)
            } else {
                "n/a".to_owned()
            }
        };
        println!(
            "| cloud calls made | {} | {} | {} |",
            o.calls,
            u.calls,
            r(o.calls, u.calls)
        );
        println!(
            "| of which refused by the quota | {} | {} | {} |",
            o.refused,
            u.refused,
            r(o.refused, u.refused)
        );
        let (oc, uc) = (ours.cpu_s.iter().sum::<f64>(), up.cpu_s.iter().sum::<f64>());
        println!(
            "| CPU, whole run (ours: controller + provider) | {oc:.2} s ({}) | {uc:.2} s | {:.2} |",
            ours.cpu_s
                .iter()
                .map(|c| format!("{c:.2}"))
                .collect::<Vec<_>>()
                .join(" + "),
            uc / oc
        );
        println!();
        println!(
            "Cloud calls by method: ours {}; upstream {}.",
            by_method(&ours.calls),
            by_method(&up.calls)
        );
    }
}
