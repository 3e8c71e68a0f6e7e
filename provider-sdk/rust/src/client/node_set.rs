//! The nodes of a load balancer call, encoded once. A controller sends the
//! same node set with every EnsureLoadBalancer and UpdateLoadBalancer until
//! the set changes; with 1,000 Services over 1,000 Nodes, building and
//! encoding the set for each call was most of the controller's CPU. A
//! [`NodeSet`] is encoded when it is made, and each call copies its bytes
//! after the request's other fields: the same bytes prost writes for the
//! whole request.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{GrpcMethod, Request, Response, Status};

use super::rpcs::{ServiceClient, Unary};
use crate::proto::{EnsureLoadBalancerResponse, NodeRef, Service, UpdateLoadBalancerResponse};

/// `nodes` in EnsureLoadBalancerRequest and UpdateLoadBalancerRequest.
const NODES_TAG: u32 = 3;

/// The nodes of a load balancer call, encoded once. Cheap to clone: clones
/// share the nodes and their encoding.
#[derive(Clone, Default)]
pub struct NodeSet {
    nodes: Arc<[NodeRef]>,
    /// Each node as field 3 of the request, in order.
    encoded: Bytes,
}

impl NodeSet {
    pub fn new(nodes: Vec<NodeRef>) -> Self {
        let len = nodes
            .iter()
            .map(|n| encoding::message::encoded_len(NODES_TAG, n))
            .sum();
        let mut encoded = Vec::with_capacity(len);
        for n in &nodes {
            encoding::message::encode(NODES_TAG, n, &mut encoded);
        }
        NodeSet {
            nodes: nodes.into(),
            encoded: encoded.into(),
        }
    }

    pub fn nodes(&self) -> &[NodeRef] {
        &self.nodes
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl From<Vec<NodeRef>> for NodeSet {
    fn from(nodes: Vec<NodeRef>) -> Self {
        NodeSet::new(nodes)
    }
}

impl From<&NodeSet> for NodeSet {
    fn from(set: &NodeSet) -> Self {
        set.clone()
    }
}

impl fmt::Debug for NodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeSet")
            .field("nodes", &self.nodes.len())
            .field("encoded_bytes", &self.encoded.len())
            .finish()
    }
}

/// Which of the two load balancer calls that carry nodes.
pub(super) trait NodesRpc: Send + Sync + 'static {
    const METHOD: &'static str;
    type Response: Message + Default + Send + 'static;
}

pub(super) enum Ensure {}
pub(super) enum Update {}

impl NodesRpc for Ensure {
    const METHOD: &'static str = "EnsureLoadBalancer";
    type Response = EnsureLoadBalancerResponse;
}

impl NodesRpc for Update {
    const METHOD: &'static str = "UpdateLoadBalancer";
    type Response = UpdateLoadBalancerResponse;
}

/// EnsureLoadBalancerRequest or UpdateLoadBalancerRequest as sent (the two
/// have the same fields): cluster_name, service, then the nodes' bytes.
/// Only ever encoded.
pub(super) struct WithNodes<R> {
    pub cluster_name: String,
    pub service: Option<Service>,
    pub nodes: NodeSet,
    rpc: PhantomData<fn() -> R>,
}

impl<R> WithNodes<R> {
    pub(super) fn new(cluster_name: String, service: Service, nodes: NodeSet) -> Self {
        WithNodes {
            cluster_name,
            service: Some(service),
            nodes,
            rpc: PhantomData,
        }
    }
}

impl<R> Default for WithNodes<R> {
    fn default() -> Self {
        WithNodes {
            cluster_name: String::new(),
            service: None,
            nodes: NodeSet::default(),
            rpc: PhantomData,
        }
    }
}

impl<R> fmt::Debug for WithNodes<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithNodes")
            .field("cluster_name", &self.cluster_name)
            .field("service", &self.service)
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl<R: Send + Sync> Message for WithNodes<R> {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.cluster_name.is_empty() {
            encoding::string::encode(1, &self.cluster_name, buf);
        }
        if let Some(service) = &self.service {
            encoding::message::encode(2, service, buf);
        }
        buf.put_slice(&self.nodes.encoded);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let cluster = if self.cluster_name.is_empty() {
            0
        } else {
            encoding::string::encoded_len(1, &self.cluster_name)
        };
        let service = self
            .service
            .as_ref()
            .map_or(0, |s| encoding::message::encoded_len(2, s));
        cluster + service + self.nodes.encoded.len()
    }

    fn clear(&mut self) {
        *self = WithNodes::default();
    }
}

/// A plain gRPC client on the shared channel, for requests the generated
/// clients cannot send.
pub(super) struct RawClient(tonic::client::Grpc<Channel>);

impl ServiceClient for RawClient {
    fn limited(channel: Channel, max_message_bytes: usize) -> Self {
        RawClient(
            tonic::client::Grpc::new(channel)
                .max_decoding_message_size(max_message_bytes)
                .max_encoding_message_size(max_message_bytes),
        )
    }
}

const LB_SERVICE: &str = "ccmrs.cloudprovider.v1.LoadBalancerService";

impl<R: NodesRpc> Unary for WithNodes<R> {
    const METHOD: &'static str = R::METHOD;
    type Client = RawClient;
    type Response = R::Response;

    async fn send(
        RawClient(mut grpc): RawClient,
        mut request: Request<Self>,
    ) -> Result<Response<R::Response>, Status> {
        // As the generated clients say it.
        grpc.ready()
            .await
            .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
        let path = PathAndQuery::from_maybe_shared(format!("/{LB_SERVICE}/{}", R::METHOD))
            .map_err(|e| Status::internal(format!("method path: {e}")))?;
        request
            .extensions_mut()
            .insert(GrpcMethod::new(LB_SERVICE, R::METHOD));
        let codec = tonic_prost::ProstCodec::<WithNodes<R>, R::Response>::default();
        grpc.unary(request, path, codec).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{
        EnsureLoadBalancerRequest, NodeAddress, NodeAddressType, ServicePort,
        UpdateLoadBalancerRequest,
    };

    fn node(name: &str) -> NodeRef {
        NodeRef {
            name: name.into(),
            uid: format!("uid-{name}"),
            provider_id: format!("fake://{name}"),
            addresses: vec![NodeAddress {
                r#type: NodeAddressType::InternalIp as i32,
                address: "10.0.0.1".into(),
            }],
            labels: [("zone".to_string(), "a".to_string())].into(),
            annotations: [("note".to_string(), "x".to_string())].into(),
        }
    }

    fn service() -> Service {
        Service {
            uid: "u-1".into(),
            namespace: "ns".into(),
            name: "web".into(),
            ports: vec![ServicePort {
                port: 80,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_bytes_are_the_requests_own() {
        for nodes in [
            vec![],
            vec![node("a")],
            vec![node("b"), node("a"), node("c")],
        ] {
            let set = NodeSet::new(nodes.clone());
            let ensure = EnsureLoadBalancerRequest {
                cluster_name: "k".into(),
                service: Some(service()),
                nodes: nodes.clone(),
            };
            let sent = WithNodes::<Ensure>::new("k".into(), service(), set.clone());
            assert_eq!(sent.encoded_len(), ensure.encoded_len());
            assert_eq!(sent.encode_to_vec(), ensure.encode_to_vec());
            let decoded =
                EnsureLoadBalancerRequest::decode(sent.encode_to_vec().as_slice()).unwrap();
            assert_eq!(decoded, ensure);

            let update = UpdateLoadBalancerRequest {
                cluster_name: String::new(),
                service: None,
                nodes,
            };
            let sent = WithNodes::<Update> {
                cluster_name: String::new(),
                service: None,
                nodes: set,
                rpc: PhantomData,
            };
            assert_eq!(sent.encode_to_vec(), update.encode_to_vec());
        }
    }
}
