//! The kustomize overlays (deploy/overlays).

use super::*;

use super::pod::{check_deployment, check_local_provider_pod};

/// `kubectl kustomize deploy/overlays/<overlay>`, checked and dry-run
/// applied (with `applied_too` among what the apiserver accepted); the
/// Deployment for further checks.
fn overlay(name: &str, applied_too: &[&str]) -> Value {
    let rendered = run(
        Command::new(tool("kubectl"))
            .args(["kustomize", &format!("deploy/overlays/{name}")])
            .current_dir(repo()),
        None,
    );
    let docs = docs(&rendered);
    check_deployment(find(&docs, "Deployment"));
    check_rbac(&docs);
    let applied = server_dry_run(&rendered);
    for what in [
        "deployment.apps/cloud-controller-manager",
        "clusterrole.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager",
        "serviceaccount/cloud-controller-manager",
    ]
    .iter()
    .chain(applied_too)
    {
        assert!(
            applied.contains(&format!("{what} serverside-applied (server dry run)")),
            "{applied}"
        );
    }
    find(&docs, "Deployment").clone()
}

#[test]
fn kustomize_overlay_renders_and_passes_server_side_dry_run() {
    let d = overlay("fake", &[]);
    let provider = &d["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(provider["image"], "ghcr.io/ccm-rs/fake-provider:0.1.0");
    // Preferred anti-affinity, as the chart: a single control-plane node
    // still runs the standby.
    let anti = &d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert!(anti["requiredDuringSchedulingIgnoredDuringExecution"].is_null());
    assert_eq!(
        anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
}

#[test]
fn local_overlay_mounts_the_inventory_and_keeps_state() {
    check_local_provider_pod(&overlay("local", &["configmap/local-provider-inventory"]));
}
