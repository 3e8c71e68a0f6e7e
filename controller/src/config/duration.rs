//! Durations in Go's `time.ParseDuration` syntax ("5s", "1m30s", "300ms"),
//! so flags keep the spelling upstream users already have in manifests.

use std::time::Duration;

/// Parses a Go duration, in integer nanoseconds as Go does (sums of floats
/// were off by a nanosecond: "1ns2331h"). Negative durations are rejected:
/// no flag of ours means anything by them. At most `i64::MAX` nanoseconds
/// (about 292 years), Go's limit.
pub fn parse(s: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {s:?} (examples: 5s, 1m30s, 300ms)");
    if s.starts_with('-') {
        return Err(err());
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(err());
    }
    let digits = |t: &str| t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (whole, after) = rest.split_at(digits(rest));
        let (fraction, after) = match after.strip_prefix('.') {
            Some(a) => a.split_at(digits(a)),
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(err());
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(err()),
        };
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err())?
        };
        // Digits past the 18th are below a nanosecond of any unit.
        let fraction = &fraction[..fraction.len().min(18)];
        let fraction_nanos = if fraction.is_empty() {
            0
        } else {
            let f: u128 = fraction.parse().map_err(|_| err())?;
            f * unit / 10u128.pow(fraction.len() as u32)
        };
        total = whole
            .checked_mul(unit)
            .and_then(|n| n.checked_add(fraction_nanos))
            .and_then(|n| n.checked_add(total))
            .filter(|n| *n <= i64::MAX as u128)
            .ok_or_else(err)?;
        rest = after;
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_syntax() {
        assert_eq!(parse("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("5m0s").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("1h2m3.5s").unwrap(), Duration::from_millis(3_723_500));
        assert_eq!(parse("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        for bad in ["", "5", "-5s", "5x", "s", "1.2.3s", "+", ".s", "1e3s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse("+0").unwrap(), Duration::ZERO);
        assert_eq!(parse(".5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1.5µs").unwrap(), Duration::from_nanos(1500));
        assert!(parse("2562047h48m").is_err(), "past Go's limit");
    }

    /// Found by proptests::whole_units_are_exact: the sum was kept in f64
    /// seconds, a nanosecond off for large hours plus nanoseconds (Go's
    /// parser counts integer nanoseconds).
    #[test]
    fn sums_are_exact_to_the_nanosecond() {
        assert_eq!(
            parse("1ns2331h").unwrap(),
            Duration::from_nanos(2331 * 3_600_000_000_000 + 1)
        );
    }

    /// Found by proptests (a test bug, not a parser bug): a sum of whole
    /// hours past Go's largest duration is refused, as Go refuses it.
    #[test]
    fn sums_past_the_largest_duration_are_refused() {
        assert!(parse("765871h879479h916698h").is_err());
        assert!(parse("2562047h").is_ok());
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    const UNITS: &[(&str, u64)] = &[
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];

    proptest! {
        #[test]
        fn anything_is_parsed_or_refused_without_panicking(
            s in prop_oneof!["[-+]?[0-9.]{0,6}(ns|us|µs|ms|s|m|h|x|)", any::<String>()],
        ) {
            match parse(&s) {
                Ok(_) => prop_assert!(!s.starts_with('-')),
                Err(e) => {
                    let quoted = format!("{s:?}");
                    prop_assert!(e.contains(&quoted), "{}", e);
                }
            }
        }

        /// Whole numbers of a unit, and sums of them, are exact, as in Go
        /// (whose parser counts in integer nanoseconds).
        #[test]
        fn whole_units_are_exact(parts in proptest::collection::vec((0u64..1_000_000, 0..UNITS.len()), 1..4)) {
            let text: String = parts.iter().map(|(n, u)| format!("{n}{}", UNITS[*u].0)).collect();
            let nanos: u64 = parts.iter().map(|(n, u)| n * UNITS[*u].1).sum();
            if nanos > i64::MAX as u64 {
                // Past Go's largest duration (about 2,562,047h): refused.
                prop_assert!(parse(&text).is_err(), "{}", text);
            } else {
                prop_assert_eq!(parse(&text), Ok(Duration::from_nanos(nanos)), "{}", text);
            }
        }
    }
}
