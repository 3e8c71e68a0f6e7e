//! Health checks never queue behind a hung provider's work: identity calls
//! take no concurrency slot, and every call's deadline also bounds waiting
//! for a slot and a provider that never answers (issue 12, point 13).

use std::time::{Duration, Instant};

mod common;

use ccm_provider_sdk::proto::{InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    CallContext, ClientError, ClientOptions, Existence, Identity, Instances, ProviderClient,
    ProviderError, ProviderInfo, ProviderResult, ProviderServer, Readiness, ShutdownState,
};

/// Reads hang forever; `probe` hangs when `stuck`.
#[derive(Clone, Copy)]
struct Hung {
    stuck: bool,
}

impl Identity for Hung {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "hung".into(),
            vendor_version: "0".into(),
            provider_id_scheme: "hung".into(),
            ..Default::default()
        }
    }

    async fn probe(&self, _: CallContext) -> ProviderResult<Readiness> {
        if self.stuck {
            std::future::pending::<()>().await;
        }
        Ok(Readiness::Ready)
    }
}

impl Instances for Hung {
    async fn instance_exists(&self, _: CallContext, _: NodeRef) -> ProviderResult<Existence> {
        std::future::pending().await
    }

    async fn instance_shutdown(&self, _: CallContext, _: NodeRef) -> ProviderResult<ShutdownState> {
        std::future::pending().await
    }

    async fn instance_metadata(
        &self,
        _: CallContext,
        _: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        Err(ProviderError::internal("unused"))
    }
}

fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn probe_answers_while_every_slot_is_taken() {
    let hung = Hung { stuck: false };
    let serving = common::serve(ProviderServer::new(hung).with_instances(hung)).await;
    let client = ProviderClient::connect_lazy(
        &serving.endpoint,
        ClientOptions {
            max_concurrency: Some(2),
            read_timeout: Duration::from_secs(30),
            identity_timeout: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .unwrap();
    client.handshake().await.unwrap();
    // Both slots, and one more waiting for a slot.
    let reads: Vec<_> = (0..3)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move { c.instance_exists(node(&format!("n{i}"))).await })
        })
        .collect();
    tokio::task::yield_now().await;
    let started = Instant::now();
    for _ in 0..5 {
        let answer = tokio::time::timeout(Duration::from_secs(10), client.probe())
            .await
            .expect("Probe queued behind the hung reads");
        assert!(matches!(answer.unwrap(), Readiness::Ready));
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "five probes took {:?}",
        started.elapsed()
    );
    for r in &reads {
        assert!(!r.is_finished(), "the reads are still hung");
    }
    for r in reads {
        r.abort();
    }
    serving.stop().await;
}

#[tokio::test]
async fn a_provider_that_never_answers_is_cut_off_at_the_deadline() {
    let hung = Hung { stuck: true };
    let serving = common::serve(ProviderServer::new(hung).with_instances(hung)).await;
    let client = ProviderClient::connect_lazy(
        &serving.endpoint,
        ClientOptions {
            max_concurrency: Some(1),
            identity_timeout: Duration::from_millis(300),
            read_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .unwrap();
    let started = Instant::now();
    let err = client.probe().await.unwrap_err();
    assert_eq!(
        err.provider_error().map(|e| e.code()),
        Some(tonic::Code::DeadlineExceeded),
        "{err}"
    );
    // One read holds the only slot; the next one's deadline covers its wait.
    client.handshake().await.ok();
    let first = {
        let c = client.clone();
        tokio::spawn(async move { c.instance_exists(node("a")).await })
    };
    let second = client.instance_exists(node("b")).await;
    assert!(
        matches!(second, Err(ClientError::Provider(_))),
        "{second:?}"
    );
    assert!(first.await.unwrap().is_err());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    serving.stop().await;
}
