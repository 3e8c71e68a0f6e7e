//! InstancesService cases.

use ccm_provider_sdk::proto::{
    ErrorReason, InstanceExistence, InstanceExistsRequest, InstanceMetadataRequest,
    InstanceShutdownRequest, InstanceShutdownState, NodeRef,
};
use ccm_provider_sdk::validate;
use tonic::Code;

use crate::ctx::{CaseResult, Ctx, INVALID_REASONS, Reasons, check, expect_error, fail, ok, once};

const NOT_FOUND: Reasons<'static> = Reasons::Required(&[ErrorReason::InstanceNotFound]);

pub(super) async fn exists_known_node(cx: &Ctx) -> CaseResult {
    cx.known_node().await.map(|_| ())
}

pub(super) async fn exists_missing_node(cx: &Ctx) -> CaseResult {
    let node = cx.missing_node();
    let r = ok(
        "InstanceExists(missing node)",
        once!(
            cx,
            instances.instance_exists(InstanceExistsRequest {
                node: Some(node.clone())
            })
        ),
    )?;
    match InstanceExistence::try_from(r.existence) {
        Ok(InstanceExistence::NotExists) => Ok(()),
        Ok(InstanceExistence::Unspecified) => fail!(
            "InstanceExists({}): expected NOT_EXISTS, got UNSPECIFIED (0); an unset answer must never stand for \"no\"",
            node.provider_id
        ),
        Ok(InstanceExistence::Exists) => fail!(
            "InstanceExists({}): expected NOT_EXISTS for an instance that cannot exist, got EXISTS",
            node.provider_id
        ),
        Err(_) => fail!(
            "InstanceExists({}): expected NOT_EXISTS, got unknown value {}",
            node.provider_id,
            r.existence
        ),
    }
}

pub(super) async fn shutdown_known_node(cx: &Ctx) -> CaseResult {
    let node = cx.known_node().await?;
    let r = ok(
        "InstanceShutdown(known node)",
        once!(
            cx,
            instances.instance_shutdown(InstanceShutdownRequest {
                node: Some(node.clone())
            })
        ),
    )?;
    match InstanceShutdownState::try_from(r.state) {
        Ok(InstanceShutdownState::Running | InstanceShutdownState::ShutDown) => Ok(()),
        _ => fail!(
            "InstanceShutdown({}): expected RUNNING or SHUT_DOWN, got {}",
            node.name,
            r.state
        ),
    }
}

pub(super) async fn metadata_known_node(cx: &Ctx) -> CaseResult {
    let node = cx.known_node().await?;
    let r = ok(
        "InstanceMetadata(known node)",
        once!(
            cx,
            instances.instance_metadata(InstanceMetadataRequest {
                node: Some(node.clone())
            })
        ),
    )?;
    let Some(m) = r.metadata else {
        fail!(
            "InstanceMetadata({}): expected metadata to be set, got unset",
            node.name
        );
    };
    let owned = validate::owned_schemes(&cx.info);
    check!(
        validate::is_owned_provider_id(&m.provider_id, &owned),
        "InstanceMetadata({}).provider_id: expected \"<scheme>://<id>\" with a scheme of {}, got {:?}",
        node.name,
        owned.join(", "),
        m.provider_id
    );
    if let Err(v) = validate::node_addresses("metadata.node_addresses", &m.node_addresses) {
        fail!("InstanceMetadata({}): invalid address: {v}", node.name);
    }
    if let Err(v) = validate::labels("metadata.additional_labels", &m.additional_labels) {
        fail!("InstanceMetadata({}): invalid label: {v}", node.name);
    }
    Ok(())
}

pub(super) async fn shutdown_missing_node(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        instances.instance_shutdown(InstanceShutdownRequest {
            node: Some(cx.missing_node())
        })
    );
    expect_error(
        "InstanceShutdown(missing node)",
        r,
        &[Code::NotFound],
        NOT_FOUND,
    )
}

pub(super) async fn metadata_missing_node(cx: &Ctx) -> CaseResult {
    let r = once!(
        cx,
        instances.instance_metadata(InstanceMetadataRequest {
            node: Some(cx.missing_node())
        })
    );
    expect_error(
        "InstanceMetadata(missing node)",
        r,
        &[Code::NotFound],
        NOT_FOUND,
    )
}

/// A Node whose providerID has another scheme, or is not a providerID, is
/// not this provider's to judge: INVALID_ARGUMENT (INVALID_REQUEST, field
/// node.provider_id), never NOT_EXISTS (the controller deletes Nodes on
/// NOT_EXISTS) and never NOT_FOUND (the controller would take the instance
/// for gone).
pub(super) async fn foreign_provider_id_refused(cx: &Ctx) -> CaseResult {
    let other = format!("{}-other", cx.info.provider_id_scheme);
    for provider_id in [
        format!("{other}:///zone-a/i-0123"),
        "not-a-provider-id".to_owned(),
        format!("{}://", cx.info.provider_id_scheme),
    ] {
        let node = NodeRef {
            name: format!("conformance-foreign-{}", cx.run_id),
            provider_id: provider_id.clone(),
            ..Default::default()
        };
        let r = once!(
            cx,
            instances.instance_exists(InstanceExistsRequest {
                node: Some(node.clone())
            })
        );
        expect_error(
            &format!("InstanceExists(providerID {provider_id:?})"),
            r,
            &[Code::InvalidArgument],
            INVALID_REASONS,
        )?;
        let r = once!(
            cx,
            instances.instance_shutdown(InstanceShutdownRequest { node: Some(node) })
        );
        expect_error(
            &format!("InstanceShutdown(providerID {provider_id:?})"),
            r,
            &[Code::InvalidArgument],
            INVALID_REASONS,
        )?;
    }
    Ok(())
}

/// Contract 1.2.0: a Node of every scheme the provider owns
/// (`provider_id_schemes`) is the provider's to judge: InstanceExists of an
/// instance of each that does not exist is not refused as another cloud's
/// (INVALID_ARGUMENT), which would leave such Nodes unmanaged.
pub(super) async fn every_owned_scheme_judged(cx: &Ctx) -> CaseResult {
    let missing = cx.missing_node();
    for scheme in validate::owned_schemes(&cx.info) {
        let provider_id = match validate::split_provider_id(&missing.provider_id) {
            Some((s, _)) if s == scheme => missing.provider_id.clone(),
            _ => format!("{scheme}://{}", missing.name),
        };
        let node = NodeRef {
            provider_id: provider_id.clone(),
            ..missing.clone()
        };
        let r = once!(
            cx,
            instances.instance_exists(InstanceExistsRequest { node: Some(node) })
        );
        if let Err(s) = r
            && s.code() == Code::InvalidArgument
        {
            fail!(
                "InstanceExists(providerID {provider_id:?}): the provider owns the scheme {scheme:?} (GetProviderInfo.provider_id_schemes), expected an answer, got {}",
                crate::ctx::describe(&s)
            );
        }
    }
    Ok(())
}

/// Contract 1.2.0: the warnings about a Node an InstanceMetadata answer
/// carries become Warning Events: at most 16, each with a CamelCase reason
/// and a message.
pub(super) async fn metadata_warnings_well_formed(cx: &Ctx) -> CaseResult {
    let node = cx.known_node().await?;
    let r = ok(
        "InstanceMetadata(known node)",
        once!(
            cx,
            instances.instance_metadata(InstanceMetadataRequest {
                node: Some(node.clone())
            })
        ),
    )?;
    if let Err(v) = validate::node_warnings("warnings", &r.warnings) {
        fail!("InstanceMetadata({}): {v}", node.name);
    }
    Ok(())
}
