//! The alerts and the dashboard name only series and labels the controller
//! exports.

use super::*;

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

/// The sources of the crates the controller binary is built from.
const CONTROLLER_SOURCES: [&str; 2] = ["controller/src", "runtime/src"];

/// What the controller exports, read from the sources of the crates its
/// binary is built from (`controller/src`, `runtime/src`): the names it
/// registers (`registry.register`) or encodes at scrape time
/// (`encode_descriptor`, `gauge`), and the label names of its label sets
/// (`pub <label>:` fields of the `EncodeLabelSet` structs).
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
