//! W3C Trace Context (`traceparent`) on provider calls: the client sends
//! one trace id for every call of one reconcile and a span id per call;
//! the server puts the caller's trace id on its `rpc` span and in
//! [`CallContext::trace_id`](crate::CallContext::trace_id), so a provider
//! that exports traces (or only logs) joins the controller's.

use std::fmt;

/// The gRPC metadata key, as W3C Trace Context names the HTTP header.
pub const TRACEPARENT_METADATA: &str = "traceparent";

/// A 16-byte trace id; never all zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(u128);

fn random_bytes<const N: usize>() -> [u8; N] {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; N];
    // The system's random source does not fail on Linux after boot; a
    // failure leaves zeros, replaced below by a non-zero id.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    bytes
}

impl TraceId {
    pub fn random() -> Self {
        TraceId(u128::from_be_bytes(random_bytes::<16>()).max(1))
    }

    /// `None` for zero, which W3C reserves for "no trace".
    pub fn new(id: u128) -> Option<Self> {
        (id != 0).then_some(TraceId(id))
    }
}

/// An 8-byte span id; never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(u64);

impl SpanId {
    pub fn random() -> Self {
        SpanId(u64::from_be_bytes(random_bytes::<8>()).max(1))
    }

    /// `None` for zero, which W3C reserves.
    pub fn new(id: u64) -> Option<Self> {
        (id != 0).then_some(SpanId(id))
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// `00-<trace id>-<span id>-01`: version 00, sampled; the span is
/// `parent` when the caller has one, else a new one.
pub fn traceparent(trace: TraceId, parent: Option<SpanId>) -> String {
    let span = parent.unwrap_or_else(SpanId::random);
    format!("00-{trace}-{span}-01")
}

/// The trace id of a valid version-00 `traceparent`; `None` for anything
/// else (a malformed header starts no trace, as W3C asks).
pub fn parse_traceparent(value: &str) -> Option<TraceId> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if version != "00"
        || parts.next().is_some()
        || !hex(trace, 32)
        || !hex(span, 16)
        || !hex(flags, 2)
    {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok()?;
    let span = u64::from_str_radix(span, 16).ok()?;
    (trace != 0 && span != 0).then_some(TraceId(trace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_bad_ones_are_ignored() {
        let t = TraceId::random();
        let header = traceparent(t, None);
        assert_eq!(header.len(), 55, "{header}");
        assert_eq!(parse_traceparent(&header), Some(t));
        assert_ne!(traceparent(t, None), header, "a new span id per call");
        let parent = SpanId::new(0xb7ad6b7169203331).unwrap();
        assert!(traceparent(t, Some(parent)).ends_with("-b7ad6b7169203331-01"));
        assert_eq!(SpanId::new(0), None);
        assert_eq!(TraceId::new(0), None);
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
                .map(|t| t.to_string()),
            Some("0af7651916cd43dd8448eb211c80319c".to_owned())
        );
    }
}
