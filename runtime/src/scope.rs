//! The scope a reconcile runs in: a `reconcile{request_id=…}` span named
//! after its object, so every log line of one reconcile carries the same
//! id. A [`Scope`] can carry the id further (the controller's puts it on
//! every provider call, with a W3C trace id).

use futures::future::BoxFuture;
use tracing::Instrument;

/// Runs one reconcile's work under its request id.
pub trait Scope: Send + Sync + 'static {
    fn scoped<'a>(&self, id: String, work: BoxFuture<'a, ()>) -> BoxFuture<'a, ()>;
}

/// A `reconcile{request_id=…}` span, nothing more.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpanOnly;

impl Scope for SpanOnly {
    fn scoped<'a>(&self, id: String, work: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        let span = tracing::info_span!("reconcile", request_id = id);
        Box::pin(work.instrument(span))
    }
}
