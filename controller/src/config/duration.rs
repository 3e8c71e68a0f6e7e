//! Durations in Go's `time.ParseDuration` syntax ("5s", "1m30s", "300ms"),
//! so flags keep the spelling upstream users already have in manifests.

use std::time::Duration;

/// Parses a Go duration. Negative durations are rejected: no flag of ours
/// means anything by them.
pub fn parse(s: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {s:?} (examples: 5s, 1m30s, 300ms)");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s;
    if rest.is_empty() || rest.starts_with('-') {
        return Err(err());
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| err())
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
        for bad in ["", "5", "-5s", "5x", "s", "1.2.3s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
