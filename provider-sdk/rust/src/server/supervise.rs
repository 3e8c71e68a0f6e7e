//! Running a provider process's servers together: the provider socket,
//! and whatever else the process serves (an admin API, metrics). They stop
//! together on SIGTERM or SIGINT, or as soon as any of them ends, so a
//! half-running provider never lingers.

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinSet;

/// Why [`Supervisor::run`] returned an error.
#[derive(Debug, thiserror::Error)]
pub enum Stopped<E> {
    #[error(transparent)]
    Failed(E),
    #[error("a server task panicked: {0}")]
    Panicked(String),
    #[error("a server stopped unexpectedly")]
    Unexpected,
    #[error("installing the signal handlers: {0}")]
    Signals(std::io::Error),
}

impl<E: std::fmt::Display> Stopped<E> {
    /// The server's own error, or `other` made from this one's message.
    pub fn into_error(self, other: impl FnOnce(String) -> E) -> E {
        match self {
            Stopped::Failed(e) => e,
            stopped => other(stopped.to_string()),
        }
    }
}

/// The servers of one process.
pub struct Supervisor<E> {
    tasks: JoinSet<Result<(), E>>,
    stop: watch::Sender<bool>,
}

impl<E: Send + 'static> Default for Supervisor<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Send + 'static> Supervisor<E> {
    pub fn new() -> Self {
        Supervisor {
            tasks: JoinSet::new(),
            stop: watch::channel(false).0,
        }
    }

    /// Completes once the servers are asked to stop: hand it to each
    /// server as its shutdown signal.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    pub fn spawn(&mut self, server: impl Future<Output = Result<(), E>> + Send + 'static) {
        self.tasks.spawn(server);
    }

    /// Serves `provider` on `endpoint` until the servers stop.
    pub fn spawn_provider<I: crate::Identity>(
        &mut self,
        provider: super::ProviderServer<I>,
        endpoint: String,
    ) where
        E: From<crate::ServeError>,
    {
        let stop = self.stopped();
        self.spawn(async move { Ok(provider.serve(&endpoint, stop).await?) });
    }

    /// Serves until SIGTERM or SIGINT, or until a server ends (which is an
    /// error even when it returned Ok); then stops every server and waits
    /// for them. The first error wins.
    pub async fn run(mut self) -> Result<(), Stopped<E>> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(Stopped::Signals)?;
        let mut int = signal(SignalKind::interrupt()).map_err(Stopped::Signals)?;
        let mut result = Ok(());
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
            Some(joined) = self.tasks.join_next() => {
                result = Err(outcome(joined).err().unwrap_or(Stopped::Unexpected));
            }
        }
        let _ = self.stop.send(true);
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = outcome(joined)
                && result.is_ok()
            {
                result = Err(e);
            }
        }
        result
    }
}

fn outcome<E>(joined: Result<Result<(), E>, tokio::task::JoinError>) -> Result<(), Stopped<E>> {
    match joined {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Stopped::Failed(e)),
        Err(e) => Err(Stopped::Panicked(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_that_ends_stops_the_others_and_its_error_wins() {
        let mut s: Supervisor<String> = Supervisor::new();
        let stopped = s.stopped();
        s.spawn(async move {
            stopped.await;
            Err("second".to_owned())
        });
        s.spawn(async { Err("first".to_owned()) });
        match s.run().await {
            Err(Stopped::Failed(e)) => assert_eq!(e, "first"),
            other => panic!("{other:?}"),
        }
        let mut s: Supervisor<String> = Supervisor::new();
        s.spawn(async { Ok(()) });
        assert!(matches!(s.run().await, Err(Stopped::Unexpected)));
    }
}
