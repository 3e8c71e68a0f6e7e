//! A recording pass-through in front of a provider socket: the controller
//! dials [`Recorder::endpoint`], each HTTP/2 request is forwarded unchanged
//! to the provider's socket, and its method and `x-ccm-request-id` (which
//! names the Node or Service the call is about, see the controller's
//! `request_id`) are kept. So a test learns what each of several provider
//! processes was asked, whatever the provider (the fake's call log only
//! covers the fake), refused calls included.
//!
//! A BatchInstances call is recorded as its questions, one record per
//! query with the single method's name and `node/<name>` as its request
//! id, so "what was each provider asked about which Node" holds whether or
//! not the controller batches.
//!
//! It adds no behaviour of its own: every controller connection gets its
//! own connection to the provider, opened when the controller connects; a
//! provider that refuses (killed) closes the controller's connection, and
//! one that dies closes it too, so the controller sees what it would see
//! without it. A SIGSTOPped provider leaves the calls hanging, as it would.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{UnixListener, UnixStream};

/// One call the provider was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The RPC's service, e.g. `InstancesService`.
    pub service: String,
    /// The RPC, e.g. `InstanceMetadata`.
    pub method: String,
    /// The `x-ccm-request-id` (empty without one); for a question of a
    /// BatchInstances call, `node/<name>` of the Node it asks about.
    pub request_id: String,
    /// A question of a BatchInstances call rather than a call of its own.
    pub batched: bool,
    /// When it arrived.
    pub at: SystemTime,
}

/// The RPCs that change a cloud: what a converged controller must not
/// send while nothing changes (the fake's `Method::mutates`).
pub const MUTATIONS: [&str; 5] = [
    "EnsureLoadBalancer",
    "UpdateLoadBalancer",
    "EnsureLoadBalancerDeleted",
    "CreateRoute",
    "DeleteRoute",
];

impl Recorded {
    pub fn mutates(&self) -> bool {
        MUTATIONS.contains(&self.method.as_str())
    }

    /// The Node the call is about (`node/<name>`), if it is about one.
    pub fn node(&self) -> Option<&str> {
        self.request_id.strip_prefix("node/")
    }

    /// The Service the call is about as `namespace/name`, and the first 8
    /// characters of its uid (`service/<ns>/<name>#<uid>`).
    pub fn service(&self) -> Option<(&str, &str)> {
        self.request_id.strip_prefix("service/")?.rsplit_once('#')
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

/// A pass-through serving until dropped.
pub struct Recorder {
    /// `unix://` endpoint to give the controller.
    pub endpoint: String,
    calls: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// Listens on `listen` and forwards to the provider socket `upstream`.
    pub fn start(listen: &Path, upstream: &Path) -> std::io::Result<Recorder> {
        let _ = std::fs::remove_file(listen);
        let listener = UnixListener::bind(listen)?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let upstream = upstream.to_owned();
        let kept = calls.clone();
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                tokio::spawn(connection(down, upstream.clone(), kept.clone()));
            }
        });
        Ok(Recorder {
            endpoint: format!("unix://{}", listen.display()),
            calls,
            task,
        })
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Recorded> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The socket path of a `unix://` endpoint.
pub fn socket_of(endpoint: &str) -> PathBuf {
    PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint))
}

/// One controller connection, forwarded over one provider connection; ends
/// (closing the controller's) when either side does.
async fn connection(down: UnixStream, upstream: PathBuf, calls: Arc<Mutex<Vec<Recorded>>>) {
    let Ok(up) = UnixStream::connect(&upstream).await else {
        return;
    };
    let Ok((send, up_conn)) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(up)).await
    else {
        return;
    };
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let mut send = send.clone();
        let calls = calls.clone();
        async move {
            let req = match record(&calls, req).await {
                Ok(req) => req,
                Err(answer) => return Ok(answer),
            };
            let answer = match send.send_request(req).await {
                Ok(res) => res.map(|b| b.boxed()),
                // The provider went away mid-call: what the controller
                // would get from a reset stream.
                Err(e) => unavailable(&e.to_string()),
            };
            Ok::<_, Infallible>(answer)
        }
    });
    let serve = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(down), service);
    tokio::select! {
        _ = serve => {}
        _ = up_conn => {}
    }
}

/// Records `req` and hands it on; a BatchInstances request is read whole
/// (it is unary) to record its questions.
async fn record(
    calls: &Mutex<Vec<Recorded>>,
    req: Request<Incoming>,
) -> Result<Request<Body>, Response<Body>> {
    let mut parts = req.uri().path().trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or_default();
    let service = service.rsplit('.').next().unwrap_or(service).to_owned();
    let method = parts.next().unwrap_or_default().to_owned();
    let request_id = req
        .headers()
        .get(ccm_proto::v1::REQUEST_ID_METADATA)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let at = SystemTime::now();
    let keep = |records: Vec<Recorded>| {
        calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(records)
    };
    if method != "BatchInstances" {
        keep(vec![Recorded {
            service,
            method,
            request_id,
            batched: false,
            at,
        }]);
        return Ok(req.map(BodyExt::boxed));
    }
    let (head, body) = req.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Err(unavailable(&e.to_string())),
    };
    // One uncompressed gRPC frame: flag byte, 4-byte length, message.
    let questions = bytes
        .get(5..)
        .and_then(|m| <ccm_proto::v1::BatchInstancesRequest as prost::Message>::decode(m).ok())
        .map(|r| r.queries)
        .unwrap_or_default();
    keep(
        questions
            .into_iter()
            .map(|q| Recorded {
                service: service.clone(),
                method: match q.question() {
                    ccm_proto::v1::InstanceQuestion::Existence => "InstanceExists",
                    ccm_proto::v1::InstanceQuestion::Shutdown => "InstanceShutdown",
                    ccm_proto::v1::InstanceQuestion::Metadata => "InstanceMetadata",
                    ccm_proto::v1::InstanceQuestion::Unspecified => "BatchInstances",
                }
                .to_owned(),
                request_id: format!("node/{}", q.node.unwrap_or_default().name),
                batched: true,
                at,
            })
            .collect(),
    );
    let body = http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed();
    Ok(Request::from_parts(head, body))
}

/// A trailers-only gRPC answer: UNAVAILABLE.
fn unavailable(message: &str) -> Response<Body> {
    let message: String = message
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { ' ' })
        .collect();
    Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "14")
        .header("grpc-message", message)
        .body(Empty::new().map_err(|never| match never {}).boxed())
        .expect("a valid response")
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use ccm_proto::v1::GetProviderInfoRequest;
    use ccm_proto::v1::identity_service_client::IdentityServiceClient;
    use tonic::transport::{Channel, Endpoint};

    use super::*;
    use crate::raw::{RawIdentity, RawServer};

    /// A channel to the `unix://` endpoint.
    pub(crate) fn channel(endpoint: &str) -> Channel {
        let path = socket_of(endpoint);
        Endpoint::from_static("http://provider").connect_with_connector_lazy(tower::service_fn(
            move |_| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
            },
        ))
    }

    pub(crate) async fn client(endpoint: &str) -> IdentityServiceClient<Channel> {
        IdentityServiceClient::new(channel(endpoint))
    }

    /// `message` with request id `id`.
    pub(crate) fn with_id<T>(message: T, id: &str) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        req.metadata_mut()
            .insert(ccm_proto::v1::REQUEST_ID_METADATA, id.parse().unwrap());
        req
    }

    pub(crate) fn info(id: &str) -> tonic::Request<GetProviderInfoRequest> {
        with_id(GetProviderInfoRequest {}, id)
    }

    #[tokio::test]
    async fn calls_are_forwarded_and_recorded_and_fail_once_the_provider_is_gone() {
        let provider = RawServer::start(
            tonic::transport::Server::builder().add_service(RawIdentity::new("raw", &[]).server()),
        );
        let dir = tempfile::tempdir().unwrap();
        let recorder =
            Recorder::start(&dir.path().join("rec.sock"), &socket_of(&provider.endpoint)).unwrap();
        let mut c = client(&recorder.endpoint).await;
        let answer = c.get_provider_info(info("node/n1")).await.unwrap();
        assert_eq!(answer.get_ref().name, "raw");
        let calls = recorder.calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(
            (calls[0].service.as_str(), calls[0].method.as_str()),
            ("IdentityService", "GetProviderInfo")
        );
        assert_eq!(calls[0].node(), Some("n1"));
        assert!(!calls[0].mutates());

        // The provider goes away: calls through the recorder fail at once,
        // they do not hang.
        provider.stop().await;
        let mut c = client(&recorder.endpoint).await;
        let failed = tokio::time::timeout(
            Duration::from_secs(5),
            c.get_provider_info(info("service/ns/web#1a2b3c4d")),
        )
        .await
        .expect("an answer, not a hang");
        assert!(failed.is_err(), "{failed:?}");
    }

    #[test]
    fn request_ids_name_their_object() {
        let r = Recorded {
            service: "LoadBalancerService".into(),
            method: "EnsureLoadBalancer".into(),
            request_id: "service/shop/web#1a2b3c4d".into(),
            at: SystemTime::now(),
            batched: false,
        };
        assert_eq!(r.service(), Some(("shop/web", "1a2b3c4d")));
        assert_eq!(r.node(), None);
        assert!(r.mutates());
    }
}
