//! The one path every RPC takes. The per-service files only build the
//! request, pick an [`Rpc`] (deadline class, capability, mutation key) and
//! convert the answer; everything that must be the same for every call
//! happens here, once, as a stack of tower layers composed in
//! [`ProviderClient::call`]:
//!
//! | layer | module | does |
//! |---|---|---|
//! | request scope | `scope.rs` | request id and trace context |
//! | budget | `budget.rs` | a token per call, by priority lane, within the deadline; only with a budget or while a throttling answer holds it |
//! | gate and key lock | `gate.rs` | one mutation per key; refused while the gate is closed; fencing token |
//! | observer | `observe.rs` | `CallObserver` and the log line |
//! | revocation | `gate.rs` | a mutation in flight is abandoned when the gate closes |
//! | deadline | `deadline.rs` | `grpc-timeout`, the absolute deadline, kept on this side too |
//! | concurrency limit | `tower::limit` | `max_concurrency` slots, reads and mutations only |
//! | send | `send.rs` | the generated client with the message limits |

mod budget;
mod deadline;
mod gate;
mod key_locks;
mod observe;
mod scope;
mod send;

use tonic::Request;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{ServiceBuilder, ServiceExt};

use super::error::invalid_answer;
use super::rpcs::Unary;
use super::{ClientError, ProviderClient};
use crate::proto::Capability;
use crate::validate::Checked;
use budget::BudgetLayer;
pub(super) use budget::throttled;
use deadline::{DeadlineClass, DeadlineLayer};
use gate::{GateLayer, RevokeLayer};
use observe::ObserveLayer;
use scope::ScopeLayer;
use send::Sender;

pub(super) use budget::Budget;
pub use budget::{BudgetState, CallBudget, HOLD_BOUNDS, Lane};
pub(super) use key_locks::KeyLocks;
pub use observe::code_name;
pub use scope::{MAX_REQUEST_ID_BYTES, RequestScope};

/// How one RPC is sent, besides its request.
pub(super) struct Rpc {
    deadline: DeadlineClass,
    /// Checked against the handshake before anything is sent.
    needs: Option<Capability>,
    /// Mutations only: the idempotency key no two calls of this client may
    /// hold at once.
    mutation_key: Option<String>,
}

impl Rpc {
    /// A call answered from what the provider knows about itself.
    pub(super) fn identity() -> Self {
        Rpc {
            deadline: DeadlineClass::Identity,
            needs: None,
            mutation_key: None,
        }
    }

    /// A call that asks the cloud.
    pub(super) fn read() -> Self {
        Rpc {
            deadline: DeadlineClass::Read,
            ..Rpc::identity()
        }
    }

    /// A call that changes the cloud: one at a time per `key`, and only
    /// while the mutation gate allows.
    pub(super) fn mutation(key: String) -> Self {
        Rpc {
            deadline: DeadlineClass::Mutation,
            mutation_key: Some(key),
            ..Rpc::identity()
        }
    }

    /// Refuses the call with [`ClientError::Unsupported`] unless the
    /// provider advertised `capability`.
    pub(super) fn needs(self, capability: Capability) -> Self {
        Rpc {
            needs: Some(capability),
            ..self
        }
    }
}

impl ProviderClient {
    /// Sends one RPC and returns its checked answer.
    ///
    /// The capability is required first (handshaking if the connection is
    /// new); then the request goes down the layers, outermost first; last,
    /// `answer` converts the response, and a violation it finds (or an
    /// answer past the RPC's size bound) becomes
    /// [`ClientError::InvalidResponse`] naming the method.
    pub(super) async fn call<Req: Unary, T>(
        &self,
        rpc: Rpc,
        message: Req,
        answer: impl FnOnce(Req::Response) -> Checked<T>,
    ) -> Result<T, ClientError> {
        if let Some(capability) = rpc.needs {
            // Boxed: the handshake itself goes through `call`.
            Box::pin(self.require(capability)).await?;
        }
        let method = Req::METHOD;
        let gate = match rpc.mutation_key {
            Some(key) => GateLayer::mutation(
                method,
                key,
                self.mutations.clone(),
                self.opts.mutation_gate.clone(),
            ),
            None => GateLayer::read(method),
        };
        let revoke = self
            .opts
            .mutation_gate
            .clone()
            .filter(|_| gate.is_mutation());
        // Identity calls (Probe among them) take no slot: a health check
        // never waits behind reads and mutations.
        let slots = match rpc.deadline {
            DeadlineClass::Identity => None,
            _ => self.slots.clone(),
        };
        let max_answer = Req::MAX_ANSWER_BYTES.min(self.opts.max_message_bytes);
        let timeout = rpc.deadline.timeout(&self.opts);
        // Handshakes and probes bypass the budget. Unlimited and not held:
        // no layer at all, the path as it was.
        let lane = Lane::of_method(method).map(|by_rpc| self.lane.unwrap_or(by_rpc));
        let budget = lane
            .filter(|_| self.budget.engaged())
            .map(|lane| BudgetLayer {
                budget: self.budget.clone(),
                lane,
                method,
                timeout,
                observer: self.opts.observer.clone(),
            });
        let stack = ServiceBuilder::new()
            .layer(ScopeLayer::new(self.request_id.clone()))
            .option_layer(budget)
            .layer(gate)
            .layer(ObserveLayer::new(self.opts.observer.clone(), method))
            .layer(RevokeLayer(revoke))
            .layer(DeadlineLayer(timeout))
            .option_layer(slots.map(GlobalConcurrencyLimitLayer::with_semaphore))
            .service(Sender::<Req>::new(
                self.channel.clone(),
                self.opts.max_message_bytes,
                max_answer,
            ));
        let response = stack
            .oneshot(Request::new(message))
            .await
            .map_err(|e| self.throttled(method, lane.is_some(), e))
            .map_err(|e| oversized_answer(method, max_answer, e))?;
        answer(response.into_inner()).map_err(invalid_answer(method))
    }
}

impl ProviderClient {
    /// A throttling answer to a budgeted call holds the budget for the
    /// delay it asked for (see `budget.rs`).
    fn throttled(&self, method: &'static str, budgeted: bool, e: ClientError) -> ClientError {
        if budgeted && let Some(delay) = budget::throttled(&e) {
            self.hold_budget(method, delay);
        }
        e
    }

    /// Holds the budget for `delay`, which an answer to `method` asked for.
    pub(super) fn hold_budget(&self, method: &'static str, delay: std::time::Duration) {
        let held = self.budget.hold(delay);
        tracing::info!(method, ?held, "provider throttled: holding its call budget");
        if let Some(o) = &self.opts.observer {
            o.budget_held(method, held);
        }
    }
}

/// tonic's refusal of an answer past `max_answer` bytes (from its length
/// prefix, before reading it) as what it is: a provider bug in `method`'s
/// answer, not the provider's error.
fn oversized_answer(method: &'static str, max_answer: usize, e: ClientError) -> ClientError {
    const TONIC_TOO_LARGE: &str = "Error, decoded message length too large: found ";
    let found = e.provider_error().and_then(|p| {
        let size = p.message().strip_prefix(TONIC_TOO_LARGE)?;
        let size = size.split_once(' ')?.0.parse::<usize>().ok()?;
        (p.code() == tonic::Code::OutOfRange && p.reason().is_none()).then_some(size)
    });
    match found {
        Some(size) => ClientError::InvalidResponse {
            method,
            violation: crate::validate::violation(
                "answer",
                format!(
                    "is {size} bytes, more than the {max_answer} bytes a {method} answer may carry"
                ),
            ),
        },
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use tonic::{Response, Status};

    use parking_lot::Mutex;
    use tonic::transport::Channel;

    use super::*;
    use crate::FencingToken;
    use crate::client::rpcs::ServiceClient;
    use crate::client::{ClientOptions, MutationGate};
    use crate::error::ProviderError;
    use crate::proto;

    /// A client whose calls never reach a provider: [`Echo`] answers in
    /// place of one, from what the request carries.
    fn client(opts: ClientOptions) -> ProviderClient {
        ProviderClient::connect_lazy("unix:///nonexistent/provider.sock", opts).unwrap()
    }

    struct Unconnected;

    impl ServiceClient for Unconnected {
        fn limited(_: Channel, _: usize, _: usize) -> Self {
            Unconnected
        }
    }

    /// Answers with the value of its request's `header` ("" when absent),
    /// or fails with it as a `CLOUD_UNAVAILABLE` error.
    struct Echo {
        header: &'static str,
        fail: bool,
    }

    impl Unary for Echo {
        const METHOD: &'static str = "Echo";
        const MAX_ANSWER_BYTES: usize = 1024;
        type Client = Unconnected;
        type Response = String;
        async fn send(_: Unconnected, request: Request<Self>) -> Result<Response<String>, Status> {
            let value = request.metadata().get(request.get_ref().header);
            let value = value.map_or("", |v| v.to_str().unwrap()).to_owned();
            if request.get_ref().fail {
                return Err(ProviderError::cloud_unavailable(value, None).to_status());
            }
            Ok(Response::new(value))
        }
    }

    fn echo(header: &'static str) -> Echo {
        Echo {
            header,
            fail: false,
        }
    }

    async fn request_id_sent(c: &ProviderClient) -> String {
        let request = echo(proto::REQUEST_ID_METADATA);
        c.call(Rpc::read(), request, Ok).await.unwrap()
    }

    #[tokio::test]
    async fn every_call_carries_the_instant_it_gives_up_on() {
        use std::time::{SystemTime, UNIX_EPOCH};
        let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis();
        let opts = ClientOptions::default();
        let (read, mutation) = (opts.read_timeout, opts.mutation_timeout);
        let c = client(opts);
        for (rpc, timeout) in [(Rpc::read(), read), (Rpc::mutation("k".into()), mutation)] {
            let before = ms(SystemTime::now() + timeout);
            let sent: u128 = c
                .call(rpc, echo(proto::DEADLINE_METADATA), Ok)
                .await
                .unwrap()
                .parse()
                .unwrap();
            let after = ms(SystemTime::now() + timeout);
            assert!(
                (before..=after).contains(&sent),
                "{before} <= {sent} <= {after}"
            );
        }
    }

    #[tokio::test]
    async fn request_id_is_put_in_the_metadata_generated_or_given() {
        let c = client(ClientOptions::default());
        let first = request_id_sent(&c).await;
        let second = request_id_sent(&c).await;
        let prefix = format!("ccm-{}-", std::process::id());
        assert!(first.starts_with(&prefix), "{first}");
        assert!(second.starts_with(&prefix), "{second}");
        assert_ne!(first, second, "every call gets its own id");
        let given = c.with_request_id("reconcile-7");
        assert_eq!(request_id_sent(&given).await, "reconcile-7");
        assert_eq!(request_id_sent(&given).await, "reconcile-7");
        // A scope names every call made within it, on any client.
        let scoped = RequestScope::new("service/default/web#1a2b3c4d")
            .run(async { (request_id_sent(&c).await, request_id_sent(&c.clone()).await) })
            .await;
        assert_eq!(
            scoped,
            (
                "service/default/web#1a2b3c4d".to_owned(),
                "service/default/web#1a2b3c4d".to_owned()
            )
        );
        // A client's own id wins over the scope's.
        let own = RequestScope::new("node/a")
            .run(request_id_sent(&given))
            .await;
        assert_eq!(own, "reconcile-7");
        assert_ne!(request_id_sent(&c).await, "node/a", "only inside the scope");
    }

    #[tokio::test]
    async fn each_deadline_class_sets_its_own_grpc_timeout() {
        let c = client(ClientOptions {
            identity_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(2),
            mutation_timeout: Duration::from_secs(3),
            ..Default::default()
        });
        let expected = |secs| {
            let mut r = Request::new(());
            r.set_timeout(Duration::from_secs(secs));
            r.metadata()
                .get("grpc-timeout")
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned()
        };
        for (rpc, secs) in [
            (Rpc::identity(), 1),
            (Rpc::read(), 2),
            (Rpc::mutation("key".into()), 3),
        ] {
            let sent = c.call(rpc, echo("grpc-timeout"), Ok).await.unwrap();
            assert_eq!(sent, expected(secs));
        }
    }

    use super::observe::tests::Recorder;

    #[tokio::test]
    async fn the_observer_hears_every_call_and_the_reason_of_a_failure() {
        let recorder = Arc::new(Recorder::default());
        let c = client(ClientOptions {
            observer: Some(recorder.clone()),
            ..Default::default()
        });
        request_id_sent(&c).await;
        let failing = Echo {
            header: proto::REQUEST_ID_METADATA,
            fail: true,
        };
        let err = c.call(Rpc::read(), failing, Ok).await.unwrap_err();
        assert_eq!(
            err.provider_error().unwrap().code(),
            tonic::Code::Unavailable
        );
        assert_eq!(
            *recorder.0.lock(),
            [
                "started Echo",
                "observe Echo Ok",
                "started Echo",
                "observe Echo Unavailable",
                "failed Echo Some(\"CLOUD_UNAVAILABLE\")",
            ]
        );
    }

    struct Closed;

    impl MutationGate for Closed {
        fn allows_mutations(&self) -> bool {
            false
        }
    }

    #[tokio::test]
    async fn a_closed_gate_refuses_mutations_before_anything_is_sent() {
        let recorder = Arc::new(Recorder::default());
        let c = client(ClientOptions {
            observer: Some(recorder.clone()),
            mutation_gate: Some(Arc::new(Closed)),
            ..Default::default()
        });
        let rpc = Rpc::mutation("key".into());
        let err = c.call(rpc, echo("grpc-timeout"), Ok).await.unwrap_err();
        assert!(
            matches!(err, ClientError::Refused { method: "Echo", .. }),
            "{err:?}"
        );
        // Reads do not ask the gate.
        request_id_sent(&c).await;
        assert_eq!(*recorder.0.lock(), ["started Echo", "observe Echo Ok"]);
    }

    /// A leader's gate: open until `revoke`, with a token, recording what
    /// a provider said about newer leaders.
    struct Leader {
        open: std::sync::atomic::AtomicBool,
        revoked: tokio::sync::Notify,
        superseded_by: Mutex<Vec<FencingToken>>,
    }

    impl Leader {
        fn new() -> Arc<Leader> {
            Arc::new(Leader {
                open: true.into(),
                revoked: tokio::sync::Notify::new(),
                superseded_by: Mutex::default(),
            })
        }
        fn revoke(&self) {
            self.open.store(false, Ordering::SeqCst);
            self.revoked.notify_waiters();
        }
    }

    impl MutationGate for Arc<Leader> {
        fn allows_mutations(&self) -> bool {
            self.open.load(Ordering::SeqCst)
        }
        fn fencing_token(&self) -> Option<FencingToken> {
            Some(FencingToken::new(4, "cp-1"))
        }
        fn revoked(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
            let me = self.clone();
            Box::pin(async move {
                // Registered before looking, so a revoke in between is seen.
                let notified = me.revoked.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                if me.open.load(Ordering::SeqCst) {
                    notified.await;
                }
            })
        }
        fn superseded(&self, newest: &FencingToken) {
            self.superseded_by.lock().push(newest.clone());
        }
    }

    #[tokio::test]
    async fn mutations_carry_the_fencing_token_and_reads_do_not() {
        let leader = Leader::new();
        let c = client(ClientOptions {
            mutation_gate: Some(Arc::new(leader.clone())),
            ..Default::default()
        });
        let header = proto::FENCING_TOKEN_METADATA;
        let sent = c.call(Rpc::mutation("k".into()), echo(header), Ok).await;
        assert_eq!(sent.unwrap(), "4:cp-1");
        let read = c.call(Rpc::read(), echo(header), Ok).await;
        assert_eq!(read.unwrap(), "", "a read carries no token");
    }

    /// Never answers; says when it has been sent.
    struct Hang;

    /// Notified (with a stored permit) when a [`Hang`] is sent.
    fn hang_sent() -> &'static tokio::sync::Notify {
        static SENT: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
        SENT.get_or_init(tokio::sync::Notify::new)
    }

    impl Unary for Hang {
        const METHOD: &'static str = "Hang";
        const MAX_ANSWER_BYTES: usize = 1024;
        type Client = Unconnected;
        type Response = ();
        async fn send(_: Unconnected, _: Request<Self>) -> Result<Response<()>, Status> {
            hang_sent().notify_one();
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn losing_leadership_cancels_a_mutation_in_flight() {
        let leader = Leader::new();
        let c = client(ClientOptions {
            mutation_gate: Some(Arc::new(leader.clone())),
            ..Default::default()
        });
        let call = tokio::spawn(async move { c.call(Rpc::mutation("k".into()), Hang, Ok).await });
        // Past the gate and sent: only the revocation can end it now.
        tokio::time::timeout(Duration::from_secs(5), hang_sent().notified())
            .await
            .expect("the mutation was sent");
        leader.revoke();
        let err = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the call ends as soon as leadership is lost")
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(err, ClientError::Refused { method: "Hang", .. }),
            "{err:?}"
        );
    }

    /// Answers NOT_LEADER naming a newer leader.
    struct NotLeader;

    impl Unary for NotLeader {
        const METHOD: &'static str = "NotLeader";
        const MAX_ANSWER_BYTES: usize = 1024;
        type Client = Unconnected;
        type Response = ();
        async fn send(_: Unconnected, _: Request<Self>) -> Result<Response<()>, Status> {
            Err(ProviderError::not_leader(&FencingToken::new(9, "cp-2")).to_status())
        }
    }

    #[tokio::test]
    async fn a_not_leader_answer_is_reported_to_the_gate() {
        let leader = Leader::new();
        let c = client(ClientOptions {
            mutation_gate: Some(Arc::new(leader.clone())),
            ..Default::default()
        });
        let err = c
            .call(Rpc::mutation("k".into()), NotLeader, Ok)
            .await
            .unwrap_err();
        let reason = err.provider_error().and_then(|p| p.reason());
        assert_eq!(reason, Some(proto::ErrorReason::NotLeader));
        assert_eq!(*leader.superseded_by.lock(), [FencingToken::new(9, "cp-2")]);
    }

    /// Fails as QUOTA_EXCEEDED asking to come back in `ms`, or answers.
    struct Quota {
        ms: u64,
    }

    impl Unary for Quota {
        const METHOD: &'static str = "Quota";
        const MAX_ANSWER_BYTES: usize = 1024;
        type Client = Unconnected;
        type Response = ();
        async fn send(_: Unconnected, request: Request<Self>) -> Result<Response<()>, Status> {
            match request.get_ref().ms {
                0 => Ok(Response::new(())),
                ms => {
                    let delay = Duration::from_millis(ms);
                    Err(super::budget::tests::quota_exceeded_after(delay).to_status())
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttling_answer_holds_the_calls_of_an_unlimited_client_too() {
        use super::budget::Lane;
        let recorder = Arc::new(Recorder::default());
        let c = client(ClientOptions {
            observer: Some(recorder.clone()),
            ..Default::default()
        });
        let err = c.call(Rpc::read(), Quota { ms: 2000 }, Ok).await;
        assert!(err.is_err());
        let t0 = tokio::time::Instant::now();
        // Every clone is held, in whichever lane.
        let lb = c.in_lane(Lane::LoadBalancers);
        lb.call(Rpc::read(), Quota { ms: 0 }, Ok).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        // The hold over, nothing is waited for.
        c.call(Rpc::read(), Quota { ms: 0 }, Ok).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        assert_eq!(
            *recorder.0.lock(),
            [
                "started Quota",
                "observe Quota ResourceExhausted",
                "failed Quota Some(\"QUOTA_EXCEEDED\")",
                "held by Quota for 2s",
                "budget Quota load_balancers waited 2s",
                "started Quota",
                "observe Quota Ok",
                "started Quota",
                "observe Quota Ok",
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_without_a_token_by_its_deadline_is_not_sent() {
        let recorder = Arc::new(Recorder::default());
        let c = client(ClientOptions {
            observer: Some(recorder.clone()),
            read_timeout: Duration::from_secs(5),
            budget: Some(super::CallBudget { qps: 0.1, burst: 1 }),
            ..Default::default()
        });
        c.call(Rpc::read(), Quota { ms: 0 }, Ok).await.unwrap();
        let err = c.call(Rpc::read(), Quota { ms: 0 }, Ok).await.unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::BudgetExhausted {
                    method: "Quota",
                    lane: super::Lane::NodeInit,
                    held: false,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("Quota not sent: the provider's call budget was exhausted"),
            "{err}"
        );
        assert_eq!(
            *recorder.0.lock(),
            [
                "budget Quota node_init waited 0ns",
                "started Quota",
                "observe Quota Ok",
                "budget Quota node_init exhausted after 0ns",
            ]
        );
        // Handshakes and probes bypass the budget.
        assert_eq!(super::Lane::of_method("Probe"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_for_a_token_counts_against_the_calls_deadline() {
        let c = client(ClientOptions {
            read_timeout: Duration::from_secs(10),
            budget: Some(super::CallBudget {
                qps: 0.25,
                burst: 1,
            }),
            ..Default::default()
        });
        c.call(Rpc::read(), echo("grpc-timeout"), Ok).await.unwrap();
        // Waits 4 s for its token: 6 s of its 10 are left for the provider.
        let sent = c.call(Rpc::read(), echo("grpc-timeout"), Ok).await.unwrap();
        let mut expected = Request::new(());
        expected.set_timeout(Duration::from_secs(6));
        let expected = expected.metadata().get("grpc-timeout").unwrap();
        assert_eq!(sent, expected.to_str().unwrap());
    }

    #[tokio::test]
    async fn an_invalid_answer_names_the_method_and_the_field() {
        let c = client(ClientOptions::default());
        let request = echo(proto::REQUEST_ID_METADATA);
        let err = c
            .call(Rpc::read(), request, |id| {
                crate::validate::name("answer", &"x".repeat(300 + id.len()))
            })
            .await
            .unwrap_err();
        match err {
            ClientError::InvalidResponse { method, violation } => {
                assert_eq!((method, violation.field.as_str()), ("Echo", "answer"));
            }
            other => panic!("{other:?}"),
        }
    }
}
