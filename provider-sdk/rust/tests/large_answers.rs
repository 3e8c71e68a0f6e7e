//! Answers above tonic's 4 MiB default and within the contract's 16 MiB
//! (`MAX_MESSAGE_BYTES`) reach the client for every RPC whose answer may
//! carry that much (a collection), not only for the ones whose client
//! happened to set the limit; the others refuse them by size.

use std::collections::BTreeMap;

mod common;

use ccm_provider_sdk::proto::{Volume, Zone};
use ccm_provider_sdk::{
    CallContext, ClientError, ClientOptions, Clusters, Identity, MAX_MESSAGE_BYTES, ProviderClient,
    ProviderInfo, ProviderResult, ProviderServer, Volumes, Zones,
};

const TEN_MIB: usize = 10 * 1024 * 1024;

/// Answers about 10 MiB to every Zones, Volumes and Clusters call.
#[derive(Clone)]
struct Big;

impl Identity for Big {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "big".into(),
            vendor_version: "0".into(),
            provider_id_scheme: "big".into(),
            ..Default::default()
        }
    }
}

/// Valid cluster names, ~10 MiB in all.
fn cluster_names() -> Vec<String> {
    (0..TEN_MIB / 250)
        .map(|i| format!("cluster-{i:08}-{}", "c".repeat(232)))
        .collect()
}

/// Valid labels of the longest kind (a 253-byte DNS prefix, a 63-byte
/// name, a 63-byte value), ~10 MiB in all.
fn volume_labels() -> BTreeMap<String, String> {
    let d = |n| "d".repeat(n);
    (0..TEN_MIB / 385)
        .map(|i| {
            let prefix = format!("p{i:08}.{}.{}.{}.{}", d(63), d(63), d(63), d(51));
            (format!("{prefix}/{}", "n".repeat(63)), "v".repeat(63))
        })
        .collect()
}

/// No valid zone or master address is anywhere near 10 MiB (label values
/// and names are short): these answers are past their RPC's bound.
fn huge_string() -> String {
    "z".repeat(TEN_MIB)
}

impl Zones for Big {
    async fn zone_by_provider_id(&self, _: CallContext, _: String) -> ProviderResult<Zone> {
        Ok(Zone {
            failure_domain: huge_string(),
            region: "r".into(),
        })
    }

    async fn zone_by_node_name(&self, _: CallContext, _: String) -> ProviderResult<Zone> {
        Ok(Zone {
            failure_domain: "z".into(),
            region: huge_string(),
        })
    }
}

impl Volumes for Big {
    async fn get_volume_labels(
        &self,
        _: CallContext,
        _: Volume,
    ) -> ProviderResult<BTreeMap<String, String>> {
        Ok(volume_labels())
    }
}

impl Clusters for Big {
    async fn list_clusters(&self, _: CallContext) -> ProviderResult<Vec<String>> {
        Ok(cluster_names())
    }

    async fn master(&self, _: CallContext, _: String) -> ProviderResult<String> {
        Ok(huge_string())
    }
}

/// The client refused the answer as invalid, naming `field`.
fn rejected(method: &str, result: Result<impl std::fmt::Debug, ClientError>, field: &str) {
    match result {
        Err(ClientError::InvalidResponse {
            method: m,
            violation,
        }) => {
            assert_eq!(m, method);
            assert_eq!(violation.field, field, "{violation}");
        }
        other => panic!("{method}: expected a rejected answer, got {other:?}"),
    }
}

#[tokio::test]
async fn zones_volumes_and_clusters_answers_of_10_mib_reach_the_client() {
    const { assert!(TEN_MIB < MAX_MESSAGE_BYTES) };
    let serving = common::serve(
        ProviderServer::new(Big)
            .with_zones(Big)
            .with_volumes(Big)
            .with_clusters(Big),
    )
    .await;
    let c = ProviderClient::connect_lazy(&serving.endpoint, ClientOptions::default()).unwrap();

    let names = c.list_clusters().await.unwrap();
    let bytes: usize = names.iter().map(String::len).sum();
    assert!(bytes > TEN_MIB - 1024 * 1024, "{bytes}");
    assert_eq!(names, cluster_names());

    let volume = Volume {
        name: "pv-1".into(),
        driver: "big.csi".into(),
        volume_id: "vol-1".into(),
        ..Default::default()
    };
    let labels = c.get_volume_labels(volume).await.unwrap();
    let bytes: usize = labels.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(bytes > TEN_MIB - 1024 * 1024, "{bytes}");
    assert_eq!(labels, volume_labels());

    // Refused from the length prefix, before being read.
    rejected("Master", c.master("k").await, "answer");
    rejected(
        "GetZoneByProviderId",
        c.zone_by_provider_id("big://i-1").await,
        "answer",
    );
    rejected(
        "GetZoneByNodeName",
        c.zone_by_node_name("node-1").await,
        "answer",
    );

    serving.stop().await;
}
