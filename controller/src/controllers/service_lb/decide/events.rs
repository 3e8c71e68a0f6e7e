//! The Events this controller records on a Service: each reason with its
//! type and its action together, so nothing is inferred from the text.

use kube::runtime::events::EventType;

use crate::providers::Route;

/// The provider call an Event is about: its `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Ensure,
    Update,
    Delete,
}

impl Call {
    pub fn action(self) -> &'static str {
        match self {
            Call::Ensure => "EnsureLoadBalancer",
            Call::Update => "UpdateLoadBalancer",
            Call::Delete => "DeleteLoadBalancer",
        }
    }
}

/// Why an Event is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    EnsuringLoadBalancer,
    EnsuredLoadBalancer,
    /// No Node is a backend (upstream's reason, spelled as upstream).
    UnAvailableLoadBalancer,
    UpdatedLoadBalancer,
    UpdateLoadBalancerFailed,
    /// The load balancer was gone when its backends were updated.
    LoadBalancerNotFound,
    DeletingLoadBalancer,
    DeletedLoadBalancer,
    /// A delete of a load balancer whose finalizer someone else removed.
    DeleteLoadBalancerFailed,
    SyncLoadBalancerFailed,
    UnknownAnnotation,
    /// Several providers serve the Service's class: none is asked.
    SeveralProvidersServeClass,
    /// A warning the provider returned with its answer to `call`, under
    /// the provider's reason (`ProviderWarning` when it gave none).
    Provider {
        reason: String,
        call: Call,
    },
}

impl Reason {
    /// The Event's reason text.
    pub fn text(&self) -> &str {
        match self {
            Reason::EnsuringLoadBalancer => "EnsuringLoadBalancer",
            Reason::EnsuredLoadBalancer => "EnsuredLoadBalancer",
            Reason::UnAvailableLoadBalancer => "UnAvailableLoadBalancer",
            Reason::UpdatedLoadBalancer => "UpdatedLoadBalancer",
            Reason::UpdateLoadBalancerFailed => "UpdateLoadBalancerFailed",
            Reason::LoadBalancerNotFound => "LoadBalancerNotFound",
            Reason::DeletingLoadBalancer => "DeletingLoadBalancer",
            Reason::DeletedLoadBalancer => "DeletedLoadBalancer",
            Reason::DeleteLoadBalancerFailed => "DeleteLoadBalancerFailed",
            Reason::SyncLoadBalancerFailed => "SyncLoadBalancerFailed",
            Reason::UnknownAnnotation => "UnknownAnnotation",
            Reason::SeveralProvidersServeClass => "SeveralProvidersServeClass",
            Reason::Provider { reason, .. } if reason.is_empty() => "ProviderWarning",
            Reason::Provider { reason, .. } => reason,
        }
    }

    pub fn type_(&self) -> EventType {
        match self {
            Reason::EnsuringLoadBalancer
            | Reason::EnsuredLoadBalancer
            | Reason::UpdatedLoadBalancer
            | Reason::DeletingLoadBalancer
            | Reason::DeletedLoadBalancer => EventType::Normal,
            Reason::UnAvailableLoadBalancer
            | Reason::UpdateLoadBalancerFailed
            | Reason::LoadBalancerNotFound
            | Reason::DeleteLoadBalancerFailed
            | Reason::SyncLoadBalancerFailed
            | Reason::UnknownAnnotation
            | Reason::SeveralProvidersServeClass
            | Reason::Provider { .. } => EventType::Warning,
        }
    }

    /// The provider call the Event is about. A failed sync is reported
    /// under EnsureLoadBalancer whichever way it went, as before.
    pub fn call(&self) -> Call {
        match self {
            Reason::UpdatedLoadBalancer | Reason::UpdateLoadBalancerFailed => Call::Update,
            Reason::DeletingLoadBalancer
            | Reason::DeletedLoadBalancer
            | Reason::DeleteLoadBalancerFailed => Call::Delete,
            Reason::Provider { call, .. } => *call,
            Reason::EnsuringLoadBalancer
            | Reason::EnsuredLoadBalancer
            | Reason::UnAvailableLoadBalancer
            | Reason::LoadBalancerNotFound
            | Reason::SyncLoadBalancerFailed
            | Reason::UnknownAnnotation
            | Reason::SeveralProvidersServeClass => Call::Ensure,
        }
    }
}

/// One Event to record on the Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub reason: Reason,
    pub note: String,
}

impl Event {
    pub fn new(reason: Reason, note: impl Into<String>) -> Self {
        Event {
            reason,
            note: note.into(),
        }
    }

    pub fn ensuring() -> Self {
        Event::new(Reason::EnsuringLoadBalancer, "Ensuring load balancer")
    }

    pub fn ensured() -> Self {
        Event::new(Reason::EnsuredLoadBalancer, "Ensured load balancer")
    }

    pub fn no_backends() -> Self {
        Event::new(
            Reason::UnAvailableLoadBalancer,
            "There are no available nodes for LoadBalancer",
        )
    }

    pub fn deleting() -> Self {
        Event::new(Reason::DeletingLoadBalancer, "Deleting load balancer")
    }

    pub fn deleted() -> Self {
        Event::new(Reason::DeletedLoadBalancer, "Deleted load balancer")
    }

    /// The Warning on a Service whose class several providers serve
    /// (`route`), recorded by the instance of the first of them (`me`)
    /// only: one per cluster, not one per claimant, and none from the
    /// providers that do not claim it.
    pub fn several_providers(route: &Route, me: &str) -> Option<Self> {
        let Route::Several(names, why) = route else {
            return None;
        };
        (names.first().map(String::as_str) == Some(me)).then(|| {
            Event::new(
                Reason::SeveralProvidersServeClass,
                format!(
                    "{why} ({}); none is asked for its load balancer until only one does",
                    names.join(", ")
                ),
            )
        })
    }

    /// A warning the provider returned with its answer to `call`.
    pub fn provider_warning(w: &ccm_provider_sdk::proto::Warning, call: Call) -> Self {
        Event::new(
            Reason::Provider {
                reason: w.reason.clone(),
                call,
            },
            w.message.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The actions the reasons' text prefixes used to pick, now named:
    /// "Delet…" is DeleteLoadBalancer, "Update…" UpdateLoadBalancer, the
    /// rest EnsureLoadBalancer.
    #[test]
    fn each_reason_names_its_action_and_type() {
        let cases = [
            (
                Reason::EnsuringLoadBalancer,
                "EnsureLoadBalancer",
                EventType::Normal,
            ),
            (
                Reason::EnsuredLoadBalancer,
                "EnsureLoadBalancer",
                EventType::Normal,
            ),
            (
                Reason::UnAvailableLoadBalancer,
                "EnsureLoadBalancer",
                EventType::Warning,
            ),
            (
                Reason::UpdatedLoadBalancer,
                "UpdateLoadBalancer",
                EventType::Normal,
            ),
            (
                Reason::UpdateLoadBalancerFailed,
                "UpdateLoadBalancer",
                EventType::Warning,
            ),
            (
                Reason::LoadBalancerNotFound,
                "EnsureLoadBalancer",
                EventType::Warning,
            ),
            (
                Reason::DeletingLoadBalancer,
                "DeleteLoadBalancer",
                EventType::Normal,
            ),
            (
                Reason::DeletedLoadBalancer,
                "DeleteLoadBalancer",
                EventType::Normal,
            ),
            (
                Reason::DeleteLoadBalancerFailed,
                "DeleteLoadBalancer",
                EventType::Warning,
            ),
            (
                Reason::SyncLoadBalancerFailed,
                "EnsureLoadBalancer",
                EventType::Warning,
            ),
            (
                Reason::UnknownAnnotation,
                "EnsureLoadBalancer",
                EventType::Warning,
            ),
            (
                Reason::SeveralProvidersServeClass,
                "EnsureLoadBalancer",
                EventType::Warning,
            ),
        ];
        for (reason, action, type_) in cases {
            assert_eq!(reason.call().action(), action, "{reason:?}");
            assert_eq!(reason.type_(), type_, "{reason:?}");
            assert_eq!(reason.text(), format!("{reason:?}"));
        }
    }

    #[test]
    fn an_ambiguous_class_is_reported_by_its_first_claimant_only() {
        let several = Route::Several(
            vec!["onprem".into(), "cloud".into()],
            "several providers serve the load balancer class \"example.com/x\"".into(),
        );
        let event = Event::several_providers(&several, "onprem").unwrap();
        assert_eq!(event.reason.text(), "SeveralProvidersServeClass");
        assert_eq!(event.reason.type_(), EventType::Warning);
        assert_eq!(
            event.note,
            "several providers serve the load balancer class \"example.com/x\" (onprem, cloud); \
             none is asked for its load balancer until only one does"
        );
        assert_eq!(Event::several_providers(&several, "cloud"), None);
        assert_eq!(Event::several_providers(&several, "edge"), None);
        assert_eq!(
            Event::several_providers(&Route::To("onprem".into()), "onprem"),
            None
        );
    }

    #[test]
    fn a_provider_warning_is_about_the_call_it_answered() {
        let warning = |reason: &str| ccm_provider_sdk::proto::Warning {
            reason: reason.into(),
            message: "careful".into(),
        };
        let e = Event::provider_warning(&warning(""), Call::Delete);
        assert_eq!(e.reason.text(), "ProviderWarning");
        assert_eq!(e.reason.call(), Call::Delete);
        assert_eq!(e.reason.type_(), EventType::Warning);
        assert_eq!(e.note, "careful");
        // Its own text decides nothing.
        let e = Event::provider_warning(&warning("DeletionProtected"), Call::Ensure);
        assert_eq!(e.reason.text(), "DeletionProtected");
        assert_eq!(e.reason.call().action(), "EnsureLoadBalancer");
    }
}
