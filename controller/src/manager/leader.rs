//! Leader election on a `coordination.k8s.io/v1` Lease, with fencing.
//!
//! - Every Lease write is a compare-and-swap on `resourceVersion`.
//! - Expiry never compares clocks across machines: a Lease held by someone
//!   else counts as expired only once *we* have seen it unchanged (same
//!   resourceVersion) for its lease duration, measured on our monotonic
//!   clock. Clock skew between replicas cannot cause a takeover.
//! - Fencing: the [`Fence`] allows Kubernetes writes and provider mutations
//!   only while our last successful renewal is younger than the renew
//!   deadline (10 s), which is shorter than the lease duration (15 s) any
//!   successor must wait. A frozen process (SIGSTOP) wakes up with a stale
//!   renewal and writes nothing; losing the Lease ends the process, as
//!   upstream.
//! - The Lease states its duration in whole seconds: rounded up, never less
//!   than the flag (client-go truncates: 2.9 s became 2 s, shorter than a
//!   2.8 s renew deadline, and two leaders acted at once). The fence closes
//!   by the stated duration less [`CLOCK_RATE_MARGIN`] at the latest, both
//!   counted from when the renewal was sent: a successor counts from when
//!   it saw the renewal, which is later.
//! - On clean shutdown the Lease is released (holder cleared) so a
//!   successor takes over at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccm_provider_sdk::FencingToken;
use parking_lot::Mutex;
use tokio::sync::Notify;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// Whether this process may write, and as whom. Cheap to clone and check.
#[derive(Clone)]
pub struct Fence(Option<Arc<FenceState>>);

struct FenceState {
    /// When we last renewed, and our term and identity (sent with every
    /// provider mutation); `None` while the Lease is not ours.
    held: Mutex<Option<(Instant, FencingToken)>>,
    /// How long after a renewal was sent we may write
    /// ([`Config::fence_window`]).
    window: Duration,
    /// The newest term a provider said it has seen from someone else, so
    /// the next renewal can raise ours past it.
    superseded_by: Mutex<Option<u64>>,
    /// Woken when the fence closes before its deadline.
    closed: Notify,
}

/// The kube client's write fence ([`ccm_runtime::kube_client::Fenced`]).
impl ccm_runtime::kube_client::WriteFence for Fence {
    fn allows_writes(&self) -> bool {
        Fence::allows_writes(self)
    }
}

impl Fence {
    /// No leader election: always open.
    pub fn open() -> Fence {
        Fence(None)
    }

    fn elected(window: Duration) -> Fence {
        Fence(Some(Arc::new(FenceState {
            held: Mutex::new(None),
            window,
            superseded_by: Mutex::new(None),
            closed: Notify::new(),
        })))
    }

    /// True while the Lease is ours and was renewed within the deadline.
    pub fn allows_writes(&self) -> bool {
        match &self.0 {
            None => true,
            Some(s) => s.expiry().is_some_and(|t| Instant::now() < t),
        }
    }

    fn renewed_at(&self, at: Instant, token: FencingToken) {
        if let Some(s) = &self.0 {
            *s.held.lock() = Some((at, token));
        }
    }

    fn close(&self) {
        if let Some(s) = &self.0 {
            *s.held.lock() = None;
            s.closed.notify_waiters();
        }
    }

    /// The term to write at the next renewal when a provider has seen a
    /// newer one than `current` (only a Lease deleted and created again
    /// makes a term go back).
    fn term_after(&self, current: u64) -> u64 {
        match &self.0 {
            Some(s) => match *s.superseded_by.lock() {
                Some(newest) if newest >= current => newest + 1,
                _ => current,
            },
            None => current,
        }
    }
}

impl FenceState {
    fn expiry(&self) -> Option<Instant> {
        self.held
            .lock()
            .as_ref()
            .map(|(renewed, _)| *renewed + self.window)
    }
}

impl ccm_provider_sdk::client::MutationGate for Fence {
    fn allows_mutations(&self) -> bool {
        self.allows_writes()
    }

    fn fencing_token(&self) -> Option<FencingToken> {
        let held = self.0.as_ref()?.held.lock();
        held.as_ref().map(|(_, token)| token.clone())
    }

    fn revoked(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let Some(state) = self.0.clone() else {
            return Box::pin(std::future::pending());
        };
        Box::pin(async move {
            loop {
                let closed = state.closed.notified();
                let Some(expiry) = state.expiry() else { return };
                if Instant::now() >= expiry {
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(expiry.into()) => {}
                    () = closed => {}
                }
            }
        })
    }

    fn superseded(&self, newest: &FencingToken) {
        if let Some(s) = &self.0 {
            let mut seen = s.superseded_by.lock();
            if seen.is_none_or(|t| t < newest.term) {
                tracing::warn!(term = newest.term, holder = %newest.holder, "a provider refused a write: it has seen a newer leader's term");
                *seen = Some(newest.term);
            }
        }
    }
}

/// How much faster a successor's clock may run than ours, as a fraction:
/// the fence closes this much before the stated lease duration. Clocks
/// disciplined by NTP differ by well under 0.1%.
pub const CLOCK_RATE_MARGIN: f64 = 0.01;

/// The flags, checked: renew deadline < lease duration, retry period <
/// renew deadline (upstream's validation).
#[derive(Debug, Clone)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Config {
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err("leaseDuration must be greater than renewDeadline".into());
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return Err("renewDeadline must be greater than retryPeriod*JitterFactor".into());
        }
        if self.retry_period.is_zero() {
            return Err("retryPeriod must be greater than zero".into());
        }
        if self.lease_duration > Duration::from_secs(i32::MAX as u64) {
            return Err(format!(
                "leaseDuration must be at most {}s (the Lease's leaseDurationSeconds)",
                i32::MAX
            ));
        }
        if self.namespace.is_empty() || self.name.is_empty() {
            return Err("--leader-elect-resource-namespace and --leader-elect-resource-name must not be empty".into());
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: the flag rounded up to whole
    /// seconds, so the Lease never promises less than the flag.
    pub fn lease_duration_seconds(&self) -> i32 {
        let d = self.lease_duration;
        let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(whole.max(1)).unwrap_or(i32::MAX)
    }

    /// How long after a renewal was sent we may still write: the renew
    /// deadline, but never past the time a successor may take the Lease
    /// (the stated duration, less the clock-rate margin). Only shorter than
    /// the renew deadline when the two are within 1% of each other.
    pub fn fence_window(&self) -> Duration {
        let stated = Duration::from_secs(self.lease_duration_seconds() as u64);
        self.renew_deadline
            .min(stated.mul_f64(1.0 - CLOCK_RATE_MARGIN))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leaderelection lost: the Lease {0} was not renewed within the renew deadline")]
    Lost(String),
    #[error("leaderelection lost: the Lease {lease} is now held by {holder:?}")]
    Taken { lease: String, holder: String },
}

/// What we last saw of someone else's Lease.
struct Observed {
    resource_version: String,
    since: Instant,
}

pub struct Elector {
    api: Api<Lease>,
    cfg: Config,
    fence: Fence,
    /// Our last write's resourceVersion, for compare-and-swap renewals.
    ours: Mutex<Option<String>>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn holder(l: &Lease) -> &str {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

impl Elector {
    /// `client` must not be fenced: it carries the Lease writes themselves.
    pub fn new(client: Client, cfg: Config) -> Elector {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            fence: Fence::elected(cfg.fence_window()),
            cfg,
            ours: Mutex::new(None),
        }
    }

    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    fn lease_name(&self) -> String {
        format!("{}/{}", self.cfg.namespace, self.cfg.name)
    }

    fn spec(&self, acquire: bool, transitions: u64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.lease_duration_seconds()),
            acquire_time: acquire.then(now),
            renew_time: Some(now()),
            lease_transitions: Some(i32::try_from(transitions).unwrap_or(i32::MAX)),
            ..Default::default()
        }
    }

    /// One attempt to create, take or renew the Lease. `Ok(true)`: it is
    /// ours (and the fence renewed).
    async fn try_acquire_or_renew(
        &self,
        observed: &mut Option<Observed>,
    ) -> Result<bool, kube::Error> {
        let started = Instant::now();
        let current = self.api.get_opt(&self.cfg.name).await?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(true, self.fence.term_after(0))),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.won(created, started);
                    Ok(true)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let held_by = holder(&lease).to_owned();
        let transitions = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0)
            .max(0) as u64;
        if held_by != self.cfg.identity && !held_by.is_empty() {
            // Someone else's: expired only after we saw it unchanged for
            // its duration (ours if it states none or nonsense).
            let stated = lease
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64));
            let duration = stated.unwrap_or(self.cfg.lease_duration);
            match observed {
                Some(o) if o.resource_version == rv => {
                    if o.since.elapsed() < duration {
                        return Ok(false);
                    }
                }
                _ => {
                    *observed = Some(Observed {
                        resource_version: rv,
                        since: Instant::now(),
                    });
                    return Ok(false);
                }
            }
            tracing::info!(lease = %self.lease_name(), previous = %held_by, "lease expired; taking it");
        }
        let acquiring = held_by != self.cfg.identity;
        let spec = if acquiring {
            self.spec(true, self.fence.term_after(transitions + 1))
        } else {
            let term = self.fence.term_after(transitions);
            if term != transitions {
                tracing::info!(lease = %self.lease_name(), from = transitions, to = term, "raising the lease term past the newest a provider has seen");
            }
            let mut s = self.spec(false, term);
            s.acquire_time = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
            s
        };
        lease.spec = Some(spec);
        // replace() carries metadata.resourceVersion: compare-and-swap.
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.won(written, started);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn won(&self, lease: Lease, started: Instant) {
        // The term is the Lease's transition count as we wrote it.
        let term = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0)
            .max(0) as u64;
        // The renewal counts from before the request: a slow answer never
        // extends our claim beyond what the others can see.
        self.fence
            .renewed_at(started, FencingToken::new(term, self.cfg.identity.clone()));
        *self.ours.lock() = lease.metadata.resource_version;
    }

    /// Waits until the Lease is ours.
    pub async fn acquire(&self) {
        let mut observed = None;
        let mut logged = false;
        loop {
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    tracing::info!(lease = %self.lease_name(), identity = %self.cfg.identity, "successfully acquired lease");
                    return;
                }
                Ok(false) => {
                    if !logged {
                        tracing::info!(lease = %self.lease_name(), "attempting to acquire leader lease");
                        logged = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(lease = %self.lease_name(), error = %e, "error retrieving or updating the lease")
                }
            }
            tokio::time::sleep(jitter(self.cfg.retry_period)).await;
        }
    }

    /// Renews every retry period; returns (with the fence closed) when the
    /// Lease is lost or could not be renewed within the renew deadline.
    pub async fn hold(&self) -> LeaderError {
        let mut observed = None;
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => continue,
                Ok(false) => {
                    self.fence.close();
                    let holder = match self.api.get_opt(&self.cfg.name).await {
                        Ok(Some(l)) => holder(&l).to_owned(),
                        _ => String::new(),
                    };
                    return LeaderError::Taken {
                        lease: self.lease_name(),
                        holder,
                    };
                }
                Err(e) => {
                    tracing::warn!(lease = %self.lease_name(), error = %e, "failed to renew the lease");
                }
            }
            if !self.fence.allows_writes() {
                self.fence.close();
                return LeaderError::Lost(self.lease_name());
            }
        }
    }

    /// Gives the Lease up so a successor need not wait for it to expire.
    /// Only if it is still ours (compare-and-swap on our last write).
    pub async fn release(&self) {
        self.fence.close();
        let Some(rv) = self.ours.lock().clone() else {
            return;
        };
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        if holder(&lease) != self.cfg.identity
            || lease.metadata.resource_version.as_deref() != Some(rv.as_str())
        {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now());
        }
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.lease_name(), "released the lease"),
            Err(e) => {
                tracing::warn!(lease = %self.lease_name(), error = %e, "could not release the lease")
            }
        }
    }
}

/// Up to 20% more, as client-go's JitterFactor 1.2, so replicas do not
/// retry in lockstep.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or_default();
    d.mul_f64(1.0 + f64::from(nanos % 1000) / 5000.0)
}

/// `<hostname>_<random>`, as upstream's identity, unless POD_NAME is set.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "cloud-controller-manager".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.as_nanos())
        .unwrap_or_default();
    format!(
        "{host}_{:08x}{:04x}",
        nanos as u32,
        std::process::id() as u16
    )
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// An elected fence that was never renewed.
    pub fn closed_fence() -> Fence {
        Fence::elected(Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            namespace: "kube-system".into(),
            name: "cloud-controller-manager".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn upstream_validation_of_durations() {
        assert!(cfg().validate().is_ok());
        let mut c = cfg();
        c.renew_deadline = Duration::from_secs(15);
        assert_eq!(
            c.validate().unwrap_err(),
            "leaseDuration must be greater than renewDeadline"
        );
        let mut c = cfg();
        c.retry_period = Duration::from_secs(9);
        assert!(c.validate().unwrap_err().contains("retryPeriod"));
    }

    fn token() -> FencingToken {
        FencingToken::new(2, "me")
    }

    /// A client that never connects: the elector's decisions below send
    /// nothing.
    fn offline_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Client::try_from(config).unwrap()
    }

    /// Issue 25, finding 2: with a 2.9 s lease and a 2.8 s renew deadline
    /// the Lease said 2 s, so a successor acted while the deposed leader's
    /// fence was still open. The Lease must promise at least the flag, and
    /// the fence must close before a successor may act: a successor counts
    /// the stated duration from when it first saw our renewal (after we
    /// sent it), on a clock that may run up to 1% fast relative to ours.
    #[tokio::test]
    async fn the_fence_closes_before_a_successor_may_take_the_lease() {
        let ms = Duration::from_millis;
        for (lease, renew, retry) in [
            (ms(2900), ms(2800), ms(1000)),
            (ms(15_000), ms(10_000), ms(2000)),
            (ms(1500), ms(1400), ms(500)),
            (ms(500), ms(400), ms(100)),
            (ms(10_000), ms(9950), ms(2000)),
            (ms(3000), ms(2000), ms(500)),
        ] {
            let c = Config {
                lease_duration: lease,
                renew_deadline: renew,
                retry_period: retry,
                ..cfg()
            };
            c.validate().unwrap();
            let elector = Elector::new(offline_client(), c);
            let stated = elector.spec(false, 1).lease_duration_seconds.unwrap();
            let successor_waits = Duration::from_secs(stated as u64);
            assert!(
                successor_waits >= lease,
                "{lease:?}/{renew:?}: the Lease says {stated}s, less than the flag"
            );
            // Renewal sent just long enough ago that a successor may act now.
            let sent = Instant::now() - successor_waits.mul_f64(0.99);
            elector.fence.renewed_at(sent, token());
            assert!(
                !elector.fence.allows_writes(),
                "{lease:?}/{renew:?}: the fence is open when a successor (Lease {stated}s) may act"
            );
            // And it is open for a fresh renewal.
            elector.fence.renewed_at(Instant::now(), token());
            assert!(elector.fence.allows_writes());
        }
    }

    #[test]
    fn the_fence_opens_only_for_a_fresh_renewal() {
        assert!(Fence::open().allows_writes());
        let f = Fence::elected(Duration::from_millis(50));
        assert!(!f.allows_writes(), "closed before the first renewal");
        f.renewed_at(Instant::now(), token());
        assert!(f.allows_writes());
        f.renewed_at(Instant::now() - Duration::from_millis(60), token());
        assert!(
            !f.allows_writes(),
            "a stale renewal (a frozen process) writes nothing"
        );
        f.renewed_at(Instant::now(), token());
        f.close();
        assert!(!f.allows_writes());
    }

    #[tokio::test]
    async fn mutations_are_revoked_when_the_renewal_goes_stale_or_the_fence_closes() {
        use ccm_provider_sdk::client::MutationGate;
        let open = Fence::open();
        assert_eq!(open.fencing_token(), None, "no election, no token");
        let f = Fence::elected(Duration::from_millis(200));
        f.renewed_at(Instant::now(), token());
        assert_eq!(f.fencing_token(), Some(token()));
        // Renewed in time: not revoked at the first deadline.
        let revoked = f.revoked();
        tokio::time::sleep(Duration::from_millis(120)).await;
        f.renewed_at(Instant::now(), token());
        let started = Instant::now();
        revoked.await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(150),
            "revoked at the old deadline: {waited:?}"
        );
        // Closing revokes at once.
        f.renewed_at(Instant::now(), token());
        let revoked = tokio::spawn(f.revoked());
        tokio::task::yield_now().await;
        f.close();
        tokio::time::timeout(Duration::from_millis(100), revoked)
            .await
            .expect("closing revokes at once")
            .unwrap();
    }

    #[test]
    fn a_newer_term_seen_by_a_provider_raises_ours_past_it() {
        use ccm_provider_sdk::client::MutationGate;
        let f = Fence::elected(Duration::from_secs(10));
        assert_eq!(f.term_after(3), 3);
        f.superseded(&FencingToken::new(7, "gone"));
        f.superseded(&FencingToken::new(5, "older"));
        assert_eq!(f.term_after(3), 8);
        assert_eq!(f.term_after(7), 8, "same term, other holder");
        assert_eq!(f.term_after(9), 9, "already past it");
        assert_eq!(Fence::open().term_after(3), 3);
    }
}
