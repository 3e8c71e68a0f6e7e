//! The ccm-testenv binary itself: kubectl against it, clean shutdown (also
//! with watches open), restarts on a kept data directory, and clear errors on
//! bad input. Each test starts its own instance where it must observe start
//! or stop.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ccm_testsupport::{ReadyLine, TestEnv, spawn_testenv, terminate, testenv_binary, unique_name};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use kube::api::{ObjectMeta, PostParams, WatchParams};
use kube::{Api, Client};

fn kubectl() -> PathBuf {
    testenv_binary().unwrap().parent().unwrap().join("kubectl")
}

fn run(bin: &Path, args: &[&str]) -> Output {
    let out = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    eprintln!(
        "$ {} {}\n{}{}",
        bin.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn temp_path(prefix: &str) -> PathBuf {
    std::env::temp_dir().join(unique_name(prefix))
}

/// The single "ccm-testenv: error: …" line of a failed start.
fn error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("ccm-testenv: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "exactly one error line in:\n{stderr}");
    errors[0].to_owned()
}

#[test]
fn kubectl_reports_server_1_36_and_denies_unprivileged_service_account() {
    let control_plane = crate::common::ControlPlane::shared_blocking();
    let env = control_plane.env();
    let kc = env.kubeconfig().to_str().unwrap();

    let out = run(&kubectl(), &["--kubeconfig", kc, "version", "-o", "json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let server = v["serverVersion"]["gitVersion"].as_str().unwrap();
    assert!(server.starts_with("v1.36."), "server version {server}");
    let client = v["clientVersion"]["gitVersion"].as_str().unwrap();
    assert_eq!(client, server, "kubectl is built from the same module");

    let out = run(
        &kubectl(),
        &[
            "--kubeconfig",
            kc,
            "auth",
            "can-i",
            "delete",
            "nodes",
            "--as=system:serviceaccount:default:nobody",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    assert!(!out.status.success(), "can-i exits non-zero on 'no'");

    // The admin may.
    let out = run(
        &kubectl(),
        &["--kubeconfig", kc, "auth", "can-i", "delete", "nodes"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");
}

#[test]
fn sigterm_stops_everything_and_removes_state_and_a_second_instance_is_refused() {
    let bin = testenv_binary().unwrap();
    let dir = temp_path("testenv-dir");
    let (mut child, ready) = spawn_testenv(&bin, &["--data-dir", dir.to_str().unwrap()]).unwrap();
    assert_eq!(ready.data_dir, dir);
    assert!(ready.kubeconfig.starts_with(&dir));
    let port: u16 = ready.url.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "apiserver listens"
    );

    // A second instance on the same directory is refused at once.
    let out = run(&bin, &["--data-dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = error_line(&out);
    assert!(
        err.contains("in use by another ccm-testenv") && err.contains(&child.id().to_string()),
        "{err}"
    );
    assert!(
        ready.kubeconfig.exists(),
        "the refused instance touched nothing"
    );

    let status = terminate(&mut child, Duration::from_secs(60)).unwrap();
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    // Gone: no process, no listener, no state.
    let alive = Path::new(&format!("/proc/{}", ready.pid)).exists();
    assert!(!alive, "process {} still exists", ready.pid);
    assert!(
        TcpListener::bind(("127.0.0.1", port)).is_ok(),
        "port {port} is free again"
    );
    assert!(
        !dir.exists(),
        "data dir {} removed: {:?}",
        dir.display(),
        std::fs::read_dir(&dir).map(|d| d.count())
    );
}

#[test]
fn keep_leaves_the_data_directory_for_inspection() {
    let bin = testenv_binary().unwrap();
    let dir = temp_path("testenv-keep");
    let (mut child, ready) =
        spawn_testenv(&bin, &["--data-dir", dir.to_str().unwrap(), "--keep"]).unwrap();
    assert!(
        terminate(&mut child, Duration::from_secs(60))
            .unwrap()
            .success()
    );
    assert!(ready.kubeconfig.exists());
    assert!(dir.join("etcd").is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An admin client of a control plane the test started, from its
/// kubeconfig file.
async fn admin_client(ready: &ReadyLine) -> Client {
    TestEnv::attach(ready)
        .admin_client()
        .await
        .expect("a usable kubeconfig")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_data_dir_restarts_with_the_same_ca_token_port_and_objects() {
    let bin = testenv_binary().unwrap();
    let dir = temp_path("testenv-restart");
    let d = dir.to_str().unwrap().to_owned();
    let keep = ["--data-dir", d.as_str(), "--keep"];
    let (mut child, first) = tokio::task::block_in_place(|| spawn_testenv(&bin, &keep)).unwrap();
    assert!(!first.reused, "a new directory starts fresh");
    let kubeconfig = read(&first.kubeconfig);
    let ca = read(&dir.join("pki/ca.crt"));
    let tokens = read(&dir.join("tokens.csv"));
    let sa_key = read(&dir.join("pki/sa.key"));

    let name = unique_name("kept-node");
    let nodes: Api<Node> = Api::all(admin_client(&first).await);
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = tokio::task::block_in_place(|| terminate(&mut child, Duration::from_secs(60)));
    assert!(status.unwrap().success());

    let started = Instant::now();
    let (mut child, second) = tokio::task::block_in_place(|| spawn_testenv(&bin, &keep)).unwrap();
    eprintln!(
        "restart on the kept data dir: ready after {:?}",
        started.elapsed()
    );
    assert!(second.reused, "the kept directory is reused");
    assert_eq!(
        second.url, first.url,
        "the earlier port, free again, is reused"
    );
    assert_eq!(read(&second.kubeconfig), kubeconfig, "same kubeconfig");
    assert_eq!(read(&dir.join("pki/ca.crt")), ca, "same CA");
    assert_eq!(read(&dir.join("tokens.csv")), tokens, "same token");
    assert_eq!(read(&dir.join("pki/sa.key")), sa_key, "same SA signing key");
    // The first run's kubeconfig (CA and token; the file is unchanged, see
    // above) still works, and etcd kept the Node.
    let nodes: Api<Node> = Api::all(admin_client(&first).await);
    let back = nodes
        .get(&name)
        .await
        .expect("the Node survived the restart");
    assert!(created.metadata.uid.is_some());
    assert_eq!(back.metadata.uid, created.metadata.uid, "the same object");
    let status = tokio::task::block_in_place(|| terminate(&mut child, Duration::from_secs(60)));
    assert!(status.unwrap().success());

    // Without --keep, a run on a reused directory removes the state on exit
    // (the directory itself was there before it, so it stays, empty).
    let no_keep = ["--data-dir", d.as_str()];
    let (mut child, third) = tokio::task::block_in_place(|| spawn_testenv(&bin, &no_keep)).unwrap();
    assert!(third.reused);
    let status = tokio::task::block_in_place(|| terminate(&mut child, Duration::from_secs(60)));
    assert!(status.unwrap().success());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_watches_open_exits_0_within_5_seconds() {
    let bin = testenv_binary().unwrap();
    let dir = temp_path("testenv-watches");
    let (mut child, ready) =
        tokio::task::block_in_place(|| spawn_testenv(&bin, &["--data-dir", dir.to_str().unwrap()]))
            .unwrap();
    let client = admin_client(&ready).await;
    // Each watch is its own connection; `watch` returns once the apiserver
    // has answered its headers, i.e. the watch is being served.
    let wp = WatchParams::default();
    let mut watches = [
        Api::<Node>::all(client.clone())
            .watch(&wp, "0")
            .await
            .unwrap()
            .map(|e| e.is_ok())
            .boxed(),
        Api::<Pod>::all(client.clone())
            .watch(&wp, "0")
            .await
            .unwrap()
            .map(|e| e.is_ok())
            .boxed(),
        Api::<Service>::all(client.clone())
            .watch(&wp, "0")
            .await
            .unwrap()
            .map(|e| e.is_ok())
            .boxed(),
        Api::<ConfigMap>::all(client.clone())
            .watch(&wp, "0")
            .await
            .unwrap()
            .map(|e| e.is_ok())
            .boxed(),
    ];

    let started = Instant::now();
    let status =
        tokio::task::block_in_place(|| terminate(&mut child, Duration::from_secs(5))).unwrap();
    let took = started.elapsed();
    eprintln!(
        "SIGTERM to exit with {} watches open: {took:?}",
        watches.len()
    );
    // terminate() kills the process at the deadline, which is not a success.
    assert!(
        status.success(),
        "exit 0 within 5s of SIGTERM with watches open: {status} after {took:?}"
    );
    assert!(!dir.exists(), "data dir {} removed", dir.display());
    // The watches were ended, not left hanging.
    for (i, w) in watches.iter_mut().enumerate() {
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while w.next().await.is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "watch {i} still open after the exit");
    }
}

#[test]
fn a_partial_earlier_state_is_one_clear_error_and_left_alone() {
    let dir = temp_path("testenv-partial");
    std::fs::create_dir_all(dir.join("pki")).unwrap();
    std::fs::write(dir.join("pki/ca.crt"), b"not a certificate").unwrap();
    let out = run(
        &testenv_binary().unwrap(),
        &["--data-dir", dir.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = error_line(&out);
    assert!(
        err.contains(&format!(
            "data directory {} holds an unusable earlier state",
            dir.display()
        )) && err.contains("apiserver.crt"),
        "{err}"
    );
    assert_eq!(read(&dir.join("pki/ca.crt")), "not a certificate");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn port_in_use_is_one_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = temp_path("testenv-port");
    let out = run(
        &testenv_binary().unwrap(),
        &["--port", &port, "--data-dir", dir.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        error_line(&out),
        format!("ccm-testenv: error: port 127.0.0.1:{port} is already in use")
    );
    assert!(!dir.exists(), "a failed start leaves no directory behind");
}

#[test]
fn unwritable_data_dir_is_one_clear_error() {
    // A path below a regular file can never be created, even by root.
    let file = temp_path("testenv-file");
    std::fs::write(&file, b"").unwrap();
    let dir = file.join("data");
    let out = run(
        &testenv_binary().unwrap(),
        &["--data-dir", dir.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = error_line(&out);
    assert!(
        err.contains(&format!("data directory {}", dir.display())),
        "{err}"
    );
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn a_full_filesystem_is_one_clear_error() {
    // A 4 MiB tmpfs in a user and mount namespace of the test's own (no root
    // needed): far less than etcd's write-ahead log must preallocate. Before,
    // etcd panicked ("failed to create WAL", exit 2) with a stack trace and
    // the cause buried above it; CI lost a run to exactly that.
    let mount = temp_path("testenv-full");
    std::fs::create_dir(&mount).unwrap();
    let dir = mount.join("data");
    let script = format!(
        "mount -t tmpfs -o size=4m tmpfs {m} && exec {bin} --data-dir {d}",
        m = mount.display(),
        bin = testenv_binary().unwrap().display(),
        d = dir.display()
    );
    let out = run(Path::new("unshare"), &["-rm", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(1));
    let err = error_line(&out);
    assert!(
        err.contains(&format!("{} has", dir.display())) && err.contains("MiB free"),
        "{err}"
    );
    // The mount went with the namespace: nothing was written outside it.
    assert_eq!(std::fs::read_dir(&mount).unwrap().count(), 0);
    std::fs::remove_dir(&mount).unwrap();
}

#[test]
fn unknown_flag_is_rejected() {
    let out = run(&testenv_binary().unwrap(), &["--no-such-flag"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-flag"));
}
