//! Several providers in one controller (docs/hybrid.md): the routing of
//! Nodes and Services to the provider that answers for them, and the
//! label selectors its flags take; and the batching of instance questions
//! to a provider ([`instances`]).

pub mod instances;
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

/// `name` for the instance working for `provider`: `name:provider` with
/// several providers (path-safe, for `/healthz/<check>`), `name` itself
/// with one, so single-provider installations keep every name they had.
/// Names are `'static` where they are used (supervised tasks, health
/// checks, work queues); each distinct one is kept once for the process's
/// life, and there are at most a few per configured provider. A name
/// already qualified for `provider` is returned as it is.
pub fn qualified(name: &'static str, provider: &str, hybrid: bool) -> &'static str {
    let already = name
        .strip_suffix(provider)
        .is_some_and(|n| n.ends_with(':'));
    if !hybrid || already {
        return name;
    }
    static NAMES: std::sync::LazyLock<
        parking_lot::Mutex<std::collections::BTreeSet<&'static str>>,
    > = std::sync::LazyLock::new(Default::default);
    let wanted = format!("{name}:{provider}");
    let mut names = NAMES.lock();
    if let Some(n) = names.get(wanted.as_str()) {
        return n;
    }
    let n: &'static str = Box::leak(wanted.into_boxed_str());
    names.insert(n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_qualified_only_with_several_providers() {
        assert_eq!(
            qualified("cloud-node-controller", "default", false),
            "cloud-node-controller"
        );
        let a = qualified("service", "cloud", true);
        assert_eq!(a, "service:cloud");
        assert!(
            std::ptr::eq(a, qualified("service", "cloud", true)),
            "kept once"
        );
    }
}
