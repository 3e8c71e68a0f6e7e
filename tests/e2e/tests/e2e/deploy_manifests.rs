//! deploy/: the kustomize overlay and the Helm chart render, pass the real
//! apiserver's server-side dry-run, carry the security settings the pod
//! needs, and grant exactly the RBAC in deploy/base (the e2e tests run the
//! controller with those files). The chart's value sets are those of
//! tests/e2e/golden/helm/values (tests/helm_chart.rs compares their output
//! with golden files); the ServiceMonitor and PrometheusRule, whose CRDs the
//! test apiserver does not have, are left out of the dry-run and checked
//! field by field.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ccm_testsupport::TestEnv;

use crate::common::{ControlPlane, docs, find};
use serde_yaml::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tool(name: &str) -> PathBuf {
    let p = repo().join("target/testenv/bin").join(name);
    assert!(
        p.exists(),
        "{} missing: run `make testenv-bin tools-bin` (make test does)",
        p.display()
    );
    p
}

fn run(cmd: &mut Command, input: Option<&str>) -> String {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(i) = input {
        child.stdin.take().unwrap().write_all(i.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Applies `manifests` with `--server-side --dry-run=server`: the
/// apiserver validates, defaults and admits everything, persisting nothing.
fn server_dry_run(manifests: &str) -> String {
    let control_plane = ControlPlane::shared_blocking();
    let env = control_plane.env();
    run(
        Command::new(tool("kubectl"))
            .arg(format!("--kubeconfig={}", env.kubeconfig().display()))
            .args([
                "apply",
                "--server-side",
                "--dry-run=server",
                "--field-manager=deploy-test",
                "-f",
                "-",
            ]),
        Some(manifests),
    )
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn file(path: &str) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo().join(path)).unwrap()).unwrap()
}

/// The pod settings production needs, on the rendered Deployment.
fn check_deployment(d: &Value) {
    assert_eq!(d["kind"], "Deployment");
    let spec = &d["spec"];
    assert!(spec["replicas"] == 2 || spec["replicas"] == 1);
    check_rolling_update(spec);
    assert!(spec["template"]["spec"]["affinity"]["podAntiAffinity"].is_mapping());
    check_pod(d);
}

/// maxSurge 0: a surge pod would not fit next to the old one (host
/// network, same port) on a single control-plane node.
fn check_rolling_update(spec: &Value) {
    let rolling = &spec["strategy"]["rollingUpdate"];
    assert_eq!(rolling["maxUnavailable"], 1);
    assert_eq!(rolling["maxSurge"], 0);
}

/// The DaemonSet form: one pod per selected node, no replicas.
fn check_daemonset(d: &Value) {
    assert_eq!(d["kind"], "DaemonSet");
    let spec = &d["spec"];
    assert!(spec["replicas"].is_null() && spec["strategy"].is_null());
    assert_eq!(spec["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"], 1);
    assert_eq!(
        spec["template"]["spec"]["nodeSelector"]["node-role.kubernetes.io/control-plane"], "",
        "one per control-plane node, as upstream's example manifests"
    );
    check_pod(d);
}

/// The pod template of a Deployment or DaemonSet: what the pod needs
/// whichever workload runs it.
fn check_pod(d: &Value) {
    let spec = &d["spec"];
    let labels = spec["template"]["metadata"]["labels"].as_mapping().unwrap();
    for (k, v) in spec["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(labels.get(k), Some(v), "the selector selects the pods");
    }
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let tolerated = strings(&pod["tolerations"], Some("key"));
    for key in [
        "node.cloudprovider.kubernetes.io/uninitialized",
        "node-role.kubernetes.io/control-plane",
        "node.kubernetes.io/not-ready",
    ] {
        assert!(tolerated.contains(&key), "toleration {key}");
    }
    let uninitialized = pod["tolerations"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "node.cloudprovider.kubernetes.io/uninitialized")
        .unwrap();
    assert_eq!(
        uninitialized["operator"], "Exists",
        "any value of the taint is tolerated, as upstream's manifests do"
    );
    // The provider: a regular container, or a native sidecar (an init
    // container that keeps running).
    let containers: Vec<&Value> = pod["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .chain(pod["initContainers"].as_sequence().into_iter().flatten())
        .collect();
    assert_eq!(containers.len(), 2, "controller + provider sidecar");
    let named = |name: &str| {
        *containers
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no container {name}"))
    };
    for c in &containers {
        let sc = &c["securityContext"];
        assert_eq!(
            sc["readOnlyRootFilesystem"],
            true,
            "{}",
            c["name"].as_str().unwrap()
        );
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"][0], "ALL");
        let mounts = c["volumeMounts"].as_sequence().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m["mountPath"] == "/var/run/cloud-provider"),
            "both share the socket directory"
        );
    }
    let controller = &pod["containers"][0];
    assert_eq!(controller["name"], "cloud-controller-manager");
    // Upstream's serving: HTTPS on 10258, probed over HTTPS.
    assert!(
        strings(&controller["args"], None).contains(&"--secure-port=10258"),
        "{:?}",
        controller["args"]
    );
    assert_eq!(controller["ports"][0]["containerPort"], 10258);
    assert_eq!(controller["ports"][0]["name"], "https");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(controller[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
        assert_eq!(controller[probe]["httpGet"]["port"], "https", "{probe}");
    }
    assert_eq!(controller["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(controller["readinessProbe"]["httpGet"]["path"], "/readyz");
    let probe_timeout = controller["readinessProbe"]["timeoutSeconds"].as_u64();
    let verdict_within = cloud_controller_manager::manager::admin::READYZ_PROBE_DEADLINE;
    assert!(
        probe_timeout.is_some_and(|t| t > verdict_within.as_secs()),
        "kubelet must wait longer than /readyz takes to decide: {probe_timeout:?}"
    );
    let volumes = pod["volumes"].as_sequence().unwrap();
    let volume = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    assert!(
        volume("provider-socket")["emptyDir"].is_mapping(),
        "the socket lives in an emptyDir"
    );

    // Only the controller holds a credential for the cluster: no token is
    // mounted by default, and the projected one goes to the controller
    // container alone.
    assert_eq!(pod["automountServiceAccountToken"], false);
    let token = &volume("kube-api-access")["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(token["path"], "token");
    const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert!(
        strings(&controller["volumeMounts"], Some("mountPath")).contains(&TOKEN_DIR),
        "the controller reads its token where in-cluster clients look"
    );
    let provider = named("provider");
    // Its liveness through the controller's secure port, which lets the
    // probe in without a token.
    let probe = &provider["livenessProbe"]["httpGet"];
    assert_eq!(probe["path"], "/livez/provider");
    assert_eq!(probe["port"], 10258);
    assert_eq!(probe["scheme"], "HTTPS");
    assert!(
        strings(&controller["args"], None).contains(
            &"--authorization-always-allow-paths=/healthz,/readyz,/livez,/livez/provider"
        ),
        "{:?}",
        controller["args"]
    );
    for mount in strings(&provider["volumeMounts"], Some("mountPath")) {
        assert!(
            !mount.starts_with("/var/run/secrets/kubernetes.io"),
            "the provider must not see a cluster token: {mount}"
        );
    }
    assert!(
        provider["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .all(|m| m["name"] != "kube-api-access"),
        "the provider must not mount the token volume"
    );
}

/// The names of the RBAC objects and the ServiceAccount they bind.
struct Rbac<'a> {
    /// The ClusterRole's name; the others are `<name>:<suffix>`.
    name: &'a str,
    service_account: &'a str,
    /// Whether the opt-in pv-label controller's role is expected.
    pv_labels: bool,
}

/// deploy/base's names (and the chart's defaults).
const BASE_RBAC: Rbac = Rbac {
    name: "ccm-rs:cloud-controller-manager",
    service_account: "cloud-controller-manager",
    pv_labels: false,
};

/// RBAC without wildcards, equal to the files the e2e tests run with.
fn check_rbac(docs: &[Value]) {
    check_rbac_of(docs, &BASE_RBAC);
}

fn check_rbac_of(docs: &[Value], rbac: &Rbac) {
    for d in docs {
        for rule in d["rules"].as_sequence().into_iter().flatten() {
            for field in ["apiGroups", "resources", "verbs", "nonResourceURLs"] {
                for v in rule[field].as_sequence().into_iter().flatten() {
                    assert_ne!(v.as_str(), Some("*"), "wildcard in {rule:?}");
                }
            }
        }
    }
    let name = rbac.name;
    let pv_labels = format!("{name}:pv-labels");
    let metrics_reader = format!("{name}:metrics-reader");
    assert_eq!(
        named(docs, "ClusterRole", name)["rules"],
        file("deploy/base/clusterrole.yaml")["rules"],
        "the ClusterRole differs from deploy/base/clusterrole.yaml"
    );
    assert_eq!(
        named(docs, "Role", &format!("{name}:leader-election"))["rules"],
        file("deploy/base/role-leader-election.yaml")["rules"],
        "the leader-election Role differs from deploy/base"
    );
    // No other role: the controller's grants are exactly these.
    for d in docs.iter().filter(|d| d["kind"] == "ClusterRole") {
        let n = d["metadata"]["name"].as_str().unwrap();
        assert!(
            n == name || (n == pv_labels && rbac.pv_labels) || n == metrics_reader,
            "unexpected ClusterRole {n}"
        );
    }
    assert_eq!(
        docs.iter().filter(|d| d["kind"] == "Role").count(),
        1,
        "one Role: leader election"
    );
    let bound = |role_kind: &str, role: &str| {
        let binding = docs
            .iter()
            .find(|d| {
                d["kind"].as_str().is_some_and(|k| k.ends_with("Binding"))
                    && d["roleRef"]["kind"] == role_kind
                    && d["roleRef"]["name"] == role
            })
            .unwrap_or_else(|| panic!("no binding of the {role_kind} {role}"));
        let subject = &binding["subjects"][0];
        assert_eq!(subject["kind"], "ServiceAccount", "{role}");
        assert_eq!(subject["name"], rbac.service_account, "{role}");
        assert_eq!(subject["namespace"], "kube-system", "{role}");
    };
    bound("ClusterRole", name);
    bound("Role", &format!("{name}:leader-election"));
    // The secure port's TokenReviews and SubjectAccessReviews.
    bound("ClusterRole", "system:auth-delegator");
    if rbac.pv_labels {
        assert_eq!(
            named(docs, "ClusterRole", &pv_labels)["rules"],
            file("deploy/base/clusterrole-pv-labels.yaml")["rules"],
            "the pv-label ClusterRole differs from deploy/base/clusterrole-pv-labels.yaml"
        );
        bound("ClusterRole", &pv_labels);
    }
    if let Some(reader) = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == metrics_reader.as_str())
    {
        let rules: Value =
            serde_yaml::from_str("- nonResourceURLs: [\"/metrics\"]\n  verbs: [\"get\"]").unwrap();
        assert_eq!(reader["rules"], rules, "get on /metrics, nothing else");
    }
}

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

/// `field` of each item of the sequence `items`, or the items themselves.
fn strings<'a>(items: &'a Value, field: Option<&str>) -> Vec<&'a str> {
    items
        .as_sequence()
        .unwrap()
        .iter()
        .map(|i| field.map_or(i, |f| &i[f]).as_str().unwrap())
        .collect()
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

/// What the overlay and the Helm values for the local provider both give:
/// one replica, the inventory and the state mounted into the provider
/// only.
fn check_local_provider_pod(d: &Value) {
    assert_eq!(d["spec"]["replicas"], 1, "the data path lives in one pod");
    let pod = &d["spec"]["template"]["spec"];
    let provider = &pod["containers"][1];
    assert_eq!(provider["image"], "ghcr.io/ccm-rs/local-provider:0.1.0");
    let args = strings(&provider["args"], None);
    for want in [
        "--inventory=/etc/local-provider/inventory.yaml",
        "--state-file=/var/lib/local-provider/state.json",
    ] {
        assert!(args.contains(&want), "{args:?}");
    }
    assert_eq!(
        strings(&provider["volumeMounts"], Some("mountPath")),
        [
            "/var/run/cloud-provider",
            "/etc/local-provider",
            "/var/lib/local-provider"
        ]
    );
    assert_eq!(
        strings(&pod["containers"][0]["volumeMounts"], Some("mountPath")),
        [
            "/var/run/cloud-provider",
            "/var/run/secrets/kubernetes.io/serviceaccount"
        ],
        "the controller sees the socket and its own token, not the provider's files"
    );
    assert_eq!(
        strings(&pod["volumes"], Some("name")),
        [
            "kube-api-access",
            "provider-socket",
            "inventory",
            "provider-state"
        ]
    );
    let inventory = &pod["volumes"][2];
    assert_eq!(inventory["configMap"]["name"], "local-provider-inventory");
}

#[test]
fn local_overlay_mounts_the_inventory_and_keeps_state() {
    check_local_provider_pod(&overlay("local", &["configmap/local-provider-inventory"]));
}

/// `helm template` of the chart with `values` (flags), as the release
/// `ccm` in kube-system.
fn helm_template(values: &[&str]) -> String {
    run(
        Command::new(tool("helm"))
            .args([
                "template",
                "ccm",
                "deploy/helm/ccm-rs",
                "--namespace=kube-system",
            ])
            .args(values)
            .current_dir(repo()),
        None,
    )
}

/// `--values=` a value set of tests/e2e/golden/helm/values.
fn value_set(name: &str) -> String {
    format!("--values=tests/e2e/golden/helm/values/{name}.yaml")
}

/// Kinds whose CRDs (the Prometheus Operator's) the test apiserver lacks.
const CRD_KINDS: [&str; 2] = ["ServiceMonitor", "PrometheusRule"];

/// Server-side dry-run of every document but the CRD kinds: each must be
/// accepted, `applied` (as kubectl names them) among them.
fn dry_run_applies(docs: &[Value], applied: &[&str]) {
    let sent: Vec<String> = docs
        .iter()
        .filter(|d| !CRD_KINDS.iter().any(|k| d["kind"] == *k))
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect();
    let out = server_dry_run(&sent.join("---\n"));
    for what in applied {
        assert!(
            out.contains(&format!("{what} serverside-applied (server dry run)")),
            "{what} not applied:\n{out}"
        );
    }
    assert_eq!(
        out.lines()
            .filter(|l| l.ends_with(" serverside-applied (server dry run)"))
            .count(),
        sent.len(),
        "every document accepted:\n{out}"
    );
}

fn dry_run_applies_the_deployment(rendered: &str) {
    dry_run_applies(
        &docs(rendered),
        &["deployment.apps/cloud-controller-manager"],
    );
}

/// The labels every object of the release carries.
fn check_labels(docs: &[Value]) {
    for d in docs {
        let labels = &d["metadata"]["labels"];
        let what = format!(
            "{} {}",
            d["kind"].as_str().unwrap(),
            d["metadata"]["name"].as_str().unwrap()
        );
        assert!(
            labels["helm.sh/chart"]
                .as_str()
                .is_some_and(|c| c.starts_with("ccm-rs-")),
            "{what}"
        );
        assert_eq!(
            labels["app.kubernetes.io/name"], "cloud-controller-manager",
            "{what}"
        );
        assert_eq!(labels["app.kubernetes.io/instance"], "ccm", "{what}");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{what}");
        assert!(labels["app.kubernetes.io/version"].is_string(), "{what}");
    }
}

fn pod_spec(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]
}

/// The controller container's arguments.
fn controller_args(workload: &Value) -> Vec<&str> {
    strings(&pod_spec(workload)["containers"][0]["args"], None)
}

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

/// The metrics Service selects the pods on their secure port.
fn check_metrics_service(docs: &[Value], workload: &Value, port: u64) -> Value {
    let service = find(docs, "Service");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(
        service["spec"]["selector"],
        workload["spec"]["selector"]["matchLabels"]
    );
    let p = &service["spec"]["ports"][0];
    assert_eq!(p["name"], "https");
    assert_eq!(p["port"], port);
    assert_eq!(p["targetPort"], "https");
    assert_eq!(
        pod_spec(workload)["containers"][0]["ports"][0]["name"],
        "https"
    );
    service.clone()
}

/// The ServiceMonitor scrapes that Service's https port over HTTPS.
fn check_service_monitor(docs: &[Value], service: &Value) -> Value {
    let sm = find(docs, "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    let service_labels = service["metadata"]["labels"].as_mapping().unwrap();
    let selector = sm["spec"]["selector"]["matchLabels"].as_mapping().unwrap();
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(
            service_labels.get(k),
            Some(v),
            "the ServiceMonitor selects the Service"
        );
    }
    assert_eq!(
        sm["spec"]["namespaceSelector"]["matchNames"][0],
        service["metadata"]["namespace"]
    );
    let endpoint = &sm["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "https");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["path"], "/metrics");
    sm.clone()
}

/// The PrometheusRule: alerts with a severity, a summary and a
/// description, each on the ServiceMonitor's job (the Service's name).
fn check_prometheus_rule(docs: &[Value], job_matchers: &str) -> Vec<Value> {
    let rule = find(docs, "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    let rules = rule["spec"]["groups"][0]["rules"].as_sequence().unwrap();
    for r in rules {
        let alert = r["alert"].as_str().unwrap();
        let expr = r["expr"].as_str().unwrap();
        assert!(!expr.is_empty(), "{alert}");
        assert!(r["for"].is_string(), "{alert}");
        assert!(
            ["critical", "warning", "info"].contains(&r["labels"]["severity"].as_str().unwrap()),
            "{alert}"
        );
        if alert.starts_with("CCM") && alert != "CCMProviderSlow" {
            assert!(r["annotations"]["summary"].is_string(), "{alert}");
            assert!(r["annotations"]["description"].is_string(), "{alert}");
            assert!(expr.contains(job_matchers), "{alert}: {expr}");
        }
    }
    rules.clone()
}

#[test]
fn helm_monitoring_scrapes_over_https_and_passes_server_side_dry_run() {
    let docs = docs(&helm_template(&[&value_set("monitoring")]));
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    check_rbac(&docs);
    check_labels(&docs);
    let service = check_metrics_service(&docs, deployment, 10258);
    assert_eq!(
        service["metadata"]["name"],
        "cloud-controller-manager-metrics"
    );
    let sm = check_service_monitor(&docs, &service);
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    let endpoint = &sm["spec"]["endpoints"][0];
    // The default certificate is self-signed; Prometheus authenticates with
    // its own ServiceAccount's token, which the apiserver reviews.
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert!(endpoint["authorization"].is_null());
    let rules = check_prometheus_rule(
        &docs,
        r#"job="cloud-controller-manager-metrics", namespace="kube-system""#,
    );
    let alerts: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    assert_eq!(
        alerts,
        [
            "CCMMetricsUnavailable",
            "CCMNoLeader",
            "CCMNodesNotInitialized",
            "CCMProviderErrors",
            "CCMControllerStopped",
            "CCMLoadBalancerNodeSyncErrors",
            "CCMWorkQueueBacklog",
            "CCMEventsDropped"
        ]
    );
    for r in &rules {
        let url = r["annotations"]["runbook_url"].as_str().unwrap();
        let section = url.split_once("docs/troubleshooting.md#").unwrap().1;
        let doc = std::fs::read_to_string(repo().join("docs/troubleshooting.md")).unwrap();
        assert!(
            doc.lines()
                .filter_map(|l| l.strip_prefix("## "))
                .any(|h| github_anchor(h) == section),
            "{url}: no such section in docs/troubleshooting.md"
        );
    }
    // Whom the metrics-reader ClusterRole is bound to.
    let reader = named(
        &docs,
        "ClusterRoleBinding",
        "ccm-rs:cloud-controller-manager:metrics-reader",
    );
    assert_eq!(
        reader["subjects"][0]["name"],
        "kube-prometheus-stack-prometheus"
    );
    assert_eq!(reader["subjects"][0]["namespace"], "monitoring");
    dry_run_applies(
        &docs,
        &[
            "service/cloud-controller-manager-metrics",
            "poddisruptionbudget.policy/cloud-controller-manager",
            "clusterrole.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:metrics-reader",
            "clusterrolebinding.rbac.authorization.k8s.io/ccm-rs:cloud-controller-manager:metrics-reader",
        ],
    );
}

/// GitHub's anchor of a Markdown heading.
fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn helm_overrides_reach_the_objects_and_pass_server_side_dry_run() {
    let docs = docs(&helm_template(&[&value_set("overrides")]));
    let deployment = named(&docs, "Deployment", "my-ccm");
    assert_eq!(deployment["spec"]["replicas"], 3);
    check_rolling_update(&deployment["spec"]);
    check_pod(deployment);
    check_rbac_of(
        &docs,
        &Rbac {
            name: "ccm-rs:my-ccm",
            service_account: "my-ccm",
            pv_labels: false,
        },
    );
    let pod = pod_spec(deployment);
    let (controller, provider) = (&pod["containers"][0], &pod["containers"][1]);
    assert_eq!(
        controller["image"],
        "registry.example.com/ccm-rs/cloud-controller-manager@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!(controller["imagePullPolicy"], "Always");
    assert_eq!(
        provider["image"],
        "registry.example.com/my-cloud-provider:1.4.2"
    );
    let args = controller_args(deployment);
    for want in [
        "--cluster-name=prod-eu",
        "--cluster-cidr=10.244.0.0/16",
        "--concurrent-service-syncs=20",
        "--tls-cert-file=/etc/ccm-tls/tls.crt",
    ] {
        assert!(args.contains(&want), "{args:?}");
    }
    // The provider's secrets reach the provider only.
    assert_eq!(
        provider["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        "my-cloud"
    );
    assert_eq!(
        provider["envFrom"][0]["secretRef"]["name"],
        "my-cloud-extra"
    );
    assert!(
        strings(&controller["env"], Some("name")) == ["POD_NAME", "RUST_BACKTRACE"],
        "{:?}",
        controller["env"]
    );
    assert_eq!(
        strings(&controller["volumeMounts"], Some("mountPath")),
        [
            "/var/run/cloud-provider",
            "/var/run/secrets/kubernetes.io/serviceaccount",
            "/etc/ccm-tls"
        ]
    );
    assert_eq!(pod["imagePullSecrets"][0]["name"], "registry-example");
    let template = &deployment["spec"]["template"]["metadata"];
    assert_eq!(template["labels"]["example.com/team"], "platform");
    assert_eq!(template["annotations"]["example.com/scrape"], "false");
    assert!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_sequence(),
        "affinity replaces the default"
    );
    assert_eq!(
        named(&docs, "PodDisruptionBudget", "my-ccm")["spec"]["minAvailable"],
        2
    );
    let service = check_metrics_service(&docs, deployment, 443);
    assert_eq!(service["metadata"]["name"], "my-ccm-metrics");
    let sm = check_service_monitor(&docs, &service);
    assert_eq!(sm["metadata"]["namespace"], "monitoring");
    let endpoint = &sm["spec"]["endpoints"][0];
    assert_eq!(endpoint["interval"], "1m");
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], false);
    assert_eq!(endpoint["authorization"]["type"], "Bearer");
    assert_eq!(
        endpoint["authorization"]["credentials"]["name"],
        "ccm-metrics-token"
    );
    assert!(endpoint["bearerTokenFile"].is_null());
    let rules = check_prometheus_rule(&docs, r#"job="my-ccm-metrics", namespace="kube-system""#);
    let alerts: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    assert!(!alerts.contains(&"CCMEventsDropped"), "disabled");
    assert_eq!(
        alerts.last(),
        Some(&"CCMProviderSlow"),
        "extraRules appended"
    );
    for r in &rules[..rules.len() - 1] {
        assert_eq!(r["labels"]["team"], "platform");
        assert!(r["annotations"]["runbook_url"].is_null());
    }
    let backlog = rules
        .iter()
        .find(|r| r["alert"] == "CCMWorkQueueBacklog")
        .unwrap();
    assert!(backlog["expr"].as_str().unwrap().ends_with("> 500"));
    dry_run_applies(&docs, &["deployment.apps/my-ccm", "service/my-ccm-metrics"]);
}

/// `kubectl auth can-i` as `user`: whether the real apiserver's RBAC
/// authorizer allows it.
fn can_i(env: &TestEnv, user: &str, args: &[&str]) -> bool {
    let out = Command::new(tool("kubectl"))
        .arg(format!("--kubeconfig={}", env.kubeconfig().display()))
        .args(["auth", "can-i", &format!("--as={user}")])
        .args(args)
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    match answer.trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl auth can-i {args:?}: {other} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Installed for real (under unique names), the chart's bindings give the
/// controller's ServiceAccount what it calls, the pv-label controller
/// what it needs when enabled, and a scraper `get` on /metrics; nothing
/// else.
#[test]
fn helm_rbac_installed_grants_the_controller_and_a_scraper_what_they_need() {
    // Shared: it applies a ClusterIP Service and RBAC, nothing a controller
    // acts on.
    let control_plane = ControlPlane::shared_blocking();
    let env = control_plane.env();
    let kubectl = || {
        let mut c = Command::new(tool("kubectl"));
        c.arg(format!("--kubeconfig={}", env.kubeconfig().display()));
        c
    };
    let ns = ccm_testsupport::unique_name("helm-rbac");
    let name = ccm_testsupport::unique_name("ccm");
    run(kubectl().args(["create", "namespace", &ns]), None);
    let rendered = run(
        Command::new(tool("helm"))
            .args(["template", "ccm", "deploy/helm/ccm-rs"])
            .arg(format!("--namespace={ns}"))
            .arg(format!("--set=fullnameOverride={name}"))
            .arg("--set=controller.pvLabels.enabled=true")
            .arg("--set=metrics.readerClusterRole.create=true")
            .arg(format!(
                "--set-json=metrics.readerClusterRole.subjects=[{{\"kind\":\"ServiceAccount\",\"name\":\"prometheus\",\"namespace\":\"{ns}\"}}]"
            ))
            .current_dir(repo()),
        None,
    );
    let applied = run(
        kubectl().args([
            "apply",
            "--server-side",
            "--field-manager=deploy-test",
            "-f",
            "-",
        ]),
        Some(&rendered),
    );
    let controller = format!("system:serviceaccount:{ns}:{name}");
    let scraper = format!("system:serviceaccount:{ns}:prometheus");
    let checks: Vec<(&str, Vec<&str>, bool)> = vec![
        (&controller, vec!["patch", "nodes"], true),
        (
            &controller,
            vec!["patch", "nodes", "--subresource=status"],
            true,
        ),
        (&controller, vec!["delete", "nodes"], true),
        (&controller, vec!["watch", "services"], true),
        (
            &controller,
            vec!["patch", "services", "--subresource=status"],
            true,
        ),
        (&controller, vec!["update", "services"], false),
        (&controller, vec!["patch", "services"], false),
        (&controller, vec!["create", "events.events.k8s.io"], true),
        (&controller, vec!["list", "persistentvolumes"], true),
        (&controller, vec!["watch", "persistentvolumes"], true),
        (&controller, vec!["patch", "persistentvolumes"], true),
        (&controller, vec!["delete", "persistentvolumes"], false),
        (
            &controller,
            vec!["create", "tokenreviews.authentication.k8s.io"],
            true,
        ),
        (
            &controller,
            vec!["create", "subjectaccessreviews.authorization.k8s.io"],
            true,
        ),
        (
            &controller,
            vec!["create", "leases.coordination.k8s.io", "-n", &ns],
            true,
        ),
        (
            &controller,
            vec![
                "update",
                "leases.coordination.k8s.io/cloud-controller-manager",
                "-n",
                &ns,
            ],
            true,
        ),
        (
            &controller,
            vec![
                "update",
                "leases.coordination.k8s.io/another-lease",
                "-n",
                &ns,
            ],
            false,
        ),
        (&controller, vec!["get", "secrets", "-n", &ns], false),
        (&scraper, vec!["get", "/metrics"], true),
        (&scraper, vec!["get", "/logs"], false),
        (&scraper, vec!["list", "nodes"], false),
    ];
    for (user, args, want) in &checks {
        assert_eq!(can_i(env, user, args), *want, "{user} {args:?}\n{applied}");
    }
    // The cluster-scoped objects outlive the namespace: remove them.
    run(
        kubectl().args(["delete", "--wait=false", "-f", "-"]),
        Some(&rendered),
    );
}
