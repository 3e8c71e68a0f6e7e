use super::*;
use clap::Parser;
use std::collections::BTreeSet;

fn parse(args: &[&str]) -> Options {
    let mut all = vec!["cloud-controller-manager"];
    all.extend(args);
    Options::try_parse_from(all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn error_of(args: &[&str]) -> String {
    let mut all = vec!["cloud-controller-manager"];
    all.extend(args);
    Options::try_parse_from(all).unwrap_err().to_string()
}

fn warned(o: &Options) -> BTreeSet<&'static str> {
    let warnings = o.compat_warnings();
    let flags: BTreeSet<_> = warnings.iter().map(|w| w.flag).collect();
    assert_eq!(
        flags.len(),
        warnings.len(),
        "one line per flag: {warnings:?}"
    );
    flags
}

fn set(flags: &[&'static str]) -> BTreeSet<&'static str> {
    flags.iter().copied().collect()
}

/// Args of real upstream manifests, as written there: they parse, pass
/// validation, map as documented and warn about exactly the flags we
/// ignore.
#[test]
fn upstream_manifests_start() {
    // kubernetes/website content/en/examples/admin/cloud/ccm-example.yaml
    let o = parse(&[
        "--cloud-provider=external",
        "--leader-elect=true",
        "--use-service-account-credentials",
        "--allocate-node-cidrs=true",
        "--configure-cloud-routes=true",
        "--cluster-cidr=172.17.0.0/16",
    ]);
    o.validate().unwrap();
    assert!(o.leader_election.leader_elect);
    assert!(o.controllers.configure_cloud_routes);
    assert_eq!(
        warned(&o),
        set(&["use-service-account-credentials", "allocate-node-cidrs"])
    );

    // A typical AWS CCM (kubernetes/cloud-provider-aws DaemonSet).
    let o = parse(&[
        "--cloud-provider=aws",
        "--use-service-account-credentials=true",
        "--configure-cloud-routes=false",
        "--v=2",
    ]);
    o.validate().unwrap();
    assert!(!o.controllers.configure_cloud_routes);
    assert_eq!(o.log_filter(), verbosity_filter(2));
    assert_eq!(warned(&o), set(&["use-service-account-credentials"]));

    // A typical GCP CCM (kubernetes/cloud-provider-gcp).
    let o = parse(&[
        "--cloud-provider=gce",
        "--v=2",
        "--cloud-config=/etc/gce.conf",
        "--allocate-node-cidrs=true",
        "--cluster-cidr=10.64.0.0/14",
        "--cluster-name=my-cluster",
        "--configure-cloud-routes=true",
        "--leader-elect=true",
        "--use-service-account-credentials=true",
        "--bind-address=127.0.0.1",
        "--secure-port=10258",
        "--authentication-kubeconfig=/etc/srv/kubernetes/cloud-controller-manager/kubeconfig",
        "--authorization-kubeconfig=/etc/srv/kubernetes/cloud-controller-manager/kubeconfig",
        "--kubeconfig=/etc/srv/kubernetes/cloud-controller-manager/kubeconfig",
        "--cidr-allocator-type=RangeAllocator",
        "--profiling=false",
    ]);
    o.validate().unwrap();
    assert_eq!(o.controllers.cluster_name, "my-cluster");
    assert_eq!(o.admin.bind_address, std::net::IpAddr::from([127, 0, 0, 1]));
    assert_eq!(o.admin.secure_port, 10258);
    assert_eq!(o.compat.cloud_config.as_deref(), Some("/etc/gce.conf"));
    assert_eq!(
        warned(&o),
        set(&[
            "cloud-config",
            "allocate-node-cidrs",
            "use-service-account-credentials",
            "authentication-kubeconfig",
            "authorization-kubeconfig",
        ]),
        "--cidr-allocator-type and --profiling=false are at their no-op values"
    );
    let cloud_config = o
        .compat_warnings()
        .into_iter()
        .find(|w| w.flag == "cloud-config")
        .unwrap()
        .to_string();
    assert!(
        cloud_config.starts_with(
            "flag accepted for compatibility and ignored: --cloud-config=/etc/gce.conf ("
        ),
        "{cloud_config}"
    );

    // hetznercloud/hcloud-cloud-controller-manager (networks variant).
    let o = parse(&[
        "--allow-untagged-cloud",
        "--cloud-provider=hcloud",
        "--route-reconciliation-period=30s",
        "--webhook-secure-port=0",
        "--allocate-node-cidrs=true",
        "--cluster-cidr=10.244.0.0/16",
        "--leader-elect=false",
    ]);
    o.validate().unwrap();
    assert!(o.compat.allow_untagged_cloud);
    assert!(!o.leader_election.leader_elect);
    assert_eq!(
        o.controllers.route_reconciliation_period,
        std::time::Duration::from_secs(30)
    );
    assert_eq!(warned(&o), set(&["allocate-node-cidrs"]));

    // kubernetes/cloud-provider-openstack DaemonSet.
    let o = parse(&[
        "--v=1",
        "--cluster-name=kubernetes",
        "--cloud-config=/etc/config/cloud.conf",
        "--cloud-provider=openstack",
        "--use-service-account-credentials=false",
        "--bind-address=127.0.0.1",
    ]);
    o.validate().unwrap();
    assert_eq!(o.log_filter(), "info");
    assert_eq!(warned(&o), set(&["cloud-config"]));

    // Everything at once, the example.
    let o = parse(&[
        "--cloud-provider=aws",
        "--use-service-account-credentials",
        "--configure-cloud-routes=false",
        "--v=2",
        "--cloud-config=/etc/kubernetes/cloud.conf",
        "--allocate-node-cidrs=false",
        "--leader-elect=true",
        "--secure-port=10258",
        "--bind-address=127.0.0.1",
        "--authentication-kubeconfig=/etc/kubernetes/ccm.conf",
        "--authorization-kubeconfig=/etc/kubernetes/ccm.conf",
        "--feature-gates=CloudControllerManagerWebhook=false",
        "--logging-format=json",
        "--profiling",
        "--kube-api-content-type=application/json",
        "--leader-elect-resource-lock=leases",
        "--master=https://10.0.0.1:6443",
    ]);
    o.validate().unwrap();
    assert_eq!(o.log_format(), LogFormat::Json);
    assert_eq!(o.compat.master.as_deref(), Some("https://10.0.0.1:6443"));
    assert_eq!(
        o.compat.feature_gates,
        vec![FeatureGate {
            name: "CloudControllerManagerWebhook".into(),
            enabled: false
        }]
    );
    assert_eq!(
        warned(&o),
        set(&[
            "use-service-account-credentials",
            "cloud-config",
            "authentication-kubeconfig",
            "authorization-kubeconfig",
            "feature-gates",
        ])
    );
}

/// Section 6.2 of the upstream reference, one representative value each.
const UPSTREAM_FLAGS: &[&str] = &[
    // generic
    "--cloud-provider=external",
    "--cloud-config=/etc/cloud.conf",
    "--cluster-name=prod",
    "--cluster-cidr=10.244.0.0/16,fd00::/56",
    "--allocate-node-cidrs=true",
    "--cidr-allocator-type=CloudAllocator",
    "--configure-cloud-routes=false",
    "--route-reconciliation-period=1m",
    "--node-monitor-period=10s",
    "--use-service-account-credentials",
    "--external-cloud-volume-plugin=aws",
    "--allow-untagged-cloud=true",
    "--node-sync-period=10s",
    "--controllers=*,-route",
    "--min-resync-period=6h",
    "--kube-api-qps=50",
    "--kube-api-burst=100",
    "--kube-api-content-type=application/json",
    "--controller-start-interval=2s",
    "--leader-elect=false",
    "--leader-elect-lease-duration=30s",
    "--leader-elect-renew-deadline=5s",
    "--leader-elect-retry-period=4s",
    "--leader-elect-resource-lock=leases",
    "--leader-elect-resource-name=ccm",
    "--leader-elect-resource-namespace=kube-system",
    "--feature-gates=CloudControllerManagerWebhook=true,CloudControllerManagerWatchBasedRoutesReconciliation=false",
    // cloud-node, service
    "--concurrent-node-syncs=2",
    "--concurrent-node-status-updates=4",
    "--concurrent-service-syncs=3",
    // misc
    "--master=https://127.0.0.1:6443",
    "--kubeconfig=/etc/kubernetes/ccm.conf",
    "--node-status-update-frequency=1m",
    // debugging
    "--profiling=false",
    "--contention-profiling",
    // leader migration
    "--enable-leader-migration",
    "--leader-migration-config=/etc/migration.yaml",
    // secure serving
    "--bind-address=127.0.0.1",
    "--secure-port=10258",
    "--cert-dir=/var/run/ccm",
    "--tls-cert-file=/etc/tls.crt",
    "--tls-private-key-file=/etc/tls.key",
    "--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384",
    "--tls-curve-preferences=X25519,CurveP256",
    "--tls-min-version=VersionTLS12",
    "--tls-sni-cert-key=/etc/a.crt,/etc/a.key:*.example.com",
    "--http2-max-streams-per-connection=1000",
    "--disable-http2-serving",
    "--permit-port-sharing=true",
    "--permit-address-sharing",
    // authentication
    "--authentication-kubeconfig=/etc/kubernetes/ccm.conf",
    "--authentication-token-webhook-cache-ttl=30s",
    "--authentication-skip-lookup",
    "--authentication-tolerate-lookup-failure=true",
    "--client-ca-file=/etc/ca.crt",
    "--requestheader-client-ca-file=/etc/front-proxy-ca.crt",
    "--requestheader-allowed-names=front-proxy-client",
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-uid-headers=X-Remote-Uid",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    // authorization
    "--authorization-kubeconfig=/etc/kubernetes/ccm.conf",
    "--authorization-webhook-cache-authorized-ttl=1m",
    "--authorization-webhook-cache-unauthorized-ttl=5s",
    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    // webhook
    "--webhooks=*",
    "--webhook-bind-address=127.0.0.1",
    "--webhook-secure-port=10260",
    "--webhook-cert-dir=/var/run/ccm-webhook",
    "--webhook-tls-cert-file=/etc/w.crt",
    "--webhook-tls-private-key-file=/etc/w.key",
    "--webhook-tls-cipher-suites=TLS_AES_128_GCM_SHA256",
    "--webhook-tls-curve-preferences=X25519",
    "--webhook-tls-min-version=VersionTLS13",
    "--webhook-tls-sni-cert-key=/etc/w.crt,/etc/w.key",
    "--webhook-disable-http2-serving=true",
    // node-ipam
    "--service-cluster-ip-range=10.96.0.0/12",
    "--node-cidr-mask-size=24",
    "--node-cidr-mask-size-ipv4=25",
    "--node-cidr-mask-size-ipv6=80",
    // global / logging
    "-v=4",
    "--vmodule=node_controller=4",
    "--logging-format=text",
    "--log-flush-frequency=10s",
    "--log-text-split-stream",
    "--log-text-info-buffer-size=1Mi",
    "--log-json-split-stream=false",
    "--log-json-info-buffer-size=0",
    "--logtostderr=false",
    "--alsologtostderr",
    "--log-dir=/var/log",
    "--log_dir=/var/log",
    "--log-file=/var/log/ccm.log",
    "--log_file=/var/log/ccm.log",
    "--log-file-max-size=100",
    "--skip-headers",
    "--skip-log-headers=true",
    "--add-dir-header",
    "--one-output=true",
    "--stderrthreshold=INFO",
    "--stderrthreshold=1",
    "--log-backtrace-at=node_controller.go:100",
];

#[test]
fn every_upstream_flag_parses() {
    for flag in UPSTREAM_FLAGS {
        // The serving certificate and its key go together, as upstream.
        let partner = match flag.split('=').next() {
            Some("--tls-cert-file") => Some("--tls-private-key-file=/etc/tls.key"),
            Some("--tls-private-key-file") => Some("--tls-cert-file=/etc/tls.crt"),
            _ => None,
        };
        let o = parse(
            &[Some(*flag), partner]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>(),
        );
        o.validate().unwrap_or_else(|e| panic!("{flag}: {e}"));
    }
    // And all of them together (later repetitions win, as Go's flags).
    let o = parse(UPSTREAM_FLAGS);
    o.validate().unwrap();
    // Every ignored flag is in the list above.
    for spec in IGNORED {
        let long = format!("--{}=", spec.name);
        let bare = format!("--{}", spec.name);
        assert!(
            UPSTREAM_FLAGS
                .iter()
                .any(|f| f.starts_with(&long) || **f == bare),
            "{} is not exercised",
            spec.name
        );
    }
}

#[test]
fn unknown_flags_and_bad_values_still_fail() {
    for (args, message) in [
        (&["--bogus"][..], "unexpected argument '--bogus'"),
        (&["--cloud-confg=/x"], "unexpected argument '--cloud-confg'"),
        (
            &["--use-service-account-credentials=maybe"],
            "invalid boolean",
        ),
        (
            &["--leader-elect", "false"],
            "unrecognized subcommand 'false'",
        ),
        (&["--secure-port=70000"], "70000"),
        (&["--v=-1"], "invalid value '-1'"),
        (&["--logging-format=yaml"], "possible values: text, json"),
        (&["--feature-gates=Foo"], "missing bool value for Foo"),
        (&["--feature-gates=Foo=maybe"], "invalid value of Foo=maybe"),
        (&["--node-sync-period=10"], "invalid duration"),
        (&["--http2-max-streams-per-connection=x"], "invalid integer"),
        (&["--stderrthreshold=LOUD"], "invalid severity"),
        (&["--master=10.0.0.1:6443"], "--master must be a URL"),
    ] {
        let err = error_of(args);
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

#[test]
fn go_booleans() {
    for (arg, want) in [
        ("--leader-elect", true),
        ("--leader-elect=true", true),
        ("--leader-elect=false", false),
        ("--leader-elect=0", false),
        ("--leader-elect=T", true),
    ] {
        assert_eq!(parse(&[arg]).leader_election.leader_elect, want, "{arg}");
    }
    assert!(
        parse(&["--configure-cloud-routes"])
            .controllers
            .configure_cloud_routes
    );
    assert!(
        !parse(&["--configure-cloud-routes=False"])
            .controllers
            .configure_cloud_routes
    );
    assert!(!parse(&[]).compat.allow_untagged_cloud);
    assert!(
        parse(&["--allow-untagged-cloud"])
            .compat
            .allow_untagged_cloud
    );
    assert!(
        !parse(&["--allow-untagged-cloud=false"])
            .compat
            .allow_untagged_cloud
    );
    let o = parse(&["--use-service-account-credentials=false"]);
    assert_eq!(
        o.compat.ignored.get("use-service-account-credentials"),
        Some(&["false".to_owned()][..])
    );
    assert!(warned(&o).is_empty());
}

#[test]
fn verbosity_maps_onto_the_tracing_filter() {
    for args in [
        &["-v=3"][..],
        &["--v=3"],
        &["-v", "3"],
        &["--v", "3"],
        &["-v3"],
    ] {
        assert_eq!(parse(args).compat.verbosity, Some(3), "{args:?}");
    }
    assert_eq!(parse(&[]).log_filter(), "info");
    assert_eq!(parse(&["--v=0"]).log_filter(), "info");
    assert_eq!(parse(&["--v=1"]).log_filter(), "info");
    assert_eq!(
        parse(&["--v=2"]).log_filter(),
        "info,cloud_controller_manager=debug,ccm_runtime=debug,ccm_provider_sdk=debug"
    );
    assert_eq!(
        parse(&["--v=10"]).log_filter(),
        "info,cloud_controller_manager=trace,ccm_runtime=trace,ccm_provider_sdk=trace"
    );
    // The last one wins, as Go's flags.
    assert_eq!(parse(&["--v=2", "--v=5"]).compat.verbosity, Some(5));
    for v in [0, 2, 4] {
        tracing_subscriber::EnvFilter::try_new(verbosity_filter(v)).unwrap();
    }
}

#[test]
fn logging_format_is_log_format() {
    assert_eq!(
        parse(&["--logging-format=text"]).log_format(),
        LogFormat::Plain
    );
    assert_eq!(
        parse(&["--logging-format=json"]).log_format(),
        LogFormat::Json
    );
    let o = parse(&["--logging-format=json", "--log-format=json"]);
    o.validate().unwrap();
    assert_eq!(o.log_format(), LogFormat::Json);
    let o = parse(&["--logging-format=json", "--log-format=plain"]);
    assert_eq!(
        o.validate().unwrap_err().to_string(),
        "--logging-format=json and --log-format=plain disagree; give one"
    );
}

#[test]
fn serving_flags_are_upstreams_and_checked_together() {
    let o = parse(&["--secure-port=9443", "--admin-port=9000"]);
    o.validate().unwrap();
    assert_eq!((o.admin.secure_port, o.admin.admin_port), (9443, 9000));
    assert!(o.compat_warnings().is_empty(), "both are flags of ours");
    let o = parse(&["--secure-port=0"]);
    o.validate().unwrap();
    assert_eq!(o.admin.secure_port, 0);
    for (args, message) in [
        (
            &["--secure-port=9443", "--admin-port=9443"][..],
            "--admin-port=9443 and --secure-port=9443: one port cannot serve both plain HTTP and HTTPS",
        ),
        (
            &["--tls-cert-file=/etc/tls.crt"],
            "--tls-cert-file and --tls-private-key-file go together: give both or neither",
        ),
        (
            &["--tls-private-key-file=/etc/tls.key"],
            "--tls-cert-file and --tls-private-key-file go together: give both or neither",
        ),
    ] {
        assert_eq!(
            parse(args).validate().unwrap_err().to_string(),
            message,
            "{args:?}"
        );
    }
    let o = parse(&["--authorization-always-allow-paths=/healthz,/metrics*"]);
    assert_eq!(
        o.admin.authorization_always_allow_paths,
        ["/healthz", "/metrics*"]
    );
}

#[test]
fn only_leases_lock() {
    parse(&["--leader-elect-resource-lock=leases"])
        .validate()
        .unwrap();
    for lock in ["endpoints", "configmapsleases", "endpointsleases"] {
        let o = parse(&[&format!("--leader-elect-resource-lock={lock}")]);
        assert_eq!(
            o.validate().unwrap_err().to_string(),
            "resourceLock value must be \"leases\""
        );
        // Without leader election upstream does not check it either.
        let o = parse(&[
            "--leader-elect=false",
            &format!("--leader-elect-resource-lock={lock}"),
        ]);
        o.validate().unwrap();
        assert_eq!(warned(&o), set(&["leader-elect-resource-lock"]));
    }
}

#[test]
fn ignored_flags_warn_once_unless_at_their_no_op_value() {
    // Spelled-out defaults and "off" values ask for nothing.
    let o = parse(&[
        "--profiling=true",
        "--profiling=false",
        "--contention-profiling=false",
        "--kube-api-content-type=application/vnd.kubernetes.protobuf",
        "--min-resync-period=12h0m0s",
        "--node-sync-period=0s",
        "--webhook-secure-port=0",
        "--logtostderr",
        "--stderrthreshold=ERROR",
        "--authorization-always-allow-paths=/healthz,/readyz",
        "--authorization-always-allow-paths=/livez",
        "--requestheader-username-headers=x-remote-user",
        "--tls-cipher-suites=",
    ]);
    assert!(o.compat_warnings().is_empty(), "{:?}", o.compat_warnings());
    // Anything else: one line per flag, even when repeated.
    let o = parse(&[
        "--tls-sni-cert-key=/a.crt,/a.key:a.example",
        "--tls-sni-cert-key=/b.crt,/b.key",
        "--feature-gates=A=true",
        "--feature-gates=B=false",
        "--kube-api-content-type=application/yaml",
        "--log_dir=/var/log",
    ]);
    let w = o.compat_warnings();
    assert_eq!(
        w.iter()
            .map(|w| (w.flag, w.value.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("feature-gates", "A=true,B=false"),
            ("kube-api-content-type", "application/yaml"),
            ("tls-sni-cert-key", "/a.crt,/a.key:a.example /b.crt,/b.key"),
            ("log-dir", "/var/log"),
        ]
    );
    assert!(w.iter().all(|w| w.ignored));
    assert_eq!(
        w[1].to_string(),
        "flag accepted for compatibility and ignored: --kube-api-content-type=application/yaml (the Node list and watch always use protobuf, every other request JSON)"
    );
}

#[test]
fn lists_take_commas_and_repetition() {
    let o = parse(&["--controllers=*", "--controllers=-route,-service"]);
    assert_eq!(o.controllers.controllers, ["*", "-route", "-service"]);
    let o = parse(&["--webhooks=a,b", "--webhooks=c"]);
    assert_eq!(
        o.compat.ignored.get("webhooks").unwrap(),
        ["a", "b", "c"].map(String::from)
    );
}

/// docs/controller.md lists every flag accepted for compatibility.
#[test]
fn every_ignored_flag_is_documented() {
    let docs = include_str!("../../../../docs/controller.md");
    for name in IGNORED.iter().map(|f| f.name).chain([
        "cloud-config",
        "allow-untagged-cloud",
        "feature-gates",
        "master",
        "leader-elect-resource-lock",
        "logging-format",
    ]) {
        assert!(
            docs.contains(&format!("`--{name}")),
            "--{name} is not in docs/controller.md"
        );
    }
}

#[tokio::test]
async fn master_replaces_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: https://192.0.2.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: secret\n",
    )
    .unwrap();
    let kubeconfig = format!("--kubeconfig={}", path.display());
    let config = parse(&[&kubeconfig]).kube_config().await.unwrap();
    assert_eq!(config.cluster_url.to_string(), "https://192.0.2.1:6443/");
    let config = parse(&[&kubeconfig, "--master=https://198.51.100.7:8443"])
        .kube_config()
        .await
        .unwrap();
    assert_eq!(config.cluster_url.to_string(), "https://198.51.100.7:8443/");
    assert!(
        config.auth_info.token.is_some(),
        "credentials stay the kubeconfig's"
    );
    let config = parse(&["--master=http://127.0.0.1:8080"])
        .kube_config()
        .await
        .unwrap();
    assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:8080/");
    assert!(config.auth_info.token.is_none());
}
