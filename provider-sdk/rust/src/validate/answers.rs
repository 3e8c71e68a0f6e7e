//! What both sides check of a provider's answers: the server refuses to send
//! an invalid one (a provider bug must not reach the controller as a valid
//! answer), the client refuses to act on one (the provider may not use this
//! SDK).

use super::{
    Checked, MAX_ADDITIONAL_LABELS, MAX_NODE_ADDRESSES, label_value, labels, node_addresses,
    provider_id, violation,
};
use crate::proto::InstanceMetadata;

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
