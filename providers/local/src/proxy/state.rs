//! State shared by the tasks of one proxy: the current configuration with
//! backend health, and per listener the counters, round-robin position,
//! affinity table and rate limiter.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;
use tracing::info;

use super::ListenerStats;
use super::config::{Listener, Protocol, ProxyConfig};

/// Past this many client IPs a listener stops recording new affinities
/// (those clients get plain round-robin) rather than grow without bound.
const MAX_AFFINITY_ENTRIES: usize = 65_536;
/// A full affinity table is swept for expired entries at most this often,
/// so that a flood of new clients does not make each insert a full scan.
const AFFINITY_SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
struct BackendHealth {
    healthy: bool,
    failures: u32,
}

impl BackendHealth {
    /// A backend serves until a check says otherwise, so that a new load
    /// balancer, or a node just added, takes traffic at once.
    const NEW: BackendHealth = BackendHealth {
        healthy: true,
        failures: 0,
    };
}

struct State {
    config: Arc<ProxyConfig>,
    health: HashMap<IpAddr, BackendHealth>,
}

/// Configuration and health under one lock, so that a connection never sees
/// a backend list and a health table from different generations.
pub(crate) struct Shared {
    pub(crate) name: String,
    state: RwLock<State>,
}

impl Shared {
    pub(crate) fn new(name: String, config: ProxyConfig) -> Self {
        let health = config
            .backends
            .iter()
            .map(|b| (*b, BackendHealth::NEW))
            .collect();
        Shared {
            name,
            state: RwLock::new(State {
                config: Arc::new(config),
                health,
            }),
        }
    }

    pub(crate) fn config(&self) -> Arc<ProxyConfig> {
        self.state.read().config.clone()
    }

    /// The configuration and its healthy backends, in configured order.
    pub(crate) fn view(&self) -> (Arc<ProxyConfig>, Vec<IpAddr>) {
        let state = self.state.read();
        let healthy = state
            .config
            .backends
            .iter()
            .copied()
            .filter(|b| state.health.get(b).is_none_or(|h| h.healthy))
            .collect();
        (state.config.clone(), healthy)
    }

    /// Kept backends keep their health; new ones start healthy.
    pub(crate) fn replace_config(&self, config: ProxyConfig) {
        let mut state = self.state.write();
        let mut health: HashMap<_, _> = config
            .backends
            .iter()
            .map(|b| {
                (
                    *b,
                    state.health.get(b).copied().unwrap_or(BackendHealth::NEW),
                )
            })
            .collect();
        health.shrink_to_fit();
        state.health = health;
        state.config = Arc::new(config);
    }

    /// Applies one round of checks. Results for backends removed while the
    /// round ran are dropped.
    pub(crate) fn record_health(&self, results: &[(IpAddr, bool)]) {
        let mut state = self.state.write();
        let threshold = state.config.unhealthy_threshold;
        for (backend, ok) in results {
            let Some(h) = state.health.get_mut(backend) else {
                continue;
            };
            if *ok {
                h.failures = 0;
                if !h.healthy {
                    h.healthy = true;
                    info!(proxy = %self.name, %backend, "backend healthy");
                }
            } else {
                h.failures = h.failures.saturating_add(1);
                if h.healthy && h.failures >= threshold {
                    h.healthy = false;
                    info!(proxy = %self.name, %backend, failures = h.failures, "backend unhealthy");
                }
            }
        }
    }

    pub(crate) fn backend_health(&self) -> Vec<(IpAddr, bool)> {
        let state = self.state.read();
        state
            .config
            .backends
            .iter()
            .map(|b| (*b, state.health.get(b).is_none_or(|h| h.healthy)))
            .collect()
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) connections_total: AtomicU64,
    pub(crate) active: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) rejected_source: AtomicU64,
    pub(crate) rejected_rate: AtomicU64,
    pub(crate) no_backend: AtomicU64,
    pub(crate) rejected_flow_limit: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

struct Sticky {
    backend: IpAddr,
    last_used: Instant,
}

struct AffinityTable {
    entries: HashMap<IpAddr, Sticky>,
    last_sweep: Option<Instant>,
}

/// The listener's rate limit: governor's GCRA with a burst of one second's
/// worth, rebuilt (full) when the configured rate changes.
struct RateLimit {
    per_second: NonZeroU32,
    limiter: DefaultDirectRateLimiter,
}

/// `per_second` connections or datagrams a second, up to that many at once.
fn quota(per_second: NonZeroU32) -> Quota {
    Quota::per_second(per_second)
}

/// Per listener state that outlives configuration updates: a kept listener
/// keeps its counters, round-robin position and affinities.
pub(crate) struct ListenerState {
    pub(crate) protocol: Protocol,
    pub(crate) port: u16,
    node_port: AtomicU16,
    pub(crate) counters: Counters,
    rr: AtomicUsize,
    affinity: Mutex<AffinityTable>,
    rate: Mutex<Option<RateLimit>>,
}

impl ListenerState {
    pub(crate) fn new(listener: &Listener) -> Self {
        ListenerState {
            protocol: listener.protocol,
            port: listener.port,
            node_port: AtomicU16::new(listener.node_port),
            counters: Counters::default(),
            rr: AtomicUsize::new(0),
            affinity: Mutex::new(AffinityTable {
                entries: HashMap::new(),
                last_sweep: None,
            }),
            rate: Mutex::new(None),
        }
    }

    pub(crate) fn node_port(&self) -> u16 {
        self.node_port.load(Relaxed)
    }

    pub(crate) fn reconfigure(&self, listener: &Listener, config: &ProxyConfig) {
        self.node_port.store(listener.node_port, Relaxed);
        if config.session_affinity.is_none() {
            let mut table = self.affinity.lock();
            table.entries = HashMap::new();
        }
    }

    /// Source ranges, then the rate limit, for a new connection or a
    /// datagram; a refusal is counted here.
    pub(crate) fn admit(&self, config: &ProxyConfig, client: IpAddr) -> bool {
        if !config.source_ranges.is_empty()
            && !config.source_ranges.iter().any(|net| net.contains(client))
        {
            bump(&self.counters.rejected_source);
            return false;
        }
        if let Some(rate) = config.max_qps
            && !self.within_rate(rate)
        {
            bump(&self.counters.rejected_rate);
            return false;
        }
        true
    }

    /// Takes one from the rate limit; a rate of 0 admits nothing.
    fn within_rate(&self, per_second: u32) -> bool {
        let Some(per_second) = NonZeroU32::new(per_second) else {
            return false;
        };
        let mut rate = self.rate.lock();
        let limit = match &mut *rate {
            Some(limit) if limit.per_second == per_second => limit,
            slot => slot.insert(RateLimit {
                per_second,
                limiter: RateLimiter::direct(quota(per_second)),
            }),
        };
        limit.limiter.check().is_ok()
    }

    /// The backends to try, in order: the client's sticky backend if it is
    /// still valid, else the next one in round-robin, then the others after
    /// it. Each healthy backend appears once, which bounds the retries.
    pub(crate) fn pick_order(
        &self,
        client: IpAddr,
        healthy: &[IpAddr],
        affinity: Option<Duration>,
        now: Instant,
    ) -> Vec<IpAddr> {
        let n = healthy.len();
        if n == 0 {
            return Vec::new();
        }
        let sticky = affinity.and_then(|timeout| {
            let table = self.affinity.lock();
            let s = table.entries.get(&client)?;
            if now.saturating_duration_since(s.last_used) > timeout {
                return None;
            }
            healthy.iter().position(|b| *b == s.backend)
        });
        let start = sticky.unwrap_or_else(|| self.rr.fetch_add(1, Relaxed) % n);
        (0..n).map(|i| healthy[(start + i) % n]).collect()
    }

    /// Records which backend a client got, when affinity is on.
    pub(crate) fn stick(
        &self,
        client: IpAddr,
        backend: IpAddr,
        affinity: Option<Duration>,
        now: Instant,
    ) {
        let Some(timeout) = affinity else {
            return;
        };
        let mut table = self.affinity.lock();
        if table.entries.len() >= MAX_AFFINITY_ENTRIES && !table.entries.contains_key(&client) {
            let due = table
                .last_sweep
                .is_none_or(|t| now.saturating_duration_since(t) >= AFFINITY_SWEEP_EVERY);
            if due {
                table.last_sweep = Some(now);
                table
                    .entries
                    .retain(|_, s| now.saturating_duration_since(s.last_used) <= timeout);
            }
            if table.entries.len() >= MAX_AFFINITY_ENTRIES {
                return;
            }
        }
        table.entries.insert(
            client,
            Sticky {
                backend,
                last_used: now,
            },
        );
    }

    pub(crate) fn stats(&self) -> ListenerStats {
        let c = &self.counters;
        ListenerStats {
            protocol: self.protocol,
            port: self.port,
            connections_total: c.connections_total.load(Relaxed),
            active: c.active.load(Relaxed),
            bytes_in: c.bytes_in.load(Relaxed),
            bytes_out: c.bytes_out.load(Relaxed),
            rejected_source: c.rejected_source.load(Relaxed),
            rejected_rate: c.rejected_rate.load(Relaxed),
            no_backend: c.no_backend.load(Relaxed),
            rejected_flow_limit: c.rejected_flow_limit.load(Relaxed),
        }
    }
}

/// Counts a connection or flow as active for as long as it lives, however
/// its task ends (including cancellation).
pub(crate) struct ActiveGuard(Arc<ListenerState>);

impl ActiveGuard {
    pub(crate) fn new(state: &Arc<ListenerState>) -> Self {
        bump(&state.counters.connections_total);
        bump(&state.counters.active);
        ActiveGuard(state.clone())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.counters.active.fetch_sub(1, Relaxed);
    }
}

/// Last time bytes moved, as milliseconds since a start instant, so that
/// both directions can update it without a lock.
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Relaxed);
    }

    /// Completes once nothing touched this for `idle`.
    pub(crate) async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    #[test]
    fn rate_limit_starts_full_and_refills() {
        let clock = FakeRelativeClock::default();
        let b = RateLimiter::direct_with_clock(quota(NonZeroU32::new(5).unwrap()), clock.clone());
        let taken = (0..20).filter(|_| b.check().is_ok()).count();
        assert_eq!(taken, 5);
        clock.advance(Duration::from_millis(100));
        assert!(b.check().is_err());
        clock.advance(Duration::from_millis(150));
        assert!(b.check().is_ok());
        // A long pause refills only up to the burst.
        clock.advance(Duration::from_secs(60));
        assert_eq!((0..20).filter(|_| b.check().is_ok()).count(), 5);
    }

    #[test]
    fn a_new_rate_takes_effect() {
        let l = ListenerState::new(&Listener {
            protocol: Protocol::Tcp,
            port: 80,
            node_port: 30080,
        });
        let mut config = ProxyConfig::new("127.200.0.1".parse().unwrap());
        config.max_qps = Some(2);
        let client: IpAddr = "127.0.0.9".parse().unwrap();
        assert_eq!((0..10).filter(|_| l.admit(&config, client)).count(), 2);
        config.max_qps = Some(4);
        assert_eq!((0..10).filter(|_| l.admit(&config, client)).count(), 4);
        assert_eq!(l.stats().rejected_rate, 14);
    }

    #[test]
    fn pick_order_round_robin_and_affinity() {
        let l = ListenerState::new(&Listener {
            protocol: Protocol::Tcp,
            port: 80,
            node_port: 30080,
        });
        let ips: Vec<IpAddr> = ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let client: IpAddr = "127.0.0.9".parse().unwrap();
        let now = Instant::now();
        assert_eq!(l.pick_order(client, &ips, None, now), ips);
        assert_eq!(
            l.pick_order(client, &ips, None, now),
            vec![ips[1], ips[2], ips[0]]
        );
        assert!(l.pick_order(client, &[], None, now).is_empty());

        let aff = Some(Duration::from_secs(10));
        l.stick(client, ips[0], aff, now);
        for _ in 0..5 {
            assert_eq!(l.pick_order(client, &ips, aff, now)[0], ips[0]);
        }
        // Sticky backend gone unhealthy: the others, still each once.
        assert_eq!(l.pick_order(client, &ips[1..], aff, now).len(), 2);
        // Expired.
        let late = now + Duration::from_secs(11);
        let order = l.pick_order(client, &ips, aff, late);
        assert_eq!(order.len(), 3);
    }
}
