//! Client-side rate limiting of Kubernetes API requests
//! (`--kube-api-qps`/`--kube-api-burst`), a token bucket as client-go's:
//! requests beyond the burst wait for a token. A watch takes one token when it
//! starts, not per event.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kube::client::ClientBuilder;

use super::leader::Fence;
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

/// The layer; the inner service must be `Clone` (put a buffer under it).
#[derive(Clone)]
pub struct RateLimitLayer(TokenBucket);

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RateLimited<S> {
    inner: S,
    bucket: TokenBucket,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R> + Clone + Send + 'static,
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
        let bucket = self.bucket.clone();
        Box::pin(async move {
            bucket.acquire().await;
            inner.oneshot(req).await.map_err(Into::into)
        })
    }
}

/// Refuses every request but reads (GET) while the fence is closed: the
/// one place Kubernetes writes are fenced by leader election.
#[derive(Clone)]
pub struct FenceLayer(pub Fence);

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

/// The error a fenced write gets.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} not sent: this process may not make changes (not the leader)")]
pub struct NotLeader {
    method: http::Method,
    path: String,
}

impl<S, B> Service<http::Request<B>> for Fenced<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.method() != http::Method::GET && !self.fence.allows_writes() {
            let err = NotLeader {
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
            };
            return Box::pin(async move { Err(err.into()) });
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

/// A kube client whose requests pass through the token bucket (`qps <= 0`
/// disables limiting) and whose writes pass only while `fence` allows.
pub fn client(
    config: kube::Config,
    qps: f32,
    burst: u32,
    fence: Fence,
) -> Result<kube::Client, kube::Error> {
    let builder = ClientBuilder::try_from(config)?.with_layer(&FenceLayer(fence));
    if qps <= 0.0 {
        return Ok(builder.build());
    }
    Ok(builder
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&RateLimitLayer(TokenBucket::new(qps, burst)))
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
}
