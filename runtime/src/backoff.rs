//! Exponential backoff per key with its own failure map, reset on success:
//! the retry state of a controller not yet written against
//! [`crate::Reconcile`] (service-lb). A [`crate::Reconcile`] keeps its
//! retries in the queue instead ([`crate::RetryPolicy`]).

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

use crate::controller::{Action, RetryPolicy};

/// [`RetryPolicy`] with a failure count per key.
pub struct Backoff {
    policy: RetryPolicy,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(RetryPolicy::NODES.base, RetryPolicy::NODES.max)
    }
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            policy: RetryPolicy::new(base, max),
            failures: Mutex::default(),
        }
    }

    pub fn max(&self) -> Duration {
        self.policy.max
    }

    /// Records a failure of `key`; returns how long to wait before the next
    /// attempt.
    pub fn failed(&self, key: &str) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        self.policy.delay(*n)
    }

    pub fn succeeded(&self, key: &str) {
        self.failures.lock().remove(key);
    }

    /// Requeues `key` after its backoff, logging why.
    pub fn requeue(&self, key: &str, err: &dyn std::fmt::Display) -> Action {
        let delay = self.failed(key);
        tracing::warn!(key, error = %err, retry_in = ?delay, "error syncing; requeuing");
        Action::requeue(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let b = Backoff::default();
        let d: Vec<u64> = (0..12).map(|_| b.failed("n").as_secs()).collect();
        assert_eq!(d, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(b.failed("other").as_secs(), 1, "per key");
        b.succeeded("n");
        assert_eq!(b.failed("n").as_secs(), 1);
    }
}
