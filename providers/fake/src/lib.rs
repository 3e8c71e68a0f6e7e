//! An in-memory cloud for ccm-rs: a provider that behaves like a *correct*
//! cloud (idempotent mutations, stable addresses, real conflicts) so tests,
//! the demo and benchmarks exercise the controller rather than a stub, plus
//! fault injection so they can also exercise its error handling.
//!
//! [`FakeCloud`] is both the provider (it implements every SDK trait) and
//! the control handle: clone it, hand clones to the server, keep one to add
//! instances, inject faults and read the call log. The binary exposes the
//! same controls over HTTP ([`admin`]).
//!
//! With [`FakeConfig::state_file`] (the binary's `--state-file PATH`) the
//! cloud outlives the process: instances (declared, auto-created, shut down
//! or removed), load balancers (name, address, ports, backends, the Service
//! and cluster they belong to) and routes are rewritten atomically to that
//! JSON file before each change is answered, and loaded again at start, so a
//! fake killed with SIGKILL comes back with the same cloud. A missing file
//! starts an empty cloud (plus `instances`); an unreadable or corrupt one is
//! an [`Error::StateFile`] naming the path, never an empty cloud. Faults,
//! readiness and the call log are not kept. See [`persist`] for the format.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use ccm_fake_provider::{ErrorInjection, ErrorKind, FakeCloud, FakeConfig, Method};
//!
//! let fake = FakeCloud::new(FakeConfig::default())?;
//! fake.inject_error(Method::EnsureLoadBalancer, ErrorInjection::new(ErrorKind::QuotaExceeded, "full").times(1));
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(fake.clone().serve("unix:///tmp/fake.sock", async { let _ = stopped.await; }));
//! // ... drive a ProviderClient ...
//! let _ = stop.send(());
//! server.await??;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod faults;
pub mod persist;
mod provider;
pub mod state;

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use ccm_provider_sdk::{
    CallContext, ProviderError, ProviderResult, ProviderServer, Readiness, ServeError,
};

pub use faults::{
    CallOutcome, CallRecord, ErrorInjection, ErrorKind, FaultsSnapshot, Method, QuotaConfig,
    QuotaSnapshot, Target,
};
pub use state::{
    ANNOTATION_HEALTH_CHECK_PATH, ANNOTATION_IMPLEMENTED_ELSEWHERE, ANNOTATION_INTERNAL,
    ANNOTATION_PREFIX, Address, AddressType, FakeConfig, Instance, InstanceSpec, KNOWN_ANNOTATIONS,
    LbPort, LeaderRecord, LoadBalancer, PROVIDER_ID_SCHEME, RouteRecord, StateDump, VOLUME_DRIVERS,
};

use faults::{CallLog, Faults, Plan};
use persist::StateFile;
use state::State;

/// Reads an instances file: a JSON list of [`InstanceSpec`].
pub fn read_instances_file(path: &std::path::Path) -> Result<Vec<InstanceSpec>, Error> {
    let fail = |reason: String| Error::InstancesFile {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| fail(e.to_string()))
}

/// Why a control operation or the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown method {0:?}; expected an RPC name such as \"EnsureLoadBalancer\" or \"*\"")]
    UnknownMethod(String),
    #[error("invalid load balancer IP pool {0:?}: {1}")]
    InvalidPool(String, String),
    #[error("invalid instance: {0}")]
    InvalidInstance(String),
    #[error("no instance named {0:?}")]
    UnknownInstance(String),
    #[error("instances file {path}: {reason}")]
    InstancesFile { path: String, reason: String },
    /// The state file cannot be read, is corrupt, or cannot be written.
    #[error("state file {path}: {reason}")]
    StateFile { path: String, reason: String },
    /// What the configuration declares for several providers per
    /// controller (classes, platforms) breaks the contract.
    #[error("invalid identity: {0}")]
    InvalidIdentity(#[from] ccm_provider_sdk::validate::Violation),
    #[error("admin server: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

struct Shared {
    state: Mutex<State>,
    state_file: Option<StateFile>,
    faults: Mutex<Faults>,
    calls: Mutex<CallLog>,
}

/// The fake cloud: provider and control handle in one. Cheap to clone;
/// clones share the same cloud.
#[derive(Clone)]
pub struct FakeCloud {
    shared: Arc<Shared>,
}

/// A poisoned lock only means a test panicked mid-call; the data is plain
/// and still consistent enough for a fake, so keep serving.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Logs a call when it ends, including when the caller gives up and the
/// future is dropped mid-latency (logged as cancelled).
struct CallGuard<'a> {
    fake: &'a FakeCloud,
    method: Method,
    request_id: String,
    trace_id: Option<String>,
    started: SystemTime,
    clock: Instant,
    outcome: Option<CallOutcome>,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        let outcome = self.outcome.take().unwrap_or(CallOutcome::Cancelled);
        lock(&self.fake.shared.calls).push(
            self.method,
            std::mem::take(&mut self.request_id),
            self.trace_id.take(),
            self.started,
            self.clock.elapsed(),
            outcome,
        );
    }
}

impl FakeCloud {
    /// A cloud with `config`'s instances, or the one kept in
    /// `config.state_file` if that file exists; fails on an unusable IP pool,
    /// instance list, state file or declared identity.
    pub fn new(config: FakeConfig) -> Result<Self, Error> {
        let capacity = config.call_log_capacity;
        provider::info(config.clone()).check()?;
        let (state, state_file) = match config.state_file.clone() {
            Some(path) => {
                let (file, state) = StateFile::open(path, config)?;
                (state, Some(file))
            }
            None => (State::new(config)?, None),
        };
        Ok(FakeCloud {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                state_file,
                faults: Mutex::new(Faults::default()),
                calls: Mutex::new(CallLog::new(capacity)),
            }),
        })
    }

    /// Whether a batch is one cloud call (see [`FakeConfig::native_batch`]).
    pub(crate) fn native_batch(&self) -> bool {
        lock(&self.shared.state).config.native_batch
    }

    /// The configuration the cloud was started with.
    pub fn config(&self) -> FakeConfig {
        lock(&self.shared.state).config.clone()
    }

    /// A provider server with every service of the contract, ready to
    /// serve; callers may still set the socket mode.
    pub fn server(&self) -> ProviderServer<FakeCloud> {
        ProviderServer::new(self.clone())
            .with_instances(self.clone())
            .with_load_balancers(self.clone())
            .with_routes(self.clone())
            .with_zones(self.clone())
            .with_clusters(self.clone())
            .with_volumes(self.clone())
    }

    /// Serves the gRPC contract on `endpoint` (`unix:///path`) until
    /// `shutdown` completes.
    pub async fn serve(
        self,
        endpoint: impl AsRef<str>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        self.server().serve(endpoint.as_ref(), shutdown).await
    }

    // ---- instances ----

    /// Runs `change` on the cloud and, with a state file, writes the
    /// result before returning (still under the lock, so the file follows
    /// the order of changes). A failed write is retried with the next change.
    fn change<T>(&self, change: impl FnOnce(&mut State) -> T) -> (T, Result<(), Error>) {
        let mut state = lock(&self.shared.state);
        let out = change(&mut state);
        let saved = match &self.shared.state_file {
            Some(file) if state.dirty => file.save(&state),
            _ => Ok(()),
        };
        if saved.is_ok() {
            state.dirty = false;
        }
        (out, saved)
    }

    /// [`Self::change`] for changes that can fail themselves.
    fn try_change<T>(
        &self,
        change: impl FnOnce(&mut State) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let (out, saved) = self.change(change);
        let out = out?;
        saved?;
        Ok(out)
    }

    /// Declares an instance (replacing one of the same name); it exists
    /// even if it was removed before.
    pub fn add_instance(&self, spec: InstanceSpec) -> Result<Instance, Error> {
        self.try_change(|s| s.add_instance(spec, false))
    }

    /// Deletes an instance; it then stays gone even with auto-create, and
    /// routes to it turn into blackholes. Returns whether it existed. A
    /// failure to write the state file is logged (and retried with the next
    /// change).
    pub fn remove_instance(&self, name: &str) -> bool {
        let (existed, saved) = self.change(|s| s.remove_instance(name));
        if let Err(e) = saved {
            tracing::error!("removing instance {name}: {e}");
        }
        existed
    }

    /// Deletes a load balancer by its cloud name behind the controller's
    /// back (as from the cloud's console). Returns whether it existed.
    pub fn delete_load_balancer_out_of_band(&self, name: &str) -> bool {
        let (existed, saved) = self.change(|s| s.remove_lb_by_name(name));
        if let Err(e) = saved {
            tracing::error!("deleting load balancer {name}: {e}");
        }
        existed
    }

    /// Shuts an instance down (`InstanceShutdown` answers shut down).
    pub fn shutdown_instance(&self, name: &str) -> Result<(), Error> {
        self.try_change(|s| s.set_shutdown(name, true))
    }

    /// Starts a shut-down instance again.
    pub fn start_instance(&self, name: &str) -> Result<(), Error> {
        self.try_change(|s| s.set_shutdown(name, false))
    }

    /// Every instance, by name.
    pub fn instances(&self) -> Vec<Instance> {
        lock(&self.shared.state).instances()
    }

    /// Everything the cloud holds.
    pub fn dump(&self) -> StateDump {
        lock(&self.shared.state).dump()
    }

    // ---- readiness ----

    /// What `Probe` answers from now on.
    pub fn set_readiness(&self, readiness: Readiness) {
        lock(&self.shared.state).readiness = readiness;
    }

    // ---- faults ----

    /// Delays every call of `target` by `latency` before it is answered
    /// (zero clears it).
    pub fn set_latency(&self, target: impl Into<Target>, latency: Duration) {
        lock(&self.shared.faults).set_latency(target.into(), latency);
    }

    /// Answers calls of `target` with an error instead of doing the work;
    /// replaces an earlier injection for the same target.
    pub fn inject_error(&self, target: impl Into<Target>, injection: ErrorInjection) {
        lock(&self.shared.faults).inject(target.into(), injection);
    }

    /// Removes the error injection of `target`, or all with `None`.
    pub fn clear_errors(&self, target: Option<Target>) {
        lock(&self.shared.faults).clear_errors(target);
    }

    /// Throttles calls (except `Probe`) to `per_second`, answering
    /// `CLOUD_UNAVAILABLE` with a retry hint beyond it; `None` lifts it.
    pub fn set_rate_limit(&self, per_second: Option<u32>) {
        lock(&self.shared.faults).set_rate_limit(per_second, Instant::now());
    }

    /// Makes EnsureLoadBalancer answer `ingress` instead of the real
    /// address (even one the contract forbids, or none at all); `None`
    /// restores it.
    pub fn corrupt_ingress(
        &self,
        ingress: Option<Vec<ccm_provider_sdk::proto::LoadBalancerIngress>>,
    ) {
        lock(&self.shared.faults).corrupt_ingress = ingress;
    }

    /// Removes every latency, injection, corruption and the rate limit.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Sets the cloud's API quota (`None`: unlimited), full and with fresh
    /// counters; beyond it every call that reaches the cloud answers
    /// QUOTA_EXCEEDED with the time until the next token as RetryInfo.
    pub fn set_quota(&self, quota: Option<QuotaConfig>) {
        lock(&self.shared.faults).set_quota(quota, Instant::now());
    }

    /// The quota and how many calls it granted and refused.
    pub fn quota(&self) -> Option<QuotaSnapshot> {
        lock(&self.shared.faults).quota()
    }

    /// The configured faults.
    pub fn faults(&self) -> FaultsSnapshot {
        lock(&self.shared.faults).snapshot()
    }

    // ---- call log ----

    /// The calls received so far (bounded; oldest first).
    pub fn calls(&self) -> Vec<CallRecord> {
        lock(&self.shared.calls).entries()
    }

    /// The logged calls of one method.
    pub fn calls_of(&self, method: Method) -> Vec<CallRecord> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Empties the call log.
    pub fn clear_calls(&self) {
        lock(&self.shared.calls).clear();
    }

    /// `work` as a provider call's change to the cloud: a failure to keep
    /// the change in the state file answers `INTERNAL` (a retry is safe:
    /// every mutation is idempotent).
    fn provider_change<T>(
        &self,
        work: impl FnOnce(&mut State) -> ProviderResult<T>,
    ) -> ProviderResult<T> {
        let (out, saved) = self.change(work);
        if let Err(e) = saved {
            tracing::error!("{e}");
            return Err(ProviderError::internal(format!(
                "the fake cloud could not keep the change: {e}"
            )));
        }
        out
    }

    /// [`Self::call`] for a change to `cluster`'s cloud, fenced: the
    /// call's token is noted on arrival (so a newer leader's arrival fences
    /// an older leader's call still waiting), and checked again when the
    /// change commits, under the state lock.
    pub(crate) async fn mutation<T>(
        &self,
        method: Method,
        ctx: &CallContext,
        cluster: &str,
        work: impl FnOnce(&mut State) -> ProviderResult<T>,
    ) -> ProviderResult<T> {
        let token = ctx.fencing_token.as_ref();
        let ((), saved) = self.change(|s| s.saw_leader(cluster, token));
        if let Err(e) = saved {
            tracing::error!("{e}");
        }
        self.call(method, ctx, |s| {
            s.check_leader(cluster, token)?;
            work(s)
        })
        .await
    }

    /// The errors injected for each of a batch's single methods, in order
    /// (see [`Faults::injected`]).
    pub(crate) fn injected_per_query(
        &self,
        methods: impl Iterator<Item = Method>,
    ) -> Vec<Option<ProviderError>> {
        let mut faults = lock(&self.shared.faults);
        methods
            .map(|m| faults.injected(m).map(|(e, _)| e))
            .collect()
    }

    /// Runs one provider call through the fault machinery and the call log.
    /// `work` runs under the state lock, after any latency, and must not
    /// block; with a state file, its changes are written before the answer.
    pub(crate) async fn call<T>(
        &self,
        method: Method,
        ctx: &CallContext,
        work: impl FnOnce(&mut State) -> ProviderResult<T>,
    ) -> ProviderResult<T> {
        let mut guard = CallGuard {
            fake: self,
            method,
            request_id: ctx.request_id.clone(),
            trace_id: ctx.trace_id.clone(),
            started: SystemTime::now(),
            clock: Instant::now(),
            outcome: None,
        };
        let plan = lock(&self.shared.faults).plan(method, Instant::now());
        let result = match plan {
            Plan::Reject(e) => Err(e),
            Plan::Proceed {
                latency,
                error: Some(e),
                after_work: true,
            } => {
                // The result is lost on purpose, as a dropped answer would be.
                let _ = self.provider_change(work);
                tokio::time::sleep(latency).await;
                Err(e)
            }
            Plan::Proceed { latency, error, .. } => {
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                match error {
                    Some(e) => Err::<T, ProviderError>(e),
                    None => self.provider_change(work),
                }
            }
        };
        guard.outcome = Some(CallOutcome::of(&result));
        result
    }
}
