//! Round-trip latency of contract calls over a Unix socket, SDK client to an
//! SDK server in another process, as the controller and its provider sidecar
//! run (`cargo bench -p ccm-provider-sdk --bench uds_roundtrip`). Both
//! processes use the runtime the controller and the fake provider use by
//! default, one tokio worker thread (`BENCH_WORKER_THREADS` changes it), and
//! every call is made from a spawned task, as the reconcilers make them.
//! Prints percentiles for sequential calls and throughput with 1, 16 and 64
//! calls in flight. To show where the time goes, the same sequential
//! measurement is made without the SDK's client (tonic's generated client on
//! a plain `Channel`, to the same SDK server) and for a bare 64-byte echo to
//! the other process (two wake-ups across processes and nothing else). A
//! benchmark, not a test: it asserts nothing about speed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ccm_provider_sdk::proto::instances_service_client::InstancesServiceClient;
use ccm_provider_sdk::proto::{InstanceExistsRequest, InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    CallContext, ClientOptions, Existence, Identity, Instances, ProviderClient, ProviderInfo,
    ProviderResult, ProviderServer, ShutdownState,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone)]
struct Echo;

impl Identity for Echo {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "bench".into(),
            vendor_version: "0".into(),
            provider_id_scheme: "bench".into(),
            ..Default::default()
        }
    }
}

impl Instances for Echo {
    async fn instance_exists(&self, _: CallContext, _: NodeRef) -> ProviderResult<Existence> {
        Ok(Existence::Exists)
    }
    async fn instance_shutdown(&self, _: CallContext, _: NodeRef) -> ProviderResult<ShutdownState> {
        Ok(ShutdownState::Running)
    }
    async fn instance_metadata(
        &self,
        _: CallContext,
        n: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        Ok(InstanceMetadata {
            provider_id: format!("bench://{}", n.name),
            ..Default::default()
        })
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Runs `call` 1,000 times unmeasured, then `n` times; prints percentiles.
async fn sequential<F, Fut>(what: &str, n: usize, mut call: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..1000 {
        call().await;
    }
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        call().await;
        lat.push(t.elapsed());
    }
    let took = start.elapsed();
    lat.sort();
    println!(
        "{what}, sequential, {n} calls: p50 {:?}  p90 {:?}  p99 {:?}  p99.9 {:?}  max {:?}  ({:.0} calls/s)",
        percentile(&lat, 0.50),
        percentile(&lat, 0.90),
        percentile(&lat, 0.99),
        percentile(&lat, 0.999),
        lat[lat.len() - 1],
        n as f64 / took.as_secs_f64()
    );
}

/// Set in the child process: the directory to serve in.
const SERVE_DIR: &str = "UDS_ROUNDTRIP_SERVE_DIR";

fn runtime() -> tokio::runtime::Runtime {
    let workers = std::env::var("BENCH_WORKER_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

fn main() {
    let rt = runtime();
    match std::env::var_os(SERVE_DIR) {
        Some(dir) => rt.block_on(serve(PathBuf::from(dir))),
        // The measuring loop runs in a spawned task: `block_on`'s future
        // runs on the main thread, and every call from it would cross to the
        // worker and back, which no reconciler does.
        None => rt.block_on(async { tokio::spawn(measure()).await.unwrap() }),
    }
}

/// The other process: the SDK server on `provider.sock` and a 64-byte echo
/// on `echo.sock`, until stdin closes (the parent exited or dropped it).
async fn serve(dir: PathBuf) {
    let echo = tokio::net::UnixListener::bind(dir.join("echo.sock")).unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while s.read_exact(&mut buf).await.is_ok() {
                    if s.write_all(&buf).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let endpoint = format!("unix://{}", dir.join("provider.sock").display());
    let server = ProviderServer::new(Echo).with_instances(Echo);
    server
        .serve(&endpoint, async {
            let _ = tokio::task::spawn_blocking(|| {
                std::io::copy(&mut std::io::stdin(), &mut std::io::sink())
            })
            .await;
        })
        .await
        .unwrap();
}

async fn connect(path: &Path) -> tokio::net::UnixStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::net::UnixStream::connect(path).await {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("{}: {e}", path.display()),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn measure() {
    let n: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env(SERVE_DIR, dir.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let path = dir.path().join("provider.sock");
    drop(connect(&path).await);
    let endpoint = format!("unix://{}", path.display());
    let client = ProviderClient::connect_lazy(&endpoint, ClientOptions::default()).unwrap();
    client.handshake().await.unwrap();
    let node = NodeRef {
        name: "node-1".into(),
        provider_id: "bench://node-1".into(),
        ..Default::default()
    };

    sequential("InstanceExists over UDS (SDK client)", n, || async {
        client.instance_exists(node.clone()).await.unwrap();
    })
    .await;

    // Without the SDK's client: tonic's generated client on a plain
    // Channel, to the same server.
    let channel = ccm_provider_sdk::endpoint::raw_channel(path.clone())
        .await
        .unwrap();
    let tonic_client = InstancesServiceClient::new(channel);
    let request = InstanceExistsRequest {
        node: Some(node.clone()),
    };
    sequential("InstanceExists over UDS (tonic client, no SDK)", n, || {
        let mut c = tonic_client.clone();
        let r = request.clone();
        async move {
            c.instance_exists(r).await.unwrap();
        }
    })
    .await;

    // Two wake-ups and nothing else: 64 bytes to the other process's echo
    // and back.
    let near = tokio::sync::Mutex::new(connect(&dir.path().join("echo.sock")).await);
    sequential("64-byte echo to the other process", n, || async {
        let mut s = near.lock().await;
        let mut buf = [7u8; 64];
        s.write_all(&buf).await.unwrap();
        s.read_exact(&mut buf).await.unwrap();
    })
    .await;

    for inflight in [1usize, 16, 64] {
        let start = Instant::now();
        let per = n / inflight;
        let mut tasks = Vec::new();
        for _ in 0..inflight {
            let c = client.clone();
            let node = node.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..per {
                    c.instance_exists(node.clone()).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        println!(
            "InstanceExists over UDS, {inflight} in flight: {:.0} calls/s",
            (per * inflight) as f64 / start.elapsed().as_secs_f64()
        );
    }
    // The server drains its connections before it exits: close them first.
    drop((client, tonic_client, near));
    drop(child.stdin.take());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "server process: {status}");
}
