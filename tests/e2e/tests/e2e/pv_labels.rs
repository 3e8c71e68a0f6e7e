//! pv-label-controller end to end (opt-in): the real kube-apiserver, the
//! controller bound to the shipped roles, the fake provider.

use std::collections::BTreeMap;

use crate::common::*;
use ccm_fake_provider::{FakeConfig, Method, VOLUME_DRIVERS};
use ccm_testsupport::unique_name;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, HostPathVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";

fn pv(name: &str, labels: &[(&str, &str)], spec: PersistentVolumeSpec) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([(
                "storage".to_owned(),
                Quantity("1Gi".into()),
            )])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            ..spec
        }),
        ..Default::default()
    }
}

fn csi(driver: &str, handle: &str) -> PersistentVolumeSpec {
    PersistentVolumeSpec {
        csi: Some(CSIPersistentVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn create(h: &Harness, pv: PersistentVolume) {
    Api::<PersistentVolume>::all(h.admin.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
}

async fn labels(h: &Harness, name: &str) -> BTreeMap<String, String> {
    Api::<PersistentVolume>::all(h.admin.clone())
        .get(name)
        .await
        .unwrap()
        .labels()
        .clone()
}

#[tokio::test]
async fn volumes_are_labelled_when_opted_in_never_overwriting() {
    let h = Harness::start_with_roles(
        FakeConfig::default(),
        &["--controllers=*,pv-label"],
        &["clusterrole.yaml", "clusterrole-pv-labels.yaml"],
    )
    .await;
    let (fresh, mine, foreign, local) = (
        unique_name("pv-fresh"),
        unique_name("pv-mine"),
        unique_name("pv-foreign"),
        unique_name("pv-local"),
    );
    create(&h, pv(&fresh, &[], csi(VOLUME_DRIVERS[0], "vol-1"))).await;
    create(
        &h,
        pv(&mine, &[(ZONE, "my-zone")], csi(VOLUME_DRIVERS[0], "vol-2")),
    )
    .await;
    create(&h, pv(&foreign, &[], csi("other.csi.example.com", "x-1"))).await;
    let host = PersistentVolumeSpec {
        host_path: Some(HostPathVolumeSource {
            path: "/data".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    create(&h, pv(&local, &[], host)).await;

    eventually("the three cloud volumes asked about", || async {
        match h.fake.calls_of(Method::GetVolumeLabels).len() {
            3 => Ok(()),
            n => Err(n.to_string()),
        }
    })
    .await;
    let got = eventually("the fresh volume labelled", || async {
        let l = labels(&h, &fresh).await;
        if l.contains_key(ZONE) {
            Ok(l)
        } else {
            Err(format!("{l:?}"))
        }
    })
    .await;
    assert_eq!(got[ZONE], "fake-zone-a");
    assert_eq!(got[REGION], "fake-region");
    let mine = eventually("the region added to the labelled one", || async {
        let l = labels(&h, &mine).await;
        if l.contains_key(REGION) {
            Ok(l)
        } else {
            Err(format!("{l:?}"))
        }
    })
    .await;
    assert_eq!(
        mine[ZONE], "my-zone",
        "an existing label is never overwritten"
    );
    assert!(
        labels(&h, &foreign).await.is_empty(),
        "not the provider's volume"
    );
    assert!(
        labels(&h, &local).await.is_empty(),
        "not a cloud volume: never asked"
    );
    assert_eq!(h.fake.calls_of(Method::GetVolumeLabels).len(), 3);
    h.stop().await;
}

#[tokio::test]
async fn volumes_are_left_alone_by_default() {
    let h = Harness::start(FakeConfig::default(), &[]).await;
    let name = unique_name("pv-default");
    create(&h, pv(&name, &[], csi(VOLUME_DRIVERS[0], "vol-9"))).await;
    // The controller is running and synced once it initialises a Node.
    let node = unique_name("pvn");
    h.register_node(&node).await;
    eventually("the node initialised", || async {
        match h.initialised_count(std::slice::from_ref(&node)).await {
            1 => Ok(()),
            n => Err(n.to_string()),
        }
    })
    .await;
    assert!(labels(&h, &name).await.is_empty());
    assert_eq!(h.fake.calls_of(Method::GetVolumeLabels).len(), 0);
    h.stop().await;
}
