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
/// characters; a list of schemes is valid and holds the scheme.
fn check_info(info: &GetProviderInfoResponse) -> Checked {
    validate::name("name", &info.name)?;
    if info.name.len() > 63 {
        return Err(violation("name", "longer than 63 characters"));
    }
    validate::name("provider_id_scheme", &info.provider_id_scheme)?;
    validate::provider_id_schemes(info)?;
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
}
