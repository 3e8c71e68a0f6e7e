//! The kustomize overlays (deploy/overlays).

use super::*;

use super::pod::{check_deployment, check_local_provider_pod, check_provider_access};

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
    check_rendered(&rendered, &BASE_RBAC, applied_too)
}

/// The checks of [`overlay`] on a rendered kustomization.
fn check_rendered(rendered: &str, rbac: &Rbac, applied_too: &[&str]) -> Value {
    let docs = docs(rendered);
    check_deployment(find(&docs, "Deployment"));
    check_rbac_of(&docs, rbac);
    let applied = server_dry_run(rendered);
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

/// The opt-in component added to the fake overlay, as an operator's
/// overlay would (a kustomization in a directory of its own, under
/// target/): the provider's RBAC and directory, the base untouched.
#[test]
fn provider_cluster_access_component_renders_and_passes_server_side_dry_run() {
    let dir = repo()
        .join("target")
        .join(ccm_testsupport::unique_name("kustomize-provider-access"));
    std::fs::create_dir_all(&dir).unwrap();
    // Two levels below the repository: kustomize takes relative paths only.
    std::fs::write(
        dir.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - ../../deploy/overlays/fake\n\
         components:\n  - ../../deploy/components/provider-cluster-access\n",
    )
    .unwrap();
    let rendered = run(
        Command::new(tool("kubectl"))
            .arg("kustomize")
            .arg(&dir)
            .current_dir(repo()),
        None,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let d = check_rendered(
        &rendered,
        &Rbac {
            provider_access: true,
            ..BASE_RBAC
        },
        &[
            "serviceaccount/cloud-controller-manager-provider",
            "clusterrole.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider",
            "role.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider-token",
        ],
    );
    assert!(check_provider_access(&d));
    // The rest of the pod is the overlay's.
    let provider = &d["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(provider["image"], "ghcr.io/ccm-rs/fake-provider:0.1.0");
}
