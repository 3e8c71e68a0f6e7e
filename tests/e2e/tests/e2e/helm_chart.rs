//! The Helm chart (deploy/helm/ccm-rs) on its own: `helm lint --strict`
//! for every values set, `helm template` output byte for byte equal to the
//! golden files in tests/e2e/golden/helm (`UPDATE_GOLDEN=1` rewrites them),
//! values.schema.json and README.md covering every value, the schema
//! rejecting unknown keys and wrong types, the template's own guards,
//! `--controllers` values the controller parses as meant, the alerts naming
//! only series the controller registers, and NOTES.txt. The same values
//! sets are applied to the real apiserver (server-side dry-run) and their
//! pods and RBAC checked by tests/deploy_manifests.rs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{docs, find};
use cloud_controller_manager::config::{ControllerName, enabled_controllers};
use serde_yaml::Value;

const CHART: &str = "deploy/helm/ccm-rs";
const GOLDEN: &str = "tests/e2e/golden/helm";

/// The values sets: a name (the golden file `<name>.yaml`) and its values
/// file, if any.
const CASES: &[(&str, Option<&str>)] = &[
    ("default", None),
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
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

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

/// `helm template` as the release `ccm` in kube-system, the way the
/// golden files and tests/deploy_manifests.rs render it.
fn template(extra: &[&str]) -> String {
    let mut args = vec!["template", "ccm", CHART, "--namespace=kube-system"];
    args.extend_from_slice(extra);
    helm_ok(&args)
}

fn template_err(extra: &[&str]) -> String {
    let mut args = vec!["template", "ccm", CHART, "--namespace=kube-system"];
    args.extend_from_slice(extra);
    helm_err(&args)
}

fn values_flag(values: Option<&str>) -> Vec<String> {
    values
        .map(|v| format!("--values={v}"))
        .into_iter()
        .collect()
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

#[test]
fn helm_lint_strict_passes_with_every_values_set() {
    check_every_values_file_is_a_case();
    for (name, values) in CASES {
        let mut args = vec!["lint".to_owned(), "--strict".to_owned(), CHART.to_owned()];
        args.extend(values_flag(*values));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = helm_ok(&args);
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{name}: {out}"
        );
        assert!(!out.contains("[WARNING]"), "{name}: {out}");
        assert!(!out.contains("[ERROR]"), "{name}: {out}");
    }
}

/// Where `expected` and `actual` first differ, with a few lines around.
fn first_difference(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let at = (0..e.len().max(a.len()))
        .find(|&i| e.get(i) != a.get(i))
        .unwrap_or(e.len().min(a.len()));
    let from = at.saturating_sub(3);
    let mut out = format!(
        "first difference at line {} (- golden file, + helm template):\n",
        at + 1
    );
    for (sign, lines) in [("-", &e), ("+", &a)] {
        for (i, line) in lines.iter().enumerate().skip(from).take(at - from + 4) {
            let mark = if i == at { sign } else { " " };
            out.push_str(&format!("{mark}{:>5} {line}\n", i + 1));
        }
    }
    out
}

#[test]
fn helm_template_output_matches_the_golden_files() {
    check_every_values_file_is_a_case();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let actual_dir = ccm_testsupport::target_dir().join("helm-golden");
    std::fs::create_dir_all(&actual_dir).unwrap();
    let mut failures = Vec::new();
    for (name, values) in CASES {
        let flags = values_flag(*values);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let actual = template(&flags);
        let golden = format!("{GOLDEN}/{name}.yaml");
        if update {
            std::fs::write(repo().join(&golden), &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(repo().join(&golden)).unwrap_or_default();
        if expected != actual {
            let actual_file = actual_dir.join(format!("{name}.yaml"));
            std::fs::write(&actual_file, &actual).unwrap();
            // Relative to the repository when the target directory is in it.
            let actual_file = actual_file.canonicalize().unwrap_or(actual_file.clone());
            let root = repo().canonicalize().unwrap();
            let shown = actual_file.strip_prefix(&root).unwrap_or(&actual_file);
            failures.push(format!(
                "{golden} differs from `helm template` with {}\n{}  see: diff -u {golden} {}\n",
                values.unwrap_or("the default values"),
                first_difference(&expected, &actual),
                shown.display()
            ));
        }
    }
    // No golden file without a case (a renamed case leaves one behind).
    let names: BTreeSet<String> = CASES.iter().map(|(n, _)| format!("{n}.yaml")).collect();
    for entry in std::fs::read_dir(repo().join(GOLDEN)).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        if file.ends_with(".yaml") && !names.contains(&file) {
            failures.push(format!("{GOLDEN}/{file} belongs to no case: delete it"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nIf the change is intended, regenerate the golden files and review them:\n  \
         UPDATE_GOLDEN=1 cargo test -p ccm-e2e --test e2e helm_chart::helm_template_output_matches_the_golden_files\n  \
         git diff {GOLDEN}",
        failures.join("\n")
    );
}

#[test]
fn values_schema_rejects_unknown_keys_and_wrong_types() {
    let cases: &[(&str, &str)] = &[
        (
            "--set=replica=3",
            "at '': additional properties 'replica' not allowed",
        ),
        (
            "--set=controller.imagePullPolicy=Always",
            "at '/controller': additional properties 'imagePullPolicy' not allowed",
        ),
        (
            "--set=provider.env[0].name=A",
            "at '/provider': additional properties 'env' not allowed",
        ),
        (
            "--set=metrics.serviceMonitor.enable=true",
            "at '/metrics/serviceMonitor': additional properties 'enable' not allowed",
        ),
        (
            "--set=provider.image=my-provider:1.0",
            "at '/provider/image'",
        ),
        ("--set=kind=StatefulSet", "at '/kind'"),
        ("--set=replicas=0", "at '/replicas'"),
        (
            "--set=controller.securePort=0",
            "at '/controller/securePort'",
        ),
        (
            "--set=controller.image.digest=latest",
            "at '/controller/image/digest'",
        ),
        (
            "--set=controller.image.pullPolicy=always",
            "at '/controller/image/pullPolicy'",
        ),
        (
            r#"--set-json=controller.controllers=["cloud-nodes"]"#,
            "at '/controller/controllers/0'",
        ),
        (
            r#"--set-json=controller.extraArgs=["concurrent-service-syncs=20"]"#,
            "at '/controller/extraArgs/0'",
        ),
        (
            r#"--set-json=provider.extraEnv=[{"name":"A","value":"x","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]"#,
            "at '/provider/extraEnv/0'",
        ),
        (
            r#"--set-json=provider.extraEnv=[{"name":"A","valueFrom":{"secretKeyRefs":{"name":"s","key":"k"}}}]"#,
            "at '/provider/extraEnv/0/valueFrom'",
        ),
        (
            r#"--set-json=provider.extraVolumeMounts=[{"name":"x","mountpath":"/x"}]"#,
            "at '/provider/extraVolumeMounts/0'",
        ),
        (
            "--set=tolerations[0].effect=NoScheduled",
            "at '/tolerations/0/effect'",
        ),
        (
            "--set=metrics.serviceMonitor.interval=30",
            "at '/metrics/serviceMonitor/interval'",
        ),
        (
            r#"--set-json=metrics.serviceMonitor.authorization.credentials={"name":"token"}"#,
            "at '/metrics/serviceMonitor/authorization/credentials'",
        ),
        (
            "--set=metrics.prometheusRule.disabled.CCMNoLeaders=true",
            "invalid propertyName 'CCMNoLeaders'",
        ),
        (
            r#"--set-json=metrics.readerClusterRole.subjects=[{"kind":"ServiceAccount"}]"#,
            "at '/metrics/readerClusterRole/subjects/0'",
        ),
    ];
    for (flag, want) in cases {
        let err = template_err(&[flag]);
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(want),
            "{flag}: want {want:?} in:\n{err}"
        );
    }
}

#[test]
fn template_guards_reject_inconsistent_values() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[r#"--set-json=controller.controllers=["*","pv-label"]"#],
            "controller.controllers names pv-label: set controller.pvLabels.enabled=true",
        ),
        (
            &[
                r#"--set-json=controller.controllers=["*","-pv-label"]"#,
                "--set=controller.pvLabels.enabled=true",
            ],
            "controller.controllers disables pv-label while controller.pvLabels.enabled is true",
        ),
        (
            &["--set=metrics.serviceMonitor.enabled=true"],
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
        (
            &[
                "--set=metrics.service.enabled=true",
                "--set=metrics.prometheusRule.enabled=true",
            ],
            "metrics.prometheusRule.enabled needs metrics.serviceMonitor.enabled",
        ),
        (
            &[
                r#"--set-json=metrics.readerClusterRole.subjects=[{"kind":"Group","name":"prometheus"}]"#,
            ],
            "metrics.readerClusterRole.subjects needs metrics.readerClusterRole.create",
        ),
    ];
    for (flags, want) in cases {
        let err = template_err(flags);
        assert!(err.contains(want), "{flags:?}: want {want:?} in:\n{err}");
    }
    // A PrometheusRule for a Prometheus that scrapes the controller some
    // other way: its own matchers in every alert.
    let docs = docs(&template(&[
        "--set=metrics.prometheusRule.enabled=true",
        r#"--set=metrics.prometheusRule.selector=job="kube-system/ccm""#,
    ]));
    let rule = find(&docs, "PrometheusRule");
    for r in rule["spec"]["groups"][0]["rules"].as_sequence().unwrap() {
        let expr = r["expr"].as_str().unwrap();
        assert!(expr.contains(r#"{job="kube-system/ccm"}"#), "{expr}");
    }
}

/// The controller container's `--controllers` value, if rendered.
fn controllers_flag(docs: &[Value]) -> Option<String> {
    find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--controllers="))
        .map(str::to_owned)
        .next()
}

/// Every name and alias the controller knows passes the schema, enables
/// or disables what it says once rendered into `--controllers`, and
/// pv-label is only ever enabled with its RBAC.
#[test]
fn controller_names_the_code_knows_pass_the_schema_and_mean_what_they_say() {
    let only_workload = "--show-only=templates/workload.yaml";
    assert_eq!(
        controllers_flag(&docs(&template(&[only_workload]))),
        None,
        "the default ('*') is the controller's own"
    );
    for c in ControllerName::ALL {
        for name in [c.canonical(), c.alias()] {
            for disable in [false, true] {
                let item = if disable {
                    format!("-{name}")
                } else {
                    name.to_owned()
                };
                let list = format!(r#"--set-json=controller.controllers=["*","{item}"]"#);
                let pv = format!(
                    "--set=controller.pvLabels.enabled={}",
                    c == ControllerName::PvLabel && !disable
                );
                let docs = docs(&template(&[only_workload, &list, &pv]));
                let flag = controllers_flag(&docs).expect("--controllers");
                let parsed: Vec<String> = flag.split(',').map(str::to_owned).collect();
                let enabled = enabled_controllers(&parsed)
                    .unwrap_or_else(|e| panic!("--controllers={flag}: {e}"));
                assert_eq!(enabled.contains(&c), !disable, "--controllers={flag}");
            }
        }
    }
    // pvLabels alone adds it to '*'.
    let docs = docs(&template(&[
        only_workload,
        "--set=controller.pvLabels.enabled=true",
    ]));
    assert_eq!(controllers_flag(&docs).as_deref(), Some("*,pv-label"));
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

type Keys = Vec<String>;

/// The paths (keys) of values.yaml: every key, and the leaves (not a
/// non-empty map).
fn value_paths(prefix: &[String], v: &Value, all: &mut Vec<Keys>, leaves: &mut Vec<Keys>) {
    match v.as_mapping() {
        Some(m) if !m.is_empty() => {
            for (k, child) in m {
                let mut path = prefix.to_vec();
                path.push(k.as_str().unwrap().to_owned());
                all.push(path.clone());
                value_paths(&path, child, all, leaves);
            }
        }
        _ => leaves.push(prefix.to_vec()),
    }
}

/// The keys of README.md's values table, in order.
fn readme_value_keys() -> Vec<String> {
    let readme = read("deploy/helm/ccm-rs/README.md");
    let table = readme
        .split("## Values")
        .nth(1)
        .expect("a Values section")
        .split("\n## ")
        .next()
        .unwrap();
    table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| l.split('`').next().unwrap().to_owned())
        .collect()
}

#[test]
fn every_value_is_in_the_schema_and_the_readme() {
    let values: Value = serde_yaml::from_str(&read("deploy/helm/ccm-rs/values.yaml")).unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(&read("deploy/helm/ccm-rs/values.schema.json")).unwrap();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(schema["additionalProperties"], false, "typos fail");
    let (mut all, mut leaves) = (Vec::new(), Vec::new());
    value_paths(&[], &values, &mut all, &mut leaves);
    for path in &all {
        // A key of a free-form map (nodeSelector, resources.requests).
        let parent = &path[..path.len() - 1];
        let parent_is_open = !parent.is_empty()
            && schema_at(&schema, parent).is_some_and(|p| p.get("properties").is_none());
        assert!(
            schema_at(&schema, path).is_some() || parent_is_open,
            "values.yaml has {path:?}, values.schema.json does not"
        );
    }
    // Every object the schema spells out refuses keys it does not know.
    fn closed(schema: &serde_json::Value, node: &serde_json::Value, at: &str) {
        let node = resolve(schema, node);
        if let Some(props) = node["properties"].as_object() {
            // A Volume has one of many sources: only its name is checked.
            let open = at == ".extraVolumes[]" && node["additionalProperties"] == true;
            assert!(
                open || node["additionalProperties"] == false,
                "{at} accepts unknown keys"
            );
            for (k, child) in props {
                closed(schema, child, &format!("{at}.{k}"));
            }
        }
        if node.get("items").is_some() {
            closed(schema, &node["items"], &format!("{at}[]"));
        }
    }
    closed(&schema, &schema, "");

    let documented: Vec<Keys> = readme_value_keys()
        .iter()
        .map(|k| k.split('.').map(str::to_owned).collect())
        .collect();
    for leaf in &leaves {
        assert!(
            documented.iter().any(|d| leaf.starts_with(d)),
            "README.md's values table lacks {}",
            leaf.join(".")
        );
    }
    for key in &documented {
        assert!(
            all.contains(key),
            "README.md documents {key:?}, values.yaml has no such key"
        );
        assert!(
            schema_at(&schema, key).is_some(),
            "README.md documents {key:?}, the schema has no such key"
        );
    }
}

/// The tokens of a PromQL expression: identifiers and single punctuation
/// characters; string literals (label values) left out.
fn tokens(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_alphabetic() || c == '_' {
            let mut ident = c.to_string();
            while let Some(&n) = chars.peek() {
                if !(n.is_ascii_alphanumeric() || n == '_' || n == ':') {
                    break;
                }
                ident.push(n);
                chars.next();
            }
            out.push(ident);
        } else if c == '"' {
            for n in chars.by_ref() {
                if n == '"' {
                    break;
                }
            }
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// The series an expression selects: identifiers followed by `{`.
fn series_of(expr: &str) -> Vec<String> {
    let t = tokens(expr);
    t.windows(2)
        .filter(|w| is_ident(&w[0]) && w[1] == "{")
        .map(|w| w[0].clone())
        .collect()
}

/// Label names an expression groups or matches by: `by (...)`,
/// `without (...)`, `on (...)`, `ignoring (...)`, and the names of the
/// matchers in `{...}`.
fn labels_of(expr: &str) -> Vec<String> {
    let t = tokens(expr);
    let mut found = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let grouping = [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ];
        if grouping.contains(&t[i].as_str()) && t.get(i + 1).is_some_and(|n| n == "(") {
            i += 2;
            while i < t.len() && t[i] != ")" {
                if is_ident(&t[i]) {
                    found.push(t[i].clone());
                }
                i += 1;
            }
        } else if t[i] == "{" {
            i += 1;
            while i < t.len() && t[i] != "}" {
                let op = t.get(i + 1).is_some_and(|n| n == "=" || n == "!");
                if is_ident(&t[i]) && op {
                    found.push(t[i].clone());
                }
                i += 1;
            }
        }
        i += 1;
    }
    found
}

/// Every `.rs` file under `dir`, with its text.
fn rust_sources(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// The first string literal among the first two arguments of the call
/// whose text starts at `args`: a metric's name in
/// `registry.register("name", ...)`, `encode_descriptor("name", ...)` and
/// `gauge(encoder, "name", ...)`.
fn name_argument(args: &str) -> Option<String> {
    let name = args
        .split(',')
        .take(2)
        .map(str::trim)
        .find_map(|a| a.strip_prefix('"'))?
        .split('"')
        .next()?;
    let metric_like = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':');
    metric_like.then(|| name.to_owned())
}

/// What the controller exports, read from the sources of the crates its
/// binary is built from (`controller/src`, `runtime/src`): the names it
/// registers (`registry.register`) or encodes at scrape time
/// (`encode_descriptor`, `gauge`), and the label names of its label sets
/// (`pub <label>:` fields of the `EncodeLabelSet` structs).
const CONTROLLER_SOURCES: [&str; 2] = ["controller/src", "runtime/src"];

fn registered_metrics() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut sources = Vec::new();
    for crate_src in CONTROLLER_SOURCES {
        rust_sources(&repo().join(crate_src), &mut sources);
    }
    let mut names = BTreeSet::new();
    let mut labels = BTreeSet::new();
    for src in &sources {
        for call in ["registry.register(", "encode_descriptor(", "gauge("] {
            names.extend(src.split(call).skip(1).filter_map(name_argument));
        }
        for rest in src.split("EncodeLabelSet)]").skip(1) {
            let body = rest.split('}').next().unwrap();
            labels.extend(
                body.lines()
                    .filter_map(|l| l.trim().strip_prefix("pub "))
                    .filter_map(|l| l.split_once(':'))
                    .map(|(name, _)| name.to_owned()),
            );
        }
    }
    (names, labels)
}

/// The exposition name `series` comes from: a counter gets `_total`, a
/// histogram `_bucket`, `_sum` and `_count`.
fn is_exported(series: &str, registered: &BTreeSet<String>) -> bool {
    registered.contains(series)
        || ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .any(|suffix| {
                series
                    .strip_suffix(suffix)
                    .is_some_and(|base| registered.contains(base))
            })
}

#[test]
fn alerts_name_only_series_the_controller_registers() {
    let (registered, metric_labels) = registered_metrics();
    for must in [
        "running_managed_controllers",
        "leader_election_master_status",
        "workqueue_depth",
        "ccm_provider_request_errors",
        "ccm_oldest_uninitialized_node_age_seconds",
    ] {
        assert!(
            registered.contains(must),
            "{CONTROLLER_SOURCES:?} parsed: {registered:?}"
        );
    }
    // Labels Prometheus itself attaches to a ServiceMonitor's targets.
    let target_labels = [
        "job",
        "namespace",
        "pod",
        "instance",
        "service",
        "endpoint",
        "container",
    ];
    let docs = docs(&template(&[
        "--values=tests/e2e/golden/helm/values/monitoring.yaml",
    ]));
    let rule = find(&docs, "PrometheusRule");
    let rules = rule["spec"]["groups"][0]["rules"].as_sequence().unwrap();
    let mut alerts = Vec::new();
    for r in rules {
        let alert = r["alert"].as_str().unwrap();
        let expr = r["expr"].as_str().unwrap();
        alerts.push(alert.to_owned());
        let series = series_of(expr);
        assert!(!series.is_empty(), "{alert}: {expr}");
        for s in &series {
            // `up` is Prometheus' own series for every target.
            assert!(
                s == "up" || is_exported(s, &registered),
                "{alert} uses {s}, which the controller ({CONTROLLER_SOURCES:?}) does not register"
            );
        }
        for label in labels_of(expr) {
            assert!(
                target_labels.contains(&label.as_str()) || metric_labels.contains(&label),
                "{alert} uses the label {label}, which no series has: {expr}"
            );
            // The ServiceMonitor's own `service` label hides the
            // provider metrics' (kept as exported_service).
            assert_ne!(label, "service", "{alert}: {expr}");
        }
    }
    // The schema's list of alerts one can disable, and the README's table,
    // name exactly these.
    let schema: serde_json::Value =
        serde_json::from_str(&read("deploy/helm/ccm-rs/values.schema.json")).unwrap();
    let disable = &schema_at(&schema, &["metrics", "prometheusRule", "disabled"]).unwrap()["propertyNames"]
        ["enum"];
    let disable: Vec<String> = serde_json::from_value(disable.clone()).unwrap();
    assert_eq!(disable, alerts, "values.schema.json's disabled names");
    let readme = read("deploy/helm/ccm-rs/README.md");
    let table: Vec<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `CCM"))
        .map(|l| format!("CCM{}", l.split('`').next().unwrap()))
        .collect();
    assert_eq!(table, alerts, "README.md's alert table");
}

#[test]
fn series_and_labels_are_read_from_expressions() {
    let expr = r#"sum by (namespace, method) (rate(a_total{job="x{y}", name!="b"}[5m])) / ignoring (reason) group_left b_count{c=~"d"} or up{}"#;
    assert_eq!(series_of(expr), ["a_total", "b_count", "up"]);
    let labels = labels_of(expr);
    for l in ["namespace", "method", "reason", "job", "name", "c"] {
        assert!(labels.contains(&l.to_owned()), "{l}: {labels:?}");
    }
}

/// NOTES.txt, printed by `helm install`: rendered by a client-side dry-run
/// install against the test apiserver (helm asks it for its version).
#[test]
fn notes_say_how_to_check_the_rollout_the_leader_and_readiness() {
    let control_plane = crate::common::ControlPlane::shared_blocking();
    let env = control_plane.env();
    let kubeconfig = format!("--kubeconfig={}", env.kubeconfig().display());
    // The ServiceMonitor and PrometheusRule are left out: helm install
    // refuses kinds the cluster has no CRD for.
    let cases: [(&[&str], &str, Option<&str>); 4] = [
        (&[], "deployment/cloud-controller-manager", None),
        (
            &["--values=tests/e2e/golden/helm/values/daemonset.yaml"],
            "daemonset/cloud-controller-manager",
            None,
        ),
        (
            &[
                "--set=metrics.service.enabled=true",
                "--set=metrics.readerClusterRole.create=true",
            ],
            "deployment/cloud-controller-manager",
            Some("kubectl auth can-i get /metrics"),
        ),
        (
            &["--values=tests/e2e/golden/helm/values/pv-labels.yaml"],
            "deployment/cloud-controller-manager",
            Some("--controllers=*,-route,pv-label"),
        ),
    ];
    for (flags, workload, extra) in cases {
        let mut args = vec![
            "install".to_owned(),
            "ccm".to_owned(),
            CHART.to_owned(),
            "--namespace=kube-system".to_owned(),
            "--dry-run=client".to_owned(),
            kubeconfig.clone(),
        ];
        args.extend(flags.iter().map(|f| f.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = helm_ok(&args);
        let notes = out
            .split("NOTES:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no NOTES:\n{out}"));
        for want in [
            format!("kubectl -n kube-system rollout status {workload}"),
            "kubectl -n kube-system get lease cloud-controller-manager".to_owned(),
            format!("kubectl -n kube-system port-forward {workload} 10258:10258"),
            "curl -sk https://localhost:10258/readyz".to_owned(),
        ]
        .iter()
        .chain(extra.map(str::to_owned).as_ref())
        {
            assert!(
                notes.contains(want.as_str()),
                "{flags:?}: want {want:?} in:\n{notes}"
            );
        }
        assert!(!notes.contains("<no value>"), "{notes}");
    }
}

/// deploy/grafana's dashboard queries only what the controller exports,
/// grouped by labels its series have.
#[test]
fn the_dashboard_queries_only_series_the_controller_exports() {
    let (registered, metric_labels) = registered_metrics();
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/ccm-rs-dashboard.json")).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let target_labels = ["namespace", "pod", "instance", "job", "le"];
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id reused"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            let series = series_of(expr);
            assert!(!series.is_empty(), "{title}: {expr}");
            for s in &series {
                assert!(
                    is_exported(s, &registered),
                    "{title} queries {s}, which the controller ({CONTROLLER_SOURCES:?}) does not export"
                );
            }
            for label in labels_of(expr) {
                assert!(
                    target_labels.contains(&label.as_str()) || metric_labels.contains(&label),
                    "{title} uses the label {label}, which no series has: {expr}"
                );
            }
        }
    }
}
