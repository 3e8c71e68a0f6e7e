//! `cloud-controller-manager provider info`: what the provider behind
//! `--provider-endpoint` says about itself, for wiring up a new provider
//! (identity, capabilities, annotation schema, readiness, clusters).

use ccm_provider_sdk::proto::Capability;
use ccm_provider_sdk::{ClientError, ClientOptions, ProviderClient, Readiness};
use serde_json::{Value, json};

/// Asks the provider everything a person wiring it up wants to know.
/// Optional services are asked only when advertised; a failure of one of
/// them is reported in place rather than hiding the rest.
pub async fn report(endpoint: &str, options: ClientOptions) -> Result<Value, ClientError> {
    let client = ProviderClient::connect_lazy(endpoint, options)?;
    let h = client.handshake().await?;
    let capabilities: Vec<&str> = h
        .capabilities
        .iter()
        .map(|c| {
            c.as_str_name()
                .strip_prefix("CAPABILITY_")
                .unwrap_or("UNKNOWN")
        })
        .collect();
    let probe = match client.probe().await {
        Ok(Readiness::Ready) => json!({ "state": "READY" }),
        Ok(Readiness::Starting(m)) => json!({ "state": "STARTING", "message": m }),
        Ok(Readiness::NotReady(m)) => json!({ "state": "NOT_READY", "message": m }),
        Err(e) => json!({ "error": e.to_string() }),
    };
    let clusters = if h.has(Capability::Clusters) {
        match client.list_clusters().await {
            Ok(names) => {
                let mut out = Vec::new();
                for name in names {
                    let master = match client.master(&name).await {
                        Ok(m) => json!(m),
                        Err(e) => json!({ "error": e.to_string() }),
                    };
                    out.push(json!({ "name": name, "master": master }));
                }
                json!(out)
            }
            Err(e) => json!({ "error": e.to_string() }),
        }
    } else {
        Value::Null
    };
    let manifest: std::collections::BTreeMap<&String, &String> = h.info.manifest.iter().collect();
    Ok(json!({
        "endpoint": endpoint,
        "name": h.info.name,
        "vendor_version": h.info.vendor_version,
        "contract_version": h.info.contract_version,
        "provider_id_scheme": h.info.provider_id_scheme,
        "has_cluster_id": h.info.has_cluster_id,
        "manifest": manifest,
        "capabilities": capabilities,
        "annotations": {
            "prefixes": h.annotations.prefixes,
            "known_keys": h.annotations.known_keys,
            "descriptions": h.annotations.descriptions.iter().map(|d| json!({
                "key": d.key,
                "description": d.description,
                "type": d.value_type,
                "default": d.default_value,
                "example": d.example,
            })).collect::<Vec<_>>(),
        },
        "probe": probe,
        "clusters": clusters,
    }))
}

/// The report as aligned `key: value` lines.
pub fn text(report: &Value) -> String {
    let mut out = String::new();
    if let Value::Object(fields) = report {
        for (k, v) in fields {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Null => "-".to_owned(),
                other => other.to_string(),
            };
            out.push_str(&format!("{k:<20} {v}\n"));
        }
    }
    out
}
