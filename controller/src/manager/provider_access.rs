//! Opt-in cluster access for the provider (`--provider-service-account`).
//!
//! A pod has one ServiceAccount, and a projected token always carries the
//! pod's, so the provider cannot be given a token of its own account by
//! the kubelet. Instead the controller requests short-lived tokens for the
//! provider's ServiceAccount (TokenRequest; its RBAC allows that one
//! account only) and writes, into a directory only the two containers
//! mount: `token` (replaced atomically at 80% of its lifetime), `ca.crt`
//! and `kubeconfig` (the controller's own apiserver, `tokenFile: token`,
//! `certificate-authority: ca.crt`, relative to the kubeconfig), all 0640
//! so a provider running as another user of the pod's fsGroup reads them.
//! Any client library then takes `KUBECONFIG=<dir>/kubeconfig`.
//!
//! It runs on every replica from the start, leader or not (each replica's
//! provider needs it), beside the controllers and never in their way: a
//! failed request is logged, counted in
//! `ccm_provider_token_requests_total{result="error"}` and retried with
//! backoff, and the provider keeps the token it has until it expires.

use std::future::Future;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::config::{ConfigError, ProviderAccessArgs};

/// The files written, relative to the directory.
pub const TOKEN_FILE: &str = "token";
pub const CA_FILE: &str = "ca.crt";
pub const KUBECONFIG_FILE: &str = "kubeconfig";
/// Owner read-write, group read: the pod's fsGroup owns the emptyDir, so
/// a provider running as another user of the pod still reads them; no
/// one else does.
pub const FILE_MODE: u32 = 0o640;

/// The apiserver refuses shorter token lifetimes.
pub const MIN_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// Longer-lived tokens would outlive the point of short-lived ones.
pub const MAX_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);
/// Never sooner than this after a success, whatever the answer said (a
/// clock far off would otherwise make every answer look expired).
const MIN_REFRESH: Duration = Duration::from_secs(60);
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);
/// Bounds one TokenRequest (the in-cluster client has no read timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Where the kubelet puts the pod's namespace (the projected volume of
/// deploy/ too).
pub const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Checks the flags together: all or nothing, a lifetime the apiserver
/// accepts.
pub fn validate(args: &ProviderAccessArgs) -> Result<(), ConfigError> {
    let conflict = |m: String| Err(ConfigError::Conflict(m));
    match (
        args.provider_service_account.is_empty(),
        &args.provider_kubeconfig_dir,
    ) {
        (true, None) => return Ok(()),
        (false, None) => {
            return conflict(
                "--provider-service-account needs --provider-kubeconfig-dir: where the provider's kubeconfig goes".into(),
            );
        }
        (true, Some(dir)) => {
            return conflict(format!(
                "--provider-kubeconfig-dir={} needs --provider-service-account: whose token to write",
                dir.display()
            ));
        }
        (false, Some(dir)) if dir.as_os_str().is_empty() => {
            return conflict("--provider-kubeconfig-dir cannot be empty".into());
        }
        (false, Some(_)) => {}
    }
    let name = &args.provider_service_account;
    if name.len() > 253
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        return conflict(format!(
            "--provider-service-account={name:?} is not a ServiceAccount name"
        ));
    }
    let lifetime = args.provider_token_lifetime;
    if !(MIN_LIFETIME..=MAX_LIFETIME).contains(&lifetime) {
        return conflict(format!(
            "--provider-token-lifetime={lifetime:?} must be between 10m and 24h"
        ));
    }
    Ok(())
}

/// The provider's ServiceAccount's namespace: the flag (or POD_NAMESPACE),
/// else the controller's own from the in-cluster namespace file.
pub fn namespace(flag: Option<&str>, file: Option<&str>) -> Result<String, String> {
    let flag = flag.map(str::trim).filter(|s| !s.is_empty());
    let file = file.map(str::trim).filter(|s| !s.is_empty());
    flag.or(file).map(str::to_owned).ok_or_else(|| {
        format!(
            "--provider-service-account: no namespace (not running in a pod: {NAMESPACE_FILE} is missing); set --provider-service-account-namespace"
        )
    })
}

/// When to replace a token: at 80% of its lifetime, the shorter of what
/// was asked for and what the apiserver granted (it may cap it), never
/// sooner than [`MIN_REFRESH`].
pub fn refresh_in(requested: Duration, granted: Option<Duration>) -> Duration {
    let lifetime = match granted {
        Some(g) if !g.is_zero() => g.min(requested),
        _ => requested,
    };
    (lifetime * 4 / 5).max(MIN_REFRESH)
}

/// The wait before the next attempt after `failures` failures in a row (at
/// least one): 1 s, doubling, at most a minute.
pub fn retry_in(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST_RETRY * (1u32 << doublings)).min(MAX_RETRY)
}

/// How the provider reaches the apiserver: the controller's own
/// connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConnection {
    pub server: String,
    /// PEM; written to `ca.crt`.
    pub ca_pem: Option<String>,
    pub insecure_skip_tls_verify: bool,
    pub tls_server_name: Option<String>,
}

impl ClusterConnection {
    pub fn of(config: &kube::Config) -> ClusterConnection {
        let ca_pem = config
            .root_cert
            .as_ref()
            .filter(|c| !c.is_empty())
            .map(|ders| {
                let pems: Vec<pem::Pem> = ders
                    .iter()
                    .map(|der| pem::Pem::new("CERTIFICATE", der.clone()))
                    .collect();
                pem::encode_many_config(
                    &pems,
                    pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
                )
            });
        ClusterConnection {
            server: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_owned(),
            ca_pem,
            insecure_skip_tls_verify: config.accept_invalid_certs,
            tls_server_name: config.tls_server_name.clone(),
        }
    }
}

/// The kubeconfig the provider reads: the controller's apiserver, the
/// token and CA files next to it (relative paths, which client-go and
/// kube-rs resolve against the kubeconfig's directory, so the directory
/// may be mounted anywhere), the ServiceAccount's namespace as default.
pub fn kubeconfig(cluster: &ClusterConnection, namespace: &str, account: &str) -> String {
    const NAME: &str = "ccm-rs";
    let config = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: NAME.into(),
            cluster: Some(Cluster {
                server: Some(cluster.server.clone()),
                certificate_authority: cluster.ca_pem.as_ref().map(|_| CA_FILE.into()),
                insecure_skip_tls_verify: cluster.insecure_skip_tls_verify.then_some(true),
                tls_server_name: cluster.tls_server_name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: format!("system:serviceaccount:{namespace}:{account}"),
            auth_info: Some(AuthInfo {
                token_file: Some(TOKEN_FILE.into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: NAME.into(),
            context: Some(Context {
                cluster: NAME.into(),
                user: Some(format!("system:serviceaccount:{namespace}:{account}")),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        current_context: Some(NAME.into()),
        ..Default::default()
    };
    // JSON is YAML: every kubeconfig reader takes it.
    let mut out = serde_json::to_string_pretty(&config).expect("a Kubeconfig serialises");
    out.push('\n');
    out
}

/// Writes `contents` to `dir/name` atomically (a temporary file renamed
/// over it, so a reader sees the old or the new file, never half of one)
/// with [`FILE_MODE`], whatever the umask or an older file's mode.
pub fn write_file(dir: &Path, name: &str, contents: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    f.write_all(contents)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))
}

/// Why no token was written this time.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("TokenRequest for ServiceAccount {account}: {source}")]
    Request {
        account: String,
        source: kube::Error,
    },
    #[error("TokenRequest for ServiceAccount {account}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { account: String },
    #[error("TokenRequest for ServiceAccount {account}: the answer carries no token")]
    NoToken { account: String },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A token and how long the apiserver says it lasts (from its expiration
/// timestamp, when it gave one in the future).
pub struct Minted {
    pub token: String,
    pub granted: Option<Duration>,
    pub expires_unix: Option<i64>,
}

/// Gets a token for the provider's ServiceAccount.
pub trait Mint: Send + Sync {
    fn mint(&self) -> impl Future<Output = Result<Minted, AccessError>> + Send;
}

/// TokenRequest against the apiserver, as the controller.
pub struct TokenRequests {
    api: Api<ServiceAccount>,
    namespace: String,
    account: String,
    lifetime: Duration,
}

impl Mint for TokenRequests {
    async fn mint(&self) -> Result<Minted, AccessError> {
        let account = format!("{}/{}", self.namespace, self.account);
        // No audiences: the token is bound to the apiserver's own, so
        // nothing that checks the audience accepts it for itself.
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(self.lifetime.as_secs() as i64),
                ..Default::default()
            },
            ..Default::default()
        };
        let params = PostParams::default();
        let call = self
            .api
            .create_token_request(&self.account, &params, &request);
        let answer = match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
            Err(_) => return Err(AccessError::Timeout { account }),
            Ok(Err(source)) => return Err(AccessError::Request { account, source }),
            Ok(Ok(a)) => a,
        };
        let status = answer
            .status
            .filter(|s| !s.token.is_empty())
            .ok_or_else(|| AccessError::NoToken {
                account: account.clone(),
            })?;
        let expires = status.expiration_timestamp.0;
        let left = expires.duration_since(k8s_openapi::jiff::Timestamp::now());
        Ok(Minted {
            token: status.token,
            granted: Duration::try_from(left).ok(),
            expires_unix: Some(expires.as_second()),
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// `ccm_provider_token_requests_total{result="ok"|"error"}` and
/// `ccm_provider_token_expiration_timestamp_seconds` (of the token the
/// provider has; 0 before the first).
#[derive(Clone, Default)]
pub struct AccessMetrics {
    requests: Family<ResultLabels, Counter>,
    expires: Gauge,
}

impl AccessMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = AccessMetrics::default();
        registry.register(
            "ccm_provider_token_requests",
            "Token requests for the provider's ServiceAccount (--provider-service-account), by result",
            m.requests.clone(),
        );
        registry.register(
            "ccm_provider_token_expiration_timestamp_seconds",
            "When the provider's current token expires (Unix time; 0 before the first)",
            m.expires.clone(),
        );
        // Both results from the start, so a rate over them is defined.
        for result in ["ok", "error"] {
            let _ = m.requests.get_or_create(&ResultLabels { result });
        }
        m
    }

    fn count(&self, result: &'static str) {
        self.requests.get_or_create(&ResultLabels { result }).inc();
    }
}

/// The opted-in minting: what [`ProviderAccess::run`] needs.
pub struct ProviderAccess<M = TokenRequests> {
    minter: M,
    dir: PathBuf,
    lifetime: Duration,
    ca_pem: Option<String>,
    kubeconfig: String,
    metrics: AccessMetrics,
}

impl ProviderAccess {
    /// `None` when not opted in. `config` is the controller's connection,
    /// `client` an unfenced one (every replica mints, leader or not).
    pub fn new(
        args: &ProviderAccessArgs,
        config: &kube::Config,
        client: kube::Client,
        registry: &mut Registry,
    ) -> Result<Option<Self>, ConfigError> {
        let Some(dir) = args
            .provider_kubeconfig_dir
            .clone()
            .filter(|_| !args.provider_service_account.is_empty())
        else {
            return Ok(None);
        };
        let file = std::fs::read_to_string(NAMESPACE_FILE).ok();
        let ns = namespace(
            args.provider_service_account_namespace.as_deref(),
            file.as_deref(),
        )
        .map_err(ConfigError::Conflict)?;
        let cluster = ClusterConnection::of(config);
        let account = args.provider_service_account.clone();
        Ok(Some(ProviderAccess {
            kubeconfig: kubeconfig(&cluster, &ns, &account),
            ca_pem: cluster.ca_pem,
            minter: TokenRequests {
                api: Api::namespaced(client, &ns),
                namespace: ns,
                account,
                lifetime: args.provider_token_lifetime,
            },
            dir,
            lifetime: args.provider_token_lifetime,
            metrics: AccessMetrics::register(registry),
        }))
    }
}

impl<M: Mint> ProviderAccess<M> {
    #[cfg(test)]
    fn with_minter(minter: M, dir: PathBuf, lifetime: Duration, metrics: AccessMetrics) -> Self {
        ProviderAccess {
            minter,
            dir,
            lifetime,
            ca_pem: Some("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n".into()),
            kubeconfig: "{}\n".into(),
            metrics,
        }
    }

    /// Mints and writes tokens until dropped: replaced at 80% of their
    /// lifetime, failures retried with backoff.
    pub async fn run(self) {
        let mut failures = 0u32;
        let mut wrote_kubeconfig = false;
        tracing::info!(dir = %self.dir.display(), "provider cluster access: writing the provider's kubeconfig (--provider-service-account)");
        loop {
            let wait = match self.once(&mut wrote_kubeconfig).await {
                Ok(minted) => {
                    self.metrics.count("ok");
                    if let Some(t) = minted.expires_unix {
                        self.metrics.expires.set(t);
                    }
                    let next = refresh_in(self.lifetime, minted.granted);
                    if failures > 0 {
                        tracing::info!(after_failures = failures, next_in = ?next, "provider token written");
                    } else {
                        tracing::debug!(next_in = ?next, "provider token written");
                    }
                    failures = 0;
                    next
                }
                Err(e) => {
                    self.metrics.count("error");
                    failures = failures.saturating_add(1);
                    let next = retry_in(failures);
                    tracing::warn!(error = %e, failures, retry_in = ?next, "provider cluster access: no new token; the provider keeps the one it has until it expires");
                    next
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One token, written; the first time also the CA and then the
    /// kubeconfig, last, so whatever it names exists once it does.
    async fn once(&self, wrote_kubeconfig: &mut bool) -> Result<Minted, AccessError> {
        let minted = self.minter.mint().await?;
        let mut files = vec![(TOKEN_FILE, minted.token.clone().into_bytes())];
        if !*wrote_kubeconfig {
            if let Some(ca) = &self.ca_pem {
                files.push((CA_FILE, ca.clone().into_bytes()));
            }
            files.push((KUBECONFIG_FILE, self.kubeconfig.clone().into_bytes()));
        }
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir).map_err(|source| AccessError::Write {
                path: dir.clone(),
                source,
            })?;
            for (name, contents) in files {
                write_file(&dir, name, &contents).map_err(|source| AccessError::Write {
                    path: dir.join(name),
                    source,
                })?;
            }
            Ok::<_, AccessError>(())
        })
        .await
        .expect("writing the provider's files does not panic")?;
        *wrote_kubeconfig = true;
        Ok(minted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_token_is_replaced_at_80_percent_of_the_shorter_lifetime() {
        let m = |s: u64| Duration::from_secs(s * 60);
        assert_eq!(refresh_in(HOUR, Some(HOUR)), m(48));
        assert_eq!(refresh_in(HOUR, None), m(48), "no expiry: as asked");
        assert_eq!(refresh_in(HOUR, Some(Duration::ZERO)), m(48));
        assert_eq!(
            refresh_in(HOUR, Some(m(20))),
            m(16),
            "the apiserver capped it"
        );
        assert_eq!(
            refresh_in(HOUR, Some(10 * HOUR)),
            m(48),
            "a longer grant is not relied on"
        );
        assert_eq!(
            refresh_in(HOUR, Some(Duration::from_secs(5))),
            MIN_REFRESH,
            "a clock far off does not make it spin"
        );
        // Always well before expiry.
        for granted in [m(10), m(30), HOUR, 24 * HOUR] {
            let at = refresh_in(24 * HOUR, Some(granted));
            assert!(at < granted && granted - at >= granted / 5, "{granted:?}");
        }
    }

    #[test]
    fn retries_back_off_from_a_second_to_a_minute() {
        let secs: Vec<u64> = (1..=9).map(|f| retry_in(f).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_in(0), FIRST_RETRY);
        assert_eq!(retry_in(u32::MAX), MAX_RETRY, "no overflow");
    }

    fn cluster() -> ClusterConnection {
        ClusterConnection {
            server: "https://10.96.0.1:443".into(),
            ca_pem: Some("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".into()),
            insecure_skip_tls_verify: false,
            tls_server_name: None,
        }
    }

    #[test]
    fn the_kubeconfig_names_the_token_and_ca_next_to_it() {
        let text = kubeconfig(&cluster(), "kube-system", "ccm-provider");
        let parsed = Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some("ccm-rs"));
        let c = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(c.server.as_deref(), Some("https://10.96.0.1:443"));
        assert_eq!(c.certificate_authority.as_deref(), Some("ca.crt"));
        assert_eq!(c.insecure_skip_tls_verify, None);
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some("token"));
        assert!(user.token.is_none(), "the token is never inlined");
        let ctx = parsed.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.namespace.as_deref(), Some("kube-system"));
        assert_eq!(
            ctx.user.as_deref(),
            Some("system:serviceaccount:kube-system:ccm-provider")
        );
        assert_eq!(
            parsed.auth_infos[0].name,
            "system:serviceaccount:kube-system:ccm-provider"
        );

        // Read from where it lies, the paths are the directory's files.
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), KUBECONFIG_FILE, text.as_bytes()).unwrap();
        let read = Kubeconfig::read_from(dir.path().join(KUBECONFIG_FILE)).unwrap();
        let c = read.clusters[0].cluster.as_ref().unwrap();
        let user = read.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            c.certificate_authority.as_deref(),
            dir.path().join("ca.crt").to_str()
        );
        assert_eq!(
            user.token_file.as_deref(),
            dir.path().join("token").to_str()
        );
    }

    #[test]
    fn the_kubeconfig_follows_the_controllers_own_tls_settings() {
        let insecure = ClusterConnection {
            ca_pem: None,
            insecure_skip_tls_verify: true,
            tls_server_name: Some("kubernetes.default.svc".into()),
            ..cluster()
        };
        let parsed = Kubeconfig::from_yaml(&kubeconfig(&insecure, "ns", "p")).unwrap();
        let c = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(c.certificate_authority, None, "no CA file is written");
        assert_eq!(c.insecure_skip_tls_verify, Some(true));
        assert_eq!(c.tls_server_name.as_deref(), Some("kubernetes.default.svc"));

        let mut config = kube::Config::new("https://127.0.0.1:6443/".parse().unwrap());
        config.root_cert = Some(vec![vec![1, 2, 3], vec![4, 5]]);
        let of = ClusterConnection::of(&config);
        assert_eq!(of.server, "https://127.0.0.1:6443");
        let pems = pem::parse_many(of.ca_pem.unwrap()).unwrap();
        assert_eq!(
            pems.iter()
                .map(|p| p.contents().to_vec())
                .collect::<Vec<_>>(),
            [vec![1, 2, 3], vec![4, 5]],
            "every CA certificate of the controller's, PEM"
        );
        assert!(!of.insecure_skip_tls_verify);
    }

    #[test]
    fn files_are_0640_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        write_file(dir.path(), TOKEN_FILE, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "{mode:o}");
        // A temporary file left by a crash is reused, with the right mode.
        let tmp = dir.path().join(".ca.crt.tmp");
        std::fs::write(&tmp, "half").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_file(dir.path(), CA_FILE, b"ca").unwrap();
        let mode = std::fs::metadata(dir.path().join(CA_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o640, "{mode:o}");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    fn args(flags: &[&str]) -> ProviderAccessArgs {
        let mut all = vec!["ccm"];
        all.extend_from_slice(flags);
        crate::config::Options::try_parse_from(all)
            .unwrap()
            .provider_access
    }

    #[test]
    fn the_flags_go_together() {
        assert!(validate(&args(&[])).is_ok(), "off by default");
        let on = args(&[
            "--provider-service-account=ccm-provider",
            "--provider-kubeconfig-dir=/var/run/x",
        ]);
        assert!(validate(&on).is_ok());
        assert_eq!(on.provider_token_lifetime, HOUR, "an hour by default");
        for (flags, want) in [
            (
                &["--provider-service-account=p"][..],
                "needs --provider-kubeconfig-dir",
            ),
            (
                &["--provider-kubeconfig-dir=/x"][..],
                "needs --provider-service-account",
            ),
            (
                &[
                    "--provider-service-account=p",
                    "--provider-kubeconfig-dir=/x",
                    "--provider-token-lifetime=5m",
                ][..],
                "between 10m and 24h",
            ),
            (
                &[
                    "--provider-service-account=p",
                    "--provider-kubeconfig-dir=/x",
                    "--provider-token-lifetime=25h",
                ][..],
                "between 10m and 24h",
            ),
            (
                &[
                    "--provider-service-account=kube-system/p",
                    "--provider-kubeconfig-dir=/x",
                ][..],
                "is not a ServiceAccount name",
            ),
        ] {
            let err = validate(&args(flags)).unwrap_err().to_string();
            assert!(err.contains(want), "{flags:?}: {err}");
        }
        // Options::validate checks them too.
        let err = crate::config::Options::try_parse_from(["ccm", "--provider-service-account=p"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            err.to_string().contains("--provider-kubeconfig-dir"),
            "{err}"
        );
    }

    #[test]
    fn the_namespace_is_the_flag_else_the_pods_own() {
        assert_eq!(namespace(Some("a"), Some("b\n")).unwrap(), "a");
        assert_eq!(
            namespace(None, Some("kube-system\n")).unwrap(),
            "kube-system"
        );
        assert_eq!(namespace(Some(""), Some("b")).unwrap(), "b");
        let err = namespace(None, None).unwrap_err();
        assert!(
            err.contains("--provider-service-account-namespace"),
            "{err}"
        );
    }

    /// Answers from a script: `Err` for a failure, `Ok(granted)` for a
    /// token; counts the calls.
    struct Script {
        answers: Vec<Result<Duration, ()>>,
        calls: Arc<AtomicUsize>,
    }

    impl Mint for Script {
        async fn mint(&self) -> Result<Minted, AccessError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            match self.answers.get(n).copied().unwrap_or(Err(())) {
                Ok(granted) => Ok(Minted {
                    token: format!("token-{n}"),
                    granted: Some(granted),
                    expires_unix: Some(1_000 + n as i64),
                }),
                Err(()) => Err(AccessError::NoToken {
                    account: "ns/p".into(),
                }),
            }
        }
    }

    /// Failures are retried after 1 s, 2 s; the token is then replaced at
    /// 80% of its lifetime; the kubeconfig is written once, after the
    /// first token.
    #[tokio::test(start_paused = true)]
    async fn the_loop_retries_with_backoff_then_refreshes_before_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let metrics = AccessMetrics::default();
        let access = ProviderAccess::with_minter(
            Script {
                answers: vec![Err(()), Err(()), Ok(HOUR), Ok(HOUR)],
                calls: calls.clone(),
            },
            dir.path().to_owned(),
            HOUR,
            metrics.clone(),
        );
        let task = tokio::spawn(access.run());
        let count = || calls.load(Ordering::SeqCst);
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        let wait = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
        // t=0: the first attempt fails; nothing is written.
        wait(500).await;
        assert_eq!(count(), 1);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
        // t=1: the retry fails too; t=3: the third attempt succeeds.
        wait(1_000).await;
        assert_eq!(count(), 2);
        wait(1_000).await;
        assert_eq!(count(), 2, "the second retry waits 2 s");
        wait(1_000).await;
        assert_eq!(count(), 3);
        assert_eq!(read(TOKEN_FILE), "token-2");
        assert_eq!(read(KUBECONFIG_FILE), "{}\n");
        assert!(read(CA_FILE).contains("BEGIN CERTIFICATE"));
        // Nothing more until 48 minutes (80% of the hour) later.
        wait(47 * 60 * 1_000).await;
        assert_eq!(count(), 3);
        wait(60 * 1_000).await;
        assert_eq!(count(), 4);
        assert_eq!(read(TOKEN_FILE), "token-3");
        let ok = metrics
            .requests
            .get_or_create(&ResultLabels { result: "ok" })
            .get();
        let failed = metrics
            .requests
            .get_or_create(&ResultLabels { result: "error" })
            .get();
        assert_eq!((ok, failed), (2, 2));
        assert_eq!(metrics.expires.get(), 1_003);
        task.abort();
    }
}
