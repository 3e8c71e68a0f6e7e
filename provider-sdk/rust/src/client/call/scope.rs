//! The request scope layer: every call carries a request id and a W3C
//! trace context, the same for all the calls of one reconcile.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tonic::Request;
use tower::{Layer, Service};

use crate::proto;
use crate::trace_context::{SpanId, TRACEPARENT_METADATA, TraceId, traceparent};

tokio::task_local! {
    static SCOPED: RequestScope;
}

/// What every provider call made within [`RequestScope::run`] carries:
/// one request id and one W3C trace id, for all the calls of one reconcile.
#[derive(Debug, Clone)]
pub struct RequestScope {
    id: Arc<str>,
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

/// A call's request id, in the request's extensions for the layers below
/// (the observer logs it).
#[derive(Debug, Clone)]
pub(super) struct RequestId(pub Arc<str>);

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// Gives each request its id and trace context. `own` is the client's id
/// ([`with_request_id`](crate::client::ProviderClient::with_request_id)),
/// which wins over the enclosing [`RequestScope`]'s.
#[derive(Clone)]
pub(super) struct ScopeLayer {
    own: Option<Arc<str>>,
}

impl ScopeLayer {
    pub(super) fn new(own: Option<Arc<str>>) -> Self {
        ScopeLayer { own }
    }

    /// The client's own id, else the enclosing scope's, else a fresh one.
    /// The provider logs it too, so both sides of a call can be matched.
    fn request_id(&self) -> Arc<str> {
        if let Some(id) = &self.own {
            return id.clone();
        }
        SCOPED
            .try_with(|scope| scope.id.clone())
            .unwrap_or_else(|_| {
                let n = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
                format!("ccm-{}-{n}", std::process::id()).into()
            })
    }
}

impl<S> Layer<S> for ScopeLayer {
    type Service = Scoped<S>;
    fn layer(&self, inner: S) -> Scoped<S> {
        Scoped {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Scoped<S> {
    inner: S,
    layer: ScopeLayer,
}

impl<S, M> Service<Request<M>> for Scoped<S>
where
    S: Service<Request<M>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<M>) -> S::Future {
        let id = self.layer.request_id();
        if let Ok(v) = id.parse() {
            request.metadata_mut().insert(proto::REQUEST_ID_METADATA, v);
        }
        // One trace per scope (reconcile), or per call outside one.
        let (trace, parent) = SCOPED
            .try_with(|scope| (scope.trace, scope.parent))
            .unwrap_or_else(|_| (TraceId::random(), None));
        if let Ok(v) = traceparent(trace, parent).parse() {
            request.metadata_mut().insert(TRACEPARENT_METADATA, v);
        }
        request.extensions_mut().insert(RequestId(id));
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use tower::{ServiceBuilder, ServiceExt};

    use super::*;

    #[test]
    fn long_or_unprintable_ids_are_bounded_and_stay_valid_metadata() {
        assert_eq!(bounded_id("node/a b\u{e9}"), "node/a_b_");
        let long = format!("service/{}/{}#1a2b3c4d", "n".repeat(63), "s".repeat(63));
        let bounded = bounded_id(&long);
        assert_eq!(bounded.len(), MAX_REQUEST_ID_BYTES);
        assert!(bounded.starts_with("service/nnn"), "{bounded}");
        assert!(bounded.ends_with("sss#1a2b3c4d"), "{bounded}");
        assert!(
            bounded
                .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
                .is_ok()
        );
    }

    /// What the layer put on a request: (request id header, its extension,
    /// traceparent header).
    async fn sent(layer: ScopeLayer) -> (String, String, String) {
        let service = ServiceBuilder::new()
            .layer(layer)
            .service_fn(|r: Request<()>| async move {
                let header = |name| r.metadata().get(name).unwrap().to_str().unwrap().to_owned();
                let id = r.extensions().get::<RequestId>().unwrap().0.to_string();
                Ok::<_, std::convert::Infallible>((
                    header(proto::REQUEST_ID_METADATA),
                    id,
                    header(TRACEPARENT_METADATA),
                ))
            });
        service.oneshot(Request::new(())).await.unwrap()
    }

    #[tokio::test]
    async fn a_scope_gives_its_calls_one_id_and_one_trace() {
        let scope = RequestScope::new("node/a");
        let trace = scope.trace_id();
        let (first, second) = scope
            .run(async {
                (
                    sent(ScopeLayer::new(None)).await,
                    sent(ScopeLayer::new(None)).await,
                )
            })
            .await;
        assert_eq!((first.0.as_str(), first.1.as_str()), ("node/a", "node/a"));
        assert_eq!(second.0, "node/a");
        for (_, _, traceparent) in [&first, &second] {
            assert!(traceparent.contains(&trace), "{traceparent} in {trace}");
        }
        // Outside the scope: a fresh id and a fresh trace per call.
        let (a, b) = (
            sent(ScopeLayer::new(None)).await,
            sent(ScopeLayer::new(None)).await,
        );
        assert_ne!(a.0, b.0);
        assert_ne!(a.2, b.2);
        assert!(!a.2.contains(&trace));
    }

    #[tokio::test]
    async fn the_clients_own_id_wins_over_the_scope() {
        let own = ScopeLayer::new(Some("reconcile-7".into()));
        let (header, id, _) = RequestScope::new("node/a").run(sent(own)).await;
        assert_eq!(
            (header.as_str(), id.as_str()),
            ("reconcile-7", "reconcile-7")
        );
    }
}
