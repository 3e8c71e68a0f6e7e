//! One run of every scenario against one implementation.

use super::*;

use super::process::{settled_rss, start};
use super::workload::*;

/// One run of every scenario against `imp`.
pub(crate) async fn run_once(
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
    canary_node_initialised(&nodes, &mut node_events, &run).await;
    if imp != Implementation::Floor {
        serve_and_delete_canary_service(&services, &mut svc_events).await;
    }

    // Node initialisation.
    let names: Vec<String> = (0..n).map(|i| format!("{run}-{i}")).collect();
    let start_nodes = Instant::now();
    // BENCH_COMPARE_KUBELET_SIZED=1: Nodes the size kubelets make them.
    let kubelet_sized = env_or("BENCH_COMPARE_KUBELET_SIZED", 0) != 0;
    let created = create_all(&nodes, n, |i| {
        if kubelet_sized {
            kubelet_sized_node(&names[i], &run, i)
        } else {
            ready_node(&names[i], &run)
        }
    })
    .await;
    let (served_at, writes) = served(&mut node_events, &names, |n| !tainted(n)).await;
    let node_init = Burst::of(start_nodes, &created, &served_at, writes);
    eprintln!(
        "  {} {}: node init {:?}",
        imp.label(),
        profile.label(),
        node_init.total
    );
    // The minimal client is compared on node initialisation only, and so
    // is everyone with BENCH_COMPARE_NODE_INIT_ONLY=1 (with
    // BENCH_COMPARE_ONLY: no table, only the lines above).
    if imp == Implementation::Floor || env_or("BENCH_COMPARE_NODE_INIT_ONLY", 0) != 0 {
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
