//! `FakeConfig::state_file` / `--state-file`: the cloud survives the fake,
//! in-process and as a binary killed with SIGKILL.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ccm_fake_provider::{FakeCloud, FakeConfig, InstanceSpec, LoadBalancer};
use ccm_provider_sdk::proto::{LoadBalancerStatus, Route};
use ccm_provider_sdk::{
    ClientOptions, Existence, LbOutcome, ProviderClient, ProviderError, ShutdownState,
};
use common::{node, service, start, wait_for};

fn route(cidr: &str, target: &str) -> Route {
    Route {
        target_node: target.into(),
        destination_cidr: cidr.into(),
        ..Default::default()
    }
}

fn ip(status: &LbOutcome<LoadBalancerStatus>) -> String {
    match status {
        LbOutcome::Done(s) => s.ingress[0].ip.clone(),
        o => panic!("{o:?}"),
    }
}

fn kept(path: &Path, instances: Vec<InstanceSpec>) -> FakeConfig {
    FakeConfig {
        state_file: Some(path.to_owned()),
        instances,
        ..Default::default()
    }
}

#[tokio::test]
async fn the_cloud_survives_a_restart_on_the_same_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.json");
    let declared = InstanceSpec {
        id: Some("i-declared".into()),
        zone: Some("zone-x".into()),
        ..InstanceSpec::named("declared")
    };
    let r = start(kept(&path, vec![declared])).await;
    let c = &r.client;

    // Instances: auto-created by lookups, one shut down, one removed.
    let auto1 = c.instance_metadata(node("auto-1")).await.unwrap();
    c.instance_metadata(node("auto-2")).await.unwrap();
    r.fake.shutdown_instance("declared").unwrap();
    assert!(r.fake.remove_instance("auto-2"));

    // Load balancers: two kept, one created and deleted again (its address
    // is free again), one with backends changed.
    let a = c
        .ensure_load_balancer("k", service("a"), vec![node("auto-1")])
        .await
        .unwrap();
    let b = c
        .ensure_load_balancer("other", service("b"), vec![node("declared")])
        .await
        .unwrap();
    let gone = c
        .ensure_load_balancer("k", service("gone"), vec![])
        .await
        .unwrap();
    c.ensure_load_balancer_deleted("k", service("gone"))
        .await
        .unwrap();
    c.update_load_balancer("k", service("a"), vec![node("auto-1"), node("declared")])
        .await
        .unwrap();
    assert_eq!(
        [ip(&a.outcome), ip(&b.outcome), ip(&gone.outcome)],
        ["192.0.2.2", "192.0.2.3", "192.0.2.4"]
    );

    // Routes, one of them to the removed instance (a blackhole).
    c.create_route("k", "uid-1", route("10.244.1.0/24", "auto-1"))
        .await
        .unwrap();
    c.create_route("k", "uid-d", route("10.244.2.0/24", "declared"))
        .await
        .unwrap();
    c.delete_route("k", route("10.244.2.0/24", "declared"))
        .await
        .unwrap();
    c.create_route("k", "uid-d", route("10.244.3.0/24", "declared"))
        .await
        .unwrap();
    let lbs_before = c.list_load_balancers("k").await.unwrap();
    let routes_before = c.list_routes("k").await.unwrap();
    let before = r.fake.dump();
    assert_eq!(before.load_balancers.len(), 2);
    r.stop().await;

    // A new fake on the same file, declaring other instances: the file wins.
    let r = start(kept(&path, vec![InstanceSpec::named("ignored")])).await;
    let c = &r.client;
    assert_eq!(r.fake.dump(), before, "the whole cloud is back");
    assert_eq!(c.list_load_balancers("k").await.unwrap(), lbs_before);
    assert_eq!(c.list_routes("k").await.unwrap(), routes_before);
    let lb: &LoadBalancer = &before.load_balancers[0];
    assert_eq!(
        (lb.service_namespace.as_str(), lb.service_name.as_str()),
        ("default", "svc-a")
    );
    assert_eq!(lb.backends, ["auto-1", "declared"]);
    assert_eq!(
        c.get_load_balancer("other", service("b"))
            .await
            .unwrap()
            .map(|s| s.ingress[0].ip.clone()),
        Some("192.0.2.3".to_owned())
    );
    // Same instances, same state.
    assert_eq!(c.instance_metadata(node("auto-1")).await.unwrap(), auto1);
    assert_eq!(
        c.instance_shutdown(node("declared")).await.unwrap(),
        ShutdownState::ShutDown
    );
    assert_eq!(
        c.instance_exists(node("auto-2")).await.unwrap(),
        Existence::NotExists,
        "a removed instance stays removed"
    );
    assert_eq!(
        c.instance_exists(node("ignored")).await.unwrap(),
        Existence::Exists
    );
    // ...auto-created just now, with the next address, not a reused one.
    let addresses: Vec<String> = r
        .fake
        .instances()
        .iter()
        .map(|i| i.addresses[0].address.clone())
        .collect();
    let mut unique = addresses.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), addresses.len(), "{addresses:?}");
    // The freed address is allocated again; the kept ones are not.
    let next = c
        .ensure_load_balancer("k", service("new"), vec![])
        .await
        .unwrap();
    assert_eq!(ip(&next.outcome), "192.0.2.4");
    // Idempotent as before: the same input does not rewrite the LB.
    c.ensure_load_balancer("k", service("a"), vec![node("declared"), node("auto-1")])
        .await
        .unwrap();
    assert_eq!(r.fake.dump().load_balancers[0].generation, lb.generation);
    r.stop().await;

    // And the changes made by the second fake are kept for a third.
    let third = FakeCloud::new(kept(&path, vec![])).unwrap();
    assert_eq!(third.dump().load_balancers.len(), 3);
    assert!(third.instances().iter().any(|i| i.name == "ignored"));
}

#[tokio::test]
async fn a_corrupt_state_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.json");
    // Cut short mid-write (which the atomic rename prevents, but a person
    // editing the file may not).
    let fake = FakeCloud::new(kept(&path, vec![InstanceSpec::named("n1")])).unwrap();
    drop(fake);
    let full = std::fs::read(&path).unwrap();
    std::fs::write(&path, &full[..full.len() / 2]).unwrap();
    let err = FakeCloud::new(kept(&path, vec![])).err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("state file {}: not JSON", path.display())),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        &full[..full.len() / 2],
        "the bad file is left as it was"
    );

    // Valid JSON, but not a cloud this fake could have written.
    let extra = String::from_utf8(full).unwrap().replace(
        "\"load_balancers\": []",
        "\"load_balancers\": [], \"extra\": 1",
    );
    std::fs::write(&path, extra).unwrap();
    let msg = FakeCloud::new(kept(&path, vec![]))
        .err()
        .expect("refused")
        .to_string();
    assert!(msg.contains("unknown field `extra`"), "{msg}");

    // An address outside the pool of this run.
    let r = start(kept(&path.with_extension("ok"), vec![])).await;
    r.client
        .ensure_load_balancer("k", service("a"), vec![])
        .await
        .unwrap();
    r.stop().await;
    let msg = FakeCloud::new(FakeConfig {
        lb_ip_pool: "198.51.100.0/24".into(),
        ..kept(&path.with_extension("ok"), vec![])
    })
    .err()
    .expect("refused")
    .to_string();
    assert!(
        msg.contains("address 192.0.2.2 outside the pool 198.51.100.0/24"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_failed_write_answers_internal_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("cloud.json");
    let r = start(kept(&path, vec![])).await;
    // The directory disappears: the temporary file cannot be created.
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_dir(&sub).unwrap();
    let err = r
        .client
        .ensure_load_balancer("k", service("a"), vec![])
        .await
        .unwrap_err();
    let e: &ProviderError = err.provider_error().expect("a provider error");
    assert_eq!(e.code(), tonic::Code::Internal);
    assert!(e.message().contains("could not keep the change"), "{e}");
    // Once writable again, the next call writes the whole cloud.
    std::fs::create_dir(&sub).unwrap();
    r.client
        .ensure_load_balancer("k", service("a"), vec![])
        .await
        .unwrap();
    let back = FakeCloud::new(kept(&path, vec![])).unwrap();
    assert_eq!(back.dump().load_balancers.len(), 1);
    r.stop().await;
}

/// Spawns the binary on `endpoint` with `--state-file` and waits until it
/// answers.
async fn spawn_binary(endpoint: &str, state: &Path) -> (tokio::process::Child, ProviderClient) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-provider"))
        .args(["--endpoint", endpoint])
        .arg("--state-file")
        .arg(state)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = ProviderClient::connect_lazy(endpoint, ClientOptions::default()).unwrap();
    let probe = client.clone();
    wait_for("the binary's provider socket", || {
        let probe = probe.clone();
        async move { probe.probe().await.is_ok() }
    })
    .await;
    (child, client)
}

#[tokio::test]
async fn the_binary_keeps_its_cloud_across_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("p.sock");
    let endpoint = format!("unix://{}", socket.display());
    let state = dir.path().join("cloud.json");

    let (mut child, client) = spawn_binary(&endpoint, &state).await;
    let answer = client
        .ensure_load_balancer("k", service("a"), vec![node("n1")])
        .await
        .unwrap();
    let first_ip = ip(&answer.outcome);
    client
        .create_route("k", "uid-1", route("10.244.1.0/24", "n1"))
        .await
        .unwrap();
    let listed = client.list_load_balancers("k").await.unwrap();

    // SIGKILL: no chance to save anything on the way out.
    child.start_kill().unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("killed")
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    // The stale socket is left behind by the kill; the server replaces it.
    drop(client);

    let (mut child, client) = spawn_binary(&endpoint, &state).await;
    assert_eq!(client.list_load_balancers("k").await.unwrap(), listed);
    let again = client
        .ensure_load_balancer("k", service("a"), vec![node("n1")])
        .await
        .unwrap();
    assert_eq!(ip(&again.outcome), first_ip, "same load balancer, same IP");
    assert_eq!(client.list_routes("k").await.unwrap().len(), 1);
    assert_eq!(
        client.instance_exists(node("n1")).await.unwrap(),
        Existence::Exists
    );
    // A second service gets the next address: the first is still taken.
    let other = client
        .ensure_load_balancer("k", service("b"), vec![])
        .await
        .unwrap();
    assert_ne!(ip(&other.outcome), first_ip);
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

#[tokio::test]
async fn the_binary_exits_1_on_a_corrupt_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    std::fs::write(
        &state,
        b"{\"format\": \"ccm-fake-provider-state\", \"version\": 7}",
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-provider"))
        .args([
            "--endpoint",
            &format!("unix://{}", dir.path().join("p.sock").display()),
        ])
        .arg("--state-file")
        .arg(&state)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "state file {}: version 7 is not supported",
            state.display()
        )),
        "{stderr}"
    );
    assert!(!dir.path().join("p.sock").exists(), "nothing was served");
}
