//! Who wrote what to the apiserver, as the apiserver saw it: its audit log.
//!
//! The control plane tests start records every write (create, update,
//! patch, delete, deletecollection) at the `Metadata` level, so a test can
//! count a component's writes without trusting that component's own
//! counters. [`AuditLog::writes_by`] reads them back; [`AuditLog::sync`]
//! makes sure every request answered so far has reached the file.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde::Deserialize;

/// The kube-apiserver flags that write the audit log to `dir/audit.log`
/// with `tests/support/audit-policy.yaml` (every write, metadata only).
/// The log backend's default mode, `blocking`, writes each event before
/// the apiserver goes on.
pub fn apiserver_flags(dir: &Path) -> anyhow::Result<(Vec<String>, AuditLog)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("audit-policy.yaml");
    let log = dir.join("audit.log");
    let flags = vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", log.display()),
        "--audit-log-format=json".to_owned(),
    ];
    Ok((flags, AuditLog { path: log }))
}

/// One write request as the apiserver's audit log recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub verb: String,
    pub user: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub code: i32,
    pub uri: String,
    pub at: SystemTime,
}

impl std::fmt::Display for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} ({}) by {} at {}",
            self.verb,
            self.uri,
            self.code,
            self.user,
            k8s_openapi::jiff::Timestamp::try_from(self.at)
                .map(|t| t.to_string())
                .unwrap_or_default()
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
    #[serde(default, rename = "requestURI")]
    request_uri: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
    request_received_timestamp: String,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ObjectRef {
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: i32,
}

/// The audit log of a control plane.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    pub fn at(path: impl Into<PathBuf>) -> AuditLog {
        AuditLog { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every completed write in the log.
    pub fn writes(&self) -> anyhow::Result<Vec<Write>> {
        let text = std::fs::read_to_string(&self.path)
            .with_context(|| format!("reading the audit log {}", self.path.display()))?;
        let mut out = Vec::new();
        for line in text.lines() {
            // A line being written while we read is cut short: skip it, a
            // later read (after `sync`) sees it whole.
            let Ok(e) = serde_json::from_str::<Event>(line) else {
                continue;
            };
            if e.stage != "ResponseComplete" {
                continue;
            }
            let at: k8s_openapi::jiff::Timestamp = e
                .request_received_timestamp
                .parse()
                .with_context(|| format!("audit timestamp {:?}", e.request_received_timestamp))?;
            let o = e.object_ref.unwrap_or_default();
            out.push(Write {
                verb: e.verb,
                user: e.user.username,
                resource: if o.subresource.is_empty() {
                    o.resource
                } else {
                    format!("{}/{}", o.resource, o.subresource)
                },
                namespace: o.namespace,
                name: o.name,
                code: e.response_status.map(|s| s.code).unwrap_or_default(),
                uri: e.request_uri,
                at: at.into(),
            });
        }
        Ok(out)
    }

    /// The writes `user` made whose requests arrived in `[from, to)`.
    pub fn writes_by(
        &self,
        user: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Vec<Write>> {
        Ok(self
            .writes()?
            .into_iter()
            .filter(|w| w.user == user && w.at >= from && w.at < to)
            .collect())
    }

    /// Returns once every request the apiserver answered before this call
    /// is in the file: writes a marker and waits (up to 30 s) to read it.
    pub async fn sync(&self, admin: &Client) -> anyhow::Result<()> {
        let name = crate::unique_name("audit-sync");
        let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
        let marker = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &marker).await?;
        api.delete(&name, &DeleteParams::default()).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let seen = self
                .writes()?
                .iter()
                .any(|w| w.verb == "delete" && w.resource == "configmaps" && w.name == name);
            if seen {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "the audit marker {name} did not reach {} within 30 s",
                    self.path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_completed_writes_and_skips_a_torn_last_line() {
        let dir = std::env::temp_dir().join(crate::unique_name("audit-test"));
        let (flags, log) = apiserver_flags(&dir).unwrap();
        assert!(flags.iter().any(|f| f.starts_with("--audit-log-path=")));
        let line = |stage: &str, verb: &str, user: &str, sub: &str| {
            serde_json::json!({
                "kind": "Event", "stage": stage, "verb": verb,
                "requestURI": "/api/v1/nodes/n1/status",
                "user": {"username": user},
                "objectRef": {"resource": "nodes", "name": "n1", "subresource": sub},
                "responseStatus": {"code": 200},
                "requestReceivedTimestamp": "2026-11-27T05:00:00.123456Z",
            })
            .to_string()
        };
        let text = [
            line("ResponseComplete", "patch", "ccm", "status"),
            line("ResponseStarted", "patch", "ccm", "status"),
            line("ResponseComplete", "create", "other", ""),
            "{\"kind\":\"Event\",\"stage\":\"Resp".to_owned(),
        ]
        .join("\n");
        std::fs::write(log.path(), text).unwrap();
        let all = log.writes().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].resource, "nodes/status");
        assert_eq!(all[0].uri, "/api/v1/nodes/n1/status");
        let t: SystemTime = "2026-11-27T05:00:00.123456Z"
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .into();
        let ccm = log
            .writes_by("ccm", t, t + Duration::from_micros(1))
            .unwrap();
        assert_eq!(ccm.len(), 1);
        assert!(
            log.writes_by(
                "ccm",
                t + Duration::from_micros(1),
                t + Duration::from_secs(1)
            )
            .unwrap()
            .is_empty()
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
