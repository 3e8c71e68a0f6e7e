//! `RoutesService`: each route is an entry in the kernel routing table
//! `--route-table`, `<pod CIDR> via <target Node's InternalIP>`, programmed
//! with netlink ([`crate::netlink`]).
//!
//! The provider records every route it created (and saves the record), so
//! a restart puts them back and only its own entries are ever listed or
//! deleted. A recorded route the kernel no longer has (someone ran
//! `ip route flush`) is left out of ListRoutes, so the controller creates
//! it again.

use std::net::IpAddr;

use ccm_provider_sdk::proto::Route;
use ccm_provider_sdk::{CallContext, ProviderError, ProviderResult, Routes};

use crate::cloud::LocalCloud;
use crate::inventory::reachable_ip_where;
use crate::state::{AddressRecord, RouteRecord};

impl LocalCloud {
    fn kernel(&self) -> ProviderResult<&crate::netlink::KernelRoutes> {
        self.kernel
            .as_deref()
            .ok_or_else(|| ProviderError::unimplemented("routes: no --route-table configured"))
    }

    /// Where traffic for the route goes: the target's InternalIP (else
    /// ExternalIP) of the destination's family, as the controller sent it,
    /// else from the inventory.
    fn gateway(&self, route: &Route) -> ProviderResult<IpAddr> {
        let v4 = !route.destination_cidr.contains(':');
        let same_family = |ip: &IpAddr| ip.is_ipv4() == v4;
        reachable_ip_where(&route.target_node_addresses, same_family)
            .or_else(|| {
                self.inventory
                    .machines()
                    .by_node(&route.target_node)
                    .and_then(|i| reachable_ip_where(&i.addresses, same_family))
            })
            .ok_or_else(|| {
                ProviderError::invalid_request(
                    "route.target_node_addresses",
                    format!(
                        "node {:?} has no InternalIP or ExternalIP of the family of {}",
                        route.target_node, route.destination_cidr
                    ),
                )
            })
    }
}

impl RouteRecord {
    /// The route as listed: with the target_node_addresses it was created
    /// with, as the contract asks of a provider with
    /// CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES.
    fn to_proto(&self) -> Route {
        Route {
            name: self.name.clone(),
            target_node: self.target_node.clone(),
            target_node_addresses: self
                .target_node_addresses
                .iter()
                .map(AddressRecord::to_proto)
                .collect(),
            destination_cidr: self.destination.clone(),
            blackhole: false,
        }
    }
}

impl Routes for LocalCloud {
    async fn list_routes(
        &self,
        _: CallContext,
        cluster_name: String,
    ) -> ProviderResult<Vec<Route>> {
        let kernel = self.kernel()?;
        let world = self.world.lock().await;
        let programmed = kernel
            .list()
            .await
            .map_err(|e| ProviderError::cloud_unavailable(e.to_string(), None))?;
        Ok(world
            .routes
            .values()
            .filter(|r| r.cluster == cluster_name)
            .filter(|r| {
                programmed
                    .iter()
                    .any(|k| k.destination_cidr() == r.destination && k.gateway == Some(r.gateway))
            })
            .map(RouteRecord::to_proto)
            .collect())
    }

    async fn create_route(
        &self,
        ctx: CallContext,
        cluster_name: String,
        name_hint: String,
        route: Route,
    ) -> ProviderResult<Route> {
        let kernel = self.kernel()?;
        let gateway = self.gateway(&route)?;
        let mut world = self.world.lock().await;
        world.admit(&cluster_name, &ctx)?;
        let key = (cluster_name.clone(), route.destination_cidr.clone());
        if let Some(existing) = world.routes.get(&key)
            && existing.target_node != route.target_node
        {
            return Err(ProviderError::conflicting_resource(format!(
                "{} is routed to node {}",
                route.destination_cidr, existing.target_node
            )));
        }
        kernel
            .replace(&route.destination_cidr, gateway)
            .await
            .map_err(|e| ProviderError::cloud_unavailable(e.to_string(), None))?;
        // Same destination and node: updated in place (`ip route replace`
        // moves the gateway atomically), so the CIDR is never unrouted.
        let record = RouteRecord {
            cluster: cluster_name,
            name: name_hint,
            destination: route.destination_cidr.clone(),
            target_node: route.target_node.clone(),
            gateway,
            target_node_addresses: route
                .target_node_addresses
                .iter()
                .map(AddressRecord::from_proto)
                .collect(),
        };
        let previous = world.routes.insert(key.clone(), record.clone());
        if let Err(e) = self.save(&world) {
            match previous {
                Some(p) => world.routes.insert(key, p),
                None => world.routes.remove(&key),
            };
            return Err(e);
        }
        tracing::info!(destination = %record.destination, %gateway, table = kernel.table(), "route programmed");
        Ok(record.to_proto())
    }

    async fn delete_route(
        &self,
        ctx: CallContext,
        cluster_name: String,
        route: Route,
    ) -> ProviderResult<()> {
        let kernel = self.kernel()?;
        let mut world = self.world.lock().await;
        world.admit(&cluster_name, &ctx)?;
        let key = (cluster_name, route.destination_cidr.clone());
        if !world.routes.contains_key(&key) {
            return Ok(());
        }
        kernel
            .delete(&route.destination_cidr)
            .await
            .map_err(|e| ProviderError::cloud_unavailable(e.to_string(), None))?;
        let record = world.routes.remove(&key);
        if let Err(e) = self.save(&world) {
            if let Some(r) = record {
                world.routes.insert(key, r);
            }
            return Err(e);
        }
        tracing::info!(destination = %route.destination_cidr, table = kernel.table(), "route deleted");
        Ok(())
    }

    fn uses_target_node_addresses(&self) -> bool {
        true
    }
}
