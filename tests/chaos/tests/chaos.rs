//! The chaos scenarios. Each starts its own apiserver, fake provider and
//! controller processes, hurts them while they work, lets the system
//! converge, deletes every Service, and then counts from the fake's state
//! and the apiserver: leaked load balancers, Services that still want one
//! and have none, stuck finalizers, Nodes deleted though their instance
//! exists, and load balancers of other clusters touched. Every count must
//! be 0; each scenario prints one `chaos <scenario>: …` line.
//!
//! Run with `--nocapture --test-threads=1` to see the lines and keep the
//! timing realistic on a small machine (`make test` and `make chaos` do).

use std::collections::BTreeMap;
use std::time::Duration;

use ccm_chaos::cluster::{FINALIZER, has_finalizer};
use ccm_chaos::count::{self, Tally};
use ccm_chaos::{Cluster, Controller, Provider, RunDir, SETTLE, World, seed_foreign};
use ccm_testsupport::eventually_within;
use serde_json::json;

const NS: &str = World::NS;

fn svc(i: impl std::fmt::Display) -> String {
    format!("svc-{i}")
}

fn latency(method: &str, ms: u64) -> serde_json::Value {
    json!({ "method": method, "ms": ms })
}

/// kill -9 the provider, again and again, while Services are created and
/// deleted; it comes back on the same state file each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_kill_9_during_a_burst_of_lb_creations_and_deletions() {
    let mut w = World::new("provider-kill-lb-burst", &[], &[]).await;
    let n = 16 * w.scale;
    let kills = 2 * w.scale;
    // Calls take a while, so kills land while some are in flight.
    for m in ["EnsureLoadBalancer", "EnsureLoadBalancerDeleted"] {
        w.provider
            .keep_fault("PUT", "/faults/latency", latency(m, 150))
            .await;
    }
    let mut rng = w.rng.fork();
    let mut krng = w.rng.fork();
    let cluster = &w.cluster;
    let provider = &mut w.provider;
    let burst = async {
        let mut live: Vec<usize> = Vec::new();
        for i in 0..n {
            cluster.create_lb_service(NS, &svc(i)).await;
            live.push(i);
            if rng.chance(40) {
                let j = live.swap_remove(rng.below(live.len()));
                cluster.delete_service(NS, &svc(j)).await;
            }
            tokio::time::sleep(rng.millis(50, 250)).await;
        }
        // Half of the rest go too, some of them while the provider is down.
        for _ in 0..live.len() / 2 {
            let j = live.swap_remove(rng.below(live.len()));
            cluster.delete_service(NS, &svc(j)).await;
            tokio::time::sleep(rng.millis(50, 250)).await;
        }
    };
    let killer = async {
        for _ in 0..kills {
            tokio::time::sleep(krng.millis(500, 1500)).await;
            provider.kill9();
            tokio::time::sleep(krng.millis(200, 1200)).await;
            provider.restart().await;
        }
    };
    tokio::join!(burst, killer);
    w.tally.services = n;
    w.tally.kills = kills;
    w.finish(&[]).await;
}

/// kill -9 the provider while a burst of Nodes is being initialised (and
/// the lifecycle controller keeps asking whether their instances exist).
/// Nodes without an instance ("ghosts") must be deleted, the others
/// initialised and never deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_kill_9_during_node_initialisation() {
    let scale = ccm_chaos::scale();
    let n = 12 * scale;
    let ghosts = 3 * scale;
    let real: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
    let ghost: Vec<String> = (0..ghosts).map(|i| format!("ghost-{i}")).collect();
    let instances = tempfile::NamedTempFile::new().unwrap();
    let specs: Vec<_> = real.iter().map(|name| json!({ "name": name })).collect();
    std::fs::write(instances.path(), json!(specs).to_string()).unwrap();
    let instances_flag = format!("--instances-file={}", instances.path().display());
    let mut w = World::new(
        "provider-kill-node-init",
        &["--auto-create-instances=false", &instances_flag],
        &[],
    )
    .await;
    for (m, ms) in [
        ("InstanceMetadata", 100),
        ("InstanceExists", 30),
        ("BatchInstances", 100),
    ] {
        w.provider
            .keep_fault("PUT", "/faults/latency", latency(m, ms))
            .await;
    }
    let kills = 2 * scale;
    let mut rng = w.rng.fork();
    let mut krng = w.rng.fork();
    let cluster = &w.cluster;
    let provider = &mut w.provider;
    let burst = async {
        for (i, name) in real.iter().enumerate() {
            cluster.register_node(name).await;
            if i % 4 == 3 {
                cluster.register_node(&ghost[i / 4 % ghosts]).await;
            }
            tokio::time::sleep(rng.millis(30, 120)).await;
        }
    };
    let killer = async {
        for _ in 0..kills {
            tokio::time::sleep(krng.millis(300, 1000)).await;
            provider.kill9();
            tokio::time::sleep(krng.millis(200, 1000)).await;
            provider.restart().await;
        }
    };
    tokio::join!(burst, killer);
    w.tally.kills = kills;

    let left = count::uninitialised(&w.cluster, &real, SETTLE).await;
    for n in &left {
        w.tally.details.push(format!("node {n} never initialised"));
    }
    // The control: Nodes whose instance does not exist are deleted.
    let ghosts_left = count::still_present(&w.cluster, &ghost, SETTLE).await;
    for g in &ghosts_left {
        w.tally
            .details
            .push(format!("node {g} has no instance and was not deleted"));
    }
    w.tally.extra("nodes", n);
    w.tally.extra("nodes_initialised", n - left.len());
    w.tally.extra("ghosts_deleted", ghosts - ghosts_left.len());
    let all: Vec<String> = real.iter().chain(&ghost).cloned().collect();
    w.finish(&all).await;
}

/// kill -9 the controller after the provider deleted the load balancer and
/// before the controller removed the finalizer: the provider does the
/// delete, then holds its answer (a lost answer), and the controller is
/// killed once the fake's state shows the load balancer gone while the
/// Service still carries the finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_kill_9_between_the_cloud_delete_and_the_finalizer_removal() {
    let mut w = World::new("controller-kill-before-finalizer", &[], &[]).await;
    let per = 4;
    let rounds = w.scale;
    // Bystanders that must keep their load balancers throughout.
    for i in 0..2 {
        w.cluster
            .create_lb_service(NS, &format!("bystander-{i}"))
            .await;
    }
    for r in 0..rounds {
        let mut uids = BTreeMap::new();
        for i in 0..per {
            let name = svc(format!("{r}-{i}"));
            uids.insert(name.clone(), w.cluster.create_lb_service(NS, &name).await);
        }
        let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
        w.tally.census(&format!("round {r} before the deletes"), &c);

        w.provider
            .fault(
                "POST",
                "/faults/errors",
                json!({"method": "EnsureLoadBalancerDeleted", "kind": "internal",
                        "message": "answer lost", "times": per, "after_work": true}),
            )
            .await;
        w.provider
            .fault(
                "PUT",
                "/faults/latency",
                latency("EnsureLoadBalancerDeleted", 120_000),
            )
            .await;
        for name in uids.keys() {
            w.cluster.delete_service(NS, name).await;
        }
        // The window: load balancer gone, finalizer still on.
        let cluster = &w.cluster;
        let provider = &w.provider;
        eventually_within(
            Duration::from_secs(60),
            Duration::from_millis(20),
            "every load balancer deleted while every finalizer is still on",
            || async {
                let state = provider.state().await;
                let lbs = count::lbs_of(&state, World::CLUSTER);
                let services = cluster.all_services().await;
                let mut waiting = Vec::new();
                for (name, uid) in &uids {
                    let svc = services
                        .iter()
                        .find(|s| s.metadata.uid.as_ref() == Some(uid));
                    let held = svc.is_some_and(|s| {
                        s.metadata.deletion_timestamp.is_some() && has_finalizer(s)
                    });
                    assert!(held, "{name} lost its {FINALIZER} before the kill");
                    if lbs.contains_key(uid.as_str()) {
                        waiting.push(name.clone());
                    }
                }
                if waiting.is_empty() {
                    Ok(())
                } else {
                    Err(format!("load balancers still there: {waiting:?}"))
                }
            },
        )
        .await;
        w.controller.kill9();
        w.tally.kills += 1;
        w.provider.clear_faults().await;
        w.controller.restart();
    }
    w.tally.services = 2 + per * rounds;
    w.finish(&[]).await;
}

/// Services deleted, stripped of their finalizer, deleted and re-created
/// under the same name, or turned into ClusterIP while the controller is
/// down; when it is back, the normal path and the orphan sweeper clean up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_changed_while_the_controller_is_down() {
    let mut w = World::new(
        "services-changed-while-down",
        &[],
        &["--load-balancer-orphan-sweep-period=1s"],
    )
    .await;
    let per = 12;
    let mut orphans = 0;
    let mut recreated = 0;
    for r in 0..w.scale {
        let names: Vec<String> = (0..per).map(|i| svc(format!("{r}-{i}"))).collect();
        for name in &names {
            w.cluster.create_lb_service(NS, name).await;
        }
        let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
        w.tally.census(&format!("round {r} before the kill"), &c);
        w.controller.kill9();
        w.tally.kills += 1;
        for (i, name) in names.iter().enumerate() {
            match i % 6 {
                // Untouched.
                0 => {}
                // Deleted: the finalizer keeps it until the controller is back.
                1 => w.cluster.delete_service(NS, name).await,
                // Deleted, and the finalizer removed by hand: gone for good.
                2 => {
                    w.cluster.delete_service(NS, name).await;
                    w.cluster.remove_finalizers(NS, name).await;
                    orphans += 1;
                }
                // Deleted for good and re-created under the same name.
                3 => {
                    w.cluster.delete_service(NS, name).await;
                    w.cluster.remove_finalizers(NS, name).await;
                    let api = w.cluster.services(NS);
                    eventually_within(
                        Duration::from_secs(30),
                        Duration::from_millis(50),
                        &format!("{name} gone"),
                        || async {
                            match api.get_opt(name).await {
                                Ok(None) => Ok(()),
                                other => Err(format!("{other:?}")),
                            }
                        },
                    )
                    .await;
                    w.cluster.create_lb_service(NS, name).await;
                    orphans += 1;
                    recreated += 1;
                }
                // No longer a LoadBalancer; the finalizer stays.
                4 => w.cluster.make_cluster_ip(NS, name).await,
                // The finalizer removed by hand; it still wants its load
                // balancer.
                _ => w.cluster.remove_finalizers(NS, name).await,
            }
        }
        w.controller.restart();
        let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
        w.tally.census(&format!("round {r} after the restart"), &c);
    }
    w.tally.services = per * w.scale + recreated;
    w.tally.extra("orphans", orphans);
    w.finish(&[]).await;
}

/// Load balancers deleted in the cloud behind the controller's back are
/// recreated, with the same address: noticed at the next node change, or
/// when the controller restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_deleted_out_of_band_are_recreated() {
    let mut w = World::new("lbs-deleted-out-of-band", &[], &[]).await;
    let n = 6 * w.scale;
    for i in 0..n {
        w.cluster.create_lb_service(NS, &svc(i)).await;
    }
    let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
    w.tally.census("before", &c);
    let mut nodes = Vec::new();
    let mut recreated = 0;
    let mut same_address = 0;
    for r in 0..2 * w.scale {
        let state = w.provider.state().await;
        let mut ours: Vec<_> = count::lbs_of(&state, World::CLUSTER)
            .into_values()
            .cloned()
            .collect();
        let mut gone = Vec::new();
        for _ in 0..3.min(ours.len()) {
            let lb = ours.swap_remove(w.rng.below(ours.len()));
            let (code, body) = w
                .provider
                .admin("DELETE", &format!("/load-balancers/{}", lb.name), None)
                .await;
            assert_eq!((code, &body["existed"]), (200, &json!(true)), "{body}");
            gone.push(lb);
        }
        if r % 2 == 0 {
            let name = format!("node-{r}");
            w.cluster.register_node(&name).await;
            nodes.push(name);
        } else {
            w.controller.kill9();
            w.tally.kills += 1;
            w.controller.restart();
        }
        let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
        w.tally.census(&format!("round {r}"), &c);
        let state = w.provider.state().await;
        let lbs = count::lbs_of(&state, World::CLUSTER);
        for old in &gone {
            match lbs.get(old.service_uid.as_str()) {
                Some(new) => {
                    recreated += 1;
                    if new.ip == old.ip {
                        same_address += 1;
                    } else {
                        w.tally.details.push(format!(
                            "{} recreated with {} instead of {}",
                            old.name, new.ip, old.ip
                        ));
                    }
                }
                None => w.tally.details.push(format!("{} not recreated", old.name)),
            }
        }
    }
    w.tally.services = n;
    w.tally.extra("recreated", recreated);
    w.tally.extra("same_address", same_address);
    w.finish(&nodes).await;
}

/// SIGSTOP the provider while Services and Nodes come and go; its calls
/// time out on the controller's side (2 s) and are answered late once it
/// is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_sigstop_during_activity() {
    let mut w = World::new(
        "provider-sigstop",
        &[],
        &[
            "--provider-read-timeout=2s",
            "--provider-mutation-timeout=2s",
            "--provider-identity-timeout=1s",
        ],
    )
    .await;
    let mut created = 0;
    let mut nodes = Vec::new();
    for _ in 0..6 {
        w.cluster.create_lb_service(NS, &svc(created)).await;
        created += 1;
    }
    for i in 0..3 {
        let name = format!("node-{i}");
        w.cluster.register_node(&name).await;
        nodes.push(name);
    }
    let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
    w.tally.census("before", &c);
    let mut live: Vec<usize> = (0..created).collect();
    let mut stopped_ms = 0;
    for r in 0..w.scale {
        // Work in flight when it stops.
        for _ in 0..2 {
            w.cluster.create_lb_service(NS, &svc(created)).await;
            live.push(created);
            created += 1;
        }
        w.provider.stop();
        let frozen = tokio::time::Instant::now();
        let pause = w.rng.millis(3000, 5000);
        for _ in 0..3 {
            w.cluster.create_lb_service(NS, &svc(created)).await;
            live.push(created);
            created += 1;
            let j = live.swap_remove(w.rng.below(live.len()));
            w.cluster.delete_service(NS, &svc(j)).await;
            tokio::time::sleep(w.rng.millis(100, 400)).await;
        }
        for i in 0..2 {
            let name = format!("node-{r}-{i}");
            w.cluster.register_node(&name).await;
            nodes.push(name);
        }
        tokio::time::sleep(pause.saturating_sub(frozen.elapsed())).await;
        w.provider.cont();
        stopped_ms += frozen.elapsed().as_millis();
        w.controller.assert_running();
    }
    let left = count::uninitialised(&w.cluster, &nodes, SETTLE).await;
    for n in &left {
        w.tally.details.push(format!("node {n} never initialised"));
    }
    w.tally.services = created;
    w.tally.extra("stops", w.scale);
    w.tally.extra("stopped_ms", stopped_ms);
    w.finish(&nodes).await;
}

/// Services that vanish without a reconciled delete while the controller
/// runs: while it is SIGSTOPped, each loses its finalizer by hand and is
/// deleted (in either order; finalizer first, it wakes to find the Service
/// gone with nothing ever marked for deletion). The same happens without
/// anyone's help when a DELETE races the finalizer's addition: the
/// apiserver answers both with success and removes the Service anyway
/// (kubernetes/kubernetes#77988). Their load balancers must go, as
/// upstream's do (it deletes them from its cache of the Service).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_vanish_without_a_reconciled_delete() {
    let mut w = World::new("finalizer-bypassed", &[], &[]).await;
    let n = 6 * w.scale;
    for i in 0..n {
        w.cluster.create_lb_service(NS, &svc(i)).await;
    }
    let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
    w.tally.census("before", &c);
    let mut live: Vec<usize> = (0..n).collect();
    let mut vanished = 0;
    for _ in 0..w.scale {
        w.controller.proc.signal("-STOP");
        for k in 0..3 {
            let j = live.swap_remove(w.rng.below(live.len()));
            if k % 2 == 0 {
                w.cluster.remove_finalizers(NS, &svc(j)).await;
                w.cluster.delete_service(NS, &svc(j)).await;
            } else {
                w.cluster.delete_service(NS, &svc(j)).await;
                w.cluster.remove_finalizers(NS, &svc(j)).await;
            }
            vanished += 1;
        }
        w.controller.proc.signal("-CONT");
        w.controller.assert_running();
        let (c, _) = count::settle(&w.cluster, &w.provider, SETTLE).await;
        w.tally.census("after", &c);
    }
    w.tally.services = n;
    w.tally.extra("vanished", vanished);
    w.finish(&[]).await;
}

/// Restart the apiserver (SIGTERM, then the same data directory: same CA,
/// tokens, port and objects) while the controller is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restart_during_activity() {
    let mut w = World::new("apiserver-restart", &[], &[]).await;
    w.provider
        .keep_fault("PUT", "/faults/latency", latency("EnsureLoadBalancer", 300))
        .await;
    let mut created = 0;
    let mut live = Vec::new();
    let mut nodes = Vec::new();
    let mut down_ms = 0;
    for r in 0..w.scale {
        for _ in 0..8 {
            w.cluster.create_lb_service(NS, &svc(created)).await;
            live.push(created);
            created += 1;
        }
        for i in 0..2 {
            let name = format!("node-{r}-{i}");
            w.cluster.register_node(&name).await;
            nodes.push(name);
        }
        for _ in 0..2 {
            let j = live.swap_remove(w.rng.below(live.len()));
            w.cluster.delete_service(NS, &svc(j)).await;
        }
        // The controller is still ensuring (300 ms each) when it goes.
        down_ms += w.cluster.restart_apiserver().await.as_millis();
        for _ in 0..2 {
            w.cluster.create_lb_service(NS, &svc(created)).await;
            live.push(created);
            created += 1;
            let j = live.swap_remove(w.rng.below(live.len()));
            w.cluster.delete_service(NS, &svc(j)).await;
        }
        w.controller.assert_running();
    }
    let left = count::uninitialised(&w.cluster, &nodes, SETTLE).await;
    for n in &left {
        w.tally.details.push(format!("node {n} never initialised"));
    }
    w.tally.services = created;
    w.tally.extra("apiserver_restarts", w.scale);
    w.tally.extra("apiserver_down_ms", down_ms);
    w.finish(&nodes).await;
}

/// One cluster's churn in the two-clusters scenario: Services created in
/// the shared namespace and in its own, some deleted; halfway, its
/// controller is killed and, while it is down, one Service is deleted with
/// its finalizer removed by hand (an orphan only its sweeper can find,
/// named like a live Service of the other cluster).
async fn churn(
    c: &Cluster,
    own_ns: &str,
    controller: &mut Controller,
    tally: &mut Tally,
    mut rng: ccm_chaos::Rng,
    range: std::ops::Range<usize>,
) {
    let mut live = Vec::new();
    let middle = range.start + range.len() / 2;
    for i in range {
        c.create_lb_service(NS, &svc(i)).await;
        c.create_lb_service(own_ns, &svc(i)).await;
        tally.services += 2;
        live.push(i);
        if rng.chance(30) {
            let j = live.swap_remove(rng.below(live.len()));
            c.delete_service(NS, &svc(j)).await;
        }
        if i == middle {
            controller.kill9();
            tally.kills += 1;
            let j = live.swap_remove(rng.below(live.len()));
            c.delete_service(NS, &svc(j)).await;
            c.remove_finalizers(NS, &svc(j)).await;
            tokio::time::sleep(rng.millis(200, 1000)).await;
            controller.restart();
        }
        tokio::time::sleep(rng.millis(20, 100)).await;
    }
}

/// Two clusters (two apiservers, two controllers with their own
/// --cluster-name and orphan sweepers) share one provider, with Services of
/// the same namespace and name in both. Both churn at once, each controller
/// is killed and sweeps when it is back; neither may touch the other's load
/// balancers (compared field by field, generation included), nor the
/// seeded foreign ones, and tearing one cluster down leaves the other's as
/// they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_share_one_provider() {
    let scale = ccm_chaos::scale();
    let run = RunDir::new("two-clusters");
    let (mut rng, seed) = ccm_chaos::Rng::seeded();
    let names = ["chaos-a", "chaos-b"];
    let tally = |n: &str| {
        let mut t = Tally::new(&format!("two-clusters/{n}"));
        t.extra("seed", seed);
        t
    };
    let (mut ta, mut tb) = (tally(names[0]), tally(names[1]));
    let own_ns = ["team-a", "team-b"];
    let a = Cluster::start(names[0], run.tmp.path().join("apiserver-a"), &run.logs).await;
    let b = Cluster::start(names[1], run.tmp.path().join("apiserver-b"), &run.logs).await;
    let clusters = [&a, &b];
    for (c, own) in clusters.iter().zip(own_ns) {
        c.namespace(NS).await;
        c.namespace(own).await;
    }
    let provider = Provider::start(run.tmp.path(), &run.logs, &[]).await;
    seed_foreign(&provider, &[(NS, "svc-0"), (NS, "stable-0")]).await;
    let seeded = count::foreign(&provider.state().await, &names);
    let controller = |c: &Cluster| {
        Controller::start(
            &format!("controller-{}", c.name),
            &c.kubeconfig,
            &provider.endpoint,
            &c.name,
            run.logs.join(format!("controller-{}.log", c.name)),
            &["--load-balancer-orphan-sweep-period=1s"],
        )
    };
    let (mut ca, mut cb) = (controller(&a), controller(&b));

    // Stable Services, never changed: their load balancers must stay
    // exactly as they are until the teardown.
    for (c, own) in clusters.iter().zip(own_ns) {
        for i in 0..3 {
            c.create_lb_service(NS, &format!("stable-{i}")).await;
        }
        c.create_lb_service(own, "stable").await;
    }
    for (t, c) in [&mut ta, &mut tb].into_iter().zip(clusters) {
        let (census, _) = count::settle(c, &provider, SETTLE).await;
        t.census("stable", &census);
        t.services += 4;
    }
    let state = provider.state().await;
    let stable: Vec<Vec<_>> = names
        .iter()
        .map(|n| count::lbs_of(&state, n).into_values().cloned().collect())
        .collect();

    let n = 8;
    for round in 0..scale {
        let range = round * n..(round + 1) * n;
        tokio::join!(
            churn(&a, own_ns[0], &mut ca, &mut ta, rng.fork(), range.clone()),
            churn(&b, own_ns[1], &mut cb, &mut tb, rng.fork(), range),
        );
    }
    ca.assert_running();
    cb.assert_running();
    for (t, c) in [&mut ta, &mut tb].into_iter().zip(clusters) {
        let (census, took) = count::settle(c, &provider, SETTLE).await;
        t.census("converged", &census);
        t.extra("settled_ms", took.as_millis());
    }
    // Both converged: neither controller mutates the shared cloud or
    // writes to its cluster while nothing changes.
    for ((t, c), ctl) in [&mut ta, &mut tb].into_iter().zip(clusters).zip([&ca, &cb]) {
        let q = count::quiet(
            c,
            &provider,
            &ctl.proc.log,
            ccm_chaos::CONTROLLER_USER,
            SETTLE,
        )
        .await;
        t.quiet(&q);
    }
    // Each cluster's stable load balancers, as they were: for each
    // controller, the other cluster's are foreign.
    let now = provider.state().await;
    let stable_now = |i: usize| -> Vec<_> {
        count::lbs_of(&now, names[i])
            .into_values()
            .filter(|lb| stable[i].iter().any(|s| s.service_uid == lb.service_uid))
            .cloned()
            .collect()
    };
    ta.foreign(&count::touched(&stable[1], &stable_now(1)));
    tb.foreign(&count::touched(&stable[0], &stable_now(0)));

    // Tearing a cluster down leaves every load balancer of the other as it
    // was (among them the same names in the same namespace).
    for (t, c, other) in [(&mut ta, &a, names[1]), (&mut tb, &b, names[0])] {
        let before: Vec<_> = count::lbs_of(&provider.state().await, other)
            .into_values()
            .cloned()
            .collect();
        let census = count::teardown(c, &provider, SETTLE).await;
        t.census("teardown", &census);
        let after: Vec<_> = count::lbs_of(&provider.state().await, other)
            .into_values()
            .cloned()
            .collect();
        t.foreign(&count::touched(&before, &after));
    }
    let after = count::foreign(&provider.state().await, &names);
    ta.foreign(&count::touched(&seeded, &after));
    tb.foreign(&count::touched(&seeded, &after));
    ca.assert_running();
    cb.assert_running();
    println!("{}", ta.line());
    println!("{}", tb.line());
    let logs = run.logs.display().to_string();
    ta.check(&logs);
    tb.check(&logs);
}

/// Two providers behind one controller (issue 28): each is killed with -9
/// and restarted in turn, again and again, while Nodes of both register
/// and Services of both classes (and of none: the default provider's) are
/// created, deleted and moved from one provider to the other (LoadBalancer
/// class A → ClusterIP → LoadBalancer class B, back to back). No Node may
/// be deleted or asked of the provider that does not own it, no load
/// balancer leaked at either, and the converged system must be quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_providers_killed_in_turn_while_nodes_and_services_churn() {
    use ccm_chaos::hybrid::HybridWorld;
    use ccm_testsupport::hybrid::{CLOUD_CLASS, Side, service};

    let n = 6 * ccm_chaos::scale();
    let mut w = HybridWorld::new("two-providers-kill", n, &[]).await;
    // Calls take a while, so kills of the fake land while some are in
    // flight (the local provider answers at once).
    for (m, ms) in [
        ("EnsureLoadBalancer", 150),
        ("EnsureLoadBalancerDeleted", 150),
        ("InstanceMetadata", 100),
        ("BatchInstances", 100),
    ] {
        w.cloud
            .keep_fault("PUT", "/faults/latency", latency(m, ms))
            .await;
    }
    // Each provider this many times, in turn.
    let kills = 2 * w.scale;
    let mut rng = w.rng.fork();
    let mut krng = w.rng.fork();
    let (cluster, machines) = (&w.cluster, &w.machines);
    let (onprem, cloud) = (&mut w.onprem, &mut w.cloud);
    let mut registered = Vec::new();
    let mut created = 0;
    let mut moves = 0;
    let churn = async {
        let mut live: Vec<(String, Side)> = Vec::new();
        for i in 0..n {
            for side in Side::BOTH {
                let node = machines.node(side, i);
                registered.push((node.metadata.name.clone().unwrap(), side));
                cluster.register(node).await;
            }
            for (side, class) in [(Side::Onprem, None), (Side::Cloud, Some(CLOUD_CLASS))] {
                let name = format!("{}-{created}", side.name());
                cluster.create_service(NS, service(&name, class)).await;
                live.push((name, side));
                created += 1;
            }
            if i % 2 == 1 {
                let (name, side) = live.swap_remove(rng.below(live.len()));
                let to = side.other();
                cluster.change_class(NS, &name, Some(to.class())).await;
                live.push((name, to));
                moves += 1;
            }
            if rng.chance(30) {
                let (name, _) = live.swap_remove(rng.below(live.len()));
                cluster.delete_service(NS, &name).await;
            }
            tokio::time::sleep(rng.millis(100, 400)).await;
        }
    };
    let killer = async {
        for _ in 0..kills {
            tokio::time::sleep(krng.millis(300, 1000)).await;
            cluster.note("kill -9 onprem");
            onprem.kill9();
            tokio::time::sleep(krng.millis(200, 1000)).await;
            onprem.restart().await;
            tokio::time::sleep(krng.millis(300, 1000)).await;
            cluster.note("kill -9 cloud");
            cloud.kill9();
            tokio::time::sleep(krng.millis(200, 1000)).await;
            cloud.restart().await;
        }
    };
    tokio::join!(churn, killer);
    w.registered.extend(registered);
    w.tally.services = created;
    w.tally.kills = 2 * kills;
    w.tally.extra("nodes", 2 * n);
    w.tally.extra("moves", moves);
    w.finish().await;
}
