//! Several providers in one controller (docs/hybrid.md): `--provider
//! NAME=unix:///…` once per provider, and the flags keyed by a provider's
//! name that say which Nodes and Services are its. Without `--provider`,
//! `--provider-endpoint` is the one provider, named `default`, and nothing
//! here applies ("single mode").

use clap::Args;

use super::ConfigError;
use crate::providers::{Backends, LabelSelector, Member, Table, route::SINGLE_NAME};

/// The hybrid-cluster flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Several providers (hybrid clusters, docs/hybrid.md)")]
pub struct ProvidersArgs {
    /// A provider and its gRPC endpoint, a Unix socket; repeat the flag for
    /// each. NAME is a DNS label. Given at least once, every provider is
    /// given this way and --provider-endpoint must not be.
    #[arg(long = "provider", global = true, value_name = "NAME=ENDPOINT", value_parser = named_endpoint)]
    pub providers: Vec<(String, String)>,

    /// The provider of LoadBalancer Services without a class, and of the
    /// Nodes no other rule gives an owner. Empty: none. [default: the first
    /// --provider]
    #[arg(long, global = true, value_name = "NAME")]
    pub default_provider: Option<String>,

    /// The Nodes a provider owns when neither their providerID nor their
    /// platform decides: a label selector in kubectl's syntax (k=v, k!=v,
    /// k, !k, k in (a,b), k notin (a,b); commas join). Once per provider.
    #[arg(long, global = true, value_name = "NAME=SELECTOR", value_parser = keyed(|s| LabelSelector::parse(s).map_err(|e| e.to_string())))]
    pub provider_node_selector: Vec<(String, LabelSelector)>,

    /// Platforms a provider manages, comma-separated, in addition to those
    /// it declares itself: Nodes whose cloudprovider.kubernetes.io/platform
    /// label (or annotation) names one are its. Once per provider.
    #[arg(long, global = true, value_name = "NAME=PLATFORM,…", value_parser = keyed(platforms))]
    pub cloud_provider_platforms: Vec<(String, Vec<String>)>,

    /// Which Nodes are the backends of a provider's load balancers: all
    /// (upstream's rules over every Node), owned (only the Nodes it owns) or
    /// selector:SELECTOR (only the Nodes matching). Once per provider.
    /// [default: all]
    #[arg(long, global = true, value_name = "NAME=all|owned|selector:SELECTOR", value_parser = keyed(backends))]
    pub provider_load_balancer_backends: Vec<(String, Backends)>,

    /// Whether a provider routes the pod CIDRs of the Nodes it owns (with
    /// --configure-cloud-routes and a provider that has routes). Once per
    /// provider. [default: true]
    #[arg(long, global = true, value_name = "NAME=true|false", value_parser = keyed(super::compat::go_bool))]
    pub provider_routes: Vec<(String, bool)>,
}

/// One provider to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub endpoint: String,
}

/// The configured providers: whom to connect to, and who answers for what.
#[derive(Debug, Clone)]
pub struct Providers {
    /// In flag order; one, named `default`, in single mode.
    pub endpoints: Vec<Endpoint>,
    pub table: Table,
}

impl Providers {
    pub fn is_hybrid(&self) -> bool {
        self.table.is_hybrid()
    }
}

impl ProvidersArgs {
    /// Checks the flags together and builds the routing table.
    /// `explicit_endpoint`: `--provider-endpoint` (or its variable) given.
    pub fn providers(
        &self,
        endpoint: &str,
        explicit_endpoint: bool,
    ) -> Result<Providers, ConfigError> {
        let err = |m: String| Err(ConfigError::Providers(m));
        if self.providers.is_empty() {
            for (flag, given) in self.keyed_flags() {
                if let Some(name) = given.first() {
                    return err(format!(
                        "{flag} {name}=…: there is no --provider; the flags keyed by a provider's name apply only when the providers are given with --provider"
                    ));
                }
            }
            if self.default_provider.is_some() {
                return err(
                    "--default-provider applies only when the providers are given with --provider"
                        .into(),
                );
            }
            return Ok(Providers {
                endpoints: vec![Endpoint {
                    name: SINGLE_NAME.into(),
                    endpoint: endpoint.into(),
                }],
                table: Table::single(),
            });
        }
        if explicit_endpoint {
            return err(
                "--provider and --provider-endpoint cannot be combined: with --provider, give every provider's endpoint as --provider NAME=unix:///path/to.sock".into(),
            );
        }
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for (name, endpoint) in &self.providers {
            if endpoints.iter().any(|e| &e.name == name) {
                return err(format!("--provider {name}=… is given twice"));
            }
            if let Some(other) = endpoints.iter().find(|e| &e.endpoint == endpoint) {
                return err(format!(
                    "--provider {name}={endpoint}: provider {:?} has that endpoint too; each provider has a socket of its own",
                    other.name
                ));
            }
            endpoints.push(Endpoint {
                name: name.clone(),
                endpoint: endpoint.clone(),
            });
        }
        let known = |n: &str| endpoints.iter().any(|e| e.name == n);
        for (flag, given) in self.keyed_flags() {
            for (i, name) in given.iter().enumerate() {
                if !known(name) {
                    return err(format!(
                        "{flag} {name}=…: no --provider is named {name:?} (configured: {})",
                        names(&endpoints)
                    ));
                }
                if given[..i].contains(name) {
                    return err(format!("{flag} {name}=… is given twice"));
                }
            }
        }
        let default = match self.default_provider.as_deref() {
            None => Some(endpoints[0].name.as_str()),
            Some("") => None,
            Some(d) if known(d) => Some(d),
            Some(d) => {
                return err(format!(
                    "--default-provider {d:?}: no --provider is named so (configured: {})",
                    names(&endpoints)
                ));
            }
        };
        let mut claimed: Vec<(&str, &str)> = Vec::new();
        for (name, platforms) in &self.cloud_provider_platforms {
            for p in platforms {
                if let Some((other, _)) = claimed.iter().find(|(_, q)| q == p) {
                    return err(format!(
                        "--cloud-provider-platforms: the platform {p:?} is given to both {other:?} and {name:?}; a Node on it would have two owners"
                    ));
                }
                claimed.push((name, p));
            }
        }
        let members = endpoints
            .iter()
            .map(|e| {
                let mut m = Member::new(e.name.clone());
                if let Some(s) = given_for(&self.provider_node_selector, &e.name) {
                    m.node_selector = Some(s.clone());
                }
                if let Some(p) = given_for(&self.cloud_provider_platforms, &e.name) {
                    m.platforms = p.clone();
                }
                if let Some(b) = given_for(&self.provider_load_balancer_backends, &e.name) {
                    m.backends = b.clone();
                }
                if let Some(r) = given_for(&self.provider_routes, &e.name) {
                    m.routes = *r;
                }
                m
            })
            .collect();
        let table = Table::hybrid(members, default).map_err(ConfigError::Providers)?;
        Ok(Providers { endpoints, table })
    }

    /// Each keyed flag and the provider names it is given for.
    fn keyed_flags(&self) -> [(&'static str, Vec<&str>); 4] {
        fn keys<T>(v: &[(String, T)]) -> Vec<&str> {
            v.iter().map(|(n, _)| n.as_str()).collect()
        }
        [
            (
                "--provider-node-selector",
                keys(&self.provider_node_selector),
            ),
            (
                "--cloud-provider-platforms",
                keys(&self.cloud_provider_platforms),
            ),
            (
                "--provider-load-balancer-backends",
                keys(&self.provider_load_balancer_backends),
            ),
            ("--provider-routes", keys(&self.provider_routes)),
        ]
    }
}

/// A keyed flag's value for the provider `name`.
fn given_for<'a, T>(flag: &'a [(String, T)], name: &str) -> Option<&'a T> {
    flag.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn names(endpoints: &[Endpoint]) -> String {
    endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A DNS-1123 label: what a provider's name and a platform must be (they
/// appear in check names, finalizers and metric labels).
pub fn is_dns_label(s: &str) -> bool {
    ccm_provider_sdk::validate::dns_label("", s).is_ok()
}

fn provider_name(name: &str) -> Result<String, String> {
    if is_dns_label(name) {
        Ok(name.to_owned())
    } else {
        Err(format!(
            "{name:?} is not a provider name: a DNS label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
        ))
    }
}

/// `NAME=unix:///path`.
fn named_endpoint(s: &str) -> Result<(String, String), String> {
    let (name, endpoint) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=unix:///path/to.sock"))?;
    ccm_provider_sdk::socket_path(endpoint).map_err(|e| e.to_string())?;
    Ok((provider_name(name)?, endpoint.to_owned()))
}

/// A parser of `NAME=VALUE`, VALUE by `value`.
fn keyed<T>(
    value: impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
) -> impl Fn(&str) -> Result<(String, T), String> + Clone + Send + Sync + 'static {
    move |s| {
        let (name, v) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?} is not NAME=VALUE, NAME a --provider's name"))?;
        Ok((provider_name(name)?, value(v)?))
    }
}

/// A parser of `VALUE` (every provider) or `NAME=VALUE` (one), VALUE by
/// `value`: the call budget's flags.
pub(super) fn for_any_or_one<T>(
    value: impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
) -> impl Fn(&str) -> Result<(Option<String>, T), String> + Clone + Send + Sync + 'static {
    move |s| match s.split_once('=') {
        Some((name, v)) => Ok((Some(provider_name(name)?), value(v)?)),
        None => Ok((None, value(s)?)),
    }
}

/// The value a `[NAME=]VALUE` flag gives the provider `name`: its own,
/// else the one for every provider.
pub(super) fn given_for_any_or<'a, T>(
    flag: &'a [(Option<String>, T)],
    name: &str,
) -> Option<&'a T> {
    flag.iter()
        .find(|(n, _)| n.as_deref() == Some(name))
        .or_else(|| flag.iter().find(|(n, _)| n.is_none()))
        .map(|(_, v)| v)
}

pub(super) fn qps(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(q) if q.is_finite() && q > 0.0 => Ok(q),
        _ => Err(format!(
            "{s:?} is not a positive number of calls per second"
        )),
    }
}

pub(super) fn burst(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(b) if b > 0 => Ok(b),
        _ => Err(format!("{s:?} is not a positive whole number of calls")),
    }
}

/// `--provider-qps` and `--provider-burst` against the providers: a
/// NAME= only with --provider and naming one, each once, and no burst
/// without a rate.
pub(super) fn check_budget_flags(
    qps: &[(Option<String>, f64)],
    burst: &[(Option<String>, u32)],
    providers: &Providers,
) -> Result<(), ConfigError> {
    let err = |m: String| Err(ConfigError::Providers(m));
    fn keys<T>(v: &[(Option<String>, T)]) -> Vec<Option<&str>> {
        v.iter().map(|(n, _)| n.as_deref()).collect()
    }
    for (flag, given) in [
        ("--provider-qps", keys(qps)),
        ("--provider-burst", keys(burst)),
    ] {
        for (i, name) in given.iter().enumerate() {
            if given[..i].contains(name) {
                return match name {
                    Some(name) => err(format!("{flag} {name}=… is given twice")),
                    None => err(format!("{flag} is given twice for every provider")),
                };
            }
            let Some(name) = name else { continue };
            if !providers.is_hybrid() {
                return err(format!(
                    "{flag} {name}=…: there is no --provider; with one provider give {flag} without a name"
                ));
            }
            if !providers.endpoints.iter().any(|e| e.name == *name) {
                return err(format!(
                    "{flag} {name}=…: no --provider is named {name:?} (configured: {})",
                    names(&providers.endpoints)
                ));
            }
        }
    }
    for e in &providers.endpoints {
        if given_for_any_or(burst, &e.name).is_some() && given_for_any_or(qps, &e.name).is_none() {
            let flag = if providers.is_hybrid() {
                format!("--provider-burst {}=…", e.name)
            } else {
                "--provider-burst".to_owned()
            };
            return err(format!(
                "{flag}: a burst needs a rate; give --provider-qps for that provider too"
            ));
        }
    }
    Ok(())
}

fn platforms(s: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for p in s.split(',').map(str::trim) {
        if !is_dns_label(p) {
            return Err(format!("{p:?} is not a platform name (a DNS label)"));
        }
        if !out.iter().any(|q| q == p) {
            out.push(p.to_owned());
        }
    }
    Ok(out)
}

fn backends(s: &str) -> Result<Backends, String> {
    match s {
        "all" => Ok(Backends::All),
        "owned" => Ok(Backends::Owned),
        _ => match s.strip_prefix("selector:") {
            Some(sel) => LabelSelector::parse(sel)
                .map(Backends::Selector)
                .map_err(|e| e.to_string()),
            None => Err(format!(
                "{s:?} is not one of all, owned or selector:SELECTOR"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Options;
    use crate::providers::Route;

    fn parse(flags: &[&str]) -> Options {
        let mut all = vec!["ccm"];
        all.extend(flags);
        Options::try_parse_from(all).unwrap()
    }

    fn providers(flags: &[&str]) -> Result<Providers, String> {
        parse(flags).providers().map_err(|e| e.to_string())
    }

    const TWO: [&str; 2] = [
        "--provider=onprem=unix:///run/onprem.sock",
        "--provider=cloud=unix:///run/cloud.sock",
    ];

    fn with_two(more: &[&str]) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = TWO.to_vec();
        v.extend(more.iter().map(|s| &*s.to_string().leak()));
        v
    }

    #[test]
    fn without_provider_flags_the_endpoint_is_the_one_provider() {
        let p = providers(&[]).unwrap();
        assert!(!p.is_hybrid());
        assert_eq!(
            p.endpoints,
            [Endpoint {
                name: "default".into(),
                endpoint: ccm_provider_sdk::DEFAULT_ENDPOINT.into()
            }]
        );
        let p = providers(&["--provider-endpoint=unix:///x.sock"]).unwrap();
        assert_eq!(p.endpoints[0].endpoint, "unix:///x.sock");
        assert_eq!(p.table.default_name(), Some("default"));
    }

    #[test]
    fn several_providers_build_the_routing_table() {
        let p = providers(&with_two(&[
            "--provider-node-selector=cloud=pool in (gpu,cpu)",
            "--cloud-provider-platforms=cloud=aws,cloud",
            "--provider-load-balancer-backends=cloud=selector:zone=a",
            "--provider-load-balancer-backends=onprem=owned",
            "--provider-routes=cloud=false",
        ]))
        .unwrap();
        assert!(p.is_hybrid());
        let names: Vec<&str> = p.endpoints.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["onprem", "cloud"]);
        assert_eq!(p.endpoints[1].endpoint, "unix:///run/cloud.sock");
        let t = &p.table;
        assert_eq!(t.default_name(), Some("onprem"), "the first --provider");
        let cloud = t.member("cloud").unwrap();
        assert_eq!(cloud.platforms, ["aws", "cloud"]);
        assert_eq!(
            cloud.node_selector.as_ref().unwrap().to_string(),
            "pool in (gpu,cpu)"
        );
        assert!(matches!(&cloud.backends, Backends::Selector(s) if s.to_string() == "zone=a"));
        assert!(!cloud.routes);
        let onprem = t.member("onprem").unwrap();
        assert_eq!(onprem.backends, Backends::Owned);
        assert!(onprem.routes && onprem.platforms.is_empty() && onprem.node_selector.is_none());

        let node = |labels: &[(&str, &str)]| k8s_openapi::api::core::v1::Node {
            metadata: kube::api::ObjectMeta {
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            t.node_owner(&node(&[("pool", "gpu")])),
            Route::To("cloud".into())
        );
        assert_eq!(
            t.node_owner(&node(&[(crate::providers::route::PLATFORM_KEY, "aws")])),
            Route::To("cloud".into())
        );
        assert_eq!(t.node_owner(&node(&[])), Route::To("onprem".into()));
    }

    #[test]
    fn the_default_provider_is_chosen_or_none() {
        let p = providers(&with_two(&["--default-provider=cloud"])).unwrap();
        assert_eq!(p.table.default_name(), Some("cloud"));
        let p = providers(&with_two(&["--default-provider="])).unwrap();
        assert_eq!(p.table.default_name(), None);
    }

    #[test]
    fn mistakes_are_refused_with_what_to_do() {
        for (flags, want) in [
            (
                with_two(&["--provider-endpoint=unix:///x.sock"]),
                "--provider and --provider-endpoint cannot be combined",
            ),
            (
                with_two(&["--provider=cloud=unix:///run/other.sock"]),
                "--provider cloud=… is given twice",
            ),
            (
                with_two(&["--provider=third=unix:///run/cloud.sock"]),
                "provider \"cloud\" has that endpoint too",
            ),
            (
                with_two(&["--provider-routes=edge=false"]),
                "--provider-routes edge=…: no --provider is named \"edge\" (configured: onprem, cloud)",
            ),
            (
                with_two(&[
                    "--provider-node-selector=cloud=a=b",
                    "--provider-node-selector=cloud=c",
                ]),
                "--provider-node-selector cloud=… is given twice",
            ),
            (
                with_two(&["--default-provider=edge"]),
                "--default-provider \"edge\": no --provider is named so",
            ),
            (
                with_two(&[
                    "--cloud-provider-platforms=cloud=metal",
                    "--cloud-provider-platforms=onprem=metal",
                ]),
                "the platform \"metal\" is given to both \"cloud\" and \"onprem\"",
            ),
            (
                vec!["--provider-load-balancer-backends=default=owned"],
                "--provider-load-balancer-backends default=…: there is no --provider",
            ),
            (
                vec!["--default-provider=default"],
                "--default-provider applies only when the providers are given with --provider",
            ),
        ] {
            let err = providers(&flags).unwrap_err();
            assert!(err.contains(want), "{flags:?}: {err}");
            let opts = parse(&flags);
            assert!(
                opts.validate().is_err(),
                "{flags:?}: validate() checks it too"
            );
        }
    }

    #[test]
    fn malformed_values_are_refused_by_the_flag() {
        for (flag, want) in [
            ("--provider=cloud", "is not NAME=unix:///path/to.sock"),
            (
                "--provider=Cloud=unix:///x.sock",
                "\"Cloud\" is not a provider name",
            ),
            ("--provider=cloud=tcp://x:1", "unix://"),
            ("--provider-node-selector=cloud", "is not NAME=VALUE"),
            (
                "--provider-node-selector=cloud=zone in a",
                "invalid label selector",
            ),
            (
                "--provider-load-balancer-backends=cloud=some",
                "not one of all, owned or selector:SELECTOR",
            ),
            (
                "--provider-load-balancer-backends=cloud=selector:",
                "invalid label selector",
            ),
            ("--provider-routes=cloud=maybe", "invalid boolean"),
            (
                "--cloud-provider-platforms=cloud=Bad_Name",
                "is not a platform name",
            ),
            (
                "--cloud-provider-platforms=cloud=",
                "is not a platform name",
            ),
        ] {
            let err = Options::try_parse_from(["ccm", flag])
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{flag}: {err}");
        }
    }

    /// `provider info` takes the providers' flags after its name too.
    #[test]
    fn the_provider_subcommands_take_the_providers() {
        let o = Options::try_parse_from([
            "ccm",
            "provider",
            "info",
            "--provider=a=unix:///a.sock",
            "--provider=b=unix:///b.sock",
            "--default-provider=b",
            "--provider-node-selector=a=x",
            "--cloud-provider-platforms=a=p",
            "--provider-load-balancer-backends=b=owned",
            "--provider-routes=b=false",
        ])
        .unwrap();
        let p = o.providers().unwrap();
        assert_eq!(p.endpoints.len(), 2);
        assert_eq!(p.table.default_name(), Some("b"));
    }

    #[test]
    fn provider_names_and_platforms_are_dns_labels() {
        for ok in ["a", "cloud", "on-prem", "p1"] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod budget_tests {
    use ccm_provider_sdk::client::CallBudget;
    use clap::Parser;

    use crate::config::Options;

    fn options(flags: &[&str]) -> Result<Options, String> {
        let mut all = vec!["ccm"];
        all.extend(flags);
        let o = Options::try_parse_from(all).map_err(|e| e.to_string())?;
        o.providers().map_err(|e| e.to_string())?;
        Ok(o)
    }

    const TWO: [&str; 4] = [
        "--provider",
        "a=unix:///run/a.sock",
        "--provider",
        "b=unix:///run/b.sock",
    ];

    #[test]
    fn the_budget_is_unlimited_unless_given_for_every_provider_or_one() {
        let budget = |qps, burst| Some(CallBudget { qps, burst });
        let o = options(&[]).unwrap();
        assert_eq!(o.provider.call_budget("default"), None);
        // The burst defaults to one second's worth.
        let o = options(&["--provider-qps", "2.5"]).unwrap();
        assert_eq!(o.provider.call_budget("default"), budget(2.5, 3));
        let o = options(&["--provider-qps", "0.2", "--provider-burst", "4"]).unwrap();
        assert_eq!(o.provider.call_budget("default"), budget(0.2, 4));
        let mut flags = TWO.to_vec();
        flags.extend(["--provider-qps", "b=1", "--provider-burst", "b=5"]);
        let o = options(&flags).unwrap();
        assert_eq!(o.provider.call_budget("a"), None);
        assert_eq!(o.provider.call_budget("b"), budget(1.0, 5));
        // A value without a name is every other provider's.
        flags.extend(["--provider-qps", "20"]);
        let o = options(&flags).unwrap();
        assert_eq!(o.provider.call_budget("a"), budget(20.0, 20));
        assert_eq!(o.provider.call_budget("b"), budget(1.0, 5));
    }

    #[test]
    fn budget_flags_that_cannot_apply_are_refused() {
        let refused = |flags: &[&str], says: &str| {
            let err = options(flags).err().unwrap_or_default();
            assert!(err.contains(says), "{flags:?}: {err}");
        };
        refused(&["--provider-qps", "0"], "not a positive number");
        refused(&["--provider-qps", "inf"], "not a positive number");
        refused(&["--provider-burst", "0"], "not a positive whole number");
        refused(&["--provider-burst", "5"], "a burst needs a rate");
        refused(&["--provider-qps", "a=1"], "there is no --provider");
        let with = |extra: &[&'static str]| {
            let mut f = TWO.to_vec();
            f.extend(extra);
            f
        };
        refused(
            &with(&["--provider-qps", "c=1"]),
            "no --provider is named \"c\"",
        );
        refused(
            &with(&["--provider-qps", "a=1", "--provider-qps", "a=2"]),
            "given twice",
        );
        refused(
            &with(&["--provider-qps", "a=1", "--provider-burst", "b=2"]),
            "--provider-burst b=…: a burst needs a rate",
        );
    }
}
