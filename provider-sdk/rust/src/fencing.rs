//! Fencing tokens: which leader sent a mutation.
//!
//! With leader election on, every mutation carries the Lease's term (its
//! `leaseTransitions` when this holder acquired it) and holder identity in
//! the `x-ccm-fencing-token` metadata. Terms only grow while a Lease
//! exists, so a provider that remembers the newest token it has seen for a
//! cluster can refuse a write from a deposed leader whose call arrives (or
//! finishes) late: a frozen process, a slow cloud operation, a sidecar
//! that outlived its controller's cancellation.

use std::cmp::Ordering;
use std::fmt;

/// One leader's term. Ordered by term; two different holders with the same
/// term are incomparable (only a Lease deleted and created again can cause
/// it), and each is [`older`](FencingToken::is_superseded_by) than the other.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencingToken {
    /// `leaseTransitions` of the Lease when its holder acquired it.
    pub term: u64,
    /// `holderIdentity` of the Lease.
    pub holder: String,
}

/// Longest holder identity accepted, as a Lease's holderIdentity is a
/// free-form string but a metadata value should stay small.
pub const MAX_HOLDER_BYTES: usize = 253;

impl FencingToken {
    pub fn new(term: u64, holder: impl Into<String>) -> Self {
        FencingToken {
            term,
            holder: holder.into(),
        }
    }

    /// Parses the metadata value `<term>:<holder>`.
    pub fn parse(value: &str) -> Result<FencingToken, String> {
        let (term, holder) = value
            .split_once(':')
            .ok_or_else(|| format!("{value:?} is not <term>:<holder>"))?;
        // Digits only: `parse` alone would also take a leading "+", which
        // the Go and Python SDKs refuse.
        let term = Some(term)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| format!("term {term:?} is not a decimal number"))?;
        if holder.is_empty() {
            return Err("the holder identity is empty".into());
        }
        if holder.len() > MAX_HOLDER_BYTES {
            return Err(format!(
                "the holder identity is {} bytes, more than {MAX_HOLDER_BYTES}",
                holder.len()
            ));
        }
        Ok(FencingToken::new(term, holder))
    }

    /// True when a provider that has seen `newest` must refuse a write
    /// carrying `self`: an older term, or the same term from someone else.
    pub fn is_superseded_by(&self, newest: &FencingToken) -> bool {
        match self.term.cmp(&newest.term) {
            Ordering::Less => true,
            Ordering::Equal => self.holder != newest.holder,
            Ordering::Greater => false,
        }
    }

    /// The newer of the two, for a provider's high-water mark: `seen` is
    /// replaced only by a strictly greater term.
    pub fn newest(seen: Option<FencingToken>, arriving: &FencingToken) -> FencingToken {
        match seen {
            Some(s) if s.term >= arriving.term => s,
            _ => arriving.clone(),
        }
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.term, self.holder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_malformed_values() {
        let t = FencingToken::new(7, "cp-1_0a1b:extra");
        assert_eq!(t.to_string(), "7:cp-1_0a1b:extra");
        assert_eq!(FencingToken::parse(&t.to_string()).unwrap(), t);
        for bad in [
            "",
            "7",
            "x:me",
            "-1:me",
            "7:",
            &format!("1:{}", "h".repeat(254)),
        ] {
            assert!(FencingToken::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn older_terms_and_same_term_strangers_are_superseded() {
        let newest = FencingToken::new(5, "b");
        assert!(FencingToken::new(4, "b").is_superseded_by(&newest));
        assert!(FencingToken::new(4, "a").is_superseded_by(&newest));
        assert!(FencingToken::new(5, "a").is_superseded_by(&newest));
        assert!(!FencingToken::new(5, "b").is_superseded_by(&newest));
        assert!(!FencingToken::new(6, "a").is_superseded_by(&newest));
    }

    #[test]
    fn the_high_water_mark_only_rises() {
        let a = FencingToken::new(3, "a");
        assert_eq!(FencingToken::newest(None, &a), a);
        let b = FencingToken::new(2, "b");
        assert_eq!(FencingToken::newest(Some(a.clone()), &b), a);
        let c = FencingToken::new(3, "c");
        assert_eq!(
            FencingToken::newest(Some(a.clone()), &c),
            a,
            "same term: the first holder seen stays"
        );
        let d = FencingToken::new(4, "d");
        assert_eq!(FencingToken::newest(Some(a), &d), d);
    }
}
