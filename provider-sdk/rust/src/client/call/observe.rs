//! The observer layer: every call that is sent is reported to the
//! [`CallObserver`] (start, end with its code and duration, the reason of a
//! failure) and logged once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tonic::{Request, Response, Status};
use tower::{Layer, Service};

use super::scope::RequestId;
use crate::client::CallObserver;
use crate::error::{ProviderError, bounded, reason_str};

/// Reports each call to `observer` (if any) and logs it as `method`.
#[derive(Clone)]
pub(super) struct ObserveLayer {
    observer: Option<Arc<dyn CallObserver>>,
    method: &'static str,
}

impl ObserveLayer {
    pub(super) fn new(observer: Option<Arc<dyn CallObserver>>, method: &'static str) -> Self {
        ObserveLayer { observer, method }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observed<S>;
    fn layer(&self, inner: S) -> Observed<S> {
        Observed {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Observed<S> {
    inner: S,
    layer: ObserveLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send>>;

impl<S, M, T> Service<Request<M>> for Observed<S>
where
    S: Service<Request<M>, Response = Response<T>, Error = Status>,
    S::Future: Send + 'static,
{
    type Response = Response<T>;
    type Error = Status;
    type Future = BoxFuture<Response<T>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<M>) -> Self::Future {
        let ObserveLayer { observer, method } = self.layer.clone();
        let request_id = request
            .extensions()
            .get::<RequestId>()
            .map_or_else(|| "".into(), |id| id.0.clone());
        // Reported as CANCELLED if the caller drops the call before the
        // answer (a `/readyz` that stopped waiting): every start has an end.
        let mut watch = Observation::start(observer, method);
        let call = self.inner.call(request);
        Box::pin(async move {
            let result = call.await;
            let elapsed = watch.started.elapsed();
            let code = result
                .as_ref()
                .map_or_else(|s| s.code(), |_| tonic::Code::Ok);
            let request_id = &*request_id;
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
            if let (Some(o), Err(status)) = (&watch.observer, &result) {
                let reason = ProviderError::from_status(status).reason().map(reason_str);
                o.failed(method, reason);
            }
            result
        })
    }
}

/// One call as the observer sees it, from start to end.
struct Observation {
    observer: Option<Arc<dyn CallObserver>>,
    method: &'static str,
    started: Instant,
    open: bool,
}

impl Observation {
    fn start(observer: Option<Arc<dyn CallObserver>>, method: &'static str) -> Self {
        if let Some(o) = &observer {
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
            && let Some(o) = &self.observer
        {
            o.observe(self.method, code, self.started.elapsed());
        }
    }
}

impl Drop for Observation {
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

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use parking_lot::Mutex;
    use tower::{ServiceBuilder, ServiceExt};

    use super::*;

    /// Every observer callback, in order, as text.
    #[derive(Default)]
    pub(in crate::client::call) struct Recorder(pub(in crate::client::call) Mutex<Vec<String>>);

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
        fn budget_waited(&self, method: &'static str, lane: crate::client::Lane, waited: Duration) {
            self.0
                .lock()
                .push(format!("budget {method} {lane} waited {waited:?}"));
        }
        fn budget_exhausted(
            &self,
            method: &'static str,
            lane: crate::client::Lane,
            waited: Duration,
        ) {
            self.0
                .lock()
                .push(format!("budget {method} {lane} exhausted after {waited:?}"));
        }
        fn budget_held(&self, method: &'static str, delay: Duration) {
            self.0
                .lock()
                .push(format!("held by {method} for {delay:?}"));
        }
    }

    #[tokio::test]
    async fn a_call_dropped_before_its_answer_ends_as_cancelled() {
        let recorder = Arc::new(Recorder::default());
        let service = ServiceBuilder::new()
            .layer(ObserveLayer::new(Some(recorder.clone()), "Hang"))
            .service_fn(|_: Request<()>| std::future::pending::<Result<Response<()>, Status>>());
        let gave_up =
            tokio::time::timeout(Duration::from_millis(10), service.oneshot(Request::new(())))
                .await;
        assert!(gave_up.is_err());
        assert_eq!(
            *recorder.0.lock(),
            ["started Hang", "observe Hang Cancelled"]
        );
    }

    #[tokio::test]
    async fn a_failure_without_a_reason_is_reported_as_such() {
        let recorder = Arc::new(Recorder::default());
        let service = ServiceBuilder::new()
            .layer(ObserveLayer::new(Some(recorder.clone()), "Plain"))
            .service_fn(|_: Request<()>| async {
                Err::<Response<()>, _>(Status::internal("no details"))
            });
        let status = service.oneshot(Request::new(())).await.unwrap_err();
        assert_eq!(status.message(), "no details", "passed on as it came");
        assert_eq!(
            *recorder.0.lock(),
            [
                "started Plain",
                "observe Plain Internal",
                "failed Plain None"
            ]
        );
    }

    #[test]
    fn codes_are_named_as_the_grpc_specification_spells_them() {
        assert_eq!(code_name(tonic::Code::Ok), "OK");
        assert_eq!(
            code_name(tonic::Code::DeadlineExceeded),
            "DEADLINE_EXCEEDED"
        );
    }
}
