//! Supervision of the long-running tasks (watches and controllers). Each
//! runs until the process stops, so a task that returns or panics is a
//! failure: its health check turns red ([`TaskHealth`]) and the manager
//! stops with an error, and the kubelet restarts the container. Restarting
//! the task in place was the alternative; it was not taken because a panic
//! leaves a controller's in-memory state (records, backoffs, locks) in an
//! unknown shape, and a fresh process rebuilds all of it from the API
//! server and the provider, which are the sources of truth.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::task::{AbortHandle, Id, JoinSet};

/// Where a failed task is reported (the controller's `/healthz`).
pub trait TaskHealth: Send + Sync + 'static {
    fn mark_failed(&self, task: &str);
}

/// A supervised task stopped.
#[derive(Debug, thiserror::Error)]
#[error("{task} stopped unexpectedly: {cause}")]
pub struct TaskFailed {
    pub task: &'static str,
    pub cause: String,
}

pub struct Supervisor {
    tasks: JoinSet<()>,
    names: HashMap<Id, (&'static str, AbortHandle)>,
    health: Arc<dyn TaskHealth>,
}

impl Supervisor {
    pub fn new(health: Arc<dyn TaskHealth>) -> Self {
        Supervisor {
            tasks: JoinSet::new(),
            names: HashMap::new(),
            health,
        }
    }

    /// Starts `task` under `name`.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), (name, handle));
    }

    /// Stops the task `name` on purpose (not a failure); whether it ran.
    pub fn stop(&mut self, name: &str) -> bool {
        let Some(id) = self
            .names
            .iter()
            .find(|(_, (n, _))| *n == name)
            .map(|(id, _)| *id)
        else {
            return false;
        };
        if let Some((_, handle)) = self.names.remove(&id) {
            handle.abort();
        }
        true
    }

    /// Waits for the first task to stop, marks it failed, and
    /// says why. Never resolves while every task runs (nor with no task).
    pub async fn failure(&mut self) -> TaskFailed {
        loop {
            let Some(joined) = self.tasks.join_next_with_id().await else {
                return std::future::pending().await;
            };
            let id = match &joined {
                Ok((id, ())) => *id,
                Err(e) => e.id(),
            };
            // A task stopped on purpose is no longer named.
            if self.names.contains_key(&id) {
                return self.failed(joined);
            }
        }
    }

    fn failed(&mut self, joined: Result<(Id, ()), tokio::task::JoinError>) -> TaskFailed {
        let (id, cause) = match joined {
            Ok((id, ())) => (id, "it returned".to_owned()),
            Err(e) if e.is_panic() => {
                let id = e.id();
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_owned());
                (id, format!("it panicked: {message}"))
            }
            Err(e) => (e.id(), "it was cancelled".to_owned()),
        };
        let task = self.names.remove(&id).map_or("unknown task", |(n, _)| n);
        self.health.mark_failed(task);
        tracing::error!(task, %cause, "a supervised task stopped; stopping the manager");
        TaskFailed { task, cause }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::time::Duration;

    /// The tasks marked failed, in order.
    #[derive(Default)]
    struct Health(Mutex<Vec<String>>);

    impl Health {
        fn for_tests() -> Self {
            Health::default()
        }
    }

    impl TaskHealth for Health {
        fn mark_failed(&self, task: &str) {
            self.0.lock().push(task.to_owned());
        }
    }

    #[tokio::test]
    async fn a_panicking_task_is_reported_and_fails_healthz() {
        let health = Arc::new(Health::for_tests());
        let mut s = Supervisor::new(health.clone());
        s.spawn("steady", std::future::pending());
        s.spawn("crashing", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("boom");
        });
        let failed = tokio::time::timeout(Duration::from_secs(5), s.failure())
            .await
            .expect("the panic is noticed");
        assert_eq!(failed.task, "crashing");
        assert_eq!(failed.cause, "it panicked: boom");
        assert_eq!(*health.0.lock(), ["crashing"]);
    }

    #[tokio::test]
    async fn a_task_that_returns_is_a_failure_too() {
        let health = Arc::new(Health::for_tests());
        let mut s = Supervisor::new(health);
        s.spawn("node-watch", async {});
        let failed = s.failure().await;
        assert_eq!(failed.task, "node-watch");
        assert_eq!(failed.cause, "it returned");
    }

    #[tokio::test]
    async fn nothing_to_supervise_never_fails() {
        let mut s = Supervisor::new(Arc::new(Health::for_tests()));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), s.failure())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_task_stopped_on_purpose_is_no_failure() {
        let health = Arc::new(Health::for_tests());
        let mut s = Supervisor::new(health);
        s.spawn("stopping", std::future::pending());
        s.spawn("crashing", async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            panic!("late");
        });
        assert!(s.stop("stopping"));
        assert!(!s.stop("never-started"));
        let failed = s.failure().await;
        assert_eq!(failed.task, "crashing");
    }
}
