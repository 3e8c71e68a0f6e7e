//! VolumesService: the labels a PersistentVolume should carry.

use std::collections::BTreeMap;

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::proto::{Capability, GetVolumeLabelsRequest, Volume};
use crate::validate;

impl ProviderClient {
    /// The labels the volume's PersistentVolume should carry (validated as
    /// Kubernetes labels); empty when the provider has none.
    pub async fn get_volume_labels(
        &self,
        volume: Volume,
    ) -> Result<BTreeMap<String, String>, ClientError> {
        let rpc = Rpc::read().needs(Capability::VolumeLabels);
        let request = GetVolumeLabelsRequest {
            volume: Some(volume),
        };
        self.call(rpc, request, |r| {
            validate::labels("labels", &r.labels)?;
            Ok(r.labels.into_iter().collect())
        })
        .await
    }
}
