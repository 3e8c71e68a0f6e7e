//! [`ControlPlane`]: the one way the tests reach the shared apiserver, and
//! the lock it holds; an exclusive hold's clean-up.

use std::collections::BTreeSet;

use ccm_testsupport::TestEnv;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Held exclusively by tests that run a controller (it acts on every Node,
/// Service and PersistentVolume it sees) or create those kinds of objects,
/// shared by the others.
static LOCK: RwLock<()> = RwLock::const_new(());

/// A test's hold on the process's control plane: the only way the tests
/// reach it, so none can forget the lock. An exclusive hold deletes, when
/// dropped, the Nodes, Services and PersistentVolumes created while it was
/// held, which under the lock only its test can have created (its
/// controller creates none of these kinds), and nothing else.
pub struct ControlPlane {
    env: &'static TestEnv,
    /// Exclusive holds: the objects that existed when the hold began.
    before: Option<Existing>,
    // Dropped after `drop` has run: the lock outlives the clean-up.
    _shared: Option<RwLockReadGuard<'static, ()>>,
    _exclusive: Option<RwLockWriteGuard<'static, ()>>,
}

/// The uids of the kinds an exclusive hold cleans up.
pub(crate) struct Existing {
    nodes: BTreeSet<String>,
    services: BTreeSet<String>,
    volumes: BTreeSet<String>,
}

impl Existing {
    pub(crate) async fn now(admin: &Client) -> Existing {
        Existing {
            nodes: uids(&Api::<Node>::all(admin.clone())).await,
            services: uids(&Api::<Service>::all(admin.clone())).await,
            volumes: uids(&Api::<PersistentVolume>::all(admin.clone())).await,
        }
    }
}

/// How long the clean-up of an exclusive hold may take.
const CLEANUP: std::time::Duration = std::time::Duration::from_secs(30);

impl ControlPlane {
    /// For a test that runs a controller or creates Nodes, Services of type
    /// LoadBalancer or PersistentVolumes: no other test holds the control
    /// plane meanwhile.
    pub async fn exclusive() -> ControlPlane {
        let guard = LOCK.write().await;
        let env = control_plane();
        let admin = env.admin_client().await.unwrap();
        let before = Existing::now(&admin).await;
        ControlPlane {
            env,
            before: Some(before),
            _shared: None,
            _exclusive: Some(guard),
        }
    }

    /// For a test that runs no controller and creates none of the objects
    /// controllers act on: other such tests run alongside.
    pub async fn shared() -> ControlPlane {
        let guard = LOCK.read().await;
        Self::with_shared(guard)
    }

    /// [`ControlPlane::shared`] for a test outside a tokio runtime.
    pub fn shared_blocking() -> ControlPlane {
        let guard = LOCK.blocking_read();
        Self::with_shared(guard)
    }

    fn with_shared(guard: RwLockReadGuard<'static, ()>) -> ControlPlane {
        ControlPlane {
            env: control_plane(),
            before: None,
            _shared: Some(guard),
            _exclusive: None,
        }
    }

    pub fn env(&self) -> &'static TestEnv {
        self.env
    }
}

/// The only call of [`TestEnv::get`] in the tests: everything else goes
/// through a [`ControlPlane`].
#[allow(clippy::disallowed_methods)]
fn control_plane() -> &'static TestEnv {
    TestEnv::get()
}

async fn uids<K>(api: &Api<K>) -> BTreeSet<String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|o| o.meta().uid.clone())
        .collect()
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let Some(before) = self.before.take() else {
            return;
        };
        let env = self.env;
        // Clients are bound to the runtime that made them, and this may run
        // inside the test's (current-thread) runtime or while it unwinds: a
        // thread with a runtime of its own does the deleting.
        let cleaned = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                tokio::time::timeout(CLEANUP, delete_created(env, &before))
                    .await
                    .map_err(|_| format!("not done within {CLEANUP:?}"))?
            })
        })
        .join();
        match cleaned {
            Ok(Ok(())) => {}
            // Never a panic here: it may run while a failed test unwinds.
            Ok(Err(e)) => eprintln!("deleting what the test created: {e}"),
            Err(_) => eprintln!("deleting what the test created: the clean-up panicked"),
        }
    }
}

/// Deletes the Nodes, Services and PersistentVolumes whose uid is not in
/// `before`, finalizers first (no kube-controller-manager runs here to
/// remove the apiserver's pv-protection one, and a stopped controller
/// cannot remove its own).
pub(crate) async fn delete_created(env: &TestEnv, before: &Existing) -> Result<(), String> {
    let admin = env.admin_client().await.map_err(|e| format!("{e:#}"))?;
    delete_new(Api::<Node>::all(admin.clone()), &before.nodes, false).await?;
    for svc in Api::<Service>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
    {
        if svc
            .metadata
            .uid
            .as_ref()
            .is_some_and(|u| !before.services.contains(u))
        {
            let ns = svc.metadata.namespace.clone().unwrap_or_default();
            let api = Api::<Service>::namespaced(admin.clone(), &ns);
            delete_one(&api, &svc, true).await?;
        }
    }
    delete_new(Api::<PersistentVolume>::all(admin), &before.volumes, true).await
}

async fn delete_new<K>(
    api: Api<K>,
    before: &BTreeSet<String>,
    unfinalize: bool,
) -> Result<(), String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    for o in all.items {
        if o.meta().uid.as_ref().is_some_and(|u| !before.contains(u)) {
            delete_one(&api, &o, unfinalize).await?;
        }
    }
    Ok(())
}

/// Deletes `o`, of this uid only (a namesake created since is left alone);
/// gone already is fine.
async fn delete_one<K>(api: &Api<K>, o: &K, unfinalize: bool) -> Result<(), String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let name = o.meta().name.clone().unwrap_or_default();
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
    if unfinalize && o.meta().finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
        let patch = json!({"metadata": {"uid": o.meta().uid, "finalizers": null}});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            && !gone(&e)
        {
            return Err(format!("removing the finalizers of {name}: {e}"));
        }
    }
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: o.meta().uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(format!("deleting {name}: {e}")),
    }
}
