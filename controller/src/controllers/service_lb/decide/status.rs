//! What the Service's status shows: its ingress and its
//! `LoadBalancerReady` condition.

use std::collections::BTreeSet;

use ccm_provider_sdk::proto;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, PortStatus, Service, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use serde_json::{Value, json};

use super::CONDITION;
use super::convert::protocol_name;

pub fn ingress(svc: &Service) -> &[LoadBalancerIngress] {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_deref())
        .unwrap_or_default()
}

/// The provider's status as Kubernetes writes it. The SDK has validated it.
pub fn ingress_from_proto(status: &proto::LoadBalancerStatus) -> Vec<LoadBalancerIngress> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    status
        .ingress
        .iter()
        .map(|i| LoadBalancerIngress {
            ip: opt(&i.ip),
            hostname: opt(&i.hostname),
            ip_mode: match proto::IpMode::try_from(i.ip_mode) {
                Ok(proto::IpMode::Vip) => Some("VIP".into()),
                Ok(proto::IpMode::Proxy) => Some("Proxy".into()),
                _ => None,
            },
            ports: (!i.ports.is_empty()).then(|| {
                i.ports
                    .iter()
                    .map(|p| PortStatus {
                        port: p.port,
                        protocol: protocol_name(p.protocol).into(),
                        error: opt(&p.error),
                    })
                    .collect()
            }),
        })
        .collect()
}

/// Upstream's `LoadBalancerStatusEqual`, which ignores order: the
/// apiserver defaults `ipMode` to VIP on IPv4/IPv6 ingress, so an unset
/// ipMode equals VIP.
pub fn ingress_equal(a: &[LoadBalancerIngress], b: &[LoadBalancerIngress]) -> bool {
    let norm = |v: &[LoadBalancerIngress]| -> BTreeSet<String> {
        v.iter()
            .map(|i| {
                let mut i = i.clone();
                if i.ip.is_some() && i.ip_mode.is_none() {
                    i.ip_mode = Some("VIP".into());
                }
                serde_json::to_string(&i).unwrap_or_default()
            })
            .collect()
    };
    a.len() == b.len() && norm(a) == norm(b)
}

/// Where the load balancer stands, for the Service's condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub ready: bool,
    /// CamelCase, as Condition.reason requires.
    pub reason: String,
    pub message: String,
}

impl Standing {
    pub fn ready() -> Self {
        Standing {
            ready: true,
            reason: "Ensured".into(),
            message: "The provider has ensured the load balancer".into(),
        }
    }

    pub fn not_ready(reason: &str, message: impl Into<String>) -> Self {
        Standing {
            ready: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

pub fn condition(svc: &Service) -> Option<&Condition> {
    svc.status
        .as_ref()
        .and_then(|s: &ServiceStatus| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == CONDITION))
}

/// Condition messages are limited to 32 KiB; ours are a sentence or an
/// error, but a provider's message is not under our control.
pub(super) fn bounded(message: &str) -> String {
    const MAX: usize = 1024;
    if message.len() <= MAX {
        return message.to_owned();
    }
    let mut end = MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// The condition to write, or `None` when the Service already shows it.
/// The transition time moves only when the status flips.
pub fn condition_update(svc: &Service, standing: &Standing, now: Time) -> Option<Condition> {
    let status = if standing.ready { "True" } else { "False" };
    let generation = svc.metadata.generation;
    let message = bounded(&standing.message);
    let current = condition(svc);
    if let Some(c) = current
        && c.status == status
        && c.reason == standing.reason
        && c.message == message
        && c.observed_generation == generation
    {
        return None;
    }
    let last_transition_time = match current {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now,
    };
    Some(Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: standing.reason.clone(),
        message,
        observed_generation: generation,
        last_transition_time,
    })
}

/// The status patch that makes the Service show `standing` (and, with
/// `ingress`, that ingress), or `None` when it shows both already.
pub fn status_patch(
    svc: &Service,
    standing: &Standing,
    ingress: Option<Vec<LoadBalancerIngress>>,
    now: Time,
) -> Option<Value> {
    let mut status = serde_json::Map::new();
    if let Some(c) = condition_update(svc, standing, now) {
        status.insert("conditions".into(), json!([c]));
    }
    if let Some(ingress) = ingress
        && !ingress_equal(self::ingress(svc), &ingress)
    {
        status.insert("loadBalancer".into(), json!({ "ingress": ingress }));
    }
    (!status.is_empty()).then(|| json!({ "status": status }))
}

/// The directive that removes our condition from the Service.
pub fn condition_removal() -> Value {
    json!([{ "type": CONDITION, "$patch": "delete" }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::lb_service;

    #[test]
    fn ingress_round_trips_and_compares_like_upstream() {
        let status = proto::LoadBalancerStatus {
            ingress: vec![
                proto::LoadBalancerIngress {
                    ip: "192.0.2.1".into(),
                    ports: vec![proto::PortStatus {
                        port: 80,
                        protocol: proto::Protocol::Tcp as i32,
                        error: String::new(),
                    }],
                    ..Default::default()
                },
                proto::LoadBalancerIngress {
                    hostname: "lb.example.com".into(),
                    ..Default::default()
                },
            ],
        };
        let k8s = ingress_from_proto(&status);
        assert_eq!(k8s[0].ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(k8s[0].ports.as_ref().unwrap()[0].protocol, "TCP");
        assert_eq!(k8s[1].hostname.as_deref(), Some("lb.example.com"));
        let mut reversed = k8s.clone();
        reversed.reverse();
        reversed[1].ip_mode = Some("VIP".into()); // what the apiserver defaults
        assert!(ingress_equal(&k8s, &reversed));
        assert!(!ingress_equal(&k8s, &k8s[..1]));
    }

    #[test]
    fn condition_is_written_only_on_change() {
        let mut s = lb_service();
        let t0 = Time(Default::default());
        let provisioning = Standing::not_ready("Provisioning", "Ensuring load balancer");
        let c = condition_update(&s, &provisioning, t0.clone()).unwrap();
        assert_eq!(
            (c.status.as_str(), c.observed_generation),
            ("False", Some(3))
        );
        s.status = Some(ServiceStatus {
            conditions: Some(vec![c.clone()]),
            ..Default::default()
        });
        assert!(condition_update(&s, &provisioning, t0.clone()).is_none());
        let later = Time(t0.0 + std::time::Duration::from_secs(60));
        let failing = Standing::not_ready("CloudUnavailable", "boom");
        let f = condition_update(&s, &failing, later.clone()).unwrap();
        assert_eq!(
            f.last_transition_time, t0,
            "False stays False: no transition"
        );
        let r = condition_update(&s, &Standing::ready(), later.clone()).unwrap();
        assert_eq!((r.status.as_str(), r.last_transition_time), ("True", later));
        let long = Standing::not_ready("ProviderError", "x".repeat(5000));
        assert!(condition_update(&s, &long, t0).unwrap().message.len() < 1100);
    }
}
