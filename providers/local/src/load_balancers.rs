//! `LoadBalancerService`: a load balancer is an L4 proxy ([`crate::proxy`])
//! listening on an address from the VIP range, one listener per Service
//! port, forwarding to the ingress Nodes' `InternalIP:nodePort`.
//!
//! Identity is `(cluster, uid)`, as the contract says; the name comes from
//! `--lb-name-template` (default `${CLUSTER_ID}-${NAMESPACE}-${SERVICE_NAME}`)
//! and the uid is recorded beside it, so a name still held by a load
//! balancer of an older uid is refused rather than taken over (see
//! docs/spec.md §4).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use ccm_provider_sdk::NodeSet;
use ccm_provider_sdk::proto::{
    self, LoadBalancerIngress, LoadBalancerStatus, NodeRef, Service, SessionAffinity,
    TrafficPolicy, Warning,
};
use ccm_provider_sdk::{
    CallContext, LbAnswer, LoadBalancerEntry, LoadBalancers, ProviderError, ProviderResult,
};

use crate::annotations;
use crate::cloud::{LocalCloud, World};
use crate::inventory::reachable_ip;
use crate::proxy::{self as px, LoadBalancerProxy};
use crate::state::{BackendRecord, LbRecord, ListenerRecord, Protocol};

/// The default of `--lb-name-template`: names as a console shows them.
pub const DEFAULT_NAME_TEMPLATE: &str = "${CLUSTER_ID}-${NAMESPACE}-${SERVICE_NAME}";

/// Kubernetes' default ClientIP affinity timeout (3 hours).
const DEFAULT_AFFINITY_SECONDS: u32 = 10_800;

/// The name `template` gives a Service: lower-case letters, digits and
/// `-`, at most 63 characters; a longer one is cut and ends in 8 hex digits
/// of a hash of the whole name, so two long names stay apart.
pub fn load_balancer_name(template: &str, cluster: &str, service: &Service) -> String {
    let full = template
        .replace("${CLUSTER_ID}", cluster)
        .replace("${NAMESPACE}", &service.namespace)
        .replace("${SERVICE_NAME}", &service.name)
        .replace("${SERVICE_UID}", &service.uid);
    let mut name: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if name.len() > 63 {
        // FNV-1a: stable across builds and platforms, unlike std's hasher.
        let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        name.truncate(54);
        name.push_str(&format!("-{:08x}", hash as u32));
    }
    name
}

/// The proxy configuration a record describes.
pub fn proxy_config(lb: &LbRecord) -> px::ProxyConfig {
    px::ProxyConfig {
        vip: lb.vip,
        listeners: lb
            .listeners
            .iter()
            .map(|l| px::Listener {
                protocol: match l.protocol {
                    Protocol::Tcp => px::Protocol::Tcp,
                    Protocol::Udp => px::Protocol::Udp,
                },
                port: l.port,
                node_port: l.node_port,
            })
            .collect(),
        backends: lb.backends.iter().map(|b| b.ip).collect(),
        source_ranges: lb
            .source_ranges
            .iter()
            .filter_map(|c| c.parse::<px::IpNet>().ok())
            .collect(),
        session_affinity: lb
            .affinity_timeout_seconds
            .map(|s| Duration::from_secs(u64::from(s))),
        health_check: match lb.health_check_node_port {
            Some(port) => px::HealthCheck::Http {
                port,
                path: "/healthz".to_owned(),
            },
            None => px::HealthCheck::Tcp,
        },
        health_interval: Duration::from_millis(lb.health_interval_ms),
        health_timeout: Duration::from_millis(lb.health_timeout_ms),
        unhealthy_threshold: lb.unhealthy_threshold,
        max_qps: lb.max_qps,
        idle_timeout: Duration::from_millis(lb.idle_timeout_ms),
    }
}

fn status(vip: IpAddr) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: vec![LoadBalancerIngress {
            ip: vip.to_string(),
            ..Default::default()
        }],
    }
}

fn port_of(field: &str, value: i32) -> ProviderResult<u16> {
    u16::try_from(value)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ProviderError::invalid_service_spec(field, format!("{value} is not a port")))
}

impl LocalCloud {
    /// What the Service and Nodes ask for, without an address yet; the
    /// warnings are for the user (Nodes left out, and why).
    fn desired(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[NodeRef],
    ) -> ProviderResult<(LbRecord, Vec<Warning>)> {
        let settings = annotations::settings(service)?;
        let mut listeners = Vec::new();
        for (i, p) in service.ports.iter().enumerate() {
            let protocol = match proto::Protocol::try_from(p.protocol) {
                Ok(proto::Protocol::Tcp) => Protocol::Tcp,
                Ok(proto::Protocol::Udp) => Protocol::Udp,
                _ => {
                    return Err(ProviderError::invalid_service_spec(
                        format!("spec.ports[{i}].protocol"),
                        "the local provider balances TCP and UDP only",
                    ));
                }
            };
            if p.node_port == 0 {
                return Err(ProviderError::invalid_service_spec(
                    format!("spec.ports[{i}].nodePort"),
                    "the local provider forwards to nodePorts; allocateLoadBalancerNodePorts: false is not supported",
                ));
            }
            listeners.push(ListenerRecord {
                protocol,
                port: port_of(&format!("spec.ports[{i}].port"), p.port)?,
                node_port: port_of(&format!("spec.ports[{i}].nodePort"), p.node_port)?,
            });
        }
        let mut warnings = Vec::new();
        let mut backends = Vec::new();
        let inventory = self.inventory.machines();
        for n in nodes {
            if let Some(selector) = &self.config.ingress_selector
                && !selector.matches(&n.labels)
            {
                continue;
            }
            let ip = reachable_ip(&n.addresses).or_else(|| {
                inventory
                    .find(&n.provider_id, &n.name)
                    .and_then(|i| i.reachable_ip())
            });
            match ip {
                Some(ip) => backends.push(BackendRecord {
                    node: n.name.clone(),
                    ip,
                }),
                None => warnings.push(Warning {
                    reason: "BackendWithoutAddress".into(),
                    message: format!(
                        "node {} has no InternalIP or ExternalIP; it gets no traffic",
                        n.name
                    ),
                }),
            }
        }
        if backends.is_empty()
            && !nodes.is_empty()
            && let Some(selector) = &self.config.ingress_selector
        {
            warnings.push(Warning {
                reason: "NoIngressNodes".into(),
                message: format!(
                    "none of the {} nodes has the ingress label {selector}; the load balancer has no backends",
                    nodes.len()
                ),
            });
        }
        let local = service.external_traffic_policy == TrafficPolicy::Local as i32;
        let record = LbRecord {
            cluster: cluster.to_owned(),
            uid: service.uid.clone(),
            namespace: service.namespace.clone(),
            service: service.name.clone(),
            name: load_balancer_name(&self.config.name_template, cluster, service),
            vip: IpAddr::from([0, 0, 0, 0]),
            listeners,
            backends,
            source_ranges: service.load_balancer_source_ranges.clone(),
            affinity_timeout_seconds: (service.session_affinity
                == SessionAffinity::ClientIp as i32)
                .then(|| {
                    service
                        .session_affinity_timeout_seconds
                        .and_then(|s| u32::try_from(s).ok())
                        .filter(|s| *s > 0)
                        .unwrap_or(DEFAULT_AFFINITY_SECONDS)
                }),
            health_check_node_port: if local {
                u16::try_from(service.health_check_node_port)
                    .ok()
                    .filter(|p| *p > 0)
            } else {
                None
            },
            max_qps: settings.max_qps,
            idle_timeout_ms: settings.idle_timeout.as_millis() as u64,
            health_interval_ms: settings.health_interval.as_millis() as u64,
            health_timeout_ms: settings.health_timeout.as_millis() as u64,
            unhealthy_threshold: settings.unhealthy_threshold,
        };
        Ok((record, warnings))
    }

    /// Makes the running proxy match `wanted` (address already chosen),
    /// then records and saves it. On failure nothing recorded changes.
    async fn apply(&self, world: &mut World, wanted: LbRecord) -> ProviderResult<()> {
        let key = (wanted.cluster.clone(), wanted.uid.clone());
        let config = proxy_config(&wanted);
        let running_same_vip = world
            .proxies
            .get(&key)
            .is_some_and(|p| p.config().vip == wanted.vip);
        if running_same_vip {
            let proxy = world.proxies.get(&key).expect("checked above");
            proxy.update(config).await.map_err(proxy_error)?;
        } else {
            if let Some(old) = world.proxies.remove(&key) {
                old.shutdown().await;
            }
            let proxy = LoadBalancerProxy::start(wanted.name.clone(), config)
                .await
                .map_err(proxy_error)?;
            world.proxies.insert(key.clone(), proxy);
        }
        let previous = world.lbs.insert(key.clone(), wanted);
        if let Err(e) = self.save(world) {
            // Keep memory and disk saying the same thing.
            match previous {
                Some(p) => {
                    world.lbs.insert(key, p);
                }
                None => {
                    world.lbs.remove(&key);
                    if let Some(proxy) = world.proxies.remove(&key) {
                        proxy.shutdown().await;
                    }
                }
            }
            return Err(e);
        }
        Ok(())
    }

    async fn ensure(
        &self,
        ctx: &CallContext,
        cluster: &str,
        service: &Service,
        nodes: &[NodeRef],
        create: bool,
    ) -> ProviderResult<LbAnswer<LoadBalancerStatus>> {
        let (mut wanted, warnings) = self.desired(cluster, service, nodes)?;
        let mut world = self.world.lock().await;
        world.admit(cluster, ctx)?;
        let key = (cluster.to_owned(), service.uid.clone());
        if let Some(holder) = world
            .lbs
            .values()
            .find(|lb| lb.name == wanted.name && (lb.cluster != cluster || lb.uid != service.uid))
        {
            return Err(ProviderError::conflicting_resource(format!(
                "load balancer {} still belongs to service {}/{} (uid {}) of cluster {}; it is deleted with that service",
                wanted.name, holder.namespace, holder.service, holder.uid, holder.cluster
            )));
        }
        wanted.vip = match world.lbs.get(&key) {
            Some(existing) => existing.vip,
            None if !create => {
                return Err(ProviderError::not_found(format!(
                    "load balancer {} for service {}/{} does not exist; EnsureLoadBalancer creates it",
                    wanted.name, service.namespace, service.name
                )));
            }
            None => {
                let used: BTreeSet<IpAddr> = world.lbs.values().map(|lb| lb.vip).collect();
                let wish = service.load_balancer_ip.parse().ok().or_else(|| {
                    service
                        .status
                        .as_ref()
                        .and_then(|s| s.ingress.first())
                        .and_then(|i| i.ip.parse().ok())
                });
                self.config.vips.allocate(&used, wish).ok_or_else(|| {
                    ProviderError::quota_exceeded(format!(
                        "every address of {} is in use",
                        self.config.vips
                    ))
                })?
            }
        };
        let vip = wanted.vip;
        let unchanged = world.lbs.get(&key) == Some(&wanted) && world.proxies.contains_key(&key);
        if !unchanged {
            self.apply(&mut world, wanted).await?;
        }
        Ok(LbAnswer {
            outcome: ccm_provider_sdk::LbOutcome::Done(status(vip)),
            warnings,
        })
    }
}

fn proxy_error(e: px::ProxyError) -> ProviderError {
    match e {
        px::ProxyError::Bind { addr, source } => ProviderError::cloud_unavailable(
            format!("binding {addr}: {source}"),
            Some(Duration::from_secs(5)),
        ),
        other => ProviderError::internal(other.to_string()),
    }
}

impl LoadBalancers for LocalCloud {
    async fn get_load_balancer(
        &self,
        _: CallContext,
        cluster_name: String,
        service: Service,
    ) -> ProviderResult<Option<LoadBalancerStatus>> {
        let world = self.world.lock().await;
        Ok(world
            .lbs
            .get(&(cluster_name, service.uid))
            .map(|lb| status(lb.vip)))
    }

    async fn get_load_balancer_name(
        &self,
        _: CallContext,
        cluster_name: String,
        service: Service,
    ) -> ProviderResult<String> {
        Ok(load_balancer_name(
            &self.config.name_template,
            &cluster_name,
            &service,
        ))
    }

    async fn ensure_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
        nodes: NodeSet,
    ) -> ProviderResult<LbAnswer<LoadBalancerStatus>> {
        self.ensure(&ctx, &cluster_name, &service, &nodes, true)
            .await
    }

    async fn update_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
        nodes: NodeSet,
    ) -> ProviderResult<LbAnswer<()>> {
        let answer = self
            .ensure(&ctx, &cluster_name, &service, &nodes, false)
            .await?;
        Ok(LbAnswer {
            outcome: ccm_provider_sdk::LbOutcome::Done(()),
            warnings: answer.warnings,
        })
    }

    async fn ensure_load_balancer_deleted(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
    ) -> ProviderResult<Vec<Warning>> {
        let mut world = self.world.lock().await;
        world.admit(&cluster_name, &ctx)?;
        let key = (cluster_name, service.uid);
        let Some(record) = world.lbs.remove(&key) else {
            return Ok(Vec::new());
        };
        if let Err(e) = self.save(&world) {
            world.lbs.insert(key, record);
            return Err(e);
        }
        if let Some(proxy) = world.proxies.remove(&key) {
            proxy.shutdown().await;
        }
        tracing::info!(name = %record.name, vip = %record.vip, "load balancer deleted; address freed");
        Ok(Vec::new())
    }

    async fn list_load_balancers(
        &self,
        _: CallContext,
        cluster_name: String,
    ) -> ProviderResult<Vec<LoadBalancerEntry>> {
        let world = self.world.lock().await;
        Ok(world
            .lbs
            .values()
            .filter(|lb| lb.cluster == cluster_name)
            .map(|lb| LoadBalancerEntry {
                name: lb.name.clone(),
                service_uid: lb.uid.clone(),
                service_namespace: lb.namespace.clone(),
                service_name: lb.service.clone(),
                status: Some(status(lb.vip)),
            })
            .collect())
    }

    fn supports_listing(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use ccm_provider_sdk::proto::{NodeAddress, NodeAddressType, Protocol as P, ServicePort};
    use ccm_provider_sdk::{FencingToken, LbOutcome};

    use super::*;
    use crate::cloud::{Config, LabelSelector};
    use crate::inventory::{Inventory, Machines};

    /// A cloud whose VIPs come from `range` (each test its own, so tests can
    /// run in parallel), with ingress nodes labelled `ingress=yes`.
    async fn cloud(range: &str) -> LocalCloud {
        let config = Config {
            vips: range.parse().unwrap(),
            ingress_selector: Some("ingress=yes".parse::<LabelSelector>().unwrap()),
            ..Config::default()
        };
        let machines = Machines::parse(
            "instances: [{node: from-inventory, addresses: [{type: InternalIP, address: 127.0.6.9}]}]",
        )
        .unwrap();
        LocalCloud::start(config, Inventory::fixed(machines))
            .await
            .unwrap()
    }

    fn node(name: &str, ip: Option<&str>, ingress: bool) -> NodeRef {
        NodeRef {
            name: name.into(),
            addresses: ip
                .map(|ip| NodeAddress {
                    r#type: NodeAddressType::InternalIp as i32,
                    address: ip.into(),
                })
                .into_iter()
                .collect(),
            labels: if ingress {
                HashMap::from([("ingress".to_owned(), "yes".to_owned())])
            } else {
                HashMap::new()
            },
            ..Default::default()
        }
    }

    fn lb_svc(name: &str, uid: &str) -> Service {
        Service {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
            ports: vec![ServicePort {
                protocol: P::Tcp as i32,
                port: 8080,
                node_port: 30080,
                ..Default::default()
            }],
            external_traffic_policy: TrafficPolicy::Cluster as i32,
            session_affinity: SessionAffinity::None as i32,
            ..Default::default()
        }
    }

    fn ctx(term: Option<u64>) -> CallContext {
        CallContext {
            fencing_token: term.map(|t| FencingToken::new(t, "holder")),
            ..Default::default()
        }
    }

    fn vip(answer: LbAnswer<LoadBalancerStatus>) -> String {
        match answer.outcome {
            LbOutcome::Done(s) => s.ingress[0].ip.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn the_service_decides_backends_health_checks_and_affinity() {
        let c = cloud("127.203.0.0/24").await;
        let mut s = lb_svc("web", "u1");
        s.external_traffic_policy = TrafficPolicy::Local as i32;
        s.health_check_node_port = 31000;
        s.session_affinity = SessionAffinity::ClientIp as i32;
        let nodes = [
            node("a", Some("127.0.6.1"), true),
            node("b", Some("127.0.6.2"), false),
            node("from-inventory", None, true),
            node("nowhere", None, true),
        ];
        let (lb, warnings) = c.desired("c", &s, &nodes).unwrap();
        let backends: Vec<(&str, String)> = lb
            .backends
            .iter()
            .map(|b| (b.node.as_str(), b.ip.to_string()))
            .collect();
        assert_eq!(
            backends,
            [
                ("a", "127.0.6.1".to_owned()),
                ("from-inventory", "127.0.6.9".to_owned())
            ],
            "only ingress nodes, at their InternalIP or the inventory's"
        );
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].reason, "BackendWithoutAddress");
        assert!(warnings[0].message.contains("nowhere"));
        assert_eq!(lb.health_check_node_port, Some(31000));
        assert_eq!(lb.affinity_timeout_seconds, Some(10_800));
        assert_eq!(lb.name, "c-ns-web");

        s.external_traffic_policy = TrafficPolicy::Cluster as i32;
        s.session_affinity_timeout_seconds = Some(60);
        let (lb, _) = c.desired("c", &s, &nodes).unwrap();
        assert_eq!(
            lb.health_check_node_port, None,
            "Cluster: TCP checks on the nodePort"
        );
        assert_eq!(lb.affinity_timeout_seconds, Some(60));

        let (_, warnings) = c
            .desired("c", &s, &[node("b", Some("127.0.6.2"), false)])
            .unwrap();
        assert_eq!(warnings[0].reason, "NoIngressNodes");
    }

    #[tokio::test]
    async fn what_it_cannot_serve_is_refused_naming_the_field() {
        let c = cloud("127.203.1.0/24").await;
        let mut sctp = lb_svc("web", "u1");
        sctp.ports[0].protocol = P::Sctp as i32;
        let err = c.desired("c", &sctp, &[]).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().contains("spec.ports[0].protocol"),
            "{}",
            err.message()
        );
        let mut no_node_port = lb_svc("web", "u1");
        no_node_port.ports[0].node_port = 0;
        let err = c.desired("c", &no_node_port, &[]).unwrap_err();
        assert!(
            err.message().contains("spec.ports[0].nodePort"),
            "{}",
            err.message()
        );
    }

    #[tokio::test]
    async fn names_held_by_an_older_uid_are_refused_and_addresses_kept() {
        let c = cloud("127.203.2.0/24").await;
        let nodes = [node("a", Some("127.0.6.1"), true)];
        let first = c
            .ensure(&ctx(None), "c", &lb_svc("web", "u1"), &nodes, true)
            .await
            .unwrap();
        assert_eq!(vip(first.clone()), "127.203.2.1");
        // Same Service again: same address, nothing restarted.
        let again = c
            .ensure(&ctx(None), "c", &lb_svc("web", "u1"), &nodes, true)
            .await
            .unwrap();
        assert_eq!(vip(again), "127.203.2.1");
        // A new Service of the same name while the old load balancer exists.
        let err = c
            .ensure(&ctx(None), "c", &lb_svc("web", "u2"), &nodes, true)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::AlreadyExists);
        assert!(err.message().contains("uid u1"), "{}", err.message());
        // Update never creates.
        let err = c
            .update_load_balancer(
                ctx(None),
                "c".into(),
                lb_svc("other", "u3"),
                nodes.to_vec().into(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
        c.ensure_load_balancer_deleted(ctx(None), "c".into(), lb_svc("web", "u1"))
            .await
            .unwrap();
        // A Service whose status names a free address of the range gets it.
        let mut wants = lb_svc("web", "u2");
        wants.status = Some(status("127.203.2.7".parse().unwrap()));
        let answer = c
            .ensure(&ctx(None), "c", &wants, &nodes, true)
            .await
            .unwrap();
        assert_eq!(vip(answer), "127.203.2.7");
        c.shutdown().await;
    }

    #[tokio::test]
    async fn a_superseded_leader_changes_nothing() {
        let c = cloud("127.203.3.0/24").await;
        let nodes = [node("a", Some("127.0.6.1"), true)];
        c.ensure(&ctx(Some(5)), "c", &lb_svc("web", "u1"), &nodes, true)
            .await
            .unwrap();
        let err = c
            .ensure_load_balancer_deleted(ctx(Some(4)), "c".into(), lb_svc("web", "u1"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert_eq!(err.newest_leader().map(|t| t.term), Some(5));
        let listed = c.list_load_balancers(ctx(None), "c".into()).await.unwrap();
        assert_eq!(listed.len(), 1, "the load balancer is still there");
        c.shutdown().await;
    }

    fn svc(ns: &str, name: &str) -> Service {
        Service {
            namespace: ns.into(),
            name: name.into(),
            uid: "0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11".into(),
            ..Default::default()
        }
    }

    #[test]
    fn names_follow_the_template_and_fit_63_characters() {
        assert_eq!(
            load_balancer_name(DEFAULT_NAME_TEMPLATE, "kubernetes", &svc("default", "web")),
            "kubernetes-default-web"
        );
        assert_eq!(
            load_balancer_name("lb-${SERVICE_UID}", "c", &svc("a", "b")),
            "lb-0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11"
        );
        assert_eq!(
            load_balancer_name(DEFAULT_NAME_TEMPLATE, "Prod_EU", &svc("a.b", "c")),
            "prod-eu-a-b-c"
        );
        let long = load_balancer_name(DEFAULT_NAME_TEMPLATE, "c", &svc("ns", &"x".repeat(80)));
        let other = load_balancer_name(DEFAULT_NAME_TEMPLATE, "c", &svc("ns", &"x".repeat(81)));
        assert_eq!(long.len(), 63);
        assert_ne!(long, other);
    }
}
