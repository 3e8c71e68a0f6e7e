//! The whole suite against the fake provider (`ccm-fake-provider`), served
//! in-process over a real Unix socket: nothing may fail.

mod common;

use ccm_fake_provider::{FakeCloud, FakeConfig, InstanceSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_provider_passes_the_whole_suite() {
    let fake = FakeCloud::new(FakeConfig {
        // The suite's "missing" node must stay missing.
        auto_create_instances: false,
        instances: vec![
            InstanceSpec::named("conformance-node-1"),
            InstanceSpec::named("conformance-node-2"),
        ],
        ..Default::default()
    })
    .expect("fake cloud");
    let f = fake.clone();
    let served = common::serve_with(move |endpoint, rx| async move {
        f.serve(endpoint, async {
            let _ = rx.await;
        })
        .await
        .expect("serve");
    })
    .await;
    let report = served.run().await;
    common::assert_failed(&report, &[]);
    // The fake advertises every service, so only the "unadvertised" case
    // and those of routes with target node addresses (a capability it does
    // not advertise) are skipped, and the known node made the positive
    // instance cases run.
    assert_eq!(
        report.skipped_names(),
        vec![
            "identity/unadvertised-services-unimplemented",
            "routes/lists-back-as-created",
            "routes/update-in-place"
        ],
        "{}",
        report.summary_line()
    );
    // The suite left nothing behind, and touched no instance.
    let dump = fake.dump();
    assert!(dump.load_balancers.is_empty(), "{:?}", dump.load_balancers);
    assert!(dump.routes.is_empty(), "{:?}", dump.routes);
    assert!(dump.allocated_ips.is_empty(), "{:?}", dump.allocated_ips);
    assert_eq!(dump.instances.len(), 2);
    served.stop().await;
}
