//! The Helm chart (deploy/helm/ccm-rs) on its own: `helm lint --strict`
//! for every values set, `helm template` output byte for byte equal to the
//! golden files in tests/e2e/golden/helm (`UPDATE_GOLDEN=1` rewrites them),
//! values.schema.json and README.md covering every value, the schema
//! rejecting unknown keys and wrong types, the template's own guards,
//! `--controllers` values the controller parses as meant, the alerts naming
//! only series the controller registers, and NOTES.txt. The same values
//! sets are applied to the real apiserver (server-side dry-run) and their
//! pods and RBAC checked by deploy_manifests/.

mod metrics;
mod render;
mod values;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{docs, find, repo};
use cloud_controller_manager::config::{ControllerName, enabled_controllers};
use serde_yaml::Value;

const CHART: &str = "deploy/helm/ccm-rs";
const GOLDEN: &str = "tests/e2e/golden/helm";
/// The chart has no default provider image: every render here starts from
/// this values file (the fake provider), which a later values file or
/// `--set` overrides; except a hybrid values file's (one with `providers`),
/// which the chart refuses together with `provider`.
const PROVIDER_VALUES: &str = "tests/e2e/golden/helm/values/default.yaml";
/// The chart's example of several providers (hybrid mode).
const HYBRID_EXAMPLE: &str = "deploy/helm/ccm-rs/examples/hybrid.yaml";
/// Several providers with every per-provider value.
const HYBRID_OPTIONS: &str = "tests/e2e/golden/helm/values/hybrid-options.yaml";

/// The values sets: a name (the golden file `<name>.yaml`) and its values
/// file, if any.
const CASES: &[(&str, Option<&str>)] = &[
    ("default", Some(PROVIDER_VALUES)),
    ("local", Some("deploy/helm/ccm-rs/values-local.yaml")),
    (
        "native-sidecar",
        Some("tests/e2e/golden/helm/values/native-sidecar.yaml"),
    ),
    (
        "daemonset",
        Some("tests/e2e/golden/helm/values/daemonset.yaml"),
    ),
    (
        "monitoring",
        Some("tests/e2e/golden/helm/values/monitoring.yaml"),
    ),
    (
        "pv-labels",
        Some("tests/e2e/golden/helm/values/pv-labels.yaml"),
    ),
    (
        "overrides",
        Some("tests/e2e/golden/helm/values/overrides.yaml"),
    ),
    (
        "provider-cluster-access",
        Some("tests/e2e/golden/helm/values/provider-cluster-access.yaml"),
    ),
    (
        "real-ccm-aws",
        Some("deploy/helm/ccm-rs/examples/real-ccm-aws.yaml"),
    ),
    ("hybrid", Some(HYBRID_EXAMPLE)),
    ("hybrid-options", Some(HYBRID_OPTIONS)),
];

fn helm() -> Command {
    let p = repo().join("target/testenv/bin/helm");
    assert!(
        p.exists(),
        "{} missing: run `make testenv-bin tools-bin` (make test does)",
        p.display()
    );
    let mut c = Command::new(p);
    c.current_dir(repo());
    c
}

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start: {e}"))
}

/// stdout of a helm command that must succeed.
fn helm_ok(args: &[&str]) -> String {
    let out = output(helm().args(args));
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// stderr of a helm command that must fail.
fn helm_err(args: &[&str]) -> String {
    let out = output(helm().args(args));
    assert!(
        !out.status.success(),
        "helm {args:?} succeeded:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// `helm template` as the release `ccm` in kube-system with the provider
/// values, the way the golden files and deploy_manifests/ render it.
fn template(extra: &[&str]) -> String {
    let provider = format!("--values={PROVIDER_VALUES}");
    helm_ok(&template_args(&[&[provider.as_str()], extra].concat()))
}

/// `template` expected to fail: helm's stderr.
fn template_err(extra: &[&str]) -> String {
    let provider = format!("--values={PROVIDER_VALUES}");
    helm_err(&template_args(&[&[provider.as_str()], extra].concat()))
}

/// `template` of several providers, expected to fail: `values` without the
/// provider values; helm's stderr.
fn template_hybrid_err(values: &[&str]) -> String {
    helm_err(&template_args(values))
}

fn template_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["template", "ccm", CHART, "--namespace=kube-system"];
    args.extend_from_slice(extra);
    args
}

/// `--values=` the provider values, then `values` (which may override
/// them); a hybrid values file alone.
fn values_flag(values: Option<&str>) -> Vec<String> {
    let base = (!values.is_some_and(is_hybrid)).then_some(PROVIDER_VALUES);
    base.into_iter()
        .chain(values)
        .map(|v| format!("--values={v}"))
        .collect()
}

/// Whether the values file configures several providers (a non-empty
/// `providers`).
fn is_hybrid(values: &str) -> bool {
    let v: Value = serde_yaml::from_str(&read(values)).unwrap();
    v["providers"].as_sequence().is_some_and(|p| !p.is_empty())
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every values file of tests/e2e/golden/helm/values is a case, so none is
/// left untested.
fn check_every_values_file_is_a_case() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(repo().join(GOLDEN).join("values"))
        .unwrap()
        .map(|e| {
            format!(
                "{GOLDEN}/values/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .collect();
    let cases: BTreeSet<String> = CASES
        .iter()
        .filter_map(|(_, v)| *v)
        .filter(|v| v.starts_with(GOLDEN))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        on_disk, cases,
        "every values file of {GOLDEN}/values is in CASES"
    );
}

/// Resolves `#/definitions/...` references of the schema.
fn resolve<'a>(
    schema: &'a serde_json::Value,
    node: &'a serde_json::Value,
) -> &'a serde_json::Value {
    match node["$ref"].as_str() {
        Some(r) => {
            let name = r.strip_prefix("#/definitions/").expect("local $ref");
            resolve(schema, &schema["definitions"][name])
        }
        None => node,
    }
}

/// The schema node of `path` (keys), following `properties`; `None` when
/// the schema does not know it.
fn schema_at<'a, S: AsRef<str>>(
    schema: &'a serde_json::Value,
    path: &[S],
) -> Option<&'a serde_json::Value> {
    let mut node = schema;
    for key in path {
        node = resolve(schema, node)["properties"].get(key.as_ref())?;
    }
    Some(resolve(schema, node))
}
