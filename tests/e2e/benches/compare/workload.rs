//! The objects a run creates and the watches that see them served.

use super::*;

/// A Node as a kubelet registers it, Ready, tainted for the cloud
/// controller, labelled with the run.
pub(crate) fn ready_node(name: &str, run: &str) -> Node {
    let mut n = kubelet_node(name);
    n.metadata
        .labels
        .get_or_insert_default()
        .insert("bench-run".into(), run.into());
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

pub(crate) fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED))
}

pub(crate) fn has_ingress(s: &Service) -> bool {
    s.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

/// Creates `count` objects with at most 32 requests in flight; returns the
/// time each create was answered, in creation order.
pub(crate) async fn create_all<K, F>(api: &Api<K>, count: usize, make: F) -> Vec<Instant>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(usize) -> K,
{
    let objects: Vec<K> = (0..count).map(make).collect();
    let mut created = vec![Instant::now(); count];
    let answered: Vec<(usize, Instant)> = futures::stream::iter(objects.into_iter().enumerate())
        .map(|(i, o)| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &o).await.unwrap();
                (i, Instant::now())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for (i, at) in answered {
        created[i] = at;
    }
    created
}

/// Waits for every object `names` lists to satisfy `done` on a watch that
/// was running before they were created; returns when each first did, and
/// how many changes the watch saw after each one's creation.
pub(crate) async fn served<K>(
    events: &mut (impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Unpin),
    names: &[String],
    done: impl Fn(&K) -> bool,
) -> (Vec<Instant>, usize)
where
    K: kube::Resource + Clone,
{
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut at: Vec<Option<Instant>> = vec![None; names.len()];
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut left = names.len();
    let deadline = tokio::time::Instant::now() + PHASE_DEADLINE;
    while left > 0 {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("{left} of {} not served in time", names.len()))
            .expect("watch ended");
        // A watch that fell behind (410 Gone at 5,000 objects) relists:
        // what changed meanwhile arrives as InitApply, seen late.
        let Ok(Event::Apply(o) | Event::InitApply(o)) = ev else {
            continue;
        };
        let name = o.name_any();
        let Some(&i) = index.get(name.as_str()) else {
            continue;
        };
        *seen.entry(name).or_default() += 1;
        if at[i].is_none() && done(&o) {
            at[i] = Some(Instant::now());
            left -= 1;
        }
    }
    // The first event of each is its creation.
    let writes = seen.values().map(|v| v.saturating_sub(1)).sum();
    (at.into_iter().map(Option::unwrap).collect(), writes)
}

pub(crate) async fn watch_until_init<K>(
    api: Api<K>,
    cfg: watcher::Config,
) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Unpin
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let mut events = watcher::watcher(api, cfg).boxed();
    while !matches!(events.try_next().await.unwrap(), Some(Event::InitDone)) {}
    events
}

/// A LoadBalancer Service of a burst of `n`. Above 2,500 without node
/// ports: the default range (30000–32767) has 2,768, and the apiserver
/// refuses the rest ("failed to allocate a nodePort: range is full").
pub(crate) fn bench_service(name: &str, n: usize) -> Service {
    let mut s = lb_service(name, 80);
    if n > 2500 {
        s.spec.as_mut().unwrap().allocate_load_balancer_node_ports = Some(false);
    }
    s
}

/// A canary Service served and deleted: the service controller is up and
/// synced.
/// Up and synced: a canary Node of `run` created and initialised.
pub(crate) async fn canary_node_initialised(
    nodes: &Api<Node>,
    node_events: &mut (impl futures::Stream<Item = Result<Event<Node>, watcher::Error>> + Unpin),
    run: &str,
) {
    let canary = format!("{run}-canary");
    nodes
        .create(&PostParams::default(), &ready_node(&canary, run))
        .await
        .unwrap();
    served(node_events, std::slice::from_ref(&canary), |n| !tainted(n)).await;
}

pub(crate) async fn serve_and_delete_canary_service(
    services: &Api<Service>,
    svc_events: &mut (impl futures::Stream<Item = Result<Event<Service>, watcher::Error>> + Unpin),
) {
    services
        .create(&PostParams::default(), &lb_service("canary", 80))
        .await
        .unwrap();
    served(svc_events, &["canary".to_owned()], has_ingress).await;
    services
        .delete("canary", &DeleteParams::default())
        .await
        .unwrap();
    let gone = async {
        loop {
            if services.get_opt("canary").await.unwrap().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(PHASE_DEADLINE, gone)
        .await
        .expect("canary Service deleted");
}

/// The next run starts from an empty cluster.
pub(crate) async fn clean_up(admin: &Client, nodes: &Api<Node>, label: &str, ns: &str) {
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(label),
        )
        .await
        .unwrap();
    Api::<Namespace>::all(admin.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// The five conditions a kubelet-sized Node carries (the kubelet's four
/// and the network plugin's `NetworkUnavailable`), all healthy, with
/// `heartbeat` as their last heartbeat.
pub(crate) fn kubelet_conditions(heartbeat: &str, transition: &str) -> serde_json::Value {
    let c = |type_: &str, status: &str, reason: &str, message: &str| {
        serde_json::json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition,
        })
    };
    serde_json::json!([
        c(
            "NetworkUnavailable",
            "False",
            "RouteCreated",
            "RouteController created a route"
        ),
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        c(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// A Node the size a kubelet makes it (about 12 KB as JSON): registered
/// Ready and tainted for the cloud controller, with capacity, node info,
/// five conditions and 40 container images, labelled with the run.
pub(crate) fn kubelet_sized_node(name: &str, run: &str, i: usize) -> Node {
    let mut n = ready_node(name, run);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let resources = serde_json::json!({
        "cpu": "8", "memory": "32856432Ki", "pods": "110",
        "ephemeral-storage": "203070420Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
    });
    let images: Vec<serde_json::Value> = (0..40)
        .map(|j| {
            let repo = format!(
                "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team-{}/service-{j}",
                j % 7
            );
            serde_json::json!({
                "names": [
                    format!("{repo}@sha256:{:064x}", (i * 131 + j) as u128 * 0x9e37_79b9_7f4a_7c15),
                    format!("{repo}:v1.{j}.{}", i % 10),
                ],
                "sizeBytes": 20_000_000 + (j as i64) * 1_234_567,
            })
        })
        .collect();
    let status = serde_json::json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": kubelet_conditions(&now, &now),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": format!("{:032x}", i as u128 * 0x1234_5678_9abc),
            "systemUUID": format!("ec2{i:029x}"),
            "bootID": format!("{:032x}", i as u128 * 0xfeed_beef),
            "kernelVersion": "6.1.102-111.182.amzn2023.x86_64",
            "osImage": "Amazon Linux 2023.5.20240805",
            "containerRuntimeVersion": "containerd://1.7.20",
            "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": images,
    });
    n.status = Some(serde_json::from_value(status).expect("a NodeStatus"));
    let labels = n.metadata.labels.get_or_insert_default();
    for (k, v) in [
        ("beta.kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
    ] {
        labels.insert(k.into(), v.into());
    }
    n.metadata.annotations = Some(
        [
            ("node.alpha.kubernetes.io/ttl".to_owned(), "0".to_owned()),
            (
                "volumes.kubernetes.io/controller-managed-attach-detach".to_owned(),
                "true".to_owned(),
            ),
        ]
        .into(),
    );
    n
}
