//! How a client is configured: deadlines per RPC class, message limits,
//! page size, and the two hooks the controller plugs in (an observer for
//! metrics, a gate for leader election).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::call::{CallBudget, Lane};
use crate::MAX_MESSAGE_BYTES;
use crate::fencing::FencingToken;

/// Deadlines per RPC class.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Identity RPCs and `GetLoadBalancerName`.
    pub identity_timeout: Duration,
    /// Reads: instances, `GetLoadBalancer`, list pages, zones, clusters.
    pub read_timeout: Duration,
    /// Load balancer and route mutations.
    pub mutation_timeout: Duration,
    /// Largest message sent or received.
    pub max_message_bytes: usize,
    /// Page size asked of list RPCs.
    pub page_size: i32,
    /// Most pages one listing may take: past it the listing fails (a
    /// provider whose tokens never end must not be followed for ever, and
    /// no caller acts on a partial listing).
    pub max_list_pages: usize,
    /// Longest one listing may take, all its pages together; past it the
    /// listing fails as DEADLINE_EXCEEDED.
    pub max_list_duration: Duration,
    /// Most reads and mutations in flight; `None` for no limit. Identity
    /// calls (info, capabilities, Probe) are not counted, so health checks
    /// never queue behind a hung provider's mutations.
    pub max_concurrency: Option<usize>,
    /// The call budget: a token bucket shared by the client's clones,
    /// spent by priority lane (see [`Lane`]); `None`: unlimited, as
    /// before. Either way, a throttling answer with `RetryInfo` holds the
    /// client's budgeted calls for its delay.
    pub budget: Option<CallBudget>,
    /// Told about every call (method, code, duration).
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Asked before every mutation (load balancers, routes); `false`
    /// refuses it with [`ClientError::Refused`](super::ClientError::Refused).
    /// The controller's leader-election fence.
    pub mutation_gate: Option<Arc<dyn MutationGate>>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            identity_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(30),
            mutation_timeout: Duration::from_secs(300),
            max_message_bytes: MAX_MESSAGE_BYTES,
            page_size: 500,
            max_list_pages: 1000,
            max_list_duration: Duration::from_secs(120),
            max_concurrency: None,
            budget: None,
            observer: None,
            mutation_gate: None,
        }
    }
}

/// Receives one observation per provider call, for metrics.
pub trait CallObserver: Send + Sync {
    /// `method` is the RPC name (`"InstanceExists"`), `code` the gRPC code
    /// of the answer (`Ok` on success).
    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration);

    /// A call is about to be sent (for in-flight gauges).
    fn started(&self, method: &'static str) {
        let _ = method;
    }

    /// A failed call carried the contract's error `reason`
    /// (`"CLOUD_UNAVAILABLE"`), or `None` when it had none.
    fn failed(&self, method: &'static str, reason: Option<&'static str>) {
        let _ = (method, reason);
    }

    /// A budgeted call got its token after `waited` (zero when one was
    /// there): once per budgeted call that is sent. Not told for an
    /// unlimited client outside a hold.
    fn budget_waited(&self, method: &'static str, lane: Lane, waited: Duration) {
        let _ = (method, lane, waited);
    }

    /// A budgeted call found no token before its deadline and was not sent.
    fn budget_exhausted(&self, method: &'static str, lane: Lane, waited: Duration) {
        let _ = (method, lane, waited);
    }

    /// A throttling answer to `method` holds the budget for `delay` (as
    /// clamped).
    fn budget_held(&self, method: &'static str, delay: Duration) {
        let _ = (method, delay);
    }
}

/// Decides whether mutations may be sent (see `ClientOptions::mutation_gate`)
/// and who they are sent as: the controller's leader election.
pub trait MutationGate: Send + Sync {
    fn allows_mutations(&self) -> bool;

    /// The token every mutation carries in `x-ccm-fencing-token`, if any.
    fn fencing_token(&self) -> Option<FencingToken> {
        None
    }

    /// Completes when mutations stop being allowed. A mutation still in
    /// flight then is cancelled: a deposed leader stops waiting for (and
    /// the provider stops running) what it can no longer stand behind.
    fn revoked(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(std::future::pending())
    }

    /// A provider refused a mutation as coming from an older term than
    /// `newest` (NOT_LEADER).
    fn superseded(&self, newest: &FencingToken) {
        let _ = newest;
    }

    /// The gate just held back `method` (nothing was sent): for a gate
    /// that counts or logs what it stops, such as a dry run.
    fn refused(&self, method: &'static str) {
        let _ = method;
    }

    /// Why mutations are held back, for the error the caller gets.
    fn why_closed(&self) -> &'static str {
        "not the leader"
    }
}

impl std::fmt::Debug for dyn MutationGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MutationGate")
    }
}

impl std::fmt::Debug for dyn CallObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallObserver")
    }
}
