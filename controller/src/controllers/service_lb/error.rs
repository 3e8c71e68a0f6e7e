//! Why one sync of a Service failed, and what that says about the retry
//! and the Service's condition.

use std::time::Duration;

use ccm_provider_sdk::ClientError;
use ccm_provider_sdk::proto::ErrorReason;

use super::decide::SpecError;

/// The shortest and longest wait a provider's RETRY_AFTER can ask for.
const RETRY_AFTER_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(600));

/// Why one sync failed. The text is what the Warning event says after
/// "Error syncing load balancer: ".
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{0}")]
    Spec(#[from] SpecError),
    #[error("failed to {op}: {source}")]
    Provider {
        op: &'static str,
        source: ClientError,
    },
    #[error("failed to {op}: {source}")]
    Kube {
        op: &'static str,
        source: kube::Error,
    },
    /// With several providers: the Service changed since the sync read it,
    /// so the write (conditional on its resourceVersion) wrote nothing. Not
    /// a failure: the newer version is decided afresh.
    #[error("did not {op}: the Service changed since it was read")]
    Stale { op: &'static str },
}

pub(super) fn provider(op: &'static str) -> impl FnOnce(ClientError) -> SyncError {
    move |source| SyncError::Provider { op, source }
}

pub(super) fn kube_op(op: &'static str) -> impl FnOnce(kube::Error) -> SyncError {
    move |source| SyncError::Kube { op, source }
}

impl SyncError {
    /// The delay the provider asked for (RetryInfo), honoured within
    /// [`RETRY_AFTER_BOUNDS`]: a zero delay must not become a busy loop,
    /// nor a huge one a Service forgotten for days.
    pub(super) fn retry_delay(&self) -> Option<Duration> {
        match self {
            SyncError::Provider { source, .. } => source
                .provider_error()?
                .retry_after_delay()
                .map(|d| d.clamp(RETRY_AFTER_BOUNDS.0, RETRY_AFTER_BOUNDS.1)),
            _ => None,
        }
    }

    /// Input that fails the same way until someone changes the Service:
    /// retried only at the longest backoff (a change to the Service
    /// triggers a sync at once anyway).
    pub(super) fn needs_a_change(&self) -> bool {
        match self {
            SyncError::Spec(_) => true,
            SyncError::Provider { source, .. } => matches!(
                source.provider_error().and_then(|e| e.reason()),
                Some(ErrorReason::InvalidServiceSpec | ErrorReason::InvalidAnnotation)
            ),
            _ => false,
        }
    }

    /// The condition reason: the contract's error reason in CamelCase where
    /// there is one.
    pub(super) fn condition_reason(&self) -> &'static str {
        match self {
            SyncError::Spec(_) => "InvalidServiceSpec",
            SyncError::Kube { .. } | SyncError::Stale { .. } => "KubernetesAPIError",
            SyncError::Provider { source, .. } => match source {
                ClientError::InvalidResponse { .. } => "InvalidProviderAnswer",
                ClientError::Unsupported(_)
                | ClientError::InvalidRequest { .. }
                | ClientError::Endpoint(_) => "ProviderError",
                ClientError::Refused { .. } => "NotLeader",
                ClientError::Provider(e) => match e.reason() {
                    Some(ErrorReason::RetryAfter | ErrorReason::OperationPending) => "Provisioning",
                    Some(ErrorReason::InvalidServiceSpec) => "InvalidServiceSpec",
                    Some(ErrorReason::InvalidAnnotation) => "InvalidAnnotation",
                    Some(ErrorReason::QuotaExceeded) => "QuotaExceeded",
                    Some(ErrorReason::ConflictingResource) => "ConflictingResource",
                    Some(ErrorReason::CloudUnavailable) => "CloudUnavailable",
                    Some(ErrorReason::CredentialsInvalid) => "CredentialsInvalid",
                    Some(ErrorReason::InvalidRequest) => "InvalidRequest",
                    Some(ErrorReason::NotLeader) => "NotLeader",
                    _ => match e.code() {
                        tonic::Code::DeadlineExceeded => "ProviderTimeout",
                        tonic::Code::Unavailable => "ProviderUnavailable",
                        _ => "ProviderError",
                    },
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let asked = |d: Duration| SyncError::Provider {
            op: "ensure load balancer",
            source: ClientError::Provider(ccm_provider_sdk::ProviderError::retry_after("wait", d)),
        };
        assert_eq!(
            asked(Duration::from_secs(7)).retry_delay(),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            asked(Duration::ZERO).retry_delay(),
            Some(RETRY_AFTER_BOUNDS.0),
            "zero is not a busy loop"
        );
        assert_eq!(
            asked(Duration::from_secs(86_400)).retry_delay(),
            Some(RETRY_AFTER_BOUNDS.1)
        );
    }
}
