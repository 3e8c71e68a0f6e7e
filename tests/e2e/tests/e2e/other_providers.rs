//! The controller against every provider in the repository, each run as
//! its own process on a socket (the Rust fake, the Go adapter over
//! upstream's fake.Cloud, the Python in-memory example), with one scenario: a Node registered by kubelet is initialised (providerID, zone
//! labels, taint removed), a LoadBalancer Service gets its ingress, and
//! deleting the Service deletes the load balancer and releases the
//! finalizer. The real apiserver, the controller as its ServiceAccount.

use std::path::PathBuf;
use std::process::Command;

use crate::common::*;
use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::{built_binary, unique_name};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

/// The Python in-memory example on the Python SDK, in the venv
/// `hack/python-venv.sh` makes (cached by content hash).
fn python_memory(nodes: &[&str]) -> Provider {
    let out = Command::new(repo().join("hack/python-venv.sh"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hack/python-venv.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let venv = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let mut args = vec![
        repo()
            .join("providers/examples/python-memory/memory_provider.py")
            .display()
            .to_string(),
    ];
    args.extend(nodes.iter().map(|n| format!("--instance={n}")));
    Provider::spawn(
        &venv.join("bin/python"),
        &args,
        &[("PYTHONPATH", repo().join("provider-sdk/python/src"))],
    )
}

/// The Rust fake provider's binary, built now so it is never stale.
fn rust_fake(nodes: &[&str]) -> Provider {
    let bin = built_binary("ccm-fake-provider", "fake-provider");
    // The instances file declaring `nodes`, kept as long as the provider.
    let files = tempfile::tempdir().unwrap();
    let instances = files.path().join("instances.json");
    let entries: Vec<serde_json::Value> = nodes
        .iter()
        .map(|n| serde_json::json!({ "name": n }))
        .collect();
    std::fs::write(&instances, serde_json::to_string(&entries).unwrap()).unwrap();
    let args = vec![
        "--auto-create-instances=false".to_owned(),
        format!("--instances-file={}", instances.display()),
    ];
    let mut p = Provider::spawn(&bin, &args, &[]);
    p._files = Some(files);
    p
}

/// The Go example: k8s.io/cloud-provider's fake.Cloud through the Go
/// adapter, built now with the project's Go settings. Its instances are
/// fixed: conformance-node-1, conformance-node-2 and node-3.
fn go_fake() -> Provider {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("go-fake");
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(repo().join("providers/examples/go-fake"))
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "-trimpath -mod=readonly")
        .status()
        .unwrap();
    assert!(status.success(), "building providers/examples/go-fake");
    let mut p = Provider::spawn(&bin, &[], &[]);
    p._files = Some(dir);
    p
}

/// Initialises a Node, serves a LoadBalancer Service and deletes it again,
/// with the controller talking to `provider`.
async fn node_and_load_balancer_lifecycle(provider: Provider, node: &str, scheme: &str) {
    provider.wait_ready().await;
    let h = Harness::start_against(&provider.endpoint, &["--controllers=*,-route"]).await;

    h.register_node(node).await;
    let n = h
        .wait_for(node, "initialised by the provider", |n| {
            n.is_some_and(|n| !has_taint(n, UNINITIALIZED))
        })
        .await
        .unwrap();
    let provider_id = n.spec.and_then(|s| s.provider_id).unwrap_or_default();
    assert!(
        provider_id.starts_with(&format!("{scheme}://")),
        "{provider_id}"
    );
    let labels = n.metadata.labels.unwrap_or_default();
    assert!(
        labels.contains_key("topology.kubernetes.io/zone"),
        "{labels:?}"
    );

    let services: Api<Service> = Api::namespaced(h.admin.clone(), &h.ns);
    let name = unique_name("lb");
    let svc = crate::common::lb_service(&name, 80);
    services.create(&PostParams::default(), &svc).await.unwrap();
    let ingress = eventually("the Service to get its ingress", || async {
        let s = services.get(&name).await.map_err(|e| e.to_string())?;
        s.status
            .and_then(|s| s.load_balancer?.ingress)
            .filter(|i| !i.is_empty())
            .ok_or_else(|| format!("no ingress yet; provider log:\n{}", provider.log()))
    })
    .await;
    let client =
        ProviderClient::connect_lazy(&provider.endpoint, ClientOptions::default()).unwrap();
    // Not every provider can list (a cloudprovider.Interface cannot).
    let lists = client
        .handshake()
        .await
        .unwrap()
        .has(ccm_provider_sdk::proto::Capability::ListLoadBalancers);
    if lists {
        let listed = client.list_load_balancers("kubernetes").await.unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
    }

    delete_service_and_wait(&services, &name).await;
    if lists {
        let listed = client.list_load_balancers("kubernetes").await.unwrap();
        assert!(listed.is_empty(), "load balancer left behind: {listed:?}");
    }
    println!(
        "{scheme}: node initialised as {provider_id}, ingress {:?}, load balancer deleted",
        ingress[0].ip
    );
    let _ = h.nodes().delete(node, &DeleteParams::default()).await;
    h.stop().await;
}

#[tokio::test]
async fn the_python_memory_provider_drives_the_controller() {
    let node = unique_name("py-node");
    node_and_load_balancer_lifecycle(python_memory(&[&node]), &node, "memory").await;
}

#[tokio::test]
async fn the_go_adapter_over_fake_cloud_drives_the_controller() {
    node_and_load_balancer_lifecycle(go_fake(), "node-3", "fake").await;
}

#[tokio::test]
async fn the_rust_fake_provider_process_drives_the_controller() {
    let node = unique_name("rs-node");
    node_and_load_balancer_lifecycle(rust_fake(&[&node]), &node, "fake").await;
}
