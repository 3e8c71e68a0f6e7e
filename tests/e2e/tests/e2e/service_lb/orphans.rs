//! Load balancers whose Service vanished or was replaced without a
//! reconciled delete.

use super::*;

/// Removes our finalizer by hand, then deletes the Service: gone at once,
/// without the controller reconciling its deletion.
async fn delete_behind_our_back(h: &Harness, name: &str) {
    h.patch_service(name, json!({"metadata": {"finalizers": null}}))
        .await;
    h.services()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    h.wait_gone(name, "the Service deleted").await;
}

/// Issue 12, point 1: load balancers whose Service vanished without a
/// reconciled delete are found by the orphan sweeper (ListLoadBalancers)
/// and deleted; another cluster's are never touched.
#[tokio::test]
async fn vanished_services_lose_their_load_balancers() {
    let cluster = unique_name("sweep");
    let mut h = harness_with(&[
        &format!("--cluster-name={cluster}"),
        "--load-balancer-orphan-sweep-period=1s",
    ])
    .await;
    // Another cluster's load balancer in the same cloud account.
    let other =
        ccm_provider_sdk::ProviderClient::connect_lazy(&h.endpoint, Default::default()).unwrap();
    other
        .ensure_load_balancer(
            "another-cluster",
            proto::Service {
                namespace: "theirs".into(),
                name: "web".into(),
                uid: "uid-of-another-cluster".into(),
                ports: vec![proto::ServicePort {
                    protocol: proto::Protocol::Tcp as i32,
                    port: 80,
                    ..Default::default()
                }],
                external_traffic_policy: proto::TrafficPolicy::Cluster as i32,
                session_affinity: proto::SessionAffinity::None as i32,
                ..Default::default()
            },
            vec![],
        )
        .await
        .unwrap();

    // 1. Finalizer removed by hand, Service deleted.
    let name = unique_name("vanish");
    let svc = h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    delete_behind_our_back(&h, &name).await;
    h.wait_lb_gone(&svc.uid().unwrap(), "the orphan swept")
        .await;

    // 2. Deleted and re-created under the same name while the controller
    // is down: the old load balancer goes at start, the new one is made.
    let name = unique_name("reborn");
    let old = h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    h.stop_controller().await;
    delete_behind_our_back(&h, &name).await;
    let new = h.create_service(lb_service(&name, 80)).await;
    h.start_controller(&[
        &format!("--cluster-name={cluster}"),
        "--load-balancer-orphan-sweep-period=1s",
    ]);
    h.wait_ready(&name).await;
    h.wait_lb_gone(&old.uid().unwrap(), "the replaced Service's LB swept")
        .await;
    assert!(h.lb(&new.uid().unwrap()).is_some());

    // Several more passes: the other cluster's load balancer stays.
    let sweeps = h.fake.calls_of(Method::ListLoadBalancers).len();
    eventually("three more sweeps", || async {
        match h.fake.calls_of(Method::ListLoadBalancers).len() {
            n if n >= sweeps + 3 => Ok(()),
            n => Err(format!("{n} listings")),
        }
    })
    .await;
    assert!(
        h.lb("uid-of-another-cluster").is_some(),
        "another cluster's LB touched"
    );
    other
        .ensure_load_balancer_deleted(
            "another-cluster",
            proto::Service {
                namespace: "theirs".into(),
                name: "web".into(),
                uid: "uid-of-another-cluster".into(),
                external_traffic_policy: proto::TrafficPolicy::Cluster as i32,
                session_affinity: proto::SessionAffinity::None as i32,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    h.finish().await;
}

/// Issue 12, point 1: a Service deleted behind our back and re-created
/// under the same name while the controller runs: the old load balancer is
/// deleted when the new Service is synced (as upstream), even with the
/// sweeper off (the default cluster name keeps it off).
#[tokio::test]
async fn a_service_replaced_under_its_name_loses_the_old_load_balancer() {
    let h = harness().await;
    let name = unique_name("replaced");
    let old = h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    delete_behind_our_back(&h, &name).await;
    let new = h.create_service(lb_service(&name, 81)).await;
    h.wait_lb(&new, "the new load balancer", |_| true).await;
    h.wait_lb_gone(&old.uid().unwrap(), "the old load balancer deleted")
        .await;
    assert!(
        h.fake.calls_of(Method::ListLoadBalancers).is_empty(),
        "found without the sweeper"
    );
    h.finish().await;
}
