//! What the in-process benchmarks share: the fake provider on a fresh
//! socket, and the controller run in-process against the test control
//! plane as the cluster admin (no Lease, no admin port).
#![allow(dead_code)] // each benchmark uses a different part

use ccm_fake_provider::{FakeCloud, FakeConfig};
use ccm_testsupport::TestEnv;
use clap::Parser;
use cloud_controller_manager::config::Options;
use tokio::sync::oneshot;

/// The fake provider serving on a temporary socket until dropped.
pub struct Provider {
    pub fake: FakeCloud,
    pub endpoint: String,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

pub fn provider(config: FakeConfig) -> Provider {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/p.sock", dir.path().display());
    let fake = FakeCloud::new(config).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(fake.clone().serve(endpoint.clone(), async {
        let _ = stopped.await;
    }));
    Provider {
        fake,
        endpoint,
        _stop: stop,
        _dir: dir,
    }
}

/// The controller running in-process; [`Controller::stop`] ends it.
pub struct Controller {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), cloud_controller_manager::RunError>>,
}

/// Starts the controller against `provider` with `flags` added.
pub async fn controller(provider: &Provider, flags: &[&str]) -> Controller {
    let mut args = vec![
        "ccm".to_string(),
        format!("--provider-endpoint={}", provider.endpoint),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    let opts = Options::try_parse_from(args).unwrap();
    let enabled = opts.validate().unwrap();
    let config = TestEnv::get().admin_config().await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(cloud_controller_manager::run(
        opts,
        enabled,
        config,
        async {
            let _ = stopped.await;
        },
    ));
    Controller { stop, task }
}

impl Controller {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

/// Creates `n` Nodes `<run>-<i>` labelled `bench-run=<run>`, 32 at a time,
/// each with `spec(i)`.
pub async fn create_nodes(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    run: &str,
    n: usize,
    spec: impl Fn(usize) -> k8s_openapi::api::core::v1::NodeSpec,
) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{ObjectMeta, PostParams};
    let spec = &spec;
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let nodes = nodes.clone();
            let run = run.to_owned();
            async move {
                let node = Node {
                    metadata: ObjectMeta {
                        name: Some(format!("{run}-{i}")),
                        labels: Some([("bench-run".to_string(), run)].into()),
                        ..Default::default()
                    },
                    spec: Some(spec(i)),
                    ..Default::default()
                };
                nodes.create(&PostParams::default(), &node).await.unwrap();
            }
        })
        .await;
}

/// The controller's logs on stderr, as RUST_LOG says (RUST_LOG=warn shows
/// its retries, if any).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
}

/// The count in the environment variable `name`, else `default`.
pub fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Creates `n` Services `lb-<i>` of type LoadBalancer (port 80), 32 at a
/// time; `allocate_node_ports: Some(false)` for more than the node-port
/// range holds.
pub async fn create_lb_services(
    services: &kube::Api<k8s_openapi::api::core::v1::Service>,
    n: usize,
    allocate_node_ports: Option<bool>,
) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    use kube::api::{ObjectMeta, PostParams};
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let services = services.clone();
            async move {
                let svc = Service {
                    metadata: ObjectMeta {
                        name: Some(format!("lb-{i}")),
                        ..Default::default()
                    },
                    spec: Some(ServiceSpec {
                        type_: Some("LoadBalancer".into()),
                        ports: Some(vec![ServicePort {
                            port: 80,
                            ..Default::default()
                        }]),
                        allocate_load_balancer_node_ports: allocate_node_ports,
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                services.create(&PostParams::default(), &svc).await.unwrap();
            }
        })
        .await;
}
