//! What a load balancer is asked to do: the configuration types and their
//! validation.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use ccm_provider_sdk::Cidr;

use super::ProxyError;

/// Transport protocol of a listener. A TCP and a UDP listener on the same
/// port are two listeners, as they are two ports of a Service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        })
    }
}

/// One Service port: traffic to `vip:port` goes to `backend:node_port`.
/// A listener is identified by `(protocol, port)`; `node_port` may change
/// under it without rebinding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: u16,
}

impl Listener {
    pub(crate) fn key(&self) -> (Protocol, u16) {
        (self.protocol, self.port)
    }
}

/// How backends are probed. Health is kept per backend (per node), not per
/// listener, as cloud load balancers do: one answer decides for every port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthCheck {
    /// TCP connect to backend:node_port of each listener (TCP listeners); a
    /// backend passes only if every TCP node port accepts, since a client of
    /// a multi-port Service needs all of them. UDP listeners have no active
    /// check and follow the TCP result of the same backend if any, else are
    /// considered healthy.
    Tcp,
    /// externalTrafficPolicy: Local: HTTP GET http://backend:port/path,
    /// healthy on 200 (kube-proxy's health check node port answers 503 when
    /// the node has no local endpoint, and traffic sent there would be
    /// dropped to keep the client source IP).
    Http { port: u16, path: String },
}

/// An address range of `loadBalancerSourceRanges`. Host bits may be set
/// (`10.1.2.3/8`), as the Kubernetes API accepts them; they are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

impl IpNet {
    /// Whether `ip` falls in the range. An IPv4 range never matches an IPv6
    /// client and vice versa: the VIP has one family, so do its clients.
    pub fn contains(&self, ip: IpAddr) -> bool {
        // A prefix too long for the family never passes validation.
        Cidr::new(self.addr, self.prefix_len).is_ok_and(|net| net.contains_ip(ip))
    }

    fn max_prefix_len(&self) -> u8 {
        if self.addr.is_ipv4() { 32 } else { 128 }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// Parses `addr/len`, the form of `loadBalancerSourceRanges`; a bare
/// address is a single host.
impl FromStr for IpNet {
    type Err = ProxyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |why: &dyn fmt::Display| {
            ProxyError::InvalidConfig(format!("source range {s:?}: {why}"))
        };
        let text = s.trim();
        if !text.contains('/') {
            let addr: IpAddr = text.parse().map_err(|_| invalid(&"not an IP address"))?;
            let prefix_len = if addr.is_ipv4() { 32 } else { 128 };
            return Ok(IpNet { addr, prefix_len });
        }
        let cidr = Cidr::parse(text).map_err(|e| invalid(&e))?;
        Ok(IpNet {
            addr: cidr.addr(),
            prefix_len: cidr.prefix_len(),
        })
    }
}

/// Everything one load balancer (one VIP) does. Built with
/// [`ProxyConfig::new`], which fills in the timing defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// An address local to the machine; the listeners bind it, not the
    /// wildcard, so that many load balancers share port numbers.
    pub vip: IpAddr,
    pub listeners: Vec<Listener>,
    /// Node InternalIPs. Order matters only for round-robin, which follows it.
    pub backends: Vec<IpAddr>,
    /// Empty = everyone allowed.
    pub source_ranges: Vec<IpNet>,
    /// `Some(timeout)` = ClientIP affinity: a client IP keeps its backend
    /// while that backend is healthy and the client came back within
    /// `timeout` of its last new connection or flow.
    pub session_affinity: Option<Duration>,
    pub health_check: HealthCheck,
    pub health_interval: Duration,
    /// Bounds a whole check of one backend (every port it probes).
    pub health_timeout: Duration,
    /// Consecutive failed checks to mark a backend unhealthy; one success
    /// marks it healthy again, so a recovered node serves at once.
    pub unhealthy_threshold: u32,
    /// Per listener: new TCP connections / UDP datagrams per second, in a
    /// token bucket whose burst equals the rate. Beyond it TCP connections
    /// are closed at once and UDP datagrams dropped, both counted as
    /// `rejected_rate`.
    pub max_qps: Option<u32>,
    /// TCP: a connection with no bytes either way for this long is closed.
    /// UDP: a flow (client address -> upstream socket) idle this long is
    /// forgotten. Read when the connection or flow starts.
    pub idle_timeout: Duration,
}

impl ProxyConfig {
    /// Probing often enough to take a dead node out within a few seconds,
    /// rarely enough to be no load on kube-proxy.
    pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(2);
    pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
    /// Two failures so that one dropped probe does not flap a node.
    pub const DEFAULT_UNHEALTHY_THRESHOLD: u32 = 2;
    /// 350 s is the idle timeout of AWS NLB for TCP, a value clients and
    /// their keepalives are already tuned for. UDP flows share it, which
    /// keeps one socket per client for that long; the flow table is bounded.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(350);

    /// A load balancer on `vip` with no listeners, no backends, everyone
    /// allowed, no affinity, TCP health checks and the default timings.
    pub fn new(vip: IpAddr) -> Self {
        ProxyConfig {
            vip,
            listeners: Vec::new(),
            backends: Vec::new(),
            source_ranges: Vec::new(),
            session_affinity: None,
            health_check: HealthCheck::Tcp,
            health_interval: Self::DEFAULT_HEALTH_INTERVAL,
            health_timeout: Self::DEFAULT_HEALTH_TIMEOUT,
            unhealthy_threshold: Self::DEFAULT_UNHEALTHY_THRESHOLD,
            max_qps: None,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ProxyError> {
        let invalid = |why: String| Err(ProxyError::InvalidConfig(why));
        if self.vip.is_unspecified() || self.vip.is_multicast() {
            return invalid(format!("vip {} is not a unicast address", self.vip));
        }
        let mut keys = HashSet::new();
        for l in &self.listeners {
            if l.port == 0 || l.node_port == 0 {
                return invalid(format!("listener {} {}: port 0", l.protocol, l.port));
            }
            if !keys.insert(l.key()) {
                return invalid(format!("listener {} {} given twice", l.protocol, l.port));
            }
        }
        let mut backends = HashSet::new();
        for b in &self.backends {
            if b.is_unspecified() || b.is_multicast() {
                return invalid(format!("backend {b} is not a unicast address"));
            }
            if !backends.insert(b) {
                return invalid(format!("backend {b} given twice"));
            }
        }
        for net in &self.source_ranges {
            if net.prefix_len > net.max_prefix_len() {
                return invalid(format!("source range {net}: prefix length too long"));
            }
        }
        if let HealthCheck::Http { port, path } = &self.health_check {
            if *port == 0 {
                return invalid("HTTP health check on port 0".into());
            }
            // The path goes into the request line as is.
            if !path.starts_with('/')
                || path
                    .bytes()
                    .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
            {
                return invalid(format!("HTTP health check path {path:?}"));
            }
        }
        if self.session_affinity == Some(Duration::ZERO) {
            return invalid("session affinity timeout 0".into());
        }
        if self.health_interval.is_zero() || self.health_timeout.is_zero() {
            return invalid("health check interval and timeout must be > 0".into());
        }
        if self.unhealthy_threshold == 0 {
            return invalid("unhealthy threshold 0".into());
        }
        if self.max_qps == Some(0) {
            return invalid("max_qps 0 (use None for no limit)".into());
        }
        if self.idle_timeout.is_zero() {
            return invalid("idle timeout 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipnet_parses_and_matches() {
        assert_eq!(net("10.0.0.0/8").prefix_len, 8);
        assert_eq!(net("10.1.2.3").prefix_len, 32);
        assert_eq!(net("fd00::/8").prefix_len, 8);
        assert_eq!(net("::1").prefix_len, 128);
        assert!(net("10.0.0.0/8").contains(ip("10.255.0.1")));
        assert!(!net("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(
            net("10.9.9.9/8").contains(ip("10.0.0.1")),
            "host bits are ignored"
        );
        assert!(net("0.0.0.0/0").contains(ip("1.2.3.4")));
        assert!(
            !net("0.0.0.0/0").contains(ip("::1")),
            "families never match"
        );
        assert!(net("127.0.0.2/32").contains(ip("127.0.0.2")));
        assert!(!net("127.0.0.2/32").contains(ip("127.0.0.3")));
        assert!(net("fd00::/8").contains(ip("fd12::1")));
        assert!(net("::/0").contains(ip("fd12::1")));
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x",
            "10.0.0.0/-1",
            "10.0.0.0/",
        ] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
    }

    #[test]
    fn validation() {
        let mut ok = ProxyConfig::new(ip("127.200.0.1"));
        ok.listeners = vec![
            Listener {
                protocol: Protocol::Tcp,
                port: 80,
                node_port: 30080,
            },
            Listener {
                protocol: Protocol::Udp,
                port: 80,
                node_port: 30081,
            },
        ];
        ok.backends = vec![ip("127.0.1.1"), ip("127.0.1.2")];
        ok.validate().unwrap();

        type Change = Box<dyn Fn(&mut ProxyConfig)>;
        let bad: Vec<(&str, Change)> = vec![
            ("unspecified vip", Box::new(|c| c.vip = ip("0.0.0.0"))),
            (
                "duplicate listener",
                Box::new(|c| c.listeners[1].protocol = Protocol::Tcp),
            ),
            ("port 0", Box::new(|c| c.listeners[0].port = 0)),
            ("node port 0", Box::new(|c| c.listeners[0].node_port = 0)),
            (
                "duplicate backend",
                Box::new(|c| c.backends.push(ip("127.0.1.1"))),
            ),
            (
                "long prefix",
                Box::new(|c| {
                    c.source_ranges.push(IpNet {
                        addr: ip("10.0.0.0"),
                        prefix_len: 40,
                    })
                }),
            ),
            (
                "http path",
                Box::new(|c| {
                    c.health_check = HealthCheck::Http {
                        port: 10256,
                        path: "/a b".into(),
                    }
                }),
            ),
            (
                "http port",
                Box::new(|c| {
                    c.health_check = HealthCheck::Http {
                        port: 0,
                        path: "/healthz".into(),
                    }
                }),
            ),
            (
                "affinity 0",
                Box::new(|c| c.session_affinity = Some(Duration::ZERO)),
            ),
            (
                "interval 0",
                Box::new(|c| c.health_interval = Duration::ZERO),
            ),
            ("threshold 0", Box::new(|c| c.unhealthy_threshold = 0)),
            ("qps 0", Box::new(|c| c.max_qps = Some(0))),
            ("idle 0", Box::new(|c| c.idle_timeout = Duration::ZERO)),
        ];
        for (what, change) in bad {
            let mut c = ok.clone();
            change(&mut c);
            assert!(
                matches!(c.validate(), Err(ProxyError::InvalidConfig(_))),
                "{what}"
            );
        }
    }
}
