//! What every adapter does with a request: read its context (request id,
//! deadline, fencing token), reject what the contract forbids naming the field, run the
//! provider inside a span, and turn errors into the contract's statuses.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tonic::{Request, Status};
use tracing::Instrument;

use crate::error::ProviderError;
use crate::fencing::FencingToken;
use crate::proto;
use crate::provider::{CallContext, Cancellation};
use crate::validate::{self, Violation};

/// The request id, deadline and fencing token of one call; a malformed
/// fencing token is refused (INVALID_ARGUMENT naming the metadata key), as
/// a write whose sender cannot be told must not be applied.
pub(super) fn context<T>(req: &Request<T>) -> Result<CallContext, Status> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let request_id = req
        .metadata()
        .get(proto::REQUEST_ID_METADATA)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| {
            format!(
                "sdk-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            )
        });
    if let Some(late) = past_absolute_deadline(req, std::time::SystemTime::now()) {
        return Err(Status::deadline_exceeded(format!(
            "the caller gave up {} ms before this request was read ({})",
            late.as_millis(),
            proto::DEADLINE_METADATA
        )));
    }
    let deadline = req
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .map(|d| Instant::now() + d);
    let fencing_token = match req.metadata().get(proto::FENCING_TOKEN_METADATA) {
        None => None,
        Some(v) => {
            let field = format!("metadata[{}]", proto::FENCING_TOKEN_METADATA);
            let text = v.to_str().map_err(|_| {
                ProviderError::invalid_request(&field, "not printable ASCII").to_status()
            })?;
            Some(
                FencingToken::parse(text)
                    .map_err(|e| ProviderError::invalid_request(&field, e).to_status())?,
            )
        }
    };
    let trace_id = req
        .metadata()
        .get(crate::trace_context::TRACEPARENT_METADATA)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::trace_context::parse_traceparent)
        .map(|t| t.to_string());
    Ok(CallContext {
        request_id,
        trace_id,
        deadline,
        fencing_token,
        cancellation: Cancellation::default(),
        warnings: Default::default(),
    })
}

/// How long ago the caller's absolute deadline (`x-ccm-deadline`, Unix
/// milliseconds) passed, if it has; a value that does not parse is none.
fn past_absolute_deadline<T>(req: &Request<T>, now: std::time::SystemTime) -> Option<Duration> {
    let ms: u64 = req
        .metadata()
        .get(proto::DEADLINE_METADATA)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    let deadline = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    now.duration_since(deadline).ok().filter(|d| !d.is_zero())
}

/// Parses the `grpc-timeout` header: up to 8 digits and a unit.
fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 || !v.is_ascii() {
        return None;
    }
    let (n, unit) = v.split_at(v.len() - 1);
    if !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

pub(super) fn invalid_request(v: Violation) -> Status {
    ProviderError::invalid_request(v.field, v.problem).to_status()
}

/// Runs one provider call inside a span carrying method and request id, and
/// turns its error into the contract's status.
pub(super) async fn call<T, F>(method: &'static str, ctx: &CallContext, f: F) -> Result<T, Status>
where
    F: Future<Output = Result<T, ProviderError>>,
{
    call_provider(method, ctx, f)
        .await
        .map_err(|e| e.to_status())
}

/// [`call`], keeping the provider's error as it is (a batch hands it to
/// its queries).
pub(super) async fn call_provider<T, F>(
    method: &'static str,
    ctx: &CallContext,
    f: F,
) -> Result<T, ProviderError>
where
    F: Future<Output = Result<T, ProviderError>>,
{
    let span = tracing::info_span!(
        "rpc",
        method,
        request_id = %ctx.request_id,
        trace_id = ctx.trace_id.as_deref().unwrap_or_default()
    );
    // Dropped with this future when the caller gives up (tonic drops the
    // handler on RST_STREAM and on its deadline): that is the cancellation.
    let mut on_give_up = CancelOnDrop(Some(ctx.cancellation.clone()));
    let result = f.instrument(span.clone()).await;
    on_give_up.0 = None;
    if let Err(e) = &result {
        span.in_scope(
            || tracing::debug!(code = ?e.code(), reason = ?e.reason(), error = %e, "call failed"),
        );
    }
    result
}

/// Cancels its [`Cancellation`] when dropped while still armed.
struct CancelOnDrop(Option<Cancellation>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.cancel();
        }
    }
}

pub(super) fn cluster_name(v: &str) -> Result<String, Status> {
    validate::name("cluster_name", v).map_err(invalid_request)?;
    Ok(v.to_owned())
}

/// The status for an answer the contract forbids (`what` the provider
/// answered): a provider bug must not reach the controller as a valid
/// answer.
pub(super) fn bad_answer(what: &'static str) -> impl Fn(Violation) -> Status {
    move |v| bad_answer_error(what, v).to_status()
}

/// [`bad_answer`] as the error itself.
pub(super) fn bad_answer_error(what: &str, v: Violation) -> ProviderError {
    ProviderError::internal(format!("provider answered {what}: {v}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_header() {
        assert_eq!(parse_grpc_timeout("3000000u"), Some(Duration::from_secs(3)));
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        // Found by proptests::grpc_timeouts_are_digits_and_a_unit: a
        // multi-byte last character panicked, a sign was taken.
        assert_eq!(parse_grpc_timeout("0\u{80}"), None);
        assert_eq!(parse_grpc_timeout("+5S"), None);
    }

    fn with_deadline(value: &str) -> Request<()> {
        let mut r = Request::new(());
        r.metadata_mut()
            .insert(proto::DEADLINE_METADATA, value.parse().unwrap());
        r
    }

    #[test]
    fn a_request_read_after_its_absolute_deadline_is_refused_before_it_runs() {
        use std::time::{SystemTime, UNIX_EPOCH};
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let late = context(&with_deadline(&(now_ms - 1500).to_string())).unwrap_err();
        assert_eq!(late.code(), tonic::Code::DeadlineExceeded);
        assert!(
            late.message().contains("x-ccm-deadline"),
            "{}",
            late.message()
        );
        assert!(context(&with_deadline(&(now_ms + 60_000).to_string())).is_ok());
        // Not a number: ignored, as a malformed traceparent is.
        assert!(context(&with_deadline("soon")).is_ok());
        assert!(context(&with_deadline("-5")).is_ok());
        assert!(context(&Request::new(())).is_ok(), "absent");
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// `grpc-timeout` is "TimeoutValue TimeoutUnit": at most 8 ASCII
        /// digits and one of H M S m u n. Anything else is no deadline, and
        /// nothing panics.
        #[test]
        fn grpc_timeouts_are_digits_and_a_unit(
            v in prop_oneof!["[+0-9]{0,10}[HMSmunx]", "[0-9]{1,8}[^HMSmun]", any::<String>()],
        ) {
            if let Some(d) = parse_grpc_timeout(&v) {
                let (n, unit) = v.split_at(v.len() - 1);
                prop_assert!((1..=8).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()), "{:?}", v);
                let n: u64 = n.parse().unwrap();
                let want = match unit {
                    "H" => Duration::from_secs(n * 3600),
                    "M" => Duration::from_secs(n * 60),
                    "S" => Duration::from_secs(n),
                    "m" => Duration::from_millis(n),
                    "u" => Duration::from_micros(n),
                    _ => Duration::from_nanos(n),
                };
                prop_assert_eq!(d, want);
            }
        }
    }
}
