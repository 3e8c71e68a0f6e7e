//! IdentityService, health, and transport cases.

use std::collections::BTreeSet;

use ccm_provider_sdk::proto::{
    self, Capability, GetProviderCapabilitiesRequest, GetProviderInfoRequest, ProbeRequest,
    ProbeState,
};
use ccm_provider_sdk::{ContractVersion, validate};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::ctx::{CaseResult, Ctx, Verdict, check, describe, fail, ok, once, uds_channel};

/// `MAJOR.MINOR.PATCH[-pre][+build]`, without a leading "v".
pub(crate) fn is_semver(s: &str) -> bool {
    let core = s.split('+').next().unwrap_or_default();
    let core = core.split('-').next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'))
        })
}

pub(super) async fn provider_info_valid(cx: &Ctx) -> CaseResult {
    let i = &cx.info;
    check!(
        validate::is_dns_label(&i.name),
        "GetProviderInfo.name: expected a DNS-1123 label of at most 63 characters, got {:?}",
        i.name
    );
    check!(
        !i.vendor_version.is_empty(),
        "GetProviderInfo.vendor_version: expected non-empty, got \"\""
    );
    check!(
        !i.provider_id_scheme.is_empty(),
        "GetProviderInfo.provider_id_scheme: expected non-empty, got \"\""
    );
    check!(
        !i.provider_id_scheme.contains(':') && !i.provider_id_scheme.contains('/'),
        "GetProviderInfo.provider_id_scheme: expected the part before \"://\", got {:?}",
        i.provider_id_scheme
    );
    check!(
        is_semver(&i.contract_version),
        "GetProviderInfo.contract_version: expected semver without \"v\" (e.g. \"1.0.0\"), got {:?}",
        i.contract_version
    );
    Ok(())
}

pub(super) async fn capabilities_valid(cx: &Ctx) -> CaseResult {
    let mut seen = BTreeSet::new();
    for c in &cx.caps {
        check!(
            *c != Capability::Unspecified as i32,
            "GetProviderCapabilities: expected no CAPABILITY_UNSPECIFIED, got {:?}",
            cx.caps
        );
        check!(
            seen.insert(*c),
            "GetProviderCapabilities: expected each capability once, got {c} twice in {:?}",
            cx.caps
        );
    }
    check!(
        !cx.has(Capability::ListLoadBalancers) || cx.has(Capability::LoadBalancers),
        "GetProviderCapabilities: CAPABILITY_LIST_LOAD_BALANCERS without CAPABILITY_LOAD_BALANCERS"
    );
    check!(
        !cx.has(Capability::NodeSets) || cx.has(Capability::LoadBalancers),
        "GetProviderCapabilities: CAPABILITY_NODE_SETS without CAPABILITY_LOAD_BALANCERS"
    );
    check!(
        !cx.has(Capability::RoutesTargetNodeAddresses) || cx.has(Capability::Routes),
        "GetProviderCapabilities: CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES without CAPABILITY_ROUTES"
    );
    // The answer must be stable for the life of a vendor_version.
    let again = ok(
        "GetProviderCapabilities",
        once!(
            cx,
            identity.get_provider_capabilities(GetProviderCapabilitiesRequest::default())
        ),
    )?;
    check!(
        again.capabilities == cx.caps,
        "GetProviderCapabilities: expected the same answer on every call, got {:?} then {:?}",
        cx.caps,
        again.capabilities
    );
    // The controller warns about keys under a prefix that are not known:
    // a known key outside every prefix, or a prefix that is not a
    // "domain/" the apiserver accepts, would make those warnings wrong.
    let schema = again.annotations.unwrap_or_default();
    for p in &schema.prefixes {
        check!(
            p.ends_with('/') && p.len() > 1,
            "GetProviderCapabilities.annotations.prefixes: expected \"<domain>/\", got {p:?}"
        );
    }
    for k in &schema.known_keys {
        check!(
            schema.prefixes.is_empty() || schema.prefixes.iter().any(|p| k.starts_with(p.as_str())),
            "GetProviderCapabilities.annotations.known_keys: {k:?} is under none of the prefixes {:?}",
            schema.prefixes
        );
    }
    for d in &schema.descriptions {
        check!(
            !d.key.is_empty() && !d.description.is_empty(),
            "GetProviderCapabilities.annotations.descriptions: key and description are REQUIRED, got key {:?} description {:?}",
            d.key,
            d.description
        );
        check!(
            schema.known_keys.contains(&d.key),
            "GetProviderCapabilities.annotations.descriptions: {:?} is described but not in known_keys",
            d.key
        );
    }
    Ok(())
}

pub(super) async fn probe_state_specified(cx: &Ctx) -> CaseResult {
    let r = ok("Probe", once!(cx, identity.probe(ProbeRequest {})))?;
    match ProbeState::try_from(r.state) {
        Ok(ProbeState::Ready | ProbeState::Starting | ProbeState::NotReady) => Ok(()),
        Ok(ProbeState::Unspecified) => {
            fail!("Probe.state: expected READY, STARTING or NOT_READY, got UNSPECIFIED (0)")
        }
        Err(_) => fail!(
            "Probe.state: expected READY, STARTING or NOT_READY, got unknown value {}",
            r.state
        ),
    }
}

pub(super) async fn health_serving(cx: &Ctx) -> CaseResult {
    let r = HealthClient::new(cx.channel.clone())
        .check(cx.req(HealthCheckRequest {
            service: String::new(),
        }))
        .await;
    let r = ok(
        "grpc.health.v1.Health/Check(\"\")",
        r.map(|r| r.into_inner()),
    )?;
    check!(
        r.status == ServingStatus::Serving as i32,
        "grpc.health.v1.Health/Check(\"\"): expected SERVING, got {:?}",
        ServingStatus::try_from(r.status)
    );
    Ok(())
}

fn expect_unimplemented<T: std::fmt::Debug>(what: &str, r: Result<T, tonic::Status>) -> CaseResult {
    match r {
        Err(s) if s.code() == Code::Unimplemented => Ok(()),
        Err(s) => fail!(
            "{what} (not advertised): expected code Unimplemented, got {}",
            describe(&s)
        ),
        Ok(v) => fail!("{what} (not advertised): expected code Unimplemented, got OK: {v:?}"),
    }
}

pub(super) async fn unadvertised_unimplemented(cx: &Ctx) -> CaseResult {
    let mut tried = 0;
    if !cx.has(Capability::Instances) {
        tried += 1;
        let r = once!(
            cx,
            instances.instance_exists(proto::InstanceExistsRequest {
                node: Some(cx.node(0))
            })
        );
        expect_unimplemented("InstanceExists", r)?;
    }
    if !cx.has(Capability::LoadBalancers) {
        tried += 1;
        let r = once!(
            cx,
            lb.get_load_balancer_name(proto::GetLoadBalancerNameRequest {
                cluster_name: cx.cluster.clone(),
                service: Some(cx.service("unadvertised")),
            })
        );
        expect_unimplemented("GetLoadBalancerName", r)?;
    } else if !cx.has(Capability::ListLoadBalancers) {
        tried += 1;
        let r = once!(
            cx,
            lb.list_load_balancers(proto::ListLoadBalancersRequest {
                cluster_name: cx.cluster.clone(),
                ..Default::default()
            })
        );
        expect_unimplemented("ListLoadBalancers", r)?;
    }
    if cx.has(Capability::LoadBalancers) && !cx.has(Capability::NodeSets) {
        tried += 1;
        let r = once!(
            cx,
            lb.put_node_set(proto::PutNodeSetRequest {
                cluster_name: cx.cluster.clone(),
                node_set_id: "conformance-unadvertised".into(),
                nodes: cx.nodes(0..1),
            })
        );
        expect_unimplemented("PutNodeSet", r)?;
    }
    if !cx.has(Capability::Routes) {
        tried += 1;
        let r = once!(
            cx,
            routes.list_routes(proto::ListRoutesRequest {
                cluster_name: cx.cluster.clone(),
                ..Default::default()
            })
        );
        expect_unimplemented("ListRoutes", r)?;
    }
    if !cx.has(Capability::Zones) {
        tried += 1;
        let r = once!(
            cx,
            zones.get_zone_by_node_name(proto::GetZoneByNodeNameRequest {
                node_name: cx.node(0).name,
            })
        );
        expect_unimplemented("GetZoneByNodeName", r)?;
    }
    if !cx.has(Capability::VolumeLabels) {
        tried += 1;
        let r = once!(
            cx,
            volumes.get_volume_labels(proto::GetVolumeLabelsRequest {
                volume: Some(super::other::volume(cx)),
            })
        );
        expect_unimplemented("GetVolumeLabels", r)?;
    }
    if !cx.has(Capability::Clusters) {
        tried += 1;
        let r = once!(cx, clusters.list_clusters(proto::ListClustersRequest {}));
        expect_unimplemented("ListClusters", r)?;
    }
    if tried == 0 {
        return Err(Verdict::Skip(
            "provider advertises every optional service".into(),
        ));
    }
    Ok(())
}

async fn with_authority(cx: &Ctx, authority: &str) -> CaseResult {
    let channel = uds_channel(cx.path.clone(), authority).map_err(Verdict::Fail)?;
    let r = proto::identity_service_client::IdentityServiceClient::new(channel)
        .get_provider_info(cx.req(GetProviderInfoRequest {}))
        .await
        .map(|r| r.into_inner());
    let r = ok(&format!("GetProviderInfo with :authority {authority:?}"), r)?;
    check!(
        r.name == cx.info.name,
        "GetProviderInfo with :authority {authority:?}: expected name {:?}, got {:?}",
        cx.info.name,
        r.name
    );
    Ok(())
}

pub(super) async fn authority_localhost(cx: &Ctx) -> CaseResult {
    with_authority(cx, "localhost").await
}

pub(super) async fn authority_arbitrary(cx: &Ctx) -> CaseResult {
    with_authority(cx, "provider.invalid").await?;
    with_authority(cx, "ccm-provider.example:8443").await
}

/// The controller refuses a socket others can connect to (write bit for
/// others): a provider that creates one would pass everything else and
/// still never be used.
pub(super) async fn socket_private(cx: &Ctx) -> CaseResult {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(&cx.path) {
        Ok(m) => m.permissions().mode() & 0o777,
        Err(e) => fail!("stat {}: {e}", cx.path.display()),
    };
    check!(
        ccm_provider_sdk::endpoint::socket_mode_is_private(mode),
        "socket {} has mode {mode:04o}: other users can connect (write bit for others), and the controller refuses it; create it 0600 (or 0660 to share with a group)",
        cx.path.display()
    );
    Ok(())
}

/// Contract 1.2.0: `provider_id_schemes` is empty, or valid schemes, none
/// twice, at most 16, `provider_id_scheme` among them.
pub(super) async fn provider_id_schemes_valid(cx: &Ctx) -> CaseResult {
    if let Err(v) = validate::provider_id_schemes(&cx.info) {
        fail!("GetProviderInfo.{v}");
    }
    Ok(())
}

/// Contract 1.3.0: what a controller running several providers routes by
/// is well-formed and the same on a second `GetProviderInfo`: the
/// providerID schemes the provider owns, the load balancer classes it
/// serves (valid, none twice, at most 32), whether it serves Services
/// without a class (a value of the contract) and its platforms (DNS-1123
/// labels, none twice, at most 16). A provider declaring 1.2.0 keeps the
/// format of its schemes from `identity/provider-id-schemes-valid`; the
/// rest is reported not required for it.
pub(super) async fn ownership_well_formed_and_stable(cx: &Ctx) -> CaseResult {
    let first = &cx.info;
    if let Err(v) = validate::identity_lists(first) {
        fail!("GetProviderInfo.{v}");
    }
    // A provider declaring a newer contract than this suite's may send a
    // value the suite does not know, and the controller reads it as
    // UNSPECIFIED; one declaring this contract or an older one has no such
    // value to send.
    let newer = cx.declared.is_some_and(|v| v > ContractVersion::current());
    if !newer && let Err(v) = validate::unclassed_services(first) {
        fail!(
            "GetProviderInfo.{v} (UNCLASSED_SERVICES_UNSPECIFIED, _SERVED or _DECLINED at {})",
            ContractVersion::current()
        );
    }
    let second = ok(
        "GetProviderInfo",
        once!(cx, identity.get_provider_info(GetProviderInfoRequest {})),
    )?;
    let stable = [
        (
            "provider_id_schemes",
            validate::owned_schemes(first),
            validate::owned_schemes(&second),
        ),
        (
            "load_balancer_classes",
            first
                .load_balancer_classes
                .iter()
                .map(String::as_str)
                .collect(),
            second
                .load_balancer_classes
                .iter()
                .map(String::as_str)
                .collect(),
        ),
        (
            "platforms",
            first.platforms.iter().map(String::as_str).collect(),
            second.platforms.iter().map(String::as_str).collect(),
        ),
    ];
    for (field, a, b) in stable {
        check!(
            a == b,
            "GetProviderInfo.{field}: expected the same on every answer (the controller routes Nodes and Services by it), got {a:?} then {b:?}"
        );
    }
    check!(
        first.unclassed_services == second.unclassed_services,
        "GetProviderInfo.unclassed_services: expected the same on every answer, got {} then {}",
        first.unclassed_services,
        second.unclassed_services
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_semver() {
        assert!(validate::is_dns_label("fake"));
        assert!(validate::is_dns_label("example-cloud2"));
        assert!(!validate::is_dns_label("Fake"));
        assert!(!validate::is_dns_label("-x"));
        assert!(!validate::is_dns_label(""));
        assert!(!validate::is_dns_label(&"a".repeat(64)));
        assert!(is_semver("1.0.0"));
        assert!(is_semver("1.2.3-rc.1+build"));
        assert!(!is_semver("v1.0.0"));
        assert!(!is_semver("1.0"));
        assert!(!is_semver("01.0.0"));
    }
}
