//! The upstream flags accepted and ignored: how each one's value is
//! written, upstream's default, the values that ask for nothing, and why it
//! is ignored; registered with clap as hidden arguments.

use clap::{Arg, ArgAction, ArgMatches, Args};

use super::go_bool;
use crate::config::duration;

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

impl Ignored {
    /// `values` besides the default ask for nothing either.
    const fn quiet(mut self, values: &'static [&'static str]) -> Self {
        self.quiet = values;
        self
    }

    const fn alias(mut self, alias: &'static str) -> Self {
        self.alias = Some(alias);
        self
    }
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
const ONE_IDENTITY: &str = "this controller uses the one identity its pod runs as; its RBAC is deploy/base/clusterrole.yaml";
const VOLUME_PLUGINS: &str = "in-tree cloud volume plugins do not exist here";
const NO_EFFECT: &str = "deprecated upstream, where it has no effect either";
const NO_RESYNC: &str = "watches here never resync; periodic work has its own flags";
const CONTENT_TYPE: &str = "the Node list and watch always use protobuf, every other request JSON";
const START_TOGETHER: &str = "controllers start together once the Lease is ours";
const VMODULE: &str = "per-Go-file verbosity has no counterpart; use RUST_LOG (e.g. cloud_controller_manager::controllers::node_route=debug)";

/// Every upstream flag accepted and ignored: upstream's default, and why.
#[rustfmt::skip]
pub const IGNORED: &[Ignored] = &[
    // generic
    flag("allocate-node-cidrs",                    Kind::Bool,     "false",                               NODE_IPAM),
    flag("cidr-allocator-type",                    Kind::String,   "RangeAllocator",                      NODE_IPAM),
    flag("use-service-account-credentials",        Kind::Bool,     "false",                               ONE_IDENTITY),
    flag("external-cloud-volume-plugin",           Kind::String,   "",                                    VOLUME_PLUGINS),
    flag("node-sync-period",                       Kind::Duration, "0s",                                  NO_EFFECT),
    flag("min-resync-period",                      Kind::Duration, "12h",                                 NO_RESYNC),
    flag("kube-api-content-type",                  Kind::String,   "application/vnd.kubernetes.protobuf", CONTENT_TYPE).quiet(&["application/json"]),
    flag("controller-start-interval",              Kind::Duration, "0s",                                  START_TOGETHER),
    // debugging
    flag("profiling",                              Kind::Bool,     "true",                                PROFILING).quiet(&["false"]),
    flag("contention-profiling",                   Kind::Bool,     "false",                               PROFILING),
    // leader migration
    flag("enable-leader-migration",                Kind::Bool,     "false",                               MIGRATION),
    flag("leader-migration-config",                Kind::String,   "",                                    MIGRATION),
    // secure serving (--bind-address, --secure-port, --tls-cert-file and
    // --tls-private-key-file are ours)
    flag("cert-dir",                               Kind::String,   "",                                    CERT_DIR),
    flag("tls-cipher-suites",                      Kind::List,     "",                                    TLS_TUNING),
    flag("tls-curve-preferences",                  Kind::List,     "",                                    TLS_TUNING),
    flag("tls-min-version",                        Kind::String,   "",                                    TLS_TUNING),
    flag("tls-sni-cert-key",                       Kind::Repeated, "",                                    CERT_DIR),
    flag("http2-max-streams-per-connection",       Kind::Int,      "0",                                   HTTP_TUNING),
    flag("disable-http2-serving",                  Kind::Bool,     "false",                               HTTP_TUNING),
    flag("permit-port-sharing",                    Kind::Bool,     "false",                               SHARING),
    flag("permit-address-sharing",                 Kind::Bool,     "false",                               SHARING),
    // authentication (the TokenReview cache TTL is ours)
    flag("authentication-kubeconfig",              Kind::String,   "",                                    AUTH_KUBECONFIG),
    flag("authentication-skip-lookup",             Kind::Bool,     "false",                               CLIENT_CERTS).quiet(&["true"]),
    flag("authentication-tolerate-lookup-failure", Kind::Bool,     "false",                               CLIENT_CERTS),
    flag("client-ca-file",                         Kind::String,   "",                                    CLIENT_CERTS),
    flag("requestheader-client-ca-file",           Kind::String,   "",                                    CLIENT_CERTS),
    flag("requestheader-allowed-names",            Kind::List,     "",                                    CLIENT_CERTS),
    flag("requestheader-username-headers",         Kind::List,     "x-remote-user",                       CLIENT_CERTS),
    flag("requestheader-uid-headers",              Kind::List,     "",                                    CLIENT_CERTS),
    flag("requestheader-group-headers",            Kind::List,     "x-remote-group",                      CLIENT_CERTS),
    flag("requestheader-extra-headers-prefix",     Kind::List,     "x-remote-extra-",                     CLIENT_CERTS),
    // authorization (the always-allow paths and cache TTLs are ours)
    flag("authorization-kubeconfig",               Kind::String,   "",                                    AUTH_KUBECONFIG),
    // webhook server
    flag("webhooks",                               Kind::List,     "",                                    WEBHOOK),
    flag("webhook-bind-address",                   Kind::String,   "0.0.0.0",                             WEBHOOK),
    flag("webhook-secure-port",                    Kind::Int,      "10260",                               WEBHOOK).quiet(&["0"]),
    flag("webhook-cert-dir",                       Kind::String,   "",                                    WEBHOOK),
    flag("webhook-tls-cert-file",                  Kind::String,   "",                                    WEBHOOK),
    flag("webhook-tls-private-key-file",           Kind::String,   "",                                    WEBHOOK),
    flag("webhook-tls-cipher-suites",              Kind::List,     "",                                    WEBHOOK),
    flag("webhook-tls-curve-preferences",          Kind::List,     "",                                    WEBHOOK),
    flag("webhook-tls-min-version",                Kind::String,   "",                                    WEBHOOK),
    flag("webhook-tls-sni-cert-key",               Kind::Repeated, "",                                    WEBHOOK),
    flag("webhook-disable-http2-serving",          Kind::Bool,     "false",                               WEBHOOK),
    // node-ipam (k/k's sample binary only)
    flag("service-cluster-ip-range",               Kind::String,   "",                                    NODE_IPAM),
    flag("node-cidr-mask-size",                    Kind::Int,      "0",                                   NODE_IPAM),
    flag("node-cidr-mask-size-ipv4",               Kind::Int,      "24",                                  NODE_IPAM),
    flag("node-cidr-mask-size-ipv6",               Kind::Int,      "64",                                  NODE_IPAM),
    // logging (component-base); -v and --logging-format are mapped
    flag("vmodule",                                Kind::String,   "",                                    VMODULE),
    flag("log-flush-frequency",                    Kind::Duration, "5s",                                  LOG_STREAMS),
    flag("log-text-split-stream",                  Kind::Bool,     "false",                               LOG_STREAMS),
    flag("log-text-info-buffer-size",              Kind::String,   "0",                                   LOG_STREAMS),
    flag("log-json-split-stream",                  Kind::Bool,     "false",                               LOG_STREAMS),
    flag("log-json-info-buffer-size",              Kind::String,   "0",                                   LOG_STREAMS),
    // klog's flags, still in older providers' manifests
    flag("logtostderr",                            Kind::Bool,     "true",                                KLOG),
    flag("alsologtostderr",                        Kind::Bool,     "false",                               KLOG),
    flag("log-dir",                                Kind::String,   "",                                    KLOG).alias("log_dir"),
    flag("log-file",                               Kind::String,   "",                                    KLOG).alias("log_file"),
    flag("log-file-max-size",                      Kind::Int,      "1800",                                KLOG).alias("log_file_max_size"),
    flag("skip-headers",                           Kind::Bool,     "false",                               KLOG).alias("skip_headers"),
    flag("skip-log-headers",                       Kind::Bool,     "false",                               KLOG).alias("skip_log_headers"),
    flag("add-dir-header",                         Kind::Bool,     "false",                               KLOG).alias("add_dir_header"),
    flag("one-output",                             Kind::Bool,     "false",                               KLOG).alias("one_output"),
    flag("stderrthreshold",                        Kind::Severity, "2",                                   KLOG),
    flag("log-backtrace-at",                       Kind::String,   ":0",                                  KLOG).alias("log_backtrace_at"),
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
    pub(super) fn is_quiet(&self, values: &[String]) -> bool {
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

pub(super) fn severity(s: &str) -> Result<u8, String> {
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
