//! Replacing a running upstream cloud-controller-manager (issue 16, item 7;
//! the procedure is docs/replace-upstream.md).
//!
//! The upstream Go CCM (`k8s.io/cloud-provider` v0.36.3 with the in-memory
//! `bench` cloud, `tests/upstream-ccm`, built by
//! `hack/build-upstream-ccm.sh`) holds a Lease. Our `cloud-controller-manager`
//! binary, with only the shipped ClusterRole and leader-election Role,
//! starts on the same Lease with the same timings and stands by; beside it
//! a shadow (`--dry-run-writes`) with the same flags. Then:
//!
//! - while upstream holds the Lease, ours takes neither the Lease nor any
//!   action: a Node registered then is initialised by upstream (the bench
//!   cloud's providerID, instance type and address; field manager
//!   `upstream-ccm`), our fake provider is asked nothing, and ours has no
//!   `leader_election_master_status` series;
//! - the shadow takes no Lease either, asks its own cloud about that Node,
//!   disagrees about its address (its cloud says 10.88.0.1), counts the
//!   status patch it would make and logs it under `node/<name>`, and the
//!   Node keeps upstream's address;
//! - upstream gets SIGTERM (it does not release the Lease: see below); ours
//!   takes the Lease once it has expired, and not before, and initialises
//!   both the Node registered during the gap and one registered after it,
//!   with our fake's answers;
//! - rollback: upstream started again stands by while ours leads; ours gets
//!   SIGTERM, releases the Lease, and upstream takes over at once and
//!   initialises the next Node;
//! - no double writer: the holders follow each other without overlap (ours
//!   wrote its acquireTime after the upstream process had exited), and
//!   every write to the test's Nodes, attributed by its managedFields entry,
//!   lies inside the tenure of a Lease holder of the writer's kind.
//!
//! The two clouds answer differently on purpose (providerID `fake://<name>`,
//! `fake.medium`, 10.0.0.x from upstream's bench cloud; `fake://ccmrs-<name>`,
//! `ccmrs.small`, 10.77.0.x from our fake), so every Node says who
//! initialised it.
//!
//! Finding, from `k8s.io/cloud-provider/app` v0.36.3 and
//! `k8s.io/client-go/tools/leaderelection`: upstream runs
//! `leaderelection.RunOrDie(context.TODO(), …)` without `ReleaseOnCancel`,
//! and the stock `main` passes `wait.NeverStop` and installs no signal
//! handler, so SIGTERM ends the Go process at once and the Lease is left
//! held. A successor, ours or upstream's, waits for it to expire. The test
//! handles a release too, should a future upstream do it. Otherwise the
//! two elections agree: same Lease fields, a successor waits out the
//! holder's stated `leaseDurationSeconds` from when it saw the last change,
//! an empty holder is free at once, `leaseTransitions` grows by one per
//! takeover.

mod evidence;
mod process;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccm_fake_provider::{Address, AddressType, FakeCloud, FakeConfig, InstanceSpec, Method};
use ccm_testsupport::{built_binary, free_port, spawn_tied, unique_name};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client};

use crate::common::{
    ControlPlane, DEADLINE, UNINITIALIZED, admin_get, eventually, eventually_within, has_taint,
    repo,
};

use evidence::{InitialisedBy, initialised_by, sample};
use process::{Proc, lease_flags, upstream_binary};
use watch::{first_holder, holders, tenure, watch_lease, watch_node_writes};

/// The same timings on both sides: short, so the test is quick.
const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(500);
/// Lease renewals a standby must see without taking the Lease: more than
/// a lease duration's worth, so a standby that wrongly took a live Lease
/// after its duration would have done so.
const STANDBY_RENEWALS: usize = (LEASE_DURATION.as_millis() / RETRY.as_millis()) as usize + 1;
const NAMESPACE: &str = "kube-system";
/// The field managers: the test (it registers the Nodes), upstream (its
/// binary's name, from its user agent) and ours (`--controllers=cloud-node`).
const TEST_MANAGER: &str = "handoff-test";
const UPSTREAM_MANAGER: &str = "upstream-ccm";
const OURS_MANAGER: &str = "cloud-node-controller";
/// Our identity is `<POD_NAME>_<random>`.
const OURS_POD: &str = "ours-handoff";
/// Labels the test's Nodes, for the Node watch.
const RUN_LABEL: &str = "ccm-rs.test/upstream-handoff";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_controller_takes_over_from_a_running_upstream_ccm_and_hands_back() {
    // Built first: nothing runs yet that a blocking build could starve.
    let upstream_bin = upstream_binary();
    let ours_bin = built_binary("cloud-controller-manager", "cloud-controller-manager");

    // Exclusive: it runs controllers. Released last, after both processes
    // are killed.
    let control_plane = ControlPlane::exclusive().await;
    let env = control_plane.env();
    let admin = env.admin_client().await.unwrap();
    let ns = env.namespace(&admin, "handoff").await.unwrap();
    let lease = unique_name("ccm-handoff");
    let run = unique_name("run");
    let dir = tempfile::tempdir().unwrap();

    // Ours: a ServiceAccount with the shipped ClusterRole and the shipped
    // leader-election Role, its Lease name changed to this test's.
    let ours_kubeconfig = dir.path().join("ours.kubeconfig");
    crate::common::process_identity(env, &admin, &ns, Some(&lease), &ours_kubeconfig).await;

    // The Nodes, named now so our fake knows their instances: each answer
    // differs from the bench cloud's.
    let [n1, n2, n3, n4] = ["n1", "n2", "n3", "n4"].map(|n| unique_name(&format!("handoff-{n}")));
    let instances = [&n1, &n2, &n3, &n4]
        .iter()
        .enumerate()
        .map(|(i, n)| InstanceSpec {
            id: Some(format!("ccmrs-{n}")),
            addresses: vec![
                Address {
                    kind: AddressType::InternalIp,
                    address: format!("10.77.0.{}", i + 1),
                },
                Address {
                    kind: AddressType::Hostname,
                    address: n.to_string(),
                },
            ],
            ..InstanceSpec::named(n.as_str())
        })
        .collect();
    let fake = FakeCloud::new(FakeConfig {
        auto_create_instances: false,
        zone: "ccmrs-zone-b".into(),
        region: "ccmrs-region".into(),
        instance_type: "ccmrs.small".into(),
        instances,
        ..Default::default()
    })
    .unwrap();
    let endpoint = format!("unix://{}/provider.sock", dir.path().display());
    tokio::spawn(fake.clone().serve(endpoint.clone(), std::future::pending()));
    // The shadow's cloud knows n1 by upstream's providerID but gives it
    // another address: a disagreement the shadow must show and not write.
    let shadow_fake = FakeCloud::new(FakeConfig {
        auto_create_instances: false,
        instances: vec![InstanceSpec {
            id: Some(n1.clone()),
            addresses: vec![
                Address {
                    kind: AddressType::InternalIp,
                    address: "10.88.0.1".into(),
                },
                Address {
                    kind: AddressType::Hostname,
                    address: n1.clone(),
                },
            ],
            ..InstanceSpec::named(n1.as_str())
        }],
        ..Default::default()
    })
    .unwrap();
    let shadow_endpoint = format!("unix://{}/shadow.sock", dir.path().display());
    tokio::spawn(
        shadow_fake
            .clone()
            .serve(shadow_endpoint.clone(), std::future::pending()),
    );

    let register = |name: String| {
        let admin = admin.clone();
        let run = run.clone();
        async move {
            let mut node = crate::common::kubelet_node(&name);
            node.metadata
                .labels
                .get_or_insert_default()
                .insert(RUN_LABEL.into(), run);
            let pp = PostParams {
                field_manager: Some(TEST_MANAGER.into()),
                ..Default::default()
            };
            Api::<Node>::all(admin).create(&pp, &node).await.unwrap();
            Instant::now()
        }
    };
    let nodes: Api<Node> = Api::all(admin.clone());
    let wait_initialised = |name: String| {
        let nodes = nodes.clone();
        async move {
            eventually(&format!("{name} to be initialised"), || async {
                let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
                initialised_by(&n).map(|by| (by, Instant::now()))
            })
            .await
        }
    };

    // Both watches run before anything acts.
    let (leases, lease_watch_up) = watch_lease(admin.clone(), &lease);
    let (writes, node_watch_up) = watch_node_writes(admin.clone(), &run);
    eventually("the Lease and Node watches to list", || async {
        if lease_watch_up.load(Ordering::SeqCst) && node_watch_up.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    let holder = || {
        leases
            .lock()
            .unwrap()
            .last()
            .map(|s| s.holder.clone())
            .unwrap_or_default()
    };

    let mut upstream_args: Vec<String> = vec![
        "--cloud-provider=bench".into(),
        format!("--kubeconfig={}", env.kubeconfig().display()),
        "--leader-elect=true".into(),
        "--controllers=cloud-node".into(),
        "--configure-cloud-routes=false".into(),
        "--secure-port=0".into(),
    ];
    upstream_args.extend(lease_flags(&lease));

    // 1. Upstream holds the Lease.
    let mut upstream = Proc::spawn(
        "upstream-ccm",
        &upstream_bin,
        &upstream_args,
        &[],
        dir.path(),
    );
    let up1 = first_holder(&leases, "upstream to hold the Lease", |h| !h.is_empty())
        .await
        .holder;
    assert!(!up1.starts_with(&format!("{OURS_POD}_")), "{up1}");

    // 2. Ours starts on the same Lease and stands by.
    let admin_port = free_port();
    let mut ours_args: Vec<String> = vec![
        format!("--kubeconfig={}", ours_kubeconfig.display()),
        format!("--provider-endpoint={endpoint}"),
        "--controllers=cloud-node".into(),
        // One Node per batch: each call names its Node (request id).
        "--provider-batch-size=1".into(),
        "--leader-elect=true".into(),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--admin-port={admin_port}"),
    ];
    ours_args.extend(lease_flags(&lease));
    let mut ours = Proc::spawn(
        "ours",
        &ours_bin,
        &ours_args,
        &[("POD_NAME", OURS_POD), ("RUST_LOG", "info")],
        dir.path(),
    );
    // Beside them, a shadow (--dry-run-writes) with the same Lease flags:
    // it takes no Lease, decides, and writes nothing.
    let shadow_port = free_port();
    let mut shadow_args: Vec<String> = ours_args
        .iter()
        .filter(|a| !a.starts_with("--provider-endpoint=") && !a.starts_with("--admin-port="))
        .cloned()
        .collect();
    shadow_args.extend([
        format!("--provider-endpoint={shadow_endpoint}"),
        format!("--admin-port={shadow_port}"),
        "--dry-run-writes".into(),
        // Its address refresh every second rather than every 5 minutes.
        "--node-status-update-frequency=1s".into(),
    ]);
    let mut shadow = Proc::spawn(
        "shadow",
        &ours_bin,
        &shadow_args,
        &[("POD_NAME", "shadow-handoff"), ("RUST_LOG", "info")],
        dir.path(),
    );
    let standing_by = ours.logged("attempting to acquire leader lease").await;
    shadow.logged("node cache synced").await;
    let master_status = format!("leader_election_master_status{{name=\"{lease}\"}}");
    let metrics =
        || async { eventually("our /metrics", || admin_get(admin_port, "/metrics")).await };

    // 3. A Node registered now is upstream's to initialise.
    register(n1.clone()).await;
    let (by, _) = wait_initialised(n1.clone()).await;
    assert_eq!(by, InitialisedBy::Upstream);

    // 4. Ours watches upstream renew for more than a lease duration and
    // neither takes the Lease nor acts.
    let renewals = eventually(
        &format!("{STANDBY_RENEWALS} renewals by upstream while ours stands by"),
        || async {
            let seen = leases.lock().unwrap().clone();
            let after: Vec<_> = seen.iter().filter(|s| s.at > standing_by).collect();
            assert!(
                after.iter().all(|s| s.holder == up1),
                "the Lease changed hands while upstream was running: {after:#?}\nours:\n{}",
                ours.log()
            );
            if after.len() >= STANDBY_RENEWALS {
                Ok(after.len())
            } else {
                Err(format!("{} so far", after.len()))
            }
        },
    )
    .await;
    let log = ours.log();
    assert!(
        !log.contains("successfully acquired lease"),
        "ours took the Lease:\n{log}"
    );
    let calls = fake.calls();
    assert!(
        calls.iter().all(|c| c.method == Method::Probe),
        "our provider was called while upstream led: {calls:#?}"
    );
    let m = metrics().await;
    // A standby has no series for the Lease (as client-go's standby).
    assert_eq!(sample(&m, &master_status), None, "standby:\n{m}");
    let standby_uninitialized = sample(&m, "ccm_uninitialized_nodes");
    let n1_node = nodes.get(&n1).await.unwrap();
    let n1_managers: Vec<_> = n1_node
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| e.manager.clone())
        .collect();
    assert!(
        n1_managers
            .iter()
            .all(|m| m == TEST_MANAGER || m == UPSTREAM_MANAGER),
        "{n1_managers:?}"
    );
    assert!(n1_managers.iter().any(|m| m == UPSTREAM_MANAGER));

    // The shadow disagreed about n1's address, said so, and wrote nothing.
    let dry_status =
        "ccm_dry_run_writes_total{target=\"kubernetes\",operation=\"PATCH nodes/status\"}";
    let shadow_writes = eventually("the shadow to count a dry-run address write", || async {
        let m = admin_get(shadow_port, "/metrics").await?;
        sample(&m, dry_status)
            .filter(|v| *v >= 1.0)
            .ok_or_else(|| format!("{m}\nshadow log:\n{}", shadow.log()))
    })
    .await;
    let shadow_log = shadow.log();
    assert!(
        shadow_log.lines().any(|l| l
            .contains("dry run: Kubernetes write sent as a server-side dry run")
            && l.contains(&format!("node/{n1}"))),
        "{shadow_log}"
    );
    assert!(
        shadow_fake
            .calls_of(Method::BatchInstances)
            .iter()
            .any(|c| c.request_id == format!("node/{n1}")),
        "{:#?}",
        shadow_fake.calls()
    );
    assert!(
        !shadow_log.contains("attempting to acquire leader lease")
            && !shadow_log.contains("successfully acquired lease"),
        "{shadow_log}"
    );
    let n1_node = nodes.get(&n1).await.unwrap();
    assert_eq!(initialised_by(&n1_node), Ok(InitialisedBy::Upstream));
    shadow.sigterm();
    let (shadow_status, _) = shadow.exited().await;
    assert_eq!(shadow_status.code(), Some(0), "{}", shadow.log());

    // 5. Upstream stops; a Node registers during the gap.
    let terminated = Instant::now();
    upstream.sigterm();
    let n2_registered = register(n2.clone()).await;
    let (up1_status, up1_gone) = upstream.exited().await;
    let acquired = first_holder(&leases, "ours to take the Lease", |h| {
        h.starts_with(&format!("{OURS_POD}_"))
    })
    .await;
    let gap = acquired.at.duration_since(terminated);
    let ours_id = acquired.holder.clone();
    let seen = leases.lock().unwrap().clone();
    let upstream_last = seen
        .iter()
        .rev()
        .find(|s| s.holder == up1)
        .cloned()
        .unwrap();
    let released = seen
        .iter()
        .any(|s| s.rv > upstream_last.rv && s.rv < acquired.rv && s.holder.is_empty());
    let renew_to_acquire_ms =
        acquired.acquire.unwrap().as_millisecond() - upstream_last.renew.unwrap().as_millisecond();
    // Never both: ours wrote its acquisition after the upstream process
    // was gone (same machine, same clock).
    assert!(
        acquired.acquire.unwrap() > up1_gone,
        "ours acquired at {:?}, upstream exited at {up1_gone}",
        acquired.acquire
    );
    assert_eq!(
        acquired.transitions,
        upstream_last.transitions + 1,
        "a takeover counts one transition, as client-go counts it"
    );
    if released {
        assert!(
            gap <= RETRY * 3 + Duration::from_secs(1),
            "upstream released the Lease, yet ours took {gap:?}"
        );
    } else {
        // Ours only takes an unreleased Lease once it has seen it
        // unchanged for the lease duration: at least that long after the
        // last renewal, at most a poll or two later.
        assert!(
            renew_to_acquire_ms >= LEASE_DURATION.as_millis() as i64,
            "ours took the Lease {renew_to_acquire_ms} ms after upstream's last renewal, before it expired"
        );
        assert!(
            gap <= LEASE_DURATION + RETRY * 2 + Duration::from_secs(2),
            "takeover after upstream's SIGTERM took {gap:?}"
        );
    }

    // 6. No gap in service: the Node registered during the gap, and one
    // registered now, are ours to initialise.
    let (by, n2_done) = wait_initialised(n2.clone()).await;
    assert_eq!(by, InitialisedBy::Ours);
    let n3_registered = register(n3.clone()).await;
    let (by, n3_done) = wait_initialised(n3.clone()).await;
    assert_eq!(by, InitialisedBy::Ours);
    let n3_latency = n3_done.duration_since(n3_registered);
    assert!(
        n3_latency < LEASE_DURATION,
        "a Node registered after the takeover waited {n3_latency:?}"
    );
    let m = metrics().await;
    assert_eq!(sample(&m, &master_status), Some(1.0), "leader:\n{m}");
    assert_eq!(
        sample(&m, "ccm_uninitialized_nodes"),
        Some(0.0),
        "leader:\n{m}"
    );
    assert_eq!(
        holder(),
        ours_id,
        "ours still leads after initialising the Nodes"
    );

    // 7. Rollback: upstream again, standing by while ours leads.
    let upstream2 = Proc::spawn(
        "upstream-ccm-2",
        &upstream_bin,
        &upstream_args,
        &[],
        dir.path(),
    );
    let up2_standing_by = upstream2.logged("Attempting to acquire leader lease").await;
    eventually(
        &format!("{STANDBY_RENEWALS} renewals by ours while upstream stands by"),
        || async {
            let seen = leases.lock().unwrap().clone();
            let after: Vec<_> = seen.iter().filter(|s| s.at > up2_standing_by).collect();
            assert!(
                after.iter().all(|s| s.holder == ours_id),
                "the Lease changed hands while ours was running: {after:#?}\nupstream:\n{}",
                upstream2.log()
            );
            if after.len() >= STANDBY_RENEWALS {
                Ok(())
            } else {
                Err(format!("{} so far", after.len()))
            }
        },
    )
    .await;
    assert!(
        !upstream2.log().contains("Successfully acquired lease"),
        "{}",
        upstream2.log()
    );
    let terminated2 = Instant::now();
    ours.sigterm();
    let up2 = first_holder(&leases, "upstream to take the Lease back", |h| {
        !h.is_empty() && h != up1 && h != ours_id
    })
    .await;
    let gap_back = up2.at.duration_since(terminated2);
    let (ours_status, _) = ours.exited().await;
    assert_eq!(ours_status.code(), Some(0), "{}", ours.log());
    assert!(ours.log().contains("released the lease"), "{}", ours.log());
    assert!(
        gap_back <= RETRY * 3 + Duration::from_secs(1),
        "upstream took the released Lease after {gap_back:?}"
    );
    register(n4.clone()).await;
    let (by, _) = wait_initialised(n4.clone()).await;
    assert_eq!(by, InitialisedBy::Upstream);

    // 8. No double writer: the holders follow each other, and every write
    // to the test's Nodes falls in its writer's tenure.
    let seen = leases.lock().unwrap().clone();
    assert_eq!(
        holders(&seen),
        vec![up1.clone(), ours_id.clone(), up2.holder.clone()],
        "{seen:#?}"
    );
    let t_up1 = tenure(&seen, &up1);
    let t_ours = tenure(&seen, &ours_id);
    let t_up2 = tenure(&seen, &up2.holder);
    let within = |rv: u64, (from, to): (u64, u64)| from < rv && rv < to;
    let writes = eventually("the Node watch to show n4's initialisation", || async {
        let all = writes.lock().unwrap().clone();
        if all
            .iter()
            .any(|w| w.node == n4 && w.manager == UPSTREAM_MANAGER)
        {
            Ok(all)
        } else {
            Err(format!("{all:#?}"))
        }
    })
    .await;
    let mut first_ours = None;
    for w in &writes {
        match w.manager.as_str() {
            TEST_MANAGER => {}
            UPSTREAM_MANAGER => assert!(
                within(w.rv, t_up1) || within(w.rv, t_up2),
                "upstream wrote {w:?} outside its tenures {t_up1:?}, {t_up2:?}; Lease: {seen:#?}"
            ),
            OURS_MANAGER => {
                assert!(
                    within(w.rv, t_ours),
                    "ours wrote {w:?} outside its tenure {t_ours:?}; Lease: {seen:#?}"
                );
                first_ours = Some(first_ours.map_or(w.rv, |f: u64| f.min(w.rv)));
            }
            other => panic!("an unexpected writer {other:?}: {w:?}"),
        }
    }
    let first_ours = first_ours.expect("ours wrote nothing");
    for (node, by) in [
        (&n1, UPSTREAM_MANAGER),
        (&n2, OURS_MANAGER),
        (&n3, OURS_MANAGER),
        (&n4, UPSTREAM_MANAGER),
    ] {
        assert!(
            writes.iter().any(|w| &w.node == node && w.manager == by),
            "no write by {by} to {node}: {writes:#?}"
        );
    }
    // Initialisation is two writes, the addresses (status) and then the
    // providerID, labels and taints.
    for sub in ["status", ""] {
        assert!(
            writes
                .iter()
                .any(|w| w.node == n2 && w.manager == OURS_MANAGER && w.subresource == sub),
            "no {sub:?} write by ours to {n2}: {writes:#?}"
        );
    }
    // Ours wrote nothing to the Node upstream initialised (our fake does
    // not know upstream's providerID for it).
    assert!(
        !writes
            .iter()
            .any(|w| w.node == n1 && w.manager == OURS_MANAGER),
        "{writes:#?}"
    );

    println!(
        "upstream handoff (lease {LEASE_DURATION:?}, renew deadline {RENEW_DEADLINE:?}, retry {RETRY:?}):\n\
         - ours stood by through {renewals} upstream renewals (its ccm_uninitialized_nodes: {standby_uninitialized:?}); upstream initialised {n1}\n\
         - the shadow beside them took no Lease and counted {shadow_writes} dry-run PATCH nodes/status (its cloud disagrees on {n1}'s address); {n1} kept upstream's\n\
         - upstream SIGTERM: {up1_status}, Lease released: {released}\n\
         - takeover gap: {gap:?} from SIGTERM to ours holding the Lease (watch); {renew_to_acquire_ms} ms from upstream's last renewTime to our acquireTime\n\
         - the Node registered during the gap was initialised {:?} after it registered; one registered after the takeover in {n3_latency:?}\n\
         - Lease rv {} (ours acquired) < rv {first_ours} (our first Node write); tenures up1 {t_up1:?}, ours {t_ours:?}, up2 {t_up2:?}\n\
         - rollback: ours SIGTERM -> released, upstream holding again after {gap_back:?}",
        n2_done.duration_since(n2_registered),
        acquired.rv,
    );
    drop(upstream2);
}
