//! LoadBalancerService: a Service's load balancer, its name, its changes
//! (one at a time per Service, and only while the mutation gate allows),
//! and the listing of all of them.

use std::collections::VecDeque;
use std::sync::PoisonError;

use super::call::Rpc;
use super::rpcs::Unary;
use super::with_nodes::{Ensure, NodesRpc, PutSet, Update, WithNodes};
use super::{ClientError, ProviderClient};
use crate::error::ProviderError;
use crate::node_set::NodeSet;
use crate::proto::ErrorReason;
use crate::proto::{
    Capability, EnsureLoadBalancerDeletedRequest, GetLoadBalancerNameRequest,
    GetLoadBalancerRequest, GetLoadBalancerResponse, ImplementedElsewhere,
    ListLoadBalancersRequest, LoadBalancerExistence, LoadBalancerStatus, Service, Warning,
    ensure_load_balancer_response, update_load_balancer_response,
};
use crate::provider::{LbAnswer, LbOutcome, LoadBalancerEntry};
use crate::validate::{self, Checked, violation};

/// A change to the load balancer of `service` in `cluster_name`: the
/// Service's uid is the idempotency key, so changes to one load balancer
/// never overlap.
fn mutation(cluster_name: &str, service: &Service) -> Rpc {
    Rpc::mutation(format!("lb/{cluster_name}/{}", service.uid)).needs(Capability::LoadBalancers)
}

/// How many node sets a client remembers having put (per connection and
/// cluster); the provider keeps at least 4.
const REMEMBERED_NODE_SETS: usize = 4;

/// The node sets this client put, so each is put once per provider process.
#[derive(Default)]
pub(super) struct PutSets {
    put: std::sync::Mutex<VecDeque<(u64, String, String)>>,
    putting: tokio::sync::Mutex<()>,
}

impl PutSets {
    fn holds(&self, connection: u64, cluster: &str, id: &str) -> bool {
        self.put
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(c, k, i)| *c == connection && k == cluster && i == id)
    }

    fn remember(&self, connection: u64, cluster: &str, id: &str) {
        let mut put = self.put.lock().unwrap_or_else(PoisonError::into_inner);
        put.retain(|(c, k, i)| !(*c == connection && k == cluster && i == id));
        put.push_back((connection, cluster.to_owned(), id.to_owned()));
        while put.len() > REMEMBERED_NODE_SETS {
            put.pop_front();
        }
    }
}

fn node_set_unknown(e: &ClientError) -> bool {
    e.provider_error().and_then(ProviderError::reason) == Some(ErrorReason::NodeSetUnknown)
}

impl ProviderClient {
    /// `None` when the provider says no load balancer exists.
    pub async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, ClientError> {
        let rpc = Rpc::read().needs(Capability::LoadBalancers);
        let request = GetLoadBalancerRequest {
            cluster_name: cluster_name.to_owned(),
            service: Some(service),
        };
        self.call(rpc, request, existing_status).await
    }

    pub async fn get_load_balancer_name(
        &self,
        cluster_name: &str,
        service: Service,
    ) -> Result<String, ClientError> {
        // The contract makes the name a pure function of the request, so it
        // gets the short deadline of identity calls.
        let rpc = Rpc::identity().needs(Capability::LoadBalancers);
        let request = GetLoadBalancerNameRequest {
            cluster_name: cluster_name.to_owned(),
            service: Some(service),
        };
        self.call(rpc, request, |r| {
            validate::name("name", &r.name)?;
            Ok(r.name)
        })
        .await
    }

    pub async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: Service,
        nodes: impl Into<NodeSet>,
    ) -> Result<LbAnswer<LoadBalancerStatus>, ClientError> {
        use ensure_load_balancer_response::Result as Answer;
        self.with_nodes::<Ensure, _>(cluster_name, service, nodes.into(), |r| {
            lb_answer(r.result, r.warnings, |result| match result {
                Answer::Status(s) => {
                    validate::load_balancer_status("result.status", &s)?;
                    Ok(LbOutcome::Done(s))
                }
                Answer::ImplementedElsewhere(e) => Ok(elsewhere(e)),
            })
        })
        .await
    }

    pub async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: Service,
        nodes: impl Into<NodeSet>,
    ) -> Result<LbAnswer<()>, ClientError> {
        use update_load_balancer_response::Result as Answer;
        self.with_nodes::<Update, _>(cluster_name, service, nodes.into(), |r| {
            lb_answer(r.result, r.warnings, |result| match result {
                Answer::Updated(_) => Ok(LbOutcome::Done(())),
                Answer::ImplementedElsewhere(e) => Ok(elsewhere(e)),
            })
        })
        .await
    }

    /// An Ensure or Update carrying `nodes`. To a provider with
    /// CAPABILITY_NODE_SETS only the set's id goes, after the set itself
    /// (PutNodeSet) unless this client already put it on this connection;
    /// a provider that forgot it anyway (NODE_SET_UNKNOWN) gets it again
    /// and the call is repeated, once. Other providers get the nodes inline.
    async fn with_nodes<R: NodesRpc, T>(
        &self,
        cluster_name: &str,
        service: Service,
        nodes: NodeSet,
        answer: impl Fn(R::Response) -> Checked<T> + Copy,
    ) -> Result<T, ClientError>
    where
        WithNodes<R>: Unary<Response = R::Response>,
    {
        let by_id = self.handshake().await?.has(Capability::NodeSets);
        let send = |nodes: NodeSet| {
            let rpc = mutation(cluster_name, &service);
            let request =
                WithNodes::<R>::new(cluster_name.to_owned(), service.clone(), nodes, by_id);
            self.call(rpc, request, answer)
        };
        if !by_id {
            return send(nodes).await;
        }
        self.put_node_set(cluster_name, &nodes, false).await?;
        match send(nodes.clone()).await {
            Err(e) if node_set_unknown(&e) => {
                tracing::info!(
                    cluster_name,
                    node_set = nodes.id(),
                    "the provider no longer holds the node set; putting it again"
                );
                self.put_node_set(cluster_name, &nodes, true).await?;
                send(nodes).await
            }
            other => other,
        }
    }

    /// Puts `nodes` unless this client put it on the current connection
    /// (or `again`). One put at a time: workers that all meet a new set
    /// wait for the first to put it.
    async fn put_node_set(
        &self,
        cluster_name: &str,
        nodes: &NodeSet,
        again: bool,
    ) -> Result<(), ClientError> {
        let connection = self.connection_count();
        if !again && self.put_sets.holds(connection, cluster_name, nodes.id()) {
            return Ok(());
        }
        let _one_at_a_time = self.put_sets.putting.lock().await;
        if !again && self.put_sets.holds(connection, cluster_name, nodes.id()) {
            return Ok(());
        }
        let rpc = Rpc::read().needs(Capability::NodeSets);
        let request = PutSet {
            cluster_name: cluster_name.to_owned(),
            nodes: nodes.clone(),
        };
        self.call(rpc, request, |_| Ok(())).await?;
        // The connection the set went over: a new one may be a new process.
        self.put_sets.remember(connection, cluster_name, nodes.id());
        Ok(())
    }

    /// Returns the provider's warnings.
    pub async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: Service,
    ) -> Result<Vec<Warning>, ClientError> {
        let rpc = mutation(cluster_name, &service);
        let request = EnsureLoadBalancerDeletedRequest {
            cluster_name: cluster_name.to_owned(),
            service: Some(service),
        };
        self.call(rpc, request, |r| Ok(r.warnings)).await
    }

    /// Every load balancer of `cluster_name`, following all pages.
    pub async fn list_load_balancers(
        &self,
        cluster_name: &str,
    ) -> Result<Vec<LoadBalancerEntry>, ClientError> {
        self.require(Capability::ListLoadBalancers).await?;
        let request = ListLoadBalancersRequest {
            cluster_name: cluster_name.to_owned(),
            ..Default::default()
        };
        self.all_pages(request, |i, lb| {
            validate::name(&format!("load_balancers[{i}].service_uid"), &lb.service_uid)?;
            Ok(LoadBalancerEntry {
                name: lb.name,
                service_uid: lb.service_uid,
                service_namespace: lb.service_namespace,
                service_name: lb.service_name,
                status: lb.status,
            })
        })
        .await
    }
}

/// `GetLoadBalancer`'s answer: the status when the load balancer exists.
fn existing_status(r: GetLoadBalancerResponse) -> Checked<Option<LoadBalancerStatus>> {
    match validate::known_enum("existence", r.existence)? {
        LoadBalancerExistence::Exists => {
            let status = r.status.unwrap_or_default();
            validate::load_balancer_status("status", &status)?;
            Ok(Some(status))
        }
        LoadBalancerExistence::NotExists => Ok(None),
        LoadBalancerExistence::Unspecified => unreachable!("known_enum rejects 0"),
    }
}

fn elsewhere<T>(e: ImplementedElsewhere) -> LbOutcome<T> {
    LbOutcome::ImplementedElsewhere(e.message)
}

/// A load balancer mutation's answer: its required `result`, converted by
/// `outcome`, and the provider's warnings.
fn lb_answer<R, T>(
    result: Option<R>,
    warnings: Vec<Warning>,
    outcome: impl FnOnce(R) -> Checked<LbOutcome<T>>,
) -> Checked<LbAnswer<T>> {
    let result = result.ok_or_else(|| violation("result", "is required"))?;
    Ok(LbAnswer {
        outcome: outcome(result)?,
        warnings,
    })
}
