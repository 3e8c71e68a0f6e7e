//! The chart's metrics Service, ServiceMonitor and PrometheusRule, and the
//! overrides of every value reaching the objects.

use super::*;

use super::pod::{check_deployment, check_pod, check_rolling_update, controller_args, pod_spec};

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
            provider_access: false,
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
