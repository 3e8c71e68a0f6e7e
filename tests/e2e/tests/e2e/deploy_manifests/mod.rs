//! deploy/: the kustomize overlay and the Helm chart render, pass the real
//! apiserver's server-side dry-run, carry the security settings the pod
//! needs, and grant exactly the RBAC in deploy/base (the e2e tests run the
//! controller with those files). The chart's value sets are those of
//! tests/e2e/golden/helm/values (helm_chart/ compares their output
//! with golden files); the ServiceMonitor and PrometheusRule, whose CRDs the
//! test apiserver does not have, are left out of the dry-run and checked
//! field by field.

mod helm;
mod kustomize;
mod monitoring;
mod pod;
mod rbac;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ccm_testsupport::TestEnv;

use crate::common::{ControlPlane, docs, find, repo};
use serde_yaml::Value;

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

/// The names of the RBAC objects and the ServiceAccount they bind.
struct Rbac<'a> {
    /// The ClusterRole's name; the others are `<name>:<suffix>`.
    name: &'a str,
    service_account: &'a str,
    /// Whether the opt-in pv-label controller's role is expected.
    pv_labels: bool,
    /// Whether the opt-in provider cluster access is expected: the
    /// provider's ServiceAccount, its ClusterRole and the controller's
    /// token Role (deploy/components/provider-cluster-access).
    provider_access: bool,
}

/// deploy/base's names (and the chart's defaults).
const BASE_RBAC: Rbac = Rbac {
    name: "ccm-rs:cloud-controller-manager",
    service_account: "cloud-controller-manager",
    pv_labels: false,
    provider_access: false,
};

/// The opt-in provider cluster access's files.
const PROVIDER_ACCESS: &str = "deploy/components/provider-cluster-access";

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
    let provider = format!("{name}:provider");
    let provider_token = format!("{name}:provider-token");
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
            n == name
                || (n == pv_labels && rbac.pv_labels)
                || (n == provider && rbac.provider_access)
                || n == metrics_reader,
            "unexpected ClusterRole {n}"
        );
    }
    assert_eq!(
        docs.iter().filter(|d| d["kind"] == "Role").count(),
        1 + usize::from(rbac.provider_access),
        "one Role: leader election (and the provider's tokens when opted in)"
    );
    let provider_account = format!("{}-provider", rbac.service_account);
    let bound_to = |role_kind: &str, role: &str, account: &str| {
        let binding = docs
            .iter()
            .find(|d| {
                d["kind"].as_str().is_some_and(|k| k.ends_with("Binding"))
                    && d["roleRef"]["kind"] == role_kind
                    && d["roleRef"]["name"] == role
            })
            .unwrap_or_else(|| panic!("no binding of the {role_kind} {role}"));
        assert_eq!(
            binding["subjects"].as_sequence().map(Vec::len),
            Some(1),
            "{role}"
        );
        let subject = &binding["subjects"][0];
        assert_eq!(subject["kind"], "ServiceAccount", "{role}");
        assert_eq!(subject["name"], account, "{role}");
        assert_eq!(subject["namespace"], "kube-system", "{role}");
    };
    let bound = |role_kind: &str, role: &str| bound_to(role_kind, role, rbac.service_account);
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
    // The provider's own account reads Nodes; the controller may mint its
    // tokens and no one else's.
    let accounts: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    if rbac.provider_access {
        assert_eq!(
            named(docs, "ClusterRole", &provider)["rules"],
            file(&format!("{PROVIDER_ACCESS}/clusterrole-provider.yaml"))["rules"],
            "the provider's ClusterRole differs from {PROVIDER_ACCESS}"
        );
        bound_to("ClusterRole", &provider, &provider_account);
        let token_role = &named(docs, "Role", &provider_token)["rules"];
        let mut shipped =
            file(&format!("{PROVIDER_ACCESS}/role-provider-token.yaml"))["rules"].clone();
        shipped[0]["resourceNames"][0] = provider_account.clone().into();
        assert_eq!(
            token_role, &shipped,
            "the token Role differs from {PROVIDER_ACCESS}"
        );
        bound("Role", &provider_token);
        assert!(
            accounts.contains(&provider_account.as_str()),
            "{accounts:?}"
        );
    } else {
        assert!(
            !docs
                .iter()
                .any(|d| d["metadata"]["name"] == provider.as_str()
                    || d["metadata"]["name"] == provider_token.as_str()),
            "no provider access unless opted in"
        );
        assert!(
            !accounts.contains(&provider_account.as_str()),
            "{accounts:?}"
        );
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

/// `field` of each item of the sequence `items`, or the items themselves.
fn strings<'a>(items: &'a Value, field: Option<&str>) -> Vec<&'a str> {
    items
        .as_sequence()
        .unwrap()
        .iter()
        .map(|i| field.map_or(i, |f| &i[f]).as_str().unwrap())
        .collect()
}

/// `helm template` of the chart with `values` (flags), as the release
/// `ccm` in kube-system.
fn helm_template(values: &[&str]) -> String {
    // No default provider image: the fake provider unless `values` names
    // another.
    let provider = ["--values=tests/e2e/golden/helm/values/default.yaml"];
    helm_template_hybrid(&[&provider[..], values].concat())
}

/// `helm template` with `values` alone: several providers (`providers`),
/// which the chart refuses together with the fake provider's `provider`.
fn helm_template_hybrid(values: &[&str]) -> String {
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

/// The chart's example of several providers (hybrid mode).
const HYBRID_EXAMPLE: &str = "--values=deploy/helm/ccm-rs/examples/hybrid.yaml";

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
