//! Executing a Delete step, and deleting the load balancer of a Service
//! that vanished without one.

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;

use super::decide::{self, Call, Event, Record};
use super::error::{SyncError, provider};
use super::{Action, Failed, Lb};

impl Lb {
    /// Deletes the load balancer as `plan` says, then the finalizer,
    /// ingress and condition. Nothing is removed unless the provider said
    /// the load balancer is gone. `record` is the Service's, held.
    pub(super) async fn delete(
        &self,
        svc: &Service,
        plan: &decide::Delete,
        record: &mut Record,
    ) -> Result<Action, SyncError> {
        let exists = self
            .ctx
            .provider
            .get_load_balancer(&self.ctx.cluster_name, plan.request.clone())
            .await
            .map_err(provider("check if load balancer exists before cleanup"))?;
        if exists.is_some() {
            self.event(svc, Event::deleting()).await;
            let warnings = self
                .ctx
                .provider
                .ensure_load_balancer_deleted(&self.ctx.cluster_name, plan.request.clone())
                .await
                .map_err(provider("delete load balancer"))?;
            self.provider_warnings(svc, &warnings, Call::Delete).await;
        }
        // Gone, whatever the write below finds: a Service that is ours
        // again before the write succeeds (a class change back and forth)
        // is ensured afresh, and one that vanishes has nothing to delete.
        record.ensured = None;
        record.sent = None;
        if let Some(patch) = &plan.cleanup_write {
            self.patch_status(svc, patch.clone(), "remove load balancer cleanup finalizer")
                .await?;
        }
        self.event(svc, Event::deleted()).await;
        self.forget(&decide::key(svc));
        Ok(Action::await_change())
    }
}
/// A Service the cache no longer has: deleted, or deleted while the watch
/// was broken. Its finalizer normally holds the deletion until [`Lb::delete`]
/// ran, but a DELETE that races the finalizer's addition removes the
/// Service anyway, both requests answered with success
/// (kubernetes/kubernetes#77988), and a user may remove the finalizer by
/// hand. Upstream deletes the load balancer from its cache of the Service
/// (`processServiceDeletion`); so does this, from what the Ensure was sent,
/// when this process sent one.
impl Lb {
    pub(super) async fn vanished(&self, key: ObjectRef<Service>) -> Result<Action, Failed> {
        if key.namespace.is_none() {
            return Ok(Action::await_change());
        }
        let id = record_key(&key);
        let Some(record) = self.records.lock().get(&id).cloned() else {
            return Ok(Action::await_change());
        };
        let mut record = record.lock().await;
        let Some(sent) = record.sent.clone() else {
            drop(record);
            self.forget(&id);
            return Ok(Action::await_change());
        };
        // What events refer to: the Service as it was.
        let svc = gone_service(&key, Some(sent.uid.clone()));
        let warnings = self
            .ctx
            .provider
            .ensure_load_balancer_deleted(&self.ctx.cluster_name, sent)
            .await
            .map_err(provider("delete load balancer"))
            .map_err(Failed::vanished)?;
        self.provider_warnings(&svc, &warnings, Call::Delete).await;
        tracing::info!(service = %id, provider = self.provider_name.as_deref(), uid = ?svc.metadata.uid, "service gone without a reconciled delete (finalizer bypassed); deleted its load balancer");
        self.event(&svc, Event::deleted()).await;
        // Emptied as well as forgotten: the backend loop may hold this
        // record and must find nothing to update.
        *record = Record::default();
        drop(record);
        self.forget(&id);
        Ok(Action::await_change())
    }
}

/// The record key of the Service `key` names (`namespace/name`).
pub(super) fn record_key(key: &ObjectRef<Service>) -> String {
    format!(
        "{}/{}",
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

/// The Service `key` named, with the `uid` its Ensure was sent for: what
/// Events and request ids refer to once the Service is gone.
pub(super) fn gone_service(key: &ObjectRef<Service>, uid: Option<String>) -> Service {
    Service {
        metadata: kube::api::ObjectMeta {
            namespace: key.namespace.clone(),
            name: Some(key.name.clone()),
            uid,
            ..Default::default()
        },
        ..Default::default()
    }
}
