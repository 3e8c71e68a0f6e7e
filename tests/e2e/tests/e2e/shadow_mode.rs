//! `--dry-run-writes` against the real apiserver: the controller reads the
//! cluster and the provider, decides, and writes nothing; every write it
//! would have made is counted in `ccm_dry_run_writes_total`.

use crate::common::*;
use ccm_fake_provider::{FakeConfig, InstanceSpec, Method};
use ccm_testsupport::unique_name;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

fn counted(metrics: &str, target: &str, operation: &str) -> bool {
    metrics.lines().any(|l| {
        l.starts_with(&format!(
            "ccm_dry_run_writes_total{{target=\"{target}\",operation=\"{operation}\"}} "
        ))
    })
}

#[tokio::test]
async fn a_shadow_decides_everything_and_writes_nothing() {
    let tainted = unique_name("shadow-new");
    let gone = unique_name("shadow-gone");
    let port = free_port();
    let lease = unique_name("shadow-lease");
    let h = Harness::start(
        FakeConfig {
            // Batches asked by the single methods, so each is counted.
            native_batch: false,
            auto_create_instances: false,
            instances: vec![InstanceSpec::named(&tainted), InstanceSpec::named(&gone)],
            ..Default::default()
        },
        &[
            "--dry-run-writes",
            // Asked for, and still not taken: a shadow never contends with
            // the CCM it runs beside.
            "--leader-elect=true",
            &format!("--leader-elect-resource-name={lease}"),
            "--leader-elect-resource-namespace=default",
            &format!("--admin-port={port}"),
            "--bind-address=127.0.0.1",
        ],
    )
    .await;

    // A Node to initialise.
    h.register_node(&tainted).await;
    // A Node whose instance is gone, NotReady: one to delete.
    let gone_id = h
        .fake
        .instances()
        .into_iter()
        .find(|i| i.name == gone)
        .unwrap()
        .provider_id;
    h.register_node(&gone).await;
    h.nodes()
        .patch(
            &gone,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": gone_id}})),
        )
        .await
        .unwrap();
    h.set_ready(&gone, "False").await;
    h.fake.remove_instance(&gone);
    // A Service that wants a load balancer.
    let services: Api<Service> = Api::namespaced(h.admin.clone(), &h.ns);
    let svc = unique_name("shadow-lb");
    services
        .create(&PostParams::default(), &lb_service(&svc, 80))
        .await
        .unwrap();

    eventually("every kind of write counted", || async {
        let body = admin_get(port, "/metrics").await?;
        let all = [
            ("kubernetes", "PATCH nodes/status"),
            ("kubernetes", "PATCH nodes"),
            ("kubernetes", "DELETE nodes"),
            ("kubernetes", "PATCH services/status"),
            ("kubernetes", "POST events"),
            ("provider", "EnsureLoadBalancer"),
        ];
        match all.iter().find(|(t, o)| !counted(&body, t, o)) {
            None => Ok(()),
            Some(missing) => Err(format!(
                "{missing:?} not counted yet in {:?}",
                body.lines()
                    .filter(|l| l.starts_with("ccm_dry_run"))
                    .collect::<Vec<_>>()
            )),
        }
    })
    .await;

    // It read what it needed...
    assert!(!h.fake.calls_of(Method::InstanceMetadata).is_empty());
    assert!(!h.fake.calls_of(Method::InstanceExists).is_empty());
    // ...and changed nothing, in the cloud or in the cluster.
    assert!(h.fake.calls_of(Method::EnsureLoadBalancer).is_empty());
    assert!(h.fake.dump().load_balancers.is_empty());
    let node = h.nodes().get(&tainted).await.unwrap();
    assert!(has_taint(&node, UNINITIALIZED), "still uninitialised");
    assert_eq!(node.spec.unwrap().provider_id, None);
    assert!(
        h.nodes().get_opt(&gone).await.unwrap().is_some(),
        "not deleted"
    );
    let s = services.get(&svc).await.unwrap();
    assert_eq!(s.metadata.finalizers, None, "no finalizer");
    assert!(
        s.status
            .and_then(|st| st.load_balancer)
            .and_then(|lb| lb.ingress)
            .is_none()
    );
    assert!(
        events_in(&h.admin, &h.ns, &svc, "EnsuringLoadBalancer")
            .await
            .is_empty(),
        "Events are writes too"
    );
    assert!(
        Api::<Lease>::namespaced(h.admin.clone(), "default")
            .get_opt(&lease)
            .await
            .unwrap()
            .is_none(),
        "no Lease taken"
    );
    h.stop().await;
}
