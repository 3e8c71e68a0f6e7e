//! The processes a scenario runs and hurts: the kube-apiserver (ccm-testenv
//! on a kept data directory, so it can be restarted on the same data), the
//! fake provider and the local provider (each with a state file, so kill -9
//! loses nothing) and the controller, each logging to its own file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ccm_fake_provider::StateDump;
use ccm_testsupport::audit::AuditLog;
use ccm_testsupport::{
    ReadyLine, TestEnv, audit, built_binary, eventually_within, spawn_testenv, testenv_binary,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The controller and fake-provider binaries, built once per test process
/// (by cargo, so they are never stale).
pub struct Binaries {
    pub controller: PathBuf,
    pub provider: PathBuf,
}

pub fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(|| Binaries {
        controller: built_binary("cloud-controller-manager", "cloud-controller-manager"),
        provider: built_binary("ccm-fake-provider", "fake-provider"),
    })
}

/// The local provider's binary, for the scenarios that run it (built once
/// per test process, only by those).
pub fn local_provider_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| built_binary("ccm-local-provider", "local-provider"))
}

/// Sends `sig` (`-STOP`, `-CONT`, …) to `pid` with kill(1).
fn send(sig: &str, pid: u32) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The time of day (UTC) as the processes' logs show it.
pub fn now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = t.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        t.subsec_millis()
    )
}

/// The last `n` lines of a log file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A helper process that can be killed and started again with the same
/// command line; every start appends to the same log.
pub struct Proc {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    pub log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl Proc {
    pub fn new(name: &str, program: &Path, args: Vec<String>, log: PathBuf) -> Proc {
        Proc {
            name: name.to_owned(),
            program: program.to_owned(),
            args,
            env: vec![
                (
                    "RUST_LOG".into(),
                    std::env::var("CHAOS_RUST_LOG").unwrap_or_else(|_| "info".into()),
                ),
                ("NO_COLOR".into(), "1".into()),
            ],
            log,
            child: None,
            starts: 0,
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Proc {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        self.starts += 1;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("opening the log");
        writeln!(
            log,
            "=== chaos {}: start {} of {}",
            now(),
            self.starts,
            self.name
        )
        .unwrap();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = ccm_testsupport::spawn_tied(cmd)
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.program.display()));
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Appends a line to the log, for reading it next to the process's own.
    fn note(&self, what: &str) {
        if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(&self.log) {
            let _ = writeln!(log, "=== chaos {}: {what}", now());
        }
    }

    pub fn signal(&self, sig: &str) {
        assert!(send(sig, self.pid()), "kill {sig} {}", self.name);
        self.note(&format!("kill {sig}"));
    }

    /// kill -9 (SIGKILL), and reaps it.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
        self.note("killed with -9");
    }

    /// SIGTERM, and waits (bounded) for the exit.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = ccm_testsupport::terminate(&mut child, Duration::from_secs(10));
        }
    }

    /// Whether it is still running; an unexpected exit says so with the log.
    pub fn assert_running(&mut self) {
        let child = self.child.as_mut().expect("started");
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{} exited unexpectedly ({status}); log {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 40)
            );
        }
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log, 40)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = send("-CONT", child.id());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A kube-apiserver of its own (ccm-testenv), kept on `dir` so it can be
/// restarted with the same CA, tokens, port and objects.
pub struct Apiserver {
    child: Option<Child>,
    pub ready: ReadyLine,
    dir: PathBuf,
    /// Every write, kept across restarts (beside the data directory).
    pub audit: AuditLog,
}

async fn spawn_apiserver(dir: &Path) -> (Child, ReadyLine, AuditLog) {
    let (flags, audit) = audit::apiserver_flags(&dir.with_extension("audit")).unwrap();
    let dir = dir.to_str().expect("a UTF-8 path").to_owned();
    let (child, ready) = tokio::task::spawn_blocking(move || {
        let mut args = vec!["--data-dir", &dir, "--keep", "--"];
        args.extend(flags.iter().map(String::as_str));
        spawn_testenv(&testenv_binary()?, &args)
    })
    .await
    .unwrap()
    .expect("starting ccm-testenv");
    (child, ready, audit)
}

impl Apiserver {
    pub async fn start(dir: PathBuf) -> Apiserver {
        let (child, ready, audit) = spawn_apiserver(&dir).await;
        Apiserver {
            child: Some(child),
            ready,
            dir,
            audit,
        }
    }

    pub fn env(&self) -> TestEnv {
        TestEnv::attach(&self.ready).with_audit_log(self.audit.clone())
    }

    /// SIGTERM, then a new apiserver on the same data; how long it was
    /// away.
    pub async fn restart(&mut self) -> Duration {
        let started = Instant::now();
        let mut child = self.child.take().expect("running");
        let status = tokio::task::spawn_blocking(move || {
            ccm_testsupport::terminate(&mut child, Duration::from_secs(60))
        })
        .await
        .unwrap()
        .unwrap();
        assert!(status.success(), "ccm-testenv stopped cleanly: {status}");
        let (child, ready, _) = spawn_apiserver(&self.dir).await;
        assert!(ready.reused, "the data directory is reused");
        assert_eq!(ready.url, self.ready.url, "on the same port");
        self.child = Some(child);
        self.ready = ready;
        started.elapsed()
    }
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = ccm_testsupport::terminate(&mut child, Duration::from_secs(30));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(self.dir.with_extension("audit"));
    }
}

/// One HTTP/1.1 request over a Unix socket: status and JSON body (`Null`
/// when empty). Fails after 10 s: the admin API answers at once unless the
/// process is stopped, which no caller does on purpose.
pub async fn http(socket: &Path, method: &str, uri: &str, body: Option<Value>) -> (u16, Value) {
    let call = async {
        let mut stream = UnixStream::connect(socket).await?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {uri} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        std::io::Result::Ok(String::from_utf8_lossy(&raw).into_owned())
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap_or_else(|_| panic!("{method} {uri} on {}: no answer", socket.display()))
        .unwrap_or_else(|e| panic!("{method} {uri} on {}: {e}", socket.display()));
    let (head, body) = raw.split_once("\r\n\r\n").expect("a full response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()))
    };
    (status, value)
}

/// The fake provider as a process, its cloud in a state file.
pub struct Provider {
    pub proc: Proc,
    pub endpoint: String,
    socket: PathBuf,
    admin: PathBuf,
    /// Admin calls (faults) made again after every start: faults are not
    /// kept in the state file.
    faults: Vec<(String, String, Value)>,
}

impl Provider {
    /// Starts it with its sockets in `sockets` and its state file and log
    /// in `dir`; `extra` are more flags.
    pub async fn start(sockets: &Path, dir: &Path, extra: &[&str]) -> Provider {
        let socket = sockets.join("provider.sock");
        let endpoint = format!("unix://{}", socket.display());
        let mut args = vec![
            format!("--endpoint={endpoint}"),
            format!("--state-file={}", dir.join("cloud.json").display()),
            // Room for the long form's load balancers (fake addresses,
            // never routed: RFC 2544's benchmarking range).
            "--lb-ip-pool=198.18.0.0/16".to_owned(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let proc = Proc::new(
            "fake-provider",
            &binaries().provider,
            args,
            dir.join("fake-provider.log"),
        );
        let mut p = Provider {
            proc,
            endpoint,
            admin: sockets.join("provider.sock.admin"),
            socket,
            faults: Vec::new(),
        };
        p.proc.start();
        p.wait_serving().await;
        p
    }

    /// Waits until both sockets accept connections (after a kill -9 the
    /// old socket files are still there, refusing).
    async fn wait_serving(&self) {
        eventually_within(
            Duration::from_secs(30),
            Duration::from_millis(20),
            "the fake provider to serve",
            || async {
                let provider = UnixStream::connect(&self.socket).await;
                let admin = UnixStream::connect(&self.admin).await;
                match (provider, admin) {
                    (Ok(_), Ok(_)) => Ok(()),
                    (p, a) => Err(format!(
                        "provider {:?}, admin {:?}; log:\n{}",
                        p.err(),
                        a.err(),
                        self.proc.log_tail()
                    )),
                }
            },
        )
        .await;
        for (method, path, body) in &self.faults {
            self.fault(method, path, body.clone()).await;
        }
    }

    /// An admin API call.
    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        http(&self.admin, method, path, body).await
    }

    /// A fault (`PUT /faults/latency`, `POST /faults/errors`) applied now
    /// only: gone after a restart. Fails unless the fake accepts it.
    pub async fn fault(&self, method: &str, path: &str, body: Value) {
        let (code, answer) = self.admin(method, path, Some(body)).await;
        assert!(code < 300, "{method} {path}: {code} {answer}");
    }

    /// A fault applied now and again after every restart.
    pub async fn keep_fault(&mut self, method: &str, path: &str, body: Value) {
        self.fault(method, path, body.clone()).await;
        self.faults.push((method.to_owned(), path.to_owned(), body));
    }

    /// Clears every fault, now and for later restarts.
    pub async fn clear_faults(&mut self) {
        self.faults.clear();
        let (code, _) = self.admin("DELETE", "/faults", None).await;
        assert_eq!(code, 204);
    }

    /// The cloud as the fake sees it.
    pub async fn state(&self) -> StateDump {
        let (code, body) = self.admin("GET", "/state", None).await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_value(body).expect("a state dump")
    }

    pub fn kill9(&mut self) {
        if std::env::var_os("CHAOS_CALLS").is_some() {
            // Diagnostics: the calls this instance answered, lost otherwise.
            let calls = block_on(self.admin("GET", "/calls", None));
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.proc.log.with_extension("calls"))
                .unwrap();
            let _ = writeln!(f, "{}", calls.1);
        }
        self.proc.kill9();
    }

    /// Starts it again on the same state file and sockets.
    pub async fn restart(&mut self) {
        self.proc.start();
        self.wait_serving().await;
    }

    pub fn stop(&self) {
        self.proc.signal("-STOP");
    }

    pub fn cont(&self) {
        self.proc.signal("-CONT");
    }
}

/// The local provider as a process: machines from an inventory file, load
/// balancers as proxies on loopback addresses, kept in a state file so
/// kill -9 loses nothing.
pub struct LocalProvider {
    pub proc: Proc,
    pub endpoint: String,
    socket: PathBuf,
}

impl LocalProvider {
    /// Starts it on `sockets/<name>.sock`, its state file and log in
    /// `dir`; `extra` are more flags.
    pub async fn start(
        name: &str,
        sockets: &Path,
        dir: &Path,
        inventory: &Path,
        vip_range: &str,
        extra: &[&str],
    ) -> LocalProvider {
        let socket = sockets.join(format!("{name}.sock"));
        let endpoint = format!("unix://{}", socket.display());
        let mut args = vec![
            format!("--endpoint={endpoint}"),
            format!("--inventory={}", inventory.display()),
            format!(
                "--state-file={}",
                dir.join(format!("{name}.json")).display()
            ),
            format!("--vip-range={vip_range}"),
            "--inventory-poll-interval=200ms".to_owned(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let proc = Proc::new(
            name,
            local_provider_binary(),
            args,
            dir.join(format!("{name}.log")),
        );
        let mut p = LocalProvider {
            proc,
            endpoint,
            socket,
        };
        p.proc.start();
        p.wait_serving().await;
        p
    }

    /// Waits until its socket accepts connections (after a kill -9 the old
    /// socket file is still there, refusing).
    async fn wait_serving(&self) {
        eventually_within(
            Duration::from_secs(30),
            Duration::from_millis(20),
            "the local provider to serve",
            || async {
                UnixStream::connect(&self.socket)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("{e}; log:\n{}", self.proc.log_tail()))
            },
        )
        .await;
    }

    pub fn kill9(&mut self) {
        self.proc.kill9();
    }

    /// Starts it again on the same state file and socket.
    pub async fn restart(&mut self) {
        self.proc.start();
        self.wait_serving().await;
    }
}

/// The controller as a process.
pub struct Controller {
    pub proc: Proc,
}

impl Controller {
    /// A controller of cluster `cluster_name`: kubeconfig, provider and
    /// extra flags; no leader election, no admin port.
    pub fn start(
        name: &str,
        kubeconfig: &Path,
        endpoint: &str,
        cluster_name: &str,
        log: PathBuf,
        extra: &[&str],
    ) -> Controller {
        let provider = format!("--provider-endpoint={endpoint}");
        Self::start_with_providers(name, kubeconfig, &[&provider], cluster_name, log, extra)
    }

    /// As [`Controller::start`], its providers given as flags
    /// (`--provider-endpoint=…`, or hybrid mode's `--provider=NAME=…`
    /// repeated and the flags that go with them).
    pub fn start_with_providers(
        name: &str,
        kubeconfig: &Path,
        providers: &[&str],
        cluster_name: &str,
        log: PathBuf,
        extra: &[&str],
    ) -> Controller {
        let mut args = vec![format!("--kubeconfig={}", kubeconfig.display())];
        args.extend(providers.iter().map(|s| s.to_string()));
        args.extend([
            format!("--cluster-name={cluster_name}"),
            "--controllers=cloud-node,cloud-node-lifecycle,service".to_owned(),
            "--leader-elect=false".to_owned(),
            "--secure-port=0".to_owned(),
            "--node-monitor-period=500ms".to_owned(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut proc = Proc::new(name, &binaries().controller, args, log);
        proc.start();
        Controller { proc }
    }

    pub fn kill9(&mut self) {
        self.proc.kill9();
    }

    pub fn restart(&mut self) {
        self.proc.start();
    }

    pub fn assert_running(&mut self) {
        self.proc.assert_running();
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}
