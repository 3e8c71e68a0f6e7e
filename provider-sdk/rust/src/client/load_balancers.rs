//! LoadBalancerService: a Service's load balancer, its name, its changes
//! (one at a time per Service, and only while the mutation gate allows),
//! and the listing of all of them.

use super::call::Rpc;
use super::node_set::{Ensure, NodeSet, Update, WithNodes};
use super::{ClientError, ProviderClient};
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
        let rpc = mutation(cluster_name, &service);
        let request = WithNodes::<Ensure>::new(cluster_name.to_owned(), service, nodes.into());
        self.call(rpc, request, |r| {
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
        let rpc = mutation(cluster_name, &service);
        let request = WithNodes::<Update>::new(cluster_name.to_owned(), service, nodes.into());
        self.call(rpc, request, |r| {
            lb_answer(r.result, r.warnings, |result| match result {
                Answer::Updated(_) => Ok(LbOutcome::Done(())),
                Answer::ImplementedElsewhere(e) => Ok(elsewhere(e)),
            })
        })
        .await
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
