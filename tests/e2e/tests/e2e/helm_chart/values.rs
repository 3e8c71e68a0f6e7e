//! The chart's values: the schema rejecting unknown keys and wrong types,
//! the template's guards, `--controllers` values the controller parses as
//! meant, and every value in the schema and README.md.

use super::*;

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
        (
            "--set=provider.clusterAccess.enable=true",
            "at '/provider/clusterAccess': additional properties 'enable' not allowed",
        ),
        (
            "--set=provider.clusterAccess.enabled=yes",
            "at '/provider/clusterAccess/enabled'",
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

/// Several providers: the schema checks each entry, the template what the
/// schema cannot (the two forms together, names given twice, an unknown
/// default provider, volume names used twice).
#[test]
fn hybrid_values_are_checked_by_the_schema_and_the_template() {
    let example = format!("--values={HYBRID_EXAMPLE}");
    let long = "a".repeat(55);
    let too_long =
        format!(r#"--set-json=providers=[{{"name":"{long}","image":{{"repository":"x"}}}}]"#);
    let schema: &[(&str, &str)] = &[
        (
            r#"--set-json=providers=[{"name":"Cloud","image":{"repository":"x"}}]"#,
            "at '/providers/0/name'",
        ),
        (&too_long, "at '/providers/0/name'"),
        (
            r#"--set-json=providers=[{"name":"cloud"}]"#,
            "at '/providers/0': missing property 'image'",
        ),
        (
            r#"--set-json=providers=[{"name":"cloud","image":{"repository":""}}]"#,
            "at '/providers/0/image/repository'",
        ),
        (
            r#"--set-json=providers=[{"name":"cloud","image":{"repository":"x"},"env":[]}]"#,
            "at '/providers/0': additional properties 'env' not allowed",
        ),
        (
            r#"--set-json=providers=[{"name":"cloud","image":{"repository":"x"},"loadBalancerBackends":"some"}]"#,
            "at '/providers/0/loadBalancerBackends'",
        ),
        (
            r#"--set-json=providers=[{"name":"cloud","image":{"repository":"x"},"platforms":["Cloud"]}]"#,
            "at '/providers/0/platforms/0'",
        ),
        (
            r#"--set-json=providers=[{"name":"cloud","image":{"repository":"x"},"routes":"no"}]"#,
            "at '/providers/0/routes'",
        ),
        (
            r#"--set-json=providers=[{"name":"cloud","image":{"repository":"x"},"livenessProbe":{"path":"/x"}}]"#,
            "at '/providers/0/livenessProbe': additional properties 'path' not allowed",
        ),
        (
            r#"--set-json=providers=[{"name":"cloud","image":{"repository":"x"},"extraVolumes":[{"emptyDir":{}}]}]"#,
            "at '/providers/0/extraVolumes/0'",
        ),
        ("--set=defaultProvider=On-prem", "at '/defaultProvider'"),
    ];
    for (flag, want) in schema {
        let err = template_hybrid_err(&[&example, flag]);
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(want),
            "{flag}: want {want:?} in:\n{err}"
        );
    }
    let guards: &[(&[&str], &str)] = &[
        (
            &[&format!("--values={PROVIDER_VALUES}"), &example],
            "providers and provider are alternatives: providers (a list, several providers) \
             replaces provider (one provider), but provider.image.repository is set too",
        ),
        (
            &[&example, "--set=provider.clusterAccess.enabled=true"],
            "but provider.clusterAccess.enabled is set too",
        ),
        (
            &[
                &example,
                r#"--set-json=providers=[{"name":"a","image":{"repository":"x"}},{"name":"a","image":{"repository":"y"}}]"#,
            ],
            r#"providers: the name "a" is given twice"#,
        ),
        (
            &[&example, "--set=defaultProvider=edge"],
            r#"defaultProvider "edge" names no entry of providers (onprem, cloud)"#,
        ),
        (
            &[
                &example,
                r#"--set-json=extraVolumes=[{"name":"inventory","emptyDir":{}}]"#,
            ],
            r#"the volume name "inventory" is used twice"#,
        ),
    ];
    for (flags, want) in guards {
        let err = template_hybrid_err(flags);
        assert!(err.contains(want), "{flags:?}: want {want:?} in:\n{err}");
    }
    let err = template_err(&["--set=defaultProvider=onprem"]);
    assert!(
        err.contains("defaultProvider is only for providers (several providers)"),
        "{err}"
    );
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
            // A Volume has one of many sources: only its name is checked
            // (the pod's extraVolumes and each provider's).
            let open = at.ends_with(".extraVolumes[]") && node["additionalProperties"] == true;
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
