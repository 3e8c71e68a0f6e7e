//! Which Services are this instance's (docs/hybrid.md): the routing's
//! answer for a Service, read once per decision; the Warning on a Service
//! several providers would serve; and following the routing as providers'
//! identities change (a handshake or capability refresh), which moves
//! Services and backends without any Service or Node changing.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use super::Lb;
use super::decide::{self, Event, Place, Routed};
use crate::providers::Route;

impl Lb {
    /// The routing's answer for `svc`, and what it means for this
    /// instance's provider.
    pub(super) fn route(&self, svc: &Service) -> (Route, Routed<'_>) {
        let me = self.ctx.scope.provider();
        let (route, known) = {
            let table = self.ctx.scope.routing().read();
            let known = table.member(me).is_some_and(|m| m.identity.is_some());
            (table.service_provider(svc), known)
        };
        let place = Place::of(svc, &route, me, known);
        let routed = Routed {
            place,
            finalizer: &self.finalizer,
        };
        (route, routed)
    }

    /// Whether this provider's load balancer for `svc` is not an orphan.
    pub(super) fn keeps(&self, svc: &Service) -> bool {
        decide::keeps_its_load_balancer(svc, &self.route(svc).1)
    }

    /// A Service several providers would serve: a Warning Event and a log
    /// line, from the first claimant's instance only, once while it lasts
    /// (not on every resync); reported again if it recurs after being
    /// resolved, or under another reason.
    pub(super) async fn report_ambiguity(&self, svc: &Service, route: &Route) {
        let key = decide::key(svc);
        let Some(event) = Event::several_providers(route, self.ctx.scope.provider()) else {
            if !matches!(route, Route::Several(..)) {
                self.reported_ambiguous.lock().remove(&key);
            }
            return;
        };
        let seen = (
            svc.metadata.uid.clone().unwrap_or_default(),
            event.note.clone(),
        );
        if self
            .reported_ambiguous
            .lock()
            .insert(key.clone(), seen.clone())
            .is_some_and(|before| before == seen)
        {
            return;
        }
        tracing::warn!(service = %key, provider = self.provider_name.as_deref(), "{}", event.note);
        self.event(svc, event).await;
    }
}

/// On each change of a provider's identity ([`Table::identity_changes`],
/// subscribed to before the first sync so none is missed), the backends
/// are recomputed (`backend_changes`) and every Service it may have moved
/// is synced again: each LoadBalancer Service, each holding this provider's
/// finalizer, and each this process has a record of.
///
/// [`Table::identity_changes`]: crate::providers::Table::identity_changes
pub(super) async fn follow(
    lb: Arc<Lb>,
    services: Store<Service>,
    mut identity_changes: watch::Receiver<()>,
    backend_changes: watch::Sender<u64>,
) {
    // Ends only with the routing table, which outlives every instance.
    while identity_changes.changed().await.is_ok() {
        tracing::info!(
            provider = lb.provider_name.as_deref(),
            "a provider's identity changed; syncing the load balancer Services it may move"
        );
        backend_changes.send_modify(|g| *g = g.wrapping_add(1));
        for svc in services.state() {
            if decide::is_load_balancer(&svc)
                || decide::has_finalizer(&svc, &lb.finalizer)
                || lb.has_record(&decide::key(&svc))
            {
                let _ = lb.resync.unbounded_send(ObjectRef::from_obj(svc.as_ref()));
            }
        }
    }
}
