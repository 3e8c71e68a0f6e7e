//! What a Node and a metrics answer say: which cloud initialised the Node,
//! a series' value.

use super::*;

/// Which cloud initialised a Node, read from the Node alone.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum InitialisedBy {
    Upstream,
    Ours,
}

/// Fails unless `n` is initialised and everything on it comes from one
/// cloud, which it names.
pub(super) fn initialised_by(n: &Node) -> Result<InitialisedBy, String> {
    let name = n.metadata.name.clone().unwrap_or_default();
    if has_taint(n, UNINITIALIZED) {
        return Err(format!("{name} still tainted"));
    }
    let pid = n
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    let label = |k: &str| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k).cloned())
            .unwrap_or_default()
    };
    let ip = n
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_default();
    let facts = (
        pid.as_str(),
        label("node.kubernetes.io/instance-type"),
        label("topology.kubernetes.io/zone"),
    );
    if facts
        == (
            &format!("fake://{name}")[..],
            "fake.medium".into(),
            "fake-zone-a".into(),
        )
        && ip.starts_with("10.0.0.")
    {
        Ok(InitialisedBy::Upstream)
    } else if facts
        == (
            &format!("fake://ccmrs-{name}")[..],
            "ccmrs.small".into(),
            "ccmrs-zone-b".into(),
        )
        && ip.starts_with("10.77.0.")
    {
        Ok(InitialisedBy::Ours)
    } else {
        Err(format!(
            "{name}: a mix of both clouds or neither: providerID {pid:?}, labels {:?}, InternalIP {ip:?}",
            n.metadata.labels
        ))
    }
}

/// The value of the first sample of `series` (name and labels as printed)
/// in a Prometheus text answer.
pub(super) fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}
