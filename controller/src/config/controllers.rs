//! `--controllers`: which controllers run, by upstream's canonical names and
//! aliases, and the provider capability each one needs.

use ccm_provider_sdk::proto::Capability;

use super::ConfigError;

/// The controllers this binary can run, with upstream's canonical names and
/// aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControllerName {
    CloudNode,
    CloudNodeLifecycle,
    ServiceLb,
    NodeRoute,
    /// Opt-in: not part of `*`.
    PvLabel,
}

impl ControllerName {
    pub const ALL: [ControllerName; 5] = [
        ControllerName::CloudNode,
        ControllerName::CloudNodeLifecycle,
        ControllerName::ServiceLb,
        ControllerName::NodeRoute,
        ControllerName::PvLabel,
    ];

    /// Whether `*` enables it. The PersistentVolume labeller only serves
    /// volumes provisioned outside CSI, so it must be asked for by name.
    pub fn in_star(self) -> bool {
        self != ControllerName::PvLabel
    }

    pub fn canonical(self) -> &'static str {
        match self {
            ControllerName::CloudNode => "cloud-node-controller",
            ControllerName::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            ControllerName::ServiceLb => "service-lb-controller",
            ControllerName::NodeRoute => "node-route-controller",
            ControllerName::PvLabel => "pv-label-controller",
        }
    }

    pub fn alias(self) -> &'static str {
        match self {
            ControllerName::CloudNode => "cloud-node",
            ControllerName::CloudNodeLifecycle => "cloud-node-lifecycle",
            ControllerName::ServiceLb => "service",
            ControllerName::NodeRoute => "route",
            ControllerName::PvLabel => "pv-label",
        }
    }

    /// The provider capability without which the controller cannot work.
    pub fn required_capability(self) -> Capability {
        match self {
            ControllerName::CloudNode | ControllerName::CloudNodeLifecycle => Capability::Instances,
            ControllerName::ServiceLb => Capability::LoadBalancers,
            ControllerName::NodeRoute => Capability::Routes,
            ControllerName::PvLabel => Capability::VolumeLabels,
        }
    }

    /// Whether it reacts to individual Node changes, and so needs a
    /// subscription to the shared Node watch from before it starts.
    pub fn follows_node_events(self) -> bool {
        self == ControllerName::CloudNode
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.canonical() == name || c.alias() == name)
    }
}

impl std::fmt::Display for ControllerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.canonical())
    }
}

/// Upstream's `--controllers` semantics: walk the list in order; the first
/// `name` enables, the first `-name` disables; otherwise enabled only when
/// `*` is present. So `--controllers=-route` enables nothing.
pub fn enabled_controllers(list: &[String]) -> Result<Vec<ControllerName>, ConfigError> {
    let mut entries = Vec::new();
    for raw in list.iter().flat_map(|s| s.split(',')) {
        let item = raw.trim();
        if item.is_empty() {
            continue;
        }
        if item == "*" {
            entries.push((None, true));
            continue;
        }
        let (name, on) = match item.strip_prefix('-') {
            Some(n) => (n, false),
            None => (item, true),
        };
        let c = ControllerName::parse(name)
            .ok_or_else(|| ConfigError::UnknownController(name.to_owned()))?;
        entries.push((Some(c), on));
    }
    let star = entries.iter().any(|(c, _)| c.is_none());
    Ok(ControllerName::ALL
        .into_iter()
        .filter(|c| {
            entries
                .iter()
                .find(|(e, _)| *e == Some(*c))
                .map(|(_, on)| *on)
                .unwrap_or(star && c.in_star())
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ControllerName::*;

    fn list(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn controller_selection_follows_upstream() {
        assert_eq!(
            enabled_controllers(&list(&["*"])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute],
            "pv-label is opt-in"
        );
        assert_eq!(
            enabled_controllers(&list(&["*", "pv-label"])).unwrap(),
            ControllerName::ALL
        );
        assert_eq!(
            enabled_controllers(&list(&["*", "-route"])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb]
        );
        assert_eq!(enabled_controllers(&list(&["-route"])).unwrap(), vec![]);
        assert_eq!(
            enabled_controllers(&list(&["cloud-node", "service-lb-controller"])).unwrap(),
            vec![CloudNode, ServiceLb]
        );
        // The first mention wins.
        assert_eq!(
            enabled_controllers(&list(&["-service", "service", "*"])).unwrap(),
            vec![CloudNode, CloudNodeLifecycle, NodeRoute]
        );
        assert_eq!(
            enabled_controllers(&list(&["*", "bogus"]))
                .unwrap_err()
                .to_string(),
            "\"bogus\" is not in the list of known controllers"
        );
    }

    #[test]
    fn every_controller_names_its_capability() {
        for c in ControllerName::ALL {
            assert_ne!(c.required_capability(), Capability::Unspecified, "{c}");
            assert_eq!(ControllerName::parse(c.alias()), Some(c));
            assert_eq!(ControllerName::parse(c.canonical()), Some(c));
        }
    }
}
