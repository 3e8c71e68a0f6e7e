//! The steady state as a tested property: after convergence, a window in
//! which kubelets heartbeat and nothing else changes must cost zero
//! provider mutations and zero controller writes.

use std::time::{Duration, SystemTime};

use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use k8s_openapi::api::core::v1::Node;

/// How often [`kubelet_heartbeats`] renews each Node's Ready condition:
/// faster than a kubelet's 10 s, so a short window still delivers many
/// Node updates to every controller watching Nodes.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// The interval `[from, to)` a quiet window covered.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: SystemTime,
    pub to: SystemTime,
}

impl Window {
    pub fn contains(&self, t: SystemTime) -> bool {
        t >= self.from && t < self.to
    }

    pub fn contains_unix_ms(&self, ms: u64) -> bool {
        self.contains(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }
}

/// For `length`, renews the Ready condition's `lastHeartbeatTime` of each
/// of `nodes` every [`HEARTBEAT_EVERY`], as a kubelet posting an unchanged
/// status does; nothing else about the Node changes. Each Node must
/// already have a Ready condition. Returns the window it covered.
pub async fn kubelet_heartbeats(
    admin: &Client,
    nodes: &[String],
    length: Duration,
) -> anyhow::Result<Window> {
    let api: Api<Node> = Api::all(admin.clone());
    let from = SystemTime::now();
    let start = tokio::time::Instant::now();
    let mut beats = tokio::time::interval(HEARTBEAT_EVERY);
    while start.elapsed() < length {
        beats.tick().await;
        let now = k8s_openapi::jiff::Timestamp::now();
        for name in nodes {
            let patch = json!({"status": {"conditions": [{
                "type": "Ready", "lastHeartbeatTime": now,
            }]}});
            let pp = PatchParams {
                field_manager: Some("kubelet".into()),
                ..Default::default()
            };
            api.patch_status(name, &pp, &Patch::Strategic(patch))
                .await?;
        }
    }
    Ok(Window {
        from,
        to: SystemTime::now(),
    })
}

/// Posts `Ready=True` for `name` as a kubelet does once it is up (before a
/// quiet window: [`kubelet_heartbeats`] then only renews it).
pub async fn kubelet_ready(admin: &Client, name: &str) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    let pp = PatchParams {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    };
    Api::<Node>::all(admin.clone())
        .patch_status(name, &pp, &Patch::Strategic(patch))
        .await?;
    Ok(())
}
