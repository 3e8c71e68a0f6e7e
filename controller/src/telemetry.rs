//! The `plain` log format ([`plain_layer`]), and optional trace export
//! (`--tracing-endpoint`): each reconcile's span is sent over OTLP/gRPC to
//! a collector, and the provider calls it makes carry that span as their
//! W3C `traceparent` parent, so a provider that exports its own spans
//! shows them under the controller's.

use ccm_provider_sdk::trace_context::{SpanId, TraceId};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::{self, FormatFields, format::Format, format::Writer};
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

/// The `plain` log format's layer, writing to `writer`, in colour only when
/// `colour` (a terminal). Every field value and message goes through
/// [`EscapedFields`]: one event is one line, whatever text a provider sent.
pub fn plain_layer<S, W>(writer: W, colour: bool) -> fmt::Layer<S, EscapedFields, Format, W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> fmt::MakeWriter<'w> + 'static,
{
    fmt::layer()
        .fmt_fields(EscapedFields)
        .with_ansi(colour)
        .with_writer(writer)
}

/// The longest field value or message the plain format writes (as the
/// provider SDK cuts error texts).
const MAX_FIELD_BYTES: usize = ccm_provider_sdk::error::MAX_ERROR_TEXT_BYTES;

/// Formats fields as `name=value` (the message bare), as the default
/// formatter does, but with control characters escaped (a newline or an
/// ESC in a provider's error text would forge a log line or drive the
/// terminal) and each value cut at [`MAX_FIELD_BYTES`], saying so.
#[derive(Debug, Default, Clone, Copy)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        writer: Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: std::fmt::Result,
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = self.write(field, value);
    }
}

impl EscapingVisitor<'_> {
    fn write(&mut self, field: &Field, value: &dyn std::fmt::Debug) -> std::fmt::Result {
        use std::fmt::Write as _;
        let name = field.name();
        // `log` records' metadata, as the default formatter skips them.
        if name.starts_with("log.") {
            return Ok(());
        }
        if !self.first {
            self.writer.write_char(' ')?;
        }
        self.first = false;
        if name != "message" {
            write!(self.writer, "{}=", name.strip_prefix("r#").unwrap_or(name))?;
        }
        let mut escaping = Escaping {
            out: &mut self.writer,
            written: 0,
            seen: 0,
            cut: false,
        };
        write!(escaping, "{value:?}")?;
        let (seen, cut) = (escaping.seen, escaping.cut);
        if cut {
            write!(self.writer, "... ({seen} bytes, cut)")?;
        }
        Ok(())
    }
}

/// Writes text on with control characters escaped, up to
/// [`MAX_FIELD_BYTES`]; counts the rest.
struct Escaping<'a, 'w> {
    out: &'a mut Writer<'w>,
    written: usize,
    seen: usize,
    cut: bool,
}

impl std::fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.seen += s.len();
        if self.cut {
            return Ok(());
        }
        let mut rest = s;
        while let Some(at) = rest.find(char::is_control) {
            let c = rest[at..].chars().next().unwrap_or_default();
            self.put(&rest[..at])?;
            let escaped = match c {
                '\n' => "\\n".to_owned(),
                '\r' => "\\r".to_owned(),
                '\t' => "\\t".to_owned(),
                c => c.escape_unicode().to_string(),
            };
            self.put(&escaped)?;
            rest = &rest[at + c.len_utf8()..];
        }
        self.put(rest)
    }
}

impl Escaping<'_, '_> {
    /// Writes `s` whole, or as much of it as fits and marks the rest cut.
    fn put(&mut self, s: &str) -> std::fmt::Result {
        if self.cut {
            return Ok(());
        }
        let room = MAX_FIELD_BYTES - self.written;
        if s.len() <= room {
            self.written += s.len();
            return self.out.write_str(s);
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.cut = true;
        self.written += end;
        self.out.write_str(&s[..end])
    }
}

/// Whether to colour what goes to stderr: only a terminal, and not when
/// `NO_COLOR` is set (no-color.org).
pub fn stderr_is_a_colour_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the plain format wrote, through [`plain_layer`] as the binary
    /// sets it up, for a writer that is not a terminal.
    fn plain_log(log: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::prelude::*;
        #[derive(Clone)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer(Arc::default());
        let writer = buffer.clone();
        let subscriber =
            tracing_subscriber::registry().with(plain_layer(move || writer.clone(), false));
        tracing::subscriber::with_default(subscriber, log);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// A provider's error text, as a provider may send it.
    fn forging_error() -> ccm_provider_sdk::ProviderError {
        ccm_provider_sdk::ProviderError::internal(
            "quota\n2026-11-27T00:00:00Z  INFO forged: all good \x1b[31mred\x1b[0m\r\u{9b}2J\u{7f}\t.",
        )
    }

    #[test]
    fn a_provider_error_is_one_line_without_control_characters() {
        let e = forging_error();
        let out = plain_log(|| {
            let span = tracing::info_span!("reconcile", error = %e);
            let _in = span.enter();
            tracing::warn!(error = %e, debug = ?e.message(), "sync failed: {e}");
        });
        assert_eq!(out.matches('\n').count(), 1, "one line: {out:?}");
        assert!(out.ends_with('\n'), "{out:?}");
        let line = out.trim_end_matches('\n');
        assert!(!line.chars().any(char::is_control), "{line:?}");
        // Escaped, not dropped: the text is still there to read.
        assert!(line.contains(r"quota\n2026-11-27"), "{line}");
        assert!(line.contains(r"\u{1b}[31mred"), "{line}");
        assert_eq!(line.matches("forged: all good").count(), 4, "{line}");
    }

    #[test]
    fn a_huge_field_or_message_is_cut() {
        let huge = format!("provider said {}", "x".repeat(200 * 1024));
        let out = plain_log(|| tracing::info!(error = %huge, "failed: {huge}"));
        let line = out.trim_end_matches('\n');
        assert!(!line.contains('\n'));
        // Two provider texts of at most 4 KiB each, and their markers.
        assert!(line.len() <= 2 * 4096 + 200, "{} bytes", line.len());
        assert_eq!(line.matches(" bytes, cut)").count(), 2, "{line}");
    }

    #[test]
    fn no_colours_into_what_is_not_a_terminal() {
        let out = plain_log(|| {
            tracing::warn!(reason = "x", "a warning");
            tracing::error!("an error");
        });
        assert_eq!(out.lines().count(), 2, "{out}");
        assert!(!out.contains('\x1b'), "{out:?}");
    }

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
