//! The Lease's states and the writes to the test's Nodes, as watches
//! delivered them.

use super::*;

/// One state of the Lease as the watch delivered it.
#[derive(Debug, Clone)]
pub(super) struct LeaseSeen {
    /// When the watch delivered it.
    pub(super) at: Instant,
    pub(super) rv: u64,
    pub(super) holder: String,
    pub(super) renew: Option<Timestamp>,
    pub(super) acquire: Option<Timestamp>,
    pub(super) transitions: i32,
}

/// A write to one of the test's Nodes, attributed to the field manager
/// whose managedFields entry it created or re-stamped.
#[derive(Debug, Clone)]
pub(super) struct NodeWrite {
    pub(super) rv: u64,
    pub(super) node: String,
    pub(super) manager: String,
    pub(super) subresource: String,
}

/// resourceVersions compared as numbers: the test apiserver's are etcd
/// revisions, one counter for every object it stores, so the Lease's and
/// the Nodes' are ordered against each other.
fn rv(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "resourceVersion {:?} is not a number",
                meta.resource_version
            )
        })
}

/// Records every state of the Lease `name`.
pub(super) fn watch_lease(
    admin: Client,
    name: &str,
) -> (Arc<Mutex<Vec<LeaseSeen>>>, Arc<AtomicBool>) {
    let seen = Arc::new(Mutex::new(Vec::<LeaseSeen>::new()));
    let listed = Arc::new(AtomicBool::new(false));
    let up = listed.clone();
    let api: Api<Lease> = Api::namespaced(admin, NAMESPACE);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = events.next().await {
            let lease = match ev {
                Ok(WatchEvent::Apply(l) | WatchEvent::InitApply(l)) => l,
                Ok(WatchEvent::InitDone) => {
                    up.store(true, Ordering::SeqCst);
                    continue;
                }
                _ => continue,
            };
            let spec = lease.spec.clone().unwrap_or_default();
            let s = LeaseSeen {
                at: Instant::now(),
                rv: rv(&lease.metadata),
                holder: spec.holder_identity.unwrap_or_default(),
                renew: spec.renew_time.map(|t| t.0),
                acquire: spec.acquire_time.map(|t| t.0),
                transitions: spec.lease_transitions.unwrap_or(0),
            };
            let mut all = out.lock().unwrap();
            if all.last().is_none_or(|l| l.rv < s.rv) {
                all.push(s);
            }
        }
    });
    (seen, listed)
}

/// Records every attributable write to the Nodes labelled `RUN_LABEL=run`.
/// A write sets its manager's entry time (to the second) or creates the
/// entry; a second write by the same manager within the same second that
/// adds no field is not seen, which only hides writes next to one that is.
pub(super) fn watch_node_writes(
    admin: Client,
    run: &str,
) -> (Arc<Mutex<Vec<NodeWrite>>>, Arc<AtomicBool>) {
    let writes = Arc::new(Mutex::new(Vec::<NodeWrite>::new()));
    let listed = Arc::new(AtomicBool::new(false));
    let up = listed.clone();
    let api: Api<Node> = Api::all(admin);
    let cfg = watcher::Config::default().labels(&format!("{RUN_LABEL}={run}"));
    let out = writes.clone();
    tokio::spawn(async move {
        // Per Node: (manager, subresource) -> (time, fields).
        type Entries = BTreeMap<(String, String), (String, String)>;
        let mut last: BTreeMap<String, (u64, Entries)> = BTreeMap::new();
        let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = events.next().await {
            let node = match ev {
                Ok(WatchEvent::Apply(n) | WatchEvent::InitApply(n)) => n,
                Ok(WatchEvent::InitDone) => {
                    up.store(true, Ordering::SeqCst);
                    continue;
                }
                _ => continue,
            };
            let name = node.metadata.name.clone().unwrap_or_default();
            let version = rv(&node.metadata);
            let mut entries = Entries::new();
            for e in node.metadata.managed_fields.iter().flatten() {
                entries.insert(
                    (
                        e.manager.clone().unwrap_or_default(),
                        e.subresource.clone().unwrap_or_default(),
                    ),
                    (
                        e.time.as_ref().map(|t| t.0.to_string()).unwrap_or_default(),
                        serde_json::to_string(&e.fields_v1).unwrap_or_default(),
                    ),
                );
            }
            let previous = last.get(&name);
            if previous.is_some_and(|(v, _)| *v >= version) {
                continue; // a relist repeating what we saw
            }
            let mut all = out.lock().unwrap();
            for ((manager, sub), (time, fields)) in &entries {
                let before = previous.and_then(|(_, p)| p.get(&(manager.clone(), sub.clone())));
                // A writer's entry is re-stamped, or grows (the apiserver
                // merges a manager's fields); an entry that only shrank lost
                // fields to another writer.
                let wrote = match before {
                    None => true,
                    Some((t, f)) => t != time || (f != fields && fields.len() > f.len()),
                };
                if wrote {
                    all.push(NodeWrite {
                        rv: version,
                        node: name.clone(),
                        manager: manager.clone(),
                        subresource: sub.clone(),
                    });
                }
            }
            last.insert(name, (version, entries));
        }
    });
    (writes, listed)
}

/// Waits until the Lease's holder satisfies `pred`; the first state that
/// did, as the watch delivered it.
pub(super) async fn first_holder(
    seen: &Mutex<Vec<LeaseSeen>>,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> LeaseSeen {
    eventually_within(DEADLINE, Duration::from_millis(10), what, || {
        let all = seen.lock().unwrap().clone();
        let found = all.iter().find(|s| pred(&s.holder)).cloned();
        async move { found.ok_or_else(|| format!("{:?}", all.last())) }
    })
    .await
}

/// The Lease holders in order, consecutive repeats and empty holders
/// (releases) left out.
pub(super) fn holders(seen: &[LeaseSeen]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in seen.iter().filter(|s| !s.holder.is_empty()) {
        if out.last() != Some(&s.holder) {
            out.push(s.holder.clone());
        }
    }
    out
}

/// `[first rv with holder h, rv of the next state with another holder)`.
pub(super) fn tenure(seen: &[LeaseSeen], h: &str) -> (u64, u64) {
    let start = seen
        .iter()
        .position(|s| s.holder == h)
        .unwrap_or_else(|| panic!("{h} never held the Lease: {seen:#?}"));
    let end = seen[start..]
        .iter()
        .find(|s| s.holder != h)
        .map_or(u64::MAX, |s| s.rv);
    (seen[start].rv, end)
}
