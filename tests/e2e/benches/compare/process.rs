//! The processes of each implementation: built, started, measured,
//! stopped.

use super::*;

/// The processes of one implementation, killed however the run ends.
pub(crate) struct Running {
    children: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    pub(crate) fn stop(mut self) {
        for child in &mut self.children {
            let _ = ccm_testsupport::terminate(child, Duration::from_secs(20));
        }
        self.children.clear();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(program: &Path, args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(Stdio::null()).stderr(log);
    ccm_testsupport::spawn_tied(cmd).unwrap_or_else(|e| panic!("{}: {e}", program.display()))
}

/// `PUT path` with a JSON body on a loopback HTTP/1.1 server.
async fn put_json(port: u16, path: &str, body: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let req = format!(
                "PUT {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.unwrap();
            assert!(
                answer.starts_with("HTTP/1.1 2"),
                "PUT {path}: {}",
                answer.lines().next().unwrap_or_default()
            );
            return;
        }
        assert!(Instant::now() < deadline, "fake provider admin API not up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn start(
    imp: Implementation,
    profile: Profile,
    bins: &Binaries,
    kubeconfig: &Path,
    ensure_ms: u64,
) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let logs = repo().join("target/bench-compare");
    std::fs::create_dir_all(&logs).unwrap();
    let mut children = Vec::new();
    if imp == Implementation::Floor {
        let mut args = vec![
            "node-init-floor".to_owned(),
            format!("--kubeconfig={}", kubeconfig.display()),
        ];
        args.extend(profile.flags(imp).iter().map(|s| s.to_string()));
        children.push(spawn(
            &bins.upstream,
            &args,
            &logs.join("node-init-floor.log"),
        ));
        return Running {
            children,
            _dir: dir,
        };
    }
    let mut args: Vec<String> = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        "--controllers=cloud-node,service".into(),
        "--configure-cloud-routes=false".into(),
    ];
    args.extend(profile.flags(imp).iter().map(|s| s.to_string()));
    match imp {
        Implementation::Ours => {
            let endpoint = format!("unix://{}/provider.sock", dir.path().display());
            let admin = free_port();
            children.push(spawn(
                &bins.fake,
                &[
                    format!("--endpoint={endpoint}"),
                    format!("--admin-listen=127.0.0.1:{admin}"),
                    "--lb-ip-pool=10.128.0.0/16".into(),
                ],
                &logs.join("fake-provider.log"),
            ));
            put_json(
                admin,
                "/faults/latency",
                &format!(r#"{{"method": "EnsureLoadBalancer", "ms": {ensure_ms}}}"#),
            )
            .await;
            args.push(format!("--provider-endpoint={endpoint}"));
            args.push("--secure-port=0".into());
            children.push(spawn(&bins.controller, &args, &logs.join("controller.log")));
        }
        Implementation::Upstream => {
            let config = dir.path().join("cloud.json");
            std::fs::write(
                &config,
                format!(
                    r#"{{"latency": {{"EnsureLoadBalancer": "{ensure_ms}ms"}}, "lbIPPool": "10.128.0.0/16"}}"#
                ),
            )
            .unwrap();
            args.extend([
                "--cloud-provider=bench".into(),
                format!("--cloud-config={}", config.display()),
                "--secure-port=0".into(),
            ]);
            children.push(spawn(&bins.upstream, &args, &logs.join("upstream-ccm.log")));
        }
        Implementation::Floor => unreachable!("started above"),
    }
    Running {
        children,
        _dir: dir,
    }
}

fn rss_mib(pid: u32) -> f64 {
    procfs::rss_kib(pid) as f64 / 1024.0
}

/// The summed RSS of `pids` once it stopped moving (3 samples a second
/// apart within 1 MiB), at most 30 s.
pub(crate) async fn settled_rss(pids: &[u32]) -> f64 {
    let total = || pids.iter().map(|p| rss_mib(*p)).sum::<f64>();
    let mut last = total();
    let mut stable = 0;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = total();
        if (now - last).abs() < 1.0 {
            stable += 1;
            if stable >= 3 {
                return now;
            }
        } else {
            stable = 0;
        }
        last = now;
    }
    last
}

pub(crate) fn build(bins: &Binaries) {
    // Without cargo's per-crate variables, which would rebuild ring and
    // everything above it on every run (see ccm_testsupport::cargo).
    let status = ccm_testsupport::cargo()
        .args([
            "build",
            "--locked",
            "--release",
            "-p",
            "cloud-controller-manager",
            "-p",
            "ccm-fake-provider",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "cargo build --release");
    assert!(
        bins.upstream.exists(),
        "{} missing: run hack/build-upstream-ccm.sh (make bench-compare does)",
        bins.upstream.display()
    );
}
