//! The Helm chart's value sets: each renders the pod and RBAC it should
//! and passes the server-side dry-run.

use super::*;

use super::pod::{
    check_daemonset, check_deployment, check_local_provider_pod, check_provider_access,
    controller_args, pod_spec,
};

#[test]
fn helm_chart_renders_the_same_pod_and_passes_server_side_dry_run() {
    let rendered = helm_template(&[
        "--set=provider.credentialsSecret=cloud-credentials",
        "--set=controller.clusterCIDR=10.244.0.0/16",
    ]);
    let docs = docs(&rendered);
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    check_rbac(&docs);
    check_labels(&docs);
    assert!(
        !check_provider_access(deployment),
        "the provider has no cluster access unless opted in"
    );
    let containers = &pod_spec(deployment)["containers"];
    assert_eq!(
        containers[1]["envFrom"][0]["secretRef"]["name"],
        "cloud-credentials"
    );
    let args = controller_args(deployment);
    assert!(args.contains(&"--cluster-cidr=10.244.0.0/16"), "{args:?}");
    assert!(
        !args.iter().any(|a| a.starts_with("--controllers")),
        "by default every controller but the opt-in pv-label: {args:?}"
    );
    // Preferred, not required: a cluster with one control-plane node
    // still runs the second replica.
    let anti = &pod_spec(deployment)["affinity"]["podAntiAffinity"];
    assert!(anti["requiredDuringSchedulingIgnoredDuringExecution"].is_null());
    let term = &anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        term["labelSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    // Two replicas: a drain takes at most one.
    let pdb = find(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["selector"], deployment["spec"]["selector"]);
    for kind in ["Service", "ServiceMonitor", "PrometheusRule"] {
        assert!(
            !docs.iter().any(|d| d["kind"] == kind),
            "no {kind} unless asked for"
        );
    }
    dry_run_applies(
        &docs,
        &[
            "deployment.apps/cloud-controller-manager",
            "poddisruptionbudget.policy/cloud-controller-manager",
            "serviceaccount/cloud-controller-manager",
            "clusterrole.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager",
            "role.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:leader-election",
        ],
    );
}

#[test]
fn helm_native_sidecar_starts_the_provider_first_and_passes_server_side_dry_run() {
    let rendered = helm_template(&[&value_set("native-sidecar")]);
    let docs = docs(&rendered);
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    let pod = pod_spec(deployment);
    assert_eq!(pod["containers"].as_sequence().unwrap().len(), 1);
    let sidecar = &pod["initContainers"][0];
    assert_eq!(sidecar["name"], "provider");
    assert_eq!(sidecar["restartPolicy"], "Always");
    dry_run_applies_the_deployment(&rendered);
}

#[test]
fn helm_values_for_the_local_provider_mount_its_inventory_and_state() {
    let rendered = helm_template(&["--values=deploy/helm/ccm-rs/values-local.yaml"]);
    let docs = docs(&rendered);
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    check_local_provider_pod(deployment);
    assert!(
        !docs.iter().any(|d| d["kind"] == "PodDisruptionBudget"),
        "one replica: a PodDisruptionBudget would block every drain"
    );
    dry_run_applies_the_deployment(&rendered);
}

#[test]
fn helm_daemonset_runs_one_pod_per_control_plane_node_and_passes_server_side_dry_run() {
    let docs = docs(&helm_template(&[&value_set("daemonset")]));
    assert!(!docs.iter().any(|d| d["kind"] == "Deployment"));
    let daemonset = find(&docs, "DaemonSet");
    check_daemonset(daemonset);
    check_rbac(&docs);
    assert!(
        pod_spec(daemonset)["affinity"].is_null(),
        "one pod per node already"
    );
    assert!(!docs.iter().any(|d| d["kind"] == "PodDisruptionBudget"));
    dry_run_applies(&docs, &["daemonset.apps/cloud-controller-manager"]);
}

#[test]
fn helm_pv_labels_enables_the_controller_with_its_rbac_and_passes_server_side_dry_run() {
    let docs = docs(&helm_template(&[&value_set("pv-labels")]));
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    check_rbac_of(
        &docs,
        &Rbac {
            pv_labels: true,
            ..BASE_RBAC
        },
    );
    let args = controller_args(deployment);
    assert!(
        args.contains(&"--controllers=*,-route,pv-label"),
        "pv-label is not in '*': named, after the configured list: {args:?}"
    );
    let parsed: Vec<String> = vec!["*".into(), "-route".into(), "pv-label".into()];
    let enabled = cloud_controller_manager::config::enabled_controllers(&parsed).unwrap();
    assert!(
        enabled.contains(&cloud_controller_manager::config::ControllerName::PvLabel),
        "{enabled:?}"
    );
    dry_run_applies(
        &docs,
        &[
            "clusterrole.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:pv-labels",
            "clusterrolebinding.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:pv-labels",
        ],
    );
}

/// provider.clusterAccess.enabled: the provider's ServiceAccount and
/// read-only ClusterRole, the controller's token Role (the rules of
/// deploy/components/provider-cluster-access), the flags, the directory
/// in both containers and $KUBECONFIG in the provider's; with the provider
/// as a native sidecar too.
#[test]
fn helm_provider_cluster_access_renders_its_rbac_and_directory_and_passes_server_side_dry_run() {
    let all = docs(&helm_template(&[&value_set("provider-cluster-access")]));
    let deployment = find(&all, "Deployment");
    check_deployment(deployment);
    assert!(check_provider_access(deployment));
    check_rbac_of(
        &all,
        &Rbac {
            provider_access: true,
            ..BASE_RBAC
        },
    );
    check_labels(&all);
    dry_run_applies(
        &all,
        &[
            "serviceaccount/cloud-controller-manager-provider",
            "clusterrole.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider",
            "clusterrolebinding.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider",
            "role.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider-token",
            "rolebinding.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider-token",
        ],
    );
    // With further environment and as a native sidecar.
    let sidecar = docs(&helm_template(&[
        &value_set("provider-cluster-access"),
        &value_set("native-sidecar"),
        "--set=provider.extraEnv[0].name=MY_CLOUD_REGION",
        "--set=provider.extraEnv[0].value=eu-1",
    ]));
    let deployment = find(&sidecar, "Deployment");
    assert!(check_provider_access(deployment));
    let env = &pod_spec(deployment)["initContainers"][0]["env"];
    assert_eq!(env[0]["name"], "KUBECONFIG");
    assert_eq!(env[1]["name"], "MY_CLOUD_REGION");
    // Without the chart's RBAC or ServiceAccounts, only the pod changes.
    let bare = docs(&helm_template(&[
        &value_set("provider-cluster-access"),
        "--set=rbac.create=false",
        "--set=serviceAccount.create=false",
    ]));
    assert!(check_provider_access(find(&bare, "Deployment")));
    assert_eq!(
        bare.iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["PodDisruptionBudget", "Deployment"]
    );
}
