//! Proof the suite can fail: a provider written against the RAW generated
//! tonic server traits (the SDK makes these bugs impossible), correct by
//! default, with one deliberate bug switched on per test. Each test asserts
//! the exact set of failing case names.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ccm_provider_sdk::proto::{
    self, BatchInstancesRequest, BatchInstancesResponse, Capability,
    EnsureLoadBalancerDeletedRequest, EnsureLoadBalancerDeletedResponse, EnsureLoadBalancerRequest,
    EnsureLoadBalancerResponse, GetLoadBalancerNameRequest, GetLoadBalancerNameResponse,
    GetLoadBalancerRequest, GetLoadBalancerResponse, InstanceExistence, InstanceExistsRequest,
    InstanceExistsResponse, InstanceMetadata, InstanceMetadataRequest, InstanceMetadataResponse,
    InstanceQuestion, InstanceResult, InstanceShutdownRequest, InstanceShutdownResponse,
    InstanceShutdownState, ListClustersRequest, ListClustersResponse, ListLoadBalancersRequest,
    ListLoadBalancersResponse, LoadBalancerExistence, LoadBalancerIngress, LoadBalancerStatus,
    LoadBalancerUpdated, MasterRequest, MasterResponse, NodeAddress, NodeAddressType, NodeRef,
    UpdateLoadBalancerRequest, UpdateLoadBalancerResponse, Warning, clusters_service_server,
    ensure_load_balancer_response, instances_service_server, load_balancer_service_server,
    update_load_balancer_response,
};
use ccm_provider_sdk::{MAX_MESSAGE_BYTES, ProviderError, validate};
use ccm_testsupport::raw::RawIdentity;
use tonic::{Request, Response, Status};

const KNOWN_NODE: &str = "conformance-node-1";

#[derive(Clone, Copy, Default)]
struct Bugs {
    /// (a) InstanceExists answers UNSPECIFIED (0) for unknown nodes.
    unspecified_existence: bool,
    /// (b) EnsureLoadBalancerDeleted answers NOT_FOUND when nothing exists.
    delete_not_found: bool,
    /// (c) InstanceMetadata answers INTERNAL for a missing instance.
    metadata_internal: bool,
    /// (d) No request validation: missing REQUIRED fields (and malformed
    /// fencing tokens) are accepted.
    no_validation: bool,
    /// (e) EnsureLoadBalancer runs the cloud work in a detached task that
    /// finishes even when the caller has given up.
    ignores_cancellation: bool,
    /// (f) The x-ccm-fencing-token metadata is not read at all, as a
    /// provider written from contract 1.0.0 (which had no fencing) does.
    ignores_fencing_token: bool,
    /// (g) Master of a cluster ListClusters does not list answers
    /// INVALID_ARGUMENT, which contract 1.0.0 allowed.
    master_unknown_invalid: bool,
    /// (h) The fields of contract 1.2.0 sent malformed: a list of schemes
    /// with one twice, whose "raw-metal://" Nodes are refused as foreign,
    /// and a warning about a Node whose reason is not CamelCase.
    malformed_1_2_0_fields: bool,
    /// (i) The fields of contract 1.3.0 sent malformed: a load balancer
    /// class without a prefix, a platform twice.
    malformed_1_3_0_fields: bool,
    /// (j) unclassed_services a value contract 1.3.0 does not define.
    unknown_unclassed_services: bool,
    /// (k) BatchInstances fails whole when one query fails.
    batch_fails_whole: bool,
    /// (l) BatchInstances answers the queries in the order of their nodes'
    /// names but hands the answers out in the order asked (as a provider
    /// zipping a cloud's sorted listing with its queries).
    batch_sorted_zip: bool,
    /// (m) BatchInstances checks nothing of the request: no queries, 501,
    /// keys empty, long or twice, questions UNSPECIFIED are all answered.
    batch_no_limits: bool,
    /// (n) BatchInstances answers metadata from a stale cache without the
    /// addresses the single call answers.
    batch_stale_metadata: bool,
}

#[derive(Clone, Default)]
struct RawCloud {
    bugs: Bugs,
    lbs: Arc<Mutex<HashMap<(String, String), LoadBalancerStatus>>>,
}

fn invalid(v: validate::Violation) -> Status {
    ProviderError::invalid_request(v.field, v.problem).to_status()
}

impl RawCloud {
    fn node(&self, node: &Option<NodeRef>) -> Result<NodeRef, Status> {
        if self.bugs.no_validation {
            return Ok(node.clone().unwrap_or_default());
        }
        let node = validate::node_ref("node", node).map_err(invalid)?;
        let ours = node
            .provider_id
            .strip_prefix("raw://")
            .is_some_and(|id| !id.is_empty());
        if !node.provider_id.is_empty() && !ours {
            return Err(invalid(validate::Violation {
                field: "node.provider_id".into(),
                problem: "not a providerID of this provider".into(),
            }));
        }
        Ok(node)
    }

    fn known(node: &NodeRef) -> bool {
        node.name == KNOWN_NODE || node.provider_id == format!("raw://{KNOWN_NODE}")
    }

    /// (cluster, uid) after validation.
    fn key(
        &self,
        cluster: &str,
        service: &Option<proto::Service>,
    ) -> Result<(String, String), Status> {
        if !self.bugs.no_validation {
            validate::name("cluster_name", cluster).map_err(invalid)?;
            validate::service("service", service).map_err(invalid)?;
        }
        let uid = service.as_ref().map(|s| s.uid.clone()).unwrap_or_default();
        Ok((cluster.to_owned(), uid))
    }

    fn status_for(uid: &str) -> LoadBalancerStatus {
        let h = uid
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
        LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: format!("203.0.113.{}", h % 250 + 1),
                ..Default::default()
            }],
        }
    }
}

#[tonic::async_trait]
impl instances_service_server::InstancesService for RawCloud {
    /// Each query by its single call, unless a batch bug is switched on.
    async fn batch_instances(
        &self,
        req: Request<BatchInstancesRequest>,
    ) -> Result<Response<BatchInstancesResponse>, Status> {
        use proto::instance_result::Result as R;
        let queries = req.into_inner().queries;
        if !self.bugs.batch_no_limits {
            validate::batch_queries(&queries).map_err(invalid)?;
        }
        let mut order: Vec<usize> = (0..queries.len()).collect();
        if self.bugs.batch_sorted_zip {
            let name = |i: &usize| queries[*i].node.as_ref().map(|n| n.name.clone());
            order.sort_by_key(name);
        }
        let mut results = Vec::with_capacity(queries.len());
        for (q, i) in queries.iter().zip(order) {
            let node = queries[i].node.clone();
            let question = InstanceQuestion::try_from(q.question);
            let answer = match question {
                Ok(InstanceQuestion::Existence) => self
                    .instance_exists(Request::new(InstanceExistsRequest { node }))
                    .await
                    .map(|r| R::Existence(r.into_inner())),
                Ok(InstanceQuestion::Shutdown) => self
                    .instance_shutdown(Request::new(InstanceShutdownRequest { node }))
                    .await
                    .map(|r| R::Shutdown(r.into_inner())),
                _ => self
                    .instance_metadata(Request::new(InstanceMetadataRequest { node }))
                    .await
                    .map(|r| {
                        let mut r = r.into_inner();
                        if self.bugs.batch_stale_metadata
                            && let Some(m) = &mut r.metadata
                        {
                            m.node_addresses.clear();
                        }
                        R::Metadata(r)
                    }),
            };
            let result = match answer {
                Ok(a) => a,
                Err(s) if self.bugs.batch_fails_whole => return Err(s),
                Err(s) => R::Error(ProviderError::from_status(&s).to_query_error()),
            };
            results.push(InstanceResult {
                key: q.key.clone(),
                result: Some(result),
            });
        }
        Ok(Response::new(BatchInstancesResponse { results }))
    }

    async fn instance_exists(
        &self,
        req: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        let node = self.node(&req.get_ref().node)?;
        let existence = if Self::known(&node) {
            InstanceExistence::Exists as i32
        } else if self.bugs.unspecified_existence {
            // The "bool-like" bug: false/absent encoded as the zero value.
            0
        } else {
            InstanceExistence::NotExists as i32
        };
        Ok(Response::new(InstanceExistsResponse { existence }))
    }

    async fn instance_shutdown(
        &self,
        req: Request<InstanceShutdownRequest>,
    ) -> Result<Response<InstanceShutdownResponse>, Status> {
        let node = self.node(&req.get_ref().node)?;
        if !Self::known(&node) {
            return Err(ProviderError::instance_not_found("no such instance").to_status());
        }
        Ok(Response::new(InstanceShutdownResponse {
            state: InstanceShutdownState::Running as i32,
        }))
    }

    async fn instance_metadata(
        &self,
        req: Request<InstanceMetadataRequest>,
    ) -> Result<Response<InstanceMetadataResponse>, Status> {
        let node = self.node(&req.get_ref().node)?;
        if !Self::known(&node) {
            if self.bugs.metadata_internal {
                return Err(Status::internal("lookup failed: instance not found"));
            }
            return Err(ProviderError::instance_not_found("no such instance").to_status());
        }
        Ok(Response::new(InstanceMetadataResponse {
            metadata: Some(InstanceMetadata {
                provider_id: format!("raw://{KNOWN_NODE}"),
                node_addresses: vec![NodeAddress {
                    r#type: NodeAddressType::InternalIp as i32,
                    address: "10.0.0.1".into(),
                }],
                ..Default::default()
            }),
            warnings: if self.bugs.malformed_1_2_0_fields {
                vec![Warning {
                    reason: "not camel case".into(),
                    message: "m".into(),
                }]
            } else {
                Vec::new()
            },
        }))
    }
}

#[tonic::async_trait]
impl load_balancer_service_server::LoadBalancerService for RawCloud {
    async fn get_load_balancer(
        &self,
        req: Request<GetLoadBalancerRequest>,
    ) -> Result<Response<GetLoadBalancerResponse>, Status> {
        let r = req.get_ref();
        let key = self.key(&r.cluster_name, &r.service)?;
        let status = self.lbs.lock().unwrap().get(&key).cloned();
        Ok(Response::new(GetLoadBalancerResponse {
            existence: if status.is_some() {
                LoadBalancerExistence::Exists as i32
            } else {
                LoadBalancerExistence::NotExists as i32
            },
            status,
        }))
    }

    async fn get_load_balancer_name(
        &self,
        req: Request<GetLoadBalancerNameRequest>,
    ) -> Result<Response<GetLoadBalancerNameResponse>, Status> {
        let r = req.get_ref();
        let (_, uid) = self.key(&r.cluster_name, &r.service)?;
        Ok(Response::new(GetLoadBalancerNameResponse {
            name: format!("raw-{}", uid.replace('-', "")),
        }))
    }

    async fn ensure_load_balancer(
        &self,
        req: Request<EnsureLoadBalancerRequest>,
    ) -> Result<Response<EnsureLoadBalancerResponse>, Status> {
        let r = req.get_ref();
        let key = self.key(&r.cluster_name, &r.service)?;
        if !self.bugs.no_validation {
            validate::node_refs("nodes", &r.nodes).map_err(invalid)?;
        }
        if !self.bugs.no_validation
            && !self.bugs.ignores_fencing_token
            && let Some(v) = req.metadata().get(proto::FENCING_TOKEN_METADATA)
        {
            let text = v.to_str().unwrap_or_default();
            ccm_provider_sdk::FencingToken::parse(text).map_err(|e| {
                ProviderError::invalid_request("metadata[x-ccm-fencing-token]", e).to_status()
            })?;
        }
        let status = Self::status_for(&key.1);
        if self.bugs.ignores_cancellation {
            let (lbs, key, status) = (self.lbs.clone(), key.clone(), status.clone());
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                lbs.lock().unwrap().insert(key, status);
            });
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        } else {
            self.lbs.lock().unwrap().insert(key, status.clone());
        }
        Ok(Response::new(EnsureLoadBalancerResponse {
            result: Some(ensure_load_balancer_response::Result::Status(status)),
            warnings: vec![],
        }))
    }

    async fn put_node_set(
        &self,
        _: Request<ccm_provider_sdk::proto::PutNodeSetRequest>,
    ) -> Result<Response<ccm_provider_sdk::proto::PutNodeSetResponse>, Status> {
        Err(Status::unimplemented("no node sets"))
    }

    async fn update_load_balancer(
        &self,
        req: Request<UpdateLoadBalancerRequest>,
    ) -> Result<Response<UpdateLoadBalancerResponse>, Status> {
        let r = req.get_ref();
        let key = self.key(&r.cluster_name, &r.service)?;
        if !self.lbs.lock().unwrap().contains_key(&key) {
            return Err(ProviderError::not_found("no such load balancer").to_status());
        }
        Ok(Response::new(UpdateLoadBalancerResponse {
            result: Some(update_load_balancer_response::Result::Updated(
                LoadBalancerUpdated {},
            )),
            warnings: vec![],
        }))
    }

    async fn ensure_load_balancer_deleted(
        &self,
        req: Request<EnsureLoadBalancerDeletedRequest>,
    ) -> Result<Response<EnsureLoadBalancerDeletedResponse>, Status> {
        let r = req.get_ref();
        let key = self.key(&r.cluster_name, &r.service)?;
        let existed = self.lbs.lock().unwrap().remove(&key).is_some();
        if !existed && self.bugs.delete_not_found {
            return Err(Status::not_found("load balancer not found"));
        }
        Ok(Response::new(EnsureLoadBalancerDeletedResponse {
            warnings: vec![],
        }))
    }

    async fn list_load_balancers(
        &self,
        _: Request<ListLoadBalancersRequest>,
    ) -> Result<Response<ListLoadBalancersResponse>, Status> {
        Err(Status::unimplemented("listing is not supported"))
    }
}

/// The one cluster the raw provider knows.
const RAW_CLUSTER: &str = "raw-cluster";

#[tonic::async_trait]
impl clusters_service_server::ClustersService for RawCloud {
    async fn list_clusters(
        &self,
        _: Request<ListClustersRequest>,
    ) -> Result<Response<ListClustersResponse>, Status> {
        Ok(Response::new(ListClustersResponse {
            cluster_names: vec![RAW_CLUSTER.into()],
        }))
    }

    async fn master(
        &self,
        req: Request<MasterRequest>,
    ) -> Result<Response<MasterResponse>, Status> {
        if req.get_ref().cluster_name == RAW_CLUSTER {
            return Ok(Response::new(MasterResponse {
                address: "https://192.0.2.1:6443".into(),
            }));
        }
        if self.bugs.master_unknown_invalid {
            return Err(
                ProviderError::invalid_request("cluster_name", "unknown cluster").to_status(),
            );
        }
        Err(ProviderError::not_found("unknown cluster").to_status())
    }
}

fn serve(bugs: Bugs) -> common::Served {
    serve_declaring(bugs, None)
}

/// `contract_version`: what GetProviderInfo declares; `None`: this
/// revision's.
fn serve_declaring(bugs: Bugs, contract_version: Option<&'static str>) -> common::Served {
    let cloud = RawCloud {
        bugs,
        ..Default::default()
    };
    let mut identity = RawIdentity::new(
        "raw",
        &[
            Capability::Instances,
            Capability::InstancesBatch,
            Capability::LoadBalancers,
            Capability::Clusters,
        ],
    );
    identity.info.vendor_version = "0.0.1".into();
    if let Some(v) = contract_version {
        identity.info.contract_version = v.into();
    }
    if bugs.malformed_1_2_0_fields {
        identity.info.provider_id_schemes =
            vec!["raw-metal".into(), "raw-metal".into(), "raw".into()];
    }
    if bugs.malformed_1_3_0_fields {
        identity.info.load_balancer_classes = vec!["example.com/raw".into(), "raw".into()];
        identity.info.platforms = vec!["raw".into(), "raw".into()];
    }
    if bugs.unknown_unclassed_services {
        identity.info.unclassed_services = 3;
    }
    let (_, health) = tonic_health::server::health_reporter();
    let routes = tonic::service::Routes::new(identity.server())
        .add_service(
            instances_service_server::InstancesServiceServer::new(cloud.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(
            load_balancer_service_server::LoadBalancerServiceServer::new(cloud.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(clusters_service_server::ClustersServiceServer::new(cloud))
        .add_service(health);
    common::serve_routes(routes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_provider_without_bugs_passes() {
    let served = serve(Bugs::default());
    let report = served.run().await;
    common::assert_failed(&report, &[]);
    // Nothing was left behind, so there was nothing to clean up.
    assert_eq!(report.get("cleanup"), None);
    assert!(report.passed() > 30, "{}", report.summary_line());
    assert_eq!(
        report.get("routes/create-idempotent"),
        Some(&ccm_provider_conformance::Outcome::Skipped(
            "provider lacks CAPABILITY_ROUTES".into()
        ))
    );
    assert_eq!(
        report.get("loadbalancer/list-contains-once"),
        Some(&ccm_provider_conformance::Outcome::Skipped(
            "provider lacks CAPABILITY_LIST_LOAD_BALANCERS".into()
        ))
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bool_like_instance_exists_fails() {
    let served = serve(Bugs {
        unspecified_existence: true,
        ..Default::default()
    });
    let report = served.run().await;
    // The batch asks the same of the missing node.
    common::assert_failed(
        &report,
        &[
            "instances/exists-missing-node",
            "instances/batch-per-query-errors",
        ],
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_idempotent_delete_fails() {
    let served = serve(Bugs {
        delete_not_found: true,
        ..Default::default()
    });
    let report = served.run().await;
    common::assert_failed(
        &report,
        &[
            "loadbalancer/delete-idempotent",
            "loadbalancer/delete-never-created",
            // The suite's own final delete of the Service it saw fail.
            "cleanup",
        ],
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_error_code_for_missing_instance_fails() {
    let served = serve(Bugs {
        metadata_internal: true,
        ..Default::default()
    });
    let report = served.run().await;
    common::assert_failed(
        &report,
        &[
            "instances/metadata-missing-node",
            "instances/batch-per-query-errors",
        ],
    );
    let Some(ccm_provider_conformance::Outcome::Failed(why)) =
        report.get("instances/metadata-missing-node")
    else {
        panic!("not failed");
    };
    assert!(
        why.contains("expected code NotFound") && why.contains("Internal"),
        "{why}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepting_missing_required_fields_fails() {
    let served = serve(Bugs {
        no_validation: true,
        ..Default::default()
    });
    let report = served.run().await;
    common::assert_failed(
        &report,
        &[
            "instances/foreign-provider-id-refused",
            "instances/batch-per-query-errors",
            "validation/instance-exists-without-node",
            "validation/instance-exists-empty-node-name",
            "validation/instance-metadata-without-node",
            "validation/ensure-lb-without-service",
            "validation/ensure-lb-empty-cluster-name",
            "validation/ensure-lb-unspecified-protocol",
            "validation/ensure-lb-unknown-protocol",
            "validation/ensure-lb-unspecified-traffic-policy",
            "validation/ensure-lb-invalid-source-range",
            "validation/ensure-lb-oversize-annotations",
            "fencing/malformed-token-refused",
        ],
    );
    // The suite deleted what the provider wrongly created, by uid.
    assert_eq!(
        report.get("cleanup"),
        Some(&ccm_provider_conformance::Outcome::Passed)
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_outlives_a_cancelled_call_fails() {
    let served = serve(Bugs {
        ignores_cancellation: true,
        ..Default::default()
    });
    let report = served.run().await;
    common::assert_failed(&report, &["fencing/cancelled-ensure-never-lands"]);
    served.stop().await;
}

/// A provider written from the proto and docs of contract 1.0.0: it never
/// reads the fencing metadata (1.0.0 had none) and answers Master of an
/// unknown cluster INVALID_ARGUMENT (1.0.0 named no code). Declaring 1.0.0
/// it conforms: the two rules added in 1.1.0 are reported as not required,
/// not failed.
const RULES_OF_1_1_0: [&str; 2] = [
    "fencing/malformed-token-refused",
    "clusters/master-unknown-not-found",
];

fn written_for_1_0_0() -> Bugs {
    Bugs {
        ignores_fencing_token: true,
        master_unknown_invalid: true,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_declaring_1_0_0_is_graded_by_the_rules_of_1_0_0() {
    let served = serve_declaring(written_for_1_0_0(), Some("1.0.0"));
    let report = served.run().await;
    common::assert_failed(&report, &[]);
    for name in RULES_OF_1_1_0 {
        let Some(ccm_provider_conformance::Outcome::Skipped(why)) = report.get(name) else {
            panic!(
                "{name}: expected reported as not required, got {:?}",
                report.get(name)
            );
        };
        assert!(
            why.starts_with("not required at 1.0.0 (a rule of 1.1.0)"),
            "{name}: {why}"
        );
    }
    // Cases of 1.0.0 rules still run, and a 1.1.0 rule the provider
    // happens to follow passes.
    assert_eq!(
        report.get("clusters/master-valid"),
        Some(&ccm_provider_conformance::Outcome::Passed)
    );
    assert_eq!(
        report.get("fencing/cancelled-ensure-never-lands"),
        Some(&ccm_provider_conformance::Outcome::Passed)
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_provider_declaring_1_1_0_fails_the_rules_of_1_1_0() {
    let served = serve_declaring(written_for_1_0_0(), Some("1.1.0"));
    let report = served.run().await;
    common::assert_failed(&report, &RULES_OF_1_1_0);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_contract_version_is_graded_by_every_rule() {
    let served = serve_declaring(written_for_1_0_0(), Some("one"));
    let report = served.run().await;
    let mut want = RULES_OF_1_1_0.to_vec();
    want.push("identity/provider-info-valid");
    common::assert_failed(&report, &want);
    served.stop().await;
}

/// Contract 1.2.0's rules hold a provider declaring 1.2.0; one declaring
/// 1.1.0 (which never sends the fields) has them reported as not required.
const RULES_OF_1_2_0: [&str; 3] = [
    "identity/provider-id-schemes-valid",
    "instances/every-owned-scheme-judged",
    "instances/metadata-warnings-well-formed",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_of_1_2_0_hold_a_provider_declaring_1_2_0_only() {
    let bugs = Bugs {
        malformed_1_2_0_fields: true,
        ..Default::default()
    };
    let served = serve_declaring(bugs, Some("1.2.0"));
    let mut config = served.config();
    config.focus = vec!["identity/".into(), "instances/".into()];
    let report = ccm_provider_conformance::run(config.clone()).await;
    common::assert_failed(&report, &RULES_OF_1_2_0);
    served.stop().await;

    let served = serve_declaring(bugs, Some("1.1.0"));
    config.endpoint = served.endpoint.clone();
    let report = ccm_provider_conformance::run(config).await;
    common::assert_failed(&report, &[]);
    for name in RULES_OF_1_2_0 {
        let Some(ccm_provider_conformance::Outcome::Skipped(why)) = report.get(name) else {
            panic!("{name}: expected not required, got {:?}", report.get(name));
        };
        assert!(
            why.starts_with("not required at 1.1.0 (a rule of 1.2.0)"),
            "{name}: {why}"
        );
    }
    served.stop().await;
}

/// Contract 1.3.0's rule holds a provider declaring 1.3.0; one declaring
/// 1.2.0 (which never sends the fields) has it reported as not required.
const RULE_OF_1_3_0: &str = "identity/ownership-well-formed-and-stable";

/// The identity cases' report on a provider with `bugs` declaring
/// `version`.
async fn identity_cases(bugs: Bugs, version: &'static str) -> ccm_provider_conformance::Report {
    let served = serve_declaring(bugs, Some(version));
    let mut config = served.config();
    config.focus = vec!["identity/".into()];
    let report = ccm_provider_conformance::run(config).await;
    served.stop().await;
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rule_of_1_3_0_holds_a_provider_declaring_1_3_0_only() {
    let bugs = Bugs {
        malformed_1_3_0_fields: true,
        ..Default::default()
    };
    let report = identity_cases(bugs, "1.3.0").await;
    common::assert_failed(&report, &[RULE_OF_1_3_0]);
    let why = common::failure(&report, RULE_OF_1_3_0);
    assert!(
        why.starts_with(
            "GetProviderInfo.load_balancer_classes[1]: \"raw\" is not a loadBalancerClass"
        ),
        "{why}"
    );

    let report = identity_cases(bugs, "1.2.0").await;
    common::assert_failed(&report, &[]);
    let Some(ccm_provider_conformance::Outcome::Skipped(why)) = report.get(RULE_OF_1_3_0) else {
        panic!("expected not required, got {:?}", report.get(RULE_OF_1_3_0));
    };
    assert!(
        why.starts_with("not required at 1.2.0 (a rule of 1.3.0)"),
        "{why}"
    );
}

/// An unclassed_services value contract 1.3.0 does not define fails a
/// provider declaring 1.3.0 (it has no such value to send), not one
/// declaring a newer contract, which may define it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_unclassed_services_fails_only_a_provider_of_this_contract() {
    let bugs = Bugs {
        unknown_unclassed_services: true,
        ..Default::default()
    };
    let report = identity_cases(bugs, "1.3.0").await;
    common::assert_failed(&report, &[RULE_OF_1_3_0]);
    let why = common::failure(&report, RULE_OF_1_3_0);
    assert!(
        why.starts_with("GetProviderInfo.unclassed_services: unknown enum value 3"),
        "{why}"
    );

    let report = identity_cases(bugs, "1.5.0").await;
    common::assert_failed(&report, &[]);
    assert_eq!(
        report.get(RULE_OF_1_3_0),
        Some(&ccm_provider_conformance::Outcome::Passed)
    );
}

/// The batch cases' report on a provider with `bugs` declaring `version`.
async fn batch_cases(
    bugs: Bugs,
    version: Option<&'static str>,
) -> ccm_provider_conformance::Report {
    let served = serve_declaring(bugs, version);
    let mut config = served.config();
    config.focus = vec!["instances/batch-".into()];
    let report = ccm_provider_conformance::run(config).await;
    for r in &report.results {
        eprintln!("{r}");
    }
    served.stop().await;
    report
}

const BATCH_CASES: [&str; 4] = [
    "instances/batch-per-query-errors",
    "instances/batch-order-independent",
    "instances/batch-limits",
    "instances/batch-equivalent-to-single-calls",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_cases_pass_a_correct_batch() {
    let report = batch_cases(Bugs::default(), None).await;
    common::assert_failed(&report, &[]);
    for name in BATCH_CASES {
        assert_eq!(
            report.get(name),
            Some(&ccm_provider_conformance::Outcome::Passed),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_failing_whole_for_one_unknown_instance_fails() {
    let bugs = Bugs {
        batch_fails_whole: true,
        ..Default::default()
    };
    let report = batch_cases(bugs, None).await;
    common::assert_failed(
        &report,
        &[
            "instances/batch-per-query-errors",
            "instances/batch-order-independent",
            "instances/batch-equivalent-to-single-calls",
        ],
    );
    let why = common::failure(&report, "instances/batch-per-query-errors");
    assert!(why.contains("expected OK, got code NotFound"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_answers_depend_on_the_order_fails() {
    let bugs = Bugs {
        batch_sorted_zip: true,
        ..Default::default()
    };
    let report = batch_cases(bugs, None).await;
    let why = common::failure(&report, "instances/batch-order-independent");
    assert!(why.contains("in the order first asked"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_without_limits_fails() {
    let bugs = Bugs {
        batch_no_limits: true,
        ..Default::default()
    };
    let report = batch_cases(bugs, None).await;
    common::assert_failed(&report, &["instances/batch-limits"]);
    let why = common::failure(&report, "instances/batch-limits");
    assert!(
        why.starts_with("BatchInstances(no queries): expected code InvalidArgument, got OK"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answering_otherwise_than_the_single_calls_fails() {
    let bugs = Bugs {
        batch_stale_metadata: true,
        ..Default::default()
    };
    let report = batch_cases(bugs, None).await;
    common::assert_failed(&report, &["instances/batch-equivalent-to-single-calls"]);
    let why = common::failure(&report, "instances/batch-equivalent-to-single-calls");
    assert!(
        why.contains("\"known-INSTANCE_QUESTION_METADATA\""),
        "{why}"
    );
}

/// A provider declaring 1.3.0 (which had no batch) is not held to the
/// batch's rules: its failures are reported as not required.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_rules_hold_a_provider_declaring_1_4_0_only() {
    let bugs = Bugs {
        batch_fails_whole: true,
        batch_no_limits: true,
        ..Default::default()
    };
    let report = batch_cases(bugs, Some("1.3.0")).await;
    common::assert_failed(&report, &[]);
    for name in ["instances/batch-per-query-errors", "instances/batch-limits"] {
        let Some(ccm_provider_conformance::Outcome::Skipped(why)) = report.get(name) else {
            panic!("{name}: expected not required, got {:?}", report.get(name));
        };
        assert!(
            why.starts_with("not required at 1.3.0 (a rule of 1.4.0)"),
            "{name}: {why}"
        );
    }
}
