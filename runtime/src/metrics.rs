//! The work queues' metrics, under upstream's workqueue names
//! (`workqueue_depth`, `workqueue_queue_duration_seconds`,
//! `workqueue_adds_total`, `workqueue_retries_total`,
//! `workqueue_work_duration_seconds`) and labelled with the queue's name.
//! The [`crate::controller`] runner records them for every controller.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: &'static str,
}

/// Work items started, their duration, retries after errors, the depth
/// and how long items waited, per queue.
#[derive(Clone)]
pub struct QueueMetrics {
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    work: Family<QueueLabels, Histogram>,
    depth: Family<QueueLabels, Gauge>,
    waited: Family<QueueLabels, Histogram>,
}

impl QueueMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = QueueMetrics {
            adds: Family::default(),
            retries: Family::default(),
            work: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_001, 10.0, 10))
            }),
            depth: Family::default(),
            waited: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_001, 10.0, 10))
            }),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            m.depth.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            m.waited.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            m.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            m.work.clone(),
        );
        m
    }

    /// `depth` items wait in `queue`.
    pub fn set_depth(&self, queue: &'static str, depth: usize) {
        self.depth
            .get_or_create(&QueueLabels { name: queue })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// An item of `queue` was taken after waiting `waited`; `depth` remain.
    pub fn waited(&self, queue: &'static str, waited: Duration, depth: usize) {
        let l = QueueLabels { name: queue };
        self.waited.get_or_create(&l).observe(waited.as_secs_f64());
        self.set_depth(queue, depth);
    }

    /// One item of `queue` processed in `took`; `retry` if it failed and
    /// was put back.
    pub fn processed(&self, queue: &'static str, took: Duration, retry: bool) {
        let l = QueueLabels { name: queue };
        self.adds.get_or_create(&l).inc();
        self.work.get_or_create(&l).observe(took.as_secs_f64());
        if retry {
            self.retries.get_or_create(&l).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_items_are_recorded_under_upstreams_names() {
        let mut registry = Registry::default();
        let m = QueueMetrics::register(&mut registry);
        m.processed("service", Duration::from_millis(3), true);
        m.processed("service", Duration::from_millis(1), false);
        m.waited("service", Duration::from_millis(2), 4);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for want in [
            r#"workqueue_adds_total{name="service"} 2"#,
            r#"workqueue_retries_total{name="service"} 1"#,
            r#"workqueue_work_duration_seconds_count{name="service"} 2"#,
            r#"workqueue_queue_duration_seconds_count{name="service"} 1"#,
            r#"workqueue_depth{name="service"} 4"#,
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }
}
