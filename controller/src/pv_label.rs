//! pv-label-controller (opt-in): topology labels for PersistentVolumes
//! provisioned outside CSI, from the provider's VolumesService (upstream's
//! `PVLabeler`, once the PersistentVolumeLabel admission plugin). Labels a
//! PersistentVolume already has are never overwritten.
//!
//! Modern clusters do not need it: a CSI driver reports topology itself
//! (`NodeGetInfo` accessible topology, then the PersistentVolume's
//! `spec.nodeAffinity`), which the scheduler uses directly. It exists for
//! volumes of in-tree plugins and for CSI drivers that report no topology.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use ccm_provider_sdk::proto::Volume;
use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Patch;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::context::{Context, Error, retry_after};
use crate::node::{LABEL_REGION, LABEL_ZONE};

/// (driver, volume id) of a cloud volume, or `None` for sources that are
/// not a cloud's (hostPath, local, nfs, ...).
pub fn cloud_volume(pv: &PersistentVolume) -> Option<(String, String)> {
    let s = pv.spec.as_ref()?;
    if let Some(c) = &s.csi {
        return Some((c.driver.clone(), c.volume_handle.clone()));
    }
    let legacy = [
        (
            "kubernetes.io/aws-ebs",
            s.aws_elastic_block_store.as_ref().map(|v| &v.volume_id),
        ),
        (
            "kubernetes.io/gce-pd",
            s.gce_persistent_disk.as_ref().map(|v| &v.pd_name),
        ),
        (
            "kubernetes.io/azure-disk",
            s.azure_disk.as_ref().map(|v| &v.disk_uri),
        ),
        (
            "kubernetes.io/cinder",
            s.cinder.as_ref().map(|v| &v.volume_id),
        ),
        (
            "kubernetes.io/vsphere-volume",
            s.vsphere_volume.as_ref().map(|v| &v.volume_path),
        ),
    ];
    legacy
        .into_iter()
        .find_map(|(driver, id)| Some((driver.to_owned(), id?.clone())))
}

/// The labels to add: the provider's, minus every key the volume has.
pub fn labels_to_add(
    existing: &BTreeMap<String, String>,
    answer: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    answer
        .into_iter()
        .filter(|(k, _)| !existing.contains_key(k))
        .collect()
}

struct State {
    ctx: Arc<Context>,
    /// PersistentVolume uids the provider had nothing (more) for.
    done: Mutex<HashSet<String>>,
}

async fn reconcile(pv: Arc<PersistentVolume>, state: Arc<State>) -> Result<Action, Error> {
    let uid = pv.uid().unwrap_or_default();
    let labels = pv.labels();
    let has_topology = labels.contains_key(LABEL_ZONE) && labels.contains_key(LABEL_REGION);
    if has_topology
        || state
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&uid)
    {
        return Ok(Action::await_change());
    }
    let Some((driver, volume_id)) = cloud_volume(&pv) else {
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
    state
        .done
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(uid);
    state.ctx.backoff.succeeded(&pv.name_any());
    Ok(Action::await_change())
}

fn error_policy(pv: Arc<PersistentVolume>, err: &Error, state: Arc<State>) -> Action {
    retry_after(&state.ctx, &pv.name_any(), err)
}

/// Runs the controller until the process stops.
pub async fn run(ctx: Arc<Context>) {
    let api = Api::<PersistentVolume>::all(ctx.client.clone());
    let state = Arc::new(State {
        ctx,
        done: Mutex::default(),
    });
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, state)
        .for_each(|_| async {})
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, HostPathVolumeSource,
        PersistentVolumeSpec,
    };

    fn pv(spec: PersistentVolumeSpec) -> PersistentVolume {
        PersistentVolume {
            spec: Some(spec),
            ..Default::default()
        }
    }

    #[test]
    fn cloud_volumes_are_recognised() {
        let csi = pv(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: "d.example.com".into(),
                volume_handle: "h-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            cloud_volume(&csi),
            Some(("d.example.com".into(), "h-1".into()))
        );
        let ebs = pv(PersistentVolumeSpec {
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: "vol-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            cloud_volume(&ebs),
            Some(("kubernetes.io/aws-ebs".into(), "vol-1".into()))
        );
        let host = pv(PersistentVolumeSpec {
            host_path: Some(HostPathVolumeSource {
                path: "/data".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(cloud_volume(&host), None);
    }

    #[test]
    fn existing_labels_are_never_overwritten() {
        let existing = BTreeMap::from([(LABEL_ZONE.to_owned(), "mine".to_owned())]);
        let answer = BTreeMap::from([
            (LABEL_ZONE.to_owned(), "theirs".to_owned()),
            (LABEL_REGION.to_owned(), "r".to_owned()),
        ]);
        assert_eq!(
            labels_to_add(&existing, answer),
            BTreeMap::from([(LABEL_REGION.to_owned(), "r".to_owned())])
        );
    }
}
