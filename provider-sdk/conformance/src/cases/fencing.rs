//! Fencing and cancellation (types.proto, "Fencing"): a malformed fencing
//! token is refused before anything happens, and a cancelled mutation never
//! takes effect after a later one: a provider that kept running an
//! EnsureLoadBalancer its caller gave up on would recreate the load
//! balancer after the delete that followed, and leak it.
//!
//! These cases send no valid token, so they never raise the newest term a
//! provider records for the cluster.

use std::time::Duration;

use ccm_provider_sdk::proto::{
    self, EnsureLoadBalancerDeletedRequest, EnsureLoadBalancerRequest, GetLoadBalancerRequest,
    LoadBalancerExistence,
};
use tonic::Code;

use crate::ctx::{CaseResult, Ctx, INVALID_REASONS, check, expect_error, ok, once, rpc};

pub(super) async fn malformed_token_refused(cx: &Ctx) -> CaseResult {
    let s = cx.service("bad-token");
    cx.track_service(&s);
    let mut r = cx.req(EnsureLoadBalancerRequest {
        cluster_name: cx.cluster.clone(),
        service: Some(s.clone()),
        nodes: cx.nodes(0..2),
        node_set_id: String::new(),
    });
    r.metadata_mut().insert(
        proto::FENCING_TOKEN_METADATA,
        "not-a-term:conformance".parse().expect("ascii"),
    );
    let answer = cx.lb().ensure_load_balancer(r).await;
    expect_error(
        "EnsureLoadBalancer with a malformed x-ccm-fencing-token",
        answer,
        &[Code::InvalidArgument],
        INVALID_REASONS,
    )?;
    let g = ok(
        "GetLoadBalancer after a refused EnsureLoadBalancer",
        once!(
            cx,
            lb.get_load_balancer(GetLoadBalancerRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(s.clone()),
            })
        ),
    )?;
    check!(
        g.existence == LoadBalancerExistence::NotExists as i32,
        "EnsureLoadBalancer with a malformed fencing token was refused but created something: expected NOT_EXISTS, got {}",
        g.existence
    );
    cx.untrack_service(&s);
    Ok(())
}

/// Cancelled at these points after sending (the caller drops the call).
const CANCEL_AFTER_MS: [u64; 5] = [0, 1, 5, 20, 50];
/// How long the load balancer must stay gone after the delete.
const SETTLE: Duration = Duration::from_secs(1);

pub(super) async fn cancelled_ensure_never_lands(cx: &Ctx) -> CaseResult {
    let s = cx.service("cancelled");
    cx.track_service(&s);
    let ensure = EnsureLoadBalancerRequest {
        cluster_name: cx.cluster.clone(),
        service: Some(s.clone()),
        node_set_id: String::new(),
        nodes: cx.nodes(0..2),
    };
    for ms in CANCEL_AFTER_MS {
        let mut lb = cx.lb();
        let call = lb.ensure_load_balancer(cx.req(ensure.clone()));
        // Whatever the provider answered in time is irrelevant here.
        let _ = tokio::time::timeout(Duration::from_millis(ms), call).await;
    }
    ok(
        "EnsureLoadBalancerDeleted after cancelled EnsureLoadBalancers",
        rpc!(
            cx,
            lb.ensure_load_balancer_deleted(EnsureLoadBalancerDeletedRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(s.clone()),
            })
        ),
    )?;
    let get = GetLoadBalancerRequest {
        cluster_name: cx.cluster.clone(),
        service: Some(s.clone()),
    };
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let g = ok(
            "GetLoadBalancer",
            rpc!(cx, lb.get_load_balancer(get.clone())),
        )?;
        check!(
            g.existence == LoadBalancerExistence::NotExists as i32,
            "a cancelled EnsureLoadBalancer took effect after the EnsureLoadBalancerDeleted that followed it: GetLoadBalancer expected NOT_EXISTS, got {} (the provider must stop the work of a call its caller cancelled)",
            g.existence
        );
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cx.untrack_service(&s);
    Ok(())
}
