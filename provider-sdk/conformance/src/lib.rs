//! Provider conformance suite for ccm-rs, modelled on csi-sanity.
//!
//! Runs a table of named cases against any provider endpoint
//! (`unix:///path`) and reports each as passed, failed or skipped. Cases for
//! a service the provider does not advertise are skipped. Everything the
//! suite creates is keyed by its run id (Service uids, route CIDRs, node
//! names) and deleted again at the end; nothing else is ever touched.
//!
//! ```no_run
//! # async fn demo() {
//! let report = ccm_provider_conformance::run(
//!     ccm_provider_conformance::Config::new("unix:///run/provider.sock"),
//! )
//! .await;
//! for r in &report.results {
//!     println!("{r}");
//! }
//! println!("{}", report.summary_line());
//! # }
//! ```

use std::fmt;
use std::time::Duration;

mod cases;
mod ctx;

pub use cases::{CASES, Case};

/// What to run, against what.
#[derive(Debug, Clone)]
pub struct Config {
    /// The provider endpoint, `unix:///absolute/path`.
    pub endpoint: String,
    /// The cluster name sent in requests; `None` means
    /// `conformance-<run-id>`.
    pub cluster_name: Option<String>,
    /// Names of nodes whose instances exist. Empty means "try
    /// `conformance-node-1`, and skip the positive instance cases if the
    /// provider says it does not exist".
    pub nodes: Vec<String>,
    /// Run only cases whose name contains one of these (all when empty).
    pub focus: Vec<String>,
    /// Leave out cases whose name contains one of these.
    pub skip: Vec<String>,
    /// Deadline of each RPC.
    pub timeout: Duration,
    /// Longest a single case may take, retries included.
    pub case_timeout: Duration,
    /// The run id keying everything the suite creates; `None` generates one.
    pub run_id: Option<String>,
    /// The providerID of an instance that does not exist, in the cloud's own
    /// format (for example `aws:///us-east-1a/i-0123456789abcdef0`), for the
    /// missing-instance cases; `None` invents
    /// `<provider_id_scheme>://conformance-missing-<run-id>`, which a real
    /// cloud may not be able to parse.
    pub missing_provider_id: Option<String>,
}

impl Config {
    pub fn new(endpoint: impl Into<String>) -> Self {
        Config {
            endpoint: endpoint.into(),
            cluster_name: None,
            nodes: Vec::new(),
            focus: Vec::new(),
            skip: Vec::new(),
            timeout: Duration::from_secs(30),
            case_timeout: Duration::from_secs(300),
            run_id: None,
            missing_provider_id: None,
        }
    }

    /// Whether the focus and skip filters select the case named `name`.
    pub fn selects(&self, name: &str) -> bool {
        (self.focus.is_empty() || self.focus.iter().any(|f| name.contains(f.as_str())))
            && !self.skip.iter().any(|s| name.contains(s.as_str()))
    }
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    pub name: String,
    pub outcome: Outcome,
}

impl fmt::Display for CaseResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Passed => write!(f, "PASS {}", self.name),
            Outcome::Failed(why) => write!(f, "FAIL {}: {why}", self.name),
            Outcome::Skipped(why) => write!(f, "SKIP {}: {why}", self.name),
        }
    }
}

/// The results of a run, in execution order. When the suite created
/// anything, the last entry is the `cleanup` pseudo-case.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub run_id: String,
    pub cluster_name: String,
    pub results: Vec<CaseResult>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Passed))
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }

    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skipped(_)))
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Exactly `N passed, N failed, N skipped` (CI parses it).
    pub fn summary_line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failed(),
            self.skipped()
        )
    }

    /// Names of the failed cases, in order.
    pub fn failed_names(&self) -> Vec<&str> {
        self.names(|o| matches!(o, Outcome::Failed(_)))
    }

    /// Names of the passed cases, in order.
    pub fn passed_names(&self) -> Vec<&str> {
        self.names(|o| matches!(o, Outcome::Passed))
    }

    /// Names of the skipped cases, in order.
    pub fn skipped_names(&self) -> Vec<&str> {
        self.names(|o| matches!(o, Outcome::Skipped(_)))
    }

    fn names(&self, f: impl Fn(&Outcome) -> bool) -> Vec<&str> {
        self.results
            .iter()
            .filter(|r| f(&r.outcome))
            .map(|r| r.name.as_str())
            .collect()
    }

    /// The result of the case named `name`.
    pub fn get(&self, name: &str) -> Option<&Outcome> {
        self.results
            .iter()
            .find(|r| r.name == name)
            .map(|r| &r.outcome)
    }

    pub fn success(&self) -> bool {
        self.failed() == 0
    }
}

/// Runs every selected case against `config.endpoint`, then deletes what
/// the run created.
pub async fn run(config: Config) -> Report {
    run_with(config, |_| {}).await
}

/// [`run`], calling `on_result` as each case finishes (for streaming
/// output).
pub async fn run_with(config: Config, mut on_result: impl FnMut(&CaseResult)) -> Report {
    let mut report = Report::default();
    let selected: Vec<&Case> = CASES.iter().filter(|c| config.selects(c.name)).collect();
    let cx = match ctx::Ctx::connect(config).await {
        Ok(cx) => cx,
        Err((run_id, cluster, why)) => {
            report.run_id = run_id;
            report.cluster_name = cluster;
            for case in selected {
                let r = CaseResult {
                    name: case.name.to_owned(),
                    outcome: Outcome::Failed(format!("handshake failed: {why}")),
                };
                on_result(&r);
                report.results.push(r);
            }
            return report;
        }
    };
    report.run_id = cx.run_id.clone();
    report.cluster_name = cx.cluster.clone();
    for case in selected {
        let outcome = cases::run_case(&cx, case).await;
        let r = CaseResult {
            name: case.name.to_owned(),
            outcome,
        };
        on_result(&r);
        report.results.push(r);
    }
    if let Some(outcome) = cx.cleanup().await {
        let r = CaseResult {
            name: "cleanup".to_owned(),
            outcome,
        };
        on_result(&r);
        report.results.push(r);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_has_the_exact_shape() {
        let report = Report {
            results: vec![
                CaseResult {
                    name: "a".into(),
                    outcome: Outcome::Passed,
                },
                CaseResult {
                    name: "b".into(),
                    outcome: Outcome::Failed("x".into()),
                },
                CaseResult {
                    name: "c".into(),
                    outcome: Outcome::Skipped("y".into()),
                },
                CaseResult {
                    name: "d".into(),
                    outcome: Outcome::Passed,
                },
            ],
            ..Default::default()
        };
        assert_eq!(report.summary_line(), "2 passed, 1 failed, 1 skipped");
        assert_eq!(report.failed_names(), vec!["b"]);
        assert_eq!(report.results[1].to_string(), "FAIL b: x");
        assert_eq!(report.results[2].to_string(), "SKIP c: y");
        assert_eq!(report.results[0].to_string(), "PASS a");
    }

    #[test]
    fn filters() {
        let mut c = Config::new("unix:///x");
        assert!(c.selects("loadbalancer/ensure"));
        c.focus = vec!["loadbalancer".into()];
        c.skip = vec!["large".into()];
        assert!(c.selects("loadbalancer/ensure"));
        assert!(!c.selects("loadbalancer/large-message"));
        assert!(!c.selects("instances/exists"));
    }

    #[test]
    fn case_names_are_unique() {
        let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
        names.sort();
        let len = names.len();
        names.dedup();
        assert_eq!(names.len(), len);
    }
}
