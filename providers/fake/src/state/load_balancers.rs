//! Load balancers: options from a Service's annotations, an address from
//! the pool, shared backend lists.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ccm_provider_sdk::proto::{
    LoadBalancerIngress, LoadBalancerStatus, PortStatus, Protocol, Service, TrafficPolicy, Warning,
};
use ccm_provider_sdk::{
    LbAnswer, LoadBalancerEntry, NodeSet, ProviderError, ProviderResult,
    cluster_scoped_load_balancer_name,
};
use serde::{Deserialize, Serialize};

use super::{
    ANNOTATION_HEALTH_CHECK_PATH, ANNOTATION_IMPLEMENTED_ELSEWHERE, ANNOTATION_INTERNAL,
    ANNOTATION_PREFIX, State, key,
};

/// One port of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbPort {
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub port: i32,
    pub node_port: i32,
}

/// Node names receiving traffic, sorted. Load balancers given the same
/// nodes share one list: 1,000 load balancers over the same 1,000 Nodes
/// hold one copy of the names, not a million.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "Vec<String>", into = "Vec<String>")]
pub struct Backends(pub(super) Arc<[String]>);

impl From<Vec<String>> for Backends {
    fn from(names: Vec<String>) -> Self {
        Backends(names.into())
    }
}

impl From<Backends> for Vec<String> {
    fn from(b: Backends) -> Self {
        b.0.to_vec()
    }
}

impl std::ops::Deref for Backends {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.0
    }
}

impl PartialEq for Backends {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl PartialEq<Vec<String>> for Backends {
    fn eq(&self, other: &Vec<String>) -> bool {
        *self.0 == **other
    }
}

impl<const N: usize> PartialEq<[&str; N]> for Backends {
    fn eq(&self, other: &[&str; N]) -> bool {
        self.0.len() == N && self.0.iter().zip(other).all(|(a, b)| a == b)
    }
}

/// A load balancer as the cloud knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadBalancer {
    pub cluster_name: String,
    pub service_uid: String,
    pub service_namespace: String,
    pub service_name: String,
    /// The cloud name (`cluster_scoped_load_balancer_name`).
    pub name: String,
    pub ip: Ipv4Addr,
    pub ports: Vec<LbPort>,
    pub backends: Backends,
    pub source_ranges: Vec<String>,
    pub internal: bool,
    pub health_check_path: Option<String>,
    /// The Service's annotations under [`ANNOTATION_PREFIX`].
    pub annotations: BTreeMap<String, String>,
    /// Bumped on every change, so tests can tell an idempotent call (no
    /// bump) from a rewrite that happened to produce the same state.
    pub generation: u64,
}

impl LoadBalancer {
    fn status(&self) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: self.ip.to_string(),
                ports: self
                    .ports
                    .iter()
                    .map(|p| PortStatus {
                        port: p.port,
                        protocol: protocol_from_name(&p.protocol) as i32,
                        error: String::new(),
                    })
                    .collect(),
                ..Default::default()
            }],
        }
    }
}

/// The parsed load balancer options of a Service.
struct LbOptions {
    internal: bool,
    health_check_path: Option<String>,
    annotations: BTreeMap<String, String>,
}

fn lb_options(service: &Service) -> ProviderResult<(LbOptions, Vec<Warning>)> {
    let mut warnings = Vec::new();
    let mut internal = false;
    let mut health_check_path = None;
    let mut annotations = BTreeMap::new();
    for (key, value) in &service.annotations {
        if !key.starts_with(ANNOTATION_PREFIX) {
            continue;
        }
        annotations.insert(key.clone(), value.clone());
        match key.as_str() {
            ANNOTATION_INTERNAL => {
                internal = match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(ProviderError::invalid_annotation(
                            key,
                            format!("{value:?} is not \"true\" or \"false\""),
                        ));
                    }
                }
            }
            ANNOTATION_HEALTH_CHECK_PATH => {
                if !value.starts_with('/') {
                    return Err(ProviderError::invalid_annotation(
                        key,
                        format!("{value:?} is not an absolute path (must start with \"/\")"),
                    ));
                }
                health_check_path = Some(value.clone());
            }
            // Unknown keys are the controller's to report: the fake
            // declares its keys in its annotation schema.
            _ => {}
        }
    }
    if health_check_path.is_some() && service.external_traffic_policy != TrafficPolicy::Local as i32
    {
        warnings.push(Warning {
            reason: "HealthCheckPathIgnored".to_owned(),
            message: format!(
                "{ANNOTATION_HEALTH_CHECK_PATH} is only used with externalTrafficPolicy: Local; \
                 with Cluster every node answers for every Service"
            ),
        });
    }
    for (i, p) in service.ports.iter().enumerate() {
        if p.protocol == Protocol::Sctp as i32 {
            return Err(ProviderError::invalid_service_spec(
                format!("spec.ports[{i}].protocol"),
                "the fake cloud's load balancers do not support SCTP",
            ));
        }
    }
    // HashMap iteration order must not leak into the answer.
    warnings.sort_by(|a, b| a.message.cmp(&b.message));
    Ok((
        LbOptions {
            internal,
            health_check_path,
            annotations,
        },
        warnings,
    ))
}

fn protocol_name(p: i32) -> String {
    Protocol::try_from(p)
        .map(|p| {
            p.as_str_name()
                .strip_prefix("PROTOCOL_")
                .unwrap_or("UNSPECIFIED")
                .to_owned()
        })
        .unwrap_or_else(|_| p.to_string())
}

fn protocol_from_name(name: &str) -> Protocol {
    Protocol::from_str_name(&format!("PROTOCOL_{name}")).unwrap_or(Protocol::Unspecified)
}

impl State {
    fn elsewhere(&self, service: &Service) -> Option<String> {
        if service
            .annotations
            .get(ANNOTATION_IMPLEMENTED_ELSEWHERE)
            .is_some_and(|v| v == "true")
        {
            return Some(format!(
                "{ANNOTATION_IMPLEMENTED_ELSEWHERE}: another controller owns this load balancer"
            ));
        }
        let class = service.load_balancer_class.as_ref()?;
        self.config
            .implemented_elsewhere_classes
            .contains(class)
            .then(|| format!("load balancer class {class} is handled by another controller"))
    }

    /// The address for a Service's load balancer, without taking it yet:
    /// the requested `loadBalancerIP`, else the current one, else the one
    /// the Service's status already shows (stable across fake restarts),
    /// else the lowest free one.
    fn choose_ip(&self, service: &Service, current: Option<Ipv4Addr>) -> ProviderResult<Ipv4Addr> {
        if !service.load_balancer_ip.is_empty() {
            let ip = match service.load_balancer_ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(ip)) => ip,
                _ => {
                    return Err(ProviderError::invalid_service_spec(
                        "spec.loadBalancerIP",
                        "the fake cloud only has IPv4 addresses",
                    ));
                }
            };
            if Some(ip) == current {
                return Ok(ip);
            }
            if !self.pool.contains(ip) {
                return Err(ProviderError::invalid_service_spec(
                    "spec.loadBalancerIP",
                    format!("{ip} is not in the pool {}", self.config.lb_ip_pool),
                ));
            }
            if !self.pool.is_free(ip) {
                return Err(ProviderError::conflicting_resource(format!(
                    "{ip} is in use by another load balancer"
                )));
            }
            return Ok(ip);
        }
        if let Some(ip) = current {
            return Ok(ip);
        }
        let from_status = service
            .status
            .iter()
            .flat_map(|s| &s.ingress)
            .filter_map(|i| i.ip.parse::<Ipv4Addr>().ok())
            .find(|ip| self.pool.is_free(*ip));
        if let Some(ip) = from_status {
            return Ok(ip);
        }
        self.pool.lowest_free().ok_or_else(|| {
            ProviderError::quota_exceeded(format!(
                "no free load balancer address in {}",
                self.config.lb_ip_pool
            ))
        })
    }

    pub(crate) fn ensure_lb(
        &mut self,
        cluster: &str,
        service: &Service,
        nodes: &NodeSet,
    ) -> ProviderResult<LbAnswer<LoadBalancerStatus>> {
        if let Some(message) = self.elsewhere(service) {
            return Ok(LbAnswer::implemented_elsewhere(message));
        }
        let (options, warnings) = lb_options(service)?;
        let k = key(cluster, &service.uid);
        let backends = self.backends(nodes);
        let existing = self.lbs.get(&k);
        let ip = self.choose_ip(service, existing.map(|lb| lb.ip))?;
        let generation = existing.map_or(0, |lb| lb.generation);
        let mut lb = LoadBalancer {
            cluster_name: cluster.to_owned(),
            service_uid: service.uid.clone(),
            service_namespace: service.namespace.clone(),
            service_name: service.name.clone(),
            name: cluster_scoped_load_balancer_name(cluster, &service.uid),
            ip,
            ports: service
                .ports
                .iter()
                .map(|p| LbPort {
                    name: p.name.clone(),
                    protocol: protocol_name(p.protocol),
                    port: p.port,
                    node_port: p.node_port,
                })
                .collect(),
            backends,
            source_ranges: service.load_balancer_source_ranges.clone(),
            internal: options.internal,
            health_check_path: options.health_check_path,
            annotations: options.annotations,
            generation,
        };
        if existing != Some(&lb) {
            self.dirty = true;
            lb.generation += 1;
            if let Some(old) = existing.map(|e| e.ip)
                && old != ip
            {
                self.pool.release(old);
            }
            self.pool.take(ip);
        }
        let status = lb.status();
        self.lbs.insert(k, lb);
        Ok(LbAnswer {
            outcome: ccm_provider_sdk::LbOutcome::Done(status),
            warnings,
        })
    }

    /// A missing load balancer is an `INTERNAL` error, not a silent create:
    /// `UpdateLoadBalancer` only touches backends, and a cloud cannot update
    /// what does not exist. The message says what to do; the controller's
    /// next sync calls `EnsureLoadBalancer`, which recreates it.
    pub(crate) fn update_lb(
        &mut self,
        cluster: &str,
        service: &Service,
        nodes: &NodeSet,
    ) -> ProviderResult<LbAnswer<()>> {
        if let Some(message) = self.elsewhere(service) {
            return Ok(LbAnswer::implemented_elsewhere(message));
        }
        let wanted = self.backends(nodes);
        let lb = self.lbs.get_mut(&key(cluster, &service.uid)).ok_or_else(|| {
            ProviderError::not_found(format!(
                "load balancer {} for service {}/{} does not exist; EnsureLoadBalancer creates it",
                cluster_scoped_load_balancer_name(cluster, &service.uid),
                service.namespace,
                service.name
            ))
        })?;
        if lb.backends != wanted {
            lb.backends = wanted;
            lb.generation += 1;
            self.dirty = true;
        }
        Ok(LbAnswer::done(()))
    }

    /// The sorted, distinct names of `nodes`, sharing the last list handed
    /// out when they are the same.
    fn backends(&mut self, nodes: &NodeSet) -> Backends {
        // Most calls carry the set the last one did (the SDK hands a
        // PutNodeSet's set to every call naming it): no sort then. Ids, not
        // the nodes, are compared, and the nodes are read with `each()`:
        // the set the SDK keeps encoded is never decoded whole.
        if nodes.id() == self.last_nodes {
            return self.last_backends.clone();
        }
        nodes.id().clone_into(&mut self.last_nodes);
        let names: BTreeSet<String> = nodes.each().map(|n| n.name).collect();
        let same = names.len() == self.last_backends.len()
            && names
                .iter()
                .zip(self.last_backends.iter())
                .all(|(a, b)| a == b);
        if !same {
            self.last_backends = Backends(names.into_iter().collect::<Vec<_>>().into());
        }
        self.last_backends.clone()
    }

    pub(crate) fn delete_lb(&mut self, cluster: &str, service: &Service) {
        if let Some(lb) = self.lbs.remove(&key(cluster, &service.uid)) {
            self.pool.release(lb.ip);
            self.dirty = true;
        }
    }

    /// Removes a load balancer by its cloud name, as someone using the
    /// cloud's console would; whether it existed.
    pub(crate) fn remove_lb_by_name(&mut self, name: &str) -> bool {
        let Some(k) = self
            .lbs
            .iter()
            .find(|(_, lb)| lb.name == name)
            .map(|(k, _)| k.clone())
        else {
            return false;
        };
        if let Some(lb) = self.lbs.remove(&k) {
            self.pool.release(lb.ip);
            self.dirty = true;
        }
        true
    }

    pub(crate) fn get_lb(&self, cluster: &str, service: &Service) -> Option<LoadBalancerStatus> {
        self.lbs
            .get(&key(cluster, &service.uid))
            .map(LoadBalancer::status)
    }

    pub(crate) fn list_lbs(&self, cluster: &str) -> Vec<LoadBalancerEntry> {
        self.lbs
            .values()
            .filter(|lb| lb.cluster_name == cluster)
            .map(|lb| LoadBalancerEntry {
                name: lb.name.clone(),
                service_uid: lb.service_uid.clone(),
                service_namespace: lb.service_namespace.clone(),
                service_name: lb.service_name.clone(),
                status: Some(lb.status()),
            })
            .collect()
    }
}
