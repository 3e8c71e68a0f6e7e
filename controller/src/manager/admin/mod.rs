//! The admin endpoints: `/healthz` (with `/healthz/<check>`), `/livez`,
//! `/readyz` and `/metrics`. Served over HTTPS on `--secure-port` behind
//! delegated authentication and authorization ([`auth`], [`tls`]), as
//! upstream, and optionally as plain HTTP on `--admin-port`.
//!
//! `/healthz` has upstream's checks: `leaderElection` (with leader election
//! on) and one per running controller, by canonical name; `/livez` is the
//! same. `/readyz` (upstream has none) adds what serving needs: the
//! provider answering `Probe` with READY within [`READYZ_PROBE_DEADLINE`]
//! and, unless a standby, the node cache synced.
//!
//! With several providers (docs/hybrid.md) every check that concerns one
//! provider is named `<check>:<provider>`: `provider-ready:cloud` in
//! `/readyz`, `cloud-node-controller:onprem` in `/healthz`, and
//! `/livez/provider:cloud` for each provider's sidecar (no
//! `/livez/provider` then: which sidecar would it judge?).
//!
//! The provider checks behind `/readyz` and `/livez/provider` are asked at
//! most once per [`PROVIDER_CHECK_REUSE`]: requests arriving meanwhile, or
//! while a check is in flight, share its answer, so anonymous requests
//! cannot multiply the provider's work.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use ccm_provider_sdk::{ProviderClient, Readiness};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;

use super::leader::Fence;

pub mod auth;
pub mod conn;
pub mod tls;

/// How long `/readyz` waits for the provider's `Probe`: a provider that
/// cannot answer a health check in this time is not ready. Below the
/// manifests' probe timeout (3 s) so the verdict, not a kubelet timeout,
/// is what is seen; and a hung provider never holds the probe longer.
pub const READYZ_PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// How long a provider check's answer is reused. Short against the
/// kubelet's probe period (10 s by default), so a change is seen by the
/// next probe; long enough that a burst of requests costs one check.
pub const PROVIDER_CHECK_REUSE: Duration = Duration::from_secs(1);

/// The last answer of a check, reused for a while; concurrent askers wait
/// for the one check in flight instead of starting their own.
pub struct Recent<T> {
    reuse: Duration,
    slot: Arc<Mutex<Slot<T>>>,
}

enum Slot<T> {
    Empty,
    Done(Instant, T),
    /// `None`: the check panicked.
    Running(Shared<BoxFuture<'static, Option<T>>>),
}

impl<T: Clone + Send + Sync + 'static> Recent<T> {
    pub fn new(reuse: Duration) -> Self {
        Recent {
            reuse,
            slot: Arc::new(Mutex::new(Slot::Empty)),
        }
    }

    /// The last answer if recent, else that of the check in flight, else
    /// `check`'s. The check runs as a task of its own, so askers that give
    /// up (a client hanging up) do not cancel it and make the next asker
    /// start another. `None` if the check panicked.
    async fn get<F>(&self, check: impl FnOnce() -> F) -> Option<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let running = {
            let mut slot = self.slot.lock();
            match &*slot {
                Slot::Done(at, answer) if at.elapsed() < self.reuse => {
                    return Some(answer.clone());
                }
                Slot::Running(running) => running.clone(),
                Slot::Empty | Slot::Done(..) => {
                    let store = self.slot.clone();
                    let check = check();
                    let task = tokio::spawn(async move {
                        let answer = check.await;
                        *store.lock() = Slot::Done(Instant::now(), answer.clone());
                        answer
                    });
                    let running = async move { task.await.ok() }.boxed().shared();
                    *slot = Slot::Running(running.clone());
                    running
                }
            }
        };
        let answer = running.await;
        if answer.is_none() {
            // Let the next asker check again.
            let mut slot = self.slot.lock();
            if matches!(*slot, Slot::Running(_)) {
                *slot = Slot::Empty;
            }
        }
        answer
    }
}

/// What the endpoints report on; shared with the running manager.
pub struct Health {
    /// Canonical names of the controllers started so far, and whether each
    /// still runs.
    pub controllers: Mutex<Vec<(&'static str, bool)>>,
    /// With leader election: our fence, and whether we hold the Lease.
    pub leader: Option<(Fence, Mutex<bool>)>,
    pub node_cache_synced: tokio::sync::watch::Receiver<bool>,
    /// Every configured provider, in `--provider` order.
    pub providers: Vec<ProviderHealth>,
    pub registry: Mutex<Registry>,
}

/// One provider's checks.
pub struct ProviderHealth {
    /// With several providers, its name: the suffix of its checks. `None`
    /// with one, whose checks keep their names.
    pub name: Option<String>,
    pub client: ProviderClient,
    /// `Probe` answered READY in time.
    ready: Recent<bool>,
    /// `/livez/provider`'s answer.
    serving: Recent<(StatusCode, String)>,
}

impl ProviderHealth {
    pub fn new(name: Option<String>, client: ProviderClient) -> Self {
        ProviderHealth {
            name,
            client,
            ready: Recent::new(PROVIDER_CHECK_REUSE),
            serving: Recent::new(PROVIDER_CHECK_REUSE),
        }
    }

    /// `check`, or `check:<provider>` with several providers.
    pub fn check_name(&self, check: &str) -> String {
        match &self.name {
            Some(n) => format!("{check}:{n}"),
            None => check.to_owned(),
        }
    }

    /// Whether `Probe` answers READY within [`READYZ_PROBE_DEADLINE`]
    /// (shared, see [`Recent`]).
    async fn is_ready(&self) -> bool {
        let provider = self.client.clone();
        self.ready
            .get(|| async move {
                let probe = tokio::time::timeout(READYZ_PROBE_DEADLINE, provider.probe()).await;
                matches!(probe, Ok(Ok(Readiness::Ready)))
            })
            .await
            .unwrap_or(false)
    }
}

/// A supervised task that stopped turns its `/healthz` check red.
impl ccm_runtime::supervisor::TaskHealth for Health {
    fn mark_failed(&self, task: &str) {
        Health::mark_failed(self, task);
    }
}

impl Health {
    pub fn new(
        leader: Option<(Fence, Mutex<bool>)>,
        node_cache_synced: tokio::sync::watch::Receiver<bool>,
        providers: Vec<ProviderHealth>,
        registry: Registry,
    ) -> Self {
        Health {
            controllers: Mutex::default(),
            leader,
            node_cache_synced,
            providers,
            registry: Mutex::new(registry),
        }
    }

    /// (name, ok) of every `/healthz` check.
    pub fn checks(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        if let Some((fence, leading)) = &self.leader {
            // A leader that can no longer write is about to exit; a
            // standby is healthy.
            let leading = *leading.lock();
            out.push((
                "leaderElection".to_owned(),
                !leading || fence.allows_writes(),
            ));
        }
        for (c, running) in self.controllers.lock().iter() {
            out.push(((*c).to_owned(), *running));
        }
        if out.is_empty() {
            out.push(("ping".to_owned(), true));
        }
        out
    }

    /// The `/readyz` checks, given each provider's readiness check (in
    /// [`Health::providers`] order). A standby has no Node cache (the
    /// watch starts with the Lease) and is ready when the rest is:
    /// otherwise a rolling update (maxSurge 0) would wait forever for a new
    /// standby to become Ready and never replace the leader.
    pub fn readiness(&self, providers_ready: &[bool]) -> Vec<(String, bool)> {
        let mut checks = self.checks();
        let standby = self.leader.as_ref().is_some_and(|(_, l)| !*l.lock());
        if !standby {
            checks.push((
                "node-cache-synced".to_owned(),
                *self.node_cache_synced.borrow(),
            ));
        }
        for (p, ready) in self.providers.iter().zip(providers_ready) {
            checks.push((p.check_name("provider-ready"), *ready));
        }
        checks
    }

    pub fn set_leading(&self, leading: bool) {
        if let Some((_, l)) = &self.leader {
            *l.lock() = leading;
        }
    }

    /// A controller started: it gets a check named after it.
    pub fn add_controller(&self, name: &'static str) {
        self.controllers.lock().push((name, true));
    }

    /// A controller stopped on purpose (its capability went away): its
    /// check goes.
    pub fn remove_controller(&self, name: &str) {
        self.controllers.lock().retain(|(c, _)| *c != name);
    }

    /// A supervised task stopped: its check fails from now on.
    pub fn mark_failed(&self, name: &str) {
        for (c, running) in self.controllers.lock().iter_mut() {
            if *c == name {
                *running = false;
            }
        }
    }

    #[cfg(test)]
    pub fn for_tests() -> Self {
        Health::new(
            None,
            tokio::sync::watch::channel(false).1,
            vec![ProviderHealth::new(
                None,
                ProviderClient::connect_lazy("unix:///nonexistent.sock", Default::default())
                    .unwrap(),
            )],
            Registry::default(),
        )
    }
}

fn report(checks: &[(String, bool)], what: &str) -> (StatusCode, String) {
    let mut body = String::new();
    for (name, ok) in checks {
        body.push_str(&format!(
            "[{}] {name} {}\n",
            if *ok { "+" } else { "-" },
            if *ok { "ok" } else { "failed" }
        ));
    }
    if checks.iter().all(|(_, ok)| *ok) {
        body.push_str(&format!("{what} check passed\n"));
        (StatusCode::OK, body)
    } else {
        body.push_str(&format!("{what} check failed\n"));
        (StatusCode::INTERNAL_SERVER_ERROR, body)
    }
}

async fn healthz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    report(&h.checks(), "healthz")
}

async fn livez(State(h): State<Arc<Health>>) -> impl IntoResponse {
    report(&h.checks(), "livez")
}

async fn one_check(State(h): State<Arc<Health>>, Path(name): Path<String>) -> impl IntoResponse {
    let checks = h.checks();
    // A controller's alias names its check too (`cloud-node`,
    // `cloud-node:onprem`).
    let canonical = {
        let (c, provider) = match name.split_once(':') {
            Some((c, p)) => (c, Some(p)),
            None => (name.as_str(), None),
        };
        crate::config::ControllerName::parse(c).map(|c| match provider {
            Some(p) => format!("{}:{p}", c.canonical()),
            None => c.canonical().to_owned(),
        })
    };
    let found = checks
        .iter()
        .find(|(n, _)| *n == name)
        .or_else(|| checks.iter().find(|(n, _)| Some(n) == canonical.as_ref()))
        .cloned();
    match found {
        Some((_, true)) => (StatusCode::OK, "ok\n".to_owned()),
        Some((_, false)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{name} failed\n"),
        ),
        None => (StatusCode::NOT_FOUND, format!("no check named {name}\n")),
    }
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    // All at once: a hung provider costs its deadline once, not per
    // provider before it.
    let ready = futures::future::join_all(h.providers.iter().map(ProviderHealth::is_ready)).await;
    report(&h.readiness(&ready), "readyz")
}

/// A provider's own liveness, for its sidecar's probe (the kubelet cannot
/// probe a Unix socket): `grpc.health.v1` Check within
/// [`READYZ_PROBE_DEADLINE`]. Not part of `/livez`: restarting the
/// controller would not mend a wedged provider. `/livez/provider`, or
/// `/livez/provider:<name>` for each of several.
async fn livez_provider(h: Arc<Health>, index: usize) -> (StatusCode, String) {
    let p = &h.providers[index];
    let provider = p.client.clone();
    let check = p.check_name("provider");
    let answer = p
        .serving
        .get(|| provider_serving(provider, check.clone()))
        .await;
    answer.unwrap_or_else(|| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{check} failed: the check failed\n"),
        )
    })
}

async fn provider_serving(provider: ProviderClient, check: String) -> (StatusCode, String) {
    match tokio::time::timeout(READYZ_PROBE_DEADLINE, provider.serving()).await {
        Ok(Ok(true)) => (StatusCode::OK, "ok\n".to_owned()),
        Ok(Ok(false)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{check} failed: its health service is not SERVING\n"),
        ),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{check} failed: {e}\n"),
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "{check} failed: no health answer within {}s\n",
                READYZ_PROBE_DEADLINE.as_secs()
            ),
        ),
    }
}

async fn metrics(State(h): State<Arc<Health>>) -> impl IntoResponse {
    let mut text = String::new();
    let registry = h.registry.lock();
    match prometheus_client::encoding::text::encode(&mut text, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            e.to_string(),
        ),
    }
}

pub fn router(health: Arc<Health>) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/healthz/{check}", get(one_check))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics));
    // One route per provider (no pattern: an unknown path stays a 404
    // that costs no review on the secure port).
    for (i, p) in health.providers.iter().enumerate() {
        let path = format!("/livez/{}", p.check_name("provider"));
        router = router.route(
            &path,
            get(move |State(h): State<Arc<Health>>| livez_provider(h, i)),
        );
    }
    router.with_state(health)
}

/// The same endpoints behind the delegated authentication and
/// authorization of the secure port. The gate runs only for the paths
/// served: any other is 404 without a TokenReview or SubjectAccessReview
/// (upstream reviews first, then answers 404 or 403; here an unknown path
/// costs the apiserver nothing).
pub fn secure_router(health: Arc<Health>, gate: Arc<auth::Delegated>) -> Router {
    router(health).route_layer(axum::middleware::from_fn_with_state(gate, auth::guard))
}

/// A serving address could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("failed to listen on {addr} (--bind-address/{flag}): {source}")]
pub struct BindError {
    addr: SocketAddr,
    flag: &'static str,
    source: std::io::Error,
}

/// Binds a serving address, failing clearly (port in use, no permission);
/// `flag` names the port's flag in the error.
pub async fn bind(
    address: IpAddr,
    port: u16,
    flag: &'static str,
) -> Result<tokio::net::TcpListener, BindError> {
    let addr = SocketAddr::new(address, port);
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, flag, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(leader: Option<(Fence, Mutex<bool>)>) -> Health {
        let h = Health {
            leader,
            ..Health::for_tests()
        };
        h.add_controller("cloud-node-controller");
        h
    }

    async fn get(app: &Router, path: &str) -> (StatusCode, String) {
        use tower::ServiceExt;
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let code = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    /// Anonymous `/readyz` requests are free to send: they must not each
    /// cost the provider a `Probe`.
    #[tokio::test]
    async fn concurrent_readyz_requests_share_one_probe() {
        let provider = crate::testing::fake_provider(Default::default());
        crate::testing::ready(&provider).await;
        provider.fake.clear_calls();
        let (_synced, node_cache_synced) = tokio::sync::watch::channel(true);
        let app = router(Arc::new(Health {
            providers: vec![ProviderHealth::new(None, provider.client.clone())],
            node_cache_synced,
            ..Health::for_tests()
        }));
        let probes = || {
            provider
                .fake
                .calls_of(ccm_fake_provider::Method::Probe)
                .len()
        };
        let answers = futures::future::join_all((0..300).map(|_| get(&app, "/readyz"))).await;
        assert!(
            answers.iter().all(|(code, _)| *code == StatusCode::OK),
            "{:?}",
            answers.iter().find(|(code, _)| *code != StatusCode::OK)
        );
        assert!(probes() <= 2, "{} Probes for 300 requests", probes());
    }

    /// A client hanging up does not cancel the check it waits for, so
    /// requests given up on one after another still share one Probe.
    #[tokio::test]
    async fn abandoned_readyz_requests_do_not_restart_the_probe() {
        let provider = crate::testing::fake_provider(Default::default());
        crate::testing::ready(&provider).await;
        provider.fake.clear_calls();
        provider
            .fake
            .set_latency(ccm_fake_provider::Method::Probe, Duration::from_millis(300));
        let (_synced, node_cache_synced) = tokio::sync::watch::channel(true);
        let app = router(Arc::new(Health {
            providers: vec![ProviderHealth::new(None, provider.client.clone())],
            node_cache_synced,
            ..Health::for_tests()
        }));
        for _ in 0..20 {
            let given_up =
                tokio::time::timeout(Duration::from_millis(5), get(&app, "/readyz")).await;
            assert!(given_up.is_err(), "answered before the Probe's latency");
        }
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
        let probes = provider
            .fake
            .calls_of(ccm_fake_provider::Method::Probe)
            .len();
        assert_eq!(probes, 1, "{probes} Probes for 21 requests");
    }

    /// The shared answer is recent: a provider turning not ready is seen
    /// once the reuse time has passed.
    #[tokio::test]
    async fn readyz_sees_a_change_once_the_answer_is_stale() {
        let provider = crate::testing::fake_provider(Default::default());
        crate::testing::ready(&provider).await;
        let (_synced, node_cache_synced) = tokio::sync::watch::channel(true);
        let reuse = Duration::from_millis(200);
        let app = router(Arc::new(Health {
            providers: vec![ProviderHealth {
                ready: Recent::new(reuse),
                ..ProviderHealth::new(None, provider.client.clone())
            }],
            node_cache_synced,
            ..Health::for_tests()
        }));
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
        provider
            .fake
            .set_readiness(Readiness::NotReady("credentials expired".into()));
        let changed = Instant::now();
        let deadline = changed + Duration::from_secs(5);
        loop {
            let (code, body) = get(&app, "/readyz").await;
            if code == StatusCode::INTERNAL_SERVER_ERROR {
                assert!(body.contains("[-] provider-ready failed"), "{body}");
                break;
            }
            assert!(Instant::now() < deadline, "still ready after 5 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            changed.elapsed() < reuse + READYZ_PROBE_DEADLINE,
            "seen after {:?}",
            changed.elapsed()
        );
    }

    #[tokio::test]
    async fn a_port_in_use_is_a_clear_error() {
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = bind([127, 0, 0, 1].into(), port, "--admin-port")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "failed to listen on 127.0.0.1:{port} (--bind-address/--admin-port)"
            )),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_standby_is_ready_without_a_node_cache_and_a_leader_is_not() {
        let names = |checks: Vec<(String, bool)>| {
            checks
                .into_iter()
                .map(|(n, ok)| format!("{n}={ok}"))
                .collect::<Vec<_>>()
        };
        let standby = health(Some((Fence::open(), Mutex::new(false))));
        assert_eq!(
            names(standby.readiness(&[true])),
            [
                "leaderElection=true",
                "cloud-node-controller=true",
                "provider-ready=true"
            ]
        );
        assert_eq!(
            report(&standby.readiness(&[true]), "readyz").0,
            StatusCode::OK
        );
        assert_eq!(
            report(&standby.readiness(&[false]), "readyz").0,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the provider still counts"
        );
        standby.set_leading(true);
        assert_eq!(
            names(standby.readiness(&[true])),
            [
                "leaderElection=true",
                "cloud-node-controller=true",
                "node-cache-synced=false",
                "provider-ready=true"
            ],
            "leading: the cache must be synced"
        );
        // Without leader election there is no standby.
        assert!(
            names(health(None).readiness(&[true])).contains(&"node-cache-synced=false".to_owned())
        );
    }

    #[tokio::test]
    async fn healthz_has_upstream_checks_and_fails_a_fenced_leader() {
        let h = health(None);
        assert_eq!(h.checks(), vec![("cloud-node-controller".to_owned(), true)]);
        let (code, body) = report(&h.checks(), "healthz");
        assert_eq!(code, StatusCode::OK);
        assert!(body.contains("[+] cloud-node-controller ok"), "{body}");

        let h = health(Some((
            crate::manager::leader::Fence::open(),
            Mutex::new(false),
        )));
        assert_eq!(h.checks()[0], ("leaderElection".to_owned(), true));
        // A leader whose fence is closed (a renewal missed the deadline).
        let closed = crate::manager::leader::tests_support::closed_fence();
        let h = health(Some((closed, Mutex::new(true))));
        let (code, body) = report(&h.checks(), "healthz");
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("[-] leaderElection failed"), "{body}");
    }

    /// Several providers: one readiness check and one liveness path per
    /// provider, named after it; a sick provider fails only its own.
    #[tokio::test]
    async fn each_of_several_providers_has_its_own_checks() {
        let up = crate::testing::fake_provider(Default::default());
        crate::testing::ready(&up).await;
        let down =
            ProviderClient::connect_lazy("unix:///nonexistent/down.sock", Default::default())
                .unwrap();
        let (_synced, node_cache_synced) = tokio::sync::watch::channel(true);
        let health = Arc::new(Health {
            providers: vec![
                ProviderHealth::new(Some("cloud".into()), up.client.clone()),
                ProviderHealth::new(Some("onprem".into()), down),
            ],
            node_cache_synced,
            ..Health::for_tests()
        });
        health.add_controller("cloud-node-controller:cloud");
        let app = router(health);
        let (code, body) = get(&app, "/readyz").await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(body.contains("[+] provider-ready:cloud ok"), "{body}");
        assert!(body.contains("[-] provider-ready:onprem failed"), "{body}");
        assert!(!body.contains("] provider-ready "), "{body}");
        assert_eq!(get(&app, "/livez/provider:cloud").await.0, StatusCode::OK);
        let (code, body) = get(&app, "/livez/provider:onprem").await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.starts_with("provider:onprem failed: "), "{body}");
        assert_eq!(
            get(&app, "/livez/provider").await.0,
            StatusCode::NOT_FOUND,
            "which provider's?"
        );
        // A controller's check by its canonical name or its alias.
        for path in [
            "/healthz/cloud-node-controller:cloud",
            "/healthz/cloud-node:cloud",
        ] {
            assert_eq!(get(&app, path).await.0, StatusCode::OK, "{path}");
        }
        assert_eq!(
            get(&app, "/healthz/cloud-node:onprem").await.0,
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn one_provider_keeps_its_check_names() {
        let up = crate::testing::fake_provider(Default::default());
        crate::testing::ready(&up).await;
        let (_synced, node_cache_synced) = tokio::sync::watch::channel(true);
        let app = router(Arc::new(Health {
            providers: vec![ProviderHealth::new(None, up.client.clone())],
            node_cache_synced,
            ..Health::for_tests()
        }));
        let (code, body) = get(&app, "/readyz").await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert!(body.contains("[+] provider-ready ok"), "{body}");
        assert_eq!(
            get(&app, "/livez/provider").await,
            (StatusCode::OK, "ok\n".into())
        );
    }
}
