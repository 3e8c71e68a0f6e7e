//! TCP listeners: accept, admit, connect to a backend, then copy both ways
//! until both sides are done or the connection is idle.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::state::{ActiveGuard, Activity, ListenerState, Shared, bump};

/// A backend that neither accepts nor refuses (a node gone dark) costs a
/// client this long before the next backend is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Per direction, per connection.
const COPY_BUFFER: usize = 16 * 1024;
/// After an accept error that is not about one connection (out of file
/// descriptors, say), so that the loop does not spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    state: Arc<ListenerState>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((client, peer)) => {
                tracker.spawn(handle(
                    client,
                    peer,
                    shared.clone(),
                    state.clone(),
                    cancel.clone(),
                ));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => {
                warn!(proxy = %shared.name, port = state.port, error = %e, "accept failed");
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
}

async fn handle(
    client: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    state: Arc<ListenerState>,
    cancel: CancellationToken,
) {
    let (config, healthy) = shared.view();
    let now = Instant::now();
    let port = state.port;
    if !state.admit(&config, peer.ip()) {
        debug!(proxy = %shared.name, port, %peer, "connection refused by source range or rate limit");
        return;
    }
    let node_port = state.node_port();
    let mut upstream = None;
    for backend in state.pick_order(peer.ip(), &healthy, config.session_affinity, now) {
        let addr = SocketAddr::new(backend, node_port);
        let attempt = tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)) => r,
        };
        match attempt {
            Ok(Ok(stream)) => {
                upstream = Some((backend, stream));
                break;
            }
            Ok(Err(e)) => {
                debug!(proxy = %shared.name, port, %addr, error = %e, "backend connect failed")
            }
            Err(_) => debug!(proxy = %shared.name, port, %addr, "backend connect timed out"),
        }
    }
    let Some((backend, upstream)) = upstream else {
        bump(&state.counters.no_backend);
        debug!(proxy = %shared.name, port, %peer, "no backend for connection");
        return;
    };
    state.stick(peer.ip(), backend, config.session_affinity, Instant::now());
    let _active = ActiveGuard::new(&state);
    let idle = config.idle_timeout;
    drop(config);
    // Small writes (interactive protocols) go out at once, as they would
    // without a proxy in between.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    debug!(proxy = %shared.name, port, %peer, %backend, "connection open");
    let end = tokio::select! {
        _ = cancel.cancelled() => Ok("listener closed"),
        r = pump(client, upstream, idle, &state.counters.bytes_in, &state.counters.bytes_out) => r,
    };
    match end {
        Ok(why) => debug!(proxy = %shared.name, port, %peer, %backend, "connection closed: {why}"),
        Err(e) => {
            debug!(proxy = %shared.name, port, %peer, %backend, error = %e, "connection failed")
        }
    }
}

/// Copies both ways; a FIN from one side is passed on as a FIN to the other
/// (half-close), and the connection ends once both directions ended, either
/// side failed, or no byte moved for `idle`.
async fn pump(
    mut client: TcpStream,
    mut upstream: TcpStream,
    idle: Duration,
    bytes_in: &AtomicU64,
    bytes_out: &AtomicU64,
) -> io::Result<&'static str> {
    let activity = Activity::new();
    let (client_r, client_w) = client.split();
    let (upstream_r, upstream_w) = upstream.split();
    let both = async {
        tokio::try_join!(
            copy_half(client_r, upstream_w, bytes_in, &activity),
            copy_half(upstream_r, client_w, bytes_out, &activity),
        )
    };
    tokio::select! {
        r = both => r.map(|_| "both sides done"),
        _ = activity.idle_for(idle) => Ok("idle timeout"),
    }
}

async fn copy_half<R, W>(
    mut from: R,
    mut to: W,
    bytes: &AtomicU64,
    activity: &Activity,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return match to.shutdown().await {
                // The other side is gone already; nothing left to tell it.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
                r => r,
            };
        }
        activity.touch();
        to.write_all(&buf[..n]).await?;
        bytes.fetch_add(n as u64, Relaxed);
        activity.touch();
    }
}
