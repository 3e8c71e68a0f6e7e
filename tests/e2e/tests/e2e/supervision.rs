//! Supervision: a controller task that panics stops the whole manager with
//! an error naming it (the process exits non-zero and is restarted), rather
//! than the rest running on with a frozen Node cache. Faults come from the
//! test-only `fault-injection` feature's `--inject-panic`.

use crate::common::*;
use ccm_fake_provider::FakeConfig;
use tokio::sync::oneshot;

#[tokio::test]
async fn a_panicking_controller_stops_the_manager_naming_it() {
    let mut h = Harness::start(FakeConfig::default(), &[]).await;
    h.stop_controller().await;
    for (flag, name) in [
        ("cloud-node", "cloud-node-controller"),
        ("service", "service-lb-controller"),
        ("route", "node-route-controller"),
    ] {
        let (_keep_running, stopped) = oneshot::channel();
        let run = run_controller(
            h.sa.clone(),
            args_for(&h.endpoint, &[&format!("--inject-panic={flag}")]),
            stopped,
        );
        let result = tokio::time::timeout(DEADLINE, run)
            .await
            .unwrap_or_else(|_| panic!("{name}: the manager ran on after the panic"))
            .expect("run() itself does not panic");
        let err = result
            .expect_err("a panicked controller is an error")
            .to_string();
        assert_eq!(
            err,
            format!("{name} stopped unexpectedly: it panicked: injected panic in {name}")
        );
    }
    // The same flags without the fault run until told to stop.
    h.start_controller(&[]);
    h.register_node("supervised-0").await;
    h.wait_for("supervised-0", "initialised", |n| {
        n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
    })
    .await;
    h.nodes()
        .delete("supervised-0", &Default::default())
        .await
        .unwrap();
    h.stop().await;
}
