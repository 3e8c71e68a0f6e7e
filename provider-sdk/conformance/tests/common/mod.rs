//! Serving providers over a real Unix socket in-process.

#![allow(dead_code)]

use std::time::Duration;

use ccm_provider_conformance::{Config, Outcome, Report};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;

/// A provider serving on a socket in a temporary directory; stops on drop.
pub struct Served {
    pub endpoint: String,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Served {
    pub fn config(&self) -> Config {
        let mut c = Config::new(&self.endpoint);
        c.timeout = Duration::from_secs(10);
        c.case_timeout = Duration::from_secs(60);
        c
    }

    pub async fn run(&self) -> Report {
        let report = ccm_provider_conformance::run(self.config()).await;
        for r in &report.results {
            eprintln!("{r}");
        }
        eprintln!("{}", report.summary_line());
        report
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn socket() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("provider.sock");
    let endpoint = format!("unix://{}", path.display());
    (dir, path, endpoint)
}

/// Serves raw generated tonic services (no SDK in between).
pub fn serve_routes(routes: tonic::service::Routes) -> Served {
    let (dir, path, endpoint) = socket();
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = rx.await;
            })
            .await
            .expect("serve");
    });
    Served {
        endpoint,
        shutdown: Some(tx),
        handle: Some(handle),
        _dir: dir,
    }
}

/// Serves with a closure that gets the endpoint and a shutdown future (for
/// SDK-based providers).
pub async fn serve_with<F, Fut>(f: F) -> Served
where
    F: FnOnce(String, oneshot::Receiver<()>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (dir, path, endpoint) = socket();
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(f(endpoint.clone(), rx));
    // Wait for the socket to appear.
    for _ in 0..200 {
        if path.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(path.exists(), "provider did not bind {}", path.display());
    Served {
        endpoint,
        shutdown: Some(tx),
        handle: Some(handle),
        _dir: dir,
    }
}

/// Panics with the whole report unless exactly `expected` failed.
pub fn assert_failed(report: &Report, expected: &[&str]) {
    let mut got = report.failed_names();
    got.sort();
    let mut want = expected.to_vec();
    want.sort();
    assert_eq!(
        got,
        want,
        "unexpected failures; report:\n{}",
        report
            .results
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Why `case` failed; panics unless it did.
pub fn failure<'a>(report: &'a Report, case: &str) -> &'a str {
    match report.get(case) {
        Some(Outcome::Failed(why)) => why,
        other => panic!("{case}: expected failed, got {other:?}"),
    }
}
