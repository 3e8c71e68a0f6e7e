//! EnsureLoadBalancer and UpdateLoadBalancer as sent: the request's own
//! fields, then either the [`NodeSet`]'s bytes, encoded once for all calls
//! (the same bytes prost writes for the whole request), or only its id.

use std::fmt;
use std::marker::PhantomData;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{GrpcMethod, Request, Response, Status};

use super::rpcs::{OBJECT_ANSWER_BYTES, SMALL_ANSWER_BYTES, ServiceClient, Unary};
use crate::node_set::NodeSet;
use crate::proto::{
    EnsureLoadBalancerResponse, PutNodeSetResponse, Service, UpdateLoadBalancerResponse,
};

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
/// have the same fields): cluster_name, service, then the nodes' bytes or,
/// `by_id`, the set's id alone. Only ever encoded.
pub(super) struct WithNodes<R> {
    pub cluster_name: String,
    pub service: Option<Service>,
    pub nodes: NodeSet,
    pub by_id: bool,
    rpc: PhantomData<fn() -> R>,
}

impl<R> WithNodes<R> {
    pub(super) fn new(cluster_name: String, service: Service, nodes: NodeSet, by_id: bool) -> Self {
        WithNodes {
            cluster_name,
            service: Some(service),
            nodes,
            by_id,
            rpc: PhantomData,
        }
    }
}

/// `node_set_id` in both requests.
const NODE_SET_ID_TAG: u32 = 4;

impl<R> Default for WithNodes<R> {
    fn default() -> Self {
        WithNodes {
            cluster_name: String::new(),
            service: None,
            nodes: NodeSet::default(),
            by_id: false,
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
            .field("by_id", &self.by_id)
            .finish()
    }
}

impl<R: Send + Sync> Message for WithNodes<R> {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        put_string(1, &self.cluster_name, buf);
        if let Some(service) = &self.service {
            encoding::message::encode(2, service, buf);
        }
        if self.by_id {
            put_string(NODE_SET_ID_TAG, self.nodes.id(), buf);
        } else {
            buf.put_slice(self.nodes.encoded());
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Only ever sent.
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let service = self
            .service
            .as_ref()
            .map_or(0, |s| encoding::message::encoded_len(2, s));
        let nodes = if self.by_id {
            string_len(NODE_SET_ID_TAG, self.nodes.id())
        } else {
            self.nodes.encoded().len()
        };
        string_len(1, &self.cluster_name) + service + nodes
    }

    fn clear(&mut self) {
        *self = WithNodes::default();
    }
}

/// A string field as prost writes it: left out when empty.
fn put_string(tag: u32, value: &str, buf: &mut impl BufMut) {
    if !value.is_empty() {
        encoding::encode_key(tag, WireType::LengthDelimited, buf);
        encoding::encode_varint(value.len() as u64, buf);
        buf.put_slice(value.as_bytes());
    }
}

fn string_len(tag: u32, value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        encoding::key_len(tag) + encoding::encoded_len_varint(value.len() as u64) + value.len()
    }
}

/// A plain gRPC client on the shared channel, for requests the generated
/// clients cannot send.
pub(super) struct RawClient(tonic::client::Grpc<Channel>);

impl ServiceClient for RawClient {
    fn limited(channel: Channel, max_request_bytes: usize, max_answer_bytes: usize) -> Self {
        RawClient(
            tonic::client::Grpc::new(channel)
                .max_decoding_message_size(max_answer_bytes)
                .max_encoding_message_size(max_request_bytes),
        )
    }
}

const LB_SERVICE: &str = "ccmrs.cloudprovider.v1.LoadBalancerService";

/// One unary call of LoadBalancerService `method` with a hand-encoded
/// request, as the generated clients make it.
async fn lb_unary<Req, Resp>(
    RawClient(mut grpc): RawClient,
    mut request: Request<Req>,
    method: &'static str,
) -> Result<Response<Resp>, Status>
where
    Req: Message + Send + 'static,
    Resp: Message + Default + Send + 'static,
{
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
    let path = PathAndQuery::from_maybe_shared(format!("/{LB_SERVICE}/{method}"))
        .map_err(|e| Status::internal(format!("method path: {e}")))?;
    request
        .extensions_mut()
        .insert(GrpcMethod::new(LB_SERVICE, method));
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(request, path, codec).await
}

impl<R: NodesRpc> Unary for WithNodes<R> {
    const METHOD: &'static str = R::METHOD;
    const MAX_ANSWER_BYTES: usize = OBJECT_ANSWER_BYTES;
    type Client = RawClient;
    type Response = R::Response;

    fn send(
        client: RawClient,
        request: Request<Self>,
    ) -> impl std::future::Future<Output = Result<Response<R::Response>, Status>> + Send {
        lb_unary(client, request, R::METHOD)
    }
}

/// PutNodeSetRequest as sent: cluster_name, the set's id, its bytes.
#[derive(Debug, Default)]
pub(super) struct PutSet {
    pub cluster_name: String,
    pub nodes: NodeSet,
}

impl Message for PutSet {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        put_string(1, &self.cluster_name, buf);
        put_string(2, self.nodes.id(), buf);
        buf.put_slice(self.nodes.encoded());
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Only ever sent.
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        string_len(1, &self.cluster_name)
            + string_len(2, self.nodes.id())
            + self.nodes.encoded().len()
    }

    fn clear(&mut self) {
        *self = PutSet::default();
    }
}

impl Unary for PutSet {
    const METHOD: &'static str = "PutNodeSet";
    const MAX_ANSWER_BYTES: usize = SMALL_ANSWER_BYTES;
    type Client = RawClient;
    type Response = PutNodeSetResponse;

    fn send(
        client: RawClient,
        request: Request<Self>,
    ) -> impl std::future::Future<Output = Result<Response<PutNodeSetResponse>, Status>> + Send
    {
        lb_unary(client, request, "PutNodeSet")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{
        EnsureLoadBalancerRequest, NodeAddress, NodeAddressType, NodeRef, PutNodeSetRequest,
        ServicePort, UpdateLoadBalancerRequest,
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
                node_set_id: String::new(),
            };
            let sent = WithNodes::<Ensure>::new("k".into(), service(), set.clone(), false);
            assert_eq!(sent.encoded_len(), ensure.encoded_len());
            assert_eq!(sent.encode_to_vec(), ensure.encode_to_vec());
            let decoded =
                EnsureLoadBalancerRequest::decode(sent.encode_to_vec().as_slice()).unwrap();
            assert_eq!(decoded, ensure);

            let update = UpdateLoadBalancerRequest {
                cluster_name: String::new(),
                service: None,
                nodes: vec![],
                node_set_id: set.id().to_owned(),
            };
            let sent = WithNodes::<Update> {
                by_id: true,
                nodes: set.clone(),
                ..WithNodes::default()
            };
            assert_eq!(sent.encoded_len(), update.encoded_len());
            assert_eq!(sent.encode_to_vec(), update.encode_to_vec());

            let put = PutNodeSetRequest {
                cluster_name: "k".into(),
                node_set_id: set.id().to_owned(),
                nodes: nodes.clone(),
            };
            let sent = PutSet {
                cluster_name: "k".into(),
                nodes: set.clone(),
            };
            assert_eq!(sent.encoded_len(), put.encoded_len());
            assert_eq!(sent.encode_to_vec(), put.encode_to_vec());
        }
    }
}
