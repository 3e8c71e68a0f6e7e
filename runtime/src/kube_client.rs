//! Client-side rate limiting of Kubernetes API requests
//! (`--kube-api-qps`/`--kube-api-burst`), a token bucket as client-go's:
//! requests beyond the burst wait for a token. A watch takes one token when it
//! starts, not per event.
//!
//! Without `--kube-api-qps` the server decides: a kube-apiserver with API
//! Priority and Fairness (on by default since 1.20, GA in 1.29) marks every
//! response it classified with `X-Kubernetes-PF-*` headers and protects
//! itself, so the client adds no limit of its own; a server without them
//! gets upstream's 20 QPS / burst 30. Every response is looked at, so a
//! server that changes (an upgrade behind a load balancer) is followed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kube::client::ClientBuilder;

use tower::{BoxError, Layer, Service, ServiceExt};

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    qps: f64,
    burst: f64,
}

impl Bucket {
    /// Takes a token now, or says how long until one is available.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// A shared token bucket.
#[derive(Debug, Clone)]
pub struct TokenBucket(Arc<Mutex<Bucket>>);

impl TokenBucket {
    /// `qps` tokens per second, at most `burst` saved up (starts full).
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket(Arc::new(Mutex::new(Bucket {
            tokens: burst,
            last: Instant::now(),
            qps: f64::from(qps),
            burst,
        })))
    }

    pub async fn acquire(&self) {
        loop {
            let wait = self.0.lock().take(Instant::now());
            match wait {
                None => return,
                Some(d) => tokio::time::sleep(d).await,
            }
        }
    }
}

/// Upstream's client-side limit, used when the server does not have API
/// Priority and Fairness and the flags set none.
pub const FALLBACK_QPS: f32 = 20.0;
pub const FALLBACK_BURST: u32 = 30;

/// The headers API Priority and Fairness puts on every request it handled.
const APF_HEADERS: [&str; 2] = [
    "x-kubernetes-pf-flowschema-uid",
    "x-kubernetes-pf-prioritylevel-uid",
];

/// The client-side limit in force.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Throttle {
    /// No client-side limit.
    Off,
    /// A token bucket: `qps` per second, bursts of `burst`.
    Bucket { qps: f32, burst: u32 },
}

const UNDECIDED: u8 = 0;
const LIMITED: u8 = 1;
const UNLIMITED: u8 = 2;

/// The client's rate limit: fixed by the flags, or following the server.
#[derive(Debug)]
pub struct ClientThrottle {
    bucket: Option<TokenBucket>,
    qps: f32,
    burst: u32,
    follows_server: bool,
    mode: AtomicU8,
}

impl ClientThrottle {
    /// From `--kube-api-qps`/`--kube-api-burst`: an explicit QPS is always
    /// honoured (0 or less: no limit); without one the server decides, with
    /// `burst` (default 30) and 20 QPS if it turns out to need a limit.
    pub fn from_flags(qps: Option<f32>, burst: Option<u32>) -> Arc<Self> {
        let burst = burst.unwrap_or(FALLBACK_BURST);
        let (qps, follows_server, mode) = match qps {
            Some(q) if q <= 0.0 => (q, false, UNLIMITED),
            Some(q) => (q, false, LIMITED),
            None => (FALLBACK_QPS, true, UNDECIDED),
        };
        Arc::new(ClientThrottle {
            bucket: (qps > 0.0).then(|| TokenBucket::new(qps, burst)),
            qps,
            burst,
            follows_server,
            mode: AtomicU8::new(mode),
        })
    }

    /// No limit, whatever the server: for the leader-election client.
    pub fn off() -> Arc<Self> {
        Self::from_flags(Some(0.0), None)
    }

    /// The limit in force now. Until the first answer from a server that
    /// decides, the fallback bucket applies (its burst covers start-up).
    pub fn current(&self) -> Throttle {
        match (self.mode.load(Ordering::Relaxed), &self.bucket) {
            (UNLIMITED, _) | (_, None) => Throttle::Off,
            _ => Throttle::Bucket {
                qps: self.qps,
                burst: self.burst,
            },
        }
    }

    /// Whether the limit follows the server (no `--kube-api-qps`).
    pub fn follows_server(&self) -> bool {
        self.follows_server
    }

    async fn acquire(&self) {
        if let (Throttle::Bucket { .. }, Some(bucket)) = (self.current(), &self.bucket) {
            bucket.acquire().await;
        }
    }

    /// Learns from one response whether the server has API Priority and
    /// Fairness. Only a successful answer without the headers counts as
    /// "no": errors can come from in front of the filter (authentication,
    /// a proxy) and say nothing.
    pub fn observe<B>(&self, response: &http::Response<B>) {
        if !self.follows_server {
            return;
        }
        let apf = APF_HEADERS
            .iter()
            .any(|h| response.headers().contains_key(*h));
        let mode = if apf {
            UNLIMITED
        } else if response.status().is_success() {
            LIMITED
        } else {
            return;
        };
        let before = self.mode.swap(mode, Ordering::Relaxed);
        if before == mode {
            return;
        }
        if mode == UNLIMITED {
            tracing::info!(
                "kube-apiserver has API Priority and Fairness (X-Kubernetes-PF-* headers): no client-side rate limit; --kube-api-qps sets one"
            );
        } else {
            tracing::info!(
                qps = self.qps,
                burst = self.burst,
                "kube-apiserver answers without API Priority and Fairness headers: client-side rate limit of {} QPS, burst {}",
                self.qps,
                self.burst
            );
        }
    }
}

/// The layer; the inner service must be `Clone` (put a buffer under it).
#[derive(Clone)]
pub struct RateLimitLayer(Arc<ClientThrottle>);

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            throttle: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RateLimited<S> {
    inner: S,
    throttle: Arc<ClientThrottle>,
}

impl<S, R, B> Service<R> for RateLimited<S>
where
    S: Service<R, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is checked on the clone that makes the call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> Self::Future {
        let inner = self.inner.clone();
        let throttle = self.throttle.clone();
        Box::pin(async move {
            throttle.acquire().await;
            let response = inner.oneshot(req).await.map_err(Into::into)?;
            throttle.observe(&response);
            Ok(response)
        })
    }
}

/// A Kubernetes request as the client sends it.
pub type KubeRequest = http::Request<kube::client::Body>;

/// Looks at each request before it is sent: passes it on (perhaps
/// rewritten) or refuses it, so nothing is sent.
pub trait RequestCheck: Clone + Send + Sync + 'static {
    fn check(&self, req: KubeRequest) -> Result<KubeRequest, BoxError>;
}

/// Puts a [`RequestCheck`] in front of the client's requests.
#[derive(Clone)]
pub struct CheckLayer<C>(pub C);

impl<S, C: Clone> Layer<S> for CheckLayer<C> {
    type Service = Checked<S, C>;
    fn layer(&self, inner: S) -> Checked<S, C> {
        Checked {
            inner,
            check: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Checked<S, C> {
    inner: S,
    check: C,
}

impl<S, C> Service<KubeRequest> for Checked<S, C>
where
    S: Service<KubeRequest>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    C: RequestCheck,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: KubeRequest) -> Self::Future {
        match self.check.check(req) {
            Ok(req) => {
                let fut = self.inner.call(req);
                Box::pin(async move { fut.await.map_err(Into::into) })
            }
            Err(refused) => Box::pin(async move { Err(refused) }),
        }
    }
}

/// Both checks, in order: one layer, one boxed future per request.
impl<A: RequestCheck, B: RequestCheck> RequestCheck for (A, B) {
    fn check(&self, req: KubeRequest) -> Result<KubeRequest, BoxError> {
        self.1.check(self.0.check(req)?)
    }
}

/// The error a fenced write gets.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} not sent: this process may not make changes (not the leader)")]
pub struct NotLeader {
    method: http::Method,
    path: String,
}

/// Whether this process may write now: leader election's fence.
pub trait WriteFence: Clone + Send + Sync + 'static {
    fn allows_writes(&self) -> bool;
}

/// Refuses every request but reads (GET) while the fence is closed: the
/// one place Kubernetes writes are fenced by leader election.
#[derive(Debug, Clone)]
pub struct Fenced<F>(pub F);

impl<F: WriteFence> RequestCheck for Fenced<F> {
    fn check(&self, req: KubeRequest) -> Result<KubeRequest, BoxError> {
        if req.method() != http::Method::GET && !self.0.allows_writes() {
            return Err(NotLeader {
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
            }
            .into());
        }
        Ok(req)
    }
}

/// A kube client whose requests pass through `throttle` and whose writes
/// pass only while `fence` allows; with `dry_run`, as server-side dry runs.
pub fn client(
    config: kube::Config,
    throttle: Arc<ClientThrottle>,
    fence: impl WriteFence,
    dry_run: Option<super::dry_run::DryRun>,
) -> Result<kube::Client, kube::Error> {
    let builder =
        ClientBuilder::try_from(config)?.with_layer(&CheckLayer((Fenced(fence), dry_run)));
    if throttle.current() == Throttle::Off && !throttle.follows_server() {
        return Ok(builder.build());
    }
    Ok(builder
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&RateLimitLayer(throttle))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let start = Instant::now();
        let mut b = Bucket {
            tokens: 3.0,
            last: start,
            qps: 2.0,
            burst: 3.0,
        };
        for _ in 0..3 {
            assert_eq!(b.take(start), None);
        }
        let wait = b.take(start).unwrap();
        assert_eq!(wait, Duration::from_millis(500));
        assert_eq!(b.take(start + Duration::from_millis(500)), None);
        // Saving up never exceeds the burst.
        b.take(start + Duration::from_secs(3600));
        assert!(b.tokens <= 3.0);
    }

    fn response(status: u16, apf: bool) -> http::Response<()> {
        let mut r = http::Response::builder().status(status);
        if apf {
            r = r
                .header("X-Kubernetes-PF-FlowSchema-UID", "f")
                .header("X-Kubernetes-PF-PriorityLevel-UID", "p");
        }
        r.body(()).unwrap()
    }

    const UPSTREAM: Throttle = Throttle::Bucket {
        qps: 20.0,
        burst: 30,
    };

    #[test]
    fn without_flags_the_server_decides() {
        let t = ClientThrottle::from_flags(None, None);
        assert_eq!(t.current(), UPSTREAM, "until the server answered");
        t.observe(&response(200, true));
        assert_eq!(t.current(), Throttle::Off, "APF: no client-side limit");
        // An error from in front of APF (authentication, a proxy) says
        // nothing about the server.
        t.observe(&response(401, false));
        t.observe(&response(503, false));
        assert_eq!(t.current(), Throttle::Off);
        t.observe(&response(200, false));
        assert_eq!(t.current(), UPSTREAM, "a server without APF");
        t.observe(&response(201, true));
        assert_eq!(t.current(), Throttle::Off, "followed both ways");
    }

    #[test]
    fn explicit_flags_are_always_honoured() {
        let t = ClientThrottle::from_flags(Some(5.0), Some(7));
        t.observe(&response(200, true));
        assert_eq!(t.current(), Throttle::Bucket { qps: 5.0, burst: 7 });
        let t = ClientThrottle::from_flags(Some(0.0), None);
        t.observe(&response(200, false));
        assert_eq!(t.current(), Throttle::Off);
        assert!(!t.follows_server());
        let t = ClientThrottle::from_flags(None, Some(100));
        t.observe(&response(200, false));
        assert_eq!(
            t.current(),
            Throttle::Bucket {
                qps: 20.0,
                burst: 100
            },
            "a burst alone applies to the fallback"
        );
    }
}
