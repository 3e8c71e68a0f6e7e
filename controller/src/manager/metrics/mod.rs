//! Metrics the controller records. One registry for the process; the admin
//! server serves it in the Prometheus text format. Those computed at scrape
//! time are in [`scraped`].

pub mod scraped;

use std::time::Duration;

use ccm_provider_sdk::client::CallObserver;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub service: &'static str,
    pub method: &'static str,
    /// The canonical name (`OK`, `UNAVAILABLE`), as other languages' gRPC
    /// metrics spell it.
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub service: &'static str,
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub service: &'static str,
    pub method: &'static str,
    pub reason: &'static str,
}

/// The contract service an RPC belongs to, for the `service` label: its
/// `.proto` service without `Service`. Listed one by one (a name pattern
/// missed `PutNodeSet`); a test checks every RPC of the compiled contract.
pub fn service_of(method: &str) -> &'static str {
    match method {
        "GetProviderInfo" | "GetProviderCapabilities" | "Probe" => "Identity",
        "InstanceExists" | "InstanceShutdown" | "InstanceMetadata" => "Instances",
        "GetLoadBalancer"
        | "GetLoadBalancerName"
        | "EnsureLoadBalancer"
        | "UpdateLoadBalancer"
        | "EnsureLoadBalancerDeleted"
        | "ListLoadBalancers"
        | "PutNodeSet" => "LoadBalancer",
        "ListRoutes" | "CreateRoute" | "DeleteRoute" => "Routes",
        "GetZoneByProviderId" | "GetZoneByNodeName" => "Zones",
        "ListClusters" | "Master" => "Clusters",
        "GetVolumeLabels" => "Volumes",
        _ => "Unknown",
    }
}

/// Every provider call: `ccm_provider_request_duration_seconds{service,
/// method,code}`, `ccm_provider_requests_in_flight{service,method}` and
/// `ccm_provider_request_errors_total{service,method,reason}` (the
/// contract's reason, `NONE` without one).
#[derive(Clone)]
pub struct ProviderMetrics {
    pub requests: Family<RpcLabels, Histogram>,
    pub in_flight: Family<MethodLabels, Gauge>,
    pub errors: Family<ReasonLabels, Counter>,
}

impl ProviderMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<RpcLabels, Histogram>::new_with_constructor(|| {
            // 250 µs .. ~2 min: local reads to slow load balancer mutations.
            Histogram::new(exponential_buckets(0.00025, 2.5, 15))
        });
        registry.register(
            "ccm_provider_request_duration_seconds",
            "Duration of calls to the provider by contract service, RPC method and gRPC code",
            requests.clone(),
        );
        let in_flight = Family::<MethodLabels, Gauge>::default();
        registry.register(
            "ccm_provider_requests_in_flight",
            "Calls to the provider sent and not yet answered",
            in_flight.clone(),
        );
        let errors = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "ccm_provider_request_errors",
            "Failed calls to the provider by the contract's error reason",
            errors.clone(),
        );
        ProviderMetrics {
            requests,
            in_flight,
            errors,
        }
    }
}

impl CallObserver for ProviderMetrics {
    fn started(&self, method: &'static str) {
        self.in_flight
            .get_or_create(&MethodLabels {
                service: service_of(method),
                method,
            })
            .inc();
    }

    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        let service = service_of(method);
        self.in_flight
            .get_or_create(&MethodLabels { service, method })
            .dec();
        self.requests
            .get_or_create(&RpcLabels {
                service,
                method,
                code: ccm_provider_sdk::client::code_name(code),
            })
            .observe(elapsed.as_secs_f64());
    }

    fn failed(&self, method: &'static str, reason: Option<&'static str>) {
        self.errors
            .get_or_create(&ReasonLabels {
                service: service_of(method),
                method,
                reason: reason.unwrap_or("NONE"),
            })
            .inc();
    }
}

pub use ccm_runtime::metrics::{QueueLabels, QueueMetrics};

/// Upstream's controller metrics, where they apply.
#[derive(Clone)]
pub struct ControllerMetrics {
    pub queues: QueueMetrics,
    /// `service_controller_loadbalancer_sync_total`: UpdateLoadBalancer
    /// calls made for node changes.
    pub lb_syncs: Counter,
    /// `service_controller_nodesync_error_total`.
    pub nodesync_errors: Counter,
    /// `service_controller_nodesync_latency_seconds`: one backend pass.
    pub nodesync_latency: Histogram,
    /// `route_controller_route_sync_total`: route reconciles.
    pub route_syncs: Counter,
    /// `ccm_load_balancer_orphan_sweeps_total{result}`: passes of the
    /// orphan sweeper (`complete`, `failed`).
    pub orphan_sweeps: Family<SweepLabels, Counter>,
    /// `ccm_load_balancer_orphans_deleted_total`: load balancers of this
    /// cluster deleted because no Service wants them.
    pub orphans_deleted: Counter,
    /// `ccm_events_dropped_total`: Events not written because a
    /// controller's event queue was full.
    pub events_dropped: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SweepLabels {
    pub result: &'static str,
}

impl ControllerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = ControllerMetrics {
            queues: QueueMetrics::register(registry),
            lb_syncs: Counter::default(),
            nodesync_errors: Counter::default(),
            nodesync_latency: Histogram::new(exponential_buckets(1.0, 2.0, 15)),
            route_syncs: Counter::default(),
            orphan_sweeps: Family::default(),
            orphans_deleted: Counter::default(),
            events_dropped: Counter::default(),
        };
        // prometheus-client appends `_total` to counters.
        registry.register(
            "service_controller_loadbalancer_sync",
            "A metric counting the amount of times any load balancer has been configured, as an effect of service/node changes on the cluster",
            m.lb_syncs.clone(),
        );
        registry.register(
            "service_controller_nodesync_error",
            "A metric counting the amount of times any load balancer has been configured and errored, as an effect of node changes on the cluster",
            m.nodesync_errors.clone(),
        );
        registry.register(
            "service_controller_nodesync_latency_seconds",
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on cluster node updates",
            m.nodesync_latency.clone(),
        );
        registry.register(
            "route_controller_route_sync",
            "A metric counting the amount of times routes have been synced with the cloud provider",
            m.route_syncs.clone(),
        );
        registry.register(
            "ccm_load_balancer_orphan_sweeps",
            "Passes of the load balancer orphan sweeper by result (complete, failed)",
            m.orphan_sweeps.clone(),
        );
        registry.register(
            "ccm_load_balancer_orphans_deleted",
            "Load balancers of this cluster deleted because no Service wants them",
            m.orphans_deleted.clone(),
        );
        registry.register(
            "ccm_events_dropped",
            "Events not written because a controller's event queue was full",
            m.events_dropped.clone(),
        );
        m
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub name: String,
    pub manager: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    pub name: String,
}

/// Upstream's manager-level metrics: `running_managed_controllers{name,
/// manager}` (legacy controller names) and
/// `leader_election_master_status{name}`.
#[derive(Clone)]
pub struct ManagerMetrics {
    running: Family<ControllerLabels, Gauge>,
    leader: Family<LeaseLabels, Gauge>,
}

impl ManagerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let running = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "running_managed_controllers",
            "Indicates where instances of a controller are currently running",
            running.clone(),
        );
        let leader = Family::<LeaseLabels, Gauge>::default();
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            leader.clone(),
        );
        ManagerMetrics { running, leader }
    }

    pub fn set_running(&self, name: &str, running: bool) {
        self.running
            .get_or_create(&ControllerLabels {
                name: name.to_owned(),
                manager: "cloud-controller-manager",
            })
            .set(i64::from(running));
    }

    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.leader
            .get_or_create(&LeaseLabels {
                name: lease.to_owned(),
            })
            .set(i64::from(leading));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 25, finding 10: `PutNodeSet` was labelled `service="Unknown"`.
    /// Every RPC of the contract, read from the compiled proto, maps to its
    /// service (the `.proto` service name without `Service`).
    #[test]
    fn every_rpc_of_the_contract_maps_to_its_service() {
        use prost::Message;
        let set =
            prost_types::FileDescriptorSet::decode(ccm_provider_sdk::proto::FILE_DESCRIPTOR_SET)
                .unwrap();
        let mut wrong = Vec::new();
        let mut rpcs = 0;
        for file in &set.file {
            for service in &file.service {
                let name = service.name();
                let label = name.strip_suffix("Service").unwrap_or(name);
                for method in &service.method {
                    rpcs += 1;
                    let got = service_of(method.name());
                    if got != label {
                        wrong.push(format!("{}: {got}, not {label}", method.name()));
                    }
                }
            }
        }
        assert!(rpcs >= 20, "only {rpcs} RPCs in the descriptor set");
        assert!(wrong.is_empty(), "{wrong:#?}");
        assert_eq!(service_of("NoSuchRpc"), "Unknown");
    }

    #[test]
    fn provider_calls_are_recorded_by_method_and_code() {
        let mut registry = Registry::default();
        let m = ProviderMetrics::register(&mut registry);
        m.started("InstanceExists");
        m.observe("InstanceExists", tonic::Code::Ok, Duration::from_millis(1));
        m.started("InstanceExists");
        m.started("EnsureLoadBalancer");
        m.observe(
            "InstanceExists",
            tonic::Code::Unavailable,
            Duration::from_millis(2),
        );
        m.failed("InstanceExists", Some("CLOUD_UNAVAILABLE"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(r#"ccm_provider_request_duration_seconds_count{service="Instances",method="InstanceExists",code="OK"} 1"#), "{text}");
        assert!(text.contains(r#"code="UNAVAILABLE""#), "{text}");
        let c = ControllerMetrics::register(&mut registry);
        c.queues
            .processed("service", Duration::from_millis(3), true);
        c.queues
            .processed("service", Duration::from_millis(1), false);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"workqueue_adds_total{name="service"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"workqueue_retries_total{name="service"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"workqueue_work_duration_seconds_count{name="service"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"ccm_provider_requests_in_flight{service="LoadBalancer",method="EnsureLoadBalancer"} 1"#), "{text}");
        assert!(
            text.contains(
                r#"ccm_provider_requests_in_flight{service="Instances",method="InstanceExists"} 0"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"ccm_provider_request_errors_total{service="Instances",method="InstanceExists",reason="CLOUD_UNAVAILABLE"} 1"#), "{text}");
    }
}
