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
