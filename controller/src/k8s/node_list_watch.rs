//! Lists and watches Nodes in protobuf, as client-go's informers do, and
//! decodes each as its projection ([`super::node_wire`]).
//!
//! kube-rs speaks JSON only; this is its watcher's state machine (paged
//! list, then watch from the list's resourceVersion with bookmarks, relist
//! on 410 Gone) for one resource in the other encoding, yielding the same
//! [`watcher::Event`]s so the store, the backoff and the controllers stay
//! kube-rs's. Why: decoding JSON Nodes was the largest share of the
//! controller's CPU at 5,000 kubelet-sized Nodes (docs/benchmarks.md).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures::Stream;
use http::header::{ACCEPT, HeaderValue};
use http_body_util::{BodyExt, Limited};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::core::Request;
use kube::runtime::watcher::{self, Event};

use super::node_wire::{self, WireError};

pub(super) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const PROTOBUF_STREAM: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// Nodes a list page holds, as kube-rs's watcher asks.
const PAGE: u32 = 500;
/// Bounds on what the apiserver can make us hold: far above a page of
/// kubelet-sized Nodes, and above etcd's limit on one object.
const MAX_PAGE_BYTES: usize = 256 << 20;
pub(super) const MAX_EVENT_BYTES: usize = 16 << 20;
/// The watch's own timeout, as kube-rs's; without a byte for longer than
/// this and a margin (bookmarks come about every minute), it is dead.
const WATCH_TIMEOUT_S: u32 = 290;
const IDLE: Duration = Duration::from_secs(WATCH_TIMEOUT_S as u64 + 30);

enum State {
    Empty,
    Page {
        continue_token: Option<String>,
        items: VecDeque<Bytes>,
        resource_version: Option<String>,
    },
    Listed {
        resource_version: String,
    },
    Watching {
        resource_version: String,
        frames: Frames,
    },
}

/// Every Node, then every change, as kube-rs's `watcher` yields them. An
/// error is yielded and the stream goes on (retrying what failed), so it
/// wants a backoff, as kube-rs's does.
pub fn watch_nodes(client: Client) -> impl Stream<Item = Result<Event<Node>, watcher::Error>> {
    futures::stream::unfold((client, State::Empty), |(client, state)| async move {
        let mut state = state;
        loop {
            let (event, next) = step(&client, state).await;
            state = next;
            if let Some(event) = event {
                return Some((event, (client, state)));
            }
        }
    })
}

type Step = (Option<Result<Event<Node>, watcher::Error>>, State);

async fn step(client: &Client, state: State) -> Step {
    match state {
        State::Empty => (
            Some(Ok(Event::Init)),
            State::Page {
                continue_token: None,
                items: VecDeque::new(),
                resource_version: None,
            },
        ),
        State::Page {
            continue_token,
            mut items,
            resource_version,
        } => {
            if let Some(raw) = items.pop_front() {
                let state = State::Page {
                    continue_token,
                    items,
                    resource_version,
                };
                return match node_wire::decode_node(raw) {
                    Ok(n) => (Some(Ok(Event::InitApply(n))), state),
                    // The page is no good: list again.
                    Err(e) => (Some(Err(list_failed(e))), State::Empty),
                };
            }
            if continue_token.is_none()
                && let Some(resource_version) = resource_version
            {
                return (
                    Some(Ok(Event::InitDone)),
                    State::Listed { resource_version },
                );
            }
            match list(client, continue_token).await {
                Ok(page) => {
                    let resource_version = Some(page.resource_version).filter(|v| !v.is_empty());
                    let continue_token = Some(page.continue_token).filter(|c| !c.is_empty());
                    if resource_version.is_none() && continue_token.is_none() {
                        return (Some(Err(watcher::Error::NoResourceVersion)), State::Empty);
                    }
                    let state = State::Page {
                        continue_token,
                        items: page.items.into(),
                        resource_version,
                    };
                    (None, state)
                }
                Err(e) => (
                    Some(Err(watcher::Error::InitialListFailed(e))),
                    State::Empty,
                ),
            }
        }
        State::Listed { resource_version } => match watch(client, &resource_version).await {
            Ok(frames) => (
                None,
                State::Watching {
                    resource_version,
                    frames,
                },
            ),
            Err(e) => (
                Some(Err(watcher::Error::WatchStartFailed(e))),
                State::Listed { resource_version },
            ),
        },
        State::Watching {
            resource_version,
            mut frames,
        } => {
            let frame = match tokio::time::timeout(IDLE, frames.next()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(Some(Err(e))) => {
                    // Framing is lost: watch again from the last version.
                    return (
                        Some(Err(watcher::Error::WatchFailed(e))),
                        State::Listed { resource_version },
                    );
                }
                // Ended (its timeout) or silent for too long.
                Ok(None) | Err(_) => return (None, State::Listed { resource_version }),
            };
            watch_event(frame, resource_version, frames)
        }
    }
}

fn watch_event(frame: Bytes, resource_version: String, frames: Frames) -> Step {
    let watching = |resource_version| State::Watching {
        resource_version,
        frames,
    };
    let event = match node_wire::decode_watch_event(frame) {
        Ok(e) => e,
        Err(e) => return watch_again(e, resource_version),
    };
    let object = node_wire::unwrap_envelope(event.object);
    if event.type_ == "ERROR" {
        let status = match object.and_then(node_wire::decode_status) {
            Ok(s) => s,
            Err(e) => return watch_again(e, resource_version),
        };
        // 410 Gone: the version is older than the apiserver keeps; list
        // again.
        let next = if status.code == 410 {
            State::Empty
        } else {
            watching(resource_version)
        };
        return (
            Some(Err(watcher::Error::WatchError(Box::new(status)))),
            next,
        );
    }
    let node = match object.and_then(node_wire::decode_node) {
        Ok(n) => n,
        Err(e) => return watch_again(e, resource_version),
    };
    let Some(version) = node.metadata.resource_version.clone() else {
        return (Some(Err(watcher::Error::NoResourceVersion)), State::Empty);
    };
    match event.type_.as_str() {
        "ADDED" | "MODIFIED" => (Some(Ok(Event::Apply(node))), watching(version)),
        "DELETED" => (Some(Ok(Event::Delete(node))), watching(version)),
        "BOOKMARK" => (None, watching(version)),
        other => (
            Some(Err(watch_failed(WireError::new(format!(
                "watch event type {other:?}"
            ))))),
            watching(resource_version),
        ),
    }
}

/// An undecodable event: reported, and the watch started again from the
/// last version it had (the apiserver sends the event again).
fn watch_again(e: WireError, resource_version: String) -> Step {
    (
        Some(Err(watch_failed(e))),
        State::Listed { resource_version },
    )
}

fn list_failed(e: WireError) -> watcher::Error {
    watcher::Error::InitialListFailed(kube::Error::Service(Box::new(e)))
}

fn watch_failed(e: WireError) -> watcher::Error {
    watcher::Error::WatchFailed(kube::Error::Service(Box::new(e)))
}

fn nodes() -> Request {
    Request::new("/api/v1/nodes")
}

/// One page of Nodes, from the watch cache when the apiserver can (as
/// kube-rs's watcher lists).
async fn list(
    client: &Client,
    continue_token: Option<String>,
) -> Result<node_wire::NodeListPage, kube::Error> {
    let params = ListParams {
        limit: Some(PAGE),
        resource_version: Some("0".into()),
        version_match: Some(VersionMatch::NotOlderThan),
        continue_token,
        ..Default::default()
    };
    let request = nodes().list(&params).map_err(kube::Error::BuildRequest)?;
    let body = send(client, request, PROTOBUF).await?.into_body();
    let body = Limited::new(body, MAX_PAGE_BYTES)
        .collect()
        .await
        .map_err(kube::Error::Service)?
        .to_bytes();
    node_wire::unwrap_envelope(body)
        .and_then(node_wire::decode_node_list)
        .map_err(|e| kube::Error::Service(Box::new(e)))
}

async fn watch(client: &Client, resource_version: &str) -> Result<Frames, kube::Error> {
    let params = WatchParams::default().timeout(WATCH_TIMEOUT_S);
    let request = nodes()
        .watch(&params, resource_version)
        .map_err(kube::Error::BuildRequest)?;
    let body = send(client, request, PROTOBUF_STREAM).await?.into_body();
    Ok(Frames {
        body,
        buf: BytesMut::new(),
    })
}

/// Sends `request` accepting `accept`; an answer other than 2xx is the
/// apiserver's Status, as kube-rs makes it.
pub(super) async fn send(
    client: &Client,
    request: http::Request<Vec<u8>>,
    accept: &'static str,
) -> Result<http::Response<kube::client::Body>, kube::Error> {
    let (mut parts, body) = request.into_parts();
    parts
        .headers
        .insert(ACCEPT, HeaderValue::from_static(accept));
    let response = client
        .send(http::Request::from_parts(parts, body.into()))
        .await?;
    let code = response.status();
    if code.is_success() {
        return Ok(response);
    }
    let body = Limited::new(response.into_body(), MAX_EVENT_BYTES)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let status = node_wire::unwrap_envelope(body.clone())
        .and_then(node_wire::decode_status)
        .ok()
        .filter(|s| s.code != 0)
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
            kube::core::Status::failure(text.trim(), "").with_code(code.as_u16())
        });
    Err(kube::Error::Api(Box::new(status)))
}

/// A watch response's length-delimited frames: a 4-byte big-endian length,
/// then that many bytes.
struct Frames {
    body: kube::client::Body,
    buf: BytesMut,
}

impl Frames {
    async fn next(&mut self) -> Option<Result<Bytes, kube::Error>> {
        loop {
            if let Some(frame) = split_frame(&mut self.buf) {
                return Some(frame.map_err(|e| kube::Error::ReadEvents(std::io::Error::other(e))));
            }
            match self.body.frame().await? {
                Ok(f) => {
                    if let Ok(data) = f.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The first whole frame in `buf`, taken out of it; `None` while it is
/// incomplete.
fn split_frame(buf: &mut BytesMut) -> Option<Result<Bytes, WireError>> {
    let len = u32::from_be_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    if len > MAX_EVENT_BYTES {
        return Some(Err(WireError::new(format!(
            "a watch event of {len} bytes (at most {MAX_EVENT_BYTES})"
        ))));
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return None;
    }
    buf.advance(4);
    Some(Ok(buf.split_to(len).freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::RawExtension;
    use prost::Message;

    fn frames() -> Frames {
        Frames {
            body: Bytes::new().into(),
            buf: BytesMut::new(),
        }
    }

    fn event(type_: &str, object: Vec<u8>) -> Bytes {
        meta::WatchEvent {
            r#type: Some(type_.into()),
            object: Some(RawExtension { raw: Some(object) }),
        }
        .encode_to_vec()
        .into()
    }

    fn node(rv: &str) -> Vec<u8> {
        k8s_pb::api::core::v1::Node {
            metadata: Some(meta::ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn status(code: i32) -> Vec<u8> {
        meta::Status {
            code: Some(code),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn version(state: &State) -> Option<&str> {
        match state {
            State::Watching {
                resource_version, ..
            }
            | State::Listed { resource_version } => Some(resource_version),
            State::Empty | State::Page { .. } => None,
        }
    }

    #[test]
    fn watch_events_move_the_version_and_410_lists_again() {
        let (e, s) = watch_event(event("MODIFIED", node("8")), "7".into(), frames());
        assert!(matches!(e, Some(Ok(Event::Apply(n))) if n.metadata.name.as_deref() == Some("n1")));
        assert!(matches!(s, State::Watching { .. }) && version(&s) == Some("8"));

        let (e, s) = watch_event(event("BOOKMARK", node("9")), "8".into(), frames());
        assert!(e.is_none(), "a bookmark is no event");
        assert_eq!(version(&s), Some("9"));

        let (e, s) = watch_event(event("DELETED", node("10")), "9".into(), frames());
        assert!(matches!(e, Some(Ok(Event::Delete(_)))));
        assert_eq!(version(&s), Some("10"));

        let (e, s) = watch_event(event("ERROR", status(410)), "10".into(), frames());
        assert!(matches!(e, Some(Err(watcher::Error::WatchError(s))) if s.code == 410));
        assert!(matches!(s, State::Empty), "gone: list again");

        let (e, s) = watch_event(event("ERROR", status(500)), "10".into(), frames());
        assert!(matches!(e, Some(Err(watcher::Error::WatchError(_)))));
        assert!(matches!(s, State::Watching { .. }) && version(&s) == Some("10"));
    }

    #[test]
    fn an_undecodable_event_is_an_error_and_the_watch_starts_again_where_it_was() {
        for frame in [
            event("MODIFIED", b"\xff\xff".to_vec()),
            Bytes::from_static(b"\x0a\x7f"),
            event("SOMETHING", node("11")),
        ] {
            let (e, s) = watch_event(frame, "10".into(), frames());
            assert!(
                matches!(e, Some(Err(watcher::Error::WatchFailed(_)))),
                "{e:?}"
            );
            assert_eq!(version(&s), Some("10"));
        }
        let (e, s) = watch_event(event("MODIFIED", node("")), "10".into(), frames());
        assert!(matches!(e, Some(Err(watcher::Error::NoResourceVersion))));
        assert!(matches!(s, State::Empty));
    }

    fn framed(parts: &[&[u8]]) -> BytesMut {
        let mut b = BytesMut::new();
        for p in parts {
            b.extend_from_slice(&(p.len() as u32).to_be_bytes());
            b.extend_from_slice(p);
        }
        b
    }

    #[test]
    fn frames_split_whole_and_wait_for_the_rest() {
        let mut buf = framed(&[b"abc", b"", b"defg"]);
        let tail = buf.split_off(buf.len() - 2);
        assert_eq!(&split_frame(&mut buf).unwrap().unwrap()[..], b"abc");
        assert_eq!(&split_frame(&mut buf).unwrap().unwrap()[..], b"");
        assert!(split_frame(&mut buf).is_none(), "two bytes short");
        buf.extend_from_slice(&tail);
        assert_eq!(&split_frame(&mut buf).unwrap().unwrap()[..], b"defg");
        assert!(split_frame(&mut buf).is_none() && buf.is_empty());
    }

    #[test]
    fn an_oversized_frame_is_an_error_before_it_is_read() {
        let mut buf = BytesMut::from(&((MAX_EVENT_BYTES as u32 + 1).to_be_bytes())[..]);
        let e = split_frame(&mut buf).unwrap().unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
        assert!(buf.capacity() < MAX_EVENT_BYTES, "nothing reserved");
    }
}
