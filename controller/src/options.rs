//! Command-line flags: upstream's names and defaults where they exist, plus
//! ours for the provider connection. Validation errors use upstream's wording.

use std::time::Duration;

use clap::Parser;

use crate::duration;

/// The controllers this binary can run, with upstream's canonical names and
/// aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControllerName {
    CloudNode,
    CloudNodeLifecycle,
    ServiceLb,
    NodeRoute,
    /// Opt-in: not part of `*`.
    PvLabel,
}

impl ControllerName {
    pub const ALL: [ControllerName; 5] = [
        ControllerName::CloudNode,
        ControllerName::CloudNodeLifecycle,
        ControllerName::ServiceLb,
        ControllerName::NodeRoute,
        ControllerName::PvLabel,
    ];

    /// Whether `*` enables it. The PersistentVolume labeller only serves
    /// volumes provisioned outside CSI, so it must be asked for by name.
    pub fn in_star(self) -> bool {
        self != ControllerName::PvLabel
    }

    pub fn canonical(self) -> &'static str {
        match self {
            ControllerName::CloudNode => "cloud-node-controller",
            ControllerName::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            ControllerName::ServiceLb => "service-lb-controller",
            ControllerName::NodeRoute => "node-route-controller",
            ControllerName::PvLabel => "pv-label-controller",
        }
    }

    pub fn alias(self) -> &'static str {
        match self {
            ControllerName::CloudNode => "cloud-node",
            ControllerName::CloudNodeLifecycle => "cloud-node-lifecycle",
            ControllerName::ServiceLb => "service",
            ControllerName::NodeRoute => "route",
            ControllerName::PvLabel => "pv-label",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.canonical() == name || c.alias() == name)
    }
}

/// Upstream's `--controllers` semantics: walk the list in order; the first
/// `name` enables, the first `-name` disables; otherwise enabled only when
/// `*` is present. So `--controllers=-route` enables nothing.
pub fn enabled_controllers(list: &[String]) -> Result<Vec<ControllerName>, String> {
    let mut entries = Vec::new();
    for raw in list.iter().flat_map(|s| s.split(',')) {
        let item = raw.trim();
        if item.is_empty() {
            continue;
        }
        if item == "*" {
            entries.push((None, true));
            continue;
        }
        let (name, on) = match item.strip_prefix('-') {
            Some(n) => (n, false),
            None => (item, true),
        };
        let c = ControllerName::parse(name)
            .ok_or_else(|| format!("{name:?} is not in the list of known controllers"))?;
        entries.push((Some(c), on));
    }
    let star = entries.iter().any(|(c, _)| c.is_none());
    Ok(ControllerName::ALL
        .into_iter()
        .filter(|c| {
            entries
                .iter()
                .find(|(e, _)| *e == Some(*c))
                .map(|(_, on)| *on)
                .unwrap_or(star && c.in_star())
        })
        .collect())
}

fn go_duration(s: &str) -> Result<Duration, String> {
    duration::parse(s)
}

/// A Kubernetes cloud-controller-manager whose cloud lives in a provider
/// process reached over gRPC on a Unix socket.
#[derive(Debug, Clone, Parser)]
#[command(name = "cloud-controller-manager", version, about, long_about = None)]
pub struct Options {
    /// Without a subcommand: run the controllers.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Path to a kubeconfig. Empty: in-cluster configuration, then
    /// $KUBECONFIG / ~/.kube/config.
    #[arg(long, default_value = "", help_heading = "Kubernetes")]
    pub kubeconfig: String,

    /// Name of the cluster; passed to the provider in every load balancer and
    /// route call.
    #[arg(long, default_value = "kubernetes", help_heading = "Kubernetes")]
    pub cluster_name: String,

    /// Controllers to run: '*' for all, 'name' to enable, '-name' to
    /// disable. Known: cloud-node-controller (cloud-node),
    /// cloud-node-lifecycle-controller (cloud-node-lifecycle),
    /// service-lb-controller (service), node-route-controller (route);
    /// opt-in (not in '*'): pv-label-controller (pv-label).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "*",
        help_heading = "Controllers"
    )]
    pub controllers: Vec<String>,

    /// How often the lifecycle controller checks NotReady nodes with the
    /// provider.
    #[arg(long, default_value = "5s", value_parser = go_duration, help_heading = "Controllers")]
    pub node_monitor_period: Duration,

    /// How often initialised nodes' addresses are refreshed from the provider.
    #[arg(long, default_value = "5m", value_parser = go_duration, help_heading = "Controllers")]
    pub node_status_update_frequency: Duration,

    /// Nodes initialised in parallel.
    #[arg(long, default_value_t = 1, help_heading = "Controllers")]
    pub concurrent_node_syncs: i32,

    /// Services synced in parallel, and the parallelism of backend updates
    /// after node changes. Upstream defaults to 1, which makes one slow
    /// load balancer delay every other Service; provider mutations stay
    /// bounded by --provider-max-concurrency.
    #[arg(long, default_value_t = 10, help_heading = "Controllers")]
    pub concurrent_service_syncs: i32,

    /// Whether the route controller creates cloud routes for pod CIDRs
    /// (needs a provider with routes and --cluster-cidr).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, help_heading = "Controllers")]
    pub configure_cloud_routes: bool,

    /// The pod network: one CIDR, or two (one per IP family) separated by a
    /// comma. Routes are only ever created or deleted inside it.
    #[arg(long, default_value = "", help_heading = "Controllers")]
    pub cluster_cidr: String,

    /// How often the route controller lists the cloud's routes and
    /// reconciles them (start to start).
    #[arg(long, default_value = "10s", value_parser = go_duration, help_heading = "Controllers")]
    pub route_reconciliation_period: Duration,

    /// Nodes whose addresses are refreshed in parallel; 0 means
    /// --concurrent-node-syncs.
    #[arg(long, default_value_t = 0, help_heading = "Controllers")]
    pub concurrent_node_status_updates: i32,

    /// Requests per second to the kube-apiserver.
    #[arg(long, default_value_t = 20.0, help_heading = "Kubernetes")]
    pub kube_api_qps: f32,

    /// Burst of requests to the kube-apiserver.
    #[arg(long, default_value_t = 30, help_heading = "Kubernetes")]
    pub kube_api_burst: u32,

    /// Accepted for compatibility with upstream manifests; the provider is
    /// whatever answers on --provider-endpoint.
    #[arg(long, default_value = "", help_heading = "Compatibility")]
    pub cloud_provider: String,

    /// The provider's gRPC endpoint, a Unix socket.
    #[arg(
        long,
        global = true,
        env = "CLOUD_PROVIDER_ENDPOINT",
        default_value = ccm_provider_sdk::DEFAULT_ENDPOINT,
        help_heading = "Provider"
    )]
    pub provider_endpoint: String,

    /// Deadline of identity calls (info, capabilities, probe).
    #[arg(long, default_value = "5s", value_parser = go_duration, help_heading = "Provider")]
    pub provider_identity_timeout: Duration,

    /// Deadline of provider reads (instances, load balancer status, listings).
    #[arg(long, default_value = "30s", value_parser = go_duration, help_heading = "Provider")]
    pub provider_read_timeout: Duration,

    /// Deadline of provider mutations (load balancers, routes).
    #[arg(long, default_value = "5m", value_parser = go_duration, help_heading = "Provider")]
    pub provider_mutation_timeout: Duration,

    /// Most provider calls in flight at once, across all controllers.
    #[arg(long, default_value_t = 64, help_heading = "Provider")]
    pub provider_max_concurrency: usize,

    /// Run only while holding the leader Lease, so replicas never both act.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, help_heading = "Leader election")]
    pub leader_elect: bool,

    /// How long a Lease not renewed is respected by the other replicas.
    #[arg(long, default_value = "15s", value_parser = go_duration, help_heading = "Leader election")]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps acting without a successful renewal
    /// (after that it stops writing, then exits).
    #[arg(long, default_value = "10s", value_parser = go_duration, help_heading = "Leader election")]
    pub leader_elect_renew_deadline: Duration,

    /// How often the Lease is renewed or its acquisition retried.
    #[arg(long, default_value = "2s", value_parser = go_duration, help_heading = "Leader election")]
    pub leader_elect_retry_period: Duration,

    /// Namespace of the Lease.
    #[arg(long, default_value = "kube-system", help_heading = "Leader election")]
    pub leader_elect_resource_namespace: String,

    /// Name of the Lease.
    #[arg(
        long,
        default_value = "cloud-controller-manager",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_name: String,

    /// Address of the admin server (/healthz, /livez, /readyz, /metrics).
    #[arg(long, default_value = "0.0.0.0", help_heading = "Admin server")]
    pub bind_address: String,

    /// Port of the admin server, plain HTTP (upstream's --secure-port
    /// serves HTTPS on the same port number; see docs/controller.md); 0
    /// disables it.
    #[arg(long, default_value_t = 10258, help_heading = "Admin server")]
    pub admin_port: u16,

    /// Log format: plain or json.
    #[arg(long, default_value = "plain", value_parser = ["plain", "json"], help_heading = "Logging")]
    pub log_format: String,
}

/// Subcommands besides running the controllers.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Diagnostics for the provider behind --provider-endpoint.
    #[command(subcommand)]
    Provider(ProviderCommand),
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ProviderCommand {
    /// Prints the provider's identity, capabilities, annotation schema,
    /// readiness (Probe) and clusters (ListClusters, Master).
    Info {
        /// text or json.
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        output: String,
    },
}

impl Options {
    /// Checks what clap cannot, with upstream's messages.
    pub fn validate(&self) -> Result<Vec<ControllerName>, String> {
        if self.concurrent_node_syncs <= 0 {
            return Err("concurrent-node-syncs must be a positive number".into());
        }
        if self.concurrent_service_syncs <= 0 || self.concurrent_service_syncs > i32::from(u16::MAX)
        {
            return Err("concurrent-service-syncs must be between 1 and 65535".into());
        }
        if self.concurrent_node_status_updates < 0 {
            return Err("concurrent-node-status-updates cannot be a negative number".into());
        }
        if self.cluster_name.is_empty() {
            return Err("--cluster-name cannot be empty".into());
        }
        if self.provider_max_concurrency == 0 {
            return Err("--provider-max-concurrency must be a positive number".into());
        }
        ccm_provider_sdk::socket_path(&self.provider_endpoint).map_err(|e| e.to_string())?;
        enabled_controllers(&self.controllers)
    }

    pub fn node_status_workers(&self) -> usize {
        match self.concurrent_node_status_updates {
            0 => self.concurrent_node_syncs as usize,
            n => n as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ControllerName::*;

    fn list(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn controller_selection_follows_upstream() {
        assert_eq!(
            enabled_controllers(&list(&["*"])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute],
            "pv-label is opt-in"
        );
        assert_eq!(
            enabled_controllers(&list(&["*", "pv-label"])).unwrap(),
            ControllerName::ALL
        );
        assert_eq!(
            enabled_controllers(&list(&["*", "-route"])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb]
        );
        assert_eq!(enabled_controllers(&list(&["-route"])).unwrap(), vec![]);
        assert_eq!(
            enabled_controllers(&list(&["cloud-node", "service-lb-controller"])).unwrap(),
            vec![CloudNode, ServiceLb]
        );
        // The first mention wins.
        assert_eq!(
            enabled_controllers(&list(&["-service", "service", "*"])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle, NodeRoute]
        );
        assert_eq!(
            enabled_controllers(&list(&["*", "bogus"])).unwrap_err(),
            "\"bogus\" is not in the list of known controllers"
        );
    }

    #[test]
    fn flags_parse_with_upstream_defaults() {
        let o = Options::try_parse_from(["ccm"]).unwrap();
        assert_eq!(o.cluster_name, "kubernetes");
        assert_eq!(o.node_monitor_period, Duration::from_secs(5));
        assert_eq!(o.node_status_update_frequency, Duration::from_secs(300));
        assert_eq!(o.kube_api_qps, 20.0);
        assert_eq!(o.kube_api_burst, 30);
        assert_eq!(o.concurrent_service_syncs, 10, "ours: upstream's is 1");
        assert!(o.configure_cloud_routes);
        assert_eq!(o.route_reconciliation_period, Duration::from_secs(10));
        let off = Options::try_parse_from(["ccm", "--configure-cloud-routes=false"]).unwrap();
        assert!(!off.configure_cloud_routes);
        assert_eq!(
            o.validate().unwrap(),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute]
        );
        let o = Options::try_parse_from(["ccm", "--concurrent-node-syncs=0"]).unwrap();
        assert_eq!(
            o.validate().unwrap_err(),
            "concurrent-node-syncs must be a positive number"
        );
        let o = Options::try_parse_from([
            "ccm",
            "--controllers=*,-cloud-node",
            "--node-monitor-period=1m30s",
        ])
        .unwrap();
        assert_eq!(o.node_monitor_period, Duration::from_secs(90));
        assert_eq!(
            o.validate().unwrap(),
            vec![CloudNodeLifecycle, ServiceLb, NodeRoute]
        );
        assert!(Options::try_parse_from(["ccm", "--node-monitor-period=5"]).is_err());
    }
}
