//! What the chart renders: `helm lint --strict`, the golden files, and
//! NOTES.txt.

use super::*;

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
            format!("--values={PROVIDER_VALUES}"),
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
