//! Active health checks: one round over every backend, concurrently, each
//! interval.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::config::{HealthCheck, Protocol, ProxyConfig};
use super::state::Shared;

/// The status line is all we read; a server sending more than this without
/// a line break is not a health endpoint.
const MAX_STATUS_LINE: usize = 1024;

/// Runs until `cancel`. The configuration is re-read every round, so new
/// backends, ports, check kinds and intervals apply from the next round.
pub(crate) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        let config = shared.config();
        let round = join_all(config.backends.iter().map(|b| check(*b, &config)));
        let results = tokio::select! {
            _ = cancel.cancelled() => return,
            r = round => r,
        };
        let results: Vec<_> = config.backends.iter().copied().zip(results).collect();
        shared.record_health(&results);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(config.health_interval) => {}
        }
    }
}

async fn check(backend: IpAddr, config: &ProxyConfig) -> bool {
    let result = tokio::time::timeout(config.health_timeout, probe(backend, config)).await;
    match result {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            debug!(%backend, error = %e, "health check failed");
            false
        }
        Err(_) => {
            debug!(%backend, "health check timed out");
            false
        }
    }
}

async fn probe(backend: IpAddr, config: &ProxyConfig) -> io::Result<()> {
    match &config.health_check {
        HealthCheck::Tcp => {
            let mut ports: Vec<u16> = config
                .listeners
                .iter()
                .filter(|l| l.protocol == Protocol::Tcp)
                .map(|l| l.node_port)
                .collect();
            ports.sort_unstable();
            ports.dedup();
            let connects = ports
                .into_iter()
                .map(|p| TcpStream::connect(SocketAddr::new(backend, p)));
            for r in join_all(connects).await {
                r?;
            }
            Ok(())
        }
        HealthCheck::Http { port, path } => {
            let status = http_status(SocketAddr::new(backend, *port), path).await?;
            if status == 200 {
                Ok(())
            } else {
                Err(io::Error::other(format!("HTTP status {status}")))
            }
        }
    }
}

/// A minimal HTTP/1.1 GET: the status code is all that matters, and a
/// client library would be a heavy dependency for it.
async fn http_status(addr: SocketAddr, path: &str) -> io::Result<u16> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: ccm-local-provider\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !head.contains(&b'\n') {
        if head.len() >= MAX_STATUS_LINE {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "no status line"));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    parse_status(&head).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad status line"))
}

fn parse_status(head: &[u8]) -> Option<u16> {
    let end = head.iter().position(|b| *b == b'\n')?;
    let line = std::str::from_utf8(&head[..end]).ok()?;
    let mut parts = line.split_ascii_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::parse_status;

    #[test]
    fn status_line() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            parse_status(b"HTTP/1.0 503 Service Unavailable\r\nX: y\r\n"),
            Some(503)
        );
        assert_eq!(parse_status(b"HTTP/1.1 200 OK"), None, "incomplete line");
        assert_eq!(parse_status(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status(b"HTTP/1.1 2000 OK\r\n"), None);
    }
}
