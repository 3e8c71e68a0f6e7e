//! pv-label-controller (opt-in): topology labels for PersistentVolumes
//! provisioned outside CSI, from the provider's VolumesService (upstream's
//! `PVLabeler`, once the PersistentVolumeLabel admission plugin). Labels a
//! PersistentVolume already has are never overwritten.
//!
//! Modern clusters do not need it: a CSI driver reports topology itself
//! (`NodeGetInfo` accessible topology, then the PersistentVolume's
//! `spec.nodeAffinity`), which the scheduler uses directly. It exists for
//! volumes of in-tree plugins and for CSI drivers that report no topology.

use std::collections::HashSet;
use std::sync::Arc;

use ccm_runtime::watch::{self, write_unread};
use ccm_runtime::{Action, Reconcile};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Patch;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;

mod decide;

use crate::context::Context;
use crate::request_id;
pub use decide::{Plan, cloud_volume, labels_to_add, plan, question};

/// Why one PersistentVolume could not be labelled; retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("failed to get labels for volume {volume}: {source}")]
    VolumeLabels {
        volume: String,
        source: ccm_provider_sdk::ClientError,
    },
}

/// The controller's state.
pub struct PvLabel {
    ctx: Arc<Context>,
    /// PersistentVolume uids the provider had nothing (more) for.
    done: Mutex<HashSet<String>>,
}

impl PvLabel {
    pub fn new(ctx: Arc<Context>) -> Self {
        PvLabel {
            ctx,
            done: Mutex::default(),
        }
    }
}

impl Reconcile for PvLabel {
    type Key = ObjectRef<PersistentVolume>;
    type Object = PersistentVolume;
    type Error = Error;

    /// Asks the provider what [`decide::question`] says, then writes what
    /// [`decide::plan`] says.
    async fn reconcile(&self, pv: Arc<PersistentVolume>) -> Result<Action, Error> {
        let uid = pv.uid().unwrap_or_default();
        let done = self.done.lock().contains(&uid);
        let Some(volume) = question(&pv, done) else {
            return Ok(Action::await_change());
        };
        let answer = self
            .ctx
            .provider
            .get_volume_labels(volume)
            .await
            .map_err(|source| Error::VolumeLabels {
                volume: pv.name_any(),
                source,
            })?;
        let plan = plan(&pv, answer);
        if let Some(patch) = plan.patch() {
            let volumes = Api::<PersistentVolume>::all(self.ctx.client.clone());
            write_unread(&volumes, "patch", |r| {
                r.patch(
                    &pv.name_any(),
                    &self.ctx.patch_params(),
                    &Patch::Merge(patch),
                )
            })
            .await?;
            tracing::info!(volume = %pv.name_any(), labels = ?plan.add, "labelled persistent volume");
        }
        self.done.lock().insert(uid);
        Ok(Action::await_change())
    }

    fn request_id(&self, key: &Self::Key, _: Option<&PersistentVolume>) -> Option<String> {
        Some(request_id::volume_named(&key.name))
    }
}

/// Runs the controller until the process stops.
pub async fn run(ctx: Arc<Context>) {
    let api = Api::<PersistentVolume>::all(ctx.client.clone());
    let (store, volumes) = watch::reflected(api, "persistentvolumes", |_| {});
    super::runner(
        &ctx,
        Arc::new(PvLabel::new(ctx.clone())),
        "PersistentVolumes",
    )
    .store(store)
    .changes(volumes)
    .run()
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::node::{LABEL_REGION, LABEL_ZONE};
    use crate::testing::*;
    use ccm_fake_provider::FakeConfig;
    use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};
    use kube::api::ObjectMeta;
    use serde_json::json;

    /// Issue 26: pv-label's queue recorded no `workqueue_adds_total` or
    /// `workqueue_work_duration_seconds` (cloud-node and service-lb did):
    /// every controller's reconciles are counted by the runner.
    #[tokio::test]
    async fn its_reconciles_are_counted_in_the_queue_metrics() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let volume = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "local-1", "uid": "u-1", "resourceVersion": "2"},
            "spec": {"hostPath": {"path": "/data"}},
        });
        let (client, _api) = mock_api(move |call| {
            if call.path.contains("watch=true") {
                // An empty watch: the list is what this test is about.
                (200, json!({}))
            } else {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "PersistentVolumeList",
                           "metadata": {"resourceVersion": "2"}, "items": [volume.clone()]}),
                )
            }
        });
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::manager::metrics::ControllerMetrics::register(&mut registry);
        let ctx = Context::new(
            client,
            crate::providers::ScopedProvider::single(provider.client.clone()),
            crate::k8s::node_store::NodeStore::default(),
            "kubernetes".into(),
            "pv-label-controller",
            metrics,
            ccm_runtime::events::Delivery::Inline,
        );
        let encoded = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text
        };
        let counted = r#"workqueue_adds_total{name="PersistentVolumes"} 1"#;
        let running = tokio::spawn(run(ctx));
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while !encoded().contains(counted) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        running.abort();
        let text = encoded();
        assert!(text.contains(counted), "{text}");
        assert!(
            text.contains(r#"workqueue_work_duration_seconds_count{name="PersistentVolumes"} 1"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn cloud_volumes_get_the_labels_they_lack_once() {
        let provider = fake_provider(FakeConfig::default());
        ready(&provider).await;
        let (client, api) = accepting_api();
        let state = PvLabel::new(context(client, &provider, vec![]));
        let pv = Arc::new(PersistentVolume {
            metadata: ObjectMeta {
                name: Some("data".into()),
                uid: Some("uid-data".into()),
                resource_version: Some("5".into()),
                labels: Some([(LABEL_ZONE.to_owned(), "mine".to_owned())].into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: ccm_fake_provider::state::VOLUME_DRIVERS[0].into(),
                    volume_handle: "vol-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        state.reconcile(pv.clone()).await.unwrap();
        let patch = api.all().pop().expect("a label patch");
        assert_eq!(patch.line(), "PATCH /api/v1/persistentvolumes/data");
        assert_eq!(patch.body["metadata"]["resourceVersion"], "5");
        let labels = patch.body["metadata"]["labels"].as_object().unwrap();
        assert!(labels.contains_key(LABEL_REGION), "{labels:?}");
        assert!(!labels.contains_key(LABEL_ZONE), "never overwritten");

        state.reconcile(pv.clone()).await.unwrap();
        assert_eq!(api.all().len(), 1, "done once per uid");
    }
}
