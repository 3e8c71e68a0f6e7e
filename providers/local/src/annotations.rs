//! The Service annotations this provider reads: the single place that
//! names them, describes them (for `provider info` and the generated
//! docs/providers/local.md) and parses them.

use std::time::Duration;

use ccm_provider_sdk::ProviderError;
use ccm_provider_sdk::proto::{AnnotationDescription, AnnotationSchema, Service};

/// Every annotation of this provider starts with this.
pub const PREFIX: &str = "lb.local.ccm-rs.io/";

pub const MAX_QPS: &str = "lb.local.ccm-rs.io/listener-max-qps";
pub const IDLE_TIMEOUT: &str = "lb.local.ccm-rs.io/idle-timeout";
pub const HEALTH_CHECK_INTERVAL: &str = "lb.local.ccm-rs.io/health-check-interval";
pub const HEALTH_CHECK_TIMEOUT: &str = "lb.local.ccm-rs.io/health-check-timeout";
pub const UNHEALTHY_THRESHOLD: &str = "lb.local.ccm-rs.io/unhealthy-threshold";

/// What a Service's annotations ask of its load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// New TCP connections (UDP datagrams) per second each listener
    /// accepts; `None` is unlimited.
    pub max_qps: Option<u32>,
    pub idle_timeout: Duration,
    pub health_interval: Duration,
    pub health_timeout: Duration,
    pub unhealthy_threshold: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_qps: None,
            idle_timeout: Duration::from_secs(350),
            health_interval: Duration::from_secs(2),
            health_timeout: Duration::from_secs(1),
            unhealthy_threshold: 2,
        }
    }
}

struct Spec {
    key: &'static str,
    value_type: &'static str,
    default: &'static str,
    example: &'static str,
    description: &'static str,
}

const SPECS: &[Spec] = &[
    Spec {
        key: MAX_QPS,
        value_type: "integer, 1 to 10000000",
        default: "unlimited",
        example: "100000",
        description: "The most new TCP connections (for UDP: datagrams) each listener accepts per second, as a token bucket whose burst equals the rate. Connections beyond it are closed at once and counted in local_lb_rejected_total{reason=\"rate\"}. Applied to a running load balancer when the annotation changes; established connections are kept.",
    },
    Spec {
        key: IDLE_TIMEOUT,
        value_type: "duration (ms, s, m, h)",
        default: "350s",
        example: "60s",
        description: "A TCP connection with no bytes in either direction for this long is closed; a UDP flow idle this long is forgotten.",
    },
    Spec {
        key: HEALTH_CHECK_INTERVAL,
        value_type: "duration (ms, s, m, h)",
        default: "2s",
        example: "5s",
        description: "How often each backend is checked: a TCP connect to its nodePort, or with externalTrafficPolicy Local an HTTP GET of /healthz on the Service's healthCheckNodePort (200 is healthy).",
    },
    Spec {
        key: HEALTH_CHECK_TIMEOUT,
        value_type: "duration (ms, s, m, h)",
        default: "1s",
        example: "500ms",
        description: "How long one health check may take before it counts as failed. At most the interval.",
    },
    Spec {
        key: UNHEALTHY_THRESHOLD,
        value_type: "integer, 1 to 100",
        default: "2",
        example: "3",
        description: "Consecutive failed checks after which a backend gets no new connections; one successful check brings it back.",
    },
];

/// The schema `GetProviderCapabilities` answers.
pub fn schema() -> AnnotationSchema {
    AnnotationSchema {
        prefixes: vec![PREFIX.to_owned()],
        known_keys: SPECS.iter().map(|s| s.key.to_owned()).collect(),
        descriptions: SPECS
            .iter()
            .map(|s| AnnotationDescription {
                key: s.key.to_owned(),
                description: s.description.to_owned(),
                value_type: s.value_type.to_owned(),
                default_value: s.default.to_owned(),
                example: s.example.to_owned(),
            })
            .collect(),
    }
}

/// Reads the annotations; a malformed value is INVALID_ARGUMENT /
/// INVALID_ANNOTATION naming the key, so the user sees which one.
pub fn settings(service: &Service) -> Result<Settings, ProviderError> {
    let a = &service.annotations;
    let mut s = Settings::default();
    if let Some(v) = a.get(MAX_QPS) {
        s.max_qps = Some(integer(MAX_QPS, v, 1, 10_000_000)?);
    }
    if let Some(v) = a.get(IDLE_TIMEOUT) {
        s.idle_timeout = duration(IDLE_TIMEOUT, v)?;
    }
    if let Some(v) = a.get(HEALTH_CHECK_INTERVAL) {
        s.health_interval = duration(HEALTH_CHECK_INTERVAL, v)?;
    }
    if let Some(v) = a.get(HEALTH_CHECK_TIMEOUT) {
        s.health_timeout = duration(HEALTH_CHECK_TIMEOUT, v)?;
    }
    if let Some(v) = a.get(UNHEALTHY_THRESHOLD) {
        s.unhealthy_threshold = integer(UNHEALTHY_THRESHOLD, v, 1, 100)?;
    }
    if s.health_timeout > s.health_interval {
        return Err(ProviderError::invalid_annotation(
            HEALTH_CHECK_TIMEOUT,
            format!(
                "{:?} is longer than the health check interval {:?}",
                s.health_timeout, s.health_interval
            ),
        ));
    }
    Ok(s)
}

fn integer(key: &str, value: &str, min: u32, max: u32) -> Result<u32, ProviderError> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            ProviderError::invalid_annotation(
                key,
                format!("{value:?} is not an integer from {min} to {max}"),
            )
        })
}

/// `100ms`, `30s`, `5m`, `1h`, between `min` and `max`; the error says
/// what is accepted. The provider's flags take durations the same way.
pub fn parse_duration(value: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let v = value.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let millis = match (number.parse::<u64>(), unit) {
        (Ok(n), "ms") => Some(n),
        (Ok(n), "s") => n.checked_mul(1_000),
        (Ok(n), "m") => n.checked_mul(60_000),
        (Ok(n), "h") => n.checked_mul(3_600_000),
        _ => None,
    };
    millis
        .map(Duration::from_millis)
        .filter(|d| (min..=max).contains(d))
        .ok_or_else(|| {
            format!(
                "{value:?} is not a duration from {min:?} to {max:?} such as \"30s\" or \"500ms\""
            )
        })
}

/// An annotation's duration: at least 10 ms, at most 24 h.
fn duration(key: &str, value: &str) -> Result<Duration, ProviderError> {
    parse_duration(
        value,
        Duration::from_millis(10),
        Duration::from_secs(86_400),
    )
    .map_err(|e| ProviderError::invalid_annotation(key, e))
}

/// docs/providers/local.md's annotation table.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| annotation | type | default | example | what it does |\n|---|---|---|---|---|\n",
    );
    for s in SPECS {
        out.push_str(&format!(
            "| `{}` | {} | {} | `{}` | {} |\n",
            s.key,
            s.value_type,
            s.default,
            s.example,
            s.description.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(key: &str, value: &str) -> Service {
        Service {
            annotations: [(key.to_owned(), value.to_owned())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn reads_each_annotation() {
        assert_eq!(settings(&Service::default()).unwrap(), Settings::default());
        assert_eq!(
            settings(&with(MAX_QPS, "100000")).unwrap().max_qps,
            Some(100_000)
        );
        assert_eq!(
            settings(&with(IDLE_TIMEOUT, "60s")).unwrap().idle_timeout,
            Duration::from_secs(60)
        );
        assert_eq!(
            settings(&with(HEALTH_CHECK_INTERVAL, "1m"))
                .unwrap()
                .health_interval,
            Duration::from_secs(60)
        );
        assert_eq!(
            settings(&with(HEALTH_CHECK_TIMEOUT, "500ms"))
                .unwrap()
                .health_timeout,
            Duration::from_millis(500)
        );
        assert_eq!(
            settings(&with(UNHEALTHY_THRESHOLD, "3"))
                .unwrap()
                .unhealthy_threshold,
            3
        );
    }

    #[test]
    fn malformed_values_name_their_key() {
        let cases = [
            (MAX_QPS, "0"),
            (MAX_QPS, "-5"),
            (MAX_QPS, "lots"),
            (IDLE_TIMEOUT, "60"),
            (IDLE_TIMEOUT, "1ms"),
            (IDLE_TIMEOUT, "2d"),
            (HEALTH_CHECK_TIMEOUT, "3s"),
            (UNHEALTHY_THRESHOLD, "101"),
        ];
        for (key, value) in cases {
            let err = settings(&with(key, value)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{key}={value}");
            assert!(
                err.message().contains(key),
                "{key}={value}: {}",
                err.message()
            );
        }
    }

    #[test]
    fn every_key_is_known_and_described() {
        let s = schema();
        assert_eq!(s.known_keys.len(), s.descriptions.len());
        for d in &s.descriptions {
            assert!(d.key.starts_with(PREFIX) && s.known_keys.contains(&d.key));
            assert!(!d.description.is_empty() && !d.default_value.is_empty());
        }
    }
}
