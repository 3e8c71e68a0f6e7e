//! RoutesService cases. Each case uses its own /28 from 100.64.0.0/10
//! chosen by the run id, targets existing (known) nodes, and deletes what
//! it created.

use std::collections::BTreeSet;

use ccm_provider_sdk::proto::{
    Capability, CreateRouteRequest, DeleteRouteRequest, ErrorReason, InstanceMetadataRequest,
    ListRoutesRequest, NodeAddress, NodeAddressType, Route,
};
use tonic::Code;

use crate::ctx::{CaseResult, Ctx, Reasons, check, expect_error, ok, once, rpc};

const REPEAT: usize = 10;

/// A route of this run to an existing node (clouds route only to
/// instances): the known node, or the second known node when `second`.
/// Returns (name_hint, route).
async fn route(cx: &Ctx, cidr: &str, second: bool) -> CaseResult<(String, Route)> {
    let node = if second {
        cx.second_known_node().await?
    } else {
        cx.known_node().await?
    };
    let mut addresses = Vec::new();
    if cx.has(Capability::RoutesTargetNodeAddresses) && cx.has(Capability::Instances) {
        let r = once!(
            cx,
            instances.instance_metadata(InstanceMetadataRequest {
                node: Some(node.clone())
            })
        );
        if let Ok(r) = r {
            addresses = r.metadata.map(|m| m.node_addresses).unwrap_or_default();
        }
    }
    let hint = if node.uid.is_empty() {
        format!("conformance-uid-{}", node.name)
    } else {
        node.uid.clone()
    };
    Ok((
        hint,
        Route {
            target_node: node.name,
            target_node_addresses: addresses,
            destination_cidr: cidr.to_owned(),
            ..Default::default()
        },
    ))
}

async fn create(cx: &Ctx, hint: &str, r: &Route, what: &str) -> CaseResult {
    cx.track_route(r);
    ok(
        what,
        rpc!(
            cx,
            routes.create_route(CreateRouteRequest {
                cluster_name: cx.cluster.clone(),
                name_hint: hint.to_owned(),
                route: Some(r.clone()),
            })
        ),
    )?;
    Ok(())
}

async fn delete(cx: &Ctx, r: &Route, what: &str) -> CaseResult {
    ok(
        what,
        rpc!(
            cx,
            routes.delete_route(DeleteRouteRequest {
                cluster_name: cx.cluster.clone(),
                route: Some(r.clone()),
            })
        ),
    )?;
    Ok(())
}

/// Every route of the cluster with `page_size`, checking page bounds.
async fn list_all(cx: &Ctx, page_size: i32) -> CaseResult<Vec<Route>> {
    let mut out = Vec::new();
    let mut token = String::new();
    let mut tokens = std::collections::HashSet::new();
    loop {
        let r = ok(
            &format!("ListRoutes(page_size {page_size})"),
            rpc!(
                cx,
                routes.list_routes(ListRoutesRequest {
                    cluster_name: cx.cluster.clone(),
                    page_size,
                    page_token: token.clone(),
                })
            ),
        )?;
        check!(
            page_size == 0 || r.routes.len() <= page_size as usize,
            "ListRoutes(page_size {page_size}): expected at most {page_size} routes per page, got {}",
            r.routes.len()
        );
        out.extend(r.routes);
        if r.next_page_token.is_empty() {
            return Ok(out);
        }
        check!(
            tokens.insert(r.next_page_token.clone()) && tokens.len() < 10_000,
            "ListRoutes(page_size {page_size}): next_page_token {:?} repeats or pages never end",
            r.next_page_token
        );
        token = r.next_page_token;
    }
}

async fn count_listed(cx: &Ctx, cidr: &str, page_size: i32) -> CaseResult<Vec<Route>> {
    Ok(list_all(cx, page_size)
        .await?
        .into_iter()
        .filter(|r| r.destination_cidr == cidr)
        .collect())
}

pub(super) async fn create_idempotent(cx: &Ctx) -> CaseResult {
    let cidr = cx.route_cidr();
    let (hint, r) = route(cx, &cidr, false).await?;
    create(cx, &hint, &r, "CreateRoute").await?;
    for i in 1..=REPEAT {
        create(
            cx,
            &hint,
            &r,
            &format!("CreateRoute repeat {i} of an identical route"),
        )
        .await?;
    }
    let listed = count_listed(cx, &cidr, 0).await?;
    check!(
        listed.len() == 1,
        "ListRoutes after {} identical CreateRoute calls: expected {cidr} once, got {} times",
        REPEAT + 1,
        listed.len()
    );
    delete(cx, &r, "DeleteRoute").await?;
    cx.untrack_route(&r);
    Ok(())
}

pub(super) async fn list_contains_once(cx: &Ctx) -> CaseResult {
    let cidr = cx.route_cidr();
    let (hint, r) = route(cx, &cidr, false).await?;
    create(cx, &hint, &r, "CreateRoute").await?;
    for page_size in [1, 2, 0] {
        let listed = count_listed(cx, &cidr, page_size).await?;
        check!(
            listed.len() == 1,
            "ListRoutes(page_size {page_size}): expected {cidr} exactly once, got {} times",
            listed.len()
        );
        check!(
            listed[0].target_node == r.target_node && !listed[0].blackhole,
            "ListRoutes(page_size {page_size}): expected {cidr} -> {} (not blackhole), got {:?}",
            r.target_node,
            listed[0]
        );
    }
    delete(cx, &r, "DeleteRoute").await?;
    cx.untrack_route(&r);
    Ok(())
}

pub(super) async fn create_conflicting(cx: &Ctx) -> CaseResult {
    let cidr = cx.route_cidr();
    let (hint, r) = route(cx, &cidr, false).await?;
    create(cx, &hint, &r, "CreateRoute").await?;
    let (other_hint, other) = route(cx, &cidr, true).await?;
    let res = once!(
        cx,
        routes.create_route(CreateRouteRequest {
            cluster_name: cx.cluster.clone(),
            name_hint: other_hint,
            route: Some(other),
        })
    );
    expect_error(
        "CreateRoute for a CIDR already routed to another node",
        res,
        &[Code::AlreadyExists, Code::FailedPrecondition],
        Reasons::Required(&[ErrorReason::ConflictingResource]),
    )?;
    let listed = count_listed(cx, &cidr, 0).await?;
    check!(
        listed.len() == 1 && listed[0].target_node == r.target_node,
        "ListRoutes after a conflicting CreateRoute: expected {cidr} -> {} only, got {listed:?}",
        r.target_node
    );
    delete(cx, &r, "DeleteRoute").await?;
    cx.untrack_route(&r);
    Ok(())
}

pub(super) async fn delete_idempotent(cx: &Ctx) -> CaseResult {
    let cidr = cx.route_cidr();
    let (hint, r) = route(cx, &cidr, false).await?;
    create(cx, &hint, &r, "CreateRoute").await?;
    for i in 1..=REPEAT {
        delete(cx, &r, &format!("DeleteRoute call {i} of {REPEAT}")).await?;
    }
    let listed = count_listed(cx, &cidr, 0).await?;
    check!(
        listed.is_empty(),
        "ListRoutes after DeleteRoute: expected {cidr} gone, got {listed:?}"
    );
    cx.untrack_route(&r);
    Ok(())
}

pub(super) async fn delete_never_created(cx: &Ctx) -> CaseResult {
    let cidr = cx.route_cidr();
    // Deleting needs no existing target node.
    let r = Route {
        target_node: cx.node(1).name,
        destination_cidr: cidr,
        ..Default::default()
    };
    delete(cx, &r, "DeleteRoute for a route that never existed").await
}

/// Addresses compared as the controller compares them: a set of
/// (type, address).
fn address_set(a: &[NodeAddress]) -> BTreeSet<(i32, String)> {
    a.iter().map(|a| (a.r#type, a.address.clone())).collect()
}

/// The one listing of `cidr`, as a controller's reconcile would see it:
/// routed to `want.target_node` with `want`'s addresses, not a blackhole.
async fn listed_as(cx: &Ctx, cidr: &str, want: &Route, after: &str) -> CaseResult<Route> {
    let listed = count_listed(cx, cidr, 0).await?;
    check!(
        listed.len() == 1,
        "ListRoutes after {after}: expected {cidr} exactly once, got {listed:?}"
    );
    let got = listed.into_iter().next().expect("one");
    check!(
        got.target_node == want.target_node
            && !got.blackhole
            && address_set(&got.target_node_addresses) == address_set(&want.target_node_addresses),
        "ListRoutes after {after}: expected {cidr} -> {} with target_node_addresses {:?} (CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES: a route lists back the addresses it was created with), got {got:?}",
        want.target_node,
        want.target_node_addresses
    );
    Ok(got)
}

/// A route created with target node addresses lists back with them, and a
/// second pass of what a reconcile does (list, then create what differs)
/// finds nothing to change: an identical CreateRoute changes nothing
/// listed. A provider listing routes without their addresses makes a
/// controller replace every route on every reconcile.
pub(super) async fn lists_back_as_created(cx: &Ctx) -> CaseResult {
    let cidr = cx.route_cidr();
    let (hint, r) = route(cx, &cidr, false).await?;
    if r.target_node_addresses.is_empty() {
        return Err(crate::ctx::Verdict::Skip(format!(
            "InstanceMetadata of {} gave no addresses to route to",
            r.target_node
        )));
    }
    create(cx, &hint, &r, "CreateRoute").await?;
    let first = listed_as(cx, &cidr, &r, "CreateRoute").await?;
    create(cx, &hint, &r, "CreateRoute repeated, as a second reconcile").await?;
    let second = listed_as(cx, &cidr, &r, "a repeated CreateRoute").await?;
    check!(
        first == second,
        "ListRoutes: a repeated identical CreateRoute changed the listed route from {first:?} to {second:?}"
    );
    delete(cx, &r, "DeleteRoute").await?;
    cx.untrack_route(&r);
    Ok(())
}

/// CreateRoute for a destination routed to the same node with other
/// addresses updates the route in place (the controller relies on it to
/// follow a Node's address change without deleting the route first): OK,
/// and the route lists once, with the new addresses.
pub(super) async fn update_in_place(cx: &Ctx) -> CaseResult {
    let cidr = cx.route_cidr();
    let (hint, r) = route(cx, &cidr, false).await?;
    if r.target_node_addresses.is_empty() {
        return Err(crate::ctx::Verdict::Skip(format!(
            "InstanceMetadata of {} gave no addresses to route to",
            r.target_node
        )));
    }
    create(cx, &hint, &r, "CreateRoute").await?;
    // Another address set for the same node, its reachable addresses kept
    // so the route still has somewhere to go.
    let mut moved = r.clone();
    moved.target_node_addresses.push(NodeAddress {
        r#type: NodeAddressType::Hostname as i32,
        address: format!("{}.conformance.invalid", r.target_node),
    });
    create(
        cx,
        &hint,
        &moved,
        "CreateRoute to the same node with other target_node_addresses",
    )
    .await?;
    listed_as(cx, &cidr, &moved, "CreateRoute with other addresses").await?;
    delete(cx, &moved, "DeleteRoute").await?;
    cx.untrack_route(&moved);
    Ok(())
}

/// How many routes `list_thousands` creates: more than one default page
/// of most clouds' APIs and of the SDK.
const MANY: usize = 1200;

/// A listing of more routes than fit a page is complete and has each once,
/// whatever the page size.
pub(super) async fn list_thousands(cx: &Ctx) -> CaseResult {
    let (hint, template) = route(cx, &cx.route_cidr(), false).await?;
    let routes: Vec<Route> = (0..MANY)
        .map(|_| Route {
            destination_cidr: cx.route_cidr(),
            ..template.clone()
        })
        .collect();
    for chunk in routes.chunks(16) {
        let created =
            futures::future::join_all(chunk.iter().map(|r| create(cx, &hint, r, "CreateRoute")))
                .await;
        created.into_iter().collect::<CaseResult<Vec<()>>>()?;
    }
    let ours: std::collections::HashSet<&str> =
        routes.iter().map(|r| r.destination_cidr.as_str()).collect();
    for page_size in [100, 0] {
        let mut seen = std::collections::HashMap::<String, usize>::new();
        for r in list_all(cx, page_size).await? {
            if ours.contains(r.destination_cidr.as_str()) {
                *seen.entry(r.destination_cidr).or_default() += 1;
            }
        }
        let twice = seen.values().filter(|n| **n > 1).count();
        check!(
            seen.len() == MANY && twice == 0,
            "ListRoutes(page_size {page_size}) after creating {MANY} routes: expected each once, got {} of them ({twice} more than once)",
            seen.len()
        );
    }
    for chunk in routes.chunks(16) {
        let deleted =
            futures::future::join_all(chunk.iter().map(|r| delete(cx, r, "DeleteRoute"))).await;
        deleted.into_iter().collect::<CaseResult<Vec<()>>>()?;
        for r in chunk {
            cx.untrack_route(r);
        }
    }
    Ok(())
}
