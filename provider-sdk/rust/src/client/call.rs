//! The one path every RPC takes. The per-service files only build the
//! request, pick an [`Rpc`] (deadline class, capability, mutation key) and
//! convert the answer; everything that must be the same for every call
//! (message limits, deadline, request id, key lock and mutation gate,
//! observer and log line) happens here, once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use super::error::invalid_answer;
use super::rpcs::{ServiceClient, Unary};
use super::{ClientError, MutationGate, ProviderClient};
use crate::error::{ProviderError, bounded, reason_str};
use crate::proto::{self, Capability};
use crate::trace_context::{SpanId, TRACEPARENT_METADATA, TraceId, traceparent};
use crate::validate::Checked;

tokio::task_local! {
    static SCOPED: RequestScope;
}

/// What every provider call made within [`RequestScope::run`] carries:
/// one request id and one W3C trace id, for all the calls of one reconcile.
#[derive(Debug, Clone)]
pub struct RequestScope {
    id: std::sync::Arc<str>,
    trace: TraceId,
    /// The caller's span the calls are children of; a new span id per call
    /// when there is none.
    parent: Option<SpanId>,
}

impl RequestScope {
    /// `id` (bounded to [`MAX_REQUEST_ID_BYTES`]) and a fresh trace id.
    pub fn new(id: &str) -> Self {
        RequestScope {
            id: bounded_id(id).into(),
            trace: TraceId::random(),
            parent: None,
        }
    }

    /// The calls join the caller's trace as children of its span (an
    /// exported span, such as OpenTelemetry's for the reconcile), instead
    /// of starting a trace of their own.
    pub fn within(mut self, trace: TraceId, parent: SpanId) -> Self {
        self.trace = trace;
        self.parent = Some(parent);
        self
    }

    /// The trace id, as the calls' `traceparent` carries it.
    pub fn trace_id(&self) -> String {
        self.trace.to_string()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs `work` with every provider call it makes carrying this scope's
    /// request id (unless the client has one of its own) and trace id.
    pub async fn run<F: Future>(self, work: F) -> F::Output {
        SCOPED.scope(self, work).await
    }
}

/// The longest request id sent: the contract's limit.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// `id` cut to the contract's limit, keeping its head (the kind and
/// namespace) and its tail (the uid) readable; printable ASCII only, so it
/// is always a valid metadata value.
fn bounded_id(id: &str) -> String {
    let printable: String = id
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    if printable.len() <= MAX_REQUEST_ID_BYTES {
        return printable;
    }
    let head = (MAX_REQUEST_ID_BYTES - 1) / 2;
    let tail = MAX_REQUEST_ID_BYTES - 1 - head;
    format!(
        "{}~{}",
        &printable[..head],
        &printable[printable.len() - tail..]
    )
}

/// Which of [`ClientOptions`](super::ClientOptions)' deadlines a call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeadlineClass {
    Identity,
    Read,
    Mutation,
}

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

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

impl ProviderClient {
    /// Sends one RPC and returns its checked answer.
    ///
    /// In order: the capability is required (handshaking if the connection
    /// is new); a mutation waits for its key, then asks the gate (after the
    /// lock, so a call that waited is still refused if the gate closed
    /// meanwhile); the request gets its deadline and request id and goes
    /// out on a client with the message limits; the observer and the log
    /// hear about the call; `answer` converts the response, and a violation
    /// it finds becomes [`ClientError::InvalidResponse`] naming the method.
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
        let mutation = rpc.mutation_key.is_some();
        let _one_at_a_time = match rpc.mutation_key {
            Some(key) => {
                let held = self.mutations.lock(key).await;
                self.gate(Req::METHOD)?;
                Some(held)
            }
            None => None,
        };
        let gate = self.opts.mutation_gate.clone().filter(|_| mutation);
        let request_id = self.next_request_id();
        let mut request = self.request(message, rpc.deadline, &request_id);
        if let Some(token) = gate.as_ref().and_then(|g| g.fencing_token()) {
            // Holder identities are free-form; one that is not a valid
            // header value goes without a token rather than not at all.
            if let Ok(v) = token.to_string().parse() {
                request
                    .metadata_mut()
                    .insert(proto::FENCING_TOKEN_METADATA, v);
            }
        }
        let max_answer = Req::MAX_ANSWER_BYTES.min(self.opts.max_message_bytes);
        let client = Req::Client::limited(
            self.channel.clone(),
            self.opts.max_message_bytes,
            max_answer,
        );
        // Identity calls (Probe among them) take no slot: a health check
        // never waits behind reads and mutations.
        let slots = match rpc.deadline {
            DeadlineClass::Identity => None,
            _ => self.slots.clone(),
        };
        let deadline = self.timeout(rpc.deadline);
        let send = async move {
            let _slot = match &slots {
                Some(s) => Some(
                    s.acquire()
                        .await
                        .map_err(|_| Status::cancelled("the client is closing"))?,
                ),
                None => None,
            };
            Req::send(client, request).await
        };
        // The deadline also bounds waiting for a slot, and holds when the
        // provider never answers (a stopped process ignores grpc-timeout).
        let bounded = async move {
            let expired = || Status::deadline_exceeded(format!("no answer within {deadline:?}"));
            match tokio::time::timeout(deadline, send).await {
                Err(_) => Err(expired()),
                // tonic's own enforcement of the same deadline, which can
                // win the race: the same thing, said the same way.
                Ok(Err(s))
                    if s.code() == tonic::Code::Cancelled && s.message() == "Timeout expired" =>
                {
                    Err(expired())
                }
                Ok(answer) => answer,
            }
        };
        // A mutation in flight when leadership is lost is cancelled: the
        // provider's handler is dropped with the stream.
        let revoked = match &gate {
            Some(g) => g.revoked(),
            None => Box::pin(std::future::pending()),
        };
        let fenced = async move {
            tokio::select! {
                answer = bounded => answer,
                () = revoked => Err(Status::cancelled("leadership lost: the mutation was abandoned")),
            }
        };
        // On the heap: tonic's future is tens of kilobytes, and every caller
        // (each reconcile, each test) would otherwise carry it inline,
        // overflowing a 2 MiB thread stack in debug builds.
        let response = match self
            .observed(Req::METHOD, &request_id, Box::pin(fenced))
            .await
        {
            Ok(response) => response,
            Err(e) => {
                let e = oversized_answer(Req::METHOD, max_answer, e);
                return Err(fenced_failure(Req::METHOD, gate.as_deref(), e));
            }
        };
        answer(response).map_err(invalid_answer(Req::METHOD))
    }

    /// The id for the next request: the one given to
    /// [`with_request_id`](ProviderClient::with_request_id), else the one of
    /// the enclosing [`RequestScope`], else a fresh one. The provider logs
    /// it too, so both sides of a call can be matched.
    fn next_request_id(&self) -> String {
        if let Some(id) = &self.request_id {
            return id.to_string();
        }
        SCOPED
            .try_with(|scope| scope.id.to_string())
            .unwrap_or_else(|_| {
                format!(
                    "ccm-{}-{}",
                    std::process::id(),
                    NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)
                )
            })
    }

    fn timeout(&self, class: DeadlineClass) -> Duration {
        match class {
            DeadlineClass::Identity => self.opts.identity_timeout,
            DeadlineClass::Read => self.opts.read_timeout,
            DeadlineClass::Mutation => self.opts.mutation_timeout,
        }
    }

    fn request<T>(&self, message: T, class: DeadlineClass, request_id: &str) -> Request<T> {
        let mut request = Request::new(message);
        let timeout = self.timeout(class);
        request.set_timeout(timeout);
        if let Ok(v) = request_id.parse() {
            request.metadata_mut().insert(proto::REQUEST_ID_METADATA, v);
        }
        // The absolute deadline: a provider that reads the request late
        // (paused, stalled) must not act on what this side gave up on.
        let gives_up = std::time::SystemTime::now() + timeout;
        if let Ok(since_epoch) = gives_up.duration_since(std::time::UNIX_EPOCH)
            && let Ok(v) = since_epoch.as_millis().to_string().parse()
        {
            request.metadata_mut().insert(proto::DEADLINE_METADATA, v);
        }
        // One trace per scope (reconcile), or per call outside one.
        let (trace, parent) = SCOPED
            .try_with(|scope| (scope.trace, scope.parent))
            .unwrap_or_else(|_| (TraceId::random(), None));
        if let Ok(v) = traceparent(trace, parent).parse() {
            request.metadata_mut().insert(TRACEPARENT_METADATA, v);
        }
        request
    }

    /// Asks the mutation gate; `Refused` when it is closed.
    fn gate(&self, method: &'static str) -> Result<(), ClientError> {
        match &self.opts.mutation_gate {
            Some(gate) if !gate.allows_mutations() => {
                gate.refused(method);
                Err(ClientError::Refused {
                    method,
                    why: gate.why_closed(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Awaits one RPC, logs it and reports it to the observer, and unwraps
    /// the answer.
    async fn observed<T>(
        &self,
        method: &'static str,
        request_id: &str,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<T, ClientError> {
        // Reported as CANCELLED if the caller drops the call before the
        // answer (a `/readyz` that stopped waiting): every start has an end.
        let mut watch = Observation::start(self.opts.observer.as_deref(), method);
        let result = call.await;
        let elapsed = watch.started.elapsed();
        let code = result
            .as_ref()
            .map_or_else(|s| s.code(), |_| tonic::Code::Ok);
        match &result {
            Ok(_) => tracing::debug!(method, request_id, ?elapsed, "provider call"),
            Err(status) => tracing::info!(
                method,
                request_id,
                code = code_name(code),
                // The provider's text, as long as it sent: cut as the
                // error itself is, or every failed call logs it whole.
                error = bounded(status.message()).as_str(),
                ?elapsed,
                "provider call failed"
            ),
        }
        watch.finish(code);
        if let (Some(o), Err(status)) = (&self.opts.observer, &result) {
            let reason = ProviderError::from_status(status).reason().map(reason_str);
            o.failed(method, reason);
        }
        Ok(result?.into_inner())
    }
}

/// One call as the observer sees it, from start to end.
struct Observation<'a> {
    observer: Option<&'a (dyn super::CallObserver + 'static)>,
    method: &'static str,
    started: Instant,
    open: bool,
}

impl<'a> Observation<'a> {
    fn start(
        observer: Option<&'a (dyn super::CallObserver + 'static)>,
        method: &'static str,
    ) -> Self {
        if let Some(o) = observer {
            o.started(method);
        }
        Observation {
            observer,
            method,
            started: Instant::now(),
            open: true,
        }
    }

    fn finish(&mut self, code: tonic::Code) {
        if std::mem::take(&mut self.open)
            && let Some(o) = self.observer
        {
            o.observe(self.method, code, self.started.elapsed());
        }
    }
}

impl Drop for Observation<'_> {
    fn drop(&mut self) {
        self.finish(tonic::Code::Cancelled);
    }
}

/// The canonical name of a gRPC code, as the gRPC specification and other
/// languages' libraries spell it (`OK`, `DEADLINE_EXCEEDED`), for metric
/// labels and logs.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
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

/// What a failed mutation means to leader election: a NOT_LEADER answer is
/// reported to the gate, and a call cancelled because the gate closed is
/// [`ClientError::Refused`], as if it had never been sent.
fn fenced_failure(
    method: &'static str,
    gate: Option<&dyn MutationGate>,
    e: ClientError,
) -> ClientError {
    let Some(gate) = gate else { return e };
    if let Some(newest) = e.provider_error().and_then(|p| p.newest_leader()) {
        gate.superseded(newest);
    }
    let cancelled = e
        .provider_error()
        .is_some_and(|p| p.code() == tonic::Code::Cancelled);
    if cancelled && !gate.allows_mutations() {
        return ClientError::Refused {
            method,
            why: gate.why_closed(),
        };
    }
    e
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    #[test]
    fn long_or_unprintable_ids_are_bounded_and_stay_valid_metadata() {
        assert_eq!(super::bounded_id("node/a b\u{e9}"), "node/a_b_");
        let long = format!("service/{}/{}#1a2b3c4d", "n".repeat(63), "s".repeat(63));
        let bounded = super::bounded_id(&long);
        assert_eq!(bounded.len(), super::MAX_REQUEST_ID_BYTES);
        assert!(bounded.starts_with("service/nnn"), "{bounded}");
        assert!(bounded.ends_with("sss#1a2b3c4d"), "{bounded}");
        assert!(
            bounded
                .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
                .is_ok()
        );
    }

    use parking_lot::Mutex;
    use tonic::transport::Channel;

    use super::*;
    use crate::FencingToken;
    use crate::client::{CallObserver, ClientOptions};

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

    /// Every observer callback, in order, as text.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl CallObserver for Recorder {
        fn observe(&self, method: &'static str, code: tonic::Code, _: Duration) {
            self.0.lock().push(format!("observe {method} {code:?}"));
        }
        fn started(&self, method: &'static str) {
            self.0.lock().push(format!("started {method}"));
        }
        fn failed(&self, method: &'static str, reason: Option<&'static str>) {
            self.0.lock().push(format!("failed {method} {reason:?}"));
        }
    }

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
            Box::pin(async move { me.revoked.notified().await })
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

    /// Never answers.
    struct Hang;

    impl Unary for Hang {
        const METHOD: &'static str = "Hang";
        const MAX_ANSWER_BYTES: usize = 1024;
        type Client = Unconnected;
        type Response = ();
        async fn send(_: Unconnected, _: Request<Self>) -> Result<Response<()>, Status> {
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
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
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
