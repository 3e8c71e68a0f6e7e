//! What both sides check of a provider's answers: the server refuses to send
//! an invalid one (a provider bug must not reach the controller as a valid
//! answer), the client refuses to act on one (the provider may not use this
//! SDK).

use super::{
    Checked, MAX_ADDITIONAL_LABELS, MAX_NODE_ADDRESSES, label_value, labels, node_addresses,
    provider_id, violation,
};
use crate::proto::{GetProviderInfoResponse, InstanceMetadata, UnclassedServices, Warning};

/// Most providerID schemes one provider may own.
pub const MAX_PROVIDER_ID_SCHEMES: usize = 16;
/// Most `spec.loadBalancerClass` values one provider may serve (1.3.0).
pub const MAX_LOAD_BALANCER_CLASSES: usize = 32;
/// Most KEP-5778 platforms one provider may manage (1.3.0).
pub const MAX_PLATFORMS: usize = 16;
/// Most warnings about a Node one `InstanceMetadata` answer may carry; the
/// controller publishes no more.
pub const MAX_NODE_WARNINGS: usize = 16;
/// Longest Event reason the API server takes.
pub const MAX_REASON_BYTES: usize = 128;

/// A providerID scheme: the part before "://", so non-empty, without ':',
/// '/' or whitespace, at most a name long.
pub fn scheme(field: &str, value: &str) -> Checked {
    super::name(field, value)?;
    if value
        .chars()
        .any(|c| c == ':' || c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err(violation(
            field,
            format!("{value:?} is not a providerID scheme (the part before \"://\")"),
        ));
    }
    Ok(())
}

/// `provider_id_schemes` (1.2.0): empty, or valid schemes, none twice, at
/// most [`MAX_PROVIDER_ID_SCHEMES`], `provider_id_scheme` among them.
pub fn provider_id_schemes(info: &GetProviderInfoResponse) -> Checked {
    let schemes = &info.provider_id_schemes;
    if schemes.is_empty() {
        return Ok(());
    }
    list(
        "provider_id_schemes",
        schemes,
        MAX_PROVIDER_ID_SCHEMES,
        scheme,
    )?;
    if !schemes.contains(&info.provider_id_scheme) {
        return Err(violation(
            "provider_id_schemes",
            format!(
                "does not contain provider_id_scheme {:?}",
                info.provider_id_scheme
            ),
        ));
    }
    Ok(())
}

/// `load_balancer_classes` (1.3.0): valid classes, none twice, at most
/// [`MAX_LOAD_BALANCER_CLASSES`].
pub fn load_balancer_classes(info: &GetProviderInfoResponse) -> Checked {
    list(
        "load_balancer_classes",
        &info.load_balancer_classes,
        MAX_LOAD_BALANCER_CLASSES,
        super::load_balancer_class,
    )
}

/// `platforms` (1.3.0): DNS-1123 labels, none twice, at most
/// [`MAX_PLATFORMS`].
pub fn platforms(info: &GetProviderInfoResponse) -> Checked {
    list(
        "platforms",
        &info.platforms,
        MAX_PLATFORMS,
        super::dns_label,
    )
}

/// `unclassed_services` (1.3.0) holds a value of the contract. What a
/// provider must send; a receiver takes an unknown value as UNSPECIFIED
/// (docs/spec.md: a later minor version may add values), see
/// [`serves_unclassed`].
pub fn unclassed_services(info: &GetProviderInfoResponse) -> Checked {
    super::optional_enum::<UnclassedServices>("unclassed_services", info.unclassed_services)
}

/// The lists of a `GetProviderInfo`: `provider_id_schemes` (1.2.0),
/// `load_balancer_classes` and `platforms` (1.3.0). The client refuses a
/// handshake that breaks one, as the SDK's server refuses to send it.
pub fn identity_lists(info: &GetProviderInfoResponse) -> Checked {
    provider_id_schemes(info)?;
    load_balancer_classes(info)?;
    platforms(info)
}

/// Whether a provider serves LoadBalancer Services without a class when
/// the controller makes it the default: unless it DECLINES them.
/// UNSPECIFIED (every provider before 1.3.0) and an unknown value count as
/// SERVED.
pub fn serves_unclassed(info: &GetProviderInfoResponse) -> bool {
    info.unclassed_services != UnclassedServices::Declined as i32
}

/// Values, each checked by `check`, none twice, at most `max`.
fn list(field: &str, values: &[String], max: usize, check: fn(&str, &str) -> Checked) -> Checked {
    at_most(field, values.len(), max)?;
    for (i, v) in values.iter().enumerate() {
        super::lazily(|f| check(f, v), || format!("{field}[{i}]"))?;
        if values[..i].contains(v) {
            return Err(violation(
                format!("{field}[{i}]"),
                format!("{v:?} is listed twice"),
            ));
        }
    }
    Ok(())
}

/// The schemes a provider owns by its `GetProviderInfo`:
/// `provider_id_schemes`, or `provider_id_scheme` alone when that is empty.
pub fn owned_schemes(info: &GetProviderInfoResponse) -> Vec<&str> {
    if info.provider_id_schemes.is_empty() {
        vec![info.provider_id_scheme.as_str()]
    } else {
        info.provider_id_schemes
            .iter()
            .map(String::as_str)
            .collect()
    }
}

/// `(scheme, id)` of "<scheme>://<id>" with both non-empty.
pub fn split_provider_id(provider_id: &str) -> Option<(&str, &str)> {
    provider_id
        .split_once("://")
        .filter(|(s, id)| !s.is_empty() && !id.is_empty())
}

/// Whether `provider_id` is "<scheme>://<id>" with one of `schemes`.
pub fn is_owned_provider_id<S: AsRef<str>>(provider_id: &str, schemes: &[S]) -> bool {
    split_provider_id(provider_id).is_some_and(|(s, _)| schemes.iter().any(|o| o.as_ref() == s))
}

/// Whether `reason` is what Warning asks for: CamelCase (an ASCII capital,
/// then letters and digits), at most [`MAX_REASON_BYTES`].
pub fn is_warning_reason(reason: &str) -> bool {
    reason.len() <= MAX_REASON_BYTES
        && reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Warnings about a Node: at most [`MAX_NODE_WARNINGS`], each with a
/// CamelCase reason and a message.
pub fn node_warnings(field: &str, warnings: &[Warning]) -> Checked {
    at_most(field, warnings.len(), MAX_NODE_WARNINGS)?;
    for (i, w) in warnings.iter().enumerate() {
        if !is_warning_reason(&w.reason) {
            return Err(violation(
                format!("{field}[{i}].reason"),
                format!(
                    "{:?} is not a CamelCase reason of at most {MAX_REASON_BYTES} characters",
                    crate::error::bounded(&w.reason)
                ),
            ));
        }
        if w.message.is_empty() {
            return Err(violation(format!("{field}[{i}].message"), "is required"));
        }
    }
    Ok(())
}

/// An `InstanceMetadata`: a well-formed providerID if any (empty is allowed:
/// it is only needed for a Node that has none, which the controller checks),
/// label-safe values (instance type, zone and region become labels on the
/// Node), parseable addresses, valid extra labels, and no more addresses
/// or labels than a Node can carry: every one is copied into the Node.
#[cfg_attr(
    not(any(feature = "client", feature = "server")),
    allow(dead_code, reason = "used by the client and the server only")
)]
pub(crate) fn instance_metadata(m: &InstanceMetadata) -> Checked {
    if !m.provider_id.is_empty() {
        provider_id("metadata.provider_id", &m.provider_id)?;
    }
    label_value("metadata.instance_type", &m.instance_type)?;
    label_value("metadata.zone", &m.zone)?;
    label_value("metadata.region", &m.region)?;
    at_most(
        "metadata.node_addresses",
        m.node_addresses.len(),
        MAX_NODE_ADDRESSES,
    )?;
    at_most(
        "metadata.additional_labels",
        m.additional_labels.len(),
        MAX_ADDITIONAL_LABELS,
    )?;
    node_addresses("metadata.node_addresses", &m.node_addresses)?;
    labels("metadata.additional_labels", &m.additional_labels)?;
    Ok(())
}

fn at_most(field: &str, count: usize, max: usize) -> Checked {
    if count > max {
        return Err(violation(
            field,
            format!("has {count} entries, more than {max}"),
        ));
    }
    Ok(())
}
