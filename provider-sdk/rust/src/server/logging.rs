//! A provider process's logging: to stderr (stdout may carry what the
//! process prints for its caller), filtered by `RUST_LOG` (default `info`),
//! as plain text or one JSON object a line.

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Plain,
    Json,
}

/// Installs the global subscriber; call once, first thing in `main`.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
