//! The per-provider call budget (`--provider-qps`, `--provider-burst`):
//! priority lanes when calls wait for it, and the hold a throttling answer
//! puts on a provider's calls.

use std::time::Duration;

use crate::common::*;
use ccm_fake_provider::{CallOutcome, CallRecord, ErrorInjection, ErrorKind, FakeConfig, Method};
use ccm_testsupport::unique_name;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::PostParams;

/// A backlog of Node initialisations all waiting for a small budget (every
/// Node's worker asks at once): a LoadBalancer Service created meanwhile
/// gets its load balancer before the backlog drains. In arrival order the
/// Service would be served after every Node.
#[tokio::test]
async fn a_new_load_balancer_goes_before_a_backlog_of_node_initialisations() {
    let h = Harness::start(
        FakeConfig::default(),
        &[
            "--controllers=cloud-node,service",
            "--concurrent-node-syncs=64",
            "--provider-qps=4",
            "--provider-burst=1",
            // One Node per BatchInstances call, so the backlog is 24 calls.
            "--provider-batch-size=1",
        ],
    )
    .await;
    let names: Vec<String> = (0..24)
        .map(|i| unique_name(&format!("budget{i}")))
        .collect();
    for n in &names {
        h.register_node(n).await;
    }
    // The backlog is draining (about 6 s of it at 4 calls/s).
    eventually("the first Node initialised", || async {
        match h.initialised_count(&names).await {
            0 => Err("none yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    let services: Api<Service> = Api::namespaced(h.admin.clone(), &h.ns);
    let name = unique_name("budget-lb");
    services
        .create(&PostParams::default(), &lb_service(&name, 80))
        .await
        .unwrap();
    eventually("the Service's load balancer", || async {
        let svc = services.get(&name).await.unwrap();
        match ingress_ips(&svc).is_empty() {
            true => Err(format!("{:?}", svc.status)),
            false => Ok(()),
        }
    })
    .await;
    let waiting = names.len() - h.initialised_count(&names).await;
    assert!(
        waiting > 0,
        "the load balancer came only after every Node's initialisation"
    );
    eventually("every Node initialised", || async {
        match h.initialised_count(&names).await {
            n if n == names.len() => Ok(()),
            n => Err(format!("{n} of {}", names.len())),
        }
    })
    .await;
    // The call log says the same: the Service's load balancer calls went
    // before the last Nodes' metadata (one BatchInstances per Node).
    let calls = h.fake.calls();
    let seq_of = |m: Method| calls.iter().filter(move |c| c.method == m).map(|c| c.seq);
    let ensured = seq_of(Method::EnsureLoadBalancer).min().expect("ensured");
    let metadata_after = seq_of(Method::BatchInstances)
        .filter(|s| *s > ensured)
        .count();
    assert!(
        metadata_after >= names.len() / 2,
        "only {metadata_after} BatchInstances calls after EnsureLoadBalancer #{ensured}"
    );
    h.stop().await;
}

/// A CLOUD_UNAVAILABLE answer with RetryInfo (the fake's injection; QUOTA_
/// EXCEEDED with RetryInfo is held the same way, see the client's unit
/// tests) holds every call to that provider for the delay, even without a
/// budget: a Node registered right after is not asked about until the
/// delay has passed.
#[tokio::test]
async fn a_throttling_answer_holds_the_providers_calls_for_its_delay() {
    let h = Harness::start(FakeConfig::default(), &["--controllers=cloud-node"]).await;
    let delay = Duration::from_secs(3);
    // The whole batch answered so, as a throttled cloud's describe call.
    h.fake.inject_error(
        Method::BatchInstances,
        ErrorInjection::new(ErrorKind::CloudUnavailable, "throttled")
            .retry_after(delay)
            .times(1),
    );
    let first = unique_name("held-a");
    h.register_node(&first).await;
    let throttled: CallRecord = eventually("the throttled call", || async {
        h.fake
            .calls_of(Method::BatchInstances)
            .into_iter()
            .find(|c| matches!(c.outcome, CallOutcome::Error { .. }))
            .ok_or_else(|| format!("{:?}", h.fake.calls()))
    })
    .await;
    let second = unique_name("held-b");
    h.register_node(&second).await;
    let names = [first, second];
    eventually("both Nodes initialised", || async {
        match h.initialised_count(&names).await {
            2 => Ok(()),
            n => Err(format!("{n} of 2")),
        }
    })
    .await;
    // Probes bypass the budget; every other call waited out the hold.
    let after: Vec<CallRecord> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.seq > throttled.seq && c.method != Method::Probe)
        .collect();
    assert!(
        after.len() >= 2,
        "both Nodes' metadata was asked for: {after:?}"
    );
    let held_until = throttled.started_unix_ms + delay.as_millis() as u64;
    for c in &after {
        assert!(
            c.started_unix_ms >= held_until,
            "{} {}ms after the throttling answer, within its {delay:?}",
            c.method,
            c.started_unix_ms - throttled.started_unix_ms
        );
    }
    h.stop().await;
}
