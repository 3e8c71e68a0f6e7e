//! The two-provider setup of docs/hybrid.md that the hybrid e2e test, the
//! chaos scenario `two-providers-kill` and the `hybrid_isolation` benchmark
//! share: "onprem", the local provider (owns `local://`, the default
//! provider, also serves [`ONPREM_CLASS`]), and "cloud", the fake provider
//! (owns `fake://`, serves [`CLOUD_CLASS`], declines Services without a
//! class; platform `cloud` by the controller's flag). Each of them runs the
//! processes its own way (in a test, as chaos processes on state files,
//! release builds); what they must agree on is here: the names and flags,
//! the machines' files, the Nodes and Services as kubelets and users create
//! them, and the recording pass-through on each provider's socket.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;

use crate::recorder::{Recorded, Recorder, socket_of};
use crate::steady::Window;
use crate::{kubelet_node, lb_service};

pub const CLOUD_CLASS: &str = "example.com/cloud";
pub const ONPREM_CLASS: &str = "example.com/onprem";
/// KEP-5778's label (or annotation) naming a Node's platform.
pub const PLATFORM_KEY: &str = "cloudprovider.kubernetes.io/platform";
/// The default provider keeps upstream's finalizer; every other provider
/// has its own.
pub const ONPREM_FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
pub const CLOUD_FINALIZER: &str = "cloud.provider.ccm-rs.io/load-balancer-cleanup";
/// The port of the Services [`service`] makes: unprivileged, so the local
/// provider's listeners need no root.
pub const PORT: i32 = 8080;

/// Which provider a Node or Service belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    Onprem,
    Cloud,
}

impl Side {
    pub const BOTH: [Side; 2] = [Side::Onprem, Side::Cloud];

    /// Its `--provider` name.
    pub fn name(self) -> &'static str {
        match self {
            Side::Onprem => "onprem",
            Side::Cloud => "cloud",
        }
    }

    pub fn other(self) -> Side {
        match self {
            Side::Onprem => Side::Cloud,
            Side::Cloud => Side::Onprem,
        }
    }

    /// The providerID scheme it owns.
    pub fn scheme(self) -> &'static str {
        match self {
            Side::Onprem => "local://",
            Side::Cloud => "fake://",
        }
    }

    pub fn finalizer(self) -> &'static str {
        match self {
            Side::Onprem => ONPREM_FINALIZER,
            Side::Cloud => CLOUD_FINALIZER,
        }
    }

    /// The class it serves (onprem also serves Services without one).
    pub fn class(self) -> &'static str {
        match self {
            Side::Onprem => ONPREM_CLASS,
            Side::Cloud => CLOUD_CLASS,
        }
    }

    /// Its provider process's flags for the classes it serves (besides
    /// its endpoint and its machines).
    pub fn provider_flags(self) -> Vec<String> {
        let mut flags = vec![format!("--load-balancer-class={}", self.class())];
        if self == Side::Cloud {
            flags.push("--unclassed-services=declined".to_owned());
        }
        flags
    }
}

/// The controller's flags for the two providers on these endpoints.
pub fn controller_flags(onprem: &str, cloud: &str) -> Vec<String> {
    vec![
        format!("--provider=onprem={onprem}"),
        format!("--provider=cloud={cloud}"),
        "--default-provider=onprem".to_owned(),
        "--cloud-provider-platforms=cloud=cloud".to_owned(),
    ]
}

/// The local provider's inventory of `names`, machine `i`'s InternalIP
/// `<net>.<i + 1>` (`net` the first three octets of a loopback /24).
pub fn inventory(names: &[String], net: &str) -> String {
    assert!(names.len() <= 100, "addresses for 100 machines per side");
    let mut out = String::from("instances:\n");
    for (i, node) in names.iter().enumerate() {
        out.push_str(&format!(
            "  - node: {node}\n    zone: local-a\n    region: local\n    addresses:\n      - {{type: InternalIP, address: {net}.{}}}\n",
            i + 1
        ));
    }
    out
}

/// The fake's `--instances-file` for `names`, machine `i`'s InternalIP
/// `<net>.<i + 101>`.
pub fn fake_instances(names: &[String], net: &str) -> String {
    assert!(names.len() <= 100, "addresses for 100 machines per side");
    let specs: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, node)| {
            json!({"name": node, "addresses": [
                {"type": "InternalIP", "address": format!("{net}.{}", 101 + i)},
                {"type": "Hostname", "address": node},
            ]})
        })
        .collect();
    json!(specs).to_string()
}

/// A cloud Node as its kubelet (`--cloud-provider=external`) registers it:
/// with the platform label, or with its `fake://` providerID already set
/// (`--provider-id`). An onprem one is a plain [`kubelet_node`].
pub fn cloud_node(name: &str, with_provider_id: bool) -> Node {
    let mut node = kubelet_node(name);
    if with_provider_id {
        node.spec.as_mut().unwrap().provider_id = Some(format!("fake://{name}"));
    } else {
        node.metadata
            .labels
            .get_or_insert_default()
            .insert(PLATFORM_KEY.into(), "cloud".into());
    }
    node
}

/// A LoadBalancer Service of `class` (none: the default provider's).
pub fn service(name: &str, class: Option<&str>) -> Service {
    let mut svc = lb_service(name, PORT);
    svc.spec.as_mut().unwrap().load_balancer_class = class.map(str::to_owned);
    svc
}

/// A recording pass-through in front of each provider: the controller
/// dials these, so what each provider was asked is counted, not inferred.
pub struct Recorders {
    onprem: Recorder,
    cloud: Recorder,
}

impl Recorders {
    /// Listens on `sockets/<side>-recorded.sock` in front of the providers
    /// serving on `onprem` and `cloud` (`unix://` endpoints).
    pub fn start(sockets: &Path, onprem: &str, cloud: &str) -> std::io::Result<Recorders> {
        let start = |side: Side, upstream: &str| {
            Recorder::start(
                &sockets.join(format!("{}-recorded.sock", side.name())),
                &socket_of(upstream),
            )
        };
        Ok(Recorders {
            onprem: start(Side::Onprem, onprem)?,
            cloud: start(Side::Cloud, cloud)?,
        })
    }

    /// The controller's flags for the two providers, through the recorders.
    pub fn controller_flags(&self) -> Vec<String> {
        controller_flags(&self.onprem.endpoint, &self.cloud.endpoint)
    }

    /// Every call `side` was sent so far, oldest first.
    pub fn calls(&self, side: Side) -> Vec<Recorded> {
        match side {
            Side::Onprem => self.onprem.calls(),
            Side::Cloud => self.cloud.calls(),
        }
    }

    /// When the latest mutation either provider was sent arrived.
    pub fn last_mutation(&self) -> Option<SystemTime> {
        Side::BOTH
            .iter()
            .flat_map(|s| self.calls(*s))
            .filter(Recorded::mutates)
            .map(|c| c.at)
            .max()
    }

    /// The mutations either provider was sent in `window`, as
    /// `<side>: <method> (<request id>)`.
    pub fn mutations(&self, window: &Window) -> Vec<String> {
        Side::BOTH
            .iter()
            .flat_map(|side| {
                self.calls(*side)
                    .into_iter()
                    .filter(|c| c.mutates() && window.contains(c.at))
                    .map(|c| format!("{}: {} ({})", side.name(), c.method, c.request_id))
            })
            .collect()
    }

    /// The calls either provider was sent about a Node that `owners` does
    /// not give it (another's, or nobody's), as `<side> asked <method>
    /// about <node>`.
    pub fn calls_about_foreign_nodes(&self, owners: &BTreeMap<String, Side>) -> Vec<String> {
        Side::BOTH
            .iter()
            .flat_map(|side| {
                self.calls(*side).into_iter().filter_map(|c| {
                    let node = c.node()?;
                    (owners.get(node) != Some(side))
                        .then(|| format!("{} asked {} about {node}", side.name(), c.method))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{RawIdentity, RawServer};
    use std::time::Duration;

    use ccm_proto::v1::EnsureLoadBalancerDeletedRequest;
    use ccm_proto::v1::load_balancer_service_client::LoadBalancerServiceClient;

    use crate::recorder::tests::{channel, client, info, with_id};

    #[tokio::test]
    async fn recorders_find_calls_about_another_providers_nodes() {
        let raw = || {
            RawServer::start(
                tonic::transport::Server::builder()
                    .add_service(RawIdentity::new("raw", &[]).server()),
            )
        };
        let (onprem, cloud) = (raw(), raw());
        let dir = tempfile::tempdir().unwrap();
        let sent = Recorders::start(dir.path(), &onprem.endpoint, &cloud.endpoint).unwrap();
        let flags = sent.controller_flags();
        let endpoint = |side: &str| {
            let prefix = format!("--provider={side}=");
            flags
                .iter()
                .find_map(|f| f.strip_prefix(&prefix))
                .unwrap()
                .to_owned()
        };
        for (side, id) in [
            ("onprem", "node/on-1"),
            ("onprem", "node/cl-1"),
            ("cloud", "node/cl-1"),
            ("cloud", "node/stray"),
            ("cloud", "service/ns/web#1a2b3c4d"),
        ] {
            client(&endpoint(side))
                .await
                .get_provider_info(info(id))
                .await
                .unwrap();
        }
        assert_eq!(sent.calls(Side::Onprem).len(), 2);
        assert_eq!(sent.calls(Side::Cloud).len(), 3);
        let owners = BTreeMap::from([
            ("on-1".to_owned(), Side::Onprem),
            ("cl-1".to_owned(), Side::Cloud),
        ]);
        assert_eq!(
            sent.calls_about_foreign_nodes(&owners),
            [
                "onprem asked GetProviderInfo about cl-1",
                "cloud asked GetProviderInfo about stray"
            ]
        );
        // No mutation yet; then one, refused (the raw provider serves no
        // load balancers) but sent, which is what counts.
        assert_eq!(sent.last_mutation(), None);
        let before = SystemTime::now();
        let refused = LoadBalancerServiceClient::new(channel(&endpoint("cloud")))
            .ensure_load_balancer_deleted(with_id(
                EnsureLoadBalancerDeletedRequest::default(),
                "service/ns/web#1a2b3c4d",
            ))
            .await;
        assert!(refused.is_err(), "{refused:?}");
        let after = SystemTime::now();
        let at = sent.last_mutation().expect("the mutation's arrival");
        assert!(before <= at && at <= after, "{at:?}");
        let window = |from, to| Window { from, to };
        assert_eq!(
            sent.mutations(&window(before, after + Duration::from_millis(1))),
            ["cloud: EnsureLoadBalancerDeleted (service/ns/web#1a2b3c4d)"]
        );
        assert!(
            sent.mutations(&window(SystemTime::UNIX_EPOCH, before))
                .is_empty()
        );
    }
}
