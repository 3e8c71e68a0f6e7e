//! Benchmark: JSON against protobuf between a client and the real
//! kube-apiserver, for what this controller does most with Nodes: list them
//! all (as a reflector does, 500 a page) and watch their changes. N Nodes
//! (BENCH_NODES, default 5,000) as kubelets write them (labels,
//! annotations, conditions, capacity, node info and 50 images each), then
//! for each encoding, alternating, BENCH_ROUNDS times (default 3): a full
//! paginated list, and a watch that sees every Node change once. Measured:
//! bytes on the wire, wall time, the apiserver process's CPU (ccm-testenv:
//! apiserver and etcd, whose share is the same for both), and the client's
//! CPU to decode (serde_json into k8s-openapi types; prost into k8s-pb
//! types). `cargo bench -p ccm-e2e --bench encoding`. It reports; it
//! asserts nothing about speed.

// A benchmark runs alone, one per process: it owns the control plane
// outright and takes no lock (tests/e2e/clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use ccm_testsupport::procfs::cpu_seconds;
use ccm_testsupport::{TestEnv, unique_name};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use prost::Message;

const JSON: &str = "application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// Every protobuf response starts with this, then a runtime.Unknown.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

fn realistic_node(name: &str, run: &str, i: usize) -> Node {
    let t = Time(k8s_openapi::jiff::Timestamp::now());
    let q = |s: &str| Quantity(s.to_owned());
    let resources = [
        ("cpu", q("8")),
        ("memory", q("32856432Ki")),
        ("pods", q("110")),
        ("ephemeral-storage", q("203070420Ki")),
        ("hugepages-1Gi", q("0")),
        ("hugepages-2Mi", q("0")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect::<std::collections::BTreeMap<_, _>>();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(t.clone()),
        last_transition_time: Some(t.clone()),
    };
    let images = (0..50)
        .map(|j| {
            let repo = format!("registry.example.com/team-{}/service-{j}", j % 7);
            ContainerImage {
                names: Some(vec![
                    format!(
                        "{repo}@sha256:{:064x}",
                        (i * 131 + j) as u128 * 0x9e37_79b9_7f4a_7c15
                    ),
                    format!("{repo}:v1.{j}.{}", i % 10),
                ]),
                size_bytes: Some(20_000_000 + (j as i64) * 1_234_567),
            }
        })
        .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [
                    ("bench-run", run.to_owned()),
                    ("beta.kubernetes.io/arch", "amd64".into()),
                    ("beta.kubernetes.io/os", "linux".into()),
                    ("kubernetes.io/arch", "amd64".into()),
                    ("kubernetes.io/os", "linux".into()),
                    ("kubernetes.io/hostname", name.into()),
                    ("node.kubernetes.io/instance-type", "m5.2xlarge".into()),
                    ("beta.kubernetes.io/instance-type", "m5.2xlarge".into()),
                    ("topology.kubernetes.io/region", "eu-west-1".into()),
                    (
                        "topology.kubernetes.io/zone",
                        format!("eu-west-1{}", ["a", "b", "c"][i % 3]),
                    ),
                    (
                        "failure-domain.beta.kubernetes.io/region",
                        "eu-west-1".into(),
                    ),
                    (
                        "failure-domain.beta.kubernetes.io/zone",
                        format!("eu-west-1{}", ["a", "b", "c"][i % 3]),
                    ),
                    ("node-pool", format!("pool-{}", i % 4)),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            ),
            annotations: Some(
                [
                    ("node.alpha.kubernetes.io/ttl", "0".to_owned()),
                    (
                        "volumes.kubernetes.io/controller-managed-attach-detach",
                        "true".into(),
                    ),
                    (
                        "csi.volume.kubernetes.io/nodeid",
                        format!(
                            r#"{{"ebs.csi.aws.com":"i-{i:017x}","efs.csi.aws.com":"i-{i:017x}"}}"#
                        ),
                    ),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(format!("10.{}.{}.0/24", 64 + i / 256, i % 256)),
            pod_cidrs: Some(vec![format!("10.{}.{}.0/24", 64 + i / 256, i % 256)]),
            provider_id: Some(format!("aws:///eu-west-1a/i-{i:017x}")),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                condition(
                    "Ready",
                    "True",
                    "KubeletReady",
                    "kubelet is posting ready status",
                ),
            ]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: format!("10.0.{}.{}", i / 256, i % 256),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name.into(),
                },
                NodeAddress {
                    type_: "InternalDNS".into(),
                    address: format!("{name}.eu-west-1.compute.internal"),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
            }),
            node_info: Some(NodeSystemInfo {
                machine_id: format!("{:032x}", i as u128 * 0x1234_5678_9abc),
                system_uuid: format!("ec2{:029x}", i),
                boot_id: format!("{:032x}", i as u128 * 0xfeed_beef),
                kernel_version: "6.1.102-111.182.amzn2023.x86_64".into(),
                os_image: "Amazon Linux 2023.5.20240805".into(),
                container_runtime_version: "containerd://1.7.20".into(),
                kubelet_version: "v1.36.3".into(),
                kube_proxy_version: "".into(),
                operating_system: "linux".into(),
                architecture: "amd64".into(),
                ..Default::default()
            }),
            images: Some(images),
            ..Default::default()
        }),
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Measured {
    bytes: usize,
    wall: Duration,
    server_cpu: f64,
    decode: Duration,
    objects: usize,
}

/// Decodes one protobuf list page: magic, runtime.Unknown, NodeList.
fn decode_protobuf_list(body: &[u8]) -> (usize, Option<String>) {
    let body = body.strip_prefix(PROTOBUF_MAGIC).expect("protobuf magic");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(body).unwrap();
    let list = k8s_pb::api::core::v1::NodeList::decode(unknown.raw()).unwrap();
    let next = list
        .metadata
        .as_ref()
        .and_then(|m| m.r#continue.clone())
        .filter(|c| !c.is_empty());
    (list.items.len(), next)
}

fn decode_json_list(body: &[u8]) -> (usize, Option<String>) {
    let list: k8s_openapi::List<Node> = serde_json::from_slice(body).unwrap();
    let next = list.metadata.continue_.filter(|c| !c.is_empty());
    (list.items.len(), next)
}

async fn list_all(client: &Client, label: &str, accept: &str, pid: u32) -> Measured {
    let cpu0 = cpu_seconds(pid);
    let start = Instant::now();
    let mut m = Measured::default();
    let mut next: Option<String> = None;
    loop {
        let mut uri = format!("/api/v1/nodes?limit=500&labelSelector={label}");
        if let Some(c) = &next {
            uri.push_str(&format!("&continue={c}"));
        }
        let body = get_bytes(client, &uri, accept).await;
        m.bytes += body.len();
        let t = Instant::now();
        let (count, more) = if accept == PROTOBUF {
            decode_protobuf_list(&body)
        } else {
            decode_json_list(&body)
        };
        m.decode += t.elapsed();
        m.objects += count;
        next = more;
        if next.is_none() {
            break;
        }
    }
    m.wall = start.elapsed();
    m.server_cpu = cpu_seconds(pid) - cpu0;
    m
}

/// Raw bytes of a GET (protobuf is not text).
async fn get_bytes(client: &Client, uri: &str, accept: &str) -> Vec<u8> {
    use http_body_util::BodyExt;
    let req = http::Request::get(uri)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())
        .unwrap();
    let res = client.send(req).await.unwrap();
    assert!(res.status().is_success(), "GET {uri}: {}", res.status());
    res.into_body().collect().await.unwrap().to_bytes().to_vec()
}

/// Watches the run's Nodes in `accept` from `resource_version`, changes
/// every one of them once, and reads until all `n` changes arrived.
async fn watch_changes(
    client: &Client,
    nodes: &Api<Node>,
    names: &[String],
    label: &str,
    accept: &str,
    round: usize,
    pid: u32,
) -> Measured {
    use http_body_util::BodyExt;
    let rv = nodes
        .list_metadata(&kube::api::ListParams::default().labels(label).limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let uri = format!(
        "/api/v1/nodes?watch=true&labelSelector={label}&resourceVersion={rv}&allowWatchBookmarks=false"
    );
    let req = http::Request::get(&uri)
        .header(http::header::ACCEPT, format!("{accept};stream=watch"))
        .body(kube::client::Body::empty())
        .unwrap();
    let res = client.send(req).await.unwrap();
    assert!(res.status().is_success(), "watch: {}", res.status());
    let mut body = res.into_body();
    let cpu0 = cpu_seconds(pid);
    let start = Instant::now();
    let patch = futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(32, |name| async move {
            nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {"labels": {"bench-round": round.to_string()}}})),
                )
                .await
                .unwrap();
        });
    let mut m = Measured::default();
    let read = async {
        let mut buf: Vec<u8> = Vec::new();
        while m.objects < names.len() {
            let frame = tokio::time::timeout(Duration::from_secs(600), body.frame())
                .await
                .expect("watch events in time")
                .expect("watch open")
                .unwrap();
            let Ok(data) = frame.into_data() else {
                continue;
            };
            m.bytes += data.len();
            buf.extend_from_slice(&data);
            let t = Instant::now();
            m.objects += if accept == PROTOBUF {
                decode_protobuf_events(&mut buf)
            } else {
                decode_json_events(&mut buf)
            };
            m.decode += t.elapsed();
        }
    };
    futures::join!(patch, read);
    m.wall = start.elapsed();
    m.server_cpu = cpu_seconds(pid) - cpu0;
    m
}

/// The message inside the magic and runtime.Unknown envelope, or `data`
/// itself when it has none.
fn unwrap(data: &[u8]) -> Vec<u8> {
    match data.strip_prefix(PROTOBUF_MAGIC) {
        Some(rest) => k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest)
            .unwrap()
            .raw
            .unwrap_or_default(),
        None => data.to_vec(),
    }
}

/// Length-delimited (4-byte big-endian) WatchEvent frames, each holding a
/// Node as runtime.RawExtension.
fn decode_protobuf_events(buf: &mut Vec<u8>) -> usize {
    let mut done = 0;
    let mut at = 0;
    while buf.len() - at >= 4 {
        let len = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        if buf.len() - at - 4 < len {
            break;
        }
        let frame = &buf[at + 4..at + 4 + len];
        let event =
            k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(unwrap(frame).as_slice())
                .unwrap();
        let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
        let node = k8s_pb::api::core::v1::Node::decode(unwrap(&raw).as_slice()).unwrap();
        assert!(node.metadata.is_some());
        done += 1;
        at += 4 + len;
    }
    buf.drain(..at);
    done
}

/// Newline-delimited JSON WatchEvents.
fn decode_json_events(buf: &mut Vec<u8>) -> usize {
    let mut done = 0;
    while let Some(end) = buf.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = buf.drain(..=end).collect();
        let ev: kube::core::WatchEvent<Node> = serde_json::from_slice(&line).unwrap();
        assert!(matches!(ev, kube::core::WatchEvent::Modified(_)));
        done += 1;
    }
    done
}

fn mean_of(v: &[Measured], f: impl Fn(&Measured) -> f64) -> f64 {
    v.iter().map(f).sum::<f64>() / v.len().max(1) as f64
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_NODES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let env = TestEnv::get();
    let pid = env.pid().expect("a ccm-testenv this benchmark started");
    let client = env.admin_client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let run = unique_name("enc");
    let label = format!("bench-run={run}");
    let names: Vec<String> = (0..n).map(|i| format!("{run}-{i}")).collect();
    let sample = serde_json::to_vec(&realistic_node(&names[0], &run, 0)).unwrap();
    eprintln!("creating {n} Nodes of {} bytes (JSON) each", sample.len());
    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(32, |(i, name)| {
            let nodes = nodes.clone();
            let node = realistic_node(name, &run, i);
            async move {
                nodes.create(&PostParams::default(), &node).await.unwrap();
            }
        })
        .await;

    let mut lists: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
    let mut watches: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
    let encodings = [JSON, PROTOBUF];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for e in order {
            let l = list_all(&client, &label, encodings[e], pid).await;
            assert_eq!(l.objects, n);
            lists[e].push(l);
            let w = watch_changes(
                &client,
                &nodes,
                &names,
                &label,
                encodings[e],
                round * 2 + e,
                pid,
            )
            .await;
            watches[e].push(w);
        }
    }
    println!(
        "\n{n} Nodes of {:.1} KiB (JSON) each, {rounds} rounds per encoding, alternating; means.\n",
        sample.len() as f64 / 1024.0
    );
    println!("| measurement | JSON | protobuf | JSON ÷ protobuf |");
    println!("|---|---|---|---|");
    for (what, set) in [
        ("list, 500 a page", &lists),
        ("watch, one change per Node", &watches),
    ] {
        let row = |m: &str, f: &dyn Fn(&Measured) -> f64, unit: &str| {
            let (j, p) = (mean_of(&set[0], f), mean_of(&set[1], f));
            println!(
                "| {what}: {m} | {j:.2}{unit} | {p:.2}{unit} | {:.2} |",
                j / p
            );
        };
        row("bytes", &|m| m.bytes as f64 / 1_048_576.0, " MiB");
        row("wall time", &|m| m.wall.as_secs_f64(), " s");
        row("apiserver+etcd CPU", &|m| m.server_cpu, " s");
        row("client decode CPU", &|m| m.decode.as_secs_f64(), " s");
    }
    nodes
        .delete_collection(
            &Default::default(),
            &kube::api::ListParams::default().labels(&label),
        )
        .await
        .unwrap();
}
