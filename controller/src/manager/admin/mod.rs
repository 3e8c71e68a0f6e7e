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
    pub provider: ProviderClient,
    pub registry: Mutex<Registry>,
    /// `Probe` answered READY in time.
    provider_ready: Recent<bool>,
    /// `/livez/provider`'s answer.
    provider_serving: Recent<(StatusCode, String)>,
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
        provider: ProviderClient,
        registry: Registry,
    ) -> Self {
        Health {
            controllers: Mutex::default(),
            leader,
            node_cache_synced,
            provider,
            registry: Mutex::new(registry),
            provider_ready: Recent::new(PROVIDER_CHECK_REUSE),
            provider_serving: Recent::new(PROVIDER_CHECK_REUSE),
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

    /// The `/readyz` checks, given the provider's answer. A standby has no
    /// Node cache (the watch starts with the Lease) and is ready when the
    /// rest is: otherwise a rolling update (maxSurge 0) would wait forever
    /// for a new standby to become Ready and never replace the leader.
    pub fn readiness(&self, provider_ready: bool) -> Vec<(String, bool)> {
        let mut checks = self.checks();
        let standby = self.leader.as_ref().is_some_and(|(_, l)| !*l.lock());
        if !standby {
            checks.push((
                "node-cache-synced".to_owned(),
                *self.node_cache_synced.borrow(),
            ));
        }
        checks.push(("provider-ready".to_owned(), provider_ready));
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
            ProviderClient::connect_lazy("unix:///nonexistent.sock", Default::default()).unwrap(),
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
    match h.checks().into_iter().find(|(n, _)| *n == name) {
        Some((_, true)) => (StatusCode::OK, "ok\n".to_owned()),
        Some((_, false)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{name} failed\n"),
        ),
        None => (StatusCode::NOT_FOUND, format!("no check named {name}\n")),
    }
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    let provider = h.provider.clone();
    let provider_ready = h
        .provider_ready
        .get(|| async move {
            let probe = tokio::time::timeout(READYZ_PROBE_DEADLINE, provider.probe()).await;
            matches!(probe, Ok(Ok(Readiness::Ready)))
        })
        .await
        .unwrap_or(false);
    report(&h.readiness(provider_ready), "readyz")
}

/// The provider's own liveness, for the sidecar's probe (the kubelet cannot
/// probe a Unix socket): `grpc.health.v1` Check within
/// [`READYZ_PROBE_DEADLINE`]. Not part of `/livez`: restarting the
/// controller would not mend a wedged provider.
async fn livez_provider(State(h): State<Arc<Health>>) -> impl IntoResponse {
    let provider = h.provider.clone();
    h.provider_serving
        .get(|| provider_serving(provider))
        .await
        .unwrap_or_else(|| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "provider failed: the check failed\n".to_owned(),
            )
        })
}

async fn provider_serving(provider: ProviderClient) -> (StatusCode, String) {
    match tokio::time::timeout(READYZ_PROBE_DEADLINE, provider.serving()).await {
        Ok(Ok(true)) => (StatusCode::OK, "ok\n".to_owned()),
        Ok(Ok(false)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "provider failed: its health service is not SERVING\n".to_owned(),
        ),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("provider failed: {e}\n"),
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "provider failed: no health answer within {}s\n",
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
    Router::new()
        .route("/healthz", get(healthz))
        .route("/healthz/{check}", get(one_check))
        .route("/livez", get(livez))
        .route("/livez/provider", get(livez_provider))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
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
            provider: provider.client.clone(),
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
            provider: provider.client.clone(),
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
            provider: provider.client.clone(),
            node_cache_synced,
            provider_ready: Recent::new(reuse),
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
            names(standby.readiness(true)),
            [
                "leaderElection=true",
                "cloud-node-controller=true",
                "provider-ready=true"
            ]
        );
        assert_eq!(report(&standby.readiness(true), "readyz").0, StatusCode::OK);
        assert_eq!(
            report(&standby.readiness(false), "readyz").0,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the provider still counts"
        );
        standby.set_leading(true);
        assert_eq!(
            names(standby.readiness(true)),
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
            names(health(None).readiness(true)).contains(&"node-cache-synced=false".to_owned())
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
}
