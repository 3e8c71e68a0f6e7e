use anyhow::Context as _;
use clap::Parser;
use cloud_controller_manager::options::{Command, Options, ProviderCommand};
use kube::config::{KubeConfigOptions, Kubeconfig};

async fn kube_config(opts: &Options) -> anyhow::Result<kube::Config> {
    let config = if opts.kubeconfig.is_empty() {
        kube::Config::infer()
            .await
            .context("loading Kubernetes configuration")?
    } else {
        let kc = Kubeconfig::read_from(&opts.kubeconfig)
            .with_context(|| format!("reading --kubeconfig {}", opts.kubeconfig))?;
        kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("using --kubeconfig {}", opts.kubeconfig))?
    };
    Ok(config)
}

fn init_logging(format: &str) {
    use tracing_subscriber::{EnvFilter, fmt, prelude::*};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    if format == "json" {
        registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .init();
    } else {
        registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .init();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Options::parse();
    if let Some(Command::Provider(ProviderCommand::Info { output })) = &opts.command {
        let report = cloud_controller_manager::provider_info::report(
            &opts.provider_endpoint,
            ccm_provider_sdk::ClientOptions {
                identity_timeout: opts.provider_identity_timeout,
                read_timeout: opts.provider_read_timeout,
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("asking the provider at {}", opts.provider_endpoint))?;
        if output == "json" {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", cloud_controller_manager::provider_info::text(&report));
        }
        return Ok(());
    }
    let enabled = opts.validate().map_err(anyhow::Error::msg)?;
    init_logging(&opts.log_format);
    if !opts.cloud_provider.is_empty() {
        tracing::info!(
            cloud_provider = %opts.cloud_provider,
            "--cloud-provider is accepted for compatibility; the provider is whatever serves --provider-endpoint"
        );
    }
    let config = kube_config(&opts).await?;
    cloud_controller_manager::run(opts, enabled, config, shutdown_signal()).await?;
    Ok(())
}
