//! The SDK traits, implemented by routing every call through
//! [`FakeCloud::call`] (faults + call log) into the synchronous state.

use std::collections::BTreeMap;

use ccm_provider_sdk::NodeSet;
use ccm_provider_sdk::proto::{
    AnnotationDescription, AnnotationSchema, InstanceMetadata, LoadBalancerStatus, NodeRef, Route,
    Service, Volume, Warning, Zone,
};
use ccm_provider_sdk::{
    BatchAnswers, CallContext, Clusters, Existence, Identity, InstanceAnswer, InstanceQuery,
    InstanceQuestion, Instances, LbAnswer, LoadBalancerEntry, LoadBalancers, MetadataAnswer,
    ProviderError, ProviderInfo, ProviderResult, Readiness, Routes, ShutdownState, Volumes, Zones,
    cluster_scoped_load_balancer_name,
};

use crate::state::{
    ANNOTATION_HEALTH_CHECK_PATH, ANNOTATION_IMPLEMENTED_ELSEWHERE, ANNOTATION_INTERNAL,
    ANNOTATION_PREFIX, KNOWN_ANNOTATIONS, PROVIDER_ID_SCHEME,
};
use crate::{FakeCloud, FakeConfig, Method};

/// The fake's identity under `config`.
pub(crate) fn info(config: FakeConfig) -> ProviderInfo {
    ProviderInfo {
        name: "fake".to_owned(),
        vendor_version: env!("CARGO_PKG_VERSION").to_owned(),
        provider_id_scheme: PROVIDER_ID_SCHEME.to_owned(),
        has_cluster_id: Some(true),
        manifest: BTreeMap::from([
            ("region".to_owned(), config.region),
            ("zone".to_owned(), config.zone),
            ("lb_ip_pool".to_owned(), config.lb_ip_pool),
        ]),
        load_balancer_classes: config.load_balancer_classes,
        serves_unclassed: config.serves_unclassed,
        platforms: config.platforms,
        ..Default::default()
    }
}

impl Identity for FakeCloud {
    fn info(&self) -> ProviderInfo {
        info(self.config())
    }

    fn annotation_schema(&self) -> AnnotationSchema {
        let described =
            |key: &str, description: &str, value_type: &str, default: &str, example: &str| {
                AnnotationDescription {
                    key: key.to_owned(),
                    description: description.to_owned(),
                    value_type: value_type.to_owned(),
                    default_value: default.to_owned(),
                    example: example.to_owned(),
                }
            };
        AnnotationSchema {
            prefixes: vec![ANNOTATION_PREFIX.to_owned()],
            known_keys: KNOWN_ANNOTATIONS.iter().map(|k| (*k).to_owned()).collect(),
            descriptions: vec![
                described(
                    ANNOTATION_INTERNAL,
                    "Whether the load balancer is internal; the fake records it on the load balancer. Anything but \"true\" or \"false\" is refused as INVALID_ANNOTATION.",
                    "boolean",
                    "false",
                    "true",
                ),
                described(
                    ANNOTATION_IMPLEMENTED_ELSEWHERE,
                    "\"true\": the fake answers every load balancer call for the Service with \"implemented elsewhere\" (another controller owns it), as a load balancer class can make a real provider do.",
                    "boolean",
                    "false",
                    "true",
                ),
                described(
                    ANNOTATION_HEALTH_CHECK_PATH,
                    "The HTTP path the load balancer's health check asks, with externalTrafficPolicy: Local; with Cluster it is ignored with a HealthCheckPathIgnored warning. Must start with \"/\".",
                    "string",
                    "none",
                    "/healthz",
                ),
            ],
        }
    }

    async fn probe(&self, ctx: CallContext) -> ProviderResult<Readiness> {
        self.call(Method::Probe, &ctx, |s| Ok(s.readiness.clone()))
            .await
    }
}

impl Instances for FakeCloud {
    async fn instance_exists(&self, ctx: CallContext, node: NodeRef) -> ProviderResult<Existence> {
        self.call(Method::InstanceExists, &ctx, |s| {
            Ok(if s.instance_exists(&node) {
                Existence::Exists
            } else {
                Existence::NotExists
            })
        })
        .await
    }

    async fn instance_shutdown(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<ShutdownState> {
        self.call(Method::InstanceShutdown, &ctx, |s| {
            Ok(if s.instance_shutdown(&node)? {
                ShutdownState::ShutDown
            } else {
                ShutdownState::Running
            })
        })
        .await
    }

    async fn instance_metadata(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        self.call(Method::InstanceMetadata, &ctx, |s| {
            s.instance_metadata(&node)
        })
        .await
    }

    /// One cloud call for the whole batch (as a describe call of many ids
    /// is): one entry in the call log, one token of the quota. An error
    /// injected on a single method fails that method's queries.
    async fn batch_instances(
        &self,
        ctx: CallContext,
        queries: Vec<InstanceQuery>,
    ) -> ProviderResult<BatchAnswers> {
        if !self.native_batch() {
            return ccm_provider_sdk::provider::fan_out(self, ctx, queries).await;
        }
        let injected = self.injected_per_query(queries.iter().map(|q| single_method(q.question)));
        self.call(Method::BatchInstances, &ctx, |s| {
            Ok(queries
                .into_iter()
                .zip(injected)
                .map(|(q, injected)| {
                    let answer = match (injected, q.question) {
                        (Some(e), _) => Err(e),
                        (None, InstanceQuestion::Existence) => {
                            Ok(InstanceAnswer::Existence(if s.instance_exists(&q.node) {
                                Existence::Exists
                            } else {
                                Existence::NotExists
                            }))
                        }
                        (None, InstanceQuestion::Shutdown) => {
                            s.instance_shutdown(&q.node).map(|down| {
                                InstanceAnswer::Shutdown(if down {
                                    ShutdownState::ShutDown
                                } else {
                                    ShutdownState::Running
                                })
                            })
                        }
                        (None, InstanceQuestion::Metadata) => {
                            s.instance_metadata(&q.node).map(|metadata| {
                                InstanceAnswer::Metadata(MetadataAnswer {
                                    metadata,
                                    warnings: Vec::new(),
                                })
                            })
                        }
                    };
                    (q.key, answer)
                })
                .collect())
        })
        .await
    }
}

/// The single call that asks what `question` asks.
fn single_method(question: InstanceQuestion) -> Method {
    match question {
        InstanceQuestion::Existence => Method::InstanceExists,
        InstanceQuestion::Shutdown => Method::InstanceShutdown,
        InstanceQuestion::Metadata => Method::InstanceMetadata,
    }
}

impl LoadBalancers for FakeCloud {
    async fn get_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
    ) -> ProviderResult<Option<LoadBalancerStatus>> {
        self.call(Method::GetLoadBalancer, &ctx, |s| {
            Ok(s.get_lb(&cluster_name, &service))
        })
        .await
    }

    async fn get_load_balancer_name(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
    ) -> ProviderResult<String> {
        self.call(Method::GetLoadBalancerName, &ctx, |_| {
            Ok(cluster_scoped_load_balancer_name(
                &cluster_name,
                &service.uid,
            ))
        })
        .await
    }

    async fn ensure_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
        nodes: NodeSet,
    ) -> ProviderResult<LbAnswer<LoadBalancerStatus>> {
        let mut answer = self
            .mutation(Method::EnsureLoadBalancer, &ctx, &cluster_name, |s| {
                s.ensure_lb(&cluster_name, &service, &nodes)
            })
            .await?;
        let corrupt = crate::lock(&self.shared.faults).corrupt_ingress.clone();
        if let (Some(bad), ccm_provider_sdk::LbOutcome::Done(status)) =
            (corrupt, &mut answer.outcome)
        {
            status.ingress = bad;
        }
        Ok(answer)
    }

    async fn update_load_balancer(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
        nodes: NodeSet,
    ) -> ProviderResult<LbAnswer<()>> {
        self.mutation(Method::UpdateLoadBalancer, &ctx, &cluster_name, |s| {
            s.update_lb(&cluster_name, &service, &nodes)
        })
        .await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        ctx: CallContext,
        cluster_name: String,
        service: Service,
    ) -> ProviderResult<Vec<Warning>> {
        self.mutation(
            Method::EnsureLoadBalancerDeleted,
            &ctx,
            &cluster_name,
            |s| {
                s.delete_lb(&cluster_name, &service);
                Ok(Vec::new())
            },
        )
        .await
    }

    async fn list_load_balancers(
        &self,
        ctx: CallContext,
        cluster_name: String,
    ) -> ProviderResult<Vec<LoadBalancerEntry>> {
        self.call(Method::ListLoadBalancers, &ctx, |s| {
            Ok(s.list_lbs(&cluster_name))
        })
        .await
    }

    fn supports_listing(&self) -> bool {
        true
    }
}

impl Routes for FakeCloud {
    async fn list_routes(
        &self,
        ctx: CallContext,
        cluster_name: String,
    ) -> ProviderResult<Vec<Route>> {
        self.call(Method::ListRoutes, &ctx, |s| {
            Ok(s.list_routes(&cluster_name))
        })
        .await
    }

    async fn create_route(
        &self,
        ctx: CallContext,
        cluster_name: String,
        name_hint: String,
        route: Route,
    ) -> ProviderResult<Route> {
        self.mutation(Method::CreateRoute, &ctx, &cluster_name, |s| {
            s.create_route(&cluster_name, &name_hint, &route)
        })
        .await
    }

    async fn delete_route(
        &self,
        ctx: CallContext,
        cluster_name: String,
        route: Route,
    ) -> ProviderResult<()> {
        self.mutation(Method::DeleteRoute, &ctx, &cluster_name, |s| {
            s.delete_route(&cluster_name, &route);
            Ok(())
        })
        .await
    }
}

impl Zones for FakeCloud {
    async fn zone_by_provider_id(
        &self,
        ctx: CallContext,
        provider_id: String,
    ) -> ProviderResult<Zone> {
        // Only an id is known: the node name defaults to it if the instance
        // has to be auto-created.
        let name = provider_id
            .split_once("://")
            .map_or(provider_id.as_str(), |(_, id)| id)
            .to_owned();
        let node = NodeRef {
            name,
            provider_id,
            ..Default::default()
        };
        self.call(Method::GetZoneByProviderId, &ctx, |s| s.zone_of(&node))
            .await
    }

    async fn zone_by_node_name(&self, ctx: CallContext, node_name: String) -> ProviderResult<Zone> {
        let node = NodeRef {
            name: node_name,
            ..Default::default()
        };
        self.call(Method::GetZoneByNodeName, &ctx, |s| s.zone_of(&node))
            .await
    }
}

impl Clusters for FakeCloud {
    async fn list_clusters(&self, ctx: CallContext) -> ProviderResult<Vec<String>> {
        self.call(Method::ListClusters, &ctx, |s| {
            Ok(s.config.cluster_names.clone())
        })
        .await
    }

    /// The fake's "control plane" is always local; clusters it does not
    /// list have none.
    async fn master(&self, ctx: CallContext, cluster_name: String) -> ProviderResult<String> {
        self.call(Method::Master, &ctx, |s| {
            if s.config.cluster_names.contains(&cluster_name) {
                Ok("127.0.0.1".to_owned())
            } else {
                Err(ProviderError::not_found(format!(
                    "the fake cloud has no cluster {cluster_name:?}"
                )))
            }
        })
        .await
    }
}

impl Volumes for FakeCloud {
    async fn get_volume_labels(
        &self,
        ctx: CallContext,
        volume: Volume,
    ) -> ProviderResult<BTreeMap<String, String>> {
        self.call(Method::GetVolumeLabels, &ctx, |s| {
            Ok(s.volume_labels(&volume))
        })
        .await
    }
}
