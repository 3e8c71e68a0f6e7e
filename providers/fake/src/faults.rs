//! Fault injection and the call log: what makes the fake a *misbehaving*
//! cloud on demand. Kept apart from the cloud state so that a fault never
//! changes what the cloud "is", only how it answers.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccm_provider_sdk::ProviderError;
use ccm_provider_sdk::error::reason_str;
use serde::{Deserialize, Serialize};

use crate::Error;

/// An RPC of the contract that reaches provider code, named exactly as in
/// the `.proto` files so tests and the admin API speak the contract's
/// language. `GetProviderInfo` and `GetProviderCapabilities` are answered by
/// the SDK from static data and cannot be faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Method {
    Probe,
    InstanceExists,
    InstanceShutdown,
    InstanceMetadata,
    BatchInstances,
    GetLoadBalancer,
    GetLoadBalancerName,
    EnsureLoadBalancer,
    UpdateLoadBalancer,
    EnsureLoadBalancerDeleted,
    ListLoadBalancers,
    ListRoutes,
    CreateRoute,
    DeleteRoute,
    GetZoneByProviderId,
    GetZoneByNodeName,
    ListClusters,
    Master,
    GetVolumeLabels,
}

impl Method {
    /// Every faultable method, for validation and help texts.
    pub const ALL: [Method; 19] = [
        Method::Probe,
        Method::InstanceExists,
        Method::InstanceShutdown,
        Method::InstanceMetadata,
        Method::BatchInstances,
        Method::GetLoadBalancer,
        Method::GetLoadBalancerName,
        Method::EnsureLoadBalancer,
        Method::UpdateLoadBalancer,
        Method::EnsureLoadBalancerDeleted,
        Method::ListLoadBalancers,
        Method::ListRoutes,
        Method::CreateRoute,
        Method::DeleteRoute,
        Method::GetZoneByProviderId,
        Method::GetZoneByNodeName,
        Method::ListClusters,
        Method::Master,
        Method::GetVolumeLabels,
    ];

    /// Whether the call changes the cloud: what a converged controller
    /// must not send while nothing changes.
    pub fn mutates(self) -> bool {
        matches!(
            self,
            Method::EnsureLoadBalancer
                | Method::UpdateLoadBalancer
                | Method::EnsureLoadBalancerDeleted
                | Method::CreateRoute
                | Method::DeleteRoute
        )
    }

    /// Whether the call reaches the cloud's API, and so spends its quota:
    /// everything but the readiness probe and the load balancer name (a
    /// pure function of the request).
    pub fn calls_cloud(self) -> bool {
        !matches!(self, Method::Probe | Method::GetLoadBalancerName)
    }

    /// The RPC name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Probe => "Probe",
            Method::InstanceExists => "InstanceExists",
            Method::InstanceShutdown => "InstanceShutdown",
            Method::InstanceMetadata => "InstanceMetadata",
            Method::BatchInstances => "BatchInstances",
            Method::GetLoadBalancer => "GetLoadBalancer",
            Method::GetLoadBalancerName => "GetLoadBalancerName",
            Method::EnsureLoadBalancer => "EnsureLoadBalancer",
            Method::UpdateLoadBalancer => "UpdateLoadBalancer",
            Method::EnsureLoadBalancerDeleted => "EnsureLoadBalancerDeleted",
            Method::ListLoadBalancers => "ListLoadBalancers",
            Method::ListRoutes => "ListRoutes",
            Method::CreateRoute => "CreateRoute",
            Method::DeleteRoute => "DeleteRoute",
            Method::GetZoneByProviderId => "GetZoneByProviderId",
            Method::GetZoneByNodeName => "GetZoneByNodeName",
            Method::ListClusters => "ListClusters",
            Method::Master => "Master",
            Method::GetVolumeLabels => "GetVolumeLabels",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = Error;

    /// Unknown names are an error rather than ignored: a typo in a test's
    /// fault would otherwise silently inject nothing.
    fn from_str(s: &str) -> Result<Self, Error> {
        Method::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| Error::UnknownMethod(s.to_owned()))
    }
}

/// Which calls a fault applies to: one method, or `"*"` for all of them (a
/// method-specific fault wins over `"*"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Target {
    All,
    Method(Method),
}

impl From<Method> for Target {
    fn from(m: Method) -> Self {
        Target::Method(m)
    }
}

impl TryFrom<String> for Target {
    type Error = Error;

    fn try_from(s: String) -> Result<Self, Error> {
        if s == "*" {
            Ok(Target::All)
        } else {
            s.parse().map(Target::Method)
        }
    }
}

impl From<Target> for String {
    fn from(t: Target) -> String {
        match t {
            Target::All => "*".to_owned(),
            Target::Method(m) => m.as_str().to_owned(),
        }
    }
}

/// The contract error an injection produces; one per
/// [`ProviderError`] constructor, so every reason the controller handles
/// can be provoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InstanceNotFound,
    RetryAfter,
    InvalidServiceSpec,
    InvalidAnnotation,
    QuotaExceeded,
    ConflictingResource,
    OperationPending,
    CloudUnavailable,
    CredentialsInvalid,
    Internal,
    Unimplemented,
}

/// An error to answer instead of doing the work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInjection {
    pub kind: ErrorKind,
    /// The error message; a default naming the injection when empty.
    #[serde(default)]
    pub message: String,
    /// For `retry_after` (required, default 1 s) and `cloud_unavailable`
    /// (optional hint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The field (`invalid_service_spec`) or annotation key
    /// (`invalid_annotation`) the error names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Only the next `times` calls fail; `None` means until cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// Do the work first, then wait the latency and answer the error: the
    /// cloud acted but the caller never learns it (a lost answer).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_work: bool,
}

impl ErrorInjection {
    /// An injection that fails every call until cleared.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorInjection {
            kind,
            message: message.into(),
            retry_after_ms: None,
            field: None,
            times: None,
            after_work: false,
        }
    }

    /// Limits the injection to the next `n` calls.
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    /// Makes the call do its work before failing (see `after_work`).
    pub fn after_work(mut self) -> Self {
        self.after_work = true;
        self
    }

    /// Sets the retry delay carried by `retry_after`/`cloud_unavailable`.
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// The error this injection answers for `method`.
    pub fn to_error(&self, method: Method) -> ProviderError {
        let message = if self.message.is_empty() {
            format!("injected {:?} fault on {method}", self.kind)
        } else {
            self.message.clone()
        };
        let delay = self.retry_after_ms.map(Duration::from_millis);
        let field = self.field.clone().unwrap_or_else(|| "injected".to_owned());
        match self.kind {
            ErrorKind::InstanceNotFound => ProviderError::instance_not_found(message),
            ErrorKind::RetryAfter => {
                ProviderError::retry_after(message, delay.unwrap_or(Duration::from_secs(1)))
            }
            ErrorKind::InvalidServiceSpec => ProviderError::invalid_service_spec(field, message),
            ErrorKind::InvalidAnnotation => ProviderError::invalid_annotation(&field, message),
            ErrorKind::QuotaExceeded => ProviderError::quota_exceeded(message),
            ErrorKind::ConflictingResource => ProviderError::conflicting_resource(message),
            ErrorKind::OperationPending => ProviderError::operation_pending(message),
            ErrorKind::CloudUnavailable => ProviderError::cloud_unavailable(message, delay),
            ErrorKind::CredentialsInvalid => ProviderError::credentials_invalid(message),
            ErrorKind::Internal => ProviderError::internal(message),
            ErrorKind::Unimplemented => ProviderError::unimplemented(message),
        }
    }
}

/// The configured faults, as the admin API shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultsSnapshot {
    /// Added latency per target, in milliseconds.
    pub latency_ms: BTreeMap<String, u64>,
    /// Pending error injections per target.
    pub errors: BTreeMap<String, ErrorInjection>,
    /// The call budget per second, if limited.
    pub rate_limit_per_second: Option<u32>,
    /// The cloud's API quota and what it granted and refused, if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaSnapshot>,
}

/// The cloud's API quota (`--quota-qps`, `--quota-burst`): a token bucket
/// over the calls that reach the cloud, full at start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QuotaConfig {
    /// Tokens added per second.
    pub qps: f64,
    /// The bucket's size: how many calls may come at once.
    pub burst: u32,
}

/// `GET /quota`: the quota and its counters since it was set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QuotaSnapshot {
    pub qps: f64,
    pub burst: u32,
    /// Calls that took a token (cloud calls made).
    pub granted: u64,
    /// Calls answered QUOTA_EXCEEDED.
    pub refused: u64,
}

/// The token bucket of [`QuotaConfig`], with its counters.
#[derive(Debug)]
struct Quota {
    config: QuotaConfig,
    tokens: f64,
    last: Instant,
    granted: u64,
    refused: u64,
}

impl Quota {
    fn new(config: QuotaConfig, now: Instant) -> Self {
        Quota {
            config,
            tokens: f64::from(config.burst),
            last: now,
            granted: 0,
            refused: 0,
        }
    }

    /// Takes a token, or says how long until the next one.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        let qps = self.config.qps.max(0.0);
        self.tokens = (self.tokens + elapsed * qps).min(f64::from(self.config.burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.granted += 1;
            return Ok(());
        }
        self.refused += 1;
        // No refill: a minute, the longest delay the controller honours.
        let wait = if qps > 0.0 {
            (1.0 - self.tokens) / qps
        } else {
            60.0
        };
        // Rounded up to a whole millisecond: RetryInfo is read in ms, and
        // coming back a fraction early would be refused again.
        Err(Duration::from_millis((wait * 1000.0).ceil() as u64).max(Duration::from_millis(1)))
    }

    fn snapshot(&self) -> QuotaSnapshot {
        QuotaSnapshot {
            qps: self.config.qps,
            burst: self.config.burst,
            granted: self.granted,
            refused: self.refused,
        }
    }
}

/// What to do with one call.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Answer this error at once (throttled), without latency.
    Reject(ProviderError),
    /// Wait `latency`, then answer `error` or do the work; with
    /// `after_work`, do the work, wait, then answer `error`.
    Proceed {
        latency: Duration,
        error: Option<ProviderError>,
        after_work: bool,
    },
}

/// A token bucket: bursts up to one second's budget, then a steady rate.
#[derive(Debug)]
struct Bucket {
    per_second: u32,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(per_second: u32, now: Instant) -> Self {
        Bucket {
            per_second,
            tokens: f64::from(per_second),
            last: now,
        }
    }

    /// Takes a token, or says how long until one is available.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.per_second == 0 {
            return Err(Duration::from_secs(1));
        }
        let rate = f64::from(self.per_second);
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / rate))
        }
    }
}

/// Latency, error injections and the rate limit.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    latency: BTreeMap<Target, Duration>,
    errors: BTreeMap<Target, ErrorInjection>,
    rate_limit: Option<Bucket>,
    quota: Option<Quota>,
    /// Replaces the ingress EnsureLoadBalancer answers with: how to make
    /// the fake break the contract's answer rules (an invalid IP or
    /// hostname) for the controller's validation.
    pub(crate) corrupt_ingress: Option<Vec<ccm_provider_sdk::proto::LoadBalancerIngress>>,
}

impl Faults {
    pub(crate) fn set_latency(&mut self, target: Target, latency: Duration) {
        if latency.is_zero() {
            self.latency.remove(&target);
        } else {
            self.latency.insert(target, latency);
        }
    }

    pub(crate) fn inject(&mut self, target: Target, injection: ErrorInjection) {
        if injection.times == Some(0) {
            self.errors.remove(&target);
        } else {
            self.errors.insert(target, injection);
        }
    }

    pub(crate) fn clear_errors(&mut self, target: Option<Target>) {
        match target {
            Some(t) => {
                self.errors.remove(&t);
            }
            None => self.errors.clear(),
        }
    }

    pub(crate) fn set_rate_limit(&mut self, per_second: Option<u32>, now: Instant) {
        self.rate_limit = per_second.map(|n| Bucket::new(n, now));
    }

    pub(crate) fn set_quota(&mut self, quota: Option<QuotaConfig>, now: Instant) {
        self.quota = quota.map(|q| Quota::new(q, now));
    }

    pub(crate) fn quota(&self) -> Option<QuotaSnapshot> {
        self.quota.as_ref().map(Quota::snapshot)
    }

    /// Everything but the quota, which is how the cloud is, not a fault.
    pub(crate) fn clear(&mut self) {
        *self = Faults {
            quota: self.quota.take(),
            ..Faults::default()
        };
    }

    pub(crate) fn snapshot(&self) -> FaultsSnapshot {
        FaultsSnapshot {
            latency_ms: self
                .latency
                .iter()
                .map(|(t, d)| {
                    (
                        String::from(*t),
                        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
                    )
                })
                .collect(),
            errors: self
                .errors
                .iter()
                .map(|(t, e)| (String::from(*t), e.clone()))
                .collect(),
            rate_limit_per_second: self.rate_limit.as_ref().map(|b| b.per_second),
            quota: self.quota(),
        }
    }

    /// Decides the fate of one call and consumes what it uses: a token, and
    /// one use of a counted injection (even if the caller then gives up
    /// during the latency).
    pub(crate) fn plan(&mut self, method: Method, now: Instant) -> Plan {
        // Probe is exempt: the contract makes an unreachable cloud a
        // NOT_READY answer, never an error, and throttling is not an outage.
        if method != Method::Probe
            && let Some(bucket) = &mut self.rate_limit
            && let Err(wait) = bucket.take(now)
        {
            return Plan::Reject(ProviderError::cloud_unavailable(
                format!(
                    "rate limit of {} calls per second exceeded",
                    bucket.per_second
                ),
                Some(wait),
            ));
        }
        if method.calls_cloud()
            && let Some(quota) = &mut self.quota
            && let Err(wait) = quota.take(now)
        {
            return Plan::Reject(ProviderError::quota_exceeded_retry_after(
                format!(
                    "the cloud's API quota of {} calls per second (burst {}) is spent",
                    quota.config.qps, quota.config.burst
                ),
                wait,
            ));
        }
        let specific = Target::Method(method);
        let latency = self
            .latency
            .get(&specific)
            .or_else(|| self.latency.get(&Target::All))
            .copied()
            .unwrap_or_default();
        let (error, after_work) = match self.injected(method) {
            Some((error, after_work)) => (Some(error), after_work),
            None => (None, false),
        };
        Plan::Proceed {
            latency,
            error,
            after_work,
        }
    }

    /// The error injected for `method`, if any (and whether after the
    /// work), using up one of a counted injection. A batch asks this for
    /// each query's single method: an injection on InstanceMetadata fails
    /// the metadata queries of a batch too, query by query.
    pub(crate) fn injected(&mut self, method: Method) -> Option<(ProviderError, bool)> {
        let target = [Target::Method(method), Target::All]
            .into_iter()
            .find(|t| self.errors.contains_key(t))?;
        let injection = self.errors.get_mut(&target)?;
        let found = (injection.to_error(method), injection.after_work);
        if let Some(n) = &mut injection.times {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.errors.remove(&target);
            }
        }
        Some(found)
    }
}

/// How a logged call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallOutcome {
    Ok,
    Error {
        /// The gRPC code, as tonic names it (`NotFound`).
        code: String,
        /// The contract reason (`INSTANCE_NOT_FOUND`), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        message: String,
    },
    /// The caller gave up (deadline or cancellation) before an answer.
    Cancelled,
}

impl CallOutcome {
    pub(crate) fn of<T>(result: &Result<T, ProviderError>) -> Self {
        match result {
            Ok(_) => CallOutcome::Ok,
            Err(e) => CallOutcome::Error {
                code: format!("{:?}", e.code()),
                reason: e.reason().map(|r| reason_str(r).to_owned()),
                message: e.message().to_owned(),
            },
        }
    }
}

/// One call the fake received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Increases by one per call, so tests can ask "what happened after".
    pub seq: u64,
    pub method: Method,
    /// The controller's `x-ccm-request-id`.
    pub request_id: String,
    /// The W3C trace id of the call's `traceparent`, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// When the call arrived, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    pub duration_ms: u64,
    pub outcome: CallOutcome,
}

/// A bounded log, so a long benchmark cannot grow the fake without limit.
#[derive(Debug)]
pub(crate) struct CallLog {
    entries: VecDeque<CallRecord>,
    capacity: usize,
    next_seq: u64,
}

impl CallLog {
    pub(crate) fn new(capacity: usize) -> Self {
        CallLog {
            entries: VecDeque::new(),
            capacity,
            next_seq: 1,
        }
    }

    pub(crate) fn push(
        &mut self,
        method: Method,
        request_id: String,
        trace_id: Option<String>,
        started: SystemTime,
        duration: Duration,
        outcome: CallOutcome,
    ) {
        let record = CallRecord {
            seq: self.next_seq,
            method,
            request_id,
            trace_id,
            started_unix_ms: started
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            outcome,
        };
        self.next_seq += 1;
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(record);
    }

    pub(crate) fn entries(&self) -> Vec<CallRecord> {
        self.entries.iter().cloned().collect()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccm_provider_sdk::proto::ErrorReason;

    fn error_of(plan: Plan) -> Option<ProviderError> {
        match plan {
            Plan::Reject(e) => Some(e),
            Plan::Proceed { error, .. } => error,
        }
    }

    #[test]
    fn method_names_round_trip_and_typos_are_rejected() {
        for m in Method::ALL {
            assert_eq!(m.as_str().parse::<Method>().unwrap(), m);
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
        }
        assert!("EnsureLoadbalancer".parse::<Method>().is_err());
        assert_eq!(
            serde_json::from_str::<Target>("\"*\"").unwrap(),
            Target::All
        );
        assert!(serde_json::from_str::<Target>("\"Nope\"").is_err());
    }

    #[test]
    fn counted_injections_fail_exactly_n_calls() {
        let mut f = Faults::default();
        let now = Instant::now();
        f.inject(
            Method::CreateRoute.into(),
            ErrorInjection::new(ErrorKind::QuotaExceeded, "full").times(2),
        );
        for _ in 0..2 {
            let e = error_of(f.plan(Method::CreateRoute, now)).expect("injected");
            assert_eq!(e.reason(), Some(ErrorReason::QuotaExceeded));
            assert_eq!(e.message(), "full");
        }
        assert!(error_of(f.plan(Method::CreateRoute, now)).is_none());
        assert!(f.snapshot().errors.is_empty());
    }

    #[test]
    fn specific_faults_win_over_wildcards() {
        let mut f = Faults::default();
        let now = Instant::now();
        f.set_latency(Target::All, Duration::from_millis(5));
        f.set_latency(Method::Master.into(), Duration::from_millis(50));
        f.inject(Target::All, ErrorInjection::new(ErrorKind::Internal, "all"));
        f.inject(
            Method::Master.into(),
            ErrorInjection::new(ErrorKind::CredentialsInvalid, "m"),
        );
        match f.plan(Method::Master, now) {
            Plan::Proceed { latency, error, .. } => {
                assert_eq!(latency, Duration::from_millis(50));
                assert_eq!(
                    error.unwrap().reason(),
                    Some(ErrorReason::CredentialsInvalid)
                );
            }
            p => panic!("{p:?}"),
        }
        match f.plan(Method::ListRoutes, now) {
            Plan::Proceed { latency, error, .. } => {
                assert_eq!(latency, Duration::from_millis(5));
                assert_eq!(error.unwrap().message(), "all");
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn rate_limit_throttles_with_a_retry_hint_and_refills() {
        let mut f = Faults::default();
        let t0 = Instant::now();
        f.set_rate_limit(Some(2), t0);
        assert!(error_of(f.plan(Method::InstanceExists, t0)).is_none());
        assert!(error_of(f.plan(Method::InstanceExists, t0)).is_none());
        let e = error_of(f.plan(Method::InstanceExists, t0)).expect("throttled");
        assert_eq!(e.reason(), Some(ErrorReason::CloudUnavailable));
        assert!(e.retry_after_delay().unwrap() > Duration::ZERO);
        // Probes are never throttled.
        assert!(error_of(f.plan(Method::Probe, t0)).is_none());
        let later = t0 + Duration::from_millis(600);
        assert!(error_of(f.plan(Method::InstanceExists, later)).is_none());
        f.set_rate_limit(None, later);
        for _ in 0..10 {
            assert!(error_of(f.plan(Method::InstanceExists, later)).is_none());
        }
    }

    #[test]
    fn the_quota_refuses_beyond_its_burst_with_the_time_to_the_next_token() {
        let mut f = Faults::default();
        let t0 = Instant::now();
        f.set_quota(Some(QuotaConfig { qps: 4.0, burst: 3 }), t0);
        for _ in 0..3 {
            assert!(error_of(f.plan(Method::InstanceMetadata, t0)).is_none());
        }
        let e = error_of(f.plan(Method::EnsureLoadBalancer, t0)).expect("quota spent");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(e.reason(), Some(ErrorReason::QuotaExceeded));
        assert_eq!(e.retry_after_delay(), Some(Duration::from_millis(250)));
        // Neither the probe nor the load balancer name reach the cloud.
        assert!(error_of(f.plan(Method::Probe, t0)).is_none());
        assert!(error_of(f.plan(Method::GetLoadBalancerName, t0)).is_none());
        // A token every 250 ms, and never more than the burst.
        let t1 = t0 + Duration::from_millis(100);
        let e = error_of(f.plan(Method::ListRoutes, t1)).expect("still spent");
        assert_eq!(e.retry_after_delay(), Some(Duration::from_millis(150)));
        let t2 = t0 + Duration::from_millis(250);
        assert!(error_of(f.plan(Method::BatchInstances, t2)).is_none());
        let t3 = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(error_of(f.plan(Method::InstanceExists, t3)).is_none());
        }
        assert!(error_of(f.plan(Method::InstanceExists, t3)).is_some());
        assert_eq!(
            f.quota(),
            Some(QuotaSnapshot {
                qps: 4.0,
                burst: 3,
                granted: 7,
                refused: 3
            })
        );
        // Clearing the faults keeps the quota: it is how the cloud is.
        f.clear();
        assert_eq!(f.snapshot().quota.map(|q| q.granted), Some(7));
        f.set_quota(None, t3);
        assert!(error_of(f.plan(Method::InstanceExists, t3)).is_none());
    }

    #[test]
    fn call_log_is_bounded_and_keeps_counting() {
        let mut log = CallLog::new(2);
        for _ in 0..3 {
            log.push(
                Method::Probe,
                "r".into(),
                None,
                SystemTime::now(),
                Duration::ZERO,
                CallOutcome::Ok,
            );
        }
        let seqs: Vec<u64> = log.entries().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [2, 3]);
        log.clear();
        assert!(log.entries().is_empty());
    }
}
