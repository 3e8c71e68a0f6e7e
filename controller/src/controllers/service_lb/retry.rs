//! How long a Service waits after a failed attempt. The runtime's queue
//! counts each Service's failures in a row (reset by a success) and
//! schedules the retry; a [`Failed`] sync carries what the error policy
//! needs to pick the delay. The record's [`Retry`] gate learns that delay
//! through its [`Due`], so our own status writes, coming back as watch
//! events, do not retry before it.

use std::time::Duration;

use ccm_runtime::controller::RetryPolicy;

use super::decide::Due;
use super::error::SyncError;

/// Upstream's 5 s doubling to 5 min per Service.
pub(super) const RETRY: RetryPolicy = RetryPolicy::SERVICES;

/// One failed attempt at a Service.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Failed {
    /// The message of the log line that reports it.
    pub(super) what: &'static str,
    pub(super) error: SyncError,
    /// Only the plain backoff: a replaced or vanished Service's delete,
    /// where no Service of ours says anything about the wait.
    plain: bool,
    /// The gate the failed sync left on the record.
    due: Option<Due>,
}

impl Failed {
    /// A sync of the Service that failed; `due` is its record's gate.
    pub(super) fn sync(error: SyncError, due: Due) -> Failed {
        Failed {
            what: "error processing service (retrying)",
            error,
            plain: false,
            due: Some(due),
        }
    }

    /// Deleting the load balancer of the Service this one replaced.
    pub(super) fn replaced(error: SyncError) -> Failed {
        Failed {
            what: "deleting the load balancer of the Service this one replaced",
            error,
            plain: true,
            due: None,
        }
    }

    /// Deleting the load balancer of a Service gone without a reconciled
    /// delete.
    pub(super) fn vanished(error: SyncError) -> Failed {
        Failed {
            what: "deleting the load balancer of a Service gone without a reconciled delete (retrying)",
            error,
            plain: true,
            due: None,
        }
    }

    /// The wait after this failure, the `failures`-th in a row: the
    /// provider's RetryInfo when it gave one, the longest backoff for input
    /// that fails the same way until someone changes the Service (a change
    /// syncs at once anyway), else the backoff. The gate learns it.
    pub(super) fn delay(&self, failures: u32) -> Duration {
        let delay = match (self.plain, self.error.retry_delay()) {
            (false, Some(asked)) => asked,
            (false, None) if self.error.needs_a_change() => RETRY.max,
            _ => RETRY.delay(failures),
        };
        if let Some(due) = &self.due {
            due.set(tokio::time::Instant::now() + delay);
        }
        delay
    }
}
