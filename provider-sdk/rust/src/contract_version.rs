//! The contract's semantic version, as a provider declares it in
//! `GetProviderInfo.contract_version`.
//!
//! A rule a provider MUST follow that was added to the contract bumps its
//! minor version (docs/spec.md keeps the changelog of rules by version). A
//! provider is held to the rules of the version it declares: the
//! conformance suite reports a newer rule as "not required", and the
//! controller relies on a newer rule only from a provider declaring a
//! version that has it.

use std::fmt;

/// `major.minor.patch`; a pre-release or build suffix is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContractVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl ContractVersion {
    /// The contract as first declared.
    pub const V1_0_0: ContractVersion = ContractVersion::new(1, 0, 0);
    /// The rules added after 1.0.0 (docs/spec.md, "Changelog").
    pub const V1_1_0: ContractVersion = ContractVersion::new(1, 1, 0);
    /// Several providerID schemes per provider, warnings about a Node.
    pub const V1_2_0: ContractVersion = ContractVersion::new(1, 2, 0);
    /// Load balancer classes, unclassed Services and KEP-5778 platforms in
    /// the identity, stable across answers (several providers per
    /// controller).
    pub const V1_3_0: ContractVersion = ContractVersion::new(1, 3, 0);
    /// `BatchInstances` served by every provider with instances
    /// (`CAPABILITY_INSTANCES_BATCH`), RetryInfo on QUOTA_EXCEEDED and
    /// CLOUD_UNAVAILABLE.
    pub const V1_4_0: ContractVersion = ContractVersion::new(1, 4, 0);

    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        ContractVersion {
            major,
            minor,
            patch,
        }
    }

    /// This revision of the contract ([`crate::proto::CONTRACT_VERSION`]).
    pub fn current() -> Self {
        Self::parse(crate::proto::CONTRACT_VERSION).expect("CONTRACT_VERSION is semver")
    }

    /// Parses semver without "v" (`1.1.0`, `1.1.0-rc.1`); `None` for
    /// anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let core = s.split(['+', '-']).next()?;
        let mut parts = core.split('.');
        let mut next = || -> Option<u64> {
            let p = parts.next()?;
            let canonical = !p.is_empty()
                && p.len() <= 19
                && p.bytes().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'));
            canonical.then(|| p.parse().ok()).flatten()
        };
        let v = ContractVersion::new(next()?, next()?, next()?);
        parts.next().is_none().then_some(v)
    }

    /// Whether a provider declaring `self` follows the rules of `rule`: the
    /// same major version, and not older.
    pub fn has(&self, rule: ContractVersion) -> bool {
        self.major == rule.major && *self >= rule
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_semver_and_orders_by_value() {
        assert_eq!(
            ContractVersion::parse("1.0.0"),
            Some(ContractVersion::V1_0_0)
        );
        assert_eq!(
            ContractVersion::parse("1.1.0-rc.1+build"),
            Some(ContractVersion::V1_1_0)
        );
        assert_eq!(
            ContractVersion::parse("1.10.0"),
            Some(ContractVersion::new(1, 10, 0))
        );
        for bad in [
            "", "1", "1.0", "v1.0.0", "1.0.0.0", "01.0.0", "1.a.0", "1..0",
        ] {
            assert_eq!(ContractVersion::parse(bad), None, "{bad:?}");
        }
        assert!(ContractVersion::new(1, 10, 0) > ContractVersion::new(1, 9, 3));
        assert_eq!(ContractVersion::V1_1_0.to_string(), "1.1.0");
    }

    #[test]
    fn a_version_has_its_own_rules_and_older_ones_of_its_major() {
        let v = ContractVersion::V1_0_0;
        assert!(v.has(ContractVersion::V1_0_0));
        assert!(!v.has(ContractVersion::V1_1_0));
        assert!(ContractVersion::new(1, 2, 0).has(ContractVersion::V1_1_0));
        assert!(!ContractVersion::new(2, 0, 0).has(ContractVersion::V1_1_0));
    }

    #[test]
    fn current_is_the_newest_rule_set() {
        assert_eq!(ContractVersion::current(), ContractVersion::V1_4_0);
    }
}
