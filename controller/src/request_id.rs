//! The `x-ccm-request-id` of a reconcile, named after its object, so that a
//! provider's log line leads back to the Service or Node it was about; and
//! the `reconcile` span that puts the same id on the controller's own log
//! lines.
//!
//! `service/<namespace>/<name>#<uid, first 8>` (the uid tells a Service
//! from its recreation under the same name), `node/<name>`,
//! `persistentvolume/<name>`, `route/<name>` and `routes/<cluster>` for a
//! route listing; at most 128 bytes (the contract's limit).

use std::future::Future;

use futures::future::BoxFuture;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use tracing::Instrument;

fn short_uid(uid: Option<String>) -> String {
    uid.unwrap_or_default().chars().take(8).collect()
}

pub fn service(svc: &Service) -> String {
    format!(
        "service/{}/{}#{}",
        svc.namespace().unwrap_or_default(),
        svc.name_any(),
        short_uid(svc.uid())
    )
}

pub fn node(n: &Node) -> String {
    node_named(&n.name_any())
}

pub fn node_named(name: &str) -> String {
    format!("node/{name}")
}

pub fn volume_named(name: &str) -> String {
    format!("persistentvolume/{name}")
}

pub fn route(name: &str) -> String {
    format!("route/{name}")
}

pub fn routes(cluster: &str) -> String {
    format!("routes/{cluster}")
}

/// The controllers' [`ccm_runtime::Scope`]: [`scoped`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ProviderScope;

impl ccm_runtime::Scope for ProviderScope {
    fn scoped<'a>(&self, id: String, work: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        Box::pin(scoped(id, work))
    }
}

/// Runs `work` with its provider calls carrying `id` and one W3C trace id
/// (`traceparent`), and its log lines inside a
/// `reconcile{request_id=… trace_id=…}` span.
///
/// With `--tracing-endpoint` the span is exported and its calls are its
/// children (their `traceparent` names it); otherwise each reconcile starts
/// a trace of its own.
pub async fn scoped<F: Future>(id: String, work: F) -> F::Output {
    let mut scope = ccm_provider_sdk::RequestScope::new(&id);
    let span = tracing::info_span!(
        "reconcile",
        request_id = scope.id(),
        trace_id = tracing::field::Empty
    );
    if let Some((trace, parent)) = crate::telemetry::exported_ids(&span) {
        scope = scope.within(trace, parent);
    }
    span.record("trace_id", scope.trace_id());
    scope.run(work).instrument(span).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    #[test]
    fn ids_name_the_object() {
        let svc = Service {
            metadata: ObjectMeta {
                namespace: Some("shop".into()),
                name: Some("web".into()),
                uid: Some("1a2b3c4d-0000-4000-8000-000000000000".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(service(&svc), "service/shop/web#1a2b3c4d");
        let n = Node {
            metadata: ObjectMeta {
                name: Some("worker-1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(node(&n), "node/worker-1");
        assert_eq!(routes("prod"), "routes/prod");
    }
}
