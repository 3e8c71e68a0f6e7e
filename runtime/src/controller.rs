//! One way to write a controller: implement [`Reconcile`], then run it
//! with a [`Controller`] over a store (or any lookup), a change stream and
//! a resync stream.
//!
//! The runner owns what every controller needs the same way: the
//! [`WorkQueue`] (arrival-order lanes, one worker per key, a key changed
//! while it is worked on goes round again), the per-key retry state (in
//! the queue, reset on success), the queue metrics of every work item, and
//! the request-id [`Scope`] around each reconcile.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::metrics::QueueMetrics;
use crate::queue::{Lane, WorkQueue};
use crate::scope::{Scope, SpanOnly};

pub use crate::queue::Action;

/// Exponential backoff of one key's retries: `base`, doubling with each
/// failure in a row, at most `max`. The failure count lives in the queue
/// and is reset by a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    /// Nodes (and the default) use 1 s doubling to 5 min: upstream starts
    /// at 5 ms and caps at 1000 s, but a cloud that failed once rarely
    /// answers 5 ms later, and 16 minutes is too long to wait for a node
    /// that could be initialised.
    pub const NODES: RetryPolicy =
        RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(300));
    /// Services use upstream's 5 s to 5 min.
    pub const SERVICES: RetryPolicy =
        RetryPolicy::new(Duration::from_secs(5), Duration::from_secs(300));

    pub const fn new(base: Duration, max: Duration) -> Self {
        RetryPolicy { base, max }
    }

    /// The wait after the `failures`-th failure in a row (1 for the first).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.base.saturating_mul(1u32 << doublings).min(self.max)
    }
}

/// How a queue key is named in log lines (`key=`).
pub trait KeyName {
    fn key_name(&self) -> String;
}

/// `namespace/name`, or `name` for a cluster-scoped object.
impl<K: Resource> KeyName for ObjectRef<K> {
    fn key_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The one key of a controller that reconciles a whole set at once
/// (every Node's addresses, say), named for log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Singleton(pub &'static str);

impl KeyName for Singleton {
    fn key_name(&self) -> String {
        self.0.to_owned()
    }
}

/// A controller: what to do for one object, and what to do when that
/// failed. The runner calls it with one worker per key.
pub trait Reconcile: Send + Sync + 'static {
    /// What the queue holds: usually an `ObjectRef` of the watched kind.
    type Key: Hash + Eq + Clone + KeyName + Send + Sync + 'static;
    /// What a key is looked up as when its turn comes.
    type Object: Send + Sync + 'static;
    type Error: std::error::Error + Send + Sync + 'static;

    /// The backoff of [`Reconcile::error_policy`]'s default.
    const RETRY: RetryPolicy = RetryPolicy::NODES;

    /// Brings the world in line with `obj`; says when to come back.
    fn reconcile(
        &self,
        obj: Arc<Self::Object>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// What a failed reconcile of `key` asks for, its `failures`-th in a
    /// row. Default: the queue's per-key rate-limited retry
    /// ([`Reconcile::RETRY`]), logged as `error syncing; requeuing` with
    /// `retry_in=`. An override may return an explicit delay (a
    /// provider's RetryInfo) or none.
    fn error_policy(&self, key: &Self::Key, err: &Self::Error, failures: u32) -> Action {
        let delay = Self::RETRY.delay(failures);
        let key = key.key_name();
        tracing::warn!(key = key.as_str(), error = %err, retry_in = ?delay, "error syncing; requeuing");
        Action::requeue(delay)
    }

    /// A key whose object the lookup no longer has when its turn comes
    /// (deleted). Default: nothing to do.
    fn gone(&self, key: Self::Key) -> impl Future<Output = Result<Action, Self::Error>> + Send {
        drop(key);
        std::future::ready(Ok(Action::await_change()))
    }

    /// The request id the reconcile of `key` runs under (its span and, with
    /// the controller's [`Scope`], its outgoing calls), given its object
    /// when the lookup has one; `None` runs it without one (a reconcile
    /// whose calls each name their own object).
    fn request_id(&self, key: &Self::Key, obj: Option<&Self::Object>) -> Option<String>;
}

type Lookup<K, O> = Box<dyn Fn(&K) -> Option<Arc<O>> + Send + Sync>;

/// Runs a [`Reconcile`]: see the module docs. Built with
/// [`Controller::new`], then [`Controller::store`] or
/// [`Controller::lookup`], the streams and the worker count.
pub struct Controller<R: Reconcile> {
    reconciler: Arc<R>,
    queue: &'static str,
    metrics: QueueMetrics,
    lookup: Option<Lookup<R::Key, R::Object>>,
    changes: BoxStream<'static, R::Key>,
    resyncs: BoxStream<'static, R::Key>,
    workers: usize,
    scope: Arc<dyn Scope>,
}

impl<R: Reconcile> Controller<R> {
    /// `queue` names the workqueue metrics (`workqueue_*{name=queue}`).
    pub fn new(reconciler: Arc<R>, queue: &'static str, metrics: QueueMetrics) -> Self {
        Controller {
            reconciler,
            queue,
            metrics,
            lookup: None,
            changes: futures::stream::pending().boxed(),
            resyncs: futures::stream::empty().boxed(),
            workers: 1,
            scope: Arc::new(SpanOnly),
        }
    }

    /// Keys are references to the objects of `store`.
    pub fn store<K>(self, store: Store<K>) -> Self
    where
        R: Reconcile<Key = ObjectRef<K>, Object = K>,
        K: Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        self.lookup(move |key| store.get(key))
    }

    /// Looks each key up with `lookup`; `None` is a deleted object.
    pub fn lookup(
        mut self,
        lookup: impl Fn(&R::Key) -> Option<Arc<R::Object>> + Send + Sync + 'static,
    ) -> Self {
        self.lookup = Some(Box::new(lookup));
        self
    }

    /// Changes seen by a watch: the fresh lane. The controller stops when
    /// it ends (the supervisor reports that). Default: none, never ending.
    pub fn changes(mut self, changes: impl Stream<Item = R::Key> + Send + 'static) -> Self {
        self.changes = changes.boxed();
        self
    }

    /// Periodic or requested resyncs: the background lane. Its end ends
    /// nothing. Default: none.
    pub fn resyncs(mut self, resyncs: impl Stream<Item = R::Key> + Send + 'static) -> Self {
        self.resyncs = resyncs.boxed();
        self
    }

    /// Keys reconciled in parallel (at least 1, the default).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// What runs each reconcile under its request id. Default:
    /// [`SpanOnly`].
    pub fn scope(mut self, scope: impl Scope) -> Self {
        self.scope = Arc::new(scope);
        self
    }

    /// Reconciles until the change stream ends.
    pub async fn run(self) {
        let Controller {
            reconciler,
            queue,
            metrics,
            lookup,
            changes,
            resyncs,
            workers,
            scope,
        } = self;
        let lookup = lookup.expect("Controller::run without .store() or .lookup()");
        let work = WorkQueue::<R::Key>::default();
        let feed = async {
            let changes = changes.map(|r| (r, Lane::Fresh));
            let resyncs = resyncs.map(|r| (r, Lane::Background));
            let mut changes = std::pin::pin!(changes);
            let mut resyncs = std::pin::pin!(resyncs.fuse());
            loop {
                let (key, lane) = tokio::select! {
                    c = changes.next() => match c { Some(c) => c, None => return },
                    Some(r) = resyncs.next() => r,
                };
                work.add(key, lane);
                metrics.set_depth(queue, work.depth());
            }
        };
        let worker = || async {
            loop {
                let (key, waited) = work.next().await;
                metrics.waited(queue, waited, work.depth());
                let started = Instant::now();
                let result = turn(&*reconciler, &*scope, &lookup, key.clone()).await;
                let (next, failed) = match result {
                    Ok(next) => {
                        if next.attempted() {
                            work.succeeded(&key);
                        }
                        (next, false)
                    }
                    Err(e) => {
                        let failures = work.failed(&key);
                        (reconciler.error_policy(&key, &e, failures), true)
                    }
                };
                metrics.processed(queue, started.elapsed(), failed);
                work.done(key, next);
            }
        };
        let workers = futures::future::join_all((0..workers).map(|_| worker()));
        tokio::select! {
            _ = feed => {}
            _ = workers => {}
        }
    }
}

/// One reconcile (or `gone`) of `key`, under its request id.
async fn turn<R: Reconcile>(
    r: &R,
    scope: &dyn Scope,
    lookup: &Lookup<R::Key, R::Object>,
    key: R::Key,
) -> Result<Action, R::Error> {
    let obj = lookup(&key);
    let id = r.request_id(&key, obj.as_deref());
    let mut out = None;
    let work = async {
        out = Some(match obj {
            Some(obj) => r.reconcile(obj).await,
            None => r.gone(key).await,
        });
    };
    match id {
        Some(id) => scope.scoped(id, Box::pin(work)).await,
        None => work.await,
    }
    out.expect("the reconcile ran")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::{reflector, watcher};
    use parking_lot::Mutex;
    use tokio::time::Instant;

    #[derive(Debug, thiserror::Error)]
    #[error("cloud down")]
    struct Down;

    /// Fails its first `fail` reconciles; records when each ran.
    struct Flaky {
        fail: u32,
        runs: Mutex<Vec<Instant>>,
        explicit: Option<Duration>,
        /// The run (1 for the first) that finds its retry not due yet.
        gated: Option<u32>,
    }

    impl Reconcile for Flaky {
        type Key = ObjectRef<ConfigMap>;
        type Object = ConfigMap;
        type Error = Down;

        async fn reconcile(&self, _: Arc<ConfigMap>) -> Result<Action, Down> {
            let mut runs = self.runs.lock();
            runs.push(Instant::now());
            let run = runs.len() as u32;
            if self.gated == Some(run) {
                return Ok(Action::not_yet(Duration::from_secs(1)));
            }
            if run <= self.fail {
                return Err(Down);
            }
            Ok(Action::await_change())
        }

        fn error_policy(&self, key: &Self::Key, err: &Down, failures: u32) -> Action {
            match self.explicit {
                Some(delay) => Action::requeue(delay),
                None => {
                    let delay = Self::RETRY.delay(failures);
                    tracing::warn!(key = key.key_name().as_str(), error = %err, retry_in = ?delay, "error syncing; requeuing");
                    Action::requeue(delay)
                }
            }
        }

        fn request_id(&self, key: &Self::Key, _: Option<&ConfigMap>) -> Option<String> {
            Some(format!("configmap/{}", key.key_name()))
        }
    }

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Runs `flaky` over one object until it ran `runs` times; returns the
    /// gaps between runs and the metrics' text.
    async fn run(flaky: Flaky, runs: usize) -> (Vec<Duration>, String) {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(cm("a")));
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = QueueMetrics::register(&mut registry);
        let flaky = Arc::new(flaky);
        let controller = Controller::new(flaky.clone(), "configmaps", metrics)
            .store(store)
            .changes(
                futures::stream::iter([ObjectRef::from_obj(&cm("a"))])
                    .chain(futures::stream::pending()),
            )
            .workers(2)
            .run();
        let done = async {
            while flaky.runs.lock().len() < runs {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(3600), async {
            tokio::select! {
                _ = controller => panic!("the controller stopped"),
                _ = done => {}
            }
        })
        .await
        .expect("ran in time");
        let runs = flaky.runs.lock().clone();
        let gaps = runs.windows(2).map(|w| w[1] - w[0]).collect();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        (gaps, text)
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_per_key_in_the_queue_and_every_item_is_counted() {
        let (gaps, text) = run(
            Flaky {
                fail: 3,
                runs: Mutex::default(),
                explicit: None,
                gated: None,
            },
            4,
        )
        .await;
        let secs: Vec<u64> = gaps.iter().map(|g| g.as_secs()).collect();
        assert_eq!(secs, [1, 2, 4], "1 s doubling");
        for want in [
            r#"workqueue_adds_total{name="configmaps"} 4"#,
            r#"workqueue_retries_total{name="configmaps"} 3"#,
            r#"workqueue_queue_duration_seconds_count{name="configmaps"} 4"#,
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_policy_may_say_when() {
        let (gaps, _) = run(
            Flaky {
                fail: 2,
                runs: Mutex::default(),
                explicit: Some(Duration::from_secs(42)),
                gated: None,
            },
            3,
        )
        .await;
        let secs: Vec<u64> = gaps.iter().map(|g| g.as_secs()).collect();
        assert_eq!(secs, [42, 42]);
    }

    /// A run that finds its retry not due yet (service-lb's gate, after
    /// its own status write came back as a watch event) is no success: the
    /// next failure backs off further.
    #[tokio::test(start_paused = true)]
    async fn not_yet_keeps_the_failures_in_a_row() {
        let (gaps, text) = run(
            Flaky {
                fail: 3,
                runs: Mutex::default(),
                explicit: None,
                gated: Some(2),
            },
            4,
        )
        .await;
        let secs: Vec<u64> = gaps.iter().map(|g| g.as_secs()).collect();
        assert_eq!(secs, [1, 1, 2], "fail, not yet, fail (second in a row)");
        assert!(
            text.contains(r#"workqueue_retries_total{name="configmaps"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn the_backoff_doubles_caps_and_starts_over() {
        let d: Vec<u64> = (1..=12)
            .map(|n| RetryPolicy::NODES.delay(n).as_secs())
            .collect();
        assert_eq!(d, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(RetryPolicy::SERVICES.delay(1).as_secs(), 5);
        assert_eq!(RetryPolicy::NODES.delay(u32::MAX).as_secs(), 300);
    }
}
