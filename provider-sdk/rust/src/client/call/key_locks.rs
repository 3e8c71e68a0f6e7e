//! One mutation per idempotency key at a time.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

/// One async mutex per idempotency key, so a client never has two
/// mutations of the same load balancer or route in flight (the contract's
/// promise to providers). Entries go away with their last user.
#[derive(Default)]
pub(in crate::client) struct KeyLocks {
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl KeyLocks {
    pub(super) async fn lock(&self, key: String) -> OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.locks.lock();
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(&key).and_then(Weak::upgrade) {
                Some(l) => l,
                None => {
                    let l = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(key, Arc::downgrade(&l));
                    l
                }
            }
        };
        lock.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_mutation_per_key_at_a_time() {
        let locks = KeyLocks::default();
        let first = locks.lock("lb/k/uid-1".into()).await;
        // Another key is not held up.
        let other = locks.lock("lb/k/uid-2".into()).await;
        // The same key waits for the first holder.
        let second =
            tokio::time::timeout(Duration::from_millis(50), locks.lock("lb/k/uid-1".into())).await;
        assert!(second.is_err(), "second lock on the same key must wait");
        drop(first);
        let _second = tokio::time::timeout(Duration::from_secs(5), locks.lock("lb/k/uid-1".into()))
            .await
            .expect("released");
        drop(other);
        let live = locks
            .locks
            .lock()
            .values()
            .filter(|w| w.strong_count() > 0)
            .count();
        assert_eq!(live, 1, "only the held key stays");
    }
}
