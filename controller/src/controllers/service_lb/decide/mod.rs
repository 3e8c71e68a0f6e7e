//! What the service-lb-controller decides about a Service, without I/O:
//! one [`plan()`] per sync (which writes, provider calls and Events, and when
//! to come back), whether it wants a load balancer, what the provider is
//! told about it ([`convert`]), which Nodes are backends ([`nodes`]), and
//! the status the Service should show ([`status`]).

use k8s_openapi::api::core::v1::{Service, ServiceSpec};

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

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
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

/// `type: LoadBalancer` without a `loadBalancerClass`.
pub fn wants_load_balancer(svc: &Service) -> bool {
    spec(svc).is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none()
    })
}

pub fn has_finalizer(svc: &Service) -> bool {
    svc.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// The load balancers no Service wants: none has the entry's uid, or the one
/// that has it neither wants a load balancer nor carries our finalizer (a
/// Service that still carries it is the normal delete path's).
pub fn orphans<'a>(
    listed: &'a [ccm_provider_sdk::LoadBalancerEntry],
    services: &[std::sync::Arc<Service>],
) -> Vec<&'a ccm_provider_sdk::LoadBalancerEntry> {
    let wanted: std::collections::HashSet<&str> = services
        .iter()
        .filter(|s| keeps_its_load_balancer(s))
        .filter_map(|s| s.metadata.uid.as_deref())
        .collect();
    listed
        .iter()
        .filter(|e| !wanted.contains(e.service_uid.as_str()))
        .collect()
}

/// The Service's load balancer is not an orphan: it wants one, or still
/// holds our finalizer (its delete is ours to reconcile).
pub fn keeps_its_load_balancer(svc: &Service) -> bool {
    wants_load_balancer(svc) || has_finalizer(svc)
}

/// The finalizer is present and the Service is being deleted or no longer
/// wants our load balancer. (Upstream checks only `type`, so a Service that
/// gains a `loadBalancerClass` would keep its LB; a class cannot be set on
/// an existing LoadBalancer Service, so the difference is moot in practice.)
pub fn needs_cleanup(svc: &Service) -> bool {
    has_finalizer(svc) && (svc.metadata.deletion_timestamp.is_some() || !wants_load_balancer(svc))
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use crate::testing::lb_service;

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
