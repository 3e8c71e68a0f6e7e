//! The manager: builds the clients, serves the admin endpoints, holds the
//! leader Lease, and starts and supervises the controllers.
//!
//! ```text
//! start ─► kube client (rate limit, fence) ─► admin server ─► acquire Lease
//!       ─► provider handshake ─► runnable controllers (capabilities)
//!       ─► Node watch (one, shared) ─► cache synced ─► controllers
//!       ─► run until: shutdown │ Lease lost │ a supervised task stops
//! ```

pub mod admin;
pub mod leader;
pub mod metrics;
pub mod node_watch;
pub mod provider_access;
pub mod startup;

// The generic pieces live in the runtime crate; named here as before.
pub use ccm_runtime::{dry_run, kube_client, supervisor};

use std::future::Future;
use std::sync::Arc;

use kube::Client;
use parking_lot::Mutex;

use crate::config::{ConfigError, ControllerName, Options};
use crate::controllers::{self, Shared};
use admin::Health;
use kube_client::{ClientThrottle, Throttle};
use leader::{Elector, Fence, LeaderError};
use node_watch::NodeWatch;
use supervisor::{Supervisor, TaskFailed};

/// Why the manager stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid provider endpoint: {0}")]
    Provider(#[from] ccm_provider_sdk::ClientError),
    #[error("kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error("error running controllers: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Admin(#[from] admin::BindError),
    #[error("serving certificate (--tls-cert-file/--tls-private-key-file): {0}")]
    ServingCert(#[from] admin::tls::CertError),
    #[error("{0}")]
    Leadership(#[from] LeaderError),
    #[error(transparent)]
    TaskFailed(#[from] TaskFailed),
}

/// What the running manager is made of.
struct Manager {
    opts: Options,
    client: Client,
    /// The secure port's TokenReviews and SubjectAccessReviews: a standby
    /// serves /metrics too, so never fenced; never throttled behind the
    /// controllers.
    reviews_client: Client,
    /// `--dry-run-writes`: what was not written.
    dry_run: Option<dry_run::DryRun>,
    provider: ccm_provider_sdk::ProviderClient,
    elector: Option<Elector>,
    /// Taken when the controllers start.
    node_watch: Option<NodeWatch>,
    health: Arc<Health>,
    manager_metrics: metrics::ManagerMetrics,
    controller_metrics: metrics::ControllerMetrics,
    /// `--provider-service-account`: the provider's tokens, minted on
    /// every replica (taken when the manager runs).
    provider_access: Option<provider_access::ProviderAccess>,
}

impl Manager {
    fn build(opts: Options, config: kube::Config) -> Result<Self, RunError> {
        let mut registry = prometheus_client::registry::Registry::default();
        let dry_run = opts
            .controllers
            .dry_run_writes
            .then(|| dry_run::DryRun::register(&mut registry));
        if dry_run.is_some() {
            tracing::warn!(
                "--dry-run-writes: shadow mode. Kubernetes writes are sent as server-side dry runs and not stored, provider mutations are not sent, and no Lease is taken (leader election is off); see ccm_dry_run_writes_total"
            );
        }
        let elector = if opts.leader_election.leader_elect && dry_run.is_none() {
            let cfg = opts
                .leader_election
                .lease_config(leader::default_identity());
            cfg.validate().map_err(ConfigError::LeaderElection)?;
            // Its own client: never rate-limited behind controller traffic,
            // never fenced (it carries the fence's renewals).
            let lease_client =
                kube_client::client(config.clone(), ClientThrottle::off(), Fence::open(), None)?;
            Some(Elector::new(lease_client, cfg))
        } else {
            None
        };
        let fence = elector.as_ref().map_or_else(Fence::open, Elector::fence);
        let throttle = ClientThrottle::from_flags(opts.kube.kube_api_qps, opts.kube.kube_api_burst);
        // Following the server, the decision is logged when it answers.
        match (throttle.follows_server(), throttle.current()) {
            (true, _) => {}
            (false, Throttle::Bucket { qps, burst }) => {
                tracing::info!(
                    "client-side rate limit of {qps} QPS, burst {burst} (--kube-api-qps)"
                );
            }
            (false, Throttle::Off) => {
                tracing::info!("no client-side rate limit (--kube-api-qps <= 0)")
            }
        }
        let reviews_client =
            kube_client::client(config.clone(), ClientThrottle::off(), Fence::open(), None)?;
        // Its own client: never fenced (a standby's provider needs its
        // token too), never a dry run (a TokenRequest stores nothing), never
        // queued behind the controllers.
        let provider_access = match &opts.provider_access.provider_kubeconfig_dir {
            Some(_) => provider_access::ProviderAccess::new(
                &opts.provider_access,
                &config,
                kube_client::client(config.clone(), ClientThrottle::off(), Fence::open(), None)?,
                &mut registry,
            )?,
            None => None,
        };
        let client = kube_client::client(config, throttle.clone(), fence.clone(), dry_run.clone())?;
        let gate: Arc<dyn ccm_provider_sdk::client::MutationGate> = match &dry_run {
            Some(d) => Arc::new(DryRunGate(d.clone())),
            None => Arc::new(fence),
        };
        let provider = startup::provider_client(
            &opts.provider,
            metrics::ProviderMetrics::register(&mut registry),
            gate,
        )?;
        let manager_metrics = metrics::ManagerMetrics::register(&mut registry);
        let controller_metrics = metrics::ControllerMetrics::register(&mut registry);
        let node_watch = NodeWatch::new();
        registry.register_collector(Box::new(metrics::scraped::ProcessCollector));
        registry.register_collector(Box::new(metrics::scraped::UninitializedNodes(
            node_watch.store(),
        )));
        let health = Arc::new(Health::new(
            elector.as_ref().map(|e| (e.fence(), Mutex::new(false))),
            node_watch.synced(),
            provider.clone(),
            registry,
        ));
        Ok(Manager {
            opts,
            client,
            reviews_client,
            dry_run,
            provider,
            elector,
            node_watch: Some(node_watch),
            health,
            manager_metrics,
            controller_metrics,
            provider_access,
        })
    }

    /// The secure port (HTTPS, delegated authn/authz) and the plain admin
    /// port, each when its port is not 0. Bound before the Lease is sought,
    /// so a standby answers probes and scrapes too.
    async fn start_serving(&self) -> Result<Vec<tokio::task::JoinHandle<()>>, RunError> {
        let serving = &self.opts.admin;
        let mut servers = Vec::new();
        if serving.secure_port != 0 {
            let cert = match (&serving.tls_cert_file, &serving.tls_private_key_file) {
                (Some(cert), Some(key)) => admin::tls::ServingCert::from_files(cert, key)?,
                _ => admin::tls::ServingCert::self_signed(serving.bind_address)?,
            };
            let tls = admin::tls::server_config(Arc::new(cert))?;
            let gate = Arc::new(admin::auth::Delegated::new(
                Arc::new(admin::auth::KubeReviews(self.reviews_client.clone())),
                &serving.authorization_always_allow_paths,
                admin::auth::Ttls {
                    token: serving.authentication_token_webhook_cache_ttl,
                    allowed: serving.authorization_webhook_cache_authorized_ttl,
                    denied: serving.authorization_webhook_cache_unauthorized_ttl,
                },
            ));
            let listener =
                admin::bind(serving.bind_address, serving.secure_port, "--secure-port").await?;
            tracing::info!(address = %local(&listener), self_signed = serving.tls_cert_file.is_none(), "serving /healthz /livez /readyz /metrics over HTTPS with delegated authentication and authorization");
            let router = admin::secure_router(self.health.clone(), gate);
            servers.push(tokio::spawn(admin::conn::serve(
                listener,
                Some(tokio_rustls::TlsAcceptor::from(tls)),
                router,
                admin::conn::Limits::default(),
            )));
        }
        if serving.admin_port != 0 {
            let listener =
                admin::bind(serving.bind_address, serving.admin_port, "--admin-port").await?;
            tracing::info!(address = %local(&listener), "serving /healthz /livez /readyz /metrics over plain HTTP, without authentication (--admin-port)");
            let router = admin::router(self.health.clone());
            servers.push(tokio::spawn(admin::conn::serve(
                listener,
                None,
                router,
                admin::conn::Limits::default(),
            )));
        }
        Ok(servers)
    }

    fn set_leading(&self, leading: bool) {
        self.health.set_leading(leading);
        self.manager_metrics.set_leader(
            &self.opts.leader_election.leader_elect_resource_name,
            leading,
        );
    }

    /// Starts the runnable controllers and supervises them. Returns only
    /// on a failure: every task runs until the process stops.
    async fn run_controllers(&mut self, enabled: &[ControllerName]) -> Result<(), RunError> {
        let handshake =
            startup::wait_for_provider(&self.provider, &self.opts.provider.provider_endpoint).await;
        startup::check_cluster_id(&handshake, self.opts.compat.allow_untagged_cloud)?;
        let runnable = startup::runnable(enabled, &handshake, &self.opts.controllers)?;

        let mut watch = self.node_watch.take().unwrap_or_default();
        // Subscribed before the watch starts, so they see the first listing.
        let mut node_events: Vec<_> = runnable
            .iter()
            .map(|c| c.follows_node_events().then(|| watch.subscribe()))
            .collect();
        let shared = Shared {
            client: self.client.clone(),
            provider: self.provider.clone(),
            nodes: watch.store(),
            node_changes: watch.changes(),
            metrics: self.controller_metrics.clone(),
            dry_run: self.dry_run.clone(),
            scope: crate::providers::Scope::single(),
        };
        let mut synced = watch.synced();
        let subscribers = watch.subscribers();
        let mut supervisor = Supervisor::new(self.health.clone());
        supervisor.spawn("node-watch", watch.drive(self.client.clone()));
        let watch_ended = tokio::select! {
            ready = synced.wait_for(|s| *s) => ready.is_err(),
            failed = supervisor.failure() => return Err(failed.into()),
        };
        if watch_ended {
            // The watch's task ended: the supervisor says how.
            return Err(supervisor.failure().await.into());
        }
        tracing::info!(nodes = shared.nodes.len(), "node cache synced");

        let mut running = Vec::new();
        for (c, events) in runnable.iter().zip(node_events.drain(..)) {
            self.start_controller(*c, &shared, events, &mut supervisor);
            running.push(*c);
        }
        let refresh = self.opts.provider.provider_capability_refresh_period;
        loop {
            tokio::select! {
                failed = supervisor.failure() => {
                    for c in &running {
                        if c.canonical() == failed.task {
                            self.manager_metrics.set_running(c.alias(), false);
                        }
                    }
                    return Err(failed.into());
                }
                _ = tokio::time::sleep(refresh), if !refresh.is_zero() => {
                    let Some(wanted) = self.capable_now(enabled).await else {
                        continue;
                    };
                    for c in wanted.iter().filter(|c| !running.contains(c)) {
                        tracing::info!(controller = c.canonical(), "the provider now has the capability it needs");
                        let events = c.follows_node_events().then(|| subscribers.subscribe());
                        self.start_controller(*c, &shared, events, &mut supervisor);
                    }
                    for c in running.iter().filter(|c| !wanted.contains(c)) {
                        tracing::warn!(controller = c.canonical(), "the provider no longer has the capability this controller needs; stopping it");
                        supervisor.stop(c.canonical());
                        self.health.remove_controller(c.canonical());
                        self.manager_metrics.set_running(c.alias(), false);
                    }
                    running = wanted;
                }
            }
        }
    }

    /// The controllers the provider's capabilities allow now, or `None`
    /// when it cannot be asked (then nothing changes).
    async fn capable_now(&self, enabled: &[ControllerName]) -> Option<Vec<ControllerName>> {
        // Asked again even on the same connection: a provider may change
        // its capabilities without restarting. A restarted provider is
        // reconnected to by the first call.
        let handshake = match self.provider.refresh_handshake().await {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "capability refresh: provider not answering");
                return None;
            }
        };
        match startup::runnable_quietly(enabled, &handshake, &self.opts.controllers) {
            Ok(wanted) => Some(wanted),
            Err(e) => {
                tracing::warn!(error = %e, "capability refresh: not changing the running controllers");
                None
            }
        }
    }

    fn start_controller(
        &self,
        c: ControllerName,
        shared: &Shared,
        events: Option<controllers::NodeEvents>,
        supervisor: &mut Supervisor,
    ) {
        tracing::info!(controller = c.canonical(), "starting");
        self.health.add_controller(c.canonical());
        self.manager_metrics.set_running(c.alias(), true);
        let task = controllers::start(
            c,
            shared,
            &self.opts.controllers,
            self.opts.compat.allow_untagged_cloud,
            events,
        );
        #[cfg(feature = "fault-injection")]
        let task = faults::maybe_panic(c, self.opts.faults.inject_panic, task);
        supervisor.spawn(c.canonical(), task);
    }
}

/// Holds back every provider mutation, counting it.
#[derive(Clone, Debug)]
pub struct DryRunGate(pub dry_run::DryRun);

impl ccm_provider_sdk::client::MutationGate for DryRunGate {
    fn allows_mutations(&self) -> bool {
        false
    }

    fn refused(&self, method: &'static str) {
        tracing::info!(method, "dry run: provider mutation not sent");
        self.0.count("provider", method.to_owned());
    }

    fn why_closed(&self) -> &'static str {
        "dry run: --dry-run-writes"
    }
}

/// A background task that stops when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn local(listener: &tokio::net::TcpListener) -> String {
    listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// Runs the enabled controllers until `shutdown` completes, talking to the
/// cluster `config` points at. With `--leader-elect`, only while holding
/// the Lease: losing it is an error (the process should exit, as
/// upstream); a clean shutdown releases it. A controller that stops or
/// panics stops the manager with an error (see [`supervisor`]).
pub async fn run(
    opts: Options,
    enabled: Vec<ControllerName>,
    config: kube::Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let mut manager = Manager::build(opts, config)?;
    // The first answer decides the client-side limit when no flag does:
    // ask at once, so the decision is in the log at start.
    let probe = manager.client.clone();
    tokio::spawn(async move {
        match probe.apiserver_version().await {
            Ok(v) => tracing::info!(version = %v.git_version, "kube-apiserver reachable"),
            Err(e) => tracing::warn!(error = %e, "asking the kube-apiserver for its version"),
        }
    });
    let servers = manager.start_serving().await?;
    // Beside the controllers, from the start, until the manager returns.
    let _provider_access = manager
        .provider_access
        .take()
        .map(|a| AbortOnDrop(tokio::spawn(a.run())));
    let mut shutdown = std::pin::pin!(shutdown);

    if let Some(e) = &manager.elector {
        tokio::select! {
            _ = e.acquire() => {}
            _ = &mut shutdown => {
                tracing::info!("shutting down before acquiring the lease");
                servers.iter().for_each(|s| s.abort());
                return Ok(());
            }
        }
        manager.set_leading(true);
    }
    let elector = manager.elector.take();
    let lost = async {
        match &elector {
            Some(e) => e.hold().await,
            None => std::future::pending().await,
        }
    };
    // Whichever ends first: dropping the controllers' future cancels every
    // reconcile and in-flight provider call; the fence then keeps anything
    // left from writing.
    let mut still_leading = true;
    let result = tokio::select! {
        r = manager.run_controllers(&enabled) => r,
        lost = lost => {
            tracing::error!(error = %lost, "stopping: leadership lost");
            still_leading = false;
            Err(RunError::Leadership(lost))
        }
        _ = &mut shutdown => {
            tracing::info!("shutting down");
            Ok(())
        }
    };
    if let Some(e) = &elector {
        manager.set_leading(false);
        if still_leading {
            // Also after a controller failed: a standby takes over at once
            // instead of waiting out the lease.
            e.release().await;
        }
    }
    servers.iter().for_each(|s| s.abort());
    result
}

#[cfg(feature = "fault-injection")]
mod faults {
    use futures::FutureExt;
    use futures::future::BoxFuture;

    use crate::config::ControllerName;

    /// `--inject-panic`: the controller's task panics shortly after it
    /// starts, as a bug would.
    pub fn maybe_panic(
        c: ControllerName,
        target: Option<ControllerName>,
        task: BoxFuture<'static, ()>,
    ) -> BoxFuture<'static, ()> {
        if target != Some(c) {
            return task;
        }
        async move {
            tokio::select! {
                _ = task => {}
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
            }
            panic!("injected panic in {c}");
        }
        .boxed()
    }
}
