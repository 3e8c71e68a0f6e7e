//! The kustomize overlays (deploy/overlays): golden files of their
//! output, and each checked and dry-run applied.

use super::*;

use super::pod::{
    check_deployment, check_hybrid_example_sidecars, check_local_provider_pod,
    check_provider_access, controller_args, pod_spec, routing_flags,
};
use crate::common::{Rendered, check_golden};

/// `kubectl kustomize deploy/overlays/<overlay>`.
fn kustomize(name: &str) -> String {
    run(
        Command::new(tool("kubectl"))
            .args(["kustomize", &format!("deploy/overlays/{name}")])
            .current_dir(repo()),
        None,
    )
}

/// The overlay, checked and dry-run applied (with `applied_too` among what
/// the apiserver accepted); the Deployment for further checks.
fn overlay(name: &str, applied_too: &[&str]) -> Value {
    check_rendered(&kustomize(name), &BASE_RBAC, applied_too)
}

const GOLDEN: &str = "tests/e2e/golden/kustomize";

/// Every overlay's output equals its golden file
/// (tests/e2e/golden/kustomize/<overlay>.yaml), so a change to the base or
/// an overlay shows in review as the manifests it changes.
#[test]
fn kustomize_overlays_match_the_golden_files() {
    let mut overlays: Vec<String> = std::fs::read_dir(repo().join("deploy/overlays"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    overlays.sort();
    assert_eq!(
        overlays,
        ["fake", "hybrid", "local"],
        "a new overlay is a case"
    );
    let rendered: Vec<Rendered> = overlays
        .iter()
        .map(|name| Rendered {
            name: name.clone(),
            from: format!("`kubectl kustomize deploy/overlays/{name}`"),
            output: kustomize(name),
        })
        .collect();
    check_golden(
        GOLDEN,
        &rendered,
        "cargo test -p ccm-e2e --test e2e kustomize_overlays_match_the_golden_files",
    );
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

/// Two providers (deploy/overlays/hybrid): the local overlay's provider as
/// "onprem" (the default) and the fake as "cloud", one sidecar and one
/// socket each; the controller's other flags are the base's, and the
/// controller is told what the Helm chart's example tells it.
#[test]
fn hybrid_overlay_runs_one_sidecar_per_provider_and_passes_server_side_dry_run() {
    let d = overlay("hybrid", &["configmap/local-provider-inventory"]);
    assert_eq!(d["spec"]["replicas"], 1, "the local provider's data path");
    let args = controller_args(&d);
    let routing = routing_flags(&args);
    assert_eq!(
        routing,
        [
            "--provider=onprem=unix:///var/run/cloud-provider/onprem.sock",
            "--provider=cloud=unix:///var/run/cloud-provider/cloud.sock",
            "--default-provider=onprem",
            "--cloud-provider-platforms=cloud=cloud",
        ]
    );
    // The base's flags, the providers in place of --provider-endpoint and
    // their liveness paths allowed.
    let base = file("deploy/base/deployment.yaml");
    let mut expected: Vec<&str> = Vec::new();
    for a in strings(
        &base["spec"]["template"]["spec"]["containers"][0]["args"],
        None,
    ) {
        match a {
            "--provider-endpoint=unix:///var/run/cloud-provider/provider.sock" => {
                expected.extend(&routing)
            }
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/livez/provider" => {
                expected.push(
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,\
                     /livez/provider:onprem,/livez/provider:cloud",
                )
            }
            other => expected.push(other),
        }
    }
    assert_eq!(args, expected, "deploy/base's flags");
    // onprem: the local overlay's provider, on its own socket; cloud: set
    // up as the base's provider, with the fake's image and flags.
    let local = docs(&kustomize("local"));
    let mut cloud = check_hybrid_example_sidecars(pod_spec(&d), find(&local, "Deployment")).clone();
    let base_provider = &base["spec"]["template"]["spec"]["containers"][1];
    for key in ["name", "image", "args"] {
        cloud[key] = base_provider[key].clone();
    }
    cloud["livenessProbe"]["httpGet"]["path"] = "/livez/provider".into();
    assert_eq!(&cloud, base_provider);
    // What the chart's example tells the controller.
    let chart = docs(&helm_template_hybrid(&[HYBRID_EXAMPLE]));
    assert_eq!(
        routing_flags(&controller_args(find(&chart, "Deployment"))),
        routing
    );
}
