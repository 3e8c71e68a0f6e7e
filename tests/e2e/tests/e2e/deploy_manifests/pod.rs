//! The pod a rendered Deployment or DaemonSet runs: the settings
//! production needs, whichever workload and provider.

use super::*;

/// The pod settings production needs, on the rendered Deployment.
pub(super) fn check_deployment(d: &Value) {
    assert_eq!(d["kind"], "Deployment");
    let spec = &d["spec"];
    assert!(spec["replicas"] == 2 || spec["replicas"] == 1);
    check_rolling_update(spec);
    assert!(spec["template"]["spec"]["affinity"]["podAntiAffinity"].is_mapping());
    check_pod(d);
}

/// maxSurge 0: a surge pod would not fit next to the old one (host
/// network, same port) on a single control-plane node.
pub(super) fn check_rolling_update(spec: &Value) {
    let rolling = &spec["strategy"]["rollingUpdate"];
    assert_eq!(rolling["maxUnavailable"], 1);
    assert_eq!(rolling["maxSurge"], 0);
}

/// The DaemonSet form: one pod per selected node, no replicas.
pub(super) fn check_daemonset(d: &Value) {
    assert_eq!(d["kind"], "DaemonSet");
    let spec = &d["spec"];
    assert!(spec["replicas"].is_null() && spec["strategy"].is_null());
    assert_eq!(spec["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"], 1);
    assert_eq!(
        spec["template"]["spec"]["nodeSelector"]["node-role.kubernetes.io/control-plane"], "",
        "one per control-plane node, as upstream's example manifests"
    );
    check_pod(d);
}

/// The pod template of a Deployment or DaemonSet: what the pod needs
/// whichever workload runs it.
pub(super) fn check_pod(d: &Value) {
    let spec = &d["spec"];
    let labels = spec["template"]["metadata"]["labels"].as_mapping().unwrap();
    for (k, v) in spec["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(labels.get(k), Some(v), "the selector selects the pods");
    }
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let tolerated = strings(&pod["tolerations"], Some("key"));
    for key in [
        "node.cloudprovider.kubernetes.io/uninitialized",
        "node-role.kubernetes.io/control-plane",
        "node.kubernetes.io/not-ready",
    ] {
        assert!(tolerated.contains(&key), "toleration {key}");
    }
    let uninitialized = pod["tolerations"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "node.cloudprovider.kubernetes.io/uninitialized")
        .unwrap();
    assert_eq!(
        uninitialized["operator"], "Exists",
        "any value of the taint is tolerated, as upstream's manifests do"
    );
    // The providers: regular containers, or native sidecars (init
    // containers that keep running).
    let containers = containers_of(pod);
    let sidecars = provider_sidecars(d);
    assert_eq!(
        containers.len(),
        1 + sidecars.len(),
        "the controller + one sidecar per provider"
    );
    for c in &containers {
        let sc = &c["securityContext"];
        assert_eq!(
            sc["readOnlyRootFilesystem"],
            true,
            "{}",
            c["name"].as_str().unwrap()
        );
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"][0], "ALL");
        let mounts = c["volumeMounts"].as_sequence().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m["mountPath"] == "/var/run/cloud-provider"),
            "all share the socket directory"
        );
    }
    let controller = &pod["containers"][0];
    assert_eq!(controller["name"], "cloud-controller-manager");
    // Upstream's serving: HTTPS on 10258, probed over HTTPS.
    assert!(
        strings(&controller["args"], None).contains(&"--secure-port=10258"),
        "{:?}",
        controller["args"]
    );
    assert_eq!(controller["ports"][0]["containerPort"], 10258);
    assert_eq!(controller["ports"][0]["name"], "https");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(controller[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
        assert_eq!(controller[probe]["httpGet"]["port"], "https", "{probe}");
    }
    assert_eq!(controller["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(controller["readinessProbe"]["httpGet"]["path"], "/readyz");
    let probe_timeout = controller["readinessProbe"]["timeoutSeconds"].as_u64();
    let verdict_within = cloud_controller_manager::manager::admin::READYZ_PROBE_DEADLINE;
    assert!(
        probe_timeout.is_some_and(|t| t > verdict_within.as_secs()),
        "kubelet must wait longer than /readyz takes to decide: {probe_timeout:?}"
    );
    let volumes = pod["volumes"].as_sequence().unwrap();
    let volume = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    assert!(
        volume("provider-socket")["emptyDir"].is_mapping(),
        "the socket lives in an emptyDir"
    );

    // Only the controller holds a credential for the cluster: no token is
    // mounted by default, and the projected one goes to the controller
    // container alone.
    assert_eq!(pod["automountServiceAccountToken"], false);
    let token = &volume("kube-api-access")["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(token["path"], "token");
    const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert!(
        strings(&controller["volumeMounts"], Some("mountPath")).contains(&TOKEN_DIR),
        "the controller reads its token where in-cluster clients look"
    );
    let args = strings(&controller["args"], None);
    let mut always_allowed = vec!["/healthz", "/readyz", "/livez"];
    for sidecar in &sidecars {
        let provider = sidecar.container;
        let name = provider["name"].as_str().unwrap();
        // It serves where the controller connects.
        assert_eq!(
            provider["args"][0].as_str(),
            Some(format!("--endpoint=unix://{}", sidecar.socket).as_str()),
            "{name}"
        );
        assert!(
            sidecar.socket.starts_with("/var/run/cloud-provider/"),
            "{name}: the socket in the shared directory"
        );
        // Its liveness through the controller's secure port, which lets
        // the probe in without a token.
        let probe = &provider["livenessProbe"]["httpGet"];
        assert_eq!(probe["path"], sidecar.probe_path.as_str(), "{name}");
        assert_eq!(probe["port"], 10258, "{name}");
        assert_eq!(probe["scheme"], "HTTPS", "{name}");
        always_allowed.push(sidecar.probe_path.as_str());
        for mount in strings(&provider["volumeMounts"], Some("mountPath")) {
            assert!(
                !mount.starts_with("/var/run/secrets/kubernetes.io"),
                "{name} must not see a cluster token: {mount}"
            );
        }
        assert!(
            provider["volumeMounts"]
                .as_sequence()
                .unwrap()
                .iter()
                .all(|m| m["name"] != "kube-api-access"),
            "{name} must not mount the token volume"
        );
    }
    let sockets: std::collections::BTreeSet<&str> =
        sidecars.iter().map(|s| s.socket.as_str()).collect();
    assert_eq!(sockets.len(), sidecars.len(), "one socket per provider");
    let always_allowed = format!(
        "--authorization-always-allow-paths={}",
        always_allowed.join(",")
    );
    assert!(args.contains(&always_allowed.as_str()), "{args:?}");
    check_provider_access(d);
}

/// A provider's sidecar and what the controller expects of it.
pub(super) struct Sidecar<'a> {
    pub(super) name: String,
    pub(super) container: &'a Value,
    /// The socket's path.
    pub(super) socket: String,
    /// The controller's path relaying its health.
    pub(super) probe_path: String,
}

/// The providers the controller container is given, each with its
/// sidecar: `--provider-endpoint`, the sidecar `provider` (one provider);
/// or one `--provider NAME=unix://PATH` each, the sidecar
/// `provider-NAME` (several providers, hybrid mode), never both.
pub(super) fn provider_sidecars(d: &Value) -> Vec<Sidecar<'_>> {
    let pod = pod_spec(d);
    let containers = containers_of(pod);
    let container = |name: &str| {
        *containers
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no container {name}"))
    };
    let args = controller_args(d);
    let endpoint = |flag: &str| {
        args.iter()
            .filter_map(|a| a.strip_prefix(flag))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let single = endpoint("--provider-endpoint=unix://");
    let several = endpoint("--provider=");
    if several.is_empty() {
        assert_eq!(single.len(), 1, "{args:?}");
        return vec![Sidecar {
            name: "default".into(),
            container: container("provider"),
            socket: single[0].clone(),
            probe_path: "/livez/provider".into(),
        }];
    }
    assert!(
        single.is_empty(),
        "--provider and --provider-endpoint: {args:?}"
    );
    several
        .iter()
        .map(|p| {
            let (name, url) = p.split_once('=').unwrap();
            Sidecar {
                name: name.to_owned(),
                container: container(&format!("provider-{name}")),
                socket: url.strip_prefix("unix://").unwrap().to_owned(),
                probe_path: format!("/livez/provider:{name}"),
            }
        })
        .collect()
}

/// The directory of the opt-in provider cluster access.
pub(super) const PROVIDER_ACCESS_DIR: &str = "/var/run/provider-cluster-access";

/// Whether the pod gives a provider cluster access (its volume exists);
/// see [`providers_with_access`].
pub(super) fn check_provider_access(d: &Value) -> bool {
    !providers_with_access(d).is_empty()
}

/// The providers the pod gives cluster access, checking that it is
/// arranged as it must be: the controller writes into an emptyDir of its
/// own (not the socket's) that those providers mount read-only and find
/// as $KUBECONFIG, and no other container; without any, no trace of it.
pub(super) fn providers_with_access(d: &Value) -> Vec<String> {
    let pod = pod_spec(d);
    let containers = containers_of(pod);
    let controller = *containers
        .iter()
        .find(|c| c["name"] == "cloud-controller-manager")
        .unwrap();
    let sidecars = provider_sidecars(d);
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "provider-cluster-access");
    let mount = |c: &Value| {
        c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "provider-cluster-access")
            .cloned()
    };
    let kubeconfig = |c: &Value| {
        c["env"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "KUBECONFIG")
            .map(|e| e["value"].as_str().unwrap().to_owned())
    };
    let args = strings(&controller["args"], None);
    let flag = |name: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("--{name}=")))
            .map(str::to_owned)
    };
    let with_access: Vec<String> = sidecars
        .iter()
        .filter(|s| mount(s.container).is_some())
        .map(|s| s.name.clone())
        .collect();
    for c in &containers {
        let is_sidecar = sidecars.iter().any(|s| s.container["name"] == c["name"]);
        if c["name"] != "cloud-controller-manager" && !is_sidecar {
            assert!(mount(c).is_none(), "{}", c["name"].as_str().unwrap());
        }
    }
    let Some(volume) = volume else {
        assert!(mount(controller).is_none() && with_access.is_empty());
        for s in &sidecars {
            assert_eq!(
                kubeconfig(s.container),
                None,
                "no KUBECONFIG without access"
            );
        }
        assert_eq!(flag("provider-service-account"), None, "{args:?}");
        assert_eq!(flag("provider-kubeconfig-dir"), None, "{args:?}");
        return with_access;
    };
    assert!(!with_access.is_empty(), "the volume, for no provider");
    assert_eq!(volume["emptyDir"]["medium"], "Memory", "{volume:?}");
    let written = mount(controller).unwrap();
    assert_eq!(written["mountPath"], PROVIDER_ACCESS_DIR);
    assert_ne!(written["readOnly"], true, "the controller writes it");
    for s in &sidecars {
        let Some(read) = mount(s.container) else {
            assert_eq!(kubeconfig(s.container), None, "{}: no access", s.name);
            continue;
        };
        assert_eq!(read["mountPath"], PROVIDER_ACCESS_DIR);
        assert_eq!(read["readOnly"], true, "the provider only reads it");
        assert_eq!(
            kubeconfig(s.container).as_deref(),
            Some(format!("{PROVIDER_ACCESS_DIR}/kubeconfig").as_str())
        );
    }
    assert_eq!(
        kubeconfig(controller),
        None,
        "the controller uses its own token"
    );
    assert_eq!(
        flag("provider-kubeconfig-dir").as_deref(),
        Some(PROVIDER_ACCESS_DIR),
        "{args:?}"
    );
    assert!(
        flag("provider-service-account").is_some_and(|sa| sa.ends_with("-provider")),
        "{args:?}"
    );
    // What the controller parses, with one provider or several.
    let mut argv = vec!["cloud-controller-manager".to_owned()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let opts =
        <cloud_controller_manager::config::Options as clap::Parser>::try_parse_from(argv).unwrap();
    opts.validate().unwrap();
    assert_eq!(
        opts.provider_access.provider_kubeconfig_dir.as_deref(),
        Some(std::path::Path::new(PROVIDER_ACCESS_DIR))
    );
    with_access
}

/// What the overlay and the Helm values for the local provider both give:
/// one replica, the inventory and the state mounted into the provider
/// only.
pub(super) fn check_local_provider_pod(d: &Value) {
    assert_eq!(d["spec"]["replicas"], 1, "the data path lives in one pod");
    let pod = &d["spec"]["template"]["spec"];
    let provider = &pod["containers"][1];
    assert_eq!(provider["image"], "ghcr.io/ccm-rs/local-provider:0.1.0");
    let args = strings(&provider["args"], None);
    for want in [
        "--inventory=/etc/local-provider/inventory.yaml",
        "--state-file=/var/lib/local-provider/state.json",
    ] {
        assert!(args.contains(&want), "{args:?}");
    }
    assert_eq!(
        strings(&provider["volumeMounts"], Some("mountPath")),
        [
            "/var/run/cloud-provider",
            "/etc/local-provider",
            "/var/lib/local-provider"
        ]
    );
    assert_eq!(
        strings(&pod["containers"][0]["volumeMounts"], Some("mountPath")),
        [
            "/var/run/cloud-provider",
            "/var/run/secrets/kubernetes.io/serviceaccount"
        ],
        "the controller sees the socket and its own token, not the provider's files"
    );
    assert_eq!(
        strings(&pod["volumes"], Some("name")),
        [
            "kube-api-access",
            "provider-socket",
            "inventory",
            "provider-state"
        ]
    );
    let inventory = &pod["volumes"][2];
    assert_eq!(inventory["configMap"]["name"], "local-provider-inventory");
}

pub(super) fn pod_spec(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]
}

/// The controller container's arguments.
pub(super) fn controller_args(workload: &Value) -> Vec<&str> {
    strings(&pod_spec(workload)["containers"][0]["args"], None)
}

/// The sidecars of the hybrid example (the chart's examples/hybrid.yaml,
/// deploy/overlays/hybrid) in `pod`: `provider-onprem`, the local
/// provider's sidecar of `local` (the workload with it alone) but for its
/// name, socket and liveness path; `provider-cloud`, the fake serving
/// example.com/cloud and declining Services without a class, returned.
pub(super) fn check_hybrid_example_sidecars<'a>(pod: &'a Value, local: &Value) -> &'a Value {
    assert_eq!(
        strings(&pod["containers"], Some("name")),
        [
            "cloud-controller-manager",
            "provider-onprem",
            "provider-cloud"
        ]
    );
    let single = &pod_spec(local)["containers"][1];
    let mut onprem = pod["containers"][1].clone();
    onprem["name"] = single["name"].clone();
    onprem["args"][0] = single["args"][0].clone();
    onprem["livenessProbe"]["httpGet"]["path"] = single["livenessProbe"]["httpGet"]["path"].clone();
    assert_eq!(&onprem, single);
    let cloud = &pod["containers"][2];
    assert_eq!(cloud["image"], "ghcr.io/ccm-rs/fake-provider:0.1.0");
    let cloud_args = strings(&cloud["args"], None);
    for want in [
        "--load-balancer-class=example.com/cloud",
        "--unclassed-services=declined",
    ] {
        assert!(cloud_args.contains(&want), "{cloud_args:?}");
    }
    cloud
}

/// The controller's flags that name providers and route to them, in order.
pub(super) fn routing_flags<'a>(args: &[&'a str]) -> Vec<&'a str> {
    const FLAGS: [&str; 6] = [
        "--provider=",
        "--default-provider=",
        "--provider-node-selector=",
        "--cloud-provider-platforms=",
        "--provider-load-balancer-backends=",
        "--provider-routes=",
    ];
    args.iter()
        .filter(|a| FLAGS.iter().any(|f| a.starts_with(f)))
        .copied()
        .collect()
}

/// A pod spec's containers, native sidecars (init containers that keep
/// running) included.
fn containers_of(pod: &Value) -> Vec<&Value> {
    pod["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .chain(pod["initContainers"].as_sequence().into_iter().flatten())
        .collect()
}
