//! The command-line flags of a provider binary that declare what a
//! controller running several providers routes to it (contract 1.3.0),
//! the same in every provider of this repository.

use crate::provider::ProviderInfo;

/// `--load-balancer-class CLASS` (repeatable), `--unclassed-services
/// served|declined` and `--platform NAME` (repeatable); `#[command(flatten)]`
/// them into a provider's arguments and hand them to [`IdentityFlags::declare`].
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct IdentityFlags {
    /// A spec.loadBalancerClass whose Services this provider serves, with
    /// a DNS-subdomain prefix (for example example.com/cloud); repeatable.
    #[arg(long = "load-balancer-class", value_name = "CLASS")]
    pub load_balancer_classes: Vec<String>,
    /// Whether LoadBalancer Services without a class are served when the
    /// controller makes this provider its default. Unset: not said, which
    /// means served, as before contract 1.3.0.
    #[arg(long, value_enum, value_name = "served|declined")]
    pub unclassed_services: Option<UnclassedServicesFlag>,
    /// A KEP-5778 platform whose Nodes (label or annotation
    /// cloudprovider.kubernetes.io/platform, no providerID) this provider
    /// initialises, a DNS-1123 label; repeatable.
    #[arg(long = "platform", value_name = "NAME")]
    pub platforms: Vec<String>,
}

/// `--unclassed-services`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UnclassedServicesFlag {
    Served,
    Declined,
}

impl IdentityFlags {
    /// [`ProviderInfo::serves_unclassed`] of `--unclassed-services`.
    pub fn serves_unclassed(&self) -> Option<bool> {
        self.unclassed_services
            .map(|u| u == UnclassedServicesFlag::Served)
    }

    /// `info` declaring what the flags say. Check the result with
    /// [`ProviderInfo::check`] before serving.
    pub fn declare(&self, info: ProviderInfo) -> ProviderInfo {
        ProviderInfo {
            load_balancer_classes: self.load_balancer_classes.clone(),
            serves_unclassed: self.serves_unclassed(),
            platforms: self.platforms.clone(),
            ..info
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Args {
        #[command(flatten)]
        identity: IdentityFlags,
    }

    fn parse(args: &[&str]) -> Result<IdentityFlags, clap::Error> {
        Args::try_parse_from(std::iter::once("provider").chain(args.iter().copied()))
            .map(|a| a.identity)
    }

    #[test]
    fn the_flags_declare_classes_unclassed_services_and_platforms() {
        let flags = parse(&[
            "--load-balancer-class",
            "example.com/cloud",
            "--load-balancer-class=example.com/nlb",
            "--unclassed-services=declined",
            "--platform",
            "cloud",
        ])
        .unwrap();
        let info = flags.declare(ProviderInfo {
            name: "fake".into(),
            provider_id_scheme: "fake".into(),
            ..Default::default()
        });
        assert_eq!(
            info.load_balancer_classes,
            ["example.com/cloud", "example.com/nlb"]
        );
        assert_eq!(info.serves_unclassed, Some(false));
        assert_eq!(info.platforms, ["cloud"]);
        assert_eq!(info.name, "fake");
        assert_eq!(info.check(), Ok(()));

        // None of them: nothing declared, as before 1.3.0.
        let none = parse(&[]).unwrap();
        assert_eq!(none, IdentityFlags::default());
        assert_eq!(none.serves_unclassed(), None);
        let served = parse(&["--unclassed-services", "served"]).unwrap();
        assert_eq!(served.serves_unclassed(), Some(true));
        assert!(parse(&["--unclassed-services", "maybe"]).is_err());

        // Malformed values are the identity's to refuse, naming the field.
        let bad = parse(&["--load-balancer-class", "cloud"]).unwrap();
        let v = bad.declare(ProviderInfo::default()).check().unwrap_err();
        assert_eq!(v.field, "load_balancer_classes[0]");
    }
}
