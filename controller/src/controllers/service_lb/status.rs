//! What the Service is told: status patches (finalizer, ingress and
//! condition through the status subresource) and Events.
//!
//! With several providers, every write is conditional on the Service's
//! `resourceVersion` as the sync read it (or as its own previous write left
//! it). Two instances may each see a class change at a different time (the
//! Service's class cannot change while it stays a LoadBalancer, so it goes
//! LoadBalancer → ClusterIP → LoadBalancer with another class, possibly
//! before either saw the middle step): an old provider deciding on a view
//! from before the new one wrote the status would otherwise clear or
//! overwrite that status. A stale view writes nothing ([`SyncError::Stale`])
//! and the newer version, which the watch brings, is decided afresh.

use ccm_provider_sdk::proto;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::Patch;
use serde_json::Value;

use super::decide::{self, Call, Event, Reason, Standing};
use super::error::{SyncError, kube_op};
use super::{Lb, now};

/// What a status write found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Written {
    /// Written. With several providers, the Service's resourceVersion after
    /// the write, which the sync's next write is conditional on.
    Done(Option<String>),
    /// The Service is gone: nothing was written.
    Gone,
}

/// The part of the apiserver's answer a conditional write reads.
#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    metadata: AnswerMeta,
}

#[derive(Default, serde::Deserialize)]
struct AnswerMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl Lb {
    fn services_api(&self, svc: &Service) -> Api<Service> {
        Api::namespaced(
            self.ctx.client.clone(),
            svc.metadata.namespace.as_deref().unwrap_or_default(),
        )
    }

    /// One strategic-merge patch through the status subresource, as
    /// upstream: finalizers and status both, so RBAC needs only
    /// `services/status: patch`. A Service already gone is not an error.
    pub(super) async fn patch_status(
        &self,
        svc: &Service,
        patch: Value,
        op: &'static str,
    ) -> Result<(), SyncError> {
        self.write(svc, patch, op).await.map(|_| ())
    }

    /// [`Lb::patch_status`], saying what it found. With several providers
    /// the write is conditional on `svc`'s resourceVersion (the module
    /// docs): a Service changed since is [`SyncError::Stale`].
    pub(super) async fn write(
        &self,
        svc: &Service,
        mut patch: Value,
        op: &'static str,
    ) -> Result<Written, SyncError> {
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        let api = self.services_api(svc);
        let conditional = match (&self.provider_name, &svc.metadata.resource_version) {
            (Some(_), Some(version)) => {
                patch["metadata"]["resourceVersion"] = Value::String(version.clone());
                true
            }
            _ => false,
        };
        let request = |r: &kube::core::Request| {
            r.patch_subresource(
                "status",
                name,
                &self.ctx.patch_params(),
                &Patch::Strategic(patch),
            )
        };
        let written = crate::k8s::write_text(&api, "patch_status", request)
            .await
            .and_then(|answer| {
                if !conditional {
                    return Ok(None);
                }
                // Its resourceVersion, and nothing else of it.
                serde_json::from_str::<Answer>(&answer)
                    .map(|a| a.metadata.resource_version)
                    .map_err(kube::Error::SerdeError)
            });
        match written {
            Ok(version) => Ok(Written::Done(version)),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(Written::Gone),
            Err(kube::Error::Api(e)) if e.code == 409 && conditional => {
                Err(SyncError::Stale { op })
            }
            Err(e) => Err(kube_op(op)(e)),
        }
    }

    /// Records `event` on the Service; with several providers its note
    /// names this one.
    pub(super) async fn event(&self, svc: &Service, event: Event) {
        let Event { reason, mut note } = event;
        if let Some(provider) = &self.provider_name {
            note = format!("{note} (provider {provider})");
        }
        let action = reason.call().action();
        self.ctx
            .event(svc, reason.type_(), reason.text(), note, action)
            .await;
    }

    /// The provider's warnings from its answer to `call`, as Events.
    pub(super) async fn provider_warnings(
        &self,
        svc: &Service,
        warnings: &[proto::Warning],
        call: Call,
    ) {
        for w in warnings {
            self.event(svc, Event::provider_warning(w, call)).await;
        }
    }

    /// One Warning per unknown annotation key under the provider's
    /// prefixes, once per Service uid, naming the closest known key.
    pub(super) async fn report_unknown_annotations(&self, svc: &Service) {
        let Ok(handshake) = self.ctx.provider.handshake().await else {
            return;
        };
        let schema = &handshake.annotations;
        let uid = svc.metadata.uid.clone().unwrap_or_default();
        for (key, closest) in decide::unknown_annotations(svc, schema) {
            let new = self
                .reported_annotations
                .lock()
                .insert((uid.clone(), key.clone()));
            if !new {
                continue;
            }
            let hint = match closest {
                Some(k) => format!("; did you mean {k}?"),
                None => String::new(),
            };
            let note = format!(
                "Annotation {key} is not one provider {} understands and is ignored{hint}",
                handshake.info.name
            );
            self.event(svc, Event::new(Reason::UnknownAnnotation, note))
                .await;
        }
    }

    /// Writes the condition (and, with `ingress`, the ingress) when either
    /// differs from what the Service shows; says whether it wrote.
    pub(super) async fn publish(
        &self,
        svc: &Service,
        standing: &Standing,
        ingress: Option<Vec<LoadBalancerIngress>>,
    ) -> Result<bool, SyncError> {
        let Some(patch) = decide::status_patch(svc, standing, ingress, Time(now())) else {
            return Ok(false);
        };
        self.patch_status(svc, patch, "update load balancer status")
            .await?;
        Ok(true)
    }

    /// Says on the Service why a sync failed: a Warning Event, and the
    /// condition unless the apiserver itself failed.
    pub(super) async fn report_failure(&self, svc: &Service, err: &SyncError, deleting: bool) {
        let key = decide::key(svc);
        let note = format!("Error syncing load balancer: {err}");
        self.event(svc, Event::new(Reason::SyncLoadBalancerFailed, note))
            .await;
        if !matches!(err, SyncError::Kube { .. } | SyncError::Stale { .. }) {
            let standing = if deleting {
                Standing::not_ready("DeletionFailed", err.to_string())
            } else {
                Standing::not_ready(err.condition_reason(), err.to_string())
            };
            if let Err(e) = self.publish(svc, &standing, None).await {
                tracing::warn!(service = %key, provider = self.provider_name.as_deref(), error = %e, "could not record the failure on the Service");
            }
        }
    }
}
