//! The fake refuses writes from a deposed leader: the newest fencing token
//! per cluster is noted when a mutation arrives and checked when it
//! commits, so an older leader's call that is still running (or arrives
//! late) cannot overwrite what the newer leader did.

mod common;

use std::sync::Arc;
use std::time::Duration;

use ccm_fake_provider::{CallOutcome, FakeConfig, LeaderRecord, Method};
use ccm_provider_sdk::client::MutationGate;
use ccm_provider_sdk::proto::{ErrorReason, Route};
use ccm_provider_sdk::{ClientOptions, FencingToken, ProviderClient};
use common::{node, service, start};

/// A leader that never loses its Lease, as far as its client knows: the
/// late writer of a frozen or partitioned replica.
struct Leader(FencingToken);

impl MutationGate for Leader {
    fn allows_mutations(&self) -> bool {
        true
    }
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.0.clone())
    }
}

fn client_as(endpoint: &str, term: u64, holder: &str) -> ProviderClient {
    ProviderClient::connect_lazy(
        endpoint,
        ClientOptions {
            mutation_gate: Some(Arc::new(Leader(FencingToken::new(term, holder)))),
            ..Default::default()
        },
    )
    .unwrap()
}

fn not_leader(e: &ccm_provider_sdk::ClientError) -> Option<FencingToken> {
    let p = e.provider_error()?;
    assert_eq!(p.reason(), Some(ErrorReason::NotLeader), "{e:?}");
    p.newest_leader().cloned()
}

#[tokio::test]
async fn a_deposed_leaders_late_write_is_refused_and_the_new_leaders_stands() {
    let r = start(FakeConfig::default()).await;
    let old = client_as(&r.endpoint, 1, "cp-a");
    let new = client_as(&r.endpoint, 2, "cp-b");
    let svc = service("5d1e0c1a-0000-4000-8000-00000000000a");

    // The old leader's Ensure is slow in the cloud; the new leader's
    // arrives meanwhile.
    r.fake
        .set_latency(Method::EnsureLoadBalancer, Duration::from_millis(600));
    let late = tokio::spawn({
        let (old, svc) = (old.clone(), svc.clone());
        async move { old.ensure_load_balancer("k", svc, vec![node("n1")]).await }
    });
    common::wait_for("the old leader's call to arrive", || async {
        r.fake.dump().leaders.len() == 1
    })
    .await;
    r.fake
        .set_latency(Method::EnsureLoadBalancer, Duration::from_millis(0));
    new.ensure_load_balancer("k", svc.clone(), vec![node("n2")])
        .await
        .unwrap();
    let err = late.await.unwrap().unwrap_err();
    assert_eq!(not_leader(&err), Some(FencingToken::new(2, "cp-b")));
    let lbs = r.fake.dump().load_balancers;
    assert_eq!(lbs.len(), 1);
    assert_eq!(lbs[0].backends, ["n2"], "the new leader's write stands");

    // Every later write of the old term is refused on arrival, deletes too;
    // a same-term stranger as well.
    let err = old
        .ensure_load_balancer_deleted("k", svc.clone())
        .await
        .unwrap_err();
    assert!(not_leader(&err).is_some());
    let stranger = client_as(&r.endpoint, 2, "cp-c");
    let route = Route {
        target_node: "n1".into(),
        destination_cidr: "10.244.1.0/24".into(),
        ..Default::default()
    };
    let err = stranger
        .create_route("k", "r1", route.clone())
        .await
        .unwrap_err();
    assert!(not_leader(&err).is_some());
    assert_eq!(r.fake.dump().load_balancers.len(), 1);
    assert!(r.fake.dump().routes.is_empty());

    // Other clusters have their own leaders; tokenless writes (no leader
    // election) are not fenced.
    old.create_route("other", "r1", route.clone())
        .await
        .unwrap();
    r.client.create_route("k", "r1", route).await.unwrap();
    assert_eq!(
        r.fake.dump().leaders,
        [
            LeaderRecord {
                cluster_name: "k".into(),
                term: 2,
                holder: "cp-b".into()
            },
            LeaderRecord {
                cluster_name: "other".into(),
                term: 1,
                holder: "cp-a".into()
            },
        ]
    );
    let refused = r
        .fake
        .calls()
        .iter()
        .filter(|c| {
            matches!(&c.outcome, CallOutcome::Error { reason: Some(r), .. } if r == "NOT_LEADER")
        })
        .count();
    assert_eq!(refused, 3);
    r.stop().await;
}
