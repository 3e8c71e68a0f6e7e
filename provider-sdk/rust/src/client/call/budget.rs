//! The call budget: a token bucket per provider client (shared by its
//! clones) that spends a cloud's API quota by priority, and the hold a
//! throttling answer puts on it.
//!
//! - One token per call. A call that finds no token waits in its
//!   [`Lane`]: the first waiter of the highest non-empty lane gets the next
//!   token (strict priority, FIFO within a lane). A call that cannot get
//!   one before its deadline fails with
//!   [`ClientError::BudgetExhausted`](crate::client::ClientError::BudgetExhausted):
//!   nothing is dropped silently.
//! - A `QUOTA_EXCEEDED` or `CLOUD_UNAVAILABLE` answer carrying `RetryInfo`
//!   empties the bucket and holds it for the delay (clamped to
//!   [`HOLD_BOUNDS`]); then it refills at the configured rate, as cloud
//!   SDKs throttle themselves. Without a budget (unlimited) the hold is
//!   honoured too: the provider asked us to back off. Until such an answer
//!   comes, an unlimited client's only cost is one atomic load per call.
//! - `Probe`, `GetProviderInfo` and `GetProviderCapabilities` bypass the
//!   budget: a health check or handshake never waits for quota, spends
//!   none, and its answer holds nothing.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::Request;
use tower::{Layer, Service, ServiceExt};

use crate::client::{CallObserver, ClientError};
use crate::error::ProviderError;
use crate::proto::ErrorReason;

/// The shortest and longest hold a throttling answer's `RetryInfo` puts on
/// the budget: a zero delay must not be ignored, nor a huge one stop every
/// call for an hour.
pub const HOLD_BOUNDS: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(60));

/// What a budgeted call is for: when calls wait for the budget, a call of
/// an earlier lane always gets the next token before any call of a later
/// one. Chosen per client clone with
/// [`ProviderClient::in_lane`](crate::client::ProviderClient::in_lane);
/// a clone without one uses [`Lane::of_method`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// Services' load balancers: what a person is waiting for.
    LoadBalancers,
    /// Initialisation of new Nodes (their metadata, zone).
    NodeInit,
    /// Lifecycle checks of Nodes (exists, shutdown).
    Lifecycle,
    /// Periodic work: the address refresh, the orphan sweeper, routes.
    Refresh,
}

impl Lane {
    /// Every lane, highest priority first.
    pub const ALL: [Lane; 4] = [
        Lane::LoadBalancers,
        Lane::NodeInit,
        Lane::Lifecycle,
        Lane::Refresh,
    ];

    /// The lane's name, for metric labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::LoadBalancers => "load_balancers",
            Lane::NodeInit => "node_init",
            Lane::Lifecycle => "lifecycle",
            Lane::Refresh => "refresh",
        }
    }

    /// The lane of an RPC sent by a client that chose none; `None` for the
    /// calls that bypass the budget (`Probe`, `GetProviderInfo`,
    /// `GetProviderCapabilities`). Load balancer RPCs are
    /// [`Lane::LoadBalancers`], routes and clusters [`Lane::Refresh`]
    /// (periodic reconciliation), everything else (instances, zones,
    /// volumes: what a new object waits for) [`Lane::NodeInit`].
    pub fn of_method(method: &str) -> Option<Lane> {
        match method {
            "Probe" | "GetProviderInfo" | "GetProviderCapabilities" => None,
            "GetLoadBalancer"
            | "GetLoadBalancerName"
            | "EnsureLoadBalancer"
            | "UpdateLoadBalancer"
            | "EnsureLoadBalancerDeleted"
            | "ListLoadBalancers"
            | "PutNodeSet" => Some(Lane::LoadBalancers),
            "ListRoutes" | "CreateRoute" | "DeleteRoute" | "ListClusters" | "Master" => {
                Some(Lane::Refresh)
            }
            _ => Some(Lane::NodeInit),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider's call budget: `qps` calls per second on average, up to
/// `burst` at once. `qps` must be positive and finite, `burst` at least 1
/// (the controller's flags refuse anything else; here they are clamped).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallBudget {
    pub qps: f64,
    pub burst: u32,
}

/// The budget as it stands, for gauges.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetState {
    /// The configured budget; `None` when unlimited.
    pub budget: Option<CallBudget>,
    /// Tokens in the bucket now (0 while held); `None` when unlimited.
    pub tokens: Option<f64>,
    /// Calls waiting for a token, by lane ([`Lane::ALL`]'s order).
    pub waiting: [usize; 4],
    /// How much longer a throttling answer's hold lasts.
    pub held_for: Option<Duration>,
}

/// The budget shared by a client's clones.
pub(in crate::client) struct Budget {
    /// The instant `held_until` counts from.
    base: Instant,
    /// Nanoseconds after `base` until which calls are held; 0: never held.
    /// Read without a lock on every call: all an unlimited client pays.
    held_until: AtomicU64,
    bucket: Option<Mutex<Bucket>>,
    configured: Option<CallBudget>,
}

struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    /// When `tokens` was last brought up to date.
    last: Instant,
    /// Waiting calls, per lane in [`Lane::ALL`]'s order.
    lanes: [VecDeque<Waiter>; 4],
    next_id: u64,
}

struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

/// A call that found no token before its deadline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Exhausted {
    pub waited: Duration,
    /// A throttling answer's hold was in force.
    pub held: bool,
}

/// Rounding slack: a token computed as 0.9999999 is a token.
const EPSILON: f64 = 1e-9;

impl Bucket {
    /// Adds the tokens earned since `last`, none while held: accrual
    /// restarts when the hold ends.
    fn refill(&mut self, now: Instant, held_until: Option<Instant>) {
        let from = held_until.map_or(self.last, |h| h.max(self.last));
        if now > from {
            let earned = (now - from).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + earned).min(self.burst);
            self.last = now;
        }
    }

    fn has_token(&self, now: Instant, held_until: Option<Instant>) -> bool {
        self.tokens >= 1.0 - EPSILON && held_until.is_none_or(|h| h <= now)
    }

    /// When the next token is there, for the first waiter.
    fn next_token_at(&self, now: Instant, held_until: Option<Instant>) -> Instant {
        let from = held_until.map_or(now, |h| h.max(now));
        let missing = (1.0 - self.tokens).max(0.0);
        from + Duration::from_secs_f64(missing / self.qps)
    }

    fn idle(&self) -> bool {
        self.lanes.iter().all(VecDeque::is_empty)
    }

    /// The first waiter of the highest non-empty lane.
    fn head(&self) -> Option<&Waiter> {
        self.lanes.iter().find_map(VecDeque::front)
    }

    fn enqueue(&mut self, lane: Lane) -> (u64, Arc<Notify>) {
        self.next_id += 1;
        let waiter = Waiter {
            id: self.next_id,
            wake: Arc::new(Notify::new()),
        };
        let wake = waiter.wake.clone();
        self.lanes[lane.index()].push_back(waiter);
        (self.next_id, wake)
    }

    /// Takes waiter `id` off its lane and tells the new first waiter to
    /// look at the bucket.
    fn leave(&mut self, lane: Lane, id: u64) {
        self.lanes[lane.index()].retain(|w| w.id != id);
        if let Some(head) = self.head() {
            head.wake.notify_one();
        }
    }
}

impl Budget {
    pub(in crate::client) fn new(configured: Option<CallBudget>) -> Self {
        let now = Instant::now();
        Budget {
            base: now,
            held_until: AtomicU64::new(0),
            bucket: configured.map(|b| {
                let burst = f64::from(b.burst.max(1));
                Mutex::new(Bucket {
                    qps: if b.qps.is_finite() {
                        b.qps.max(1e-6)
                    } else {
                        1e-6
                    },
                    burst,
                    tokens: burst,
                    last: now,
                    lanes: Default::default(),
                    next_id: 0,
                })
            }),
            configured,
        }
    }

    /// The end of the last hold, past or not.
    fn held_until(&self) -> Option<Instant> {
        match self.held_until.load(Ordering::Acquire) {
            0 => None,
            nanos => Some(self.base + Duration::from_nanos(nanos)),
        }
    }

    /// Whether a call must go through [`acquire`](Self::acquire): always
    /// with a bucket; without one, only while a hold lasts.
    pub(super) fn engaged(&self) -> bool {
        self.bucket.is_some() || self.held_until().is_some_and(|h| h > Instant::now())
    }

    /// Holds every budgeted call for `delay` (clamped to [`HOLD_BOUNDS`])
    /// and empties the bucket; returns the hold applied.
    pub(super) fn hold(&self, delay: Duration) -> Duration {
        let delay = delay.clamp(HOLD_BOUNDS.0, HOLD_BOUNDS.1);
        let now = Instant::now();
        let until = now + delay;
        let nanos = u64::try_from((until - self.base).as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        // A shorter hold never cuts a longer one short.
        self.held_until.fetch_max(nanos, Ordering::AcqRel);
        if let Some(bucket) = &self.bucket {
            let mut b = bucket.lock();
            b.tokens = 0.0;
            b.last = b.last.max(now);
        }
        delay
    }

    /// Waits for a token in `lane` until `deadline`; how long it waited.
    pub(super) async fn acquire(
        &self,
        lane: Lane,
        deadline: Instant,
    ) -> Result<Duration, Exhausted> {
        let start = Instant::now();
        let Some(bucket) = &self.bucket else {
            // Unlimited: only a hold to wait out.
            let Some(until) = self.held_until().filter(|h| *h > start) else {
                return Ok(Duration::ZERO);
            };
            if until > deadline {
                return Err(Exhausted {
                    waited: Duration::ZERO,
                    held: true,
                });
            }
            tokio::time::sleep_until(until).await;
            return Ok(until - start);
        };
        let (id, wake) = {
            let mut b = bucket.lock();
            let held = self.held_until();
            b.refill(start, held);
            if b.idle() && b.has_token(start, held) {
                b.tokens -= 1.0;
                return Ok(Duration::ZERO);
            }
            b.enqueue(lane)
        };
        let mut waiting = Waiting {
            bucket,
            lane,
            id,
            queued: true,
        };
        loop {
            let now = Instant::now();
            let next = {
                let mut b = bucket.lock();
                let held = self.held_until();
                b.refill(now, held);
                if b.head().map(|w| w.id) == Some(id) {
                    if b.has_token(now, held) {
                        b.tokens -= 1.0;
                        b.leave(lane, id);
                        waiting.queued = false;
                        return Ok(now - start);
                    }
                    Some(b.next_token_at(now, held))
                } else {
                    None
                }
            };
            let exhausted = || Exhausted {
                waited: Instant::now() - start,
                held: self.held_until().is_some_and(|h| h > Instant::now()),
            };
            match next {
                // First in line, and the token comes too late: fail now
                // rather than at the deadline.
                Some(at) if at > deadline => return Err(exhausted()),
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = wake.notified() => {}
                    }
                }
                None => {
                    if tokio::time::timeout_at(deadline, wake.notified())
                        .await
                        .is_err()
                    {
                        return Err(exhausted());
                    }
                }
            }
        }
    }

    pub(in crate::client) fn state(&self) -> BudgetState {
        let now = Instant::now();
        let held_for = self.held_until().filter(|h| *h > now).map(|h| h - now);
        let mut waiting = [0; 4];
        let tokens = self.bucket.as_ref().map(|bucket| {
            let mut b = bucket.lock();
            b.refill(now, self.held_until());
            for (n, lane) in waiting.iter_mut().zip(&b.lanes) {
                *n = lane.len();
            }
            b.tokens
        });
        BudgetState {
            budget: self.configured,
            tokens,
            waiting,
            held_for,
        }
    }
}

/// A call's place in its lane, given up if the call ends without a token
/// (deadline, or dropped by its caller).
struct Waiting<'a> {
    bucket: &'a Mutex<Bucket>,
    lane: Lane,
    id: u64,
    queued: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.queued {
            self.bucket.lock().leave(self.lane, self.id);
        }
    }
}

/// The delay a throttling answer asks for: `QUOTA_EXCEEDED` or
/// `CLOUD_UNAVAILABLE` with `RetryInfo`.
pub(in crate::client) fn throttled(e: &ClientError) -> Option<Duration> {
    let p: &ProviderError = e.provider_error()?;
    match p.reason()? {
        ErrorReason::QuotaExceeded | ErrorReason::CloudUnavailable => p.retry_after_delay(),
        _ => None,
    }
}

/// The call's absolute deadline, set where its wait for the budget starts,
/// for the deadline layer: the wait counts against the call's deadline.
#[derive(Debug, Clone, Copy)]
pub(super) struct CallDeadline(pub Instant);

/// Waits for a token of `budget` in `lane` before the call goes on.
#[derive(Clone)]
pub(super) struct BudgetLayer {
    pub budget: Arc<Budget>,
    pub lane: Lane,
    pub method: &'static str,
    pub timeout: Duration,
    pub observer: Option<Arc<dyn CallObserver>>,
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budgeted<S>;
    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Budgeted<S> {
    inner: S,
    layer: BudgetLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, ClientError>> + Send>>;

impl<S, M> Service<Request<M>> for Budgeted<S>
where
    S: Service<Request<M>, Error = ClientError> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    M: Send + 'static,
{
    type Response = S::Response;
    type Error = ClientError;
    type Future = BoxFuture<S::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ClientError>> {
        // The inner services are made ready after the token, on the clone
        // that makes the call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<M>) -> Self::Future {
        let BudgetLayer {
            budget,
            lane,
            method,
            timeout,
            observer,
        } = self.layer.clone();
        let deadline = Instant::now() + timeout;
        request.extensions_mut().insert(CallDeadline(deadline));
        let inner = self.inner.clone();
        Box::pin(async move {
            match budget.acquire(lane, deadline).await {
                Ok(waited) => {
                    if let Some(o) = &observer {
                        o.budget_waited(method, lane, waited);
                    }
                    inner.oneshot(request).await
                }
                Err(Exhausted { waited, held }) => {
                    if let Some(o) = &observer {
                        o.budget_exhausted(method, lane, waited);
                    }
                    Err(ClientError::BudgetExhausted {
                        method,
                        lane,
                        waited,
                        held,
                    })
                }
            }
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::atomic::AtomicUsize;

    use parking_lot::Mutex as PlMutex;

    use super::*;

    fn budget(qps: f64, burst: u32) -> Arc<Budget> {
        Arc::new(Budget::new(Some(CallBudget { qps, burst })))
    }

    const LONG: Duration = Duration::from_secs(3600);

    /// Starts a call in `lane` that records `name` in `order` when it gets
    /// its token; returns once it is queued (or done).
    async fn waiter(
        b: &Arc<Budget>,
        lane: Lane,
        name: &'static str,
        order: &Arc<PlMutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<Result<Duration, Exhausted>> {
        let (b, order) = (b.clone(), order.clone());
        let task = tokio::spawn(async move {
            let got = b.acquire(lane, Instant::now() + LONG).await;
            order.lock().push(name);
            got
        });
        // Let it reach the queue: with paused time, yielding runs it.
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        task
    }

    #[tokio::test(start_paused = true)]
    async fn the_burst_goes_at_once_then_the_rate() {
        let b = budget(2.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(
                b.acquire(Lane::Refresh, t0 + LONG).await,
                Ok(Duration::ZERO)
            );
        }
        // Then one every 500 ms.
        let waited = b.acquire(Lane::Refresh, t0 + LONG).await.unwrap();
        assert_eq!(waited, Duration::from_millis(500));
        b.acquire(Lane::Refresh, t0 + LONG).await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_secs(1));
        // Idle for long: refilled to the burst, not beyond.
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(b.state().tokens, Some(3.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_higher_lane_gets_the_next_token_and_each_lane_is_fifo() {
        let b = budget(10.0, 1);
        b.acquire(Lane::Refresh, Instant::now() + LONG)
            .await
            .unwrap();
        let order = Arc::new(PlMutex::new(Vec::new()));
        // Queued lowest first, in each lane in name order.
        let tasks = vec![
            waiter(&b, Lane::Refresh, "refresh-1", &order).await,
            waiter(&b, Lane::Refresh, "refresh-2", &order).await,
            waiter(&b, Lane::Lifecycle, "lifecycle-1", &order).await,
            waiter(&b, Lane::NodeInit, "init-1", &order).await,
            waiter(&b, Lane::Lifecycle, "lifecycle-2", &order).await,
            waiter(&b, Lane::LoadBalancers, "lb-1", &order).await,
            waiter(&b, Lane::NodeInit, "init-2", &order).await,
        ];
        assert_eq!(b.state().waiting, [1, 2, 2, 2]);
        let t0 = Instant::now();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(
            *order.lock(),
            [
                "lb-1",
                "init-1",
                "init-2",
                "lifecycle-1",
                "lifecycle-2",
                "refresh-1",
                "refresh-2"
            ]
        );
        // One token per 100 ms, none lost to the reordering.
        assert_eq!(Instant::now() - t0, Duration::from_millis(700));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_cannot_get_a_token_by_its_deadline_fails() {
        let b = budget(1.0, 1);
        let t0 = Instant::now();
        b.acquire(Lane::NodeInit, t0 + LONG).await.unwrap();
        // First in line, the token comes in 1 s: a 300 ms deadline fails
        // at once, without waiting for nothing.
        let err = b
            .acquire(Lane::NodeInit, t0 + Duration::from_millis(300))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Exhausted {
                waited: Duration::ZERO,
                held: false
            }
        );
        assert_eq!(b.state().waiting, [0; 4], "gave up its place");
        // Behind a higher lane's waiter: waits until its deadline, then
        // fails, and the first waiter is not held up by it.
        let order = Arc::new(PlMutex::new(Vec::new()));
        let first = waiter(&b, Lane::LoadBalancers, "lb", &order).await;
        let behind = b
            .acquire(Lane::Refresh, Instant::now() + Duration::from_millis(400))
            .await
            .unwrap_err();
        assert_eq!(behind.waited, Duration::from_millis(400));
        assert_eq!(first.await.unwrap(), Ok(Duration::from_secs(1)));
        assert_eq!(Instant::now() - t0, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_leaves_the_line() {
        let b = budget(1.0, 1);
        b.acquire(Lane::Refresh, Instant::now() + LONG)
            .await
            .unwrap();
        let dropped = tokio::time::timeout(
            Duration::from_millis(100),
            b.acquire(Lane::LoadBalancers, Instant::now() + LONG),
        )
        .await;
        assert!(dropped.is_err());
        assert_eq!(b.state().waiting, [0; 4]);
        // The token it would have had goes to the next caller on time.
        let waited = b
            .acquire(Lane::Refresh, Instant::now() + LONG)
            .await
            .unwrap();
        assert_eq!(waited, Duration::from_millis(900));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_empties_the_bucket_for_its_delay_then_it_refills() {
        let b = budget(10.0, 5);
        let t0 = Instant::now();
        assert_eq!(b.hold(Duration::from_secs(2)), Duration::from_secs(2));
        let state = b.state();
        assert_eq!(state.tokens, Some(0.0));
        assert_eq!(state.held_for, Some(Duration::from_secs(2)));
        // The first call goes one token-time after the hold ends.
        b.acquire(Lane::LoadBalancers, t0 + LONG).await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_millis(2100));
        // Then the rate, and in time the burst again.
        b.acquire(Lane::LoadBalancers, t0 + LONG).await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_millis(2200));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(b.state().tokens, Some(5.0));
        assert_eq!(b.state().held_for, None);
        // A call whose deadline ends within a hold fails at once, saying so.
        b.hold(Duration::from_secs(5));
        let err = b
            .acquire(Lane::LoadBalancers, Instant::now() + Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Exhausted {
                waited: Duration::ZERO,
                held: true
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn holds_are_clamped_and_a_shorter_one_does_not_cut_a_longer_one() {
        let b = Budget::new(None);
        assert_eq!(b.hold(Duration::ZERO), HOLD_BOUNDS.0);
        assert_eq!(b.hold(Duration::from_secs(3600)), HOLD_BOUNDS.1);
        b.hold(Duration::from_secs(1));
        assert_eq!(b.state().held_for, Some(HOLD_BOUNDS.1));
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_is_not_engaged_until_a_hold_and_then_waits_it_out() {
        let b = Budget::new(None);
        assert!(!b.engaged(), "no budget, no hold: the call path skips it");
        let t0 = Instant::now();
        assert_eq!(
            b.acquire(Lane::Refresh, t0 + LONG).await,
            Ok(Duration::ZERO)
        );
        b.hold(Duration::from_millis(1500));
        assert!(b.engaged());
        let waited = b.acquire(Lane::Refresh, t0 + LONG).await.unwrap();
        assert_eq!(waited, Duration::from_millis(1500));
        // Unlimited after the hold: no rate to wait for.
        for _ in 0..100 {
            assert_eq!(
                b.acquire(Lane::Refresh, Instant::now() + LONG).await,
                Ok(Duration::ZERO)
            );
        }
        assert!(!b.engaged());
        assert_eq!(b.state().tokens, None);
    }

    #[tokio::test(start_paused = true)]
    async fn many_waiters_each_get_exactly_one_token() {
        let b = budget(100.0, 10);
        let granted = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..210)
            .map(|i| {
                let (b, granted) = (b.clone(), granted.clone());
                tokio::spawn(async move {
                    b.acquire(Lane::ALL[i % 4], t0 + LONG).await.unwrap();
                    granted.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(granted.load(Ordering::SeqCst), 210);
        // 10 at once, 200 at 100/s.
        assert_eq!(Instant::now() - t0, Duration::from_secs(2));
    }

    #[test]
    fn throttling_answers_are_quota_or_cloud_unavailable_with_retry_info() {
        let d = Duration::from_secs(3);
        let unavailable = ProviderError::cloud_unavailable("throttled", Some(d));
        assert_eq!(throttled(&ClientError::Provider(unavailable)), Some(d));
        let no_delay = ProviderError::cloud_unavailable("down", None);
        assert_eq!(throttled(&ClientError::Provider(no_delay)), None);
        // RETRY_AFTER is "not done yet", not throttling.
        let pending = ProviderError::retry_after("provisioning", d);
        assert_eq!(throttled(&ClientError::Provider(pending)), None);
        let quota = quota_exceeded_after(d);
        assert_eq!(throttled(&ClientError::Provider(quota)), Some(d));
    }

    /// QUOTA_EXCEEDED with `RetryInfo`, as a provider sends it.
    pub(in crate::client) fn quota_exceeded_after(delay: Duration) -> ProviderError {
        use tonic_types::{ErrorDetails, StatusExt};
        let mut details = ErrorDetails::new();
        details.set_error_info(
            "QUOTA_EXCEEDED",
            ccm_proto::v1::ERROR_DOMAIN,
            std::collections::HashMap::new(),
        );
        details.set_retry_info(Some(delay));
        let status = tonic::Status::with_error_details(
            tonic::Code::ResourceExhausted,
            "rate limit",
            details,
        );
        ProviderError::from_status(&status)
    }

    #[test]
    fn every_rpc_but_the_handshake_and_probe_is_budgeted() {
        for bypass in ["Probe", "GetProviderInfo", "GetProviderCapabilities"] {
            assert_eq!(Lane::of_method(bypass), None);
        }
        assert_eq!(
            Lane::of_method("EnsureLoadBalancer"),
            Some(Lane::LoadBalancers)
        );
        assert_eq!(Lane::of_method("InstanceMetadata"), Some(Lane::NodeInit));
        assert_eq!(Lane::of_method("BatchInstances"), Some(Lane::NodeInit));
        assert_eq!(Lane::of_method("ListRoutes"), Some(Lane::Refresh));
    }
}
