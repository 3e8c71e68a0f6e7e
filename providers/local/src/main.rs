//! `local-provider`: the local cloud as a provider process. Serves until
//! SIGTERM or SIGINT, then closes every listener (the state file keeps the
//! load balancers, so a restart serves them on the same addresses).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use ccm_local_provider::annotations::parse_duration;
use ccm_local_provider::inventory::Inventory;
use ccm_local_provider::vip::VipRange;
use ccm_local_provider::{Config, LabelSelector, LocalCloud, metrics};
use ccm_provider_sdk::server::{IdentityFlags, LogFormat, Supervisor, init_logging};
use clap::Parser;

/// A cloud provider for ccm-rs whose cloud is this machine: instances from
/// an inventory file, load balancers as L4 proxies on local addresses,
/// routes in a kernel routing table.
#[derive(Debug, Parser)]
#[command(
    name = "local-provider",
    version = ccm_provider_sdk::build_version::version(env!("CARGO_PKG_VERSION"), option_env!("CCM_BUILD_COMMIT"))
)]
struct Args {
    /// The provider socket, `unix:///absolute/path`.
    #[arg(long, env = "CLOUD_PROVIDER_ENDPOINT", default_value = ccm_provider_sdk::DEFAULT_ENDPOINT)]
    endpoint: String,
    /// The inventory (YAML): one entry per machine; see docs/providers/local.md.
    #[arg(long)]
    inventory: PathBuf,
    /// How often the inventory is re-read.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    inventory_poll_interval: Duration,
    /// Keep load balancers, addresses and routes in this JSON file so a
    /// restart serves the same ones. Without it they live in memory only.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// The addresses load balancers get (local to this machine; any 127.x
    /// range is bindable without privileges).
    #[arg(long, default_value = ccm_local_provider::cloud::DEFAULT_VIP_RANGE)]
    vip_range: VipRange,
    /// Load balancer names; ${CLUSTER_ID}, ${NAMESPACE}, ${SERVICE_NAME} and
    /// ${SERVICE_UID} are replaced.
    #[arg(long, default_value = ccm_local_provider::load_balancers::DEFAULT_NAME_TEMPLATE)]
    lb_name_template: String,
    /// Only Nodes with this label (`key` or `key=value`) receive load
    /// balancer traffic; unset, every Node the controller sends does.
    #[arg(long)]
    ingress_node_selector: Option<LabelSelector>,
    /// Program routes into this kernel routing table (needs CAP_NET_ADMIN,
    /// for example inside `unshare -rn`); unset, routes are not offered.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    route_table: Option<u32>,
    /// Serve /metrics and /healthz on this address (e.g. 127.0.0.1:9102).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Permission bits of the socket, in octal.
    #[arg(long, default_value = "600", value_parser = ccm_provider_sdk::endpoint::parse_socket_mode)]
    socket_mode: u32,
    #[arg(long, value_enum, default_value_t = LogFormat::Plain)]
    log_format: LogFormat,
    /// What a controller running several providers routes to this one.
    #[command(flatten)]
    identity: IdentityFlags,
}

/// A poll interval: 10 ms to 1 h.
fn parse_interval(s: &str) -> Result<Duration, String> {
    parse_duration(s, Duration::from_millis(10), Duration::from_secs(3_600))
}

/// Whether this process may change routing tables (CAP_NET_ADMIN, bit 12
/// of CapEff), so a missing privilege fails at start with the fix instead
/// of at every CreateRoute.
fn has_net_admin() -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_ADMIN) != 0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    if args.route_table.is_some() && !has_net_admin() {
        anyhow::bail!(
            "--route-table needs CAP_NET_ADMIN: run inside a network namespace of your own (`unshare -rn`), or grant the capability; without --route-table no routes are offered"
        );
    }
    let inventory = Inventory::open(&args.inventory)?;
    let config = Config {
        vips: args.vip_range,
        name_template: args.lb_name_template.clone(),
        ingress_selector: args.ingress_node_selector.clone(),
        route_table: args.route_table,
        state_file: args.state_file.clone(),
        identity: args.identity.clone(),
    };
    let cloud = LocalCloud::start(config, inventory.clone())
        .await
        .context("starting the local cloud")?;

    let mut servers = Supervisor::<anyhow::Error>::new();
    {
        let (inventory, stop) = (inventory.clone(), servers.stopped());
        let period = args.inventory_poll_interval;
        servers.spawn(async move {
            inventory.follow(period, stop).await;
            Ok(())
        });
    }
    if let Some(addr) = args.metrics_listen {
        let (cloud, stop) = (cloud.clone(), servers.stopped());
        servers.spawn(async move {
            metrics::serve(cloud, addr, stop)
                .await
                .with_context(|| format!("metrics listener {addr}"))
        });
    }
    servers.spawn_provider(
        cloud.server().socket_mode(args.socket_mode),
        args.endpoint.clone(),
    );
    let result = servers.run().await;
    cloud.shutdown().await;
    result.map_err(|e| e.into_error(|m| anyhow::anyhow!(m)))
}

#[cfg(test)]
mod tests {
    use ccm_provider_sdk::server::UnclassedServicesFlag;

    use super::*;

    #[test]
    fn the_identity_flags_are_parsed() {
        let args = Args::try_parse_from([
            "local-provider",
            "--inventory",
            "inventory.yaml",
            "--load-balancer-class",
            "example.com/onprem",
            "--unclassed-services",
            "served",
            "--platform",
            "onprem",
        ])
        .unwrap();
        assert_eq!(
            args.identity,
            IdentityFlags {
                load_balancer_classes: vec!["example.com/onprem".into()],
                unclassed_services: Some(UnclassedServicesFlag::Served),
                platforms: vec!["onprem".into()],
            }
        );
        let args = Args::try_parse_from(["local-provider", "--inventory", "i.yaml"]).unwrap();
        assert_eq!(args.identity, IdentityFlags::default());
    }
}
