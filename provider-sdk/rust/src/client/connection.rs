//! The lazy connection to the provider's Unix socket: every (re)connect
//! checks the socket's permissions first and is counted, so the handshake
//! cache can tell a new connection (a restarted provider) from the old one.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use super::ClientOptions;
use crate::endpoint::check_socket_permissions;

/// A channel that connects on first use; `connections` counts the
/// connections it has made.
pub(super) fn lazy_channel(
    path: PathBuf,
    opts: &ClientOptions,
    connections: Arc<AtomicU64>,
) -> Channel {
    // The URI only sets :authority, which is "localhost" as the contract
    // prescribes for Unix sockets.
    // No concurrency limit here: the call path counts reads and mutations
    // itself, so identity calls (health checks) never queue behind them.
    let endpoint = Endpoint::from_static("http://localhost").connect_timeout(opts.identity_timeout);
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        let connections = connections.clone();
        async move {
            check_socket_permissions(&path)?;
            let stream = tokio::net::UnixStream::connect(&path).await?;
            connections.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    }))
}
