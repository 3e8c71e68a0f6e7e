//! IdentityService: what the provider is, what it can do (the capabilities
//! `ProviderServer` derived from the services it was given), and whether
//! it is ready.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{bad_answer, call, context};
use crate::proto::{self, *};
use crate::provider::{Identity, Readiness};
use crate::validate;

pub(super) struct IdentityAdapter<I> {
    pub(super) identity: Arc<I>,
    pub(super) capabilities: Vec<Capability>,
}

#[tonic::async_trait]
impl<I: Identity> identity_service_server::IdentityService for IdentityAdapter<I> {
    async fn get_provider_info(
        &self,
        _req: Request<GetProviderInfoRequest>,
    ) -> Result<Response<GetProviderInfoResponse>, Status> {
        let answer = self.identity.info().to_proto(proto::CONTRACT_VERSION);
        // A provider bug must not reach the controller as a valid answer.
        validate::identity_lists(&answer).map_err(bad_answer("an invalid identity"))?;
        Ok(Response::new(answer))
    }

    async fn get_provider_capabilities(
        &self,
        _req: Request<GetProviderCapabilitiesRequest>,
    ) -> Result<Response<GetProviderCapabilitiesResponse>, Status> {
        Ok(Response::new(GetProviderCapabilitiesResponse {
            capabilities: self.capabilities.iter().map(|c| *c as i32).collect(),
            annotations: Some(self.identity.annotation_schema()),
        }))
    }

    async fn probe(&self, req: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        let ctx = context(&req)?;
        let readiness = call("Probe", &ctx, self.identity.probe(ctx.clone())).await?;
        let (state, message) = match readiness {
            Readiness::Ready => (ProbeState::Ready, String::new()),
            Readiness::Starting(m) => (ProbeState::Starting, m),
            Readiness::NotReady(m) => (ProbeState::NotReady, m),
        };
        Ok(Response::new(ProbeResponse {
            state: state as i32,
            message,
        }))
    }
}
