//! Who answers for what, when the controller runs several providers
//! (docs/hybrid.md): the owner of a Node, the provider of a LoadBalancer
//! Service. Pure decisions over the configuration and each provider's
//! latest identity; [`Scope`] is one provider's view of them, handed to
//! every controller instance that works for that provider.

use std::sync::Arc;

use ccm_provider_sdk::Handshake;
use k8s_openapi::api::core::v1::{Node, Service};
use parking_lot::RwLock;
use tokio::sync::watch;

use super::selector::LabelSelector;

/// KEP-5778's key: the platform a Node runs on, as a label or annotation.
pub const PLATFORM_KEY: &str = "cloudprovider.kubernetes.io/platform";

/// Upstream's finalizer, kept by the default provider (a migration from an
/// upstream CCM keeps its Services' finalizers).
pub const UPSTREAM_FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

/// The name of the one provider behind `--provider-endpoint`.
pub const SINGLE_NAME: &str = "default";

/// What a provider says of itself that routing needs (its handshake).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub schemes: Vec<String>,
    pub classes: Vec<String>,
    pub platforms: Vec<String>,
    pub serves_unclassed: bool,
}

impl Identity {
    pub fn of(h: &Handshake) -> Self {
        let owned = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect();
        Identity {
            schemes: owned(h.schemes()),
            classes: owned(h.classes()),
            platforms: owned(h.platforms()),
            serves_unclassed: h.serves_unclassed(),
        }
    }
}

/// Which Nodes are a provider's load balancers' backends.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Backends {
    /// Every Node upstream's predicates allow.
    #[default]
    All,
    /// Only the Nodes the provider owns.
    Owned,
    /// Only the Nodes matching.
    Selector(LabelSelector),
}

/// One configured provider, as routing sees it.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    /// `--cloud-provider-platforms NAME=…`.
    pub platforms: Vec<String>,
    /// `--provider-node-selector NAME=…`.
    pub node_selector: Option<LabelSelector>,
    /// `--provider-load-balancer-backends NAME=…`.
    pub backends: Backends,
    /// `--provider-routes NAME=…`.
    pub routes: bool,
    /// From its latest handshake; `None` until it first answers.
    pub identity: Option<Identity>,
}

impl Member {
    pub fn new(name: impl Into<String>) -> Self {
        Member {
            name: name.into(),
            platforms: Vec::new(),
            node_selector: None,
            backends: Backends::All,
            routes: true,
            identity: None,
        }
    }

    fn owns_scheme(&self, scheme: &str) -> bool {
        self.identity
            .as_ref()
            .is_some_and(|i| i.schemes.iter().any(|s| s == scheme))
    }

    fn manages_platform(&self, platform: &str) -> bool {
        self.platforms.iter().any(|p| p == platform)
            || self
                .identity
                .as_ref()
                .is_some_and(|i| i.platforms.iter().any(|p| p == platform))
    }

    fn serves_class(&self, class: &str) -> bool {
        self.identity
            .as_ref()
            .is_some_and(|i| i.classes.iter().any(|c| c == class))
    }

    /// Unknown until its first answer: counted as serving, as before
    /// contract 1.3.0 (its calls fail until it answers, as today).
    fn serves_unclassed(&self) -> bool {
        self.identity.as_ref().is_none_or(|i| i.serves_unclassed)
    }
}

/// The answer to "who answers for this object?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This provider, and only it.
    To(String),
    /// No provider; why, for the log and the Event.
    Nobody(String),
    /// Several would: nobody is asked; why.
    Several(Vec<String>, String),
}

impl Route {
    pub fn is(&self, name: &str) -> bool {
        matches!(self, Route::To(n) if n == name)
    }
}

/// Every configured provider, in flag order, and the default.
#[derive(Clone, Debug)]
pub struct Table {
    members: Vec<Member>,
    default: Option<usize>,
    /// Several `--provider`s: the routing rules apply to Nodes. With one
    /// provider behind `--provider-endpoint`, every Node is its own, as
    /// before this table existed.
    hybrid: bool,
    /// Told of every change [`Table::set_identity`] makes: the only change
    /// to a table in use (names, the default and the flags are fixed for
    /// the life of the process). Clones share it.
    identity_changes: watch::Sender<()>,
}

impl Table {
    /// The one provider behind `--provider-endpoint`.
    pub fn single() -> Self {
        Table {
            members: vec![Member::new(SINGLE_NAME)],
            default: Some(0),
            hybrid: false,
            identity_changes: watch::Sender::new(()),
        }
    }

    /// Several providers; `default` names one of them, or none.
    pub fn hybrid(members: Vec<Member>, default: Option<&str>) -> Result<Self, String> {
        let mut seen = std::collections::BTreeSet::new();
        for m in &members {
            if !seen.insert(m.name.as_str()) {
                return Err(format!("provider {:?} is configured twice", m.name));
            }
        }
        let default = match default {
            None => None,
            Some(d) => Some(
                members
                    .iter()
                    .position(|m| m.name == d)
                    .ok_or_else(|| format!("the default provider {d:?} is not configured"))?,
            ),
        };
        Ok(Table {
            members,
            default,
            hybrid: true,
            identity_changes: watch::Sender::new(()),
        })
    }

    pub fn is_hybrid(&self) -> bool {
        self.hybrid
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Whether every provider has answered a handshake (until then, one
    /// may still claim a Node nobody else does).
    pub fn all_answered(&self) -> bool {
        self.members.iter().all(|m| m.identity.is_some())
    }

    pub fn default_name(&self) -> Option<&str> {
        self.default.map(|i| self.members[i].name.as_str())
    }

    /// Records a provider's identity from its latest handshake. Returns
    /// whether it changed (and then tells [`Table::identity_changes`]).
    pub fn set_identity(&mut self, name: &str, identity: Identity) -> bool {
        match self.members.iter_mut().find(|m| m.name == name) {
            Some(m) if m.identity.as_ref() != Some(&identity) => {
                m.identity = Some(identity);
                self.identity_changes.send_replace(());
                true
            }
            _ => false,
        }
    }

    /// Changes with each provider identity that changes from now on: what
    /// moves Services and backends without any Service or Node changing.
    pub fn identity_changes(&self) -> watch::Receiver<()> {
        self.identity_changes.subscribe()
    }

    /// The Node's owner: its providerID's scheme, else its platform, else
    /// a node selector, else the default provider (docs/hybrid.md). A rule
    /// that applies decides, even when it finds nobody: a Node with a
    /// providerID or a platform nobody claims is never handed to the
    /// default provider.
    pub fn node_owner(&self, node: &Node) -> Route {
        if !self.hybrid {
            return Route::To(self.members[0].name.clone());
        }
        let provider_id = crate::k8s::node::provider_id(node);
        if !provider_id.is_empty() {
            let Some((scheme, _)) = provider_id.split_once("://") else {
                return Route::Nobody(format!(
                    "its providerID {provider_id:?} is not of the form <scheme>://<id>"
                ));
            };
            return self.decide(
                |m| m.owns_scheme(scheme),
                || format!("no configured provider owns the providerID scheme {scheme:?}"),
                || format!("several providers own the providerID scheme {scheme:?}"),
            );
        }
        if let Some(platform) = platform(node) {
            return self.decide(
                |m| m.manages_platform(platform),
                || {
                    format!(
                        "no configured provider manages the platform {platform:?} ({PLATFORM_KEY})"
                    )
                },
                || format!("several providers manage the platform {platform:?} ({PLATFORM_KEY})"),
            );
        }
        let no_labels = std::collections::BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&no_labels);
        match self.decide(
            |m| m.node_selector.as_ref().is_some_and(|s| s.matches(labels)),
            String::new,
            || "several providers' node selectors match its labels".into(),
        ) {
            // No selector matches: the default provider's.
            Route::Nobody(_) => {}
            decided => return decided,
        }
        match self.default_name() {
            Some(d) => Route::To(d.to_owned()),
            None => Route::Nobody(
                "it has no providerID or platform, no node selector matches, and there is no default provider".into(),
            ),
        }
    }

    /// The provider of a LoadBalancer Service: its class's, or without a
    /// class the default provider's. A class nobody serves is another
    /// controller's (as upstream): `Nobody` with an empty reason.
    pub fn service_provider(&self, svc: &Service) -> Route {
        let spec = svc.spec.as_ref();
        if spec.and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
            return Route::Nobody(String::new());
        }
        match spec.and_then(|s| s.load_balancer_class.as_deref()) {
            Some(class) => self.decide(
                |m| m.serves_class(class),
                String::new,
                || format!("several providers serve the load balancer class {class:?}"),
            ),
            None => match self.default {
                Some(d) if self.members[d].serves_unclassed() => {
                    Route::To(self.members[d].name.clone())
                }
                _ => Route::Nobody(String::new()),
            },
        }
    }

    fn decide(
        &self,
        claims: impl Fn(&Member) -> bool,
        nobody: impl FnOnce() -> String,
        several: impl FnOnce() -> String,
    ) -> Route {
        // Called for every Node by every controller instance: nothing is
        // collected unless several claim it.
        let mut claimed = self.members.iter().filter(|m| claims(m));
        match (claimed.next(), claimed.next()) {
            (None, _) => Route::Nobody(nobody()),
            (Some(one), None) => Route::To(one.name.clone()),
            (Some(a), Some(b)) => Route::Several(
                [a, b]
                    .into_iter()
                    .chain(claimed)
                    .map(|m| m.name.clone())
                    .collect(),
                several(),
            ),
        }
    }
}

/// The Node's KEP-5778 platform: the label, else the annotation.
pub fn platform(node: &Node) -> Option<&str> {
    let m = &node.metadata;
    m.labels
        .as_ref()
        .and_then(|l| l.get(PLATFORM_KEY))
        .or_else(|| m.annotations.as_ref().and_then(|a| a.get(PLATFORM_KEY)))
        .map(String::as_str)
        .filter(|p| !p.is_empty())
}

/// The table every controller instance reads; updated on each handshake.
pub type Routing = Arc<RwLock<Table>>;

/// One provider's view of the routing, for the controller instances that
/// work for it.
#[derive(Clone, Debug)]
pub struct Scope {
    routing: Routing,
    name: String,
}

impl Scope {
    pub fn new(routing: Routing, name: impl Into<String>) -> Self {
        Scope {
            routing,
            name: name.into(),
        }
    }

    /// The one provider behind `--provider-endpoint`.
    pub fn single() -> Self {
        Scope::new(Arc::new(RwLock::new(Table::single())), SINGLE_NAME)
    }

    pub fn provider(&self) -> &str {
        &self.name
    }

    pub fn is_hybrid(&self) -> bool {
        self.routing.read().is_hybrid()
    }

    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    /// Whether this provider owns the Node (and so is the only one asked
    /// about it).
    pub fn owns_node(&self, node: &Node) -> bool {
        self.routing.read().node_owner(node).is(&self.name)
    }

    /// The finalizer this provider's load balancers hold their Services
    /// with: upstream's for the default provider, one of its own for every
    /// other, so that two providers never take each other's.
    pub fn finalizer(&self) -> String {
        let t = self.routing.read();
        if t.default_name() == Some(self.name.as_str()) {
            UPSTREAM_FINALIZER.to_owned()
        } else {
            format!("{}.provider.ccm-rs.io/load-balancer-cleanup", self.name)
        }
    }

    /// Whether the Node may be one of this provider's load balancer
    /// backends (on top of upstream's predicates).
    pub fn backend(&self, node: &Node) -> bool {
        let t = self.routing.read();
        match t.member(&self.name).map(|m| &m.backends) {
            None | Some(Backends::All) => true,
            Some(Backends::Owned) => t.node_owner(node).is(&self.name),
            Some(Backends::Selector(s)) => {
                s.matches(node.metadata.labels.as_ref().unwrap_or(&Default::default()))
            }
        }
    }

    /// Whether this provider programs routes (`--provider-routes`).
    pub fn routes(&self) -> bool {
        self.routing
            .read()
            .member(&self.name)
            .is_none_or(|m| m.routes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, ServiceSpec};
    use kube::api::ObjectMeta;

    fn ident(schemes: &[&str], classes: &[&str], platforms: &[&str], unclassed: bool) -> Identity {
        Identity {
            schemes: schemes.iter().map(|s| s.to_string()).collect(),
            classes: classes.iter().map(|s| s.to_string()).collect(),
            platforms: platforms.iter().map(|s| s.to_string()).collect(),
            serves_unclassed: unclassed,
        }
    }

    /// onprem (local://, default) and cloud (fake://, class
    /// example.com/cloud, platform "cloud" by flag, declines unclassed).
    fn table() -> Table {
        let mut onprem = Member::new("onprem");
        onprem.identity = Some(ident(&["local"], &[], &[], true));
        let mut cloud = Member::new("cloud");
        cloud.platforms = vec!["cloud".into()];
        cloud.identity = Some(ident(&["fake"], &["example.com/cloud"], &[], false));
        Table::hybrid(vec![onprem, cloud], Some("onprem")).unwrap()
    }

    fn node(
        provider_id: Option<&str>,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Node {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
        };
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                labels: map(labels),
                annotations: map(annotations),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: provider_id.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn svc(type_: &str, class: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: class.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn to(n: &str) -> Route {
        Route::To(n.into())
    }

    #[test]
    fn a_node_goes_to_the_first_rule_that_decides() {
        let t = table();
        let p = PLATFORM_KEY;
        let cases = [
            (node(Some("fake://i-1"), &[], &[]), to("cloud")),
            (node(Some("local://n1"), &[(p, "cloud")], &[]), to("onprem")),
            (node(None, &[(p, "cloud")], &[]), to("cloud")),
            (node(None, &[], &[(p, "cloud")]), to("cloud")),
            (node(None, &[], &[]), to("onprem")),
        ];
        for (n, want) in cases {
            assert_eq!(t.node_owner(&n), want, "{n:?}");
        }
    }

    #[test]
    fn a_providerid_or_platform_nobody_claims_is_never_the_default_providers() {
        let t = table();
        for n in [
            node(Some("aws:///us-east-1a/i-1"), &[], &[]),
            node(Some("not-a-provider-id"), &[], &[]),
            node(None, &[(PLATFORM_KEY, "vsphere")], &[]),
        ] {
            assert!(
                matches!(t.node_owner(&n), Route::Nobody(why) if !why.is_empty()),
                "{n:?}"
            );
        }
    }

    #[test]
    fn a_provider_not_yet_answering_owns_nothing_by_identity_but_its_flags_count() {
        let mut t = table();
        t.members[1].identity = None;
        assert!(matches!(
            t.node_owner(&node(Some("fake://i-1"), &[], &[])),
            Route::Nobody(_)
        ));
        assert_eq!(
            t.node_owner(&node(None, &[(PLATFORM_KEY, "cloud")], &[])),
            to("cloud")
        );
        assert!(t.set_identity("cloud", ident(&["fake"], &[], &[], false)));
        assert!(
            !t.set_identity("cloud", ident(&["fake"], &[], &[], false)),
            "unchanged"
        );
        assert_eq!(
            t.node_owner(&node(Some("fake://i-1"), &[], &[])),
            to("cloud")
        );
    }

    #[test]
    fn only_a_changed_identity_is_told() {
        let mut t = table();
        let mut changes = t.identity_changes();
        let same = t.members[1].identity.clone().unwrap();
        assert!(!t.set_identity("cloud", same));
        assert!(!t.set_identity("edge", ident(&["edge"], &[], &[], true)));
        assert!(!changes.has_changed().unwrap(), "nothing changed");
        assert!(t.set_identity("cloud", ident(&["fake"], &[], &[], false)));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert!(!t.set_identity("cloud", ident(&["fake"], &[], &[], false)));
        assert!(!changes.has_changed().unwrap(), "unchanged");
    }

    #[test]
    fn two_claimants_mean_nobody_is_asked() {
        let mut t = table();
        t.members[0].identity = Some(ident(
            &["local", "fake"],
            &["example.com/cloud"],
            &["cloud"],
            true,
        ));
        assert!(
            matches!(t.node_owner(&node(Some("fake://i"), &[], &[])), Route::Several(n, _) if n.len() == 2)
        );
        assert!(matches!(
            t.node_owner(&node(None, &[(PLATFORM_KEY, "cloud")], &[])),
            Route::Several(..)
        ));
        assert!(matches!(
            t.service_provider(&svc("LoadBalancer", Some("example.com/cloud"))),
            Route::Several(..)
        ));
    }

    #[test]
    fn node_selectors_decide_before_the_default() {
        let mut t = table();
        t.members[1].node_selector = Some(LabelSelector::parse("pool=cloud").unwrap());
        assert_eq!(
            t.node_owner(&node(None, &[("pool", "cloud")], &[])),
            to("cloud")
        );
        assert_eq!(
            t.node_owner(&node(None, &[("pool", "edge")], &[])),
            to("onprem")
        );
        t.members[0].node_selector = Some(LabelSelector::parse("pool").unwrap());
        assert!(matches!(
            t.node_owner(&node(None, &[("pool", "cloud")], &[])),
            Route::Several(..)
        ));
        // Every claimant is named, however many.
        let mut edge = Member::new("edge");
        edge.node_selector = Some(LabelSelector::parse("pool in (cloud)").unwrap());
        let three = Table::hybrid([t.members.clone(), vec![edge]].concat(), None).unwrap();
        assert!(matches!(
            three.node_owner(&node(None, &[("pool", "cloud")], &[])),
            Route::Several(names, _) if names == ["onprem", "cloud", "edge"]
        ));
        let t = Table::hybrid(t.members.clone(), None).unwrap();
        assert!(matches!(
            t.node_owner(&node(None, &[("other", "x")], &[])),
            Route::Nobody(_)
        ));
    }

    #[test]
    fn services_go_by_class_and_without_one_to_the_default() {
        let t = table();
        assert_eq!(
            t.service_provider(&svc("LoadBalancer", Some("example.com/cloud"))),
            to("cloud")
        );
        assert_eq!(t.service_provider(&svc("LoadBalancer", None)), to("onprem"));
        assert_eq!(
            t.service_provider(&svc("LoadBalancer", Some("example.com/other"))),
            Route::Nobody(String::new())
        );
        assert_eq!(
            t.service_provider(&svc("ClusterIP", None)),
            Route::Nobody(String::new())
        );
        // A default that declines unclassed Services serves none of them.
        let t = Table::hybrid(t.members.clone(), Some("cloud")).unwrap();
        assert_eq!(
            t.service_provider(&svc("LoadBalancer", None)),
            Route::Nobody(String::new())
        );
    }

    #[test]
    fn one_provider_owns_every_node_and_serves_unclassed_services_as_before() {
        let t = Table::single();
        assert_eq!(
            t.node_owner(&node(Some("aws:///i"), &[(PLATFORM_KEY, "x")], &[])),
            to(SINGLE_NAME)
        );
        assert_eq!(
            t.service_provider(&svc("LoadBalancer", None)),
            to(SINGLE_NAME)
        );
        assert_eq!(
            t.service_provider(&svc("LoadBalancer", Some("example.com/x"))),
            Route::Nobody(String::new())
        );
        let s = Scope::single();
        assert_eq!(s.finalizer(), UPSTREAM_FINALIZER);
        assert!(s.routes());
    }

    #[test]
    fn finalizers_differ_per_provider_and_the_default_keeps_upstreams() {
        let routing: Routing = Arc::new(RwLock::new(table()));
        let onprem = Scope::new(routing.clone(), "onprem");
        let cloud = Scope::new(routing.clone(), "cloud");
        assert_eq!(onprem.finalizer(), UPSTREAM_FINALIZER);
        assert_eq!(
            cloud.finalizer(),
            "cloud.provider.ccm-rs.io/load-balancer-cleanup"
        );
    }

    #[test]
    fn backends_all_owned_or_selected() {
        let routing: Routing = Arc::new(RwLock::new(table()));
        let cloud = Scope::new(routing.clone(), "cloud");
        let onprem_node = node(Some("local://a"), &[("zone", "a")], &[]);
        let cloud_node = node(Some("fake://b"), &[("zone", "b")], &[]);
        assert!(cloud.backend(&onprem_node) && cloud.backend(&cloud_node));
        routing.write().members[1].backends = Backends::Owned;
        assert!(!cloud.backend(&onprem_node) && cloud.backend(&cloud_node));
        routing.write().members[1].backends =
            Backends::Selector(LabelSelector::parse("zone=a").unwrap());
        assert!(cloud.backend(&onprem_node) && !cloud.backend(&cloud_node));
    }

    #[test]
    fn a_table_refuses_duplicates_and_an_unknown_default() {
        assert!(Table::hybrid(vec![Member::new("a"), Member::new("a")], None).is_err());
        assert!(Table::hybrid(vec![Member::new("a")], Some("b")).is_err());
    }
}
