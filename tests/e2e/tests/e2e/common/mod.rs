//! The harness the controller e2e tests share: the real apiserver, the
//! fake provider on a fresh socket, and the controller running in-process
//! as a ServiceAccount bound to exactly the shipped ClusterRole; and the
//! one way to reach that apiserver, [`ControlPlane`], which holds the lock.

mod control_plane;
mod golden;
mod harness;
mod provider;

pub use control_plane::ControlPlane;
pub(crate) use control_plane::{Existing, delete_created};
pub use golden::{Rendered, check_golden};
pub use harness::{ControllerAccount, Harness, args_for, run_controller};
pub use provider::{Provider, process_identity};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};

pub const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// The pod network the route controller is responsible for.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16,fd00:10:244::/56";
pub use ccm_testsupport::{
    DEADLINE, UNINITIALIZED, eventually, eventually_within, free_port, ingress_ips, kubelet_node,
    lb_service, wait_until,
};

/// The repository's root, where the manifests, charts and scripts the tests
/// read live.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

/// Events about the Node `node` with `reason`.
pub async fn events_for(admin: &Client, node: &str, reason: &str) -> Vec<Event> {
    events_in(admin, "default", node, reason).await
}

/// Events about the object `name` in `namespace` with `reason`.
pub async fn events_in(admin: &Client, namespace: &str, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(admin.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// The value of the series `line` starts with in the exposition `text`
/// (0 when absent).
pub fn series(text: &str, line: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `GET path` on the controller's admin port: the whole HTTP/1.0 answer.
pub async fn admin_get(port: u16, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .await
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The YAML documents of a rendered manifest, empty ones left out.
pub fn docs(manifests: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(manifests)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_yaml::Value| !v.is_null())
        .collect()
}

/// The first document of `kind`.
pub fn find<'a>(docs: &'a [serde_yaml::Value], kind: &str) -> &'a serde_yaml::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// Deletes the Service and waits until it is gone (its load balancer
/// finalizer released).
pub async fn delete_service_and_wait(services: &Api<Service>, name: &str) {
    services
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service gone (finalizer released)", || async {
        match services.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(s) => Err(format!("{:?}", s.metadata.finalizers)),
        }
    })
    .await;
}
