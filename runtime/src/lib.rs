//! The controller runtime of the cloud-controller-manager, in the spirit of
//! linkerd's `kubert`: everything a controller needs that is the same for
//! every controller, generic over Kubernetes objects and knowing nothing
//! about clouds or about any particular controller.
//!
//! - [`controller`]: the [`Reconcile`] trait and the [`Controller`] runner.
//! - [`queue`]: the work queue (arrival-order lanes, one worker per key,
//!   per-key retry state).
//! - [`watch`]: reflected watches whose objects come out once stored, and
//!   writes that do not decode their answers.
//! - [`metrics`]: the work queues' metrics under upstream's names.
//! - [`scope`]: the request-id span around each reconcile.
//! - [`events`]: the bounded Event recorder.
//! - [`kube_client`], [`dry_run`]: the rate-limited, fenced, dry-run-aware
//!   Kubernetes client.
//! - [`supervisor`]: long-running tasks, a failure of any is reported.

pub mod controller;
pub mod dry_run;
pub mod events;
pub mod kube_client;
pub mod metrics;
pub mod queue;
pub mod scope;
pub mod supervisor;
pub mod watch;

pub use controller::{Action, Controller, KeyName, Reconcile, RetryPolicy, Singleton};
pub use metrics::QueueMetrics;
pub use scope::Scope;
