//! The controller processes, upstream's and ours, on one Lease.

use super::*;

/// The Lease both sides elect on, with the same timings.
pub(super) fn lease_flags(lease: &str) -> [String; 5] {
    [
        format!("--leader-elect-resource-name={lease}"),
        format!("--leader-elect-resource-namespace={NAMESPACE}"),
        format!(
            "--leader-elect-lease-duration={}ms",
            LEASE_DURATION.as_millis()
        ),
        format!(
            "--leader-elect-renew-deadline={}ms",
            RENEW_DEADLINE.as_millis()
        ),
        format!("--leader-elect-retry-period={}ms", RETRY.as_millis()),
    ]
}

/// The upstream CCM, built (or taken from its cache) by
/// hack/build-upstream-ccm.sh: seconds once hack/build-testenv.sh has
/// filled the Go build cache, as `make test` does first.
pub(super) fn upstream_binary() -> PathBuf {
    let script = repo().join("hack/build-upstream-ccm.sh");
    let status = Command::new(&script)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(status.success(), "{} failed: {status}", script.display());
    let bin = repo().join("target/upstream-ccm/bin/upstream-ccm");
    assert!(bin.exists(), "{} missing after the build", bin.display());
    bin
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A controller process (upstream's or ours), killed when dropped.
pub(super) struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    pub(super) fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        dir: &Path,
    ) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = spawn_tied(cmd).unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Proc {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub(super) fn log(&self) -> String {
        read_log(&self.log)
    }

    pub(super) fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM {}", self.name);
    }

    /// Waits for the process to end: its status and when it was seen gone.
    pub(super) async fn exited(&mut self) -> (std::process::ExitStatus, Timestamp) {
        let name = self.name.clone();
        let child = &mut self.child;
        let log = &self.log;
        eventually_within(
            DEADLINE,
            Duration::from_millis(10),
            &format!("{name} to exit"),
            || {
                let exited = child.try_wait().unwrap();
                async move {
                    exited
                        .map(|s| (s, Timestamp::now()))
                        .ok_or_else(|| format!("still running; log:\n{}", read_log(log)))
                }
            },
        )
        .await
    }

    /// Waits until the log contains `line`; when it was seen.
    pub(super) async fn logged(&self, line: &str) -> Instant {
        eventually(&format!("{} to log {line:?}", self.name), || async {
            let log = self.log();
            if log.contains(line) {
                Ok(Instant::now())
            } else {
                Err(format!("log:\n{log}"))
            }
        })
        .await
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
