//! Batched instance questions end to end (contract 1.4.0): 200 Nodes
//! registered at once are initialised in far fewer provider round trips
//! than Nodes, none of them larger than `--provider-batch-size`, and the
//! address refresh right after leaves them alone (the answers were just
//! written): a quiet window containing a refresh pass makes no instance
//! call and no controller write. The fake provider announces
//! CAPABILITY_INSTANCES_BATCH (the Rust SDK serves the batch for it).

use std::time::{Duration, Instant};

use ccm_fake_provider::{FakeConfig, Method};
use ccm_testsupport::steady::kubelet_ready;
use ccm_testsupport::unique_name;
use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};

use crate::common::*;

const NODES: usize = 200;
const BATCH_SIZE: usize = 50;
/// The address refresh's period: long enough for 200 Nodes to converge
/// between two passes.
const PERIOD: Duration = Duration::from_secs(20);

const PASSES: &str = r#"workqueue_work_duration_seconds_count{name="NodeAddresses"} "#;
const BATCH_CALLS: &str = r#"ccm_provider_request_duration_seconds_count{service="Instances",method="BatchInstances",code="OK"} "#;
const METADATA_CALLS: &str = r#"ccm_provider_request_duration_seconds_count{service="Instances",method="InstanceMetadata",code="OK"} "#;
const BATCHES: &str = "ccm_provider_instance_batch_size_count ";
const QUESTIONS: &str = "ccm_provider_instance_batch_size_sum ";

#[tokio::test]
async fn two_hundred_nodes_take_a_few_batches_and_are_not_refreshed_at_once() {
    let port = free_port();
    let size = format!("--provider-batch-size={BATCH_SIZE}");
    let period = format!("--node-status-update-frequency={}s", PERIOD.as_secs());
    let admin = format!("--admin-port={port}");
    let h = Harness::start(
        FakeConfig::default(),
        &[
            "--controllers=cloud-node",
            &size,
            &period,
            &admin,
            "--bind-address=127.0.0.1",
        ],
    )
    .await;
    let metrics = || async move { admin_get(port, "/metrics").await.unwrap_or_default() };
    // The refresh's first pass (at start) is over: every Node below is
    // initialised after it, so the next pass is within a period of each.
    eventually("the first address refresh pass", || async {
        let m = metrics().await;
        if series(&m, PASSES) >= 1.0 {
            Ok(())
        } else {
            Err("no pass yet".to_owned())
        }
    })
    .await;
    let first_pass = Instant::now();

    // Registered at once. (Not Ready yet: a kubelet's status write racing
    // the guarded initialisation patch would make some initialise twice.)
    let names: Vec<String> = (0..NODES)
        .map(|i| unique_name(&format!("batch{i}")))
        .collect();
    futures::stream::iter(&names)
        .for_each_concurrent(50, |name| {
            let h = &h;
            async move {
                h.nodes()
                    .create(&PostParams::default(), &kubelet_node(name))
                    .await
                    .unwrap();
            }
        })
        .await;
    eventually("every Node initialised", || async {
        let done = h.initialised_count(&names).await;
        if done == NODES {
            Ok(())
        } else {
            Err(format!("{done} of {NODES}"))
        }
    })
    .await;
    let converged = Instant::now();
    assert!(
        converged - first_pass < PERIOD - Duration::from_secs(5),
        "converging took {:?}: the window below would not hold",
        converged - first_pass
    );

    // Far fewer round trips than Nodes, none larger than the batch size.
    let m = metrics().await;
    let round_trips = series(&m, BATCH_CALLS);
    eprintln!(
        "{NODES} Nodes initialised in {:?} with {round_trips} BatchInstances calls",
        converged - first_pass
    );
    assert_eq!(
        series(&m, METADATA_CALLS),
        0.0,
        "no single InstanceMetadata"
    );
    assert!(
        round_trips >= (NODES / BATCH_SIZE) as f64 && round_trips <= (NODES / 5) as f64,
        "{round_trips} BatchInstances for {NODES} Nodes"
    );
    assert_eq!(series(&m, BATCHES), round_trips);
    assert_eq!(series(&m, QUESTIONS), NODES as f64, "one question per Node");
    let within_size = format!(r#"ccm_provider_instance_batch_size_bucket{{le="{BATCH_SIZE}.0"}} "#);
    assert_eq!(
        series(&m, &within_size),
        round_trips,
        "every batch at most {BATCH_SIZE}"
    );
    // The fake saw as many: one BatchInstances each (its own batch), or
    // the SDK's fan-out of each batch under the batch's request id.
    let calls = h.fake.calls();
    let native = calls
        .iter()
        .filter(|c| c.method.as_str() == "BatchInstances")
        .count();
    let fanned: std::collections::BTreeSet<&str> = calls
        .iter()
        .filter(|c| c.method == Method::InstanceMetadata)
        .map(|c| c.request_id.as_str())
        .collect();
    assert!(
        native + fanned.len() <= round_trips as usize,
        "{native} batches and {} fanned-out request ids at the fake",
        fanned.len()
    );

    // A window reaching past the next refresh pass but not the one after:
    // that pass runs, and asks about none of the Nodes just initialised.
    // Settled: every initialisation's Synced Event is written (the Events
    // of converging drain behind it).
    eventually("a Synced Event for every Node", || async {
        let synced = Api::<Event>::namespaced(h.admin.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Synced"))
            .filter_map(|e| e.regarding.and_then(|r| r.name))
            .filter(|n| names.contains(n))
            .count();
        if synced == NODES {
            Ok(())
        } else {
            Err(format!("{synced} of {NODES}"))
        }
    })
    .await;
    let heartbeating: Vec<&str> = names.iter().take(10).map(String::as_str).collect();
    for name in &heartbeating {
        kubelet_ready(&h.admin, name).await.unwrap();
    }
    let before = metrics().await;
    let length =
        (first_pass + PERIOD + Duration::from_secs(8)).saturating_duration_since(Instant::now());
    let quiet = h.quiet_window(&heartbeating, length).await;
    let after = metrics().await;
    assert!(
        series(&after, PASSES) > series(&before, PASSES),
        "no refresh pass in the window"
    );
    quiet.assert_quiet(&[]);
    let instance_calls: Vec<&str> = quiet
        .calls
        .iter()
        .map(|c| c.method.as_str())
        .filter(|m| m.starts_with("Instance") || *m == "BatchInstances")
        .collect();
    assert!(instance_calls.is_empty(), "{instance_calls:?}");
    assert_eq!(series(&after, BATCH_CALLS), round_trips);

    // And the quiet was not deafness: the pass after asks about them all,
    // in batches again.
    eventually_within(
        PERIOD + Duration::from_secs(20),
        Duration::from_millis(200),
        "the next refresh asks about every Node",
        || async {
            let m = metrics().await;
            let asked = series(&m, QUESTIONS) - NODES as f64;
            if asked >= NODES as f64 {
                Ok(())
            } else {
                Err(format!("{asked} questions since"))
            }
        },
    )
    .await;
    let m = metrics().await;
    assert_eq!(series(&m, METADATA_CALLS), 0.0);
    assert!(series(&m, BATCH_CALLS) - round_trips <= (NODES / 5) as f64);
    h.stop().await;
}
