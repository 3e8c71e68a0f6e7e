//! ZonesService: a node's zone and region, by providerID or by name.

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::proto::{Capability, GetZoneByNodeNameRequest, GetZoneByProviderIdRequest, Zone};
use crate::validate::{self, Checked};

fn read() -> Rpc {
    Rpc::read().needs(Capability::Zones)
}

impl ProviderClient {
    pub async fn zone_by_provider_id(&self, provider_id: &str) -> Result<Zone, ClientError> {
        let request = GetZoneByProviderIdRequest {
            provider_id: provider_id.to_owned(),
        };
        self.call(read(), request, |r| check_zone(r.zone)).await
    }

    pub async fn zone_by_node_name(&self, node_name: &str) -> Result<Zone, ClientError> {
        let request = GetZoneByNodeNameRequest {
            node_name: node_name.to_owned(),
        };
        self.call(read(), request, |r| check_zone(r.zone)).await
    }
}

/// A zone answer: present, and both values usable as label values (they
/// become topology labels).
fn check_zone(zone: Option<Zone>) -> Checked<Zone> {
    let z = validate::required("zone", &zone)?;
    validate::label_value("zone.failure_domain", &z.failure_domain)?;
    validate::label_value("zone.region", &z.region)?;
    Ok(z.clone())
}
