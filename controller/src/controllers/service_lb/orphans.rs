//! The orphan sweeper: load balancers of this cluster at this instance's
//! provider that no Service wants of it (the Service vanished without a
//! reconciled delete: its finalizer was removed by hand, or it was deleted,
//! or deleted and re-created under the same name, while the controller was
//! down; or it is no longer served by this provider and holds no finalizer
//! of its) are deleted. With several providers, each instance sweeps its
//! own provider's listing.
//!
//! Only on positive evidence: a complete listing (`ListLoadBalancers`, every
//! page) and a Service cache that has synced, checked again right before
//! each delete; a Service the routing cannot place (several providers
//! serve its class, or this provider has not said which it serves) keeps
//! its load balancer. A listing error deletes nothing; a failed delete ends
//! the pass (what was deleted before it stays deleted); the next pass
//! retries.

use std::sync::Arc;
use std::time::Duration;

use ccm_provider_sdk::client::Lane;
use ccm_provider_sdk::{ClientError, LoadBalancerEntry, proto};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use super::{Lb, decide};
use crate::manager::metrics::SweepLabels;

/// How often the records of Services that vanished without a reconciled
/// delete (finalizer removed by hand, deleted while we were down) are
/// dropped when no sweep does it.
pub(super) const TIDY_PERIOD: Duration = Duration::from_secs(300);

/// Once the Service cache has synced: with `sweep`, sweeps then and every
/// period after. Without, only drops the records of Services the cache no
/// longer has (each sweep does that too), every [`TIDY_PERIOD`], so they
/// cannot pile up for the life of the process.
pub(super) async fn sweep_periodically(
    lb: Arc<Lb>,
    services: Store<Service>,
    mut synced: watch::Receiver<bool>,
    sweep_period: Option<Duration>,
) {
    if synced.wait_for(|s| *s).await.is_err() {
        return;
    }
    loop {
        match sweep_period {
            Some(_) => sweep_and_count(&lb, &services).await,
            None => lb.forget_vanished(&services.state()),
        }
        tokio::time::sleep(sweep_period.unwrap_or(TIDY_PERIOD)).await;
    }
}

/// One sweep, logged and counted in the metrics.
async fn sweep_and_count(lb: &Lb, services: &Store<Service>) {
    let result = match sweep(lb, services).await {
        Ok(deleted) => {
            if deleted > 0 {
                tracing::info!(
                    deleted,
                    provider = lb.provider_name.as_deref(),
                    "deleted orphaned load balancers"
                );
            }
            "complete"
        }
        Err(e) => {
            tracing::warn!(error = %e, provider = lb.provider_name.as_deref(), "load balancer orphan sweep stopped; the next pass retries");
            "failed"
        }
    };
    lb.ctx
        .metrics
        .orphan_sweeps
        .get_or_create(&SweepLabels { result })
        .inc();
}

/// One pass; how many load balancers it deleted.
pub(super) async fn sweep(lb: &Lb, services: &Store<Service>) -> Result<usize, ClientError> {
    let ctx = &lb.ctx;
    // Periodic clean-up: waits for the call budget behind every Service.
    let provider = ctx.provider.in_lane(Lane::Refresh);
    let listed = match provider.list_load_balancers(&ctx.cluster_name).await {
        Err(ClientError::Unsupported(_)) => {
            tracing::debug!(
                provider = lb.provider_name.as_deref(),
                "the provider cannot list load balancers; no orphan sweep"
            );
            return Ok(0);
        }
        other => other?,
    };
    let snapshot = services.state();
    lb.forget_vanished(&snapshot);
    let mut deleted = 0;
    for entry in decide::orphans(&listed, &snapshot, |s| lb.keeps(s)) {
        // A Service created since the snapshot may want it after all.
        let uid = Some(entry.service_uid.as_str());
        if services
            .find(|s| s.metadata.uid.as_deref() == uid && lb.keeps(s))
            .is_some()
        {
            continue;
        }
        tracing::info!(
            load_balancer = %entry.name,
            provider = lb.provider_name.as_deref(),
            service_uid = %entry.service_uid,
            service = %format!("{}/{}", entry.service_namespace, entry.service_name),
            "deleting a load balancer no Service wants"
        );
        let warnings = provider
            .ensure_load_balancer_deleted(&ctx.cluster_name, identity(entry))
            .await?;
        for w in warnings {
            tracing::warn!(load_balancer = %entry.name, provider = lb.provider_name.as_deref(), reason = %w.reason, "{}", w.message);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use ccm_provider_sdk::proto::*;
    use ccm_provider_sdk::{ClientError, ClientOptions, ProviderClient};
    use ccm_testsupport::raw::{ListingOnly, RawIdentity, RawListing, RawServer};
    use futures::channel::mpsc;
    use kube::runtime::reflector;
    use tonic::{Request, Response, Status};

    use super::super::Lb;
    use crate::testing::{accepting_api, context_over};

    /// A provider on the raw generated traits whose listing ends after
    /// `pages` pages, or never (each page naming a fresh next page), and
    /// which counts the deletes it gets.
    #[derive(Clone, Default)]
    struct Listing {
        pages: Option<usize>,
        calls: Arc<AtomicUsize>,
        deletes: Arc<AtomicUsize>,
    }

    #[tonic::async_trait]
    impl RawListing for Listing {
        async fn list(
            &self,
            _: Request<ListLoadBalancersRequest>,
        ) -> Result<Response<ListLoadBalancersResponse>, Status> {
            let page = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let last = self.pages.is_some_and(|p| page >= p);
            Ok(Response::new(ListLoadBalancersResponse {
                load_balancers: vec![LoadBalancerSummary {
                    name: format!("lb-{page}"),
                    service_uid: format!("uid-{page}"),
                    service_namespace: "ns".into(),
                    service_name: format!("gone-{page}"),
                    status: None,
                }],
                next_page_token: if last {
                    String::new()
                } else {
                    format!("page-{page}")
                },
            }))
        }
    }

    /// Serves `provider` (with an identity announcing cluster ids and the
    /// listing capability) and returns a client of it.
    fn serve(provider: Listing) -> (RawServer, ProviderClient) {
        let deletes = provider.deletes.clone();
        let mut identity = RawIdentity::new(
            "listing",
            &[Capability::LoadBalancers, Capability::ListLoadBalancers],
        );
        identity.info.has_cluster_id = Some(true);
        identity.probe = None;
        let server = RawServer::start(
            tonic::transport::Server::builder()
                .add_service(identity.server())
                .add_service(ListingOnly::server(provider, deletes)),
        );
        let client =
            ProviderClient::connect_lazy(&server.endpoint, ClientOptions::default()).unwrap();
        (server, client)
    }

    /// One sweep against `provider`, with no Service in the cluster: every
    /// load balancer listed is an orphan.
    async fn sweep_once(provider: &Listing) -> Result<usize, ClientError> {
        let (_server, client) = serve(provider.clone());
        let (api, _) = accepting_api();
        let (resync, _) = mpsc::unbounded();
        let lb = Lb::new(
            context_over(api, client, vec![]),
            tokio::sync::watch::channel(0).1,
            resync,
        );
        let (services, _writer) = reflector::store();
        super::sweep(&lb, &services).await
    }

    /// Issue 25, finding 5: a provider whose every page names a fresh next
    /// page was followed for 100,000 pages. The sweep now fails after the
    /// client's page budget, and deletes nothing.
    #[tokio::test]
    async fn a_listing_that_never_ends_fails_the_sweep_and_deletes_nothing() {
        let endless = Listing::default();
        let swept = tokio::time::timeout(std::time::Duration::from_secs(30), sweep_once(&endless))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "still sweeping after 30 s, {} pages listed",
                    endless.calls.load(Ordering::SeqCst)
                )
            });
        match swept {
            Err(ClientError::InvalidResponse { method, violation }) => {
                assert_eq!(method, "ListLoadBalancers");
                assert_eq!(violation.field, "next_page_token", "{violation}");
            }
            other => panic!("expected the listing refused, got {other:?}"),
        }
        let max_pages = ClientOptions::default().max_list_pages;
        assert_eq!(endless.calls.load(Ordering::SeqCst), max_pages);
        assert_eq!(endless.deletes.load(Ordering::SeqCst), 0);

        // The same provider with a listing that ends: its orphans go.
        let ending = Listing {
            pages: Some(3),
            ..Default::default()
        };
        assert_eq!(sweep_once(&ending).await.unwrap(), 3);
        assert_eq!(ending.deletes.load(Ordering::SeqCst), 3);
    }
}
