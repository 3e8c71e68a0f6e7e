//! Shadow mode (`--dry-run-writes`): everything runs, nothing is written.
//! Kubernetes writes are sent as server-side dry runs (`dryRun=All`: the
//! apiserver checks RBAC, validation and admission, and stores nothing),
//! provider mutations are held back by the client's mutation gate. Each is
//! logged and counted in `ccm_dry_run_writes_total{target,operation}`, so
//! an operator can run the controller beside the CCM it would replace and
//! see what it would do.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::BoxError;

use super::kube_client::{KubeRequest, RequestCheck};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `kubernetes` or `provider`.
    pub target: &'static str,
    /// `PATCH nodes/status`, `POST events`, `EnsureLoadBalancer`.
    pub operation: String,
}

/// The writes a dry run did not make.
#[derive(Clone, Debug)]
pub struct DryRun {
    writes: Family<WriteLabels, Counter>,
}

impl DryRun {
    pub fn register(registry: &mut Registry) -> Self {
        let writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "ccm_dry_run_writes",
            "Writes held back by --dry-run-writes: Kubernetes requests sent as server-side dry runs, provider mutations not sent",
            writes.clone(),
        );
        DryRun { writes }
    }

    /// An Event the controller would have published.
    pub fn event_not_published(
        &self,
        reason: &str,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
    ) {
        tracing::info!(
            reason,
            kind = regarding.kind.as_deref().unwrap_or_default(),
            namespace = regarding.namespace.as_deref().unwrap_or_default(),
            name = regarding.name.as_deref().unwrap_or_default(),
            "dry run: Event not published"
        );
        self.count("kubernetes", "POST events".to_owned());
    }

    pub fn count(&self, target: &'static str, operation: String) {
        self.writes
            .get_or_create(&WriteLabels { target, operation })
            .inc();
    }
}

/// The resource a request path names, with its subresource, for a label of
/// bounded cardinality: `/api/v1/namespaces/ns/services/web/status` is
/// `services/status`.
fn resource(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    }
    .unwrap_or_default();
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    match rest {
        [kind] | [kind, _] => (*kind).to_owned(),
        [kind, _, sub, ..] => format!("{kind}/{sub}"),
        [] => "unknown".to_owned(),
    }
}

/// `uri` with `dryRun=All` added to its query.
fn with_dry_run(uri: &http::Uri) -> Result<http::Uri, http::Error> {
    let path_and_query = match uri.query() {
        Some(q) if !q.is_empty() => format!("{}?{q}&dryRun=All", uri.path()),
        _ => format!("{}?dryRun=All", uri.path()),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse()?);
    Ok(http::Uri::from_parts(parts)?)
}

/// A DELETE's options with `dryRun: ["All"]` set. The apiserver reads a
/// DELETE's options from its body when it has one and then ignores the
/// query, so `?dryRun=All` alone would delete for real.
fn delete_options_with_dry_run(body: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let mut options: serde_json::Value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"})
    } else {
        serde_json::from_slice(body)?
    };
    match options.as_object_mut() {
        Some(o) => {
            o.insert("dryRun".into(), serde_json::json!(["All"]));
        }
        None => {
            return Err(serde::de::Error::custom(
                "DeleteOptions are not a JSON object",
            ));
        }
    }
    serde_json::to_vec(&options)
}

/// Turns every Kubernetes write into a server-side dry run (none when
/// `None`: the check is always in place, so the client has one type).
impl RequestCheck for Option<DryRun> {
    fn check(&self, mut req: KubeRequest) -> Result<KubeRequest, BoxError> {
        let Some(dry_run) = self.as_ref().filter(|_| req.method() != http::Method::GET) else {
            return Ok(req);
        };
        let operation = format!("{} {}", req.method(), resource(req.uri().path()));
        tracing::info!(
            method = %req.method(),
            path = req.uri().path(),
            "dry run: Kubernetes write sent as a server-side dry run, not stored"
        );
        dry_run.count("kubernetes", operation);
        // Never send the write for real: any failure below refuses it.
        *req.uri_mut() = with_dry_run(req.uri())?;
        if req.method() != http::Method::DELETE {
            return Ok(req);
        }
        // kube sends DeleteOptions as a body already in memory: read it now.
        // One that cannot be read at once is refused rather than sent
        // without its dry run.
        let (mut parts, body) = req.into_parts();
        let Some(Ok(body)) = futures::FutureExt::now_or_never(body.collect_bytes()) else {
            return Err("dry run: a DELETE whose options are not in memory is not sent".into());
        };
        let options = delete_options_with_dry_run(&body)?;
        parts.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        parts.headers.remove(http::header::CONTENT_LENGTH);
        Ok(http::Request::from_parts(
            parts,
            kube::client::Body::from(options),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_named_with_their_subresource() {
        for (path, want) in [
            ("/api/v1/nodes/worker-1", "nodes"),
            ("/api/v1/nodes/worker-1/status", "nodes/status"),
            (
                "/api/v1/namespaces/shop/services/web/status",
                "services/status",
            ),
            ("/api/v1/namespaces/shop/services/web", "services"),
            ("/apis/events.k8s.io/v1/namespaces/default/events", "events"),
            (
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
                "leases",
            ),
            ("/api/v1/persistentvolumes/pv-1", "persistentvolumes"),
            ("/healthz", "unknown"),
        ] {
            assert_eq!(resource(path), want, "{path}");
        }
    }

    #[test]
    fn the_dry_run_joins_any_query() {
        let u: http::Uri = "https://k/api/v1/nodes/a?fieldManager=ccm".parse().unwrap();
        assert_eq!(
            with_dry_run(&u).unwrap().to_string(),
            "https://k/api/v1/nodes/a?fieldManager=ccm&dryRun=All"
        );
        let u: http::Uri = "https://k/api/v1/nodes/a".parse().unwrap();
        assert_eq!(
            with_dry_run(&u).unwrap().to_string(),
            "https://k/api/v1/nodes/a?dryRun=All"
        );
    }

    #[tokio::test]
    async fn writes_become_dry_runs_and_reads_pass_untouched() {
        let mut registry = Registry::default();
        let dry = DryRun::register(&mut registry);
        let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let recorder = {
            let seen = seen.clone();
            tower::service_fn(move |req: http::Request<kube::client::Body>| {
                let seen = seen.clone();
                async move {
                    let line = format!("{} {}", req.method(), req.uri());
                    let body = req.into_body().collect_bytes().await.unwrap();
                    seen.lock()
                        .push(format!("{line} {}", String::from_utf8_lossy(&body)));
                    Ok::<_, std::convert::Infallible>(())
                }
            })
        };
        use tower::{Layer, Service};
        let mut svc = crate::kube_client::CheckLayer(Some(dry)).layer(recorder);
        for (method, uri, body) in [
            ("GET", "/api/v1/nodes?watch=true", ""),
            ("PATCH", "/api/v1/nodes/a/status", "{}"),
            (
                "DELETE",
                "/api/v1/nodes/a",
                r#"{"preconditions":{"uid":"u-1"}}"#,
            ),
            ("DELETE", "/api/v1/nodes/b", ""),
        ] {
            let req = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(kube::client::Body::from(body.as_bytes().to_vec()))
                .unwrap();
            tower::ServiceExt::ready(&mut svc).await.unwrap();
            svc.call(req).await.unwrap();
        }
        // A DELETE's options carry the dry run too: with a body, the
        // apiserver ignores the query.
        assert_eq!(
            *seen.lock(),
            [
                "GET /api/v1/nodes?watch=true ",
                "PATCH /api/v1/nodes/a/status?dryRun=All {}",
                r#"DELETE /api/v1/nodes/a?dryRun=All {"dryRun":["All"],"preconditions":{"uid":"u-1"}}"#,
                r#"DELETE /api/v1/nodes/b?dryRun=All {"apiVersion":"v1","dryRun":["All"],"kind":"DeleteOptions"}"#,
            ]
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"ccm_dry_run_writes_total{target="kubernetes",operation="PATCH nodes/status"} 1"#
            ),
            "{text}"
        );
    }
}
