//! Round-trip latency of contract calls over a Unix socket, SDK server to SDK
//! client, in one process (`cargo bench -p ccm-provider-sdk --bench
//! uds_roundtrip`). Prints percentiles for sequential calls and throughput
//! with calls in flight concurrently. A benchmark, not a test: it asserts
//! nothing about speed.

use std::time::{Duration, Instant};

use ccm_provider_sdk::proto::{InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    CallContext, ClientOptions, Existence, Identity, Instances, ProviderClient, ProviderInfo,
    ProviderResult, ProviderServer, ShutdownState,
};

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

    for _ in 0..1000 {
        client.instance_exists(node.clone()).await.unwrap();
    }
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        client.instance_exists(node.clone()).await.unwrap();
        lat.push(t.elapsed());
    }
    let seq = start.elapsed();
    lat.sort();
    println!(
        "InstanceExists over UDS, sequential, {n} calls: p50 {:?}  p90 {:?}  p99 {:?}  p99.9 {:?}  max {:?}  ({:.0} calls/s)",
        percentile(&lat, 0.50),
        percentile(&lat, 0.90),
        percentile(&lat, 0.99),
        percentile(&lat, 0.999),
        lat[lat.len() - 1],
        n as f64 / seq.as_secs_f64()
    );

    for inflight in [16usize, 64] {
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
