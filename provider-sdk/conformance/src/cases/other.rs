//! ZonesService, VolumesService and ClustersService cases.

use std::collections::BTreeSet;

use ccm_provider_sdk::proto::{
    ErrorReason, GetVolumeLabelsRequest, GetZoneByNodeNameRequest, GetZoneByProviderIdRequest,
    ListClustersRequest, MasterRequest, Volume,
};
use ccm_provider_sdk::validate;
use tonic::Code;

use crate::ctx::{CaseResult, Ctx, Reasons, Verdict, check, expect_error, ok, once};

const NOT_FOUND: Reasons<'static> = Reasons::Required(&[ErrorReason::InstanceNotFound]);

pub(super) async fn zone_by_node_name_known(cx: &Ctx) -> CaseResult {
    let node = cx.known_node().await?;
    let r = ok(
        "GetZoneByNodeName(known node)",
        once!(
            cx,
            zones.get_zone_by_node_name(GetZoneByNodeNameRequest {
                node_name: node.name.clone(),
            })
        ),
    )?;
    check!(
        r.zone.is_some(),
        "GetZoneByNodeName({}): expected zone to be set, got unset",
        node.name
    );
    Ok(())
}

pub(super) async fn zone_by_node_name_missing(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        zones.get_zone_by_node_name(GetZoneByNodeNameRequest {
            node_name: cx.missing_node().name,
        })
    );
    expect_error(
        "GetZoneByNodeName(missing node)",
        r,
        &[Code::NotFound],
        NOT_FOUND,
    )
}

pub(super) async fn zone_by_provider_id_missing(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        zones.get_zone_by_provider_id(GetZoneByProviderIdRequest {
            provider_id: cx.missing_node().provider_id,
        })
    );
    expect_error(
        "GetZoneByProviderId(missing instance)",
        r,
        &[Code::NotFound],
        NOT_FOUND,
    )
}

async fn list_clusters(cx: &Ctx) -> CaseResult<Vec<String>> {
    Ok(ok(
        "ListClusters",
        once!(cx, clusters.list_clusters(ListClustersRequest {})),
    )?
    .cluster_names)
}

pub(super) async fn list_clusters_valid(cx: &Ctx) -> CaseResult {
    let names = list_clusters(cx).await?;
    let mut seen = BTreeSet::new();
    for n in &names {
        check!(
            !n.is_empty(),
            "ListClusters: expected non-empty names, got {names:?}"
        );
        check!(
            seen.insert(n),
            "ListClusters: expected each name once, got {n:?} twice"
        );
    }
    Ok(())
}

pub(super) async fn master_valid(cx: &Ctx) -> CaseResult {
    let names = list_clusters(cx).await?;
    let Some(name) = names.first() else {
        return Err(Verdict::Skip("ListClusters returned no cluster".into()));
    };
    let r = ok(
        "Master",
        once!(
            cx,
            clusters.master(MasterRequest {
                cluster_name: name.clone(),
            })
        ),
    )?;
    check!(
        !r.address.is_empty(),
        "Master({name}): expected a non-empty address, got \"\""
    );
    Ok(())
}

/// Master of a cluster ListClusters does not list: NOT_FOUND, no address
/// made up.
pub(super) async fn master_unknown_not_found(cx: &Ctx) -> CaseResult {
    let unknown = format!("conformance-unknown-{}", cx.run_id);
    let names = list_clusters(cx).await?;
    if names.contains(&unknown) {
        return Err(Verdict::Skip(format!("ListClusters lists {unknown}")));
    }
    let r = once!(
        cx,
        clusters.master(MasterRequest {
            cluster_name: unknown.clone(),
        })
    );
    expect_error(
        &format!("Master({unknown}) of a cluster ListClusters does not list"),
        r,
        &[Code::NotFound],
        Reasons::IfPresent(&[]),
    )
}

/// A synthetic PersistentVolume the provider has never seen.
pub(super) fn volume(cx: &Ctx) -> Volume {
    Volume {
        name: format!("conformance-{}-pv", cx.run_id),
        uid: format!("{}-pv-uid", cx.run_id),
        driver: "conformance.ccm-rs.io".into(),
        volume_id: format!("vol-{}", cx.run_id),
        ..Default::default()
    }
}

/// Any volume gets an answer: valid labels (possibly none, for a volume the
/// provider does not know), the same on every call.
pub(super) async fn volume_labels_valid(cx: &Ctx) -> CaseResult {
    let ask = || async {
        ok(
            "GetVolumeLabels",
            once!(
                cx,
                volumes.get_volume_labels(GetVolumeLabelsRequest {
                    volume: Some(volume(cx)),
                })
            ),
        )
    };
    let first = ask().await?;
    if let Err(v) = validate::labels("labels", &first.labels) {
        check!(
            false,
            "GetVolumeLabels: expected valid Kubernetes labels, got {v}"
        );
    }
    let again = ask().await?;
    check!(
        again.labels == first.labels,
        "GetVolumeLabels: expected the same labels on every call, got {:?} then {:?}",
        first.labels,
        again.labels
    );
    Ok(())
}

pub(super) async fn volume_labels_without_volume(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        volumes.get_volume_labels(GetVolumeLabelsRequest { volume: None })
    );
    expect_error(
        "GetVolumeLabels without volume",
        r,
        &[Code::InvalidArgument],
        crate::ctx::INVALID_REASONS,
    )
}
