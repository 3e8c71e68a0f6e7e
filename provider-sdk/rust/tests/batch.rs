//! BatchInstances (contract 1.4.0) through the SDK's server and client:
//! every provider with instances serves it (by fanning out to its single
//! methods unless it answers natively), each query answered or failed as
//! its single call would be, malformed requests refused whole, and the
//! client's checks of an answer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

mod common;

use ccm_provider_sdk::proto::{self, Capability, InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    BatchAnswers, CallContext, ClientError, ClientOptions, Existence, Identity, InstanceAnswer,
    InstanceQuery, InstanceQuestion, Instances, MetadataAnswer, ProviderClient, ProviderError,
    ProviderInfo, ProviderResult, ProviderServer, ShutdownState,
};
use ccm_testsupport::raw::{RawIdentity, RawServer};
use tonic::{Code, Request, Response, Status};

/// Instances "vm-<n>"; "vm-off-<n>" are shut down; "vm-warn-<n>" carry a
/// warning; "vm-bad-<n>" answer metadata with a label-breaking zone. Counts
/// its single calls and how many run at once.
#[derive(Clone, Default)]
struct Cloud(Arc<Counters>);

#[derive(Default)]
struct Counters {
    calls: AtomicUsize,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

impl std::ops::Deref for Cloud {
    type Target = Counters;
    fn deref(&self) -> &Counters {
        &self.0
    }
}

impl Identity for Cloud {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "cloud".into(),
            vendor_version: "0".into(),
            provider_id_scheme: "fake".into(),
            ..Default::default()
        }
    }
}

impl Cloud {
    /// The instance's id, or INSTANCE_NOT_FOUND; counted, and yielding once
    /// so concurrent calls overlap.
    async fn lookup(&self, node: &NodeRef) -> ProviderResult<String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        let id = node
            .provider_id
            .strip_prefix("fake://")
            .unwrap_or(&node.name);
        if id.starts_with("vm-") {
            Ok(id.to_owned())
        } else {
            Err(ProviderError::instance_not_found(format!(
                "no instance {id}"
            )))
        }
    }
}

impl Instances for Cloud {
    async fn instance_exists(&self, _: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        match self.lookup(&node).await {
            Ok(_) => Ok(Existence::Exists),
            Err(_) => Ok(Existence::NotExists),
        }
    }

    async fn instance_shutdown(
        &self,
        _: CallContext,
        node: NodeRef,
    ) -> ProviderResult<ShutdownState> {
        let id = self.lookup(&node).await?;
        Ok(if id.starts_with("vm-off-") {
            ShutdownState::ShutDown
        } else {
            ShutdownState::Running
        })
    }

    async fn instance_metadata(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        let id = self.lookup(&node).await?;
        if id.starts_with("vm-warn-") {
            ctx.warn("MaintenanceScheduled", format!("{id} reboots tonight"));
        }
        Ok(InstanceMetadata {
            provider_id: format!("fake://{id}"),
            instance_type: "small".into(),
            zone: if id.starts_with("vm-bad-") {
                "not a label value!".into()
            } else {
                "zone-a".into()
            },
            ..Default::default()
        })
    }
}

fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

fn query(key: &str, node: NodeRef, question: InstanceQuestion) -> InstanceQuery {
    InstanceQuery {
        key: key.into(),
        node,
        question,
    }
}

async fn start<P: Instances>(cloud: Cloud, instances: P) -> (common::Serving, ProviderClient) {
    let serving = common::serve(ProviderServer::new(cloud).with_instances(instances)).await;
    let client = ProviderClient::connect_lazy(&serving.endpoint, ClientOptions::default()).unwrap();
    (serving, client)
}

/// What the single call answers for `q`, in the batch's terms.
async fn single(c: &ProviderClient, q: &InstanceQuery) -> Result<InstanceAnswer, ClientError> {
    let node = q.node.clone();
    match q.question {
        InstanceQuestion::Existence => c.instance_exists(node).await.map(InstanceAnswer::Existence),
        InstanceQuestion::Shutdown => c
            .instance_shutdown(node)
            .await
            .map(InstanceAnswer::Shutdown),
        InstanceQuestion::Metadata => c
            .instance_metadata_answer(node)
            .await
            .map(InstanceAnswer::Metadata),
    }
}

/// Both sides of a comparison: an answer, or the error's code, reason,
/// message, violations and retry delay (ClientError has no PartialEq).
fn comparable(r: &Result<InstanceAnswer, ClientError>) -> String {
    match r {
        Ok(a) => format!("{a:?}"),
        Err(ClientError::Provider(e)) => format!(
            "{:?} {:?} {:?} {:?} {:?}",
            e.code(),
            e.reason(),
            e.message(),
            e.field_violations(),
            e.retry_after_delay()
        ),
        Err(e) => format!("{e}"),
    }
}

fn mixed_queries() -> Vec<InstanceQuery> {
    use InstanceQuestion::*;
    let foreign = NodeRef {
        provider_id: "aws:///eu-west-1a/i-1".into(),
        ..node("vm-foreign")
    };
    let by_id = NodeRef {
        provider_id: "fake://vm-off-2".into(),
        ..node("whatever")
    };
    vec![
        query("a", node("vm-1"), Existence),
        query("b", node("gone-1"), Existence),
        query("c", by_id.clone(), Shutdown),
        query("d", node("gone-2"), Shutdown),
        query("e", node("vm-warn-3"), Metadata),
        query("f", node("gone-3"), Metadata),
        query("g", foreign.clone(), Existence),
        query("h", foreign, Metadata),
        query("i", node(""), Shutdown),
        query("j", node("vm-bad-4"), Metadata),
        query("k", node("vm-1"), Metadata),
        query("l", by_id, Metadata),
    ]
}

/// The fan-out: announced without the provider doing anything, and each
/// query's answer or error exactly the single call's, whatever the order.
#[tokio::test]
async fn a_provider_with_single_methods_answers_each_query_as_its_single_call() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let cloud = Cloud::default();
        let (serving, c) = start(cloud.clone(), cloud.clone()).await;
        let h = c.handshake().await.unwrap();
        assert!(h.has(Capability::Instances));
        assert!(h.has(Capability::InstancesBatch));

        let queries = mixed_queries();
        let mut want = HashMap::new();
        for q in &queries {
            want.insert(q.key.clone(), comparable(&single(&c, q).await));
        }
        let mut reversed = queries.clone();
        reversed.reverse();
        for qs in [queries, reversed] {
            let keys: Vec<String> = qs.iter().map(|q| q.key.clone()).collect();
            let got = c.batch_instances(qs).await.unwrap();
            assert_eq!(
                got.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
                keys,
                "in the order asked"
            );
            for (key, answer) in &got {
                assert_eq!(comparable(answer), want[key], "query {key}");
            }
        }
        // Spot checks of what "the same as the single call" means here.
        let got: HashMap<_, _> = c
            .batch_instances(mixed_queries())
            .await
            .unwrap()
            .into_iter()
            .collect();
        assert!(matches!(
            got["a"],
            Ok(InstanceAnswer::Existence(Existence::Exists))
        ));
        assert!(matches!(
            got["b"],
            Ok(InstanceAnswer::Existence(Existence::NotExists))
        ));
        assert!(matches!(
            got["c"],
            Ok(InstanceAnswer::Shutdown(ShutdownState::ShutDown))
        ));
        let not_found = got["d"].as_ref().unwrap_err().provider_error().unwrap();
        assert_eq!(not_found.code(), Code::NotFound);
        assert_eq!(
            not_found.reason(),
            Some(proto::ErrorReason::InstanceNotFound)
        );
        let Ok(InstanceAnswer::Metadata(MetadataAnswer { warnings, .. })) = &got["e"] else {
            panic!("{:?}", got["e"]);
        };
        assert_eq!(warnings.len(), 1, "the warning of vm-warn-3 only");
        let Ok(InstanceAnswer::Metadata(MetadataAnswer { warnings, .. })) = &got["k"] else {
            panic!("{:?}", got["k"]);
        };
        assert!(warnings.is_empty(), "no other Node's warning");
        for foreign in ["g", "h"] {
            let e = got[foreign].as_ref().unwrap_err().provider_error().unwrap();
            assert_eq!(e.code(), Code::InvalidArgument);
            assert_eq!(e.reason(), Some(proto::ErrorReason::InvalidRequest));
            assert_eq!(e.field_violations()[0].0, "node.provider_id");
        }
        let e = got["i"].as_ref().unwrap_err().provider_error().unwrap();
        assert_eq!(e.field_violations()[0].0, "node.name");
        let e = got["j"].as_ref().unwrap_err().provider_error().unwrap();
        assert_eq!(
            e.code(),
            Code::Internal,
            "a bad answer fails its query only"
        );
        serving.stop().await;
    })
    .await
    .expect("test took longer than 60 s");
}

#[tokio::test]
async fn the_fan_out_runs_at_most_sixteen_single_calls_at_once() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let cloud = Cloud::default();
        let (serving, c) = start(cloud.clone(), cloud.clone()).await;
        let queries: Vec<_> = (0..100)
            .map(|i| {
                query(
                    &format!("q{i}"),
                    node(&format!("vm-{i}")),
                    InstanceQuestion::Existence,
                )
            })
            .collect();
        let got = c.batch_instances(queries).await.unwrap();
        assert_eq!(got.len(), 100);
        assert_eq!(cloud.calls.load(Ordering::SeqCst), 100);
        assert_eq!(
            cloud.most_at_once.load(Ordering::SeqCst),
            ccm_provider_sdk::provider::BATCH_FAN_OUT
        );
        serving.stop().await;
    })
    .await
    .expect("test took longer than 60 s");
}

/// A native batch: one provider call for the whole batch; its answers
/// checked as the single calls' are; what it leaves out or mixes up never
/// reaches the controller as an answer.
struct NativeState {
    cloud: Cloud,
    batches: AtomicUsize,
    seen: parking_lot::Mutex<Vec<String>>,
}

#[derive(Clone)]
struct Native(Arc<NativeState>);

impl std::ops::Deref for Native {
    type Target = NativeState;
    fn deref(&self) -> &NativeState {
        &self.0
    }
}

impl Native {
    fn over(cloud: &Cloud) -> Self {
        Native(Arc::new(NativeState {
            cloud: cloud.clone(),
            batches: AtomicUsize::new(0),
            seen: Default::default(),
        }))
    }
}

impl Instances for Native {
    async fn instance_exists(&self, c: CallContext, n: NodeRef) -> ProviderResult<Existence> {
        self.cloud.instance_exists(c, n).await
    }
    async fn instance_shutdown(&self, c: CallContext, n: NodeRef) -> ProviderResult<ShutdownState> {
        self.cloud.instance_shutdown(c, n).await
    }
    async fn instance_metadata(
        &self,
        c: CallContext,
        n: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        self.cloud.instance_metadata(c, n).await
    }

    async fn batch_instances(
        &self,
        _: CallContext,
        queries: Vec<InstanceQuery>,
    ) -> ProviderResult<BatchAnswers> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        let mut out = Vec::new();
        for q in queries {
            self.seen.lock().push(q.key.clone());
            let answer = match q.node.name.as_str() {
                "skip" => continue,
                "wrong-kind" => Ok(InstanceAnswer::Shutdown(ShutdownState::Running)),
                "twice" => {
                    out.push((
                        q.key.clone(),
                        Ok(InstanceAnswer::Existence(Existence::Exists)),
                    ));
                    Ok(InstanceAnswer::Existence(Existence::Exists))
                }
                "stray" => {
                    out.push((
                        "not-asked".into(),
                        Ok(InstanceAnswer::Existence(Existence::Exists)),
                    ));
                    Ok(InstanceAnswer::Existence(Existence::Exists))
                }
                "unavailable" => {
                    return Err(ProviderError::cloud_unavailable(
                        "cloud down",
                        Some(Duration::from_millis(1500)),
                    ));
                }
                _ => Ok(InstanceAnswer::Existence(Existence::Exists)),
            };
            out.push((q.key, answer));
        }
        Ok(out)
    }
}

#[tokio::test]
async fn a_native_batch_is_one_provider_call_and_its_answers_are_checked() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let cloud = Cloud::default();
        let native = Native::over(&cloud);
        let (serving, c) = start(cloud.clone(), native.clone()).await;
        let foreign = NodeRef {
            provider_id: "aws:///i-1".into(),
            ..node("x")
        };
        use InstanceQuestion::Existence as Exists;
        let got: HashMap<_, _> = c
            .batch_instances(vec![
                query("ok", node("vm-1"), Exists),
                query("skip", node("skip"), Exists),
                query("wrong", node("wrong-kind"), Exists),
                query("foreign", foreign, Exists),
                query("twice", node("twice"), Exists),
                query("stray", node("stray"), Exists),
            ])
            .await
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(native.batches.load(Ordering::SeqCst), 1);
        assert_eq!(cloud.calls.load(Ordering::SeqCst), 0, "no single call");
        assert!(
            !native.seen.lock().contains(&"foreign".to_owned()),
            "another cloud's Node never reaches the provider"
        );
        // A result for a key not asked is dropped; the others stand.
        for key in ["ok", "stray"] {
            assert!(matches!(
                got[key],
                Ok(InstanceAnswer::Existence(Existence::Exists))
            ));
        }
        for (key, code) in [
            ("skip", Code::Internal),
            ("wrong", Code::Internal),
            ("twice", Code::Internal),
            ("foreign", Code::InvalidArgument),
        ] {
            let e = got[key].as_ref().unwrap_err().provider_error().unwrap();
            assert_eq!(e.code(), code, "{key}: {e}");
        }

        // Nothing answered: the whole call fails with the provider's error,
        // RetryInfo included.
        let err = c
            .batch_instances(vec![query("u", node("unavailable"), Exists)])
            .await
            .unwrap_err();
        let e = err.provider_error().unwrap();
        assert_eq!(e.reason(), Some(proto::ErrorReason::CloudUnavailable));
        assert_eq!(e.retry_after_delay(), Some(Duration::from_millis(1500)));
        // ... but a query the SDK refused keeps its own error, and the
        // others get the provider's.
        let got: HashMap<_, _> = c
            .batch_instances(vec![
                query("u", node("unavailable"), Exists),
                query("bad", node(""), Exists),
            ])
            .await
            .unwrap()
            .into_iter()
            .collect();
        let e = got["u"].as_ref().unwrap_err().provider_error().unwrap();
        assert_eq!(e.reason(), Some(proto::ErrorReason::CloudUnavailable));
        assert_eq!(e.retry_after_delay(), Some(Duration::from_millis(1500)));
        let e = got["bad"].as_ref().unwrap_err().provider_error().unwrap();
        assert_eq!(e.reason(), Some(proto::ErrorReason::InvalidRequest));
        serving.stop().await;
    })
    .await
    .expect("test took longer than 60 s");
}

/// What a client told its observer of failures and budget holds.
#[derive(Default)]
struct Told(parking_lot::Mutex<Vec<String>>);

impl ccm_provider_sdk::client::CallObserver for Told {
    fn observe(&self, _: &'static str, _: Code, _: Duration) {}
    fn failed(&self, method: &'static str, reason: Option<&'static str>) {
        self.0.lock().push(format!("failed {method} {reason:?}"));
    }
    fn budget_held(&self, method: &'static str, delay: Duration) {
        self.0.lock().push(format!("held {method} {delay:?}"));
    }
}

/// Per-query errors count as failures of the single method each question
/// stands for (they were missing from the error metrics), and a throttling
/// one holds the call budget as the same answer to a whole call does.
#[tokio::test]
async fn per_query_errors_are_told_as_their_single_calls_and_throttling_ones_hold_the_budget() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let cloud = Cloud::default();
        let native = Native::over(&cloud);
        let serving = common::serve(ProviderServer::new(cloud).with_instances(native)).await;
        let told = Arc::new(Told::default());
        let options = ClientOptions {
            observer: Some(told.clone()),
            ..Default::default()
        };
        let c = ProviderClient::connect_lazy(&serving.endpoint, options).unwrap();
        c.batch_instances(vec![
            query("u", node("unavailable"), InstanceQuestion::Metadata),
            query("bad", node(""), InstanceQuestion::Existence),
        ])
        .await
        .unwrap();
        let told = told.0.lock().clone();
        assert_eq!(
            told,
            [
                r#"failed InstanceMetadata Some("CLOUD_UNAVAILABLE")"#,
                r#"failed InstanceExists Some("INVALID_REQUEST")"#,
                "held BatchInstances 1.5s",
            ],
            "the batch itself did not fail"
        );
        serving.stop().await;
    })
    .await
    .expect("test took longer than 60 s");
}

async fn raw_batch(
    path: &Path,
    queries: Vec<proto::InstanceQuery>,
) -> Result<proto::BatchInstancesResponse, Status> {
    let channel = ccm_provider_sdk::endpoint::raw_channel(path).await.unwrap();
    proto::instances_service_client::InstancesServiceClient::new(channel)
        .batch_instances(proto::BatchInstancesRequest { queries })
        .await
        .map(Response::into_inner)
}

fn raw_query(key: &str, question: proto::InstanceQuestion) -> proto::InstanceQuery {
    proto::InstanceQuery {
        key: key.into(),
        node: Some(node("vm-1")),
        question: question as i32,
    }
}

/// What the contract refuses whole, named by field, before the provider
/// sees it; and the client refuses to send the same.
#[tokio::test]
async fn malformed_batches_are_refused_whole_naming_the_field() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let cloud = Cloud::default();
        let (serving, c) = start(cloud.clone(), cloud.clone()).await;
        let path = serving.endpoint.strip_prefix("unix://").unwrap().to_owned();
        let path = Path::new(&path);
        use proto::InstanceQuestion::*;
        let many: Vec<_> = (0..501)
            .map(|i| raw_query(&format!("q{i}"), Existence))
            .collect();
        let cases = [
            (vec![], "queries"),
            (many.clone(), "queries"),
            (
                vec![raw_query("a", Existence), raw_query("a", Shutdown)],
                "queries[1].key",
            ),
            (vec![raw_query("", Existence)], "queries[0].key"),
            (vec![raw_query(&"k".repeat(254), Existence)], "queries[0].key"),
            (
                vec![raw_query("a", Existence), raw_query("b", Unspecified)],
                "queries[1].question",
            ),
        ];
        for (queries, field) in cases {
            let status = raw_batch(path, queries).await.unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument, "{field}");
            let e = ProviderError::from_status(&status);
            assert_eq!(e.reason(), Some(proto::ErrorReason::InvalidRequest));
            assert_eq!(e.field_violations()[0].0, field);
        }
        assert_eq!(cloud.calls.load(Ordering::SeqCst), 0);
        // 500 distinct keys of 253 bytes are fine.
        let most: Vec<_> = (0..500)
            .map(|i| raw_query(&format!("{i:0>253}"), Existence))
            .collect();
        assert_eq!(raw_batch(path, most).await.unwrap().results.len(), 500);

        // The client sends none of them, and no queries is no call.
        assert!(c.batch_instances(vec![]).await.unwrap().is_empty());
        let twice = vec![
            query("a", node("vm-1"), InstanceQuestion::Existence),
            query("a", node("vm-2"), InstanceQuestion::Existence),
        ];
        let err = c.batch_instances(twice).await.unwrap_err();
        assert!(
            matches!(&err, ClientError::InvalidRequest { violation, .. } if violation.field == "queries[1].key"),
            "{err:?}"
        );
        let too_many: Vec<_> = (0..501)
            .map(|i| query(&format!("q{i}"), node("vm-1"), InstanceQuestion::Existence))
            .collect();
        assert!(matches!(
            c.batch_instances(too_many).await,
            Err(ClientError::InvalidRequest { .. })
        ));
        serving.stop().await;
    })
    .await
    .expect("test took longer than 60 s");
}

/// A raw provider answering BatchInstances with `answer(request)`.
struct RawBatch(fn(&proto::BatchInstancesRequest) -> proto::BatchInstancesResponse);

#[tonic::async_trait]
impl proto::instances_service_server::InstancesService for RawBatch {
    async fn instance_exists(
        &self,
        _: Request<proto::InstanceExistsRequest>,
    ) -> Result<Response<proto::InstanceExistsResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn instance_shutdown(
        &self,
        _: Request<proto::InstanceShutdownRequest>,
    ) -> Result<Response<proto::InstanceShutdownResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn instance_metadata(
        &self,
        _: Request<proto::InstanceMetadataRequest>,
    ) -> Result<Response<proto::InstanceMetadataResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn batch_instances(
        &self,
        r: Request<proto::BatchInstancesRequest>,
    ) -> Result<Response<proto::BatchInstancesResponse>, Status> {
        Ok(Response::new((self.0)(r.get_ref())))
    }
}

fn raw_provider(
    caps: &[Capability],
    answer: fn(&proto::BatchInstancesRequest) -> proto::BatchInstancesResponse,
) -> (RawServer, ProviderClient) {
    let server = RawServer::start(
        tonic::transport::Server::builder()
            .add_service(RawIdentity::new("raw", caps).server())
            .add_service(
                proto::instances_service_server::InstancesServiceServer::new(RawBatch(answer)),
            ),
    );
    let client = ProviderClient::connect_lazy(&server.endpoint, ClientOptions::default()).unwrap();
    (server, client)
}

fn exists(key: &str) -> proto::InstanceResult {
    proto::InstanceResult {
        key: key.into(),
        result: Some(proto::instance_result::Result::Existence(
            proto::InstanceExistsResponse {
                existence: proto::InstanceExistence::Exists as i32,
            },
        )),
    }
}

fn answered(results: Vec<proto::InstanceResult>) -> proto::BatchInstancesResponse {
    proto::BatchInstancesResponse { results }
}

/// Every key once, none unknown, each of its question's kind: otherwise
/// the whole answer is invalid and nothing is acted on.
#[tokio::test]
async fn the_client_refuses_an_answer_that_does_not_match_its_queries() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let caps = [Capability::Instances, Capability::InstancesBatch];
        type Answer = fn(&proto::BatchInstancesRequest) -> proto::BatchInstancesResponse;
        let bad: [(&str, Answer); 5] = [
            ("missing", |_| answered(vec![exists("a")])),
            ("unknown", |_| {
                answered(vec![exists("a"), exists("b"), exists("zzz")])
            }),
            ("twice", |_| {
                answered(vec![exists("a"), exists("b"), exists("a")])
            }),
            ("wrong kind", |_| {
                let mut b = exists("b");
                b.result = Some(proto::instance_result::Result::Shutdown(
                    proto::InstanceShutdownResponse { state: 1 },
                ));
                answered(vec![exists("a"), b])
            }),
            ("no result", |_| {
                let mut b = exists("b");
                b.result = None;
                answered(vec![exists("a"), b])
            }),
        ];
        let queries = || {
            vec![
                query("a", node("vm-1"), InstanceQuestion::Existence),
                query("b", node("vm-2"), InstanceQuestion::Existence),
            ]
        };
        for (what, answer) in bad {
            let (server, c) = raw_provider(&caps, answer);
            let err = c.batch_instances(queries()).await.unwrap_err();
            assert!(
                matches!(
                    err,
                    ClientError::InvalidResponse {
                        method: "BatchInstances",
                        ..
                    }
                ),
                "{what}: {err:?}"
            );
            server.stop().await;
        }

        // One result's own flaw fails only its query; a query error reads
        // back as the single call's error.
        let (server, c) = raw_provider(&caps, |_| {
            let mut b = exists("b");
            b.result = Some(proto::instance_result::Result::Existence(
                proto::InstanceExistsResponse { existence: 0 },
            ));
            let c = proto::InstanceResult {
                key: "c".into(),
                result: Some(proto::instance_result::Result::Error(
                    ProviderError::quota_exceeded("slow down").to_query_error(),
                )),
            };
            let mut d = exists("d");
            d.result = Some(proto::instance_result::Result::Error(proto::QueryError {
                code: 0,
                ..Default::default()
            }));
            answered(vec![d, c, b, exists("a")])
        });
        let mut qs = queries();
        qs.push(query("c", node("vm-3"), InstanceQuestion::Existence));
        qs.push(query("d", node("vm-4"), InstanceQuestion::Existence));
        let got = c.batch_instances(qs).await.unwrap();
        assert_eq!(
            got.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c", "d"]
        );
        assert!(got[0].1.is_ok());
        assert!(matches!(
            got[1].1,
            Err(ClientError::InvalidResponse {
                method: "InstanceExists",
                ..
            })
        ));
        let e = got[2].1.as_ref().unwrap_err().provider_error().unwrap();
        assert_eq!(
            *e,
            ProviderError::from_status(&ProviderError::quota_exceeded("slow down").to_status())
        );
        assert!(matches!(got[3].1, Err(ClientError::InvalidResponse { .. })));
        server.stop().await;

        // Without the capability nothing is sent.
        let (server, c) = raw_provider(&[Capability::Instances], |_| unreachable!());
        assert!(matches!(
            c.batch_instances(queries()).await,
            Err(ClientError::Unsupported(Capability::InstancesBatch))
        ));
        server.stop().await;
    })
    .await
    .expect("test took longer than 60 s");
}
