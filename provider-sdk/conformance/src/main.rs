//! `provider-conformance`: runs the conformance suite against a provider
//! endpoint and prints one line per case, then the summary line.

use std::process::ExitCode;
use std::time::Duration;

use ccm_provider_conformance::{CASES, Config, run_with};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "provider-conformance",
    about = "Checks a ccm-rs provider against the provider contract (like csi-sanity)."
)]
struct Args {
    /// The provider endpoint, unix:///absolute/path.
    #[arg(long, env = "PROVIDER_ENDPOINT", required_unless_present = "list")]
    endpoint: Option<String>,
    /// Cluster name sent in requests [default: conformance-<run-id>].
    #[arg(long)]
    cluster_name: Option<String>,
    /// A node whose instance exists (default: try conformance-node-1 and
    /// skip the positive instance cases if it does not exist).
    #[arg(long = "node")]
    nodes: Vec<String>,
    /// Run only cases whose name contains this (repeatable).
    #[arg(long)]
    focus: Vec<String>,
    /// Leave out cases whose name contains this (repeatable).
    #[arg(long)]
    skip: Vec<String>,
    /// Deadline of each RPC, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Longest a single case may take, in seconds.
    #[arg(long, default_value_t = 300)]
    case_timeout: u64,
    /// The run id keying created resources [default: generated].
    #[arg(long)]
    run_id: Option<String>,
    /// The providerID of an instance that does not exist, in your cloud's
    /// own format, for the missing-instance cases (e.g.
    /// aws:///us-east-1a/i-0123456789abcdef0) [default:
    /// <scheme>://conformance-missing-<run-id>].
    #[arg(long)]
    missing_provider_id: Option<String>,
    /// List the (selected) cases and their required capabilities, then exit.
    #[arg(long)]
    list: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut config = Config::new(args.endpoint.clone().unwrap_or_default());
    config.cluster_name = args.cluster_name;
    config.nodes = args.nodes;
    config.focus = args.focus;
    config.skip = args.skip;
    config.timeout = Duration::from_secs(args.timeout);
    config.case_timeout = Duration::from_secs(args.case_timeout);
    config.run_id = args.run_id;
    config.missing_provider_id = args.missing_provider_id;
    if args.list {
        for case in CASES.iter().filter(|c| config.selects(c.name)) {
            let caps: Vec<_> = case.capabilities.iter().map(|c| c.as_str_name()).collect();
            let mut line = case.name.to_owned();
            if !caps.is_empty() {
                line.push_str(&format!(" [{}]", caps.join(", ")));
            }
            // The contract version whose rule the case checks, when newer
            // than the first.
            if case.since != ccm_provider_sdk::ContractVersion::V1_0_0 {
                line.push_str(&format!(" (since {})", case.since));
            }
            println!("{line}");
        }
        return ExitCode::SUCCESS;
    }
    let report = run_with(config, |r| println!("{r}")).await;
    eprintln!(
        "run id {}, cluster name {}",
        report.run_id, report.cluster_name
    );
    println!("{}", report.summary_line());
    if report.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
