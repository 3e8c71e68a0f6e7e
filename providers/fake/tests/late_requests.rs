//! A provider process paused past a call's deadline (SIGSTOP, a stalled
//! node) reads that call late. Found by the chaos suite: a Service's
//! EnsureLoadBalancer timed out while the provider was stopped, the
//! cleanup's GetLoadBalancer found nothing, the finalizer went, and then
//! the resumed provider applied the stale Ensure: a leaked load balancer.
//! The request's absolute deadline (`x-ccm-deadline`) stops it.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccm_provider_sdk::proto::load_balancer_service_client::LoadBalancerServiceClient;
use ccm_provider_sdk::proto::{self, EnsureLoadBalancerRequest};
use ccm_provider_sdk::{ClientOptions, ProviderClient};
use common::{node, service, wait_for};

struct Provider(Child);

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig}");
}

/// A plain tonic channel: its calls carry no deadline of their own and are
/// not cancelled, as when the caller's RST_STREAM reaches the provider only
/// after the handler started.
async fn raw_channel(path: &Path) -> tonic::transport::Channel {
    ccm_provider_sdk::endpoint::raw_channel(path).await.unwrap()
}

#[tokio::test]
async fn a_mutation_read_after_its_deadline_is_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("provider.sock");
    let endpoint = format!("unix://{}", socket.display());
    let provider = Provider(
        Command::new(env!("CARGO_BIN_EXE_fake-provider"))
            .arg(format!("--endpoint={endpoint}"))
            .arg("--admin-listen=127.0.0.1:0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fake-provider"),
    );
    let client = ProviderClient::connect_lazy(&endpoint, ClientOptions::default()).unwrap();
    wait_for("the provider to answer a probe", || {
        let c = client.clone();
        async move { c.probe().await.is_ok() }
    })
    .await;
    let mut raw = LoadBalancerServiceClient::new(raw_channel(&socket).await);

    signal(&provider.0, "-STOP");
    // Sent while the provider is stopped, giving up 200 ms from now.
    let gives_up = SystemTime::now() + Duration::from_millis(200);
    let mut request = tonic::Request::new(EnsureLoadBalancerRequest {
        cluster_name: "kubernetes".into(),
        service: Some(service("stale")),
        nodes: vec![node("n1")],
        ..Default::default()
    });
    request.metadata_mut().insert(
        proto::DEADLINE_METADATA,
        gives_up
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
            .to_string()
            .parse()
            .unwrap(),
    );
    let stale = tokio::spawn(async move { raw.ensure_load_balancer(request).await });
    // Stopped well past that instant (the kernel holds the request).
    tokio::time::sleep(Duration::from_millis(600)).await;
    signal(&provider.0, "-CONT");

    let answer = tokio::time::timeout(Duration::from_secs(10), stale)
        .await
        .expect("an answer once resumed")
        .unwrap();
    let status = answer.expect_err("a request read after its deadline is refused");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    let found = client
        .get_load_balancer("kubernetes", service("stale"))
        .await
        .unwrap();
    assert_eq!(
        found, None,
        "the stale Ensure was applied after its deadline"
    );

    // A call within its deadline is applied as before.
    client
        .ensure_load_balancer("kubernetes", service("fresh"), vec![node("n1")])
        .await
        .expect("applied");
}
