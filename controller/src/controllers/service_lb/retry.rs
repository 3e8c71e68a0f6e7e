//! How long a Service waits after a failed attempt. Retry state lives in
//! two places: the per-key failure count here (the only use of
//! [`Backoff`]), and each record's [`decide::Retry`](super::decide::Retry)
//! gate, which keeps our own status writes (coming back as watch events)
//! from retrying before the delay chosen here. The queue's timer only
//! carries that delay.

use std::time::Duration;

use super::Lb;
use super::error::SyncError;

/// One attempt at a Service, as far as its retry delay goes.
pub(super) enum Attempt<'a> {
    /// The failure count restarts.
    Succeeded,
    /// Counted, and the wait is the plain backoff (a replaced or vanished
    /// Service's delete).
    Failed,
    /// Counted, unless the error itself says when: the provider's
    /// RetryInfo, or the longest backoff for input that fails the same
    /// way until someone changes the Service.
    FailedWith(&'a SyncError),
}

impl Lb {
    /// Counts `attempt` at `key` and returns the wait before the next one
    /// (zero after a success): upstream's 5 s doubling to 5 min per
    /// Service. The one function holding per-key retry counts; the queue's
    /// own per-key failure count can replace it (see its `error_policy`).
    pub(super) fn count_attempt(&self, key: &str, attempt: Attempt<'_>) -> Duration {
        match attempt {
            Attempt::Succeeded => {
                self.backoff.succeeded(key);
                Duration::ZERO
            }
            Attempt::Failed => self.backoff.failed(key),
            Attempt::FailedWith(err) => match err.retry_delay() {
                Some(asked) => asked,
                None if err.needs_a_change() => self.backoff.max(),
                None => self.backoff.failed(key),
            },
        }
    }
}
