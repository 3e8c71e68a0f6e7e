//! What a failed call tells the controller: the provider's contract error,
//! an answer the contract forbids, or a refusal before anything was sent.

use tonic::Status;

use crate::error::{Outcome, ProviderError};
use crate::proto::Capability;
use crate::validate::Violation;

/// A failed call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The provider (or the transport) answered with a non-OK status.
    #[error("{0}")]
    Provider(ProviderError),
    /// The provider answered OK with something the contract forbids.
    #[error("invalid answer from provider to {method}: {violation}")]
    InvalidResponse {
        method: &'static str,
        violation: Violation,
    },
    /// The caller's request breaks the contract: nothing was sent.
    #[error("{method} not sent: invalid request: {violation}")]
    InvalidRequest {
        method: &'static str,
        violation: Violation,
    },
    /// The provider did not advertise the capability the call needs.
    #[error("provider does not support {0:?}")]
    Unsupported(Capability),
    #[error("invalid provider endpoint: {0}")]
    Endpoint(String),
    /// The mutation gate said no: nothing was sent.
    #[error("{method} not sent: this process may not make changes ({why})")]
    Refused {
        method: &'static str,
        /// The gate's reason: "not the leader", "dry run".
        why: &'static str,
    },
}

impl ClientError {
    /// Whether the operation may have happened. An invalid answer counts as
    /// unknown: the provider did something, we cannot tell what.
    pub fn outcome(&self) -> Outcome {
        match self {
            ClientError::Provider(e) => e.outcome(),
            ClientError::InvalidResponse { .. } => Outcome::Unknown,
            ClientError::Unsupported(_)
            | ClientError::InvalidRequest { .. }
            | ClientError::Endpoint(_)
            | ClientError::Refused { .. } => Outcome::Final,
        }
    }

    /// The contract error, if the provider sent one.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            ClientError::Provider(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Status> for ClientError {
    fn from(s: Status) -> Self {
        ClientError::Provider(ProviderError::from_status(&s))
    }
}

/// Turns a violation found in `method`'s answer into the error for it.
pub(super) fn invalid_answer(method: &'static str) -> impl Fn(Violation) -> ClientError {
    move |violation| ClientError::InvalidResponse { method, violation }
}
