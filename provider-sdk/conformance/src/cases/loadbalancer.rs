//! LoadBalancerService cases. Each case uses its own synthetic Service
//! (uid keyed by the run id) and deletes what it created.

use std::time::Duration;

use ccm_provider_sdk::MAX_MESSAGE_BYTES;
use ccm_provider_sdk::proto::{
    EnsureLoadBalancerDeletedRequest, EnsureLoadBalancerRequest, ErrorReason,
    GetLoadBalancerNameRequest, GetLoadBalancerRequest, ListLoadBalancersRequest,
    LoadBalancerExistence, LoadBalancerStatus, LoadBalancerSummary, NodeRef, PutNodeSetRequest,
    Service, UpdateLoadBalancerRequest, ensure_load_balancer_response,
    update_load_balancer_response,
};
use ccm_provider_sdk::validate;
use prost::Message;

use tonic::Code;

use crate::ctx::{CaseResult, Ctx, Reasons, Verdict, check, expect_error, fail, ok, rpc};

/// Idempotency repetitions.
const REPEAT: usize = 10;

/// Ensures until the status has an ingress point (an empty one means "ask
/// again later"); the case timeout bounds the wait.
async fn ensure_ready(
    cx: &Ctx,
    s: &Service,
    nodes: Vec<NodeRef>,
) -> CaseResult<LoadBalancerStatus> {
    cx.track_service(s);
    let msg = EnsureLoadBalancerRequest {
        cluster_name: cx.cluster.clone(),
        service: Some(s.clone()),
        nodes,
        node_set_id: String::new(),
    };
    loop {
        let r = ok(
            "EnsureLoadBalancer",
            rpc!(cx, lb.ensure_load_balancer(msg.clone())),
        )?;
        check_warnings("EnsureLoadBalancer", &r.warnings)?;
        let status = check_ensure(r.result)?;
        if !status.ingress.is_empty() {
            return Ok(status);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn check_ensure(
    result: Option<ensure_load_balancer_response::Result>,
) -> CaseResult<LoadBalancerStatus> {
    match result {
        None => fail!(
            "EnsureLoadBalancer: expected result status or implemented_elsewhere, got neither"
        ),
        Some(ensure_load_balancer_response::Result::ImplementedElsewhere(e)) => {
            Err(Verdict::Skip(format!(
                "provider answered ImplementedElsewhere for the synthetic Service: {}",
                e.message
            )))
        }
        Some(ensure_load_balancer_response::Result::Status(s)) => {
            if let Err(v) = validate::load_balancer_status("status", &s) {
                fail!("EnsureLoadBalancer: invalid status: {v}");
            }
            Ok(s)
        }
    }
}

/// Warnings become Warning Events: a CamelCase reason and a message.
fn check_warnings(method: &str, warnings: &[ccm_provider_sdk::proto::Warning]) -> CaseResult {
    for w in warnings {
        let camel = w
            .reason
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase())
            && w.reason.chars().all(|c| c.is_ascii_alphanumeric());
        check!(
            camel && !w.message.is_empty(),
            "{method}: expected warnings with a CamelCase reason and a message, got {w:?}"
        );
    }
    Ok(())
}

/// `(existence, status)` of the Service's load balancer.
async fn get(cx: &Ctx, s: &Service) -> CaseResult<(i32, Option<LoadBalancerStatus>)> {
    let r = ok(
        "GetLoadBalancer",
        rpc!(
            cx,
            lb.get_load_balancer(GetLoadBalancerRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(s.clone()),
            })
        ),
    )?;
    Ok((r.existence, r.status))
}

async fn expect_not_exists(cx: &Ctx, s: &Service, when: &str) -> CaseResult {
    let (existence, _) = get(cx, s).await?;
    check!(
        existence == LoadBalancerExistence::NotExists as i32,
        "GetLoadBalancer {when}: expected NOT_EXISTS (2), got {existence}"
    );
    Ok(())
}

async fn delete(cx: &Ctx, s: &Service, what: &str) -> CaseResult {
    ok(
        what,
        rpc!(
            cx,
            lb.ensure_load_balancer_deleted(EnsureLoadBalancerDeletedRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(s.clone()),
            })
        ),
    )?;
    Ok(())
}

/// Deletes the Service's load balancer and confirms it is gone.
async fn delete_confirmed(cx: &Ctx, s: &Service) -> CaseResult {
    delete(cx, s, "EnsureLoadBalancerDeleted").await?;
    expect_not_exists(cx, s, "after EnsureLoadBalancerDeleted").await?;
    cx.untrack_service(s);
    Ok(())
}

pub(super) async fn get_before_ensure(cx: &Ctx) -> CaseResult {
    let s = cx.service("get-before");
    expect_not_exists(cx, &s, "before EnsureLoadBalancer").await
}

pub(super) async fn ensure_returns_ingress(cx: &Ctx) -> CaseResult {
    let s = cx.service("ensure");
    ensure_ready(cx, &s, cx.nodes(0..3)).await?;
    delete_confirmed(cx, &s).await
}

pub(super) async fn ensure_idempotent(cx: &Ctx) -> CaseResult {
    let s = cx.service("ensure-idempotent");
    let nodes = cx.nodes(0..3);
    let first = ensure_ready(cx, &s, nodes.clone()).await?;
    let msg = EnsureLoadBalancerRequest {
        cluster_name: cx.cluster.clone(),
        service: Some(s.clone()),
        nodes,
        node_set_id: String::new(),
    };
    for i in 1..=REPEAT {
        let r = ok(
            &format!("EnsureLoadBalancer repeat {i}"),
            rpc!(cx, lb.ensure_load_balancer(msg.clone())),
        )?;
        let status = check_ensure(r.result)?;
        check!(
            status == first,
            "EnsureLoadBalancer repeat {i} with the same input: expected the same status {first:?}, got {status:?}"
        );
    }
    delete_confirmed(cx, &s).await
}

pub(super) async fn get_after_ensure(cx: &Ctx) -> CaseResult {
    let s = cx.service("get-after");
    let ensured = ensure_ready(cx, &s, cx.nodes(0..3)).await?;
    let (existence, status) = get(cx, &s).await?;
    check!(
        existence == LoadBalancerExistence::Exists as i32,
        "GetLoadBalancer after EnsureLoadBalancer: expected EXISTS (1), got {existence}"
    );
    check!(
        status.as_ref() == Some(&ensured),
        "GetLoadBalancer after EnsureLoadBalancer: expected status {ensured:?}, got {status:?}"
    );
    delete_confirmed(cx, &s).await
}

async fn lb_name(cx: &Ctx, s: &Service) -> CaseResult<String> {
    let r = ok(
        "GetLoadBalancerName",
        rpc!(
            cx,
            lb.get_load_balancer_name(GetLoadBalancerNameRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(s.clone()),
            })
        ),
    )?;
    check!(
        !r.name.is_empty(),
        "GetLoadBalancerName: expected a non-empty name, got \"\""
    );
    Ok(r.name)
}

pub(super) async fn name_deterministic(cx: &Ctx) -> CaseResult {
    let s = cx.service("name");
    let first = lb_name(cx, &s).await?;
    for i in 1..3 {
        let again = lb_name(cx, &s).await?;
        check!(
            again == first,
            "GetLoadBalancerName call {}: expected {first:?} as before, got {again:?}",
            i + 1
        );
    }
    // A pure function of (cluster_name, namespace, name, uid, annotations):
    // labels and ports must not matter.
    let mut other = s.clone();
    other
        .labels
        .insert("conformance.ccm-rs.io/x".into(), "y".into());
    other.ports[0].port = 8080;
    let again = lb_name(cx, &other).await?;
    check!(
        again == first,
        "GetLoadBalancerName for the same Service with other labels and ports: expected {first:?}, got {again:?}"
    );
    Ok(())
}

pub(super) async fn update_changed_nodes(cx: &Ctx) -> CaseResult {
    let s = cx.service("update");
    ensure_ready(cx, &s, cx.nodes(0..3)).await?;
    let r = ok(
        "UpdateLoadBalancer",
        rpc!(
            cx,
            lb.update_load_balancer(UpdateLoadBalancerRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(s.clone()),
                nodes: cx.nodes(1..5),
                node_set_id: String::new(),
            })
        ),
    )?;
    match r.result {
        Some(update_load_balancer_response::Result::Updated(_)) => {}
        other => fail!(
            "UpdateLoadBalancer with a changed node set: expected result updated, got {other:?}"
        ),
    }
    let (existence, _) = get(cx, &s).await?;
    check!(
        existence == LoadBalancerExistence::Exists as i32,
        "GetLoadBalancer after UpdateLoadBalancer: expected EXISTS (1), got {existence}"
    );
    delete_confirmed(cx, &s).await
}

pub(super) async fn delete_idempotent(cx: &Ctx) -> CaseResult {
    let s = cx.service("delete-idempotent");
    ensure_ready(cx, &s, cx.nodes(0..2)).await?;
    for i in 1..=REPEAT {
        delete(
            cx,
            &s,
            &format!("EnsureLoadBalancerDeleted call {i} of {REPEAT}"),
        )
        .await?;
    }
    expect_not_exists(cx, &s, "after EnsureLoadBalancerDeleted").await?;
    cx.untrack_service(&s);
    Ok(())
}

pub(super) async fn delete_never_created(cx: &Ctx) -> CaseResult {
    let s = cx.service("never-created");
    delete(
        cx,
        &s,
        "EnsureLoadBalancerDeleted for a Service that never had a load balancer",
    )
    .await?;
    expect_not_exists(cx, &s, "after EnsureLoadBalancerDeleted").await
}

/// 5,000 nodes with labels: more than gRPC's default 4 MiB, well under the
/// contract's 16 MiB.
pub(super) async fn large_message(cx: &Ctx) -> CaseResult {
    let s = cx.service("large");
    let nodes: Vec<NodeRef> = (0..5000)
        .map(|i| {
            let mut n = cx.node(i);
            for l in 0..10 {
                n.labels.insert(
                    format!("conformance.ccm-rs.io/label-{l:02}-padding-padding-padding"),
                    format!("{i:08}-{}", "v".repeat(50)),
                );
            }
            n
        })
        .collect();
    let msg = EnsureLoadBalancerRequest {
        cluster_name: cx.cluster.clone(),
        service: Some(s.clone()),
        nodes: nodes.clone(),
        node_set_id: String::new(),
    };
    let size = msg.encoded_len();
    check!(
        size > 4 * 1024 * 1024 && size < MAX_MESSAGE_BYTES,
        "suite bug: large message is {size} bytes, expected between 4 MiB and 16 MiB"
    );
    ensure_ready(cx, &s, nodes).await?;
    delete_confirmed(cx, &s).await
}

/// Every entry of a listing with `page_size`, checking page bounds.
async fn list_all(cx: &Ctx, page_size: i32) -> CaseResult<Vec<LoadBalancerSummary>> {
    let mut out = Vec::new();
    let mut token = String::new();
    let mut tokens = std::collections::HashSet::new();
    loop {
        let r = ok(
            &format!("ListLoadBalancers(page_size {page_size})"),
            rpc!(
                cx,
                lb.list_load_balancers(ListLoadBalancersRequest {
                    cluster_name: cx.cluster.clone(),
                    page_size,
                    page_token: token.clone(),
                })
            ),
        )?;
        check!(
            page_size == 0 || r.load_balancers.len() <= page_size as usize,
            "ListLoadBalancers(page_size {page_size}): expected at most {page_size} entries per page, got {}",
            r.load_balancers.len()
        );
        out.extend(r.load_balancers);
        if r.next_page_token.is_empty() {
            return Ok(out);
        }
        check!(
            tokens.insert(r.next_page_token.clone()) && tokens.len() < 10_000,
            "ListLoadBalancers(page_size {page_size}): next_page_token {:?} repeats or pages never end",
            r.next_page_token
        );
        token = r.next_page_token;
    }
}

pub(super) async fn list_contains_once(cx: &Ctx) -> CaseResult {
    let s = cx.service("list");
    ensure_ready(cx, &s, cx.nodes(0..2)).await?;
    let name = lb_name(cx, &s).await?;
    for page_size in [1, 2, 3, 0] {
        let all = list_all(cx, page_size).await?;
        let ours: Vec<_> = all.iter().filter(|e| e.service_uid == s.uid).collect();
        check!(
            ours.len() == 1,
            "ListLoadBalancers(page_size {page_size}): expected the load balancer of uid {} exactly once, got {} times",
            s.uid,
            ours.len()
        );
        check!(
            ours[0].name == name,
            "ListLoadBalancers(page_size {page_size}): expected name {name:?} (GetLoadBalancerName), got {:?}",
            ours[0].name
        );
    }
    delete_confirmed(cx, &s).await?;
    let all = list_all(cx, 0).await?;
    let n = all.iter().filter(|e| e.service_uid == s.uid).count();
    check!(
        n == 0,
        "ListLoadBalancers after EnsureLoadBalancerDeleted: expected uid {} gone, got it {n} times",
        s.uid
    );
    Ok(())
}

/// Users point DNS at the address: changing a port must not move it.
pub(super) async fn address_stable_across_port_change(cx: &Ctx) -> CaseResult {
    let s = cx.service("port-change");
    let first = ensure_ready(cx, &s, cx.nodes(0..2)).await?;
    let mut changed = s.clone();
    changed.ports[0].port = 8443;
    changed.status = Some(first.clone());
    let second = ensure_ready(cx, &changed, cx.nodes(0..2)).await?;
    let addresses = |st: &LoadBalancerStatus| -> Vec<(String, String)> {
        st.ingress
            .iter()
            .map(|i| (i.ip.clone(), i.hostname.clone()))
            .collect()
    };
    check!(
        addresses(&first) == addresses(&second),
        "EnsureLoadBalancer after a port change: expected the same addresses {:?}, got {:?}",
        addresses(&first),
        addresses(&second)
    );
    for ingress in &second.ingress {
        check!(
            ingress.ports.is_empty() || ingress.ports.iter().any(|p| p.port == 8443),
            "EnsureLoadBalancer after a port change to 8443: the ports reported are {:?}",
            ingress.ports
        );
    }
    delete_confirmed(cx, &changed).await
}

/// Deleting one Service's load balancer leaves every other one alone.
pub(super) async fn delete_isolated(cx: &Ctx) -> CaseResult {
    let a = cx.service("isolated-a");
    let b = cx.service("isolated-b");
    ensure_ready(cx, &a, cx.nodes(0..2)).await?;
    ensure_ready(cx, &b, cx.nodes(0..2)).await?;
    check!(
        lb_name(cx, &a).await? != lb_name(cx, &b).await?,
        "GetLoadBalancerName: expected different names for two Services"
    );
    delete_confirmed(cx, &a).await?;
    let (existence, _) = get(cx, &b).await?;
    check!(
        existence == LoadBalancerExistence::Exists as i32,
        "GetLoadBalancer for another Service after deleting the first: expected EXISTS (1), got {existence}"
    );
    delete_confirmed(cx, &b).await
}

/// UpdateLoadBalancer only touches backends: of a load balancer that does
/// not exist it never creates one, and never says it updated it (the
/// controller learns from the error that it must ensure it again);
/// NOT_FOUND is the expected answer, ImplementedElsewhere is allowed.
pub(super) async fn update_never_creates(cx: &Ctx) -> CaseResult {
    let s = cx.service("update-missing");
    cx.track_service(&s);
    let answer = rpc!(
        cx,
        lb.update_load_balancer(UpdateLoadBalancerRequest {
            cluster_name: cx.cluster.clone(),
            service: Some(s.clone()),
            node_set_id: String::new(),
            nodes: cx.nodes(0..2),
        })
    );
    if let Ok(r) = &answer {
        check!(
            !matches!(
                r.result,
                Some(update_load_balancer_response::Result::Updated(_))
            ),
            "UpdateLoadBalancer of a load balancer that does not exist: expected an error (NOT_FOUND), got Updated"
        );
    }
    expect_not_exists(
        cx,
        &s,
        "after UpdateLoadBalancer of a Service never ensured",
    )
    .await?;
    cx.untrack_service(&s);
    Ok(())
}

/// Puts `nodes` as set `id`.
async fn put_node_set(cx: &Ctx, id: &str, nodes: Vec<NodeRef>, what: &str) -> CaseResult {
    ok(
        what,
        rpc!(
            cx,
            lb.put_node_set(PutNodeSetRequest {
                cluster_name: cx.cluster.clone(),
                node_set_id: id.to_owned(),
                nodes,
            })
        ),
    )
    .map(|_| ())
}

pub(super) async fn node_set_by_id(cx: &Ctx) -> CaseResult {
    let s = cx.service("node-set");
    cx.track_service(&s);
    let first = format!("conformance-{}-a", cx.run_id);
    let second = format!("conformance-{}-b", cx.run_id);
    put_node_set(cx, &first, cx.nodes(0..3), "PutNodeSet").await?;
    put_node_set(
        cx,
        &first,
        cx.nodes(0..3),
        "PutNodeSet of the same set again",
    )
    .await?;
    let ensure = EnsureLoadBalancerRequest {
        cluster_name: cx.cluster.clone(),
        service: Some(s.clone()),
        nodes: vec![],
        node_set_id: first,
    };
    loop {
        let r = ok(
            "EnsureLoadBalancer naming a node set",
            rpc!(cx, lb.ensure_load_balancer(ensure.clone())),
        )?;
        if !check_ensure(r.result)?.ingress.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    put_node_set(cx, &second, cx.nodes(1..5), "PutNodeSet of a second set").await?;
    let r = ok(
        "UpdateLoadBalancer naming a node set",
        rpc!(
            cx,
            lb.update_load_balancer(UpdateLoadBalancerRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(s.clone()),
                nodes: vec![],
                node_set_id: second,
            })
        ),
    )?;
    check!(
        matches!(
            r.result,
            Some(update_load_balancer_response::Result::Updated(_))
        ),
        "UpdateLoadBalancer naming a node set: expected result updated, got {:?}",
        r.result
    );
    delete_confirmed(cx, &s).await
}

pub(super) async fn node_set_unknown(cx: &Ctx) -> CaseResult {
    let s = cx.service("node-set-unknown");
    cx.track_service(&s);
    let answer = rpc!(
        cx,
        lb.ensure_load_balancer(EnsureLoadBalancerRequest {
            cluster_name: cx.cluster.clone(),
            service: Some(s.clone()),
            nodes: vec![],
            node_set_id: format!("conformance-{}-never-put", cx.run_id),
        })
    );
    expect_error(
        "EnsureLoadBalancer naming a node set never put",
        answer,
        &[Code::FailedPrecondition],
        Reasons::Required(&[ErrorReason::NodeSetUnknown]),
    )?;
    expect_not_exists(
        cx,
        &s,
        "after EnsureLoadBalancer naming an unknown node set",
    )
    .await?;
    cx.untrack_service(&s);
    Ok(())
}
