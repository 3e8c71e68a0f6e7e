//! Fencing across leaders, over a real socket: the client sends the gate's
//! token on mutations only, the SDK hands it to the provider's handler,
//! refuses a malformed one before the handler runs, and tells the handler
//! (through `CallContext::cancellation`) as soon as the caller gives up,
//! including when the controller loses leadership mid-call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod common;

use ccm_provider_sdk::client::MutationGate;
use ccm_provider_sdk::proto::{self, Route};
use ccm_provider_sdk::{
    CallContext, ClientError, ClientOptions, FencingToken, Identity, ProviderClient, ProviderError,
    ProviderInfo, ProviderResult, ProviderServer, Routes,
};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// The method and fencing token of each call, in arrival order.
type Seen = Arc<Mutex<Vec<(&'static str, Option<FencingToken>)>>>;

/// Records the token of every call; a route to node "hang" never finishes,
/// and a task it leaves behind records when the call is cancelled.
#[derive(Clone, Default)]
struct Cloud {
    tokens: Seen,
    saw_cancellation: Arc<Notify>,
}

impl Identity for Cloud {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "fencing".into(),
            vendor_version: "0".into(),
            provider_id_scheme: "fencing".into(),
            ..Default::default()
        }
    }
}

impl Routes for Cloud {
    async fn list_routes(&self, ctx: CallContext, _: String) -> ProviderResult<Vec<Route>> {
        self.tokens.lock().push(("ListRoutes", ctx.fencing_token));
        Ok(vec![])
    }

    async fn create_route(
        &self,
        ctx: CallContext,
        _: String,
        _: String,
        route: Route,
    ) -> ProviderResult<Route> {
        self.tokens
            .lock()
            .push(("CreateRoute", ctx.fencing_token.clone()));
        if route.target_node == "hang" {
            // Work handed to another task, as a cloud operation being
            // polled would be: it learns of the cancellation by the token.
            let cancellation = ctx.cancellation.clone();
            let saw = self.saw_cancellation.clone();
            tokio::spawn(async move {
                cancellation.cancelled().await;
                saw.notify_one();
            });
            std::future::pending::<()>().await;
        }
        Ok(route)
    }

    async fn delete_route(&self, _: CallContext, _: String, _: Route) -> ProviderResult<()> {
        Err(ProviderError::internal("unused"))
    }
}

/// A leader's gate: open until revoked.
#[derive(Default)]
struct Leader {
    lost: AtomicBool,
    revoked: Notify,
}

/// The gate the client holds: a view of the shared [`Leader`].
struct Gate(Arc<Leader>);

impl MutationGate for Gate {
    fn allows_mutations(&self) -> bool {
        !self.0.lost.load(Ordering::SeqCst)
    }
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(FencingToken::new(3, "cp-1_0a1b"))
    }
    fn revoked(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let me = self.0.clone();
        Box::pin(async move {
            let notified = me.revoked.notified();
            if !me.lost.load(Ordering::SeqCst) {
                notified.await;
            }
        })
    }
}

fn route(target: &str) -> Route {
    Route {
        target_node: target.into(),
        destination_cidr: "10.244.1.0/24".into(),
        ..Default::default()
    }
}

async fn setup() -> (common::Serving, Cloud, Arc<Leader>, ProviderClient) {
    let cloud = Cloud::default();
    let serving =
        common::serve(ProviderServer::new(cloud.clone()).with_routes(cloud.clone())).await;
    let leader = Arc::new(Leader::default());
    let client = ProviderClient::connect_lazy(
        &serving.endpoint,
        ClientOptions {
            mutation_gate: Some(Arc::new(Gate(leader.clone()))),
            ..Default::default()
        },
    )
    .unwrap();
    (serving, cloud, leader, client)
}

#[tokio::test]
async fn the_handler_sees_the_token_of_mutations_only() {
    let (serving, cloud, _leader, client) = setup().await;
    client.list_routes("c1").await.unwrap();
    client.create_route("c1", "r1", route("n1")).await.unwrap();
    assert_eq!(
        *cloud.tokens.lock(),
        [
            ("ListRoutes", None),
            ("CreateRoute", Some(FencingToken::new(3, "cp-1_0a1b"))),
        ]
    );
    serving.stop().await;
}

#[tokio::test]
async fn losing_leadership_cancels_the_handler_at_once() {
    let (serving, cloud, leader, client) = setup().await;
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.create_route("c1", "r1", route("hang")).await }
    });
    // The handler is running once it has recorded the call.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cloud.tokens.lock().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "call never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let saw = cloud.saw_cancellation.notified();
    leader.lost.store(true, Ordering::SeqCst);
    leader.revoked.notify_waiters();
    let err = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ends when leadership is lost")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, ClientError::Refused { .. }), "{err:?}");
    tokio::time::timeout(Duration::from_secs(5), saw)
        .await
        .expect("the provider's handler learns of the cancellation");
    serving.stop().await;
}

#[tokio::test]
async fn a_malformed_token_is_refused_before_the_handler_runs() {
    let (serving, cloud, _leader, _client) = setup().await;
    let path = ccm_provider_sdk::socket_path(&serving.endpoint).unwrap();
    let channel = ccm_provider_sdk::endpoint::raw_channel(path).await.unwrap();
    let mut raw = proto::routes_service_client::RoutesServiceClient::new(channel);
    let mut request = tonic::Request::new(proto::CreateRouteRequest {
        cluster_name: "c1".into(),
        name_hint: "r1".into(),
        route: Some(route("n1")),
    });
    request.metadata_mut().insert(
        proto::FENCING_TOKEN_METADATA,
        "not-a-term:cp-1".parse().unwrap(),
    );
    let status = raw.create_route(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let e = ProviderError::from_status(&status);
    assert_eq!(e.field_violations()[0].0, "metadata[x-ccm-fencing-token]");
    assert!(cloud.tokens.lock().is_empty(), "the handler never ran");
    serving.stop().await;
}
