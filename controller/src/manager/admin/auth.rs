//! Delegated authentication and authorization of the secure port, as
//! upstream's (k8s.io/apiserver's delegating options): a bearer token is
//! checked with a TokenReview, the request with a SubjectAccessReview on its
//! non-resource path (`get` on `/metrics`). No token: `system:anonymous`.
//! `--authorization-always-allow-paths` and the `system:masters` group skip
//! authorization. Answers are cached for the configured TTLs.
//!
//! What an unauthenticated client can make us ask the apiserver is bounded:
//! at most [`REVIEWS_IN_FLIGHT`] reviews at once (a request that would need
//! one more is refused with 429 at once, not queued), and none for a path
//! the server does not serve ([`super::secure_router`] answers those 404
//! before this gate).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use k8s_openapi::ClusterResourceScope;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Who a request is from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }
}

/// The two reviews, asked of the kube-apiserver in production.
pub trait Reviews: Send + Sync + 'static {
    /// Who `token` belongs to; `None` when the apiserver does not know it.
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, String>>;
    /// Whether `user` may `verb` the non-resource `path`.
    fn authorize<'a>(
        &'a self,
        user: &'a UserInfo,
        verb: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>>;
}

/// TokenReview and SubjectAccessReview through the controller's own
/// identity (it needs `system:auth-delegator`).
pub struct KubeReviews(pub kube::Client);

impl KubeReviews {
    /// Asks the apiserver `review` (a TokenReview or SubjectAccessReview:
    /// cluster-scoped, answered, never stored).
    async fn create<K>(&self, review: &K) -> Result<K, String>
    where
        K: kube::Resource<Scope = ClusterResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug,
    {
        Api::<K>::all(self.0.clone())
            .create(&PostParams::default(), review)
            .await
            .map_err(|e| format!("{}: {e}", K::kind(&())))
    }
}

impl Reviews for KubeReviews {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, String>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_owned()),
                    audiences: None,
                },
                ..Default::default()
            };
            let Some(status) = self.create(&review).await?.status else {
                return Ok(None);
            };
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let user = status.user.unwrap_or_default();
            Ok(Some(UserInfo {
                name: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }))
        })
    }

    fn authorize<'a>(
        &'a self,
        user: &'a UserInfo,
        verb: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                    groups: Some(user.groups.clone()),
                    extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(path.to_owned()),
                        verb: Some(verb.to_owned()),
                    }),
                    resource_attributes: None,
                },
                ..Default::default()
            };
            Ok(self
                .create(&review)
                .await?
                .status
                .is_some_and(|s| s.allowed))
        })
    }
}

/// At most this many TokenReviews and SubjectAccessReviews in flight. Each
/// takes the apiserver milliseconds, and a client with a valid token is
/// served from the cache after its first request, so only uncacheable
/// floods (a new bogus token every request) meet this bound.
pub const REVIEWS_IN_FLIGHT: usize = 16;

/// At most this many answers per cache: a flood of distinct tokens cannot
/// grow memory without bound.
const CACHE_ENTRIES: usize = 4096;

/// Answers kept for a while, keyed by what was asked.
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock();
        let (value, expires) = entries.get(key)?;
        (Instant::now() < *expires).then(|| value.clone())
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= CACHE_ENTRIES {
            let now = Instant::now();
            entries.retain(|_, (_, expires)| now < *expires);
            if entries.len() >= CACHE_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (value, Instant::now() + ttl));
    }
}

/// A `--authorization-always-allow-paths` entry: exact, or a prefix when it
/// ends in `*`.
#[derive(Debug, Clone)]
enum PathRule {
    Exact(String),
    Prefix(String),
}

impl PathRule {
    fn parse(rule: &str) -> Self {
        match rule.strip_suffix('*') {
            Some(prefix) => PathRule::Prefix(prefix.to_owned()),
            None => PathRule::Exact(rule.to_owned()),
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            PathRule::Exact(p) => path == p,
            PathRule::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

/// The cache lifetimes of the three kinds of answer.
#[derive(Debug, Clone, Copy)]
pub struct Ttls {
    pub token: Duration,
    pub allowed: Duration,
    pub denied: Duration,
}

/// The secure port's gate.
pub struct Delegated {
    reviews: Arc<dyn Reviews>,
    always_allow: Vec<PathRule>,
    ttls: Ttls,
    /// Keyed by the token's SHA-256, so no token is kept in memory longer
    /// than a request.
    tokens: TtlCache<[u8; 32], Option<UserInfo>>,
    decisions: TtlCache<(UserInfo, String, String), bool>,
    in_flight: tokio::sync::Semaphore,
}

/// Why a review gave no answer.
#[derive(Debug)]
enum ReviewError {
    /// [`REVIEWS_IN_FLIGHT`] reviews are already out.
    Busy,
    /// The apiserver failed or could not be reached.
    Failed(String),
}

/// What a request's `Authorization` header says.
enum Credentials<'a> {
    None,
    Bearer(&'a str),
    Malformed,
}

fn credentials(req: &Parts) -> Credentials<'_> {
    let Some(value) = req.headers.get(header::AUTHORIZATION) else {
        return Credentials::None;
    };
    let Ok(value) = value.to_str() else {
        return Credentials::Malformed;
    };
    let mut parts = value.trim().splitn(2, ' ');
    match (parts.next(), parts.next().map(str::trim)) {
        (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") => {
            if token.is_empty() {
                Credentials::Malformed
            } else {
                Credentials::Bearer(token)
            }
        }
        (Some(scheme), None) if scheme.eq_ignore_ascii_case("bearer") => Credentials::Malformed,
        // Other schemes are not ours to judge: anonymous, as upstream.
        _ => Credentials::None,
    }
}

/// How an outcome is told, in the apiserver's `Status` form.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn unauthorized() -> Response {
    status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
}

/// Upstream's answer when its in-flight limit is reached.
fn too_many() -> Response {
    let mut refused = status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        "Too many requests, please try again later.",
    );
    refused
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    refused
}

impl Delegated {
    pub fn new(reviews: Arc<dyn Reviews>, always_allow: &[String], ttls: Ttls) -> Self {
        Delegated {
            reviews,
            always_allow: always_allow
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| PathRule::parse(p))
                .collect(),
            ttls,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
            in_flight: tokio::sync::Semaphore::new(REVIEWS_IN_FLIGHT),
        }
    }

    fn permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ReviewError> {
        self.in_flight.try_acquire().map_err(|_| ReviewError::Busy)
    }

    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .expect("SHA-256 is 32 bytes");
        // Upstream caches both outcomes for the one TTL.
        self.reviewed(
            &self.tokens,
            digest,
            || self.reviews.authenticate(token),
            |_| self.ttls.token,
        )
        .await
    }

    async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> Result<bool, ReviewError> {
        if self.always_allow.iter().any(|r| r.matches(path))
            || user.groups.iter().any(|g| g == "system:masters")
        {
            return Ok(true);
        }
        let key = (user.clone(), verb.to_owned(), path.to_owned());
        self.reviewed(
            &self.decisions,
            key,
            || self.reviews.authorize(user, verb, path),
            |allowed| {
                if *allowed {
                    self.ttls.allowed
                } else {
                    self.ttls.denied
                }
            },
        )
        .await
    }

    /// `cache`'s answer for `key`, else `review`'s, asked within the bound
    /// on reviews in flight and kept for `ttl(answer)`.
    async fn reviewed<'a, K: Eq + Hash, V: Clone>(
        &self,
        cache: &TtlCache<K, V>,
        key: K,
        review: impl FnOnce() -> BoxFuture<'a, Result<V, String>>,
        ttl: impl FnOnce(&V) -> Duration,
    ) -> Result<V, ReviewError> {
        if let Some(known) = cache.get(&key) {
            return Ok(known);
        }
        let permit = self.permit()?;
        let answer = review().await.map_err(ReviewError::Failed)?;
        drop(permit);
        cache.put(key, answer.clone(), ttl(&answer));
        Ok(answer)
    }

    /// Authenticates then authorizes `req`; answers 401, 403 or 500 itself.
    async fn check(&self, req: &Parts) -> Result<(), Response> {
        let user = match credentials(req) {
            Credentials::None => UserInfo::anonymous(),
            Credentials::Malformed => return Err(unauthorized()),
            Credentials::Bearer(token) => match self.authenticate(token).await {
                Ok(Some(user)) => user,
                Ok(None) => return Err(unauthorized()),
                Err(ReviewError::Busy) => return Err(too_many()),
                Err(ReviewError::Failed(e)) => {
                    tracing::warn!(error = %e, "secure port: could not authenticate a request");
                    return Err(unauthorized());
                }
            },
        };
        // Upstream's verb for a non-resource request: the method, lowercased.
        let verb = req.method.as_str().to_ascii_lowercase();
        let path = req.uri.path();
        match self.authorize(&user, &verb, path).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::debug!(user = %user.name, %verb, %path, "secure port: forbidden");
                Err(status(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    &format!(
                        "forbidden: User \"{}\" cannot {verb} path \"{path}\"",
                        user.name
                    ),
                ))
            }
            Err(ReviewError::Busy) => Err(too_many()),
            Err(ReviewError::Failed(e)) => {
                tracing::warn!(error = %e, "secure port: could not authorize a request");
                Err(status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "Internal Server Error: authorization failed",
                ))
            }
        }
    }
}

/// The middleware in front of every route of the secure port.
pub async fn guard(State(gate): State<Arc<Delegated>>, req: Request, next: Next) -> Response {
    // The head alone crosses the await: a body is not Sync.
    let (head, body) = req.into_parts();
    match gate.check(&head).await {
        Ok(()) => next.run(Request::from_parts(head, body)).await,
        Err(refused) => refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Knows two tokens; allows `reader` to get /metrics; fails on "boom".
    #[derive(Default)]
    struct FakeReviews {
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: format!("uid-{name}"),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: BTreeMap::new(),
        }
    }

    impl Reviews for FakeReviews {
        fn authenticate<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<UserInfo>, String>> {
            self.token_reviews.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match token {
                    "reader-token" => Ok(Some(user("reader", &["system:authenticated"]))),
                    "nobody-token" => Ok(Some(user("nobody", &["system:authenticated"]))),
                    "admin-token" => Ok(Some(user("admin", &["system:masters"]))),
                    "boom" => Err("apiserver unreachable".into()),
                    _ => Ok(None),
                }
            })
        }

        fn authorize<'a>(
            &'a self,
            user: &'a UserInfo,
            verb: &'a str,
            path: &'a str,
        ) -> BoxFuture<'a, Result<bool, String>> {
            self.access_reviews.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if path == "/boom" {
                    return Err("apiserver unreachable".into());
                }
                Ok(user.name == "reader" && verb == "get" && path == "/metrics")
            })
        }
    }

    fn gate(reviews: Arc<FakeReviews>, ttl: Duration) -> Delegated {
        Delegated::new(
            reviews,
            &["/healthz".into(), "/readyz".into(), "/debug/*".into()],
            Ttls {
                token: ttl,
                allowed: ttl,
                denied: ttl,
            },
        )
    }

    fn request(method: &str, path: &str, authorization: Option<&str>) -> Parts {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(a) = authorization {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(axum::body::Body::empty()).unwrap().into_parts().0
    }

    async fn code(gate: &Delegated, method: &str, path: &str, auth: Option<&str>) -> u16 {
        match gate.check(&request(method, path, auth)).await {
            Ok(()) => 200,
            Err(r) => r.status().as_u16(),
        }
    }

    #[tokio::test]
    async fn tokens_are_reviewed_then_paths_authorized_as_upstream() {
        let reviews = Arc::new(FakeReviews::default());
        let g = gate(reviews.clone(), Duration::from_secs(10));
        for (method, path, auth, want) in [
            // Always-allowed paths need no identity; the rest do.
            ("GET", "/healthz", None, 200),
            ("GET", "/readyz", None, 200),
            ("GET", "/healthz/leaderElection", None, 403),
            ("GET", "/debug/anything", None, 200),
            ("GET", "/metrics", None, 403),
            ("GET", "/metrics", Some("Bearer reader-token"), 200),
            ("GET", "/metrics", Some("bearer reader-token"), 200),
            ("POST", "/metrics", Some("Bearer reader-token"), 403),
            ("GET", "/livez", Some("Bearer reader-token"), 403),
            ("GET", "/metrics", Some("Bearer nobody-token"), 403),
            ("GET", "/metrics", Some("Bearer admin-token"), 200),
            // An unknown or broken token is refused even where no
            // authorization is needed, as upstream.
            ("GET", "/healthz", Some("Bearer unknown"), 401),
            ("GET", "/metrics", Some("Bearer "), 401),
            ("GET", "/metrics", Some("Bearer"), 401),
            ("GET", "/healthz", Some("Bearer boom"), 401),
            // Other schemes: anonymous.
            ("GET", "/healthz", Some("Basic dXNlcjpwdw=="), 200),
            ("GET", "/metrics", Some("Basic dXNlcjpwdw=="), 403),
            // The reviewer failing: an error, never an allow.
            ("GET", "/boom", Some("Bearer reader-token"), 500),
        ] {
            assert_eq!(
                code(&g, method, path, auth).await,
                want,
                "{method} {path} {auth:?}"
            );
        }
    }

    #[tokio::test]
    async fn answers_are_cached_for_their_ttl_and_not_without_one() {
        let reviews = Arc::new(FakeReviews::default());
        let g = gate(reviews.clone(), Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(
                code(&g, "GET", "/metrics", Some("Bearer reader-token")).await,
                200
            );
            assert_eq!(
                code(&g, "GET", "/metrics", Some("Bearer nobody-token")).await,
                403
            );
            assert_eq!(
                code(&g, "GET", "/metrics", Some("Bearer unknown")).await,
                401
            );
        }
        assert_eq!(reviews.token_reviews.load(Ordering::SeqCst), 3);
        assert_eq!(reviews.access_reviews.load(Ordering::SeqCst), 2);

        let reviews = Arc::new(FakeReviews::default());
        let g = gate(reviews.clone(), Duration::ZERO);
        for _ in 0..3 {
            assert_eq!(
                code(&g, "GET", "/metrics", Some("Bearer reader-token")).await,
                200
            );
        }
        assert_eq!(reviews.token_reviews.load(Ordering::SeqCst), 3);
        assert_eq!(reviews.access_reviews.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn refusals_speak_the_apiservers_status_format() {
        let g = gate(Arc::new(FakeReviews::default()), Duration::ZERO);
        let refused = g
            .check(&request("GET", "/metrics", None))
            .await
            .unwrap_err();
        let body = axum::body::to_bytes(refused.into_body(), 4096)
            .await
            .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["code"], 403);
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(
            status["message"],
            "forbidden: User \"system:anonymous\" cannot get path \"/metrics\""
        );
    }

    /// Counts the reviews asked for and never answers them, as an
    /// apiserver that has stopped responding.
    #[derive(Default)]
    struct StalledReviews {
        asked: AtomicUsize,
    }

    impl Reviews for StalledReviews {
        fn authenticate<'a>(
            &'a self,
            _token: &'a str,
        ) -> BoxFuture<'a, Result<Option<UserInfo>, String>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(futures::future::pending())
        }

        fn authorize<'a>(
            &'a self,
            _user: &'a UserInfo,
            _verb: &'a str,
            _path: &'a str,
        ) -> BoxFuture<'a, Result<bool, String>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(futures::future::pending())
        }
    }

    /// Distinct bogus tokens (and anonymous requests for paths that need a
    /// SubjectAccessReview) cannot be cached: beyond the bound on reviews in
    /// flight they are refused at once, not queued.
    #[tokio::test]
    async fn reviews_in_flight_are_bounded_and_the_excess_refused_at_once() {
        use futures::StreamExt;
        let reviews = Arc::new(StalledReviews::default());
        let g = Arc::new(Delegated::new(
            reviews.clone(),
            &[],
            Ttls {
                token: Duration::from_secs(10),
                allowed: Duration::from_secs(10),
                denied: Duration::from_secs(10),
            },
        ));
        let sent = REVIEWS_IN_FLIGHT * 2 + 10;
        let mut answers = (0..sent)
            .map(|i| {
                let g = g.clone();
                async move {
                    let auth = (i % 2 == 0).then(|| format!("Bearer bogus-{i}"));
                    code(&g, "GET", "/metrics", auth.as_deref()).await
                }
            })
            .collect::<futures::stream::FuturesUnordered<_>>();
        let mut refused = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while refused.len() < sent - REVIEWS_IN_FLIGHT {
            match tokio::time::timeout_at(deadline, answers.next()).await {
                Ok(Some(code)) => refused.push(code),
                _ => break,
            }
        }
        assert_eq!(
            refused.len(),
            sent - REVIEWS_IN_FLIGHT,
            "answered within 2 s: {refused:?}"
        );
        assert!(refused.iter().all(|c| *c == 429), "{refused:?}");
        assert_eq!(reviews.asked.load(Ordering::SeqCst), REVIEWS_IN_FLIGHT);
    }

    /// A path nobody serves costs no review: 404 at once.
    #[tokio::test]
    async fn unserved_paths_are_not_reviewed() {
        use tower::ServiceExt;
        let reviews = Arc::new(FakeReviews::default());
        let app = crate::manager::admin::secure_router(
            Arc::new(crate::manager::admin::Health::for_tests()),
            Arc::new(gate(reviews.clone(), Duration::from_secs(10))),
        );
        for (i, auth) in [None, Some("Bearer bogus"), Some("Bearer reader-token")]
            .into_iter()
            .enumerate()
        {
            for path in ["/nope", &format!("/metrics/{i}"), "/healthz/a/b", "/"] {
                let mut req = Request::get(path);
                if let Some(a) = auth {
                    req = req.header(header::AUTHORIZATION, a);
                }
                let resp = app
                    .clone()
                    .oneshot(req.body(axum::body::Body::empty()).unwrap())
                    .await
                    .unwrap();
                assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path} {auth:?}");
            }
        }
        assert_eq!(reviews.token_reviews.load(Ordering::SeqCst), 0);
        assert_eq!(reviews.access_reviews.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = TtlCache::new();
        for i in 0..(CACHE_ENTRIES * 2) {
            cache.put(i, i, Duration::from_secs(60));
        }
        assert!(cache.entries.lock().len() <= CACHE_ENTRIES);
    }
}
