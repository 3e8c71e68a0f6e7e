//! Events leave the reconcile path. A sync hands its Event to a bounded
//! queue and goes on; one task per controller publishes them in order, as
//! upstream's event broadcaster does (its queue also holds 1,000 and drops
//! beyond). So a sync never waits for an Event write: a slow or throttled
//! API server delays Events, not Nodes or load balancers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

/// Events waiting to be written, per controller (client-go's
/// `maxQueuedEvents`).
pub const QUEUE_CAPACITY: usize = 1000;

/// How a controller's Events reach the API server.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// Through the queue and its publishing task.
    Queued,
    /// Written before `send` returns: unit tests read a sync's Events as
    /// soon as it ends.
    Inline,
    /// `--dry-run-writes`: logged and counted, never published (a dry-run
    /// create would leave the recorder patching an Event that was never
    /// stored).
    DryRun(crate::runtime::dry_run::DryRun),
}

/// Where a controller sends its Events.
pub struct EventSink {
    inner: Inner,
}

enum Inner {
    Queued {
        queue: mpsc::Sender<(Event, ObjectReference)>,
        dropped: Counter,
        /// Set by the first drop of a full queue, cleared by the next
        /// write: one warning per overflow, not one per Event.
        overflowing: Arc<AtomicBool>,
    },
    Inline(Recorder),
    DryRun(crate::runtime::dry_run::DryRun),
}

impl EventSink {
    /// A sink over `recorder`. Queued delivery starts the publishing task,
    /// which ends when the sink is dropped; Events still queued then are
    /// written first. `dropped` counts Events a full queue refused.
    pub fn new(recorder: Recorder, delivery: Delivery, capacity: usize, dropped: Counter) -> Self {
        let inner = match delivery {
            Delivery::Inline => Inner::Inline(recorder),
            Delivery::DryRun(d) => Inner::DryRun(d),
            Delivery::Queued => {
                let (queue, mut pending) =
                    mpsc::channel::<(Event, ObjectReference)>(capacity.max(1));
                let overflowing = Arc::new(AtomicBool::new(false));
                let cleared = overflowing.clone();
                tokio::spawn(async move {
                    while let Some((event, reference)) = pending.recv().await {
                        publish(&recorder, &event, &reference).await;
                        cleared.store(false, Ordering::Relaxed);
                    }
                });
                Inner::Queued {
                    queue,
                    dropped,
                    overflowing,
                }
            }
        };
        EventSink { inner }
    }

    /// Queues `event` about `reference` (or, inline, writes it). Never
    /// fails: an Event that cannot be written is logged and counted.
    pub async fn send(&self, event: Event, reference: ObjectReference) {
        match &self.inner {
            Inner::Inline(recorder) => publish(recorder, &event, &reference).await,
            Inner::DryRun(d) => d.event_not_published(&event.reason, &reference),
            Inner::Queued {
                queue,
                dropped,
                overflowing,
            } => {
                if let Err(e) = queue.try_send((event, reference)) {
                    dropped.inc();
                    let (event, _) = e.into_inner();
                    if !overflowing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            reason = event.reason,
                            "the event queue is full; dropping events until it drains"
                        );
                    }
                }
            }
        }
    }
}

async fn publish(recorder: &Recorder, event: &Event, reference: &ObjectReference) {
    if let Err(e) = recorder.publish(event, reference).await {
        tracing::warn!(reason = event.reason, error = %e, "failed to publish event");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::{Request, Response};
    use kube::Client;
    use kube::client::Body;
    use kube::runtime::events::{EventType, Reporter};
    use parking_lot::Mutex;

    use super::*;

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(format!("note of {reason}")),
            action: "Test".into(),
            secondary: None,
        }
    }

    fn reference() -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            namespace: Some("ns".into()),
            name: Some("web".into()),
            uid: Some("u-1".into()),
            ..Default::default()
        }
    }

    /// An API server that holds every answer until `open` has a permit
    /// for it, recording the reason of each Event it was sent.
    fn gated_api() -> (Client, Arc<Mutex<Vec<String>>>, Arc<tokio::sync::Semaphore>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(tokio::sync::Semaphore::new(0));
        let (log, gate) = (seen.clone(), open.clone());
        let service = tower::service_fn(move |req: Request<Body>| {
            let (log, gate) = (log.clone(), gate.clone());
            async move {
                let body = req.into_body().collect_bytes().await?;
                let sent: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                log.lock()
                    .push(sent["reason"].as_str().unwrap_or_default().to_owned());
                gate.acquire().await.unwrap().forget();
                Response::builder()
                    .status(201)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_vec()))
                    .map_err(kube::Error::HttpError)
            }
        });
        (Client::new(service, "default"), seen, open)
    }

    fn recorder(client: Client) -> Recorder {
        Recorder::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        )
    }

    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_send_never_waits_for_the_api_and_events_keep_their_order() {
        let (client, seen, open) = gated_api();
        let dropped = Counter::default();
        let sink = EventSink::new(recorder(client), Delivery::Queued, 2, dropped.clone());

        // The API answers nothing yet: every send still returns at once.
        sink.send(event("First"), reference()).await;
        eventually("the first event reached the API", || seen.lock().len() == 1).await;
        for reason in ["Second", "Third", "Fourth", "Fifth"] {
            sink.send(event(reason), reference()).await;
        }
        // One in flight, two queued, the rest refused and counted.
        assert_eq!(dropped.get(), 2);

        open.add_permits(10);
        eventually("the queued events were written", || seen.lock().len() == 3).await;
        assert_eq!(*seen.lock(), ["First", "Second", "Third"]);

        // Once drained, the queue takes Events again.
        sink.send(event("Sixth"), reference()).await;
        eventually("a later event was written", || seen.lock().len() == 4).await;
        assert_eq!(seen.lock()[3], "Sixth");
        assert_eq!(dropped.get(), 2);
    }

    #[tokio::test]
    async fn inline_delivery_writes_before_send_returns() {
        let (client, seen, open) = gated_api();
        open.add_permits(1);
        let sink = EventSink::new(recorder(client), Delivery::Inline, 2, Counter::default());
        sink.send(event("Now"), reference()).await;
        assert_eq!(*seen.lock(), ["Now"]);
    }
}
