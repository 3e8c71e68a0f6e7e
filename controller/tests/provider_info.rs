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
    assert_eq!(
        report["contract_version"],
        ccm_provider_sdk::proto::CONTRACT_VERSION
    );
    assert_eq!(report["provider_id_schemes"], serde_json::json!(["fake"]));
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

/// The fake, owning a second providerID scheme (contract 1.2.0).
struct Metal(FakeCloud);

impl ccm_provider_sdk::Identity for Metal {
    fn info(&self) -> ccm_provider_sdk::ProviderInfo {
        ccm_provider_sdk::Identity::info(&self.0).also_owns("fake-metal")
    }
}

#[tokio::test]
async fn lists_every_provider_id_scheme_the_provider_owns() {
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}/p.sock", dir.path().display());
        let metal = Metal(FakeCloud::new(FakeConfig::default()).unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = endpoint.clone();
        let server = tokio::spawn(async move {
            ccm_provider_sdk::ProviderServer::new(metal)
                .serve(&serving, async {
                    let _ = stopped.await;
                })
                .await
        });
        let report = loop {
            match provider_info::report(&endpoint, Default::default()).await {
                Ok(r) => break r,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        };
        assert_eq!(report["provider_id_scheme"], "fake");
        assert_eq!(
            report["provider_id_schemes"],
            serde_json::json!(["fake", "fake-metal"])
        );
        let text = provider_info::text(&report);
        assert!(
            text.lines()
                .any(|l| l.starts_with("provider_id_schemes")
                    && l.ends_with(r#"["fake","fake-metal"]"#)),
            "{text}"
        );
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    })
    .await
    .expect("test took longer than 30 s");
}

/// Several providers (`--provider`): every one is reported under its name,
/// in flag order; one that does not answer says why in its place.
#[tokio::test]
async fn reports_every_configured_provider_under_its_name() {
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let dir = tempfile::tempdir().unwrap();
        let up = format!("unix://{}/up.sock", dir.path().display());
        let down = format!("unix://{}/down.sock", dir.path().display());
        let fake = FakeCloud::new(FakeConfig::default()).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(fake.serve(up.clone(), async {
            let _ = stopped.await;
        }));
        let providers = [
            cloud_controller_manager::config::Endpoint {
                name: "down".into(),
                endpoint: down.clone(),
            },
            cloud_controller_manager::config::Endpoint {
                name: "cloud".into(),
                endpoint: up.clone(),
            },
        ];
        let reports = loop {
            let r = provider_info::report_all(&providers, Default::default()).await;
            if r[1].report.is_ok() {
                break r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        assert!(reports[0].report.is_err());
        let text = provider_info::text_all(&reports);
        let down_at = text.find("=== provider down ===").expect(&text);
        let cloud_at = text.find("=== provider cloud ===").expect(&text);
        assert!(down_at < cloud_at, "in flag order: {text}");
        let down_block: Vec<&str> = text[down_at..cloud_at].lines().collect();
        assert!(
            down_block
                .iter()
                .any(|l| l.starts_with("endpoint") && l.ends_with("down.sock"))
                && down_block.iter().any(|l| l.starts_with("error ")),
            "{text}"
        );
        assert!(
            text[cloud_at..]
                .lines()
                .any(|l| l.starts_with("name") && l.ends_with(" fake")),
            "{text}"
        );
        let json = provider_info::json_all(&reports);
        assert_eq!(json[0]["provider"], "down");
        assert_eq!(json[0]["endpoint"], down);
        assert!(json[0]["error"].is_string());
        assert_eq!(json[1]["provider"], "cloud");
        assert_eq!(json[1]["name"], "fake");
        assert_eq!(json[1]["probe"]["state"], "READY");
        let failed = provider_info::failures(&reports).expect("down did not answer");
        assert!(
            failed.starts_with(&format!("down at {down}: ")) && !failed.contains("cloud"),
            "{failed}"
        );

        // `provider annotations`: the same, each reference under its name.
        let references = provider_info::annotations_all(&providers, Default::default()).await;
        let text = provider_info::annotations_text_all(&references);
        let down_at = text
            .find("# Provider down\n\nNot answering: ")
            .expect(&text);
        let cloud_at = text.find("\n# Provider cloud\n\n").expect(&text);
        assert!(down_at < cloud_at, "in flag order: {text}");
        assert!(text[cloud_at..].contains("fake.ccm-rs.io/"), "{text}");
        let failed = provider_info::failures(&references).expect("down did not answer");
        assert!(failed.starts_with(&format!("down at {down}: ")), "{failed}");
        assert_eq!(provider_info::failures(&references[1..]), None);
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    })
    .await
    .expect("test took longer than 30 s");
}
