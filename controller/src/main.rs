use anyhow::Context as _;
use clap::Parser;
use cloud_controller_manager::config::{
    Command, LogFormat, Options, OutputFormat, ProviderCommand,
};

/// jemalloc where the binary links glibc (the workspace Cargo.toml says why).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Logs to stderr in `format`; RUST_LOG, when set, wins over `default_filter`
/// (from `-v`). With `--tracing-endpoint`, spans are also exported: the
/// provider returned is to be shut down (flushed) at exit.
fn init_logging(
    format: LogFormat,
    default_filter: &str,
    tracing_endpoint: Option<&str>,
    sampling_ratio: f64,
) -> anyhow::Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>> {
    use tracing_subscriber::{EnvFilter, fmt, prelude::*};
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let (otel, provider) = match tracing_endpoint.filter(|e| !e.is_empty()) {
        Some(endpoint) => {
            let (layer, provider) =
                cloud_controller_manager::telemetry::otlp_layer(endpoint, sampling_ratio)?;
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };
    let registry = tracing_subscriber::registry().with(otel).with(filter);
    match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .init(),
        LogFormat::Plain => registry
            .with(cloud_controller_manager::telemetry::plain_layer(
                std::io::stderr,
                cloud_controller_manager::telemetry::stderr_is_a_colour_terminal(),
            ))
            .init(),
    }
    Ok(provider)
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

async fn provider_info(opts: &Options, output: OutputFormat) -> anyhow::Result<()> {
    use cloud_controller_manager::provider_info;
    let providers = opts.providers()?;
    if !providers.is_hybrid() {
        let endpoint = opts.provider.endpoint();
        let report = provider_info::report(endpoint, opts.provider.client_options())
            .await
            .with_context(|| format!("asking the provider at {endpoint}"))?;
        match output {
            OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            OutputFormat::Text => print!("{}", provider_info::text(&report)),
        }
        return Ok(());
    }
    let reports =
        provider_info::report_all(&providers.endpoints, opts.provider.client_options()).await;
    match output {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&provider_info::json_all(&reports))?
        ),
        OutputFormat::Text => print!("{}", provider_info::text_all(&reports)),
    }
    failed_providers(&reports)
}

/// An error naming every provider that did not answer, after the others'
/// answers are printed.
fn failed_providers<T>(
    answers: &[cloud_controller_manager::provider_info::Named<T>],
) -> anyhow::Result<()> {
    match cloud_controller_manager::provider_info::failures(answers) {
        Some(failed) => anyhow::bail!("asking the providers: {failed}"),
        None => Ok(()),
    }
}

async fn provider_annotations(opts: &Options) -> anyhow::Result<()> {
    use cloud_controller_manager::provider_info;
    let providers = opts.providers()?;
    if !providers.is_hybrid() {
        let endpoint = opts.provider.endpoint();
        let reference = provider_info::annotations(endpoint, opts.provider.client_options())
            .await
            .with_context(|| format!("asking the provider at {endpoint}"))?;
        print!("{reference}");
        return Ok(());
    }
    let references =
        provider_info::annotations_all(&providers.endpoints, opts.provider.client_options()).await;
    print!("{}", provider_info::annotations_text_all(&references));
    failed_providers(&references)
}

fn main() -> anyhow::Result<()> {
    let opts = Options::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.controllers.runtime_worker_threads.get())
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run(opts))
}

async fn run(opts: Options) -> anyhow::Result<()> {
    match opts.command {
        Some(Command::Provider(ProviderCommand::Info { output })) => {
            return provider_info(&opts, output).await;
        }
        Some(Command::Provider(ProviderCommand::Annotations)) => {
            return provider_annotations(&opts).await;
        }
        None => {}
    }
    let enabled = opts.validate()?;
    let exporter = init_logging(
        opts.log_format(),
        &opts.log_filter(),
        opts.logging.tracing_endpoint.as_deref(),
        opts.logging.tracing_sampling_ratio,
    )?;
    if let Some(endpoint) = &opts.logging.tracing_endpoint {
        tracing::info!(
            endpoint,
            ratio = opts.logging.tracing_sampling_ratio,
            "exporting reconcile spans over OTLP"
        );
    }
    if !opts.compat.cloud_provider.is_empty() {
        tracing::info!(
            cloud_provider = %opts.compat.cloud_provider,
            "--cloud-provider is accepted for compatibility; the provider is whatever serves --provider-endpoint"
        );
    }
    for warning in opts.compat_warnings() {
        tracing::warn!("{warning}");
    }
    let config = opts.kube_config().await?;
    let result = cloud_controller_manager::run(opts, enabled, config, shutdown_signal()).await;
    if let Some(exporter) = exporter {
        // Sends what the batch still holds before the process goes.
        let flushed = tokio::task::spawn_blocking(move || exporter.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            eprintln!("exporting the last spans: {e}");
        }
    }
    result?;
    Ok(())
}
