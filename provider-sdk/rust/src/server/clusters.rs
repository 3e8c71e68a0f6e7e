//! ClustersService: the provider's [`Clusters`], cluster names checked.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::request::{call, cluster_name, context};
use crate::proto::*;
use crate::provider::Clusters;

pub(super) struct ClustersAdapter<T>(pub(super) Arc<T>);

#[tonic::async_trait]
impl<T: Clusters> clusters_service_server::ClustersService for ClustersAdapter<T> {
    async fn list_clusters(
        &self,
        req: Request<ListClustersRequest>,
    ) -> Result<Response<ListClustersResponse>, Status> {
        let ctx = context(&req)?;
        let cluster_names = call("ListClusters", &ctx, self.0.list_clusters(ctx.clone())).await?;
        Ok(Response::new(ListClustersResponse { cluster_names }))
    }

    async fn master(
        &self,
        req: Request<MasterRequest>,
    ) -> Result<Response<MasterResponse>, Status> {
        let ctx = context(&req)?;
        let cluster = cluster_name(&req.get_ref().cluster_name)?;
        let address = call("Master", &ctx, self.0.master(ctx.clone(), cluster)).await?;
        Ok(Response::new(MasterResponse { address }))
    }
}
