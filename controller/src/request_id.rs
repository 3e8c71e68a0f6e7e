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

tokio::task_local! {
    /// With several providers: the provider the running controller task
    /// works for (set by the manager around the task), named on every
    /// reconcile span so its log lines say which provider they concern.
    pub static PROVIDER: std::sync::Arc<str>;
}

/// Runs `work` with its provider calls carrying `id` and one W3C trace id
/// (`traceparent`), and its log lines inside a
/// `reconcile{request_id=… trace_id=…}` span (`provider=…` too when the
/// task works for one of several providers, see [`PROVIDER`]).
///
/// With `--tracing-endpoint` the span is exported and its calls are its
/// children (their `traceparent` names it); otherwise each reconcile starts
/// a trace of its own.
pub async fn scoped<F: Future>(id: String, work: F) -> F::Output {
    let mut scope = ccm_provider_sdk::RequestScope::new(&id);
    let span = tracing::info_span!(
        "reconcile",
        request_id = scope.id(),
        provider = tracing::field::Empty,
        trace_id = tracing::field::Empty
    );
    if let Ok(provider) = PROVIDER.try_with(|p| p.clone()) {
        span.record("provider", provider.as_ref());
    }
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

    /// Several providers: a controller task's reconcile spans name its
    /// provider, so every log line of theirs does; without one, nothing.
    #[tokio::test]
    async fn reconcile_spans_name_the_provider_of_the_task() {
        use std::io::Write;
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);
        impl Write for Lines {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let work = || scoped("node/n1".into(), async { tracing::info!("inside") });
        work().await;
        PROVIDER.scope("cloud".into(), work()).await;
        let text = String::from_utf8(lines.0.lock().clone()).unwrap();
        let logged: Vec<&str> = text.lines().collect();
        assert_eq!(logged.len(), 2, "{text}");
        assert!(
            logged[0].contains(r#"reconcile{request_id="node/n1" trace_id="#)
                && !logged[0].contains("provider"),
            "{text}"
        );
        assert!(
            logged[1].contains(r#"reconcile{request_id="node/n1" provider="cloud" trace_id="#),
            "{text}"
        );
    }
}
