//! LoadBalancerService: requests checked, the provider's [`LoadBalancers`]
//! called, its answers checked and its listing paginated.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tonic::{Request, Response, Status};

use super::request::{bad_answer, call, cluster_name, context, invalid_request};
use crate::error::ProviderError;
use crate::node_set::NodeSet;
use crate::paginate;
use crate::proto::*;
use crate::provider::{LbOutcome, LoadBalancers};
use crate::validate;

pub(super) struct LbAdapter<T> {
    pub(super) provider: Arc<T>,
    pub(super) sets: NodeSets,
}

/// How many node sets are kept per cluster (the contract asks for at least
/// 4): the current set and the few before it, which calls still in flight
/// when the set changed may name.
const KEPT_NODE_SETS: usize = 8;

/// The node sets the controller put, newest last, per cluster, for every
/// provider built on the SDK: providers get `CAPABILITY_NODE_SETS` for free.
#[derive(Default)]
pub(super) struct NodeSets(Mutex<HashMap<String, VecDeque<(String, NodeSet)>>>);

impl NodeSets {
    /// Keeps `nodes` as their encoding, several times smaller than the
    /// NodeRefs with their label and annotation maps: a provider that reads
    /// the set with `each()` never holds it decoded.
    fn put(&self, cluster: &str, id: String, nodes: Vec<NodeRef>) {
        let set = NodeSet::encoded_from(nodes);
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = all.entry(cluster.to_owned()).or_default();
        kept.retain(|(i, _)| *i != id);
        kept.push_back((id, set));
        while kept.len() > KEPT_NODE_SETS {
            kept.pop_front();
        }
    }

    fn get(&self, cluster: &str, id: &str) -> Option<NodeSet> {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(cluster)?
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, set)| set.clone())
    }

    /// The nodes a load balancer call names: inline, or the set `id`.
    fn resolve(&self, cluster: &str, inline: Vec<NodeRef>, id: &str) -> Result<NodeSet, Status> {
        if id.is_empty() {
            validate::node_refs("nodes", &inline).map_err(invalid_request)?;
            return Ok(NodeSet::new(inline));
        }
        validate::node_set_id("node_set_id", id).map_err(invalid_request)?;
        if !inline.is_empty() {
            return Err(invalid_request(validate::Violation {
                field: "nodes".into(),
                problem: "must be empty when node_set_id is set".into(),
            }));
        }
        self.get(cluster, id)
            .ok_or_else(|| ProviderError::node_set_unknown(id).to_status())
    }
}

#[tonic::async_trait]
impl<T: LoadBalancers> load_balancer_service_server::LoadBalancerService for LbAdapter<T> {
    async fn get_load_balancer(
        &self,
        req: Request<GetLoadBalancerRequest>,
    ) -> Result<Response<GetLoadBalancerResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.get_ref();
        let (cluster, service) = target_ref(&r.cluster_name, &r.service)?;
        let status = call(
            "GetLoadBalancer",
            &ctx,
            self.provider
                .get_load_balancer(ctx.clone(), cluster, service),
        )
        .await?;
        Ok(Response::new(match status {
            Some(status) => GetLoadBalancerResponse {
                existence: LoadBalancerExistence::Exists as i32,
                status: Some(status),
            },
            None => GetLoadBalancerResponse {
                existence: LoadBalancerExistence::NotExists as i32,
                status: None,
            },
        }))
    }

    async fn get_load_balancer_name(
        &self,
        req: Request<GetLoadBalancerNameRequest>,
    ) -> Result<Response<GetLoadBalancerNameResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.get_ref();
        let (cluster, service) = target_ref(&r.cluster_name, &r.service)?;
        let name = call(
            "GetLoadBalancerName",
            &ctx,
            self.provider
                .get_load_balancer_name(ctx.clone(), cluster, service),
        )
        .await?;
        if name.is_empty() {
            return Err(
                ProviderError::internal("provider answered an empty load balancer name")
                    .to_status(),
            );
        }
        Ok(Response::new(GetLoadBalancerNameResponse { name }))
    }

    async fn ensure_load_balancer(
        &self,
        req: Request<EnsureLoadBalancerRequest>,
    ) -> Result<Response<EnsureLoadBalancerResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.into_inner();
        let (cluster, service) = target(&r.cluster_name, &r.service)?;
        let nodes = self.sets.resolve(&cluster, r.nodes, &r.node_set_id)?;
        let answer = call(
            "EnsureLoadBalancer",
            &ctx,
            self.provider
                .ensure_load_balancer(ctx.clone(), cluster, service, nodes),
        )
        .await?;
        let result = match answer.outcome {
            LbOutcome::Done(status) => {
                validate::load_balancer_status("status", &status)
                    .map_err(bad_answer("an invalid status"))?;
                ensure_load_balancer_response::Result::Status(status)
            }
            LbOutcome::ImplementedElsewhere(message) => {
                ensure_load_balancer_response::Result::ImplementedElsewhere(elsewhere(message))
            }
        };
        Ok(Response::new(EnsureLoadBalancerResponse {
            result: Some(result),
            warnings: answer.warnings,
        }))
    }

    async fn update_load_balancer(
        &self,
        req: Request<UpdateLoadBalancerRequest>,
    ) -> Result<Response<UpdateLoadBalancerResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.into_inner();
        let (cluster, service) = target(&r.cluster_name, &r.service)?;
        let nodes = self.sets.resolve(&cluster, r.nodes, &r.node_set_id)?;
        let answer = call(
            "UpdateLoadBalancer",
            &ctx,
            self.provider
                .update_load_balancer(ctx.clone(), cluster, service, nodes),
        )
        .await?;
        let result = match answer.outcome {
            LbOutcome::Done(()) => {
                update_load_balancer_response::Result::Updated(LoadBalancerUpdated {})
            }
            LbOutcome::ImplementedElsewhere(message) => {
                update_load_balancer_response::Result::ImplementedElsewhere(elsewhere(message))
            }
        };
        Ok(Response::new(UpdateLoadBalancerResponse {
            result: Some(result),
            warnings: answer.warnings,
        }))
    }

    async fn put_node_set(
        &self,
        req: Request<PutNodeSetRequest>,
    ) -> Result<Response<PutNodeSetResponse>, Status> {
        let r = req.into_inner();
        let cluster = cluster_name(&r.cluster_name)?;
        validate::node_set_id("node_set_id", &r.node_set_id).map_err(invalid_request)?;
        validate::node_refs("nodes", &r.nodes).map_err(invalid_request)?;
        self.sets.put(&cluster, r.node_set_id, r.nodes);
        Ok(Response::new(PutNodeSetResponse {}))
    }

    async fn ensure_load_balancer_deleted(
        &self,
        req: Request<EnsureLoadBalancerDeletedRequest>,
    ) -> Result<Response<EnsureLoadBalancerDeletedResponse>, Status> {
        let ctx = context(&req)?;
        let r = req.get_ref();
        let (cluster, service) = target_ref(&r.cluster_name, &r.service)?;
        let warnings = call(
            "EnsureLoadBalancerDeleted",
            &ctx,
            self.provider
                .ensure_load_balancer_deleted(ctx.clone(), cluster, service),
        )
        .await?;
        Ok(Response::new(EnsureLoadBalancerDeletedResponse {
            warnings,
        }))
    }

    async fn list_load_balancers(
        &self,
        req: Request<ListLoadBalancersRequest>,
    ) -> Result<Response<ListLoadBalancersResponse>, Status> {
        let ctx = context(&req)?;
        if !self.provider.supports_listing() {
            return Err(
                ProviderError::unimplemented("ListLoadBalancers is not supported").to_status(),
            );
        }
        let r = req.get_ref();
        let cluster = cluster_name(&r.cluster_name)?;
        let all = call(
            "ListLoadBalancers",
            &ctx,
            self.provider.list_load_balancers(ctx.clone(), cluster),
        )
        .await?;
        let (page, next_page_token) =
            paginate::page(all, |e| e.service_uid.clone(), r.page_size, &r.page_token)
                .map_err(invalid_request)?;
        Ok(Response::new(ListLoadBalancersResponse {
            load_balancers: page
                .into_iter()
                .map(|e| LoadBalancerSummary {
                    name: e.name,
                    service_uid: e.service_uid,
                    service_namespace: e.service_namespace,
                    service_name: e.service_name,
                    status: e.status,
                })
                .collect(),
            next_page_token,
        }))
    }
}

/// The cluster and Service an Ensure or Update names, checked: the Service
/// with at least one port.
fn target(cluster: &str, service: &Option<Service>) -> Result<(String, Service), Status> {
    let cluster = cluster_name(cluster)?;
    let service = validate::service("service", service).map_err(invalid_request)?;
    Ok((cluster, service))
}

/// The cluster and Service a read or the delete names, checked: ports are
/// not needed to find a load balancer.
fn target_ref(cluster: &str, service: &Option<Service>) -> Result<(String, Service), Status> {
    let cluster = cluster_name(cluster)?;
    let service = validate::service_ref("service", service).map_err(invalid_request)?;
    Ok((cluster, service))
}

fn elsewhere(message: String) -> ImplementedElsewhere {
    ImplementedElsewhere { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_set_is_kept_encoded() {
        let sets = NodeSets::default();
        let nodes = vec![NodeRef {
            name: "n1".into(),
            ..Default::default()
        }];
        let id = NodeSet::new(nodes.clone()).id().to_owned();
        sets.put("c", id.clone(), nodes.clone());
        let kept = sets.get("c", &id).expect("the set just put");
        assert!(!kept.is_decoded(), "the SDK keeps the set decoded");
        assert_eq!(kept.each().collect::<Vec<_>>(), nodes);
        assert_eq!(kept.id(), id);
    }
}
