//! Volume labels: the fake's own volumes live in the configured zone.

use std::collections::BTreeMap;

use ccm_provider_sdk::proto::Volume;

use super::{State, VOLUME_DRIVERS};

impl State {
    /// A volume of one of [`VOLUME_DRIVERS`] lives in the configured zone
    /// and region; any other volume is not the fake's (no labels).
    pub(crate) fn volume_labels(&self, volume: &Volume) -> BTreeMap<String, String> {
        if !VOLUME_DRIVERS.contains(&volume.driver.as_str()) {
            return BTreeMap::new();
        }
        BTreeMap::from([
            (
                "topology.kubernetes.io/zone".to_owned(),
                self.config.zone.clone(),
            ),
            (
                "topology.kubernetes.io/region".to_owned(),
                self.config.region.clone(),
            ),
        ])
    }
}
