//! Contract 1.2.0 through the SDK's server and client: a provider that owns
//! several providerID schemes (hcloud's servers and hrobot's dedicated
//! machines) answers for a Node of each, and the warnings a provider gives
//! about a Node reach the client.

use std::time::Duration;

mod common;

use ccm_provider_sdk::proto::{self, InstanceMetadata, NodeRef};
use ccm_provider_sdk::{
    CallContext, ClientError, ClientOptions, ContractVersion, Existence, Identity, Instances,
    ProviderClient, ProviderInfo, ProviderResult, ProviderServer, ShutdownState,
};

#[derive(Clone, Default)]
struct Hetzner {
    /// Extra schemes, as given to `also_owns`.
    also: Vec<&'static str>,
}

impl Identity for Hetzner {
    fn info(&self) -> ProviderInfo {
        let mut info = ProviderInfo {
            name: "hcloud".into(),
            vendor_version: "0".into(),
            provider_id_scheme: "hcloud".into(),
            ..Default::default()
        };
        for s in &self.also {
            info = info.also_owns(*s);
        }
        info
    }
}

impl Instances for Hetzner {
    async fn instance_exists(&self, _: CallContext, _: NodeRef) -> ProviderResult<Existence> {
        Ok(Existence::Exists)
    }

    async fn instance_shutdown(&self, _: CallContext, _: NodeRef) -> ProviderResult<ShutdownState> {
        Ok(ShutdownState::Running)
    }

    async fn instance_metadata(
        &self,
        ctx: CallContext,
        node: NodeRef,
    ) -> ProviderResult<InstanceMetadata> {
        if node.name.starts_with("maint") {
            ctx.warn(
                "MaintenanceScheduled",
                format!("{} is rebooted for maintenance", node.name),
            );
        }
        if node.name.starts_with("bad-warning") {
            ctx.warn("not camel case", "x");
        }
        Ok(InstanceMetadata {
            // A dedicated server's providerID, for a Node without one.
            provider_id: format!("hrobot://{}", node.name.len()),
            ..Default::default()
        })
    }
}

fn node(name: &str, provider_id: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        provider_id: provider_id.into(),
        ..Default::default()
    }
}

async fn start(cloud: Hetzner) -> (common::Serving, ProviderClient) {
    let serving =
        common::serve(ProviderServer::new(cloud.clone()).with_instances(cloud.clone())).await;
    let client = ProviderClient::connect_lazy(&serving.endpoint, ClientOptions::default()).unwrap();
    (serving, client)
}

fn invalid_argument(e: &ClientError) -> bool {
    e.provider_error()
        .is_some_and(|p| p.code() == tonic::Code::InvalidArgument)
}

#[tokio::test]
async fn a_provider_owning_two_schemes_answers_for_each_and_refuses_others() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let (serving, c) = start(Hetzner {
            also: vec!["hrobot"],
        })
        .await;
        let h = c.handshake().await.unwrap();
        assert_eq!(h.info.contract_version, proto::CONTRACT_VERSION);
        assert!(ContractVersion::current().has(ContractVersion::V1_2_0));
        assert_eq!(h.info.provider_id_scheme, "hcloud");
        assert_eq!(h.info.provider_id_schemes, ["hcloud", "hrobot"]);
        assert!(h.owns_scheme("hrobot") && h.owns_scheme("hcloud"));
        assert!(!h.owns_scheme("aws"));

        for id in ["hcloud://1", "hrobot://321"] {
            let e = c.instance_exists(node("n", id)).await;
            assert_eq!(e.unwrap(), Existence::Exists, "{id}");
            let s = c.instance_shutdown(node("n", id)).await;
            assert_eq!(s.unwrap(), ShutdownState::Running, "{id}");
        }
        for id in [
            "aws:///eu-west-1a/i-1",
            "hrobot://",
            "hrobot:/1",
            "hcloudx://1",
        ] {
            let e = c.instance_exists(node("n", id)).await.unwrap_err();
            assert!(invalid_argument(&e), "{id}: {e}");
            assert!(e.to_string().contains("\"hcloud\", \"hrobot\""), "{e}");
        }

        // An answer with a providerID of the second scheme is the provider's
        // own, so the client takes it.
        let m = c.instance_metadata(node("node-1", "")).await.unwrap();
        assert_eq!(m.provider_id, "hrobot://6");
        serving.stop().await;
    })
    .await
    .expect("test took longer than 30 s");
}

#[tokio::test]
async fn one_scheme_is_announced_as_before_and_an_other_scheme_is_refused() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let (serving, c) = start(Hetzner::default()).await;
        let h = c.handshake().await.unwrap();
        assert!(h.info.provider_id_schemes.is_empty(), "{:?}", h.info);
        assert!(h.owns_scheme("hcloud") && !h.owns_scheme("hrobot"));
        let e = c
            .instance_exists(node("n", "hrobot://321"))
            .await
            .unwrap_err();
        assert!(invalid_argument(&e), "{e}");
        // Nor does the SDK send an answer of a scheme not announced.
        let e = c.instance_metadata(node("node-1", "")).await.unwrap_err();
        assert!(
            e.provider_error().is_some_and(
                |p| p.code() == tonic::Code::Internal && p.message().contains("also_owns")
            ),
            "{e}"
        );
        serving.stop().await;
    })
    .await
    .expect("test took longer than 30 s");
}

#[tokio::test]
async fn an_invalid_list_of_schemes_is_never_announced() {
    tokio::time::timeout(Duration::from_secs(30), async {
        for also in [vec!["hrobot", "hrobot"], vec!["a://b"], vec![""]] {
            let (serving, c) = start(Hetzner { also: also.clone() }).await;
            let e = c.handshake().await.unwrap_err();
            assert!(
                e.provider_error()
                    .is_some_and(|p| p.code() == tonic::Code::Internal),
                "{also:?}: {e}"
            );
            serving.stop().await;
        }
    })
    .await
    .expect("test took longer than 30 s");
}

#[tokio::test]
async fn warnings_about_a_node_reach_the_client_and_bad_ones_never_leave() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let (serving, c) = start(Hetzner {
            also: vec!["hrobot"],
        })
        .await;
        let a = c
            .instance_metadata_answer(node("maint-1", "hrobot://1"))
            .await
            .unwrap();
        assert_eq!(
            a.warnings,
            [proto::Warning {
                reason: "MaintenanceScheduled".into(),
                message: "maint-1 is rebooted for maintenance".into(),
            }]
        );
        let a = c
            .instance_metadata_answer(node("quiet", "hrobot://1"))
            .await
            .unwrap();
        assert!(a.warnings.is_empty());
        let e = c
            .instance_metadata(node("bad-warning", "hrobot://1"))
            .await
            .unwrap_err();
        assert!(
            e.provider_error()
                .is_some_and(|p| p.code() == tonic::Code::Internal
                    && p.message().contains("warnings[0].reason")),
            "{e}"
        );
        serving.stop().await;
    })
    .await
    .expect("test took longer than 30 s");
}
