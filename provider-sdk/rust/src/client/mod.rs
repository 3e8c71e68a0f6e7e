//! The client the controller uses to call a provider: a lazy connection over
//! the Unix socket (the controller may start first), a handshake on every
//! (re)connect, per-call deadlines and request ids, validated and typed
//! answers, and errors that say whether the operation may have happened.
//!
//! Every RPC goes through one call path (`call/`: tower layers for the
//! request scope, key lock and mutation gate, observer and log line,
//! deadline and concurrency limit, then the generated client with the
//! message limits), which learns each request's RPC name and generated
//! client from one table (`rpcs.rs`). One file per contract service (`identity.rs`,
//! `instances.rs`, ...) only builds the request, picks the deadline class
//! and checks the answer.

mod call;
mod clusters;
mod connection;
mod error;
mod identity;
mod instances;
mod load_balancers;
mod options;
mod pages;
mod routes;
mod rpcs;
mod volumes;
mod with_nodes;
mod zones;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::transport::Channel;

pub use crate::provider::{InstanceAnswer, InstanceQuery, InstanceQuestion, MetadataAnswer};
pub use call::{
    BudgetState, CallBudget, HOLD_BOUNDS, Lane, MAX_REQUEST_ID_BYTES, RequestScope, code_name,
};
pub use error::ClientError;
pub use identity::Handshake;
pub use options::{CallObserver, ClientOptions, MutationGate};
pub use rpcs::{LISTING_ANSWER_BYTES, OBJECT_ANSWER_BYTES, SMALL_ANSWER_BYTES};

use crate::endpoint::socket_path;
use call::{Budget, KeyLocks};

/// A provider client. Cheap to clone; clones share the connection and the
/// handshake.
#[derive(Clone)]
pub struct ProviderClient {
    channel: Channel,
    connections: Arc<AtomicU64>,
    handshake: Arc<tokio::sync::Mutex<Option<Arc<Handshake>>>>,
    opts: ClientOptions,
    request_id: Option<Arc<str>>,
    /// The lane of this clone's budgeted calls; `None`: by RPC
    /// ([`Lane::of_method`]).
    lane: Option<Lane>,
    /// The call budget and its hold, shared by every clone.
    budget: Arc<Budget>,
    mutations: Arc<KeyLocks>,
    /// `max_concurrency` slots for reads and mutations.
    slots: Option<Arc<tokio::sync::Semaphore>>,
    /// The node sets this client has put on the provider.
    put_sets: Arc<load_balancers::PutSets>,
}

impl ProviderClient {
    /// A client for `unix:///path`. Does not connect: the first call does,
    /// and every call after a broken connection reconnects.
    pub fn connect_lazy(endpoint: &str, opts: ClientOptions) -> Result<Self, ClientError> {
        let path = socket_path(endpoint).map_err(|e| ClientError::Endpoint(e.to_string()))?;
        let connections = Arc::new(AtomicU64::new(0));
        let channel = connection::lazy_channel(path, &opts, connections.clone());
        Ok(ProviderClient {
            channel,
            connections,
            handshake: Default::default(),
            slots: opts
                .max_concurrency
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n.max(1)))),
            budget: Arc::new(Budget::new(opts.budget)),
            opts,
            request_id: None,
            lane: None,
            mutations: Default::default(),
            put_sets: Default::default(),
        })
    }

    /// A clone whose calls carry `request_id` instead of a generated one.
    pub fn with_request_id(&self, request_id: impl Into<Arc<str>>) -> Self {
        let mut c = self.clone();
        c.request_id = Some(request_id.into());
        c
    }

    /// A clone whose budgeted calls wait in `lane` (see [`Lane`]) when the
    /// call budget is short, whatever the RPC. The budget itself is shared
    /// with every other clone.
    pub fn in_lane(&self, lane: Lane) -> Self {
        let mut c = self.clone();
        c.lane = Some(lane);
        c
    }

    /// The lane this clone's calls wait in; `None`: by RPC.
    pub fn lane(&self) -> Option<Lane> {
        self.lane
    }

    /// The call budget as it stands now (tokens, waiting calls, a hold),
    /// for gauges.
    pub fn budget_state(&self) -> BudgetState {
        self.budget.state()
    }

    /// How many connections have been made so far.
    pub fn connection_count(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod future_sizes {
    use super::*;
    use crate::proto::{NodeRef, Service};

    /// Each call's future stays small: the gRPC exchange lives on the heap.
    /// Inline it was 41 KiB for an Ensure, and a test awaiting a dozen calls
    /// overflowed its 2 MiB stack in a debug build.
    #[tokio::test]
    async fn client_futures_stay_small() {
        let c = ProviderClient::connect_lazy("unix:///nonexistent.sock", ClientOptions::default())
            .unwrap();
        let ensure = c.ensure_load_balancer("k", Service::default(), Vec::<NodeRef>::new());
        assert!(size_of_val(&ensure) <= 8 * 1024, "{}", size_of_val(&ensure));
        let read = c.instance_metadata(NodeRef::default());
        assert!(size_of_val(&read) <= 4 * 1024, "{}", size_of_val(&read));
        let probe = c.probe();
        assert!(size_of_val(&probe) <= 4 * 1024, "{}", size_of_val(&probe));
    }
}
