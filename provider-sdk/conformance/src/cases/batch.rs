//! BatchInstances cases (contract 1.4.0, CAPABILITY_INSTANCES_BATCH): one
//! bad query never fails the batch, the answers do not depend on the order
//! of the queries, the request's limits are enforced, and each query is
//! answered exactly as its single call.

use std::collections::HashMap;

use ccm_provider_sdk::proto::{
    BatchInstancesRequest, BatchInstancesResponse, ErrorReason, InstanceExistence,
    InstanceExistsRequest, InstanceMetadataRequest, InstanceQuery, InstanceQuestion,
    InstanceShutdownRequest, NodeRef, instance_result,
};
use ccm_provider_sdk::{ProviderError, validate};
use tonic::{Code, Status};

use crate::ctx::{CaseResult, Ctx, Reasons, check, describe, expect_error, fail, ok, once};

use InstanceQuestion::{Existence, Metadata, Shutdown};

/// A query's outcome as compared across calls: an answer, or an error's
/// code and reason (messages may differ between calls).
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Answer(instance_result::Result),
    Error(Code, Option<ErrorReason>),
}

fn query(key: &str, node: &NodeRef, question: InstanceQuestion) -> InstanceQuery {
    InstanceQuery {
        key: key.into(),
        node: Some(node.clone()),
        question: question as i32,
    }
}

/// A node of a scheme the provider does not own.
fn foreign_node(cx: &Ctx) -> NodeRef {
    NodeRef {
        name: format!("conformance-foreign-{}", cx.run_id),
        provider_id: format!("{}-other:///zone-a/i-0123", cx.info.provider_id_scheme),
        ..Default::default()
    }
}

async fn batch(cx: &Ctx, queries: Vec<InstanceQuery>) -> Result<BatchInstancesResponse, Status> {
    once!(
        cx,
        instances.batch_instances(BatchInstancesRequest { queries })
    )
}

/// The results by key, each key asked exactly once and answered with the
/// kind its question asks (or an error with a code other than OK).
fn by_key(
    what: &str,
    queries: &[InstanceQuery],
    r: BatchInstancesResponse,
) -> CaseResult<HashMap<String, Seen>> {
    let asked: HashMap<&str, i32> = queries
        .iter()
        .map(|q| (q.key.as_str(), q.question))
        .collect();
    let mut seen = HashMap::new();
    for result in r.results {
        let Some(question) = asked.get(result.key.as_str()) else {
            fail!(
                "{what}: result for key {:?}, which was not asked",
                result.key
            );
        };
        let outcome = match result.result {
            None => fail!("{what}: result {:?} carries nothing", result.key),
            Some(instance_result::Result::Error(e)) => {
                check!(
                    e.code != 0,
                    "{what}: result {:?} is an error with code OK (0)",
                    result.key
                );
                let e = ProviderError::from_query_error(&e).expect("code is not OK");
                Seen::Error(e.code(), e.reason())
            }
            Some(answer) => {
                let kind = match &answer {
                    instance_result::Result::Existence(_) => Existence,
                    instance_result::Result::Shutdown(_) => Shutdown,
                    _ => Metadata,
                };
                check!(
                    *question == kind as i32,
                    "{what}: result {:?} answers {} to a query asking {}",
                    result.key,
                    kind.as_str_name(),
                    InstanceQuestion::try_from(*question)
                        .map(|q| q.as_str_name())
                        .unwrap_or("?")
                );
                Seen::Answer(answer)
            }
        };
        if seen.insert(result.key.clone(), outcome).is_some() {
            fail!("{what}: key {:?} answered twice", result.key);
        }
    }
    for q in queries {
        check!(
            seen.contains_key(&q.key),
            "{what}: no result for query {:?}",
            q.key
        );
    }
    Ok(seen)
}

/// An unknown instance among known ones: its queries get NOT_EXISTS (for
/// existence) or INSTANCE_NOT_FOUND, a Node of another cloud gets
/// INVALID_ARGUMENT, and the others their answers, in one successful call.
pub(super) async fn per_query_errors(cx: &Ctx) -> CaseResult {
    let known = cx.known_node().await?;
    let missing = cx.missing_node();
    let queries = vec![
        query("known-exists", &known, Existence),
        query("missing-exists", &missing, Existence),
        query("missing-shutdown", &missing, Shutdown),
        query("missing-metadata", &missing, Metadata),
        query("known-metadata", &known, Metadata),
        query("foreign-exists", &foreign_node(cx), Existence),
    ];
    let what = "BatchInstances(known, missing and foreign nodes)";
    let r = ok(what, batch(cx, queries.clone()).await)?;
    let seen = by_key(what, &queries, r)?;
    let existence = |key: &str| match &seen[key] {
        Seen::Answer(instance_result::Result::Existence(e)) => {
            InstanceExistence::try_from(e.existence).ok()
        }
        _ => None,
    };
    check!(
        existence("known-exists") == Some(InstanceExistence::Exists),
        "{what}: known-exists: expected EXISTS, got {:?}",
        seen["known-exists"]
    );
    check!(
        existence("missing-exists") == Some(InstanceExistence::NotExists),
        "{what}: missing-exists: expected NOT_EXISTS, got {:?}",
        seen["missing-exists"]
    );
    for key in ["missing-shutdown", "missing-metadata"] {
        check!(
            seen[key] == Seen::Error(Code::NotFound, Some(ErrorReason::InstanceNotFound)),
            "{what}: {key}: expected the error NOT_FOUND with reason INSTANCE_NOT_FOUND, got {:?}",
            seen[key]
        );
    }
    match &seen["known-metadata"] {
        Seen::Answer(instance_result::Result::Metadata(m)) => {
            let Some(m) = &m.metadata else {
                fail!("{what}: known-metadata: expected metadata to be set, got unset");
            };
            let owned = validate::owned_schemes(&cx.info);
            check!(
                validate::is_owned_provider_id(&m.provider_id, &owned),
                "{what}: known-metadata: provider_id {:?} is not of a scheme of {}",
                m.provider_id,
                owned.join(", ")
            );
        }
        other => fail!("{what}: known-metadata: expected metadata, got {other:?}"),
    }
    check!(
        matches!(
            seen["foreign-exists"],
            Seen::Error(
                Code::InvalidArgument,
                None | Some(ErrorReason::InvalidRequest)
            )
        ),
        "{what}: foreign-exists (providerID of another scheme): expected the error INVALID_ARGUMENT (INVALID_REQUEST), never an answer, got {:?}",
        seen["foreign-exists"]
    );
    Ok(())
}

/// The same queries in three orders get the same answers, key by key.
pub(super) async fn order_independent(cx: &Ctx) -> CaseResult {
    let known = cx.known_node().await?;
    let missing = cx.missing_node();
    let queries = vec![
        query("a", &known, Existence),
        query("b", &missing, Existence),
        query("c", &known, Shutdown),
        query("d", &missing, Shutdown),
        query("e", &known, Metadata),
        query("f", &missing, Metadata),
        query("g", &foreign_node(cx), Metadata),
    ];
    let mut reversed = queries.clone();
    reversed.reverse();
    let mut rotated = queries.clone();
    rotated.rotate_left(3);
    let first = ok("BatchInstances", batch(cx, queries.clone()).await)?;
    let first = by_key("BatchInstances", &queries, first)?;
    for (name, order) in [("reversed", reversed), ("rotated", rotated)] {
        let what = format!("BatchInstances(the same queries {name})");
        let r = ok(&what, batch(cx, order.clone()).await)?;
        let again = by_key(&what, &order, r)?;
        for q in &queries {
            check!(
                again[&q.key] == first[&q.key],
                "{what}: query {:?} answered {:?}, but {:?} in the order first asked",
                q.key,
                again[&q.key],
                first[&q.key]
            );
        }
    }
    Ok(())
}

/// The request's limits: none, more than 500 queries, a key empty, too long
/// or given twice, a question UNSPECIFIED are refused whole with
/// INVALID_ARGUMENT (INVALID_REQUEST); 500 distinct keys of 253 bytes
/// (the same Node may be asked several times) are answered.
pub(super) async fn limits(cx: &Ctx) -> CaseResult {
    let known = cx.known_node().await?;
    let q = |key: &str, question| query(key, &known, question);
    let many = |n: usize| -> Vec<InstanceQuery> {
        (0..n)
            .map(|i| q(&format!("{i:0>253}"), Existence))
            .collect()
    };
    const INVALID: Reasons<'static> = Reasons::IfPresent(&[ErrorReason::InvalidRequest]);
    let cases: [(&str, Vec<InstanceQuery>); 6] = [
        ("no queries", vec![]),
        ("501 queries", many(501)),
        (
            "a key given twice",
            vec![q("k", Existence), q("k", Shutdown)],
        ),
        ("an empty key", vec![q("", Existence)]),
        ("a key of 254 bytes", vec![q(&"k".repeat(254), Existence)]),
        (
            "a question UNSPECIFIED",
            vec![q("a", Existence), q("b", InstanceQuestion::Unspecified)],
        ),
    ];
    for (what, queries) in cases {
        expect_error(
            &format!("BatchInstances({what})"),
            batch(cx, queries).await,
            &[Code::InvalidArgument],
            INVALID,
        )?;
    }
    let queries = many(500);
    let what = "BatchInstances(500 queries, keys of 253 bytes)";
    let r = ok(what, batch(cx, queries.clone()).await)?;
    let seen = by_key(what, &queries, r)?;
    for (key, outcome) in seen {
        check!(
            matches!(outcome, Seen::Answer(_)),
            "{what}: query {key:?} about the known node failed: {outcome:?}"
        );
    }
    Ok(())
}

/// What the single call answers, as a batch result.
async fn single(cx: &Ctx, node: &NodeRef, question: InstanceQuestion) -> CaseResult<Seen> {
    use instance_result::Result as R;
    let node = Some(node.clone());
    let r = match question {
        Existence => once!(
            cx,
            instances.instance_exists(InstanceExistsRequest { node })
        )
        .map(R::Existence),
        Shutdown => once!(
            cx,
            instances.instance_shutdown(InstanceShutdownRequest { node })
        )
        .map(R::Shutdown),
        _ => once!(
            cx,
            instances.instance_metadata(InstanceMetadataRequest { node })
        )
        .map(R::Metadata),
    };
    Ok(match r {
        Ok(answer) => Seen::Answer(answer),
        Err(s) => {
            let e = ProviderError::from_status(&s);
            if e.code() == Code::Unimplemented {
                fail!("{}: {}", question.as_str_name(), describe(&s));
            }
            Seen::Error(e.code(), e.reason())
        }
    })
}

/// Each query of a batch gets what its single call answers (InstanceExists,
/// InstanceShutdown, InstanceMetadata with its warnings), for a known, a
/// missing and a foreign Node.
pub(super) async fn equivalent_to_single_calls(cx: &Ctx) -> CaseResult {
    let known = cx.known_node().await?;
    let nodes = [
        ("known", known),
        ("missing", cx.missing_node()),
        ("foreign", foreign_node(cx)),
    ];
    let mut queries = Vec::new();
    let mut want = HashMap::new();
    for (name, node) in &nodes {
        for question in [Existence, Shutdown, Metadata] {
            let key = format!("{name}-{}", question.as_str_name());
            want.insert(key.clone(), single(cx, node, question).await?);
            queries.push(query(&key, node, question));
        }
    }
    let what = "BatchInstances(known, missing and foreign nodes, every question)";
    let r = ok(what, batch(cx, queries.clone()).await)?;
    let seen = by_key(what, &queries, r)?;
    for q in &queries {
        check!(
            seen[&q.key] == want[&q.key],
            "{what}: query {:?} answered {:?}, but its single call {:?}",
            q.key,
            seen[&q.key],
            want[&q.key]
        );
    }
    Ok(())
}
