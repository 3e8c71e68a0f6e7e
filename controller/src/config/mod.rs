//! Command-line flags: upstream's names and defaults where they exist, plus
//! ours for the provider connection, grouped by what they configure and
//! parsed into typed values. Messages use upstream's wording.

pub mod compat;
mod controllers;
pub mod duration;
pub mod providers;

use std::net::IpAddr;
use std::num::{NonZeroU16, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};

pub use compat::{CompatArgs, CompatWarning};
pub use controllers::{ControllerName, enabled_controllers};
pub use providers::{Endpoint, Providers, ProvidersArgs};

use crate::cidr::{Cidr, parse_cluster_cidrs};
use crate::providers::instances::{BatchSettings, MAX_BATCH_WAIT};

/// Why no connection to the kube-apiserver could be configured.
#[derive(Debug, thiserror::Error)]
pub enum KubeConfigError {
    #[error("loading Kubernetes configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("using --kubeconfig {path}: {source}")]
    File {
        path: String,
        source: kube::config::KubeconfigError,
    },
}

/// `--cluster-name`'s default, as upstream.
pub const DEFAULT_CLUSTER_NAME: &str = "kubernetes";

/// Why the flags cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0:?} is not in the list of known controllers")]
    UnknownController(String),
    #[error("{0}")]
    LeaderElection(String),
    #[error("{0}")]
    ClusterCidr(String),
    #[error(
        "no ClusterID found.  A ClusterID is required for the cloud provider to function properly.  This check can be bypassed by setting the allow-untagged-cloud option"
    )]
    UntaggedCloud,
    /// Two flags that set one thing disagree.
    #[error("{0}")]
    Conflict(String),
    /// The `--provider` flags and those keyed by a provider's name.
    #[error("{0}")]
    Providers(String),
}

/// Upstream's secure port (`CloudControllerManagerPort`).
pub const DEFAULT_SECURE_PORT: u16 = 10258;

/// A Kubernetes cloud-controller-manager whose cloud lives in a provider
/// process reached over gRPC on a Unix socket.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "cloud-controller-manager",
    // The git commit too when the image build sets CCM_BUILD_COMMIT.
    version = ccm_provider_sdk::build_version::version(env!("CARGO_PKG_VERSION"), option_env!("CCM_BUILD_COMMIT")),
    about,
    long_about = None,
    // As Go's flags: a repeated flag's last value wins (lists accumulate).
    args_override_self = true,
    after_help = "Every flag of upstream's cloud-controller-manager is accepted; those without a meaning here are hidden and listed, with what each does here, in docs/controller.md."
)]
pub struct Options {
    /// Without a subcommand: run the controllers.
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub kube: KubeClientArgs,
    #[command(flatten)]
    pub controllers: ControllersArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub providers: ProvidersArgs,
    #[command(flatten)]
    pub provider_access: ProviderAccessArgs,
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub logging: LoggingArgs,
    #[command(flatten)]
    pub compat: CompatArgs,
    #[cfg(feature = "fault-injection")]
    #[command(flatten)]
    pub faults: FaultArgs,
}

/// How the controller talks to the kube-apiserver.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kubernetes")]
pub struct KubeClientArgs {
    /// Path to a kubeconfig. Empty: in-cluster configuration, then
    /// $KUBECONFIG / ~/.kube/config.
    #[arg(long, default_value = "")]
    pub kubeconfig: String,

    /// Client-side limit of requests per second to the kube-apiserver; 0 or
    /// less: no limit. Unset: none if the server has API Priority and
    /// Fairness (it answers with X-Kubernetes-PF-* headers), else 20.
    #[arg(long)]
    pub kube_api_qps: Option<f32>,

    /// Burst of requests to the kube-apiserver when a client-side limit
    /// applies [default: 30].
    #[arg(long)]
    pub kube_api_burst: Option<u32>,
}

/// What the controllers do and how much in parallel.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Controllers")]
pub struct ControllersArgs {
    /// Name of the cluster; passed to the provider in every load balancer and
    /// route call.
    #[arg(long, default_value = "kubernetes", value_parser = non_empty("--cluster-name cannot be empty"))]
    pub cluster_name: String,

    /// Controllers to run: '*' for all, 'name' to enable, '-name' to
    /// disable. Known: cloud-node-controller (cloud-node),
    /// cloud-node-lifecycle-controller (cloud-node-lifecycle),
    /// service-lb-controller (service), node-route-controller (route);
    /// opt-in (not in '*'): pv-label-controller (pv-label).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// How often the lifecycle controller checks NotReady nodes with the
    /// provider.
    #[arg(long, default_value = "5s", value_parser = duration::parse)]
    pub node_monitor_period: Duration,

    /// How often initialised nodes' addresses are refreshed from the provider.
    #[arg(long, default_value = "5m", value_parser = duration::parse)]
    pub node_status_update_frequency: Duration,

    /// Nodes initialised in parallel. Upstream defaults to 1, which makes a
    /// burst of new Nodes (a pool scaling up) wait in one line for the
    /// provider and two API writes each; provider calls stay bounded by
    /// --provider-max-concurrency.
    #[arg(long, default_value = "8", value_parser = positive::<NonZeroU16>("concurrent-node-syncs must be a positive number"))]
    pub concurrent_node_syncs: NonZeroU16,

    /// Services synced in parallel, and the parallelism of backend updates
    /// after node changes. Upstream defaults to 1, which makes one slow
    /// load balancer delay every other Service; provider mutations stay
    /// bounded by --provider-max-concurrency.
    #[arg(long, default_value = "10", value_parser = positive::<NonZeroU16>("concurrent-service-syncs must be between 1 and 65535"))]
    pub concurrent_service_syncs: NonZeroU16,

    /// Threads that run the controllers (tokio worker threads). The
    /// controller waits on the apiserver and the provider far more than it
    /// computes, and one thread spends the least CPU (docs/benchmarks.md).
    /// Raise it if the controller's CPU stays at one full core.
    #[arg(long, default_value = "1", value_parser = positive::<NonZeroUsize>("--runtime-worker-threads must be a positive number"))]
    pub runtime_worker_threads: NonZeroUsize,

    /// Nodes whose addresses are refreshed in parallel; 0 means
    /// --concurrent-node-syncs.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16))]
    pub concurrent_node_status_updates: u16,

    /// Shadow mode: watch, decide and call the provider's read methods, but
    /// write nothing. Kubernetes writes go out as server-side dry runs
    /// (validated, never stored), provider mutations are not sent; each is
    /// logged and counted in ccm_dry_run_writes_total. Implies no leader
    /// election, so it can run beside the CCM it would replace.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = compat::go_bool, action = clap::ArgAction::Set)]
    pub dry_run_writes: bool,

    /// Whether the route controller creates cloud routes for pod CIDRs
    /// (needs a provider with routes and --cluster-cidr).
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = compat::go_bool, action = clap::ArgAction::Set)]
    pub configure_cloud_routes: bool,

    /// The pod network: one CIDR, or two (one per IP family) separated by a
    /// comma. Routes are only ever created or deleted inside it.
    #[arg(long, default_value = "", value_parser = cluster_cidrs)]
    pub cluster_cidr: ClusterCidrs,

    /// How often the route controller lists the cloud's routes and
    /// reconciles them (start to start).
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub route_reconciliation_period: Duration,

    /// How often this cluster's load balancers are listed and those no
    /// Service wants (any more) are deleted; also once at start. 0 turns
    /// the sweeper off. Needs a provider that lists load balancers, and a
    /// --cluster-name other than the default (or --allow-untagged-cloud).
    #[arg(long, default_value = "5m", value_parser = duration::parse)]
    pub load_balancer_orphan_sweep_period: Duration,
}

impl ControllersArgs {
    /// Parallelism of the address refresh.
    pub fn node_status_workers(&self) -> usize {
        match self.concurrent_node_status_updates {
            0 => usize::from(self.concurrent_node_syncs.get()),
            n => usize::from(n),
        }
    }
}

/// `--cluster-cidr`: empty (unset) or one or two CIDRs, checked as upstream
/// does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterCidrs(pub Vec<Cidr>);

fn cluster_cidrs(flag: &str) -> Result<ClusterCidrs, String> {
    if flag.trim().is_empty() {
        return Ok(ClusterCidrs::default());
    }
    parse_cluster_cidrs(flag).map(ClusterCidrs)
}

/// The provider connection.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Provider")]
pub struct ProviderArgs {
    /// The provider's gRPC endpoint, a Unix socket (one provider; for
    /// several, see --provider). [default:
    /// unix:///var/run/cloud-provider/provider.sock]
    #[arg(
        long,
        global = true,
        env = "CLOUD_PROVIDER_ENDPOINT",
        value_parser = provider_endpoint,
    )]
    pub provider_endpoint: Option<String>,

    /// Deadline of identity calls (info, capabilities, probe).
    #[arg(long, default_value = "5s", value_parser = duration::parse)]
    pub provider_identity_timeout: Duration,

    /// Deadline of provider reads (instances, load balancer status, listings).
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    pub provider_read_timeout: Duration,

    /// Deadline of provider mutations (load balancers, routes).
    #[arg(long, default_value = "5m", value_parser = duration::parse)]
    pub provider_mutation_timeout: Duration,

    /// How often the provider's capabilities are read again (a Probe, which
    /// reconnects to a restarted provider, then its handshake); controllers
    /// start or stop to match. 0: only at start.
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    pub provider_capability_refresh_period: Duration,

    /// Most provider calls in flight at once, across all controllers (per
    /// provider, with several).
    #[arg(long, default_value = "64", value_parser = positive::<NonZeroUsize>("--provider-max-concurrency must be a positive number"))]
    pub provider_max_concurrency: NonZeroUsize,

    /// The call budget: calls per second to the provider, on average
    /// (a token bucket; Probe and the handshake are not counted). When it
    /// is short, calls wait by priority: load balancers, then new Nodes,
    /// then lifecycle checks, then periodic refreshes. QPS for every
    /// provider, or NAME=QPS for one (with --provider). Unset: unlimited.
    #[arg(long, global = true, value_name = "[NAME=]QPS", value_parser = providers::for_any_or_one(providers::qps))]
    pub provider_qps: Vec<(Option<String>, f64)>,

    /// Calls the budget allows at once, after a quiet spell. BURST for
    /// every provider, or NAME=BURST for one; needs --provider-qps for it.
    /// [default: the QPS rounded up, at least 1]
    #[arg(long, global = true, value_name = "[NAME=]BURST", value_parser = providers::for_any_or_one(providers::burst))]
    pub provider_burst: Vec<(Option<String>, u32)>,

    /// Most instance questions (metadata, existence, shutdown) in one
    /// BatchInstances call, 1 to 500; for a provider that announces
    /// CAPABILITY_INSTANCES_BATCH (each provider's own batches, with
    /// several).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub provider_batch_size: u16,

    /// Longest an instance question waits for company while a batch is in
    /// flight (none is: it leaves at once), at most 1s.
    #[arg(long, default_value = "10ms", value_parser = batch_wait)]
    pub provider_batch_wait: Duration,
}

impl ProviderArgs {
    /// How instance questions are gathered into batches.
    pub fn batch(&self) -> BatchSettings {
        BatchSettings {
            size: usize::from(self.provider_batch_size),
            wait: self.provider_batch_wait,
        }
    }
}

fn batch_wait(s: &str) -> Result<Duration, String> {
    let wait = duration::parse(s)?;
    if wait > MAX_BATCH_WAIT {
        return Err(format!(
            "{s:?} is longer than {}ms: a question waits at most that long for a batch",
            MAX_BATCH_WAIT.as_millis()
        ));
    }
    Ok(wait)
}

/// Opt-in cluster access for the provider (ours): a kubeconfig with a
/// short-lived token of the provider's own ServiceAccount, written by the
/// controller (docs/deploy.md, "Provider cluster access").
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Provider cluster access")]
pub struct ProviderAccessArgs {
    /// The provider's own ServiceAccount. When set, the controller requests
    /// tokens for it (TokenRequest) and writes `token`, `ca.crt` and
    /// `kubeconfig` into --provider-kubeconfig-dir, for the provider to use
    /// as $KUBECONFIG. Empty: the provider gets no cluster access.
    #[arg(long, default_value = "")]
    pub provider_service_account: String,

    /// Namespace of --provider-service-account. Unset: the controller's own
    /// (the in-cluster namespace file).
    #[arg(long, env = "POD_NAMESPACE")]
    pub provider_service_account_namespace: Option<String>,

    /// Directory, shared with the provider container only, for the
    /// provider's `token`, `ca.crt` and `kubeconfig`.
    #[arg(long)]
    pub provider_kubeconfig_dir: Option<PathBuf>,

    /// Lifetime requested for each provider token (10m to 24h); a token is
    /// replaced when 80% of the lifetime granted has passed.
    #[arg(long, default_value = "1h", value_parser = duration::parse)]
    pub provider_token_lifetime: Duration,
}

fn provider_endpoint(s: &str) -> Result<String, String> {
    ccm_provider_sdk::socket_path(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// Leader election on a `coordination.k8s.io/v1` Lease.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Leader election")]
pub struct LeaderElectionArgs {
    /// Run only while holding the leader Lease, so replicas never both act.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = compat::go_bool, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// How long a Lease not renewed is respected by the other replicas.
    #[arg(long, default_value = "15s", value_parser = duration::parse)]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps acting without a successful renewal
    /// (after that it stops writing, then exits).
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub leader_elect_renew_deadline: Duration,

    /// How often the Lease is renewed or its acquisition retried.
    #[arg(long, default_value = "2s", value_parser = duration::parse)]
    pub leader_elect_retry_period: Duration,

    /// Namespace of the Lease.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,

    /// Name of the Lease.
    #[arg(long, default_value = "cloud-controller-manager")]
    pub leader_elect_resource_name: String,
}

/// Serving /healthz, /livez, /readyz and /metrics: HTTPS with delegated
/// authentication and authorization as upstream, and optionally plain HTTP.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Serving")]
pub struct AdminArgs {
    /// Address both servers listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// HTTPS port of /healthz, /livez, /readyz and /metrics, with delegated
    /// authentication (TokenReview) and authorization (SubjectAccessReview);
    /// 0 disables it.
    #[arg(long, default_value_t = DEFAULT_SECURE_PORT)]
    pub secure_port: u16,

    /// Plain HTTP port of the same endpoints, without authentication or
    /// authorization (ours: for a loopback --bind-address or a private
    /// network); 0 disables it.
    #[arg(long, default_value_t = 0)]
    pub admin_port: u16,

    /// The serving certificate (PEM, with its chain), re-read when the file
    /// changes. Without it and --tls-private-key-file: a self-signed
    /// certificate for localhost, kept in memory.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,

    /// The serving certificate's private key (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,

    /// Paths served without authorization (a trailing * matches a prefix).
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    pub authorization_always_allow_paths: Vec<String>,

    /// How long a TokenReview answer is reused.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// How long an allowing SubjectAccessReview answer is reused.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long a denying SubjectAccessReview answer is reused.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
}

fn sampling_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio between 0 and 1")),
    }
}

impl AdminArgs {
    /// Checks what one flag alone cannot.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.admin_port != 0 && self.admin_port == self.secure_port {
            return Err(ConfigError::Conflict(format!(
                "--admin-port={0} and --secure-port={0}: one port cannot serve both plain HTTP and HTTPS",
                self.admin_port
            )));
        }
        if self.tls_cert_file.is_some() != self.tls_private_key_file.is_some() {
            return Err(ConfigError::Conflict(
                "--tls-cert-file and --tls-private-key-file go together: give both or neither"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; `text` is accepted too (upstream's name).
    #[value(alias = "text")]
    Plain,
    Json,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Logging")]
pub struct LoggingArgs {
    /// Log format. [default: plain, or --logging-format]
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,

    /// Export each reconcile's span over OTLP/gRPC to this collector
    /// (`http://host:4317`); the provider calls carry it as their W3C
    /// traceparent. Off when empty.
    #[arg(long)]
    pub tracing_endpoint: Option<String>,

    /// The share of reconciles whose traces are exported, 0 to 1.
    #[arg(long, default_value_t = 1.0, value_parser = sampling_ratio)]
    pub tracing_sampling_ratio: f64,
}

/// Test builds only (feature `fault-injection`): faults the supervision
/// tests need.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Args)]
pub struct FaultArgs {
    /// Panic this controller's task right after it starts.
    #[arg(long, hide = true, value_parser = |s: &str| ControllerName::parse(s).ok_or_else(|| format!("unknown controller {s:?}")))]
    pub inject_panic: Option<ControllerName>,
}

/// Subcommands besides running the controllers.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Diagnostics for the provider behind --provider-endpoint, or for each
    /// --provider.
    #[command(subcommand)]
    Provider(ProviderCommand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ProviderCommand {
    /// Prints the provider's identity, capabilities, annotation schema,
    /// readiness (Probe) and clusters (ListClusters, Master).
    Info {
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        output: OutputFormat,
    },
    /// Prints the provider's annotation schema as a Markdown reference
    /// (the format of docs/annotations.md).
    Annotations,
}

impl Options {
    /// Checks what one flag alone cannot; returns the enabled controllers.
    pub fn validate(&self) -> Result<Vec<ControllerName>, ConfigError> {
        if self.leader_election.leader_elect {
            self.leader_election
                .lease_config(String::new())
                .validate()
                .map_err(ConfigError::LeaderElection)?;
        }
        self.admin.validate()?;
        crate::manager::provider_access::validate(&self.provider_access)?;
        compat::validate(self)?;
        self.providers()?;
        enabled_controllers(&self.controllers.controllers)
    }

    /// The providers to connect to and the routing table: the `--provider`s,
    /// or the one behind `--provider-endpoint`.
    pub fn providers(&self) -> Result<Providers, ConfigError> {
        let providers = self.providers.providers(
            self.provider.endpoint(),
            self.provider.provider_endpoint.is_some(),
        )?;
        providers::check_budget_flags(
            &self.provider.provider_qps,
            &self.provider.provider_burst,
            &providers,
        )?;
        Ok(providers)
    }

    /// The log format: `--log-format`, else `--logging-format`, else plain.
    /// [`Options::validate`] refuses the two flags disagreeing; here
    /// `--log-format` wins.
    pub fn log_format(&self) -> LogFormat {
        compat::log_format(self)
            .unwrap_or_else(|_| self.logging.log_format.unwrap_or(LogFormat::Plain))
    }

    /// The tracing filter when RUST_LOG is unset, from `-v`.
    pub fn log_filter(&self) -> String {
        compat::verbosity_filter(self.compat.verbosity.unwrap_or(0))
    }

    /// The kube-apiserver connection: `--kubeconfig` (empty: in-cluster,
    /// then $KUBECONFIG / ~/.kube/config), its server replaced by
    /// `--master` when given. `--master` without `--kubeconfig` is that
    /// server without credentials, as upstream's `BuildConfigFromFlags`.
    pub async fn kube_config(&self) -> Result<kube::Config, KubeConfigError> {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let path = &self.kube.kubeconfig;
        let master = self.compat.master.as_deref().map(compat::master_uri);
        let bad_file = |source| KubeConfigError::File {
            path: path.clone(),
            source,
        };
        let mut config = match (path.is_empty(), master.clone()) {
            (true, Some(url)) => return Ok(kube::Config::new(url)),
            (true, None) => kube::Config::infer().await?,
            (false, _) => {
                let kc = Kubeconfig::read_from(path).map_err(bad_file)?;
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(bad_file)?
            }
        };
        if let Some(url) = master {
            config.cluster_url = url;
        }
        Ok(config)
    }

    /// One warning per upstream flag given that asks for something we do
    /// not do; log each once, after logging is set up.
    pub fn compat_warnings(&self) -> Vec<CompatWarning> {
        compat::warnings(self)
    }
}

impl LeaderElectionArgs {
    /// The elector's settings for the replica `identity`.
    pub fn lease_config(&self, identity: String) -> crate::manager::leader::Config {
        crate::manager::leader::Config {
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self.leader_elect_resource_name.clone(),
            identity,
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }
}

impl ProviderArgs {
    /// `--provider-endpoint`, or its default.
    pub fn endpoint(&self) -> &str {
        self.provider_endpoint
            .as_deref()
            .unwrap_or(ccm_provider_sdk::DEFAULT_ENDPOINT)
    }

    /// The call budget of the provider `name` (`default` with one):
    /// `None` when unlimited. The flags are checked by
    /// [`Options::validate`].
    pub fn call_budget(&self, name: &str) -> Option<ccm_provider_sdk::client::CallBudget> {
        let qps = *providers::given_for_any_or(&self.provider_qps, name)?;
        let burst = providers::given_for_any_or(&self.provider_burst, name)
            .copied()
            // One second's worth.
            .unwrap_or_else(|| (qps.ceil() as u32).max(1));
        Some(ccm_provider_sdk::client::CallBudget { qps, burst })
    }

    /// The client's deadlines and limits from the flags.
    pub fn client_options(&self) -> ccm_provider_sdk::ClientOptions {
        ccm_provider_sdk::ClientOptions {
            identity_timeout: self.provider_identity_timeout,
            read_timeout: self.provider_read_timeout,
            mutation_timeout: self.provider_mutation_timeout,
            max_concurrency: Some(self.provider_max_concurrency.get()),
            ..Default::default()
        }
    }
}

/// A value parser for a positive count whose error is `message`.
fn positive<T>(message: &'static str) -> impl Fn(&str) -> Result<T, String> + Clone
where
    T: std::str::FromStr,
{
    move |s| s.trim().parse::<T>().map_err(|_| message.to_owned())
}

fn non_empty(message: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone {
    move |s| {
        if s.is_empty() {
            Err(message.to_owned())
        } else {
            Ok(s.to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ControllerName::*;

    fn error_of(args: &[&str]) -> String {
        Options::try_parse_from(args).unwrap_err().to_string()
    }

    #[test]
    fn flags_parse_with_upstream_defaults() {
        let o = Options::try_parse_from(["ccm"]).unwrap();
        assert_eq!(o.controllers.cluster_name, "kubernetes");
        assert_eq!(o.controllers.node_monitor_period, Duration::from_secs(5));
        assert_eq!(
            o.controllers.node_status_update_frequency,
            Duration::from_secs(300)
        );
        assert_eq!(o.kube.kube_api_qps, None, "ours: the server decides");
        assert_eq!(o.kube.kube_api_burst, None);
        assert_eq!(
            o.controllers.concurrent_service_syncs.get(),
            10,
            "ours: upstream's is 1"
        );
        assert!(o.controllers.configure_cloud_routes);
        assert_eq!(
            o.controllers.route_reconciliation_period,
            Duration::from_secs(10)
        );
        assert_eq!(o.controllers.cluster_cidr, ClusterCidrs::default());
        assert_eq!(o.log_format(), LogFormat::Plain);
        assert_eq!(
            Options::try_parse_from(["ccm", "--log-format=text"])
                .unwrap()
                .log_format(),
            LogFormat::Plain
        );
        assert_eq!(o.admin.secure_port, 10258);
        assert_eq!(o.admin.admin_port, 0, "ours: no plain HTTP unless asked");
        assert_eq!(
            o.admin.authorization_always_allow_paths,
            ["/healthz", "/readyz", "/livez"]
        );
        assert_eq!(
            o.admin.authentication_token_webhook_cache_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(o.admin.bind_address, IpAddr::from([0, 0, 0, 0]));
        let off = Options::try_parse_from(["ccm", "--configure-cloud-routes=false"]).unwrap();
        assert!(!off.controllers.configure_cloud_routes);
        assert_eq!(
            o.validate().unwrap(),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute]
        );
        let o = Options::try_parse_from([
            "ccm",
            "--controllers=*,-cloud-node",
            "--node-monitor-period=1m30s",
            "--cluster-cidr=10.244.0.0/16,fd00::/56",
            "--log-format=json",
        ])
        .unwrap();
        assert_eq!(o.controllers.node_monitor_period, Duration::from_secs(90));
        assert_eq!(o.controllers.cluster_cidr.0.len(), 2);
        assert_eq!(o.log_format(), LogFormat::Json);
        assert_eq!(
            o.validate().unwrap(),
            vec![CloudNodeLifecycle, ServiceLb, NodeRoute]
        );
        assert!(Options::try_parse_from(["ccm", "--node-monitor-period=5"]).is_err());
    }

    #[test]
    fn bad_values_are_refused_with_upstream_wording() {
        for (flag, message) in [
            (
                "--concurrent-node-syncs=0",
                "concurrent-node-syncs must be a positive number",
            ),
            (
                "--concurrent-node-syncs=-3",
                "concurrent-node-syncs must be a positive number",
            ),
            (
                "--concurrent-service-syncs=70000",
                "concurrent-service-syncs must be between 1 and 65535",
            ),
            (
                "--provider-max-concurrency=0",
                "--provider-max-concurrency must be a positive number",
            ),
            ("--cluster-name=", "--cluster-name cannot be empty"),
            ("--cluster-cidr=10.244.0.0/33", "is not a CIDR"),
            (
                "--cluster-cidr=10.244.0.0/16,10.245.0.0/16",
                "not configured as dual stack",
            ),
            ("--provider-endpoint=tcp://x:1", "unix://"),
            ("--log-format=xml", "possible values: plain, json"),
            ("--bind-address=not-an-ip", "invalid IP address syntax"),
        ] {
            let err = error_of(&["ccm", flag]);
            assert!(err.contains(message), "{flag}: {err}");
        }
        let o = Options::try_parse_from([
            "ccm",
            "--leader-elect-lease-duration=5s",
            "--leader-elect-renew-deadline=10s",
        ])
        .unwrap();
        assert_eq!(
            o.validate().unwrap_err().to_string(),
            "leaseDuration must be greater than renewDeadline"
        );
        let o = Options::try_parse_from(["ccm", "--controllers=*,bogus"]).unwrap();
        assert_eq!(
            o.validate().unwrap_err(),
            ConfigError::UnknownController("bogus".into())
        );
    }

    #[test]
    fn one_runtime_worker_thread_unless_asked() {
        let o = Options::try_parse_from(["ccm"]).unwrap();
        assert_eq!(o.controllers.runtime_worker_threads.get(), 1);
        let o = Options::try_parse_from(["ccm", "--runtime-worker-threads=4"]).unwrap();
        assert_eq!(o.controllers.runtime_worker_threads.get(), 4);
        assert!(
            error_of(&["ccm", "--runtime-worker-threads=0"])
                .contains("--runtime-worker-threads must be a positive number")
        );
    }

    #[test]
    fn address_refresh_parallelism_defaults_to_node_syncs() {
        let o = Options::try_parse_from(["ccm", "--concurrent-node-syncs=4"]).unwrap();
        assert_eq!(o.controllers.node_status_workers(), 4);
        let o = Options::try_parse_from(["ccm", "--concurrent-node-status-updates=7"]).unwrap();
        assert_eq!(o.controllers.node_status_workers(), 7);
    }
}
