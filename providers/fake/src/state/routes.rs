//! Routes: one per destination CIDR and cluster; a blackhole once its
//! target instance is gone.

use ccm_provider_sdk::proto::{NodeRef, Route};
use ccm_provider_sdk::{ProviderError, ProviderResult};
use serde::{Deserialize, Serialize};

use super::{Address, State, key, not_found};

/// A route as the cloud knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteRecord {
    pub cluster_name: String,
    pub name: String,
    pub target_node: String,
    pub destination_cidr: String,
    /// The target_node_addresses of the route's latest CreateRoute, listed
    /// back as they came.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_node_addresses: Vec<Address>,
}

impl State {
    /// Creates a route to an existing instance. The name is derived from
    /// the hint *and* the CIDR, so a dual-stack node's two routes differ.
    pub(crate) fn create_route(
        &mut self,
        cluster: &str,
        name_hint: &str,
        route: &Route,
    ) -> ProviderResult<Route> {
        let k = key(cluster, &route.destination_cidr);
        let addresses: Vec<Address> = route
            .target_node_addresses
            .iter()
            .filter_map(Address::from_proto)
            .collect();
        if let Some(existing) = self.routes.get_mut(&k) {
            if existing.target_node == route.target_node {
                // The same node at other addresses: updated in place, as
                // the contract asks (the destination is never unrouted).
                if existing.target_node_addresses != addresses {
                    existing.target_node_addresses = addresses;
                    self.dirty = true;
                }
                let existing = existing.clone();
                return Ok(self.route_proto(&existing));
            }
            return Err(ProviderError::conflicting_resource(format!(
                "{} is already routed to node {} by route {}",
                route.destination_cidr, existing.target_node, existing.name
            )));
        }
        let target = NodeRef {
            name: route.target_node.clone(),
            ..Default::default()
        };
        if self.resolve(&target).is_none() {
            return Err(not_found(&route.target_node));
        }
        let cidr: String = route
            .destination_cidr
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let record = RouteRecord {
            cluster_name: cluster.to_owned(),
            name: format!("route-{name_hint}-{cidr}"),
            target_node: route.target_node.clone(),
            destination_cidr: route.destination_cidr.clone(),
            target_node_addresses: addresses,
        };
        let created = self.route_proto(&record);
        self.routes.insert(k, record);
        self.dirty = true;
        Ok(created)
    }

    pub(crate) fn delete_route(&mut self, cluster: &str, route: &Route) {
        if self
            .routes
            .remove(&key(cluster, &route.destination_cidr))
            .is_some()
        {
            self.dirty = true;
        }
    }

    /// A route is a blackhole when its target instance no longer exists.
    fn route_proto(&self, r: &RouteRecord) -> Route {
        Route {
            name: r.name.clone(),
            target_node: r.target_node.clone(),
            target_node_addresses: r
                .target_node_addresses
                .iter()
                .map(Address::to_proto)
                .collect(),
            destination_cidr: r.destination_cidr.clone(),
            blackhole: !self.instances.contains_key(&r.target_node),
        }
    }

    pub(crate) fn list_routes(&self, cluster: &str) -> Vec<Route> {
        self.routes
            .values()
            .filter(|r| r.cluster_name == cluster)
            .map(|r| self.route_proto(r))
            .collect()
    }
}
