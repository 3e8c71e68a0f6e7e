//! The chart's RBAC installed for real, checked with the apiserver's RBAC
//! authorizer.

use super::*;

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
            .arg("--values=tests/e2e/golden/helm/values/default.yaml")
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

/// provider.clusterAccess installed for real (under unique names): the
/// provider's own account reads Nodes and nothing else; the controller
/// may request tokens for that account only.
#[test]
fn helm_provider_cluster_access_installed_grants_reading_nodes_and_one_token() {
    let control_plane = ControlPlane::shared_blocking();
    let env = control_plane.env();
    let kubectl = || {
        let mut c = Command::new(tool("kubectl"));
        c.arg(format!("--kubeconfig={}", env.kubeconfig().display()));
        c
    };
    let ns = ccm_testsupport::unique_name("helm-provider-access");
    let name = ccm_testsupport::unique_name("ccm");
    run(kubectl().args(["create", "namespace", &ns]), None);
    let rendered = run(
        Command::new(tool("helm"))
            .args(["template", "ccm", "deploy/helm/ccm-rs"])
            .arg(format!("--namespace={ns}"))
            .arg(format!("--set=fullnameOverride={name}"))
            .arg("--values=tests/e2e/golden/helm/values/default.yaml")
            .arg("--set=provider.clusterAccess.enabled=true")
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
    let provider_account = format!("{name}-provider");
    let provider = format!("system:serviceaccount:{ns}:{provider_account}");
    let token_of = |account: &str| format!("serviceaccounts/{account}");
    let checks: Vec<(&str, Vec<String>, bool)> = vec![
        (&provider, vec!["get".into(), "nodes".into()], true),
        (&provider, vec!["list".into(), "nodes".into()], true),
        (&provider, vec!["watch".into(), "nodes".into()], true),
        (&provider, vec!["patch".into(), "nodes".into()], false),
        (
            &provider,
            vec![
                "patch".into(),
                "nodes".into(),
                "--subresource=status".into(),
            ],
            false,
        ),
        (&provider, vec!["delete".into(), "nodes".into()], false),
        (&provider, vec!["list".into(), "services".into()], false),
        (
            &provider,
            vec!["get".into(), "secrets".into(), "-n".into(), ns.clone()],
            false,
        ),
        (
            &provider,
            vec!["list".into(), "secrets".into(), "-A".into()],
            false,
        ),
        (
            &provider,
            vec![
                "create".into(),
                "events".into(),
                "-n".into(),
                "default".into(),
            ],
            false,
        ),
        (
            &provider,
            vec![
                "create".into(),
                "events.events.k8s.io".into(),
                "-n".into(),
                "default".into(),
            ],
            false,
        ),
        (
            &provider,
            vec![
                "create".into(),
                token_of(&provider_account),
                "--subresource=token".into(),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
        (
            &controller,
            vec![
                "create".into(),
                token_of(&provider_account),
                "--subresource=token".into(),
                "-n".into(),
                ns.clone(),
            ],
            true,
        ),
        (
            &controller,
            vec![
                "create".into(),
                token_of(&name),
                "--subresource=token".into(),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
        (
            &controller,
            vec![
                "create".into(),
                token_of("default"),
                "--subresource=token".into(),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
        (
            &controller,
            vec![
                "create".into(),
                token_of(&provider_account),
                "--subresource=token".into(),
                "-n".into(),
                "default".into(),
            ],
            false,
        ),
        (
            &controller,
            vec![
                "get".into(),
                token_of(&provider_account),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
    ];
    for (user, args, want) in &checks {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(can_i(env, user, &args), *want, "{user} {args:?}\n{applied}");
    }
    run(
        kubectl().args(["delete", "--wait=false", "-f", "-"]),
        Some(&rendered),
    );
}
