//! The orphan sweeper: load balancers of this cluster that no Service wants
//! (the Service vanished without a reconciled delete: its finalizer was
//! removed by hand, or it was deleted, or deleted and re-created under the
//! same name, while the controller was down) are deleted.
//!
//! Only on positive evidence: a complete listing (`ListLoadBalancers`, every
//! page) and a Service cache that has synced, checked again right before
//! each delete. An error anywhere deletes nothing; the next pass retries.

use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::{ClientError, LoadBalancerEntry, proto};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use super::{Lb, decide};
use crate::runtime::metrics::SweepLabels;

/// Sweeps once the Service cache has synced, then every `period`.
pub(super) async fn sweep_periodically(
    lb: Arc<Lb>,
    services: Store<Service>,
    mut synced: watch::Receiver<bool>,
    period: Duration,
) {
    if synced.wait_for(|s| *s).await.is_err() {
        return;
    }
    loop {
        let result = match sweep(&lb, &services).await {
            Ok(deleted) => {
                if deleted > 0 {
                    tracing::info!(deleted, "deleted orphaned load balancers");
                }
                "complete"
            }
            Err(e) => {
                tracing::warn!(error = %e, "load balancer orphan sweep failed; nothing deleted this pass");
                "failed"
            }
        };
        lb.ctx
            .metrics
            .orphan_sweeps
            .get_or_create(&SweepLabels { result })
            .inc();
        tokio::time::sleep(period).await;
    }
}

/// One pass; how many load balancers it deleted.
async fn sweep(lb: &Lb, services: &Store<Service>) -> Result<usize, ClientError> {
    let ctx = &lb.ctx;
    let listed = match ctx.provider.list_load_balancers(&ctx.cluster_name).await {
        Err(ClientError::Unsupported(_)) => {
            tracing::debug!("the provider cannot list load balancers; no orphan sweep");
            return Ok(0);
        }
        other => other?,
    };
    lb.forget_vanished(&services.state());
    let mut deleted = 0;
    for entry in decide::orphans(&listed, &services.state()) {
        // A Service created since the listing may want it after all.
        if decide::orphans(std::slice::from_ref(entry), &services.state()).is_empty() {
            continue;
        }
        tracing::info!(
            load_balancer = %entry.name,
            service_uid = %entry.service_uid,
            service = %format!("{}/{}", entry.service_namespace, entry.service_name),
            "deleting a load balancer no Service wants"
        );
        let warnings = ctx
            .provider
            .ensure_load_balancer_deleted(&ctx.cluster_name, identity(entry))
            .await?;
        for w in warnings {
            tracing::warn!(load_balancer = %entry.name, reason = %w.reason, "{}", w.message);
        }
        ctx.metrics.orphans_deleted.inc();
        deleted += 1;
    }
    Ok(deleted)
}

/// The Service the load balancer was made for, as far as the listing says;
/// its uid is what identifies the load balancer.
fn identity(entry: &LoadBalancerEntry) -> proto::Service {
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "unknown".to_owned()
        } else {
            s.to_owned()
        }
    };
    proto::Service {
        namespace: or_unknown(&entry.service_namespace),
        name: or_unknown(&entry.service_name),
        uid: entry.service_uid.clone(),
        // The contract's defaults, as the Service's own conversion sets them.
        external_traffic_policy: proto::TrafficPolicy::Cluster as i32,
        session_affinity: proto::SessionAffinity::None as i32,
        ..Default::default()
    }
}
