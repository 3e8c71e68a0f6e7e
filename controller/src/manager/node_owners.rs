//! With several providers: Nodes that no provider owns, or that several
//! would (docs/hybrid.md, routing), are left alone by every controller;
//! this says so, once per Node and reason, as a Warning Event on the Node
//! and a log line.
//!
//! It lives in the manager, beside the Node watch that feeds it, rather
//! than in one provider's cloud-node controller: there may be no default
//! provider, and a provider that is down (or whose capabilities stop its
//! cloud-node controller) must not silence what concerns every provider.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::runtime::events::{Event, EventType};

use ccm_runtime::events::EventSink;

use crate::controllers::NodeEvents;
use crate::k8s::node;
use crate::k8s::node_store::NodeStore;
use crate::providers::{Route, Routing, Table};

/// The Event reasons.
pub const NO_OWNER: &str = "NoProviderOwnsNode";
pub const SEVERAL_OWNERS: &str = "SeveralProvidersOwnNode";

/// What to say about a Node, if anything: its reason and note.
pub fn verdict(route: &Route, every_provider_answered: bool) -> Option<(&'static str, String)> {
    match route {
        Route::To(_) => None,
        // A provider that has not answered yet may still claim the Node
        // (its schemes and platforms are unknown): not a verdict yet.
        Route::Nobody(_) if !every_provider_answered => None,
        Route::Nobody(why) => Some((
            NO_OWNER,
            format!("No provider is asked about this node: {why}"),
        )),
        Route::Several(names, why) => Some((
            SEVERAL_OWNERS,
            format!(
                "No provider is asked about this node: {why} ({})",
                names.join(", ")
            ),
        )),
    }
}

/// The Nodes to look at again after a provider's identity changed the
/// routing from `before` to `after`: those whose owner changed, and those
/// whose verdict here did (a Node nobody owns is judged once every
/// provider has answered). Every other Node is where it was: replaying it
/// to every controller instance would be work for nothing.
pub fn moved(before: &Table, after: &Table, nodes: &[Arc<Node>]) -> Vec<Arc<Node>> {
    let (answered_before, answered_after) = (before.all_answered(), after.all_answered());
    nodes
        .iter()
        .filter(|n| {
            let (was, is) = (before.node_owner(n), after.node_owner(n));
            was != is || verdict(&was, answered_before) != verdict(&is, answered_after)
        })
        .cloned()
        .collect()
}

/// The Nodes already reported, by uid, with the reason.
#[derive(Default)]
struct Reported(BTreeMap<String, &'static str>);

impl Reported {
    /// What to say about `n` now, given its route: only what was not said
    /// about it already.
    fn news(&mut self, n: &Node, route: &Route, answered: bool) -> Option<(&'static str, String)> {
        let uid = n.metadata.uid.clone().unwrap_or_default();
        let Some((reason, note)) = verdict(route, answered) else {
            if matches!(route, Route::To(_)) {
                // Owned now: a later loss of its owner is news again.
                self.0.remove(&uid);
            }
            return None;
        };
        if self.0.get(&uid) == Some(&reason) {
            return None;
        }
        self.0.insert(uid, reason);
        Some((reason, note))
    }

    /// Forgets Nodes gone from the cache, once there are many records.
    fn prune(&mut self, nodes: &NodeStore) {
        if self.0.len() <= 2 * nodes.len() + 64 {
            return;
        }
        let present: HashSet<String> = nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.uid.clone())
            .collect();
        self.0.retain(|uid, _| present.contains(uid));
    }
}

/// Follows every Node the watch applies (and every Node again when a
/// provider's identity changes) until the watch ends.
pub async fn run(routing: Routing, nodes: NodeStore, mut events: NodeEvents, sink: EventSink) {
    let mut reported = Reported::default();
    while let Some(n) = events.next().await {
        let (route, answered) = {
            let table = routing.read();
            (table.node_owner(&n), table.all_answered())
        };
        let Some((reason, note)) = reported.news(&n, &route, answered) else {
            continue;
        };
        tracing::warn!(
            node = node::name(&n),
            reason,
            "{note}; every controller leaves it alone"
        );
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "ChooseProvider".into(),
            secondary: None,
        };
        sink.send(event, n.object_ref(&())).await;
        reported.prune(&nodes);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;
    use kube::api::ObjectMeta;
    use kube::runtime::events::Reporter;
    use parking_lot::RwLock;

    use super::*;
    use crate::providers::{Identity, Member};

    fn node(name: &str, provider_id: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider_id.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn identity(schemes: &[&str]) -> Identity {
        Identity {
            schemes: schemes.iter().map(|s| s.to_string()).collect(),
            serves_unclassed: true,
            ..Default::default()
        }
    }

    #[test]
    fn nobody_waits_for_every_provider_to_answer_and_several_does_not() {
        assert_eq!(verdict(&Route::To("a".into()), true), None);
        assert_eq!(verdict(&Route::Nobody("x".into()), false), None);
        let (reason, note) = verdict(&Route::Nobody("no scheme".into()), true).unwrap();
        assert_eq!(reason, NO_OWNER);
        assert!(note.contains("no scheme"), "{note}");
        let (reason, note) = verdict(
            &Route::Several(vec!["a".into(), "b".into()], "two claim it".into()),
            false,
        )
        .unwrap();
        assert_eq!(reason, SEVERAL_OWNERS);
        assert!(note.contains("two claim it (a, b)"), "{note}");
    }

    /// Once per Node and reason, however often the Node changes; again
    /// after the Node was owned in between.
    #[test]
    fn each_node_is_reported_once_per_reason() {
        let mut a = Member::new("a");
        a.identity = Some(identity(&["x"]));
        let mut b = Member::new("b");
        b.identity = Some(identity(&["y"]));
        let mut table = Table::hybrid(vec![a, b], Some("a")).unwrap();
        let mut reported = Reported::default();
        let mut said = Vec::new();
        let mut look = |table: &Table, n: &Node| {
            if let Some((reason, _)) = reported.news(n, &table.node_owner(n), true) {
                said.push(format!("{}: {reason}", node::name(n)));
            }
        };
        let (n1, n2) = (node("n1", "z://1"), node("n2", "x://2"));
        look(&table, &n1);
        look(&table, &n1);
        look(&table, &n2);
        // Both providers claim x now: n2 has two owners.
        table.set_identity("b", identity(&["x", "y"]));
        look(&table, &n2);
        look(&table, &n2);
        table.set_identity("b", identity(&["y"]));
        look(&table, &n2);
        table.set_identity("b", identity(&["x", "y"]));
        look(&table, &n2);
        assert_eq!(
            said,
            [
                "n1: NoProviderOwnsNode",
                "n2: SeveralProvidersOwnNode",
                "n2: SeveralProvidersOwnNode"
            ]
        );
    }

    /// After an identity change only the Nodes it moved are looked at
    /// again: those whose owner changed, and, once every provider has
    /// answered, those nobody owns (their Warning waited for that).
    #[test]
    fn only_the_nodes_an_identity_change_moves_are_looked_at_again() {
        let mut a = Member::new("a");
        a.identity = Some(identity(&["x"]));
        let before = Table::hybrid(vec![a, Member::new("b")], Some("a")).unwrap();
        let nodes: Vec<Arc<Node>> = [
            node("mine", "x://1"),
            node("theirs", "y://2"),
            node("stray", "z://3"),
            node("plain", ""),
        ]
        .map(Arc::new)
        .into();
        let names = |moved: Vec<Arc<Node>>| -> Vec<String> {
            moved.iter().map(|n| node::name(n).to_owned()).collect()
        };
        // b answers: its Node is its own now, and the stray Node's verdict
        // is due.
        let mut after = before.clone();
        assert!(after.set_identity("b", identity(&["y"])));
        assert_eq!(names(moved(&before, &after, &nodes)), ["theirs", "stray"]);
        // Only its classes changed: no Node moved.
        let mut classes = after.clone();
        assert!(classes.set_identity(
            "b",
            Identity {
                classes: vec!["example.com/b".into()],
                ..identity(&["y"])
            }
        ));
        assert!(moved(&after, &classes, &nodes).is_empty());
        // b claims x too: a's Node has two owners.
        let mut both = after.clone();
        assert!(both.set_identity("b", identity(&["x", "y"])));
        assert_eq!(names(moved(&after, &both, &nodes)), ["mine"]);
    }

    /// The Warning Event on the Node, from the Node watch's stream.
    #[tokio::test]
    async fn an_unowned_node_gets_a_warning_event() {
        let mut a = Member::new("a");
        a.identity = Some(identity(&["x"]));
        let routing: Routing = Arc::new(RwLock::new(Table::hybrid(vec![a], None).unwrap()));
        let (client, api) = crate::testing::accepting_api();
        let sink = EventSink::new(
            ccm_runtime::events::Recorder::new(
                client,
                Reporter {
                    controller: "cloud-controller-manager".into(),
                    instance: None,
                },
            ),
            ccm_runtime::events::Delivery::Inline,
            16,
            Default::default(),
        );
        let store = crate::k8s::node_store::NodeStore::default();
        let nodes = futures::stream::iter([
            node("n1", "x://1"),
            node("n2", "z://2"),
            node("n2", "z://2"),
        ])
        .map(Arc::new)
        .boxed();
        run(routing, store, nodes, sink).await;
        assert_eq!(api.event_reasons(), [NO_OWNER]);
        let event = api.all().into_iter().find(|c| c.is_event()).unwrap();
        assert_eq!(event.body["type"], "Warning");
        assert_eq!(event.body["regarding"]["name"], "n2");
        assert_eq!(
            event.body["reportingController"],
            "cloud-controller-manager"
        );
        assert!(
            event.body["note"].as_str().unwrap().contains("\"z\""),
            "{}",
            event.body["note"]
        );
    }
}
