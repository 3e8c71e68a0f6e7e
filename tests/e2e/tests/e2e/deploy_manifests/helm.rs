//! The Helm chart's value sets: each renders the pod and RBAC it should
//! and passes the server-side dry-run.

use super::*;

use super::pod::{
    check_daemonset, check_deployment, check_hybrid_example_sidecars, check_local_provider_pod,
    check_provider_access, controller_args, pod_spec, providers_with_access, routing_flags,
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

/// Several providers (the chart's example): one sidecar and one socket
/// each, the controller told of each, the local provider's sidecar the
/// same as with it alone (values-local.yaml) but for its name, socket and
/// liveness path; as a DaemonSet too.
#[test]
fn helm_hybrid_example_runs_one_sidecar_per_provider_and_passes_server_side_dry_run() {
    let rendered = helm_template_hybrid(&[HYBRID_EXAMPLE]);
    let docs = docs(&rendered);
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    check_rbac(&docs);
    check_labels(&docs);
    assert!(!check_provider_access(deployment));
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(
        !docs.iter().any(|d| d["kind"] == "PodDisruptionBudget"),
        "one replica"
    );
    let args = controller_args(deployment);
    assert_eq!(
        routing_flags(&args),
        [
            "--provider=onprem=unix:///var/run/cloud-provider/onprem.sock",
            "--provider=cloud=unix:///var/run/cloud-provider/cloud.sock",
            "--default-provider=onprem",
            "--cloud-provider-platforms=cloud=cloud",
        ]
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--provider-endpoint")),
        "{args:?}"
    );
    let pod = pod_spec(deployment);
    assert!(pod["initContainers"].is_null());
    check_hybrid_example_sidecars(pod, find(&docs_of_local(), "Deployment"));
    assert_eq!(
        strings(&pod["volumes"], Some("name")),
        [
            "kube-api-access",
            "provider-socket",
            "inventory",
            "provider-state"
        ]
    );
    dry_run_applies(
        &docs,
        &[
            "deployment.apps/cloud-controller-manager",
            "serviceaccount/cloud-controller-manager",
        ],
    );
    // A DaemonSet runs the same pod.
    let daemonset = crate::common::docs(&helm_template_hybrid(&[
        HYBRID_EXAMPLE,
        "--set=kind=DaemonSet",
    ]));
    let ds = find(&daemonset, "DaemonSet");
    check_daemonset(ds);
    assert_eq!(pod_spec(ds)["containers"], pod["containers"]);
    dry_run_applies(&daemonset, &["daemonset.apps/cloud-controller-manager"]);
}

fn docs_of_local() -> Vec<Value> {
    docs(&helm_template(&[
        "--values=deploy/helm/ccm-rs/values-local.yaml",
    ]))
}

/// Every per-provider value reaches its flag or its sidecar: a native
/// sidecar, cluster access for one provider (the shared provider
/// ServiceAccount, mounted into that sidecar only), images by digest,
/// probe timings, resources (by default provider.resources'), the
/// routing flags, and no default provider.
#[test]
fn helm_hybrid_options_reach_the_flags_and_sidecars_and_pass_server_side_dry_run() {
    let docs = docs(&helm_template_hybrid(&[&value_set("hybrid-options")]));
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    check_rbac_of(
        &docs,
        &Rbac {
            provider_access: true,
            ..BASE_RBAC
        },
    );
    check_labels(&docs);
    assert_eq!(providers_with_access(deployment), ["onprem"]);
    let args = controller_args(deployment);
    assert_eq!(
        routing_flags(&args),
        [
            "--provider=onprem=unix:///var/run/cloud-provider/onprem.sock",
            "--provider=cloud=unix:///var/run/cloud-provider/cloud.sock",
            "--provider=edge=unix:///var/run/cloud-provider/edge.sock",
            "--default-provider=",
            "--provider-node-selector=onprem=node.example.com/site=dc1",
            "--provider-load-balancer-backends=onprem=owned",
            "--provider-routes=onprem=false",
            "--cloud-provider-platforms=cloud=cloud,cloud-arm",
            "--provider-load-balancer-backends=cloud=selector:topology.kubernetes.io/region in (eu-1,eu-2),!node.example.com/site",
            "--provider-routes=cloud=true",
            "--provider-node-selector=edge=node.example.com/edge",
        ]
    );
    assert!(args.contains(&"--cluster-cidr=10.244.0.0/16"), "{args:?}");
    let pod = pod_spec(deployment);
    // onprem: a native sidecar, by digest, its own probe timings.
    let onprem = &pod["initContainers"][0];
    assert_eq!(onprem["name"], "provider-onprem");
    assert_eq!(onprem["restartPolicy"], "Always");
    assert_eq!(
        onprem["image"],
        "registry.example.com/onprem-provider@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!(onprem["imagePullPolicy"], "Always");
    let probe = [
        "initialDelaySeconds",
        "periodSeconds",
        "timeoutSeconds",
        "failureThreshold",
    ]
    .map(|k| onprem["livenessProbe"][k].as_u64().unwrap());
    assert_eq!(probe, [30, 10, 3, 5]);
    assert_eq!(onprem["resources"]["requests"]["cpu"], "50m");
    assert!(onprem["resources"]["limits"].is_null(), "given, not merged");
    assert_eq!(
        strings(&pod["containers"], Some("name")),
        [
            "cloud-controller-manager",
            "provider-cloud",
            "provider-edge"
        ]
    );
    // cloud: its secrets and its volume reach it only.
    let cloud = &pod["containers"][1];
    assert_eq!(cloud["image"], "registry.example.com/cloud-provider:2.0.1");
    assert_eq!(cloud["env"][0]["name"], "CLOUD_TOKEN");
    assert_eq!(cloud["envFrom"][0]["secretRef"]["name"], "cloud-extra");
    assert_eq!(
        strings(&cloud["volumeMounts"], Some("mountPath")),
        ["/var/run/cloud-provider", "/etc/cloud"]
    );
    for other in [onprem, &pod["containers"][0], &pod["containers"][2]] {
        assert!(
            other["envFrom"].is_null(),
            "{}",
            other["name"].as_str().unwrap()
        );
    }
    // edge: the defaults.
    let edge = &pod["containers"][2];
    assert_eq!(edge["args"].as_sequence().unwrap().len(), 1);
    assert_eq!(edge["resources"]["requests"]["cpu"], "20m");
    assert_eq!(edge["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(edge["livenessProbe"]["initialDelaySeconds"], 15);
    assert_eq!(
        strings(&pod["volumes"], Some("name")),
        [
            "kube-api-access",
            "provider-socket",
            "provider-cluster-access",
            "cloud-config"
        ]
    );
    dry_run_applies(
        &docs,
        &[
            "deployment.apps/cloud-controller-manager",
            "serviceaccount/cloud-controller-manager-provider",
            "clusterrole.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider",
            "role.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:provider-token",
        ],
    );
}
