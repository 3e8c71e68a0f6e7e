//! Several providers (docs/hybrid.md): one service-lb instance per
//! provider over one apiserver, each serving the Services its provider's
//! [`crate::providers::Scope`] routes to it. "onprem" (the local provider's role) is the
//! default and serves Services without a class; "cloud" serves
//! `example.com/cloud` and declines unclassed Services. Each is the fake
//! provider on its own socket, with its own address pool.

use std::collections::BTreeMap;

use ccm_fake_provider::{FakeConfig, Method};
use k8s_openapi::api::core::v1::{Node, NodeSpec, ServiceSpec};
use kube::api::ObjectMeta;
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};

use super::*;
use crate::providers::{Backends as ScopeBackends, Identity, Member, Routing, Table};
use crate::testing::{
    Provider, Recorded, fake_provider, hybrid_context_as, lb_service, mock_api, ready,
};

const CLOUD_CLASS: &str = "example.com/cloud";
const CLOUD_FINALIZER: &str = "cloud.provider.ccm-rs.io/load-balancer-cleanup";
const ONPREM_POOL: &str = "198.51.100.";
const CLOUD_POOL: &str = "192.0.2.";

/// An apiserver holding Services, applying the status patches service-lb
/// sends (the strategic-merge shapes it uses: finalizers added and
/// removed, conditions by type, the ingress set or cleared), refusing a
/// patch whose resourceVersion is not the Service's (409, as the real one),
/// and recording each patch: who sent it and whether it was written.
#[derive(Clone, Default)]
struct Cluster(Arc<Mutex<Apiserver>>);

#[derive(Default)]
struct Apiserver {
    services: BTreeMap<String, Value>,
    version: u64,
    patches: Vec<Patched>,
}

#[derive(Clone, Debug)]
struct Patched {
    /// The field manager: which instance sent it.
    manager: String,
    service: String,
    body: Value,
    written: bool,
}

impl Patched {
    fn touches_status(&self) -> bool {
        self.body.get("status").is_some()
    }

    fn sets_ingress(&self) -> bool {
        self.body["status"]["loadBalancer"]["ingress"].is_array()
    }
}

impl Cluster {
    fn create(&self, svc: Service) {
        let mut server = self.0.lock();
        server.version += 1;
        let mut json = serde_json::to_value(svc).unwrap();
        json["metadata"]["resourceVersion"] = json!(server.version.to_string());
        let name = json["metadata"]["name"].as_str().unwrap().to_owned();
        server.services.insert(name, json);
    }

    /// What a watch shows of `name` now.
    fn view(&self, name: &str) -> Arc<Service> {
        Arc::new(serde_json::from_value(self.0.lock().services[name].clone()).unwrap())
    }

    /// A user's update of the spec. Leaving LoadBalancer drops the class,
    /// as the apiserver does.
    fn user(&self, name: &str, change: impl FnOnce(&mut ServiceSpec)) {
        let mut svc = (*self.view(name)).clone();
        let spec = svc.spec.as_mut().unwrap();
        change(spec);
        if spec.type_.as_deref() != Some("LoadBalancer") {
            spec.load_balancer_class = None;
        }
        svc.metadata.generation = Some(svc.metadata.generation.unwrap_or(0) + 1);
        let mut server = self.0.lock();
        server.version += 1;
        svc.metadata.resource_version = Some(server.version.to_string());
        server
            .services
            .insert(name.to_owned(), serde_json::to_value(svc).unwrap());
    }

    /// A class change's first step (the class cannot change while the
    /// type stays LoadBalancer): to ClusterIP.
    fn leave_load_balancer(&self, name: &str) {
        self.user(name, |s| s.type_ = Some("ClusterIP".into()));
    }

    /// Its second: a LoadBalancer again, of `provider`'s class.
    fn load_balancer_of(&self, name: &str, provider: &str) {
        self.user(name, |s| {
            s.type_ = Some("LoadBalancer".into());
            s.load_balancer_class = class_of(provider);
        });
    }

    /// Both steps, back to back.
    fn change_class(&self, name: &str, to: &str) {
        self.leave_load_balancer(name);
        self.load_balancer_of(name, to);
    }

    fn patches(&self) -> Vec<Patched> {
        self.0.lock().patches.clone()
    }

    fn client(&self) -> (kube::Client, Recorded) {
        let cluster = self.clone();
        mock_api(move |call| cluster.answer(call))
    }

    fn answer(&self, call: &crate::testing::Call) -> (u16, Value) {
        if call.is_event() {
            return (201, call.body.clone());
        }
        let line = call.line();
        let Some(name) = line
            .strip_prefix("PATCH /api/v1/namespaces/ns/services/")
            .and_then(|rest| rest.strip_suffix("/status"))
        else {
            return (405, json!({"kind": "Status", "code": 405}));
        };
        let manager = call
            .path
            .split(['?', '&'])
            .find_map(|kv| kv.strip_prefix("fieldManager="))
            .unwrap_or_default()
            .to_owned();
        let mut server = self.0.lock();
        let version = server.version;
        let Some(svc) = server.services.get_mut(name) else {
            return (
                404,
                json!({"kind": "Status", "code": 404, "reason": "NotFound"}),
            );
        };
        let body = call.body.clone();
        let expected = &body["metadata"]["resourceVersion"];
        if !expected.is_null() && *expected != svc["metadata"]["resourceVersion"] {
            server.patches.push(Patched {
                manager,
                service: name.to_owned(),
                body,
                written: false,
            });
            let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "Conflict", "code": 409,
                "message": "the object has been modified; please apply your changes to the latest version and try again"});
            return (409, conflict);
        }
        apply(svc, &body);
        svc["metadata"]["resourceVersion"] = json!((version + 1).to_string());
        let answer = svc.clone();
        server.version += 1;
        server.patches.push(Patched {
            manager,
            service: name.to_owned(),
            body,
            written: true,
        });
        (200, answer)
    }
}

/// The strategic-merge patch shapes service-lb sends, applied to `svc`.
fn apply(svc: &mut Value, patch: &Value) {
    let finalizers = |svc: &Value| -> Vec<Value> {
        svc["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    if let Some(added) = patch["metadata"]["finalizers"].as_array() {
        let mut all = finalizers(svc);
        for f in added {
            if !all.contains(f) {
                all.push(f.clone());
            }
        }
        svc["metadata"]["finalizers"] = json!(all);
    }
    if let Some(removed) = patch["metadata"]["$deleteFromPrimitiveList/finalizers"].as_array() {
        let kept: Vec<Value> = finalizers(svc)
            .into_iter()
            .filter(|f| !removed.contains(f))
            .collect();
        svc["metadata"]["finalizers"] = json!(kept);
    }
    if let Some(conditions) = patch["status"]["conditions"].as_array() {
        let mut all = svc["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for c in conditions {
            all.retain(|have| have["type"] != c["type"]);
            if c["$patch"] != "delete" {
                all.push(c.clone());
            }
        }
        svc["status"]["conditions"] = json!(all);
    }
    if let Some(lb) = patch["status"].get("loadBalancer") {
        svc["status"]["loadBalancer"] = if lb["ingress"].is_null() {
            json!({})
        } else {
            lb.clone()
        };
    }
}

/// One turn of the runner for `svc` ([`super::tests::sync`]): whether it
/// failed.
async fn sync(svc: Arc<Service>, lb: &Arc<Lb>) -> bool {
    super::tests::sync(svc, lb.clone()).await.1
}

fn identity(schemes: &[&str], classes: &[&str], unclassed: bool) -> Identity {
    Identity {
        schemes: schemes.iter().map(|s| s.to_string()).collect(),
        classes: classes.iter().map(|s| s.to_string()).collect(),
        platforms: Vec::new(),
        serves_unclassed: unclassed,
    }
}

/// onprem (default; `local://`; unclassed Services) and cloud (`fake://`,
/// the platform "cloud"; class `example.com/cloud`; declines unclassed).
fn routing() -> Routing {
    let mut onprem = Member::new("onprem");
    onprem.identity = Some(identity(&["local"], &[], true));
    let mut cloud = Member::new("cloud");
    cloud.platforms = vec!["cloud".into()];
    cloud.identity = Some(identity(&["fake"], &[CLOUD_CLASS], false));
    Arc::new(parking_lot::RwLock::new(
        Table::hybrid(vec![onprem, cloud], Some("onprem")).unwrap(),
    ))
}

/// One provider and its service-lb instance.
struct Instance {
    provider: Provider,
    lb: Arc<Lb>,
    resyncs: mpsc::UnboundedReceiver<ObjectRef<Service>>,
}

impl Instance {
    fn load_balancers(&self) -> Vec<ccm_fake_provider::LoadBalancer> {
        self.provider.fake.dump().load_balancers
    }

    /// The calls about load balancers the provider received.
    fn lb_calls(&self) -> usize {
        self.provider
            .fake
            .calls()
            .iter()
            .filter(|c| {
                matches!(
                    c.method,
                    Method::GetLoadBalancer
                        | Method::EnsureLoadBalancer
                        | Method::UpdateLoadBalancer
                        | Method::EnsureLoadBalancerDeleted
                )
            })
            .count()
    }
}

/// The service-lb instance of provider `name` (field manager `manager`)
/// over `client`, with a Node cache of `nodes`; its provider may not be
/// answering yet ([`ready`]).
fn instance(
    client: kube::Client,
    routing: &Routing,
    name: &str,
    manager: &'static str,
    pool: &str,
    nodes: Vec<Node>,
) -> Instance {
    let provider = fake_provider(FakeConfig {
        lb_ip_pool: format!("{pool}0/24"),
        ..FakeConfig::default()
    });
    let ctx = hybrid_context_as(client, &provider, nodes, routing, name, manager);
    let (resync, resyncs) = mpsc::unbounded();
    let lb = Lb::new(ctx, tokio::sync::watch::channel(0).1, resync);
    Instance {
        provider,
        lb,
        resyncs,
    }
}

fn node(name: &str, provider_id: Option<&str>, labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: provider_id.map(str::to_owned),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The two instances over one cluster.
struct Hybrid {
    cluster: Cluster,
    api: Recorded,
    routing: Routing,
    onprem: Instance,
    cloud: Instance,
}

async fn hybrid() -> Hybrid {
    let cluster = Cluster::default();
    let (client, api) = cluster.client();
    let routing = routing();
    let nodes = || vec![node("n1", None, &[])];
    let onprem = instance(
        client.clone(),
        &routing,
        "onprem",
        "service-lb-onprem",
        ONPREM_POOL,
        nodes(),
    );
    let cloud = instance(
        client,
        &routing,
        "cloud",
        "service-lb-cloud",
        CLOUD_POOL,
        nodes(),
    );
    ready(&onprem.provider).await;
    ready(&cloud.provider).await;
    Hybrid {
        cluster,
        api,
        routing,
        onprem,
        cloud,
    }
}

impl Hybrid {
    fn instance(&self, name: &str) -> &Instance {
        if name == "cloud" {
            &self.cloud
        } else {
            &self.onprem
        }
    }
}

fn class_of(provider: &str) -> Option<String> {
    (provider == "cloud").then(|| CLOUD_CLASS.to_owned())
}

fn finalizer_of(provider: &str) -> &'static str {
    if provider == "cloud" {
        CLOUD_FINALIZER
    } else {
        decide::FINALIZER
    }
}

fn pool_of(provider: &str) -> &'static str {
    if provider == "cloud" {
        CLOUD_POOL
    } else {
        ONPREM_POOL
    }
}

fn manager_of(provider: &str) -> &'static str {
    if provider == "cloud" {
        "service-lb-cloud"
    } else {
        "service-lb-onprem"
    }
}

/// The `LoadBalancer` Service `name` (uid `uid-<name>`) of `class`.
fn service(name: &str, class: Option<String>) -> Service {
    let mut svc = lb_service();
    svc.metadata.name = Some(name.into());
    svc.metadata.uid = Some(format!("uid-{name}"));
    svc.spec.as_mut().unwrap().load_balancer_class = class;
    svc
}

fn finalizers(svc: &Service) -> Vec<String> {
    svc.metadata.finalizers.clone().unwrap_or_default()
}

fn ingress_ip(svc: &Service) -> Option<String> {
    decide::ingress(svc).first().and_then(|i| i.ip.clone())
}

#[tokio::test]
async fn services_go_to_the_provider_of_their_class_with_its_finalizer() {
    let h = hybrid().await;
    h.cluster.create(service("web", None));
    h.cluster.create(service("api", class_of("cloud")));
    h.cluster
        .create(service("other", Some("example.com/elsewhere".into())));
    for name in ["web", "api", "other"] {
        for lb in [&h.onprem.lb, &h.cloud.lb] {
            assert!(!sync(h.cluster.view(name), lb).await, "{name}");
        }
    }

    let web = h.cluster.view("web");
    assert_eq!(finalizers(&web), [decide::FINALIZER]);
    assert!(ingress_ip(&web).unwrap().starts_with(ONPREM_POOL));
    let api = h.cluster.view("api");
    assert_eq!(finalizers(&api), [CLOUD_FINALIZER]);
    assert!(ingress_ip(&api).unwrap().starts_with(CLOUD_POOL));
    let other = h.cluster.view("other");
    assert!(finalizers(&other).is_empty() && ingress_ip(&other).is_none());

    let uids = |i: &Instance| -> Vec<String> {
        i.load_balancers()
            .into_iter()
            .map(|lb| lb.service_uid)
            .collect()
    };
    assert_eq!(uids(&h.onprem), ["uid-web"]);
    assert_eq!(uids(&h.cloud), ["uid-api"]);
    // Each provider was asked only about its own Service: the Ensure and
    // nothing else (the other instance's syncs asked it nothing).
    assert_eq!(h.onprem.lb_calls(), 1);
    assert_eq!(h.cloud.lb_calls(), 1);
    // Each instance wrote only its own Service, and each Event names it.
    let written: Vec<(String, String)> = h
        .cluster
        .patches()
        .into_iter()
        .filter(|p| p.written)
        .map(|p| (p.manager, p.service))
        .collect();
    let of = |m: &str, s: &str| (m.to_owned(), s.to_owned());
    assert_eq!(
        written,
        [
            of("service-lb-onprem", "web"),
            of("service-lb-onprem", "web"),
            of("service-lb-cloud", "api"),
            of("service-lb-cloud", "api"),
        ]
    );
    let notes: Vec<String> = h
        .api
        .all()
        .into_iter()
        .filter(|c| c.is_event() && c.body["reason"] == "EnsuredLoadBalancer")
        .map(|c| c.body["note"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        notes,
        [
            "Ensured load balancer (provider onprem)",
            "Ensured load balancer (provider cloud)"
        ]
    );
}

/// When the old provider's instance acts, relative to the new one's.
#[derive(Debug, Clone, Copy)]
enum Turns {
    /// The old one sees the middle step (ClusterIP) before the user's
    /// second change: it cleans up as for any type change.
    OldFirstInTime,
    /// The old one acts first, but on a view of the middle step that the
    /// second change already made stale.
    OldFirstStale,
    /// The new one ensures and writes its status first; the old one then
    /// acts on its stale view of the middle step.
    NewFirst,
    /// The old one never sees the middle step, only the Service with the
    /// other class.
    OldSkipsTheMiddle,
}

/// A class change from `from`'s class to `to`'s: LoadBalancer → ClusterIP
/// → LoadBalancer, the two instances acting in `turns`. Whatever the order:
/// the load balancer moves (none left at `from`), only `from`'s finalizer
/// is removed, and once `to` wrote its status, `from` writes none.
async fn class_change(from: &str, to: &str, turns: Turns) {
    let what = format!("{from} -> {to}, {turns:?}");
    let h = hybrid().await;
    let (old, new) = (h.instance(from), h.instance(to));
    h.cluster.create(service("web", class_of(from)));
    assert!(!sync(h.cluster.view("web"), &old.lb).await);
    let before = h.cluster.view("web");
    assert_eq!(finalizers(&before), [finalizer_of(from)], "{what}");
    let old_ip = ingress_ip(&before).unwrap();
    assert!(old_ip.starts_with(pool_of(from)), "{what}");

    h.cluster.leave_load_balancer("web");
    let middle = h.cluster.view("web");
    if let Turns::OldFirstInTime = turns {
        assert!(!sync(middle.clone(), &old.lb).await, "{what}");
        let cleaned = h.cluster.view("web");
        assert!(finalizers(&cleaned).is_empty(), "{what}");
        assert_eq!(ingress_ip(&cleaned), None, "nobody serves it: cleared");
    }
    h.cluster.load_balancer_of("web", to);
    match turns {
        Turns::OldFirstInTime => {
            assert!(!sync(h.cluster.view("web"), &new.lb).await);
            assert!(!sync(h.cluster.view("web"), &old.lb).await);
        }
        Turns::OldFirstStale | Turns::OldSkipsTheMiddle => {
            if let Turns::OldFirstStale = turns {
                // Deletes its load balancer, but writes nothing on a view
                // the second change made stale.
                assert!(!sync(middle.clone(), &old.lb).await, "{what}");
                assert!(old.load_balancers().is_empty(), "{what}");
            }
            assert!(!sync(h.cluster.view("web"), &old.lb).await, "{what}");
            let left = h.cluster.view("web");
            assert!(finalizers(&left).is_empty(), "{what}");
            assert_eq!(
                ingress_ip(&left),
                Some(old_ip.clone()),
                "{what}: served by {to} now, whose status it is: not cleared"
            );
            assert!(!sync(h.cluster.view("web"), &new.lb).await, "{what}");
        }
        Turns::NewFirst => {
            assert!(!sync(h.cluster.view("web"), &new.lb).await, "{what}");
            let both = h.cluster.view("web");
            assert_eq!(
                finalizers(&both),
                [finalizer_of(from), finalizer_of(to)],
                "{what}"
            );
            assert!(!sync(middle.clone(), &old.lb).await, "{what}");
            assert!(!sync(h.cluster.view("web"), &old.lb).await, "{what}");
        }
    }

    let after = h.cluster.view("web");
    assert!(old.load_balancers().is_empty(), "{what}: nothing leaked");
    let moved: Vec<String> = new
        .load_balancers()
        .into_iter()
        .map(|lb| lb.service_uid)
        .collect();
    assert_eq!(moved, ["uid-web"], "{what}");
    assert_eq!(finalizers(&after), [finalizer_of(to)], "{what}");
    assert!(
        ingress_ip(&after).unwrap().starts_with(pool_of(to)),
        "{what}: {after:?}"
    );
    assert_eq!(decide::condition(&after).unwrap().status, "True", "{what}");

    let patches = h.cluster.patches();
    let new_wrote = patches
        .iter()
        .position(|p| p.written && p.manager == manager_of(to) && p.sets_ingress())
        .expect("the new provider wrote its ingress");
    for p in &patches[new_wrote..] {
        assert!(
            !(p.written && p.manager == manager_of(from) && p.touches_status()),
            "{what}: the old provider wrote status after the new one: {p:?}"
        );
    }
    let refused = patches.iter().filter(|p| !p.written).count();
    match turns {
        Turns::OldFirstStale | Turns::NewFirst => {
            assert_eq!(refused, 1, "{what}: the stale cleanup write: {patches:?}")
        }
        Turns::OldFirstInTime | Turns::OldSkipsTheMiddle => {
            assert_eq!(refused, 0, "{what}: {patches:?}")
        }
    }
}

#[tokio::test]
async fn a_class_change_moves_the_load_balancer_whichever_instance_acts_first() {
    for (from, to) in [("onprem", "cloud"), ("cloud", "onprem")] {
        for turns in [
            Turns::OldFirstInTime,
            Turns::OldFirstStale,
            Turns::NewFirst,
            Turns::OldSkipsTheMiddle,
        ] {
            class_change(from, to, turns).await;
        }
    }
}

/// The old provider's Ensure of a spec change it saw before the class
/// change answers after the new provider wrote its status: its status
/// write is refused, and its load balancer is cleaned up on the next view.
#[tokio::test]
async fn an_old_providers_late_ensure_does_not_overwrite_the_new_providers_status() {
    let h = hybrid().await;
    h.cluster.create(service("web", None));
    assert!(!sync(h.cluster.view("web"), &h.onprem.lb).await);
    h.cluster
        .user("web", |s| s.ports.as_mut().unwrap()[0].port = 8080);
    let changed = h.cluster.view("web");
    h.cluster.change_class("web", "cloud");
    assert!(!sync(h.cluster.view("web"), &h.cloud.lb).await);
    let cloud_wrote = h.cluster.view("web");
    assert!(ingress_ip(&cloud_wrote).unwrap().starts_with(CLOUD_POOL));

    // onprem's view is from before the class change: it updates its load
    // balancer (its condition would then say generation 4).
    assert!(!sync(changed, &h.onprem.lb).await);
    assert_eq!(
        h.onprem
            .provider
            .fake
            .calls_of(Method::EnsureLoadBalancer)
            .len(),
        2
    );
    let late = h.cluster.patches().pop().unwrap();
    assert_eq!(late.manager, "service-lb-onprem");
    assert!(!late.written, "refused: {late:?}");
    assert_eq!(h.cluster.view("web").status, cloud_wrote.status);

    assert!(!sync(h.cluster.view("web"), &h.onprem.lb).await);
    let after = h.cluster.view("web");
    assert!(h.onprem.load_balancers().is_empty());
    assert_eq!(finalizers(&after), [CLOUD_FINALIZER]);
    assert_eq!(after.status, cloud_wrote.status);
}

#[tokio::test]
async fn a_deleted_service_loses_each_providers_load_balancer_and_only_its_finalizer() {
    let h = hybrid().await;
    // Both finalizers: the class change's middle state, then a delete.
    h.cluster.create(service("web", None));
    assert!(!sync(h.cluster.view("web"), &h.onprem.lb).await);
    h.cluster.change_class("web", "cloud");
    assert!(!sync(h.cluster.view("web"), &h.cloud.lb).await);
    {
        let mut server = h.cluster.0.lock();
        server.version += 1;
        let version = server.version.to_string();
        let svc = server.services.get_mut("web").unwrap();
        svc["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        svc["metadata"]["resourceVersion"] = json!(version);
    }
    assert!(!sync(h.cluster.view("web"), &h.onprem.lb).await);
    let onprem_done = h.cluster.view("web");
    assert_eq!(finalizers(&onprem_done), [CLOUD_FINALIZER]);
    assert!(
        ingress_ip(&onprem_done).unwrap().starts_with(CLOUD_POOL),
        "cloud's status stays"
    );
    assert!(!sync(h.cluster.view("web"), &h.cloud.lb).await);
    let done = h.cluster.view("web");
    assert!(finalizers(&done).is_empty());
    assert_eq!(ingress_ip(&done), None);
    assert!(h.onprem.load_balancers().is_empty() && h.cloud.load_balancers().is_empty());
}

#[tokio::test]
async fn backends_are_the_nodes_the_providers_scope_accepts() {
    let cluster = Cluster::default();
    let (client, _) = cluster.client();
    let routing = routing();
    let nodes = vec![
        node("cloud-vm", Some("fake://i-1"), &[]),
        node(
            "cloud-joining",
            None,
            &[(crate::providers::route::PLATFORM_KEY, "cloud")],
        ),
        node("rack-1", Some("local://rack-1"), &[]),
        node("rack-2", None, &[]),
        node(
            "cloud-excluded",
            Some("fake://i-2"),
            &[(decide::EXCLUDE_LABEL, "true")],
        ),
    ];
    let onprem = instance(
        client.clone(),
        &routing,
        "onprem",
        "service-lb-onprem",
        ONPREM_POOL,
        nodes.clone(),
    );
    let cloud = instance(
        client,
        &routing,
        "cloud",
        "service-lb-cloud",
        CLOUD_POOL,
        nodes,
    );
    ready(&cloud.provider).await;
    let names = |i: &Instance| -> Vec<String> {
        i.lb.current_backends()
            .nodes
            .nodes()
            .iter()
            .map(|n| n.name.clone())
            .collect()
    };
    let all = ["cloud-joining", "cloud-vm", "rack-1", "rack-2"];
    assert_eq!(names(&onprem), all, "all: upstream's predicates only");
    assert_eq!(names(&cloud), all);

    // cloud's backends become the Nodes it owns.
    let mut members = routing.read().members().to_vec();
    members[1].backends = ScopeBackends::Owned;
    *routing.write() = Table::hybrid(members, Some("onprem")).unwrap();
    // (What the routing follower's bump of the generation does.)
    cloud.lb.backend_cache.lock().take();
    assert_eq!(names(&cloud), ["cloud-joining", "cloud-vm"]);
    assert_eq!(names(&onprem), all);

    cluster.create(service("api", class_of("cloud")));
    assert!(!sync(cluster.view("api"), &cloud.lb).await);
    let lbs = cloud.load_balancers();
    assert_eq!(
        lbs[0].backends,
        vec!["cloud-joining".to_owned(), "cloud-vm".into()]
    );
}

#[tokio::test]
async fn orphans_are_swept_per_provider() {
    let h = hybrid().await;
    // Several providers serve example.com/both: routing cannot tell.
    {
        let mut t = h.routing.write();
        t.set_identity("onprem", identity(&["local"], &["example.com/both"], true));
        t.set_identity(
            "cloud",
            identity(&["fake"], &[CLOUD_CLASS, "example.com/both"], false),
        );
    }
    let web = service("web", None);
    let api = service("api", class_of("cloud"));
    let both = service("both", Some("example.com/both".into()));
    // Served by cloud, still holding onprem's finalizer: onprem's delete
    // path's, not an orphan.
    let mut leaving = service("leaving", class_of("cloud"));
    leaving.metadata.finalizers = Some(vec![decide::FINALIZER.into()]);
    let gone = service("gone", None);
    // Every provider has a load balancer for each of them.
    for i in [&h.onprem, &h.cloud] {
        for s in [&web, &api, &both, &leaving, &gone] {
            i.provider
                .client
                .ensure_load_balancer(
                    "kubernetes",
                    decide::to_proto(s).unwrap(),
                    &ccm_provider_sdk::NodeSet::new(vec![]),
                )
                .await
                .unwrap();
        }
    }
    let (services, mut writer) = reflector::store();
    for s in [&web, &api, &both, &leaving] {
        writer.apply_watcher_event(&watcher::Event::Apply((*s).clone()));
    }
    assert_eq!(orphans::sweep(&h.onprem.lb, &services).await.unwrap(), 2);
    assert_eq!(orphans::sweep(&h.cloud.lb, &services).await.unwrap(), 2);
    let uids = |i: &Instance| -> Vec<String> {
        let mut u: Vec<String> = i
            .load_balancers()
            .into_iter()
            .map(|lb| lb.service_uid)
            .collect();
        u.sort();
        u
    };
    assert_eq!(uids(&h.onprem), ["uid-both", "uid-leaving", "uid-web"]);
    assert_eq!(uids(&h.cloud), ["uid-api", "uid-both", "uid-leaving"]);
}

#[tokio::test]
async fn an_ambiguous_class_is_reported_once_by_its_first_claimant_and_nobody_is_asked() {
    let h = hybrid().await;
    h.routing
        .write()
        .set_identity("onprem", identity(&["local"], &[CLOUD_CLASS], true));
    h.cluster.create(service("api", class_of("cloud")));
    let mut held = (*h.cluster.view("api")).clone();
    held.metadata.finalizers = Some(vec![CLOUD_FINALIZER.into()]);
    for _ in 0..3 {
        for lb in [&h.onprem.lb, &h.cloud.lb] {
            assert!(!sync(h.cluster.view("api"), lb).await);
            // Its finalizer is no proof either way: cloud keeps it.
            assert!(!sync(Arc::new(held.clone()), lb).await);
        }
    }
    let warnings: Vec<(String, String)> = h
        .api
        .all()
        .into_iter()
        .filter(|c| c.is_event())
        .map(|c| {
            (
                c.body["reason"].as_str().unwrap().to_owned(),
                c.body["note"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        warnings,
        [(
            "SeveralProvidersServeClass".to_owned(),
            "several providers serve the load balancer class \"example.com/cloud\" \
             (onprem, cloud); none is asked for its load balancer until only one does \
             (provider onprem)"
                .to_owned()
        )]
    );
    assert_eq!(h.onprem.lb_calls() + h.cloud.lb_calls(), 0);
    assert!(h.cluster.patches().is_empty());

    // Resolved: cloud serves it; a new ambiguity is reported again.
    h.routing
        .write()
        .set_identity("onprem", identity(&["local"], &[], true));
    assert!(!sync(h.cluster.view("api"), &h.onprem.lb).await);
    assert!(!sync(h.cluster.view("api"), &h.cloud.lb).await);
    assert_eq!(h.cloud.load_balancers().len(), 1);
    h.routing
        .write()
        .set_identity("onprem", identity(&["local"], &[CLOUD_CLASS], true));
    assert!(!sync(h.cluster.view("api"), &h.onprem.lb).await);
    assert!(!sync(h.cluster.view("api"), &h.cloud.lb).await);
    // The second is recorded as the first one's series (a PATCH).
    let reported: Vec<String> = h
        .api
        .all()
        .into_iter()
        .filter(|c| c.is_event() && c.line().contains("events"))
        .filter(|c| {
            c.body["reason"] == "SeveralProvidersServeClass" || c.body.get("series").is_some()
        })
        .map(|c| c.method.to_string())
        .collect();
    assert_eq!(reported, ["POST", "PATCH"]);
    assert_eq!(h.cloud.load_balancers().len(), 1, "kept while ambiguous");
}

#[tokio::test]
async fn a_provider_that_has_not_answered_proves_nothing() {
    let h = hybrid().await;
    h.cluster.create(service("api", class_of("cloud")));
    assert!(!sync(h.cluster.view("api"), &h.cloud.lb).await);
    assert_eq!(h.cloud.load_balancers().len(), 1);
    let calls = h.cloud.lb_calls();
    // After a restart, before its handshake: its classes are unknown.
    let mut members = h.routing.read().members().to_vec();
    members[1].identity = None;
    *h.routing.write() = Table::hybrid(members, Some("onprem")).unwrap();
    for lb in [&h.onprem.lb, &h.cloud.lb] {
        assert!(!sync(h.cluster.view("api"), lb).await);
    }
    let (services, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply((*h.cluster.view("api")).clone()));
    assert_eq!(orphans::sweep(&h.cloud.lb, &services).await.unwrap(), 0);
    assert_eq!(h.cloud.load_balancers().len(), 1, "not deleted");
    assert_eq!(finalizers(&h.cluster.view("api")), [CLOUD_FINALIZER]);
    assert_eq!(h.cloud.lb_calls(), calls, "nothing asked (but the listing)");
    assert_eq!(h.onprem.lb_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_changed_identity_syncs_the_services_it_may_move_and_the_backends() {
    let routing = routing();
    let (client, _) = Cluster::default().client();
    let mut cloud = instance(
        client,
        &routing,
        "cloud",
        "service-lb-cloud",
        CLOUD_POOL,
        vec![],
    );
    let (services, mut writer) = reflector::store();
    let mut dns = service("dns", None);
    dns.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    let mut held = dns.clone();
    held.metadata.name = Some("held".into());
    held.metadata.finalizers = Some(vec![CLOUD_FINALIZER.into()]);
    for s in [
        service("web", None),
        service("api", class_of("cloud")),
        dns,
        held,
    ] {
        writer.apply_watcher_event(&watcher::Event::Apply(s));
    }
    let backends = tokio::sync::watch::Sender::new(0u64);
    let mut backend_changes = backends.subscribe();
    let identity_changes = routing.read().identity_changes();
    let follow = tokio::spawn(routing::follow(
        cloud.lb.clone(),
        services,
        identity_changes,
        backends,
    ));
    // The same identity again is no change.
    let same = identity(&["fake"], &[CLOUD_CLASS], false);
    assert!(!routing.write().set_identity("cloud", same));
    // (The clock is paused: this returns once every task is idle.)
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(cloud.resyncs.try_recv().is_err(), "nothing changed yet");
    assert!(!backend_changes.has_changed().unwrap());

    routing.write().set_identity(
        "cloud",
        identity(&["fake"], &[CLOUD_CLASS, "example.com/more"], false),
    );
    // A deadline, not a wait: with the clock paused it passes only if the
    // follower is idle without having told the backends.
    tokio::time::timeout(Duration::from_secs(1), backend_changes.changed())
        .await
        .expect("the backends are recomputed")
        .unwrap();
    let mut resynced = Vec::new();
    while let Ok(key) = cloud.resyncs.try_recv() {
        resynced.push(key.name);
    }
    resynced.sort();
    assert_eq!(
        resynced,
        ["api", "held", "web"],
        "not the ClusterIP Service"
    );
    follow.abort();
}

#[tokio::test]
async fn with_one_provider_writes_are_unconditional_and_name_no_provider() {
    let provider = fake_provider(FakeConfig::default());
    ready(&provider).await;
    let cluster = Cluster::default();
    let (client, api) = cluster.client();
    let (resync, _) = mpsc::unbounded();
    let lb = Lb::new(
        crate::testing::context(client, &provider, vec![node("n1", None, &[])]),
        tokio::sync::watch::channel(0).1,
        resync,
    );
    cluster.create(service("web", None));
    let stale = cluster.view("web");
    assert!(!sync(stale.clone(), &lb).await);
    cluster.leave_load_balancer("web");
    let patches = cluster.patches();
    assert!(
        patches
            .iter()
            .all(|p| p.written && p.body["metadata"].get("resourceVersion").is_none()),
        "{patches:?}"
    );
    assert!(
        api.all()
            .iter()
            .filter(|c| c.is_event())
            .all(|c| !c.body["note"].as_str().unwrap().contains("provider")),
    );
    // A stale view writes anyway, as before.
    let mut gone = (*stale).clone();
    gone.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    gone.metadata.finalizers = Some(vec![decide::FINALIZER.into()]);
    assert!(!sync(Arc::new(gone), &lb).await);
    assert!(cluster.patches().iter().all(|p| p.written));
    assert!(finalizers(&cluster.view("web")).is_empty());
}

#[test]
fn each_provider_has_its_own_queues() {
    assert_eq!(
        Queues::of(None),
        Queues {
            services: "service",
            nodes: "node"
        }
    );
    assert_eq!(
        Queues::of(Some("cloud")),
        Queues {
            services: "service:cloud",
            nodes: "node:cloud"
        }
    );
}
