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
mod tests;
