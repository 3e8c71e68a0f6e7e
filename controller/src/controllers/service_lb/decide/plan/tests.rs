//! The plan of one sync over the states a Service and its record can be
//! in, and what follows an Ensure's answer.

use std::time::Duration;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, ServiceStatus};
use kube::runtime::events::EventType;

use super::*;
use crate::controllers::service_lb::decide::{CONDITION, Reason};
use crate::testing::lb_service;

// The single-mode view these tests were written against; the routing's
// own cases are in `routed`.
use crate::controllers::service_lb::decide::{FINALIZER, routed_single};

fn plan(svc: &Service, record: &Record, now: Instant, at: Time) -> Plan {
    super::plan(svc, &routed_single(svc), record, now, at)
}

fn needs_cleanup(svc: &Service) -> bool {
    super::needs_cleanup(svc, &routed_single(svc))
}

fn concerns_us(svc: &Service) -> bool {
    super::concerns_us(svc, &routed_single(svc))
}

fn t0() -> Time {
    Time(Default::default())
}

/// A plan in one line: "fresh", "replaced:<uid>", then the step with what
/// its writes touch.
fn describe(plan: &Plan) -> String {
    let mut out = Vec::new();
    if plan.fresh_record {
        out.push("fresh".to_owned());
    }
    if let Some(old) = &plan.delete_replaced {
        out.push(format!("replaced:{}", old.uid));
    }
    out.push(match &plan.step {
        Step::Nothing => "nothing".into(),
        Step::Current => "current".into(),
        Step::NotYet(d) => format!("not-yet {}s", d.as_secs()),
        Step::Ensure(e) => {
            let mut s = "ensure".to_owned();
            let first = e.first_write.clone().unwrap_or_default();
            if first["metadata"]["finalizers"] == json!([FINALIZER]) {
                s += " +finalizer";
            }
            if first["status"]["conditions"][0]["reason"] == "Provisioning" {
                s += " +provisioning";
            }
            if let Err(err) = &e.request {
                s += &format!(" invalid:{}", err.field);
            }
            s
        }
        Step::Delete(d) => {
            let mut s = "delete".to_owned();
            let cleanup = d.cleanup_write.clone().unwrap_or_default();
            if cleanup["metadata"]["$deleteFromPrimitiveList/finalizers"] == json!([FINALIZER]) {
                s += " -finalizer";
            }
            if cleanup["status"]["conditions"] == condition_removal() {
                s += " -condition";
            }
            if cleanup["status"]["loadBalancer"] == json!({ "ingress": null }) {
                s += " -ingress";
            }
            if d.finalizer_gone {
                s += " (finalizer gone)";
            }
            s
        }
    });
    out.join(" ")
}

fn with_finalizer(mut s: Service) -> Service {
    s.metadata.finalizers = Some(vec![FINALIZER.into()]);
    s
}

fn cluster_ip(mut s: Service) -> Service {
    s.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    s
}

fn deleting(mut s: Service) -> Service {
    s.metadata.deletion_timestamp = Some(t0());
    s
}

/// The Service as our writes leave it: condition Ready and an ingress.
fn published(mut s: Service) -> Service {
    let c = condition_update(&s, &Standing::ready(), t0()).unwrap();
    s.status = Some(ServiceStatus {
        conditions: Some(vec![c]),
        load_balancer: Some(k8s_openapi::api::core::v1::LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some("192.0.2.1".into()),
                ..Default::default()
            }]),
        }),
    });
    s
}

fn new_port(mut s: Service) -> Service {
    s.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
    s
}

/// A record of the Service `uid` with an Ensure sent, as after a
/// successful Ensure of `ensured`.
fn ensured(uid: &str, ensured: &Service) -> Record {
    Record {
        uid: uid.into(),
        ensured: Some(fingerprint(ensured)),
        sent: Some(to_proto(ensured).unwrap()),
        ..Record::default()
    }
}

#[test]
fn one_plan_per_service_state() {
    let now = Instant::now();
    let svc = lb_service;
    let ours = || with_finalizer(published(lb_service()));
    let retry = |s: &Service, cleanup: bool, in_secs: u64| Record {
        retry: Some(Retry {
            fingerprint: fingerprint(s),
            cleanup,
            not_before: Due::at(now + Duration::from_secs(in_secs)),
        }),
        ..ensured("u-1", s)
    };
    // The Service an older one under the same name was.
    let mut old = svc();
    old.metadata.uid = Some("u-0".into());
    let mut elsewhere = ensured("u-0", &old);
    elsewhere.elsewhere = true;
    let mut no_ports = svc();
    no_ports.spec.as_mut().unwrap().ports = Some(vec![]);
    let cases: Vec<(&str, Service, Record, &str)> = vec![
        (
            "not ours",
            cluster_ip(svc()),
            Record::default(),
            "fresh nothing",
        ),
        (
            "not ours, as recorded",
            cluster_ip(svc()),
            Record::fresh("u-1".into()),
            "nothing",
        ),
        (
            "new",
            svc(),
            Record::default(),
            "fresh ensure +finalizer +provisioning",
        ),
        (
            "ensured as it is",
            ours(),
            ensured("u-1", &ours()),
            "current",
        ),
        (
            "ensured, finalizer since removed by hand",
            published(svc()),
            ensured("u-1", &svc()),
            "ensure +finalizer",
        ),
        (
            "changed since its Ensure",
            new_port(ours()),
            ensured("u-1", &ours()),
            "ensure",
        ),
        (
            "ours, unknown to this process (a restart)",
            ours(),
            Record::default(),
            "fresh ensure",
        ),
        (
            "invalid",
            no_ports,
            Record::default(),
            "fresh ensure +finalizer +provisioning invalid:spec.ports",
        ),
        (
            "being deleted",
            deleting(ours()),
            ensured("u-1", &ours()),
            "delete -finalizer -condition -ingress",
        ),
        (
            "being deleted, status never written",
            deleting(with_finalizer(svc())),
            Record::default(),
            "fresh delete -finalizer",
        ),
        (
            "no longer a LoadBalancer",
            cluster_ip(ours()),
            ensured("u-1", &ours()),
            "delete -finalizer -condition -ingress",
        ),
        (
            "no longer a LoadBalancer and its finalizer removed by hand",
            cluster_ip(svc()),
            ensured("u-1", &svc()),
            "delete (finalizer gone)",
        ),
        (
            "no longer a LoadBalancer, never sent an Ensure here",
            cluster_ip(svc()),
            Record::fresh("u-1".into()),
            "nothing",
        ),
        (
            "replaced a Service under the same name",
            svc(),
            ensured("u-0", &old),
            "fresh replaced:u-0 ensure +finalizer +provisioning",
        ),
        (
            "replaced a Service implemented elsewhere",
            svc(),
            elsewhere,
            "fresh ensure +finalizer +provisioning",
        ),
        (
            "failed, retry not due, unchanged",
            ours(),
            retry(&ours(), false, 30),
            "not-yet 30s",
        ),
        (
            "failed, retry not due, changed",
            new_port(ours()),
            retry(&ours(), false, 30),
            "ensure",
        ),
        (
            "failed, retry not due, now being deleted",
            deleting(ours()),
            retry(&deleting(ours()), false, 30),
            "delete -finalizer -condition -ingress",
        ),
        (
            "failed to delete, retry not due",
            deleting(ours()),
            retry(&deleting(ours()), true, 30),
            "not-yet 30s",
        ),
        (
            "failed, retry due",
            ours(),
            retry(&ours(), false, 0),
            "current",
        ),
    ];
    for (name, svc, record, want) in cases {
        let plan = plan(&svc, &record, now, t0());
        assert_eq!(describe(&plan), want, "{name}");
        assert_eq!(plan.fingerprint, fingerprint(&svc), "{name}");
        assert_eq!(plan.cleanup, needs_cleanup(&svc), "{name}");
    }
}

#[test]
fn an_ensure_is_announced_and_sends_the_service() {
    let svc = lb_service();
    let Step::Ensure(ensure) = plan(&svc, &Record::default(), Instant::now(), t0()).step else {
        panic!("a new Service is ensured");
    };
    assert_eq!(ensure.events, [Event::ensuring()]);
    assert_eq!(ensure.request, Ok(to_proto(&svc).unwrap()));
    assert!(ensure.condition_ours, "the first write adds it");
    let first = ensure.first_write.unwrap();
    assert_eq!(first["status"]["conditions"][0]["type"], CONDITION);
    assert_eq!(first["status"]["conditions"][0]["status"], "False");

    // A condition someone else wrote is not replaced by Provisioning, and
    // is ours to update once the Ensure answers.
    let shown = published(with_finalizer(lb_service()));
    let changed = new_port(shown);
    let Step::Ensure(ensure) =
        plan(&changed, &Record::fresh("u-1".into()), Instant::now(), t0()).step
    else {
        panic!("a changed Service is ensured");
    };
    assert_eq!(ensure.first_write, None);
    assert!(ensure.condition_ours);
}

#[test]
fn a_delete_describes_the_service_by_identity_and_names_its_failure() {
    let mut broken = cluster_ip(lb_service());
    broken.spec.as_mut().unwrap().load_balancer_ip = Some("foo".into());
    let record = ensured("u-1", &lb_service());
    let Step::Delete(delete) = plan(&broken, &record, Instant::now(), t0()).step else {
        panic!("a Service this process ensured is deleted");
    };
    assert_eq!(delete.request, to_proto_ref(&broken));
    assert_eq!(delete.cleanup_write, None, "nothing of ours is on it");
    let failed = delete.failure_event(&"cloud down").unwrap();
    assert_eq!(failed.reason, Reason::DeleteLoadBalancerFailed);
    assert_eq!(failed.reason.type_(), EventType::Warning);
    assert_eq!(failed.note, "Error deleting load balancer: cloud down");

    let Step::Delete(delete) = plan(
        &deleting(with_finalizer(lb_service())),
        &record,
        Instant::now(),
        t0(),
    )
    .step
    else {
        panic!("a Service being deleted is deleted");
    };
    assert_eq!(
        delete.failure_event(&"cloud down"),
        None,
        "the sync's own failure Event says it"
    );
}

#[test]
fn what_follows_an_ensure_depends_on_the_answer() {
    let svc = with_finalizer(lb_service());
    let address = proto::LoadBalancerStatus {
        ingress: vec![proto::LoadBalancerIngress {
            ip: "192.0.2.1".into(),
            ..Default::default()
        }],
    };

    let done = after_ensure(&svc, true, &LbOutcome::Done(address.clone()), t0());
    assert!(!done.elsewhere);
    assert_eq!(done.event, Some(Event::ensured()));
    let (patch, op) = done.write.unwrap();
    assert_eq!(op, "update load balancer status");
    assert_eq!(patch["status"]["conditions"][0]["status"], "True");
    assert_eq!(
        patch["status"]["loadBalancer"]["ingress"][0]["ip"],
        "192.0.2.1"
    );

    // Already shown: nothing to write.
    let shown = published(svc.clone());
    let done = after_ensure(&shown, true, &LbOutcome::Done(address), t0());
    assert_eq!(done.write, None);

    let empty = proto::LoadBalancerStatus::default();
    let (patch, _) = after_ensure(&svc, true, &LbOutcome::Done(empty), t0())
        .write
        .unwrap();
    assert_eq!(
        patch["status"]["conditions"][0]["reason"],
        "EnsuredWithoutAddress"
    );

    let elsewhere = LbOutcome::ImplementedElsewhere("another controller".into());
    let handed = after_ensure(&svc, true, &elsewhere, t0());
    assert!(handed.elsewhere);
    assert_eq!(handed.event, None);
    assert_eq!(
        handed.write,
        Some((
            json!({"status": {"conditions": [{"type": CONDITION, "$patch": "delete"}]}}),
            "remove the load balancer condition"
        ))
    );
    let untouched = after_ensure(&svc, false, &elsewhere, t0());
    assert_eq!(untouched.write, None, "no condition of ours to remove");
}

#[test]
fn most_services_are_none_of_our_business() {
    assert!(concerns_us(&lb_service()));
    assert!(!concerns_us(&cluster_ip(lb_service())));
    assert!(concerns_us(&cluster_ip(with_finalizer(lb_service()))));
}

/// With several providers: a provider's plan adds and removes only its own
/// finalizer, leaves the status to the provider that serves the Service
/// now, and takes an unsure routing as proof of nothing.
#[test]
fn a_provider_plans_only_for_what_is_its_own() {
    use crate::controllers::service_lb::decide::Place;
    let now = Instant::now();
    let mine = "cloud.provider.ccm-rs.io/load-balancer-cleanup";
    let routed = |place| Routed {
        place,
        finalizer: mine,
    };
    let mut both = published(lb_service());
    both.metadata.finalizers = Some(vec![FINALIZER.into(), mine.into()]);
    let cleanup = |place, svc: &Service, record: &Record| match super::plan(
        svc,
        &routed(place),
        record,
        now,
        t0(),
    )
    .step
    {
        Step::Delete(d) => Some(d),
        _ => None,
    };
    let record = ensured("u-1", &lb_service());

    let moved = cleanup(Place::Elsewhere, &both, &record).unwrap();
    assert_eq!(
        moved.cleanup_write,
        Some(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [mine]}})),
        "served elsewhere: its status is the other provider's"
    );
    let left = cleanup(Place::Nowhere, &cluster_ip(both.clone()), &record).unwrap();
    let write = left.cleanup_write.unwrap();
    assert_eq!(
        write["metadata"]["$deleteFromPrimitiveList/finalizers"],
        json!([mine])
    );
    assert_eq!(write["status"]["loadBalancer"], json!({ "ingress": null }));
    assert_eq!(write["status"]["conditions"], condition_removal());

    // Unsure: nothing, whatever this process did, unless being deleted.
    assert_eq!(cleanup(Place::Unsure, &both, &record), None);
    let step = super::plan(&both, &routed(Place::Unsure), &record, now, t0()).step;
    assert_eq!(step, Step::Nothing);
    assert!(cleanup(Place::Unsure, &deleting(both.clone()), &record).is_some());
    // Its finalizer removed by hand: deleted only on proof.
    let bare = published(lb_service());
    assert_eq!(cleanup(Place::Unsure, &bare, &record), None);
    assert!(
        cleanup(Place::Elsewhere, &bare, &record)
            .unwrap()
            .finalizer_gone
    );

    // Served here: its own finalizer goes on, beside another's.
    let mut theirs = lb_service();
    theirs.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let Step::Ensure(e) =
        super::plan(&theirs, &routed(Place::Here), &Record::default(), now, t0()).step
    else {
        panic!("served here: ensured");
    };
    assert_eq!(
        e.first_write.unwrap()["metadata"]["finalizers"],
        json!([mine])
    );
}
