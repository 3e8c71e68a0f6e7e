//! A Service's load balancer through its life: created, updated and
//! deleted with upstream's Events, handed back when the Service stops
//! asking for one, and a burst served in creation order.

use super::*;

#[tokio::test]
async fn create_update_and_delete_with_upstream_events() {
    let h = harness().await;
    let node = unique_name("lbn");
    h.register_ready_nodes(std::slice::from_ref(&node)).await;

    let name = unique_name("web");
    let svc = h.create_service(lb_service(&name, 80)).await;
    let ready = h.wait_ready(&name).await;
    let lb = h
        .lb(&svc.uid().unwrap())
        .expect("a load balancer in the cloud");
    assert_eq!(ingress_ips(&ready), vec![lb.ip.to_string()]);
    assert!(has_finalizer(&ready));
    assert_eq!(condition_reason(&ready), Some("Ensured"));
    assert_eq!(lb.backends, vec![node.clone()]);
    assert_eq!(lb.ports[0].port, 80);
    // Named after the cluster and the Service uid: two clusters never share.
    assert!(lb.name.starts_with("kubernetes-"), "{}", lb.name);
    assert_eq!(
        h.wait_event(&name, "EnsuringLoadBalancer").await,
        vec!["Ensuring load balancer"]
    );
    assert_eq!(
        h.wait_event(&name, "EnsuredLoadBalancer").await,
        vec!["Ensured load balancer"]
    );
    assert_eq!(ensure_calls(&h), 1);
    // The provider saw the call named after the Service (and its uid).
    let uid = svc.uid().unwrap();
    assert_eq!(
        h.fake.calls_of(Method::EnsureLoadBalancer)[0].request_id,
        format!("service/{}/{name}#{}", h.ns, &uid[..8])
    );

    // A port change: Ensure again, the cloud follows.
    h.patch_service(
        &name,
        json!({"spec": {"ports": [{"port": 8080, "protocol": "TCP"}]}}),
    )
    .await;
    h.wait_lb(&svc, "port 8080", |lb| {
        lb.ports.iter().map(|p| p.port).eq([8080])
    })
    .await;
    assert_eq!(ensure_calls(&h), 2);

    // A label is not something the load balancer depends on (upstream's
    // needsUpdate): no call. The annotation change after it is one call.
    h.patch_service(&name, json!({"metadata": {"labels": {"team": "a"}}}))
        .await;
    h.patch_service(
        &name,
        json!({"metadata": {"annotations": {"fake.ccm-rs.io/internal": "true"}}}),
    )
    .await;
    h.wait_lb(&svc, "internal", |lb| lb.internal).await;
    assert_eq!(ensure_calls(&h), 3, "the label change made no call");

    // A typo under the provider's prefix: one Warning naming the closest
    // known key, even across further syncs. A provider warning: an event.
    h.patch_service(
        &name,
        json!({"metadata": {"annotations": {
            "fake.ccm-rs.io/intrenal": "true",
            "fake.ccm-rs.io/health-check-path": "/healthz",
        }}}),
    )
    .await;
    let typo = h.wait_event(&name, "UnknownAnnotation").await;
    assert!(
        typo[0].contains("fake.ccm-rs.io/intrenal")
            && typo[0].contains("did you mean fake.ccm-rs.io/internal?"),
        "{typo:?}"
    );
    let warned = h.wait_event(&name, "HealthCheckPathIgnored").await;
    assert!(
        warned[0].contains("externalTrafficPolicy: Local"),
        "{warned:?}"
    );
    h.patch_service(&name, json!({"spec": {"externalTrafficPolicy": "Local"}}))
        .await;
    h.wait_lb(&svc, "health check path kept", |lb| {
        lb.health_check_path.is_some()
    })
    .await;
    eventually("two further Ensure calls", || async {
        match ensure_calls(&h) {
            5 => Ok(()),
            n => Err(n.to_string()),
        }
    })
    .await;
    let typos = events_in(&h.admin, &h.ns, &name, "UnknownAnnotation").await;
    assert_eq!(typos.len(), 1, "reported once: {typos:?}");
    assert_eq!(
        typos[0].series.as_ref().map(|s| s.count),
        None,
        "not repeated"
    );

    // Deleting the Service deletes the load balancer, then the finalizer.
    h.services()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    h.wait_gone(&name, "gone").await;
    assert!(h.lb(&svc.uid().unwrap()).is_none());
    h.wait_event(&name, "DeletingLoadBalancer").await;
    assert_eq!(
        h.wait_event(&name, "DeletedLoadBalancer").await,
        vec!["Deleted load balancer"]
    );
    h.finish().await;
}

#[tokio::test]
async fn class_is_ignored_and_type_change_deletes() {
    let h = harness().await;
    let classy = unique_name("classy");
    let mut with_class = lb_service(&classy, 80);
    with_class.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other".into());
    h.create_service(with_class).await;
    let name = unique_name("plain");
    let svc = h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    // Services are processed in any order; the classy one must be left
    // alone regardless: only one Ensure and one load balancer.
    assert_eq!(ensure_calls(&h), 1);
    assert_eq!(h.fake.dump().load_balancers.len(), 1);
    let untouched = h.services().get(&classy).await.unwrap();
    assert!(!has_finalizer(&untouched) && condition(&untouched).is_none());

    h.patch_service(&name, json!({"spec": {"type": "ClusterIP"}}))
        .await;
    let plain = h
        .wait_service(&name, "finalizer removed", |s| !has_finalizer(s))
        .await;
    assert!(h.lb(&svc.uid().unwrap()).is_none(), "load balancer deleted");
    assert!(ingress_ips(&plain).is_empty(), "ingress cleared");
    assert!(condition(&plain).is_none(), "condition removed");
    h.wait_event(&name, "DeletedLoadBalancer").await;
    h.finish().await;
}

#[tokio::test]
async fn deletion_waits_for_the_provider_and_survives_a_restart() {
    let mut h = harness().await;

    // Provider down: the Service stays Terminating, with an event and
    // the condition saying why; the cloud's load balancer stays too.
    let name = unique_name("down");
    let svc = h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    h.stop_provider();
    h.services()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    h.wait_event(&name, "SyncLoadBalancerFailed").await;
    let stuck = h
        .wait_service(&name, "DeletionFailed", |s| {
            condition_reason(s) == Some("DeletionFailed")
        })
        .await;
    assert!(stuck.metadata.deletion_timestamp.is_some() && has_finalizer(&stuck));
    assert!(h.lb(&svc.uid().unwrap()).is_some());
    h.start_provider();
    h.wait_gone(&name, "deleted once the provider is back")
        .await;
    assert!(h.lb(&svc.uid().unwrap()).is_none());

    // The cloud deletes, but the answer never arrives: the controller is
    // stopped mid-call, between the cloud delete and the finalizer removal.
    let name = unique_name("cut");
    let svc = h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    h.fake
        .set_latency(Method::EnsureLoadBalancerDeleted, Duration::from_secs(600));
    h.fake.inject_error(
        Method::EnsureLoadBalancerDeleted,
        ErrorInjection::new(ErrorKind::CloudUnavailable, "answer lost")
            .after_work()
            .times(1),
    );
    let deletes = h.fake.calls_of(Method::EnsureLoadBalancerDeleted).len();
    h.services()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let uid = svc.uid().unwrap();
    eventually("the cloud deleted the load balancer", || async {
        h.lb(&uid).map_or(Ok(()), |lb| Err(format!("{lb:?}")))
    })
    .await;
    h.fake.clear_faults();
    h.stop_controller().await;
    let orphan = h.services().get(&name).await.unwrap();
    assert!(has_finalizer(&orphan), "the cut left the finalizer");
    h.start_controller(&[]);
    h.wait_gone(&name, "finalizer removed after the restart")
        .await;
    assert_eq!(
        h.fake.calls_of(Method::EnsureLoadBalancerDeleted).len(),
        deletes + 1,
        "the restarted controller saw the load balancer gone and did not delete again"
    );
    h.finish().await;
}

/// Issue 12, point 2: a Service whose type changes and whose ports are
/// dropped still loses its load balancer and its finalizer.
#[tokio::test]
async fn a_service_that_loses_its_ports_loses_its_load_balancer() {
    let h = harness().await;
    let name = unique_name("portless");
    let svc = h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    h.patch_service(
        &name,
        json!({"spec": {"type": "ExternalName", "externalName": "example.com", "ports": null}}),
    )
    .await;
    let s = h
        .wait_service(&name, "finalizer removed", |s| !has_finalizer(s))
        .await;
    assert!(s.spec.unwrap().ports.unwrap_or_default().is_empty());
    assert!(h.lb(&svc.uid().unwrap()).is_none(), "load balancer deleted");
    h.wait_event(&name, "DeletedLoadBalancer").await;
    h.finish().await;
}

/// Issue 15, point 3: a burst is served in arrival order. With one worker
/// and a slow Ensure a backlog forms; the Services get their addresses in
/// the order they were created (the Service watch shows the writes in
/// etcd order). kube-runtime's scheduler served such a backlog in no
/// particular order.
#[tokio::test]
async fn a_burst_is_served_in_creation_order() {
    use futures::{StreamExt, TryStreamExt};
    use kube::runtime::watcher::{self, Event};

    let h = harness_with(&["--concurrent-service-syncs=1"]).await;
    h.register_ready_nodes(&[unique_name("burst-node")]).await;
    h.fake
        .set_latency(Method::EnsureLoadBalancer, Duration::from_millis(40));
    let mut events = watcher::watcher(h.services(), watcher::Config::default()).boxed();
    while !matches!(events.try_next().await.unwrap(), Some(Event::InitDone)) {}

    let names: Vec<String> = (0..25).map(|i| format!("burst-{i:02}")).collect();
    for name in &names {
        h.create_service(lb_service(name, 80)).await;
    }
    let mut served = Vec::new();
    tokio::time::timeout(DEADLINE, async {
        while served.len() < names.len() {
            if let Some(Event::Apply(s)) = events.try_next().await.unwrap() {
                let name = s.name_any();
                if !ingress_ips(&s).is_empty() && !served.contains(&name) {
                    served.push(name);
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {served:?} got an address"));
    assert_eq!(served, names, "addresses in creation order");
    h.fake
        .set_latency(Method::EnsureLoadBalancer, Duration::ZERO);
    h.finish().await;
}
