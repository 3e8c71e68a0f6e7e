//! Starts the fake over a real Unix socket in a temp dir and hands out a
//! client, so integration tests exercise the same path as the controller.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use ccm_fake_provider::{FakeCloud, FakeConfig};
use ccm_provider_sdk::proto::{
    NodeRef, Protocol, Service, ServicePort, SessionAffinity, TrafficPolicy,
};
use ccm_provider_sdk::{ClientOptions, ProviderClient, ServeError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct Running {
    pub fake: FakeCloud,
    pub client: ProviderClient,
    pub endpoint: String,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

pub async fn start(config: FakeConfig) -> Running {
    start_with(config, ClientOptions::default()).await
}

pub async fn start_with(config: FakeConfig, opts: ClientOptions) -> Running {
    let dir = tempfile::tempdir().expect("temp dir");
    let endpoint = format!("unix://{}", dir.path().join("provider.sock").display());
    let fake = FakeCloud::new(config).expect("valid config");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(fake.clone().serve(endpoint.clone(), async {
        let _ = stopped.await;
    }));
    let client = ProviderClient::connect_lazy(&endpoint, opts).expect("client");
    // The server binds asynchronously: poll until it answers.
    let probe = client.clone();
    wait_for("the provider to answer a probe", || {
        let probe = probe.clone();
        async move { probe.probe().await.is_ok() }
    })
    .await;
    fake.clear_calls();
    Running {
        fake,
        client,
        endpoint,
        dir,
        stop: Some(stop),
        task: Some(task),
    }
}

impl Running {
    /// Stops the server and checks it shut down cleanly.
    pub async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        let task = self.task.take().expect("running");
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("server stops")
            .expect("server task")
            .expect("server ran cleanly");
    }
}

/// Polls `cond` every 10 ms until it holds, failing after 10 s.
pub async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

pub fn service(uid: &str) -> Service {
    Service {
        namespace: "default".into(),
        name: format!("svc-{uid}"),
        uid: uid.into(),
        ports: vec![ServicePort {
            protocol: Protocol::Tcp as i32,
            port: 80,
            node_port: 30080,
            ..Default::default()
        }],
        external_traffic_policy: TrafficPolicy::Cluster as i32,
        session_affinity: SessionAffinity::None as i32,
        ..Default::default()
    }
}
