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

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

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
pub mod tls;

/// How long `/readyz` waits for the provider's `Probe`: a provider that
/// cannot answer a health check in this time is not ready. Below the
/// manifests' probe timeout (3 s) so the verdict, not a kubelet timeout,
/// is what is seen; and a hung provider never holds the probe longer.
pub const READYZ_PROBE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

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
}

impl Health {
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
        Health {
            controllers: Mutex::default(),
            leader: None,
            node_cache_synced: tokio::sync::watch::channel(false).1,
            provider: ProviderClient::connect_lazy("unix:///nonexistent.sock", Default::default())
                .unwrap(),
            registry: Mutex::default(),
        }
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
    let probe = tokio::time::timeout(READYZ_PROBE_DEADLINE, h.provider.probe()).await;
    let provider_ready = matches!(probe, Ok(Ok(Readiness::Ready)));
    report(&h.readiness(provider_ready), "readyz")
}

/// The provider's own liveness, for the sidecar's probe (the kubelet cannot
/// probe a Unix socket): `grpc.health.v1` Check within
/// [`READYZ_PROBE_DEADLINE`]. Not part of `/livez`: restarting the
/// controller would not mend a wedged provider.
async fn livez_provider(State(h): State<Arc<Health>>) -> impl IntoResponse {
    match tokio::time::timeout(READYZ_PROBE_DEADLINE, h.provider.serving()).await {
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
/// authorization of the secure port.
pub fn secure_router(health: Arc<Health>, gate: Arc<auth::Delegated>) -> Router {
    router(health).layer(axum::middleware::from_fn_with_state(gate, auth::guard))
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
            crate::runtime::leader::Fence::open(),
            Mutex::new(false),
        )));
        assert_eq!(h.checks()[0], ("leaderElection".to_owned(), true));
        // A leader whose fence is closed (a renewal missed the deadline).
        let closed = crate::runtime::leader::tests_support::closed_fence();
        let h = health(Some((closed, Mutex::new(true))));
        let (code, body) = report(&h.checks(), "healthz");
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("[-] leaderElection failed"), "{body}");
    }
}
