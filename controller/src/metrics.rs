//! Metrics the controller records. One registry for the process; the admin
//! server (issue 7) serves it in the Prometheus text format.

use std::time::Duration;

use ccm_provider_sdk::client::CallObserver;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub method: &'static str,
    pub code: String,
}

/// `ccm_provider_request_duration_seconds{method,code}`: every provider call.
#[derive(Clone)]
pub struct ProviderMetrics {
    pub requests: Family<RpcLabels, Histogram>,
}

impl ProviderMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<RpcLabels, Histogram>::new_with_constructor(|| {
            // 250 µs .. ~2 min: local reads to slow load balancer mutations.
            Histogram::new(exponential_buckets(0.00025, 2.5, 15))
        });
        registry.register(
            "ccm_provider_request_duration_seconds",
            "Duration of calls to the provider by RPC method and gRPC code",
            requests.clone(),
        );
        ProviderMetrics { requests }
    }
}

impl CallObserver for ProviderMetrics {
    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        self.requests
            .get_or_create(&RpcLabels {
                method,
                code: format!("{code:?}"),
            })
            .observe(elapsed.as_secs_f64());
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

    #[test]
    fn provider_calls_are_recorded_by_method_and_code() {
        let mut registry = Registry::default();
        let m = ProviderMetrics::register(&mut registry);
        m.observe("InstanceExists", tonic::Code::Ok, Duration::from_millis(1));
        m.observe(
            "InstanceExists",
            tonic::Code::Unavailable,
            Duration::from_millis(2),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(r#"ccm_provider_request_duration_seconds_count{method="InstanceExists",code="Ok"} 1"#), "{text}");
        assert!(text.contains(r#"code="Unavailable""#), "{text}");
    }
}
