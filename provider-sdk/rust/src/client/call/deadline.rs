//! The deadline layer: each call's deadline, told to the provider and
//! kept on this side.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::{Request, Status};
use tower::{Layer, Service, ServiceExt};

use super::budget::CallDeadline;
use crate::client::ClientOptions;
use crate::proto;

/// Which of [`ClientOptions`]' deadlines a call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeadlineClass {
    Identity,
    Read,
    Mutation,
}

impl DeadlineClass {
    pub(super) fn timeout(self, opts: &ClientOptions) -> Duration {
        match self {
            DeadlineClass::Identity => opts.identity_timeout,
            DeadlineClass::Read => opts.read_timeout,
            DeadlineClass::Mutation => opts.mutation_timeout,
        }
    }
}

/// Sends `grpc-timeout` and the absolute deadline with each request, and
/// fails the call as DEADLINE_EXCEEDED when it passes.
///
/// Not `tower::timeout`: its deadline starts at `call`, after `poll_ready`,
/// where the concurrency limit below waits for a slot, and the wait for a
/// slot must count; and its expiry is an opaque `Elapsed`, where the
/// caller must see the same DEADLINE_EXCEEDED whichever side noticed.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeadlineLayer(pub Duration);

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;
    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline {
            inner,
            timeout: self.0,
        }
    }
}

#[derive(Clone)]
pub(super) struct Deadline<S> {
    inner: S,
    timeout: Duration,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send>>;

impl<S, M> Service<Request<M>> for Deadline<S>
where
    S: Service<Request<M>, Error = Status> + Clone + Send + 'static,
    S::Future: Send,
    M: Send + 'static,
{
    type Response = S::Response;
    type Error = Status;
    type Future = BoxFuture<S::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        // The inner service's readiness (a slot) is awaited within the
        // deadline, on the clone that makes the call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<M>) -> Self::Future {
        // A budgeted call's deadline started when it began waiting for the
        // budget: what is left of it.
        let timeout = request
            .extensions()
            .get::<CallDeadline>()
            .map_or(self.timeout, |d| {
                d.0.saturating_duration_since(tokio::time::Instant::now())
            });
        request.set_timeout(timeout);
        // The absolute deadline: a provider that reads the request late
        // (paused, stalled) must not act on what this side gave up on.
        let gives_up = SystemTime::now() + timeout;
        if let Ok(since_epoch) = gives_up.duration_since(UNIX_EPOCH)
            && let Ok(v) = since_epoch.as_millis().to_string().parse()
        {
            request.metadata_mut().insert(proto::DEADLINE_METADATA, v);
        }
        let inner = self.inner.clone();
        // Also holds when the provider never answers (a stopped process
        // ignores grpc-timeout).
        Box::pin(async move {
            let expired = || Status::deadline_exceeded(format!("no answer within {timeout:?}"));
            match tokio::time::timeout(timeout, inner.oneshot(request)).await {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tower::ServiceBuilder;
    use tower::limit::GlobalConcurrencyLimitLayer;

    use super::*;

    #[tokio::test]
    async fn the_provider_is_told_the_deadline_both_ways() {
        let service = ServiceBuilder::new()
            .layer(DeadlineLayer(Duration::from_secs(2)))
            .service_fn(|r: Request<()>| async move {
                let header = |name| r.metadata().get(name).unwrap().to_str().unwrap().to_owned();
                Ok((header("grpc-timeout"), header(proto::DEADLINE_METADATA)))
            });
        let before = SystemTime::now() + Duration::from_secs(2);
        let (timeout, deadline) = service.oneshot(Request::new(())).await.unwrap();
        let after = SystemTime::now() + Duration::from_secs(2);
        let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis();
        let deadline: u128 = deadline.parse().unwrap();
        assert!((ms(before)..=ms(after)).contains(&deadline));
        let mut expected = Request::new(());
        expected.set_timeout(Duration::from_secs(2));
        assert_eq!(
            timeout,
            expected
                .metadata()
                .get("grpc-timeout")
                .unwrap()
                .to_str()
                .unwrap()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_answer_and_tonics_own_expiry_read_the_same() {
        let hang = ServiceBuilder::new()
            .layer(DeadlineLayer(Duration::from_secs(3)))
            .service_fn(|_: Request<()>| std::future::pending::<Result<(), Status>>());
        let tonic_expired = ServiceBuilder::new()
            .layer(DeadlineLayer(Duration::from_secs(3)))
            .service_fn(|_: Request<()>| async {
                Err::<(), _>(Status::cancelled("Timeout expired"))
            });
        for status in [
            hang.oneshot(Request::new(())).await.unwrap_err(),
            tonic_expired.oneshot(Request::new(())).await.unwrap_err(),
        ] {
            assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
            assert_eq!(status.message(), "no answer within 3s");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_slot_counts_against_the_deadline() {
        let slots = Arc::new(tokio::sync::Semaphore::new(1));
        let _held = slots.clone().acquire_owned().await.unwrap();
        let service = ServiceBuilder::new()
            .layer(DeadlineLayer(Duration::from_secs(1)))
            .layer(GlobalConcurrencyLimitLayer::with_semaphore(slots))
            .service_fn(|_: Request<()>| async { Ok::<_, Status>(()) });
        let status = service.oneshot(Request::new(())).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    }
}
