//! The backend half of the service-lb-controller: when the node set
//! changes, one UpdateLoadBalancer per Service whose backends differ.

use std::sync::Arc;

use ccm_provider_sdk::LbOutcome;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};

use super::decide::{Call, Event, Reason};
use super::{BACKEND_COALESCE_MAX, BACKEND_QUIET, Backends, Lb, Record, decide};

/// Calls UpdateLoadBalancer for every Service this process ensured whose
/// backends differ from the current node set. Returns how many it updated.
async fn sync_backends(lb: &Arc<Lb>, services: &Store<Service>, workers: usize) -> usize {
    // One snapshot: what is sent is what the digest says was sent.
    let backends = lb.current_backends();
    let current = backends.digest;
    let records: Vec<(String, Arc<tokio::sync::Mutex<Record>>)> = lb
        .records
        .lock()
        .iter()
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    let updated = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(records)
        .for_each_concurrent(workers.max(1), |(key, record)| {
            let current = &current;
            let backends = &backends;
            let updated = &updated;
            async move {
                let mut record = record.lock().await;
                if record.ensured.is_none() || record.backends == Some(*current) {
                    return;
                }
                let Some((ns, name)) = key.split_once('/') else {
                    return;
                };
                let Some(svc) = services.get(&ObjectRef::new(name).within(ns)) else {
                    return;
                };
                let routed = lb.route(&svc).1;
                if !routed.serves() || decide::needs_cleanup(&svc, &routed) {
                    return;
                }
                record.backends = Some(*current);
                updated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                lb.ctx.metrics.lb_syncs.inc();
                let outcome = update_one(lb, &svc, backends).await;
                if outcome != Update::Done {
                    lb.ctx.metrics.nodesync_errors.inc();
                    record.ensured = None;
                }
                if outcome == Update::EnsureNow {
                    let _ = lb.resync.unbounded_send(ObjectRef::from_obj(svc.as_ref()));
                }
            }
        })
        .await;
    updated.into_inner()
}

/// What one UpdateLoadBalancer left to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Update {
    Done,
    /// A full Ensure, which retries or recreates the load balancer, now.
    EnsureNow,
    /// A full Ensure once the watch shows the condition just written: a
    /// sync started now could see the Service from before that write in
    /// the cache, find its own Ready condition already there and skip
    /// writing it back, leaving `LoadBalancerNotFound` on a recreated load
    /// balancer.
    EnsureOnWatch,
}

/// One UpdateLoadBalancer. On failure the load balancer is looked up: one
/// that still exists gets upstream's `UpdateLoadBalancerFailed`, a missing
/// one `LoadBalancerNotFound` (upstream counts that as success); either
/// asks for a full Ensure, which retries or recreates it.
async fn update_one(lb: &Lb, svc: &Service, backends: &Backends) -> Update {
    let nodes = &backends.nodes;
    let key = decide::key(svc);
    let request = match decide::to_proto(svc) {
        Ok(r) => r,
        Err(_) => return Update::EnsureNow,
    };
    let ctx = &lb.ctx;
    match ctx
        .provider
        .update_load_balancer(&ctx.cluster_name, request.clone(), nodes)
        .await
    {
        Ok(answer) => {
            lb.provider_warnings(svc, &answer.warnings, Call::Update)
                .await;
            if matches!(answer.outcome, LbOutcome::Done(())) {
                let event = if nodes.is_empty() {
                    Event::no_backends()
                } else {
                    Event::new(
                        Reason::UpdatedLoadBalancer,
                        "Updated load balancer with new hosts",
                    )
                };
                lb.event(svc, event).await;
            }
            Update::Done
        }
        Err(err) => match ctx
            .provider
            .get_load_balancer(&ctx.cluster_name, request)
            .await
        {
            Ok(None) => {
                // Upstream counts this as success and the Service keeps
                // its address and stays "ready" with no load balancer
                // behind it. Ours: say so, and ask for a full Ensure,
                // which recreates it.
                tracing::warn!(service = %key, provider = lb.provider_name.as_deref(), update_error = %err, "load balancer gone from the cloud; recreating it");
                let gone = "The load balancer no longer exists in the cloud; recreating it";
                lb.event(svc, Event::new(Reason::LoadBalancerNotFound, gone))
                    .await;
                let missing = decide::Standing::not_ready("LoadBalancerNotFound", gone);
                match lb.publish(svc, &missing, None).await {
                    Ok(true) => Update::EnsureOnWatch,
                    // Nothing written (the condition said so already): no
                    // watch event follows.
                    Ok(false) => Update::EnsureNow,
                    Err(e) => {
                        tracing::warn!(service = %key, provider = lb.provider_name.as_deref(), error = %e, "updating the LoadBalancerReady condition");
                        Update::EnsureNow
                    }
                }
            }
            Ok(Some(_)) => {
                let note = format!(
                    "Error updating load balancer with new hosts {} [node names limited, total number of nodes: {}], error: {err}",
                    backends.names,
                    nodes.len()
                );
                lb.event(svc, Event::new(Reason::UpdateLoadBalancerFailed, note))
                    .await;
                Update::EnsureNow
            }
            Err(e) => {
                tracing::warn!(service = %key, provider = lb.provider_name.as_deref(), update_error = %err, error = %e, "updating load balancer hosts; could not check whether it still exists");
                Update::EnsureNow
            }
        },
    }
}

/// Waits for a node change, then until the node set has been quiet for
/// [`BACKEND_QUIET`] or [`BACKEND_COALESCE_MAX`] has passed since that
/// first change. False once the node watch is gone.
async fn settled(changes: &mut tokio::sync::watch::Receiver<u64>) -> bool {
    if changes.changed().await.is_err() {
        return false;
    }
    changes.mark_unchanged();
    let latest = tokio::time::Instant::now() + BACKEND_COALESCE_MAX;
    loop {
        let until = latest.min(tokio::time::Instant::now() + BACKEND_QUIET);
        match tokio::time::timeout_at(until, changes.changed()).await {
            Ok(Ok(())) => changes.mark_unchanged(),
            Ok(Err(_)) => return false,
            Err(_) => return true,
        }
    }
}

/// Passes each change of the node cache (`nodes`) on to `backends`, which
/// the routing moves too.
pub(super) async fn relay(
    mut nodes: tokio::sync::watch::Receiver<u64>,
    backends: tokio::sync::watch::Sender<u64>,
) {
    while nodes.changed().await.is_ok() {
        backends.send_modify(|g| *g = g.wrapping_add(1));
    }
}

/// Keeps every load balancer's backends equal to the node set.
pub(super) async fn follow_nodes(
    lb: Arc<Lb>,
    services: Store<Service>,
    mut node_changes: tokio::sync::watch::Receiver<u64>,
    workers: usize,
) {
    while settled(&mut node_changes).await {
        let pass = std::time::Instant::now();
        let updated = sync_backends(&lb, &services, workers).await;
        lb.ctx
            .metrics
            .nodesync_latency
            .observe(pass.elapsed().as_secs_f64());
        lb.ctx
            .metrics
            .queues
            .processed(lb.queues.nodes, pass.elapsed(), false);
        if updated > 0 {
            tracing::info!(
                services = updated,
                provider = lb.provider_name.as_deref(),
                "updated load balancer backends"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lone_change_is_acted_on_once_the_set_is_quiet() {
        let (tx, mut rx) = tokio::sync::watch::channel(0u64);
        let start = Instant::now();
        tx.send_modify(|n| *n += 1);
        assert!(settled(&mut rx).await);
        assert_eq!(start.elapsed(), BACKEND_QUIET);
    }

    #[tokio::test(start_paused = true)]
    async fn changes_close_together_are_one_pass() {
        let (tx, mut rx) = tokio::sync::watch::channel(0u64);
        let start = Instant::now();
        tx.send_modify(|n| *n += 1);
        let joins = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(30)).await;
                tx.send_modify(|n| *n += 1);
            }
            tx
        });
        assert!(settled(&mut rx).await);
        assert_eq!(start.elapsed(), Duration::from_millis(90) + BACKEND_QUIET);
        let _tx = joins.await.unwrap();
        assert!(!rx.has_changed().unwrap(), "the pass covers every change");
    }

    #[tokio::test(start_paused = true)]
    async fn a_set_that_never_settles_still_gets_a_pass_a_second() {
        let (tx, mut rx) = tokio::sync::watch::channel(0u64);
        let start = Instant::now();
        tx.send_modify(|n| *n += 1);
        let churn = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if tx.send(0).is_err() {
                    return;
                }
            }
        });
        assert!(settled(&mut rx).await);
        assert_eq!(start.elapsed(), BACKEND_COALESCE_MAX);
        churn.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_ends_with_the_node_watch() {
        let (tx, mut rx) = tokio::sync::watch::channel(0u64);
        drop(tx);
        assert!(!settled(&mut rx).await);
    }
}
