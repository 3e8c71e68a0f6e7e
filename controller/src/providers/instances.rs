//! Instance questions gathered into `BatchInstances` calls (contract 1.4.0).
//!
//! Callers ask about one Node ([`Instances::metadata`], [`Instances::exists`],
//! [`Instances::shutdown`]) and await their own answer. For a provider whose
//! handshake announces `CAPABILITY_INSTANCES_BATCH` the questions go to one
//! driver task per [`Instances`], which sends them as batches with group
//! commit:
//!
//! - with no batch in flight, what is queued leaves at once (after one
//!   yield, so callers woken together share it; no timer);
//! - with a batch in flight, questions collect until a batch returns, the
//!   batch size is reached or the oldest has waited `wait`;
//! - at most [`BATCHES_IN_FLIGHT`] batches are in flight. One would let a
//!   slow batch hold every other question back; a few keep a burst moving
//!   while bounding what one controller puts on the provider at once to
//!   `BATCHES_IN_FLIGHT × size` questions (the SDKs fan a batch out 16 at a
//!   time, so 4 batches are the 64 calls of `--provider-max-concurrency`'s
//!   default).
//!
//! Everything is bounded: the queue holds at most one batch beyond the one
//! being gathered (callers wait to enqueue beyond that), the wait is at most
//! [`MAX_BATCH_WAIT`], and the client bounds and checks each answer.
//!
//! Without the capability every question is the single call it always was,
//! made by the caller itself: no queue, no added wait. A failed batch is
//! each of its questions' failure; a failed question is the error its
//! single call would have returned, so the controllers handle both the way
//! they handle a single call's error.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use ccm_provider_sdk::client::{
    InstanceAnswer, InstanceQuery as Query, InstanceQuestion as Question, MetadataAnswer,
};
use ccm_provider_sdk::proto::{Capability, NodeRef};
use ccm_provider_sdk::{ClientError, Existence, ProviderClient, ShutdownState};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::manager::metrics::BatchMetrics;

/// The contract's most queries in one `BatchInstances` call.
pub const MAX_BATCH_SIZE: usize = 500;
/// `--provider-batch-size`'s default.
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// `--provider-batch-wait`'s default.
pub const DEFAULT_BATCH_WAIT: Duration = Duration::from_millis(10);
/// The longest `--provider-batch-wait`: a question waits at most this long
/// for company.
pub const MAX_BATCH_WAIT: Duration = Duration::from_secs(1);
/// Batches in flight at once, per [`Instances`] (see the module's docs).
pub const BATCHES_IN_FLIGHT: usize = 4;

/// How questions are gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    /// Most questions in one batch, 1 to [`MAX_BATCH_SIZE`].
    pub size: usize,
    /// Longest a question waits for a batch while another is in flight.
    pub wait: Duration,
}

impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            size: DEFAULT_BATCH_SIZE,
            wait: DEFAULT_BATCH_WAIT,
        }
    }
}

impl BatchSettings {
    /// How many questions a caller with many Nodes to ask about keeps
    /// outstanding at once: enough to fill every batch in flight.
    pub fn window(&self) -> usize {
        self.size.clamp(1, MAX_BATCH_SIZE) * BATCHES_IN_FLIGHT
    }
}

/// A batch's answers: one per key, each the answer or that question's
/// error.
pub type BatchResults = Vec<(String, Result<InstanceAnswer, ClientError>)>;

/// What the coalescer needs of a provider client; [`ProviderClient`] in the
/// controller, a scripted one in tests.
pub trait Backend: Send + Sync + 'static {
    /// Whether the provider answers `BatchInstances` now (its handshake
    /// announces the capability). Asked for every question: a capability
    /// refresh may change it.
    fn batches(&self) -> impl Future<Output = bool> + Send;
    /// The single call.
    fn single(
        &self,
        node: NodeRef,
        question: Question,
    ) -> impl Future<Output = Result<InstanceAnswer, ClientError>> + Send;
    /// One `BatchInstances` call. The whole call's error, or the checked
    /// answers.
    fn batch(
        &self,
        queries: Vec<Query>,
    ) -> impl Future<Output = Result<BatchResults, ClientError>> + Send;
}

impl Backend for ProviderClient {
    async fn batches(&self) -> bool {
        self.handshake()
            .await
            .is_ok_and(|h| h.has(Capability::InstancesBatch))
    }

    async fn single(
        &self,
        node: NodeRef,
        question: Question,
    ) -> Result<InstanceAnswer, ClientError> {
        Ok(match question {
            Question::Existence => InstanceAnswer::Existence(self.instance_exists(node).await?),
            Question::Shutdown => InstanceAnswer::Shutdown(self.instance_shutdown(node).await?),
            Question::Metadata => {
                InstanceAnswer::Metadata(self.instance_metadata_answer(node).await?)
            }
        })
    }

    async fn batch(&self, queries: Vec<Query>) -> Result<BatchResults, ClientError> {
        self.batch_instances(queries).await
    }
}

type Reply = oneshot::Sender<Result<InstanceAnswer, ClientError>>;

/// A question waiting for its batch.
struct Pending {
    node: NodeRef,
    question: Question,
    reply: Reply,
    arrived: Instant,
}

/// The coalescer of one controller's instance questions to one provider.
pub struct Instances<B: Backend = ProviderClient> {
    backend: Arc<B>,
    settings: BatchSettings,
    metrics: BatchMetrics,
    /// The driver's queue; the driver starts at the first batched question
    /// and ends when this is dropped (after answering what it holds).
    queue: OnceLock<mpsc::Sender<Pending>>,
}

impl<B: Backend> Instances<B> {
    pub fn new(backend: B, settings: BatchSettings, metrics: BatchMetrics) -> Self {
        let settings = BatchSettings {
            size: settings.size.clamp(1, MAX_BATCH_SIZE),
            wait: settings.wait.min(MAX_BATCH_WAIT),
        };
        Instances {
            backend: Arc::new(backend),
            settings,
            metrics,
            queue: OnceLock::new(),
        }
    }

    /// Whether questions are batched now (the provider has the capability).
    pub async fn batches(&self) -> bool {
        self.backend.batches().await
    }

    pub fn settings(&self) -> BatchSettings {
        self.settings
    }

    /// The instance's metadata and the provider's warnings about the Node.
    pub async fn metadata(&self, node: NodeRef) -> Result<MetadataAnswer, ClientError> {
        match self.ask(node, Question::Metadata).await? {
            InstanceAnswer::Metadata(m) => Ok(m),
            other => Err(wrong_kind(Question::Metadata, &other)),
        }
    }

    /// Never `NotExists` unless the provider said exactly that.
    pub async fn exists(&self, node: NodeRef) -> Result<Existence, ClientError> {
        match self.ask(node, Question::Existence).await? {
            InstanceAnswer::Existence(e) => Ok(e),
            other => Err(wrong_kind(Question::Existence, &other)),
        }
    }

    pub async fn shutdown(&self, node: NodeRef) -> Result<ShutdownState, ClientError> {
        match self.ask(node, Question::Shutdown).await? {
            InstanceAnswer::Shutdown(s) => Ok(s),
            other => Err(wrong_kind(Question::Shutdown, &other)),
        }
    }

    /// The answer to `question` about `node`: from a batch when the
    /// provider batches, else from the single call.
    pub async fn ask(
        &self,
        node: NodeRef,
        question: Question,
    ) -> Result<InstanceAnswer, ClientError> {
        if !self.backend.batches().await {
            return self.backend.single(node, question).await;
        }
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            node,
            question,
            reply,
            arrived: Instant::now(),
        };
        if let Err(mpsc::error::SendError(p)) = self.queue().send(pending).await {
            // The driver is gone (the runtime is shutting down).
            return self.backend.single(p.node, p.question).await;
        }
        answer.await.unwrap_or_else(|_| Err(unanswered()))
    }

    /// The driver's queue, starting the driver on first use.
    fn queue(&self) -> &mpsc::Sender<Pending> {
        self.queue.get_or_init(|| {
            // One batch gathering in the driver, one more queued here.
            let (tx, rx) = mpsc::channel(self.settings.size);
            let driver = drive(
                self.backend.clone(),
                rx,
                self.settings,
                self.metrics.clone(),
            );
            // With several providers, the batches' log lines say whose.
            match crate::request_id::PROVIDER.try_with(|p| p.clone()) {
                Ok(p) => tokio::spawn(crate::request_id::PROVIDER.scope(p, driver)),
                Err(_) => tokio::spawn(driver),
            };
            tx
        })
    }
}

fn wrong_kind(asked: Question, got: &InstanceAnswer) -> ClientError {
    ClientError::InvalidResponse {
        method: "BatchInstances",
        violation: ccm_provider_sdk::validate::Violation {
            field: "results.result".into(),
            problem: format!("a {got:?} answers a {asked:?} question"),
        },
    }
}

/// A question whose batch never answered it (the driver ended mid-call).
fn unanswered() -> ClientError {
    ClientError::Provider(ccm_provider_sdk::ProviderError::from_status(
        &tonic::Status::cancelled("the batch carrying this question was cancelled"),
    ))
}

/// Sends the queued questions as batches, group commit (module docs),
/// until the queue's sender is dropped and everything is answered.
async fn drive<B: Backend>(
    backend: Arc<B>,
    mut queue: mpsc::Receiver<Pending>,
    settings: BatchSettings,
    metrics: BatchMetrics,
) {
    let mut pending: std::collections::VecDeque<Pending> = Default::default();
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    let mut sent: u64 = 0;
    loop {
        // What is already queued joins, up to one batch.
        while open && pending.len() < settings.size {
            match queue.try_recv() {
                Ok(p) => pending.push_back(p),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        while !pending.is_empty() && in_flight.len() < BATCHES_IN_FLIGHT {
            let due = in_flight.is_empty()
                || !open
                || pending.len() >= settings.size
                || pending[0].arrived + settings.wait <= Instant::now();
            if !due {
                break;
            }
            let n = pending.len().min(settings.size);
            let batch: Vec<Pending> = pending.drain(..n).collect();
            sent += 1;
            in_flight.push(send(backend.clone(), batch, metrics.clone(), sent));
        }
        if !open && pending.is_empty() && in_flight.is_empty() {
            return;
        }
        let deadline = pending.front().map(|p| p.arrived + settings.wait);
        let may_send = in_flight.len() < BATCHES_IN_FLIGHT;
        tokio::select! {
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            p = queue.recv(), if open && pending.len() < settings.size => match p {
                Some(p) => {
                    let idle = in_flight.is_empty();
                    pending.push_back(p);
                    if idle {
                        // Callers woken together enqueue before the batch
                        // leaves, so they share it.
                        tokio::task::yield_now().await;
                    }
                }
                None => open = false,
            },
            () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                if may_send && deadline.is_some() => {}
        }
    }
}

/// One batch: sends its questions (the same question about the same Node
/// once) and hands each caller its answer.
async fn send<B: Backend>(backend: Arc<B>, batch: Vec<Pending>, metrics: BatchMetrics, n: u64) {
    let mut queries: Vec<Query> = Vec::with_capacity(batch.len());
    let mut waiters: Vec<Vec<Reply>> = Vec::with_capacity(batch.len());
    for p in batch {
        if p.reply.is_closed() {
            // Its caller stopped waiting.
            continue;
        }
        // At most `size` (<= 500) questions: a scan is cheap enough.
        match queries
            .iter()
            .position(|q| q.question == p.question && q.node == p.node)
        {
            Some(i) => waiters[i].push(p.reply),
            None => {
                queries.push(Query {
                    key: queries.len().to_string(),
                    node: p.node,
                    question: p.question,
                });
                waiters.push(vec![p.reply]);
            }
        }
    }
    if queries.is_empty() {
        return;
    }
    metrics.observe(queries.len());
    // About one Node: the id its single call would carry, so a lone
    // question reads the same in the provider's log either way.
    let first = &queries[0].node.name;
    let id = if queries.iter().all(|q| &q.node.name == first) {
        crate::request_id::node_named(first)
    } else {
        format!("instances/batch-{n}")
    };
    match crate::request_id::scoped(id, backend.batch(queries)).await {
        Err(e) => {
            for w in waiters.into_iter().flatten() {
                let _ = w.send(Err(e.clone()));
            }
        }
        Ok(results) => {
            for (key, result) in results {
                let Some(ws) = key.parse::<usize>().ok().and_then(|i| waiters.get_mut(i)) else {
                    continue;
                };
                for w in ws.drain(..) {
                    let _ = w.send(result.clone());
                }
            }
            // The client checks every key is answered once; should one
            // not be, its callers still get an answer.
            for w in waiters.into_iter().flatten() {
                let _ = w.send(Err(ClientError::InvalidResponse {
                    method: "BatchInstances",
                    violation: ccm_provider_sdk::validate::Violation {
                        field: "results".into(),
                        problem: "a query has no result".into(),
                    },
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccm_provider_sdk::ProviderError;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::Semaphore;

    /// A provider whose batches are recorded and held until released.
    #[derive(Default)]
    struct Script {
        no_batches: AtomicBool,
        /// Each batch sent: when, and its questions.
        batches: Mutex<Vec<(Instant, Vec<Query>)>>,
        singles: Mutex<Vec<(NodeRef, Question)>>,
        /// A batch returns once it takes a permit (none: at once).
        hold: Option<Arc<Semaphore>>,
        /// The whole batch fails with this.
        fail: Mutex<Option<ClientError>>,
    }

    #[derive(Clone, Default)]
    struct Fake(Arc<Script>);

    fn not_found(name: &str) -> ClientError {
        ClientError::Provider(ProviderError::instance_not_found(format!("no {name}")))
    }

    /// What the fake cloud says: Nodes named `gone-*` have no instance,
    /// `down-*` are shut down.
    fn answer(node: &NodeRef, q: Question) -> Result<InstanceAnswer, ClientError> {
        let gone = node.name.starts_with("gone-");
        Ok(match q {
            Question::Existence if gone => InstanceAnswer::Existence(Existence::NotExists),
            Question::Existence => InstanceAnswer::Existence(Existence::Exists),
            _ if gone => return Err(not_found(&node.name)),
            Question::Shutdown if node.name.starts_with("down-") => {
                InstanceAnswer::Shutdown(ShutdownState::ShutDown)
            }
            Question::Shutdown => InstanceAnswer::Shutdown(ShutdownState::Running),
            Question::Metadata => InstanceAnswer::Metadata(MetadataAnswer {
                metadata: ccm_provider_sdk::proto::InstanceMetadata {
                    provider_id: format!("fake://{}", node.name),
                    ..Default::default()
                },
                warnings: vec![],
            }),
        })
    }

    impl Backend for Fake {
        async fn batches(&self) -> bool {
            !self.0.no_batches.load(Ordering::SeqCst)
        }

        async fn single(
            &self,
            node: NodeRef,
            question: Question,
        ) -> Result<InstanceAnswer, ClientError> {
            self.0.singles.lock().push((node.clone(), question));
            answer(&node, question)
        }

        async fn batch(&self, queries: Vec<Query>) -> Result<BatchResults, ClientError> {
            self.0
                .batches
                .lock()
                .push((Instant::now(), queries.clone()));
            if let Some(hold) = &self.0.hold {
                hold.acquire().await.unwrap().forget();
            }
            if let Some(e) = self.0.fail.lock().clone() {
                return Err(e);
            }
            // Any order: the answers come back reversed.
            Ok(queries
                .iter()
                .rev()
                .map(|q| (q.key.clone(), answer(&q.node, q.question)))
                .collect())
        }
    }

    impl Fake {
        fn held() -> (Fake, Arc<Semaphore>) {
            let hold = Arc::new(Semaphore::new(0));
            let fake = Fake(Arc::new(Script {
                hold: Some(hold.clone()),
                ..Default::default()
            }));
            (fake, hold)
        }

        fn sizes(&self) -> Vec<usize> {
            self.0.batches.lock().iter().map(|(_, q)| q.len()).collect()
        }

        fn sent_at(&self) -> Vec<Instant> {
            self.0.batches.lock().iter().map(|(t, _)| *t).collect()
        }
    }

    fn node(name: &str) -> NodeRef {
        NodeRef {
            name: name.into(),
            ..Default::default()
        }
    }

    fn instances(fake: &Fake, settings: BatchSettings) -> (Arc<Instances<Fake>>, BatchMetrics) {
        let metrics = BatchMetrics::default();
        let i = Instances::new(fake.clone(), settings, metrics.clone());
        (Arc::new(i), metrics)
    }

    /// Asks `metadata` about each name in its own task, as workers do.
    fn ask_all(
        i: &Arc<Instances<Fake>>,
        names: impl IntoIterator<Item = String>,
    ) -> Vec<tokio::task::JoinHandle<Result<MetadataAnswer, ClientError>>> {
        names
            .into_iter()
            .map(|n| {
                let i = i.clone();
                tokio::spawn(async move { i.metadata(node(&n)).await })
            })
            .collect()
    }

    /// Lets every ready task run (paused time does not move).
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    /// The first question leaves at once; while it is in flight the next
    /// ones collect: full batches leave as soon as they are full, the rest
    /// when the wait is up, and no more than BATCHES_IN_FLIGHT are out.
    #[tokio::test(start_paused = true)]
    async fn group_commit_sizes_and_the_wait_bound() {
        let (fake, hold) = Fake::held();
        let (i, metrics) = instances(&fake, BatchSettings::default());
        let start = Instant::now();
        let first = ask_all(&i, ["a".to_owned()]);
        settle().await;
        assert_eq!(fake.sizes(), [1], "alone, at once");
        assert_eq!(fake.sent_at(), [start], "no timer when none is in flight");

        let rest = ask_all(&i, names("n", 250));
        settle().await;
        assert_eq!(fake.sizes(), [1, 100, 100], "full batches leave at once");
        assert_eq!(Instant::now(), start, "no time has passed");

        // The remaining 50 wait for company, 10 ms at most.
        tokio::time::sleep(Duration::from_millis(9)).await;
        assert_eq!(fake.sizes(), [1, 100, 100]);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(fake.sizes(), [1, 100, 100, 50]);
        assert_eq!(
            fake.sent_at()[3] - start,
            DEFAULT_BATCH_WAIT,
            "left when the oldest had waited the wait"
        );

        // Four in flight: a fifth waits for one to return, however long.
        let more = ask_all(&i, names("m", 3));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(fake.sizes().len(), 4, "no fifth batch in flight");
        hold.add_permits(1);
        settle().await;
        assert_eq!(
            fake.sizes(),
            [1, 100, 100, 50, 3],
            "at once when one returns"
        );

        hold.add_permits(10);
        for h in first.into_iter().chain(rest).chain(more) {
            let answer = h.await.unwrap().unwrap();
            assert!(answer.metadata.provider_id.starts_with("fake://"));
        }
        assert_eq!(metrics.sent(), (5, 254.0), "batches and questions sent");
    }

    /// While a batch is in flight, questions collect until it returns (if
    /// that is before the wait is up) and then leave together.
    #[tokio::test(start_paused = true)]
    async fn collected_questions_leave_when_the_batch_in_flight_returns() {
        let (fake, hold) = Fake::held();
        let settings = BatchSettings {
            size: 100,
            wait: Duration::from_millis(500),
        };
        let (i, _) = instances(&fake, settings);
        let start = Instant::now();
        let first = ask_all(&i, ["a".to_owned()]);
        settle().await;
        let next = ask_all(&i, names("n", 7));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(fake.sizes(), [1]);
        hold.add_permits(1);
        settle().await;
        assert_eq!(fake.sizes(), [1, 7]);
        assert_eq!(fake.sent_at()[1] - start, Duration::from_millis(30));
        hold.add_permits(1);
        for h in first.into_iter().chain(next) {
            h.await.unwrap().unwrap();
        }
    }

    /// Each caller gets its own answer or its own question's error, as the
    /// single call would have given it; a failed batch is every question's
    /// failure.
    #[tokio::test(start_paused = true)]
    async fn answers_and_errors_go_to_their_own_callers() {
        let fake = Fake::default();
        let (i, _) = instances(&fake, BatchSettings::default());
        let (a, b, c, d) = tokio::join!(
            i.exists(node("gone-1")),
            i.exists(node("here")),
            i.shutdown(node("down-1")),
            i.metadata(node("gone-2")),
        );
        assert_eq!(a.unwrap(), Existence::NotExists);
        assert_eq!(b.unwrap(), Existence::Exists);
        assert_eq!(c.unwrap(), ShutdownState::ShutDown);
        let e = d.unwrap_err();
        assert_eq!(
            e.provider_error().and_then(|e| e.reason()),
            Some(ccm_provider_sdk::proto::ErrorReason::InstanceNotFound),
            "{e}"
        );
        assert_eq!(fake.sizes(), [4], "one batch");

        *fake.0.fail.lock() = Some(ClientError::Provider(ProviderError::cloud_unavailable(
            "down", None,
        )));
        let (a, b) = tokio::join!(i.exists(node("x")), i.metadata(node("y")));
        for e in [a.unwrap_err(), b.unwrap_err()] {
            assert_eq!(e.provider_error().unwrap().code(), tonic::Code::Unavailable);
        }
        assert!(fake.0.singles.lock().is_empty(), "no single call");
    }

    /// The same question about the same Node, asked twice in one window,
    /// is sent once and answers both; a caller that gave up is not asked
    /// about.
    #[tokio::test(start_paused = true)]
    async fn a_question_asked_twice_goes_once_and_an_abandoned_one_not_at_all() {
        let (fake, hold) = Fake::held();
        let (i, _) = instances(&fake, BatchSettings::default());
        let first = ask_all(&i, ["a".to_owned()]);
        settle().await;
        let twice = ask_all(&i, ["b".to_owned(), "b".to_owned(), "c".to_owned()]);
        let abandoned = ask_all(&i, ["d".to_owned()]);
        settle().await;
        abandoned[0].abort();
        settle().await;
        hold.add_permits(2);
        for h in first.into_iter().chain(twice) {
            h.await.unwrap().unwrap();
        }
        let batches = fake.0.batches.lock().clone();
        let asked: Vec<&str> = batches[1].1.iter().map(|q| q.node.name.as_str()).collect();
        assert_eq!(asked, ["b", "c"]);
        assert_eq!(
            batches[1]
                .1
                .iter()
                .map(|q| q.key.as_str())
                .collect::<Vec<_>>(),
            ["0", "1"],
            "keys distinct"
        );
    }

    /// Without the capability, every question is the caller's own single
    /// call: no batch, no wait.
    #[tokio::test(start_paused = true)]
    async fn without_the_capability_each_question_is_its_single_call() {
        let fake = Fake::default();
        fake.0.no_batches.store(true, Ordering::SeqCst);
        let (i, metrics) = instances(&fake, BatchSettings::default());
        let start = Instant::now();
        let (a, b) = tokio::join!(i.exists(node("gone-1")), i.metadata(node("n")));
        assert_eq!(a.unwrap(), Existence::NotExists);
        assert_eq!(b.unwrap().metadata.provider_id, "fake://n");
        assert_eq!(Instant::now(), start);
        assert!(fake.sizes().is_empty());
        assert_eq!(metrics.sent(), (0, 0.0));
        let singles: Vec<(String, Question)> = fake
            .0
            .singles
            .lock()
            .iter()
            .map(|(n, q)| (n.name.clone(), *q))
            .collect();
        assert_eq!(
            singles,
            [
                ("gone-1".to_owned(), Question::Existence),
                ("n".to_owned(), Question::Metadata)
            ]
        );
    }

    /// The queue is bounded: with every batch in flight held, callers
    /// beyond one gathering batch and one queued batch wait to enqueue.
    #[tokio::test(start_paused = true)]
    async fn the_queue_is_bounded() {
        let (fake, hold) = Fake::held();
        let settings = BatchSettings {
            size: 10,
            wait: Duration::from_millis(10),
        };
        let (i, _) = instances(&fake, settings);
        let asked = ask_all(&i, names("n", 200));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let in_flight: usize = fake.sizes().iter().sum();
        assert_eq!(fake.sizes().len(), BATCHES_IN_FLIGHT);
        // Gathered in the driver (10) and queued (10): the rest are not yet
        // taken from their callers.
        let queued = i.queue().max_capacity() - i.queue().capacity();
        assert_eq!(queued, 10, "the channel is full");
        assert!(in_flight <= 40, "{in_flight}");
        hold.add_permits(1000);
        for h in asked {
            h.await.unwrap().unwrap();
        }
        assert_eq!(fake.sizes().iter().sum::<usize>(), 200);
        assert!(fake.sizes().iter().all(|s| *s <= 10), "{:?}", fake.sizes());
    }

    #[test]
    fn settings_are_clamped_to_the_contract() {
        let fake = Fake::default();
        let i = Instances::new(
            fake,
            BatchSettings {
                size: 10_000,
                wait: Duration::from_secs(60),
            },
            BatchMetrics::default(),
        );
        assert_eq!(i.settings().size, MAX_BATCH_SIZE);
        assert_eq!(i.settings().wait, MAX_BATCH_WAIT);
        assert_eq!(BatchSettings::default().window(), 400);
    }
}
