//! InstancesService: whether a node's instance exists, is shut down, and
//! its metadata.

use std::collections::HashMap;

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::error::ProviderError;
use crate::proto::{
    self, BatchInstancesRequest, BatchInstancesResponse, Capability, InstanceExistence,
    InstanceExistsRequest, InstanceMetadata, InstanceMetadataRequest, InstanceMetadataResponse,
    InstanceShutdownRequest, InstanceShutdownState, NodeRef, instance_result,
};
use crate::provider::{
    Existence, InstanceAnswer, InstanceQuery, InstanceQuestion, MetadataAnswer, ShutdownState,
};
use crate::validate::{self, Checked, answers};

fn read() -> Rpc {
    Rpc::read().needs(Capability::Instances)
}

impl ProviderClient {
    /// Never returns `NotExists` unless the provider said exactly that.
    pub async fn instance_exists(&self, node: NodeRef) -> Result<Existence, ClientError> {
        let request = InstanceExistsRequest { node: Some(node) };
        self.call(read(), request, |r| existence(r.existence)).await
    }

    pub async fn instance_shutdown(&self, node: NodeRef) -> Result<ShutdownState, ClientError> {
        let request = InstanceShutdownRequest { node: Some(node) };
        self.call(read(), request, |r| shutdown_state(r.state))
            .await
    }

    /// The instance's metadata, without the warnings about the Node.
    pub async fn instance_metadata(&self, node: NodeRef) -> Result<InstanceMetadata, ClientError> {
        Ok(self.instance_metadata_answer(node).await?.metadata)
    }

    /// The instance's metadata and what the provider wants the user to know
    /// about the Node. A providerID must be of a scheme the provider owns
    /// (its `GetProviderInfo.provider_id_scheme` or `provider_id_schemes`):
    /// another cloud's written onto a Node would make it unmanageable by
    /// either. Warnings are the first
    /// [`MAX_NODE_WARNINGS`](validate::MAX_NODE_WARNINGS): they tell, and a
    /// provider's excess is no reason to leave a Node uninitialised.
    pub async fn instance_metadata_answer(
        &self,
        node: NodeRef,
    ) -> Result<MetadataAnswer, ClientError> {
        let handshake = self.handshake().await?;
        let schemes = handshake.schemes();
        let request = InstanceMetadataRequest { node: Some(node) };
        self.call(read(), request, |r| metadata_answer(r, &schemes))
            .await
    }

    /// Many instance questions in one call (contract 1.4.0; the provider
    /// must announce `CAPABILITY_INSTANCES_BATCH`, else
    /// [`ClientError::Unsupported`] and nothing is sent): each query's
    /// answer, or the error the single call would have returned (the same
    /// [`ClientError`], so a caller handles both alike), by key, in the
    /// order of `queries`.
    ///
    /// Keys must be distinct, 1 to 253 bytes, and at most
    /// [`MAX_BATCH_QUERIES`](validate::MAX_BATCH_QUERIES) queries: otherwise
    /// [`ClientError::InvalidRequest`] and nothing is sent. No queries is
    /// no call. Each answer is checked as the single call's is (a bad one
    /// fails its query only); an answer that leaves out a key, names one
    /// not asked or twice, or answers a question with another kind fails
    /// the whole call as an invalid answer. A whole-call error (the cloud
    /// unreachable) is every query's.
    pub async fn batch_instances(
        &self,
        queries: Vec<InstanceQuery>,
    ) -> Result<Vec<(String, Result<InstanceAnswer, ClientError>)>, ClientError> {
        const METHOD: &str = "BatchInstances";
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let request = BatchInstancesRequest {
            queries: queries
                .into_iter()
                .map(|q| proto::InstanceQuery {
                    key: q.key,
                    node: Some(q.node),
                    question: q.question.to_proto() as i32,
                })
                .collect(),
        };
        validate::batch_queries(&request.queries).map_err(|violation| {
            ClientError::InvalidRequest {
                method: METHOD,
                violation,
            }
        })?;
        let order: Vec<(String, InstanceQuestion)> = request
            .queries
            .iter()
            .map(|q| {
                let question = InstanceQuestion::from_proto(q.question).expect("checked above");
                (q.key.clone(), question)
            })
            .collect();
        let handshake = self.handshake().await?;
        let schemes = handshake.schemes();
        let rpc = read().needs(Capability::InstancesBatch);
        let answers = self
            .call(rpc, request, |r| batch_answers(r, &order, &schemes))
            .await?;
        self.query_errors(METHOD, &order, &answers);
        Ok(answers)
    }

    /// What a batch's per-query errors tell, told as their single calls
    /// would: each counts as a failure of the method its question stands
    /// for (a dashboard of InstanceMetadata errors sees them whether or
    /// not the provider batches), and the longest throttling delay among
    /// them holds the call budget, as a throttled batch would.
    fn query_errors(
        &self,
        method: &'static str,
        order: &[(String, InstanceQuestion)],
        answers: &[(String, Result<InstanceAnswer, ClientError>)],
    ) {
        let mut longest = None;
        for ((_, question), (_, answer)) in order.iter().zip(answers) {
            let Err(e) = answer else { continue };
            if let Some(o) = &self.opts.observer {
                let reason = e.provider_error().and_then(|p| p.reason());
                o.failed(question.method(), reason.map(crate::error::reason_str));
            }
            longest = longest.max(super::call::throttled(e));
        }
        if let Some(delay) = longest {
            self.hold_budget(method, delay);
        }
    }
}

/// An `InstanceMetadata` answer, checked: a providerID must be of a scheme
/// the provider owns; warnings are cut to the first
/// [`MAX_NODE_WARNINGS`](validate::MAX_NODE_WARNINGS).
fn metadata_answer(mut r: InstanceMetadataResponse, schemes: &[&str]) -> Checked<MetadataAnswer> {
    let metadata = validate::required("metadata", &r.metadata)?.clone();
    answers::instance_metadata(&metadata)?;
    let pid = &metadata.provider_id;
    if !pid.is_empty() && !validate::is_owned_provider_id(pid, schemes) {
        return Err(validate::violation(
            "metadata.provider_id",
            format!(
                "{pid:?} is not of a scheme the provider owns ({})",
                schemes.join(", ")
            ),
        ));
    }
    r.warnings.truncate(validate::MAX_NODE_WARNINGS);
    Ok(MetadataAnswer {
        metadata,
        warnings: r.warnings,
    })
}

/// A `BatchInstances` answer matched to its queries (`order`): every key
/// exactly once and each result of its question's kind, or the whole answer
/// is invalid. One result's own flaw (an UNSPECIFIED existence, metadata the
/// single call would refuse, an error with code OK) fails only its query,
/// as the single call's invalid answer would.
fn batch_answers(
    r: BatchInstancesResponse,
    order: &[(String, InstanceQuestion)],
    schemes: &[&str],
) -> Checked<Vec<(String, Result<InstanceAnswer, ClientError>)>> {
    let mut by_key: HashMap<String, Option<instance_result::Result>> =
        HashMap::with_capacity(r.results.len());
    for (i, result) in r.results.into_iter().enumerate() {
        if by_key.insert(result.key.clone(), result.result).is_some() {
            return Err(validate::violation(
                format!("results[{i}].key"),
                format!("{:?} is answered twice", result.key),
            ));
        }
    }
    let mut out = Vec::with_capacity(order.len());
    for (key, question) in order {
        let Some(result) = by_key.remove(key) else {
            return Err(validate::violation(
                "results",
                format!("no result for query {key:?}"),
            ));
        };
        use instance_result::Result as R;
        let field = |what: &str| format!("results[{key:?}].{what}");
        let single = |v: validate::Violation| ClientError::InvalidResponse {
            method: question.method(),
            violation: v,
        };
        let answer = match (question, result) {
            (_, Some(R::Error(e))) => Err(match ProviderError::from_query_error(&e) {
                Some(e) => ClientError::Provider(e),
                None => single(validate::violation(field("error.code"), "is OK (0)")),
            }),
            (InstanceQuestion::Existence, Some(R::Existence(r))) => existence(r.existence)
                .map(InstanceAnswer::Existence)
                .map_err(single),
            (InstanceQuestion::Shutdown, Some(R::Shutdown(r))) => shutdown_state(r.state)
                .map(InstanceAnswer::Shutdown)
                .map_err(single),
            (InstanceQuestion::Metadata, Some(R::Metadata(r))) => metadata_answer(r, schemes)
                .map(InstanceAnswer::Metadata)
                .map_err(single),
            (_, None) => {
                return Err(validate::violation(field("result"), "is required"));
            }
            (asked, Some(_)) => {
                return Err(validate::violation(
                    field("result"),
                    format!("is not an answer to {}", asked.method()),
                ));
            }
        };
        out.push((key.clone(), answer));
    }
    if let Some(key) = by_key.into_keys().next() {
        return Err(validate::violation(
            "results",
            format!("{key:?} was not asked"),
        ));
    }
    Ok(out)
}

fn existence(value: i32) -> Checked<Existence> {
    Ok(match validate::known_enum("existence", value)? {
        InstanceExistence::Exists => Existence::Exists,
        InstanceExistence::NotExists => Existence::NotExists,
        InstanceExistence::Unspecified => unreachable!("known_enum rejects 0"),
    })
}

fn shutdown_state(value: i32) -> Checked<ShutdownState> {
    Ok(match validate::known_enum("state", value)? {
        InstanceShutdownState::Running => ShutdownState::Running,
        InstanceShutdownState::ShutDown => ShutdownState::ShutDown,
        InstanceShutdownState::Unspecified => unreachable!("known_enum rejects 0"),
    })
}
