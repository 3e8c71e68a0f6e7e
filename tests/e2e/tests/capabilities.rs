//! Issue 12, point 7: capabilities are read again on a period and after a
//! reconnect, and controllers start and stop to match, visible in
//! `/healthz` and `running_managed_controllers`.

mod common;

use std::time::Duration;

use ccm_fake_provider::FakeConfig;
use ccm_provider_sdk::ProviderServer;
use ccm_testsupport::unique_name;
use common::*;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tokio::sync::oneshot;

/// GET over plain HTTP/1.0 on loopback; the response, or why not.
#[tokio::test]
async fn controllers_follow_the_providers_capabilities() {
    let mut h = Harness::start(FakeConfig::default(), &["--controllers=*,-route"]).await;
    h.stop_controller().await;
    h.stop_provider();
    let path = h.endpoint.trim_start_matches("unix://").to_owned();
    wait_until("the full provider gone", || async {
        !std::path::Path::new(&path).exists()
    })
    .await;

    // The same cloud without its load balancer service (a provider still
    // starting, or an older version).
    let serve_instances_only = |fake: ccm_fake_provider::FakeCloud, endpoint: String| {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            ProviderServer::new(fake.clone())
                .with_instances(fake)
                .serve(&endpoint, async {
                    let _ = stopped.await;
                })
                .await
        });
        (stop, task)
    };
    let (stop_partial, partial) = serve_instances_only(h.fake.clone(), h.endpoint.clone());
    let port = free_port();
    h.start_controller(&[
        "--controllers=*,-route",
        "--provider-capability-refresh-period=300ms",
        &format!("--admin-port={port}"),
        "--bind-address=127.0.0.1",
    ]);
    eventually("cloud-node running, service-lb not", || async {
        let body = admin_get(port, "/healthz").await?;
        if body.contains("[+] cloud-node-controller ok") && !body.contains("service-lb-controller")
        {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;

    let services: Api<Service> = Api::namespaced(h.admin.clone(), &h.ns);
    let name = unique_name("late");
    services
        .create(&PostParams::default(), &common::lb_service(&name, 80))
        .await
        .unwrap();

    // The provider is upgraded: restarted with load balancers.
    let _ = stop_partial.send(());
    partial.await.unwrap().unwrap();
    h.start_provider();
    eventually("the Service's ingress, once service-lb started", || async {
        let s = services.get(&name).await.unwrap();
        let ingress = s
            .status
            .and_then(|st| st.load_balancer)
            .and_then(|lb| lb.ingress)
            .unwrap_or_default();
        if ingress.is_empty() {
            Err("no ingress".to_owned())
        } else {
            Ok(())
        }
    })
    .await;
    let metrics = admin_get(port, "/metrics").await.unwrap();
    assert!(
        metrics.contains(
            r#"running_managed_controllers{name="service",manager="cloud-controller-manager"} 1"#
        ),
        "{metrics}"
    );

    // And downgraded again: the controller stops (its LB stays; nothing is
    // deleted because a capability went away).
    h.stop_provider();
    wait_until("the full provider gone", || async {
        !std::path::Path::new(&path).exists()
    })
    .await;
    let (stop_partial, partial) = serve_instances_only(h.fake.clone(), h.endpoint.clone());
    eventually("service-lb stopped", || async {
        let body = admin_get(port, "/healthz").await?;
        if !body.contains("service-lb-controller") && body.contains("[+] cloud-node-controller ok")
        {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    let metrics = admin_get(port, "/metrics").await.unwrap();
    assert!(
        metrics.contains(
            r#"running_managed_controllers{name="service",manager="cloud-controller-manager"} 0"#
        ),
        "{metrics}"
    );
    assert_eq!(h.fake.dump().load_balancers.len(), 1);

    // Clean up with the full provider back.
    let _ = stop_partial.send(());
    partial.await.unwrap().unwrap();
    h.start_provider();
    services
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service and its LB gone", || async {
        match (
            services.get_opt(&name).await.unwrap(),
            h.fake.dump().load_balancers.len(),
        ) {
            (None, 0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::timeout(Duration::from_secs(30), h.stop())
        .await
        .expect("stopped");
}
