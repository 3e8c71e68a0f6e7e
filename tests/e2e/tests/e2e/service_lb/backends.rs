//! The Nodes behind the load balancers: node changes reach every load
//! balancer once, labels included.

use super::*;

#[tokio::test]
async fn backends_follow_node_changes_one_update_per_service() {
    let h = harness().await;
    let (a, b, c) = (
        unique_name("be-a"),
        unique_name("be-b"),
        unique_name("be-c"),
    );
    h.register_ready_nodes(&[a.clone(), b.clone()]).await;
    let one = h.create_service(lb_service(&unique_name("one"), 80)).await;
    let two = h.create_service(lb_service(&unique_name("two"), 81)).await;
    for s in [&one, &two] {
        h.wait_lb(s, "backends a, b", |lb| lb.backends == set(&[&a, &b]))
            .await;
    }
    let updates = || h.fake.calls_of(Method::UpdateLoadBalancer).len();
    assert_eq!(updates(), 0, "Ensure carried the node set");

    // Each change below is one UpdateLoadBalancer per Service.
    let expect = |want: Vec<String>, calls: std::ops::RangeInclusive<usize>, what: &'static str| {
        let h = &h;
        let (one, two) = (&one, &two);
        let before = h.fake.calls_of(Method::UpdateLoadBalancer).len();
        async move {
            for s in [one, two] {
                h.wait_lb(s, what, |lb| lb.backends == want).await;
            }
            let made = h.fake.calls_of(Method::UpdateLoadBalancer).len() - before;
            assert!(
                calls.contains(&made),
                "{what}: {made} UpdateLoadBalancer calls"
            );
        }
    };
    // A join is a create and then the providerID: usually within one
    // coalescing window, at worst two updates.
    let added = expect(set(&[&a, &b, &c]), 2..=4, "node added");
    h.register_ready_nodes(std::slice::from_ref(&c)).await;
    added.await;
    h.wait_event(one.metadata.name.as_deref().unwrap(), "UpdatedLoadBalancer")
        .await;

    let label = |v: &str| json!({"metadata": {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": v}}});
    let excluded = expect(set(&[&a, &b]), 2..=2, "node excluded");
    h.nodes()
        .patch(&c, &PatchParams::default(), &Patch::Merge(label("true")))
        .await
        .unwrap();
    excluded.await;
    let included = expect(
        set(&[&a, &b, &c]),
        2..=2,
        "exclusion lifted by a false-like value",
    );
    h.nodes()
        .patch(&c, &PatchParams::default(), &Patch::Merge(label("false")))
        .await
        .unwrap();
    included.await;

    let deleted = expect(set(&[&a, &c]), 2..=2, "node deleted");
    h.nodes()
        .delete(&b, &DeleteParams::default())
        .await
        .unwrap();
    deleted.await;

    let taint = json!({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}});
    let scaled_down = expect(set(&[&c]), 2..=2, "node being scaled down");
    h.nodes()
        .patch(&a, &PatchParams::default(), &Patch::Merge(taint))
        .await
        .unwrap();
    scaled_down.await;

    // Readiness is not a backend criterion: no call.
    let before_burst = updates();
    h.set_ready(&c, "False").await;
    // Two nodes joining together are coalesced: each Service is updated
    // for the pair, not once per node event (each join is 3 writes).
    let (d, e) = (unique_name("be-d"), unique_name("be-e"));
    h.register_ready_nodes(&[d.clone(), e.clone()]).await;
    for s in [&one, &two] {
        h.wait_lb(s, "d and e added", |lb| lb.backends == set(&[&c, &d, &e]))
            .await;
    }
    let after_burst = updates() - before_burst;
    assert!(
        (2..=4).contains(&after_burst),
        "{after_burst} updates for a 2-node burst across 2 Services"
    );
    h.finish().await;
}

/// Issue 12, point 10: a backend's label change reaches the provider (it
/// may select backends by label). That annotations do not is unit-tested.
#[tokio::test]
async fn a_relabelled_backend_reaches_update_load_balancer() {
    let h = harness().await;
    let node = unique_name("labelled");
    h.register_ready_nodes(std::slice::from_ref(&node)).await;
    let name = unique_name("bylabel");
    h.create_service(lb_service(&name, 80)).await;
    h.wait_ready(&name).await;
    let updates = || h.fake.calls_of(Method::UpdateLoadBalancer).len();
    let before = updates();
    h.nodes()
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/ingress": "true"}}})),
        )
        .await
        .unwrap();
    eventually("an UpdateLoadBalancer for the label", || async {
        match updates() {
            n if n > before => Ok(()),
            n => Err(format!("{n} updates")),
        }
    })
    .await;
    // And back: a second update.
    let after_label = updates();
    h.nodes()
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/ingress": null}}})),
        )
        .await
        .unwrap();
    eventually("an UpdateLoadBalancer for the removed label", || async {
        match updates() {
            n if n > after_label => Ok(()),
            n => Err(format!("{n} updates")),
        }
    })
    .await;
    h.finish().await;
}
