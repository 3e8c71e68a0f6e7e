//! The controller against the local provider as its own process, with real
//! traffic: a LoadBalancer Service's VIP forwards to exactly the ingress
//! Nodes' nodePort (each "node" is a TCP server on its loopback InternalIP
//! answering its name), relabelling a Node moves new connections without
//! breaking an established one, a provider restart serves the same VIP
//! again, and after the Service and Nodes are gone no listener, address or
//! route is left. Routes are checked in the kernel table of a network
//! namespace the test creates (`unshare -rn`). The real apiserver; the
//! controller as its ServiceAccount with the shipped ClusterRole.
//!
//! Every packet goes to 127.0.0.0/8, or stays inside the test's namespace.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use ccm_provider_sdk::{ClientOptions, ProviderClient};
use ccm_testsupport::{built_binary, unique_name};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const INGRESS_LABEL: &str = "e2e.ccm-rs.io/ingress";
const VIP_RANGE: &str = "127.201.0.0/24";

/// One machine of the inventory: a node name, its loopback InternalIP and
/// whether it is shut down.
#[derive(Clone)]
struct Machine {
    node: String,
    ip: IpAddr,
    shutdown: bool,
}

/// `n` running machines named `<prefix>-<i>` at `<subnet>.<i>`.
fn machines(prefix: &str, subnet: &str, n: u8) -> Vec<Machine> {
    (1..=n)
        .map(|i| Machine {
            node: unique_name(&format!("{prefix}-{i}")),
            ip: format!("{subnet}.{i}").parse().unwrap(),
            shutdown: false,
        })
        .collect()
}

fn inventory(machines: &[&Machine]) -> String {
    let mut out = String::from("instances:\n");
    for m in machines {
        let state = if m.shutdown { "shutdown" } else { "running" };
        out.push_str(&format!(
            "  - node: {}\n    state: {state}\n    zone: local-a\n    region: local\n    addresses:\n      - {{type: InternalIP, address: {}}}\n",
            m.node, m.ip
        ));
    }
    out
}

/// Writes the inventory the way an operator's tooling should: a new file
/// renamed over the old one.
fn write_inventory(path: &Path, machines: &[&Machine]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, inventory(machines)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The local provider process with its inventory and state file in `files`.
fn local_provider(files: &Path, wrapper: &[&str], extra: &[String]) -> Provider {
    let bin = built_binary("ccm-local-provider", "local-provider");
    let mut args = vec![
        format!("--inventory={}", files.join("inventory.yaml").display()),
        format!("--state-file={}", files.join("state.json").display()),
        format!("--vip-range={VIP_RANGE}"),
        format!("--ingress-node-selector={INGRESS_LABEL}=true"),
        "--inventory-poll-interval=100ms".to_owned(),
    ];
    args.extend(extra.iter().cloned());
    Provider::spawn_wrapped(wrapper, &bin, &args, &[])
}

/// Stands in for kube-proxy on a node: accepts on `ip:port` and answers
/// every line it reads with the node's name, until dropped.
struct NodePort {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for NodePort {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn node_port(name: &str, ip: IpAddr, port: u16) -> NodePort {
    let listener = TcpListener::bind(SocketAddr::new(ip, port)).await.unwrap();
    let name = name.to_owned();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let name = name.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(_)) = lines.next_line().await {
                    if write
                        .write_all(format!("{name}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    NodePort { task }
}

/// One request on an open connection: a line out, the answering node's
/// name back.
async fn ask(conn: &mut BufReader<TcpStream>) -> Result<String, String> {
    conn.get_mut()
        .write_all(b"who\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read_line(&mut line))
        .await
        .map_err(|_| "no answer within 5s".to_owned())?
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("connection closed".to_owned());
    }
    Ok(line.trim().to_owned())
}

async fn connect(vip: SocketAddr) -> Result<BufReader<TcpStream>, String> {
    tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(vip))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map(BufReader::new)
        .map_err(|e| e.to_string())
}

/// The nodes answering `n` new connections to `vip`.
async fn who_answers(vip: SocketAddr, n: usize) -> Result<BTreeSet<String>, String> {
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        let mut conn = connect(vip).await?;
        seen.insert(ask(&mut conn).await?);
    }
    Ok(seen)
}

fn names(ms: &[&Machine]) -> BTreeSet<String> {
    ms.iter().map(|m| m.node.clone()).collect()
}

async fn label(h: &Harness, node: &str, ingress: bool) {
    h.nodes()
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {INGRESS_LABEL: ingress.to_string()}}})),
        )
        .await
        .unwrap();
}

async fn ingress_ip(services: &Api<Service>, name: &str, provider: &Provider) -> IpAddr {
    eventually("the Service to get its VIP", || async {
        let s = services.get(name).await.map_err(|e| e.to_string())?;
        s.status
            .and_then(|s| s.load_balancer?.ingress)
            .and_then(|i| i.first()?.ip.clone())
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| format!("no ingress yet; provider log:\n{}", provider.log()))
    })
    .await
}

/// The provider's /metrics, read as the controller's admin port is.
async fn metrics_of(port: u16) -> String {
    admin_get(port, "/metrics").await.unwrap()
}

#[tokio::test]
async fn traffic_through_the_vip_reaches_exactly_the_ingress_nodes_across_relabels_and_restarts() {
    let files = tempfile::tempdir().unwrap();
    let machines = machines("local", "127.0.2", 3);
    let [m1, m2, m3] = [&machines[0], &machines[1], &machines[2]];
    write_inventory(&files.path().join("inventory.yaml"), &[m1, m2, m3]);
    let metrics_port = free_port();
    let extra = [format!("--metrics-listen=127.0.0.1:{metrics_port}")];
    let mut provider = local_provider(files.path(), &[], &extra);
    provider.wait_ready().await;
    let h = Harness::start_against(&provider.endpoint, &["--controllers=*,-route"]).await;

    for m in [m1, m2, m3] {
        h.register_node(&m.node).await;
        label(&h, &m.node, m.node != m3.node).await;
    }
    for m in [m1, m2, m3] {
        h.wait_for(&m.node, "initialised by the local provider", |n| {
            n.is_some_and(|n| {
                !has_taint(n, UNINITIALIZED)
                    && n.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                        == Some(&format!("local://{}", m.node))
            })
        })
        .await
        .unwrap();
    }

    let services: Api<Service> = Api::namespaced(h.admin.clone(), &h.ns);
    let name = unique_name("web");
    services
        .create(&PostParams::default(), &lb_service(&name, 80))
        .await
        .unwrap();
    let vip_ip = ingress_ip(&services, &name, &provider).await;
    assert!(vip_ip.to_string().starts_with("127.201.0."), "{vip_ip}");
    let svc = services.get(&name).await.unwrap();
    let port = svc.spec.unwrap().ports.unwrap()[0].node_port.unwrap() as u16;
    let _backends = [
        node_port(&m1.node, m1.ip, port).await,
        node_port(&m2.node, m2.ip, port).await,
        node_port(&m3.node, m3.ip, port).await,
    ];
    let vip = SocketAddr::new(vip_ip, 80);

    // Exactly the two ingress nodes answer, never the third.
    let seen = who_answers(vip, 12).await.unwrap();
    assert_eq!(seen, names(&[m1, m2]));

    // An established connection survives the backend change.
    let mut established = connect(vip).await.unwrap();
    let first = ask(&mut established).await.unwrap();
    label(&h, &m2.node, false).await;
    label(&h, &m3.node, true).await;
    eventually("new connections to reach nodes 1 and 3 only", || async {
        let seen = who_answers(vip, 12).await?;
        (seen == names(&[m1, m3]))
            .then_some(())
            .ok_or_else(|| format!("answered by {seen:?}"))
    })
    .await;
    assert_eq!(
        ask(&mut established).await.unwrap(),
        first,
        "the established connection keeps its backend"
    );

    // A restart: connections are closed cleanly, and the same VIP serves
    // the same backends again before the controller calls anything.
    let before = metrics_of(metrics_port).await;
    assert!(
        before.contains("local_load_balancers{state=\"running\"} 1"),
        "{before}"
    );
    provider.stop().await;
    let mut buf = String::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), established.read_line(&mut buf))
        .await
        .expect("the established connection is closed, not left hanging");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?} {buf:?}");
    assert!(
        connect(vip).await.is_err(),
        "nothing listens on the VIP while the provider is down"
    );
    provider.start_again();
    eventually("the VIP to serve again after the restart", || async {
        let seen = who_answers(vip, 12).await?;
        (seen == names(&[m1, m3]))
            .then_some(())
            .ok_or_else(|| format!("answered by {seen:?}"))
    })
    .await;
    assert_eq!(
        ingress_ip(&services, &name, &provider).await,
        vip_ip,
        "same VIP"
    );

    // Deleting the Service closes the listener and frees the address.
    delete_service_and_wait(&services, &name).await;
    assert!(connect(vip).await.is_err(), "the VIP no longer answers");
    let client =
        ProviderClient::connect_lazy(&provider.endpoint, ClientOptions::default()).unwrap();
    assert!(
        client
            .list_load_balancers("kubernetes")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        metrics_of(metrics_port)
            .await
            .contains("local_load_balancers{state=\"running\"} 0"),
        "no proxy left running"
    );

    // `state: shutdown` in the inventory taints the (NotReady) Node.
    let m1_down = Machine {
        shutdown: true,
        ..m1.clone()
    };
    write_inventory(&files.path().join("inventory.yaml"), &[&m1_down, m2, m3]);
    h.wait_for(&m1.node, "tainted as shut down", |n| {
        n.is_some_and(|n| has_taint(n, SHUTDOWN))
    })
    .await;

    // Removing the machines deletes the Nodes.
    write_inventory(&files.path().join("inventory.yaml"), &[]);
    for m in [m1, m2, m3] {
        h.wait_for(&m.node, "deleted with its instance", |n| n.is_none())
            .await;
    }
    h.stop().await;
}

/// Kernel table 100 of the network namespace of process `pid`, a route per
/// entry (a table the kernel has not created yet is empty).
fn table_100(pid: u32) -> BTreeSet<String> {
    let out = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-U", "-n", "--preserve-credentials"])
        .args(["ip", "route", "show", "table", "100"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("FIB table does not exist") {
        return BTreeSet::new();
    }
    assert!(
        out.status.success(),
        "nsenter … ip route show table 100: {stderr}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The provider's pid: the wrapper execs into it, so it is the child.
fn netns_pid(p: &Provider) -> u32 {
    p.child.id()
}

#[tokio::test]
async fn routes_land_in_the_kernel_table_of_a_private_network_namespace() {
    let files = tempfile::tempdir().unwrap();
    let machines = machines("route", "127.0.3", 2);
    let [m1, m2] = [&machines[0], &machines[1]];
    write_inventory(&files.path().join("inventory.yaml"), &[m1, m2]);
    // A namespace of our own: the routes never touch the machine's tables.
    let wrapper = [
        "unshare",
        "-rn",
        "sh",
        "-c",
        "ip link set lo up && exec \"$0\" \"$@\"",
    ];
    let provider = local_provider(files.path(), &wrapper, &["--route-table=100".to_owned()]);
    provider.wait_ready().await;
    let pid = netns_pid(&provider);
    assert_eq!(table_100(pid), BTreeSet::new());
    let h = Harness::start_against(&provider.endpoint, &["--route-reconciliation-period=1s"]).await;

    for (i, m) in [m1, m2].into_iter().enumerate() {
        let cidr = format!("10.244.{}.0/24", 101 + i);
        let mut node = kubelet_node(&m.node);
        node.spec = Some(NodeSpec {
            pod_cidr: Some(cidr.clone()),
            pod_cidrs: Some(vec![cidr]),
            ..node.spec.unwrap()
        });
        Api::<Node>::all(h.admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    let want = BTreeSet::from([
        format!("10.244.101.0/24 via {} dev lo proto 204", m1.ip),
        format!("10.244.102.0/24 via {} dev lo proto 204", m2.ip),
    ]);
    eventually("both routes in table 100", || async {
        let got = table_100(pid);
        (got == want)
            .then_some(())
            .ok_or_else(|| format!("table 100: {got:?}; provider log:\n{}", provider.log()))
    })
    .await;

    // Someone flushes the table: ListRoutes leaves the routes out, so the
    // controller creates them again.
    let flushed = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-U", "-n", "--preserve-credentials"])
        .args(["ip", "route", "flush", "table", "100"])
        .status()
        .unwrap();
    assert!(flushed.success());
    assert_eq!(table_100(pid), BTreeSet::new());
    eventually("both routes back in table 100 after a flush", || async {
        let got = table_100(pid);
        (got == want)
            .then_some(())
            .ok_or_else(|| format!("table 100: {got:?}"))
    })
    .await;

    // The machine leaves the inventory: its Node is deleted, then its route.
    write_inventory(&files.path().join("inventory.yaml"), &[m1]);
    h.wait_for(&m2.node, "deleted with its instance", |n| n.is_none())
        .await;
    let want = BTreeSet::from([format!("10.244.101.0/24 via {} dev lo proto 204", m1.ip)]);
    eventually("only node 1's route left", || async {
        let got = table_100(pid);
        (got == want)
            .then_some(())
            .ok_or_else(|| format!("table 100: {got:?}"))
    })
    .await;
    write_inventory(&files.path().join("inventory.yaml"), &[]);
    h.wait_for(&m1.node, "deleted with its instance", |n| n.is_none())
        .await;
    eventually("no route left", || async {
        let got = table_100(pid);
        got.is_empty().then_some(()).ok_or(format!("{got:?}"))
    })
    .await;
    h.stop().await;
}

/// The count of the controller's calls of the Routes RPC `method` that
/// answered OK, from its /metrics (0 before the first).
fn routes_calls(metrics: &str, method: &str) -> u64 {
    let series = format!(
        "ccm_provider_request_duration_seconds_count{{service=\"Routes\",method=\"{method}\",code=\"OK\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Issue 25, finding 1: the local provider advertises
/// CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES but listed its routes without
/// them, so every full reconcile deleted every route (an outage of that
/// Node's pod CIDR) and created it again. Once converged, further full
/// reconciles make no DeleteRoute and no CreateRoute call.
#[tokio::test]
async fn converged_routes_are_left_alone_by_further_full_reconciles() {
    let files = tempfile::tempdir().unwrap();
    let machines = machines("steady", "127.0.4", 3);
    let all: Vec<&Machine> = machines.iter().collect();
    write_inventory(&files.path().join("inventory.yaml"), &all);
    let wrapper = [
        "unshare",
        "-rn",
        "sh",
        "-c",
        "ip link set lo up && exec \"$0\" \"$@\"",
    ];
    let provider = local_provider(files.path(), &wrapper, &["--route-table=100".to_owned()]);
    provider.wait_ready().await;
    let pid = netns_pid(&provider);
    let admin_port = free_port();
    let h = Harness::start_against(
        &provider.endpoint,
        &[
            "--route-reconciliation-period=300ms",
            &format!("--admin-port={admin_port}"),
        ],
    )
    .await;
    let mut want = BTreeSet::new();
    for (i, m) in all.iter().enumerate() {
        let cidr = format!("10.244.{}.0/24", 111 + i);
        want.insert(format!("{cidr} via {} dev lo proto 204", m.ip));
        let mut node = kubelet_node(&m.node);
        node.spec = Some(NodeSpec {
            pod_cidr: Some(cidr.clone()),
            pod_cidrs: Some(vec![cidr]),
            ..node.spec.unwrap()
        });
        Api::<Node>::all(h.admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    eventually("three routes in table 100", || async {
        let got = table_100(pid);
        (got == want)
            .then_some(())
            .ok_or_else(|| format!("table 100: {got:?}; provider log:\n{}", provider.log()))
    })
    .await;
    // Reconciles run one at a time: once two more full reconciles started
    // (ListRoutes), the one in flight when the table was complete is done.
    let lists_after = |at_least: u64| async move {
        eventually(&format!("{at_least} ListRoutes calls"), || async {
            let now = admin_get(admin_port, "/metrics").await?;
            let lists = routes_calls(&now, "ListRoutes");
            (lists >= at_least)
                .then_some(now)
                .ok_or_else(|| format!("ListRoutes calls: {lists}"))
        })
        .await
    };
    let complete = admin_get(admin_port, "/metrics").await.unwrap();
    let converged = lists_after(routes_calls(&complete, "ListRoutes") + 2).await;
    let lists = routes_calls(&converged, "ListRoutes");
    lists_after(lists + 5).await;
    let after = admin_get(admin_port, "/metrics").await.unwrap();
    assert_eq!(
        (
            routes_calls(&after, "DeleteRoute") - routes_calls(&converged, "DeleteRoute"),
            routes_calls(&after, "CreateRoute") - routes_calls(&converged, "CreateRoute"),
        ),
        (0, 0),
        "(DeleteRoute, CreateRoute) calls over {} full reconciles after convergence",
        routes_calls(&after, "ListRoutes") - lists
    );
    assert_eq!(table_100(pid), want);
    h.stop().await;
}
