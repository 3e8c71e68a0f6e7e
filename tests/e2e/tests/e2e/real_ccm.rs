//! A real, published cloud through the Go adapter: the AWS cloud of
//! k8s.io/cloud-provider-aws (tests/real-ccm/aws, unchanged module code)
//! served as a provider process, its EC2 and classic ELB calls answered by
//! fake-aws on loopback, driving the controller against the real apiserver.
//! Nodes registered by kubelet are initialised from the fake cloud's
//! instances, a LoadBalancer Service gets the fake ELB's DNS name with the
//! Nodes' instances registered, a quiet window changes nothing, deleting
//! the Service deletes the ELB, and a terminated instance's Node is
//! deleted. What is tested and how to run it: docs/real-ccm.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;
use ccm_testsupport::{spawn_tied, unique_name};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

/// Each wait's deadline, and the whole scenario's (the build before it
/// is not counted: a cold one compiles the AWS SDK).
const WAIT: Duration = Duration::from_secs(30);
const SCENARIO: Duration = Duration::from_secs(150);
const QUIET: Duration = Duration::from_secs(5);
/// The ServiceAccount the provider acts as.
const PROVIDER_SA: &str = "aws-provider";

/// aws-provider and fake-aws, built (or taken from their cache) by
/// hack/build-aws-provider.sh.
fn binaries() -> (PathBuf, PathBuf) {
    let script = repo().join("hack/build-aws-provider.sh");
    let status = Command::new(&script)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(status.success(), "{} failed: {status}", script.display());
    let dir = repo().join("target/real-ccm/bin");
    (dir.join("aws-provider"), dir.join("fake-aws"))
}

/// fake-aws on a loopback port of its own choosing, killed when dropped.
struct FakeAws {
    child: Child,
    /// host:port
    addr: String,
    cloud_config: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for FakeAws {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FakeAws {
    async fn start(bin: &Path, cluster_id: &str) -> FakeAws {
        let dir = tempfile::tempdir().unwrap();
        let address = dir.path().join("address");
        let cloud_config = dir.path().join("cloud.conf");
        let log = dir.path().join("fake-aws.log");
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--cluster-id={cluster_id}"))
            .arg(format!("--address-file={}", address.display()))
            .arg(format!("--cloud-config={}", cloud_config.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = spawn_tied(cmd).unwrap();
        let url = eventually_within(WAIT, Duration::from_millis(20), "fake-aws to serve", || {
            let address = address.clone();
            let log = log.clone();
            async move {
                std::fs::read_to_string(&address).map_err(|e| {
                    format!(
                        "{e}; log: {}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    )
                })
            }
        })
        .await;
        let addr = url.trim().trim_start_matches("http://").to_owned();
        FakeAws {
            child,
            addr,
            cloud_config,
            log,
            _dir: dir,
        }
    }

    /// One request to the control endpoint: the JSON answer.
    async fn control(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut s = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
        let req = format!(
            "{method} /control/{path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "fake-aws {method} /control/{path}: {out}"
        );
        serde_json::from_str(body).unwrap_or_else(|e| panic!("fake-aws answered {body:?}: {e}"))
    }

    async fn load_balancers(&self) -> Vec<Value> {
        self.control("GET", "loadbalancers", None)
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The provider's own identity with the ClusterRole shipped for provider
/// cluster access (read Nodes, nothing else: no Event permission, the
/// adapter answers the cloud's Event writes); a kubeconfig as it, written to
/// `path`.
async fn provider_identity(path: &Path) {
    let cp = ControlPlane::shared().await;
    let env = cp.env();
    let admin = env.admin_client().await.unwrap();
    let ns = env.namespace(&admin, "aws").await.unwrap();
    let shipped =
        repo().join("deploy/components/provider-cluster-access/clusterrole-provider.yaml");
    let role: ClusterRole =
        serde_yaml::from_str(&std::fs::read_to_string(&shipped).unwrap()).unwrap();
    let rules = role.rules.unwrap();
    env.grant_cluster_role(&admin, &ns, PROVIDER_SA, rules)
        .await
        .unwrap();
    env.write_service_account_kubeconfig(&ns, PROVIDER_SA, path)
        .await
        .unwrap();
}

fn provider_id(n: &Node) -> String {
    n.spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default()
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test]
async fn the_published_aws_cloud_drives_the_controller() {
    let (aws_provider, fake_aws) = binaries();
    tokio::time::timeout(SCENARIO, scenario(&aws_provider, &fake_aws))
        .await
        .expect("the AWS scenario took longer than its deadline");
}

async fn scenario(aws_provider: &Path, fake_aws: &Path) {
    let cluster_id = unique_name("aws");
    let fake = FakeAws::start(fake_aws, &cluster_id).await;
    let nodes = [unique_name("ip-10-0-1"), unique_name("ip-10-0-2")];
    let mut instances = Vec::new();
    for (name, public) in nodes.iter().zip(["203.0.113.10", ""]) {
        let added = fake
            .control(
                "POST",
                "instances",
                Some(json!({"privateDnsName": name, "publicIp": public})),
            )
            .await;
        instances.push(added);
    }

    let files = tempfile::tempdir().unwrap();
    let kubeconfig = files.path().join("provider.kubeconfig");
    provider_identity(&kubeconfig).await;
    let mut provider = Provider::spawn(
        aws_provider,
        &[format!("--cloud-config={}", fake.cloud_config.display())],
        &[
            ("KUBECONFIG", kubeconfig.clone()),
            ("AWS_ACCESS_KEY_ID", "fake".into()),
            ("AWS_SECRET_ACCESS_KEY", "fake".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("AWS_CONFIG_FILE", "/dev/null".into()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
        ],
    );
    provider._files = Some(files);
    provider.wait_ready().await;
    let h = Harness::start_against(
        &provider.endpoint,
        &[
            "--controllers=*,-route",
            "--node-status-update-frequency=1s",
        ],
    )
    .await;
    let logs = || {
        format!(
            "provider log:\n{}\nfake-aws log:\n{}",
            provider.log(),
            fake.log()
        )
    };

    // Nodes initialised from their instances.
    for n in &nodes {
        h.register_node(n).await;
        ccm_testsupport::steady::kubelet_ready(&h.admin, n)
            .await
            .unwrap();
    }
    for (name, instance) in nodes.iter().zip(&instances) {
        let id = instance["id"].as_str().unwrap();
        let zone = instance["zone"].as_str().unwrap();
        let node = eventually_within(
            WAIT,
            Duration::from_millis(100),
            &format!("{name} initialised"),
            || async {
                let n = h.nodes().get(name).await.map_err(|e| e.to_string())?;
                if has_taint(&n, UNINITIALIZED) {
                    return Err(format!("still tainted: {:?}\n{}", n.spec, logs()));
                }
                Ok(n)
            },
        )
        .await;
        assert_eq!(provider_id(&node), format!("aws:///{zone}/{id}"));
        let labels = node.metadata.labels.clone().unwrap_or_default();
        for (k, v) in [
            ("topology.kubernetes.io/zone", zone),
            ("topology.kubernetes.io/region", "us-east-1"),
            ("node.kubernetes.io/instance-type", "m5.large"),
        ] {
            assert_eq!(
                labels.get(k).map(String::as_str),
                Some(v),
                "{k} on {name}: {labels:?}"
            );
        }
        // AWS's own label, from DescribeAvailabilityZones.
        assert!(
            labels.contains_key("topology.k8s.aws/zone-id"),
            "{labels:?}"
        );
        let addresses: BTreeSet<(String, String)> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        let mut want: BTreeSet<(String, String)> = [
            ("InternalIP", instance["privateIp"].as_str().unwrap()),
            ("InternalDNS", name.as_str()),
            ("Hostname", name.as_str()),
        ]
        .into_iter()
        .map(|(t, a)| (t.to_owned(), a.to_owned()))
        .collect();
        if let Some(public) = instance["publicIp"].as_str().filter(|p| !p.is_empty()) {
            want.insert(("ExternalIP".into(), public.into()));
        }
        assert_eq!(addresses, want, "{name}");
    }

    // A LoadBalancer Service: a classic ELB with both instances registered,
    // its DNS name the Service's ingress hostname.
    let services: Api<Service> = Api::namespaced(h.admin.clone(), &h.ns);
    let svc_name = unique_name("lb");
    services
        .create(&PostParams::default(), &lb_service(&svc_name, 80))
        .await
        .unwrap();
    let hostname = eventually_within(
        WAIT,
        Duration::from_millis(100),
        "the Service's ingress",
        || async {
            let s = services.get(&svc_name).await.map_err(|e| e.to_string())?;
            s.status
                .and_then(|s| s.load_balancer?.ingress)
                .and_then(|i| i.first()?.hostname.clone())
                .ok_or_else(|| format!("no ingress yet; {}", logs()))
        },
    )
    .await;
    let svc = services.get(&svc_name).await.unwrap();
    let node_port = svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
        .node_port
        .unwrap();
    let lbs = fake.load_balancers().await;
    assert_eq!(lbs.len(), 1, "{lbs:#?}");
    let lb = &lbs[0];
    assert_eq!(lb["dnsName"].as_str(), Some(hostname.as_str()));
    assert!(hostname.ends_with(".elb.amazonaws.com"), "{hostname}");
    let registered: BTreeSet<&str> = lb["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let ids: BTreeSet<&str> = instances
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(registered, ids);
    assert_eq!(
        lb["listeners"],
        json!([{"protocol": "TCP", "loadBalancerPort": 80, "instanceProtocol": "TCP", "instancePort": node_port}])
    );

    // Converged: kubelets heartbeat, nothing else changes; the controllers
    // keep asking (reads) but neither the cloud nor the cluster is written.
    let names: Vec<String> = nodes.to_vec();
    let window = ccm_testsupport::steady::kubelet_heartbeats(&h.admin, &names, QUIET)
        .await
        .unwrap();
    let audit = h.env().audit_log().unwrap();
    audit.sync(&h.admin).await.unwrap();
    let writes = audit
        .writes_by(&h.controller_user(), window.from, window.to)
        .unwrap();
    let calls: Vec<Value> = fake
        .control("GET", "calls", None)
        .await
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            let t = c["unixMs"].as_u64().unwrap_or(0);
            t >= unix_ms(window.from) && t < unix_ms(window.to)
        })
        .collect();
    let mutations: Vec<&Value> = calls.iter().filter(|c| c["mutating"] == true).collect();
    assert!(
        mutations.is_empty() && writes.is_empty(),
        "a quiet window must make no cloud mutations and no controller writes; got {mutations:#?}\nand {writes:#?}"
    );
    assert!(
        calls.iter().any(|c| c["action"] == "DescribeInstances"),
        "the node status updates should have asked the cloud in {QUIET:?}: {calls:#?}"
    );

    // Deleting the Service deletes the ELB (and the finalizer goes).
    delete_service_and_wait(&services, &svc_name).await;
    let left = fake.load_balancers().await;
    assert!(left.is_empty(), "ELB left behind: {left:#?}");

    // A terminated instance: its Node, once NotReady, is deleted; the other
    // stays.
    let gone = instances[1]["id"].as_str().unwrap();
    fake.control("POST", &format!("instances/{gone}/terminated"), None)
        .await;
    h.set_ready(&nodes[1], "False").await;
    eventually_within(
        WAIT,
        Duration::from_millis(100),
        "the terminated instance's Node deleted",
        || async {
            match h
                .nodes()
                .get_opt(&nodes[1])
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => Err(format!("still there; {}", logs())),
            }
        },
    )
    .await;
    assert!(h.nodes().get_opt(&nodes[0]).await.unwrap().is_some());

    println!(
        "aws: nodes initialised as {:?}, ingress {hostname}, {} cloud reads and no writes in the quiet window, ELB deleted, terminated instance's Node deleted",
        instances
            .iter()
            .map(|i| i["id"].clone())
            .collect::<Vec<_>>(),
        calls.len()
    );
    h.stop().await;
    provider.stop().await;
}
