//! `--tracing-endpoint`: the controller binary exports each reconcile's
//! span over OTLP/gRPC to a collector (here one the test serves on
//! loopback), and the provider calls of that reconcile carry it as their
//! W3C traceparent, so the provider's spans join the same trace.

use std::sync::Arc;

use crate::common::{ControlPlane, UNINITIALIZED, eventually, free_port, has_taint};
use ccm_fake_provider::{FakeCloud, FakeConfig, Method};
use ccm_testsupport::{built_binary, unique_name};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use std::sync::Mutex;

/// One span as the collector received it.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: String,
    span_id: String,
    attributes: Vec<(String, String)>,
    service: String,
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Received>>>);

impl Collector {
    fn spans(&self) -> Vec<Received> {
        self.0.lock().unwrap().clone()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        other => format!("{other:?}"),
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .map(|a| text(&a.value))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    self.0.lock().unwrap().push(Received {
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        attributes: span
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(&a.value)))
                            .collect(),
                        service: service.clone(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The controller process, killed however the test ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn reconcile_spans_reach_the_collector_and_the_provider_joins_their_trace() {
    // Exclusive: it runs a controller. Declared first, released last, after
    // the controller process is killed.
    let control_plane = ControlPlane::exclusive().await;
    let env = control_plane.env();
    let admin = env.admin_client().await.unwrap();
    let ns = env.namespace(&admin, "otlp").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("ccm.kubeconfig");
    crate::common::process_identity(env, &admin, &ns, None, &kubeconfig).await;

    // The collector, on loopback.
    let collector = Collector::default();
    let port = free_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    // The provider, in this process, recording each call's trace id.
    let endpoint = format!("unix://{}/provider.sock", dir.path().display());
    let fake = FakeCloud::new(FakeConfig::default()).unwrap();
    tokio::spawn(fake.clone().serve(endpoint.clone(), std::future::pending()));

    let _controller = Killed(
        std::process::Command::new(built_binary(
            "cloud-controller-manager",
            "cloud-controller-manager",
        ))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--provider-endpoint={endpoint}"))
        .arg("--controllers=cloud-node")
        // One Node per batch: the call carries that Node's reconcile's id.
        .arg("--provider-batch-size=1")
        .arg("--leader-elect=false")
        .arg("--secure-port=0")
        .arg(format!("--tracing-endpoint=http://127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("controller.log")).unwrap())
        .spawn()
        .unwrap(),
    );

    let name = unique_name("traced");
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &crate::common::kubelet_node(&name))
        .await
        .unwrap();
    let nodes = Api::<Node>::all(admin.clone());
    eventually("the Node initialised", || async {
        match nodes.get(&name).await {
            Ok(n) if !has_taint(&n, UNINITIALIZED) => Ok(()),
            other => Err(format!("{:?}", other.map(|n| n.spec))),
        }
    })
    .await;
    // The batch exporter sends every few seconds.
    let id = format!("node/{name}");
    let span = eventually("the reconcile span at the collector", || async {
        let spans = collector.spans();
        spans
            .iter()
            .find(|s| {
                s.name == "reconcile"
                    && s.attributes
                        .iter()
                        .any(|(k, v)| k == "request_id" && *v == id)
            })
            .cloned()
            .ok_or_else(|| format!("{} spans so far", spans.len()))
    })
    .await;
    assert_eq!(span.service, "cloud-controller-manager");
    assert!(
        span.attributes
            .iter()
            .any(|(k, v)| k == "trace_id" && *v == span.trace_id),
        "the span's own trace_id field is its exported trace id: {span:?}\n{}",
        std::fs::read_to_string(dir.path().join("controller.log")).unwrap_or_default()
    );
    // The provider saw that reconcile's call in the same trace.
    let call = fake
        .calls_of(Method::BatchInstances)
        .into_iter()
        .find(|c| c.request_id == id)
        .expect("the BatchInstances call of that reconcile");
    assert_eq!(call.trace_id.as_deref(), Some(span.trace_id.as_str()));
    assert_eq!(span.span_id.len(), 16);
}
