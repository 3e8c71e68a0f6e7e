//! IdentityService: the handshake (cached per connection, read again on
//! demand) that tells the client what the provider supports, and the
//! readiness probe.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::call::Rpc;
use super::{ClientError, ProviderClient};
use crate::proto::{
    AnnotationSchema, Capability, GetProviderCapabilitiesRequest, GetProviderInfoRequest,
    GetProviderInfoResponse, ProbeRequest, ProbeState,
};
use crate::provider::Readiness;
use crate::validate::{self, Checked, violation};

/// What the provider said about itself on the current connection.
#[derive(Debug, Clone)]
pub struct Handshake {
    pub info: GetProviderInfoResponse,
    pub capabilities: BTreeSet<Capability>,
    pub annotations: AnnotationSchema,
    /// Which connection this handshake was made on.
    pub connection: u64,
}

impl Handshake {
    pub fn has(&self, c: Capability) -> bool {
        self.capabilities.contains(&c)
    }

    /// Every providerID scheme the provider owns: `provider_id_schemes`
    /// (1.2.0), or `provider_id_scheme` alone.
    pub fn schemes(&self) -> Vec<&str> {
        validate::owned_schemes(&self.info)
    }

    /// Whether the provider owns providerIDs of `scheme`.
    pub fn owns_scheme(&self, scheme: &str) -> bool {
        self.schemes().contains(&scheme)
    }

    /// The `spec.loadBalancerClass` values whose Services the provider
    /// serves (`load_balancer_classes`, 1.3.0); empty for a provider
    /// declaring none, as every provider before 1.3.0.
    pub fn classes(&self) -> Vec<&str> {
        self.info
            .load_balancer_classes
            .iter()
            .map(String::as_str)
            .collect()
    }

    /// Whether the provider serves Services without a class when the
    /// controller makes it the default (`unclassed_services`, 1.3.0):
    /// unless it DECLINES them. UNSPECIFIED (every provider before 1.3.0)
    /// and a value this contract does not know count as served, the
    /// contract's reading of an unknown enum value.
    pub fn serves_unclassed(&self) -> bool {
        validate::serves_unclassed(&self.info)
    }

    /// The KEP-5778 platforms the provider manages (`platforms`, 1.3.0).
    pub fn platforms(&self) -> Vec<&str> {
        self.info.platforms.iter().map(String::as_str).collect()
    }
}

impl ProviderClient {
    /// The handshake for the current connection, made now if the connection
    /// is new (first call, or the provider restarted).
    pub async fn handshake(&self) -> Result<Arc<Handshake>, ClientError> {
        self.handshake_again(false).await
    }

    /// The handshake made now, on the current connection or a new one: a
    /// provider may change its capabilities without reconnecting (the
    /// controller asks every `--provider-capability-refresh-period`). Calls
    /// made after it see what it read.
    pub async fn refresh_handshake(&self) -> Result<Arc<Handshake>, ClientError> {
        self.handshake_again(true).await
    }

    async fn handshake_again(&self, fresh: bool) -> Result<Arc<Handshake>, ClientError> {
        let mut current = self.handshake.lock().await;
        let before = self.connection_count();
        if let Some(h) = current.as_ref()
            && h.connection == before
            && before != 0
            && !fresh
        {
            return Ok(h.clone());
        }
        let info = self
            .call(Rpc::identity(), GetProviderInfoRequest {}, |info| {
                check_info(&info).map(|()| info)
            })
            .await?;
        let request = GetProviderCapabilitiesRequest {
            controller_version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let caps = self.call(Rpc::identity(), request, Ok).await?;
        let capabilities = caps
            .capabilities
            .iter()
            // Unknown values come from a newer provider; ignoring them is
            // the safe reading.
            .filter_map(|c| Capability::try_from(*c).ok())
            .filter(|c| *c != Capability::Unspecified)
            .collect();
        let h = Arc::new(Handshake {
            info,
            capabilities,
            annotations: caps.annotations.unwrap_or_default(),
            connection: self.connection_count(),
        });
        // A refresh that changed nothing is not news.
        let changed = current.as_ref().is_none_or(|old| {
            old.connection != h.connection
                || old.info != h.info
                || old.capabilities != h.capabilities
                || old.annotations != h.annotations
        });
        if changed {
            tracing::info!(
                provider = %h.info.name,
                // Free text from the provider, checked for nothing else.
                version = %crate::error::bounded(&h.info.vendor_version),
                capabilities = ?h.capabilities,
                connection = h.connection,
                "provider handshake"
            );
        }
        *current = Some(h.clone());
        Ok(h)
    }

    /// `Unsupported` unless the provider advertised `c`.
    pub(super) async fn require(&self, c: Capability) -> Result<(), ClientError> {
        if self.handshake().await?.has(c) {
            Ok(())
        } else {
            Err(ClientError::Unsupported(c))
        }
    }

    /// `grpc.health.v1.Health/Check("")`: whether the provider's gRPC
    /// server answers at all and reports SERVING. Outside the concurrency
    /// limit and without the handshake, so a provider whose every slot is
    /// held still answers it; a liveness signal, not readiness (that is
    /// [`Self::probe`]).
    pub async fn serving(&self) -> Result<bool, ClientError> {
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let answer = HealthClient::new(self.channel.clone())
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await?;
        Ok(answer.into_inner().status == ServingStatus::Serving as i32)
    }

    pub async fn probe(&self) -> Result<Readiness, ClientError> {
        self.call(Rpc::identity(), ProbeRequest {}, |r| {
            Ok(match ProbeState::try_from(r.state) {
                Ok(ProbeState::Ready) => Readiness::Ready,
                Ok(ProbeState::Starting) => Readiness::Starting(r.message),
                Ok(ProbeState::NotReady) => Readiness::NotReady(r.message),
                // UNSPECIFIED or unknown: not ready, and say why.
                _ => Readiness::NotReady(format!(
                    "provider answered an unspecified probe state ({}): {}",
                    r.state, r.message
                )),
            })
        })
        .await
    }
}

/// Name and providerID scheme are required; the name is at most 63
/// characters; a list of schemes is valid and holds the scheme; classes
/// and platforms are valid (1.3.0). An unknown `unclassed_services` is
/// taken as UNSPECIFIED, not refused ([`Handshake::serves_unclassed`]).
fn check_info(info: &GetProviderInfoResponse) -> Checked {
    validate::name("name", &info.name)?;
    if info.name.len() > 63 {
        return Err(violation("name", "longer than 63 characters"));
    }
    validate::name("provider_id_scheme", &info.provider_id_scheme)?;
    validate::identity_lists(info)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contract 1.2.0: the controller takes a list of schemes only when it
    /// is valid and holds `provider_id_scheme`.
    #[test]
    fn a_handshake_with_an_invalid_list_of_schemes_is_refused() {
        let info = |schemes: &[&str]| GetProviderInfoResponse {
            name: "hcloud".into(),
            provider_id_scheme: "hcloud".into(),
            provider_id_schemes: schemes.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        };
        for ok in [&[][..], &["hcloud"], &["hrobot", "hcloud"]] {
            assert_eq!(check_info(&info(ok)), Ok(()), "{ok:?}");
        }
        for (bad, field) in [
            (&["hrobot"][..], "provider_id_schemes"),
            (&["hcloud", "hcloud"], "provider_id_schemes[1]"),
            (&["hcloud", "a://b"], "provider_id_schemes[1]"),
            (&["hcloud", ""], "provider_id_schemes[1]"),
        ] {
            let v = check_info(&info(bad)).unwrap_err();
            assert_eq!(v.field, field, "{bad:?}: {v}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("s{i}")).collect();
        let mut i = info(&[]);
        i.provider_id_scheme = "s0".into();
        i.provider_id_schemes = many;
        assert_eq!(check_info(&i).unwrap_err().field, "provider_id_schemes");
    }

    fn handshake(info: GetProviderInfoResponse) -> Handshake {
        Handshake {
            info,
            capabilities: BTreeSet::new(),
            annotations: AnnotationSchema::default(),
            connection: 1,
        }
    }

    /// Contract 1.3.0: classes and platforms are taken only when valid;
    /// what the handshake says is what the controller routes by.
    #[test]
    fn a_handshake_declares_classes_unclassed_services_and_platforms() {
        use crate::proto::UnclassedServices;
        let base = || GetProviderInfoResponse {
            name: "cloud".into(),
            provider_id_scheme: "fake".into(),
            ..Default::default()
        };
        // A provider of 1.2.0 declares nothing: no class, no platform, and
        // Services without a class served as the default.
        let old = base();
        assert_eq!(check_info(&old), Ok(()));
        let h = handshake(old);
        assert!(h.classes().is_empty() && h.platforms().is_empty());
        assert!(h.serves_unclassed());

        let mut info = base();
        info.load_balancer_classes = vec!["example.com/cloud".into(), "example.com/nlb".into()];
        info.platforms = vec!["cloud".into()];
        info.unclassed_services = UnclassedServices::Declined as i32;
        assert_eq!(check_info(&info), Ok(()));
        let h = handshake(info.clone());
        assert_eq!(h.classes(), ["example.com/cloud", "example.com/nlb"]);
        assert_eq!(h.platforms(), ["cloud"]);
        assert!(!h.serves_unclassed());
        for (value, served) in [(1, true), (0, true), (7, true), (-1, true), (2, false)] {
            info.unclassed_services = value;
            // An unknown value is no reason to refuse the provider.
            assert_eq!(check_info(&info), Ok(()), "{value}");
            assert_eq!(
                handshake(info.clone()).serves_unclassed(),
                served,
                "{value}"
            );
        }

        for (class, field) in [
            ("cloud", "load_balancer_classes[0]"),
            ("Example.com/cloud", "load_balancer_classes[0]"),
            ("example.com/", "load_balancer_classes[0]"),
        ] {
            let mut i = base();
            i.load_balancer_classes = vec![class.into()];
            assert_eq!(check_info(&i).unwrap_err().field, field, "{class}");
        }
        let mut i = base();
        i.load_balancer_classes = vec!["example.com/a".into(), "example.com/a".into()];
        assert_eq!(
            check_info(&i).unwrap_err().field,
            "load_balancer_classes[1]"
        );
        let mut i = base();
        i.platforms = vec!["cloud".into(), "Metal".into()];
        assert_eq!(check_info(&i).unwrap_err().field, "platforms[1]");
    }
}
