//! The secure port against the real apiserver: HTTPS with the given
//! certificate, tokens checked by TokenReview and `/metrics` by
//! SubjectAccessReview, with the controller holding only its shipped
//! ClusterRole and the shipped `system:auth-delegator` binding.

use std::sync::Arc;

use crate::common::*;
use ccm_fake_provider::FakeConfig;
use http_body_util::{BodyExt, Empty};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, PolicyRule};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// A certificate for `localhost` written where the controller reads it;
/// the client trusts exactly it.
struct ServingPair {
    dir: tempfile::TempDir,
    der: rustls::pki_types::CertificateDer<'static>,
}

impl ServingPair {
    fn new() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        ServingPair {
            dir,
            der: cert.der().clone(),
        }
    }

    fn flags(&self) -> [String; 2] {
        [
            format!(
                "--tls-cert-file={}",
                self.dir.path().join("tls.crt").display()
            ),
            format!(
                "--tls-private-key-file={}",
                self.dir.path().join("tls.key").display()
            ),
        ]
    }

    fn connector(&self) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }
}

/// `GET path` over HTTPS, verifying the server as `localhost`: status and body.
async fn https_get(
    connector: &TlsConnector,
    port: u16,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = http::Request::get(path).header("host", "localhost");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = sender
        .send_request(req.body(Empty::<bytes::Bytes>::new()).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test]
async fn metrics_need_an_authorized_token_and_probes_need_none() {
    let pair = ServingPair::new();
    let port = free_port();
    let [cert, key] = pair.flags();
    let mut h = Harness::start(
        FakeConfig::default(),
        &[
            &format!("--secure-port={port}"),
            "--bind-address=127.0.0.1",
            // As the manifests: the sidecar's probe needs no identity either.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/livez/provider",
            &cert,
            &key,
        ],
    )
    .await;
    // The shipped binding, made for this test's ServiceAccount.
    let shipped: ClusterRoleBinding = serde_yaml::from_str(
        &std::fs::read_to_string(format!(
            "{}/../../deploy/base/clusterrolebinding-auth-delegator.yaml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    let env = h.env();
    env.bind_cluster_role(
        &h.admin,
        &h.ns,
        "cloud-controller-manager",
        &shipped.role_ref.name,
    )
    .await
    .unwrap();

    // A reader allowed `get` on /metrics, and somebody allowed nothing.
    env.grant_cluster_role(
        &h.admin,
        &h.ns,
        "metrics-reader",
        vec![PolicyRule {
            non_resource_urls: Some(vec!["/metrics".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }],
    )
    .await
    .unwrap();
    let reader = env
        .service_account_token(&h.ns, "metrics-reader")
        .await
        .unwrap();
    let nobody = env.service_account_token(&h.ns, "nobody").await.unwrap();

    let tls = pair.connector();
    // Probes: no identity needed (the kubelet sends none).
    let (code, body) = eventually("the secure port serving /readyz", || async {
        match https_get(&tls, port, "/readyz", None).await {
            Ok((200, body)) => Ok((200, body)),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(code, 200);
    assert!(body.contains("readyz check passed"), "{body}");
    let (code, body) = https_get(&tls, port, "/healthz", None).await.unwrap();
    assert_eq!(
        (code, body.contains("healthz check passed")),
        (200, true),
        "{body}"
    );

    // /metrics: anonymous and unauthorized callers are refused, as upstream.
    let (code, body) = https_get(&tls, port, "/metrics", None).await.unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"forbidden: User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );
    let (code, body) = https_get(&tls, port, "/metrics", Some(&nobody))
        .await
        .unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{}:nobody", h.ns)),
        "{body}"
    );
    let (code, _) = https_get(&tls, port, "/metrics", Some("not-a-token"))
        .await
        .unwrap();
    assert_eq!(code, 401, "an unknown token is unauthenticated");

    let (code, body) = https_get(&tls, port, "/metrics", Some(&reader))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    for family in [
        "ccm_provider_request_duration_seconds",
        "ccm_build_info{version=",
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
        "ccm_uninitialized_nodes ",
        "ccm_oldest_uninitialized_node_age_seconds ",
    ] {
        assert!(body.contains(family), "{family} missing: {body}");
    }
    // Only /metrics was granted.
    let (code, _) = https_get(&tls, port, "/healthz/no-such-check", Some(&reader))
        .await
        .unwrap();
    assert_eq!(code, 403);

    // A path nobody serves: 404 without a review, whoever asks.
    for token in [None, Some("not-a-token"), Some(nobody.as_str())] {
        let (code, body) = https_get(&tls, port, "/no/such/path", token).await.unwrap();
        assert_eq!(code, 404, "{token:?}: {body}");
    }

    // Plain HTTP on the secure port gets no answer.
    let plain = admin_get(port, "/healthz").await.unwrap_or_default();
    assert!(!plain.starts_with("HTTP/1."), "{plain}");

    // The provider sidecar's liveness, as its probe sees it: fails once the
    // provider is gone, while the controller's own /livez stays passing.
    let (code, body) = https_get(&tls, port, "/livez/provider", None)
        .await
        .unwrap();
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    h.stop_provider();
    let body = eventually("/livez/provider failing", || async {
        match https_get(&tls, port, "/livez/provider", None).await {
            Ok((500, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(body.starts_with("provider failed: "), "{body}");
    let (code, _) = https_get(&tls, port, "/livez", None).await.unwrap();
    assert_eq!(code, 200, "the controller itself is alive");
    h.start_provider();
    h.stop().await;
}
