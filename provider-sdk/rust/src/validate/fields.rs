//! Checks of single values: names, IPs and CIDRs, enums, Kubernetes label
//! and annotation syntax, providerIDs.

use std::net::IpAddr;

use crate::cidr::Cidr;

use super::{
    Checked, MAX_ANNOTATIONS_BYTES, MAX_LABEL_KEY_BYTES, MAX_LABEL_VALUE_BYTES, MAX_NAME_BYTES,
    violation,
};

pub fn required<'a, T>(field: &str, value: &'a Option<T>) -> Checked<&'a T> {
    value
        .as_ref()
        .ok_or_else(|| violation(field, "is required"))
}

pub fn name(field: &str, value: &str) -> Checked {
    if value.is_empty() {
        return Err(violation(field, "is required"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(violation(
            field,
            format!("is {} bytes, more than {MAX_NAME_BYTES}", value.len()),
        ));
    }
    Ok(())
}

/// An IP address in its canonical text (RFC 5952 for IPv6), the form the
/// contract sends and compares: "2001:DB8::1" and "2001:db8:0:0:0:0:0:1"
/// are refused naming the canonical form, an IPv4-mapped IPv6 address
/// naming the IPv4 one (Kubernetes refuses it in a Service's status). The
/// Go and Python SDKs check the same.
pub fn ip(field: &str, value: &str) -> Checked<IpAddr> {
    let parsed: IpAddr = value
        .parse()
        .map_err(|_| violation(field, format!("{value:?} is not an IP address")))?;
    if let IpAddr::V6(v6) = parsed
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(violation(
            field,
            format!("{value:?} is an IPv4-mapped IPv6 address; use the IPv4 address"),
        ));
    }
    let canonical = parsed.to_string();
    if canonical != value {
        return Err(violation(
            field,
            format!("{value:?} is not in canonical form; use {canonical:?}"),
        ));
    }
    Ok(parsed)
}

/// Parses "address/prefix".
pub fn cidr(field: &str, value: &str) -> Checked<(IpAddr, u8)> {
    let parsed =
        Cidr::parse(value).map_err(|_| violation(field, format!("{value:?} is not a CIDR")))?;
    Ok((parsed.addr(), parsed.prefix_len()))
}

/// An enum field that must hold a known, non-zero value.
pub fn known_enum<E: TryFrom<i32>>(field: &str, value: i32) -> Checked<E> {
    if value == 0 {
        return Err(violation(field, "is UNSPECIFIED"));
    }
    E::try_from(value).map_err(|_| violation(field, format!("unknown enum value {value}")))
}

/// An enum field where zero means "unset" but other values must be known.
pub fn optional_enum<E: TryFrom<i32>>(field: &str, value: i32) -> Checked {
    if value != 0 && E::try_from(value).is_err() {
        return Err(violation(field, format!("unknown enum value {value}")));
    }
    Ok(())
}

/// Kubernetes' label-value syntax: empty, or at most 63 characters of
/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn label_value(field: &str, v: &str) -> Checked {
    if v.len() > MAX_LABEL_VALUE_BYTES {
        return Err(violation(
            field,
            format!(
                "label value is {} bytes, more than {MAX_LABEL_VALUE_BYTES}",
                v.len()
            ),
        ));
    }
    if !v.is_empty() && !is_label_name(v) {
        return Err(violation(
            field,
            format!("{v:?} is not a valid label value"),
        ));
    }
    Ok(())
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(super) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_NAME_BYTES
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Kubernetes' label-key syntax: an optional DNS-subdomain prefix and `/`,
/// then a name of at most 63 characters.
pub fn label_key(field: &str, k: &str) -> Checked {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if k.len() > MAX_LABEL_KEY_BYTES
        || !is_label_name(name)
        || prefix.is_some_and(|p| !is_dns_subdomain(p))
    {
        return Err(violation(field, format!("{k:?} is not a valid label key")));
    }
    Ok(())
}

/// A `spec.loadBalancerClass` a provider serves (contract 1.3.0): a label
/// key WITH its DNS-subdomain prefix, for example "example.com/cloud";
/// Kubernetes reserves unprefixed classes for end users.
pub fn load_balancer_class(field: &str, v: &str) -> Checked {
    match v.split_once('/') {
        Some((prefix, _)) if !prefix.is_empty() && label_key(field, v).is_ok() => Ok(()),
        _ => Err(violation(
            field,
            format!(
                "{v:?} is not a loadBalancerClass: a DNS-subdomain prefix, \"/\" and a name (for example \"example.com/cloud\")"
            ),
        )),
    }
}

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63
/// characters (a provider's name, a KEP-5778 platform).
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// [`is_dns_label`], as a check.
pub fn dns_label(field: &str, v: &str) -> Checked {
    if !is_dns_label(v) {
        return Err(violation(
            field,
            format!("{v:?} is not a DNS-1123 label of at most 63 characters"),
        ));
    }
    Ok(())
}

pub fn labels<'a>(
    field: &str,
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Checked {
    for (k, v) in labels {
        super::lazily(
            |f| {
                label_key(f, k)?;
                label_value(f, v)
            },
            || format!("{field}[{k}]"),
        )?;
    }
    Ok(())
}

/// A node set's id (PutNodeSet): 1-128 bytes of lowercase letters, digits
/// and `-`.
pub fn node_set_id(field: &str, v: &str) -> Checked {
    if v.is_empty() || v.len() > 128 {
        return Err(violation(field, format!("is {} bytes, not 1-128", v.len())));
    }
    if !v
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        return Err(violation(
            field,
            format!("{v:?} has a character other than a-z, 0-9 and \"-\""),
        ));
    }
    Ok(())
}

/// A providerID: `<scheme>://<id>`, no whitespace.
pub fn provider_id(field: &str, v: &str) -> Checked {
    name(field, v)?;
    match v.split_once("://") {
        Some((scheme, id))
            if !scheme.is_empty() && !id.is_empty() && !v.chars().any(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err(violation(
            field,
            format!("{v:?} is not of the form <scheme>://<id>"),
        )),
    }
}

pub fn annotations<'a>(
    field: &str,
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Checked {
    let mut total = 0usize;
    for (k, v) in annotations {
        if k.is_empty() {
            return Err(violation(field, "annotation key is empty"));
        }
        total += k.len() + v.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        return Err(violation(
            field,
            format!("annotations total {total} bytes, more than {MAX_ANNOTATIONS_BYTES}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_syntax_is_kubernetes_syntax() {
        for ok in ["a", "example.com/rack", "team_1.x-y", "k8s.io/x"] {
            assert!(label_key("f", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Example.com/x",
            "a/b/c",
            "/x",
            "x/",
            "has space",
        ] {
            assert!(label_key("f", bad).is_err(), "{bad}");
        }
        assert!(label_value("f", "").is_ok());
        assert!(label_value("f", "zone-a_1.b").is_ok());
        for bad in ["-x", "x y", "x/y", &"v".repeat(64)] {
            assert!(label_value("f", bad).is_err(), "{bad}");
        }
        assert!(provider_id("f", "fake://i-1").is_ok());
        for bad in ["", "i-1", "://x", "fake://", "fake://a b"] {
            assert!(provider_id("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn classes_need_a_prefix_and_platforms_are_labels() {
        for ok in [
            "example.com/cloud",
            "k8s.io/Internal_v1.2",
            // The longest: a 253-byte prefix and a 63-byte name.
            &format!(
                "{0}.{0}.{0}.{1}/{2}",
                "a".repeat(63),
                "a".repeat(61),
                "b".repeat(63)
            ),
        ] {
            assert!(load_balancer_class("f", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "cloud",
            "/cloud",
            "example.com/",
            "Example.com/cloud",
            "example.com/a/b",
            "example.com/-a",
            &format!("example.com/{}", "b".repeat(64)),
            &format!("{0}.{0}.{0}.{1}/b", "a".repeat(63), "a".repeat(62)),
        ] {
            assert!(load_balancer_class("f", bad).is_err(), "{bad}");
        }
        for ok in ["cloud", "bare-metal-2", &"p".repeat(63)] {
            assert!(dns_label("f", ok).is_ok(), "{ok}");
        }
        for bad in ["", "Cloud", "a.b", "-a", "a-", "a_b", &"p".repeat(64)] {
            assert!(dns_label("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs_and_ips() {
        assert!(cidr("f", "10.0.0.0/8").is_ok());
        assert!(cidr("f", "fd00::/64").is_ok());
        for bad in ["10.0.0.0", "10.0.0.0/", "10.0.0/8", "fd00::/129", "x/1"] {
            assert!(cidr("f", bad).is_err(), "{bad}");
        }
        // Found by proptests::cidrs_are_an_address_and_a_decimal_prefix_within_its_family:
        // Rust's integer parser takes a sign, no "address/prefix" parser does.
        for bad in ["0.0.0.0/+0", "10.0.0.0/+8", "10.0.0.0/08", "fd00::/064"] {
            assert!(cidr("f", bad).is_err(), "{bad}");
        }
        assert!(ip("f", "::1").is_ok());
        assert!(ip("f", "256.0.0.1").is_err());
    }
}
