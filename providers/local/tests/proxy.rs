//! Traffic through the load balancer proxy, all on loopback: backends on
//! 127.0.1.x (one port number on every backend, as a nodePort), one VIP
//! 127.200.0.x per test so that tests run in parallel, clients on
//! 127.0.0.x. Backends answer with their own address, so a client sees
//! which one it reached.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::time::Duration;

use ccm_local_provider::proxy::{
    HealthCheck, Listener, ListenerStats, LoadBalancerProxy, Protocol, ProxyConfig, ProxyError,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

/// Bound on any wait for something that should happen at once.
const IO: Duration = Duration::from_secs(2);
/// Bound on waits for health checks and timers.
const WAIT: Duration = Duration::from_secs(5);

fn vip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 200, 0, n))
}

fn node(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, n))
}

fn client(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

fn tcp(port: u16, node_port: u16) -> Listener {
    Listener {
        protocol: Protocol::Tcp,
        port,
        node_port,
    }
}

fn udp(port: u16, node_port: u16) -> Listener {
    Listener {
        protocol: Protocol::Udp,
        port,
        node_port,
    }
}

/// Fast health checks so that tests see their effect within a second.
fn config(vip: IpAddr, listeners: Vec<Listener>, backends: &[IpAddr]) -> ProxyConfig {
    let mut c = ProxyConfig::new(vip);
    c.listeners = listeners;
    c.backends = backends.to_vec();
    c.health_interval = Duration::from_millis(50);
    c.health_timeout = Duration::from_millis(500);
    c
}

/// `n` distinct ports free on `vip` for both TCP and UDP.
fn free_ports(vip: IpAddr, n: usize) -> Vec<u16> {
    let mut held = Vec::new();
    for _ in 0..50 {
        if held.len() == n {
            break;
        }
        let t = std::net::TcpListener::bind((vip, 0)).unwrap();
        let port = t.local_addr().unwrap().port();
        if let Ok(u) = std::net::UdpSocket::bind((vip, port)) {
            held.push((port, t, u));
        }
    }
    assert_eq!(held.len(), n, "no free ports on {vip}");
    held.into_iter().map(|(p, _, _)| p).collect()
}

fn free_port(vip: IpAddr) -> u16 {
    free_ports(vip, 1)[0]
}

/// TCP listeners on every address in `ips`, all on one port.
async fn tcp_same_port(ips: &[IpAddr]) -> (u16, Vec<TcpListener>) {
    for _ in 0..50 {
        let first = TcpListener::bind((ips[0], 0)).await.unwrap();
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for ip in &ips[1..] {
            match TcpListener::bind((*ip, port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => break,
            }
        }
        if listeners.len() == ips.len() {
            return (port, listeners);
        }
    }
    panic!("no common free TCP port on {ips:?}");
}

async fn udp_same_port(ips: &[IpAddr]) -> (u16, Vec<UdpSocket>) {
    for _ in 0..50 {
        let first = UdpSocket::bind((ips[0], 0)).await.unwrap();
        let port = first.local_addr().unwrap().port();
        let mut sockets = vec![first];
        for ip in &ips[1..] {
            match UdpSocket::bind((*ip, port)).await {
                Ok(s) => sockets.push(s),
                Err(_) => break,
            }
        }
        if sockets.len() == ips.len() {
            return (port, sockets);
        }
    }
    panic!("no common free UDP port on {ips:?}");
}

/// A backend server; stops (closing its listening socket) when dropped or
/// stopped.
struct Server(JoinHandle<()>);

impl Server {
    async fn stop(mut self) {
        self.0.abort();
        // Returns once the task, and with it the listener, is dropped.
        let _ = (&mut self.0).await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Says its address on a line, then echoes until EOF, then closes its side.
async fn name_server(listener: TcpListener) {
    let name = listener.local_addr().unwrap().ip().to_string();
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let line = format!("{name}\n");
        tokio::spawn(async move {
            if stream.write_all(line.as_bytes()).await.is_err() {
                return;
            }
            let (mut r, mut w) = stream.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
            let _ = w.shutdown().await;
        });
    }
}

/// TCP name servers on `ips`, sharing one port.
async fn tcp_backends(ips: &[IpAddr]) -> (u16, Vec<Server>) {
    let (port, listeners) = tcp_same_port(ips).await;
    let servers = listeners
        .into_iter()
        .map(|l| Server(tokio::spawn(name_server(l))))
        .collect();
    (port, servers)
}

/// Replies `<its address> <payload>` to every datagram.
async fn udp_backends(ips: &[IpAddr]) -> (u16, Vec<Server>) {
    let (port, sockets) = udp_same_port(ips).await;
    let servers = sockets
        .into_iter()
        .map(|s| {
            Server(tokio::spawn(async move {
                let name = s.local_addr().unwrap().ip().to_string();
                let mut buf = vec![0u8; 2048];
                while let Ok((n, from)) = s.recv_from(&mut buf).await {
                    let reply = format!("{name} {}", String::from_utf8_lossy(&buf[..n]));
                    let _ = s.send_to(reply.as_bytes(), from).await;
                }
            }))
        })
        .collect();
    (port, servers)
}

/// Answers `status` on GET /healthz, 404 on any other path.
async fn http_health_server(listener: TcpListener, status: Arc<AtomicU16>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let status = status.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 512];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head);
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let code = if path == "/healthz" {
                status.load(Relaxed)
            } else {
                404
            };
            let response =
                format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

async fn connect(addr: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(source) = source {
        socket.bind(SocketAddr::new(source, 0))?;
    }
    timeout(IO, socket.connect(addr)).await?
}

/// The next line, or None once the proxy closed the connection. Panics if
/// the proxy does neither.
async fn next_line(stream: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    match timeout(IO, stream.read_line(&mut line))
        .await
        .expect("connection neither answered nor closed")
    {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end().to_owned()),
    }
}

/// Which backend a new connection reaches; None if the proxy closed it.
async fn hello(addr: SocketAddr, source: Option<IpAddr>) -> Option<String> {
    let stream = connect(addr, source).await.ok()?;
    next_line(&mut BufReader::new(stream)).await
}

async fn open(addr: SocketAddr) -> (BufReader<TcpStream>, String) {
    let mut stream = BufReader::new(connect(addr, None).await.unwrap());
    let name = next_line(&mut stream).await.expect("served");
    (stream, name)
}

async fn echo(stream: &mut BufReader<TcpStream>, text: &str) {
    stream
        .get_mut()
        .write_all(format!("{text}\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(next_line(stream).await.as_deref(), Some(text));
}

/// Backend name -> how many of `n` sequential connections reached it.
async fn tally(addr: SocketAddr, n: usize) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for _ in 0..n {
        let name = hello(addr, None).await.expect("connection served");
        *seen.entry(name).or_default() += 1;
    }
    seen
}

fn counts(pairs: &[(IpAddr, usize)]) -> HashMap<String, usize> {
    pairs.iter().map(|(ip, n)| (ip.to_string(), *n)).collect()
}

/// One datagram from a fresh socket (so a new flow) and its reply.
async fn udp_ask(addr: SocketAddr, source: IpAddr, payload: &str) -> Option<String> {
    let socket = UdpSocket::bind((source, 0)).await.unwrap();
    socket.connect(addr).await.unwrap();
    udp_roundtrip(&socket, payload).await
}

async fn udp_roundtrip(socket: &UdpSocket, payload: &str) -> Option<String> {
    socket.send(payload.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 2048];
    match timeout(IO, socket.recv(&mut buf)).await {
        Ok(Ok(n)) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stats_of(proxy: &LoadBalancerProxy, protocol: Protocol, port: u16) -> ListenerStats {
    proxy
        .stats()
        .into_iter()
        .find(|s| s.protocol == protocol && s.port == port)
        .expect("listener stats")
}

fn healthy(proxy: &LoadBalancerProxy, backend: IpAddr) -> bool {
    proxy
        .backend_health()
        .into_iter()
        .find(|(b, _)| *b == backend)
        .expect("configured backend")
        .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_round_robin_reaches_exactly_configured_backends() {
    // 127.0.1.4 listens on the node port too but is not a backend.
    let ips = [node(1), node(2), node(3), node(4)];
    let (node_port, _servers) = tcp_backends(&ips).await;
    let vip = vip(1);
    let port = free_port(vip);
    let proxy = LoadBalancerProxy::start(
        "rr".into(),
        config(vip, vec![tcp(port, node_port)], &ips[..3]),
    )
    .await
    .unwrap();

    let seen = tally(SocketAddr::new(vip, port), 9).await;
    assert_eq!(seen, counts(&[(node(1), 3), (node(2), 3), (node(3), 3)]));
    let stats = stats_of(&proxy, Protocol::Tcp, port);
    assert_eq!(stats.connections_total, 9);
    assert_eq!(stats.no_backend, 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_half_close_is_propagated_and_bytes_counted() {
    let (node_port, _servers) = tcp_backends(&[node(1)]).await;
    let vip = vip(2);
    let port = free_port(vip);
    let proxy = LoadBalancerProxy::start(
        "half".into(),
        config(vip, vec![tcp(port, node_port)], &[node(1)]),
    )
    .await
    .unwrap();

    let (mut stream, name) = open(SocketAddr::new(vip, port)).await;
    assert_eq!(name, node(1).to_string());
    // The client stops sending; the backend must see EOF, finish echoing
    // and close its side, which the client must see as EOF.
    stream.get_mut().write_all(b"ping").await.unwrap();
    stream.get_mut().shutdown().await.unwrap();
    let mut rest = String::new();
    timeout(IO, stream.read_to_string(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rest, "ping");

    eventually("connection to end", || {
        stats_of(&proxy, Protocol::Tcp, port).active == 0
    })
    .await;
    let stats = stats_of(&proxy, Protocol::Tcp, port);
    assert_eq!(stats.bytes_in, 4);
    assert_eq!(stats.bytes_out, (name.len() + 1 + 4) as u64);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_round_robin_and_replies_from_vip() {
    let ips = [node(1), node(2), node(3), node(4)];
    let (node_port, _servers) = udp_backends(&ips).await;
    let vip = vip(3);
    let port = free_port(vip);
    let proxy = LoadBalancerProxy::start(
        "udp".into(),
        config(vip, vec![udp(port, node_port)], &ips[..3]),
    )
    .await
    .unwrap();
    let addr = SocketAddr::new(vip, port);

    let mut seen: HashMap<String, usize> = HashMap::new();
    for i in 0..6 {
        // A connected client socket only accepts replies from vip:port.
        let socket = UdpSocket::bind((client(1), 0)).await.unwrap();
        socket.connect(addr).await.unwrap();
        let reply = udp_roundtrip(&socket, &format!("q{i}"))
            .await
            .expect("reply");
        let (name, payload) = reply.split_once(' ').unwrap();
        assert_eq!(payload, format!("q{i}"));
        // The flow keeps its backend.
        let again = udp_roundtrip(&socket, "again").await.expect("reply");
        assert_eq!(again, format!("{name} again"));
        *seen.entry(name.to_owned()).or_default() += 1;
    }
    assert_eq!(seen, counts(&[(node(1), 2), (node(2), 2), (node(3), 2)]));
    let stats = stats_of(&proxy, Protocol::Udp, port);
    assert_eq!(stats.connections_total, 6);
    assert_eq!(stats.active, 6);
    assert!(stats.bytes_in > 0 && stats.bytes_out > stats.bytes_in);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_keeps_established_connections_and_swaps_listeners() {
    let (node_port, _servers) = tcp_backends(&[node(1), node(2), node(3)]).await;
    let vip = vip(4);
    let ports = free_ports(vip, 3);
    let (kept, removed, added) = (ports[0], ports[1], ports[2]);
    let proxy = LoadBalancerProxy::start(
        "upd".into(),
        config(
            vip,
            vec![tcp(kept, node_port), tcp(removed, node_port)],
            &[node(1)],
        ),
    )
    .await
    .unwrap();

    let (mut long, name) = open(SocketAddr::new(vip, kept)).await;
    assert_eq!(name, node(1).to_string());
    echo(&mut long, "one").await;
    let (mut on_removed, _) = open(SocketAddr::new(vip, removed)).await;

    let new = config(
        vip,
        vec![tcp(kept, node_port), tcp(added, node_port)],
        &[node(2), node(3)],
    );
    proxy.update(new.clone()).await.unwrap();
    assert_eq!(proxy.config(), new);

    // The established connection keeps its removed backend.
    echo(&mut long, "two").await;
    // The removed listener is closed, with its connections.
    assert_eq!(next_line(&mut on_removed).await, None);
    assert!(connect(SocketAddr::new(vip, removed), None).await.is_err());
    // New connections reach only the new backends, on kept and new listeners.
    let seen = tally(SocketAddr::new(vip, kept), 4).await;
    assert_eq!(seen, counts(&[(node(2), 2), (node(3), 2)]));
    let name = hello(SocketAddr::new(vip, added), None).await.unwrap();
    assert!(
        name == node(2).to_string() || name == node(3).to_string(),
        "{name}"
    );

    let ports: Vec<_> = proxy.stats().iter().map(|s| s.port).collect();
    assert_eq!(ports, vec![kept, added]);
    let stats = stats_of(&proxy, Protocol::Tcp, kept);
    assert_eq!(stats.connections_total, 5, "counters survive the update");
    // The short connections wind down after the client closed them.
    eventually("only the long connection open", || {
        stats_of(&proxy, Protocol::Tcp, kept).active == 1
    })
    .await;
    echo(&mut long, "three").await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_backend_gets_no_new_connections_until_it_recovers() {
    let (node_port, mut servers) = tcp_backends(&[node(1), node(2), node(3)]).await;
    let vip = vip(5);
    let port = free_port(vip);
    let proxy = LoadBalancerProxy::start(
        "unhealthy".into(),
        config(
            vip,
            vec![tcp(port, node_port)],
            &[node(1), node(2), node(3)],
        ),
    )
    .await
    .unwrap();
    let addr = SocketAddr::new(vip, port);

    servers.remove(1).stop().await;
    eventually("127.0.1.2 unhealthy", || !healthy(&proxy, node(2))).await;
    assert!(healthy(&proxy, node(1)) && healthy(&proxy, node(3)));
    assert_eq!(tally(addr, 6).await, counts(&[(node(1), 3), (node(3), 3)]));

    let listener = TcpListener::bind((node(2), node_port)).await.unwrap();
    let _back = Server(tokio::spawn(name_server(listener)));
    eventually("127.0.1.2 healthy again", || healthy(&proxy, node(2))).await;
    assert_eq!(
        tally(addr, 6).await,
        counts(&[(node(1), 2), (node(2), 2), (node(3), 2)])
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_backend_is_skipped_before_health_check_notices() {
    let (node_port, mut servers) = tcp_backends(&[node(1), node(2), node(3)]).await;
    servers.remove(1).stop().await;
    let vip = vip(6);
    let port = free_port(vip);
    let mut cfg = config(
        vip,
        vec![tcp(port, node_port)],
        &[node(1), node(2), node(3)],
    );
    // Only the first check runs: one failure, below the threshold of 2.
    cfg.health_interval = Duration::from_secs(3600);
    let proxy = LoadBalancerProxy::start("refused".into(), cfg)
        .await
        .unwrap();

    let seen = tally(SocketAddr::new(vip, port), 6).await;
    assert!(!seen.contains_key(&node(2).to_string()), "{seen:?}");
    assert_eq!(seen.values().sum::<usize>(), 6);
    assert!(
        healthy(&proxy, node(2)),
        "the connections fell through, not the health check"
    );
    assert_eq!(stats_of(&proxy, Protocol::Tcp, port).no_backend, 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_health_check_follows_status_code() {
    let (node_port, _servers) = tcp_backends(&[node(1), node(2)]).await;
    let (health_port, health_listeners) = tcp_same_port(&[node(1), node(2)]).await;
    let statuses = [Arc::new(AtomicU16::new(200)), Arc::new(AtomicU16::new(503))];
    let _health_servers: Vec<_> = health_listeners
        .into_iter()
        .zip(&statuses)
        .map(|(l, s)| Server(tokio::spawn(http_health_server(l, s.clone()))))
        .collect();
    let vip = vip(7);
    let port = free_port(vip);
    let mut cfg = config(vip, vec![tcp(port, node_port)], &[node(1), node(2)]);
    cfg.health_check = HealthCheck::Http {
        port: health_port,
        path: "/healthz".into(),
    };
    let proxy = LoadBalancerProxy::start("http".into(), cfg).await.unwrap();
    let addr = SocketAddr::new(vip, port);

    eventually("503 marks 127.0.1.2 unhealthy", || {
        !healthy(&proxy, node(2))
    })
    .await;
    assert!(healthy(&proxy, node(1)));
    assert_eq!(tally(addr, 4).await, counts(&[(node(1), 4)]));

    statuses[1].store(200, Relaxed);
    eventually("200 marks 127.0.1.2 healthy", || healthy(&proxy, node(2))).await;
    assert_eq!(tally(addr, 4).await, counts(&[(node(1), 2), (node(2), 2)]));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_ranges_reject_and_accept() {
    let (tcp_node_port, _tcp_servers) = tcp_backends(&[node(1)]).await;
    let (udp_node_port, _udp_servers) = udp_backends(&[node(1)]).await;
    let vip = vip(8);
    let port = free_port(vip);
    let mut cfg = config(
        vip,
        vec![tcp(port, tcp_node_port), udp(port, udp_node_port)],
        &[node(1)],
    );
    cfg.source_ranges = vec!["127.0.0.2/32".parse().unwrap()];
    let proxy = LoadBalancerProxy::start("ranges".into(), cfg)
        .await
        .unwrap();
    let addr = SocketAddr::new(vip, port);

    assert_eq!(hello(addr, Some(client(3))).await, None);
    assert_eq!(
        hello(addr, Some(client(2))).await,
        Some(node(1).to_string())
    );
    let stats = stats_of(&proxy, Protocol::Tcp, port);
    assert_eq!((stats.rejected_source, stats.connections_total), (1, 1));

    let outsider = UdpSocket::bind((client(3), 0)).await.unwrap();
    outsider.send_to(b"hi", addr).await.unwrap();
    eventually("UDP datagram rejected", || {
        stats_of(&proxy, Protocol::Udp, port).rejected_source == 1
    })
    .await;
    let reply = udp_ask(addr, client(2), "hi").await;
    assert_eq!(reply, Some(format!("{} hi", node(1))));
    assert_eq!(stats_of(&proxy, Protocol::Udp, port).connections_total, 1);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ip_affinity_sticks_per_source_ip() {
    let (node_port, _servers) = tcp_backends(&[node(1), node(2), node(3)]).await;
    let vip = vip(9);
    let port = free_port(vip);
    let mut cfg = config(
        vip,
        vec![tcp(port, node_port)],
        &[node(1), node(2), node(3)],
    );
    cfg.session_affinity = Some(Duration::from_secs(60));
    let proxy = LoadBalancerProxy::start("affinity".into(), cfg)
        .await
        .unwrap();
    let addr = SocketAddr::new(vip, port);

    let first = hello(addr, Some(client(2))).await.unwrap();
    for _ in 0..19 {
        assert_eq!(hello(addr, Some(client(2))).await.unwrap(), first);
    }
    let mut chosen = std::collections::HashSet::new();
    for c in 3..9 {
        let got = hello(addr, Some(client(c))).await.unwrap();
        for _ in 0..2 {
            assert_eq!(hello(addr, Some(client(c))).await.unwrap(), got);
        }
        chosen.insert(got);
    }
    assert!(chosen.len() >= 2, "new clients are spread: {chosen:?}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_qps_closes_connections_over_the_rate() {
    let (node_port, _servers) = tcp_backends(&[node(1), node(2)]).await;
    let vip = vip(10);
    let port = free_port(vip);
    let mut cfg = config(vip, vec![tcp(port, node_port)], &[node(1), node(2)]);
    cfg.max_qps = Some(5);
    let proxy = LoadBalancerProxy::start("qps".into(), cfg).await.unwrap();
    let addr = SocketAddr::new(vip, port);

    let started = Instant::now();
    let mut served = 0;
    for _ in 0..30 {
        if hello(addr, None).await.is_some() {
            served += 1;
        }
    }
    // The burst is 5; the refill during the loop adds 5 per second.
    let slack = (started.elapsed().as_secs_f64() * 5.0).ceil() as u64;
    assert!(
        (5..=5 + slack).contains(&served),
        "served {served}, slack {slack}"
    );
    let stats = stats_of(&proxy, Protocol::Tcp, port);
    assert_eq!(stats.connections_total, served);
    assert_eq!(stats.rejected_rate, 30 - served);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_closes_connections_and_forgets_flows() {
    let (tcp_node_port, _tcp_servers) = tcp_backends(&[node(1)]).await;
    let (udp_node_port, _udp_servers) = udp_backends(&[node(1)]).await;
    let vip = vip(11);
    let port = free_port(vip);
    let mut cfg = config(
        vip,
        vec![tcp(port, tcp_node_port), udp(port, udp_node_port)],
        &[node(1)],
    );
    let idle = Duration::from_millis(300);
    cfg.idle_timeout = idle;
    let proxy = LoadBalancerProxy::start("idle".into(), cfg).await.unwrap();
    let addr = SocketAddr::new(vip, port);

    assert!(udp_ask(addr, client(1), "x").await.is_some());
    assert_eq!(stats_of(&proxy, Protocol::Udp, port).active, 1);

    let (mut stream, _) = open(addr).await;
    // Traffic for twice the timeout keeps the connection open.
    let busy_until = Instant::now() + idle * 2;
    while Instant::now() < busy_until {
        echo(&mut stream, "tick").await;
        tokio::time::sleep(idle / 4).await;
    }
    let quiet = Instant::now();
    assert_eq!(next_line(&mut stream).await, None, "closed when idle");
    assert!(
        quiet.elapsed() >= idle - Duration::from_millis(100),
        "{:?}",
        quiet.elapsed()
    );
    eventually("TCP connection gone", || {
        stats_of(&proxy, Protocol::Tcp, port).active == 0
    })
    .await;
    eventually("UDP flow forgotten", || {
        stats_of(&proxy, Protocol::Udp, port).active == 0
    })
    .await;
    assert_eq!(stats_of(&proxy, Protocol::Udp, port).connections_total, 1);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_everything_and_frees_ports() {
    let (tcp_node_port, _tcp_servers) = tcp_backends(&[node(1)]).await;
    let (udp_node_port, _udp_servers) = udp_backends(&[node(1)]).await;
    let vip = vip(12);
    let port = free_port(vip);
    let cfg = config(
        vip,
        vec![tcp(port, tcp_node_port), udp(port, udp_node_port)],
        &[node(1)],
    );
    let proxy = LoadBalancerProxy::start("shutdown".into(), cfg)
        .await
        .unwrap();
    let addr = SocketAddr::new(vip, port);
    let (mut stream, _) = open(addr).await;
    assert!(udp_ask(addr, client(1), "x").await.is_some());

    proxy.shutdown().await;
    assert_eq!(next_line(&mut stream).await, None);
    std::net::TcpListener::bind(addr).expect("TCP port free after shutdown");
    std::net::UdpSocket::bind(addr).expect("UDP port free after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_failure_releases_bound_listeners_and_keeps_old_config() {
    let (node_port, _servers) = tcp_backends(&[node(1)]).await;
    let vip = vip(13);
    let ports = free_ports(vip, 2);
    let (free, taken) = (ports[0], ports[1]);
    let blocker = std::net::TcpListener::bind((vip, taken)).unwrap();

    let cfg = config(
        vip,
        vec![
            tcp(free, node_port),
            udp(free, node_port),
            tcp(taken, node_port),
        ],
        &[node(1)],
    );
    match LoadBalancerProxy::start("bind".into(), cfg).await {
        Err(ProxyError::Bind { addr, .. }) => assert_eq!(addr, SocketAddr::new(vip, taken)),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("started on a taken port"),
    }
    drop(std::net::TcpListener::bind((vip, free)).expect("TCP listener released"));
    drop(std::net::UdpSocket::bind((vip, free)).expect("UDP listener released"));

    let old = config(vip, vec![tcp(free, node_port)], &[node(1)]);
    let proxy = LoadBalancerProxy::start("bind".into(), old.clone())
        .await
        .unwrap();
    let grown = config(
        vip,
        vec![tcp(free, node_port), tcp(taken, node_port)],
        &[node(1)],
    );
    assert!(matches!(
        proxy.update(grown.clone()).await,
        Err(ProxyError::Bind { .. })
    ));
    assert_eq!(proxy.config(), old);
    assert_eq!(proxy.stats().len(), 1);
    assert!(hello(SocketAddr::new(vip, free), None).await.is_some());

    drop(blocker);
    proxy.update(grown).await.unwrap();
    assert!(hello(SocketAddr::new(vip, taken), None).await.is_some());
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_configs_are_refused() {
    let (node_port, _servers) = tcp_backends(&[node(1)]).await;
    let vip = vip(14);
    let port = free_port(vip);
    let good = config(vip, vec![tcp(port, node_port)], &[node(1)]);

    let mut dup = good.clone();
    dup.listeners.push(tcp(port, node_port + 1));
    assert!(matches!(
        LoadBalancerProxy::start("invalid".into(), dup.clone()).await,
        Err(ProxyError::InvalidConfig(_))
    ));

    let proxy = LoadBalancerProxy::start("invalid".into(), good.clone())
        .await
        .unwrap();
    let mut moved = good.clone();
    moved.vip = self::vip(15);
    assert!(matches!(
        proxy.update(moved).await,
        Err(ProxyError::InvalidConfig(_))
    ));
    assert!(matches!(
        proxy.update(dup).await,
        Err(ProxyError::InvalidConfig(_))
    ));
    assert_eq!(proxy.config(), good);
    assert!(hello(SocketAddr::new(vip, port), None).await.is_some());
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_backend_closes_connections_and_drops_datagrams() {
    let (tcp_node_port, mut tcp_servers) = tcp_backends(&[node(1)]).await;
    tcp_servers.remove(0).stop().await;
    let vip = vip(16);
    let port = free_port(vip);
    let (udp_node_port, _udp_servers) = udp_backends(&[node(1)]).await;
    let mut cfg = config(
        vip,
        vec![tcp(port, tcp_node_port), udp(port, udp_node_port)],
        &[node(1)],
    );
    cfg.health_interval = Duration::from_secs(3600);
    let proxy = LoadBalancerProxy::start("nobackend".into(), cfg.clone())
        .await
        .unwrap();
    let addr = SocketAddr::new(vip, port);

    // The only backend refuses: every attempt failed.
    assert_eq!(hello(addr, None).await, None);
    assert_eq!(stats_of(&proxy, Protocol::Tcp, port).no_backend, 1);

    // No backend at all.
    cfg.backends.clear();
    proxy.update(cfg).await.unwrap();
    assert_eq!(hello(addr, None).await, None);
    assert_eq!(stats_of(&proxy, Protocol::Tcp, port).no_backend, 2);
    let socket = UdpSocket::bind((client(1), 0)).await.unwrap();
    socket.send_to(b"x", addr).await.unwrap();
    eventually("UDP datagram dropped", || {
        stats_of(&proxy, Protocol::Udp, port).no_backend == 1
    })
    .await;
    assert_eq!(stats_of(&proxy, Protocol::Udp, port).connections_total, 0);
    proxy.shutdown().await;
}
