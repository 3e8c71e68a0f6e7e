//! Writes of Nodes, answered in protobuf.
//!
//! The apiserver answers a write with the whole object written: for a Node
//! as kubelets fill it, about 12 KB, most of it images and node info. As
//! JSON (kube-rs's only format) the apiserver encodes all of it, and the
//! controller reads it to drop it or decodes it whole for one field. In
//! protobuf it costs the apiserver less to encode, and the one field the
//! controller reads, the resourceVersion its next write is guarded with,
//! is decoded alone ([`node_wire::decode_resource_version`]).

use http::header::CONTENT_TYPE;
use http_body_util::{BodyExt, Limited};
use kube::Client;
use kube::core::Request;
use kube::core::request::Error as BuildError;

use super::node_list_watch::{MAX_EVENT_BYTES, PROTOBUF, send};
use super::node_wire;

/// What the apiserver answered a Node write with.
#[derive(Debug)]
pub struct Written {
    /// The written Node's resourceVersion.
    pub resource_version: Option<String>,
}

/// Sends the Node write `build` makes of `/api/v1/nodes`, counted as
/// `verb` in the client metrics; an answer other than 2xx is the
/// apiserver's Status, as kube-rs makes it.
pub async fn write_node(
    client: &Client,
    verb: &'static str,
    build: impl FnOnce(&Request) -> Result<http::Request<Vec<u8>>, BuildError>,
) -> kube::Result<Written> {
    let mut request = build(&Request::new("/api/v1/nodes")).map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert(verb);
    let response = send(client, request, PROTOBUF).await?;
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    let body = Limited::new(response.into_body(), MAX_EVENT_BYTES)
        .collect()
        .await
        .map_err(kube::Error::Service)?
        .to_bytes();
    // An answer in JSON (a proxy in between that does not speak protobuf)
    // is read as far as the version.
    let resource_version = if json {
        serde_json::from_slice::<VersionedJson>(&body)
            .map(|o| o.metadata.resource_version)
            .map_err(kube::Error::SerdeError)?
    } else {
        node_wire::unwrap_envelope(body)
            .and_then(node_wire::decode_resource_version)
            .map_err(|e| kube::Error::Service(Box::new(e)))?
    };
    Ok(Written { resource_version })
}

#[derive(serde::Deserialize)]
struct VersionedJson {
    #[serde(default)]
    metadata: VersionedJsonMeta,
}

#[derive(Default, serde::Deserialize)]
struct VersionedJsonMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}
