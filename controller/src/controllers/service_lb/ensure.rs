//! Executing an Ensure step: the finalizer first, EnsureLoadBalancer with
//! the current backends, then what [`decide::after_ensure`] says of the
//! answer.

use std::sync::Arc;

use ccm_provider_sdk::{LbOutcome, proto};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::decide::{self, Call, Event, Record};
use super::error::{SyncError, provider};
use super::status::Written;
use super::{Action, Lb, now};

impl Lb {
    /// Ensures the load balancer as `plan` says. `record` is this
    /// Service's, held; `fingerprint` is the Service's as planned. `svc`
    /// learns the resourceVersion of the first write, which the writes
    /// after it (here and the sync's failure report) are conditional on
    /// with several providers.
    pub(super) async fn ensure(
        &self,
        svc: &mut Arc<Service>,
        record: &mut Record,
        plan: decide::Ensure,
        fingerprint: u64,
    ) -> Result<Action, SyncError> {
        let key = decide::key(svc);
        for event in plan.events {
            self.event(svc, event).await;
        }
        self.report_unknown_annotations(svc).await;
        let request = plan.request?;
        if let Some(first) = plan.first_write {
            match self
                .write(svc, first, "add load balancer cleanup finalizer")
                .await?
            {
                Written::Done(None) => {}
                Written::Done(Some(version)) => {
                    Arc::make_mut(svc).metadata.resource_version = Some(version);
                }
                Written::Gone => {
                    // Deleted since the cache showed it (a create quickly
                    // followed by a delete): no finalizer could go on, so a
                    // load balancer created now would be seen by no
                    // deletion, and the deletion itself is never
                    // reconciled. Nothing to do.
                    tracing::info!(service = %key, provider = self.provider_name.as_deref(), "service deleted before its finalizer was added; not ensuring a load balancer");
                    return Ok(Action::await_change());
                }
            }
        }
        let svc: &Service = svc;

        let backends = self.current_backends();
        if backends.nodes.is_empty() {
            self.event(svc, Event::no_backends()).await;
        }
        record.backends = Some(backends.digest);
        record.sent = Some(request.clone());
        let answer = self
            .ctx
            .provider
            .ensure_load_balancer(&self.ctx.cluster_name, request, &backends.nodes)
            .await
            .map_err(provider("ensure load balancer"))?;
        self.provider_warnings(svc, &answer.warnings, Call::Ensure)
            .await;
        if let LbOutcome::ImplementedElsewhere(message) = &answer.outcome {
            tracing::info!(service = %key, provider = self.provider_name.as_deref(), message, "load balancer implemented elsewhere");
        }
        let ensured = decide::after_ensure(svc, plan.condition_ours, &answer.outcome, Time(now()));
        if !ensured.elsewhere {
            record.elsewhere = false;
        }
        if let Some(event) = ensured.event {
            self.event(svc, event).await;
        }
        if let Some((patch, op)) = ensured.write {
            self.patch_status(svc, patch, op).await?;
        }
        record.elsewhere = ensured.elsewhere;
        record.ensured = Some(fingerprint);
        Ok(Action::await_change())
    }

    /// Deletes the load balancer of the Service that `svc` replaced under
    /// the same name, described by `old` as its last Ensure was sent.
    pub(super) async fn delete_replaced(
        &self,
        svc: &Service,
        old: proto::Service,
    ) -> Result<(), SyncError> {
        let old_uid = old.uid.clone();
        let warnings = self
            .ctx
            .provider
            .ensure_load_balancer_deleted(&self.ctx.cluster_name, old)
            .await
            .map_err(provider("delete the load balancer of the replaced Service"))?;
        self.provider_warnings(svc, &warnings, Call::Delete).await;
        tracing::info!(service = %decide::key(svc), provider = self.provider_name.as_deref(), %old_uid, "deleted the load balancer of the Service this one replaced");
        Ok(())
    }
}
