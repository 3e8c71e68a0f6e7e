//! The controller's kube client against real kube-apiservers: without
//! `--kube-api-qps`, a server with API Priority and Fairness gets no
//! client-side limit and one without it gets upstream's 20 QPS / burst 30.

use std::sync::Arc;
use std::time::Duration;

use ccm_testsupport::{TestEnv, spawn_testenv, terminate, testenv_binary, unique_name};
use cloud_controller_manager::manager::kube_client::{self, ClientThrottle, Throttle};
use cloud_controller_manager::manager::leader::Fence;

/// The limit in force after one request to the server `env` runs.
async fn decided(env: &TestEnv, throttle: Arc<ClientThrottle>) -> Throttle {
    let client = kube_client::client(
        env.admin_config().await.unwrap(),
        throttle.clone(),
        Fence::open(),
        None,
    )
    .unwrap();
    client.apiserver_version().await.unwrap();
    throttle.current()
}

#[tokio::test]
async fn the_server_decides_the_client_side_limit_unless_a_flag_does() {
    let control_plane = crate::common::ControlPlane::shared().await;
    let apf = control_plane.env();
    assert_eq!(
        decided(apf, ClientThrottle::from_flags(None, None)).await,
        Throttle::Off,
        "kube-apiserver's default has API Priority and Fairness"
    );
    assert_eq!(
        decided(apf, ClientThrottle::from_flags(Some(50.0), Some(80))).await,
        Throttle::Bucket {
            qps: 50.0,
            burst: 80
        },
        "an explicit --kube-api-qps is honoured whatever the server"
    );

    let dir = std::env::temp_dir().join(unique_name("testenv-no-apf"));
    let (mut child, ready) = spawn_testenv(
        &testenv_binary().unwrap(),
        &[
            "--data-dir",
            dir.to_str().unwrap(),
            "--",
            "--enable-priority-and-fairness=false",
        ],
    )
    .unwrap();
    let no_apf = TestEnv::attach(&ready);
    let without = decided(&no_apf, ClientThrottle::from_flags(None, None)).await;
    let with_burst = decided(&no_apf, ClientThrottle::from_flags(None, Some(100))).await;
    terminate(&mut child, Duration::from_secs(60)).unwrap();
    assert_eq!(
        without,
        Throttle::Bucket {
            qps: 20.0,
            burst: 30
        },
        "no APF headers: upstream's limit"
    );
    assert_eq!(
        with_burst,
        Throttle::Bucket {
            qps: 20.0,
            burst: 100
        }
    );
}
