//! The Node as the controllers keep it: the fields they read, and nothing
//! else.
//!
//! A Node as kubelets write it is about 12 KB of JSON, most of it images,
//! managedFields, node info, capacity and daemon endpoints, and kubelets
//! rewrite it on every status heartbeat. Decoding all of it (and dropping
//! it again) was about a third of the controller's CPU in the steady state
//! (docs/benchmarks.md). The Node watch reads protobuf and decodes the
//! projection only ([`super::node_wire`]); [`project`] says what it keeps:
//! the metadata but managedFields, the spec but the deprecated
//! configSource, and of the status the addresses and the type, status and
//! reason of the two conditions controllers read (`Ready`,
//! `NetworkUnavailable`). A heartbeat, or a change of another condition,
//! leaves the projection as it was but for the resourceVersion
//! ([`same_but_for_version`]).
//!
//! Nothing written back is built from a projection: every write is a patch
//! of the fields it sets.

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::node::{NETWORK_UNAVAILABLE, READY};

/// The conditions a projection keeps, those controllers read.
pub fn kept_condition(type_: &str) -> bool {
    type_ == READY || type_ == NETWORK_UNAVAILABLE
}

/// `node`'s projection: what the Node watch decodes from the apiserver's
/// protobuf.
pub fn project(node: &Node) -> Node {
    Node {
        metadata: ObjectMeta {
            managed_fields: None,
            ..node.metadata.clone()
        },
        spec: node.spec.as_ref().map(|s| NodeSpec {
            config_source: None,
            ..s.clone()
        }),
        status: node.status.as_ref().map(|s| NodeStatus {
            addresses: s.addresses.clone(),
            conditions: {
                let kept: Vec<_> = (s.conditions.iter().flatten())
                    .filter(|c| kept_condition(&c.type_))
                    .map(|c| NodeCondition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        ..Default::default()
                    })
                    .collect();
                (!kept.is_empty()).then_some(kept)
            },
            ..Default::default()
        }),
    }
}

/// Whether `a` and `b` are the same projection but for the
/// resourceVersion (and managedFields, which a projection never has): a
/// change no controller can react to.
pub fn same_but_for_version(a: &Node, b: &Node) -> bool {
    // Destructured whole, so a field added to ObjectMeta is compared (or
    // knowingly left out) rather than forgotten.
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields: _,
        name,
        namespace,
        owner_references,
        resource_version: _,
        self_link,
        uid,
    } = &a.metadata;
    let m = &b.metadata;
    *name == m.name
        && *uid == m.uid
        && *labels == m.labels
        && *annotations == m.annotations
        && *creation_timestamp == m.creation_timestamp
        && *deletion_timestamp == m.deletion_timestamp
        && *deletion_grace_period_seconds == m.deletion_grace_period_seconds
        && *finalizers == m.finalizers
        && *generate_name == m.generate_name
        && *generation == m.generation
        && *namespace == m.namespace
        && *owner_references == m.owner_references
        && *self_link == m.self_link
        && a.spec == b.spec
        && a.status == b.status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::node;
    use serde_json::json;

    /// A Node as a kubelet writes it, with `heartbeat` as every
    /// condition's lastHeartbeatTime.
    fn kubelet_node(heartbeat: &str, rv: &str) -> serde_json::Value {
        let images: Vec<_> = (0..40)
            .map(|i| json!({"names": [format!("registry.example/app-{i}@sha256:{:064x}", i)], "sizeBytes": 1000 + i}))
            .collect();
        let condition = |t: &str, s: &str| {
            json!({"type": t, "status": s, "reason": format!("Kubelet{t}"), "message": "m",
                   "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-11-01T00:00:00Z"})
        };
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": rv,
                "creationTimestamp": "2026-11-01T00:00:00Z",
                "labels": {"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "z1"},
                "annotations": {"alpha.kubernetes.io/provided-node-ip": "10.0.0.1"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]
            },
            "spec": {"providerID": "fake://n1", "podCIDRs": ["10.244.1.0/24"],
                     "taints": [{"key": node::UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}],
                "conditions": [condition("Ready", "True"), condition("MemoryPressure", "False")],
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6",
                             "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "v1.33.0",
                             "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                "images": images
            }
        })
    }

    fn projected(v: &serde_json::Value) -> Node {
        project(&serde_json::from_value(v.clone()).unwrap())
    }

    #[test]
    fn a_projection_keeps_what_controllers_read_and_nothing_else() {
        let v = kubelet_node("2026-11-28T00:00:00Z", "7");
        let full: Node = serde_json::from_value(v.clone()).unwrap();
        let p = projected(&v);
        // Everything a controller reads is the same.
        assert_eq!(node::node_ref(&p), node::node_ref(&full));
        assert_eq!(node::taints(&p), node::taints(&full));
        assert_eq!(node::ready_status(&p), "True");
        assert_eq!(p.spec, full.spec);
        assert_eq!(p.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            p.metadata.creation_timestamp,
            full.metadata.creation_timestamp
        );
        // Of the conditions, Ready's type, status and reason.
        let conditions = p.status.as_ref().unwrap().conditions.as_ref().unwrap();
        let ready = NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            ..Default::default()
        };
        assert_eq!(conditions, &[ready]);
        // And nothing else.
        assert!(p.metadata.managed_fields.is_none());
        let s = p.status.as_ref().unwrap();
        assert!(s.images.is_none() && s.node_info.is_none() && s.capacity.is_none());
        assert!(s.allocatable.is_none() && s.daemon_endpoints.is_none());
        let kept = serde_json::to_vec(&p).unwrap().len();
        let whole = serde_json::to_vec(&v).unwrap().len();
        assert!(kept * 5 < whole, "projection {kept} bytes of {whole}");
    }

    #[test]
    fn a_heartbeat_is_no_change_and_anything_read_is_one() {
        let before = projected(&kubelet_node("2026-11-28T00:00:00Z", "7"));
        let beat = projected(&kubelet_node("2026-11-28T00:00:10Z", "8"));
        assert!(same_but_for_version(&before, &beat));

        let changed = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = kubelet_node("2026-11-28T00:00:10Z", "8");
            f(&mut v);
            !same_but_for_version(&before, &projected(&v))
        };
        assert!(changed(&|v| v["metadata"]["labels"]["team"] = json!("a")));
        assert!(changed(&|v| v["metadata"]["annotations"]["x"] = json!("y")));
        assert!(changed(
            &|v| v["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z")
        ));
        assert!(changed(&|v| v["spec"]["taints"] = json!([])));
        assert!(changed(&|v| v["spec"]["providerID"] = json!("fake://other")));
        assert!(changed(
            &|v| v["status"]["addresses"][0]["address"] = json!("10.0.0.2")
        ));
        assert!(changed(
            &|v| v["status"]["conditions"][0]["status"] = json!("False")
        ));
        // Nor is anything the projection leaves out.
        assert!(!changed(&|v| v["status"]["images"] = json!([])));
        assert!(!changed(
            &|v| v["status"]["conditions"][1]["status"] = json!("True")
        ));
        assert!(!changed(
            &|v| v["status"]["conditions"][0]["message"] = json!("other")
        ));
        assert!(!changed(&|v| v["status"]["capacity"]["cpu"] = json!("16")));
    }

    #[test]
    fn a_minimal_node_projects() {
        let p = projected(&json!({"metadata": {"name": "n1"}}));
        assert_eq!(node::name(&p), "n1");
        assert!(p.spec.is_none() && p.status.is_none());
        let p = projected(
            &json!({"metadata": {"name": "n1"}, "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False"}]}}),
        );
        assert_eq!(p.status, Some(NodeStatus::default()));
    }
}
