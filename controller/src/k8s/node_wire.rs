//! Nodes as the kube-apiserver sends them in protobuf, decoded straight
//! into their projection ([`super::projected`]).
//!
//! The messages below declare only the projection's fields, with the field
//! numbers of k8s.io/api's `generated.proto`; prost skips every other
//! field by its length without looking inside, so a Node's images, node
//! info, capacity and managedFields cost nothing to decode. (JSON has to
//! scan every byte of them; `k8s-pb`'s complete messages would build them.)
//!
//! Go writes every non-pointer string and struct field, empty or not,
//! where JSON omits it: [`into_node`] maps empty to absent, so a decoded
//! projection equals [`super::projected::project`] of the same Node read
//! as JSON (the e2e test `node_watch_protobuf` checks this against the
//! apiserver).

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint, skip_field};

use super::projected;

/// What precedes a protobuf object outside a watch stream
/// (k8s.io/apimachinery/pkg/runtime/serializer/protobuf).
const MAGIC: &[u8] = b"k8s\0";

/// A protobuf answer the apiserver should not send.
#[derive(Debug, thiserror::Error)]
#[error("undecodable protobuf from the apiserver: {0}")]
pub struct WireError(String);

impl WireError {
    pub fn new(why: impl Into<String>) -> Self {
        WireError(why.into())
    }
}

impl From<prost::DecodeError> for WireError {
    fn from(e: prost::DecodeError) -> Self {
        WireError(e.to_string())
    }
}

/// `data` without the magic and `runtime.Unknown` envelope (the whole of
/// it when it has none: the raw serializer of watch frames).
pub fn unwrap_envelope(data: Bytes) -> Result<Bytes, WireError> {
    if !data.starts_with(MAGIC) {
        return Ok(data);
    }
    let unknown = Unknown::decode(data.slice(MAGIC.len()..))?;
    match unknown.content_encoding.as_deref() {
        None | Some("") => Ok(unknown.raw.unwrap_or_default()),
        Some(other) => Err(WireError(format!("content encoding {other:?}"))),
    }
}

/// A Node (without envelope) as its projection.
pub fn decode_node(raw: Bytes) -> Result<Node, WireError> {
    Ok(into_node(PNode::decode(raw)?))
}

/// A NodeList (without envelope): its resourceVersion and continue token,
/// and its items still encoded, each decoded only when its turn comes.
pub struct NodeListPage {
    pub resource_version: String,
    pub continue_token: String,
    pub items: Vec<Bytes>,
}

pub fn decode_node_list(mut raw: Bytes) -> Result<NodeListPage, WireError> {
    let mut page = NodeListPage {
        resource_version: String::new(),
        continue_token: String::new(),
        items: Vec::new(),
    };
    while raw.has_remaining() {
        let (tag, wire_type) = decode_key(&mut raw)?;
        match (tag, wire_type) {
            (1, WireType::LengthDelimited) => {
                let meta = ListMeta::decode(length_delimited(&mut raw)?)?;
                page.resource_version = meta.resource_version.unwrap_or_default();
                page.continue_token = meta.continue_token.unwrap_or_default();
            }
            (2, WireType::LengthDelimited) => page.items.push(length_delimited(&mut raw)?),
            _ => skip_field(wire_type, tag, &mut raw, Default::default())?,
        }
    }
    Ok(page)
}

fn length_delimited(buf: &mut Bytes) -> Result<Bytes, WireError> {
    let len = decode_varint(buf)?;
    if len > buf.remaining() as u64 {
        return Err(WireError("a field longer than its message".into()));
    }
    Ok(buf.split_to(len as usize))
}

/// The resourceVersion of an object (without envelope), decoding nothing
/// else of it; `None` when it has none.
pub fn decode_resource_version(raw: Bytes) -> Result<Option<String>, WireError> {
    let o = Versioned::decode(raw)?;
    Ok(present(o.metadata.and_then(|m| m.resource_version)))
}

/// One event of a watch stream, its object still enveloped.
pub struct WatchFrame {
    pub type_: String,
    pub object: Bytes,
}

pub fn decode_watch_event(frame: Bytes) -> Result<WatchFrame, WireError> {
    let event = WatchEvent::decode(unwrap_envelope(frame)?)?;
    Ok(WatchFrame {
        type_: event.type_.unwrap_or_default(),
        object: event.object.and_then(|o| o.raw).unwrap_or_default(),
    })
}

/// A `metav1.Status` (without envelope), as kube's.
pub fn decode_status(raw: Bytes) -> Result<kube::core::Status, WireError> {
    let s = Status::decode(raw)?;
    let code = s.code.unwrap_or_default().clamp(0, u16::MAX as i32) as u16;
    Ok(kube::core::Status::failure(
        s.message.as_deref().unwrap_or_default(),
        s.reason.as_deref().unwrap_or_default(),
    )
    .with_code(code))
}

/// Absent when empty, as JSON's omitempty leaves it.
fn present(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn present_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn present_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}

/// A zero `metav1.Time` is written as an empty message; the apiserver
/// keeps whole seconds only.
fn time(t: Option<PTime>) -> Option<Time> {
    let seconds = t?.seconds?;
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .ok()
        .map(Time)
}

fn into_node(n: PNode) -> Node {
    Node {
        metadata: n.metadata.map(into_meta).unwrap_or_default(),
        spec: n.spec.map(|s| NodeSpec {
            config_source: None,
            external_id: present(s.external_id),
            pod_cidr: present(s.pod_cidr),
            pod_cidrs: present_vec(s.pod_cidrs),
            provider_id: present(s.provider_id),
            taints: present_vec(
                s.taints
                    .into_iter()
                    .map(|t| Taint {
                        key: t.key.unwrap_or_default(),
                        value: present(t.value),
                        effect: t.effect.unwrap_or_default(),
                        time_added: time(t.time_added),
                    })
                    .collect(),
            ),
            unschedulable: s.unschedulable.filter(|u| *u),
        }),
        status: n.status.map(|s| NodeStatus {
            addresses: present_vec(
                s.addresses
                    .into_iter()
                    .map(|a| NodeAddress {
                        type_: a.type_.unwrap_or_default(),
                        address: a.address.unwrap_or_default(),
                    })
                    .collect(),
            ),
            conditions: present_vec(
                s.conditions
                    .into_iter()
                    .filter(|c| projected::kept_condition(c.type_.as_deref().unwrap_or_default()))
                    .map(|c| NodeCondition {
                        type_: c.type_.unwrap_or_default(),
                        status: c.status.unwrap_or_default(),
                        reason: present(c.reason),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

fn into_meta(m: PMeta) -> ObjectMeta {
    ObjectMeta {
        annotations: present_map(m.annotations),
        creation_timestamp: time(m.creation_timestamp),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: time(m.deletion_timestamp),
        finalizers: present_vec(m.finalizers),
        generate_name: present(m.generate_name),
        generation: m.generation.filter(|g| *g != 0),
        labels: present_map(m.labels),
        managed_fields: None,
        name: present(m.name),
        namespace: present(m.namespace),
        owner_references: present_vec(
            m.owner_references
                .into_iter()
                .map(|o| OwnerReference {
                    api_version: o.api_version.unwrap_or_default(),
                    block_owner_deletion: o.block_owner_deletion,
                    controller: o.controller,
                    kind: o.kind.unwrap_or_default(),
                    name: o.name.unwrap_or_default(),
                    uid: o.uid.unwrap_or_default(),
                })
                .collect(),
        ),
        resource_version: present(m.resource_version),
        self_link: present(m.self_link),
        uid: present(m.uid),
    }
}

// The messages, each with the fields the projection keeps. Field numbers
// from k8s.io/api core/v1 and k8s.io/apimachinery meta/v1 and runtime
// generated.proto.

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(bytes = "bytes", optional, tag = "2")]
    raw: Option<Bytes>,
    #[prost(string, optional, tag = "3")]
    content_encoding: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ListMeta {
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    continue_token: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    type_: Option<String>,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

#[derive(Clone, PartialEq, Message)]
struct RawExtension {
    #[prost(bytes = "bytes", optional, tag = "1")]
    raw: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(string, optional, tag = "3")]
    message: Option<String>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    code: Option<i32>,
}

/// Any object, as far as its metadata's resourceVersion.
#[derive(Clone, PartialEq, Message)]
struct Versioned {
    #[prost(message, optional, tag = "1")]
    metadata: Option<VersionedMeta>,
}

#[derive(Clone, PartialEq, Message)]
struct VersionedMeta {
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PNode {
    #[prost(message, optional, tag = "1")]
    metadata: Option<PMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<PSpec>,
    #[prost(message, optional, tag = "3")]
    status: Option<PStatus>,
}

/// ObjectMeta without managedFields (17).
#[derive(Clone, PartialEq, Message)]
struct PMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    creation_timestamp: Option<PTime>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<PTime>,
    #[prost(int64, optional, tag = "10")]
    deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<POwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct POwnerReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct PTime {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
}

/// NodeSpec without the deprecated configSource (6).
#[derive(Clone, PartialEq, Message)]
struct PSpec {
    #[prost(string, optional, tag = "1")]
    pod_cidr: Option<String>,
    #[prost(string, optional, tag = "2")]
    external_id: Option<String>,
    #[prost(string, optional, tag = "3")]
    provider_id: Option<String>,
    #[prost(bool, optional, tag = "4")]
    unschedulable: Option<bool>,
    #[prost(message, repeated, tag = "5")]
    taints: Vec<PTaint>,
    #[prost(string, repeated, tag = "7")]
    pod_cidrs: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PTaint {
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
    #[prost(string, optional, tag = "3")]
    effect: Option<String>,
    #[prost(message, optional, tag = "4")]
    time_added: Option<PTime>,
}

/// NodeStatus: the conditions (4) and addresses (5) only.
#[derive(Clone, PartialEq, Message)]
struct PStatus {
    #[prost(message, repeated, tag = "4")]
    conditions: Vec<PCondition>,
    #[prost(message, repeated, tag = "5")]
    addresses: Vec<PAddress>,
}

/// NodeCondition: type, status and reason.
#[derive(Clone, PartialEq, Message)]
struct PCondition {
    #[prost(string, optional, tag = "1")]
    type_: Option<String>,
    #[prost(string, optional, tag = "2")]
    status: Option<String>,
    #[prost(string, optional, tag = "5")]
    reason: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PAddress {
    #[prost(string, optional, tag = "1")]
    type_: Option<String>,
    #[prost(string, optional, tag = "2")]
    address: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime as rt;

    fn s(v: &str) -> Option<String> {
        Some(v.to_owned())
    }

    fn at(seconds: i64) -> Option<meta::Time> {
        Some(meta::Time {
            seconds: Some(seconds),
            nanos: None,
        })
    }

    /// A Node as the apiserver encodes what a kubelet wrote: Go writes
    /// empty strings and zero values that JSON would omit.
    fn kubelet_node(rv: &str, heartbeat: i64) -> pb::Node {
        let condition = |t: &str, status: &str| pb::NodeCondition {
            r#type: s(t),
            status: s(status),
            last_heartbeat_time: at(heartbeat),
            last_transition_time: at(1_700_000_000),
            reason: s(&format!("Kubelet{t}")),
            message: s("m"),
        };
        let images = (0..40)
            .map(|i| pb::ContainerImage {
                names: vec![format!("registry.example/app-{i}@sha256:{i:064x}")],
                size_bytes: Some(1000 + i),
            })
            .collect();
        pb::Node {
            metadata: Some(meta::ObjectMeta {
                name: s("n1"),
                generate_name: s(""),
                namespace: s(""),
                self_link: s(""),
                uid: s("u1"),
                resource_version: s(rv),
                generation: Some(0),
                creation_timestamp: at(1_700_000_000),
                labels: [("kubernetes.io/hostname".into(), "n1".into())].into(),
                annotations: [("a".into(), "b".into())].into(),
                managed_fields: vec![meta::ManagedFieldsEntry {
                    manager: s("kubelet"),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            spec: Some(pb::NodeSpec {
                pod_cidr: s(""),
                pod_cid_rs: vec!["10.244.1.0/24".into()],
                provider_id: s("fake://n1"),
                unschedulable: Some(false),
                external_id: s(""),
                taints: vec![pb::Taint {
                    key: s("node.cloudprovider.kubernetes.io/uninitialized"),
                    value: s("true"),
                    effect: s("NoSchedule"),
                    time_added: None,
                }],
                ..Default::default()
            }),
            status: Some(pb::NodeStatus {
                addresses: vec![pb::NodeAddress {
                    r#type: s("InternalIP"),
                    address: s("10.0.0.1"),
                }],
                conditions: vec![
                    condition("Ready", "True"),
                    condition("MemoryPressure", "False"),
                ],
                images,
                node_info: Some(pb::NodeSystemInfo {
                    machine_id: s("m"),
                    ..Default::default()
                }),
                phase: s(""),
                ..Default::default()
            }),
        }
    }

    fn decoded(n: &pb::Node) -> Node {
        decode_node(n.encode_to_vec().into()).unwrap()
    }

    #[test]
    fn a_node_decodes_as_its_projection_with_go_s_empty_values_absent() {
        let p = decoded(&kubelet_node("7", 1_700_000_100));
        let expected: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2023-11-14T22:13:20Z",
                "labels": {"kubernetes.io/hostname": "n1"}, "annotations": {"a": "b"}
            },
            "spec": {"providerID": "fake://n1", "podCIDRs": ["10.244.1.0/24"],
                     "taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                                 "value": "true", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
            }
        }))
        .unwrap();
        assert_eq!(p, expected);
    }

    #[test]
    fn a_heartbeat_or_a_condition_not_kept_decodes_as_no_change() {
        let before = decoded(&kubelet_node("7", 1_700_000_100));
        let mut beat = kubelet_node("8", 1_700_000_160);
        let status = beat.status.as_mut().unwrap();
        status.images.pop();
        status.conditions[1].status = s("True");
        assert!(projected::same_but_for_version(&before, &decoded(&beat)));
        let mut ready = kubelet_node("9", 1_700_000_160);
        ready.status.as_mut().unwrap().conditions[0].status = s("False");
        assert!(!projected::same_but_for_version(&before, &decoded(&ready)));
    }

    #[test]
    fn a_written_nodes_version_decodes_alone() {
        let n = kubelet_node("42", 1_700_000_100);
        let raw: Bytes = n.encode_to_vec().into();
        assert_eq!(decode_resource_version(raw).unwrap().as_deref(), Some("42"));
        let unversioned = kubelet_node("", 1_700_000_100).encode_to_vec();
        assert_eq!(decode_resource_version(unversioned.into()).unwrap(), None);
        assert!(decode_resource_version(Bytes::from_static(b"\x0a\xff")).is_err());
    }

    #[test]
    fn zero_and_missing_times_are_absent() {
        let mut n = kubelet_node("7", 0);
        n.metadata.as_mut().unwrap().creation_timestamp = Some(meta::Time::default());
        assert_eq!(decoded(&n).metadata.creation_timestamp, None);
        n.metadata.as_mut().unwrap().deletion_timestamp = at(1_700_000_000);
        n.metadata.as_mut().unwrap().deletion_grace_period_seconds = Some(0);
        let p = decoded(&n);
        assert_eq!(
            p.metadata.deletion_timestamp.unwrap().0.as_second(),
            1_700_000_000
        );
        assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));
    }

    fn enveloped(raw: Vec<u8>, encoding: &str) -> Bytes {
        let unknown = rt::Unknown {
            type_meta: Some(rt::TypeMeta {
                api_version: s("v1"),
                kind: s("Node"),
            }),
            raw: Some(raw),
            content_encoding: s(encoding),
            content_type: s(""),
        };
        [MAGIC, &unknown.encode_to_vec()].concat().into()
    }

    #[test]
    fn envelopes_unwrap_and_an_encoded_one_is_refused() {
        let raw = kubelet_node("7", 0).encode_to_vec();
        let unwrapped = unwrap_envelope(enveloped(raw.clone(), "")).unwrap();
        assert_eq!(&unwrapped[..], &raw[..]);
        assert_eq!(&unwrap_envelope(raw.clone().into()).unwrap()[..], &raw[..]);
        let e = unwrap_envelope(enveloped(raw, "gzip")).unwrap_err();
        assert!(e.to_string().contains("gzip"), "{e}");
    }

    #[test]
    fn a_list_gives_its_version_continue_token_and_items_undecoded() {
        let list = pb::NodeList {
            metadata: Some(meta::ListMeta {
                resource_version: s("42"),
                r#continue: s("next"),
                ..Default::default()
            }),
            items: vec![kubelet_node("1", 0), kubelet_node("2", 0)],
        };
        let page = decode_node_list(list.encode_to_vec().into()).unwrap();
        assert_eq!(page.resource_version, "42");
        assert_eq!(page.continue_token, "next");
        let versions: Vec<_> = (page.items.into_iter())
            .map(|i| decode_node(i).unwrap().metadata.resource_version.unwrap())
            .collect();
        assert_eq!(versions, ["1", "2"]);
        // A length past the end is an error, not a panic.
        let mut cut = list.encode_to_vec();
        cut.truncate(cut.len() - 10);
        assert!(decode_node_list(cut.into()).is_err());
    }

    #[test]
    fn watch_events_and_statuses_decode() {
        let event = meta::WatchEvent {
            r#type: s("ERROR"),
            object: Some(rt::RawExtension {
                raw: Some(
                    enveloped(
                        meta::Status {
                            code: Some(410),
                            message: s("too old resource version"),
                            reason: s("Expired"),
                            ..Default::default()
                        }
                        .encode_to_vec(),
                        "",
                    )
                    .to_vec(),
                ),
            }),
        };
        let frame = decode_watch_event(event.encode_to_vec().into()).unwrap();
        assert_eq!(frame.type_, "ERROR");
        let status = decode_status(unwrap_envelope(frame.object).unwrap()).unwrap();
        assert_eq!(status.code, 410);
        assert_eq!(status.reason, "Expired");
        assert_eq!(status.message, "too old resource version");
    }
}
