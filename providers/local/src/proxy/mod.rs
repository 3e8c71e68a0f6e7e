//! The data path of a load balancer, run inside the provider process: one
//! [`LoadBalancerProxy`] per VIP, one listener per Service port, forwarding
//! to `node IP : nodePort` the way a cloud L4 load balancer does, so that
//! kube-proxy on the nodes sees ordinary load balancer traffic.
//!
//! Everything a proxy spawns hangs off one cancellation token and is
//! tracked, so that [`LoadBalancerProxy::shutdown`] can wait until every
//! socket is closed: the caller may rebind the VIP ports right after.

mod config;
mod health;
mod state;
mod tcp;
mod udp;

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

pub use config::{HealthCheck, IpNet, Listener, Protocol, ProxyConfig};
use state::{ListenerState, Shared};

/// Why a proxy could not start or take a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A listener could not bind (port taken, VIP not local, privileged
    /// port). Nothing the call bound stays bound.
    #[error("cannot bind {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The configuration is inconsistent or asks for something the running
    /// proxy cannot do (such as moving to another VIP).
    #[error("invalid load balancer configuration: {0}")]
    InvalidConfig(String),
}

/// Counters of one listener since it was bound; a listener kept across
/// updates keeps counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerStats {
    pub protocol: Protocol,
    pub port: u16,
    /// TCP: connections accepted and forwarded to a backend. UDP: flows
    /// created.
    pub connections_total: u64,
    /// TCP connections or UDP flows open now.
    pub active: u64,
    /// Payload bytes client -> backend.
    pub bytes_in: u64,
    /// Payload bytes backend -> client.
    pub bytes_out: u64,
    /// Connections / datagrams from outside the source ranges.
    pub rejected_source: u64,
    /// Connections / datagrams over `max_qps`.
    pub rejected_rate: u64,
    /// Connections / new flows with no healthy backend, or whose every
    /// connect attempt failed.
    pub no_backend: u64,
    /// UDP: datagrams from new clients dropped because the flow table was
    /// full.
    pub rejected_flow_limit: u64,
}

struct ListenerHandle {
    state: Arc<ListenerState>,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl ListenerHandle {
    /// Stops the accept or receive loop and every connection or flow of the
    /// listener, and returns once all their sockets are closed.
    async fn close(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

enum Bound {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

/// One load balancer: a VIP with its listeners, backends and health checks.
/// Dropping it stops everything too, but without waiting for the sockets to
/// close; call [`LoadBalancerProxy::shutdown`] to know the ports are free.
pub struct LoadBalancerProxy {
    shared: Arc<Shared>,
    listeners: Mutex<HashMap<(Protocol, u16), ListenerHandle>>,
    /// Serialises updates: each diffs against the configuration the previous
    /// one left.
    update_lock: tokio::sync::Mutex<()>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl LoadBalancerProxy {
    /// Binds every listener (all or nothing: a failed bind releases the
    /// others) and starts health checks. `name` identifies the load balancer
    /// in logs.
    pub async fn start(name: String, config: ProxyConfig) -> Result<Self, ProxyError> {
        config.validate()?;
        let bound = bind_all(config.vip, config.listeners.iter()).await?;
        info!(
            proxy = %name,
            vip = %config.vip,
            listeners = ?config.listeners,
            backends = ?config.backends,
            "load balancer started"
        );
        let shared = Arc::new(Shared::new(name, config));
        let cancel = CancellationToken::new();
        let proxy = LoadBalancerProxy {
            shared: shared.clone(),
            listeners: Mutex::new(HashMap::new()),
            update_lock: tokio::sync::Mutex::new(()),
            cancel: cancel.clone(),
            tasks: TaskTracker::new(),
        };
        for (listener, socket) in bound {
            proxy.spawn_listener(&listener, socket);
        }
        proxy.tasks.spawn(health::run(shared, cancel.child_token()));
        Ok(proxy)
    }

    /// Applies a new config: listeners whose (protocol, port) stay keep
    /// their socket and their established connections/flows (which keep
    /// their backend even if it was removed); new ones are bound, removed
    /// ones closed with their connections before this returns. New backends
    /// take new connections; health state of kept backends is kept. A
    /// changed vip is InvalidConfig (the caller restarts the proxy). Bind
    /// failure leaves the old config running.
    pub async fn update(&self, config: ProxyConfig) -> Result<(), ProxyError> {
        config.validate()?;
        let _serial = self.update_lock.lock().await;
        let old = self.shared.config();
        if config.vip != old.vip {
            return Err(ProxyError::InvalidConfig(format!(
                "vip changed from {} to {}; start a new load balancer",
                old.vip, config.vip
            )));
        }
        if *old == config {
            return Ok(());
        }
        let old_keys: HashSet<_> = old.listeners.iter().map(Listener::key).collect();
        let new_keys: HashSet<_> = config.listeners.iter().map(Listener::key).collect();
        let added = config
            .listeners
            .iter()
            .filter(|l| !old_keys.contains(&l.key()));
        let bound = bind_all(config.vip, added).await?;

        // Nothing below can fail or await before the new listeners run, so
        // a caller dropping this future cannot leave the change half done.
        let removed: Vec<ListenerHandle> = {
            let mut listeners = self.listeners.lock();
            for l in &config.listeners {
                if let Some(h) = listeners.get(&l.key()) {
                    h.state.reconfigure(l, &config);
                }
            }
            let gone: Vec<_> = listeners
                .keys()
                .filter(|k| !new_keys.contains(k))
                .copied()
                .collect();
            gone.iter().filter_map(|k| listeners.remove(k)).collect()
        };
        info!(
            proxy = %self.shared.name,
            listeners = ?config.listeners,
            backends = ?config.backends,
            "load balancer updated"
        );
        self.shared.replace_config(config);
        for (listener, socket) in bound {
            self.spawn_listener(&listener, socket);
        }
        for h in &removed {
            h.cancel.cancel();
        }
        for h in removed {
            let (protocol, port) = (h.state.protocol, h.state.port);
            h.close().await;
            info!(proxy = %self.shared.name, %protocol, port, "listener closed");
        }
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> ProxyConfig {
        (*self.shared.config()).clone()
    }

    /// Per listener counters snapshot, in configured order.
    pub fn stats(&self) -> Vec<ListenerStats> {
        let config = self.shared.config();
        let listeners = self.listeners.lock();
        config
            .listeners
            .iter()
            .filter_map(|l| listeners.get(&l.key()).map(|h| h.state.stats()))
            .collect()
    }

    /// Health of each backend as last checked, in configured order; a
    /// backend not checked yet counts as healthy, as it does for traffic.
    pub fn backend_health(&self) -> Vec<(IpAddr, bool)> {
        self.shared.backend_health()
    }

    /// Closes the listeners, every connection and flow, stops health checks;
    /// after it returns the VIP ports are free to bind again.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        let handles: Vec<_> = self.listeners.lock().drain().map(|(_, h)| h).collect();
        for h in handles {
            h.close().await;
        }
        self.tasks.close();
        self.tasks.wait().await;
        info!(proxy = %self.shared.name, "load balancer stopped");
    }

    fn spawn_listener(&self, listener: &Listener, socket: Bound) {
        let state = Arc::new(ListenerState::new(listener));
        let cancel = self.cancel.child_token();
        let tracker = TaskTracker::new();
        let shared = self.shared.clone();
        match socket {
            Bound::Tcp(l) => {
                tracker.spawn(tcp::serve(
                    l,
                    shared,
                    state.clone(),
                    cancel.clone(),
                    tracker.clone(),
                ));
            }
            Bound::Udp(s) => {
                tracker.spawn(udp::serve(
                    s,
                    shared,
                    state.clone(),
                    cancel.clone(),
                    tracker.clone(),
                ));
            }
        }
        info!(
            proxy = %self.shared.name,
            protocol = %listener.protocol,
            port = listener.port,
            node_port = listener.node_port,
            "listener bound"
        );
        self.listeners.lock().insert(
            listener.key(),
            ListenerHandle {
                state,
                cancel,
                tracker,
            },
        );
    }
}

impl Drop for LoadBalancerProxy {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Binds in order; on the first failure the sockets bound so far are
/// dropped with the vector, which releases them.
async fn bind_all<'a>(
    vip: IpAddr,
    listeners: impl Iterator<Item = &'a Listener>,
) -> Result<Vec<(Listener, Bound)>, ProxyError> {
    let mut bound = Vec::new();
    for l in listeners {
        let addr = SocketAddr::new(vip, l.port);
        let socket = match l.protocol {
            Protocol::Tcp => TcpListener::bind(addr).await.map(Bound::Tcp),
            Protocol::Udp => UdpSocket::bind(addr).await.map(Bound::Udp),
        };
        match socket {
            Ok(s) => bound.push((l.clone(), s)),
            Err(source) => return Err(ProxyError::Bind { addr, source }),
        }
    }
    Ok(bound)
}
