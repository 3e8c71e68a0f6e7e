//! The ccm-testenv binary itself: kubectl against it, clean shutdown, and
//! clear errors on bad input. Each test starts its own instance where it must
//! observe start or stop.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use ccm_testsupport::{TestEnv, spawn_testenv, terminate, testenv_binary, unique_name};

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
    let env = TestEnv::get();
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
fn unknown_flag_is_rejected() {
    let out = run(&testenv_binary().unwrap(), &["--no-such-flag"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-flag"));
}
