//! What the Service is told: status patches (finalizer, ingress and
//! condition through the status subresource) and Events.

use ccm_provider_sdk::proto;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::Patch;
use serde_json::Value;

use super::decide::{self, Call, Event, Reason, Standing};
use super::error::{SyncError, kube_op};
use super::{Lb, now};

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
        self.patch_status_if_present(svc, patch, op)
            .await
            .map(|_| ())
    }

    /// [`Lb::patch_status`], saying whether the Service was still there
    /// (false: it is gone, nothing was written).
    pub(super) async fn patch_status_if_present(
        &self,
        svc: &Service,
        patch: Value,
        op: &'static str,
    ) -> Result<bool, SyncError> {
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        let written = crate::k8s::write_unread(&self.services_api(svc), "patch_status", |r| {
            r.patch_subresource(
                "status",
                name,
                &self.ctx.patch_params(),
                &Patch::Strategic(patch),
            )
        })
        .await;
        match written {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(kube_op(op)(e)),
        }
    }

    /// Records `event` on the Service.
    pub(super) async fn event(&self, svc: &Service, event: Event) {
        let Event { reason, note } = event;
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
        if !matches!(err, SyncError::Kube { .. }) {
            let standing = if deleting {
                Standing::not_ready("DeletionFailed", err.to_string())
            } else {
                Standing::not_ready(err.condition_reason(), err.to_string())
            };
            if let Err(e) = self.publish(svc, &standing, None).await {
                tracing::warn!(service = %key, error = %e, "could not record the failure on the Service");
            }
        }
    }
}
