//! service-lb-controller end to end: the real kube-apiserver, the controller
//! running with only the shipped ClusterRole, the fake provider over a Unix
//! socket. Every scenario ends by deleting its Services and asserting the
//! fake cloud holds no load balancer.

mod answers;
mod backends;
mod lifecycle;
mod orphans;

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use ccm_fake_provider::{ErrorInjection, ErrorKind, FakeConfig, LoadBalancer, Method};
use ccm_provider_sdk::proto;
use ccm_testsupport::unique_name;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
const CONDITION: &str = "LoadBalancerReady";

/// A harness on a clean slate: an earlier failed scenario's Services (still
/// holding our finalizer) and Nodes went with its harness, so one failure
/// does not cascade into the next scenario's counts.
async fn harness() -> Harness {
    harness_with(&[]).await
}

/// [`harness`] with extra controller flags.
async fn harness_with(flags: &[&str]) -> Harness {
    Harness::start(FakeConfig::default(), flags).await
}

impl Harness {
    fn services(&self) -> Api<Service> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    async fn create_service(&self, svc: Service) -> Service {
        self.services()
            .create(&PostParams::default(), &svc)
            .await
            .unwrap()
    }

    async fn patch_service(&self, name: &str, patch: serde_json::Value) {
        self.services()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// The fake cloud's load balancer for a Service uid.
    fn lb(&self, uid: &str) -> Option<LoadBalancer> {
        self.fake
            .dump()
            .load_balancers
            .into_iter()
            .find(|lb| lb.service_uid == uid)
    }

    /// Waits for the Service's load balancer to satisfy `done`.
    async fn wait_lb(&self, svc: &Service, what: &str, done: impl Fn(&LoadBalancer) -> bool) {
        let uid = svc.uid().unwrap();
        eventually(what, || async {
            match self.lb(&uid) {
                Some(lb) if done(&lb) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// Waits for the Service to satisfy `done`; returns it.
    async fn wait_service(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&Service) -> bool,
    ) -> Service {
        eventually(what, || async {
            match self.services().get_opt(name).await.unwrap() {
                Some(s) if done(&s) => Ok(s),
                other => Err(format!("{other:#?}")),
            }
        })
        .await
    }

    async fn wait_lb_gone(&self, uid: &str, what: &str) {
        eventually(what, || async {
            match self.lb(uid) {
                None => Ok(()),
                Some(lb) => Err(format!("{lb:?}")),
            }
        })
        .await
    }

    async fn wait_gone(&self, name: &str, what: &str) {
        eventually(what, || async {
            match self.services().get_opt(name).await.unwrap() {
                None => Ok(()),
                Some(s) => Err(format!("{s:#?}")),
            }
        })
        .await
    }

    async fn wait_ready(&self, name: &str) -> Service {
        self.wait_service(name, "LoadBalancerReady=True with an ingress", |s| {
            condition(s).is_some_and(|c| c.status == "True") && !ingress_ips(s).is_empty()
        })
        .await
    }

    async fn wait_event(&self, name: &str, reason: &str) -> Vec<String> {
        eventually(&format!("a {reason} event for {name}"), || async {
            let notes: Vec<String> = events_in(&self.admin, &self.ns, name, reason)
                .await
                .into_iter()
                .map(|e| e.note.unwrap_or_default())
                .collect();
            if notes.is_empty() {
                Err("none".into())
            } else {
                Ok(notes)
            }
        })
        .await
    }

    async fn register_ready_nodes(&self, names: &[String]) {
        for n in names {
            self.register_node(n).await;
        }
        eventually("nodes initialised", || async {
            match self.initialised_count(names).await {
                n if n == names.len() => Ok(()),
                n => Err(format!("{n} of {}", names.len())),
            }
        })
        .await;
    }

    /// Deletes every Service of the test, then asserts the fake cloud holds
    /// no load balancer: nothing leaked. Its Nodes go when it stops.
    async fn finish(self) {
        self.services()
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap();
        eventually("every Service gone", || async {
            match self
                .services()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
            {
                0 => Ok(()),
                n => Err(format!("{n} left")),
            }
        })
        .await;
        assert_eq!(
            self.fake.dump().load_balancers,
            vec![],
            "leaked load balancers"
        );
        self.stop().await;
    }
}

fn condition(s: &Service) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION)
}

fn condition_reason(s: &Service) -> Option<&str> {
    condition(s).map(|c| c.reason.as_str())
}

fn has_finalizer(s: &Service) -> bool {
    s.finalizers().iter().any(|f| f == FINALIZER)
}

fn ensure_calls(h: &Harness) -> usize {
    h.fake.calls_of(Method::EnsureLoadBalancer).len()
}

fn set(names: &[&String]) -> Vec<String> {
    names
        .iter()
        .map(|s| s.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}
