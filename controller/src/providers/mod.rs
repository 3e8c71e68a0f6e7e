//! Several providers in one controller (docs/hybrid.md): the routing of
//! Nodes and Services to the provider that answers for them, and the
//! label selectors its flags take.

pub mod route;
pub mod selector;

pub use route::{Backends, Identity, Member, Route, Routing, Scope, Table};
pub use selector::LabelSelector;

/// A provider's client and its share of the cluster: what a controller
/// instance working for it is handed.
#[derive(Clone)]
pub struct ScopedProvider {
    pub client: ccm_provider_sdk::ProviderClient,
    pub scope: Scope,
}

impl ScopedProvider {
    /// The one provider behind `--provider-endpoint`: every Node and
    /// every unclassed Service.
    pub fn single(client: ccm_provider_sdk::ProviderClient) -> Self {
        ScopedProvider {
            client,
            scope: Scope::single(),
        }
    }
}
