//! Fixtures for unit tests of the controllers' I/O halves (as kube-rs's
//! controller-rs `fixtures.rs`): a scripted Kubernetes API that records
//! every request, and the fake provider on a temporary socket.

use std::sync::Arc;

use ccm_fake_provider::{FakeCloud, FakeConfig};
use ccm_provider_sdk::ProviderClient;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::Value;

use crate::context::Context;
use crate::manager::metrics::ControllerMetrics;

/// One request the controller sent to the API server.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: http::Method,
    /// Path and query.
    pub path: String,
    pub content_type: String,
    pub body: Value,
}

impl Call {
    /// `"PATCH /api/v1/nodes/n1"`, without the query.
    pub fn line(&self) -> String {
        let path = self.path.split('?').next().unwrap_or_default();
        format!("{} {path}", self.method)
    }

    pub fn is_event(&self) -> bool {
        self.path.contains("/events")
    }
}

/// The requests recorded so far, in order.
#[derive(Clone, Default)]
pub struct Recorded(Arc<Mutex<Vec<Call>>>);

impl Recorded {
    pub fn all(&self) -> Vec<Call> {
        self.0.lock().clone()
    }

    /// Every request but Event writes, as `line()`s.
    pub fn writes(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter(|c| !c.is_event() && c.method != http::Method::GET)
            .map(Call::line)
            .collect()
    }

    /// The reasons of the Events published, in order.
    pub fn event_reasons(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter(|c| c.is_event() && c.method == http::Method::POST)
            .filter_map(|c| c.body["reason"].as_str().map(str::to_owned))
            .collect()
    }
}

/// A client whose API server answers every request with `respond`
/// (status, JSON body).
pub fn mock_api(
    respond: impl Fn(&Call) -> (u16, Value) + Send + Sync + 'static,
) -> (Client, Recorded) {
    let recorded = Recorded::default();
    let log = recorded.clone();
    let respond = Arc::new(respond);
    let service = tower::service_fn(move |req: http::Request<Body>| {
        let log = log.clone();
        let respond = respond.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await?;
            let call = Call {
                method: parts.method,
                path: parts
                    .uri
                    .path_and_query()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (status, answer) = respond(&call);
            log.0.lock().push(call);
            let response = http::Response::builder()
                .status(status)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap_or_default()))
                .map_err(kube::Error::HttpError)?;
            Ok::<_, kube::Error>(response)
        }
    });
    (Client::new(service, "default"), recorded)
}

/// An API server that accepts every write, answering with what was sent
/// (enough for callers that only read the answer's metadata).
pub fn accepting_api() -> (Client, Recorded) {
    mock_api(|call| match call.method {
        http::Method::DELETE => (
            200,
            serde_json::json!({"kind": "Status", "status": "Success"}),
        ),
        _ => (200, call.body.clone()),
    })
}

/// The fake provider serving on a temporary socket while this lives.
pub struct Provider {
    pub fake: FakeCloud,
    pub client: ProviderClient,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

pub fn fake_provider(config: FakeConfig) -> Provider {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/provider.sock", dir.path().display());
    let fake = FakeCloud::new(config).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = fake.clone().serve(endpoint.clone(), async {
        let _ = stopped.await;
    });
    tokio::spawn(server);
    let client = ProviderClient::connect_lazy(&endpoint, Default::default()).unwrap();
    Provider {
        fake,
        client,
        _stop: stop,
        _dir: dir,
    }
}

/// A controller context over `client`, `provider` and a Node cache
/// holding `nodes`.
pub fn context(client: Client, provider: &Provider, nodes: Vec<Node>) -> Arc<Context> {
    context_over(client, provider.client.clone(), nodes)
}

/// [`context`] over any provider client (a provider written on the raw
/// generated traits, to send what the fake never would).
pub fn context_over(client: Client, provider: ProviderClient, nodes: Vec<Node>) -> Arc<Context> {
    scoped_context(
        client,
        crate::providers::ScopedProvider::single(provider),
        nodes,
        MANAGER,
    )
}

/// Two providers (docs/hybrid.md): "a", the default, owning `fake://`
/// (the fake's scheme), and "b", managing the platform "b" by flag and
/// owning `other://`. A Node labelled with the platform "b" is b's.
pub fn two_providers() -> crate::providers::Routing {
    use crate::providers::{Identity, Member, Table};
    let ident = |scheme: &str| Identity {
        schemes: vec![scheme.into()],
        serves_unclassed: true,
        ..Default::default()
    };
    let mut a = Member::new("a");
    a.identity = Some(ident("fake"));
    let mut b = Member::new("b");
    b.platforms = vec!["b".into()];
    b.identity = Some(ident("other"));
    Arc::new(parking_lot::RwLock::new(
        Table::hybrid(vec![a, b], Some("a")).unwrap(),
    ))
}

/// `n` labelled as running on the platform `platform` (KEP-5778).
pub fn on_platform(mut n: Node, platform: &str) -> Node {
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(
            crate::providers::route::PLATFORM_KEY.into(),
            platform.into(),
        );
    n
}

/// [`context`] for the provider `provider` of several, as `routing`
/// routes.
pub fn hybrid_context(
    client: Client,
    provider: &Provider,
    nodes: Vec<Node>,
    routing: &crate::providers::Routing,
    name: &str,
) -> Arc<Context> {
    hybrid_context_as(client, provider, nodes, routing, name, MANAGER)
}

/// [`hybrid_context`] writing as the field manager `manager`: how two
/// instances over one API server tell their writes apart.
pub fn hybrid_context_as(
    client: Client,
    provider: &Provider,
    nodes: Vec<Node>,
    routing: &crate::providers::Routing,
    name: &str,
    manager: &'static str,
) -> Arc<Context> {
    scoped_context(
        client,
        crate::providers::ScopedProvider {
            client: provider.client.clone(),
            scope: crate::providers::Scope::new(routing.clone(), name),
        },
        nodes,
        manager,
    )
}

/// The field manager of a test's context.
const MANAGER: &str = "test-controller";

fn scoped_context(
    client: Client,
    provider: crate::providers::ScopedProvider,
    nodes: Vec<Node>,
    manager: &'static str,
) -> Arc<Context> {
    let store = crate::k8s::node_store::NodeStore::of(nodes);
    let mut registry = prometheus_client::registry::Registry::default();
    Context::new(
        client,
        provider,
        store,
        "kubernetes".into(),
        manager,
        ControllerMetrics::register(&mut registry),
        ccm_runtime::events::Delivery::Inline,
    )
}

/// Waits until the fake provider answers (its socket appears).
pub async fn ready(provider: &Provider) {
    for _ in 0..200 {
        if provider.client.handshake().await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the fake provider did not start");
}

/// A `type: LoadBalancer` Service `ns/web` with one TCP port.
pub fn lb_service() -> k8s_openapi::api::core::v1::Service {
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    Service {
        metadata: kube::api::ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("web".into()),
            uid: Some("u-1".into()),
            generation: Some(3),
            resource_version: Some("1".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                port: 80,
                node_port: Some(30080),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A Node as `kubelet --cloud-provider=external` registers it: the
/// uninitialized taint and one of its own, a label, its hostname address.
pub fn tainted_node(name: &str) -> Node {
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus, Taint};
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("7".into()),
            labels: Some([("team".to_string(), "a".to_string())].into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![
                Taint {
                    key: crate::k8s::node::UNINITIALIZED_TAINT.into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
                Taint {
                    key: "dedicated".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "Hostname".into(),
                address: "kubelet-host".into(),
            }]),
            ..Default::default()
        }),
    }
}

/// The fake, as a cloud with a second kind of instance and news about its
/// machines (contract 1.2.0): it also owns `fake-metal://` providerIDs
/// (every such instance exists, and is running), and warns about every
/// Node whose name starts with "maint".
#[derive(Clone)]
pub struct MetalFake(pub FakeCloud);

impl ccm_provider_sdk::Identity for MetalFake {
    fn info(&self) -> ccm_provider_sdk::ProviderInfo {
        ccm_provider_sdk::Identity::info(&self.0).also_owns("fake-metal")
    }
}

impl ccm_provider_sdk::Instances for MetalFake {
    async fn instance_exists(
        &self,
        ctx: ccm_provider_sdk::CallContext,
        node: ccm_provider_sdk::proto::NodeRef,
    ) -> ccm_provider_sdk::ProviderResult<ccm_provider_sdk::Existence> {
        if node.provider_id.starts_with("fake-metal://") {
            return Ok(ccm_provider_sdk::Existence::Exists);
        }
        ccm_provider_sdk::Instances::instance_exists(&self.0, ctx, node).await
    }

    async fn instance_shutdown(
        &self,
        ctx: ccm_provider_sdk::CallContext,
        node: ccm_provider_sdk::proto::NodeRef,
    ) -> ccm_provider_sdk::ProviderResult<ccm_provider_sdk::ShutdownState> {
        if node.provider_id.starts_with("fake-metal://") {
            return Ok(ccm_provider_sdk::ShutdownState::Running);
        }
        ccm_provider_sdk::Instances::instance_shutdown(&self.0, ctx, node).await
    }

    async fn instance_metadata(
        &self,
        ctx: ccm_provider_sdk::CallContext,
        node: ccm_provider_sdk::proto::NodeRef,
    ) -> ccm_provider_sdk::ProviderResult<ccm_provider_sdk::proto::InstanceMetadata> {
        if node.name.starts_with("maint") {
            ctx.warn(
                "MaintenanceScheduled",
                format!("the machine of {} is rebooted on Sunday", node.name),
            );
        }
        ccm_provider_sdk::Instances::instance_metadata(&self.0, ctx, node).await
    }
}

/// [`MetalFake`] over a fake with `config`, serving on a temporary socket
/// while the returned guard lives.
pub fn metal_fake(config: FakeConfig) -> (Provider, ProviderClient) {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/metal.sock", dir.path().display());
    let inner = fake_provider(config);
    let metal = MetalFake(inner.fake.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = ccm_provider_sdk::ProviderServer::new(metal.clone()).with_instances(metal);
    let serving = endpoint.clone();
    tokio::spawn(async move {
        server
            .serve(&serving, async {
                let _ = stopped.await;
            })
            .await
    });
    let client = ProviderClient::connect_lazy(&endpoint, Default::default()).unwrap();
    (
        Provider {
            fake: inner.fake.clone(),
            client: client.clone(),
            _stop: stop,
            _dir: dir,
        },
        client,
    )
}
