//! The admin HTTP/JSON API: the [`FakeCloud`] control handle for tests and
//! demos that run the fake as a separate process. Deliberately not part of
//! the gRPC contract, and served on its own socket so a controller pointed
//! at the provider socket can never reach it.
//!
//! | method | path | body | answer |
//! |---|---|---|---|
//! | GET | `/healthz` | | `ok` |
//! | GET | `/state` | | [`crate::StateDump`] |
//! | GET | `/instances` | | `[Instance]` |
//! | POST | `/instances` | [`crate::InstanceSpec`] | `Instance` |
//! | DELETE | `/instances/{name}` | | `{"existed": bool}`; the name stays removed either way |
//! | POST | `/instances/{name}/shutdown`, `/instances/{name}/start` | | 204 / 404 |
//! | DELETE | `/load-balancers/{name}` | | `{"existed": bool}`: deleted by its cloud name behind the controller's back, as from a cloud console |
//! | GET | `/faults` | | [`crate::FaultsSnapshot`] |
//! | DELETE | `/faults` | | 204: clears latency, errors, rate limit (not the quota) |
//! | PUT | `/faults/latency` | `{"method": "EnsureLoadBalancer" \| "*", "ms": 500}` (0 clears) | 204 |
//! | POST | `/faults/errors` | `{"method", "kind", "message"?, "retry_after_ms"?, "field"?, "times"?}` | 204 |
//! | DELETE | `/faults/errors` | optional `?method=Name` | 204 |
//! | PUT | `/faults/rate-limit` | `{"max_per_second": 10 \| null}` | 204 |
//! | GET | `/quota` | | [`crate::QuotaSnapshot`] or `null`: the quota, calls it granted and refused |
//! | PUT | `/quota` | `{"qps": 20.0, "burst": 100}` or `null` | 204: a full bucket, counters reset |
//! | GET | `/calls` | optional `?method=Name` | `[CallRecord]` |
//! | DELETE | `/calls` | | 204 |
//! | PUT | `/readiness` | `{"ready": false, "message": "..."}` | 204 |
//!
//! Errors are `{"error": "..."}` with 400 (bad input) or 404.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use ccm_provider_sdk::{Readiness, bind_socket};
use serde::{Deserialize, Serialize};

use crate::faults::{ErrorInjection, QuotaConfig, Target};
use crate::state::InstanceSpec;
use crate::{Error, FakeCloud, Method};

/// `PUT /faults/latency`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyRequest {
    pub method: Target,
    pub ms: u64,
}

/// `POST /faults/errors`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorRequest {
    pub method: Target,
    #[serde(flatten)]
    pub injection: ErrorInjection,
}

/// `PUT /faults/rate-limit`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RateLimitRequest {
    pub max_per_second: Option<u32>,
}

/// `PUT /readiness`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadinessRequest {
    pub ready: bool,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Deserialize)]
struct MethodQuery {
    method: Option<String>,
}

struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let code = match e {
            Error::UnknownInstance(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError(code, e.to_string())
    }
}

type ApiResult<T> = Result<T, ApiError>;

fn parse_method(q: &MethodQuery) -> Result<Option<Method>, Error> {
    q.method.as_deref().map(str::parse).transpose()
}

/// The admin API for `fake`.
pub fn router(fake: FakeCloud) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/state",
            get(|State(f): State<FakeCloud>| async move { Json(f.dump()) }),
        )
        .route(
            "/instances",
            get(|State(f): State<FakeCloud>| async move { Json(f.instances()) }).post(
                |State(f): State<FakeCloud>, Json(spec): Json<InstanceSpec>| async move {
                    ApiResult::Ok(Json(f.add_instance(spec)?))
                },
            ),
        )
        .route(
            "/instances/{name}",
            axum::routing::delete(
                |State(f): State<FakeCloud>, UrlPath(name): UrlPath<String>| async move {
                    Json(serde_json::json!({ "existed": f.remove_instance(&name) }))
                },
            ),
        )
        .route(
            "/instances/{name}/shutdown",
            post(
                |State(f): State<FakeCloud>, UrlPath(name): UrlPath<String>| async move {
                    f.shutdown_instance(&name)?;
                    ApiResult::Ok(StatusCode::NO_CONTENT)
                },
            ),
        )
        .route(
            "/instances/{name}/start",
            post(
                |State(f): State<FakeCloud>, UrlPath(name): UrlPath<String>| async move {
                    f.start_instance(&name)?;
                    ApiResult::Ok(StatusCode::NO_CONTENT)
                },
            ),
        )
        .route(
            "/load-balancers/{name}",
            axum::routing::delete(
                |State(f): State<FakeCloud>, UrlPath(name): UrlPath<String>| async move {
                    Json(serde_json::json!({
                        "existed": f.delete_load_balancer_out_of_band(&name)
                    }))
                },
            ),
        )
        .route(
            "/faults",
            get(|State(f): State<FakeCloud>| async move { Json(f.faults()) }).delete(
                |State(f): State<FakeCloud>| async move {
                    f.clear_faults();
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/faults/latency",
            put(
                |State(f): State<FakeCloud>, Json(r): Json<LatencyRequest>| async move {
                    f.set_latency(r.method, Duration::from_millis(r.ms));
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/faults/errors",
            post(
                |State(f): State<FakeCloud>, Json(r): Json<ErrorRequest>| async move {
                    f.inject_error(r.method, r.injection);
                    StatusCode::NO_CONTENT
                },
            )
            .delete(
                |State(f): State<FakeCloud>, Query(q): Query<MethodQuery>| async move {
                    f.clear_errors(parse_method(&q)?.map(Target::Method));
                    ApiResult::Ok(StatusCode::NO_CONTENT)
                },
            ),
        )
        .route(
            "/faults/rate-limit",
            put(
                |State(f): State<FakeCloud>, Json(r): Json<RateLimitRequest>| async move {
                    f.set_rate_limit(r.max_per_second);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/quota",
            get(|State(f): State<FakeCloud>| async move { Json(f.quota()) }).put(
                |State(f): State<FakeCloud>, Json(q): Json<Option<QuotaConfig>>| async move {
                    if let Some(q) = q
                        && !(q.qps.is_finite() && q.qps >= 0.0)
                    {
                        return Err(ApiError(
                            StatusCode::BAD_REQUEST,
                            format!("qps {} is not a rate", q.qps),
                        ));
                    }
                    f.set_quota(q);
                    ApiResult::Ok(StatusCode::NO_CONTENT)
                },
            ),
        )
        .route(
            "/calls",
            get(
                |State(f): State<FakeCloud>, Query(q): Query<MethodQuery>| async move {
                    let calls = match parse_method(&q)? {
                        Some(m) => f.calls_of(m),
                        None => f.calls(),
                    };
                    ApiResult::Ok(Json(calls))
                },
            )
            .delete(|State(f): State<FakeCloud>| async move {
                f.clear_calls();
                StatusCode::NO_CONTENT
            }),
        )
        .route(
            "/readiness",
            put(
                |State(f): State<FakeCloud>, Json(r): Json<ReadinessRequest>| async move {
                    f.set_readiness(if r.ready {
                        Readiness::Ready
                    } else {
                        Readiness::NotReady(r.message)
                    });
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(fake)
}

/// Serves the admin API on a Unix socket (stale socket removed, `mode`
/// applied, as for the provider socket) until `shutdown`; removes the
/// socket afterwards.
pub async fn serve_unix(
    fake: FakeCloud,
    path: impl Into<PathBuf>,
    mode: u32,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let path = path.into();
    let listener = bind_socket(&path, mode).await?;
    tracing::info!(socket = %path.display(), "admin API serving");
    let result = axum::serve(listener, router(fake))
        .with_graceful_shutdown(shutdown)
        .await;
    let _ = std::fs::remove_file(&path);
    Ok(result?)
}

/// Serves the admin API on TCP (for humans with curl; bind to loopback:
/// the API has no authentication).
pub async fn serve_tcp(
    fake: FakeCloud,
    addr: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "admin API serving");
    axum::serve(listener, router(fake))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
