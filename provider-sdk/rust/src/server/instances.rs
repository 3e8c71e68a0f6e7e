//! InstancesService: requests checked, then the provider's [`Instances`].
//!
//! A Node whose providerID has a scheme the provider does not own (or is
//! not a providerID) is
//! refused before the provider sees it: a provider can only know that its
//! own instance is gone, and an answer of NOT_EXISTS about another cloud's
//! instance would make the controller delete the Node.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{bad_answer_error, call, call_provider, context, invalid_request};
use crate::error::{ProviderError, ProviderResult};
use crate::proto::*;
use crate::provider::{
    Existence, InstanceAnswer, InstanceQuery as Query, InstanceQuestion as Question, Instances,
    MetadataAnswer, ShutdownState,
};
use crate::validate::{self, answers};

pub(super) struct InstancesAdapter<T> {
    pub(super) provider: Arc<T>,
    /// The schemes the provider owns: its `provider_id_scheme` and any
    /// others it announces.
    pub(super) schemes: Vec<String>,
}

impl<T> InstancesAdapter<T> {
    /// The request's Node, checked, and only if this provider may judge it.
    fn node(&self, node: &Option<NodeRef>) -> Result<NodeRef, ProviderError> {
        let node = validate::node_ref("node", node)
            .map_err(|v| ProviderError::invalid_request(v.field, v.problem))?;
        if !node.provider_id.is_empty()
            && !validate::is_owned_provider_id(&node.provider_id, &self.schemes)
        {
            let schemes = self
                .schemes
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            let what = if self.schemes.len() == 1 {
                "scheme"
            } else {
                "schemes"
            };
            return Err(ProviderError::invalid_request(
                "node.provider_id",
                format!(
                    "{:?} is not a providerID of this provider ({what} {schemes}); it can only answer for its own instances",
                    node.provider_id
                ),
            ));
        }
        Ok(node)
    }

    /// An `InstanceMetadata` answer as sent, once checked: a provider bug
    /// must not reach the controller as a valid answer.
    fn metadata(&self, answer: MetadataAnswer) -> Result<InstanceMetadataResponse, ProviderError> {
        const WHAT: &str = "an invalid InstanceMetadata";
        let MetadataAnswer { metadata, warnings } = answer;
        answers::instance_metadata(&metadata).map_err(|v| bad_answer_error(WHAT, v))?;
        if !metadata.provider_id.is_empty()
            && !validate::is_owned_provider_id(&metadata.provider_id, &self.schemes)
        {
            return Err(bad_answer_error(
                WHAT,
                validate::Violation {
                    field: "metadata.provider_id".into(),
                    problem: format!(
                        "{:?} is not of a scheme the provider owns (announce it with ProviderInfo::also_owns)",
                        metadata.provider_id
                    ),
                },
            ));
        }
        validate::node_warnings("warnings", &warnings)
            .map_err(|v| bad_answer_error("invalid warnings about the node", v))?;
        Ok(InstanceMetadataResponse {
            metadata: Some(metadata),
            warnings,
        })
    }

    /// One query's result as sent: its answer checked as the single call's
    /// would be, or the error the single call would have answered.
    fn result(
        &self,
        key: String,
        question: Question,
        answer: ProviderResult<InstanceAnswer>,
    ) -> InstanceResult {
        let result = answer.and_then(|a| match (question, a) {
            (Question::Existence, InstanceAnswer::Existence(e)) => {
                Ok(instance_result::Result::Existence(InstanceExistsResponse {
                    existence: existence(e) as i32,
                }))
            }
            (Question::Shutdown, InstanceAnswer::Shutdown(s)) => Ok(
                instance_result::Result::Shutdown(InstanceShutdownResponse {
                    state: shutdown_state(s) as i32,
                }),
            ),
            (Question::Metadata, InstanceAnswer::Metadata(m)) => {
                self.metadata(m).map(instance_result::Result::Metadata)
            }
            (asked, a) => Err(ProviderError::internal(format!(
                "provider answered a {} question with a {} answer",
                asked.method(),
                a.question().method()
            ))),
        });
        InstanceResult {
            key,
            result: Some(result.unwrap_or_else(|e| failed(&e))),
        }
    }
}

fn failed(e: &ProviderError) -> instance_result::Result {
    instance_result::Result::Error(e.to_query_error())
}

fn existence(e: Existence) -> InstanceExistence {
    match e {
        Existence::Exists => InstanceExistence::Exists,
        Existence::NotExists => InstanceExistence::NotExists,
    }
}

fn shutdown_state(s: ShutdownState) -> InstanceShutdownState {
    match s {
        ShutdownState::Running => InstanceShutdownState::Running,
        ShutdownState::ShutDown => InstanceShutdownState::ShutDown,
    }
}

#[tonic::async_trait]
impl<T: Instances> instances_service_server::InstancesService for InstancesAdapter<T> {
    async fn instance_exists(
        &self,
        req: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        let ctx = context(&req)?;
        let node = self.node(&req.get_ref().node).map_err(|e| e.to_status())?;
        let answer = call(
            "InstanceExists",
            &ctx,
            self.provider.instance_exists(ctx.clone(), node),
        )
        .await?;
        Ok(Response::new(InstanceExistsResponse {
            existence: existence(answer) as i32,
        }))
    }

    async fn instance_shutdown(
        &self,
        req: Request<InstanceShutdownRequest>,
    ) -> Result<Response<InstanceShutdownResponse>, Status> {
        let ctx = context(&req)?;
        let node = self.node(&req.get_ref().node).map_err(|e| e.to_status())?;
        let answer = call(
            "InstanceShutdown",
            &ctx,
            self.provider.instance_shutdown(ctx.clone(), node),
        )
        .await?;
        Ok(Response::new(InstanceShutdownResponse {
            state: shutdown_state(answer) as i32,
        }))
    }

    async fn instance_metadata(
        &self,
        req: Request<InstanceMetadataRequest>,
    ) -> Result<Response<InstanceMetadataResponse>, Status> {
        let ctx = context(&req)?;
        let node = self.node(&req.get_ref().node).map_err(|e| e.to_status())?;
        let metadata = call(
            "InstanceMetadata",
            &ctx,
            self.provider.instance_metadata(ctx.clone(), node),
        )
        .await?;
        let warnings = ctx.warnings.take();
        self.metadata(MetadataAnswer { metadata, warnings })
            .map(Response::new)
            .map_err(|e| e.to_status())
    }

    /// Each query as the single call would answer it. A malformed request
    /// fails the call; a Node the single call would refuse fails its query
    /// only and never reaches the provider. The provider's answers are
    /// checked as the single calls' are; a query answered not exactly once
    /// fails alone with INTERNAL, and results for keys not asked are
    /// dropped (as the Go and Python SDKs do).
    async fn batch_instances(
        &self,
        req: Request<BatchInstancesRequest>,
    ) -> Result<Response<BatchInstancesResponse>, Status> {
        let ctx = context(&req)?;
        let queries = req.into_inner().queries;
        validate::batch_queries(&queries).map_err(invalid_request)?;
        let mut results = Vec::with_capacity(queries.len());
        let mut asked = HashMap::with_capacity(queries.len());
        let mut forward = Vec::with_capacity(queries.len());
        for q in queries {
            let question =
                Question::from_proto(q.question).expect("batch_queries checks questions");
            match self.node(&q.node) {
                Ok(node) => {
                    asked.insert(q.key.clone(), question);
                    forward.push(Query {
                        key: q.key,
                        node,
                        question,
                    });
                }
                Err(e) => results.push(InstanceResult {
                    key: q.key,
                    result: Some(failed(&e)),
                }),
            }
        }
        if forward.is_empty() {
            return Ok(Response::new(BatchInstancesResponse { results }));
        }
        let answers = call_provider(
            "BatchInstances",
            &ctx,
            self.provider.batch_instances(ctx.clone(), forward),
        )
        .await;
        match answers {
            Ok(answers) => {
                let mut by_key: HashMap<String, Vec<_>> = HashMap::with_capacity(answers.len());
                for (key, answer) in answers {
                    if asked.contains_key(&key) {
                        by_key.entry(key).or_default().push(answer);
                    }
                }
                for (key, question) in asked {
                    let mut given = by_key.remove(&key).unwrap_or_default();
                    let result = match given.len() {
                        1 => self.result(key, question, given.pop().expect("one")),
                        0 => InstanceResult {
                            key,
                            result: Some(failed(&ProviderError::internal(
                                "provider answered no result for this query",
                            ))),
                        },
                        n => InstanceResult {
                            key,
                            result: Some(failed(&ProviderError::internal(format!(
                                "provider answered {n} results for this query"
                            )))),
                        },
                    };
                    results.push(result);
                }
            }
            // Nothing could be answered, and no query was refused before:
            // the call's error is every query's.
            Err(e) if results.is_empty() => return Err(e.to_status()),
            Err(e) => results.extend(asked.into_keys().map(|key| InstanceResult {
                key,
                result: Some(failed(&e)),
            })),
        }
        Ok(Response::new(BatchInstancesResponse { results }))
    }
}
