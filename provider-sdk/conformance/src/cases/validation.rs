//! Requests that break the contract, sent with raw clients: each must be
//! INVALID_ARGUMENT and must create nothing.

use ccm_provider_sdk::proto::{
    CreateRouteRequest, EnsureLoadBalancerRequest, GetLoadBalancerRequest, InstanceExistsRequest,
    InstanceMetadataRequest, LoadBalancerExistence, NodeRef, Route, Service,
};
use ccm_provider_sdk::validate::MAX_ANNOTATIONS_BYTES;
use tonic::Code;

use crate::ctx::{CaseResult, Ctx, INVALID_REASONS, check, expect_error, ok, once};

pub(super) async fn instance_exists_without_node(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        instances.instance_exists(InstanceExistsRequest { node: None })
    );
    expect_error(
        "InstanceExists without node",
        r,
        &[Code::InvalidArgument],
        INVALID_REASONS,
    )
}

pub(super) async fn instance_exists_empty_node_name(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        instances.instance_exists(InstanceExistsRequest {
            node: Some(NodeRef::default())
        })
    );
    expect_error(
        "InstanceExists with empty node.name",
        r,
        &[Code::InvalidArgument],
        INVALID_REASONS,
    )
}

pub(super) async fn instance_metadata_without_node(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        instances.instance_metadata(InstanceMetadataRequest { node: None })
    );
    expect_error(
        "InstanceMetadata without node",
        r,
        &[Code::InvalidArgument],
        INVALID_REASONS,
    )
}

/// Sends an EnsureLoadBalancer that breaks the contract, expects
/// INVALID_ARGUMENT, then checks no load balancer exists for `valid` (the
/// same Service, unbroken).
async fn ensure_rejected(
    cx: &Ctx,
    what: &str,
    cluster_name: &str,
    service: Option<Service>,
    valid: Option<Service>,
) -> CaseResult {
    if let Some(v) = &valid {
        // Should the provider create it anyway, the cleanup deletes it.
        cx.track_service(v);
    }
    let r = once!(
        cx,
        lb.ensure_load_balancer(EnsureLoadBalancerRequest {
            cluster_name: cluster_name.to_owned(),
            service,
            nodes: cx.nodes(0..2),
            node_set_id: String::new(),
        })
    );
    expect_error(
        &format!("EnsureLoadBalancer {what}"),
        r,
        &[Code::InvalidArgument],
        INVALID_REASONS,
    )?;
    if let Some(v) = valid {
        let g = ok(
            "GetLoadBalancer after a rejected EnsureLoadBalancer",
            once!(
                cx,
                lb.get_load_balancer(GetLoadBalancerRequest {
                    cluster_name: cx.cluster.clone(),
                    service: Some(v.clone()),
                })
            ),
        )?;
        check!(
            g.existence == LoadBalancerExistence::NotExists as i32,
            "EnsureLoadBalancer {what} was rejected but created something: GetLoadBalancer(uid {}) expected NOT_EXISTS, got {}",
            v.uid,
            g.existence
        );
        cx.untrack_service(&v);
    }
    Ok(())
}

pub(super) async fn ensure_lb_without_service(cx: &Ctx) -> CaseResult {
    ensure_rejected(cx, "without service", &cx.cluster, None, None).await
}

pub(super) async fn ensure_lb_empty_cluster_name(cx: &Ctx) -> CaseResult {
    let s = cx.service("no-cluster");
    ensure_rejected(cx, "with empty cluster_name", "", Some(s.clone()), Some(s)).await
}

async fn broken_service(
    cx: &Ctx,
    what: &str,
    tag: &str,
    f: impl FnOnce(&mut Service),
) -> CaseResult {
    let valid = cx.service(tag);
    let mut broken = valid.clone();
    f(&mut broken);
    ensure_rejected(cx, what, &cx.cluster, Some(broken), Some(valid)).await
}

pub(super) async fn ensure_lb_unspecified_protocol(cx: &Ctx) -> CaseResult {
    broken_service(cx, "with port protocol UNSPECIFIED (0)", "proto-0", |s| {
        s.ports[0].protocol = 0
    })
    .await
}

pub(super) async fn ensure_lb_unknown_protocol(cx: &Ctx) -> CaseResult {
    broken_service(cx, "with unknown port protocol 99", "proto-99", |s| {
        s.ports[0].protocol = 99
    })
    .await
}

pub(super) async fn ensure_lb_unspecified_traffic_policy(cx: &Ctx) -> CaseResult {
    broken_service(
        cx,
        "with external_traffic_policy UNSPECIFIED (0)",
        "etp-0",
        |s| s.external_traffic_policy = 0,
    )
    .await
}

pub(super) async fn ensure_lb_invalid_source_range(cx: &Ctx) -> CaseResult {
    broken_service(
        cx,
        "with load_balancer_source_ranges [\"10.0.0.0/8\", \"300.1.2.3/33\"]",
        "bad-range",
        |s| s.load_balancer_source_ranges = vec!["10.0.0.0/8".into(), "300.1.2.3/33".into()],
    )
    .await
}

pub(super) async fn ensure_lb_oversize_annotations(cx: &Ctx) -> CaseResult {
    broken_service(
        cx,
        "with annotations over 256 KiB",
        "big-annotations",
        |s| {
            s.annotations.insert(
                "conformance.ccm-rs.io/oversize".into(),
                "x".repeat(MAX_ANNOTATIONS_BYTES + 1),
            );
        },
    )
    .await
}

pub(super) async fn create_route_without_route(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        routes.create_route(CreateRouteRequest {
            cluster_name: cx.cluster.clone(),
            name_hint: cx.node(1).uid,
            route: None,
        })
    );
    expect_error(
        "CreateRoute without route",
        r,
        &[Code::InvalidArgument],
        INVALID_REASONS,
    )
}

pub(super) async fn create_route_invalid_cidr(cx: &Ctx) -> CaseResult {
    let node = cx.node(1);
    let r = once!(
        cx,
        routes.create_route(CreateRouteRequest {
            cluster_name: cx.cluster.clone(),
            name_hint: node.uid.clone(),
            route: Some(Route {
                target_node: node.name,
                destination_cidr: "100.64.0.0/33".into(),
                ..Default::default()
            }),
        })
    );
    expect_error(
        "CreateRoute with destination_cidr \"100.64.0.0/33\"",
        r,
        &[Code::InvalidArgument],
        INVALID_REASONS,
    )
}
