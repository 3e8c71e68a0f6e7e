//! The mutation layers: one mutation per idempotency key at a time, sent
//! only while the [`MutationGate`] allows and with its fencing token
//! ([`GateLayer`]), and abandoned when the gate closes while it is in
//! flight ([`RevokeLayer`]). Reads pass through both.
//!
//! Two layers, because the observer sits between them: a mutation the gate
//! refuses was never sent and is not observed, while one abandoned in
//! flight was sent and is observed as CANCELLED.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::{Request, Status};
use tower::{Layer, Service, ServiceExt};

use super::key_locks::KeyLocks;
use crate::client::{ClientError, MutationGate};
use crate::proto;

/// What a mutation holds to: its key, the client's key locks, the gate.
#[derive(Clone)]
struct Mutation {
    key: String,
    locks: Arc<KeyLocks>,
    gate: Option<Arc<dyn MutationGate>>,
}

/// For a mutation: waits for its key, then asks the gate (after the lock,
/// so a call that waited is still refused if the gate closed meanwhile)
/// and puts the fencing token on the request; a failure is told to the
/// gate. Turns the inner services' status into a [`ClientError`].
#[derive(Clone)]
pub(super) struct GateLayer {
    method: &'static str,
    mutation: Option<Mutation>,
}

impl GateLayer {
    /// Not a mutation: nothing to hold or ask.
    pub(super) fn read(method: &'static str) -> Self {
        GateLayer {
            method,
            mutation: None,
        }
    }

    pub(super) fn mutation(
        method: &'static str,
        key: String,
        locks: Arc<KeyLocks>,
        gate: Option<Arc<dyn MutationGate>>,
    ) -> Self {
        GateLayer {
            method,
            mutation: Some(Mutation { key, locks, gate }),
        }
    }
}

impl GateLayer {
    pub(super) fn is_mutation(&self) -> bool {
        self.mutation.is_some()
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Gated<S>;
    fn layer(&self, inner: S) -> Gated<S> {
        Gated {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Gated<S> {
    inner: S,
    layer: GateLayer,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, M> Service<Request<M>> for Gated<S>
where
    S: Service<Request<M>, Error = Status> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    M: Send + 'static,
{
    type Response = S::Response;
    type Error = ClientError;
    type Future = BoxFuture<S::Response, ClientError>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ClientError>> {
        // The inner services are made ready after the key lock, on the
        // clone that makes the call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<M>) -> Self::Future {
        let GateLayer { method, mutation } = self.layer.clone();
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some(Mutation { key, locks, gate }) = mutation else {
                return Ok(inner.oneshot(request).await?);
            };
            let _one_at_a_time = locks.lock(key).await;
            let Some(gate) = gate else {
                return Ok(inner.oneshot(request).await?);
            };
            if !gate.allows_mutations() {
                gate.refused(method);
                return Err(ClientError::Refused {
                    method,
                    why: gate.why_closed(),
                });
            }
            // Holder identities are free-form; one that is not a valid
            // header value goes without a token rather than not at all.
            if let Some(token) = gate.fencing_token()
                && let Ok(v) = token.to_string().parse()
            {
                request
                    .metadata_mut()
                    .insert(proto::FENCING_TOKEN_METADATA, v);
            }
            let answer = inner.oneshot(request).await;
            answer.map_err(|s| fenced_failure(method, &*gate, s.into()))
        })
    }
}

/// What a failed mutation means to leader election: a NOT_LEADER answer is
/// reported to the gate, and a call cancelled because the gate closed is
/// [`ClientError::Refused`], as if it had never been sent.
fn fenced_failure(method: &'static str, gate: &dyn MutationGate, e: ClientError) -> ClientError {
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

/// A mutation in flight when the gate closes (leadership lost) is
/// cancelled: the provider's handler is dropped with the stream. `None`
/// (reads, or no gate) passes calls through.
#[derive(Clone)]
pub(super) struct RevokeLayer(pub Option<Arc<dyn MutationGate>>);

impl<S> Layer<S> for RevokeLayer {
    type Service = Revocable<S>;
    fn layer(&self, inner: S) -> Revocable<S> {
        Revocable {
            inner,
            gate: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Revocable<S> {
    inner: S,
    gate: Option<Arc<dyn MutationGate>>,
}

impl<S, M> Service<Request<M>> for Revocable<S>
where
    S: Service<Request<M>, Error = Status>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = Status;
    type Future = BoxFuture<S::Response, Status>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<M>) -> Self::Future {
        let call = self.inner.call(request);
        let Some(gate) = &self.gate else {
            return Box::pin(call);
        };
        let revoked = gate.revoked();
        Box::pin(async move {
            tokio::select! {
                answer = call => answer,
                () = revoked => Err(Status::cancelled("leadership lost: the mutation was abandoned")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use parking_lot::Mutex;
    use tower::ServiceBuilder;

    use super::*;
    use crate::FencingToken;
    use crate::error::ProviderError;

    /// A gate that is open until `close`, counting what it refused.
    #[derive(Default)]
    struct Switch {
        closed: AtomicBool,
        refused: Mutex<Vec<&'static str>>,
        superseded_by: Mutex<Vec<FencingToken>>,
    }

    impl MutationGate for Arc<Switch> {
        fn allows_mutations(&self) -> bool {
            !self.closed.load(Ordering::SeqCst)
        }
        fn refused(&self, method: &'static str) {
            self.refused.lock().push(method);
        }
        fn superseded(&self, newest: &FencingToken) {
            self.superseded_by.lock().push(newest.clone());
        }
    }

    fn gated(
        layer: GateLayer,
        answer: Result<(), Status>,
    ) -> impl Service<Request<()>, Response = (), Error = ClientError, Future: Send> + Clone {
        ServiceBuilder::new()
            .layer(layer)
            .service_fn(move |_: Request<()>| std::future::ready(answer.clone()))
    }

    #[tokio::test]
    async fn a_mutation_waits_for_its_key_then_asks_the_gate() {
        let locks = Arc::new(KeyLocks::default());
        let switch = Arc::new(Switch::default());
        let gate: Arc<dyn MutationGate> = Arc::new(switch.clone());
        let layer = GateLayer::mutation("Ensure", "lb/k/1".into(), locks.clone(), Some(gate));
        let held = locks.lock("lb/k/1".into()).await;
        let waiting = tokio::spawn(gated(layer, Ok(())).oneshot(Request::new(())));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "waits for the key");
        // The gate closes while it waits: refused, nothing sent.
        switch.closed.store(true, Ordering::SeqCst);
        drop(held);
        let err = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::Refused {
                    method: "Ensure",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(*switch.refused.lock(), ["Ensure"]);
    }

    #[tokio::test]
    async fn reads_neither_lock_nor_ask() {
        let switch = Arc::new(Switch::default());
        switch.closed.store(true, Ordering::SeqCst);
        let answer = gated(GateLayer::read("Get"), Ok(())).oneshot(Request::new(()));
        assert!(answer.await.is_ok());
        let failed = gated(GateLayer::read("Get"), Err(Status::unavailable("down")));
        let err = failed.oneshot(Request::new(())).await.unwrap_err();
        assert_eq!(
            err.provider_error().unwrap().code(),
            tonic::Code::Unavailable
        );
        assert!(switch.refused.lock().is_empty());
    }

    #[tokio::test]
    async fn a_mutation_cancelled_because_the_gate_closed_reads_as_refused() {
        let switch = Arc::new(Switch::default());
        let gate: Arc<dyn MutationGate> = Arc::new(switch.clone());
        let locks = Arc::new(KeyLocks::default());
        let layer = GateLayer::mutation("Delete", "k".into(), locks, Some(gate));
        // Cancelled while the gate is open: the cancellation, as it came.
        let err = gated(layer.clone(), Err(Status::cancelled("gone")))
            .oneshot(Request::new(()))
            .await
            .unwrap_err();
        assert_eq!(err.provider_error().unwrap().code(), tonic::Code::Cancelled);
        // A NOT_LEADER answer names the newer leader to the gate.
        let newer = ProviderError::not_leader(&FencingToken::new(9, "cp-2")).to_status();
        let _ = gated(layer.clone(), Err(newer))
            .oneshot(Request::new(()))
            .await;
        assert_eq!(*switch.superseded_by.lock(), [FencingToken::new(9, "cp-2")]);
        // The gate closes while the call is out, which is then cancelled.
        let closing = switch.clone();
        let err = ServiceBuilder::new()
            .layer(layer)
            .service_fn(move |_: Request<()>| {
                closing.closed.store(true, Ordering::SeqCst);
                std::future::ready(Err::<(), _>(Status::cancelled("gone")))
            })
            .oneshot(Request::new(()))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::Refused {
                    method: "Delete",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_revoked_gate_abandons_the_mutation_in_flight() {
        struct Revoked;
        impl MutationGate for Revoked {
            fn allows_mutations(&self) -> bool {
                false
            }
            fn revoked(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
                Box::pin(std::future::ready(()))
            }
        }
        let service = ServiceBuilder::new()
            .layer(RevokeLayer(Some(Arc::new(Revoked))))
            .service_fn(|_: Request<()>| std::future::pending::<Result<(), Status>>());
        let status =
            tokio::time::timeout(Duration::from_secs(5), service.oneshot(Request::new(())))
                .await
                .expect("ends when the gate closes")
                .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Cancelled);
        // Without a gate: passed through.
        let read = ServiceBuilder::new()
            .layer(RevokeLayer(None))
            .service_fn(|_: Request<()>| async { Ok::<_, Status>(7) });
        assert_eq!(read.oneshot(Request::new(())).await.unwrap(), 7);
    }
}
