//! cloud-node and cloud-node-lifecycle controllers end to end: the real
//! kube-apiserver, the controller running with only the ClusterRole it ships
//! (deploy/base/clusterrole.yaml), and the fake provider over a Unix socket.
//!
//! The controllers act on every Node of the cluster, so the scenarios in this
//! file run one at a time (they share this process's control plane).

use std::time::Duration;

use ccm_fake_provider::{ErrorInjection, ErrorKind, FakeCloud, FakeConfig, Method};
use ccm_testsupport::unique_name;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event as WatchEvent};
use serde_json::json;
use tokio::sync::oneshot;

use crate::common::*;

#[tokio::test]
async fn tainted_node_is_initialised_in_two_writes() {
    let h = Harness::start(single_calls(), &[]).await;
    let name = unique_name("init");

    // Count every write to this Node through a watch started before it exists.
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watcher::watcher(h.nodes(), cfg).boxed();
    while !matches!(
        changes.try_next().await.unwrap(),
        Some(WatchEvent::InitDone)
    ) {}
    h.register_node(&name).await;

    let mut versions = Vec::new();
    let node = tokio::time::timeout(DEADLINE, async {
        loop {
            match changes.try_next().await.unwrap() {
                Some(WatchEvent::Apply(n)) => {
                    versions.push(n.metadata.resource_version.clone().unwrap());
                    if !has_taint(&n, UNINITIALIZED) {
                        return n;
                    }
                }
                Some(_) => {}
                None => panic!("watch ended"),
            }
        }
    })
    .await
    .expect("node initialised");

    let instance = h
        .fake
        .instances()
        .into_iter()
        .find(|i| i.name == name)
        .unwrap();
    // Provider calls are named after their Node (others' Nodes may be in
    // the shared apiserver too).
    let calls = h.fake.calls_of(Method::InstanceMetadata);
    assert!(
        calls.iter().any(|c| c.request_id == format!("node/{name}")),
        "{calls:?}"
    );
    assert!(
        calls.iter().all(|c| c.request_id.starts_with("node/")),
        "{calls:?}"
    );
    let spec = node.spec.clone().unwrap();
    assert_eq!(
        spec.provider_id.as_deref(),
        Some(instance.provider_id.as_str())
    );
    let labels = node.metadata.labels.clone().unwrap();
    for (k, v) in [
        ("topology.kubernetes.io/zone", "fake-zone-a"),
        ("failure-domain.beta.kubernetes.io/zone", "fake-zone-a"),
        ("topology.kubernetes.io/region", "fake-region"),
        ("failure-domain.beta.kubernetes.io/region", "fake-region"),
        ("node.kubernetes.io/instance-type", "fake.medium"),
        ("beta.kubernetes.io/instance-type", "fake.medium"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}");
    }
    let addresses: Vec<(String, String)> = node
        .status
        .clone()
        .unwrap()
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    let want: Vec<(String, String)> = instance
        .addresses
        .iter()
        .map(|a| {
            (
                serde_json::to_value(a.kind)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned(),
                a.address.clone(),
            )
        })
        .collect();
    assert_eq!(addresses, want);
    // The creation, then exactly two writes: addresses, then spec+labels.
    assert_eq!(versions.len(), 3, "resourceVersions seen: {versions:?}");
    // The not-ready taint the apiserver added is left alone.
    assert!(has_taint(&node, "node.kubernetes.io/not-ready"));

    wait_until("a Synced event", || async {
        !events_for(&h.admin, &name, "Synced").await.is_empty()
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn unknown_instance_keeps_the_taint_until_the_cloud_knows_it() {
    // Only the node controller: the lifecycle controller would (rightly)
    // delete a NotReady node whose instance does not exist.
    let h = Harness::start(
        FakeConfig {
            native_batch: false,
            auto_create_instances: false,
            ..Default::default()
        },
        &["--controllers=cloud-node"],
    )
    .await;
    let name = unique_name("late");
    h.register_node(&name).await;

    // The provider is asked and says NOT_FOUND: the node stays tainted.
    wait_until("the provider asked", || async {
        !h.fake.calls_of(Method::InstanceMetadata).is_empty()
    })
    .await;
    let n = h.nodes().get(&name).await.unwrap();
    assert!(has_taint(&n, UNINITIALIZED));
    assert!(n.spec.unwrap().provider_id.is_none());

    // Once the instance exists, the retry initialises the node.
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&name))
        .unwrap();
    h.wait_for(&name, "initialised", |n| {
        n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn lifecycle_taints_shut_down_nodes_and_deletes_only_on_explicit_not_exists() {
    let h = Harness::start(single_calls(), &["--controllers=cloud-node-lifecycle"]).await;
    let name = unique_name("life");
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&name))
        .unwrap();
    h.register_node(&name).await;

    // A Ready node is never tainted, even when the cloud says its instance
    // is shut down. Proof that a lifecycle pass saw it Ready: a witness Node,
    // created after ours was Ready, gets tainted in that same pass.
    h.set_ready(&name, "True").await;
    h.fake.shutdown_instance(&name).unwrap();
    let witness = unique_name("witness");
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&witness))
        .unwrap();
    h.fake.shutdown_instance(&witness).unwrap();
    h.register_node(&witness).await;
    h.set_ready(&witness, "False").await;
    h.wait_for(&witness, "witness tainted", |n| {
        n.is_some_and(|n| has_taint(n, SHUTDOWN))
    })
    .await;
    assert!(!has_taint(&h.nodes().get(&name).await.unwrap(), SHUTDOWN));

    // NotReady and shut down: tainted. Ready again: untainted.
    h.set_ready(&name, "False").await;
    h.wait_for(&name, "shutdown taint", |n| {
        n.is_some_and(|n| has_taint(n, SHUTDOWN))
    })
    .await;
    h.fake.start_instance(&name).unwrap();
    h.set_ready(&name, "True").await;
    h.wait_for(&name, "shutdown taint removed", |n| {
        n.is_some_and(|n| !has_taint(n, SHUTDOWN))
    })
    .await;

    // NotReady and the provider failing: never deleted, however often asked.
    h.set_ready(&name, "False").await;
    h.fake.inject_error(
        Method::InstanceExists,
        ErrorInjection::new(ErrorKind::CloudUnavailable, "cloud API down"),
    );
    h.fake.remove_instance(&name);
    eventually("five failed InstanceExists calls", || async {
        let failed = h
            .fake
            .calls_of(Method::InstanceExists)
            .into_iter()
            .filter(|c| c.outcome != ccm_fake_provider::CallOutcome::Ok)
            .count();
        if failed >= 5 {
            Ok(())
        } else {
            Err(format!("{failed} failed calls"))
        }
    })
    .await;
    assert!(
        h.nodes().get_opt(&name).await.unwrap().is_some(),
        "errors delete nothing"
    );

    // The provider recovers and says NOT_EXISTS: deleted, with an event.
    h.fake.clear_faults();
    h.wait_for(&name, "deleted", |n| n.is_none()).await;
    // Events are published off the reconcile path: wait for it, do not race it.
    wait_for_event(&h.admin, &name, "DeletingNode").await;
    h.stop().await;
}

async fn wait_for_calls(
    fake: &FakeCloud,
    method: Method,
    n: usize,
    pred: impl Fn(&ccm_fake_provider::CallRecord) -> bool,
) {
    eventually(&format!("{n} {method:?} calls"), || async {
        match fake.calls_of(method).iter().filter(|c| pred(c)).count() {
            seen if seen >= n => Ok(()),
            seen => Err(format!("{seen} calls")),
        }
    })
    .await
}

async fn wait_for_event(admin: &Client, node: &str, reason: &str) -> Event {
    eventually(&format!("a {reason} event for {node}"), || async {
        events_for(admin, node, reason)
            .await
            .into_iter()
            .next()
            .ok_or_else(|| "none".to_owned())
    })
    .await
}

#[tokio::test]
async fn provided_node_ip_mismatch_keeps_the_taint_until_it_matches() {
    let h = Harness::start(FakeConfig::default(), &["--controllers=cloud-node"]).await;
    let name = unique_name("nodeip");
    let mut node = kubelet_node(&name);
    node.metadata.annotations = Some(
        [(
            "alpha.kubernetes.io/provided-node-ip".to_string(),
            "10.255.255.1".to_string(),
        )]
        .into(),
    );
    h.nodes()
        .create(&PostParams::default(), &node)
        .await
        .unwrap();

    let event = wait_for_event(&h.admin, &name, "InitializationBlocked").await;
    let note = event.note.unwrap_or_default();
    assert!(note.contains("10.255.255.1"), "{note}");
    let n = h.nodes().get(&name).await.unwrap();
    assert!(has_taint(&n, UNINITIALIZED), "taint kept");
    assert!(n.spec.unwrap().provider_id.is_none(), "nothing written");

    // The kubelet's IP now matches the instance's: initialised, that IP first.
    let ip = h
        .fake
        .instances()
        .into_iter()
        .find(|i| i.name == name)
        .unwrap()
        .addresses
        .into_iter()
        .find(|a| a.kind == ccm_fake_provider::AddressType::InternalIp)
        .unwrap()
        .address;
    h.nodes()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"alpha.kubernetes.io/provided-node-ip": ip}}}),
            ),
        )
        .await
        .unwrap();
    let n = h
        .wait_for(&name, "initialised", |n| {
            n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
        })
        .await
        .unwrap();
    assert_eq!(n.status.unwrap().addresses.unwrap()[0].address, ip);
    h.stop().await;
}

#[tokio::test]
async fn addresses_are_refreshed_when_the_cloud_changes_them() {
    let h = Harness::start(
        FakeConfig::default(),
        &[
            "--controllers=cloud-node",
            "--node-status-update-frequency=300ms",
        ],
    )
    .await;
    let name = unique_name("refresh");
    h.register_node(&name).await;
    h.wait_for(&name, "initialised", |n| {
        n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
    })
    .await;

    let mut spec = ccm_fake_provider::InstanceSpec::named(&name);
    spec.addresses = vec![ccm_fake_provider::Address {
        kind: ccm_fake_provider::AddressType::InternalIp,
        address: "10.77.0.7".into(),
    }];
    h.fake.add_instance(spec).unwrap();
    let n = h
        .wait_for(&name, "new address", |n| {
            n.and_then(|n| n.status.as_ref())
                .and_then(|s| s.addresses.as_ref())
                .is_some_and(|a| a.iter().any(|a| a.address == "10.77.0.7"))
        })
        .await
        .unwrap();
    // The old InternalIP is gone; the cloud now reports no Hostname, so the
    // Node's existing Hostname address is kept (upstream behaviour).
    let types: Vec<(String, String)> = n
        .status
        .unwrap()
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(types.len(), 2, "{types:?}");
    assert_eq!(
        types[0],
        ("InternalIP".to_string(), "10.77.0.7".to_string())
    );
    assert_eq!(types[1].0, "Hostname");
    h.stop().await;
}

/// A provider that breaks the contract: InstanceExists answers UNSPECIFIED
/// (which a bool-based controller would read as "gone") and InstanceMetadata
/// a zone Kubernetes would reject as a label value.
mod unspecified {
    use ccm_provider_sdk::proto::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tonic::{Request, Response, Status};

    #[derive(Clone, Default)]
    pub struct Provider(pub Arc<AtomicUsize>);

    /// Its identity: the fake's providerID scheme, instances only.
    pub fn identity() -> ccm_testsupport::raw::RawIdentity {
        let mut id =
            ccm_testsupport::raw::RawIdentity::new("unspecified", &[Capability::Instances]);
        id.info.provider_id_scheme = "fake".into();
        id
    }

    #[tonic::async_trait]
    impl instances_service_server::InstancesService for Provider {
        async fn instance_exists(
            &self,
            _: Request<InstanceExistsRequest>,
        ) -> Result<Response<InstanceExistsResponse>, Status> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Response::new(InstanceExistsResponse { existence: 0 }))
        }
        async fn instance_shutdown(
            &self,
            _: Request<InstanceShutdownRequest>,
        ) -> Result<Response<InstanceShutdownResponse>, Status> {
            Err(Status::internal("unused"))
        }
        async fn instance_metadata(
            &self,
            _: Request<InstanceMetadataRequest>,
        ) -> Result<Response<InstanceMetadataResponse>, Status> {
            // A label value Kubernetes would reject.
            Ok(Response::new(InstanceMetadataResponse {
                metadata: Some(InstanceMetadata {
                    provider_id: "fake://bad-1".into(),
                    zone: "not a valid label value!".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }))
        }
        async fn batch_instances(
            &self,
            _: Request<BatchInstancesRequest>,
        ) -> Result<Response<BatchInstancesResponse>, Status> {
            Err(Status::unimplemented("not announced"))
        }
    }
}

/// Stops the fake and serves the raw `unspecified::Provider` on its socket;
/// the returned sender stops it.
async fn replace_provider_with_raw(
    h: &mut Harness,
    bad: unspecified::Provider,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    h.stop_provider();
    let path = h.endpoint.trim_start_matches("unix://").to_owned();
    wait_until("the fake's socket gone", || async {
        !std::path::Path::new(&path).exists()
    })
    .await;
    let listener = ccm_provider_sdk::bind_socket(std::path::Path::new(&path), 0o600)
        .await
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(unspecified::identity().server())
            .add_service(
                ccm_provider_sdk::proto::instances_service_server::InstancesServiceServer::new(bad),
            )
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            ),
    );
    (stop, server)
}

#[tokio::test]
async fn no_deletion_on_timeouts_unspecified_answers_or_a_dead_provider() {
    let mut h = Harness::start(
        single_calls(),
        &[
            "--controllers=cloud-node-lifecycle",
            "--provider-read-timeout=200ms",
        ],
    )
    .await;
    let name = unique_name("uncertain");
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&name))
        .unwrap();
    h.register_node(&name).await;
    h.set_ready(&name, "False").await;
    // A correct, prompt answer would now be NOT_EXISTS.
    h.fake.remove_instance(&name);

    // 1. The provider is too slow: every call times out.
    h.fake
        .set_latency(Method::InstanceExists, Duration::from_secs(2));
    wait_for_calls(&h.fake, Method::InstanceExists, 3, |c| {
        c.outcome == ccm_fake_provider::CallOutcome::Cancelled
    })
    .await;
    assert!(
        h.nodes().get_opt(&name).await.unwrap().is_some(),
        "timeouts delete nothing"
    );

    // 2. The provider answers UNSPECIFIED.
    let bad = unspecified::Provider::default();
    let (stop_bad, bad_server) = replace_provider_with_raw(&mut h, bad.clone()).await;
    let path = h.endpoint.trim_start_matches("unix://").to_owned();
    wait_until("the controller reaching the new provider", || async {
        bad.0.load(std::sync::atomic::Ordering::SeqCst) >= 3
    })
    .await;
    assert!(
        h.nodes().get_opt(&name).await.unwrap().is_some(),
        "UNSPECIFIED deletes nothing"
    );

    // 3. No provider at all. Absence of action needs a window: ten monitor
    // periods with the socket gone.
    let _ = stop_bad.send(());
    bad_server.await.unwrap().unwrap();
    let _ = std::fs::remove_file(&path);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        h.nodes().get_opt(&name).await.unwrap().is_some(),
        "a dead provider deletes nothing"
    );

    // The same setup with a provider that answers NOT_EXISTS does delete:
    // the three checks above could have failed.
    let fake = FakeCloud::new(FakeConfig {
        auto_create_instances: false,
        ..Default::default()
    })
    .unwrap();
    let (stop_fake, fake_stopped) = oneshot::channel::<()>();
    tokio::spawn(fake.clone().serve(h.endpoint.clone(), async {
        let _ = fake_stopped.await;
    }));
    h.wait_for(&name, "deleted", |n| n.is_none()).await;
    let _ = stop_fake.send(());
    h.stop().await;
}

#[tokio::test]
async fn controller_restart_midway_loses_nothing() {
    // One Node per batch, as many in flight as unbatched: halfway is there
    // to be caught.
    let flags = ["--controllers=cloud-node", "--provider-batch-size=1"];
    let mut h = Harness::start(single_calls(), &flags).await;
    // Slow the cloud down so the first controller stops halfway.
    h.fake
        .set_latency(Method::InstanceMetadata, Duration::from_millis(150));
    let names: Vec<String> = (0..12)
        .map(|i| unique_name(&format!("restart{i}")))
        .collect();
    for n in &names {
        h.register_node(n).await;
    }
    wait_until("the first controller initialising 3 nodes", || async {
        h.initialised_count(&names).await >= 3
    })
    .await;
    h.restart_controller(&flags).await;
    let remaining = names.len() - h.initialised_count(&names).await;
    assert!(
        remaining > 0,
        "the restart happened before all nodes were done"
    );
    h.fake.set_latency(Method::InstanceMetadata, Duration::ZERO);
    for n in &names {
        let node = h
            .wait_for(n, "initialised after restart", |n| {
                n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
            })
            .await
            .unwrap();
        let instance = h
            .fake
            .instances()
            .into_iter()
            .find(|i| &i.name == n)
            .unwrap();
        assert_eq!(
            node.spec.unwrap().provider_id.as_deref(),
            Some(instance.provider_id.as_str())
        );
        assert_eq!(
            node.metadata
                .labels
                .unwrap()
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("fake-zone-a")
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn invalid_provider_answers_are_rejected_with_a_warning_and_nothing_written() {
    let mut h = Harness::start(FakeConfig::default(), &["--controllers=cloud-node"]).await;
    // Replace the fake with the broken provider on the same socket.
    let (stop_bad, _server) =
        replace_provider_with_raw(&mut h, unspecified::Provider::default()).await;

    let name = unique_name("badanswer");
    h.register_node(&name).await;
    let event = wait_for_event(&h.admin, &name, "ProviderAnswerRejected").await;
    let note = event.note.unwrap_or_default();
    assert!(note.contains("metadata.zone"), "{note}");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let n = h.nodes().get(&name).await.unwrap();
    assert!(has_taint(&n, UNINITIALIZED), "taint kept");
    assert!(n.spec.unwrap().provider_id.is_none(), "nothing written");
    assert!(
        n.status.and_then(|s| s.addresses).is_none(),
        "nothing written"
    );
    let _ = stop_bad.send(());
    h.stop().await;
}

#[tokio::test]
async fn zone_comes_from_the_zones_service_when_metadata_has_none() {
    let h = Harness::start(
        FakeConfig {
            zones_only_via_zones_service: true,
            ..FakeConfig::default()
        },
        &[],
    )
    .await;
    let name = unique_name("zonefb");
    h.register_node(&name).await;
    let node = h
        .wait_for(&name, "initialised", |n| {
            n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
        })
        .await
        .unwrap();
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["topology.kubernetes.io/zone"], "fake-zone-a");
    assert_eq!(labels["topology.kubernetes.io/region"], "fake-region");
    // Asked by the providerID InstanceMetadata returned, once.
    assert_eq!(h.fake.calls_of(Method::GetZoneByProviderId).len(), 1);
    assert_eq!(h.fake.calls_of(Method::GetZoneByNodeName).len(), 0);
    h.stop().await;
}

/// Issue 12, point 0: a NotReady Node whose providerID is another cloud's,
/// or not a providerID at all, is never deleted; the same setup with the
/// provider's own scheme is (so the test can fail).
#[tokio::test]
async fn nodes_of_another_cloud_are_never_deleted() {
    let h = Harness::start(
        FakeConfig {
            native_batch: false,
            auto_create_instances: false,
            ..Default::default()
        },
        &["--controllers=cloud-node-lifecycle"],
    )
    .await;
    let foreign = unique_name("aws");
    let garbled = unique_name("garbled");
    let ours = unique_name("gone");
    // NotReady and still in the cloud: asked about on every pass.
    let witness = unique_name("alive");
    h.fake
        .add_instance(ccm_fake_provider::InstanceSpec::named(&witness))
        .unwrap();
    for (name, provider_id) in [
        (&foreign, "aws:///us-east-1a/i-0123456789".to_owned()),
        (&garbled, "not a provider id".to_owned()),
        (&ours, format!("fake://{ours}")),
        (&witness, format!("fake://{witness}")),
    ] {
        let mut n = kubelet_node(name);
        n.spec.as_mut().unwrap().provider_id = Some(provider_id);
        h.nodes().create(&PostParams::default(), &n).await.unwrap();
        h.set_ready(name, "Unknown").await;
    }
    // Ours is gone from the cloud: deleted.
    h.wait_for(&ours, "deleted", |n| n.is_none()).await;
    // The others were seen in the same passes, and said so once each.
    for name in [&foreign, &garbled] {
        let e = wait_for_event(&h.admin, name, "ProviderIDNotOurs").await;
        assert!(
            e.note.unwrap_or_default().contains("Not checking the node"),
            "{name}"
        );
    }
    // Ten more passes (the monitor period is 200 ms): still there.
    let passes = h.fake.calls_of(Method::InstanceExists).len();
    wait_for_calls(&h.fake, Method::InstanceExists, passes + 10, |_| true).await;
    for name in [&foreign, &garbled] {
        assert!(
            h.nodes().get_opt(name).await.unwrap().is_some(),
            "{name} deleted"
        );
        assert_eq!(
            events_for(&h.admin, name, "ProviderIDNotOurs").await.len(),
            1,
            "{name}: one event"
        );
    }
    assert!(
        h.fake
            .calls_of(Method::InstanceExists)
            .iter()
            .all(|c| c.outcome == ccm_fake_provider::CallOutcome::Ok),
        "the provider was never asked about another cloud's instance"
    );
    h.stop().await;
}

/// Issue 12, point 6: a Node deleted right after its initialisation and
/// re-created under the same name is initialised again, every time.
#[tokio::test]
async fn a_node_recreated_under_its_name_is_initialised_again() {
    let h = Harness::start(FakeConfig::default(), &["--controllers=cloud-node"]).await;
    let name = unique_name("phoenix");
    for round in 0..30 {
        h.register_node(&name).await;
        h.wait_for(&name, &format!("round {round}: initialised"), |n| {
            n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
        })
        .await;
        h.nodes().delete(&name, &Default::default()).await.unwrap();
        h.wait_for(&name, &format!("round {round}: deleted"), |n| n.is_none())
            .await;
    }
    h.stop().await;
}

/// Issue 25, finding 6: the API server refuses an Event whose note is over
/// 1,024 bytes, or whose own name (`<object>.<hex time>`) is over 253
/// characters. A provider's 1.5 KB text and a Node with the longest valid
/// name still give their Event: the note cut, the name made to fit.
#[tokio::test]
async fn a_long_note_and_a_253_character_node_name_still_give_an_event() {
    let h = Harness::start(
        FakeConfig {
            auto_create_instances: false,
            ..Default::default()
        },
        &["--controllers=cloud-node-lifecycle"],
    )
    .await;
    let wordy = unique_name("wordy");
    let base = unique_name("long");
    let fill = 253 - base.len() - 3 - 2 * 63;
    let long = format!(
        "{base}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(fill)
    );
    assert_eq!(long.len(), 253);
    let wordy_id = format!("aws:///us-east-1a/{}", "i".repeat(1500));
    for (name, provider_id) in [
        (&wordy, wordy_id.clone()),
        (&long, "aws:///us-east-1a/i-0123456789".to_owned()),
    ] {
        let mut n = kubelet_node(name);
        // A label value holds 63 characters at most.
        n.metadata.labels = None;
        n.spec.as_mut().unwrap().provider_id = Some(provider_id);
        h.nodes().create(&PostParams::default(), &n).await.unwrap();
        h.set_ready(name, "Unknown").await;
    }

    let e = wait_for_event(&h.admin, &wordy, "ProviderIDNotOurs").await;
    let note = e.note.unwrap_or_default();
    assert!(note.len() <= 1024, "{} bytes", note.len());
    assert!(
        note.starts_with("Not checking the node") && note.ends_with("iii ..."),
        "cut and marked: {note}"
    );
    let e = wait_for_event(&h.admin, &long, "ProviderIDNotOurs").await;
    let event_name = e.metadata.name.unwrap_or_default();
    assert!(event_name.len() <= 253, "{event_name}");
    assert!(
        event_name.starts_with(&long[..200]),
        "names its object: {event_name}"
    );
    h.stop().await;
}

/// A fake whose batches are its single calls, logged one by one: these
/// tests count a method's calls and wait on them.
fn single_calls() -> FakeConfig {
    FakeConfig {
        native_batch: false,
        ..FakeConfig::default()
    }
}
