//! The fake over a real Unix socket, driven by the SDK's client.

mod common;

use std::time::{Duration, Instant};

use ccm_fake_provider::{
    ANNOTATION_HEALTH_CHECK_PATH, ANNOTATION_PREFIX, CallOutcome, ErrorInjection, ErrorKind,
    FakeConfig, InstanceSpec, KNOWN_ANNOTATIONS, Method,
};
use ccm_provider_sdk::proto::{Capability, ErrorReason, NodeAddressType, NodeRef, Route};
use ccm_provider_sdk::{ClientOptions, Existence, LbOutcome, Outcome, Readiness, ShutdownState};
use common::{node, service, start, start_with, wait_for};

#[tokio::test]
async fn handshake_advertises_every_service() {
    let r = start(FakeConfig {
        cluster_names: vec!["a".into(), "b".into()],
        ..Default::default()
    })
    .await;
    let h = r.client.handshake().await.unwrap();
    assert_eq!(h.info.name, "fake");
    assert_eq!(h.info.provider_id_scheme, "fake");
    for c in [
        Capability::Instances,
        Capability::LoadBalancers,
        Capability::ListLoadBalancers,
        Capability::Routes,
        Capability::Zones,
        Capability::Clusters,
    ] {
        assert!(h.has(c), "missing {c:?}");
    }
    assert!(!h.has(Capability::RoutesTargetNodeAddresses));
    assert_eq!(h.annotations.prefixes, [ANNOTATION_PREFIX]);
    assert_eq!(h.annotations.known_keys, KNOWN_ANNOTATIONS);
    // Every key it reads is described for the annotation reference.
    for key in KNOWN_ANNOTATIONS {
        assert!(
            h.annotations.descriptions.iter().any(|d| d.key == key),
            "{key} undescribed"
        );
    }
    assert_eq!(r.client.list_clusters().await.unwrap(), ["a", "b"]);
    assert_eq!(r.client.master("a").await.unwrap(), "127.0.0.1");
    let unknown = r.client.master("c").await.unwrap_err();
    assert_eq!(
        unknown.provider_error().unwrap().code(),
        tonic::Code::NotFound
    );
    r.stop().await;
}

#[tokio::test]
async fn instances_are_declared_auto_created_and_removed() {
    let r = start(FakeConfig {
        instances: vec![InstanceSpec {
            id: Some("i-1".into()),
            zone: Some("zone-x".into()),
            ..InstanceSpec::named("declared")
        }],
        ..Default::default()
    })
    .await;
    let c = &r.client;
    let md = c.instance_metadata(node("declared")).await.unwrap();
    assert_eq!(md.provider_id, "fake://i-1");
    assert_eq!(md.zone, "zone-x");
    assert_eq!(md.region, "fake-region");
    assert_eq!(
        md.node_addresses[0].r#type,
        NodeAddressType::InternalIp as i32
    );

    // Auto-created on first sight, then found by providerID.
    assert_eq!(
        c.instance_exists(node("new-node")).await.unwrap(),
        Existence::Exists
    );
    let by_id = NodeRef {
        name: "new-node".into(),
        provider_id: "fake://new-node".into(),
        ..Default::default()
    };
    assert_eq!(
        c.instance_shutdown(by_id.clone()).await.unwrap(),
        ShutdownState::Running
    );
    assert_eq!(
        c.zone_by_provider_id("fake://new-node")
            .await
            .unwrap()
            .failure_domain,
        "fake-zone-a"
    );

    r.fake.shutdown_instance("new-node").unwrap();
    assert_eq!(
        c.instance_shutdown(by_id.clone()).await.unwrap(),
        ShutdownState::ShutDown
    );

    assert!(r.fake.remove_instance("new-node"));
    assert_eq!(
        c.instance_exists(by_id.clone()).await.unwrap(),
        Existence::NotExists
    );
    assert_eq!(
        c.instance_exists(node("new-node")).await.unwrap(),
        Existence::NotExists
    );
    let err = c.instance_metadata(by_id).await.unwrap_err();
    let e = err.provider_error().expect("provider error");
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert_eq!(e.reason(), Some(ErrorReason::InstanceNotFound));
    let err = c.zone_by_node_name("new-node").await.unwrap_err();
    assert_eq!(
        err.provider_error().unwrap().reason(),
        Some(ErrorReason::InstanceNotFound)
    );
    r.stop().await;
}

#[tokio::test]
async fn load_balancer_lifecycle() {
    let r = start(FakeConfig {
        implemented_elsewhere_classes: vec!["example.com/other".into()],
        ..Default::default()
    })
    .await;
    let c = &r.client;
    let svc = service("0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11");
    assert_eq!(c.get_load_balancer("k", svc.clone()).await.unwrap(), None);

    let first = c
        .ensure_load_balancer("k", svc.clone(), vec![node("n1")])
        .await
        .unwrap();
    let LbOutcome::Done(status) = first.outcome else {
        panic!("{first:?}")
    };
    assert_eq!(status.ingress[0].ip, "192.0.2.2");
    let again = c
        .ensure_load_balancer("k", svc.clone(), vec![node("n1")])
        .await
        .unwrap();
    assert_eq!(again.outcome, LbOutcome::Done(status.clone()));
    assert_eq!(r.fake.dump().load_balancers[0].generation, 1);

    assert_eq!(
        c.get_load_balancer("k", svc.clone()).await.unwrap(),
        Some(status.clone())
    );
    let name = c.get_load_balancer_name("k", svc.clone()).await.unwrap();
    let listed = c.list_load_balancers("k").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, name);
    assert_eq!(listed[0].service_uid, svc.uid);

    c.update_load_balancer("k", svc.clone(), vec![node("n2"), node("n3")])
        .await
        .unwrap();
    assert_eq!(r.fake.dump().load_balancers[0].backends, ["n2", "n3"]);

    // Warnings travel with a successful answer.
    let mut annotated = service("second");
    annotated
        .annotations
        .insert(ANNOTATION_HEALTH_CHECK_PATH.into(), "/healthz".into());
    let answer = c
        .ensure_load_balancer("k", annotated, vec![])
        .await
        .unwrap();
    assert_eq!(answer.warnings.len(), 1);
    assert_eq!(answer.warnings[0].reason, "HealthCheckPathIgnored");

    let mut elsewhere = service("third");
    elsewhere.load_balancer_class = Some("example.com/other".into());
    let answer = c
        .ensure_load_balancer("k", elsewhere, vec![])
        .await
        .unwrap();
    assert!(matches!(answer.outcome, LbOutcome::ImplementedElsewhere(_)));

    assert!(
        c.ensure_load_balancer_deleted("k", svc.clone())
            .await
            .unwrap()
            .is_empty()
    );
    c.ensure_load_balancer_deleted("k", svc.clone())
        .await
        .unwrap();
    assert_eq!(c.get_load_balancer("k", svc.clone()).await.unwrap(), None);
    let err = c
        .update_load_balancer("k", svc.clone(), vec![])
        .await
        .unwrap_err();
    assert_eq!(err.provider_error().unwrap().code(), tonic::Code::NotFound);
    assert!(
        !r.fake
            .dump()
            .allocated_ips
            .contains(&"192.0.2.2".parse().unwrap())
    );
    r.stop().await;
}

#[tokio::test]
async fn thousands_of_routes_are_listed_across_pages() {
    let r = start(FakeConfig::default()).await;
    let c = &r.client;
    const N: usize = 2000;
    for i in 0..N {
        let route = Route {
            target_node: format!("node-{i}"),
            destination_cidr: format!("10.{}.{}.0/24", 100 + i / 256, i % 256),
            ..Default::default()
        };
        let created = c
            .create_route("k", &format!("uid-{i}"), route)
            .await
            .unwrap()
            .expect("route reported");
        assert!(created.name.starts_with(&format!("route-uid-{i}-")));
    }
    r.fake.clear_calls();
    let routes = c.list_routes("k").await.unwrap();
    assert_eq!(routes.len(), N);
    let unique: std::collections::BTreeSet<_> =
        routes.iter().map(|r| r.destination_cidr.clone()).collect();
    assert_eq!(unique.len(), N);
    assert!(routes.iter().all(|r| !r.blackhole));
    // 500 per page (the client's default page size).
    assert_eq!(r.fake.calls_of(Method::ListRoutes).len(), N / 500);

    // Identical create is fine; another target is a conflict.
    let same = Route {
        target_node: "node-0".into(),
        destination_cidr: "10.100.0.0/24".into(),
        ..Default::default()
    };
    c.create_route("k", "uid-0", same.clone()).await.unwrap();
    let err = c
        .create_route(
            "k",
            "uid-x",
            Route {
                target_node: "node-1".into(),
                ..same.clone()
            },
        )
        .await
        .unwrap_err();
    let e = err.provider_error().unwrap();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    assert_eq!(e.reason(), Some(ErrorReason::ConflictingResource));

    r.fake.remove_instance("node-0");
    let listed = c.list_routes("k").await.unwrap();
    let blackholes: Vec<_> = listed.iter().filter(|r| r.blackhole).collect();
    assert_eq!(blackholes.len(), 1);
    assert_eq!(blackholes[0].destination_cidr, "10.100.0.0/24");
    c.delete_route("k", blackholes[0].clone()).await.unwrap();
    c.delete_route("k", same).await.unwrap();
    assert_eq!(c.list_routes("k").await.unwrap().len(), N - 1);
    r.stop().await;
}

#[tokio::test]
async fn injected_errors_reach_the_client_exactly() {
    let r = start(FakeConfig::default()).await;
    let c = &r.client;
    r.fake.inject_error(
        Method::EnsureLoadBalancer,
        ErrorInjection::new(ErrorKind::CloudUnavailable, "the cloud is down")
            .retry_after(Duration::from_millis(1500))
            .times(1),
    );
    let err = c
        .ensure_load_balancer("k", service("a"), vec![])
        .await
        .unwrap_err();
    let e = err.provider_error().unwrap();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.reason(), Some(ErrorReason::CloudUnavailable));
    assert_eq!(e.message(), "the cloud is down");
    assert_eq!(e.retry_after_delay(), Some(Duration::from_millis(1500)));
    assert_eq!(err.outcome(), Outcome::Unknown);
    // Only once; nothing was created by the failed call.
    assert!(r.fake.dump().load_balancers.is_empty());
    c.ensure_load_balancer("k", service("a"), vec![])
        .await
        .unwrap();

    r.fake.inject_error(
        Method::InstanceMetadata,
        ErrorInjection::new(ErrorKind::CredentialsInvalid, "expired"),
    );
    for _ in 0..2 {
        let err = c.instance_metadata(node("n1")).await.unwrap_err();
        let e = err.provider_error().unwrap();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(e.reason(), Some(ErrorReason::CredentialsInvalid));
        assert_eq!(err.outcome(), Outcome::Final);
    }
    r.fake.clear_errors(None);
    c.instance_metadata(node("n1")).await.unwrap();

    let calls = r.fake.calls_of(Method::EnsureLoadBalancer);
    assert_eq!(calls.len(), 2);
    assert!(matches!(
        &calls[0].outcome,
        CallOutcome::Error { reason: Some(reason), .. } if reason == "CLOUD_UNAVAILABLE"
    ));
    assert_eq!(calls[1].outcome, CallOutcome::Ok);
    assert!(calls[0].request_id.starts_with("ccm-"));
    r.stop().await;
}

#[tokio::test]
async fn latency_beyond_the_deadline_is_an_unknown_outcome() {
    let r = start_with(
        FakeConfig::default(),
        ClientOptions {
            read_timeout: Duration::from_millis(200),
            ..Default::default()
        },
    )
    .await;
    r.fake
        .set_latency(Method::InstanceMetadata, Duration::from_secs(5));
    let started = Instant::now();
    let err = r.client.instance_metadata(node("n1")).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "deadline ignored"
    );
    let e = err.provider_error().expect("a status");
    assert!(
        matches!(
            e.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{:?}",
        e.code()
    );
    assert_eq!(err.outcome(), Outcome::Unknown);
    // The provider's future was dropped: logged as cancelled.
    let fake = r.fake.clone();
    wait_for("the cancelled call to be logged", || {
        let fake = fake.clone();
        async move {
            fake.calls_of(Method::InstanceMetadata)
                .iter()
                .any(|c| c.outcome == CallOutcome::Cancelled)
        }
    })
    .await;
    r.fake.set_latency(Method::InstanceMetadata, Duration::ZERO);
    r.client.instance_metadata(node("n1")).await.unwrap();
    r.stop().await;
}

#[tokio::test]
async fn readiness_and_rate_limits_are_controllable() {
    let r = start(FakeConfig::default()).await;
    r.fake
        .set_readiness(Readiness::NotReady("credentials expired".into()));
    assert_eq!(
        r.client.probe().await.unwrap(),
        Readiness::NotReady("credentials expired".into())
    );
    r.fake.set_readiness(Readiness::Ready);
    assert_eq!(r.client.probe().await.unwrap(), Readiness::Ready);

    r.fake.set_rate_limit(Some(1));
    let mut throttled = None;
    for _ in 0..5 {
        if let Err(e) = r.client.instance_exists(node("n1")).await {
            throttled = Some(e);
            break;
        }
    }
    let err = throttled.expect("5 calls at 1/s are throttled");
    let e = err.provider_error().unwrap();
    assert_eq!(e.reason(), Some(ErrorReason::CloudUnavailable));
    assert!(e.retry_after_delay().is_some());
    r.fake.set_rate_limit(None);
    r.client.instance_exists(node("n1")).await.unwrap();
    r.stop().await;
}

/// A batch is one cloud call: one entry in the call log, one token of the
/// quota, whatever its size; beyond the quota every call that reaches the
/// cloud answers QUOTA_EXCEEDED with the time to the next token, counted.
#[tokio::test]
async fn a_batch_is_one_cloud_call_and_the_quota_refuses_beyond_its_burst() {
    use ccm_fake_provider::{QuotaConfig, QuotaSnapshot};
    use ccm_provider_sdk::{InstanceAnswer, InstanceQuery, InstanceQuestion};
    let mut r = start(FakeConfig::default()).await;
    assert!(
        r.client
            .handshake()
            .await
            .unwrap()
            .has(Capability::InstancesBatch)
    );
    // A slow refill, so nothing comes back during the test.
    r.fake.set_quota(Some(QuotaConfig {
        qps: 0.01,
        burst: 2,
    }));
    r.fake.clear_calls();
    let queries: Vec<_> = (0..50)
        .map(|i| InstanceQuery {
            key: format!("k{i}"),
            node: node(&format!("n{i}")),
            question: if i % 2 == 0 {
                InstanceQuestion::Metadata
            } else {
                InstanceQuestion::Existence
            },
        })
        .collect();
    let answers = r.client.batch_instances(queries.clone()).await.unwrap();
    assert_eq!(answers.len(), 50);
    for (key, answer) in &answers {
        assert!(answer.is_ok(), "{key}: {answer:?}");
    }
    assert!(matches!(
        answers[1].1,
        Ok(InstanceAnswer::Existence(Existence::Exists))
    ));
    let calls = r.fake.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].method, Method::BatchInstances);

    // The second token, then none.
    r.client.instance_exists(node("n1")).await.unwrap();
    let err = r.client.batch_instances(queries).await.unwrap_err();
    let e = err.provider_error().unwrap();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert_eq!(e.reason(), Some(ErrorReason::QuotaExceeded));
    let wait = e.retry_after_delay().expect("RetryInfo");
    assert!(
        wait > Duration::from_secs(90) && wait <= Duration::from_secs(100),
        "{wait:?}"
    );
    // That client now holds its calls for the delay (contract 1.4.0): the
    // next one is not sent. A client that was not told is refused too.
    let held = r.client.instance_metadata(node("n1")).await.unwrap_err();
    assert!(
        matches!(held, ccm_provider_sdk::ClientError::BudgetExhausted { .. }),
        "{held:?}"
    );
    r.client =
        ccm_provider_sdk::ProviderClient::connect_lazy(&r.endpoint, ClientOptions::default())
            .unwrap();
    let e = r.client.instance_metadata(node("n1")).await.unwrap_err();
    assert_eq!(
        e.provider_error().unwrap().reason(),
        Some(ErrorReason::QuotaExceeded)
    );
    // The probe is no cloud call.
    assert_eq!(r.client.probe().await.unwrap(), Readiness::Ready);
    assert_eq!(
        r.fake.quota(),
        Some(QuotaSnapshot {
            qps: 0.01,
            burst: 2,
            granted: 2,
            refused: 2
        })
    );
    match &r.fake.calls_of(Method::BatchInstances)[1].outcome {
        CallOutcome::Error { reason, .. } => {
            assert_eq!(reason.as_deref(), Some("QUOTA_EXCEEDED"))
        }
        o => panic!("{o:?}"),
    }

    // An injection on a single method fails that method's queries only.
    r.fake.set_quota(None);
    r.fake.inject_error(
        Method::InstanceMetadata,
        ErrorInjection::new(ErrorKind::CloudUnavailable, "metadata down"),
    );
    // A client not held by the refusals above.
    r.client =
        ccm_provider_sdk::ProviderClient::connect_lazy(&r.endpoint, ClientOptions::default())
            .unwrap();
    let answers = r
        .client
        .batch_instances(vec![
            InstanceQuery {
                key: "m".into(),
                node: node("n1"),
                question: InstanceQuestion::Metadata,
            },
            InstanceQuery {
                key: "e".into(),
                node: node("n1"),
                question: InstanceQuestion::Existence,
            },
        ])
        .await
        .unwrap();
    let m = answers[0].1.as_ref().unwrap_err().provider_error().unwrap();
    assert_eq!(m.reason(), Some(ErrorReason::CloudUnavailable));
    assert!(answers[1].1.is_ok());
    r.stop().await;
}
