//! What makes a Service need a new EnsureLoadBalancer.

use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Service;

use super::spec;

/// A hash of everything that makes upstream's `needsUpdate` true: two
/// Services with the same fingerprint need no new EnsureLoadBalancer.
pub fn fingerprint(svc: &Service) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let s = spec(svc).cloned().unwrap_or_default();
    // What the routing reads of it (with the routing unchanged, whether
    // its provider serves it).
    (s.type_.as_deref(), s.load_balancer_class.as_deref()).hash(&mut h);
    svc.metadata.uid.hash(&mut h);
    svc.metadata
        .annotations
        .as_ref()
        .map(|a| a.iter().collect::<Vec<_>>())
        .hash(&mut h);
    s.load_balancer_source_ranges.hash(&mut h);
    for p in s.ports.iter().flatten() {
        (
            &p.name,
            &p.protocol,
            p.port,
            p.node_port,
            serde_json::to_string(&p.target_port).ok(),
            &p.app_protocol,
        )
            .hash(&mut h);
    }
    s.session_affinity.hash(&mut h);
    serde_json::to_string(&s.session_affinity_config)
        .ok()
        .hash(&mut h);
    s.load_balancer_ip.hash(&mut h);
    s.external_ips.hash(&mut h);
    s.external_traffic_policy.hash(&mut h);
    s.health_check_node_port.hash(&mut h);
    s.ip_families.as_ref().map(Vec::len).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::service_lb::decide::FINALIZER;
    use crate::testing::lb_service;

    #[test]
    fn fingerprint_follows_upstream_needs_update() {
        let base = lb_service();
        let f = fingerprint(&base);
        let mut labels = base.clone();
        labels.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        labels.metadata.finalizers = Some(vec![FINALIZER.into()]);
        labels.spec.as_mut().unwrap().selector = Some([("app".to_owned(), "x".to_owned())].into());
        assert_eq!(
            fingerprint(&labels),
            f,
            "labels/finalizers/selector do not count"
        );
        let mut port = base.clone();
        port.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
        assert_ne!(fingerprint(&port), f);
        let mut ann = base.clone();
        ann.metadata.annotations = Some([("any".to_owned(), "thing".to_owned())].into());
        assert_ne!(fingerprint(&ann), f, "any annotation counts");
        let mut etp = base.clone();
        etp.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
        assert_ne!(fingerprint(&etp), f);
    }
}
