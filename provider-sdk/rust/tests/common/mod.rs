//! A `ProviderServer` on a socket in a temporary directory, for tests that
//! need a live provider.

use std::time::Duration;

use ccm_provider_sdk::{Identity, ProviderServer, ServeError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct Serving {
    pub endpoint: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServeError>>,
    _dir: tempfile::TempDir,
}

/// Serves `server` and returns once its socket accepts connections.
pub async fn serve<I: Identity>(server: ProviderServer<I>) -> Serving {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider.sock");
    let endpoint = format!("unix://{}", path.display());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn({
        let endpoint = endpoint.clone();
        async move {
            server
                .serve(&endpoint, async {
                    let _ = stopped.await;
                })
                .await
        }
    });
    while tokio::net::UnixStream::connect(&path).await.is_err() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Serving {
        endpoint,
        stop,
        task,
        _dir: dir,
    }
}

impl Serving {
    /// Shuts the server down and checks it stopped cleanly.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}
