//! Events leave the reconcile path. A sync hands its Event to a bounded
//! queue and goes on; one task per controller publishes them in order, as
//! upstream's event broadcaster does (its queue also holds 1,000 and drops
//! beyond). So a sync never waits for an Event write: a slow or throttled
//! API server delays Events, not Nodes or load balancers.
//!
//! [`Recorder`] writes them as events.k8s.io/v1 Events and turns a repeat
//! into a series, as kube's `Recorder` does, with a bounded cache: kube's
//! walks its whole cache on every Event (the controller's top symbol in a
//! profile at 5,000 Services) and keeps each Event whole for six minutes
//! (33 MiB of RSS once 5,000 Services had their load balancers).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use crate::watch::write_unread;

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
    DryRun(crate::dry_run::DryRun),
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
    Inline(Box<Recorder>),
    DryRun(crate::dry_run::DryRun),
}

impl EventSink {
    /// A sink over `recorder`. Queued delivery starts the publishing task,
    /// which ends when the sink is dropped; Events still queued then are
    /// written first. `dropped` counts Events a full queue refused.
    pub fn new(recorder: Recorder, delivery: Delivery, capacity: usize, dropped: Counter) -> Self {
        let inner = match delivery {
            Delivery::Inline => Inner::Inline(Box::new(recorder)),
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

/// How long a repeat of an Event extends its series rather than starting a
/// new Event (kube's and client-go's six minutes).
const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);

/// How many distinct Events the series cache remembers (client-go's event
/// correlator keeps 4,096). An Event forgotten early only starts a new
/// Event where it would have extended a series.
const SERIES_CAPACITY: usize = 4096;

/// Writes Events for one reporting controller.
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Mutex<SeriesCache>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self::with_capacity(client, reporter, SERIES_CAPACITY)
    }

    fn with_capacity(client: Client, reporter: Reporter, capacity: usize) -> Self {
        Recorder {
            client,
            reporter,
            series: Mutex::new(SeriesCache::new(capacity)),
        }
    }

    /// Creates `event` about `regarding`, or, when the same Event (type,
    /// action, reason, object and related object) was written within
    /// [`SERIES_TTL`], patches that one's series count instead.
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        self.publish_at(event, regarding, Timestamp::now()).await
    }

    async fn publish_at(
        &self,
        event: &Event,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> kube::Result<()> {
        let key = series_key(event, regarding);
        let repeat = self.series.lock().repeat(&key, now);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        if let Some((name, count)) = repeat {
            let patch = serde_json::json!({
                "series": { "count": count, "lastObservedTime": MicroTime(now) }
            });
            let patched = write_unread(&events, "patch", |r| {
                r.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            })
            .await;
            match patched {
                Ok(()) => {
                    self.series.lock().remember(key, name, count, now);
                    return Ok(());
                }
                // Gone (the API server's Event TTL, or deleted by hand):
                // a new Event starts a new series.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let created = self.new_event(event, regarding, now);
        let name = created.metadata.name.clone().unwrap_or_default();
        let body = serde_json::to_vec(&created).map_err(kube::Error::SerdeError)?;
        write_unread(&events, "create", |r| {
            r.create(&PostParams::default(), body)
        })
        .await?;
        self.series.lock().remember(key, name, 1, now);
        Ok(())
    }

    /// The Event as kube's `Recorder` writes it.
    fn new_event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let controller = &self.reporter.controller;
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: ev.note.as_deref().map(bounded_note),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(event_name(
                    regarding.name.as_ref().unwrap_or(controller),
                    now.as_nanosecond(),
                )),
                ..Default::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            related: ev.secondary.clone(),
            ..Default::default()
        }
    }
}

/// The longest note the API server takes (its `NoteLengthLimit`, in
/// bytes).
const MAX_NOTE_BYTES: usize = 1024;

/// What a cut note ends with (upstream's, e.g. the scheduler's
/// `truncateMessage`).
const CUT_NOTE_SUFFIX: &str = " ...";

/// `note`, or, when the API server would refuse it as too long, its start
/// cut at a character boundary and marked as upstream marks it. A cut
/// Event still says what happened; a refused one says nothing.
fn bounded_note(note: &str) -> String {
    if note.len() <= MAX_NOTE_BYTES {
        return note.to_owned();
    }
    let mut end = MAX_NOTE_BYTES - CUT_NOTE_SUFFIX.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_NOTE_SUFFIX}", &note[..end])
}

/// The longest object name the API server takes (a DNS subdomain).
const MAX_NAME_BYTES: usize = 253;

/// The name of a new Event about the object named `regarding`: upstream's
/// `<name>.<hex nanoseconds>` whenever that is a valid name. Otherwise (a
/// 253-character Node name leaves no room for the suffix) upstream falls
/// back to a random UUID; here the name keeps what fits of the object's
/// name, made valid, plus a hash of the whole name, so Events about two
/// objects whose names share a long start still get distinct names.
fn event_name(regarding: &str, nanos: i128) -> String {
    let name = format!("{regarding}.{nanos:x}");
    if is_dns_subdomain(&name) {
        return name;
    }
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        regarding.hash(&mut h);
        h.finish()
    };
    let suffix = format!("{hash:016x}.{nanos:x}");
    let room = MAX_NAME_BYTES - suffix.len() - 1;
    // Only [a-z0-9.-] is valid; each label starts and ends alphanumeric.
    let prefix: String = regarding
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .take(room)
        .collect();
    let prefix = prefix.trim_matches(['.', '-']);
    let name = format!("{prefix}-{suffix}");
    if !prefix.is_empty() && is_dns_subdomain(&name) {
        return name;
    }
    // A prefix with empty or dash-ended labels ("a..b", "a-.b").
    suffix
}

/// Whether `name` is a valid DNS subdomain (RFC 1123), as the API server
/// checks Event names.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= MAX_NAME_BYTES
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// What makes two Events the same Event (kube's key: the reporter is the
/// recorder's own). The object's resourceVersion is part of it: a repeat
/// about a changed object starts a new Event.
fn series_key(ev: &Event, regarding: &ObjectReference) -> Arc<str> {
    let mut key = String::with_capacity(128);
    key.push(match ev.type_ {
        EventType::Normal => 'N',
        EventType::Warning => 'W',
    });
    for part in [&ev.action, &ev.reason] {
        key.push('\0');
        key.push_str(part);
    }
    for r in std::iter::once(regarding).chain(ev.secondary.as_ref()) {
        for part in [
            &r.api_version,
            &r.kind,
            &r.namespace,
            &r.name,
            &r.uid,
            &r.resource_version,
            &r.field_path,
        ] {
            key.push('\0');
            key.push_str(part.as_deref().unwrap_or_default());
        }
    }
    key.into()
}

/// The Events written within [`SERIES_TTL`], at most `capacity` of them,
/// least recently written forgotten first. Every operation is amortised
/// constant time.
struct SeriesCache {
    capacity: usize,
    seen: HashMap<Arc<str>, Seen>,
    /// Keys in the order they were last written, oldest first. A key
    /// written again is pushed again; its older place is skipped.
    order: VecDeque<(u64, Arc<str>)>,
    next_stamp: u64,
}

struct Seen {
    name: String,
    count: i32,
    last: Timestamp,
    stamp: u64,
}

impl SeriesCache {
    fn new(capacity: usize) -> Self {
        SeriesCache {
            capacity: capacity.max(1),
            seen: HashMap::new(),
            order: VecDeque::new(),
            next_stamp: 0,
        }
    }

    /// The name of the Event `key` repeats and its next series count, if
    /// it was written within the TTL.
    fn repeat(&mut self, key: &str, now: Timestamp) -> Option<(String, i32)> {
        self.forget_old(now);
        self.seen
            .get(key)
            .map(|s| (s.name.clone(), s.count.saturating_add(1)))
    }

    fn remember(&mut self, key: Arc<str>, name: String, count: i32, now: Timestamp) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.order.push_back((stamp, key.clone()));
        self.seen.insert(
            key,
            Seen {
                name,
                count,
                last: now,
                stamp,
            },
        );
        self.forget_old(now);
        // Skipped places pile up when the same Events repeat: drop them
        // once they are as many as the live ones.
        if self.order.len() > 2 * self.capacity {
            let seen = &self.seen;
            self.order
                .retain(|(stamp, key)| seen.get(key).is_some_and(|s| s.stamp == *stamp));
        }
    }

    fn forget_old(&mut self, now: Timestamp) {
        while let Some((stamp, key)) = self.order.front() {
            if let Some(s) = self.seen.get(key)
                && s.stamp == *stamp
            {
                if s.last + SERIES_TTL > now && self.seen.len() <= self.capacity {
                    break;
                }
                self.seen.remove(key);
            }
            self.order.pop_front();
        }
    }

    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.seen.len(), self.order.len())
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

    /// A request as (method, path, JSON body).
    type SentRequest = (String, String, serde_json::Value);

    /// An API server that records each request as (method, path, body)
    /// and answers with the body; PATCHes get 404 while `gone` is set.
    fn recording_api() -> (Client, Arc<Mutex<Vec<SentRequest>>>, Arc<AtomicBool>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gone = Arc::new(AtomicBool::new(false));
        let (log, is_gone) = (seen.clone(), gone.clone());
        let service = tower::service_fn(move |req: Request<Body>| {
            let (log, is_gone) = (log.clone(), is_gone.clone());
            async move {
                let method = req.method().to_string();
                let path = req.uri().path().to_owned();
                let body = req.into_body().collect_bytes().await?;
                let sent: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                log.lock().push((method.clone(), path, sent));
                let status = if method == "PATCH" && is_gone.load(Ordering::Relaxed) {
                    404
                } else {
                    201
                };
                let answer = if status == 404 {
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404, "message": "not found"})
                    .to_string()
                    .into_bytes()
                } else {
                    body.to_vec()
                };
                Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(answer))
                    .map_err(kube::Error::HttpError)
            }
        });
        (Client::new(service, "default"), seen, gone)
    }

    #[tokio::test]
    async fn a_repeat_extends_its_series_and_a_changed_object_starts_a_new_event() {
        let (client, seen, _) = recording_api();
        let recorder = recorder(client);
        let t0 = Timestamp::now();
        let at = |s: i64| t0 + SignedDuration::from_secs(s);
        let r = reference();
        let changed = ObjectReference {
            resource_version: Some("2".into()),
            ..reference()
        };
        let sends = [
            ("Synced", &r),
            ("Synced", &r),
            ("Synced", &r),
            ("Synced", &changed),
            ("Other", &r),
        ];
        for (i, (reason, regarding)) in (0..).zip(sends) {
            recorder
                .publish_at(&event(reason), regarding, at(i))
                .await
                .unwrap();
        }

        let seen = seen.lock();
        let methods: Vec<&str> = seen.iter().map(|(m, _, _)| m.as_str()).collect();
        assert_eq!(methods, ["POST", "PATCH", "PATCH", "POST", "POST"]);
        let (_, created_at, created) = &seen[0];
        assert_eq!(created_at, "/apis/events.k8s.io/v1/namespaces/ns/events");
        assert_eq!(created["reason"], "Synced");
        assert_eq!(created["note"], "note of Synced");
        assert_eq!(created["type"], "Normal");
        assert_eq!(created["reportingController"], "test");
        assert_eq!(created["regarding"]["uid"], "u-1");
        let name = created["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("web."), "{name}");
        for (i, count) in [(1, 2), (2, 3)] {
            let (_, path, patch) = &seen[i];
            assert_eq!(
                path,
                &format!("/apis/events.k8s.io/v1/namespaces/ns/events/{name}")
            );
            assert_eq!(patch["series"]["count"], count);
            assert!(patch["series"]["lastObservedTime"].is_string());
        }
    }

    #[tokio::test]
    async fn a_series_whose_event_is_gone_starts_a_new_event() {
        let (client, seen, gone) = recording_api();
        let recorder = recorder(client);
        recorder
            .publish(&event("Synced"), &reference())
            .await
            .unwrap();
        gone.store(true, Ordering::Relaxed);
        recorder
            .publish(&event("Synced"), &reference())
            .await
            .unwrap();
        gone.store(false, Ordering::Relaxed);
        recorder
            .publish(&event("Synced"), &reference())
            .await
            .unwrap();
        let seen = seen.lock();
        let methods: Vec<&str> = seen.iter().map(|(m, _, _)| m.as_str()).collect();
        assert_eq!(methods, ["POST", "PATCH", "POST", "PATCH"]);
        // The new Event's series, not the lost one's.
        assert_eq!(seen[3].2["series"]["count"], 2);
        assert_eq!(
            seen[3].1,
            format!(
                "/apis/events.k8s.io/v1/namespaces/ns/events/{}",
                seen[2].2["metadata"]["name"].as_str().unwrap()
            )
        );
    }

    #[tokio::test]
    async fn a_series_ends_after_the_ttl() {
        let (client, seen, _) = recording_api();
        let recorder = recorder(client);
        let t0 = Timestamp::now();
        let r = reference();
        recorder.publish_at(&event("Synced"), &r, t0).await.unwrap();
        let within = t0 + SERIES_TTL - SignedDuration::from_secs(1);
        recorder
            .publish_at(&event("Synced"), &r, within)
            .await
            .unwrap();
        // The TTL runs from the last repeat.
        let after_first = t0 + SERIES_TTL + SignedDuration::from_secs(1);
        recorder
            .publish_at(&event("Synced"), &r, after_first)
            .await
            .unwrap();
        let after_last = after_first + SERIES_TTL;
        recorder
            .publish_at(&event("Synced"), &r, after_last)
            .await
            .unwrap();
        let methods: Vec<String> = seen.lock().iter().map(|(m, _, _)| m.clone()).collect();
        assert_eq!(methods, ["POST", "PATCH", "PATCH", "POST"]);
    }

    #[test]
    fn the_series_cache_is_bounded_and_forgets_the_least_recently_written_first() {
        let mut cache = SeriesCache::new(2);
        let now = Timestamp::now();
        let key = |k: &str| -> Arc<str> { k.into() };
        cache.remember(key("a"), "a.1".into(), 1, now);
        cache.remember(key("b"), "b.1".into(), 1, now);
        cache.remember(key("a"), "a.1".into(), 2, now);
        cache.remember(key("c"), "c.1".into(), 1, now);
        assert_eq!(cache.repeat("a", now), Some(("a.1".into(), 3)));
        assert_eq!(cache.repeat("b", now), None, "least recently written");
        assert_eq!(cache.repeat("c", now), Some(("c.1".into(), 2)));

        // The same Events over and over: what is kept stays bounded.
        for i in 0..10_000 {
            cache.remember(key(if i % 2 == 0 { "a" } else { "c" }), "x".into(), i, now);
        }
        let (live, places) = cache.len();
        assert_eq!(live, 2);
        assert!(places <= 4, "{places} places kept for 2 Events");
    }

    fn event_with_note(note: String) -> Event {
        Event {
            note: Some(note),
            ..event("SyncLoadBalancerFailed")
        }
    }

    #[tokio::test]
    async fn a_long_note_is_cut_to_what_the_api_server_takes_and_its_repeats_are_a_series() {
        let (client, seen, _) = recording_api();
        let recorder = recorder(client);
        // 1.5 KB of provider error, two-byte characters across the cut.
        let long = format!("provider said: {}", "\u{e9}".repeat(750));
        for _ in 0..2 {
            recorder
                .publish(&event_with_note(long.clone()), &reference())
                .await
                .unwrap();
        }
        let exact = "n".repeat(MAX_NOTE_BYTES);
        let r = ObjectReference {
            name: Some("other".into()),
            ..reference()
        };
        recorder
            .publish(&event_with_note(exact.clone()), &r)
            .await
            .unwrap();

        let seen = seen.lock();
        let methods: Vec<&str> = seen.iter().map(|(m, _, _)| m.as_str()).collect();
        assert_eq!(methods, ["POST", "PATCH", "POST"], "the repeat is a series");
        let note = seen[0].2["note"].as_str().unwrap();
        assert!(note.len() <= MAX_NOTE_BYTES, "{} bytes", note.len());
        assert!(note.ends_with(" ..."), "marked as cut: {note}");
        let kept = note.strip_suffix(" ...").unwrap();
        assert!(long.starts_with(kept), "the note's start is kept");
        assert!(
            kept.len() > MAX_NOTE_BYTES - 8,
            "cut no shorter than needed"
        );
        assert_eq!(seen[2].2["note"], exact, "a note that fits is whole");
    }

    #[test]
    fn a_note_is_cut_on_a_character_boundary() {
        for width in 1..=4 {
            let c = ['a', '\u{e9}', '\u{20ac}', '\u{1f600}'][width - 1];
            for extra in 0..4 {
                let note = format!("{}{}", "x".repeat(extra), c.to_string().repeat(1100));
                let cut = bounded_note(&note);
                assert!(
                    cut.len() <= MAX_NOTE_BYTES,
                    "{width}/{extra}: {}",
                    cut.len()
                );
                assert!(cut.len() > MAX_NOTE_BYTES - 4 - width, "{width}/{extra}");
                assert!(note.starts_with(cut.strip_suffix(CUT_NOTE_SUFFIX).unwrap()));
            }
        }
    }

    #[tokio::test]
    async fn an_event_about_an_object_with_a_253_character_name_has_a_valid_name() {
        let (client, seen, _) = recording_api();
        let recorder = recorder(client);
        // The longest Node name: labels of 63, the last one ending the name.
        let label = |c: char| c.to_string().repeat(63);
        let long = format!(
            "{}.{}.{}.{}",
            label('a'),
            label('b'),
            label('c'),
            "d".repeat(61)
        );
        assert_eq!(long.len(), 253);
        let node = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(long.clone()),
            uid: Some("u-2".into()),
            ..Default::default()
        };
        recorder.publish(&event("Synced"), &node).await.unwrap();
        let seen = seen.lock();
        let (_, path, created) = &seen[0];
        assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/default/events");
        let name = created["metadata"]["name"].as_str().unwrap();
        assert!(is_dns_subdomain(name), "{name} ({} bytes)", name.len());
        assert!(name.starts_with(&long[..200]), "keeps what fits: {name}");
    }

    #[test]
    fn event_names_are_valid_and_distinct_for_any_object_name() {
        let at = 0x1877_0000_0000_0000_i128;
        assert_eq!(
            event_name("web", at),
            format!("web.{at:x}"),
            "upstream's form"
        );
        let long = "a".repeat(253);
        let names = [
            long.clone(),
            format!("{}b", &long[..252]),
            format!("{long}{long}"),
            "Upper.Case".into(),
            "a..b".into(),
            "a-.b".into(),
            ".-.".into(),
            String::new(),
            "\u{e9}t\u{e9}/x y".into(),
            format!("{}-", "x".repeat(250)),
        ];
        let mut made = std::collections::HashSet::new();
        for n in &names {
            let name = event_name(n, at);
            assert!(is_dns_subdomain(&name), "{n:?} -> {name:?}");
            assert!(made.insert(name), "{n:?}: a distinct name");
        }
    }

    #[test]
    fn dns_subdomains_as_the_api_server_checks_them() {
        for valid in ["a", "a.b", "a-b.c0", &"a".repeat(253)] {
            assert!(is_dns_subdomain(valid), "{valid}");
        }
        for invalid in [
            "",
            "A",
            "a.",
            ".a",
            "a..b",
            "-a",
            "a-",
            "a_b",
            &"a".repeat(254),
        ] {
            assert!(!is_dns_subdomain(invalid), "{invalid}");
        }
    }

    #[tokio::test]
    async fn many_distinct_events_keep_only_the_capacity() {
        let (client, seen, _) = recording_api();
        let recorder = Recorder::with_capacity(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
            3,
        );
        for i in 0..10 {
            let r = ObjectReference {
                name: Some(format!("svc-{i}")),
                ..reference()
            };
            recorder.publish(&event("Synced"), &r).await.unwrap();
        }
        assert_eq!(recorder.series.lock().len().0, 3);
        // The newest is still a series; the oldest is forgotten.
        for (i, method) in [(9, "PATCH"), (0, "POST")] {
            let r = ObjectReference {
                name: Some(format!("svc-{i}")),
                ..reference()
            };
            recorder.publish(&event("Synced"), &r).await.unwrap();
            assert_eq!(seen.lock().last().unwrap().0, method, "svc-{i}");
        }
    }
}
