//! Metrics the controller records. One registry for the process; the admin
//! server serves it in the Prometheus text format. Those computed at scrape
//! time are in [`scraped`].

pub mod scraped;

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::AtomicU64;

use ccm_provider_sdk::client::{CallObserver, Lane};
use parking_lot::Mutex;
use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Metric;
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
pub struct LaneLabels {
    pub service: &'static str,
    pub method: &'static str,
    /// The call budget's lane (`load_balancers`, `node_init`,
    /// `lifecycle`, `refresh`).
    pub lane: &'static str,
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
        "InstanceExists" | "InstanceShutdown" | "InstanceMetadata" | "BatchInstances" => {
            "Instances"
        }
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

/// `provider="NAME"` with several providers; nothing with one, whose
/// series keep the labels they always had (dashboards and the tests that
/// match them exactly).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct ProviderLabel(pub Option<Arc<str>>);

impl ProviderLabel {
    pub fn named(name: &str) -> Self {
        ProviderLabel(Some(name.into()))
    }
}

impl EncodeLabelSet for ProviderLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        match &self.0 {
            Some(p) => ("provider", p.as_ref()).encode(encoder.encode_label()),
            None => Ok(()),
        }
    }
}

/// Every provider call: `ccm_provider_request_duration_seconds{service,
/// method,code}`, `ccm_provider_requests_in_flight{service,method}` and
/// `ccm_provider_request_errors_total{service,method,reason}` (the
/// contract's reason, `NONE` without one); the call budget's
/// `ccm_provider_budget_wait_seconds{service,method,lane}` (budgeted calls
/// sent, and how long they waited for a token),
/// `ccm_provider_budget_exhausted_total{service,method,lane}` (not sent:
/// no token by the deadline) and
/// `ccm_provider_budget_holds_total{service,method}` with
/// `ccm_provider_budget_held_seconds_total` (throttling answers and the
/// holds they caused); each with `provider` too when there are several
/// ([`ProviderMetrics::for_provider`]). The budget's gauges are
/// [`scraped::CallBudgets`].
#[derive(Clone)]
pub struct ProviderMetrics {
    pub requests: Family<(RpcLabels, ProviderLabel), Histogram>,
    pub in_flight: Family<(MethodLabels, ProviderLabel), Gauge>,
    pub errors: Family<(ReasonLabels, ProviderLabel), Counter>,
    pub budget_waits: Family<(LaneLabels, ProviderLabel), Histogram>,
    pub budget_exhausted: Family<(LaneLabels, ProviderLabel), Counter>,
    pub budget_holds: Family<(MethodLabels, ProviderLabel), Counter>,
    pub budget_held_seconds: Family<ProviderLabel, Counter<f64, AtomicU64>>,
    provider: ProviderLabel,
}

impl ProviderMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests =
            Family::<(RpcLabels, ProviderLabel), Histogram>::new_with_constructor(|| {
                // 250 µs .. ~2 min: local reads to slow load balancer mutations.
                Histogram::new(exponential_buckets(0.00025, 2.5, 15))
            });
        registry.register(
            "ccm_provider_request_duration_seconds",
            "Duration of calls to the provider by contract service, RPC method and gRPC code",
            requests.clone(),
        );
        let in_flight = Family::<(MethodLabels, ProviderLabel), Gauge>::default();
        registry.register(
            "ccm_provider_requests_in_flight",
            "Calls to the provider sent and not yet answered",
            in_flight.clone(),
        );
        let errors = Family::<(ReasonLabels, ProviderLabel), Counter>::default();
        registry.register(
            "ccm_provider_request_errors",
            "Failed calls to the provider by the contract's error reason",
            errors.clone(),
        );
        let budget_waits =
            Family::<(LaneLabels, ProviderLabel), Histogram>::new_with_constructor(|| {
                // 0 (a token was there) and 1 ms .. ~4 min.
                let mut buckets = vec![0.0];
                buckets.extend(exponential_buckets(0.001, 4.0, 10));
                Histogram::new(buckets)
            });
        registry.register(
            "ccm_provider_budget_wait_seconds",
            "Time budgeted calls to the provider waited for a token of its call budget, by lane (counts every budgeted call sent)",
            budget_waits.clone(),
        );
        let budget_exhausted = Family::<(LaneLabels, ProviderLabel), Counter>::default();
        registry.register(
            "ccm_provider_budget_exhausted",
            "Calls to the provider not sent: no token of its call budget before the call's deadline",
            budget_exhausted.clone(),
        );
        let budget_holds = Family::<(MethodLabels, ProviderLabel), Counter>::default();
        registry.register(
            "ccm_provider_budget_holds",
            "Throttling answers (QUOTA_EXCEEDED or CLOUD_UNAVAILABLE with RetryInfo) that held the provider's call budget",
            budget_holds.clone(),
        );
        let budget_held_seconds = Family::<ProviderLabel, Counter<f64, AtomicU64>>::default();
        registry.register(
            "ccm_provider_budget_held_seconds",
            "Seconds of holds put on the provider's call budget by throttling answers (as clamped to 100ms..60s; overlapping holds add up)",
            budget_held_seconds.clone(),
        );
        ProviderMetrics {
            requests,
            in_flight,
            errors,
            budget_waits,
            budget_exhausted,
            budget_holds,
            budget_held_seconds,
            provider: ProviderLabel::default(),
        }
    }

    /// The same series, labelled `provider="NAME"`: one provider's calls
    /// when there are several.
    pub fn for_provider(&self, name: &str) -> Self {
        ProviderMetrics {
            provider: ProviderLabel::named(name),
            ..self.clone()
        }
    }
}

impl CallObserver for ProviderMetrics {
    fn started(&self, method: &'static str) {
        let labels = MethodLabels {
            service: service_of(method),
            method,
        };
        self.in_flight
            .get_or_create(&(labels, self.provider.clone()))
            .inc();
    }

    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        let service = service_of(method);
        self.in_flight
            .get_or_create(&(MethodLabels { service, method }, self.provider.clone()))
            .dec();
        let labels = RpcLabels {
            service,
            method,
            code: ccm_provider_sdk::client::code_name(code),
        };
        self.requests
            .get_or_create(&(labels, self.provider.clone()))
            .observe(elapsed.as_secs_f64());
    }

    fn failed(&self, method: &'static str, reason: Option<&'static str>) {
        let labels = ReasonLabels {
            service: service_of(method),
            method,
            reason: reason.unwrap_or("NONE"),
        };
        self.errors
            .get_or_create(&(labels, self.provider.clone()))
            .inc();
    }

    fn budget_waited(&self, method: &'static str, lane: Lane, waited: Duration) {
        let labels = LaneLabels {
            service: service_of(method),
            method,
            lane: lane.as_str(),
        };
        self.budget_waits
            .get_or_create(&(labels, self.provider.clone()))
            .observe(waited.as_secs_f64());
    }

    fn budget_exhausted(&self, method: &'static str, lane: Lane, _: Duration) {
        let labels = LaneLabels {
            service: service_of(method),
            method,
            lane: lane.as_str(),
        };
        self.budget_exhausted
            .get_or_create(&(labels, self.provider.clone()))
            .inc();
    }

    fn budget_held(&self, method: &'static str, delay: Duration) {
        let labels = MethodLabels {
            service: service_of(method),
            method,
        };
        self.budget_holds
            .get_or_create(&(labels, self.provider.clone()))
            .inc();
        self.budget_held_seconds
            .get_or_create(&self.provider)
            .inc_by(delay.as_secs_f64());
    }
}

pub use ccm_runtime::metrics::{QueueLabels, QueueMetrics};

/// `ccm_provider_instance_batch_size`: the questions of each
/// `BatchInstances` call the controller sent; its `_count` is the batches
/// sent, its `_sum` the questions they carried.
#[derive(Clone, Debug)]
pub struct BatchMetrics {
    pub sizes: Histogram,
}

fn batch_histogram() -> Histogram {
    // 1 .. 500, the contract's largest batch.
    Histogram::new([1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0])
}

impl Default for BatchMetrics {
    fn default() -> Self {
        BatchMetrics {
            sizes: batch_histogram(),
        }
    }
}

impl BatchMetrics {
    /// One batch of `questions` sent.
    pub fn observe(&self, questions: usize) {
        self.sizes.observe(questions as f64);
    }

    /// The batches counted, and the questions they carried.
    #[cfg(test)]
    pub fn sent(&self) -> (u64, f64) {
        let mut registry = Registry::default();
        registry.register("b", "", self.sizes.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |series: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(series))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_default()
        };
        (value("b_count ") as u64, value("b_sum "))
    }
}

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
    /// `ccm_provider_instance_batch_size`: batched instance questions.
    pub instance_batches: BatchMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SweepLabels {
    /// One of [`SWEEP_RESULTS`].
    pub result: &'static str,
}

/// Every `result` of `ccm_load_balancer_orphan_sweeps_total`. With several
/// providers the series are read per provider at scrape time, by these.
pub const SWEEP_RESULTS: [&str; 2] = ["complete", "failed"];

/// Registers [`ControllerMetrics`]' series under their names, as plain
/// metrics (one provider) or labelled by provider (several).
/// prometheus-client appends `_total` to counters.
#[allow(clippy::too_many_arguments)]
fn register_series<C: Metric, H: Metric, S: Metric>(
    registry: &mut Registry,
    lb_syncs: C,
    nodesync_errors: C,
    nodesync_latency: H,
    route_syncs: C,
    orphan_sweeps: S,
    orphans_deleted: C,
    events_dropped: C,
    instance_batches: H,
) {
    registry.register(
        "service_controller_loadbalancer_sync",
        "A metric counting the amount of times any load balancer has been configured, as an effect of service/node changes on the cluster",
        lb_syncs,
    );
    registry.register(
        "service_controller_nodesync_error",
        "A metric counting the amount of times any load balancer has been configured and errored, as an effect of node changes on the cluster",
        nodesync_errors,
    );
    registry.register(
        "service_controller_nodesync_latency_seconds",
        "A metric measuring the latency for nodesync which updates loadbalancer hosts on cluster node updates",
        nodesync_latency,
    );
    registry.register(
        "route_controller_route_sync",
        "A metric counting the amount of times routes have been synced with the cloud provider",
        route_syncs,
    );
    registry.register(
        "ccm_load_balancer_orphan_sweeps",
        "Passes of the load balancer orphan sweeper by result (complete, failed)",
        orphan_sweeps,
    );
    registry.register(
        "ccm_load_balancer_orphans_deleted",
        "Load balancers of this cluster deleted because no Service wants them",
        orphans_deleted,
    );
    registry.register(
        "ccm_events_dropped",
        "Events not written because a controller's event queue was full",
        events_dropped,
    );
    registry.register(
        "ccm_provider_instance_batch_size",
        "Questions per BatchInstances call sent to the provider (the count is the batches sent)",
        instance_batches,
    );
}

fn nodesync_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

impl ControllerMetrics {
    /// One set, without a `provider` label: the one provider's.
    pub fn register(registry: &mut Registry) -> Self {
        let m = ControllerMetrics {
            queues: QueueMetrics::register(registry),
            lb_syncs: Counter::default(),
            nodesync_errors: Counter::default(),
            nodesync_latency: nodesync_histogram(),
            route_syncs: Counter::default(),
            orphan_sweeps: Family::default(),
            orphans_deleted: Counter::default(),
            events_dropped: Counter::default(),
            instance_batches: BatchMetrics::default(),
        };
        register_series(
            registry,
            m.lb_syncs.clone(),
            m.nodesync_errors.clone(),
            m.nodesync_latency.clone(),
            m.route_syncs.clone(),
            m.orphan_sweeps.clone(),
            m.orphans_deleted.clone(),
            m.events_dropped.clone(),
            m.instance_batches.sizes.clone(),
        );
        m
    }
}

/// The controller metrics of every provider: with one, the unlabelled set
/// of [`ControllerMetrics::register`]; with several, the same series per
/// provider, labelled `provider="NAME"`. The work queues are told apart by
/// their names (`<queue>:<provider>`).
#[derive(Clone)]
pub enum ControllerMetricsByProvider {
    Single(ControllerMetrics),
    Hybrid(Box<LabelledControllerMetrics>),
}

/// [`ControllerMetrics`]' series with a `provider` label.
#[derive(Clone)]
pub struct LabelledControllerMetrics {
    queues: QueueMetrics,
    lb_syncs: Family<ProviderLabel, Counter>,
    nodesync_errors: Family<ProviderLabel, Counter>,
    nodesync_latency: Family<ProviderLabel, Histogram>,
    route_syncs: Family<ProviderLabel, Counter>,
    orphan_sweeps: ProviderSweeps,
    orphans_deleted: Family<ProviderLabel, Counter>,
    events_dropped: Family<ProviderLabel, Counter>,
    instance_batches: Family<ProviderLabel, Histogram>,
}

/// Each provider's `orphan_sweeps` family (its type is the one the
/// sweeper counts into), encoded as one family with a `provider` label.
#[derive(Clone, Debug, Default)]
pub struct ProviderSweeps(Arc<Mutex<Vec<(String, SweepFamily)>>>);

type SweepFamily = Family<SweepLabels, Counter>;

impl ProviderSweeps {
    fn of(&self, provider: &str) -> Family<SweepLabels, Counter> {
        let mut all = self.0.lock();
        if let Some((_, f)) = all.iter().find(|(p, _)| p == provider) {
            return f.clone();
        }
        let f = Family::default();
        all.push((provider.to_owned(), f.clone()));
        f
    }
}

impl EncodeMetric for ProviderSweeps {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        for (provider, family) in self.0.lock().iter() {
            for result in SWEEP_RESULTS {
                let Some(count) = family.get(&SweepLabels { result }).map(|c| c.get()) else {
                    continue;
                };
                let labels = [("result", result), ("provider", provider.as_str())];
                ConstCounter::new(count).encode(encoder.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

impl ControllerMetricsByProvider {
    /// Registers the set: labelled by provider when `hybrid`.
    pub fn register(registry: &mut Registry, hybrid: bool) -> Self {
        if !hybrid {
            return ControllerMetricsByProvider::Single(ControllerMetrics::register(registry));
        }
        let m = LabelledControllerMetrics {
            queues: QueueMetrics::register(registry),
            lb_syncs: Family::default(),
            nodesync_errors: Family::default(),
            nodesync_latency: Family::new_with_constructor(nodesync_histogram),
            route_syncs: Family::default(),
            orphan_sweeps: ProviderSweeps::default(),
            orphans_deleted: Family::default(),
            events_dropped: Family::default(),
            instance_batches: Family::new_with_constructor(batch_histogram),
        };
        register_series(
            registry,
            m.lb_syncs.clone(),
            m.nodesync_errors.clone(),
            m.nodesync_latency.clone(),
            m.route_syncs.clone(),
            m.orphan_sweeps.clone(),
            m.orphans_deleted.clone(),
            m.events_dropped.clone(),
            m.instance_batches.clone(),
        );
        ControllerMetricsByProvider::Hybrid(Box::new(m))
    }

    /// What the controllers working for `provider` count into (the same
    /// series every time it is asked).
    pub fn for_provider(&self, provider: &str) -> ControllerMetrics {
        match self {
            ControllerMetricsByProvider::Single(m) => m.clone(),
            ControllerMetricsByProvider::Hybrid(m) => {
                let l = ProviderLabel::named(provider);
                ControllerMetrics {
                    queues: m.queues.clone(),
                    lb_syncs: m.lb_syncs.get_or_create_owned(&l),
                    nodesync_errors: m.nodesync_errors.get_or_create_owned(&l),
                    nodesync_latency: m.nodesync_latency.get_or_create_owned(&l),
                    route_syncs: m.route_syncs.get_or_create_owned(&l),
                    orphan_sweeps: m.orphan_sweeps.of(provider),
                    orphans_deleted: m.orphans_deleted.get_or_create_owned(&l),
                    events_dropped: m.events_dropped.get_or_create_owned(&l),
                    instance_batches: BatchMetrics {
                        sizes: m.instance_batches.get_or_create_owned(&l),
                    },
                }
            }
        }
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
/// manager}` (legacy controller names; `provider` too with several) and
/// `leader_election_master_status{name}`.
#[derive(Clone)]
pub struct ManagerMetrics {
    running: Family<(ControllerLabels, ProviderLabel), Gauge>,
    leader: Family<LeaseLabels, Gauge>,
}

impl ManagerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let running = Family::<(ControllerLabels, ProviderLabel), Gauge>::default();
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

    /// `provider`: with several providers, whose instance of the
    /// controller `name` this is.
    pub fn set_running(&self, name: &str, provider: &ProviderLabel, running: bool) {
        let labels = ControllerLabels {
            name: name.to_owned(),
            manager: "cloud-controller-manager",
        };
        self.running
            .get_or_create(&(labels, provider.clone()))
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

    #[tokio::test]
    async fn the_call_budget_is_recorded_by_lane_and_method_and_its_state_scraped() {
        let mut registry = Registry::default();
        let m = ProviderMetrics::register(&mut registry).for_provider("cloud");
        m.budget_waited("InstanceMetadata", Lane::Refresh, Duration::from_millis(3));
        m.budget_exhausted("EnsureLoadBalancer", Lane::LoadBalancers, Duration::ZERO);
        m.budget_held("InstanceMetadata", Duration::from_secs(2));
        let client = ccm_provider_sdk::ProviderClient::connect_lazy(
            "unix:///nonexistent.sock",
            ccm_provider_sdk::ClientOptions {
                budget: Some(ccm_provider_sdk::client::CallBudget { qps: 5.0, burst: 7 }),
                ..Default::default()
            },
        )
        .unwrap();
        registry.register_collector(Box::new(scraped::CallBudgets(vec![(
            ProviderLabel::named("cloud"),
            client,
        )])));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"ccm_provider_budget_wait_seconds_count{service="Instances",method="InstanceMetadata",lane="refresh",provider="cloud"} 1"#,
            r#"ccm_provider_budget_exhausted_total{service="LoadBalancer",method="EnsureLoadBalancer",lane="load_balancers",provider="cloud"} 1"#,
            r#"ccm_provider_budget_holds_total{service="Instances",method="InstanceMetadata",provider="cloud"} 1"#,
            r#"ccm_provider_budget_held_seconds_total{provider="cloud"} 2.0"#,
            r#"ccm_provider_budget_tokens{provider="cloud"} 7"#,
            r#"ccm_provider_budget_burst{provider="cloud"} 7"#,
            r#"ccm_provider_budget_qps{provider="cloud"} 5"#,
            r#"ccm_provider_budget_waiting{lane="node_init",provider="cloud"} 0"#,
            r#"ccm_provider_budget_hold_remaining_seconds{provider="cloud"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
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

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    /// With several providers every provider-related series carries
    /// `provider`; with one, none does (the series as they always were).
    #[test]
    fn several_providers_label_their_series_and_one_does_not() {
        let mut registry = Registry::default();
        let calls = ProviderMetrics::register(&mut registry);
        let manager = ManagerMetrics::register(&mut registry);
        let by = ControllerMetricsByProvider::register(&mut registry, true);
        for p in ["onprem", "cloud"] {
            let calls = calls.for_provider(p);
            calls.started("InstanceExists");
            calls.observe("InstanceExists", tonic::Code::Ok, Duration::from_millis(1));
            calls.failed("InstanceExists", Some("CLOUD_UNAVAILABLE"));
            manager.set_running("service", &ProviderLabel::named(p), true);
        }
        let cloud = by.for_provider("cloud");
        cloud.lb_syncs.inc();
        cloud.route_syncs.inc();
        cloud.nodesync_latency.observe(1.5);
        cloud.instance_batches.observe(100);
        cloud
            .orphan_sweeps
            .get_or_create(&SweepLabels { result: "complete" })
            .inc();
        // Asked again (a controller restarted): the same series.
        by.for_provider("cloud")
            .orphan_sweeps
            .get_or_create(&SweepLabels { result: "complete" })
            .inc();
        by.for_provider("onprem")
            .orphan_sweeps
            .get_or_create(&SweepLabels { result: "failed" })
            .inc();
        let text = encoded(&registry);
        for want in [
            r#"ccm_provider_request_duration_seconds_count{service="Instances",method="InstanceExists",code="OK",provider="cloud"} 1"#,
            r#"ccm_provider_requests_in_flight{service="Instances",method="InstanceExists",provider="onprem"} 0"#,
            r#"ccm_provider_request_errors_total{service="Instances",method="InstanceExists",reason="CLOUD_UNAVAILABLE",provider="onprem"} 1"#,
            r#"running_managed_controllers{name="service",manager="cloud-controller-manager",provider="cloud"} 1"#,
            r#"service_controller_loadbalancer_sync_total{provider="cloud"} 1"#,
            r#"route_controller_route_sync_total{provider="cloud"} 1"#,
            r#"service_controller_nodesync_latency_seconds_count{provider="cloud"} 1"#,
            r#"ccm_load_balancer_orphan_sweeps_total{result="complete",provider="cloud"} 2"#,
            r#"ccm_load_balancer_orphan_sweeps_total{result="failed",provider="onprem"} 1"#,
            r#"ccm_provider_instance_batch_size_count{provider="cloud"} 1"#,
            r#"ccm_provider_instance_batch_size_sum{provider="cloud"} 100.0"#,
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert_eq!(
            text.matches("# TYPE ccm_load_balancer_orphan_sweeps counter")
                .count(),
            1,
            "one family: {text}"
        );

        let mut registry = Registry::default();
        let manager = ManagerMetrics::register(&mut registry);
        let one =
            ControllerMetricsByProvider::register(&mut registry, false).for_provider("default");
        one.route_syncs.inc();
        one.orphan_sweeps
            .get_or_create(&SweepLabels { result: "complete" })
            .inc();
        manager.set_running("route", &ProviderLabel::default(), true);
        one.instance_batches.observe(7);
        let text = encoded(&registry);
        for want in [
            "route_controller_route_sync_total 1",
            "ccm_provider_instance_batch_size_count 1",
            r#"ccm_provider_instance_batch_size_bucket{le="10.0"} 1"#,
            r#"ccm_load_balancer_orphan_sweeps_total{result="complete"} 1"#,
            r#"running_managed_controllers{name="route",manager="cloud-controller-manager"} 1"#,
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert!(!text.contains("provider="), "{text}");
    }
}
