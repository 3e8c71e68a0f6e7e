//! pv-label-controller's decisions, without I/O: which volumes are a
//! cloud's, what to ask the provider about one, and the plan once it
//! answered (which of its labels may be added).

use std::collections::BTreeMap;

use ccm_provider_sdk::proto::Volume;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;

use crate::k8s::node::{LABEL_REGION, LABEL_ZONE};

/// What to ask the provider about `pv` (its GetVolumeLabels request), or
/// `None` when there is nothing to do: it has zone and region already,
/// the provider had nothing more for it (`done`), or it is not a cloud
/// volume.
pub fn question(pv: &PersistentVolume, done: bool) -> Option<Volume> {
    let labels = pv.labels();
    let has_topology = labels.contains_key(LABEL_ZONE) && labels.contains_key(LABEL_REGION);
    if has_topology || done {
        return None;
    }
    let (driver, volume_id) = cloud_volume(pv)?;
    Some(Volume {
        name: pv.name_any(),
        uid: pv.uid().unwrap_or_default(),
        labels: labels.clone().into_iter().collect(),
        driver,
        volume_id,
    })
}

/// What to write once the provider answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The labels to add (none: no write), in a merge patch guarded by
    /// the resourceVersion read.
    pub add: BTreeMap<String, String>,
    pub resource_version: Option<String>,
}

impl Plan {
    /// The merge patch, if there is anything to write. The
    /// resourceVersion makes it conditional: a label someone adds in
    /// between is never overwritten (409, then a retry sees it).
    pub fn patch(&self) -> Option<serde_json::Value> {
        (!self.add.is_empty()).then(|| {
            serde_json::json!({ "metadata": {
                "resourceVersion": self.resource_version,
                "labels": self.add,
            }})
        })
    }
}

/// The plan for `pv` given the provider's `answer`.
pub fn plan(pv: &PersistentVolume, answer: BTreeMap<String, String>) -> Plan {
    Plan {
        add: labels_to_add(pv.labels(), answer),
        resource_version: pv.resource_version(),
    }
}

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
    fn only_cloud_volumes_without_topology_are_asked_about_once() {
        let mut csi = pv(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: "d.example.com".into(),
                volume_handle: "h-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            question(&csi, false).map(|v| v.volume_id),
            Some("h-1".into())
        );
        assert_eq!(question(&csi, true), None, "done");
        csi.metadata.labels = Some(BTreeMap::from([
            (LABEL_ZONE.to_owned(), "z".to_owned()),
            (LABEL_REGION.to_owned(), "r".to_owned()),
        ]));
        assert_eq!(question(&csi, false), None, "has its topology");
        let host = pv(PersistentVolumeSpec {
            host_path: Some(HostPathVolumeSource {
                path: "/data".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(question(&host, false), None);
    }

    #[test]
    fn a_plan_writes_only_labels_to_add_guarded_by_the_version() {
        let mut v = pv(PersistentVolumeSpec::default());
        v.metadata.resource_version = Some("5".into());
        v.metadata.labels = Some(BTreeMap::from([(LABEL_ZONE.to_owned(), "mine".to_owned())]));
        let mine = BTreeMap::from([(LABEL_ZONE.to_owned(), "theirs".to_owned())]);
        assert_eq!(plan(&v, mine).patch(), None, "nothing to add: no write");
        let p = plan(
            &v,
            BTreeMap::from([(LABEL_REGION.to_owned(), "r".to_owned())]),
        );
        assert_eq!(
            p.patch(),
            Some(
                serde_json::json!({"metadata": {"resourceVersion": "5", "labels": {LABEL_REGION: "r"}}})
            )
        );
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
