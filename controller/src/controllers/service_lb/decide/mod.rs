//! What the service-lb-controller decides about a Service, without I/O:
//! one [`plan()`] per sync (which writes, provider calls and Events, and when
//! to come back), where the routing puts it ([`Place`]), what the provider is
//! told about it ([`convert`]), which Nodes are backends ([`nodes`]), and
//! the status the Service should show ([`status`]).

use k8s_openapi::api::core::v1::{Service, ServiceSpec};

use crate::providers::Route;

mod annotations;
mod convert;
mod events;
mod fingerprint;
mod nodes;
mod plan;
mod status;

pub use annotations::*;
pub use convert::*;
pub use events::*;
pub use fingerprint::*;
pub use nodes::*;
pub use plan::*;
pub use status::*;

/// Upstream's finalizer: the default provider's, and with one provider the
/// only one (each provider's is [`crate::providers::Scope::finalizer`]).
#[cfg(test)]
pub const FINALIZER: &str = crate::providers::route::UPSTREAM_FINALIZER;
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// The taint cluster-autoscaler puts on a Node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
pub const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
/// The Service condition this controller owns (not upstream: see
/// docs/controller.md).
pub const CONDITION: &str = "LoadBalancerReady";

pub fn key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

fn spec(svc: &Service) -> Option<&ServiceSpec> {
    svc.spec.as_ref()
}

pub fn is_load_balancer(svc: &Service) -> bool {
    spec(svc).and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// Where the routing (docs/hybrid.md) puts a Service, seen from the
/// provider this controller instance works for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// This provider serves its load balancer.
    Here,
    /// Another provider does: the load balancer and the Service's status
    /// are that provider's.
    Elsewhere,
    /// Nobody does: not a LoadBalancer, or a class no provider serves
    /// (another controller's, as upstream).
    Nowhere,
    /// The routing cannot tell: several providers serve its class, or it
    /// has a class and this provider has not yet said which it serves.
    /// Proof of nothing: no provider is asked to ensure it, and nothing is
    /// cleaned up but a deletion.
    Unsure,
}

impl Place {
    /// `route` is the routing's answer for `svc`; `me` the provider;
    /// `identity_known` whether it has said what it serves (its handshake).
    pub fn of(svc: &Service, route: &Route, me: &str, identity_known: bool) -> Place {
        let classed = spec(svc).is_some_and(|s| s.load_balancer_class.is_some());
        match route {
            Route::To(p) if p == me => Place::Here,
            Route::Several(..) => Place::Unsure,
            _ if !is_load_balancer(svc) => Place::Nowhere,
            // Whether this provider serves the class is not known yet.
            _ if classed && !identity_known => Place::Unsure,
            Route::To(_) => Place::Elsewhere,
            Route::Nobody(_) => Place::Nowhere,
        }
    }
}

/// What one decision about a Service needs of the routing: where it puts
/// the Service, and the finalizer of the provider deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed<'a> {
    pub place: Place,
    pub finalizer: &'a str,
}

impl Routed<'_> {
    /// This provider serves the Service's load balancer.
    pub fn serves(&self) -> bool {
        self.place == Place::Here
    }

    /// The routing proves this provider does not serve it (an unsure
    /// routing proves nothing).
    pub fn not_ours(&self) -> bool {
        matches!(self.place, Place::Elsewhere | Place::Nowhere)
    }
}

/// The Service carries `finalizer`.
pub fn has_finalizer(svc: &Service, finalizer: &str) -> bool {
    svc.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == finalizer))
}

/// The load balancers no Service wants: none has the entry's uid, or the one
/// that has it does not [`keep`](keeps_its_load_balancer) it by `keeps`.
pub fn orphans<'a>(
    listed: &'a [ccm_provider_sdk::LoadBalancerEntry],
    services: &[std::sync::Arc<Service>],
    keeps: impl Fn(&Service) -> bool,
) -> Vec<&'a ccm_provider_sdk::LoadBalancerEntry> {
    let wanted: std::collections::HashSet<&str> = services
        .iter()
        .filter(|s| keeps(s))
        .filter_map(|s| s.metadata.uid.as_deref())
        .collect();
    listed
        .iter()
        .filter(|e| !wanted.contains(e.service_uid.as_str()))
        .collect()
}

/// The Service's load balancer at this provider is not an orphan: the
/// provider serves it, or the routing cannot tell, or it still holds the
/// provider's finalizer (its delete is ours to reconcile).
pub fn keeps_its_load_balancer(svc: &Service, routed: &Routed) -> bool {
    !routed.not_ours() || has_finalizer(svc, routed.finalizer)
}

/// The provider's finalizer is present and the Service is being deleted
/// or is proven no longer the provider's: not a LoadBalancer any more, or
/// routed to another provider or to none. (Upstream checks only `type`; a
/// class cannot be set on an existing LoadBalancer Service, but a class
/// change, LoadBalancer → ClusterIP → LoadBalancer with another class, may
/// reach us as one change.)
pub fn needs_cleanup(svc: &Service, routed: &Routed) -> bool {
    has_finalizer(svc, routed.finalizer)
        && (svc.metadata.deletion_timestamp.is_some() || routed.not_ours())
}

/// How a Service is routed with one provider behind `--provider-endpoint`
/// that has not said what it serves: what the tests of single mode see.
#[cfg(test)]
pub fn routed_single(svc: &Service) -> Routed<'static> {
    let route = crate::providers::Table::single().service_provider(svc);
    Routed {
        place: Place::of(svc, &route, crate::providers::route::SINGLE_NAME, false),
        finalizer: FINALIZER,
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use crate::testing::lb_service;

    // The single-mode view these tests were written against.
    fn wants_load_balancer(s: &Service) -> bool {
        routed_single(s).serves()
    }

    fn needs_cleanup(s: &Service) -> bool {
        super::needs_cleanup(s, &routed_single(s))
    }

    fn orphans<'a>(
        listed: &'a [ccm_provider_sdk::LoadBalancerEntry],
        services: &[std::sync::Arc<Service>],
    ) -> Vec<&'a ccm_provider_sdk::LoadBalancerEntry> {
        super::orphans(listed, services, |s| {
            keeps_its_load_balancer(s, &routed_single(s))
        })
    }

    #[test]
    fn which_services_want_a_load_balancer() {
        let mut s = lb_service();
        assert!(wants_load_balancer(&s));
        s.spec.as_mut().unwrap().load_balancer_class = Some("other".into());
        assert!(!wants_load_balancer(&s));
        s.spec.as_mut().unwrap().load_balancer_class = None;
        s.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(!wants_load_balancer(&s));
        assert!(!needs_cleanup(&s), "no finalizer, nothing to clean");
        s.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert!(needs_cleanup(&s));
        let mut deleting = lb_service();
        deleting.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert!(!needs_cleanup(&deleting));
        deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert!(needs_cleanup(&deleting));
    }

    #[test]
    fn the_routing_places_a_service_for_one_provider() {
        let of_class = |class: Option<&str>| {
            let mut s = lb_service();
            s.spec.as_mut().unwrap().load_balancer_class = class.map(str::to_owned);
            s
        };
        let mut cluster_ip = lb_service();
        cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let to = |n: &str| Route::To(n.into());
        let nobody = Route::Nobody(String::new());
        let several = Route::Several(vec!["me".into(), "other".into()], "why".into());
        let unclassed = of_class(None);
        let classed = of_class(Some("example.com/x"));
        let cases = [
            (&unclassed, &to("me"), true, Place::Here),
            (&unclassed, &to("other"), true, Place::Elsewhere),
            // Without a class, its own identity does not decide.
            (&unclassed, &to("other"), false, Place::Elsewhere),
            (&unclassed, &nobody, false, Place::Nowhere),
            (&classed, &to("other"), true, Place::Elsewhere),
            (&classed, &to("other"), false, Place::Unsure),
            (&classed, &nobody, true, Place::Nowhere),
            (&classed, &nobody, false, Place::Unsure),
            (&classed, &several, true, Place::Unsure),
            (&cluster_ip, &nobody, false, Place::Nowhere),
        ];
        for (svc, route, known, want) in cases {
            let place = Place::of(svc, route, "me", known);
            assert_eq!(place, want, "{route:?} known={known} {:?}", svc.spec);
        }
    }

    #[test]
    fn only_a_proof_of_another_place_cleans_up_or_orphans() {
        let mut held = lb_service();
        held.metadata.finalizers = Some(vec!["me/cleanup".into()]);
        let routed = |place| Routed {
            place,
            finalizer: "me/cleanup",
        };
        let mut deleting = held.clone();
        deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
        for (place, cleanup) in [
            (Place::Here, false),
            (Place::Elsewhere, true),
            (Place::Nowhere, true),
            (Place::Unsure, false),
        ] {
            assert_eq!(
                super::needs_cleanup(&held, &routed(place)),
                cleanup,
                "{place:?}"
            );
            assert!(super::needs_cleanup(&deleting, &routed(place)), "{place:?}");
            assert!(keeps_its_load_balancer(&held, &routed(place)), "held");
            assert_eq!(
                keeps_its_load_balancer(&lb_service(), &routed(place)),
                !cleanup,
                "{place:?}"
            );
            assert!(
                !super::needs_cleanup(&lb_service(), &routed(place)),
                "not held"
            );
        }
        // Another provider's finalizer is not ours.
        let other = Routed {
            place: Place::Elsewhere,
            finalizer: "other/cleanup",
        };
        assert!(!super::needs_cleanup(&held, &other));
    }

    #[test]
    fn orphans_are_load_balancers_no_service_wants() {
        let entry = |uid: &str| ccm_provider_sdk::LoadBalancerEntry {
            name: format!("lb-{uid}"),
            service_uid: uid.into(),
            service_namespace: "ns".into(),
            service_name: "web".into(),
            status: None,
        };
        let listed = vec![
            entry("live"),
            entry("gone"),
            entry("switched"),
            entry("leaving"),
        ];
        let with_uid = |uid: &str, type_: &str, finalizer: bool| {
            let mut s = lb_service();
            s.metadata.uid = Some(uid.into());
            s.spec.as_mut().unwrap().type_ = Some(type_.into());
            if finalizer {
                s.metadata.finalizers = Some(vec![FINALIZER.into()]);
            }
            std::sync::Arc::new(s)
        };
        let services = vec![
            with_uid("live", "LoadBalancer", false),
            // Type changed while we were down, finalizer removed by hand.
            with_uid("switched", "ClusterIP", false),
            // Type changed, finalizer still on: the delete path's.
            with_uid("leaving", "ClusterIP", true),
        ];
        let names: Vec<&str> = orphans(&listed, &services)
            .iter()
            .map(|e| e.service_uid.as_str())
            .collect();
        assert_eq!(names, ["gone", "switched"]);
        assert!(orphans(&[], &services).is_empty());
    }
}
