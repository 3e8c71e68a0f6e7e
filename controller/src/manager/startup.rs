//! Startup: the provider client, waiting for the provider's handshake, and
//! which of the enabled controllers can run with its capabilities.

use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::{ClientError, Handshake, ProviderClient};

use super::metrics::ProviderMetrics;
use crate::config::{ConfigError, ControllerName, ControllersArgs, ProviderArgs};

/// The client of the provider `name` at `endpoint`, configured from the
/// flags (each provider has its own connection, concurrency limit and call
/// budget),
/// reporting every call to `metrics`, its mutations gated by `gate`
/// (leader election's fence, or a dry run's).
pub fn provider_client(
    name: &str,
    endpoint: &str,
    args: &ProviderArgs,
    metrics: ProviderMetrics,
    gate: Arc<dyn ccm_provider_sdk::client::MutationGate>,
) -> Result<ProviderClient, ClientError> {
    ProviderClient::connect_lazy(
        endpoint,
        ccm_provider_sdk::ClientOptions {
            observer: Some(Arc::new(metrics)),
            mutation_gate: Some(gate),
            budget: args.call_budget(name),
            ..args.client_options()
        },
    )
}

/// Waits until the provider answers its handshake. The provider sidecar may
/// start after us; we wait rather than crash-loop. `name`: with several
/// providers, which one (for the log).
pub async fn wait_for_provider(
    provider: &ProviderClient,
    endpoint: &str,
    name: Option<&str>,
) -> Arc<Handshake> {
    let mut delay = Duration::from_millis(200);
    let mut logged = false;
    loop {
        match provider.handshake().await {
            Ok(h) => return h,
            Err(e) if !logged => {
                match name {
                    Some(name) => {
                        tracing::info!(provider = name, endpoint, error = %e, "waiting for the provider")
                    }
                    None => tracing::info!(endpoint, error = %e, "waiting for the provider"),
                }
                logged = true;
            }
            Err(e) => {
                tracing::debug!(provider = name, endpoint, error = %e, "provider not answering yet")
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// Upstream's HasClusterID check: a provider that does not scope its
/// resources by cluster (`has_cluster_id: false`) is refused unless
/// `--allow-untagged-cloud`, with upstream's words.
pub fn check_cluster_id(
    handshake: &Handshake,
    allow_untagged_cloud: bool,
) -> Result<(), ConfigError> {
    if handshake.info.has_cluster_id != Some(false) {
        return Ok(());
    }
    if allow_untagged_cloud {
        tracing::warn!(
            "detected a cluster without a ClusterID.  A ClusterID will be required in the future.  Please tag your cluster to avoid any future issues"
        );
        return Ok(());
    }
    Err(ConfigError::UntaggedCloud)
}

/// The enabled controllers that can run: the provider has the capability
/// each needs, and the route controller is configured as upstream requires
/// (`--configure-cloud-routes`, then a `--cluster-cidr`, whose absence stops
/// the process).
pub fn runnable(
    enabled: &[ControllerName],
    handshake: &Handshake,
    args: &ControllersArgs,
) -> Result<Vec<ControllerName>, ConfigError> {
    plan(enabled, handshake, args, true)
}

/// [`runnable`] without its log lines, for the periodic capability refresh.
pub fn runnable_quietly(
    enabled: &[ControllerName],
    handshake: &Handshake,
    args: &ControllersArgs,
) -> Result<Vec<ControllerName>, ConfigError> {
    plan(enabled, handshake, args, false)
}

fn plan(
    enabled: &[ControllerName],
    handshake: &Handshake,
    args: &ControllersArgs,
    log: bool,
) -> Result<Vec<ControllerName>, ConfigError> {
    let mut out = Vec::new();
    for &c in enabled {
        let capability = c.required_capability();
        if c == ControllerName::NodeRoute && !args.configure_cloud_routes {
            if log {
                tracing::info!(
                    "will not configure cloud provider routes: --configure-cloud-routes is false"
                );
            }
            continue;
        }
        if !handshake.has(capability) {
            if log && c == ControllerName::NodeRoute {
                tracing::warn!(
                    "--configure-cloud-routes is set, but cloud provider does not support routes. Will not configure cloud provider routes."
                );
            } else if log {
                tracing::warn!(
                    controller = c.canonical(),
                    capability = ?capability,
                    provider = %handshake.info.name,
                    "the provider lacks the capability this controller needs; not starting it"
                );
            }
            continue;
        }
        if c == ControllerName::NodeRoute && args.cluster_cidr.0.is_empty() {
            return Err(ConfigError::ClusterCidr(
                "invalid --cluster-cidr \"\": the route controller needs the pod network, such as 10.244.0.0/16".into(),
            ));
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Options;
    use ControllerName::*;
    use ccm_provider_sdk::proto::Capability;
    use clap::Parser;

    fn handshake(caps: &[Capability]) -> Handshake {
        Handshake {
            info: Default::default(),
            capabilities: caps.iter().copied().collect(),
            annotations: Default::default(),
            connection: 1,
        }
    }

    fn args(flags: &[&str]) -> ControllersArgs {
        let mut all = vec!["ccm"];
        all.extend(flags);
        Options::try_parse_from(all).unwrap().controllers
    }

    #[test]
    fn controllers_follow_capabilities_and_route_flags() {
        let enabled = [CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute];
        let instances_only = handshake(&[Capability::Instances]);
        assert_eq!(
            runnable(&enabled, &instances_only, &args(&[])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle]
        );
        let all = handshake(&[
            Capability::Instances,
            Capability::LoadBalancers,
            Capability::Routes,
        ]);
        assert_eq!(
            runnable(&enabled, &all, &args(&["--cluster-cidr=10.244.0.0/16"])).unwrap(),
            enabled
        );
        assert_eq!(
            runnable(&enabled, &all, &args(&["--configure-cloud-routes=false"])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb]
        );
        let err = runnable(&enabled, &all, &args(&[])).unwrap_err();
        assert!(err.to_string().contains("--cluster-cidr"), "{err}");
        // No routes capability: no cluster CIDR needed.
        assert!(
            runnable(&[NodeRoute], &instances_only, &args(&[]))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_untagged_cloud_is_refused_unless_allowed() {
        let mut h = handshake(&[Capability::Instances]);
        assert!(check_cluster_id(&h, false).is_ok(), "unset means true");
        h.info.has_cluster_id = Some(true);
        assert!(check_cluster_id(&h, false).is_ok());
        h.info.has_cluster_id = Some(false);
        assert_eq!(
            check_cluster_id(&h, false).unwrap_err().to_string(),
            "no ClusterID found.  A ClusterID is required for the cloud provider to function properly.  This check can be bypassed by setting the allow-untagged-cloud option"
        );
        assert!(check_cluster_id(&h, true).is_ok());
    }
}
