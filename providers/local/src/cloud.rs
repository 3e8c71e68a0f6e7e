//! The provider as a whole: its configuration, the inventory, and the one
//! lock under which load balancers, routes and fencing tokens change and are
//! saved. Each RPC service lives in its own module ([`crate::instances`],
//! [`crate::load_balancers`], [`crate::routes`]); this is what they share.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use ccm_provider_sdk::proto::AnnotationSchema;
use ccm_provider_sdk::server::IdentityFlags;
use ccm_provider_sdk::{
    CallContext, FencingToken, Identity, ProviderError, ProviderInfo, ProviderResult,
    ProviderServer,
};
use tokio::sync::Mutex;

use crate::inventory::Inventory;
use crate::netlink::KernelRoutes;
use crate::proxy::LoadBalancerProxy;
use crate::state::{LbRecord, LeaderRecord, RouteRecord, Saved, StateFile};
use crate::vip::VipRange;

/// Where VIPs come from unless configured: bindable without privileges.
pub const DEFAULT_VIP_RANGE: &str = "127.200.0.0/24";

/// How the provider is set up (its flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// Where load balancer addresses come from.
    pub vips: VipRange,
    /// `${CLUSTER_ID}`, `${NAMESPACE}`, `${SERVICE_NAME}` and
    /// `${SERVICE_UID}` are replaced.
    pub name_template: String,
    /// Only Nodes with this label (`key` or `key=value`) are backends;
    /// `None` takes every Node the controller sends.
    pub ingress_selector: Option<LabelSelector>,
    /// The kernel routing table routes go to; `None` offers no routes.
    pub route_table: Option<u32>,
    pub state_file: Option<PathBuf>,
    /// What a controller running several providers routes to this one
    /// (contract 1.3.0): classes, unclassed Services, platforms.
    pub identity: IdentityFlags,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            vips: DEFAULT_VIP_RANGE.parse().expect("a valid default range"),
            name_template: crate::load_balancers::DEFAULT_NAME_TEMPLATE.to_owned(),
            ingress_selector: None,
            route_table: None,
            state_file: None,
            identity: IdentityFlags::default(),
        }
    }
}

/// `key` (any value) or `key=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    pub key: String,
    pub value: Option<String>,
}

impl std::str::FromStr for LabelSelector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (key, value) = match s.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (s, None),
        };
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!("{s:?} is not a label selector (key or key=value)"));
        }
        Ok(LabelSelector {
            key: key.to_owned(),
            value,
        })
    }
}

impl LabelSelector {
    pub fn matches(&self, labels: &std::collections::HashMap<String, String>) -> bool {
        match (labels.get(&self.key), &self.value) {
            (Some(v), Some(want)) => v == want,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={v}", self.key),
            None => write!(f, "{}", self.key),
        }
    }
}

/// Why the provider could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("routing table {table}: {source}")]
    Routes {
        table: u32,
        source: crate::netlink::RouteError,
    },
    #[error("invalid identity: {0}")]
    Identity(#[from] ccm_provider_sdk::validate::Violation),
}

/// What changes under the lock.
pub(crate) struct World {
    pub(crate) lbs: BTreeMap<(String, String), LbRecord>,
    /// Running proxies by (cluster, uid). A record without one (its
    /// address could not be bound at start) is started by the next Ensure.
    pub(crate) proxies: BTreeMap<(String, String), LoadBalancerProxy>,
    pub(crate) routes: BTreeMap<(String, String), RouteRecord>,
    leaders: BTreeMap<String, FencingToken>,
}

impl World {
    fn saved(&self) -> Saved {
        Saved {
            load_balancers: self.lbs.values().cloned().collect(),
            routes: self.routes.values().cloned().collect(),
            leaders: self
                .leaders
                .iter()
                .map(|(cluster, t)| LeaderRecord {
                    cluster: cluster.clone(),
                    term: t.term,
                    holder: t.holder.clone(),
                })
                .collect(),
        }
    }

    /// Records the token of a mutation and refuses one from a superseded
    /// leader, so a controller that lost its Lease while frozen cannot undo
    /// what the new leader did.
    pub(crate) fn admit(&mut self, cluster: &str, ctx: &CallContext) -> ProviderResult<()> {
        let Some(token) = &ctx.fencing_token else {
            return Ok(());
        };
        let newest = FencingToken::newest(self.leaders.get(cluster).cloned(), token);
        if token.is_superseded_by(&newest) {
            return Err(ProviderError::not_leader(&newest));
        }
        self.leaders.insert(cluster.to_owned(), newest);
        Ok(())
    }
}

/// The local cloud. Clones share everything.
#[derive(Clone)]
pub struct LocalCloud {
    pub(crate) config: Arc<Config>,
    pub(crate) inventory: Inventory,
    pub(crate) world: Arc<Mutex<World>>,
    store: StateFile,
    pub(crate) kernel: Option<Arc<KernelRoutes>>,
}

impl LocalCloud {
    /// Loads the saved state, puts routes back into the kernel table and
    /// starts a proxy for every saved load balancer (same address as
    /// before). A load balancer whose address cannot be bound is logged and
    /// kept; the next Ensure tries again.
    pub async fn start(config: Config, inventory: Inventory) -> Result<LocalCloud, StartError> {
        info(&config).check()?;
        let store = StateFile::new(config.state_file.clone());
        let saved = store.load()?;
        let kernel = match config.route_table {
            Some(table) => Some(Arc::new(
                KernelRoutes::connect(table)
                    .map_err(|source| StartError::Routes { table, source })?,
            )),
            None => None,
        };
        let mut world = World {
            lbs: BTreeMap::new(),
            proxies: BTreeMap::new(),
            routes: BTreeMap::new(),
            leaders: saved
                .leaders
                .into_iter()
                .map(|l| (l.cluster, FencingToken::new(l.term, l.holder)))
                .collect(),
        };
        for route in saved.routes {
            if let Some(kernel) = &kernel
                && let Err(error) = kernel.replace(&route.destination, route.gateway).await
            {
                tracing::error!(destination = %route.destination, %error, "restoring a route; ListRoutes will leave it out so the controller creates it again");
            }
            world
                .routes
                .insert((route.cluster.clone(), route.destination.clone()), route);
        }
        for lb in saved.load_balancers {
            let key = (lb.cluster.clone(), lb.uid.clone());
            match LoadBalancerProxy::start(
                lb.name.clone(),
                crate::load_balancers::proxy_config(&lb),
            )
            .await
            {
                Ok(proxy) => {
                    tracing::info!(name = %lb.name, vip = %lb.vip, "load balancer restored");
                    world.proxies.insert(key.clone(), proxy);
                }
                Err(error) => {
                    tracing::error!(name = %lb.name, vip = %lb.vip, %error, "restoring a load balancer; the next EnsureLoadBalancer retries");
                }
            }
            world.lbs.insert(key, lb);
        }
        Ok(LocalCloud {
            config: Arc::new(config),
            inventory,
            world: Arc::new(Mutex::new(world)),
            store,
            kernel,
        })
    }

    /// Writes the state; called under the lock after every change.
    pub(crate) fn save(&self, world: &World) -> ProviderResult<()> {
        self.store.save(&world.saved()).map_err(|e| {
            tracing::error!(error = %e, "saving the state");
            ProviderError::internal(format!("saving the provider's state: {}", e.reason))
        })
    }

    /// Every service this provider offers, ready to serve.
    pub fn server(&self) -> ProviderServer<LocalCloud> {
        let server = ProviderServer::new(self.clone())
            .with_instances(self.clone())
            .with_zones(self.clone())
            .with_load_balancers(self.clone());
        if self.kernel.is_some() {
            server.with_routes(self.clone())
        } else {
            server
        }
    }

    /// Stops every proxy (their addresses are free afterwards). The state
    /// file keeps them: a restart serves them again.
    pub async fn shutdown(&self) {
        let mut world = self.world.lock().await;
        let proxies = std::mem::take(&mut world.proxies);
        for (_, proxy) in proxies {
            proxy.shutdown().await;
        }
    }
}

/// The providerID scheme.
pub const SCHEME: &str = "local";
/// The provider's name in `GetProviderInfo`.
pub const NAME: &str = "local";

/// The provider's identity under `config`.
fn info(config: &Config) -> ProviderInfo {
    config.identity.declare(ProviderInfo {
        name: NAME.into(),
        vendor_version: env!("CARGO_PKG_VERSION").into(),
        provider_id_scheme: SCHEME.into(),
        has_cluster_id: Some(true),
        manifest: BTreeMap::from([
            ("vip_range".to_owned(), config.vips.to_string()),
            (
                "route_table".to_owned(),
                config
                    .route_table
                    .map_or_else(|| "none".to_owned(), |t| t.to_string()),
            ),
            (
                "ingress_selector".to_owned(),
                config
                    .ingress_selector
                    .as_ref()
                    .map_or_else(|| "every node".to_owned(), |s| s.to_string()),
            ),
            ("name_template".to_owned(), config.name_template.clone()),
        ]),
        ..Default::default()
    })
}

impl Identity for LocalCloud {
    fn info(&self) -> ProviderInfo {
        info(&self.config)
    }

    fn annotation_schema(&self) -> AnnotationSchema {
        crate::annotations::schema()
    }
}

#[cfg(test)]
mod tests {
    use ccm_provider_sdk::server::UnclassedServicesFlag;

    use super::*;
    use crate::inventory::Machines;

    async fn start(identity: IdentityFlags) -> Result<LocalCloud, StartError> {
        let config = Config {
            identity,
            ..Config::default()
        };
        let machines = Machines::parse("instances: []").unwrap();
        LocalCloud::start(config, Inventory::fixed(machines)).await
    }

    /// The hybrid fixture's "onprem": the default provider, serving
    /// Services without a class, on its own platform.
    #[tokio::test]
    async fn the_identity_flags_are_declared() {
        let cloud = start(IdentityFlags {
            load_balancer_classes: vec!["example.com/onprem".into()],
            unclassed_services: Some(UnclassedServicesFlag::Served),
            platforms: vec!["onprem".into()],
        })
        .await
        .unwrap();
        let info = cloud.info();
        assert_eq!(info.load_balancer_classes, ["example.com/onprem"]);
        assert_eq!(info.serves_unclassed, Some(true));
        assert_eq!(info.platforms, ["onprem"]);
        assert_eq!(info.name, NAME);

        let plain = start(IdentityFlags::default()).await.unwrap().info();
        assert!(plain.load_balancer_classes.is_empty() && plain.platforms.is_empty());
        assert_eq!(plain.serves_unclassed, None);
    }

    #[tokio::test]
    async fn a_malformed_identity_stops_the_provider_at_start() {
        let Err(e) = start(IdentityFlags {
            platforms: vec!["On-Prem".into()],
            ..Default::default()
        })
        .await
        else {
            panic!("started");
        };
        assert!(
            e.to_string().starts_with("invalid identity: platforms[0]:"),
            "{e}"
        );
    }
}
