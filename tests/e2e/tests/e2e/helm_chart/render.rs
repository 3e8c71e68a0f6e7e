//! What the chart renders: `helm lint --strict`, the golden files, and
//! NOTES.txt.

use super::*;

use crate::common::{Rendered, check_golden};

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

#[test]
fn helm_template_output_matches_the_golden_files() {
    check_every_values_file_is_a_case();
    let rendered: Vec<Rendered> = CASES
        .iter()
        .map(|(name, values)| {
            let flags = values_flag(*values);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            Rendered {
                name: name.to_string(),
                from: format!(
                    "`helm template` with {}",
                    values.unwrap_or("the default values")
                ),
                output: helm_ok(&template_args(&flags)),
            }
        })
        .collect();
    check_golden(
        GOLDEN,
        &rendered,
        "cargo test -p ccm-e2e --test e2e helm_template_output_matches_the_golden_files",
    );
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
    let provider = format!("--values={PROVIDER_VALUES}");
    let hybrid = format!("--values={HYBRID_EXAMPLE}");
    let cases: [(Vec<&str>, &str, &[&str]); 5] = [
        (
            vec![&provider],
            "deployment/cloud-controller-manager",
            &["(provider-ready: the provider answers Probe READY)"],
        ),
        (
            vec![
                &provider,
                "--values=tests/e2e/golden/helm/values/daemonset.yaml",
            ],
            "daemonset/cloud-controller-manager",
            &[],
        ),
        (
            vec![
                &provider,
                "--set=metrics.service.enabled=true",
                "--set=metrics.readerClusterRole.create=true",
            ],
            "deployment/cloud-controller-manager",
            &["kubectl auth can-i get /metrics"],
        ),
        (
            vec![
                &provider,
                "--values=tests/e2e/golden/helm/values/pv-labels.yaml",
            ],
            "deployment/cloud-controller-manager",
            &["--controllers=*,-route,pv-label"],
        ),
        // Several providers: each named with its image, and its check.
        (
            vec![&hybrid],
            "deployment/cloud-controller-manager",
            &[
                "with 2 providers, each its own sidecar (container provider-<name>); \
                 the default provider is onprem:\n  \
                 onprem: ghcr.io/ccm-rs/local-provider:",
                "\n  cloud: ghcr.io/ccm-rs/fake-provider:",
                "(provider-ready:<name>: that provider answers Probe READY)",
            ],
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
        let mut wants = vec![
            format!("kubectl -n kube-system rollout status {workload}"),
            "kubectl -n kube-system get lease cloud-controller-manager".to_owned(),
            format!("kubectl -n kube-system port-forward {workload} 10258:10258"),
            "curl -sk https://localhost:10258/readyz".to_owned(),
        ];
        wants.extend(extra.iter().map(|e| e.to_string()));
        for want in &wants {
            assert!(
                notes.contains(want.as_str()),
                "{flags:?}: want {want:?} in:\n{notes}"
            );
        }
        assert!(!notes.contains("<no value>"), "{notes}");
    }
}

/// No default provider image: a render without one fails and says what to
/// set, rather than installing the fake provider on a real cluster.
#[test]
fn the_provider_image_is_required() {
    for args in [
        &["template", "ccm", CHART, "--namespace=kube-system"][..],
        &[
            "template",
            "ccm",
            CHART,
            "--namespace=kube-system",
            "--set=provider.image.tag=1.0.0",
        ],
    ] {
        let out = output(helm().args(args));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "helm {args:?} succeeded:\n{text}");
        assert!(
            text.contains(
                "provider.image.repository is required: the image of your cloud's provider sidecar"
            ),
            "helm {args:?}:\n{text}"
        );
    }
}
