//! Contract 1.3.0 through the SDK's server and client: what a controller
//! running several providers routes by (load balancer classes, whether
//! Services without a class are served, KEP-5778 platforms) goes from
//! `ProviderInfo` to the client's `Handshake`, and an invalid declaration
//! never leaves the provider.

use std::time::Duration;

mod common;

use ccm_provider_sdk::proto::{self, UnclassedServices};
use ccm_provider_sdk::{
    ClientOptions, ContractVersion, Identity, ProviderClient, ProviderInfo, ProviderServer,
};

#[derive(Clone)]
struct Cloud(ProviderInfo);

impl Identity for Cloud {
    fn info(&self) -> ProviderInfo {
        self.0.clone()
    }
}

fn base() -> ProviderInfo {
    ProviderInfo {
        name: "cloud".into(),
        vendor_version: "0".into(),
        provider_id_scheme: "fake".into(),
        ..Default::default()
    }
}

async fn start(info: ProviderInfo) -> (common::Serving, ProviderClient) {
    let serving = common::serve(ProviderServer::new(Cloud(info))).await;
    let client = ProviderClient::connect_lazy(&serving.endpoint, ClientOptions::default()).unwrap();
    (serving, client)
}

#[tokio::test]
async fn classes_unclassed_services_and_platforms_reach_the_handshake() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let info = base()
            .serves_class("example.com/cloud")
            .serves_class("example.com/nlb")
            .declines_unclassed()
            .manages_platform("cloud");
        assert_eq!(info.check(), Ok(()));
        let (serving, c) = start(info).await;
        let h = c.handshake().await.unwrap();
        assert_eq!(h.info.contract_version, "1.4.0");
        assert_eq!(ContractVersion::current(), ContractVersion::V1_4_0);
        assert_eq!(h.classes(), ["example.com/cloud", "example.com/nlb"]);
        assert_eq!(
            h.info.unclassed_services,
            UnclassedServices::Declined as i32
        );
        assert!(!h.serves_unclassed());
        assert_eq!(h.platforms(), ["cloud"]);
        serving.stop().await;
    })
    .await
    .expect("test took longer than 30 s");
}

/// A provider declaring nothing new answers as before 1.3.0: no class, no
/// platform, UNSPECIFIED (served as the default); one saying it serves
/// them says SERVED.
#[tokio::test]
async fn a_provider_declaring_nothing_serves_unclassed_services() {
    tokio::time::timeout(Duration::from_secs(30), async {
        for (serves, wire) in [
            (None, UnclassedServices::Unspecified),
            (Some(true), UnclassedServices::Served),
        ] {
            let info = ProviderInfo {
                serves_unclassed: serves,
                ..base()
            };
            let (serving, c) = start(info).await;
            let h = c.handshake().await.unwrap();
            assert_eq!(h.info.unclassed_services, wire as i32, "{serves:?}");
            assert!(h.serves_unclassed(), "{serves:?}");
            assert!(h.classes().is_empty() && h.platforms().is_empty());
            assert!(h.info.load_balancer_classes.is_empty() && h.info.platforms.is_empty());
            serving.stop().await;
        }
    })
    .await
    .expect("test took longer than 30 s");
}

#[tokio::test]
async fn an_invalid_declaration_is_never_announced() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let many_classes = (0..=ccm_provider_sdk::validate::MAX_LOAD_BALANCER_CLASSES)
            .fold(base(), |i, n| i.serves_class(format!("example.com/c{n}")));
        let many_platforms = (0..=16).fold(base(), |i, n| i.manages_platform(format!("p{n}")));
        for (info, field) in [
            (base().serves_class("cloud"), "load_balancer_classes[0]"),
            (
                base()
                    .serves_class("example.com/a")
                    .serves_class("example.com/a"),
                "load_balancer_classes[1]",
            ),
            (many_classes, "load_balancer_classes"),
            (base().manages_platform("on prem"), "platforms[0]"),
            (base().manages_platform("a.b"), "platforms[0]"),
            (many_platforms, "platforms"),
        ] {
            // The check a provider runs at start names the field...
            assert_eq!(info.check().unwrap_err().field, field);
            // ...and the server refuses to send it.
            let (serving, c) = start(info).await;
            let e = c.handshake().await.unwrap_err();
            assert!(
                e.provider_error().is_some_and(
                    |p| p.code() == tonic::Code::Internal && p.message().contains(field)
                ),
                "{field}: {e}"
            );
            serving.stop().await;
        }
    })
    .await
    .expect("test took longer than 30 s");
}

/// What the server sends is what `ProviderInfo::to_proto` makes, the
/// contract version aside.
#[test]
fn to_proto_maps_every_field() {
    let info = base()
        .also_owns("metal")
        .serves_class("example.com/cloud")
        .manages_platform("cloud");
    let p = info.to_proto("9.9.9");
    assert_eq!(p.contract_version, "9.9.9");
    assert_eq!(p.provider_id_schemes, ["fake", "metal"]);
    assert_eq!(p.load_balancer_classes, ["example.com/cloud"]);
    assert_eq!(p.platforms, ["cloud"]);
    assert_eq!(p.unclassed_services, UnclassedServices::Unspecified as i32);
    assert_eq!(
        info.declines_unclassed()
            .to_proto("1.3.0")
            .unclassed_services,
        proto::UnclassedServices::Declined as i32
    );
}
