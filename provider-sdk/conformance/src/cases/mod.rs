//! The registry: one table of (name, required capabilities, function).

use std::future::Future;
use std::pin::Pin;

use ccm_provider_sdk::ContractVersion;
use ccm_provider_sdk::proto::Capability;

use crate::Outcome;
use crate::ctx::{CaseResult, Ctx, Verdict};

mod batch;
mod fencing;
mod identity;
mod instances;
mod loadbalancer;
mod other;
mod routes;
mod validation;

type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;
type CaseFn = for<'a> fn(&'a Ctx) -> CaseFuture<'a>;

/// One conformance case.
pub struct Case {
    /// Stable name, `<area>/<what>`; focus and skip filters match it.
    pub name: &'static str,
    /// Capabilities the provider must advertise; otherwise the case is
    /// skipped with "provider lacks CAPABILITY_X".
    pub capabilities: &'static [Capability],
    /// The contract version that added the rule the case checks. A provider
    /// declaring an older version is not held to it: the case still runs,
    /// and a failure is reported as "not required at <declared>" (skipped),
    /// not failed.
    pub since: ContractVersion,
    run: CaseFn,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("capabilities", &self.capabilities)
            .field("since", &self.since)
            .finish()
    }
}

macro_rules! case {
    ($name:literal, [$($cap:ident),*], $f:path) => {
        case!($name, [$($cap),*], $f, V1_0_0)
    };
    ($name:literal, [$($cap:ident),*], $f:path, $since:ident) => {
        Case {
            name: $name,
            capabilities: &[$(Capability::$cap),*],
            since: ContractVersion::$since,
            run: |cx| Box::pin($f(cx)),
        }
    };
}

/// Every case, in execution order.
#[rustfmt::skip]
pub static CASES: &[Case] = &[
    // Identity and transport.
    case!("identity/provider-info-valid", [], identity::provider_info_valid),
    case!("identity/provider-id-schemes-valid", [], identity::provider_id_schemes_valid, V1_2_0),
    case!("identity/ownership-well-formed-and-stable", [], identity::ownership_well_formed_and_stable, V1_3_0),
    case!("identity/capabilities-valid", [], identity::capabilities_valid),
    case!("identity/probe-state-specified", [], identity::probe_state_specified),
    case!("identity/health-serving", [], identity::health_serving),
    case!("identity/unadvertised-services-unimplemented", [], identity::unadvertised_unimplemented),
    case!("transport/socket-private", [], identity::socket_private),
    case!("transport/authority-localhost", [], identity::authority_localhost),
    case!("transport/authority-arbitrary", [], identity::authority_arbitrary),
    // Instances.
    case!("instances/exists-known-node", [Instances], instances::exists_known_node),
    case!("instances/exists-missing-node", [Instances], instances::exists_missing_node),
    case!("instances/shutdown-known-node", [Instances], instances::shutdown_known_node),
    case!("instances/metadata-known-node", [Instances], instances::metadata_known_node),
    case!("instances/shutdown-missing-node", [Instances], instances::shutdown_missing_node),
    case!("instances/metadata-missing-node", [Instances], instances::metadata_missing_node),
    case!("instances/foreign-provider-id-refused", [Instances], instances::foreign_provider_id_refused, V1_1_0),
    case!("instances/every-owned-scheme-judged", [Instances], instances::every_owned_scheme_judged, V1_2_0),
    case!("instances/metadata-warnings-well-formed", [Instances], instances::metadata_warnings_well_formed, V1_2_0),
    case!("instances/batch-per-query-errors", [Instances, InstancesBatch], batch::per_query_errors, V1_4_0),
    case!("instances/batch-order-independent", [Instances, InstancesBatch], batch::order_independent, V1_4_0),
    case!("instances/batch-limits", [Instances, InstancesBatch], batch::limits, V1_4_0),
    case!("instances/batch-equivalent-to-single-calls", [Instances, InstancesBatch], batch::equivalent_to_single_calls, V1_4_0),
    // Request validation.
    case!("validation/instance-exists-without-node", [Instances], validation::instance_exists_without_node),
    case!("validation/instance-exists-empty-node-name", [Instances], validation::instance_exists_empty_node_name),
    case!("validation/instance-metadata-without-node", [Instances], validation::instance_metadata_without_node),
    case!("validation/ensure-lb-without-service", [LoadBalancers], validation::ensure_lb_without_service),
    case!("validation/ensure-lb-empty-cluster-name", [LoadBalancers], validation::ensure_lb_empty_cluster_name),
    case!("validation/ensure-lb-unspecified-protocol", [LoadBalancers], validation::ensure_lb_unspecified_protocol),
    case!("validation/ensure-lb-unknown-protocol", [LoadBalancers], validation::ensure_lb_unknown_protocol),
    case!("validation/ensure-lb-unspecified-traffic-policy", [LoadBalancers], validation::ensure_lb_unspecified_traffic_policy),
    case!("validation/ensure-lb-invalid-source-range", [LoadBalancers], validation::ensure_lb_invalid_source_range),
    case!("validation/ensure-lb-oversize-annotations", [LoadBalancers], validation::ensure_lb_oversize_annotations),
    case!("validation/create-route-without-route", [Routes], validation::create_route_without_route),
    case!("validation/create-route-invalid-cidr", [Routes], validation::create_route_invalid_cidr),
    // Load balancers.
    case!("loadbalancer/get-before-ensure-not-exists", [LoadBalancers], loadbalancer::get_before_ensure),
    case!("loadbalancer/ensure-returns-ingress", [LoadBalancers], loadbalancer::ensure_returns_ingress),
    case!("loadbalancer/ensure-idempotent", [LoadBalancers], loadbalancer::ensure_idempotent),
    case!("loadbalancer/get-after-ensure-exists", [LoadBalancers], loadbalancer::get_after_ensure),
    case!("loadbalancer/name-deterministic", [LoadBalancers], loadbalancer::name_deterministic),
    case!("loadbalancer/update-changed-nodes", [LoadBalancers], loadbalancer::update_changed_nodes),
    case!("loadbalancer/delete-idempotent", [LoadBalancers], loadbalancer::delete_idempotent),
    case!("loadbalancer/delete-never-created", [LoadBalancers], loadbalancer::delete_never_created),
    case!("loadbalancer/large-message", [LoadBalancers], loadbalancer::large_message),
    case!("loadbalancer/list-contains-once", [LoadBalancers, ListLoadBalancers], loadbalancer::list_contains_once),
    case!("loadbalancer/address-stable-across-port-change", [LoadBalancers], loadbalancer::address_stable_across_port_change),
    case!("loadbalancer/delete-isolated", [LoadBalancers], loadbalancer::delete_isolated),
    case!("loadbalancer/update-never-creates", [LoadBalancers], loadbalancer::update_never_creates, V1_1_0),
    case!("loadbalancer/node-set-by-id", [LoadBalancers, NodeSets], loadbalancer::node_set_by_id),
    case!("loadbalancer/node-set-unknown", [LoadBalancers, NodeSets], loadbalancer::node_set_unknown),
    // Fencing and cancellation.
    case!("fencing/malformed-token-refused", [LoadBalancers], fencing::malformed_token_refused, V1_1_0),
    case!("fencing/cancelled-ensure-never-lands", [LoadBalancers], fencing::cancelled_ensure_never_lands, V1_1_0),
    // Routes.
    case!("routes/create-idempotent", [Routes], routes::create_idempotent),
    case!("routes/list-contains-once", [Routes], routes::list_contains_once),
    case!("routes/create-conflicting", [Routes], routes::create_conflicting),
    case!("routes/delete-idempotent", [Routes], routes::delete_idempotent),
    case!("routes/delete-never-created", [Routes], routes::delete_never_created),
    case!("routes/list-thousands", [Routes], routes::list_thousands),
    case!("routes/lists-back-as-created", [Routes, RoutesTargetNodeAddresses], routes::lists_back_as_created, V1_1_0),
    case!("routes/update-in-place", [Routes, RoutesTargetNodeAddresses], routes::update_in_place, V1_1_0),
    // Zones and clusters.
    case!("zones/by-node-name-known", [Zones], other::zone_by_node_name_known),
    case!("zones/by-node-name-missing", [Zones], other::zone_by_node_name_missing),
    case!("zones/by-provider-id-missing", [Zones], other::zone_by_provider_id_missing),
    case!("volumes/labels-valid", [VolumeLabels], other::volume_labels_valid),
    case!("validation/volume-labels-without-volume", [VolumeLabels], other::volume_labels_without_volume),
    case!("clusters/list-valid", [Clusters], other::list_clusters_valid),
    case!("clusters/master-valid", [Clusters], other::master_valid),
    case!("clusters/master-unknown-not-found", [Clusters], other::master_unknown_not_found, V1_1_0),
];

pub(crate) async fn run_case(cx: &Ctx, case: &Case) -> Outcome {
    if let Some(cap) = case.capabilities.iter().find(|c| !cx.has(**c)) {
        return Outcome::Skipped(format!("provider lacks {}", cap.as_str_name()));
    }
    let outcome = match tokio::time::timeout(cx.config.case_timeout, (case.run)(cx)).await {
        Err(_) => Outcome::Failed(format!(
            "did not finish within {:?}",
            cx.config.case_timeout
        )),
        Ok(Ok(())) => Outcome::Passed,
        Ok(Err(Verdict::Fail(why))) => Outcome::Failed(why),
        Ok(Err(Verdict::Skip(why))) => Outcome::Skipped(why),
    };
    grade(cx.declared, case.since, outcome)
}

/// A failure of a rule newer than the version the provider declares is
/// reported, not failed. `declared` is `None` when the provider's
/// contract_version does not parse: then every rule applies.
fn grade(declared: Option<ContractVersion>, since: ContractVersion, outcome: Outcome) -> Outcome {
    match (declared, outcome) {
        (Some(v), Outcome::Failed(why)) if !v.has(since) => {
            Outcome::Skipped(format!("not required at {v} (a rule of {since}): {why}"))
        }
        (_, outcome) => outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_of_newer_rules_are_reported_not_failed() {
        let v1_0 = Some(ContractVersion::V1_0_0);
        let failed = || Outcome::Failed("expected X".into());
        assert_eq!(
            grade(v1_0, ContractVersion::V1_1_0, failed()),
            Outcome::Skipped("not required at 1.0.0 (a rule of 1.1.0): expected X".into())
        );
        assert_eq!(grade(v1_0, ContractVersion::V1_0_0, failed()), failed());
        assert_eq!(
            grade(
                Some(ContractVersion::V1_1_0),
                ContractVersion::V1_1_0,
                failed()
            ),
            failed()
        );
        assert_eq!(grade(None, ContractVersion::V1_1_0, failed()), failed());
        assert_eq!(
            grade(v1_0, ContractVersion::V1_1_0, Outcome::Passed),
            Outcome::Passed
        );
    }

    #[test]
    fn no_case_is_newer_than_this_contract() {
        for c in CASES {
            assert!(ContractVersion::current().has(c.since), "{}", c.name);
        }
    }
}
