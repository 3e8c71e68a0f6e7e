//! The manager: builds the clients, serves the admin endpoints, holds the
//! leader Lease, and starts and supervises the controllers.
//!
//! ```text
//! start ─► kube client (rate limit, fence) ─► admin server ─► acquire Lease
//!       ─► Node watch (one, shared) ─► cache synced
//!       ─► per provider, on its own: handshake ─► runnable controllers
//!          (capabilities) ─► its controllers ─► capability refresh
//!       ─► run until: shutdown │ Lease lost │ a supervised task stops
//! ```
//!
//! With several providers (`--provider`, docs/hybrid.md) each has its own
//! client (connection, concurrency limit; the one fence), handshake,
//! capability refresh and instance of every controller it can run, named
//! `<name>:<provider>`; a provider that does not answer holds back only
//! its own controllers.

pub mod admin;
pub mod leader;
pub mod metrics;
pub mod node_owners;
pub mod node_watch;
pub mod provider_access;
pub mod startup;

// The generic pieces live in the runtime crate; named here as before.
pub use ccm_runtime::{dry_run, kube_client, supervisor};

use std::future::Future;
use std::sync::Arc;

use ccm_provider_sdk::{ClientError, Handshake, ProviderClient};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use parking_lot::{Mutex, RwLock};

use crate::config::{ConfigError, ControllerName, Options};
use crate::controllers::{self, Shared};
use crate::k8s::node_store::NodeStore;
use crate::providers::{Identity, Routing, Scope, qualified};
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
    /// Every configured provider, in `--provider` order.
    providers: Vec<Provider>,
    /// Who answers for which Node and Service; each provider's identity
    /// is written in at every handshake.
    routing: Routing,
    elector: Option<Elector>,
    /// Taken when the controllers start.
    node_watch: Option<NodeWatch>,
    health: Arc<Health>,
    manager_metrics: metrics::ManagerMetrics,
    /// `--provider-service-account`: the provider's tokens, minted on
    /// every replica (taken when the manager runs).
    provider_access: Option<provider_access::ProviderAccess>,
}

/// One configured provider, as the manager runs it.
struct Provider {
    name: String,
    endpoint: String,
    client: ProviderClient,
    /// What its controller instances are handed.
    scope: Scope,
    /// What its controller instances count into.
    metrics: metrics::ControllerMetrics,
    /// Its `provider` label on `running_managed_controllers` (none with
    /// one provider).
    label: metrics::ProviderLabel,
    /// Its controllers running; `None` until its first handshake.
    running: Option<Vec<ControllerName>>,
}

impl Provider {
    fn hybrid(&self) -> bool {
        self.label.0.is_some()
    }

    /// The supervised task, health check and log name of its instance of
    /// `c`: the controller's name, `<name>:<provider>` with several.
    fn task(&self, c: ControllerName) -> &'static str {
        qualified(c.canonical(), &self.name, self.hybrid())
    }

    /// The controllers of `enabled` this provider runs at all: pv-label
    /// only for the default provider (volumes carry no owner to route by),
    /// node-route unless `--provider-routes NAME=false`.
    fn enabled(&self, enabled: &[ControllerName]) -> Vec<ControllerName> {
        let default = self.scope.routing().read().default_name() == Some(self.name.as_str());
        enabled
            .iter()
            .copied()
            .filter(|c| *c != ControllerName::PvLabel || default)
            .filter(|c| *c != ControllerName::NodeRoute || self.scope.routes())
            .collect()
    }
}

/// What a provider answered, for the manager's loop.
enum Answer {
    /// Its first handshake (awaited until it came).
    First(Arc<Handshake>),
    /// A capability refresh.
    Refresh(Result<Arc<Handshake>, ClientError>),
}

type Answers = FuturesUnordered<BoxFuture<'static, (usize, Answer)>>;

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
        // One gate for every provider: one Lease, one fence.
        let gate: Arc<dyn ccm_provider_sdk::client::MutationGate> = match &dry_run {
            Some(d) => Arc::new(DryRunGate(d.clone())),
            None => Arc::new(fence),
        };
        let configured = opts.providers()?;
        let hybrid = configured.is_hybrid();
        let routing: Routing = Arc::new(RwLock::new(configured.table));
        let provider_metrics = metrics::ProviderMetrics::register(&mut registry);
        let manager_metrics = metrics::ManagerMetrics::register(&mut registry);
        let controller_metrics =
            metrics::ControllerMetricsByProvider::register(&mut registry, hybrid);
        let mut providers = Vec::new();
        for e in configured.endpoints {
            let (calls, label) = if hybrid {
                (
                    provider_metrics.for_provider(&e.name),
                    metrics::ProviderLabel::named(&e.name),
                )
            } else {
                (provider_metrics.clone(), metrics::ProviderLabel::default())
            };
            let client = startup::provider_client(
                &e.name,
                &e.endpoint,
                &opts.provider,
                calls,
                gate.clone(),
            )?;
            providers.push(Provider {
                scope: Scope::new(routing.clone(), e.name.clone()),
                metrics: controller_metrics.for_provider(&e.name),
                name: e.name,
                endpoint: e.endpoint,
                client,
                label,
                running: None,
            });
        }
        let node_watch = NodeWatch::new();
        registry.register_collector(Box::new(metrics::scraped::CallBudgets(
            providers
                .iter()
                .map(|p| (p.label.clone(), p.client.clone()))
                .collect(),
        )));
        registry.register_collector(Box::new(metrics::scraped::ProcessCollector));
        registry.register_collector(Box::new(metrics::scraped::UninitializedNodes(
            node_watch.store(),
        )));
        let health = Arc::new(Health::new(
            elector.as_ref().map(|e| (e.fence(), Mutex::new(false))),
            node_watch.synced(),
            providers
                .iter()
                .map(|p| {
                    admin::ProviderHealth::new(hybrid.then(|| p.name.clone()), p.client.clone())
                })
                .collect(),
            registry,
        ));
        Ok(Manager {
            opts,
            client,
            reviews_client,
            dry_run,
            providers,
            routing,
            elector,
            node_watch: Some(node_watch),
            health,
            manager_metrics,
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
        let hybrid = self.routing.read().is_hybrid();
        // Every provider's handshake is awaited on its own, from the start:
        // one that does not answer holds back only its own controllers.
        let mut answers: Answers = FuturesUnordered::new();
        for (i, p) in self.providers.iter().enumerate() {
            let (client, endpoint) = (p.client.clone(), p.endpoint.clone());
            let name = hybrid.then(|| p.name.clone());
            answers.push(Box::pin(async move {
                let h = startup::wait_for_provider(&client, &endpoint, name.as_deref()).await;
                (i, Answer::First(h))
            }));
        }

        let watch = self.node_watch.take().unwrap_or_default();
        let base = Shared {
            client: self.client.clone(),
            provider: self.providers[0].client.clone(),
            nodes: watch.store(),
            node_changes: watch.changes(),
            metrics: self.providers[0].metrics.clone(),
            dry_run: self.dry_run.clone(),
            scope: self.providers[0].scope.clone(),
            batch: self.opts.provider.batch(),
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
        tracing::info!(nodes = base.nodes.len(), "node cache synced");
        if hybrid {
            supervisor.spawn(
                "node-ownership",
                node_owners::run(
                    self.routing.clone(),
                    base.nodes.clone(),
                    subscribers.subscribe(),
                    self.ownership_events(),
                ),
            );
        }

        let refresh = self.opts.provider.provider_capability_refresh_period;
        loop {
            tokio::select! {
                failed = supervisor.failure() => {
                    for p in &self.providers {
                        for c in p.running.iter().flatten() {
                            if p.task(*c) == failed.task {
                                self.manager_metrics.set_running(c.alias(), &p.label, false);
                            }
                        }
                    }
                    return Err(failed.into());
                }
                Some((i, answer)) = answers.next() => {
                    let h = match answer {
                        Answer::First(h) => {
                            startup::check_cluster_id(&h, self.opts.compat.allow_untagged_cloud)?;
                            Some(h)
                        }
                        Answer::Refresh(Ok(h)) => Some(h),
                        Answer::Refresh(Err(e)) => {
                            let p = &self.providers[i];
                            tracing::debug!(provider = hybrid.then_some(p.name.as_str()), error = %e, "capability refresh: provider not answering");
                            None
                        }
                    };
                    if let Some(h) = h {
                        // The Nodes whose owner changed: the controllers
                        // look at them again.
                        subscribers.resend(&self.learn_identity(i, &h, &base.nodes));
                        self.follow_capabilities(i, &h, enabled, &base, &subscribers, &mut supervisor)?;
                    }
                    if !refresh.is_zero() {
                        // Asked again even on the same connection: a
                        // provider may change its capabilities without
                        // restarting. A restarted provider is reconnected
                        // to by the first call.
                        let client = self.providers[i].client.clone();
                        answers.push(Box::pin(async move {
                            tokio::time::sleep(refresh).await;
                            (i, Answer::Refresh(client.refresh_handshake().await))
                        }));
                    }
                }
            }
        }
    }

    /// Records provider `i`'s identity in the routing table; the Nodes of
    /// `nodes` that it moved (several providers, and it changed: see
    /// [`node_owners::moved`]).
    fn learn_identity(&self, i: usize, h: &Handshake, nodes: &NodeStore) -> Vec<Arc<Node>> {
        let p = &self.providers[i];
        let identity = Identity::of(h);
        let before = {
            let mut table = self.routing.write();
            let before = table.clone();
            if !table.set_identity(&p.name, identity.clone()) || !table.is_hybrid() {
                return Vec::new();
            }
            before
        };
        tracing::info!(
            provider = %p.name,
            schemes = ?identity.schemes,
            classes = ?identity.classes,
            platforms = ?identity.platforms,
            serves_unclassed = identity.serves_unclassed,
            "provider identity"
        );
        // This task is the table's only writer: a read lock sees what was
        // just written.
        node_owners::moved(&before, &self.routing.read(), &nodes.state())
    }

    /// Starts and stops provider `i`'s controllers to match its handshake
    /// `h`: at the first one, what it can run (a configuration error stops
    /// the manager, as with one provider); at a refresh, the difference
    /// (an error there changes nothing).
    fn follow_capabilities(
        &mut self,
        i: usize,
        h: &Handshake,
        enabled: &[ControllerName],
        base: &Shared,
        subscribers: &node_watch::Subscribers,
        supervisor: &mut Supervisor,
    ) -> Result<(), RunError> {
        let p = &self.providers[i];
        let mine = p.enabled(enabled);
        let first = p.running.is_none();
        let wanted = if first {
            if p.hybrid() {
                if enabled.contains(&ControllerName::NodeRoute)
                    && !mine.contains(&ControllerName::NodeRoute)
                {
                    tracing::info!(provider = %p.name, "not routing this provider's Nodes: --provider-routes {}=false", p.name);
                }
                if enabled.contains(&ControllerName::PvLabel)
                    && !mine.contains(&ControllerName::PvLabel)
                {
                    tracing::info!(provider = %p.name, "pv-label-controller runs for the default provider only");
                }
            }
            startup::runnable(&mine, h, &self.opts.controllers)?
        } else {
            match startup::runnable_quietly(&mine, h, &self.opts.controllers) {
                Ok(wanted) => wanted,
                Err(e) => {
                    tracing::warn!(provider = p.hybrid().then_some(p.name.as_str()), error = %e, "capability refresh: not changing the running controllers");
                    return Ok(());
                }
            }
        };
        let running = p.running.clone().unwrap_or_default();
        let shared = Shared {
            provider: p.client.clone(),
            metrics: p.metrics.clone(),
            scope: p.scope.clone(),
            ..base.clone()
        };
        for c in wanted.iter().filter(|c| !running.contains(c)) {
            if !first {
                tracing::info!(
                    controller = p.task(*c),
                    "the provider now has the capability it needs"
                );
            }
            let events = c.follows_node_events().then(|| subscribers.subscribe());
            self.start_controller(i, *c, &shared, events, supervisor);
        }
        let p = &self.providers[i];
        for c in running.iter().filter(|c| !wanted.contains(c)) {
            tracing::warn!(
                controller = p.task(*c),
                "the provider no longer has the capability this controller needs; stopping it"
            );
            supervisor.stop(p.task(*c));
            self.health.remove_controller(p.task(*c));
            self.manager_metrics.set_running(c.alias(), &p.label, false);
        }
        self.providers[i].running = Some(wanted);
        Ok(())
    }

    /// The sink of the Node ownership Warnings (several providers only).
    fn ownership_events(&self) -> ccm_runtime::events::EventSink {
        use ccm_runtime::events;
        let recorder = events::Recorder::new(
            self.client.clone(),
            kube::runtime::events::Reporter {
                controller: "cloud-controller-manager".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let delivery = self
            .dry_run
            .clone()
            .map_or(events::Delivery::Queued, events::Delivery::DryRun);
        // At most one Event per Node and reason: a full queue is not
        // worth a series of its own.
        events::EventSink::new(
            recorder,
            delivery,
            events::QUEUE_CAPACITY,
            Default::default(),
        )
    }

    fn start_controller(
        &self,
        i: usize,
        c: ControllerName,
        shared: &Shared,
        events: Option<controllers::NodeEvents>,
        supervisor: &mut Supervisor,
    ) {
        let p = &self.providers[i];
        let task_name = p.task(c);
        tracing::info!(controller = task_name, "starting");
        self.health.add_controller(task_name);
        self.manager_metrics.set_running(c.alias(), &p.label, true);
        let task = controllers::start(
            c,
            shared,
            &self.opts.controllers,
            self.opts.compat.allow_untagged_cloud,
            events,
        );
        #[cfg(feature = "fault-injection")]
        let task = faults::maybe_panic(c, self.opts.faults.inject_panic, task);
        if p.hybrid() {
            let provider: Arc<str> = p.name.as_str().into();
            supervisor.spawn(task_name, crate::request_id::PROVIDER.scope(provider, task));
        } else {
            supervisor.spawn(task_name, task);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{Member, Table};
    use ControllerName::*;

    fn provider(routing: &Routing, name: &str, hybrid: bool) -> Provider {
        let mut registry = prometheus_client::registry::Registry::default();
        Provider {
            name: name.into(),
            endpoint: "unix:///nonexistent.sock".into(),
            client: ProviderClient::connect_lazy("unix:///nonexistent.sock", Default::default())
                .unwrap(),
            scope: Scope::new(routing.clone(), name),
            metrics: metrics::ControllerMetrics::register(&mut registry),
            label: if hybrid {
                metrics::ProviderLabel::named(name)
            } else {
                metrics::ProviderLabel::default()
            },
            running: None,
        }
    }

    /// pv-label for the default provider only; node-route unless
    /// `--provider-routes NAME=false`; names qualified with several
    /// providers only.
    #[tokio::test]
    async fn what_each_provider_runs_and_its_names() {
        let all = [CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute, PvLabel];
        let mut cloud = Member::new("cloud");
        cloud.routes = false;
        let routing: Routing = Arc::new(RwLock::new(
            Table::hybrid(vec![Member::new("onprem"), cloud], Some("onprem")).unwrap(),
        ));
        let onprem = provider(&routing, "onprem", true);
        let cloud = provider(&routing, "cloud", true);
        assert_eq!(onprem.enabled(&all), all);
        assert_eq!(
            cloud.enabled(&all),
            [CloudNode, CloudNodeLifecycle, ServiceLb]
        );
        assert_eq!(cloud.task(CloudNode), "cloud-node-controller:cloud");

        let none: Routing = Arc::new(RwLock::new(
            Table::hybrid(vec![Member::new("a")], None).unwrap(),
        ));
        assert!(!provider(&none, "a", true).enabled(&all).contains(&PvLabel));

        let single: Routing = Arc::new(RwLock::new(Table::single()));
        let one = provider(&single, "default", false);
        assert_eq!(one.enabled(&all), all);
        assert_eq!(one.task(ServiceLb), "service-lb-controller");
    }
}
