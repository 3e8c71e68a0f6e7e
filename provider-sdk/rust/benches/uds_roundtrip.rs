//! Round-trip latency of contract calls over a Unix socket, SDK server to SDK
//! client, in one process (`cargo bench -p ccm-provider-sdk --bench
//! uds_roundtrip`). Prints percentiles for sequential calls and throughput
//! with 1, 16 and 64 calls in flight. To show where the time goes, the same
//! sequential measurement is made without the SDK's client (tonic's
//! generated client on a plain `Channel`, to the same SDK server) and for a
//! bare 64-byte echo over a Unix socket pair (the floor). A benchmark, not a
//! test: it asserts nothing about speed.

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

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.sock");
    let endpoint = format!("unix://{}", path.display());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = ProviderServer::new(Echo).with_instances(Echo);
    let ep = endpoint.clone();
    let task = tokio::spawn(async move {
        server
            .serve(&ep, async {
                let _ = rx.await;
            })
            .await
    });
    while tokio::net::UnixStream::connect(&path).await.is_err() {
        tokio::task::yield_now().await;
    }
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

    // The floor: 64 bytes to an echo task and back over a socket pair.
    let (mut near, mut far) = tokio::net::UnixStream::pair().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 64];
        while far.read_exact(&mut buf).await.is_ok() {
            if far.write_all(&buf).await.is_err() {
                break;
            }
        }
    });
    let near = tokio::sync::Mutex::new(&mut near);
    sequential("64-byte echo over a Unix socket pair", n, || async {
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
    let _ = tx.send(());
    task.await.unwrap().unwrap();
}
