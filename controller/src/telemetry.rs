//! Optional trace export (`--tracing-endpoint`): each reconcile's span is
//! sent over OTLP/gRPC to a collector, and the provider calls it makes
//! carry that span as their W3C `traceparent` parent, so a provider that
//! exports its own spans shows them under the controller's.

use ccm_provider_sdk::trace_context::{SpanId, TraceId};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;

/// The exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("--tracing-endpoint {endpoint}: {source}")]
pub struct TelemetryError {
    endpoint: String,
    source: opentelemetry_otlp::ExporterBuildError,
}

/// The `tracing` layer exporting spans to `endpoint` (`http://host:4317`),
/// sampling `ratio` of the traces; and the provider to shut down (flush)
/// at exit. Call within the Tokio runtime: the gRPC channel lives there.
pub fn otlp_layer<S>(
    endpoint: &str,
    ratio: f64,
) -> Result<
    (
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
        SdkTracerProvider,
    ),
    TelemetryError,
>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|source| TelemetryError {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("cloud-controller-manager")
                .build(),
        )
        .build();
    let tracer = provider.tracer("cloud-controller-manager");
    Ok((tracing_opentelemetry::layer().with_tracer(tracer), provider))
}

/// The trace and span ids `span` is exported under; `None` when nothing
/// exports it (no `--tracing-endpoint`).
pub fn exported_ids(span: &tracing::Span) -> Option<(TraceId, SpanId)> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = span.context();
    let otel = context.span();
    let ids = otel.span_context();
    if !ids.is_valid() {
        return None;
    }
    Some((
        TraceId::new(u128::from_be_bytes(ids.trace_id().to_bytes()))?,
        SpanId::new(u64::from_be_bytes(ids.span_id().to_bytes()))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_exporter_a_span_has_no_exported_ids() {
        let span = tracing::info_span!("reconcile");
        assert_eq!(exported_ids(&span), None);
    }

    #[tokio::test]
    async fn with_an_exporter_spans_get_the_ids_their_calls_carry() {
        use tracing_subscriber::prelude::*;
        let (layer, provider) =
            otlp_layer::<tracing_subscriber::Registry>("http://127.0.0.1:1", 1.0).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        let _default = tracing::subscriber::set_default(subscriber);
        let span = tracing::info_span!("reconcile");
        let (trace, parent) = exported_ids(&span).expect("an exported span");
        let child = tracing::info_span!(parent: &span, "child");
        assert_eq!(exported_ids(&child).unwrap().0, trace, "one trace");
        assert_ne!(exported_ids(&child).unwrap().1, parent);
        drop(_default);
        let _ = provider.shutdown();
    }

    #[tokio::test]
    async fn the_ids_hold_in_the_binarys_subscriber_stack() {
        use tracing_subscriber::{EnvFilter, fmt, prelude::*};
        let (layer, provider) = otlp_layer("http://127.0.0.1:1", 1.0).unwrap();
        let subscriber = tracing_subscriber::registry()
            .with(Some(layer))
            .with(EnvFilter::new("info"))
            .with(fmt::layer().with_writer(std::io::sink));
        let _default = tracing::subscriber::set_default(subscriber);
        let span = tracing::info_span!("reconcile", trace_id = tracing::field::Empty);
        let first = exported_ids(&span).expect("an exported span");
        span.in_scope(|| tracing::info!("inside"));
        assert_eq!(exported_ids(&span), Some(first), "stable once started");
        drop(_default);
        let _ = provider.shutdown();
    }
}
