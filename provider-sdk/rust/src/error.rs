//! The one place where contract errors are built (provider side) and read
//! back (controller side). Every error carries a gRPC code and, for the
//! contract's own failures, a `google.rpc.ErrorInfo` with a reason from
//! [`ErrorReason`]; see `proto/ccmrs/cloudprovider/v1/errors.proto`.

use std::fmt;
use std::time::Duration;

use ccm_proto::v1::{ERROR_DOMAIN, ErrorReason};

use crate::fencing::FencingToken;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

/// What a caller may assume about an operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The operation did not happen (or happened and failed); retrying it is
    /// a new attempt.
    Final,
    /// The operation may still be running or may have completed: the
    /// transport failed, the deadline passed, or the provider asked to come
    /// back. Retry the *same* request; never conclude anything from it.
    Unknown,
}

/// An error of the provider contract.
///
/// Providers return it from their trait methods (build it with the
/// constructors, e.g. [`ProviderError::instance_not_found`]); the client
/// returns it for every non-OK answer, parsed back from the gRPC status.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderError {
    code: Code,
    reason: Option<ErrorReason>,
    message: String,
    retry_after: Option<Duration>,
    field_violations: Vec<(String, String)>,
    /// NOT_LEADER only: the newest fencing token the provider has seen.
    newest_leader: Option<FencingToken>,
}

impl ProviderError {
    fn new(code: Code, reason: Option<ErrorReason>, message: impl Into<String>) -> Self {
        ProviderError {
            code,
            reason,
            message: message.into(),
            retry_after: None,
            field_violations: Vec::new(),
            newest_leader: None,
        }
    }

    fn with_field(mut self, field: impl Into<String>, description: impl Into<String>) -> Self {
        self.field_violations
            .push((field.into(), description.into()));
        self
    }

    /// The node's instance does not exist (`NOT_FOUND`).
    pub fn instance_not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, Some(ErrorReason::InstanceNotFound), message)
    }

    /// Not done yet; the controller calls again after exactly `delay`
    /// (`UNAVAILABLE` with `RetryInfo`).
    pub fn retry_after(message: impl Into<String>, delay: Duration) -> Self {
        let mut e = Self::new(Code::Unavailable, Some(ErrorReason::RetryAfter), message);
        e.retry_after = Some(delay);
        e
    }

    /// The Service's spec cannot be realised; `field` is a path such as
    /// `spec.ports[0].protocol` (`INVALID_ARGUMENT`).
    pub fn invalid_service_spec(field: impl Into<String>, description: impl Into<String>) -> Self {
        let description = description.into();
        let field = field.into();
        Self::new(
            Code::InvalidArgument,
            Some(ErrorReason::InvalidServiceSpec),
            format!("{field}: {description}"),
        )
        .with_field(field, description)
    }

    /// An annotation has a value the provider cannot use (`INVALID_ARGUMENT`).
    pub fn invalid_annotation(key: &str, description: impl Into<String>) -> Self {
        let description = description.into();
        let field = format!("metadata.annotations[{key}]");
        Self::new(
            Code::InvalidArgument,
            Some(ErrorReason::InvalidAnnotation),
            format!("annotation {key}: {description}"),
        )
        .with_field(field, description)
    }

    /// A cloud quota or capacity limit was hit (`RESOURCE_EXHAUSTED`).
    pub fn quota_exceeded(message: impl Into<String>) -> Self {
        Self::new(
            Code::ResourceExhausted,
            Some(ErrorReason::QuotaExceeded),
            message,
        )
    }

    /// The cloud's API quota is spent until `delay` has passed
    /// (`RESOURCE_EXHAUSTED` with `RetryInfo`, contract 1.4.0).
    pub fn quota_exceeded_retry_after(message: impl Into<String>, delay: Duration) -> Self {
        let mut e = Self::quota_exceeded(message);
        e.retry_after = Some(delay);
        e
    }

    /// A cloud resource exists and belongs to something else
    /// (`ALREADY_EXISTS`).
    pub fn conflicting_resource(message: impl Into<String>) -> Self {
        Self::new(
            Code::AlreadyExists,
            Some(ErrorReason::ConflictingResource),
            message,
        )
    }

    /// Another operation on the same key is in progress (`ABORTED`).
    pub fn operation_pending(message: impl Into<String>) -> Self {
        Self::new(Code::Aborted, Some(ErrorReason::OperationPending), message)
    }

    /// The cloud API is unreachable or throttling (`UNAVAILABLE`), with an
    /// optional hint when to retry.
    pub fn cloud_unavailable(message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        let mut e = Self::new(
            Code::Unavailable,
            Some(ErrorReason::CloudUnavailable),
            message,
        );
        e.retry_after = retry_after;
        e
    }

    /// The provider's own cloud credentials are unusable
    /// (`PERMISSION_DENIED`).
    pub fn credentials_invalid(message: impl Into<String>) -> Self {
        Self::new(
            Code::PermissionDenied,
            Some(ErrorReason::CredentialsInvalid),
            message,
        )
    }

    /// The request breaks the contract; `field` names the offending field
    /// (`INVALID_ARGUMENT`).
    pub fn invalid_request(field: impl Into<String>, description: impl Into<String>) -> Self {
        let field = field.into();
        let description = description.into();
        Self::new(
            Code::InvalidArgument,
            Some(ErrorReason::InvalidRequest),
            format!("{field}: {description}"),
        )
        .with_field(field, description)
    }

    /// A provider bug or an unexpected cloud answer (`INTERNAL`).
    /// The resource the call operates on does not exist (`NOT_FOUND`, no
    /// reason): UpdateLoadBalancer of a load balancer never ensured or
    /// deleted out of band, Master of a cluster ListClusters does not know.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, None, message)
    }

    /// A mutation from a deposed leader (`FAILED_PRECONDITION`): its
    /// fencing token is superseded by `newest`, the newest token seen for
    /// the cluster. The write must not have been applied.
    pub fn not_leader(newest: &FencingToken) -> Self {
        let mut e = Self::new(
            Code::FailedPrecondition,
            Some(ErrorReason::NotLeader),
            format!(
                "refused: a newer leader has written (term {}, holder {:?})",
                newest.term, newest.holder
            ),
        );
        e.newest_leader = Some(newest.clone());
        e
    }

    /// A load balancer call named a node set this provider does not hold
    /// (`FAILED_PRECONDITION` / `NODE_SET_UNKNOWN`): the controller puts the
    /// set again and repeats the call.
    pub fn node_set_unknown(id: &str) -> Self {
        Self::new(
            Code::FailedPrecondition,
            Some(ErrorReason::NodeSetUnknown),
            format!("node set {id:?} is not held by this provider; put it with PutNodeSet"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, None, message)
    }

    /// The method is not implemented (`UNIMPLEMENTED`).
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Self::new(Code::Unimplemented, None, message)
    }

    pub fn code(&self) -> Code {
        self.code
    }

    /// The contract reason, if the error carried a known one.
    pub fn reason(&self) -> Option<ErrorReason> {
        self.reason
    }

    /// The human-readable message, without any gRPC framing: safe to show in
    /// Events.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The delay the provider asked for (`RetryInfo`), if any.
    pub fn retry_after_delay(&self) -> Option<Duration> {
        self.retry_after
    }

    /// NOT_LEADER only: the newest fencing token the provider has seen.
    pub fn newest_leader(&self) -> Option<&FencingToken> {
        self.newest_leader.as_ref()
    }

    /// `(field, description)` pairs from `BadRequest`.
    pub fn field_violations(&self) -> &[(String, String)] {
        &self.field_violations
    }

    /// Whether the operation may have happened; see [`Outcome`].
    pub fn outcome(&self) -> Outcome {
        match self.code {
            Code::Cancelled | Code::DeadlineExceeded | Code::Unavailable | Code::Aborted => {
                Outcome::Unknown
            }
            Code::Unknown if self.reason.is_none() => Outcome::Unknown,
            _ => Outcome::Final,
        }
    }

    /// Encodes the error as a gRPC status with `ErrorInfo`, `RetryInfo` and
    /// `BadRequest` details as the contract prescribes. The message and each
    /// violation's description are cut to [`MAX_ERROR_TEXT_BYTES`]: they
    /// travel in HTTP/2 trailers, and a provider echoing a 200 KB annotation
    /// into its error would otherwise exceed what peers accept.
    pub fn to_status(&self) -> Status {
        let mut details = ErrorDetails::new();
        if let Some(reason) = self.reason {
            let mut metadata = std::collections::HashMap::<String, String>::new();
            if let Some(newest) = &self.newest_leader {
                metadata.insert("term".into(), newest.term.to_string());
                metadata.insert("holder".into(), bounded(&newest.holder));
            }
            details.set_error_info(reason_str(reason), ERROR_DOMAIN, metadata);
        }
        if self.retry_after.is_some() {
            details.set_retry_info(self.retry_after);
        }
        if !self.field_violations.is_empty() {
            details.set_bad_request(
                self.field_violations
                    .iter()
                    .map(|(f, d)| FieldViolation::new(bounded(f), bounded(d)))
                    .collect::<Vec<_>>(),
            );
        }
        Status::with_error_details(self.code, bounded(&self.message), details)
    }

    /// Reads a gRPC status back into an error. Unknown reasons and foreign
    /// domains keep only the code, so callers fall back to it.
    pub fn from_status(status: &Status) -> Self {
        let details = status.get_error_details();
        let info = details
            .error_info()
            .filter(|info| info.domain == ERROR_DOMAIN);
        let reason = info.and_then(|info| parse_reason(&info.reason));
        let newest_leader = info
            .filter(|_| reason == Some(ErrorReason::NotLeader))
            .and_then(|info| {
                let term = info.metadata.get("term")?;
                let holder = info.metadata.get("holder")?;
                FencingToken::parse(&format!("{term}:{holder}")).ok()
            });
        ProviderError {
            code: status.code(),
            reason,
            message: bounded(status.message()),
            retry_after: details.retry_info().and_then(|r| r.retry_delay),
            field_violations: details
                .bad_request()
                .map(|b| {
                    b.field_violations
                        .iter()
                        .map(|v| (bounded(&v.field), bounded(&v.description)))
                        .collect()
                })
                .unwrap_or_default(),
            newest_leader,
        }
    }
}

impl ProviderError {
    /// The error as one query's result in a batch (`QueryError`, contract
    /// 1.4.0): what [`ProviderError::to_status`] would send for the single
    /// call, field by field (the first violation's field, the retry delay in
    /// milliseconds).
    pub fn to_query_error(&self) -> crate::proto::QueryError {
        crate::proto::QueryError {
            code: self.code as i32,
            reason: self.reason.unwrap_or(ErrorReason::Unspecified) as i32,
            message: bounded(&self.message),
            field: self
                .field_violations
                .first()
                .map(|(f, _)| bounded(f))
                .unwrap_or_default(),
            // Rounded up, as the Go and Python SDKs do: a delay under a
            // millisecond stays a delay.
            retry_delay_ms: self
                .retry_after
                .map(|d| u32::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u32::MAX))
                .unwrap_or(0),
        }
    }

    /// Reads one query's `QueryError` back into the error
    /// [`ProviderError::from_status`] would make of the single call's
    /// status, so a caller handles both alike. A violation's description is
    /// the message without its `"<field>: "` prefix (how
    /// [`ProviderError::invalid_request`] writes it). `None` for code OK,
    /// which is no error.
    pub fn from_query_error(e: &crate::proto::QueryError) -> Option<Self> {
        let code = Code::from_i32(e.code);
        if code == Code::Ok {
            return None;
        }
        let message = bounded(&e.message);
        let field_violations = if e.field.is_empty() {
            Vec::new()
        } else {
            let field = bounded(&e.field);
            let description = message
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(&message)
                .to_owned();
            vec![(field, description)]
        };
        Some(ProviderError {
            code,
            reason: ErrorReason::try_from(e.reason)
                .ok()
                .filter(|r| *r != ErrorReason::Unspecified),
            message,
            retry_after: (e.retry_delay_ms > 0)
                .then(|| Duration::from_millis(e.retry_delay_ms.into())),
            field_violations,
            newest_leader: None,
        })
    }
}

/// The longest error message or violation text either side passes on.
pub const MAX_ERROR_TEXT_BYTES: usize = 4096;

/// `text`, cut at a character boundary to at most [`MAX_ERROR_TEXT_BYTES`]
/// and saying so.
pub fn bounded(text: &str) -> String {
    if text.len() <= MAX_ERROR_TEXT_BYTES {
        return text.to_owned();
    }
    let suffix = format!("... ({} bytes, cut)", text.len());
    let mut end = MAX_ERROR_TEXT_BYTES - suffix.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &text[..end])
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only the message: this text ends up in Events, where gRPC framing
        // ("rpc error: code = ... desc = ...") is noise.
        if self.message.is_empty() {
            write!(f, "{:?}", self.code)
        } else {
            f.write_str(&self.message)
        }
    }
}

impl std::error::Error for ProviderError {}

impl From<ProviderError> for Status {
    fn from(e: ProviderError) -> Status {
        e.to_status()
    }
}

/// The wire form of a reason: the enum value name without `ERROR_REASON_`.
pub fn reason_str(reason: ErrorReason) -> &'static str {
    reason
        .as_str_name()
        .strip_prefix("ERROR_REASON_")
        .unwrap_or("UNSPECIFIED")
}

fn parse_reason(s: &str) -> Option<ErrorReason> {
    ErrorReason::from_str_name(&format!("ERROR_REASON_{s}"))
        .filter(|r| *r != ErrorReason::Unspecified)
}

/// Result type of provider trait methods.
pub type ProviderResult<T> = Result<T, ProviderError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_constructor_round_trips_through_a_grpc_status() {
        let cases = [
            ProviderError::instance_not_found("i-1 is gone"),
            ProviderError::retry_after("provisioning", Duration::from_millis(1500)),
            ProviderError::invalid_service_spec("spec.ports[0].protocol", "SCTP unsupported"),
            ProviderError::invalid_annotation("example.com/lb-type", "must be nlb or alb"),
            ProviderError::quota_exceeded("no more LBs"),
            ProviderError::quota_exceeded_retry_after("spent", Duration::from_millis(250)),
            ProviderError::conflicting_resource("cidr routed elsewhere"),
            ProviderError::operation_pending("busy"),
            ProviderError::cloud_unavailable("throttled", Some(Duration::from_secs(2))),
            ProviderError::credentials_invalid("expired"),
            ProviderError::invalid_request("node.name", "is required"),
            ProviderError::internal("bug"),
        ];
        for e in cases {
            let back = ProviderError::from_status(&e.to_status());
            assert_eq!(back, e);
        }
    }

    /// A batch's query error reads back as the single call's status does:
    /// the controller handles a query's failure as the single call's.
    #[test]
    fn every_constructor_round_trips_through_a_query_error() {
        let cases = [
            ProviderError::instance_not_found("i-1 is gone"),
            ProviderError::retry_after("provisioning", Duration::from_millis(1500)),
            ProviderError::quota_exceeded("no more calls"),
            ProviderError::quota_exceeded_retry_after("spent", Duration::from_millis(250)),
            ProviderError::cloud_unavailable("throttled", Some(Duration::from_secs(2))),
            ProviderError::cloud_unavailable("down", None),
            ProviderError::credentials_invalid("expired"),
            ProviderError::invalid_request("node.provider_id", "not ours"),
            ProviderError::internal("bug"),
            ProviderError::unimplemented("no"),
        ];
        for e in cases {
            let single = ProviderError::from_status(&e.to_status());
            let batch = ProviderError::from_query_error(&e.to_query_error()).unwrap();
            assert_eq!(batch, single);
        }
        let ok = crate::proto::QueryError::default();
        assert_eq!(ProviderError::from_query_error(&ok), None);
    }

    /// A retry delay is rounded up to whole milliseconds, as the Go and
    /// Python SDKs round it: one under a millisecond was sent as none.
    #[test]
    fn a_query_errors_retry_delay_is_rounded_up() {
        let ms = |d: Duration| {
            ProviderError::cloud_unavailable("throttled", Some(d))
                .to_query_error()
                .retry_delay_ms
        };
        assert_eq!(ms(Duration::from_micros(1)), 1);
        assert_eq!(ms(Duration::from_micros(1500)), 2);
        assert_eq!(ms(Duration::from_millis(250)), 250);
        assert_eq!(ms(Duration::from_secs(u64::MAX)), u32::MAX);
    }

    #[test]
    fn reasons_use_the_documented_wire_names() {
        assert_eq!(
            reason_str(ErrorReason::InstanceNotFound),
            "INSTANCE_NOT_FOUND"
        );
        assert_eq!(reason_str(ErrorReason::RetryAfter), "RETRY_AFTER");
        assert_eq!(
            parse_reason("CLOUD_UNAVAILABLE"),
            Some(ErrorReason::CloudUnavailable)
        );
        assert_eq!(parse_reason("UNSPECIFIED"), None);
        assert_eq!(parse_reason("SOMETHING_NEW"), None);
    }

    #[test]
    fn foreign_domains_keep_only_the_code() {
        let mut d = ErrorDetails::new();
        d.set_error_info(
            "INSTANCE_NOT_FOUND",
            "example.com",
            std::collections::HashMap::<String, String>::new(),
        );
        let s = Status::with_error_details(Code::NotFound, "x", d);
        let e = ProviderError::from_status(&s);
        assert_eq!(e.code(), Code::NotFound);
        assert_eq!(e.reason(), None);
    }

    #[test]
    fn transport_and_deadline_failures_have_unknown_outcome() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Cancelled,
            Code::Aborted,
        ] {
            assert_eq!(
                ProviderError::from_status(&Status::new(code, "")).outcome(),
                Outcome::Unknown
            );
        }
        assert_eq!(ProviderError::internal("x").outcome(), Outcome::Final);
        assert_eq!(
            ProviderError::invalid_request("a", "b").outcome(),
            Outcome::Final
        );
    }

    #[test]
    fn not_leader_carries_the_newest_token_both_ways() {
        let newest = FencingToken::new(9, "cp-2_beef");
        let back = ProviderError::from_status(&ProviderError::not_leader(&newest).to_status());
        assert_eq!(back.code(), Code::FailedPrecondition);
        assert_eq!(back.reason(), Some(ErrorReason::NotLeader));
        assert_eq!(back.newest_leader(), Some(&newest));
        assert_eq!(back.outcome(), Outcome::Final);
        // Other reasons never carry one, even with the same metadata.
        let other = ProviderError::conflicting_resource("x").to_status();
        assert_eq!(ProviderError::from_status(&other).newest_leader(), None);
    }

    #[test]
    fn display_is_the_bare_message() {
        let e = ProviderError::from_status(&Status::new(Code::Internal, "boom"));
        assert_eq!(e.to_string(), "boom");
    }

    #[test]
    fn long_texts_are_cut_on_both_sides() {
        let huge = "é".repeat(100_000);
        let e = ProviderError::invalid_annotation("example.com/x", huge.clone());
        let status = e.to_status();
        assert!(status.message().len() <= MAX_ERROR_TEXT_BYTES);
        let back = ProviderError::from_status(&status);
        assert_eq!(back.reason(), Some(ErrorReason::InvalidAnnotation));
        assert!(back.field_violations()[0].1.len() <= MAX_ERROR_TEXT_BYTES);
        assert!(
            back.field_violations()[0]
                .1
                .ends_with("(200000 bytes, cut)")
        );
        // A foreign status with a huge message is cut when read.
        let foreign = Status::invalid_argument(huge);
        assert!(ProviderError::from_status(&foreign).message().len() <= MAX_ERROR_TEXT_BYTES);
        assert_eq!(bounded("short"), "short");
    }
}

/// Properties of the error texts both sides pass on: whatever a provider
/// (or a foreign gRPC server) puts in a status, the controller reads back an
/// error within [`MAX_ERROR_TEXT_BYTES`] and never panics.
#[cfg(test)]
mod proptests {
    use proptest::collection::vec;
    use proptest::prelude::*;
    use tonic::codegen::{Bytes, http::HeaderMap};

    use super::*;

    /// Short texts, and texts around the limit made of characters of every
    /// UTF-8 width, so cuts land inside characters.
    fn arb_text() -> BoxedStrategy<String> {
        prop_oneof![
            3 => any::<String>(),
            2 => (
                prop::sample::select(&['a', 'é', '€', '😀', '\n', '%'][..]),
                0usize..MAX_ERROR_TEXT_BYTES + 64,
            )
                .prop_map(|(c, n)| std::iter::repeat_n(c, n / c.len_utf8() + n % 3).collect()),
            1 => vec(any::<char>(), MAX_ERROR_TEXT_BYTES / 4..MAX_ERROR_TEXT_BYTES + 16)
                .prop_map(String::from_iter),
        ]
        .boxed()
    }

    fn arb_error() -> BoxedStrategy<ProviderError> {
        (0usize..6, arb_text(), arb_text(), 0u64..10_000)
            .prop_map(|(which, a, b, ms)| match which {
                0 => ProviderError::invalid_request(a, b),
                1 => ProviderError::invalid_service_spec(a, b),
                2 => ProviderError::invalid_annotation(&a, b),
                3 => ProviderError::retry_after(a, Duration::from_millis(ms)),
                4 => ProviderError::internal(a),
                _ => ProviderError::cloud_unavailable(a, Some(Duration::from_millis(ms))),
            })
            .boxed()
    }

    proptest! {
        #[test]
        fn bounded_text_fits_and_keeps_a_prefix(text in arb_text()) {
            let out = bounded(&text);
            prop_assert!(out.len() <= MAX_ERROR_TEXT_BYTES);
            if text.len() <= MAX_ERROR_TEXT_BYTES {
                prop_assert_eq!(out, text);
            } else {
                let suffix = format!("... ({} bytes, cut)", text.len());
                let kept = out.strip_suffix(&suffix);
                prop_assert!(kept.is_some(), "{:?} does not say it was cut", out);
                let kept = kept.unwrap();
                prop_assert!(text.starts_with(kept));
                // Cut at the last character boundary that fits, no shorter.
                prop_assert!(kept.len() + 4 > MAX_ERROR_TEXT_BYTES - suffix.len());
            }
        }

        /// An error sent by a provider reads back the same through real
        /// gRPC headers (percent-encoded message, base64 details), cut to
        /// the limit.
        #[test]
        fn errors_survive_the_trailers(e in arb_error()) {
            let mut headers = HeaderMap::new();
            e.to_status().add_header(&mut headers).expect("a status always encodes");
            let status = Status::from_header_map(&headers).expect("grpc-status is present");
            let back = ProviderError::from_status(&status);
            prop_assert_eq!(back.code(), e.code());
            prop_assert_eq!(back.reason(), e.reason());
            prop_assert_eq!(back.retry_after_delay(), e.retry_after_delay());
            prop_assert_eq!(back.message(), bounded(e.message()));
            let want: Vec<(String, String)> = e
                .field_violations()
                .iter()
                .map(|(f, d)| (bounded(f), bounded(d)))
                .collect();
            prop_assert_eq!(back.field_violations(), &want[..]);
        }

        /// Whatever a foreign server puts in a status, details included,
        /// reads back within the limit.
        #[test]
        fn any_status_reads_back_within_the_limit(
            code in 0i32..20,
            message in arb_text(),
            details in prop_oneof![
                vec(any::<u8>(), 0..256),
                arb_error().prop_map(|e| e.to_status().details().to_vec()),
            ],
        ) {
            let status = Status::with_details(Code::from_i32(code), message, Bytes::from(details));
            let e = ProviderError::from_status(&status);
            prop_assert!(e.message().len() <= MAX_ERROR_TEXT_BYTES);
            for (f, d) in e.field_violations() {
                prop_assert!(f.len() <= MAX_ERROR_TEXT_BYTES && d.len() <= MAX_ERROR_TEXT_BYTES);
            }
            prop_assert!(e.to_string().len() <= MAX_ERROR_TEXT_BYTES.max(32));
        }
    }
}
