//! One sync of one Service, decided before any I/O: [`plan`] says from the
//! Service and this process's [`Record`] of it which writes, provider calls
//! and Events the sync makes and when it comes back; [`after_ensure`] says
//! what follows the provider's answer to EnsureLoadBalancer.

use std::time::Duration;

use ccm_provider_sdk::{LbOutcome, proto};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    BackendDigest, Event, Place, Routed, SpecError, Standing, condition, condition_removal,
    condition_update, fingerprint, has_finalizer, ingress, ingress_from_proto, needs_cleanup,
    status_patch, to_proto, to_proto_ref,
};

/// What this process last did for one Service.
#[derive(Debug, Default)]
pub struct Record {
    pub uid: String,
    /// `fingerprint` of the last Service whose Ensure succeeded; `None`
    /// forces the next sync to Ensure.
    pub ensured: Option<u64>,
    /// The backends the load balancer was last given.
    pub backends: Option<BackendDigest>,
    /// The provider said another controller handles it.
    pub elsewhere: bool,
    /// After a failure: when the next attempt may be made.
    pub retry: Option<Retry>,
    /// The Service as last sent to EnsureLoadBalancer, kept while its load
    /// balancer may exist (whatever that Ensure answered): a Service that
    /// vanishes without a reconciled delete still gets an
    /// EnsureLoadBalancerDeleted, with what its Ensure was given.
    pub sent: Option<proto::Service>,
}

impl Record {
    /// A record for the Service `uid` with nothing done yet.
    pub fn fresh(uid: String) -> Record {
        Record {
            uid,
            ..Record::default()
        }
    }
}

/// After a failed attempt, no new one before `not_before` while the
/// Service is unchanged in every way that matters (its fingerprint, and
/// whether it needs cleanup). Our own status writes come back as watch
/// events; without this they would retry at once and defeat both the
/// backoff and the provider's RetryInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub fingerprint: u64,
    pub cleanup: bool,
    pub not_before: Due,
}

/// When a failed attempt's retry is due. The error policy chooses the
/// delay after the failed sync has returned (from the queue's count of
/// failures in a row), so the gate and the policy share this cell; the
/// runtime runs the policy before the key can be worked on again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due(std::sync::Arc<std::sync::OnceLock<Instant>>);

impl Due {
    /// Due at `at`.
    #[cfg(test)]
    pub fn at(at: Instant) -> Due {
        Due(std::sync::Arc::new(std::sync::OnceLock::from(at)))
    }

    /// Sets when it is due; the first setting stands.
    pub fn set(&self, at: Instant) {
        let _ = self.0.set(at);
    }

    /// When it is due, once set.
    pub fn get(&self) -> Option<Instant> {
        self.0.get().copied()
    }
}

/// What one sync of a Service does, in order: the replaced Service's
/// load balancer, then the record, then `step`.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// The record is not this Service's (none yet, or the record of one
    /// this Service replaced under the same name): nothing recorded
    /// applies, and the sync starts from a fresh record.
    pub fresh_record: bool,
    /// The load balancer this process may have made for the replaced
    /// Service, to delete (as upstream's processServiceDeletion) before
    /// anything else; a failure ends the sync.
    pub delete_replaced: Option<proto::Service>,
    /// The Service as seen now, for the [`Retry`] gate a failure leaves.
    pub fingerprint: u64,
    pub cleanup: bool,
    pub step: Step,
}

/// The step of a sync after the replaced Service's load balancer.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Not ours, and nothing from this process to delete.
    Nothing,
    /// Ensured as the Service is now (its own condition does not count:
    /// the cache may not show our status write yet, and upstream does not
    /// re-ensure on status changes either).
    Current,
    /// A failed attempt's retry is due in this long, and the Service has
    /// not changed since in a way that matters ([`Retry`]).
    NotYet(Duration),
    Ensure(Ensure),
    Delete(Delete),
}

/// Ensuring the load balancer: `events`, the unknown-annotation check,
/// `first_write` (unless `request` failed), EnsureLoadBalancer with the
/// current backends, then [`after_ensure`].
#[derive(Debug, PartialEq)]
pub struct Ensure {
    /// Recorded first, whatever follows.
    pub events: Vec<Event>,
    /// What EnsureLoadBalancer is sent; a Service the provider cannot be
    /// told about fails the sync before anything is written.
    pub request: Result<proto::Service, SpecError>,
    /// The finalizer and a Provisioning condition, whichever the Service
    /// lacks, written before the cloud is called, so no load balancer can
    /// exist that a deletion would not see. A Service gone by then gets no
    /// load balancer.
    pub first_write: Option<Value>,
    /// The condition is ours once `first_write` is done: the Service
    /// shows one, or the write adds it.
    pub condition_ours: bool,
}

/// Deleting the load balancer: GetLoadBalancer; if it exists, the
/// DeletingLoadBalancer Event and EnsureLoadBalancerDeleted; then
/// `cleanup_write`, DeletedLoadBalancer, and the record is dropped.
/// Nothing is removed unless the provider said the load balancer is gone.
#[derive(Debug, PartialEq)]
pub struct Delete {
    /// The Service's identity (a delete needs no valid spec).
    pub request: proto::Service,
    /// The provider's finalizer, and our condition and the ingress unless
    /// another provider serves the Service now (they are then its), whichever
    /// are there. Never another provider's finalizer.
    pub cleanup_write: Option<Value>,
    /// The Service lost its finalizer to someone else and this process
    /// sent it an Ensure: deleted anyway rather than leaked, and a failure
    /// says so ([`Delete::failure_event`]).
    pub finalizer_gone: bool,
}

impl Delete {
    /// The Event a failed delete adds to the sync's own failure Event.
    pub fn failure_event(&self, error: &dyn std::fmt::Display) -> Option<Event> {
        self.finalizer_gone.then(|| {
            Event::new(
                super::Reason::DeleteLoadBalancerFailed,
                format!("Error deleting load balancer: {error}"),
            )
        })
    }
}

/// Whether a Service is any of this controller's business: its provider
/// serves it, or it carries the provider's finalizer and needs cleaning up.
/// Most Services are neither, and unless this process has a record of them
/// they get no record at all.
pub fn concerns_us(svc: &Service, routed: &Routed) -> bool {
    needs_cleanup(svc, routed) || routed.serves()
}

/// One sync of `svc`, routed as `routed`, given its `record`, at `now` (the
/// retry gate's clock) and `at` (the condition's clock).
pub fn plan(svc: &Service, routed: &Routed, record: &Record, now: Instant, at: Time) -> Plan {
    let uid = svc.metadata.uid.as_deref().unwrap_or_default();
    let fresh_record = record.uid != uid;
    let delete_replaced = if fresh_record && !record.elsewhere {
        record.sent.clone()
    } else {
        None
    };
    let fresh = Record::default();
    let record = if fresh_record { &fresh } else { record };
    let fingerprint = fingerprint(svc);
    let cleanup = needs_cleanup(svc, routed);
    let due = record
        .retry
        .as_ref()
        .filter(|r| (r.fingerprint, r.cleanup) == (fingerprint, cleanup))
        .and_then(|r| r.not_before.get())
        .filter(|due| now < *due);
    let step = match due {
        Some(due) => Step::NotYet(due - now),
        _ if cleanup => Step::Delete(delete(svc, routed, false)),
        _ if routed.serves() => {
            if record.ensured == Some(fingerprint) && has_finalizer(svc, routed.finalizer) {
                Step::Current
            } else {
                Step::Ensure(ensure(svc, routed.finalizer, at))
            }
        }
        // This process sent it an Ensure, its finalizer was removed by
        // someone else, and the routing proves it is no longer ours.
        _ if record.sent.is_some() && routed.not_ours() => Step::Delete(delete(svc, routed, true)),
        _ => Step::Nothing,
    };
    Plan {
        fresh_record,
        delete_replaced,
        fingerprint,
        cleanup,
        step,
    }
}

fn ensure(svc: &Service, finalizer: &str, at: Time) -> Ensure {
    let mut first = serde_json::Map::new();
    let mut condition_ours = condition(svc).is_some();
    if !has_finalizer(svc, finalizer) {
        first.insert("metadata".into(), json!({ "finalizers": [finalizer] }));
    }
    if condition(svc).is_none() {
        let provisioning = Standing::not_ready(
            "Provisioning",
            "Ensuring the load balancer with the provider",
        );
        if let Some(c) = condition_update(svc, &provisioning, at) {
            first.insert("status".into(), json!({ "conditions": [c] }));
            condition_ours = true;
        }
    }
    Ensure {
        events: vec![Event::ensuring()],
        request: to_proto(svc),
        first_write: (!first.is_empty()).then_some(Value::Object(first)),
        condition_ours,
    }
}

fn delete(svc: &Service, routed: &Routed, finalizer_gone: bool) -> Delete {
    let mut patch = serde_json::Map::new();
    if has_finalizer(svc, routed.finalizer) {
        patch.insert(
            "metadata".into(),
            json!({ "$deleteFromPrimitiveList/finalizers": [routed.finalizer] }),
        );
    }
    let mut status = serde_json::Map::new();
    // Another provider serving the Service now writes its status.
    let status_ours = routed.place != Place::Elsewhere;
    if status_ours && condition(svc).is_some() {
        status.insert("conditions".into(), condition_removal());
    }
    if status_ours && !ingress(svc).is_empty() {
        status.insert("loadBalancer".into(), json!({ "ingress": null }));
    }
    if !status.is_empty() {
        patch.insert("status".into(), Value::Object(status));
    }
    Delete {
        request: to_proto_ref(svc),
        cleanup_write: (!patch.is_empty()).then_some(Value::Object(patch)),
        finalizer_gone,
    }
}

/// What follows a successful EnsureLoadBalancer: `event`, then `write`,
/// then the record says the Service is ensured (and whether elsewhere).
#[derive(Debug, PartialEq)]
pub struct Ensured {
    /// Another controller implements the load balancer.
    pub elsewhere: bool,
    pub event: Option<Event>,
    /// The status patch, and what its failure is called.
    pub write: Option<(Value, &'static str)>,
}

/// The provider's answer `outcome` to the Ensure of `svc`; `condition_ours`
/// as [`Ensure::condition_ours`]; `at` the condition's clock.
pub fn after_ensure(
    svc: &Service,
    condition_ours: bool,
    outcome: &LbOutcome<proto::LoadBalancerStatus>,
    at: Time,
) -> Ensured {
    match outcome {
        // Another controller owns this load balancer and its status: our
        // Provisioning condition would stand forever. The finalizer stays,
        // as upstream's, so a deletion is still passed to the provider.
        LbOutcome::ImplementedElsewhere(_) => Ensured {
            elsewhere: true,
            event: None,
            write: condition_ours.then(|| {
                (
                    json!({ "status": { "conditions": condition_removal() } }),
                    "remove the load balancer condition",
                )
            }),
        },
        LbOutcome::Done(status) => {
            // An empty ingress is a success, as upstream (only a missing
            // status is an error): the load balancer exists and takes
            // backend updates; it has no address to show.
            let standing = if status.ingress.is_empty() {
                Standing::not_ready(
                    "EnsuredWithoutAddress",
                    "The provider ensured the load balancer and published no address for it",
                )
            } else {
                Standing::ready()
            };
            Ensured {
                elsewhere: false,
                event: Some(Event::ensured()),
                write: status_patch(svc, &standing, Some(ingress_from_proto(status)), at)
                    .map(|p| (p, "update load balancer status")),
            }
        }
    }
}

#[cfg(test)]
mod tests;
