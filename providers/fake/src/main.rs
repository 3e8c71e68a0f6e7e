//! `fake-provider`: the in-memory fake cloud as a provider process, with the
//! admin API next to it. Serves until SIGTERM or SIGINT, then stops both
//! servers and removes both sockets.
//!
//! `--state-file PATH` keeps the cloud in a JSON file so that the process can
//! be killed (even with SIGKILL) and restarted with the same instances, load
//! balancers (same addresses) and routes; a corrupt file makes it exit 1
//! naming the file. Without it the cloud lives in memory only.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use ccm_fake_provider::{FakeCloud, FakeConfig, QuotaConfig, admin, read_instances_file};
use ccm_provider_sdk::server::{IdentityFlags, LogFormat, Supervisor, init_logging};
use clap::Parser;

/// jemalloc where the binary links glibc (the workspace Cargo.toml says why).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// An in-memory cloud provider for ccm-rs, with fault injection.
#[derive(Debug, Parser)]
#[command(
    name = "fake-provider",
    version = ccm_provider_sdk::build_version::version(env!("CARGO_PKG_VERSION"), option_env!("CCM_BUILD_COMMIT"))
)]
struct Args {
    /// The provider socket, `unix:///absolute/path`.
    #[arg(long, env = "CLOUD_PROVIDER_ENDPOINT", default_value = ccm_provider_sdk::DEFAULT_ENDPOINT)]
    endpoint: String,
    /// The admin API's Unix socket; default `<provider socket>.admin`. An
    /// empty value disables it.
    #[arg(long)]
    admin_socket: Option<PathBuf>,
    /// Also serve the admin API on TCP, e.g. 127.0.0.1:8089 (no auth: use
    /// loopback).
    #[arg(long)]
    admin_listen: Option<SocketAddr>,
    /// Create an instance for any unknown node name on first lookup.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    auto_create_instances: bool,
    /// Zone of instances that do not declare one.
    #[arg(long)]
    zone: Option<String>,
    /// Region of instances that do not declare one.
    #[arg(long)]
    region: Option<String>,
    /// Instance type of instances that do not declare one.
    #[arg(long)]
    instance_type: Option<String>,
    /// IPv4 CIDR load balancer addresses are allocated from.
    #[arg(long)]
    lb_ip_pool: Option<String>,
    /// What ListClusters answers (comma-separated).
    #[arg(long, value_delimiter = ',')]
    cluster_names: Option<Vec<String>>,
    /// Load balancer classes handled by another controller (comma-separated).
    #[arg(long, value_delimiter = ',')]
    implemented_elsewhere_classes: Vec<String>,
    /// A JSON list of instances that exist from the start.
    #[arg(long)]
    instances_file: Option<PathBuf>,
    /// Keep the cloud (instances, load balancers, routes, the newest fencing
    /// token per cluster) in this JSON file, rewritten atomically after
    /// every change and loaded at start, so a restart (even after SIGKILL)
    /// finds the same cloud. An existing file wins over --instances-file; a
    /// corrupt one is an error. Faults, readiness and the call log are not
    /// kept.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// The cloud's API quota in calls per second: every call that reaches
    /// the cloud (all but Probe and GetLoadBalancerName; a BatchInstances
    /// is one) takes a token, and beyond the quota the fake answers
    /// QUOTA_EXCEEDED with the time until the next token as RetryInfo.
    /// Unset: unlimited.
    #[arg(long, value_parser = parse_qps)]
    quota_qps: Option<f64>,
    /// How many calls the quota allows at once (the token bucket's size);
    /// default: one second's worth, at least 1. Needs --quota-qps.
    #[arg(long, requires = "quota_qps")]
    quota_burst: Option<u32>,
    /// Permission bits of both sockets, in octal.
    #[arg(long, default_value = "600", value_parser = ccm_provider_sdk::endpoint::parse_socket_mode)]
    socket_mode: u32,
    #[arg(long, value_enum, default_value_t = LogFormat::Plain)]
    log_format: LogFormat,
    /// What a controller running several providers routes to this one.
    #[command(flatten)]
    identity: IdentityFlags,
}

fn parse_qps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a positive number of calls per second"
        )),
    }
}

/// `--quota-qps` and `--quota-burst`.
fn quota(args: &Args) -> Option<QuotaConfig> {
    let qps = args.quota_qps?;
    Some(QuotaConfig {
        qps,
        burst: args
            .quota_burst
            .unwrap_or_else(|| (qps.ceil() as u32).max(1)),
    })
}

fn config(args: &Args) -> anyhow::Result<FakeConfig> {
    let mut config = FakeConfig {
        auto_create_instances: args.auto_create_instances,
        implemented_elsewhere_classes: args.implemented_elsewhere_classes.clone(),
        state_file: args.state_file.clone(),
        load_balancer_classes: args.identity.load_balancer_classes.clone(),
        serves_unclassed: args.identity.serves_unclassed(),
        platforms: args.identity.platforms.clone(),
        ..FakeConfig::default()
    };
    if let Some(v) = &args.zone {
        config.zone = v.clone();
    }
    if let Some(v) = &args.region {
        config.region = v.clone();
    }
    if let Some(v) = &args.instance_type {
        config.instance_type = v.clone();
    }
    if let Some(v) = &args.lb_ip_pool {
        config.lb_ip_pool = v.clone();
    }
    if let Some(v) = &args.cluster_names {
        config.cluster_names = v.clone();
    }
    if let Some(path) = &args.instances_file {
        config.instances = read_instances_file(path)?;
    }
    Ok(config)
}

// One worker thread, as the controller's default: the fake waits more
// than it computes. On 2 cores, over the 1,000-object bench-compare run,
// it took 0.57 and 0.64 s of CPU against 0.70 s with one thread per core
// (docs/benchmarks.md).
#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    let fake = FakeCloud::new(config(&args)?).context("configuring the fake cloud")?;
    fake.set_quota(quota(&args));
    let provider_socket = ccm_provider_sdk::socket_path(&args.endpoint)?;
    let admin_socket = match &args.admin_socket {
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => Some(p.clone()),
        None => {
            let mut p = provider_socket.clone().into_os_string();
            p.push(".admin");
            Some(PathBuf::from(p))
        }
    };

    let mut servers = Supervisor::<anyhow::Error>::new();
    if let Some(path) = admin_socket {
        let (fake, stop, mode) = (fake.clone(), servers.stopped(), args.socket_mode);
        servers.spawn(async move {
            admin::serve_unix(fake, path.clone(), mode, stop)
                .await
                .with_context(|| format!("admin socket {}", path.display()))
        });
    }
    if let Some(addr) = args.admin_listen {
        let (fake, stop) = (fake.clone(), servers.stopped());
        servers.spawn(async move {
            admin::serve_tcp(fake, addr, stop)
                .await
                .with_context(|| format!("admin listener {addr}"))
        });
    }
    servers.spawn_provider(
        fake.server().socket_mode(args.socket_mode),
        args.endpoint.clone(),
    );
    // Stop everything on a signal, or as soon as any server fails, so a
    // half-running fake never lingers.
    servers
        .run()
        .await
        .map_err(|e| e.into_error(|m| anyhow::anyhow!(m)))
}

#[cfg(test)]
mod tests {
    use ccm_provider_sdk::Identity;

    use super::*;

    fn info(args: &[&str]) -> anyhow::Result<ccm_provider_sdk::ProviderInfo> {
        let args =
            Args::try_parse_from(std::iter::once("fake-provider").chain(args.iter().copied()))?;
        Ok(FakeCloud::new(config(&args)?)?.info())
    }

    /// The hybrid fixture's "cloud" (docs/spec.md, 1.3.0): the flags
    /// reach the identity; without them nothing is declared.
    #[test]
    fn the_quota_flags_make_a_token_bucket() {
        let parse = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("fake-provider").chain(args.iter().copied()))
        };
        assert_eq!(quota(&parse(&[]).unwrap()), None);
        assert_eq!(
            quota(&parse(&["--quota-qps", "20", "--quota-burst", "100"]).unwrap()),
            Some(QuotaConfig {
                qps: 20.0,
                burst: 100
            })
        );
        assert_eq!(
            quota(&parse(&["--quota-qps", "0.5"]).unwrap()),
            Some(QuotaConfig { qps: 0.5, burst: 1 })
        );
        assert!(
            parse(&["--quota-burst", "5"]).is_err(),
            "burst needs a rate"
        );
        for bad in ["0", "-1", "NaN", "inf", "x"] {
            assert!(parse(&["--quota-qps", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_identity_flags_are_declared() {
        let cloud = info(&[
            "--load-balancer-class",
            "example.com/cloud",
            "--unclassed-services=declined",
            "--platform",
            "cloud",
            "--platform",
            "cloud-metal",
        ])
        .unwrap();
        assert_eq!(cloud.load_balancer_classes, ["example.com/cloud"]);
        assert_eq!(cloud.serves_unclassed, Some(false));
        assert_eq!(cloud.platforms, ["cloud", "cloud-metal"]);
        let plain = info(&[]).unwrap();
        assert!(plain.load_balancer_classes.is_empty() && plain.platforms.is_empty());
        assert_eq!(plain.serves_unclassed, None);
    }

    #[test]
    fn a_malformed_identity_stops_the_fake_at_start() {
        for (args, field) in [
            (
                &["--load-balancer-class", "cloud"][..],
                "load_balancer_classes[0]",
            ),
            (&["--platform", "a", "--platform", "a"], "platforms[1]"),
        ] {
            let e = info(args).unwrap_err().to_string();
            assert!(e.starts_with(&format!("invalid identity: {field}:")), "{e}");
        }
    }
}
