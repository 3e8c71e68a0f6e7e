//! `cloud-controller-manager provider info` against the fake provider.

use ccm_fake_provider::{FakeCloud, FakeConfig};
use cloud_controller_manager::provider_info;

#[tokio::test]
async fn reports_identity_capabilities_probe_and_clusters() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/p.sock", dir.path().display());
    let fake = FakeCloud::new(FakeConfig {
        cluster_names: vec!["blue".into(), "green".into()],
        ..FakeConfig::default()
    })
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(fake.clone().serve(endpoint.clone(), async {
        let _ = stopped.await;
    }));
    let report = provider_info::report(&endpoint, Default::default())
        .await
        .unwrap();
    assert_eq!(report["name"], "fake");
    assert_eq!(report["contract_version"], "1.1.0");
    assert_eq!(report["probe"]["state"], "READY");
    let caps = report["capabilities"].as_array().unwrap();
    assert!(caps.contains(&"ROUTES".into()) && caps.contains(&"CLUSTERS".into()));
    assert_eq!(report["annotations"]["prefixes"][0], "fake.ccm-rs.io/");
    let clusters: Vec<&str> = report["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["blue", "green"]);
    assert!(report["clusters"][0]["master"].is_string());
    let text = provider_info::text(&report);
    assert!(
        text.lines()
            .any(|l| l.starts_with("name") && l.ends_with(" fake")),
        "{text}"
    );

    // A provider that is not there is an error naming the cause, not a hang.
    let _ = stop.send(());
    server.await.unwrap().unwrap();
    let gone = provider_info::report(&endpoint, Default::default()).await;
    assert!(gone.is_err());
}
