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

use clap::{ArgAction, Args, ValueEnum};

use super::{ConfigError, LogFormat, Options};

mod ignored;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use ignored::{IGNORED, Ignored, IgnoredFlags, Kind};

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
/// crates get more detail, dependencies stay at info.
pub fn verbosity_filter(v: u32) -> String {
    let ours = match v {
        0 | 1 => return "info".to_owned(),
        2 | 3 => "debug",
        _ => "trace",
    };
    format!("info,cloud_controller_manager={ours},ccm_runtime={ours},ccm_provider_sdk={ours}")
}

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
