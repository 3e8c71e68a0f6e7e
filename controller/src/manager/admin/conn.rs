//! The accept loop of the admin ports, with the connection bounds of
//! upstream's secure serving (k8s.io/apiserver's `http.Server`: 32 s to
//! read a request's headers, 90 s idle) and a cap on connections at once,
//! so slow or idle clients cannot hold descriptors and memory forever.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// How long a connection may take over what it owes, and how many may be
/// open at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From accept to the end of the TLS handshake and the first request's
    /// headers; later, from a request's first byte to its headers' end.
    /// Upstream's `ReadHeaderTimeout`.
    pub header: Duration,
    /// A connection with no request in progress and none begun is closed
    /// after this long. Upstream's `IdleTimeout` (HTTP/1.1 and HTTP/2).
    pub idle: Duration,
    /// Connections served at once; beyond, a new one is closed as soon as
    /// it is accepted. Upstream has no such cap; ours stays well under the
    /// common soft limit of 1,024 open files, so the controller's own
    /// connections (apiserver, provider) never run out.
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header: Duration::from_secs(32),
            idle: Duration::from_secs(90),
            connections: 256,
        }
    }
}

/// What a connection is doing, for its deadline.
struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
}

struct ActivityState {
    /// Requests in progress (HTTP/2 may have several).
    requests: usize,
    /// When the last request ended, or the connection was accepted.
    idle_since: Instant,
    /// While no request is in progress: since when one is being read (the
    /// first byte after idling; at accept, the accept itself, since the
    /// handshake and the first headers are due).
    reading_since: Option<Instant>,
    /// HTTP/2: frames arrive while idle (window updates, pings), so bytes
    /// do not mean a request is coming; only the idle bound applies, as
    /// upstream's (Go's HTTP/2 server has no header timeout).
    http2: bool,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Activity {
            state: Mutex::new(ActivityState {
                requests: 0,
                idle_since: now,
                reading_since: Some(now),
                http2: false,
            }),
            changed: Notify::new(),
        }
    }

    /// When the connection is to be closed, if nothing changes; `None`
    /// while a request is in progress (its handler bounds its own time).
    fn deadline(&self, limits: Limits) -> Option<Instant> {
        let s = self.state.lock();
        if s.requests > 0 {
            return None;
        }
        Some(match s.reading_since {
            Some(since) => since + limits.header,
            None => s.idle_since + limits.idle,
        })
    }

    fn bytes_read(&self) {
        let mut s = self.state.lock();
        if s.requests == 0 && s.reading_since.is_none() && !s.http2 {
            s.reading_since = Some(Instant::now());
            drop(s);
            self.changed.notify_one();
        }
    }

    /// The handshake chose HTTP/2: idle from now.
    fn http2(&self) {
        let mut s = self.state.lock();
        s.http2 = true;
        s.idle_since = Instant::now();
        s.reading_since = None;
        drop(s);
        self.changed.notify_one();
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        let mut s = self.state.lock();
        s.requests += 1;
        s.reading_since = None;
        InFlight(self.clone())
    }
}

/// A request in progress; its end (or cancellation) idles the connection.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = self.0.state.lock();
        s.requests -= 1;
        if s.requests == 0 {
            s.idle_since = Instant::now();
            s.reading_since = None;
        }
        drop(s);
        self.0.changed.notify_one();
    }
}

/// Returns when the connection has missed its deadline.
async fn expired(activity: &Activity, limits: Limits) {
    loop {
        match activity.deadline(limits) {
            None => activity.changed.notified().await,
            Some(at) if Instant::now() >= at => return,
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = activity.changed.notified() => {}
                }
            }
        }
    }
}

/// The socket, telling the connection's [`Activity`] when bytes arrive.
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Serves `app` on `listener`, over TLS when `tls` is given, until the task
/// is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: Limits,
) {
    let room = Arc::new(Semaphore::new(limits.connections));
    let mut full = false;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                tracing::warn!(error = %e, "admin server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = room.clone().try_acquire_owned() else {
            // Closed at once (dropped): it holds nothing of ours. Said once
            // per episode, not per connection.
            if !full {
                tracing::warn!(
                    limit = limits.connections,
                    "admin server: connection limit reached; new connections are closed until some end"
                );
                full = true;
            }
            continue;
        };
        full = false;
        let tls = tls.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let activity = Arc::new(Activity::new());
            let io = Watched {
                tcp,
                activity: activity.clone(),
            };
            let work = async {
                match tls {
                    Some(acceptor) => match acceptor.accept(io).await {
                        Ok(stream) => {
                            if stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]) {
                                activity.http2();
                            }
                            serve_connection(stream, app, &activity).await
                        }
                        Err(e) => Err(format!("TLS handshake failed: {e}")),
                    },
                    None => serve_connection(io, app, &activity).await,
                }
            };
            tokio::select! {
                served = work => if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "admin server: connection ended with an error");
                },
                () = expired(&activity, limits) => {
                    tracing::debug!(%peer, "admin server: connection closed: slow or idle");
                }
            }
        });
    }
}

async fn serve_connection<I>(io: I, app: Router, activity: &Arc<Activity>) -> Result<(), String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = activity.clone();
    let counted = tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let in_flight = activity.request_started();
        let app = app.clone();
        async move {
            let response = tower::ServiceExt::oneshot(app, req).await;
            drop(in_flight);
            response
        }
    });
    auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(counted))
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls;

    use super::super::tls::{ServingCert, server_config};

    /// The secure port's accept loop serving a `/healthz` that answers `ok`,
    /// and a client that trusts its certificate.
    struct Served {
        addr: SocketAddr,
        /// HTTP/1.1 (no ALPN).
        connector: TlsConnector,
        /// Offers only `h2`.
        h2: TlsConnector,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Served {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn served(limits: Limits) -> Served {
        let cert = ServingCert::self_signed([127, 0, 0, 1].into()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.current().cert[0].clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut h2 = client.clone();
        h2.alpn_protocols = vec![b"h2".to_vec()];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        let config = server_config(Arc::new(cert)).unwrap();
        let task = tokio::spawn(serve(
            listener,
            Some(TlsAcceptor::from(config)),
            app,
            limits,
        ));
        Served {
            addr,
            connector: TlsConnector::from(Arc::new(client)),
            h2: TlsConnector::from(Arc::new(h2)),
            task,
        }
    }

    type Tls = tokio_rustls::client::TlsStream<TcpStream>;

    impl Served {
        async fn connect(&self) -> Tls {
            let tcp = TcpStream::connect(self.addr).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            self.connector.connect(name, tcp).await.unwrap()
        }

        /// A probe as the kubelet sends it: a new connection, one request.
        async fn probe(&self) -> Result<String, std::io::Error> {
            let tcp = TcpStream::connect(self.addr).await?;
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let mut tls = self.connector.connect(name, tcp).await?;
            request(&mut tls).await
        }
    }

    /// `GET /healthz` on a kept-alive connection: the response's head.
    async fn request(tls: &mut Tls) -> Result<String, std::io::Error> {
        tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.ends_with(b"\r\n\r\nok") {
            let n = tls.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            seen.extend_from_slice(&buf[..n]);
        }
        Ok(String::from_utf8_lossy(&seen)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned())
    }

    /// Whether the server closes `stream` before `deadline` (any read
    /// that ends it: end of file or reset).
    async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
        stream: &mut S,
        deadline: Duration,
    ) -> bool {
        let mut buf = [0u8; 256];
        let until = tokio::time::Instant::now() + deadline;
        loop {
            match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => continue,
            }
        }
    }

    const SHORT: Duration = Duration::from_millis(300);
    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_client_that_never_finishes_its_handshake_or_headers_is_closed() {
        let s = served(Limits {
            header: SHORT,
            idle: LONG,
            connections: 64,
        })
        .await;
        // Connected, never says hello.
        let mut silent = TcpStream::connect(s.addr).await.unwrap();
        // Handshake done, headers begun and never finished.
        let mut slow = s.connect().await;
        slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: loc")
            .await
            .unwrap();
        // Probes are answered meanwhile.
        assert_eq!(s.probe().await.unwrap(), "HTTP/1.1 200 OK");
        assert!(
            closed_within(&mut silent, SHORT * 10).await,
            "silent client kept"
        );
        assert!(
            closed_within(&mut slow, SHORT * 10).await,
            "slow client kept"
        );
        assert_eq!(s.probe().await.unwrap(), "HTTP/1.1 200 OK");
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed() {
        let s = served(Limits {
            header: LONG,
            idle: SHORT,
            connections: 64,
        })
        .await;
        let mut kept = s.connect().await;
        assert_eq!(request(&mut kept).await.unwrap(), "HTTP/1.1 200 OK");
        // Used again before it idles out: still served.
        assert_eq!(request(&mut kept).await.unwrap(), "HTTP/1.1 200 OK");
        assert!(
            closed_within(&mut kept, SHORT * 10).await,
            "idle connection kept"
        );
    }

    #[tokio::test]
    async fn an_idle_http2_connection_is_closed() {
        let s = served(Limits {
            header: LONG,
            idle: SHORT,
            connections: 64,
        })
        .await;
        let tcp = TcpStream::connect(s.addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let tls = s.h2.connect(name, tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        let mut conn = tokio::spawn(conn);
        for _ in 0..2 {
            let req = http::Request::get("https://localhost/healthz")
                .body(axum::body::Body::empty())
                .unwrap();
            let resp = sender.send_request(req).await.unwrap();
            assert_eq!(resp.status(), http::StatusCode::OK);
        }
        let ended = tokio::time::timeout(SHORT * 10, &mut conn).await;
        assert!(ended.is_ok(), "idle HTTP/2 connection kept");
    }

    /// `--admin-port`: the same bounds without TLS.
    #[tokio::test]
    async fn plain_http_has_the_same_bounds() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        let task = tokio::spawn(serve(
            listener,
            None,
            app,
            Limits {
                header: SHORT,
                idle: SHORT,
                connections: 64,
            },
        ));
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: loc")
            .await
            .unwrap();
        let mut probe = TcpStream::connect(addr).await.unwrap();
        probe
            .write_all(b"GET /healthz HTTP/1.0\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        probe.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.0 200 OK"), "{answer}");
        assert!(
            closed_within(&mut slow, SHORT * 10).await,
            "slow client kept"
        );
        task.abort();
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_at_once() {
        let cap = 4;
        let s = served(Limits {
            header: LONG,
            idle: LONG,
            connections: cap,
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..cap {
            let mut c = s.connect().await;
            assert_eq!(request(&mut c).await.unwrap(), "HTTP/1.1 200 OK");
            held.push(c);
        }
        // Accepted by the kernel, then closed by the server without a
        // handshake: they hold no descriptor of ours.
        for _ in 0..20 {
            let mut extra = TcpStream::connect(s.addr).await.unwrap();
            assert!(
                closed_within(&mut extra, Duration::from_secs(1)).await,
                "a connection beyond the cap was kept"
            );
        }
        // The clients already in keep being served.
        for c in &mut held {
            assert_eq!(request(c).await.unwrap(), "HTTP/1.1 200 OK");
        }
        // One leaves: a probe gets in (once the server has seen it go).
        drop(held.pop());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match s.probe().await {
                Ok(head) => {
                    assert_eq!(head, "HTTP/1.1 200 OK");
                    break;
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "not in yet");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("no room after a client left: {e}"),
            }
        }
    }
}
