//! pv-label-controller's decisions, without I/O: which volumes are a
//! cloud's, and which of the provider's labels may be added.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;

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
    use crate::k8s::node::{LABEL_REGION, LABEL_ZONE};
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
