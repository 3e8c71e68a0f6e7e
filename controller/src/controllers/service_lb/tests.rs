//! The reconcile of one Service against a scripted API server and the
//! fake provider.

use ccm_fake_provider::FakeConfig;
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use super::*;
use crate::testing::*;
use kube::runtime::reflector;

/// One turn of the runtime's runner for `svc`, its first failure in a row
/// if it fails: the action, and whether it failed.
pub(super) async fn sync(svc: Arc<Service>, lb: Arc<Lb>) -> (Action, bool) {
    let key = ObjectRef::from_obj(&*svc);
    match lb.reconcile(svc).await {
        Ok(action) => (action, false),
        Err(e) => (lb.error_policy(&key, &e, 1), true),
    }
}

/// One turn of the runner for a Service the store no longer has.
async fn vanished(key: ObjectRef<Service>, lb: Arc<Lb>) -> Action {
    match lb.gone(key.clone()).await {
        Ok(action) => action,
        Err(e) => lb.error_policy(&key, &e, 1),
    }
}

/// A node generation that never moves: these tests never change nodes.
fn unchanging() -> tokio::sync::watch::Receiver<u64> {
    tokio::sync::watch::channel(0).1
}

fn backend(name: &str) -> k8s_openapi::api::core::v1::Node {
    k8s_openapi::api::core::v1::Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The apiserver's answer for a Service that is gone.
fn not_found() -> (u16, Value) {
    let status = json!({"kind": "Status", "status": "Failure",
                        "reason": "NotFound", "code": 404,
                        "message": "services \"web\" not found"});
    (404, status)
}

/// The controller's state over `client` and `provider`, with one
/// backend Node that never changes; the receiver gets its resyncs.
fn lb_over(
    client: kube::Client,
    provider: &Provider,
) -> (Arc<Lb>, mpsc::UnboundedReceiver<ObjectRef<Service>>) {
    let (resync, resyncs) = mpsc::unbounded();
    let lb = Lb::new(
        context(client, provider, vec![backend("n1")]),
        unchanging(),
        resync,
    );
    (lb, resyncs)
}

#[tokio::test(start_paused = true)]
async fn without_sweeps_the_records_of_vanished_services_are_still_dropped() {
    let provider = fake_provider(FakeConfig::default());
    let (client, _api) = accepting_api();
    let (resync, _) = mpsc::unbounded();
    let lb = Lb::new(context(client, &provider, vec![]), unchanging(), resync);
    lb.record("ns/gone");
    let (store, _writer) = reflector::store::<Service>();
    let (synced, synced_rx) = tokio::sync::watch::channel(false);
    let tidy = tokio::spawn(orphans::sweep_periodically(
        lb.clone(),
        store,
        synced_rx,
        None,
    ));
    tokio::time::sleep(orphans::TIDY_PERIOD * 2).await;
    assert!(
        lb.has_record("ns/gone"),
        "nothing is dropped before the cache synced"
    );
    synced.send_replace(true);
    tokio::time::sleep(orphans::TIDY_PERIOD + Duration::from_secs(1)).await;
    assert!(
        !lb.has_record("ns/gone"),
        "dropped once the cache says it is gone"
    );
    tidy.abort();
}

#[tokio::test]
async fn a_new_service_gets_finalizer_then_load_balancer_then_ingress() {
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    let (client, api) = accepting_api();
    let (lb, _) = lb_over(client, &provider);
    let svc = Arc::new(lb_service());

    let (_, failed) = sync(svc.clone(), lb.clone()).await;
    assert!(!failed);
    assert_eq!(
        api.writes(),
        [
            "PATCH /api/v1/namespaces/ns/services/web/status",
            "PATCH /api/v1/namespaces/ns/services/web/status",
        ]
    );
    let writes: Vec<Call> = api.all().into_iter().filter(|c| !c.is_event()).collect();
    assert_eq!(
        writes[0].body["metadata"]["finalizers"],
        json!([decide::FINALIZER]),
        "the finalizer goes on before the cloud is called"
    );
    assert_eq!(
        writes[0].content_type,
        "application/strategic-merge-patch+json"
    );
    let ingress = &writes[1].body["status"]["loadBalancer"]["ingress"][0]["ip"];
    assert!(
        ingress
            .as_str()
            .is_some_and(|ip| ip.starts_with("192.0.2.")),
        "{ingress}"
    );
    assert_eq!(writes[1].body["status"]["conditions"][0]["status"], "True");
    assert_eq!(
        api.event_reasons(),
        ["EnsuringLoadBalancer", "EnsuredLoadBalancer"]
    );
    let lbs = provider.fake.dump().load_balancers;
    assert_eq!(lbs.len(), 1);

    // The Service as the cache shows it after our first write (the
    // finalizer; the status not yet): no second Ensure.
    let mut cached = (*svc).clone();
    cached.metadata.finalizers = Some(vec![decide::FINALIZER.into()]);
    let svc = Arc::new(cached);
    let ensures = provider
        .fake
        .calls_of(ccm_fake_provider::Method::EnsureLoadBalancer);
    sync(svc, lb).await;
    assert_eq!(
        provider
            .fake
            .calls_of(ccm_fake_provider::Method::EnsureLoadBalancer)
            .len(),
        ensures.len()
    );
}

#[tokio::test]
async fn implemented_elsewhere_leaves_no_condition_of_ours() {
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    // The apiserver answers a patch with the whole object, which a
    // deletion directive alone is not.
    let (client, api) = mock_api(|call| {
        if call.body.to_string().contains("$patch") {
            (200, serde_json::to_value(lb_service()).unwrap())
        } else {
            (200, call.body.clone())
        }
    });
    let (lb, _) = lb_over(client, &provider);
    let mut svc = lb_service();
    svc.metadata.annotations = Some(
        [(
            ccm_fake_provider::ANNOTATION_IMPLEMENTED_ELSEWHERE.to_owned(),
            "true".to_owned(),
        )]
        .into(),
    );
    let (action, failed) = sync(Arc::new(svc), lb).await;
    assert!(!failed);
    assert_eq!(action, Action::await_change());
    let writes: Vec<Call> = api.all().into_iter().filter(|c| !c.is_event()).collect();
    assert_eq!(writes.len(), 2, "{writes:?}");
    // The finalizer (kept, as upstream, so a deletion is still seen)
    // and the Provisioning condition went on before the call...
    assert_eq!(
        writes[0].body["status"]["conditions"][0]["reason"],
        "Provisioning"
    );
    // ...and the condition comes off again: another controller owns
    // this load balancer and its status.
    assert_eq!(
        writes[1].body,
        json!({"status": {"conditions": [{"type": decide::CONDITION, "$patch": "delete"}]}})
    );
    assert!(writes[1].body["status"].get("loadBalancer").is_none());
    assert!(provider.fake.dump().load_balancers.is_empty());
    assert!(
        !api.event_reasons()
            .iter()
            .any(|r| r == "EnsuredLoadBalancer")
    );
}

#[tokio::test]
async fn a_service_deleted_before_its_finalizer_went_on_gets_no_load_balancer() {
    // The cache still shows the Service; the API server no longer has
    // it (created and deleted at once).
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    let (client, api) = mock_api(|call| {
        if call.line().ends_with("/status") {
            not_found()
        } else {
            (200, call.body.clone())
        }
    });
    let (lb, _) = lb_over(client, &provider);
    let (action, failed) = sync(Arc::new(lb_service()), lb.clone()).await;
    assert!(!failed);
    assert_eq!(action, Action::await_change());
    assert_eq!(
        api.writes(),
        ["PATCH /api/v1/namespaces/ns/services/web/status"],
        "only the finalizer was tried"
    );
    assert!(
        provider
            .fake
            .calls_of(ccm_fake_provider::Method::EnsureLoadBalancer)
            .is_empty(),
        "the cloud is not called for a Service that is gone"
    );
    assert!(provider.fake.dump().load_balancers.is_empty());
    // Nothing recorded as ensured: no backend update will target it.
    let record = lb.record("ns/web");
    assert_eq!(record.lock().await.ensured, None);
}

#[tokio::test]
async fn a_service_gone_despite_its_finalizer_loses_its_load_balancer() {
    // The finalizer went on (200) and the load balancer was made, but a
    // DELETE racing the finalizer's addition removed the Service anyway
    // (kubernetes/kubernetes#77988): the status write after the Ensure
    // finds it gone, and then the cache drops it.
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    let status_writes = std::sync::atomic::AtomicUsize::new(0);
    let (client, api) = mock_api(move |call| {
        if call.line().ends_with("/status")
            && status_writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0
        {
            not_found()
        } else {
            (200, call.body.clone())
        }
    });
    let (lb, mut resyncs) = lb_over(client, &provider);
    let (_, failed) = sync(Arc::new(lb_service()), lb.clone()).await;
    assert!(!failed);
    assert_eq!(provider.fake.dump().load_balancers.len(), 1);

    // The cache no longer has it: a watch Delete, or a relist without it.
    lb.forget_vanished(&[]);
    let again = resyncs
        .try_recv()
        .expect("the vanished Service is handed back to the reconciler");
    assert_eq!(again, ObjectRef::new("web").within("ns"));
    // Its turn comes and the store does not have it.
    assert_eq!(vanished(again, lb.clone()).await, Action::await_change());
    assert!(
        provider.fake.dump().load_balancers.is_empty(),
        "deleted with what the Ensure was sent"
    );
    assert!(!lb.has_record("ns/web"));
    assert_eq!(
        api.event_reasons().last().map(String::as_str),
        Some("DeletedLoadBalancer")
    );
    // Nothing more to do: a second turn finds no record.
    assert_eq!(
        vanished(ObjectRef::new("web").within("ns"), lb.clone()).await,
        Action::await_change()
    );
    assert_eq!(
        provider
            .fake
            .calls_of(ccm_fake_provider::Method::EnsureLoadBalancerDeleted)
            .len(),
        1
    );
}

#[tokio::test]
async fn a_vanished_service_whose_delete_fails_is_retried_and_never_forgotten() {
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    let (client, _api) = accepting_api();
    let (lb, _) = lb_over(client, &provider);
    let (_, failed) = sync(Arc::new(lb_service()), lb.clone()).await;
    assert!(!failed);
    provider.fake.inject_error(
        ccm_fake_provider::Method::EnsureLoadBalancerDeleted,
        ccm_fake_provider::ErrorInjection::new(
            ccm_fake_provider::ErrorKind::CloudUnavailable,
            "cloud API down",
        ),
    );
    let key = || ObjectRef::new("web").within("ns");
    assert_eq!(
        vanished(key(), lb.clone()).await,
        Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(provider.fake.dump().load_balancers.len(), 1);
    assert!(lb.has_record("ns/web"), "kept for the retry");
    // A tidy pass meanwhile keeps it too.
    lb.forget_vanished(&[]);
    assert!(lb.has_record("ns/web"));
    provider.fake.clear_faults();
    assert_eq!(vanished(key(), lb.clone()).await, Action::await_change());
    assert!(provider.fake.dump().load_balancers.is_empty());
}

#[tokio::test]
async fn a_failed_ensure_backs_off_and_says_why() {
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    provider.fake.inject_error(
        ccm_fake_provider::Method::EnsureLoadBalancer,
        ccm_fake_provider::ErrorInjection::new(
            ccm_fake_provider::ErrorKind::QuotaExceeded,
            "no more load balancers",
        ),
    );
    let (client, api) = accepting_api();
    let (lb, _) = lb_over(client, &provider);
    let (action, failed) = sync(Arc::new(lb_service()), lb).await;
    assert!(failed);
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
    let condition =
        api.all().into_iter().rfind(|c| !c.is_event()).unwrap().body["status"]["conditions"][0]
            .clone();
    assert_eq!(condition["reason"], "QuotaExceeded");
    assert!(
        api.event_reasons()
            .contains(&"SyncLoadBalancerFailed".to_owned())
    );
    assert!(provider.fake.dump().load_balancers.is_empty());
}

/// Each Event's action comes with its reason, and a provider's warning
/// takes the action of the call it answered: nothing is read from the
/// reason's text.
#[tokio::test]
async fn events_carry_the_action_of_their_call() {
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    let (client, api) = accepting_api();
    let (lb, _) = lb_over(client, &provider);
    let mut svc = lb_service();
    // A health-check path without the Local policy: the fake ensures the
    // load balancer and warns.
    svc.metadata.annotations = Some(
        [(
            ccm_fake_provider::ANNOTATION_HEALTH_CHECK_PATH.to_owned(),
            "/healthz".to_owned(),
        )]
        .into(),
    );
    let (_, failed) = sync(Arc::new(svc.clone()), lb.clone()).await;
    assert!(!failed);
    svc.metadata.finalizers = Some(vec![decide::FINALIZER.into()]);
    svc.metadata.deletion_timestamp = Some(Time(now()));
    let (_, failed) = sync(Arc::new(svc), lb).await;
    assert!(!failed);
    let events: Vec<[String; 3]> = api
        .all()
        .into_iter()
        .filter(|c| c.is_event() && c.method == http::Method::POST)
        .map(|c| {
            ["reason", "action", "type"].map(|f| c.body[f].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let expected = [
        ["EnsuringLoadBalancer", "EnsureLoadBalancer", "Normal"],
        ["HealthCheckPathIgnored", "EnsureLoadBalancer", "Warning"],
        ["EnsuredLoadBalancer", "EnsureLoadBalancer", "Normal"],
        ["DeletingLoadBalancer", "DeleteLoadBalancer", "Normal"],
        ["DeletedLoadBalancer", "DeleteLoadBalancer", "Normal"],
    ]
    .map(|e| e.map(str::to_owned));
    assert_eq!(events, expected);
}
