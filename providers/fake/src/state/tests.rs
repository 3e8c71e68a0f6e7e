//! The fake cloud's semantics, through [`State`]'s methods.

use std::sync::Arc;

use ccm_provider_sdk::proto::{
    ErrorReason, LoadBalancerIngress, LoadBalancerStatus, NodeRef, Protocol, Route, Service,
    ServicePort, SessionAffinity, TrafficPolicy,
};
use ccm_provider_sdk::{LbAnswer, LbOutcome, NodeSet};

use super::*;

fn state(config: FakeConfig) -> State {
    State::new(config).unwrap()
}

fn svc(uid: &str) -> Service {
    Service {
        namespace: "default".into(),
        name: format!("svc-{uid}"),
        uid: uid.into(),
        ports: vec![ServicePort {
            protocol: Protocol::Tcp as i32,
            port: 80,
            node_port: 30080,
            ..Default::default()
        }],
        external_traffic_policy: TrafficPolicy::Cluster as i32,
        session_affinity: SessionAffinity::None as i32,
        ..Default::default()
    }
}

fn set<const N: usize>(nodes: [NodeRef; N]) -> NodeSet {
    NodeSet::new(nodes.into())
}

fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

fn ip_of(answer: LbAnswer<LoadBalancerStatus>) -> String {
    match answer.outcome {
        LbOutcome::Done(s) => s.ingress[0].ip.clone(),
        o => panic!("{o:?}"),
    }
}

#[test]
fn ips_are_kept_across_ensures_released_on_delete_and_run_out() {
    let mut s = state(FakeConfig {
        lb_ip_pool: "192.0.2.0/29".into(), // .2 - .6: five addresses
        ..Default::default()
    });
    let first = ip_of(s.ensure_lb("k", &svc("a"), &set([node("n1")])).unwrap());
    assert_eq!(first, "192.0.2.2");
    let again = ip_of(s.ensure_lb("k", &svc("a"), &set([node("n2")])).unwrap());
    assert_eq!(again, first);
    for uid in ["b", "c", "d", "e"] {
        s.ensure_lb("k", &svc(uid), &set([])).unwrap();
    }
    let err = s.ensure_lb("k", &svc("f"), &set([])).unwrap_err();
    assert_eq!(err.reason(), Some(ErrorReason::QuotaExceeded));
    // A failed ensure leaves nothing behind.
    assert!(s.get_lb("k", &svc("f")).is_none());
    s.delete_lb("k", &svc("a"));
    s.delete_lb("k", &svc("a"));
    assert!(s.get_lb("k", &svc("a")).is_none());
    assert_eq!(
        ip_of(s.ensure_lb("k", &svc("f"), &set([])).unwrap()),
        "192.0.2.2"
    );
}

#[test]
fn ensure_is_idempotent_and_clusters_do_not_share() {
    let mut s = state(FakeConfig::default());
    let a = s
        .ensure_lb("k", &svc("a"), &set([node("n2"), node("n1")]))
        .unwrap();
    let gen1 = s.dump().load_balancers[0].generation;
    let b = s
        .ensure_lb("k", &svc("a"), &set([node("n1"), node("n2")]))
        .unwrap();
    assert_eq!(a, b);
    let lb = &s.dump().load_balancers[0];
    assert_eq!(lb.generation, gen1, "same input must not rewrite");
    assert_eq!(lb.backends, ["n1", "n2"]);
    let other = ip_of(s.ensure_lb("k2", &svc("a"), &set([])).unwrap());
    assert_ne!(other, ip_of(a));
    assert_eq!(s.list_lbs("k").len(), 1);
    assert_ne!(s.list_lbs("k")[0].name, s.list_lbs("k2")[0].name);
}

#[test]
fn load_balancers_over_the_same_nodes_share_one_backend_list() {
    let mut s = state(FakeConfig::default());
    let nodes = [node("n2"), node("n1"), node("n1")];
    for uid in ["a", "b", "c"] {
        s.ensure_lb("k", &svc(uid), &set(nodes.clone())).unwrap();
    }
    s.update_lb("k", &svc("c"), &set([node("n3")])).unwrap();
    s.update_lb("k", &svc("b"), &set([node("n1"), node("n2")]))
        .unwrap();
    let lbs = s.dump().load_balancers;
    assert_eq!(lbs[0].backends, ["n1", "n2"]);
    assert!(Arc::ptr_eq(&lbs[0].backends.0, &lbs[1].backends.0));
    assert_eq!(lbs[2].backends, ["n3"]);
    // Stored as a plain list.
    let json = serde_json::to_value(&lbs[0]).unwrap();
    assert_eq!(json["backends"], serde_json::json!(["n1", "n2"]));
    let back: LoadBalancer = serde_json::from_value(json).unwrap();
    assert_eq!(back, lbs[0]);
}

#[test]
fn update_changes_backends_and_fails_clearly_when_missing() {
    let mut s = state(FakeConfig::default());
    let err = s.update_lb("k", &svc("a"), &set([])).unwrap_err();
    assert!(err.message().contains("does not exist"), "{err}");
    s.ensure_lb("k", &svc("a"), &set([node("n1")])).unwrap();
    s.update_lb("k", &svc("a"), &set([node("n3")])).unwrap();
    assert_eq!(s.dump().load_balancers[0].backends, ["n3"]);
}

#[test]
fn requested_and_previous_addresses_are_honoured() {
    let mut s = state(FakeConfig::default());
    let mut a = svc("a");
    a.load_balancer_ip = "192.0.2.50".into();
    assert_eq!(ip_of(s.ensure_lb("k", &a, &set([])).unwrap()), "192.0.2.50");
    let mut b = svc("b");
    b.load_balancer_ip = "192.0.2.50".into();
    let err = s.ensure_lb("k", &b, &set([])).unwrap_err();
    assert_eq!(err.reason(), Some(ErrorReason::ConflictingResource));
    b.load_balancer_ip = "10.9.9.9".into();
    let err = s.ensure_lb("k", &b, &set([])).unwrap_err();
    assert_eq!(err.reason(), Some(ErrorReason::InvalidServiceSpec));
    // Status from before a fake restart keeps the address.
    let mut c = svc("c");
    c.status = Some(LoadBalancerStatus {
        ingress: vec![LoadBalancerIngress {
            ip: "192.0.2.77".into(),
            ..Default::default()
        }],
    });
    assert_eq!(ip_of(s.ensure_lb("k", &c, &set([])).unwrap()), "192.0.2.77");
}

#[test]
fn annotations_are_validated_and_unknown_ones_warned_about() {
    let mut s = state(FakeConfig::default());
    let mut a = svc("a");
    a.annotations
        .insert(ANNOTATION_INTERNAL.into(), "maybe".into());
    let err = s.ensure_lb("k", &a, &set([])).unwrap_err();
    assert_eq!(err.reason(), Some(ErrorReason::InvalidAnnotation));
    assert_eq!(
        err.field_violations()[0].0,
        format!("metadata.annotations[{ANNOTATION_INTERNAL}]")
    );
    a.annotations
        .insert(ANNOTATION_INTERNAL.into(), "true".into());
    a.annotations
        .insert(ANNOTATION_HEALTH_CHECK_PATH.into(), "/healthz".into());
    a.annotations
        .insert("fake.ccm-rs.io/intrenal".into(), "true".into());
    a.annotations.insert("example.com/other".into(), "x".into());
    // Unknown keys are left to the controller (the annotation schema);
    // a health-check path without the Local policy is worth a warning.
    let answer = s.ensure_lb("k", &a, &set([])).unwrap();
    assert_eq!(answer.warnings.len(), 1);
    assert_eq!(answer.warnings[0].reason, "HealthCheckPathIgnored");
    a.external_traffic_policy = TrafficPolicy::Local as i32;
    assert!(s.ensure_lb("k", &a, &set([])).unwrap().warnings.is_empty());
    let mut sctp = svc("sctp");
    sctp.ports[0].protocol = Protocol::Sctp as i32;
    let err = s.ensure_lb("k", &sctp, &set([])).unwrap_err();
    assert_eq!(err.field_violations()[0].0, "spec.ports[0].protocol");
    let lb = &s.dump().load_balancers[0];
    assert!(lb.internal);
    assert_eq!(lb.health_check_path.as_deref(), Some("/healthz"));
    assert!(!lb.annotations.contains_key("example.com/other"));
}

#[test]
fn other_classes_are_implemented_elsewhere() {
    let mut s = state(FakeConfig {
        implemented_elsewhere_classes: vec!["example.com/other".into()],
        ..Default::default()
    });
    let mut a = svc("a");
    a.load_balancer_class = Some("example.com/other".into());
    let answer = s.ensure_lb("k", &a, &set([])).unwrap();
    assert!(matches!(answer.outcome, LbOutcome::ImplementedElsewhere(_)));
    assert!(matches!(
        s.update_lb("k", &a, &set([])).unwrap().outcome,
        LbOutcome::ImplementedElsewhere(_)
    ));
    assert!(s.dump().load_balancers.is_empty());
    a.load_balancer_class = Some("example.com/mine".into());
    assert!(matches!(
        s.ensure_lb("k", &a, &set([])).unwrap().outcome,
        LbOutcome::Done(_)
    ));
}

#[test]
fn auto_create_makes_instances_but_removed_ones_stay_gone() {
    let mut s = state(FakeConfig::default());
    assert!(s.instance_exists(&node("n1")));
    let md = s.instance_metadata(&node("n1")).unwrap();
    assert_eq!(md.provider_id, "fake://n1");
    assert_eq!(md.node_addresses[0].address, "10.0.0.10");
    assert_eq!(md.zone, "fake-zone-a");
    let md2 = s.instance_metadata(&node("n2")).unwrap();
    assert_eq!(md2.node_addresses[0].address, "10.0.0.11");
    assert!(s.remove_instance("n1"));
    assert!(!s.instance_exists(&node("n1")));
    let by_id = NodeRef {
        name: "n1".into(),
        provider_id: "fake://n1".into(),
        ..Default::default()
    };
    assert!(!s.instance_exists(&by_id));
    let err = s.instance_shutdown(&node("n1")).unwrap_err();
    assert_eq!(err.reason(), Some(ErrorReason::InstanceNotFound));
    // Declaring it again brings it back.
    s.add_instance(InstanceSpec::named("n1"), false).unwrap();
    assert!(s.instance_exists(&node("n1")));
}

#[test]
fn without_auto_create_only_declared_instances_exist() {
    let mut s = state(FakeConfig {
        auto_create_instances: false,
        instances: vec![InstanceSpec {
            id: Some("i-123".into()),
            zone: Some("z9".into()),
            shutdown: true,
            ..InstanceSpec::named("declared")
        }],
        ..Default::default()
    });
    assert!(!s.instance_exists(&node("other")));
    assert!(s.instance_metadata(&node("other")).is_err());
    assert!(s.instance_shutdown(&node("declared")).unwrap());
    let by_id = NodeRef {
        name: "renamed".into(),
        provider_id: "fake://i-123".into(),
        ..Default::default()
    };
    assert_eq!(s.zone_of(&by_id).unwrap().failure_domain, "z9");
    let foreign = NodeRef {
        name: "declared".into(),
        provider_id: "aws:///i-123".into(),
        ..Default::default()
    };
    assert!(!s.instance_exists(&foreign));
    s.set_shutdown("declared", false).unwrap();
    assert!(!s.instance_shutdown(&node("declared")).unwrap());
    assert!(s.set_shutdown("nope", true).is_err());
}

#[test]
fn provider_ids_recreate_instances_after_a_restart() {
    let mut s = state(FakeConfig::default());
    let n = NodeRef {
        name: "n1".into(),
        provider_id: "fake://i-42".into(),
        ..Default::default()
    };
    let md = s.instance_metadata(&n).unwrap();
    assert_eq!(md.provider_id, "fake://i-42");
}

#[test]
fn restore_rebuilds_the_pool_and_index_and_refuses_inconsistencies() {
    let mut s = state(FakeConfig::default());
    s.ensure_lb("k", &svc("a"), &set([node("n1")])).unwrap();
    s.instance_exists(&node("n1"));
    s.remove_instance("gone");
    let saved = s.persisted();
    let mut back = State::restore(FakeConfig::default(), saved.clone()).unwrap();
    assert_eq!(back.dump(), s.dump());
    assert!(!back.dirty, "a restored cloud has nothing to write");
    // The pool knows .2 is taken; the id index finds n1 by providerID.
    assert_eq!(
        ip_of(back.ensure_lb("k", &svc("b"), &set([])).unwrap()),
        "192.0.2.3"
    );
    let by_id = NodeRef {
        name: "renamed".into(),
        provider_id: "fake://n1".into(),
        ..Default::default()
    };
    assert_eq!(
        back.instance_metadata(&by_id).unwrap().provider_id,
        "fake://n1"
    );
    assert!(!back.instance_exists(&node("gone")));

    let mut twice = saved.clone();
    twice.instances.push(twice.instances[0].clone());
    let err = State::restore(FakeConfig::default(), twice).unwrap_err();
    assert!(err.contains("share the id n1"), "{err}");
    let mut same_ip = saved.clone();
    let mut lb = same_ip.load_balancers[0].clone();
    lb.service_uid = "b".into();
    same_ip.load_balancers.push(lb);
    let err = State::restore(FakeConfig::default(), same_ip).unwrap_err();
    assert!(err.contains("192.0.2.2 of another load balancer"), "{err}");
}

fn route(cidr: &str, node: &str) -> Route {
    Route {
        target_node: node.into(),
        destination_cidr: cidr.into(),
        ..Default::default()
    }
}

#[test]
fn routes_are_idempotent_conflict_and_turn_blackhole() {
    let mut s = state(FakeConfig::default());
    let r = s
        .create_route("k", "uid-1", &route("10.244.1.0/24", "n1"))
        .unwrap();
    assert_eq!(r.name, "route-uid-1-10-244-1-0-24");
    assert_eq!(
        s.create_route("k", "uid-1", &route("10.244.1.0/24", "n1"))
            .unwrap(),
        r
    );
    let err = s
        .create_route("k", "uid-2", &route("10.244.1.0/24", "n2"))
        .unwrap_err();
    assert_eq!(err.reason(), Some(ErrorReason::ConflictingResource));
    // Another cluster may use the same CIDR.
    s.create_route("k2", "uid-2", &route("10.244.1.0/24", "n2"))
        .unwrap();
    assert_eq!(s.list_routes("k").len(), 1);
    assert!(!s.list_routes("k")[0].blackhole);
    s.remove_instance("n1");
    assert!(s.list_routes("k")[0].blackhole);
    // Routes to a removed instance cannot be created.
    let err = s
        .create_route("k", "uid-1", &route("10.244.9.0/24", "n1"))
        .unwrap_err();
    assert_eq!(err.reason(), Some(ErrorReason::InstanceNotFound));
    s.delete_route("k", &route("10.244.1.0/24", "n1"));
    s.delete_route("k", &route("10.244.1.0/24", "n1"));
    assert!(s.list_routes("k").is_empty());
    assert_eq!(s.list_routes("k2").len(), 1);
}
