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

/// The largest header or trailer block accepted from the provider: the
/// contract's message bound. HTTP/2 cannot skip a header block (the HPACK
/// state is the connection's), so past roughly this size h2 must end the
/// connection; below it, a block that is too large fails only its stream.
const MAX_TRAILER_BYTES: u32 = crate::MAX_MESSAGE_BYTES as u32;

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
    // Trailers up to the message bound: a provider that puts a huge text
    // into an error (one not on this SDK, which cuts them) must fail that
    // one call, not the HTTP/2 connection every other call shares. With a
    // 1 MiB limit, a 2 MiB text took more CONTINUATION frames than h2
    // allows for it, and h2 answered with GOAWAY. The text is cut to
    // MAX_ERROR_TEXT_BYTES as soon as it is read.
    let endpoint = Endpoint::from_static("http://localhost")
        .connect_timeout(opts.identity_timeout)
        .http2_max_header_list_size(MAX_TRAILER_BYTES);
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
