//! ClustersService: the clusters the provider knows, and a cluster's
//! control-plane address.

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::proto::{Capability, ListClustersRequest, MasterRequest};
use crate::validate;

fn read() -> Rpc {
    Rpc::read().needs(Capability::Clusters)
}

impl ProviderClient {
    pub async fn list_clusters(&self) -> Result<Vec<String>, ClientError> {
        self.call(read(), ListClustersRequest {}, |r| Ok(r.cluster_names))
            .await
    }

    pub async fn master(&self, cluster_name: &str) -> Result<String, ClientError> {
        let request = MasterRequest {
            cluster_name: cluster_name.to_owned(),
        };
        self.call(read(), request, |r| {
            validate::name("address", &r.address)?;
            Ok(r.address)
        })
        .await
    }
}
