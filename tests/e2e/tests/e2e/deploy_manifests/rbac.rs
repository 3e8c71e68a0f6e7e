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

/// The fake provider's values.
const FAKE_PROVIDER: &str = "--values=tests/e2e/golden/helm/values/default.yaml";

/// The chart rendered with `values` and the arguments `sets` gives for the
/// namespace, under unique names in a new namespace, applied for real
/// (server-side): `(namespace, fullname, rendered, applied)`.
fn install_chart(
    env: &TestEnv,
    prefix: &str,
    values: &str,
    sets: impl FnOnce(&str) -> Vec<String>,
) -> (String, String, String, String) {
    let kubectl = kubectl(env);
    let ns = ccm_testsupport::unique_name(prefix);
    let name = ccm_testsupport::unique_name("ccm");
    run(kubectl().args(["create", "namespace", &ns]), None);
    let rendered = run(
        Command::new(tool("helm"))
            .args(["template", "ccm", "deploy/helm/ccm-rs"])
            .arg(values)
            .arg(format!("--namespace={ns}"))
            .arg(format!("--set=fullnameOverride={name}"))
            .args(sets(&ns))
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
    (ns, name, rendered, applied)
}

/// Removes what `install_chart` applied: the cluster-scoped objects
/// outlive the namespace.
fn uninstall_chart(env: &TestEnv, rendered: &str) {
    run(
        kubectl(env)().args(["delete", "--wait=false", "-f", "-"]),
        Some(rendered),
    );
}

/// kubectl as the test control plane's admin.
fn kubectl(env: &TestEnv) -> impl Fn() -> Command + '_ {
    move || {
        let mut c = Command::new(tool("kubectl"));
        c.arg(format!("--kubeconfig={}", env.kubeconfig().display()));
        c
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
    let (ns, name, rendered, applied) = install_chart(env, "helm-rbac", FAKE_PROVIDER, |ns| {
        vec![
            "--set=controller.pvLabels.enabled=true".into(),
            "--set=metrics.readerClusterRole.create=true".into(),
            format!(
                "--set-json=metrics.readerClusterRole.subjects=[{{\"kind\":\"ServiceAccount\",\"name\":\"prometheus\",\"namespace\":\"{ns}\"}}]"
            ),
        ]
    });
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
    uninstall_chart(env, &rendered);
}

/// provider.clusterAccess installed for real (under unique names), and
/// with several providers one entry's clusterAccess: the provider's own
/// account reads Nodes and nothing else; the controller may request tokens
/// for that account only.
#[test]
fn helm_provider_cluster_access_installed_grants_reading_nodes_and_one_token() {
    let control_plane = ControlPlane::shared_blocking();
    let env = control_plane.env();
    let hybrid = value_set("hybrid-options");
    let installs: [(&str, &str, Vec<String>); 2] = [
        (
            "helm-provider-access",
            FAKE_PROVIDER,
            vec!["--set=provider.clusterAccess.enabled=true".into()],
        ),
        ("helm-hybrid-access", &hybrid, vec![]),
    ];
    for (prefix, values, sets) in installs {
        check_provider_access_installed(env, prefix, values, sets);
    }
}

fn check_provider_access_installed(env: &TestEnv, prefix: &str, values: &str, sets: Vec<String>) {
    let (ns, name, rendered, applied) = install_chart(env, prefix, values, |_| sets);
    let controller = format!("system:serviceaccount:{ns}:{name}");
    let provider_account = format!("{name}-provider");
    let provider = format!("system:serviceaccount:{ns}:{provider_account}");
    let token_of = |account: &str| format!("serviceaccounts/{account}");
    let (own_token, controller_token, default_token) = (
        token_of(&provider_account),
        token_of(&name),
        token_of("default"),
    );
    let checks: Vec<(&str, Vec<&str>, bool)> = vec![
        (&provider, vec!["get", "nodes"], true),
        (&provider, vec!["list", "nodes"], true),
        (&provider, vec!["watch", "nodes"], true),
        (&provider, vec!["patch", "nodes"], false),
        (
            &provider,
            vec!["patch", "nodes", "--subresource=status"],
            false,
        ),
        (&provider, vec!["delete", "nodes"], false),
        (&provider, vec!["list", "services"], false),
        (&provider, vec!["get", "secrets", "-n", &ns], false),
        (&provider, vec!["list", "secrets", "-A"], false),
        (&provider, vec!["create", "events", "-n", "default"], false),
        (
            &provider,
            vec!["create", "events.events.k8s.io", "-n", "default"],
            false,
        ),
        (
            &provider,
            vec!["create", &own_token, "--subresource=token", "-n", &ns],
            false,
        ),
        (
            &controller,
            vec!["create", &own_token, "--subresource=token", "-n", &ns],
            true,
        ),
        (
            &controller,
            vec![
                "create",
                &controller_token,
                "--subresource=token",
                "-n",
                &ns,
            ],
            false,
        ),
        (
            &controller,
            vec!["create", &default_token, "--subresource=token", "-n", &ns],
            false,
        ),
        (
            &controller,
            vec!["create", &own_token, "--subresource=token", "-n", "default"],
            false,
        ),
        (&controller, vec!["get", &own_token, "-n", &ns], false),
    ];
    for (user, args, want) in &checks {
        assert_eq!(can_i(env, user, args), *want, "{user} {args:?}\n{applied}");
    }
    uninstall_chart(env, &rendered);
}
