//! A correct minimal provider written with the SDK passes every case it
//! advertises, and the cases it does not advertise are skipped.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ccm_provider_conformance::Outcome;
use ccm_provider_sdk::NodeSet;
use ccm_provider_sdk::proto::{
    InstanceMetadata, LoadBalancerIngress, LoadBalancerStatus, NodeAddress, NodeAddressType,
    NodeRef, Route, Service, Volume, Warning, Zone,
};
use ccm_provider_sdk::{
    CallContext, Clusters, Existence, Identity, Instances, LbAnswer, LoadBalancerEntry,
    LoadBalancers, ProviderError, ProviderInfo, ProviderResult, ProviderServer, Routes,
    ShutdownState, Volumes, Zones, cluster_scoped_load_balancer_name,
};

/// Keyed by (cluster name, Service uid or destination CIDR).
type Table<V> = Arc<Mutex<BTreeMap<(String, String), V>>>;

#[derive(Clone, Default)]
struct Tiny {
    lbs: Table<(Service, LoadBalancerStatus)>,
    routes: Table<Route>,
    /// The bug of issue 25, finding 1: ListRoutes leaves out the
    /// target_node_addresses routes were created with.
    lists_routes_without_addresses: bool,
    /// Further providerID schemes announced (contract 1.2.0).
    also_owns: Vec<&'static str>,
    /// Refuses its own further schemes as foreign (the bug of issue 27).
    refuses_also_owned: bool,
    /// Parses instance ids as a real cloud does ("tiny://<digits>"), and
    /// cannot parse the suite's invented ones.
    parses_ids: bool,
    /// Warns about every known Node's instance.
    warns: bool,
    /// Declares load balancer classes, declines unclassed Services and
    /// manages a platform (contract 1.3.0).
    hybrid: bool,
    /// Counts GetProviderInfo answers, each naming another platform: the
    /// bug of an identity read from a source that changes under it.
    flaps: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl Tiny {
    /// A real cloud's refusal of an id it cannot parse: neither "exists"
    /// nor "does not", so an error of its own (hcloud: "unable to parse
    /// server id").
    fn parse(&self, node: &NodeRef) -> ProviderResult<()> {
        let Some(id) = node.provider_id.strip_prefix("tiny://") else {
            return Ok(());
        };
        if self.parses_ids && !known("", &node.provider_id) && id.parse::<u64>().is_err() {
            return Err(ProviderError::cloud_unavailable(
                format!("unable to parse server id {id:?}"),
                None,
            ));
        }
        Ok(())
    }

    fn refuse_also_owned(&self, node: &NodeRef) -> ProviderResult<()> {
        if self.refuses_also_owned
            && !node.provider_id.starts_with("tiny://")
            && !node.provider_id.is_empty()
        {
            return Err(ProviderError::invalid_request(
                "node.provider_id",
                format!(
                    "{:?} is not a providerID of this provider",
                    node.provider_id
                ),
            ));
        }
        Ok(())
    }
}

fn known(name: &str, provider_id: &str) -> bool {
    ["conformance-node-1", "conformance-node-2"]
        .iter()
        .any(|n| name == *n || provider_id == format!("tiny://{n}"))
}

impl Identity for Tiny {
    fn info(&self) -> ProviderInfo {
        let mut info = ProviderInfo {
            name: "tiny".into(),
            vendor_version: "0.1.0".into(),
            provider_id_scheme: "tiny".into(),
            ..Default::default()
        };
        for s in &self.also_owns {
            info = info.also_owns(*s);
        }
        if self.hybrid {
            info = info
                .serves_class("example.com/tiny")
                .serves_class("example.com/tiny-internal")
                .declines_unclassed()
                .manages_platform("tiny");
        }
        if let Some(answers) = &self.flaps {
            let n = answers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            info = info.manages_platform(format!("tiny-{n}"));
        }
        info
    }
}

impl Instances for Tiny {
    async fn instance_exists(&self, _: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        self.parse(&node)?;
        self.refuse_also_owned(&node)?;
        Ok(if known(&node.name, &node.provider_id) {
            Existence::Exists
        } else {
            Existence::NotExists
        })
    }

    async fn instance_shutdown(&self, _: CallContext, n: NodeRef) -> ProviderResult<ShutdownState> {
        self.parse(&n)?;
        known(&n.name, &n.provider_id)
            .then_some(ShutdownState::Running)
            .ok_or_else(|| ProviderError::instance_not_found("no such instance"))
    }

    async fn instance_metadata(
        &self,
        ctx: CallContext,
        n: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        self.parse(&n)?;
        if !known(&n.name, &n.provider_id) {
            return Err(ProviderError::instance_not_found("no such instance"));
        }
        Ok(InstanceMetadata {
            provider_id: "tiny://conformance-node-1".into(),
            node_addresses: vec![NodeAddress {
                r#type: NodeAddressType::InternalIp as i32,
                address: "10.0.0.1".into(),
            }],
            zone: "tiny-a".into(),
            region: "tiny".into(),
            ..Default::default()
        })
        .inspect(|_| {
            if self.warns {
                ctx.warn("MaintenanceScheduled", "rebooted on Sunday");
            }
        })
    }
}

impl LoadBalancers for Tiny {
    async fn get_load_balancer(
        &self,
        _: CallContext,
        cluster: String,
        s: Service,
    ) -> ProviderResult<Option<LoadBalancerStatus>> {
        Ok(self
            .lbs
            .lock()
            .unwrap()
            .get(&(cluster, s.uid))
            .map(|(_, st)| st.clone()))
    }

    async fn ensure_load_balancer(
        &self,
        _: CallContext,
        cluster: String,
        s: Service,
        _: NodeSet,
    ) -> ProviderResult<LbAnswer<LoadBalancerStatus>> {
        let mut lbs = self.lbs.lock().unwrap();
        let n = lbs.len() as u8;
        let entry = lbs.entry((cluster, s.uid.clone())).or_insert_with(|| {
            (
                s.clone(),
                LoadBalancerStatus {
                    ingress: vec![LoadBalancerIngress {
                        ip: format!("198.51.100.{}", n % 250 + 1),
                        ..Default::default()
                    }],
                },
            )
        });
        Ok(LbAnswer::done(entry.1.clone()))
    }

    async fn update_load_balancer(
        &self,
        _: CallContext,
        cluster: String,
        s: Service,
        _: NodeSet,
    ) -> ProviderResult<LbAnswer<()>> {
        if !self.lbs.lock().unwrap().contains_key(&(cluster, s.uid)) {
            return Err(ProviderError::not_found("no such load balancer"));
        }
        Ok(LbAnswer::done(()))
    }

    async fn ensure_load_balancer_deleted(
        &self,
        _: CallContext,
        cluster: String,
        s: Service,
    ) -> ProviderResult<Vec<Warning>> {
        self.lbs.lock().unwrap().remove(&(cluster, s.uid));
        Ok(vec![])
    }

    async fn list_load_balancers(
        &self,
        _: CallContext,
        cluster: String,
    ) -> ProviderResult<Vec<LoadBalancerEntry>> {
        Ok(self
            .lbs
            .lock()
            .unwrap()
            .iter()
            .filter(|((c, _), _)| *c == cluster)
            .map(|((c, uid), (s, st))| LoadBalancerEntry {
                name: cluster_scoped_load_balancer_name(c, uid),
                service_uid: uid.clone(),
                service_namespace: s.namespace.clone(),
                service_name: s.name.clone(),
                status: Some(st.clone()),
            })
            .collect())
    }

    fn supports_listing(&self) -> bool {
        true
    }
}

impl Routes for Tiny {
    async fn list_routes(&self, _: CallContext, cluster: String) -> ProviderResult<Vec<Route>> {
        Ok(self
            .routes
            .lock()
            .unwrap()
            .iter()
            .filter(|((c, _), _)| *c == cluster)
            .map(|(_, r)| Route {
                target_node_addresses: if self.lists_routes_without_addresses {
                    Vec::new()
                } else {
                    r.target_node_addresses.clone()
                },
                ..r.clone()
            })
            .collect())
    }

    async fn create_route(
        &self,
        _: CallContext,
        cluster: String,
        hint: String,
        mut route: Route,
    ) -> ProviderResult<Route> {
        let mut routes = self.routes.lock().unwrap();
        let key = (cluster, route.destination_cidr.clone());
        if let Some(existing) = routes.get_mut(&key) {
            if existing.target_node != route.target_node {
                return Err(ProviderError::conflicting_resource(format!(
                    "{} is routed to {}",
                    route.destination_cidr, existing.target_node
                )));
            }
            // The same node: updated in place.
            existing.target_node_addresses = route.target_node_addresses;
            return Ok(existing.clone());
        }
        route.name = format!("route-{hint}");
        routes.insert(key, route.clone());
        Ok(route)
    }

    fn uses_target_node_addresses(&self) -> bool {
        true
    }

    async fn delete_route(
        &self,
        _: CallContext,
        cluster: String,
        route: Route,
    ) -> ProviderResult<()> {
        self.routes
            .lock()
            .unwrap()
            .remove(&(cluster, route.destination_cidr));
        Ok(())
    }
}

impl Zones for Tiny {
    async fn zone_by_provider_id(&self, _: CallContext, id: String) -> ProviderResult<Zone> {
        if !known("", &id) {
            return Err(ProviderError::instance_not_found("no such instance"));
        }
        Ok(Zone {
            failure_domain: "tiny-a".into(),
            region: "tiny".into(),
        })
    }

    async fn zone_by_node_name(&self, _: CallContext, name: String) -> ProviderResult<Zone> {
        if !known(&name, "") {
            return Err(ProviderError::instance_not_found("no such instance"));
        }
        Ok(Zone {
            failure_domain: "tiny-a".into(),
            region: "tiny".into(),
        })
    }
}

impl Volumes for Tiny {
    async fn get_volume_labels(
        &self,
        _: CallContext,
        volume: Volume,
    ) -> ProviderResult<BTreeMap<String, String>> {
        // Only its own volumes; any other gets no labels.
        Ok(if volume.driver == "tiny.example.com" {
            BTreeMap::from([("topology.kubernetes.io/zone".into(), "tiny-zone".into())])
        } else {
            BTreeMap::new()
        })
    }
}

impl Clusters for Tiny {
    async fn list_clusters(&self, _: CallContext) -> ProviderResult<Vec<String>> {
        Ok(vec!["tiny-cluster".into()])
    }

    async fn master(&self, _: CallContext, cluster: String) -> ProviderResult<String> {
        if cluster != "tiny-cluster" {
            return Err(ProviderError::not_found(format!("no cluster {cluster}")));
        }
        Ok("10.0.0.100".into())
    }
}

async fn serve(full: bool) -> (common::Served, Tiny) {
    serve_tiny(full, Tiny::default()).await
}

async fn serve_tiny(full: bool, tiny: Tiny) -> (common::Served, Tiny) {
    let t = tiny.clone();
    let served = common::serve_with(move |endpoint, rx| async move {
        let mut server = ProviderServer::new(t.clone())
            .with_instances(t.clone())
            .with_load_balancers(t.clone());
        if full {
            server = server
                .with_routes(t.clone())
                .with_zones(t.clone())
                .with_volumes(t.clone())
                .with_clusters(t);
        }
        server
            .serve(&endpoint, async {
                let _ = rx.await;
            })
            .await
            .expect("serve");
    })
    .await;
    (served, tiny)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_sdk_provider_passes_every_advertised_case() {
    let (served, tiny) = serve(true).await;
    let report = served.run().await;
    common::assert_failed(&report, &[]);
    // Everything is advertised, so only the "unadvertised" case is skipped.
    assert_eq!(
        report.skipped_names(),
        vec!["identity/unadvertised-services-unimplemented"],
        "{}",
        report.summary_line()
    );
    // The suite left nothing behind.
    assert!(tiny.lbs.lock().unwrap().is_empty());
    assert!(tiny.routes.lock().unwrap().is_empty());
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unadvertised_services_are_skipped_by_capability() {
    let (served, _) = serve(false).await;
    let report = served.run().await;
    common::assert_failed(&report, &[]);
    assert_eq!(
        report.get("routes/create-conflicting"),
        Some(&Outcome::Skipped("provider lacks CAPABILITY_ROUTES".into()))
    );
    assert_eq!(
        report.get("zones/by-node-name-known"),
        Some(&Outcome::Skipped("provider lacks CAPABILITY_ZONES".into()))
    );
    assert_eq!(
        report.get("identity/unadvertised-services-unimplemented"),
        Some(&Outcome::Passed)
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_and_known_node_option() {
    let (served, _) = serve(false).await;
    let mut config = served.config();
    config.focus = vec!["instances/".into()];
    config.skip = vec!["missing".into()];
    config.nodes = vec!["not-a-node".into()];
    let report = ccm_provider_conformance::run(config).await;
    let names: Vec<_> = report.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "instances/exists-known-node",
            "instances/shutdown-known-node",
            "instances/metadata-known-node",
            "instances/foreign-provider-id-refused",
            "instances/every-owned-scheme-judged",
            "instances/metadata-warnings-well-formed",
            "instances/batch-per-query-errors",
            "instances/batch-order-independent",
            "instances/batch-limits",
            "instances/batch-equivalent-to-single-calls",
        ]
    );
    // An explicit --node that does not exist fails rather than skips
    // (the batch cases ask about it too).
    assert_eq!(report.failed(), 8, "{:?}", report.results);
    assert_eq!(report.summary_line(), "2 passed, 8 failed, 0 skipped");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_fails_every_case() {
    let dir = tempfile::tempdir().unwrap();
    let mut config =
        ccm_provider_conformance::Config::new(format!("unix://{}/none.sock", dir.path().display()));
    config.focus = vec!["identity/".into()];
    let report = ccm_provider_conformance::run(config).await;
    assert_eq!(report.passed(), 0);
    assert_eq!(report.failed(), report.results.len());
    assert!(report.failed() >= 4);
}

/// Issue 25, finding 1: a provider with
/// CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES that lists routes without them
/// fails routes/lists-back-as-created (SDK providers declare this
/// revision, 1.1.0, where the rule is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_listed_without_their_addresses_fail() {
    let (served, _) = serve_tiny(
        true,
        Tiny {
            lists_routes_without_addresses: true,
            ..Default::default()
        },
    )
    .await;
    let report = served.run().await;
    common::assert_failed(
        &report,
        &["routes/lists-back-as-created", "routes/update-in-place"],
    );
    let Some(Outcome::Failed(why)) = report.get("routes/lists-back-as-created") else {
        panic!("not failed");
    };
    assert!(why.contains("target_node_addresses"), "{why}");
    served.stop().await;
}

/// Issue 27: the suite invented `<scheme>://conformance-missing-<run>` for
/// the missing instance, which a real cloud cannot parse (hcloud: "unable
/// to parse server id"); `--missing-provider-id` names one in the cloud's
/// own format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_missing_instance_can_be_named_in_the_clouds_own_format() {
    let (served, _) = serve_tiny(
        false,
        Tiny {
            parses_ids: true,
            ..Default::default()
        },
    )
    .await;
    let mut config = served.config();
    config.focus = vec!["missing".into()];
    let report = ccm_provider_conformance::run(config.clone()).await;
    common::assert_failed(
        &report,
        &[
            "instances/exists-missing-node",
            "instances/shutdown-missing-node",
            "instances/metadata-missing-node",
        ],
    );
    config.missing_provider_id = Some("tiny://404".into());
    let report = ccm_provider_conformance::run(config.clone()).await;
    common::assert_failed(&report, &[]);
    assert_eq!(report.passed(), 3, "{:?}", report.results);

    // One not of the provider's schemes fails the run, naming the option.
    config.missing_provider_id = Some("aws:///us-east-1a/i-0123456789abcdef0".into());
    let report = ccm_provider_conformance::run(config).await;
    assert_eq!(report.passed(), 0);
    let Some(Outcome::Failed(why)) = report.get("instances/exists-missing-node") else {
        panic!("{:?}", report.results);
    };
    assert!(why.contains("--missing-provider-id"), "{why}");
    served.stop().await;
}

/// Contract 1.2.0: a provider owning two schemes passes the new cases; one
/// that refuses its own second scheme fails every-owned-scheme-judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheme_a_provider_owns_is_judged() {
    let tiny = Tiny {
        also_owns: vec!["tiny-metal"],
        warns: true,
        ..Default::default()
    };
    let (served, _) = serve_tiny(false, tiny.clone()).await;
    let mut config = served.config();
    config.focus = vec!["identity/".into(), "instances/".into()];
    let report = ccm_provider_conformance::run(config.clone()).await;
    common::assert_failed(&report, &[]);
    for case in [
        "identity/provider-id-schemes-valid",
        "instances/every-owned-scheme-judged",
        "instances/metadata-warnings-well-formed",
    ] {
        assert_eq!(report.get(case), Some(&Outcome::Passed), "{case}");
    }
    served.stop().await;

    let (served, _) = serve_tiny(
        false,
        Tiny {
            refuses_also_owned: true,
            ..tiny
        },
    )
    .await;
    config.endpoint = served.endpoint.clone();
    let report = ccm_provider_conformance::run(config).await;
    common::assert_failed(&report, &["instances/every-owned-scheme-judged"]);
    let Some(Outcome::Failed(why)) = report.get("instances/every-owned-scheme-judged") else {
        panic!("not failed");
    };
    assert!(why.contains("tiny-metal://"), "{why}");
    served.stop().await;
}

/// Contract 1.3.0: a provider declaring classes, declining unclassed
/// Services and managing a platform passes the ownership case; one whose
/// platforms change between two answers fails it, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ownership_a_provider_declares_is_well_formed_and_stable() {
    const CASE: &str = "identity/ownership-well-formed-and-stable";
    let (served, _) = serve_tiny(
        false,
        Tiny {
            hybrid: true,
            also_owns: vec!["tiny-metal"],
            ..Default::default()
        },
    )
    .await;
    let mut config = served.config();
    config.focus = vec!["identity/".into()];
    let report = ccm_provider_conformance::run(config.clone()).await;
    common::assert_failed(&report, &[]);
    assert_eq!(report.get(CASE), Some(&Outcome::Passed));
    served.stop().await;

    let (served, _) = serve_tiny(
        false,
        Tiny {
            flaps: Some(Default::default()),
            ..Default::default()
        },
    )
    .await;
    config.endpoint = served.endpoint.clone();
    let report = ccm_provider_conformance::run(config).await;
    common::assert_failed(&report, &[CASE]);
    let why = common::failure(&report, CASE);
    assert!(
        why.starts_with("GetProviderInfo.platforms: expected the same on every answer"),
        "{why}"
    );
    served.stop().await;
}
