//! Exponential backoff per object key, reset on success.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

/// Nodes use 1 s doubling to 5 min: upstream starts at 5 ms and caps at
/// 1000 s, but a cloud that failed once rarely answers 5 ms later, and 16
/// minutes is too long to wait for a node that could be initialised.
/// Services use upstream's 5 s to 5 min.
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: Mutex::default(),
        }
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    /// Records a failure of `key`; returns how long to wait before the next
    /// attempt.
    pub fn failed(&self, key: &str) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(key.to_owned()).or_insert(0);
        let delay = self.base.saturating_mul(1u32 << (*n).min(16)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    pub fn succeeded(&self, key: &str) {
        self.failures.lock().remove(key);
    }

    /// Requeues `key` after its backoff, logging why.
    pub fn requeue(&self, key: &str, err: &dyn std::fmt::Display) -> super::workqueue::Action {
        let delay = self.failed(key);
        tracing::warn!(key, error = %err, retry_in = ?delay, "error syncing; requeuing");
        super::workqueue::Action::requeue(delay)
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
