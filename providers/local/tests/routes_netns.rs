//! `KernelRoutes` against a real kernel, in throwaway network namespaces.
//!
//! Writing routes needs CAP_NET_ADMIN, and a test must never touch the
//! host's tables even when it has it. So each test re-executes this binary,
//! filtered to itself, under `unshare -rn` (a user namespace in which we are
//! root, owning a fresh network namespace with only `lo`). unshare(2) cannot
//! be called from the multi-threaded test harness itself, hence the re-exec.
//! The child knows it is the child by `CCM_LOCAL_IN_NETNS`.

use std::net::IpAddr;
use std::process::Command;

use ccm_local_provider::netlink::{KernelRoute, KernelRoutes, ROUTE_PROTOCOL, RouteError};

const IN_NETNS: &str = "CCM_LOCAL_IN_NETNS";

/// Runs `test` (this binary's test of that name) again as the last command
/// of `wrappers`, and fails with the child's output unless it passed.
fn rerun_inside(wrappers: &[&str], test: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(wrappers[0]);
    command
        .args(&wrappers[1..])
        .arg(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(IN_NETNS, "1");
    let output = command.output().unwrap_or_else(|error| {
        panic!(
            "cannot run `{}`: {error}; these tests need util-linux's unshare and unprivileged user namespaces",
            wrappers.join(" ")
        )
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`{} {} --exact {test}` failed ({}).\n\
         If unshare itself failed, this machine lacks unprivileged user namespaces \
         (see sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces), \
         which these tests require.\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        wrappers.join(" "),
        exe.display(),
        output.status,
    );
    // libtest exits 0 when the filter matched nothing: make sure it ran.
    assert!(
        stdout.contains("1 passed"),
        "the child did not run {test}:\n{stdout}\n{stderr}"
    );
}

/// Refuses to go on unless this process is in a network namespace of its
/// own: the tests below add links and routes, which must not land on a
/// host that happens to run them with the variable set and as root.
fn assert_private_netns() {
    let devices = std::fs::read_to_string("/proc/self/net/dev").expect("read /proc/self/net/dev");
    let names: Vec<&str> = devices
        .lines()
        .skip(2)
        .filter_map(|line| line.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(
        names,
        ["lo"],
        "{IN_NETNS} is set but this is not a fresh network namespace; refusing to change routes"
    );
}

/// Runs `ip args…` and returns its stdout, failing on a non-zero exit.
fn ip(args: &str) -> String {
    let output = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .unwrap_or_else(|error| panic!("cannot run `ip {args}` (iproute2 is needed): {error}"));
    assert!(
        output.status.success(),
        "`ip {args}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn addr(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn route(cidr: &str, gateway: Option<&str>) -> KernelRoute {
    let (destination, prefix_len) = cidr.split_once('/').unwrap();
    KernelRoute {
        destination: addr(destination),
        prefix_len: prefix_len.parse().unwrap(),
        gateway: gateway.map(addr),
    }
}

/// The lines of `ip [-6] route show table <table>` that mention `needle`.
fn kernel_lines(family: &str, table: u32, needle: &str) -> Vec<String> {
    ip(&format!("{family} route show table {table}"))
        .lines()
        .filter(|line| line.contains(needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn kernel_routes_in_a_private_netns() {
    if std::env::var_os(IN_NETNS).is_none() {
        rerun_inside(&["unshare", "-rn"], "kernel_routes_in_a_private_netns");
        return;
    }
    assert_private_netns();
    ip("link set lo up");
    // IPv4 gateways on 127.0.0.0/8 work through lo, but the kernel refuses
    // an IPv6 route whose next hop is on lo ("Egress device can not be
    // loopback device"), and dummy links need a module: an IPv6 gateway
    // lives on a veth pair instead.
    ip("link add ccm0 type veth peer name ccm1");
    ip("link set ccm0 up");
    ip("link set ccm1 up");
    ip("-6 addr add fd00:1::1/64 dev ccm0 nodad");
    runtime().block_on(in_netns());
}

async fn in_netns() {
    let routes = KernelRoutes::connect(100).unwrap();
    assert_eq!(routes.table(), 100);
    // Table 100 does not exist yet: that is an empty table, not an error.
    assert_eq!(routes.list().await.unwrap(), []);

    routes
        .replace("10.244.1.0/24", addr("127.0.1.1"))
        .await
        .unwrap();
    routes
        .replace("10.244.2.0/24", addr("127.0.1.2"))
        .await
        .unwrap();
    routes
        .replace("fd00:10:244:1::/64", addr("fd00:1::2"))
        .await
        .unwrap();
    let expected = vec![
        route("10.244.1.0/24", Some("127.0.1.1")),
        route("10.244.2.0/24", Some("127.0.1.2")),
        route("fd00:10:244:1::/64", Some("fd00:1::2")),
    ];
    assert_eq!(routes.list().await.unwrap(), expected);
    assert_eq!(
        routes.list().await.unwrap()[0].destination_cidr(),
        "10.244.1.0/24"
    );

    // The kernel's own view: unicast routes with our protocol number.
    let proto = format!("proto {ROUTE_PROTOCOL}");
    let v4 = ip("route show table 100");
    assert!(
        v4.contains(&format!("10.244.1.0/24 via 127.0.1.1 dev lo {proto}")),
        "{v4}"
    );
    assert!(
        v4.contains(&format!("10.244.2.0/24 via 127.0.1.2 dev lo {proto}")),
        "{v4}"
    );
    assert_eq!(v4.lines().count(), 2, "{v4}");
    let v6 = ip("-6 route show table 100");
    assert!(
        v6.contains(&format!(
            "fd00:10:244:1::/64 via fd00:1::2 dev ccm0 {proto}"
        )),
        "{v6}"
    );
    assert_eq!(v6.lines().count(), 1, "{v6}");

    // Replace swaps the gateway in place, and is idempotent.
    routes
        .replace("10.244.2.0/24", addr("127.0.1.3"))
        .await
        .unwrap();
    routes
        .replace("10.244.2.0/24", addr("127.0.1.3"))
        .await
        .unwrap();
    routes
        .replace("fd00:10:244:1::/64", addr("fd00:1::3"))
        .await
        .unwrap();
    routes
        .replace("fd00:10:244:1::/64", addr("fd00:1::3"))
        .await
        .unwrap();
    let expected = vec![
        route("10.244.1.0/24", Some("127.0.1.1")),
        route("10.244.2.0/24", Some("127.0.1.3")),
        route("fd00:10:244:1::/64", Some("fd00:1::3")),
    ];
    assert_eq!(routes.list().await.unwrap(), expected);
    let lines = kernel_lines("", 100, "10.244.2.0/24");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("via 127.0.1.3"), "{lines:?}");
    assert_eq!(kernel_lines("-6", 100, "fd00:10:244:1::/64").len(), 1);
    assert!(kernel_lines("-6", 100, "fd00:10:244:1::/64")[0].contains("via fd00:1::3"));

    // Delete removes the route; deleting it again is fine.
    routes.delete("10.244.1.0/24").await.unwrap();
    routes.delete("10.244.1.0/24").await.unwrap();
    routes.delete("fd00:10:244:1::/64").await.unwrap();
    routes.delete("fd00:10:244:1::/64").await.unwrap();
    assert_eq!(
        routes.list().await.unwrap(),
        [route("10.244.2.0/24", Some("127.0.1.3"))]
    );
    assert_eq!(kernel_lines("", 100, "10.244.1.0/24"), Vec::<String>::new());
    assert_eq!(ip("-6 route show table 100"), "");
    // So is deleting from a table the kernel never had.
    KernelRoutes::connect(555)
        .unwrap()
        .delete("10.244.1.0/24")
        .await
        .unwrap();
    KernelRoutes::connect(555)
        .unwrap()
        .delete("fd00::/64")
        .await
        .unwrap();

    // Delete takes every route for the destination, whoever wrote it:
    // IPv6 routes differing only in metric are separate routes.
    ip("-6 route add fd00:10:244:5::/64 via fd00:1::5 metric 10 table 100");
    ip("-6 route add fd00:10:244:5::/64 via fd00:1::6 metric 20 table 100");
    assert_eq!(kernel_lines("-6", 100, "fd00:10:244:5::/64").len(), 2);
    routes.delete("fd00:10:244:5::/64").await.unwrap();
    assert_eq!(ip("-6 route show table 100"), "");

    invalid_input(&routes).await;
    unreachable_gateways(&routes).await;
    other_tables(&routes).await;
    other_route_kinds(&routes).await;
}

async fn invalid_input(routes: &KernelRoutes) {
    for cidr in [
        "10.244.1.5/24",
        "fd00:10:244:1::1/64",
        "garbage",
        "10.244.1.0",
        "10.244.1.0/33",
        "",
    ] {
        let error = routes
            .replace(cidr, addr("127.0.1.1"))
            .await
            .expect_err(cidr);
        assert!(
            matches!(&error, RouteError::InvalidCidr { cidr: c, .. } if c == cidr),
            "replace {cidr:?}: {error:?}"
        );
        let error = routes.delete(cidr).await.expect_err(cidr);
        assert!(
            matches!(error, RouteError::InvalidCidr { .. }),
            "delete {cidr:?}: {error:?}"
        );
    }
    let error = routes
        .replace("10.244.1.5/24", addr("127.0.1.1"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("10.244.1.0/24"), "{error}");

    for (cidr, gateway) in [
        ("10.244.3.0/24", "fd00:1::2"),
        ("fd00:10:244:3::/64", "127.0.1.1"),
        ("10.244.3.0/24", "0.0.0.0"),
        ("10.244.3.0/24", "224.0.0.1"),
    ] {
        let error = routes
            .replace(cidr, addr(gateway))
            .await
            .expect_err(gateway);
        assert!(
            matches!(error, RouteError::InvalidGateway { .. }),
            "{cidr} via {gateway}: {error:?}"
        );
    }
    assert_eq!(
        routes.list().await.unwrap(),
        [route("10.244.2.0/24", Some("127.0.1.3"))]
    );
}

async fn unreachable_gateways(routes: &KernelRoutes) {
    for (cidr, gateway) in [("10.9.0.0/16", "192.0.2.1"), ("fd00:9::/64", "2001:db8::1")] {
        let error = routes
            .replace(cidr, addr(gateway))
            .await
            .expect_err(gateway);
        let message = error.to_string();
        assert!(
            matches!(&error, RouteError::GatewayUnreachable { gateway: g, table: 100, .. } if *g == addr(gateway)),
            "{cidr} via {gateway}: {error:?}"
        );
        assert!(
            message.contains(gateway) && message.contains(cidr) && message.contains("reachable"),
            "{message}"
        );
        println!("unreachable gateway: {message}");
    }
    assert_eq!(
        routes.list().await.unwrap(),
        [route("10.244.2.0/24", Some("127.0.1.3"))]
    );
}

async fn other_tables(routes: &KernelRoutes) {
    // Routes elsewhere, written by someone else, are not in table 100.
    ip("route add 10.244.9.0/24 via 127.0.1.9 table 101");
    ip("-6 route add fd00:10:244:9::/64 via fd00:1::9 table 101");
    ip("route add 10.244.8.0/24 via 127.0.1.8");
    assert_eq!(
        routes.list().await.unwrap(),
        [route("10.244.2.0/24", Some("127.0.1.3"))]
    );
    assert_eq!(
        KernelRoutes::connect(101).unwrap().list().await.unwrap(),
        [
            route("10.244.9.0/24", Some("127.0.1.9")),
            route("fd00:10:244:9::/64", Some("fd00:1::9")),
        ]
    );

    // Ids above 255 travel in RTA_TABLE. The low bytes of 356 and 1000 are
    // 100 and 232: a reader of the header byte alone would mix them up.
    for table in [1000, 356] {
        let big = KernelRoutes::connect(table).unwrap();
        assert_eq!(big.list().await.unwrap(), []);
        big.replace("10.244.1.0/24", addr("127.0.1.1"))
            .await
            .unwrap();
        big.replace("fd00:10:244:1::/64", addr("fd00:1::2"))
            .await
            .unwrap();
        let expected = [
            route("10.244.1.0/24", Some("127.0.1.1")),
            route("fd00:10:244:1::/64", Some("fd00:1::2")),
        ];
        assert_eq!(big.list().await.unwrap(), expected);
        let v4 = ip(&format!("route show table {table}"));
        assert!(v4.contains("10.244.1.0/24 via 127.0.1.1 dev lo"), "{v4}");
        let v6 = ip(&format!("-6 route show table {table}"));
        assert!(
            v6.contains("fd00:10:244:1::/64 via fd00:1::2 dev ccm0"),
            "{v6}"
        );
        big.replace("10.244.1.0/24", addr("127.0.1.4"))
            .await
            .unwrap();
        assert_eq!(
            big.list().await.unwrap()[0],
            route("10.244.1.0/24", Some("127.0.1.4"))
        );
    }
    assert_eq!(
        routes.list().await.unwrap(),
        [route("10.244.2.0/24", Some("127.0.1.3"))]
    );
    assert_eq!(
        KernelRoutes::connect(232).unwrap().list().await.unwrap(),
        []
    );
    let big = KernelRoutes::connect(1000).unwrap();
    big.delete("10.244.1.0/24").await.unwrap();
    big.delete("fd00:10:244:1::/64").await.unwrap();
    assert_eq!(big.list().await.unwrap(), []);
    assert_eq!(ip("route show table 1000"), "");
    assert_eq!(
        KernelRoutes::connect(356)
            .unwrap()
            .list()
            .await
            .unwrap()
            .len(),
        2
    );

    // The largest id works too.
    let top = KernelRoutes::connect(u32::MAX).unwrap();
    top.replace("10.244.1.0/24", addr("127.0.1.1"))
        .await
        .unwrap();
    assert_eq!(
        top.list().await.unwrap(),
        [route("10.244.1.0/24", Some("127.0.1.1"))]
    );
    assert!(ip(&format!("route show table {}", u32::MAX)).contains("10.244.1.0/24"));
}

async fn other_route_kinds(routes: &KernelRoutes) {
    // A route without a gateway is listed with none; a route that is not
    // unicast (blackhole, unreachable) is not listed at all.
    ip("route add 10.244.5.0/24 dev lo table 100");
    ip("route add blackhole 10.244.6.0/24 table 100");
    ip("-6 route add unreachable fd00:10:244:6::/64 table 100");
    assert_eq!(
        routes.list().await.unwrap(),
        [
            route("10.244.2.0/24", Some("127.0.1.3")),
            route("10.244.5.0/24", None),
        ]
    );
    // A default route has no RTA_DST.
    routes
        .replace("0.0.0.0/0", addr("127.0.1.1"))
        .await
        .unwrap();
    assert!(
        routes
            .list()
            .await
            .unwrap()
            .contains(&route("0.0.0.0/0", Some("127.0.1.1")))
    );
    assert!(ip("route show table 100").contains("default via 127.0.1.1 dev lo"));
    routes.delete("0.0.0.0/0").await.unwrap();
    routes.delete("10.244.5.0/24").await.unwrap();
    routes.delete("10.244.2.0/24").await.unwrap();
    assert_eq!(routes.list().await.unwrap(), []);
}

/// Without CAP_NET_ADMIN the kernel refuses every change, and the error says
/// what is missing. The host may well grant CAP_NET_ADMIN to whoever runs
/// the tests (root in a container), so the check runs in a user namespace
/// nested inside the private one: its root has no capability over the
/// network namespace its parent owns. Were that ever not so, the only thing
/// touched would be the throwaway namespace.
#[test]
fn changes_without_cap_net_admin_are_permission_denied() {
    if std::env::var_os(IN_NETNS).is_none() {
        rerun_inside(
            &["unshare", "-rn", "unshare", "-r"],
            "changes_without_cap_net_admin_are_permission_denied",
        );
        return;
    }
    assert_private_netns();
    runtime().block_on(async {
        let routes = KernelRoutes::connect(100).unwrap();
        let error = routes
            .replace("10.244.1.0/24", addr("127.0.1.1"))
            .await
            .unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, RouteError::PermissionDenied { .. }),
            "{error:?}"
        );
        assert!(message.contains("CAP_NET_ADMIN"), "{message}");
        assert!(message.contains("10.244.1.0/24"), "{message}");
        println!("without CAP_NET_ADMIN: {message}");

        let error = routes.delete("10.244.1.0/24").await.unwrap_err();
        assert!(
            matches!(error, RouteError::PermissionDenied { .. }),
            "{error:?}"
        );
        // Reading needs no capability.
        assert_eq!(routes.list().await.unwrap(), []);
    });
}
