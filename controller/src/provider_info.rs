//! `cloud-controller-manager provider info`: what the provider behind
//! `--provider-endpoint` (or each `--provider`) says about itself, for
//! wiring up a new provider (identity, capabilities, annotation schema,
//! readiness, clusters).

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
    let unclassed = ccm_provider_sdk::proto::UnclassedServices::try_from(h.info.unclassed_services)
        .map(|u| {
            u.as_str_name()
                .trim_start_matches("UNCLASSED_SERVICES_")
                .to_owned()
        })
        .unwrap_or_else(|_| format!("UNKNOWN ({})", h.info.unclassed_services));
    Ok(json!({
        "endpoint": endpoint,
        "name": h.info.name,
        "vendor_version": h.info.vendor_version,
        "contract_version": h.info.contract_version,
        "provider_id_scheme": h.info.provider_id_scheme,
        // Every scheme it owns (contract 1.2.0); the one above alone when it
        // lists none.
        "provider_id_schemes": h.schemes(),
        "has_cluster_id": h.info.has_cluster_id,
        // Contract 1.3.0: what routing to several providers reads.
        "load_balancer_classes": h.info.load_balancer_classes,
        "unclassed_services": unclassed,
        "platforms": h.info.platforms,
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

/// One configured provider's answer (its report, its annotation
/// reference), or why there is none.
pub struct Named<T = Value> {
    pub name: String,
    pub endpoint: String,
    pub report: Result<T, ClientError>,
}

/// `ask` of every configured provider, all at once: one that hangs costs
/// its deadlines, not the others'.
async fn ask_all<T, F>(
    providers: &[crate::config::Endpoint],
    options: ClientOptions,
    ask: impl Fn(String, ClientOptions) -> F,
) -> Vec<Named<T>>
where
    F: std::future::Future<Output = Result<T, ClientError>>,
{
    futures::future::join_all(providers.iter().map(|p| {
        let answer = ask(p.endpoint.clone(), options.clone());
        async move {
            Named {
                name: p.name.clone(),
                endpoint: p.endpoint.clone(),
                report: answer.await,
            }
        }
    }))
    .await
}

/// [`report`] of every configured provider.
pub async fn report_all(
    providers: &[crate::config::Endpoint],
    options: ClientOptions,
) -> Vec<Named> {
    ask_all(
        providers,
        options,
        |e, o| async move { report(&e, o).await },
    )
    .await
}

/// [`annotations`] of every configured provider.
pub async fn annotations_all(
    providers: &[crate::config::Endpoint],
    options: ClientOptions,
) -> Vec<Named<String>> {
    ask_all(providers, options, |e, o| async move {
        annotations(&e, o).await
    })
    .await
}

/// Every provider's annotation reference under a header with its name;
/// one that did not answer says why in place.
pub fn annotations_text_all(references: &[Named<String>]) -> String {
    let mut out = String::new();
    for (i, n) in references.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("# Provider {}\n\n", n.name));
        match &n.report {
            Ok(reference) => out.push_str(reference),
            Err(e) => out.push_str(&format!("Not answering: {e}\n")),
        }
    }
    out
}

/// Every provider that did not answer, and why; `None` when all did.
pub fn failures<T>(answers: &[Named<T>]) -> Option<String> {
    let failed: Vec<String> = answers
        .iter()
        .filter_map(|n| {
            let e = n.report.as_ref().err()?;
            Some(format!("{} at {}: {e}", n.name, n.endpoint))
        })
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// Every provider's [`text`] under a header with its name; one that did
/// not answer says why in place.
pub fn text_all(reports: &[Named]) -> String {
    let mut out = String::new();
    for (i, n) in reports.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("=== provider {} ===\n", n.name));
        match &n.report {
            Ok(r) => out.push_str(&text(r)),
            Err(e) => out.push_str(&text(&error_report(n, e))),
        }
    }
    out
}

/// Every provider's report, in `--provider` order, each with its name
/// under `provider`; one that did not answer has `error` instead.
pub fn json_all(reports: &[Named]) -> Value {
    Value::Array(
        reports
            .iter()
            .map(|n| {
                let mut fields = serde_json::Map::new();
                fields.insert("provider".into(), json!(n.name));
                match &n.report {
                    Ok(Value::Object(r)) => fields.extend(r.clone()),
                    Ok(other) => {
                        fields.insert("report".into(), other.clone());
                    }
                    Err(e) => {
                        if let Value::Object(r) = error_report(n, e) {
                            fields.extend(r);
                        }
                    }
                }
                Value::Object(fields)
            })
            .collect(),
    )
}

fn error_report(n: &Named, e: &ClientError) -> Value {
    json!({ "endpoint": n.endpoint, "error": e.to_string() })
}

/// A provider's annotation schema as a Markdown section: what
/// `provider annotations` prints, and what docs/annotations.md is made of.
pub fn annotations_markdown(
    info: &ccm_provider_sdk::proto::GetProviderInfoResponse,
    schema: &ccm_provider_sdk::proto::AnnotationSchema,
) -> String {
    let cell = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.replace('|', "\\|").replace('\n', " ")
        }
    };
    let code = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            format!("`{}`", s.replace('`', "'"))
        }
    };
    let mut out = format!(
        "## {} (providerID scheme `{}://`)\n\n",
        info.name, info.provider_id_scheme
    );
    if schema.prefixes.is_empty() {
        out.push_str("It claims no annotation prefix.\n\n");
    } else {
        let prefixes: Vec<String> = schema.prefixes.iter().map(|p| code(p)).collect();
        out.push_str(&format!(
            "It owns {}: a Service annotation under {} that is not listed below gets one `UnknownAnnotation` Warning Event naming the closest known key.\n\n",
            prefixes.join(", "),
            if prefixes.len() == 1 { "it" } else { "them" },
        ));
    }
    if schema.known_keys.is_empty() {
        out.push_str("It reads no annotation.\n");
        return out;
    }
    out.push_str(
        "| annotation | type | default | example | what it does |\n|---|---|---|---|---|\n",
    );
    let mut keys: Vec<&String> = schema.known_keys.iter().collect();
    keys.sort();
    for key in keys {
        match schema.descriptions.iter().find(|d| &d.key == key) {
            Some(d) => out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                code(key),
                cell(&d.value_type),
                cell(&d.default_value),
                code(&d.example),
                cell(&d.description),
            )),
            None => out.push_str(&format!(
                "| {} | - | - | - | (not described by the provider) |\n",
                code(key)
            )),
        }
    }
    out
}

/// The annotation reference of the provider behind `endpoint`.
pub async fn annotations(endpoint: &str, options: ClientOptions) -> Result<String, ClientError> {
    let client = ProviderClient::connect_lazy(endpoint, options)?;
    let h = client.handshake().await?;
    Ok(annotations_markdown(&h.info, &h.annotations))
}

#[cfg(test)]
mod tests {
    use ccm_provider_sdk::Identity;

    use super::*;

    const ANNOTATIONS_DOC_HEAD: &str = "# Annotation reference

Generated from the annotation schemas the in-tree providers answer in
`GetProviderCapabilities` (do not edit: `UPDATE_ANNOTATIONS_DOC=1 cargo test
-p cloud-controller-manager --lib annotation_reference` rewrites it, and
`make test` fails when it is stale). For any provider, the same section
comes from the running provider:

```sh
cloud-controller-manager provider annotations --provider-endpoint unix:///var/run/cloud-provider/provider.sock
```

The controller passes all of a Service's annotations to the provider and
reports a key under one of the provider's prefixes that the provider does
not declare (a typo) as one `UnknownAnnotation` Warning Event naming the
closest known key. A malformed
value is the provider's to refuse (`INVALID_ANNOTATION`, shown on the
Service as the `LoadBalancerReady` condition's reason and a
`SyncLoadBalancerFailed` Event naming the key).
";

    /// docs/annotations.md is made from the in-tree providers' own schemas;
    /// `UPDATE_ANNOTATIONS_DOC=1` rewrites it.
    #[test]
    fn the_annotation_reference_is_generated_from_the_providers() {
        let fake = ccm_fake_provider::FakeCloud::new(Default::default()).unwrap();
        let mut doc = String::from(ANNOTATIONS_DOC_HEAD);
        for (info, schema) in [
            (fake.info(), fake.annotation_schema()),
            (
                ccm_provider_sdk::ProviderInfo {
                    name: ccm_local_provider::cloud::NAME.into(),
                    provider_id_scheme: ccm_local_provider::cloud::SCHEME.into(),
                    ..Default::default()
                },
                ccm_local_provider::annotations::schema(),
            ),
        ] {
            let info = ccm_provider_sdk::proto::GetProviderInfoResponse {
                name: info.name,
                provider_id_scheme: info.provider_id_scheme,
                ..Default::default()
            };
            doc.push('\n');
            doc.push_str(&annotations_markdown(&info, &schema));
        }
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/annotations.md");
        if std::env::var_os("UPDATE_ANNOTATIONS_DOC").is_some() {
            std::fs::write(path, &doc).unwrap();
        }
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == doc,
            "docs/annotations.md is stale: run UPDATE_ANNOTATIONS_DOC=1 cargo test -p cloud-controller-manager --lib annotation_reference"
        );
    }

    #[test]
    fn undescribed_keys_and_pipes_are_rendered_safely() {
        let info = ccm_provider_sdk::proto::GetProviderInfoResponse {
            name: "x".into(),
            provider_id_scheme: "x".into(),
            ..Default::default()
        };
        let schema = ccm_provider_sdk::proto::AnnotationSchema {
            prefixes: vec![],
            known_keys: vec!["b/k".into(), "a/k".into()],
            descriptions: vec![ccm_provider_sdk::proto::AnnotationDescription {
                key: "a/k".into(),
                description: "one | two".into(),
                ..Default::default()
            }],
        };
        let md = annotations_markdown(&info, &schema);
        assert!(md.contains("It claims no annotation prefix."), "{md}");
        assert!(md.contains("| `a/k` | - | - | - | one \\| two |"), "{md}");
        assert!(
            md.contains("| `b/k` | - | - | - | (not described by the provider) |"),
            "{md}"
        );
        assert!(md.find("`a/k`") < md.find("`b/k`"), "sorted: {md}");
    }
}
