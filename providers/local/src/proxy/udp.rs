//! UDP listeners. Each client address gets a flow: an upstream socket
//! connected to the backend chosen for its first datagram, so that replies
//! come back on the flow's own socket and can be relayed to the right
//! client from the VIP socket.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::UdpSocket;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use super::state::{ActiveGuard, Activity, ListenerState, Shared, bump};

/// Largest UDP payload over IPv4 or IPv6 (without jumbograms).
const MAX_DATAGRAM: usize = 65_535;
/// Flows per listener. Each holds a socket (a file descriptor), so past
/// this many live clients, datagrams from new clients are dropped (counted
/// as `rejected_flow_limit`) until flows expire, the way a full conntrack
/// table drops new connections; established flows are never evicted.
/// The process file descriptor limit may be hit first, in which case the
/// flow cannot be opened and the datagram counts as `no_backend`.
pub(crate) const MAX_FLOWS: usize = 16_384;
/// Bounds the wait for a new flow's socket to become writable.
const FIRST_SEND_TIMEOUT: Duration = Duration::from_millis(100);
/// After a receive error on the VIP socket, so that the loop does not spin.
const RECV_BACKOFF: Duration = Duration::from_millis(10);

#[derive(Clone)]
struct Flow {
    id: u64,
    upstream: Arc<UdpSocket>,
    activity: Arc<Activity>,
    cancel: CancellationToken,
}

type Flows = Arc<Mutex<HashMap<SocketAddr, Flow>>>;

struct Ctx {
    socket: Arc<UdpSocket>,
    shared: Arc<Shared>,
    state: Arc<ListenerState>,
    cancel: CancellationToken,
    tracker: TaskTracker,
    flows: Flows,
    next_id: u64,
}

pub(crate) async fn serve(
    socket: UdpSocket,
    shared: Arc<Shared>,
    state: Arc<ListenerState>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    let mut ctx = Ctx {
        socket: Arc::new(socket),
        shared,
        state,
        cancel,
        tracker,
        flows: Arc::default(),
        next_id: 0,
    };
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let received = tokio::select! {
            _ = ctx.cancel.cancelled() => break,
            r = ctx.socket.recv_from(&mut buf) => r,
        };
        match received {
            Ok((n, client)) => ctx.forward(&buf[..n], client).await,
            Err(e) => {
                debug!(proxy = %ctx.shared.name, port = ctx.state.port, error = %e, "receive failed");
                tokio::select! {
                    _ = ctx.cancel.cancelled() => break,
                    _ = tokio::time::sleep(RECV_BACKOFF) => {}
                }
            }
        }
    }
    // Flows stop with the listener's token; each removes itself.
}

impl Ctx {
    async fn forward(&mut self, datagram: &[u8], client: SocketAddr) {
        let config = self.shared.config();
        if !self.state.admit(&config, client.ip()) {
            return;
        }
        let existing = self.flows.lock().get(&client).cloned();
        let (flow, sent) = match existing {
            // The socket buffer is full: drop, as a congested link would,
            // rather than hold up every other client of the listener.
            Some(flow) => {
                let sent = flow.upstream.try_send(datagram);
                (flow, sent)
            }
            None => {
                let Some(flow) = self.open_flow(client).await else {
                    return;
                };
                // A new socket is not known writable until the reactor has
                // seen it once, so try_send would drop the first datagram;
                // its buffer is empty, so this completes at once.
                let sent = tokio::time::timeout(FIRST_SEND_TIMEOUT, flow.upstream.send(datagram))
                    .await
                    .unwrap_or_else(|_| Err(io::ErrorKind::WouldBlock.into()));
                (flow, sent)
            }
        };
        match sent {
            Ok(n) => {
                self.state.counters.bytes_in.fetch_add(n as u64, Relaxed);
                flow.activity.touch();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                debug!(proxy = %self.shared.name, port = self.state.port, %client, "datagram dropped: upstream buffer full");
            }
            Err(e) => {
                // Typically ECONNREFUSED from an earlier ICMP port
                // unreachable: the backend no longer listens. The next
                // datagram opens a new flow and may pick another backend.
                debug!(proxy = %self.shared.name, port = self.state.port, %client, error = %e, "flow ended by send error");
                flow.cancel.cancel();
                remove_flow(&self.flows, client, flow.id);
            }
        }
    }

    async fn open_flow(&mut self, client: SocketAddr) -> Option<Flow> {
        let state = &self.state;
        if self.flows.lock().len() >= MAX_FLOWS {
            bump(&state.counters.rejected_flow_limit);
            debug!(proxy = %self.shared.name, port = state.port, %client, "flow table full");
            return None;
        }
        let (config, healthy) = self.shared.view();
        let now = Instant::now();
        let node_port = state.node_port();
        let mut upstream = None;
        for backend in state.pick_order(client.ip(), &healthy, config.session_affinity, now) {
            let addr = SocketAddr::new(backend, node_port);
            match connect(addr).await {
                Ok(socket) => {
                    upstream = Some((backend, socket));
                    break;
                }
                Err(e) => {
                    debug!(proxy = %self.shared.name, port = state.port, %addr, error = %e, "backend connect failed")
                }
            }
        }
        let Some((backend, upstream)) = upstream else {
            bump(&state.counters.no_backend);
            debug!(proxy = %self.shared.name, port = state.port, %client, "no backend for datagram");
            return None;
        };
        state.stick(client.ip(), backend, config.session_affinity, now);
        self.next_id += 1;
        let flow = Flow {
            id: self.next_id,
            upstream: Arc::new(upstream),
            activity: Arc::new(Activity::new()),
            cancel: self.cancel.child_token(),
        };
        self.flows.lock().insert(client, flow.clone());
        let active = ActiveGuard::new(state);
        debug!(proxy = %self.shared.name, port = state.port, %client, %backend, "flow open");
        let relay = Relay {
            socket: self.socket.clone(),
            shared: self.shared.clone(),
            state: state.clone(),
            flows: self.flows.clone(),
            client,
            backend: SocketAddr::new(backend, node_port),
            idle: config.idle_timeout,
        };
        self.tracker.spawn(relay.run(flow.clone(), active));
        Some(flow)
    }
}

async fn connect(backend: SocketAddr) -> io::Result<UdpSocket> {
    let local: SocketAddr = if backend.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(backend).await?;
    Ok(socket)
}

fn remove_flow(flows: &Flows, client: SocketAddr, id: u64) {
    let mut flows = flows.lock();
    if flows.get(&client).is_some_and(|f| f.id == id) {
        flows.remove(&client);
    }
}

/// The task of one flow: relays replies until idle, an upstream error, or
/// the listener closes.
struct Relay {
    socket: Arc<UdpSocket>,
    shared: Arc<Shared>,
    state: Arc<ListenerState>,
    flows: Flows,
    client: SocketAddr,
    backend: SocketAddr,
    idle: Duration,
}

impl Relay {
    async fn run(self, flow: Flow, _active: ActiveGuard) {
        let end = tokio::select! {
            _ = flow.cancel.cancelled() => Ok("closed"),
            _ = flow.activity.idle_for(self.idle) => Ok("idle timeout"),
            r = self.replies(&flow) => r,
        };
        remove_flow(&self.flows, self.client, flow.id);
        let (name, port, client, backend) = (
            &self.shared.name,
            self.state.port,
            self.client,
            self.backend,
        );
        match end {
            Ok(why) => debug!(proxy = %name, port, %client, %backend, "flow ended: {why}"),
            Err(e) => debug!(proxy = %name, port, %client, %backend, error = %e, "flow failed"),
        }
    }

    async fn replies(&self, flow: &Flow) -> io::Result<&'static str> {
        loop {
            flow.upstream.readable().await?;
            // Allocated per wake-up rather than held per flow: thousands of
            // mostly idle flows would otherwise pin 64 KiB each.
            let mut buf = Vec::with_capacity(MAX_DATAGRAM);
            loop {
                buf.clear();
                let n = match flow.upstream.try_recv_buf(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                };
                flow.activity.touch();
                match self.socket.send_to(&buf[..n], self.client).await {
                    Ok(sent) => {
                        self.state
                            .counters
                            .bytes_out
                            .fetch_add(sent as u64, Relaxed);
                    }
                    Err(e) => {
                        debug!(proxy = %self.shared.name, port = self.state.port, client = %self.client, error = %e, "reply dropped");
                    }
                }
            }
        }
    }
}
