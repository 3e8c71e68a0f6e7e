//! The processes of each implementation: built, started, measured,
//! stopped.

use super::*;

/// The processes of one implementation, killed however the run ends.
pub(crate) struct Running {
    children: Vec<Child>,
    /// Where the cloud calls are counted ([`Setup::count_calls`]).
    counter: Option<CallCounter>,
    _dir: tempfile::TempDir,
}

/// What a run needs beyond its profile's flags.
#[derive(Debug, Clone, Default)]
pub(crate) struct Setup {
    pub(crate) ensure_ms: u64,
    /// `--controllers`; default `cloud-node,service`.
    pub(crate) controllers: Option<&'static str>,
    /// More flags for both controllers (upstream's names).
    pub(crate) flags: Vec<String>,
    /// The cloud's API quota: the fake's `--quota-qps`/`--quota-burst`, the bench cloud's `quota`.
    pub(crate) quota: Option<Quota>,
    /// Count the cloud calls ([`Running::cloud_calls`]).
    pub(crate) count_calls: bool,
}

/// A cloud API quota: a token bucket of `burst` refilling at `qps`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Quota {
    pub(crate) qps: f64,
    pub(crate) burst: u32,
}

/// Calls that reached the cloud, and how many of them the quota refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) calls: u64,
    pub(crate) refused: u64,
}

/// Cloud calls by method.
pub(crate) type Calls = BTreeMap<String, Count>;

/// Not cloud calls: the contract's handshake and health check, and a load
/// balancer's name, which a cloud computes without calling its API.
const NOT_CLOUD_CALLS: [&str; 4] = [
    "Probe",
    "GetProviderInfo",
    "GetProviderCapabilities",
    "GetLoadBalancerName",
];

/// The sum over the methods that are cloud calls.
pub(crate) fn total(calls: &Calls) -> Count {
    calls
        .iter()
        .filter(|(m, _)| !NOT_CLOUD_CALLS.contains(&m.as_str()))
        .fold(Count::default(), |a, (_, c)| Count {
            calls: a.calls + c.calls,
            refused: a.refused + c.refused,
        })
}

/// The cloud calls by method that had any: `M n (k refused)`.
pub(crate) fn by_method(calls: &Calls) -> String {
    let parts: Vec<String> = calls
        .iter()
        .filter(|(m, c)| c.calls > 0 && !NOT_CLOUD_CALLS.contains(&m.as_str()))
        .map(|(m, c)| format!("{m} {} ({} refused)", c.calls, c.refused))
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// `later - earlier`, per method.
pub(crate) fn since(later: &Calls, earlier: &Calls) -> Calls {
    later
        .iter()
        .map(|(m, c)| {
            let e = earlier.get(m).copied().unwrap_or_default();
            (
                m.clone(),
                Count {
                    calls: c.calls - e.calls,
                    refused: c.refused - e.refused,
                },
            )
        })
        .collect()
}

/// Where each side's calls are counted: ours by the controller
/// (`ccm_provider_request_duration_seconds_count` on its plain admin port:
/// every RPC sent to the provider, by method and code; the fake answers
/// one cloud call per RPC, a batch being one), upstream's by the bench
/// cloud itself (`statsListen`, tests/upstream-ccm/quota.go).
enum CallCounter {
    ControllerMetrics(u16),
    BenchCloud(u16),
}

impl Running {
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// The pids, the controller's first (ours starts its provider before
    /// the controller, which connects to it).
    pub(crate) fn pids_controller_first(&self) -> Vec<u32> {
        self.pids().into_iter().rev().collect()
    }

    /// The cloud calls so far, by method (the run must count them).
    pub(crate) async fn cloud_calls(&self) -> Calls {
        match self.counter.as_ref().expect("Setup::count_calls") {
            CallCounter::ControllerMetrics(port) => {
                parse_provider_metrics(&get(*port, "/metrics").await)
            }
            CallCounter::BenchCloud(port) => {
                let by: BTreeMap<String, serde_json::Value> =
                    serde_json::from_str(&get(*port, "/calls").await).expect("GET /calls: JSON");
                by.into_iter()
                    .map(|(m, v)| {
                        let n = |k: &str| v[k].as_u64().unwrap_or(0);
                        (
                            m,
                            Count {
                                calls: n("calls"),
                                refused: n("refused"),
                            },
                        )
                    })
                    .collect()
            }
        }
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

/// Our controller's provider call counts from its metrics: every
/// `ccm_provider_request_duration_seconds_count{...,method="M",code="C"} N`;
/// a call answered RESOURCE_EXHAUSTED (the quota) or UNAVAILABLE (the
/// fake's older rate limit) counts as refused.
pub(crate) fn parse_provider_metrics(text: &str) -> Calls {
    let mut out = Calls::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("ccm_provider_request_duration_seconds_count{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| {
                    kv.strip_prefix(name)?
                        .strip_prefix("=\"")?
                        .strip_suffix('"')
                })
                .unwrap_or_default()
                .to_owned()
        };
        let n = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
        let c = out.entry(label("method")).or_default();
        c.calls += n;
        if matches!(label("code").as_str(), "RESOURCE_EXHAUSTED" | "UNAVAILABLE") {
            c.refused += n;
        }
    }
    out
}

/// The body of `GET path` on a loopback HTTP server (HTTP/1.0: no chunks).
async fn get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("GET {path} on port {port}: {e}"));
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
        "GET {path}: {}",
        answer.lines().next().unwrap_or_default()
    );
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// Whether the fake provider has the quota model (`--quota-qps`,
/// `--quota-burst`); without it a quota is the admin API's rate limit
/// (bursts of one second's calls, answered UNAVAILABLE).
fn fake_has_quota_flags(fake: &Path) -> bool {
    let out = Command::new(fake).arg("--help").output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("--quota-qps")
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
    let setup = Setup {
        ensure_ms,
        ..Setup::default()
    };
    start_with(imp, profile, bins, kubeconfig, &setup).await
}

pub(crate) async fn start_with(
    imp: Implementation,
    profile: Profile,
    bins: &Binaries,
    kubeconfig: &Path,
    setup: &Setup,
) -> Running {
    let ensure_ms = setup.ensure_ms;
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
            counter: None,
            _dir: dir,
        };
    }
    let mut args: Vec<String> = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        format!(
            "--controllers={}",
            setup.controllers.unwrap_or("cloud-node,service")
        ),
        "--configure-cloud-routes=false".into(),
    ];
    args.extend(profile.flags(imp).iter().map(|s| s.to_string()));
    args.extend(setup.flags.iter().cloned());
    let mut counter = None;
    match imp {
        Implementation::Ours => {
            let endpoint = format!("unix://{}/provider.sock", dir.path().display());
            let admin = free_port();
            let mut fake_args = vec![
                format!("--endpoint={endpoint}"),
                format!("--admin-listen=127.0.0.1:{admin}"),
                "--lb-ip-pool=10.128.0.0/16".into(),
            ];
            let quota_by_flags = setup.quota.is_some() && fake_has_quota_flags(&bins.fake);
            if let (Some(q), true) = (setup.quota, quota_by_flags) {
                fake_args.push(format!("--quota-qps={}", q.qps));
                fake_args.push(format!("--quota-burst={}", q.burst));
            }
            children.push(spawn(
                &bins.fake,
                &fake_args,
                &logs.join("fake-provider.log"),
            ));
            put_json(
                admin,
                "/faults/latency",
                &format!(r#"{{"method": "EnsureLoadBalancer", "ms": {ensure_ms}}}"#),
            )
            .await;
            if let (Some(q), false) = (setup.quota, quota_by_flags) {
                let per_second = q.qps.round().max(1.0) as u32;
                eprintln!(
                    "  fake provider without --quota-qps: the admin API's rate limit of {per_second}/s instead"
                );
                put_json(
                    admin,
                    "/faults/rate-limit",
                    &format!(r#"{{"max_per_second": {per_second}}}"#),
                )
                .await;
            }
            args.push(format!("--provider-endpoint={endpoint}"));
            args.push("--secure-port=0".into());
            if setup.count_calls {
                let port = free_port();
                args.push("--bind-address=127.0.0.1".into());
                args.push(format!("--admin-port={port}"));
                counter = Some(CallCounter::ControllerMetrics(port));
            }
            children.push(spawn(&bins.controller, &args, &logs.join("controller.log")));
        }
        Implementation::Upstream => {
            let config = dir.path().join("cloud.json");
            let mut cloud = serde_json::json!({
                "latency": {"EnsureLoadBalancer": format!("{ensure_ms}ms")},
                "lbIPPool": "10.128.0.0/16",
            });
            if let Some(q) = setup.quota {
                cloud["quota"] = serde_json::json!({"qps": q.qps, "burst": q.burst});
            }
            if setup.count_calls {
                let port = free_port();
                cloud["statsListen"] = format!("127.0.0.1:{port}").into();
                counter = Some(CallCounter::BenchCloud(port));
            }
            std::fs::write(&config, cloud.to_string()).unwrap();
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
        counter,
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
