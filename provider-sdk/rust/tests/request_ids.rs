//! Request ids under concurrency: calls in flight together on one thread
//! each log (and send) their own id. The only test in its binary, because
//! it installs a log subscriber for its thread, and tracing caches which
//! call sites are listened to per process.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

mod common;

use ccm_provider_sdk::client::CallObserver;
use ccm_provider_sdk::proto::{InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    CallContext, ClientOptions, Existence, Identity, Instances, ProviderClient, ProviderError,
    ProviderInfo, ProviderResult, ProviderServer, ShutdownState,
};
use parking_lot::Mutex;
use tracing_subscriber::layer::{Context, SubscriberExt};

const CALLS: u64 = 16;

/// Answers `InstanceExists` for node "n<i>" after (CALLS - i) * 5 ms, so
/// later calls answer first, and fails the odd ones; remembers the request
/// id each call arrived with.
#[derive(Clone, Default)]
struct Recording {
    seen: Arc<Mutex<BTreeMap<String, String>>>,
    traces: Arc<Mutex<BTreeMap<String, Option<String>>>>,
}

impl Identity for Recording {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "ids".into(),
            vendor_version: "0".into(),
            provider_id_scheme: "ids".into(),
            ..Default::default()
        }
    }
}

impl Instances for Recording {
    async fn instance_exists(&self, ctx: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        let i: u64 = node.name[1..].parse().unwrap();
        self.traces.lock().insert(node.name.clone(), ctx.trace_id);
        self.seen.lock().insert(node.name, ctx.request_id);
        tokio::time::sleep(Duration::from_millis(5 * (CALLS - i))).await;
        if i % 2 == 1 {
            return Err(ProviderError::cloud_unavailable("odd", None));
        }
        Ok(Existence::Exists)
    }

    async fn instance_shutdown(&self, _: CallContext, _: NodeRef) -> ProviderResult<ShutdownState> {
        Ok(ShutdownState::Running)
    }

    async fn instance_metadata(
        &self,
        _: CallContext,
        _: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        Err(ProviderError::unimplemented("not needed"))
    }
}

/// The fields of every event logged on this thread.
#[derive(Clone, Default)]
struct LogCapture(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

struct Fields(BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogCapture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        self.0.lock().push(fields.0);
    }
}

/// Counts the observer's callbacks per kind.
#[derive(Default)]
struct Counts(Mutex<BTreeMap<String, usize>>);

impl CallObserver for Counts {
    fn observe(&self, method: &'static str, code: tonic::Code, _: Duration) {
        *self
            .0
            .lock()
            .entry(format!("observe {method} {code:?}"))
            .or_default() += 1;
    }
    fn started(&self, method: &'static str) {
        *self
            .0
            .lock()
            .entry(format!("started {method}"))
            .or_default() += 1;
    }
    fn failed(&self, method: &'static str, reason: Option<&'static str>) {
        *self
            .0
            .lock()
            .entry(format!("failed {method} {reason:?}"))
            .or_default() += 1;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_calls_on_one_thread_each_log_and_send_their_own_request_id() {
    let logs = LogCapture::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(logs.clone()));

    let cloud = Recording::default();
    let serving =
        common::serve(ProviderServer::new(cloud.clone()).with_instances(cloud.clone())).await;
    let counts = Arc::new(Counts::default());
    let c = ProviderClient::connect_lazy(
        &serving.endpoint,
        ClientOptions {
            observer: Some(counts.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    c.handshake().await.unwrap();

    // A current-thread runtime: every call is polled on this thread.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..CALLS {
        let c = c.clone();
        calls.spawn(async move {
            let node = NodeRef {
                name: format!("n{i}"),
                ..Default::default()
            };
            (i, c.instance_exists(node).await)
        });
    }
    for (i, answer) in calls.join_all().await {
        assert_eq!(answer.is_err(), i % 2 == 1, "n{i}: {answer:?}");
    }

    let sent: BTreeSet<String> = cloud.seen.lock().values().cloned().collect();
    assert_eq!(sent.len() as u64, CALLS, "one id per call");
    let logged: Vec<String> = logs
        .0
        .lock()
        .iter()
        .filter(|f| f.get("method").map(String::as_str) == Some("InstanceExists"))
        .map(|f| f["request_id"].clone())
        .collect();
    assert_eq!(logged.len() as u64, CALLS, "one log line per call");
    assert_eq!(
        logged.iter().cloned().collect::<BTreeSet<_>>(),
        sent,
        "each call logged the id the provider received"
    );
    let half = (CALLS / 2) as usize;
    assert_eq!(
        *counts.0.lock(),
        BTreeMap::from([
            (
                "failed InstanceExists Some(\"CLOUD_UNAVAILABLE\")".to_owned(),
                half
            ),
            ("observe GetProviderCapabilities Ok".to_owned(), 1),
            ("observe GetProviderInfo Ok".to_owned(), 1),
            ("observe InstanceExists Ok".to_owned(), half),
            ("observe InstanceExists Unavailable".to_owned(), half),
            ("started GetProviderCapabilities".to_owned(), 1),
            ("started GetProviderInfo".to_owned(), 1),
            ("started InstanceExists".to_owned(), CALLS as usize),
        ])
    );
    // A failure logs the provider's message as `error`, not as a second
    // `message` (the event's own).
    let failed: Vec<_> = logs
        .0
        .lock()
        .iter()
        .filter(|f| f.get("message").map(String::as_str) == Some("provider call failed"))
        .map(|f| (f["error"].clone(), f["code"].clone()))
        .collect();
    assert_eq!(failed.len(), half);
    assert!(
        failed
            .iter()
            .all(|(e, code)| e == "odd" && code == "UNAVAILABLE"),
        "{failed:?}"
    );

    // A caller that stops waiting (a /readyz deadline): the call still ends
    // for the observer, as CANCELLED, so in-flight gauges come back down.
    let node = NodeRef {
        name: "n0".into(),
        ..Default::default()
    };
    let abandoned = tokio::time::timeout(Duration::from_millis(1), c.instance_exists(node)).await;
    assert!(abandoned.is_err(), "n0 answers after 80 ms");
    let seen = counts.0.lock().clone();
    assert_eq!(seen["observe InstanceExists Cancelled"], 1);
    assert_eq!(seen["started InstanceExists"], CALLS as usize + 1);

    // W3C trace context: every call carries a traceparent; the calls of one
    // scope share its trace id, and the server hands it to the provider.
    let unscoped = cloud.traces.lock().clone();
    let distinct: BTreeSet<_> = unscoped.values().flatten().collect();
    assert_eq!(distinct.len() as u64, CALLS, "a trace per unscoped call");
    let scope = ccm_provider_sdk::RequestScope::new("service/shop/web#1a2b3c4d");
    let trace = scope.trace_id();
    let node = |name: &str| NodeRef {
        name: name.into(),
        ..Default::default()
    };
    scope
        .run(async {
            c.instance_exists(node("n2")).await.unwrap();
            c.instance_exists(node("n4")).await.unwrap();
        })
        .await;
    let traces = cloud.traces.lock().clone();
    assert_eq!(traces["n2"].as_deref(), Some(trace.as_str()));
    assert_eq!(traces["n4"].as_deref(), Some(trace.as_str()));
    assert!(!distinct.contains(&trace), "a new trace per scope");
    assert_eq!(cloud.seen.lock()["n2"], "service/shop/web#1a2b3c4d");

    serving.stop().await;
}
