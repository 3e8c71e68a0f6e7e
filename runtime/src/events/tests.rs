//! The sink, the recorder's series and the bounds on what an Event says.

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
