//! A provider that echoes a huge text into an error (issue 12, point 12):
//! that one call fails with the text cut, every other call on the shared
//! connection goes on, and the connection is not rebuilt. The provider is
//! written on the raw generated traits: the SDK's server cuts such texts.

use ccm_provider_sdk::proto::*;
use ccm_provider_sdk::{ClientOptions, Existence, ProviderClient};
use ccm_testsupport::raw::{RawIdentity, RawServer};
use tonic::{Request, Response, Status};

const ECHO_BYTES: usize = 200 * 1024;

struct Echoing;

fn echoing() -> RawServer {
    RawServer::start(
        tonic::transport::Server::builder()
            .add_service(RawIdentity::new("echoing", &[Capability::Instances]).server())
            .add_service(instances_service_server::InstancesServiceServer::new(
                Echoing,
            )),
    )
}

#[tonic::async_trait]
impl instances_service_server::InstancesService for Echoing {
    /// Not announced (no CAPABILITY_INSTANCES_BATCH).
    async fn batch_instances(
        &self,
        _: Request<ccm_provider_sdk::proto::BatchInstancesRequest>,
    ) -> Result<Response<ccm_provider_sdk::proto::BatchInstancesResponse>, Status> {
        Err(Status::unimplemented("BatchInstances"))
    }

    async fn instance_exists(
        &self,
        r: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        let node = r.into_inner().node.unwrap_or_default();
        if node.name == "echo" {
            // A 200 KB annotation value echoed into the message.
            return Err(Status::invalid_argument(format!(
                "bad annotation value {}",
                "x".repeat(ECHO_BYTES)
            )));
        }
        Ok(Response::new(InstanceExistsResponse {
            existence: InstanceExistence::Exists as i32,
        }))
    }
    async fn instance_shutdown(
        &self,
        _: Request<InstanceShutdownRequest>,
    ) -> Result<Response<InstanceShutdownResponse>, Status> {
        Err(Status::unimplemented("unused"))
    }
    async fn instance_metadata(
        &self,
        _: Request<InstanceMetadataRequest>,
    ) -> Result<Response<InstanceMetadataResponse>, Status> {
        Err(Status::unimplemented("unused"))
    }
}

fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

/// One test at a time: `a_huge_error_gives_a_bounded_log_line` sets a
/// thread's subscriber, and tracing may cache a call site as uninteresting
/// if another thread reaches it while that subscriber registers (seen
/// once in a CI run: the line was not logged).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn one_huge_error_fails_one_call_only() {
    let _serial = SERIAL.lock().await;
    let server = echoing();
    let client = ProviderClient::connect_lazy(&server.endpoint, ClientOptions::default()).unwrap();
    client.handshake().await.unwrap();

    for _ in 0..3 {
        let mut calls = Vec::new();
        for i in 0..20 {
            let c = client.clone();
            calls.push(tokio::spawn(async move {
                c.instance_exists(node(&format!("n{i}"))).await
            }));
        }
        let echoed = client.instance_exists(node("echo")).await.unwrap_err();
        let e = echoed.provider_error().expect("the provider's own error");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{echoed}");
        assert!(
            e.message().starts_with("bad annotation value xxx")
                && e.message().len() <= ccm_provider_sdk::error::MAX_ERROR_TEXT_BYTES,
            "cut to a bounded text: {} bytes",
            e.message().len()
        );
        for c in calls {
            assert_eq!(c.await.unwrap().unwrap(), Existence::Exists);
        }
    }
    assert_eq!(
        client.connection_count(),
        1,
        "the connection was never rebuilt"
    );
    server.stop().await;
}

/// Issue 25, finding 7: the client logs each failed call with the
/// provider's error text; a 200 KB text gave a 200 KB log line on every
/// call. The line is cut as the error is.
#[tokio::test]
async fn a_huge_error_gives_a_bounded_log_line() {
    let _serial = SERIAL.lock().await;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::prelude::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let json = Buffer::default();
    let json_writer = json.clone();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(move || json_writer.clone()),
        );
    // The test's runtime has one thread: the calls log here.
    let _default = tracing::subscriber::set_default(subscriber);

    let server = echoing();
    let client = ProviderClient::connect_lazy(&server.endpoint, ClientOptions::default()).unwrap();
    client.instance_exists(node("echo")).await.unwrap_err();
    server.stop().await;

    for (format, buffer) in [("plain", buffer), ("json", json)] {
        let out = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let failed: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("provider call failed"))
            .collect();
        assert_eq!(failed.len(), 1, "{format}: {out:.2000}");
        let line = failed[0];
        assert!(
            line.len() <= 4096 + 400,
            "{format}: a {}-byte line",
            line.len()
        );
        assert!(line.contains("bad annotation value xxx"), "{format}");
        assert!(line.contains("bytes, cut)"), "{format}: marked as cut");
    }
}
