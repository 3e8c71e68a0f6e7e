//! Metrics computed when scraped rather than recorded as things happen:
//! the process (`process_*`, as every Prometheus client library exports),
//! `ccm_build_info`, and the Nodes still waiting for initialisation.

use k8s_openapi::jiff::Timestamp;

use k8s_openapi::api::core::v1::Node;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::k8s::node;
use crate::k8s::node_store::NodeStore;

/// Linux reports CPU time in /proc in units of USER_HZ, which the kernel
/// fixes at 100 for userspace on every architecture.
const USER_HZ: f64 = 100.0;

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> std::fmt::Result {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

/// A gauge for what /proc told, nothing for what it did not.
fn optional_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> std::fmt::Result {
    match value {
        Some(v) => gauge(encoder, name, help, v),
        None => Ok(()),
    }
}

/// What /proc says about this process; `None` for what it does not say
/// (another OS, a restricted /proc).
#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
    start_time_seconds: Option<f64>,
}

/// utime+stime (fields 14 and 15) and starttime (22) of /proc/self/stat,
/// counted after the command name, which may itself hold spaces or ")".
fn parse_stat(stat: &str) -> Option<(f64, f64)> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // fields[0] is field 3 (state).
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    Some(((field(14)? + field(15)?) / USER_HZ, field(22)? / USER_HZ))
}

/// A "Key:   123 kB" line of /proc/self/status, in bytes.
fn status_kib(status: &str, key: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: f64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024.0)
}

/// The soft limit of "Max open files" in /proc/self/limits.
fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// "btime" of /proc/stat: boot time, seconds since the epoch.
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

fn process_stats() -> ProcessStats {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let stat = read("/proc/self/stat").and_then(|s| parse_stat(&s));
    let status = read("/proc/self/status").unwrap_or_default();
    let boot = read("/proc/stat").and_then(|s| boot_time(&s));
    ProcessStats {
        cpu_seconds: stat.map(|(cpu, _)| cpu),
        resident_bytes: status_kib(&status, "VmRSS:"),
        virtual_bytes: status_kib(&status, "VmSize:"),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as f64),
        max_fds: read("/proc/self/limits").and_then(|l| max_open_files(&l)),
        start_time_seconds: stat
            .zip(boot)
            .map(|((_, since_boot), boot)| boot + since_boot),
    }
}

/// `process_*` and `ccm_build_info`.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let info = ConstGauge::new(1);
        let labels = [("version", env!("CARGO_PKG_VERSION"))];
        info.encode(
            encoder
                .encode_descriptor(
                    "ccm_build_info",
                    "The controller's version; always 1",
                    None,
                    info.metric_type(),
                )?
                .encode_family(&labels)?,
        )?;
        let p = process_stats();
        if let Some(cpu) = p.cpu_seconds {
            let c = ConstCounter::new(cpu);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        optional_gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            p.resident_bytes,
        )?;
        optional_gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            p.virtual_bytes,
        )?;
        optional_gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            p.open_fds,
        )?;
        optional_gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors",
            p.max_fds,
        )?;
        optional_gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            p.start_time_seconds,
        )?;
        Ok(())
    }
}

/// How many Nodes carry the uninitialized taint, and how long the oldest
/// has existed: a Node stuck there is the CCM's most visible failure.
/// From the leader's Node cache (a standby's is empty: it reports 0).
#[derive(Debug)]
pub struct UninitializedNodes(pub NodeStore);

/// (count, age of the oldest in seconds, 0 without any).
fn uninitialized(nodes: &[std::sync::Arc<Node>], now: Timestamp) -> (i64, f64) {
    let waiting: Vec<_> = nodes
        .iter()
        .filter(|n| node::has_taint(n, node::UNINITIALIZED_TAINT))
        .collect();
    let oldest_ns = waiting
        .iter()
        .filter_map(|n| n.metadata.creation_timestamp.as_ref())
        .map(|t| (now.as_nanosecond() - t.0.as_nanosecond()).max(0))
        .max()
        .unwrap_or(0);
    (waiting.len() as i64, oldest_ns as f64 / 1e9)
}

impl Collector for UninitializedNodes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let (count, oldest) = uninitialized(&self.0.state(), Timestamp::now());
        let g = ConstGauge::new(count);
        g.encode(encoder.encode_descriptor(
            "ccm_uninitialized_nodes",
            "Nodes carrying the node.cloudprovider.kubernetes.io/uninitialized taint (leader only)",
            None,
            g.metric_type(),
        )?)?;
        gauge(
            &mut encoder,
            "ccm_oldest_uninitialized_node_age_seconds",
            "Age of the oldest Node still carrying the uninitialized taint; 0 when none does (leader only)",
            oldest,
        )
    }
}

/// Each provider's call budget as it stands: with a budget,
/// `ccm_provider_budget_tokens` (available now; the burst less these is
/// the budget in use), `ccm_provider_budget_burst`, `ccm_provider_budget_qps`
/// and `ccm_provider_budget_waiting{lane}`; for every provider,
/// `ccm_provider_budget_hold_remaining_seconds` (0 when not held).
/// `provider` label with several providers.
pub struct CallBudgets(pub Vec<(super::ProviderLabel, ccm_provider_sdk::ProviderClient)>);

impl std::fmt::Debug for CallBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallBudgets")
    }
}

impl Collector for CallBudgets {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        use prometheus_client::metrics::MetricType;
        let states: Vec<_> = self
            .0
            .iter()
            .map(|(label, client)| (label, client.budget_state()))
            .collect();
        // (name, help, value of a budgeted provider's state)
        type Value = fn(&ccm_provider_sdk::client::BudgetState) -> Option<f64>;
        let per_provider: [(&str, &str, Value); 4] = [
            (
                "ccm_provider_budget_tokens",
                "Tokens of the provider's call budget available now (0 while held)",
                |s| s.tokens,
            ),
            (
                "ccm_provider_budget_burst",
                "The provider's call budget: calls allowed at once (--provider-burst)",
                |s| s.budget.map(|b| f64::from(b.burst)),
            ),
            (
                "ccm_provider_budget_qps",
                "The provider's call budget: calls per second (--provider-qps)",
                |s| s.budget.map(|b| b.qps),
            ),
            (
                "ccm_provider_budget_hold_remaining_seconds",
                "How much longer a throttling answer holds the provider's calls; 0 when not held",
                |s| Some(s.held_for.map_or(0.0, |d| d.as_secs_f64())),
            ),
        ];
        for (name, help, value) in per_provider {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (label, state) in &states {
                if let Some(v) = value(state) {
                    ConstGauge::new(v).encode(metric.encode_family(*label)?)?;
                }
            }
        }
        let mut waiting = encoder.encode_descriptor(
            "ccm_provider_budget_waiting",
            "Calls to the provider waiting for a token of its call budget, by lane",
            None,
            MetricType::Gauge,
        )?;
        for (label, state) in states.iter().filter(|(_, s)| s.budget.is_some()) {
            for (lane, n) in ccm_provider_sdk::client::Lane::ALL
                .iter()
                .zip(state.waiting)
            {
                let labels = LaneAndProvider(lane.as_str(), label);
                ConstGauge::new(n as i64).encode(waiting.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// `lane` and, with several providers, `provider`.
struct LaneAndProvider<'a>(&'static str, &'a super::ProviderLabel);

impl prometheus_client::encoding::EncodeLabelSet for LaneAndProvider<'_> {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> std::fmt::Result {
        use prometheus_client::encoding::EncodeLabel;
        ("lane", self.0).encode(encoder.encode_label())?;
        self.1.encode(encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;
    use prometheus_client::registry::Registry;

    #[test]
    fn proc_files_parse_as_the_kernel_writes_them() {
        // A command name with a space and a parenthesis.
        let stat = "4242 (ccm (x) y) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 9 0 12345 1000 200 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((3.0, 123.45)));
        assert_eq!(parse_stat("garbage"), None);
        let status = "Name:\tccm\nVmSize:\t  20000 kB\nVmRSS:\t   5000 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(5000.0 * 1024.0));
        assert_eq!(status_kib(status, "VmSwap:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1_048_576.0));
        assert_eq!(boot_time("cpu 1 2 3\nbtime 1700000000\n"), Some(1.7e9));
    }

    #[test]
    fn this_process_is_described() {
        let p = process_stats();
        assert!(p.cpu_seconds.is_some_and(|c| c >= 0.0));
        assert!(p.resident_bytes.is_some_and(|r| r > 1_000_000.0));
        assert!(p.open_fds.is_some_and(|n| n >= 3.0));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = p.start_time_seconds.unwrap();
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "{started} vs {now}"
        );

        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
        assert!(text.contains("process_cpu_seconds_total "), "{text}");
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(
            text.contains(&format!(
                "ccm_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }

    fn node(
        name: &str,
        created_secs_ago: i64,
        tainted: bool,
        now: Timestamp,
    ) -> std::sync::Arc<Node> {
        let created = now - k8s_openapi::jiff::SignedDuration::from_secs(created_secs_ago);
        std::sync::Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(created)),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: tainted.then(|| {
                    vec![Taint {
                        key: node::UNINITIALIZED_TAINT.into(),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn waiting_nodes_are_counted_with_the_oldest_age() {
        let now = Timestamp::now();
        let nodes = [
            node("a", 600, true, now),
            node("b", 30, true, now),
            node("c", 9000, false, now),
        ];
        assert_eq!(uninitialized(&nodes, now), (2, 600.0));
        assert_eq!(uninitialized(&nodes[2..], now), (0, 0.0));
    }
}
