//! cloud-node-lifecycle-controller's decisions, without I/O: what a check
//! of a Node does ([`plan`]), the taint list a Node should have given
//! whether its instance is shut down, and whose instance it names.

use k8s_openapi::api::core::v1::{Node, Taint};

use crate::k8s::node::{self, SHUTDOWN_TAINT};

fn shutdown_taint() -> Taint {
    Taint {
        key: SHUTDOWN_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }
}

fn is_shutdown_taint(t: &Taint) -> bool {
    t.key == SHUTDOWN_TAINT && t.effect == "NoSchedule"
}

/// What one check of a Node does before any provider call.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A Ready Node costs no provider call: only its shutdown taint goes,
    /// if it has one (`untaint`: the taints without it).
    Ready { untaint: Option<Vec<Taint>> },
    /// Not Ready: if its providerID is the provider's to judge, ask
    /// whether its instance exists (delete only on NOT_EXISTS), then
    /// whether it is shut down (taint it).
    AskProvider,
}

pub fn plan(n: &Node) -> Plan {
    if node::ready_status(n) == "True" {
        Plan::Ready {
            untaint: taints_for(n, false),
        }
    } else {
        Plan::AskProvider
    }
}

/// The Node's taints with the shutdown taint added or removed, or `None`
/// when they already say `shut_down`.
pub fn taints_for(n: &Node, shut_down: bool) -> Option<Vec<Taint>> {
    let taints = node::taints(n);
    let has = taints.iter().any(is_shutdown_taint);
    match (shut_down, has) {
        (true, false) => {
            let mut with = taints.to_vec();
            with.push(shutdown_taint());
            Some(with)
        }
        (false, true) => Some(
            taints
                .iter()
                .filter(|t| !is_shutdown_taint(t))
                .cloned()
                .collect(),
        ),
        _ => None,
    }
}

/// Whose instance a Node's providerID names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// No providerID yet: the provider judges by the Node's name.
    Unset,
    /// `<scheme>://…` with a scheme the provider owns.
    Ours,
    /// Another cloud's, or not a providerID at all: the provider cannot
    /// know that the instance is gone, so the Node is never deleted on its
    /// answer.
    NotOurs(String),
}

/// Compares the Node's providerID with the schemes the provider owns (its
/// `provider_id_scheme`, or its `provider_id_schemes`).
pub fn ownership(provider_id: &str, schemes: &[&str]) -> Ownership {
    if provider_id.is_empty() {
        return Ownership::Unset;
    }
    let owned = schemes
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    match provider_id.split_once("://") {
        Some((s, id)) if schemes.contains(&s) && !id.is_empty() => Ownership::Ours,
        Some((s, _)) if !schemes.contains(&s) && !s.is_empty() => Ownership::NotOurs(format!(
            "its providerID {provider_id:?} has the scheme {s:?}, and the provider answers for {owned}"
        )),
        _ => Ownership::NotOurs(format!(
            "its providerID {provider_id:?} is not of the form <scheme>://<id> with a scheme of {owned}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;

    fn with_taints(keys: &[&str]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    keys.iter()
                        .map(|k| Taint {
                            key: (*k).into(),
                            effect: "NoSchedule".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_node_that_is_not_ready_costs_a_provider_call() {
        use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
        let mut n = with_taints(&["dedicated", SHUTDOWN_TAINT]);
        assert_eq!(plan(&n), Plan::AskProvider, "no Ready condition");
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let Plan::Ready {
            untaint: Some(left),
        } = plan(&n)
        else {
            panic!("{:?}", plan(&n));
        };
        assert_eq!(
            left.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["dedicated"]
        );
    }

    #[test]
    fn shutdown_taint_follows_the_answer_and_keeps_the_others() {
        let plain = with_taints(&["dedicated"]);
        let added = taints_for(&plain, true).unwrap();
        assert_eq!(
            added.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["dedicated", SHUTDOWN_TAINT]
        );
        assert_eq!(taints_for(&plain, false), None);
        let tainted = with_taints(&[SHUTDOWN_TAINT, "dedicated"]);
        assert_eq!(taints_for(&tainted, true), None);
        let removed = taints_for(&tainted, false).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].key, "dedicated");
        // A NoExecute taint with the same key is someone else's.
        let mut other = with_taints(&[SHUTDOWN_TAINT]);
        other.spec.as_mut().unwrap().taints.as_mut().unwrap()[0].effect = "NoExecute".into();
        assert_eq!(taints_for(&other, true).unwrap().len(), 2);
    }

    #[test]
    fn every_scheme_the_provider_owns_is_ours() {
        let owned = ["hcloud", "hrobot"];
        assert_eq!(ownership("hcloud://1", &owned), Ownership::Ours);
        assert_eq!(ownership("hrobot://321", &owned), Ownership::Ours);
        for foreign in ["aws:///us-east-1a/i-0123", "hrobot://", "hcloudx://1"] {
            let Ownership::NotOurs(why) = ownership(foreign, &owned) else {
                panic!("{foreign} is not ours");
            };
            assert!(why.contains(r#""hcloud", "hrobot""#), "{why}");
        }
    }

    #[test]
    fn only_our_scheme_is_ours() {
        assert_eq!(ownership("", &["fake"]), Ownership::Unset);
        assert_eq!(ownership("fake://i-1", &["fake"]), Ownership::Ours);
        assert_eq!(ownership("fake:///zone/i-1", &["fake"]), Ownership::Ours);
        for foreign in [
            "aws:///us-east-1a/i-0123",
            "gce://project/zone/vm",
            "fakeish://i-1",
            "garbage",
            "fake:/i-1",
            "fake://",
            "://i-1",
        ] {
            assert!(
                matches!(ownership(foreign, &["fake"]), Ownership::NotOurs(_)),
                "{foreign}"
            );
        }
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::arb;

    proptest! {
        /// A Node is ours exactly when its providerID is our scheme, "://"
        /// and a non-empty id; never when it is another cloud's.
        #[test]
        fn ownership_is_the_scheme(
            scheme in "[a-z][a-z0-9+.-]{0,8}",
            provider_id in prop_oneof![
                "[a-z][a-z0-9+.-]{0,8}://[!-~]{0,12}",
                arb::text(),
            ],
        ) {
            let ours = provider_id
                .strip_prefix(&format!("{scheme}://"))
                .is_some_and(|id| !id.is_empty());
            match ownership(&provider_id, &[scheme.as_str()]) {
                Ownership::Unset => prop_assert!(provider_id.is_empty()),
                Ownership::Ours => prop_assert!(ours, "{:?} is not {}://", provider_id, scheme),
                Ownership::NotOurs(why) => {
                    prop_assert!(!ours, "{:?} is {}://", provider_id, scheme);
                    let quoted = format!("{provider_id:?}");
                    prop_assert!(why.contains(&quoted), "{}", why);
                }
            }
        }
    }
}
