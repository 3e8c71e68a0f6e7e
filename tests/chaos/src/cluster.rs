//! One cluster: its own apiserver, the controller's ServiceAccount bound to
//! the shipped ClusterRole (and a kubeconfig with its token for the
//! controller process), and the test's admin client.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_testsupport::{UNINITIALIZED, eventually_within, kubelet_node, lb_service};
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::json;

use crate::process::{Apiserver, repo};

/// The finalizer the service-lb-controller puts on Services it ensured.
pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
/// Who the controller acts as in every cluster.
pub const CONTROLLER_USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";

pub struct Cluster {
    /// The controller's `--cluster-name`.
    pub name: String,
    pub apiserver: Apiserver,
    pub admin: Client,
    /// The controller's kubeconfig: the ServiceAccount's token.
    pub kubeconfig: PathBuf,
    /// What the test did to the cluster, timed, for reading next to the
    /// controller's log.
    journal: PathBuf,
}

/// Retries a call that may meet the apiserver restarting, for a bounded
/// time.
async fn retrying<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    eventually_within(
        Duration::from_secs(60),
        Duration::from_millis(200),
        what,
        || {
            let call = call();
            async move { call.await.map_err(|e| e.to_string()) }
        },
    )
    .await
}

impl Cluster {
    /// Starts an apiserver on `data` and sets up the controller's identity;
    /// the kubeconfig goes to `dir`.
    pub async fn start(name: &str, data: PathBuf, dir: &Path) -> Cluster {
        let apiserver = Apiserver::start(data).await;
        let env = apiserver.env();
        let admin = env.admin_client().await.unwrap();
        let sa = "cloud-controller-manager";
        let sa_ns = "kube-system";
        let role: ClusterRole = serde_yaml::from_str(
            &std::fs::read_to_string(repo().join("deploy/base/clusterrole.yaml")).unwrap(),
        )
        .unwrap();
        env.grant_cluster_role(&admin, sa_ns, sa, role.rules.unwrap())
            .await
            .unwrap();
        let token = env
            .service_account_config(sa_ns, sa)
            .await
            .unwrap()
            .auth_info
            .token;
        let mut kc = Kubeconfig::read_from(env.kubeconfig()).unwrap();
        for a in &mut kc.auth_infos {
            a.auth_info = Some(kube::config::AuthInfo {
                token: token.clone(),
                ..Default::default()
            });
        }
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        std::fs::File::create(&kubeconfig)
            .unwrap()
            .write_all(serde_yaml::to_string(&kc).unwrap().as_bytes())
            .unwrap();
        Cluster {
            name: name.to_owned(),
            apiserver,
            admin,
            kubeconfig,
            journal: dir.join(format!("{name}-actions.log")),
        }
    }

    /// Restarts the apiserver on the same data; how long it was away.
    pub async fn restart_apiserver(&mut self) -> Duration {
        self.note("restarting the apiserver");
        let took = self.apiserver.restart().await;
        self.note(&format!("apiserver back after {took:?}"));
        took
    }

    /// Appends a line to the journal.
    pub fn note(&self, what: &str) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.journal)
        {
            let _ = writeln!(f, "{} {what}", crate::process::now());
        }
    }

    pub async fn namespace(&self, name: &str) {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }

    pub fn services(&self, ns: &str) -> Api<Service> {
        Api::namespaced(self.admin.clone(), ns)
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    /// A `type: LoadBalancer` Service; returns its uid.
    pub async fn create_lb_service(&self, ns: &str, name: &str) -> String {
        self.create_service(ns, lb_service(name, 80)).await
    }

    /// Creates `svc` in `ns` (an [`lb_service`], maybe changed); returns
    /// its uid.
    pub async fn create_service(&self, ns: &str, svc: Service) -> String {
        let name = svc.metadata.name.clone().unwrap_or_default();
        let name = name.as_str();
        let api = self.services(ns);
        let created = retrying(&format!("creating {ns}/{name}"), || async {
            match api.create(&PostParams::default(), &svc).await {
                // A retry after a lost answer: it was created.
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(name).await,
                other => other,
            }
        })
        .await;
        let uid = created.metadata.uid.unwrap();
        self.note(&format!("created {ns}/{name} uid {uid}"));
        uid
    }

    /// Deletes a Service (it stays while our finalizer is on it).
    pub async fn delete_service(&self, ns: &str, name: &str) {
        self.note(&format!("deleting {ns}/{name}"));
        let api = self.services(ns);
        retrying(&format!("deleting {ns}/{name}"), || async {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Removes every finalizer of a Service by hand, as an impatient user
    /// does.
    pub async fn remove_finalizers(&self, ns: &str, name: &str) {
        self.note(&format!("removing the finalizers of {ns}/{name}"));
        let api = self.services(ns);
        let patch = json!({ "metadata": { "finalizers": null } });
        retrying(
            &format!("removing the finalizers of {ns}/{name}"),
            || async {
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    Err(e) => Err(e),
                }
            },
        )
        .await
    }

    /// Makes a LoadBalancer Service a ClusterIP one (the apiserver drops
    /// its node ports).
    pub async fn make_cluster_ip(&self, ns: &str, name: &str) {
        self.note(&format!("making {ns}/{name} ClusterIP"));
        let api = self.services(ns);
        let patch = json!({ "spec": { "type": "ClusterIP" } });
        retrying(&format!("making {ns}/{name} ClusterIP"), || async {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        })
        .await
    }

    /// Every Service of the cluster.
    pub async fn all_services(&self) -> Vec<Service> {
        let api = Api::<Service>::all(self.admin.clone());
        let lp = ListParams::default();
        retrying("listing Services", || api.list(&lp)).await.items
    }

    /// Makes a LoadBalancer Service of one class a LoadBalancer Service of
    /// `class` (none: the default provider's), through ClusterIP, back to
    /// back: the class cannot change while the type stays LoadBalancer.
    pub async fn change_class(&self, ns: &str, name: &str, class: Option<&str>) {
        self.note(&format!("moving {ns}/{name} to class {class:?}"));
        let api = self.services(ns);
        for patch in [
            json!({ "spec": { "type": "ClusterIP", "loadBalancerClass": null } }),
            json!({ "spec": { "type": "LoadBalancer", "loadBalancerClass": class } }),
        ] {
            retrying(&format!("moving {ns}/{name}"), || async {
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            })
            .await
        }
    }

    /// Registers a Node as `kubelet --cloud-provider=external` does.
    pub async fn register_node(&self, name: &str) {
        self.register(kubelet_node(name)).await
    }

    /// Registers `node` (a [`kubelet_node`], changed as a kubelet's flags
    /// would: labels, providerID).
    pub async fn register(&self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let name = name.as_str();
        self.note(&format!("registering node {name}"));
        let api = self.nodes();
        retrying(&format!("registering {name}"), || async {
            match api.create(&PostParams::default(), &node).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await
    }

    pub async fn all_nodes(&self) -> Vec<Node> {
        let api = self.nodes();
        let lp = ListParams::default();
        retrying("listing Nodes", || api.list(&lp)).await.items
    }
}

pub fn has_finalizer(svc: &Service) -> bool {
    svc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// What the controller owes a load balancer: `type: LoadBalancer` without a
/// class, not being deleted.
pub fn wants_lb(svc: &Service) -> bool {
    svc.metadata.deletion_timestamp.is_none()
        && svc.spec.as_ref().is_some_and(|s| {
            s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none()
        })
}

pub fn key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

pub fn is_initialised(n: &Node) -> bool {
    let tainted = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == UNINITIALIZED));
    let provider_id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    !tainted && provider_id.is_some_and(|p| !p.is_empty())
}
