//! What the local provider's load balancer proxy adds to a connection
//! (`cargo bench -p ccm-local-provider --bench proxy`): the same loopback
//! backend measured directly and through a [`LoadBalancerProxy`] in front of
//! it. Backend on 127.0.5.1, VIP on 127.202.0.1, clients on 127.0.0.1; the
//! backend, the proxy and the clients share this process and its tokio
//! runtime (one worker per core). Prints a Markdown table. A benchmark, not
//! a test: it asserts nothing about speed.
//!
//! `PROXY_BENCH_SCALE` (default 1) multiplies every count and size, e.g.
//! 0.1 for a quick run.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ccm_local_provider::proxy::{HealthCheck, Listener, LoadBalancerProxy, Protocol, ProxyConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

const BACKEND: Ipv4Addr = Ipv4Addr::new(127, 0, 5, 1);
const VIP: Ipv4Addr = Ipv4Addr::new(127, 202, 0, 1);
/// Request and reply size of the round-trip and connection measurements.
const MESSAGE: usize = 64;
/// A measurement that runs longer than this stops early and reports what it
/// completed, so that a slow machine still finishes.
const TIME_LIMIT: Duration = Duration::from_secs(30);
/// A UDP request whose reply has not come back after this is counted lost.
const UDP_TIMEOUT: Duration = Duration::from_secs(1);
const MIB: f64 = 1024.0 * 1024.0;

/// The three services of the backend, reached either directly or through
/// the proxy.
#[derive(Clone, Copy)]
struct Target {
    /// TCP: echoes every byte back.
    echo: SocketAddr,
    /// TCP: reads to end of stream, then replies with the byte count (u64,
    /// big-endian) and closes.
    sink: SocketAddr,
    /// UDP: echoes every datagram back to its sender.
    udp: SocketAddr,
}

fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).max(1)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// 12345.6 -> "12,346".
fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn serve_tcp<F, Fut>(listener: TcpListener, handler: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(handler(stream));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn echo(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn sink(mut stream: TcpStream) {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(_) => return,
        }
    }
    let _ = stream.write_all(&total.to_be_bytes()).await;
}

async fn udp_echo(socket: UdpSocket) {
    let mut buf = vec![0u8; 65_535];
    loop {
        if let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..n], from).await;
        }
    }
}

/// Starts the backend's services on ephemeral ports of [`BACKEND`].
async fn start_backend() -> Target {
    let echo_l = TcpListener::bind((BACKEND, 0)).await.unwrap();
    let sink_l = TcpListener::bind((BACKEND, 0)).await.unwrap();
    let udp = UdpSocket::bind((BACKEND, 0)).await.unwrap();
    let target = Target {
        echo: echo_l.local_addr().unwrap(),
        sink: sink_l.local_addr().unwrap(),
        udp: udp.local_addr().unwrap(),
    };
    tokio::spawn(serve_tcp(echo_l, echo));
    tokio::spawn(serve_tcp(sink_l, sink));
    tokio::spawn(udp_echo(udp));
    target
}

/// A port free on [`VIP`] for both TCP and UDP, and another free for TCP.
fn free_vip_ports() -> (u16, u16) {
    for _ in 0..100 {
        let a = std::net::TcpListener::bind((VIP, 0)).unwrap();
        let port = a.local_addr().unwrap().port();
        if std::net::UdpSocket::bind((VIP, port)).is_err() {
            continue;
        }
        let b = std::net::TcpListener::bind((VIP, 0)).unwrap();
        return (port, b.local_addr().unwrap().port());
    }
    panic!("no free ports on {VIP}");
}

/// The proxy in front of `backend`, with [`ProxyConfig::new`]'s defaults
/// (TCP health checks every 2 s, no rate limit, no source ranges).
async fn start_proxy(backend: Target) -> (LoadBalancerProxy, Target) {
    let (port, sink_port) = free_vip_ports();
    let vip = IpAddr::V4(VIP);
    let mut config = ProxyConfig::new(vip);
    config.listeners = vec![
        Listener {
            protocol: Protocol::Tcp,
            port,
            node_port: backend.echo.port(),
        },
        Listener {
            protocol: Protocol::Tcp,
            port: sink_port,
            node_port: backend.sink.port(),
        },
        Listener {
            protocol: Protocol::Udp,
            port,
            node_port: backend.udp.port(),
        },
    ];
    config.backends = vec![IpAddr::V4(BACKEND)];
    assert_eq!(config.health_check, HealthCheck::Tcp);
    let proxy = LoadBalancerProxy::start("bench".into(), config)
        .await
        .unwrap();
    let target = Target {
        echo: SocketAddr::new(vip, port),
        sink: SocketAddr::new(vip, sink_port),
        udp: SocketAddr::new(vip, port),
    };
    (proxy, target)
}

/// Sorted round-trip times of `n` 64-byte requests on one connection, after
/// `warmup` unmeasured ones.
async fn tcp_round_trips(addr: SocketAddr, warmup: usize, n: usize) -> Vec<Duration> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let request = [7u8; MESSAGE];
    let mut reply = [0u8; MESSAGE];
    for _ in 0..warmup {
        stream.write_all(&request).await.unwrap();
        stream.read_exact(&mut reply).await.unwrap();
    }
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    while lat.len() < n && start.elapsed() < TIME_LIMIT {
        let t = Instant::now();
        stream.write_all(&request).await.unwrap();
        stream.read_exact(&mut reply).await.unwrap();
        lat.push(t.elapsed());
    }
    assert_eq!(reply, request);
    lat.sort();
    lat
}

/// One short connection: connect, one 64-byte request and its reply, close.
async fn one_connection(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let request = [9u8; MESSAGE];
    let mut reply = [0u8; MESSAGE];
    stream.write_all(&request).await.unwrap();
    stream.read_exact(&mut reply).await.unwrap();
}

/// Connections per second with `clients` clients each opening connections
/// one after the other, `total` connections in all. Returns (done, rate).
async fn connection_rate(addr: SocketAddr, total: usize, clients: usize) -> (usize, f64) {
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (next, done) = (next.clone(), done.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < total && start.elapsed() < TIME_LIMIT {
                    one_connection(addr).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed();
    let done = done.load(Ordering::Relaxed);
    (done, done as f64 / elapsed.as_secs_f64())
}

/// Sends `bytes` to the sink on one connection and waits for its count.
async fn send_bulk(addr: SocketAddr, bytes: usize) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let chunk = vec![0x5au8; 256 * 1024];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        stream.write_all(&chunk[..n]).await.unwrap();
        left -= n;
    }
    stream.shutdown().await.unwrap();
    let mut count = [0u8; 8];
    stream.read_exact(&mut count).await.unwrap();
    assert_eq!(u64::from_be_bytes(count), bytes as u64);
}

/// MiB/s for `total` bytes split evenly over `conns` parallel connections,
/// from the first connect to the last count received; the median of
/// `runs` runs.
async fn bulk(addr: SocketAddr, total: usize, conns: usize, runs: usize) -> f64 {
    let per = total / conns;
    let mut rates = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let tasks: Vec<_> = (0..conns)
            .map(|_| tokio::spawn(send_bulk(addr, per)))
            .collect();
        for t in tasks {
            tokio::time::timeout(TIME_LIMIT, t)
                .await
                .expect("bulk transfer over the time limit")
                .unwrap();
        }
        rates.push((per * conns) as f64 / MIB / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// Sorted round-trip times of `n` 64-byte datagrams after `warmup`
/// unmeasured ones, and how many measured requests got no reply within
/// [`UDP_TIMEOUT`] (left out of the times).
async fn udp_round_trips(addr: SocketAddr, warmup: usize, n: usize) -> (Vec<Duration>, usize) {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    socket.connect(addr).await.unwrap();
    let mut request = [3u8; MESSAGE];
    let mut reply = [0u8; 2 * MESSAGE];
    let mut lat = Vec::with_capacity(n);
    let mut lost = 0;
    let start = Instant::now();
    for seq in 0..(warmup + n) as u64 {
        if seq as usize >= warmup && start.elapsed() >= TIME_LIMIT {
            break;
        }
        request[..8].copy_from_slice(&seq.to_be_bytes());
        let t = Instant::now();
        socket.send(&request).await.unwrap();
        // A late reply to an earlier request is skipped by its number.
        let answered = tokio::time::timeout(UDP_TIMEOUT, async {
            loop {
                let got = socket.recv(&mut reply).await.unwrap();
                if got == MESSAGE && reply[..8] == request[..8] {
                    return;
                }
            }
        })
        .await
        .is_ok();
        let rtt = t.elapsed();
        if seq as usize >= warmup {
            if answered {
                lat.push(rtt);
            } else {
                lost += 1;
            }
        }
    }
    lat.sort();
    (lat, lost)
}

struct Table(Vec<[String; 4]>);

impl Table {
    fn latency(&mut self, what: String, direct: Duration, proxied: Duration) {
        self.0.push([
            what,
            micros(direct),
            micros(proxied),
            format!("{:.2}", proxied.as_secs_f64() / direct.as_secs_f64()),
        ]);
    }

    fn rate(&mut self, what: String, unit: &str, direct: f64, proxied: f64) {
        self.0.push([
            what,
            format!("{} {unit}", thousands(direct)),
            format!("{} {unit}", thousands(proxied)),
            format!("{:.2}", proxied / direct),
        ]);
    }

    fn print(&self) {
        println!("| measurement | direct | via proxy | proxied ÷ direct |");
        println!("|---|---|---|---|");
        for [a, b, c, d] in &self.0 {
            println!("| {a} | {b} | {c} | {d} |");
        }
    }
}

#[tokio::main]
async fn main() {
    let scale: f64 = std::env::var("PROXY_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(1.0);
    let rtt_n = scaled(20_000, scale);
    let rtt_warmup = scaled(1_000, scale);
    let conns_n = scaled(2_000, scale);
    let bulk_bytes = scaled(256, scale) << 20;
    let udp_n = scaled(10_000, scale);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let began = Instant::now();

    let direct = start_backend().await;
    let (proxy, proxied) = start_proxy(direct).await;
    let mut table = Table(Vec::new());
    let mut notes = Vec::new();

    let d = tcp_round_trips(direct.echo, rtt_warmup, rtt_n).await;
    let p = tcp_round_trips(proxied.echo, rtt_warmup, rtt_n).await;
    for (name, q) in [("p50", 0.50), ("p99", 0.99)] {
        table.latency(
            format!(
                "TCP round trip, {MESSAGE} B, one connection, {name} ({} / {})",
                thousands(d.len() as f64),
                thousands(p.len() as f64)
            ),
            percentile(&d, q),
            percentile(&p, q),
        );
    }

    for clients in [1usize, 16] {
        // Warm-up: a few connections so that the first measured one does
        // not pay for lazily initialised state.
        connection_rate(direct.echo, 50, clients).await;
        connection_rate(proxied.echo, 50, clients).await;
        let (dn, d) = connection_rate(direct.echo, conns_n, clients).await;
        let (pn, p) = connection_rate(proxied.echo, conns_n, clients).await;
        let how = if clients == 1 {
            "sequential".to_string()
        } else {
            format!("{clients} concurrent clients")
        };
        table.rate(
            format!(
                "new connections (connect, {MESSAGE} B request + reply, close), {how} ({} / {})",
                thousands(dn as f64),
                thousands(pn as f64)
            ),
            "conn/s",
            d,
            p,
        );
    }

    // Warm-up transfer, then the median of three.
    let runs = 3;
    bulk(direct.sink, bulk_bytes / 8, 1, 1).await;
    bulk(proxied.sink, bulk_bytes / 8, 1, 1).await;
    for conns in [1usize, 4] {
        let d = bulk(direct.sink, bulk_bytes, conns, runs).await;
        let p = bulk(proxied.sink, bulk_bytes, conns, runs).await;
        let how = if conns == 1 {
            "one connection".to_string()
        } else {
            format!(
                "{conns} parallel connections of {} MiB",
                (bulk_bytes / conns) >> 20
            )
        };
        table.rate(
            format!(
                "bulk TCP client → sink, {} MiB, {how}, median of {runs}",
                bulk_bytes >> 20
            ),
            "MiB/s",
            d,
            p,
        );
    }

    let (d, d_lost) = udp_round_trips(direct.udp, rtt_warmup, udp_n).await;
    let (p, p_lost) = udp_round_trips(proxied.udp, rtt_warmup, udp_n).await;
    for (name, q) in [("p50", 0.50), ("p99", 0.99)] {
        table.latency(
            format!(
                "UDP round trip, {MESSAGE} B datagram, {name} ({} / {})",
                thousands(d.len() as f64),
                thousands(p.len() as f64)
            ),
            percentile(&d, q),
            percentile(&p, q),
        );
    }
    if d_lost + p_lost > 0 {
        notes.push(format!(
            "UDP requests without a reply within {UDP_TIMEOUT:?}: direct {d_lost}, via proxy {p_lost}"
        ));
    }

    let stats = proxy.stats();
    proxy.shutdown().await;

    println!(
        "Local provider proxy against a direct connection: backend {BACKEND}, VIP {VIP}, \
         {cores} cores, PROXY_BENCH_SCALE={scale}, {:.1} s",
        began.elapsed().as_secs_f64()
    );
    println!();
    table.print();
    println!();
    println!(
        "(n direct / n via proxy) after each row; proxied ÷ direct: above 1 for a time and \
         below 1 for a rate mean the proxy is slower."
    );
    for n in notes {
        println!("{n}");
    }
    for s in stats {
        println!(
            "proxy listener {} {}: {} connections or flows, {} B in, {} B out, \
             {} without backend, {} rejected",
            s.protocol,
            s.port,
            s.connections_total,
            s.bytes_in,
            s.bytes_out,
            s.no_backend,
            s.rejected_source + s.rejected_rate + s.rejected_flow_limit
        );
    }
}
