//! SDK server and client talking over a real Unix socket.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ccm_provider_sdk::NodeSet;
use ccm_provider_sdk::proto::{
    self, Capability, InstanceMetadata, LoadBalancerIngress, LoadBalancerStatus, NodeAddress,
    NodeAddressType, NodeRef, Service, Warning,
};
use ccm_provider_sdk::{
    CallContext, ClientError, ClientOptions, Existence, Identity, Instances, LbAnswer,
    LoadBalancers, Outcome, ProviderClient, ProviderError, ProviderInfo, ProviderResult,
    ProviderServer, ServeError, ShutdownState, bind_socket,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[derive(Clone, Default)]
struct TestCloud {
    version: &'static str,
    slow: Option<Duration>,
    /// Set when a slow call's future was dropped before it finished.
    cancelled: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Identity for TestCloud {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "test".into(),
            vendor_version: self.version.into(),
            provider_id_scheme: "test".into(),
            ..Default::default()
        }
    }
}

struct SetOnDrop(Arc<AtomicBool>, bool);
impl Drop for SetOnDrop {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

impl Instances for TestCloud {
    async fn instance_exists(&self, ctx: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        assert!(ctx.request_id.starts_with("ccm-") || ctx.request_id == "req-42");
        if let Some(d) = self.slow {
            let mut guard = SetOnDrop(self.cancelled.clone(), false);
            tokio::time::sleep(d).await;
            guard.1 = true;
        }
        Ok(if node.name.starts_with("vm-") {
            Existence::Exists
        } else {
            Existence::NotExists
        })
    }

    async fn instance_shutdown(&self, _: CallContext, _: NodeRef) -> ProviderResult<ShutdownState> {
        Ok(ShutdownState::Running)
    }

    async fn instance_metadata(
        &self,
        _: CallContext,
        node: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        if !node.name.starts_with("vm-") {
            return Err(ProviderError::instance_not_found(format!(
                "no instance for {}",
                node.name
            )));
        }
        // A Node that has its providerID needs none in the answer.
        let provider_id = if node.provider_id.is_empty() {
            format!("test://{}", node.name)
        } else {
            String::new()
        };
        Ok(InstanceMetadata {
            provider_id,
            node_addresses: vec![NodeAddress {
                r#type: NodeAddressType::InternalIp as i32,
                address: "10.0.0.1".into(),
            }],
            ..Default::default()
        })
    }
}

impl LoadBalancers for TestCloud {
    async fn get_load_balancer(
        &self,
        _: CallContext,
        _: String,
        _: Service,
    ) -> ProviderResult<Option<LoadBalancerStatus>> {
        Ok(None)
    }

    async fn ensure_load_balancer(
        &self,
        _: CallContext,
        _: String,
        _: Service,
        nodes: NodeSet,
    ) -> ProviderResult<LbAnswer<LoadBalancerStatus>> {
        Ok(LbAnswer::done(LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: "192.0.2.10".into(),
                ..Default::default()
            }],
        })
        .warn("Backends", format!("{} backends", nodes.len())))
    }

    async fn update_load_balancer(
        &self,
        _: CallContext,
        _: String,
        _: Service,
        _: NodeSet,
    ) -> ProviderResult<LbAnswer<()>> {
        Ok(LbAnswer::implemented_elsewhere("another controller"))
    }

    async fn ensure_load_balancer_deleted(
        &self,
        _: CallContext,
        _: String,
        _: Service,
    ) -> ProviderResult<Vec<Warning>> {
        Ok(vec![])
    }
}

struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

async fn serve(path: &Path, cloud: TestCloud, with_lbs: bool) -> Running {
    let (tx, rx) = oneshot::channel();
    let mut server = ProviderServer::new(cloud.clone()).with_instances(cloud.clone());
    if with_lbs {
        server = server.with_load_balancers(cloud);
    }
    let endpoint = format!("unix://{}", path.display());
    let task = tokio::spawn(async move {
        server
            .serve(&endpoint, async {
                let _ = rx.await;
            })
            .await
    });
    // Serving has started once the socket accepts connections.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::UnixStream::connect(path).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Running {
        stop: Some(tx),
        task,
    }
}

/// [`serve`] with a default cloud of version "1".
async fn serve_v1(path: &Path, with_lbs: bool) -> Running {
    serve(
        path,
        TestCloud {
            version: "1",
            ..Default::default()
        },
        with_lbs,
    )
    .await
}

fn socket(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("provider.sock")
}

fn client(path: &Path, opts: ClientOptions) -> ProviderClient {
    ProviderClient::connect_lazy(&format!("unix://{}", path.display()), opts).unwrap()
}

/// A plain tonic channel to the socket, for requests the SDK's client
/// would never send.
async fn raw_channel(path: &Path) -> tonic::transport::Channel {
    ccm_provider_sdk::endpoint::raw_channel(path).await.unwrap()
}

fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

fn service() -> Service {
    ccm_testsupport::proto_service("default", "web", "1f6c0b4e-0000-4000-8000-000000000001")
}

#[tokio::test]
async fn typed_round_trip_with_derived_capabilities() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);
    let server = serve_v1(&path, true).await;
    let c = client(&path, ClientOptions::default());

    let h = c.handshake().await.unwrap();
    assert_eq!(h.info.name, "test");
    assert_eq!(h.info.contract_version, proto::CONTRACT_VERSION);
    assert_eq!(
        h.capabilities.iter().copied().collect::<Vec<_>>(),
        vec![
            Capability::Instances,
            Capability::LoadBalancers,
            Capability::NodeSets,
            Capability::InstancesBatch
        ]
    );
    assert_eq!(
        c.instance_exists(node("vm-1")).await.unwrap(),
        Existence::Exists
    );
    let known = NodeRef {
        provider_id: "test://vm-1".into(),
        ..node("vm-1")
    };
    assert_eq!(
        c.instance_metadata(known).await.unwrap().provider_id,
        "",
        "an empty providerID is a valid answer for a Node that has one"
    );
    assert_eq!(
        c.instance_exists(node("gone")).await.unwrap(),
        Existence::NotExists
    );
    let err = c.instance_metadata(node("gone")).await.unwrap_err();
    let pe = err.provider_error().unwrap();
    assert_eq!(pe.code(), tonic::Code::NotFound);
    assert_eq!(pe.reason(), Some(proto::ErrorReason::InstanceNotFound));
    assert_eq!(err.to_string(), "no instance for gone", "no gRPC framing");

    let answer = c
        .with_request_id("req-42")
        .ensure_load_balancer("kubernetes", service(), vec![node("vm-1")])
        .await
        .unwrap();
    assert_eq!(answer.warnings[0].message, "1 backends");
    let updated = c
        .update_load_balancer("kubernetes", service(), vec![])
        .await
        .unwrap();
    assert_eq!(
        updated.outcome,
        ccm_provider_sdk::LbOutcome::ImplementedElsewhere("another controller".into())
    );
    // The default name is scoped by the cluster: two clusters sharing an
    // account never claim one load balancer (upstream's omits the cluster).
    assert_eq!(
        c.get_load_balancer_name("kubernetes", service())
            .await
            .unwrap(),
        "kubernetes-1f6c0b4e000040008000000000000001"
    );
    assert_ne!(
        c.get_load_balancer_name("other", service()).await.unwrap(),
        c.get_load_balancer_name("kubernetes", service())
            .await
            .unwrap()
    );
    // Not advertised: refused by the client before any call.
    assert!(matches!(
        c.list_routes("kubernetes").await.unwrap_err(),
        ClientError::Unsupported(Capability::Routes)
    ));
    server.stop().await;
    assert!(!path.exists(), "socket removed on shutdown");
}

#[tokio::test]
async fn client_reconnects_and_handshakes_again_after_a_provider_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);
    let c = client(&path, ClientOptions::default());

    // The controller may start first: calls fail, but say the outcome is unknown.
    let err = c.instance_exists(node("vm-1")).await.unwrap_err();
    assert_eq!(err.outcome(), Outcome::Unknown, "{err:?}");

    let first = serve_v1(&path, false).await;
    assert_eq!(
        c.instance_exists(node("vm-1")).await.unwrap(),
        Existence::Exists
    );
    assert_eq!(c.handshake().await.unwrap().info.vendor_version, "1");
    assert!(!c.handshake().await.unwrap().has(Capability::LoadBalancers));
    first.stop().await;

    // An upgraded provider with more capabilities comes back on the same path.
    let second = serve(
        &path,
        TestCloud {
            version: "2",
            ..Default::default()
        },
        true,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match c.instance_exists(node("vm-1")).await {
            Ok(e) => {
                assert_eq!(e, Existence::Exists);
                break;
            }
            Err(e) => {
                assert_eq!(e.outcome(), Outcome::Unknown, "{e:?}");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no reconnect: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let h = c.handshake().await.unwrap();
    assert_eq!(
        h.info.vendor_version, "2",
        "re-handshaked on the new connection"
    );
    assert!(h.has(Capability::LoadBalancers));
    assert!(c.connection_count() >= 2);
    second.stop().await;
}

#[tokio::test]
async fn deadline_on_a_slow_provider_expires_and_cancels_the_provider_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);
    let cloud = TestCloud {
        version: "1",
        slow: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    let server = serve(&path, cloud.clone(), false).await;
    let c = client(
        &path,
        ClientOptions {
            read_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    );
    c.handshake().await.unwrap();
    let started = std::time::Instant::now();
    let err = c.instance_exists(node("vm-1")).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(err.outcome(), Outcome::Unknown);
    let code = err.provider_error().unwrap().code();
    assert!(
        matches!(code, tonic::Code::DeadlineExceeded | tonic::Code::Cancelled),
        "{code:?}"
    );
    // The grpc-timeout reached the server, which dropped the provider's future.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cloud.cancelled.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "provider call not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn socket_permissions_and_stale_or_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);

    // The mode is what was asked, whatever the umask.
    let l = bind_socket(&path, 0o600).await.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // A live socket is never stolen.
    assert!(matches!(
        bind_socket(&path, 0o600).await,
        Err(ServeError::InUse(_))
    ));
    drop(l);
    // A stale one (its server is gone) is replaced.
    let l = bind_socket(&path, 0o660).await.unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o660
    );
    drop(l);

    // A regular file at the path is never removed.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"not a socket").unwrap();
    let err = bind_socket(&path, 0o600).await.unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
}

#[tokio::test]
async fn client_refuses_a_socket_other_users_can_reach() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);
    let server = serve_v1(&path, false).await;
    for refused in [0o666, 0o602, 0o777] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(refused)).unwrap();
        let c = client(&path, ClientOptions::default());
        let err = c.handshake().await.unwrap_err();
        assert!(err.to_string().contains(&format!("{refused:04o}")), "{err}");
    }
    // Others without write permission cannot connect: nothing to refuse.
    for accepted in [0o600, 0o660, 0o644, 0o755] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(accepted)).unwrap();
        let c = client(&path, ClientOptions::default());
        c.handshake().await.unwrap();
    }
    server.stop().await;
}

#[tokio::test]
async fn messages_larger_than_grpc_default_4mib_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);
    let server = serve_v1(&path, true).await;
    let c = client(&path, ClientOptions::default());
    // ~6 MiB of NodeRefs.
    let nodes: Vec<NodeRef> = (0..3000)
        .map(|i| NodeRef {
            name: format!("vm-{i}"),
            labels: (0..20)
                .map(|j| (format!("example.com/label-{j}"), "x".repeat(60)))
                .collect(),
            ..Default::default()
        })
        .collect();
    let size: usize = nodes.iter().map(prost::Message::encoded_len).sum();
    assert!(size > 4 * 1024 * 1024, "{size}");
    let answer = c
        .ensure_load_balancer("kubernetes", service(), nodes)
        .await
        .unwrap();
    assert_eq!(answer.warnings[0].message, "3000 backends");
    server.stop().await;
}

#[tokio::test]
async fn invalid_requests_are_rejected_naming_the_field_before_the_provider_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);
    let cloud = TestCloud {
        version: "1",
        ..Default::default()
    };
    let server = serve(&path, cloud.clone(), false).await;
    let channel = raw_channel(&path).await;
    let mut raw = proto::instances_service_client::InstancesServiceClient::new(channel);
    let cases = [
        (proto::InstanceExistsRequest { node: None }, "node"),
        (
            proto::InstanceExistsRequest {
                node: Some(NodeRef::default()),
            },
            "node.name",
        ),
        (
            proto::InstanceExistsRequest {
                node: Some(NodeRef {
                    name: "vm-1".into(),
                    addresses: vec![NodeAddress {
                        r#type: 42,
                        address: "10.0.0.1".into(),
                    }],
                    ..Default::default()
                }),
            },
            "node.addresses[0].type",
        ),
        // Another cloud's instance: not this provider's to judge, so a
        // provider that answers NOT_EXISTS for anything unknown never
        // gets the chance to (the controller would delete the Node).
        (
            proto::InstanceExistsRequest {
                node: Some(NodeRef {
                    name: "vm-1".into(),
                    provider_id: "aws:///us-east-1a/i-0123".into(),
                    ..Default::default()
                }),
            },
            "node.provider_id",
        ),
        (
            proto::InstanceExistsRequest {
                node: Some(NodeRef {
                    name: "vm-1".into(),
                    provider_id: "testing://vm-1".into(),
                    ..Default::default()
                }),
            },
            "node.provider_id",
        ),
    ];
    for (req, field) in cases {
        let status = raw.instance_exists(req).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        let e = ProviderError::from_status(&status);
        assert_eq!(e.reason(), Some(proto::ErrorReason::InvalidRequest));
        assert_eq!(e.field_violations()[0].0, field);
    }
    assert_eq!(
        cloud.calls.load(Ordering::SeqCst),
        0,
        "provider never called"
    );
    server.stop().await;
}

/// Counts the calls of each method the client made, by their answer code.
#[derive(Default)]
struct Calls(std::sync::Mutex<Vec<(&'static str, tonic::Code)>>);

impl ccm_provider_sdk::client::CallObserver for Calls {
    fn observe(&self, method: &'static str, code: tonic::Code, _: Duration) {
        self.0.lock().unwrap().push((method, code));
    }
}

impl Calls {
    fn of(&self, method: &str) -> Vec<tonic::Code> {
        let calls = self.0.lock().unwrap();
        calls
            .iter()
            .filter(|(m, _)| *m == method)
            .map(|(_, c)| *c)
            .collect()
    }
}

#[tokio::test]
async fn a_node_set_is_put_once_and_named_by_id_until_the_provider_forgets_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir);
    let running = serve_v1(&path, true).await;
    let calls = Arc::new(Calls::default());
    let c = client(
        &path,
        ClientOptions {
            observer: Some(calls.clone()),
            ..Default::default()
        },
    );
    assert!(c.handshake().await.unwrap().has(Capability::NodeSets));

    // TestCloud's Ensure reports how many backends it was handed.
    let backends = |answer: LbAnswer<LoadBalancerStatus>| answer.warnings[0].message.clone();
    let three = NodeSet::new(vec![node("vm-1"), node("vm-2"), node("vm-3")]);
    for _ in 0..3 {
        let answer = c
            .ensure_load_balancer("k", service(), &three)
            .await
            .unwrap();
        assert_eq!(backends(answer), "3 backends");
    }
    assert_eq!(calls.of("PutNodeSet"), [tonic::Code::Ok], "put once");
    assert_eq!(calls.of("EnsureLoadBalancer").len(), 3);

    // Another client puts 8 other sets: the provider keeps the newest 8
    // and forgets ours. Our next call is told so, puts the set again and
    // repeats.
    let other = client(&path, ClientOptions::default());
    for i in 0..8 {
        let set = NodeSet::new(vec![node(&format!("vm-other-{i}"))]);
        other
            .ensure_load_balancer("k", service(), set)
            .await
            .unwrap();
    }
    let answer = c
        .ensure_load_balancer("k", service(), &three)
        .await
        .unwrap();
    assert_eq!(backends(answer), "3 backends");
    assert_eq!(
        calls.of("EnsureLoadBalancer")[3..],
        [tonic::Code::FailedPrecondition, tonic::Code::Ok]
    );
    assert_eq!(calls.of("PutNodeSet").len(), 2);

    // Sets are per cluster: the same set for another cluster is put anew.
    c.ensure_load_balancer("k2", service(), &three)
        .await
        .unwrap();
    assert_eq!(calls.of("PutNodeSet").len(), 3);

    // Inline nodes still work for any caller that sends them.
    let raw = proto::EnsureLoadBalancerRequest {
        cluster_name: "k".into(),
        service: Some(service()),
        nodes: vec![node("vm-9")],
        node_set_id: String::new(),
    };
    let channel = raw_channel(&path).await;
    let mut lb = proto::load_balancer_service_client::LoadBalancerServiceClient::new(channel);
    let answer = lb
        .ensure_load_balancer(raw.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.warnings[0].message, "1 backends");
    // Both at once is a contract violation; an unknown id changes nothing.
    let both = proto::EnsureLoadBalancerRequest {
        node_set_id: three.id().to_owned(),
        ..raw.clone()
    };
    let err = lb.ensure_load_balancer(both).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let unknown = proto::EnsureLoadBalancerRequest {
        nodes: vec![],
        node_set_id: "sha256-0000".into(),
        ..raw
    };
    let err = lb.ensure_load_balancer(unknown).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert_eq!(
        ProviderError::from_status(&err).reason(),
        Some(proto::ErrorReason::NodeSetUnknown)
    );
    running.stop().await;
}
