//! The `provider-conformance` binary: one line per case, the summary line
//! last, exit code non-zero on any failure.

mod common;

use std::process::Command;

use ccm_fake_provider::{FakeCloud, FakeConfig, InstanceSpec};

fn cli(args: &[&str]) -> (i32, Vec<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_provider-conformance"))
        .args(args)
        .output()
        .expect("run provider-conformance");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    (
        out.status.code().unwrap_or(-1),
        stdout.lines().map(str::to_owned).collect(),
    )
}

fn is_summary(line: &str) -> bool {
    let parts: Vec<&str> = line.split(", ").collect();
    parts.len() == 3
        && ["passed", "failed", "skipped"]
            .iter()
            .zip(&parts)
            .all(|(word, part)| {
                part.strip_suffix(word)
                    .and_then(|n| n.strip_suffix(' '))
                    .is_some_and(|n| n.parse::<usize>().is_ok())
            })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_against_the_fake_and_prints_the_summary_last() {
    let fake = FakeCloud::new(FakeConfig {
        auto_create_instances: false,
        instances: vec![InstanceSpec::named("conformance-node-1")],
        ..Default::default()
    })
    .expect("fake cloud");
    let served = common::serve_with(move |endpoint, rx| async move {
        fake.serve(endpoint, async {
            let _ = rx.await;
        })
        .await
        .expect("serve");
    })
    .await;
    let endpoint = served.endpoint.clone();
    let (code, lines) = tokio::task::spawn_blocking(move || {
        cli(&[
            "--endpoint",
            &endpoint,
            "--focus",
            "instances/",
            "--focus",
            "identity/",
            "--skip",
            "unadvertised",
            "--missing-provider-id",
            "fake://i-0123456789abcdef0",
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{lines:#?}");
    let (last, cases) = lines.split_last().expect("output");
    assert_eq!(last, "19 passed, 0 failed, 0 skipped", "{lines:#?}");
    assert!(is_summary(last));
    assert_eq!(cases.len(), 19);
    assert!(cases.iter().all(|l| l.starts_with("PASS ")), "{lines:#?}");
    assert!(cases.contains(&"PASS instances/exists-missing-node".to_owned()));
    served.stop().await;
}

#[test]
fn fails_with_a_non_zero_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/missing.sock", dir.path().display());
    let (code, lines) = cli(&["--endpoint", &endpoint, "--focus", "identity/probe"]);
    assert_ne!(code, 0);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with("FAIL identity/probe-state-specified: handshake failed"),
        "{lines:#?}"
    );
    assert_eq!(lines[1], "0 passed, 1 failed, 0 skipped");
}

#[test]
fn lists_cases() {
    let (code, lines) = cli(&["--list", "--focus", "routes/"]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 8, "{lines:#?}");
    assert_eq!(lines[0], "routes/create-idempotent [CAPABILITY_ROUTES]");
    assert_eq!(
        lines[7],
        "routes/update-in-place [CAPABILITY_ROUTES, CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES] (since 1.1.0)"
    );
}
