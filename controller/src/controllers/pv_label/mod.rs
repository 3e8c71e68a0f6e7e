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

use ccm_provider_sdk::proto::Volume;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Patch;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;

mod decide;

use super::backoff::Backoff;
use super::context::Context;
use super::request_id;
use super::workqueue::{self, Action};
use crate::k8s::node::{LABEL_REGION, LABEL_ZONE};
pub use decide::{cloud_volume, labels_to_add};

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

struct State {
    ctx: Arc<Context>,
    backoff: Backoff,
    /// PersistentVolume uids the provider had nothing (more) for.
    done: Mutex<HashSet<String>>,
}

async fn reconcile(pv: Arc<PersistentVolume>, state: Arc<State>) -> Action {
    let result = request_id::scoped(request_id::volume(&pv), sync(&pv, &state)).await;
    result.unwrap_or_else(|e| error_policy(pv, &e, state))
}

async fn sync(pv: &PersistentVolume, state: &State) -> Result<Action, Error> {
    let uid = pv.uid().unwrap_or_default();
    let labels = pv.labels();
    let has_topology = labels.contains_key(LABEL_ZONE) && labels.contains_key(LABEL_REGION);
    if has_topology || state.done.lock().contains(&uid) {
        return Ok(Action::await_change());
    }
    let Some((driver, volume_id)) = cloud_volume(pv) else {
        return Ok(Action::await_change());
    };
    let answer = state
        .ctx
        .provider
        .get_volume_labels(Volume {
            name: pv.name_any(),
            uid: uid.clone(),
            labels: labels.clone().into_iter().collect(),
            driver,
            volume_id,
        })
        .await
        .map_err(|source| Error::VolumeLabels {
            volume: pv.name_any(),
            source,
        })?;
    let add = labels_to_add(labels, answer);
    if !add.is_empty() {
        // The resourceVersion makes it conditional: a label someone adds in
        // between is never overwritten (409, then a retry sees it).
        let patch = json!({ "metadata": {
            "resourceVersion": pv.resource_version(),
            "labels": add,
        }});
        Api::<PersistentVolume>::all(state.ctx.client.clone())
            .patch(
                &pv.name_any(),
                &state.ctx.patch_params(),
                &Patch::Merge(patch),
            )
            .await?;
        tracing::info!(volume = %pv.name_any(), labels = ?add, "labelled persistent volume");
    }
    state.done.lock().insert(uid);
    state.backoff.succeeded(&pv.name_any());
    Ok(Action::await_change())
}

fn error_policy(pv: Arc<PersistentVolume>, err: &Error, state: Arc<State>) -> Action {
    state.backoff.requeue(&pv.name_any(), err)
}

/// Runs the controller until the process stops.
pub async fn run(ctx: Arc<Context>) {
    let api = Api::<PersistentVolume>::all(ctx.client.clone());
    let state = Arc::new(State {
        ctx,
        backoff: Backoff::default(),
        done: Mutex::default(),
    });
    let (store, writer) = reflector::store();
    let volumes = crate::k8s::applied_once_stored(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer),
    );
    let metrics = state.ctx.metrics.queues.clone();
    workqueue::run(
        "PersistentVolumes",
        store,
        crate::k8s::references(volumes, "persistentvolumes"),
        futures::stream::empty(),
        1,
        metrics,
        |pv| reconcile(pv, state.clone()),
        workqueue::nothing_when_gone,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::*;
    use ccm_fake_provider::FakeConfig;
    use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};
    use kube::api::ObjectMeta;

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
        let metrics = crate::runtime::metrics::ControllerMetrics::register(&mut registry);
        let ctx = Context::new(
            client,
            provider.client.clone(),
            kube::runtime::reflector::store().0,
            "kubernetes".into(),
            "pv-label-controller",
            metrics,
            crate::controllers::events::Delivery::Inline,
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
        let state = Arc::new(State {
            ctx: context(client, &provider, vec![]),
            backoff: Backoff::default(),
            done: Mutex::default(),
        });
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
        sync(&pv, &state).await.unwrap();
        let patch = api.all().pop().expect("a label patch");
        assert_eq!(patch.line(), "PATCH /api/v1/persistentvolumes/data");
        assert_eq!(patch.body["metadata"]["resourceVersion"], "5");
        let labels = patch.body["metadata"]["labels"].as_object().unwrap();
        assert!(labels.contains_key(LABEL_REGION), "{labels:?}");
        assert!(!labels.contains_key(LABEL_ZONE), "never overwritten");

        sync(&pv, &state).await.unwrap();
        assert_eq!(api.all().len(), 1, "done once per uid");
    }
}
