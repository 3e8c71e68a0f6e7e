//! The admin HTTP API over its Unix socket, in-process and in the binary.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ccm_fake_provider::{FakeConfig, admin};
use ccm_provider_sdk::proto::ErrorReason;
use ccm_provider_sdk::{ClientOptions, Existence, ProviderClient, Readiness};
use common::{node, service, start, wait_for};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// One HTTP/1.1 request over a Unix socket; returns status and JSON body
/// (`Null` when empty, a string when not JSON).
async fn http(socket: &Path, method: &str, uri: &str, body: Option<Value>) -> (u16, Value) {
    let mut stream = UnixStream::connect(socket).await.expect("admin socket");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {uri} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a full response");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()))
    };
    (status, value)
}

#[tokio::test]
async fn admin_api_controls_the_running_fake() {
    let r = start(FakeConfig {
        auto_create_instances: false,
        ..Default::default()
    })
    .await;
    let socket = r.dir.path().join("provider.sock.admin");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(admin::serve_unix(
        r.fake.clone(),
        socket.clone(),
        0o600,
        async {
            let _ = stopped.await;
        },
    ));
    let s = socket.clone();
    wait_for("the admin API", || {
        let s = s.clone();
        async move { UnixStream::connect(&s).await.is_ok() }
    })
    .await;
    let c = &r.client;

    assert_eq!(http(&socket, "GET", "/healthz", None).await.0, 200);

    // Instances.
    assert_eq!(
        c.instance_exists(node("web-1")).await.unwrap(),
        Existence::NotExists
    );
    let (code, inst) = http(
        &socket,
        "POST",
        "/instances",
        Some(json!({"name": "web-1", "id": "i-web1", "zone": "z1",
                    "addresses": [{"type": "InternalIP", "address": "10.9.0.1"}],
                    "labels": {"example.com/pool": "web"}})),
    )
    .await;
    assert_eq!(code, 200, "{inst}");
    assert_eq!(inst["provider_id"], "fake://i-web1");
    let md = c.instance_metadata(node("web-1")).await.unwrap();
    assert_eq!(md.zone, "z1");
    assert_eq!(md.node_addresses[0].address, "10.9.0.1");
    assert_eq!(md.additional_labels["example.com/pool"], "web");
    assert_eq!(
        http(&socket, "POST", "/instances/web-1/shutdown", None)
            .await
            .0,
        204
    );
    assert_eq!(
        c.instance_shutdown(node("web-1")).await.unwrap(),
        ccm_provider_sdk::ShutdownState::ShutDown
    );
    assert_eq!(
        http(&socket, "POST", "/instances/nope/start", None).await.0,
        404
    );
    let (code, body) = http(&socket, "DELETE", "/instances/web-1", None).await;
    assert_eq!((code, &body["existed"]), (200, &json!(true)));
    assert_eq!(
        c.instance_exists(node("web-1")).await.unwrap(),
        Existence::NotExists
    );

    // Error injection, counted.
    let (code, body) = http(
        &socket,
        "POST",
        "/faults/errors",
        Some(
            json!({"method": "EnsureLoadBalancer", "kind": "quota_exceeded",
                    "message": "no more LBs", "times": 1}),
        ),
    )
    .await;
    assert_eq!(code, 204, "{body}");
    let (_, faults) = http(&socket, "GET", "/faults", None).await;
    assert_eq!(
        faults["errors"]["EnsureLoadBalancer"]["kind"],
        "quota_exceeded"
    );
    let err = c
        .ensure_load_balancer("k", service("a"), vec![])
        .await
        .unwrap_err();
    let e = err.provider_error().unwrap();
    assert_eq!(e.reason(), Some(ErrorReason::QuotaExceeded));
    assert_eq!(e.message(), "no more LBs");
    c.ensure_load_balancer("k", service("a"), vec![])
        .await
        .unwrap();

    // Typos are refused rather than silently injecting nothing.
    let (code, body) = http(
        &socket,
        "PUT",
        "/faults/latency",
        Some(json!({"method": "EnsureLoadbalancer", "ms": 10})),
    )
    .await;
    assert!((400..500).contains(&code), "{code} {body}");
    assert_eq!(
        http(
            &socket,
            "PUT",
            "/faults/latency",
            Some(json!({"method": "*", "ms": 1}))
        )
        .await
        .0,
        204
    );
    assert_eq!(http(&socket, "DELETE", "/faults", None).await.0, 204);
    assert_eq!(
        http(&socket, "GET", "/faults", None).await.1["latency_ms"],
        json!({})
    );

    // Call log.
    let (_, calls) = http(&socket, "GET", "/calls?method=EnsureLoadBalancer", None).await;
    let calls = calls.as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["method"], "EnsureLoadBalancer");
    assert_eq!(calls[0]["outcome"]["status"], "error");
    assert_eq!(calls[0]["outcome"]["reason"], "QUOTA_EXCEEDED");
    assert_eq!(calls[1]["outcome"]["status"], "ok");
    assert_eq!(http(&socket, "DELETE", "/calls", None).await.0, 204);
    assert_eq!(http(&socket, "GET", "/calls", None).await.1, json!([]));

    // State dump.
    let (_, state) = http(&socket, "GET", "/state", None).await;
    assert_eq!(state["load_balancers"][0]["service_uid"], "a");
    assert_eq!(state["load_balancers"][0]["ip"], "192.0.2.2");
    assert_eq!(state["removed"], json!(["i-web1", "web-1"]));

    // A load balancer deleted out of band, by its cloud name.
    c.ensure_load_balancer("k", service("b"), vec![])
        .await
        .unwrap();
    let name = state["load_balancers"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, body) = http(&socket, "DELETE", &format!("/load-balancers/{name}"), None).await;
    assert_eq!((code, &body["existed"]), (200, &json!(true)));
    let (code, body) = http(&socket, "DELETE", &format!("/load-balancers/{name}"), None).await;
    assert_eq!((code, &body["existed"]), (200, &json!(false)));
    let (_, state) = http(&socket, "GET", "/state", None).await;
    let left: Vec<&str> = state["load_balancers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lb| lb["service_uid"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["b"], "only the named one is gone");
    assert_eq!(
        state["allocated_ips"],
        json!(["192.0.2.3"]),
        "its address is free"
    );

    // Readiness.
    assert_eq!(
        http(
            &socket,
            "PUT",
            "/readiness",
            Some(json!({"ready": false, "message": "maintenance"}))
        )
        .await
        .0,
        204
    );
    assert_eq!(
        c.probe().await.unwrap(),
        Readiness::NotReady("maintenance".into())
    );

    let _ = stop.send(());
    server.await.unwrap().unwrap();
    assert!(!socket.exists(), "admin socket removed on shutdown");
    r.stop().await;
}

#[tokio::test]
async fn the_binary_serves_both_sockets_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let provider = dir.path().join("p.sock");
    let admin = dir.path().join("p.sock.admin");
    let endpoint = format!("unix://{}", provider.display());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-provider"))
        .args(["--endpoint", &endpoint, "--cluster-names", "one,two"])
        .args(["--auto-create-instances", "false", "--zone", "bin-zone"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = ProviderClient::connect_lazy(&endpoint, ClientOptions::default()).unwrap();
    let probe = client.clone();
    wait_for("the binary's provider socket", || {
        let probe = probe.clone();
        async move { probe.probe().await.is_ok() }
    })
    .await;
    let a = admin.clone();
    wait_for("the binary's admin socket", || {
        let a = a.clone();
        async move { UnixStream::connect(&a).await.is_ok() }
    })
    .await;
    assert_eq!(client.list_clusters().await.unwrap(), ["one", "two"]);
    assert_eq!(
        client.instance_exists(node("x")).await.unwrap(),
        Existence::NotExists
    );
    let (code, _) = http(&admin, "POST", "/instances", Some(json!({"name": "x"}))).await;
    assert_eq!(code, 200);
    assert_eq!(
        client.instance_metadata(node("x")).await.unwrap().zone,
        "bin-zone"
    );

    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(!provider.exists(), "provider socket removed");
    assert!(!admin.exists(), "admin socket removed");
}
