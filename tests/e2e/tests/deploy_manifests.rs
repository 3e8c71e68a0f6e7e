//! deploy/: the kustomize overlay and the Helm chart render, pass the real
//! apiserver's server-side dry-run, carry the security settings the pod
//! needs, and grant exactly the RBAC in deploy/base (the e2e tests run the
//! controller with those files).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ccm_testsupport::TestEnv;
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
    let env = TestEnv::get();
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

fn docs(manifests: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(manifests)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn file(path: &str) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo().join(path)).unwrap()).unwrap()
}

/// The pod settings production needs, on the rendered Deployment.
fn check_deployment(d: &Value) {
    let spec = &d["spec"];
    assert!(spec["replicas"] == 2 || spec["replicas"] == 1);
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
    assert!(pod["affinity"]["podAntiAffinity"].is_mapping());
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
    let verdict_within = cloud_controller_manager::runtime::admin::READYZ_PROBE_DEADLINE;
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

/// RBAC without wildcards, equal to the files the e2e tests run with.
fn check_rbac(docs: &[Value]) {
    for d in docs {
        for rule in d["rules"].as_sequence().into_iter().flatten() {
            for field in ["apiGroups", "resources", "verbs"] {
                for v in rule[field].as_sequence().into_iter().flatten() {
                    assert_ne!(v.as_str(), Some("*"), "wildcard in {rule:?}");
                }
            }
        }
    }
    assert_eq!(
        find(docs, "ClusterRole")["rules"],
        file("deploy/base/clusterrole.yaml")["rules"],
        "the ClusterRole differs from deploy/base/clusterrole.yaml"
    );
    assert_eq!(
        find(docs, "Role")["rules"],
        file("deploy/base/role-leader-election.yaml")["rules"],
        "the leader-election Role differs from deploy/base"
    );
    // The secure port's TokenReviews and SubjectAccessReviews.
    let delegator = docs
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == "system:auth-delegator"
        })
        .expect("a ClusterRoleBinding to system:auth-delegator");
    assert_eq!(delegator["subjects"][0]["name"], "cloud-controller-manager");
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

/// `helm template` of the chart with `values` (flags).
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

fn dry_run_applies_the_deployment(rendered: &str) {
    let applied = server_dry_run(rendered);
    assert!(
        applied.contains(
            "deployment.apps/cloud-controller-manager serverside-applied (server dry run)"
        ),
        "{applied}"
    );
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
    let containers = &deployment["spec"]["template"]["spec"]["containers"];
    assert_eq!(
        containers[1]["envFrom"][0]["secretRef"]["name"],
        "cloud-credentials"
    );
    let args = strings(&containers[0]["args"], None);
    assert!(args.contains(&"--cluster-cidr=10.244.0.0/16"), "{args:?}");
    dry_run_applies_the_deployment(&rendered);
}

#[test]
fn helm_native_sidecar_starts_the_provider_first_and_passes_server_side_dry_run() {
    let rendered = helm_template(&["--set=provider.nativeSidecar=true"]);
    let docs = docs(&rendered);
    let deployment = find(&docs, "Deployment");
    check_deployment(deployment);
    let pod = &deployment["spec"]["template"]["spec"];
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
    dry_run_applies_the_deployment(&rendered);
}
