//! The counts every scenario ends with, taken from the fake's state and the
//! apiserver, and the line each scenario prints.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccm_fake_provider::{CallRecord, LoadBalancer, StateDump};
use ccm_testsupport::hybrid::Recorders;
use ccm_testsupport::steady::{Window, kubelet_heartbeats};
use ccm_testsupport::{ingress_ips, poll_until};

use crate::cluster::{Cluster, has_finalizer, is_initialised, key, wants_lb};
use crate::process::Provider;

/// How often the counts below are taken again while waiting.
pub const POLL: Duration = Duration::from_millis(250);

/// How one cluster's Services and the cloud's load balancers disagree.
#[derive(Debug, Default, Clone)]
pub struct Census {
    /// Load balancers of the cluster no live Service wants (and no Service
    /// being deleted still holds).
    pub leaked: Vec<String>,
    /// Services that want a load balancer and have none, or show an
    /// address that is not their load balancer's.
    pub missing: Vec<String>,
    /// Services being deleted that still carry our finalizer.
    pub stuck: Vec<String>,
}

impl Census {
    pub fn clean(&self) -> bool {
        self.leaked.is_empty() && self.missing.is_empty() && self.stuck.is_empty()
    }
}

/// The cluster's load balancers in `state`, by Service uid.
pub fn lbs_of<'a>(state: &'a StateDump, cluster: &str) -> BTreeMap<&'a str, &'a LoadBalancer> {
    state
        .load_balancers
        .iter()
        .filter(|lb| lb.cluster_name == cluster)
        .map(|lb| (lb.service_uid.as_str(), lb))
        .collect()
}

pub async fn census(cluster: &Cluster, provider: &Provider) -> Census {
    let services = cluster.all_services().await;
    let state = provider.state().await;
    let lbs = lbs_of(&state, &cluster.name);
    let mut c = Census::default();
    let mut accounted = BTreeSet::new();
    for svc in &services {
        let uid = svc.metadata.uid.clone().unwrap_or_default();
        if wants_lb(svc) {
            accounted.insert(uid.clone());
            match lbs.get(uid.as_str()) {
                None => c
                    .missing
                    .push(format!("{} (uid {uid}): no load balancer", key(svc))),
                Some(lb) => {
                    let shown = ingress_ips(svc);
                    if shown != [lb.ip.to_string()] {
                        c.missing.push(format!(
                            "{}: shows {shown:?}, its load balancer has {}",
                            key(svc),
                            lb.ip
                        ));
                    }
                }
            }
        } else if has_finalizer(svc) {
            accounted.insert(uid.clone());
            if svc.metadata.deletion_timestamp.is_some() {
                c.stuck.push(format!(
                    "{} (uid {uid}, load balancer {})",
                    key(svc),
                    if lbs.contains_key(uid.as_str()) {
                        "present"
                    } else {
                        "gone"
                    }
                ));
            }
        }
    }
    for (uid, lb) in &lbs {
        if !accounted.contains(*uid) {
            c.leaked.push(format!(
                "{} for {}/{} (uid {uid})",
                lb.name, lb.service_namespace, lb.service_name
            ));
        }
    }
    c
}

/// Polls the census until it is clean or `within` passed; the last census
/// and how long it took.
pub async fn settle(
    cluster: &Cluster,
    provider: &Provider,
    within: Duration,
) -> (Census, Duration) {
    let started = Instant::now();
    let c = poll_until(within, POLL, || census(cluster, provider), Census::clean).await;
    (c, started.elapsed())
}

/// What a quiet window after convergence saw.
#[derive(Debug, Default)]
pub struct Quiet {
    pub mutations: Vec<String>,
    pub writes: Vec<String>,
}

/// How long the provider must see no mutation before the quiet window
/// starts: work the faults left (a retry after backoff) finishes first.
pub const LULL: Duration = Duration::from_secs(3);
/// The quiet window: several of every periodic pass.
pub const QUIET: Duration = Duration::from_secs(6);

/// Where [`quiet`] learns what the controller sent its provider(s): the
/// fake's call log, or recording pass-throughs in front of each provider.
pub trait Mutations {
    /// When the latest mutation arrived, if any did.
    fn last_mutation(&self) -> impl Future<Output = Option<SystemTime>>;
    /// The mutations that arrived in `window`, described.
    fn mutations(&self, window: &Window) -> impl Future<Output = Vec<String>>;
}

impl Mutations for Provider {
    async fn last_mutation(&self) -> Option<SystemTime> {
        calls(self)
            .await
            .into_iter()
            .filter(|c| c.method.mutates())
            .map(|c| UNIX_EPOCH + Duration::from_millis(c.started_unix_ms))
            .max()
    }

    async fn mutations(&self, window: &Window) -> Vec<String> {
        calls(self)
            .await
            .into_iter()
            .filter(|c| c.method.mutates() && window.contains_unix_ms(c.started_unix_ms))
            .map(|c| format!("{} ({})", c.method.as_str(), c.request_id))
            .collect()
    }
}

impl Mutations for Recorders {
    async fn last_mutation(&self) -> Option<SystemTime> {
        Recorders::last_mutation(self)
    }

    async fn mutations(&self, window: &Window) -> Vec<String> {
        Recorders::mutations(self, window)
    }
}

/// The provider calls logged so far.
async fn calls(provider: &Provider) -> Vec<CallRecord> {
    let (code, body) = provider.admin("GET", "/calls", None).await;
    assert_eq!(code, 200, "GET /calls: {body}");
    serde_json::from_value(body).expect("the fake's call log")
}

/// kube-runtime's watcher backoff at its longest (its `DefaultBackoff`:
/// 800 ms doubling to 30 s), and a second of margin: a watch that failed
/// has relisted by then, or failed again (and logged it).
const WATCH_RETRY_AT_MOST: Duration = Duration::from_secs(31);

/// When the last retry the controller logged is due: `retry_in=` on a
/// line that starts with its timestamp, or a watch error (retried within
/// [`WATCH_RETRY_AT_MOST`]). Catching up after an outcome it could not
/// know (a call to a killed provider, a watch cut by an apiserver
/// restart) is convergence, not steady state.
pub fn last_retry_due(log: &str) -> Option<SystemTime> {
    log.lines()
        .filter_map(|line| {
            let at: k8s_openapi::jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
            let delay = if line.contains(" WARN ") && line.contains("watch") {
                WATCH_RETRY_AT_MOST
            } else {
                debug_duration(line.split("retry_in=").nth(1)?.split_whitespace().next()?)?
            };
            Some(SystemTime::from(at) + delay)
        })
        .max()
}

/// A `Duration` as its `Debug` prints it (`5s`, `1.5s`, `80ms`).
fn debug_duration(s: &str) -> Option<Duration> {
    let unit_at = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = s.split_at(unit_at);
    let n: f64 = n.parse().ok()?;
    let seconds = match unit {
        "s" => n,
        "ms" => n / 1e3,
        "µs" | "us" => n / 1e6,
        "ns" => n / 1e9,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// After convergence: waits (up to `within`) until every retry the
/// controller logged to `controller_log` is past and `sent` shows no
/// mutation for a [`LULL`], then for [`QUIET`] every Node heartbeats as a
/// kubelet does and nothing else changes. What the controller (acting as
/// `user`) mutated in the cloud or wrote to the apiserver meanwhile is
/// returned: in steady state, nothing.
pub async fn quiet(
    cluster: &Cluster,
    sent: &impl Mutations,
    controller_log: &std::path::Path,
    user: &str,
    within: Duration,
) -> Quiet {
    let nodes: Vec<String> = cluster
        .all_nodes()
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let deadline = Instant::now() + within;
    loop {
        let lull = sent
            .last_mutation()
            .await
            .is_none_or(|t| t.elapsed().unwrap_or_default() >= LULL);
        let retries_due =
            last_retry_due(&std::fs::read_to_string(controller_log).unwrap_or_default())
                .and_then(|due| due.checked_add(Duration::from_secs(1)))
                .is_some_and(|due| due > SystemTime::now());
        if (lull && !retries_due) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let window = kubelet_heartbeats(&cluster.admin, &nodes, QUIET)
        .await
        .expect("kubelet heartbeats");
    let audit = &cluster.apiserver.audit;
    audit.sync(&cluster.admin).await.expect("audit log sync");
    let writes = audit
        .writes_by(user, window.from, window.to)
        .expect("reading the audit log")
        .into_iter()
        // Renewing its own leader Lease is the one write a leader makes
        // while nothing changes.
        .filter(|w| w.resource != "leases")
        .map(|w| w.to_string())
        .collect();
    let mutations = sent.mutations(&window).await;
    Quiet { mutations, writes }
}

/// Deletes every Service that wants a load balancer or holds our
/// finalizer, then waits (bounded) until none is left and the cluster has
/// no load balancer: what is left is leaked or stuck.
pub async fn teardown(cluster: &Cluster, provider: &Provider, within: Duration) -> Census {
    for svc in cluster.all_services().await {
        if wants_lb(&svc) || has_finalizer(&svc) {
            let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
            cluster
                .delete_service(ns, svc.metadata.name.as_deref().unwrap_or_default())
                .await;
        }
    }
    let (c, _) = settle(cluster, provider, within).await;
    c
}

/// The load balancers of clusters other than `ours`.
pub fn foreign(state: &StateDump, ours: &[&str]) -> Vec<LoadBalancer> {
    state
        .load_balancers
        .iter()
        .filter(|lb| !ours.contains(&lb.cluster_name.as_str()))
        .cloned()
        .collect()
}

/// Load balancers in `before` that are gone or changed in any way (address,
/// backends, generation, …) in `after`, and any in `after` that `before`
/// did not have.
pub fn touched(before: &[LoadBalancer], after: &[LoadBalancer]) -> Vec<String> {
    let id = |lb: &LoadBalancer| (lb.cluster_name.clone(), lb.service_uid.clone());
    let then: BTreeMap<_, _> = before.iter().map(|lb| (id(lb), lb)).collect();
    let now: BTreeMap<_, _> = after.iter().map(|lb| (id(lb), lb)).collect();
    let mut out = Vec::new();
    for (k, lb) in &then {
        match now.get(k) {
            None => out.push(format!("{} deleted", lb.name)),
            Some(n) if n != lb => out.push(format!("{} changed: {lb:?} -> {n:?}", lb.name)),
            Some(_) => {}
        }
    }
    for (k, lb) in &now {
        if !then.contains_key(k) {
            out.push(format!("{} created", lb.name));
        }
    }
    out
}

/// Nodes among `created` that are gone from the apiserver although their
/// instance is still in the cloud.
pub async fn wrongly_deleted(
    cluster: &Cluster,
    provider: &Provider,
    created: &[String],
) -> Vec<String> {
    let present: BTreeSet<String> = cluster
        .all_nodes()
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let state = provider.state().await;
    let instances: BTreeSet<&str> = state.instances.iter().map(|i| i.name.as_str()).collect();
    created
        .iter()
        .filter(|n| !present.contains(*n) && instances.contains(n.as_str()))
        .cloned()
        .collect()
}

/// Waits (bounded) until every Node in `names` is initialised; those that
/// are not.
pub async fn uninitialised(cluster: &Cluster, names: &[String], within: Duration) -> Vec<String> {
    poll_until(
        within,
        POLL,
        || async {
            let nodes = cluster.all_nodes().await;
            names
                .iter()
                .filter(|name| {
                    !nodes
                        .iter()
                        .any(|n| n.metadata.name.as_ref() == Some(*name) && is_initialised(n))
                })
                .cloned()
                .collect::<Vec<String>>()
        },
        Vec::is_empty,
    )
    .await
}

/// Waits (bounded) until no Node in `names` is left; those still there.
pub async fn still_present(cluster: &Cluster, names: &[String], within: Duration) -> Vec<String> {
    poll_until(
        within,
        POLL,
        || async {
            let nodes = cluster.all_nodes().await;
            names
                .iter()
                .filter(|name| {
                    nodes
                        .iter()
                        .any(|n| n.metadata.name.as_ref() == Some(*name))
                })
                .cloned()
                .collect::<Vec<String>>()
        },
        Vec::is_empty,
    )
    .await
}

/// One scenario's counts, printed as one line and asserted zero.
#[derive(Debug, Default)]
pub struct Tally {
    pub scenario: String,
    pub services: usize,
    pub kills: usize,
    pub lbs_leaked: usize,
    pub lbs_missing: usize,
    pub finalizers_stuck: usize,
    pub nodes_wrongly_deleted: usize,
    pub foreign_lbs_touched: usize,
    /// Provider mutations in the quiet window after convergence.
    pub quiet_mutations: usize,
    /// Controller writes to the apiserver in that window.
    pub quiet_writes: usize,
    /// Scenario-specific figures, printed after the counts.
    pub extra: Vec<(String, String)>,
    /// What each nonzero count is made of, for the failure message.
    pub details: Vec<String>,
    started: Option<Instant>,
}

impl Tally {
    pub fn new(scenario: &str) -> Tally {
        Tally {
            scenario: scenario.to_owned(),
            started: Some(Instant::now()),
            ..Default::default()
        }
    }

    pub fn extra(&mut self, key: &str, value: impl std::fmt::Display) {
        self.extra.push((key.to_owned(), value.to_string()));
    }

    /// Adds a census (`phase` names it in the details).
    pub fn census(&mut self, phase: &str, c: &Census) {
        self.lbs_leaked += c.leaked.len();
        self.lbs_missing += c.missing.len();
        self.finalizers_stuck += c.stuck.len();
        for (what, list) in [
            ("leaked", &c.leaked),
            ("missing", &c.missing),
            ("stuck", &c.stuck),
        ] {
            for item in list {
                self.details.push(format!("{phase}: {what}: {item}"));
            }
        }
    }

    pub fn wrongly_deleted(&mut self, nodes: &[String]) {
        self.nodes_wrongly_deleted += nodes.len();
        for n in nodes {
            self.details
                .push(format!("node {n} deleted while its instance exists"));
        }
    }

    pub fn foreign(&mut self, touched: &[String]) {
        self.foreign_lbs_touched += touched.len();
        for t in touched {
            self.details.push(format!("foreign load balancer {t}"));
        }
    }

    pub fn quiet(&mut self, q: &Quiet) {
        self.quiet_mutations += q.mutations.len();
        self.quiet_writes += q.writes.len();
        for m in &q.mutations {
            self.details
                .push(format!("quiet window: provider mutation {m}"));
        }
        for w in &q.writes {
            self.details
                .push(format!("quiet window: controller write {w}"));
        }
    }

    pub fn line(&self) -> String {
        let mut s = format!(
            "chaos {}: services={} lbs_leaked={} lbs_missing={} finalizers_stuck={} nodes_wrongly_deleted={} foreign_lbs_touched={} quiet_mutations={} quiet_writes={} kills={}",
            self.scenario,
            self.services,
            self.lbs_leaked,
            self.lbs_missing,
            self.finalizers_stuck,
            self.nodes_wrongly_deleted,
            self.foreign_lbs_touched,
            self.quiet_mutations,
            self.quiet_writes,
            self.kills
        );
        for (k, v) in &self.extra {
            let _ = write!(s, " {k}={v}");
        }
        if let Some(t) = self.started {
            let _ = write!(s, " took_s={:.1}", t.elapsed().as_secs_f64());
        }
        s
    }

    /// Prints the line, then [`Tally::check`]s.
    pub fn finish(&self, logs: &str) {
        println!("{}", self.line());
        self.check(logs);
    }

    /// The failure message, unless every count is 0.
    pub fn failures(&self, logs: &str) -> Option<String> {
        let bad = self.lbs_leaked
            + self.lbs_missing
            + self.finalizers_stuck
            + self.nodes_wrongly_deleted
            + self.foreign_lbs_touched
            + self.quiet_mutations
            + self.quiet_writes;
        (bad > 0 || !self.details.is_empty())
            .then(|| format!("{}\n{}\nlogs: {logs}", self.line(), self.details.join("\n")))
    }

    /// Fails with the details unless every count is 0.
    pub fn check(&self, logs: &str) {
        if let Some(message) = self.failures(logs) {
            panic!("{message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn lb(cluster: &str, uid: &str) -> LoadBalancer {
        LoadBalancer {
            cluster_name: cluster.into(),
            service_uid: uid.into(),
            service_namespace: "apps".into(),
            service_name: format!("svc-{uid}"),
            name: format!("{cluster}-{uid}"),
            ip: Ipv4Addr::new(198, 18, 0, 2),
            ports: Vec::new(),
            backends: vec!["n1".to_string()].into(),
            source_ranges: Vec::new(),
            internal: false,
            health_check_path: None,
            annotations: BTreeMap::new(),
            generation: 1,
        }
    }

    #[test]
    fn touched_sees_deleted_created_and_changed_in_any_field() {
        let before = [lb("other", "a"), lb("other", "b"), lb("other", "c")];
        assert!(touched(&before, &before).is_empty());
        let mut bumped = lb("other", "b");
        bumped.generation = 2;
        let after = [lb("other", "a"), bumped, lb("other", "d")];
        let mut found = touched(&before, &after);
        found.sort();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("other-b changed"), "{found:?}");
        assert_eq!(found[1], "other-c deleted");
        assert_eq!(found[2], "other-d created");
        // The same uid in another cluster is another load balancer.
        assert_eq!(touched(&[lb("x", "a")], &[lb("y", "a")]).len(), 2);
    }

    #[test]
    fn the_last_logged_retry_is_found() {
        let log = "\
2026-11-27T06:39:55.647790Z  WARN reconcile: error processing service (retrying) service=apps/svc-15 error=x retry_in=5s
2026-11-27T06:39:55.648532Z  WARN reconcile: deleting the load balancer (retrying) service=apps/svc-15 error=y retry_in=10s
=== chaos 06:39:56: start 2 of controller
2026-11-27T06:39:57.000000Z  WARN error syncing; requeuing key=pv-1 error=z retry_in=1.5s
2026-11-27T06:39:58.000000Z  INFO nothing to retry here
";
        let due = last_retry_due(log).unwrap();
        let want: SystemTime = "2026-11-27T06:40:05.648532Z"
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .into();
        assert_eq!(due, want);
        let watch = format!(
            "{log}2026-11-27T06:40:00.000000Z  WARN cloud_controller_manager::manager::node_watch: node watch error; retrying error=Expired\n"
        );
        let want: SystemTime = "2026-11-27T06:40:31Z"
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .into();
        assert_eq!(last_retry_due(&watch), Some(want));
        assert_eq!(last_retry_due("no retries\n"), None);
        assert_eq!(debug_duration("80ms"), Some(Duration::from_millis(80)));
        assert_eq!(debug_duration("300s"), Some(Duration::from_secs(300)));
        assert_eq!(debug_duration("soon"), None);
    }

    #[test]
    fn a_tally_with_a_nonzero_count_fails_and_says_why() {
        let mut t = Tally::new("unit");
        t.census(
            "converged",
            &Census {
                leaked: vec!["lb-1".into()],
                ..Default::default()
            },
        );
        assert_eq!(t.lbs_leaked, 1);
        assert!(t.line().starts_with(
            "chaos unit: services=0 lbs_leaked=1 lbs_missing=0 finalizers_stuck=0 \
             nodes_wrongly_deleted=0 foreign_lbs_touched=0 quiet_mutations=0 quiet_writes=0 kills=0"
        ));
        let message = t.failures("logs").unwrap();
        assert!(message.contains("converged: leaked: lb-1"), "{message}");
        let mut q = Tally::new("quiet");
        q.quiet(&Quiet {
            mutations: vec!["CreateRoute (r-1)".into()],
            writes: vec![],
        });
        let message = q.failures("logs").unwrap();
        assert!(message.contains("quiet_mutations=1"), "{message}");
        assert!(
            message.contains("quiet window: provider mutation CreateRoute (r-1)"),
            "{message}"
        );
        assert_eq!(Tally::new("clean").failures("logs"), None);
    }
}
