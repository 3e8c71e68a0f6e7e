//! The generic cloud-controller-manager: Kubernetes semantics here, every
//! cloud decision in the provider behind `--provider-endpoint`.

pub mod admin;
pub mod cloud_node;
pub mod context;
pub mod duration;
pub mod leader;
pub mod metrics;
pub mod node;
pub mod node_lifecycle;
pub mod node_route;
pub mod options;
pub mod provider_info;
pub mod pv_label;
pub mod rate_limit;
pub mod route;
pub mod service;
pub mod service_lb;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccm_provider_sdk::proto::Capability;
use ccm_provider_sdk::{ClientOptions, ProviderClient};
use kube::Client;

use crate::admin::Health;
use crate::context::{Context, NodeCache};
use crate::leader::{Elector, Fence, LeaderError};
use crate::options::{ControllerName, Options};

/// Why the manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid provider endpoint: {0}")]
    Provider(#[from] ccm_provider_sdk::ClientError),
    #[error("kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error("error running controllers: {0}")]
    Config(String),
    #[error("{0}")]
    Leadership(#[from] LeaderError),
}

/// The provider client configured from the flags, reporting every call to
/// `metrics`.
pub fn provider_client(
    opts: &Options,
    metrics: metrics::ProviderMetrics,
    fence: Fence,
) -> Result<ProviderClient, StartError> {
    Ok(ProviderClient::connect_lazy(
        &opts.provider_endpoint,
        ClientOptions {
            identity_timeout: opts.provider_identity_timeout,
            read_timeout: opts.provider_read_timeout,
            mutation_timeout: opts.provider_mutation_timeout,
            max_concurrency: Some(opts.provider_max_concurrency),
            observer: Some(Arc::new(metrics)),
            mutation_gate: Some(Arc::new(fence)),
            ..Default::default()
        },
    )?)
}

/// Waits until the provider answers its handshake. The provider sidecar may
/// start after us; we wait rather than crash-loop.
async fn wait_for_provider(
    provider: &ProviderClient,
    endpoint: &str,
) -> ccm_provider_sdk::Handshake {
    let mut delay = Duration::from_millis(200);
    let mut logged = false;
    loop {
        match provider.handshake().await {
            Ok(h) => return (*h).clone(),
            Err(e) => {
                if !logged {
                    tracing::info!(endpoint, error = %e, "waiting for the provider");
                    logged = true;
                } else {
                    tracing::debug!(endpoint, error = %e, "provider not answering yet");
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// Runs the enabled controllers until `shutdown` completes, talking to the
/// cluster `config` points at (rate-limited by `--kube-api-qps/-burst`).
/// With `--leader-elect`, only while holding the Lease: losing it is an
/// error (the process should exit, as upstream); a clean shutdown releases
/// it.
pub async fn run(
    opts: Options,
    enabled: Vec<ControllerName>,
    config: kube::Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let elector = if opts.leader_elect {
        let cfg = leader::Config {
            namespace: opts.leader_elect_resource_namespace.clone(),
            name: opts.leader_elect_resource_name.clone(),
            identity: leader::default_identity(),
            lease_duration: opts.leader_elect_lease_duration,
            renew_deadline: opts.leader_elect_renew_deadline,
            retry_period: opts.leader_elect_retry_period,
        };
        cfg.validate().map_err(StartError::Config)?;
        // Its own client: never rate-limited behind controller traffic,
        // never fenced (it carries the fence's renewals).
        let lease_client = rate_limit::client(config.clone(), 0.0, 0, Fence::open())?;
        Some(Elector::new(lease_client, cfg))
    } else {
        None
    };
    let fence = elector.as_ref().map_or_else(Fence::open, Elector::fence);
    let client: Client = rate_limit::client(
        config,
        opts.kube_api_qps,
        opts.kube_api_burst,
        fence.clone(),
    )?;
    let mut registry = prometheus_client::registry::Registry::default();
    let provider = provider_client(
        &opts,
        metrics::ProviderMetrics::register(&mut registry),
        fence.clone(),
    )?;
    let manager_metrics = metrics::ManagerMetrics::register(&mut registry);
    let controller_metrics = metrics::ControllerMetrics::register(&mut registry);
    let cache = NodeCache::new();
    let health = Arc::new(Health {
        controllers: Mutex::default(),
        leader: elector.as_ref().map(|e| (e.fence(), Mutex::new(false))),
        node_cache_synced: cache.synced(),
        provider: provider.clone(),
        registry: Mutex::new(registry),
    });
    let admin = if opts.admin_port == 0 {
        None
    } else {
        let listener = admin::bind(&opts.bind_address, opts.admin_port)
            .await
            .map_err(StartError::Config)?;
        tracing::info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "admin server serving /healthz /livez /readyz /metrics");
        let router = admin::router(health.clone());
        Some(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "admin server stopped");
            }
        }))
    };
    let mut shutdown = std::pin::pin!(shutdown);

    if let Some(e) = &elector {
        tokio::select! {
            _ = e.acquire() => {}
            _ = &mut shutdown => {
                tracing::info!("shutting down before acquiring the lease");
                if let Some(a) = admin { a.abort(); }
                return Ok(());
            }
        }
        health.set_leading(true);
        manager_metrics.set_leader(&opts.leader_elect_resource_name, true);
    }
    let lost = async {
        match &elector {
            Some(e) => e.hold().await,
            None => std::future::pending().await,
        }
    };

    let work = async {
        let handshake = wait_for_provider(&provider, &opts.provider_endpoint).await;
        let mut runnable = Vec::new();
        for c in enabled {
            let capability = match c {
                ControllerName::CloudNode | ControllerName::CloudNodeLifecycle => {
                    Capability::Instances
                }
                ControllerName::ServiceLb => Capability::LoadBalancers,
                ControllerName::NodeRoute => Capability::Routes,
                ControllerName::PvLabel => Capability::VolumeLabels,
            };
            if !handshake.has(capability) {
                tracing::warn!(
                    controller = c.canonical(),
                    capability = ?capability,
                    provider = %handshake.info.name,
                    "the provider lacks the capability this controller needs; not starting it"
                );
            } else {
                runnable.push(c);
            }
        }

        let route_cidrs = if runnable.contains(&ControllerName::NodeRoute) {
            node_route::cluster_cidrs_if_enabled(
                opts.configure_cloud_routes,
                true,
                &opts.cluster_cidr,
            )
            .map_err(StartError::Config)?
        } else {
            None
        };

        let store = cache.store.clone();
        let mut synced = cache.synced();
        let node_changes = cache.changes();
        let changes = cache.into_stream(client.clone());
        let context_for = |c: ControllerName| {
            tracing::info!(controller = c.canonical(), "starting");
            health
                .controllers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(c.canonical());
            manager_metrics.set_running(c.alias(), true);
            Context::new(
                client.clone(),
                provider.clone(),
                store.clone(),
                opts.cluster_name.clone(),
                c.canonical(),
                controller_metrics.clone(),
            )
        };
        let mut tasks = tokio::task::JoinSet::new();
        let mut refresh = None;
        if runnable.contains(&ControllerName::CloudNode) {
            // The controller consumes the watch and so keeps the cache
            // current for everyone.
            let ctx = context_for(ControllerName::CloudNode);
            let workers = opts.concurrent_node_syncs as usize;
            tasks.spawn(cloud_node::run(ctx.clone(), changes, workers));
            refresh = Some(ctx);
        } else {
            tasks.spawn(context::drain(changes));
        }
        if synced.wait_for(|s| *s).await.is_err() {
            return Ok(());
        }
        tracing::info!(nodes = store.len(), "node cache synced");
        if let Some(ctx) = refresh {
            tasks.spawn(cloud_node::refresh_addresses(
                ctx,
                opts.node_status_update_frequency,
                opts.node_status_workers(),
            ));
        }
        if runnable.contains(&ControllerName::CloudNodeLifecycle) {
            let ctx = context_for(ControllerName::CloudNodeLifecycle);
            tasks.spawn(node_lifecycle::run(ctx, opts.node_monitor_period));
        }
        if let Some(cidrs) = route_cidrs {
            let ctx = context_for(ControllerName::NodeRoute);
            tasks.spawn(node_route::run(
                ctx,
                cidrs,
                opts.route_reconciliation_period,
                node_changes.clone(),
            ));
        }
        if runnable.contains(&ControllerName::PvLabel) {
            tasks.spawn(pv_label::run(context_for(ControllerName::PvLabel)));
        }
        if runnable.contains(&ControllerName::ServiceLb) {
            let ctx = context_for(ControllerName::ServiceLb);
            tasks.spawn(service_lb::run(
                ctx,
                client.clone(),
                node_changes,
                opts.concurrent_service_syncs as usize,
            ));
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    };
    // Whichever ends first: dropping `work` cancels every reconcile and
    // in-flight provider call; the fence then keeps anything left from
    // writing.
    let result = tokio::select! {
        r = work => r,
        lost = lost => {
            tracing::error!(error = %lost, "stopping: leadership lost");
            Err(StartError::Leadership(lost))
        }
        _ = &mut shutdown => {
            tracing::info!("shutting down");
            Ok(())
        }
    };
    if let Some(e) = &elector {
        health.set_leading(false);
        manager_metrics.set_leader(&opts.leader_elect_resource_name, false);
        if result.is_ok() {
            e.release().await;
        }
    }
    if let Some(a) = admin {
        a.abort();
    }
    result
}
