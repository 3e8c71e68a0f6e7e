//! Upstream `cloud-controller-manager` flags that have no counterpart among
//! ours, so that a manifest written for any upstream CCM starts this one.
//!
//! Every flag of upstream's `--help` parses, with upstream's value syntax
//! (Go booleans `--flag`, `--flag=true|false`; Go durations; string slices
//! by comma and by repetition). Those with a meaning here are typed fields
//! of [`CompatArgs`] and are used: `-v`, `--logging-format`,
//! `--master`, `--leader-elect-resource-lock`, `--allow-untagged-cloud`. The
//! others ([`IGNORED`]) are hidden from `--help` and only produce one
//! warning each ([`warnings`]) when their value asks for something upstream
//! would do and we do not. The whole list, with what each does here, is in
//! docs/controller.md.

use std::fmt;

use clap::{Arg, ArgAction, ArgMatches, Args, ValueEnum};

use super::{ConfigError, LogFormat, Options, duration};

/// Upstream's flags without a counterpart among ours.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Compatibility")]
pub struct CompatArgs {
    /// Accepted for compatibility with upstream manifests; the provider is
    /// whatever answers on --provider-endpoint.
    #[arg(long, default_value = "")]
    pub cloud_provider: String,

    /// The provider's configuration file. Not read here: the provider is a
    /// separate process and reads its own (see docs/deploy.md); giving it
    /// logs a warning naming the path.
    #[arg(long)]
    pub cloud_config: Option<String>,

    /// Deprecated upstream: allow starting although the provider does not
    /// know which cluster it serves.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool, action = ArgAction::Set)]
    pub allow_untagged_cloud: bool,

    /// Upstream feature gates (Name=bool,...): none applies here; giving
    /// any logs one warning listing them.
    #[arg(long, value_delimiter = ',', value_parser = feature_gate)]
    pub feature_gates: Vec<FeatureGate>,

    /// The kube-apiserver's URL, overriding the kubeconfig's server (alone:
    /// that server without credentials, as upstream).
    #[arg(long, value_parser = master_url)]
    pub master: Option<String>,

    /// The leader-election lock: only "leases" exists.
    #[arg(long, default_value = "leases")]
    pub leader_elect_resource_lock: String,

    /// Log verbosity: 0-1 info, 2-3 debug, 4 and more trace for this
    /// controller's own messages (dependencies stay at info). RUST_LOG, when
    /// set, wins.
    #[arg(short = 'v', long = "v", value_name = "N")]
    pub verbosity: Option<u32>,

    /// Upstream's name for --log-format: text (= plain) or json.
    #[arg(long, value_enum)]
    pub logging_format: Option<LoggingFormat>,

    #[command(flatten)]
    pub ignored: IgnoredFlags,
}

/// `--logging-format`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoggingFormat {
    Text,
    Json,
}

impl From<LoggingFormat> for LogFormat {
    fn from(f: LoggingFormat) -> Self {
        match f {
            LoggingFormat::Text => LogFormat::Plain,
            LoggingFormat::Json => LogFormat::Json,
        }
    }
}

/// One `Name=bool` of `--feature-gates`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureGate {
    pub name: String,
    pub enabled: bool,
}

impl fmt::Display for FeatureGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.enabled)
    }
}

fn feature_gate(s: &str) -> Result<FeatureGate, String> {
    let s = s.trim();
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("missing bool value for {s}"))?;
    let enabled = go_bool(value.trim())
        .map_err(|_| format!("invalid value of {name}={value}, err: strconv.ParseBool"))?;
    Ok(FeatureGate {
        name: name.trim().to_owned(),
        enabled,
    })
}

/// A boolean in Go's `strconv.ParseBool` syntax, as upstream's flags take.
pub fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {s:?} (true or false)")),
    }
}

fn master_url(s: &str) -> Result<String, String> {
    let err = || format!("--master must be a URL such as https://10.0.0.1:6443, not {s:?}");
    let uri: http::Uri = s.parse().map_err(|_| err())?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(s.to_owned()),
        _ => Err(err()),
    }
}

/// `--master` as a URI (validated when parsed).
pub fn master_uri(master: &str) -> http::Uri {
    master.parse().expect("validated by the flag's parser")
}

/// The tracing filter `-v N` stands for (used when RUST_LOG is unset): our
/// crates (the controller, its runtime, the provider SDK) get more detail,
/// dependencies stay at info.
pub fn verbosity_filter(v: u32) -> String {
    let ours = match v {
        0 | 1 => return "info".to_owned(),
        2 | 3 => "debug",
        _ => "trace",
    };
    format!("info,cloud_controller_manager={ours},ccm_runtime={ours},ccm_provider_sdk={ours}")
}

/// How an ignored flag's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Go boolean: `--flag`, `--flag=true`, `--flag=false`.
    Bool,
    Int,
    /// Go duration (`10s`, `1m30s`).
    Duration,
    String,
    /// String slice: commas and repetition.
    List,
    /// Repeatable, never split (values contain commas: `--tls-sni-cert-key`).
    Repeated,
    /// klog severity: a number 0-3 or INFO, WARNING, ERROR, FATAL.
    Severity,
}

/// An upstream flag accepted and ignored.
#[derive(Debug)]
pub struct Ignored {
    /// Without the leading dashes.
    pub name: &'static str,
    /// klog's own spelling with underscores, when it has one.
    pub alias: Option<&'static str>,
    pub kind: Kind,
    /// Upstream's default, in the flag's syntax.
    pub default: &'static str,
    /// Other values that ask for nothing we do not do (turning off
    /// something we do not have): no warning.
    pub quiet: &'static [&'static str],
    pub reason: &'static str,
}

const fn flag(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    reason: &'static str,
) -> Ignored {
    Ignored {
        name,
        alias: None,
        kind,
        default,
        quiet: &[],
        reason,
    }
}

const fn quiet(mut f: Ignored, values: &'static [&'static str]) -> Ignored {
    f.quiet = values;
    f
}

const fn alias(mut f: Ignored, alias: &'static str) -> Ignored {
    f.alias = Some(alias);
    f
}

const NODE_IPAM: &str = "node-ipam is not implemented here: Node pod CIDRs must come from kube-controller-manager's node-ipam or the CNI";
const CERT_DIR: &str = "the self-signed serving certificate is kept in memory; give --tls-cert-file and --tls-private-key-file to serve your own";
const TLS_TUNING: &str =
    "TLS 1.2 and 1.3 with rustls's default cipher suites and key exchange groups";
const HTTP_TUNING: &str = "the secure port serves HTTP/1.1 and HTTP/2 with hyper's defaults";
const SHARING: &str = "the secure port is bound exclusively";
const AUTH_KUBECONFIG: &str = "TokenReview and SubjectAccessReview go to the cluster of --kubeconfig, as the controller's own identity";
const CLIENT_CERTS: &str = "client certificates and front-proxy headers are not accepted on the secure port: authenticate with a bearer token";
const WEBHOOK: &str = "no webhook server here (upstream serves none either unless a provider registers one behind the CloudControllerManagerWebhook gate)";
const PROFILING: &str = "no /debug/pprof here";
const MIGRATION: &str = "leader migration is not supported: the Lease is --leader-elect-resource-namespace/--leader-elect-resource-name";
const KLOG: &str = "logs always go to stderr, formatted by --log-format; klog's own flags were removed upstream in 1.26";
const LOG_STREAMS: &str = "logs always go to stderr, unbuffered";

/// Every upstream flag accepted and ignored: upstream's default, and why.
pub const IGNORED: &[Ignored] = &[
    // generic
    flag("allocate-node-cidrs", Kind::Bool, "false", NODE_IPAM),
    flag(
        "cidr-allocator-type",
        Kind::String,
        "RangeAllocator",
        NODE_IPAM,
    ),
    flag(
        "use-service-account-credentials",
        Kind::Bool,
        "false",
        "this controller uses the one identity its pod runs as; its RBAC is deploy/base/clusterrole.yaml",
    ),
    flag(
        "external-cloud-volume-plugin",
        Kind::String,
        "",
        "in-tree cloud volume plugins do not exist here",
    ),
    flag(
        "node-sync-period",
        Kind::Duration,
        "0s",
        "deprecated upstream, where it has no effect either",
    ),
    flag(
        "min-resync-period",
        Kind::Duration,
        "12h",
        "watches here never resync; periodic work has its own flags",
    ),
    quiet(
        flag(
            "kube-api-content-type",
            Kind::String,
            "application/vnd.kubernetes.protobuf",
            "requests to the kube-apiserver always use JSON",
        ),
        &["application/json"],
    ),
    flag(
        "controller-start-interval",
        Kind::Duration,
        "0s",
        "controllers start together once the Lease is ours",
    ),
    // debugging
    quiet(flag("profiling", Kind::Bool, "true", PROFILING), &["false"]),
    flag("contention-profiling", Kind::Bool, "false", PROFILING),
    // leader migration
    flag("enable-leader-migration", Kind::Bool, "false", MIGRATION),
    flag("leader-migration-config", Kind::String, "", MIGRATION),
    // secure serving (--bind-address, --secure-port, --tls-cert-file and
    // --tls-private-key-file are ours)
    flag("cert-dir", Kind::String, "", CERT_DIR),
    flag("tls-cipher-suites", Kind::List, "", TLS_TUNING),
    flag("tls-curve-preferences", Kind::List, "", TLS_TUNING),
    flag("tls-min-version", Kind::String, "", TLS_TUNING),
    flag("tls-sni-cert-key", Kind::Repeated, "", CERT_DIR),
    flag(
        "http2-max-streams-per-connection",
        Kind::Int,
        "0",
        HTTP_TUNING,
    ),
    flag("disable-http2-serving", Kind::Bool, "false", HTTP_TUNING),
    flag("permit-port-sharing", Kind::Bool, "false", SHARING),
    flag("permit-address-sharing", Kind::Bool, "false", SHARING),
    // authentication (the TokenReview cache TTL is ours)
    flag(
        "authentication-kubeconfig",
        Kind::String,
        "",
        AUTH_KUBECONFIG,
    ),
    quiet(
        flag(
            "authentication-skip-lookup",
            Kind::Bool,
            "false",
            CLIENT_CERTS,
        ),
        &["true"],
    ),
    flag(
        "authentication-tolerate-lookup-failure",
        Kind::Bool,
        "false",
        CLIENT_CERTS,
    ),
    flag("client-ca-file", Kind::String, "", CLIENT_CERTS),
    flag(
        "requestheader-client-ca-file",
        Kind::String,
        "",
        CLIENT_CERTS,
    ),
    flag("requestheader-allowed-names", Kind::List, "", CLIENT_CERTS),
    flag(
        "requestheader-username-headers",
        Kind::List,
        "x-remote-user",
        CLIENT_CERTS,
    ),
    flag("requestheader-uid-headers", Kind::List, "", CLIENT_CERTS),
    flag(
        "requestheader-group-headers",
        Kind::List,
        "x-remote-group",
        CLIENT_CERTS,
    ),
    flag(
        "requestheader-extra-headers-prefix",
        Kind::List,
        "x-remote-extra-",
        CLIENT_CERTS,
    ),
    // authorization (the always-allow paths and cache TTLs are ours)
    flag(
        "authorization-kubeconfig",
        Kind::String,
        "",
        AUTH_KUBECONFIG,
    ),
    // webhook server
    flag("webhooks", Kind::List, "", WEBHOOK),
    flag("webhook-bind-address", Kind::String, "0.0.0.0", WEBHOOK),
    quiet(
        flag("webhook-secure-port", Kind::Int, "10260", WEBHOOK),
        &["0"],
    ),
    flag("webhook-cert-dir", Kind::String, "", WEBHOOK),
    flag("webhook-tls-cert-file", Kind::String, "", WEBHOOK),
    flag("webhook-tls-private-key-file", Kind::String, "", WEBHOOK),
    flag("webhook-tls-cipher-suites", Kind::List, "", WEBHOOK),
    flag("webhook-tls-curve-preferences", Kind::List, "", WEBHOOK),
    flag("webhook-tls-min-version", Kind::String, "", WEBHOOK),
    flag("webhook-tls-sni-cert-key", Kind::Repeated, "", WEBHOOK),
    flag(
        "webhook-disable-http2-serving",
        Kind::Bool,
        "false",
        WEBHOOK,
    ),
    // node-ipam (k/k's sample binary only)
    flag("service-cluster-ip-range", Kind::String, "", NODE_IPAM),
    flag("node-cidr-mask-size", Kind::Int, "0", NODE_IPAM),
    flag("node-cidr-mask-size-ipv4", Kind::Int, "24", NODE_IPAM),
    flag("node-cidr-mask-size-ipv6", Kind::Int, "64", NODE_IPAM),
    // logging (component-base); -v and --logging-format are mapped
    flag(
        "vmodule",
        Kind::String,
        "",
        "per-Go-file verbosity has no counterpart; use RUST_LOG (e.g. cloud_controller_manager::controllers::node_route=debug)",
    ),
    flag("log-flush-frequency", Kind::Duration, "5s", LOG_STREAMS),
    flag("log-text-split-stream", Kind::Bool, "false", LOG_STREAMS),
    flag("log-text-info-buffer-size", Kind::String, "0", LOG_STREAMS),
    flag("log-json-split-stream", Kind::Bool, "false", LOG_STREAMS),
    flag("log-json-info-buffer-size", Kind::String, "0", LOG_STREAMS),
    // klog's flags, still in older providers' manifests
    flag("logtostderr", Kind::Bool, "true", KLOG),
    flag("alsologtostderr", Kind::Bool, "false", KLOG),
    alias(flag("log-dir", Kind::String, "", KLOG), "log_dir"),
    alias(flag("log-file", Kind::String, "", KLOG), "log_file"),
    alias(
        flag("log-file-max-size", Kind::Int, "1800", KLOG),
        "log_file_max_size",
    ),
    alias(
        flag("skip-headers", Kind::Bool, "false", KLOG),
        "skip_headers",
    ),
    alias(
        flag("skip-log-headers", Kind::Bool, "false", KLOG),
        "skip_log_headers",
    ),
    alias(
        flag("add-dir-header", Kind::Bool, "false", KLOG),
        "add_dir_header",
    ),
    alias(flag("one-output", Kind::Bool, "false", KLOG), "one_output"),
    flag("stderrthreshold", Kind::Severity, "2", KLOG),
    alias(
        flag("log-backtrace-at", Kind::String, ":0", KLOG),
        "log_backtrace_at",
    ),
];

impl Ignored {
    fn arg(&'static self) -> Arg {
        let mut arg = Arg::new(self.name)
            .long(self.name)
            .hide(true)
            .help(self.reason);
        if let Some(alias) = self.alias {
            arg = arg.alias(alias);
        }
        match self.kind {
            Kind::Bool => arg
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .value_parser(|s: &str| go_bool(s).map(|b| b.to_string()))
                .action(ArgAction::Set),
            Kind::Int => arg
                .value_parser(|s: &str| {
                    s.trim()
                        .parse::<i64>()
                        .map(|n| n.to_string())
                        .map_err(|_| format!("invalid integer {s:?}"))
                })
                .action(ArgAction::Set),
            Kind::Duration => arg
                .value_parser(|s: &str| duration::parse(s).map(|_| s.to_owned()))
                .action(ArgAction::Set),
            Kind::String => arg
                .value_parser(clap::value_parser!(String))
                .action(ArgAction::Set),
            Kind::List => arg
                .value_delimiter(',')
                .value_parser(clap::value_parser!(String))
                .action(ArgAction::Append),
            Kind::Repeated => arg
                .value_parser(clap::value_parser!(String))
                .action(ArgAction::Append),
            Kind::Severity => arg
                .value_parser(|s: &str| severity(s).map(|n| n.to_string()))
                .action(ArgAction::Set),
        }
    }

    /// Whether `values` ask for nothing beyond what we do.
    fn is_quiet(&self, values: &[String]) -> bool {
        let normal = |s: &str| -> Option<String> {
            match self.kind {
                Kind::Duration => duration::parse(s).ok().map(|d| format!("{d:?}")),
                Kind::Severity => severity(s).ok().map(|n| n.to_string()),
                _ => Some(s.to_owned()),
            }
        };
        let given: Vec<Option<String>> = match self.kind {
            Kind::List | Kind::Repeated => values
                .iter()
                .filter(|v| !v.is_empty())
                .map(|v| normal(v))
                .collect(),
            _ => values.iter().map(|v| normal(v)).collect(),
        };
        std::iter::once(self.default)
            .chain(self.quiet.iter().copied())
            .any(|q| {
                let q: Vec<Option<String>> = match self.kind {
                    Kind::List | Kind::Repeated => {
                        q.split(',').filter(|v| !v.is_empty()).map(normal).collect()
                    }
                    _ => vec![normal(q)],
                };
                q == given
            })
    }
}

fn severity(s: &str) -> Result<u8, String> {
    match s.trim().to_ascii_uppercase().as_str() {
        "0" | "INFO" => Ok(0),
        "1" | "WARNING" => Ok(1),
        "2" | "ERROR" => Ok(2),
        "3" | "FATAL" => Ok(3),
        _ => Err(format!(
            "invalid severity {s:?} (0-3, INFO, WARNING, ERROR or FATAL)"
        )),
    }
}

/// The ignored flags given, with their values in the order given.
#[derive(Debug, Clone, Default)]
pub struct IgnoredFlags {
    pub given: Vec<(&'static Ignored, Vec<String>)>,
}

impl IgnoredFlags {
    /// The values of `--name`, if given.
    pub fn get(&self, name: &str) -> Option<&[String]> {
        self.given
            .iter()
            .find(|(f, _)| f.name == name)
            .map(|(_, v)| v.as_slice())
    }
}

impl clap::FromArgMatches for IgnoredFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = IgnoredFlags::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for spec in IGNORED {
            if let Some(values) = matches.get_many::<String>(spec.name) {
                let values = values.cloned().collect();
                self.given.retain(|(f, _)| f.name != spec.name);
                self.given.push((spec, values));
            }
        }
        Ok(())
    }
}

impl Args for IgnoredFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        IGNORED.iter().fold(cmd, |cmd, spec| cmd.arg(spec.arg()))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// One warning line about an upstream flag given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatWarning {
    /// Without the leading dashes.
    pub flag: &'static str,
    pub value: String,
    pub message: String,
    /// Accepted and ignored (otherwise: used, with a caveat).
    pub ignored: bool,
}

impl fmt::Display for CompatWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ignored {
            write!(
                f,
                "flag accepted for compatibility and ignored: --{}={} ({})",
                self.flag, self.value, self.message
            )
        } else {
            write!(
                f,
                "flag accepted for compatibility: --{}={}: {}",
                self.flag, self.value, self.message
            )
        }
    }
}

/// The upstream flags given whose value asks for something we do not do,
/// one entry per flag, in a stable order: to be logged once each at start.
pub fn warnings(opts: &Options) -> Vec<CompatWarning> {
    let compat = &opts.compat;
    let mut out = Vec::new();
    if let Some(path) = &compat.cloud_config {
        out.push(CompatWarning {
            flag: "cloud-config",
            value: path.clone(),
            message: "the provider is a separate process and reads its own configuration: mount this file into the provider container and pass it in the provider's own arguments (see docs/deploy.md)".into(),
            ignored: true,
        });
    }
    if !compat.feature_gates.is_empty() {
        out.push(CompatWarning {
            flag: "feature-gates",
            value: compat
                .feature_gates
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            message: "no upstream feature gate applies here".into(),
            ignored: true,
        });
    }
    if !opts.leader_election.leader_elect && compat.leader_elect_resource_lock != "leases" {
        out.push(CompatWarning {
            flag: "leader-elect-resource-lock",
            value: compat.leader_elect_resource_lock.clone(),
            message: "leader election is off; only \"leases\" exists".into(),
            ignored: true,
        });
    }
    for (spec, values) in &compat.ignored.given {
        if !spec.is_quiet(values) {
            out.push(CompatWarning {
                flag: spec.name,
                value: values.join(if spec.kind == Kind::Repeated {
                    " "
                } else {
                    ","
                }),
                message: spec.reason.into(),
                ignored: true,
            });
        }
    }
    out
}

/// Checks what the compatibility flags cannot alone.
pub(super) fn validate(opts: &Options) -> Result<(), ConfigError> {
    let compat = &opts.compat;
    if opts.leader_election.leader_elect && compat.leader_elect_resource_lock != "leases" {
        return Err(ConfigError::LeaderElection(
            "resourceLock value must be \"leases\"".into(),
        ));
    }
    log_format(opts)?;
    Ok(())
}

/// The log format: `--log-format`, else `--logging-format`, else plain;
/// both given and different is an error.
pub(super) fn log_format(opts: &Options) -> Result<LogFormat, ConfigError> {
    let upstream = opts.compat.logging_format.map(LogFormat::from);
    match (opts.logging.log_format, upstream) {
        (Some(ours), Some(theirs)) if ours != theirs => Err(ConfigError::Conflict(format!(
            "--logging-format={} and --log-format={} disagree; give one",
            opts.compat
                .logging_format
                .and_then(|f| f.to_possible_value())
                .map(|v| v.get_name().to_owned())
                .unwrap_or_default(),
            ours.to_possible_value()
                .map(|v| v.get_name().to_owned())
                .unwrap_or_default(),
        ))),
        (Some(f), _) | (None, Some(f)) => Ok(f),
        (None, None) => Ok(LogFormat::Plain),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::BTreeSet;

    fn parse(args: &[&str]) -> Options {
        let mut all = vec!["cloud-controller-manager"];
        all.extend(args);
        Options::try_parse_from(all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn error_of(args: &[&str]) -> String {
        let mut all = vec!["cloud-controller-manager"];
        all.extend(args);
        Options::try_parse_from(all).unwrap_err().to_string()
    }

    fn warned(o: &Options) -> BTreeSet<&'static str> {
        let warnings = o.compat_warnings();
        let flags: BTreeSet<_> = warnings.iter().map(|w| w.flag).collect();
        assert_eq!(
            flags.len(),
            warnings.len(),
            "one line per flag: {warnings:?}"
        );
        flags
    }

    fn set(flags: &[&'static str]) -> BTreeSet<&'static str> {
        flags.iter().copied().collect()
    }

    /// Args of real upstream manifests, as written there: they parse, pass
    /// validation, map as documented and warn about exactly the flags we
    /// ignore.
    #[test]
    fn upstream_manifests_start() {
        // kubernetes/website content/en/examples/admin/cloud/ccm-example.yaml
        let o = parse(&[
            "--cloud-provider=external",
            "--leader-elect=true",
            "--use-service-account-credentials",
            "--allocate-node-cidrs=true",
            "--configure-cloud-routes=true",
            "--cluster-cidr=172.17.0.0/16",
        ]);
        o.validate().unwrap();
        assert!(o.leader_election.leader_elect);
        assert!(o.controllers.configure_cloud_routes);
        assert_eq!(
            warned(&o),
            set(&["use-service-account-credentials", "allocate-node-cidrs"])
        );

        // A typical AWS CCM (kubernetes/cloud-provider-aws DaemonSet).
        let o = parse(&[
            "--cloud-provider=aws",
            "--use-service-account-credentials=true",
            "--configure-cloud-routes=false",
            "--v=2",
        ]);
        o.validate().unwrap();
        assert!(!o.controllers.configure_cloud_routes);
        assert_eq!(o.log_filter(), verbosity_filter(2));
        assert_eq!(warned(&o), set(&["use-service-account-credentials"]));

        // A typical GCP CCM (kubernetes/cloud-provider-gcp).
        let o = parse(&[
            "--cloud-provider=gce",
            "--v=2",
            "--cloud-config=/etc/gce.conf",
            "--allocate-node-cidrs=true",
            "--cluster-cidr=10.64.0.0/14",
            "--cluster-name=my-cluster",
            "--configure-cloud-routes=true",
            "--leader-elect=true",
            "--use-service-account-credentials=true",
            "--bind-address=127.0.0.1",
            "--secure-port=10258",
            "--authentication-kubeconfig=/etc/srv/kubernetes/cloud-controller-manager/kubeconfig",
            "--authorization-kubeconfig=/etc/srv/kubernetes/cloud-controller-manager/kubeconfig",
            "--kubeconfig=/etc/srv/kubernetes/cloud-controller-manager/kubeconfig",
            "--cidr-allocator-type=RangeAllocator",
            "--profiling=false",
        ]);
        o.validate().unwrap();
        assert_eq!(o.controllers.cluster_name, "my-cluster");
        assert_eq!(o.admin.bind_address, std::net::IpAddr::from([127, 0, 0, 1]));
        assert_eq!(o.admin.secure_port, 10258);
        assert_eq!(o.compat.cloud_config.as_deref(), Some("/etc/gce.conf"));
        assert_eq!(
            warned(&o),
            set(&[
                "cloud-config",
                "allocate-node-cidrs",
                "use-service-account-credentials",
                "authentication-kubeconfig",
                "authorization-kubeconfig",
            ]),
            "--cidr-allocator-type and --profiling=false are at their no-op values"
        );
        let cloud_config = o
            .compat_warnings()
            .into_iter()
            .find(|w| w.flag == "cloud-config")
            .unwrap()
            .to_string();
        assert!(
            cloud_config.starts_with(
                "flag accepted for compatibility and ignored: --cloud-config=/etc/gce.conf ("
            ),
            "{cloud_config}"
        );

        // hetznercloud/hcloud-cloud-controller-manager (networks variant).
        let o = parse(&[
            "--allow-untagged-cloud",
            "--cloud-provider=hcloud",
            "--route-reconciliation-period=30s",
            "--webhook-secure-port=0",
            "--allocate-node-cidrs=true",
            "--cluster-cidr=10.244.0.0/16",
            "--leader-elect=false",
        ]);
        o.validate().unwrap();
        assert!(o.compat.allow_untagged_cloud);
        assert!(!o.leader_election.leader_elect);
        assert_eq!(
            o.controllers.route_reconciliation_period,
            std::time::Duration::from_secs(30)
        );
        assert_eq!(warned(&o), set(&["allocate-node-cidrs"]));

        // kubernetes/cloud-provider-openstack DaemonSet.
        let o = parse(&[
            "--v=1",
            "--cluster-name=kubernetes",
            "--cloud-config=/etc/config/cloud.conf",
            "--cloud-provider=openstack",
            "--use-service-account-credentials=false",
            "--bind-address=127.0.0.1",
        ]);
        o.validate().unwrap();
        assert_eq!(o.log_filter(), "info");
        assert_eq!(warned(&o), set(&["cloud-config"]));

        // Everything at once, the example.
        let o = parse(&[
            "--cloud-provider=aws",
            "--use-service-account-credentials",
            "--configure-cloud-routes=false",
            "--v=2",
            "--cloud-config=/etc/kubernetes/cloud.conf",
            "--allocate-node-cidrs=false",
            "--leader-elect=true",
            "--secure-port=10258",
            "--bind-address=127.0.0.1",
            "--authentication-kubeconfig=/etc/kubernetes/ccm.conf",
            "--authorization-kubeconfig=/etc/kubernetes/ccm.conf",
            "--feature-gates=CloudControllerManagerWebhook=false",
            "--logging-format=json",
            "--profiling",
            "--kube-api-content-type=application/json",
            "--leader-elect-resource-lock=leases",
            "--master=https://10.0.0.1:6443",
        ]);
        o.validate().unwrap();
        assert_eq!(o.log_format(), LogFormat::Json);
        assert_eq!(o.compat.master.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(
            o.compat.feature_gates,
            vec![FeatureGate {
                name: "CloudControllerManagerWebhook".into(),
                enabled: false
            }]
        );
        assert_eq!(
            warned(&o),
            set(&[
                "use-service-account-credentials",
                "cloud-config",
                "authentication-kubeconfig",
                "authorization-kubeconfig",
                "feature-gates",
            ])
        );
    }

    /// Section 6.2 of the upstream reference, one representative value each.
    const UPSTREAM_FLAGS: &[&str] = &[
        // generic
        "--cloud-provider=external",
        "--cloud-config=/etc/cloud.conf",
        "--cluster-name=prod",
        "--cluster-cidr=10.244.0.0/16,fd00::/56",
        "--allocate-node-cidrs=true",
        "--cidr-allocator-type=CloudAllocator",
        "--configure-cloud-routes=false",
        "--route-reconciliation-period=1m",
        "--node-monitor-period=10s",
        "--use-service-account-credentials",
        "--external-cloud-volume-plugin=aws",
        "--allow-untagged-cloud=true",
        "--node-sync-period=10s",
        "--controllers=*,-route",
        "--min-resync-period=6h",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
        "--kube-api-content-type=application/json",
        "--controller-start-interval=2s",
        "--leader-elect=false",
        "--leader-elect-lease-duration=30s",
        "--leader-elect-renew-deadline=5s",
        "--leader-elect-retry-period=4s",
        "--leader-elect-resource-lock=leases",
        "--leader-elect-resource-name=ccm",
        "--leader-elect-resource-namespace=kube-system",
        "--feature-gates=CloudControllerManagerWebhook=true,CloudControllerManagerWatchBasedRoutesReconciliation=false",
        // cloud-node, service
        "--concurrent-node-syncs=2",
        "--concurrent-node-status-updates=4",
        "--concurrent-service-syncs=3",
        // misc
        "--master=https://127.0.0.1:6443",
        "--kubeconfig=/etc/kubernetes/ccm.conf",
        "--node-status-update-frequency=1m",
        // debugging
        "--profiling=false",
        "--contention-profiling",
        // leader migration
        "--enable-leader-migration",
        "--leader-migration-config=/etc/migration.yaml",
        // secure serving
        "--bind-address=127.0.0.1",
        "--secure-port=10258",
        "--cert-dir=/var/run/ccm",
        "--tls-cert-file=/etc/tls.crt",
        "--tls-private-key-file=/etc/tls.key",
        "--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384",
        "--tls-curve-preferences=X25519,CurveP256",
        "--tls-min-version=VersionTLS12",
        "--tls-sni-cert-key=/etc/a.crt,/etc/a.key:*.example.com",
        "--http2-max-streams-per-connection=1000",
        "--disable-http2-serving",
        "--permit-port-sharing=true",
        "--permit-address-sharing",
        // authentication
        "--authentication-kubeconfig=/etc/kubernetes/ccm.conf",
        "--authentication-token-webhook-cache-ttl=30s",
        "--authentication-skip-lookup",
        "--authentication-tolerate-lookup-failure=true",
        "--client-ca-file=/etc/ca.crt",
        "--requestheader-client-ca-file=/etc/front-proxy-ca.crt",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-uid-headers=X-Remote-Uid",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        // authorization
        "--authorization-kubeconfig=/etc/kubernetes/ccm.conf",
        "--authorization-webhook-cache-authorized-ttl=1m",
        "--authorization-webhook-cache-unauthorized-ttl=5s",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        // webhook
        "--webhooks=*",
        "--webhook-bind-address=127.0.0.1",
        "--webhook-secure-port=10260",
        "--webhook-cert-dir=/var/run/ccm-webhook",
        "--webhook-tls-cert-file=/etc/w.crt",
        "--webhook-tls-private-key-file=/etc/w.key",
        "--webhook-tls-cipher-suites=TLS_AES_128_GCM_SHA256",
        "--webhook-tls-curve-preferences=X25519",
        "--webhook-tls-min-version=VersionTLS13",
        "--webhook-tls-sni-cert-key=/etc/w.crt,/etc/w.key",
        "--webhook-disable-http2-serving=true",
        // node-ipam
        "--service-cluster-ip-range=10.96.0.0/12",
        "--node-cidr-mask-size=24",
        "--node-cidr-mask-size-ipv4=25",
        "--node-cidr-mask-size-ipv6=80",
        // global / logging
        "-v=4",
        "--vmodule=node_controller=4",
        "--logging-format=text",
        "--log-flush-frequency=10s",
        "--log-text-split-stream",
        "--log-text-info-buffer-size=1Mi",
        "--log-json-split-stream=false",
        "--log-json-info-buffer-size=0",
        "--logtostderr=false",
        "--alsologtostderr",
        "--log-dir=/var/log",
        "--log_dir=/var/log",
        "--log-file=/var/log/ccm.log",
        "--log_file=/var/log/ccm.log",
        "--log-file-max-size=100",
        "--skip-headers",
        "--skip-log-headers=true",
        "--add-dir-header",
        "--one-output=true",
        "--stderrthreshold=INFO",
        "--stderrthreshold=1",
        "--log-backtrace-at=node_controller.go:100",
    ];

    #[test]
    fn every_upstream_flag_parses() {
        for flag in UPSTREAM_FLAGS {
            // The serving certificate and its key go together, as upstream.
            let partner = match flag.split('=').next() {
                Some("--tls-cert-file") => Some("--tls-private-key-file=/etc/tls.key"),
                Some("--tls-private-key-file") => Some("--tls-cert-file=/etc/tls.crt"),
                _ => None,
            };
            let o = parse(
                &[Some(*flag), partner]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>(),
            );
            o.validate().unwrap_or_else(|e| panic!("{flag}: {e}"));
        }
        // And all of them together (later repetitions win, as Go's flags).
        let o = parse(UPSTREAM_FLAGS);
        o.validate().unwrap();
        // Every ignored flag is in the list above.
        for spec in IGNORED {
            let long = format!("--{}=", spec.name);
            let bare = format!("--{}", spec.name);
            assert!(
                UPSTREAM_FLAGS
                    .iter()
                    .any(|f| f.starts_with(&long) || **f == bare),
                "{} is not exercised",
                spec.name
            );
        }
    }

    #[test]
    fn unknown_flags_and_bad_values_still_fail() {
        for (args, message) in [
            (&["--bogus"][..], "unexpected argument '--bogus'"),
            (&["--cloud-confg=/x"], "unexpected argument '--cloud-confg'"),
            (
                &["--use-service-account-credentials=maybe"],
                "invalid boolean",
            ),
            (
                &["--leader-elect", "false"],
                "unrecognized subcommand 'false'",
            ),
            (&["--secure-port=70000"], "70000"),
            (&["--v=-1"], "invalid value '-1'"),
            (&["--logging-format=yaml"], "possible values: text, json"),
            (&["--feature-gates=Foo"], "missing bool value for Foo"),
            (&["--feature-gates=Foo=maybe"], "invalid value of Foo=maybe"),
            (&["--node-sync-period=10"], "invalid duration"),
            (&["--http2-max-streams-per-connection=x"], "invalid integer"),
            (&["--stderrthreshold=LOUD"], "invalid severity"),
            (&["--master=10.0.0.1:6443"], "--master must be a URL"),
        ] {
            let err = error_of(args);
            assert!(err.contains(message), "{args:?}: {err}");
        }
    }

    #[test]
    fn go_booleans() {
        for (arg, want) in [
            ("--leader-elect", true),
            ("--leader-elect=true", true),
            ("--leader-elect=false", false),
            ("--leader-elect=0", false),
            ("--leader-elect=T", true),
        ] {
            assert_eq!(parse(&[arg]).leader_election.leader_elect, want, "{arg}");
        }
        assert!(
            parse(&["--configure-cloud-routes"])
                .controllers
                .configure_cloud_routes
        );
        assert!(
            !parse(&["--configure-cloud-routes=False"])
                .controllers
                .configure_cloud_routes
        );
        assert!(!parse(&[]).compat.allow_untagged_cloud);
        assert!(
            parse(&["--allow-untagged-cloud"])
                .compat
                .allow_untagged_cloud
        );
        assert!(
            !parse(&["--allow-untagged-cloud=false"])
                .compat
                .allow_untagged_cloud
        );
        let o = parse(&["--use-service-account-credentials=false"]);
        assert_eq!(
            o.compat.ignored.get("use-service-account-credentials"),
            Some(&["false".to_owned()][..])
        );
        assert!(warned(&o).is_empty());
    }

    #[test]
    fn verbosity_maps_onto_the_tracing_filter() {
        for args in [
            &["-v=3"][..],
            &["--v=3"],
            &["-v", "3"],
            &["--v", "3"],
            &["-v3"],
        ] {
            assert_eq!(parse(args).compat.verbosity, Some(3), "{args:?}");
        }
        assert_eq!(parse(&[]).log_filter(), "info");
        assert_eq!(parse(&["--v=0"]).log_filter(), "info");
        assert_eq!(parse(&["--v=1"]).log_filter(), "info");
        assert_eq!(
            parse(&["--v=2"]).log_filter(),
            "info,cloud_controller_manager=debug,ccm_runtime=debug,ccm_provider_sdk=debug"
        );
        assert_eq!(
            parse(&["--v=10"]).log_filter(),
            "info,cloud_controller_manager=trace,ccm_runtime=trace,ccm_provider_sdk=trace"
        );
        // The last one wins, as Go's flags.
        assert_eq!(parse(&["--v=2", "--v=5"]).compat.verbosity, Some(5));
        for v in [0, 2, 4] {
            tracing_subscriber::EnvFilter::try_new(verbosity_filter(v)).unwrap();
        }
    }

    #[test]
    fn logging_format_is_log_format() {
        assert_eq!(
            parse(&["--logging-format=text"]).log_format(),
            LogFormat::Plain
        );
        assert_eq!(
            parse(&["--logging-format=json"]).log_format(),
            LogFormat::Json
        );
        let o = parse(&["--logging-format=json", "--log-format=json"]);
        o.validate().unwrap();
        assert_eq!(o.log_format(), LogFormat::Json);
        let o = parse(&["--logging-format=json", "--log-format=plain"]);
        assert_eq!(
            o.validate().unwrap_err().to_string(),
            "--logging-format=json and --log-format=plain disagree; give one"
        );
    }

    #[test]
    fn serving_flags_are_upstreams_and_checked_together() {
        let o = parse(&["--secure-port=9443", "--admin-port=9000"]);
        o.validate().unwrap();
        assert_eq!((o.admin.secure_port, o.admin.admin_port), (9443, 9000));
        assert!(o.compat_warnings().is_empty(), "both are flags of ours");
        let o = parse(&["--secure-port=0"]);
        o.validate().unwrap();
        assert_eq!(o.admin.secure_port, 0);
        for (args, message) in [
            (
                &["--secure-port=9443", "--admin-port=9443"][..],
                "--admin-port=9443 and --secure-port=9443: one port cannot serve both plain HTTP and HTTPS",
            ),
            (
                &["--tls-cert-file=/etc/tls.crt"],
                "--tls-cert-file and --tls-private-key-file go together: give both or neither",
            ),
            (
                &["--tls-private-key-file=/etc/tls.key"],
                "--tls-cert-file and --tls-private-key-file go together: give both or neither",
            ),
        ] {
            assert_eq!(
                parse(args).validate().unwrap_err().to_string(),
                message,
                "{args:?}"
            );
        }
        let o = parse(&["--authorization-always-allow-paths=/healthz,/metrics*"]);
        assert_eq!(
            o.admin.authorization_always_allow_paths,
            ["/healthz", "/metrics*"]
        );
    }

    #[test]
    fn only_leases_lock() {
        parse(&["--leader-elect-resource-lock=leases"])
            .validate()
            .unwrap();
        for lock in ["endpoints", "configmapsleases", "endpointsleases"] {
            let o = parse(&[&format!("--leader-elect-resource-lock={lock}")]);
            assert_eq!(
                o.validate().unwrap_err().to_string(),
                "resourceLock value must be \"leases\""
            );
            // Without leader election upstream does not check it either.
            let o = parse(&[
                "--leader-elect=false",
                &format!("--leader-elect-resource-lock={lock}"),
            ]);
            o.validate().unwrap();
            assert_eq!(warned(&o), set(&["leader-elect-resource-lock"]));
        }
    }

    #[test]
    fn ignored_flags_warn_once_unless_at_their_no_op_value() {
        // Spelled-out defaults and "off" values ask for nothing.
        let o = parse(&[
            "--profiling=true",
            "--profiling=false",
            "--contention-profiling=false",
            "--kube-api-content-type=application/vnd.kubernetes.protobuf",
            "--min-resync-period=12h0m0s",
            "--node-sync-period=0s",
            "--webhook-secure-port=0",
            "--logtostderr",
            "--stderrthreshold=ERROR",
            "--authorization-always-allow-paths=/healthz,/readyz",
            "--authorization-always-allow-paths=/livez",
            "--requestheader-username-headers=x-remote-user",
            "--tls-cipher-suites=",
        ]);
        assert!(o.compat_warnings().is_empty(), "{:?}", o.compat_warnings());
        // Anything else: one line per flag, even when repeated.
        let o = parse(&[
            "--tls-sni-cert-key=/a.crt,/a.key:a.example",
            "--tls-sni-cert-key=/b.crt,/b.key",
            "--feature-gates=A=true",
            "--feature-gates=B=false",
            "--kube-api-content-type=application/yaml",
            "--log_dir=/var/log",
        ]);
        let w = o.compat_warnings();
        assert_eq!(
            w.iter()
                .map(|w| (w.flag, w.value.as_str()))
                .collect::<Vec<_>>(),
            vec![
                ("feature-gates", "A=true,B=false"),
                ("kube-api-content-type", "application/yaml"),
                ("tls-sni-cert-key", "/a.crt,/a.key:a.example /b.crt,/b.key"),
                ("log-dir", "/var/log"),
            ]
        );
        assert!(w.iter().all(|w| w.ignored));
        assert_eq!(
            w[1].to_string(),
            "flag accepted for compatibility and ignored: --kube-api-content-type=application/yaml (requests to the kube-apiserver always use JSON)"
        );
    }

    #[test]
    fn lists_take_commas_and_repetition() {
        let o = parse(&["--controllers=*", "--controllers=-route,-service"]);
        assert_eq!(o.controllers.controllers, ["*", "-route", "-service"]);
        let o = parse(&["--webhooks=a,b", "--webhooks=c"]);
        assert_eq!(
            o.compat.ignored.get("webhooks").unwrap(),
            ["a", "b", "c"].map(String::from)
        );
    }

    /// docs/controller.md lists every flag accepted for compatibility.
    #[test]
    fn every_ignored_flag_is_documented() {
        let docs = include_str!("../../../docs/controller.md");
        for name in IGNORED.iter().map(|f| f.name).chain([
            "cloud-config",
            "allow-untagged-cloud",
            "feature-gates",
            "master",
            "leader-elect-resource-lock",
            "logging-format",
        ]) {
            assert!(
                docs.contains(&format!("`--{name}")),
                "--{name} is not in docs/controller.md"
            );
        }
    }

    #[tokio::test]
    async fn master_replaces_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: https://192.0.2.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: secret\n",
        )
        .unwrap();
        let kubeconfig = format!("--kubeconfig={}", path.display());
        let config = parse(&[&kubeconfig]).kube_config().await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://192.0.2.1:6443/");
        let config = parse(&[&kubeconfig, "--master=https://198.51.100.7:8443"])
            .kube_config()
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://198.51.100.7:8443/");
        assert!(
            config.auth_info.token.is_some(),
            "credentials stay the kubeconfig's"
        );
        let config = parse(&["--master=http://127.0.0.1:8080"])
            .kube_config()
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:8080/");
        assert!(config.auth_info.token.is_none());
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::arb;

    proptest! {
        /// `--master` is checked when parsed and used later with
        /// `expect`: whatever the check accepts must never panic there.
        #[test]
        fn an_accepted_master_url_is_a_uri(
            s in prop_oneof!["(https?|ftp)://[a-z0-9.:@/%\\[\\]-]{0,20}", arb::text()],
        ) {
            if master_url(&s).is_ok() {
                let uri = master_uri(&s);
                prop_assert!(uri.host().is_some());
            }
        }

        #[test]
        fn flags_parse_or_fail_without_panicking(s in arb::text()) {
            prop_assert_eq!(go_bool(&s).is_ok(), ["1", "t", "T", "true", "TRUE", "True", "0", "f", "F", "false", "FALSE", "False"].contains(&s.as_str()));
            let _ = feature_gate(&s);
            let _ = severity(&s);
        }
    }
}
