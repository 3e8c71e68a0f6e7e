from collections.abc import Callable

import pytest

from ccmrs_provider import Violation, pb, validate
from ccmrs_provider.validate import MAX_ANNOTATIONS_BYTES


def service() -> pb.Service:
    return pb.Service(
        namespace="default",
        name="web",
        uid="0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11",
        ports=[pb.ServicePort(protocol=pb.PROTOCOL_TCP, port=80, node_port=30080)],
        external_traffic_policy=pb.TRAFFIC_POLICY_CLUSTER,
        session_affinity=pb.SESSION_AFFINITY_NONE,
    )


def test_a_complete_service_passes() -> None:
    validate.service("service", service())


def _set(attr: str, value: object) -> Callable[[pb.Service], None]:
    return lambda s: setattr(s, attr, value)


BREAKERS: list[tuple[str, Callable[[pb.Service], None]]] = [
    ("service.uid", _set("uid", "")),
    ("service.ports", lambda s: s.ClearField("ports")),
    ("service.ports[0].protocol", lambda s: setattr(s.ports[0], "protocol", 0)),
    ("service.ports[0].protocol", lambda s: setattr(s.ports[0], "protocol", 99)),
    ("service.ports[0].port", lambda s: setattr(s.ports[0], "port", 70000)),
    ("service.ports[0].node_port", lambda s: setattr(s.ports[0], "node_port", -1)),
    (
        "service.load_balancer_source_ranges[0]",
        lambda s: s.load_balancer_source_ranges.append("10.0.0.0/33"),
    ),
    ("service.external_traffic_policy", _set("external_traffic_policy", 0)),
    ("service.internal_traffic_policy", _set("internal_traffic_policy", 7)),
    ("service.session_affinity", _set("session_affinity", 0)),
    ("service.ip_families[0]", lambda s: s.ip_families.append(0)),
    ("service.load_balancer_ip", _set("load_balancer_ip", "1.2.3")),
    ("service.cluster_ips[0]", lambda s: s.cluster_ips.append("x")),
    ("service.annotations", lambda s: s.annotations.update(big="x" * MAX_ANNOTATIONS_BYTES)),
    ("service.labels[k]", lambda s: s.labels.update(k="v" * 64)),
    ("service.status.ingress[0]", lambda s: s.status.ingress.add()),
]


@pytest.mark.parametrize(("field", "breaker"), BREAKERS, ids=[f for f, _ in BREAKERS])
def test_each_broken_service_field_is_named(
    field: str, breaker: Callable[[pb.Service], None]
) -> None:
    s = service()
    breaker(s)
    with pytest.raises(Violation) as e:
        validate.service("service", s)
    assert e.value.field == field


def test_reads_need_no_ports_and_every_check_needs_a_service() -> None:
    s = service()
    s.ClearField("ports")
    validate.service_ref("service", s)
    with pytest.raises(Violation) as e:
        validate.service_ref("service", None)
    assert e.value.field == "service"


def test_node_addresses_of_ip_types_must_parse() -> None:
    bad = pb.NodeAddress(type=pb.NODE_ADDRESS_TYPE_INTERNAL_IP, address="not-an-ip")
    with pytest.raises(Violation) as e:
        validate.node_address("a", bad)
    assert e.value.field == "a.address"
    validate.node_address("a", pb.NodeAddress(type=pb.NODE_ADDRESS_TYPE_HOSTNAME, address="node-1"))
    with pytest.raises(Violation) as e:
        validate.node_ref("node", pb.NodeRef(name="n", addresses=[pb.NodeAddress(address="x")]))
    assert e.value.field == "node.addresses[0].type"


def test_label_syntax_is_kubernetes_syntax() -> None:
    for ok in ["a", "example.com/rack", "team_1.x-y", "k8s.io/x"]:
        validate.label_key("f", ok)
    for bad in ["", "-a", "a-", "Example.com/x", "a/b/c", "/x", "x/", "has space"]:
        with pytest.raises(Violation):
            validate.label_key("f", bad)
    validate.label_value("f", "")
    validate.label_value("f", "zone-a_1.b")
    for bad in ["-x", "x y", "x/y", "v" * 64]:
        with pytest.raises(Violation):
            validate.label_value("f", bad)


def test_provider_ids_cidrs_and_ips() -> None:
    validate.provider_id("f", "fake://i-1")
    for bad in ["", "i-1", "://x", "fake://", "fake://a b"]:
        with pytest.raises(Violation):
            validate.provider_id("f", bad)
    validate.cidr("f", "10.0.0.0/8")
    validate.cidr("f", "fd00::/64")
    validate.cidr("f", "0.0.0.0/0")
    for bad in ["10.0.0.0", "10.0.0.0/", "10.0.0/8", "fd00::/129", "x/1"]:
        with pytest.raises(Violation):
            validate.cidr("f", bad)
    # As the Rust SDK's cidrs_and_ips: a sign or a leading zero in the
    # prefix is refused (no "address/prefix" parser takes them).
    for bad in ["0.0.0.0/+0", "10.0.0.0/+8", "10.0.0.0/08", "fd00::/064", "10.0.0.0/00"]:
        with pytest.raises(Violation, match="is not a CIDR"):
            validate.cidr("f", bad)
    validate.ip("f", "::1")
    for bad in ["256.0.0.1", "fe80::1%eth0", "010.0.0.1"]:
        with pytest.raises(Violation):
            validate.ip("f", bad)


def test_load_balancer_status_answers() -> None:
    ok = pb.LoadBalancerStatus(
        ingress=[
            pb.LoadBalancerIngress(ip="192.0.2.1"),
            pb.LoadBalancerIngress(hostname="lb.example.com"),
        ]
    )
    validate.load_balancer_status("status", ok)
    cases = {
        "status.ingress[0].ip": pb.LoadBalancerIngress(ip="nope"),
        "status.ingress[0].hostname": pb.LoadBalancerIngress(hostname="10.0.0.1"),
        "status.ingress[0].ip_mode": pb.LoadBalancerIngress(ip="10.0.0.1", ip_mode=9),
        "status.ingress[0].ports[0].protocol": pb.LoadBalancerIngress(
            ip="10.0.0.1", ports=[pb.PortStatus(port=80)]
        ),
    }
    for field, ingress in cases.items():
        with pytest.raises(Violation) as e:
            validate.load_balancer_status("status", pb.LoadBalancerStatus(ingress=[ingress]))
        assert e.value.field == field


def _one(ip: str, hostname: str, ip_mode: int) -> pb.LoadBalancerStatus:
    return pb.LoadBalancerStatus(
        ingress=[pb.LoadBalancerIngress(ip=ip, hostname=hostname, ip_mode=ip_mode)]
    )


@pytest.mark.parametrize(
    ("status", "field"),
    [
        (_one("", "0", pb.IP_MODE_VIP), "s.ingress[0].ip_mode"),
        (_one("", "lb.example.com", pb.IP_MODE_VIP), "s.ingress[0].ip_mode"),
        (_one("", "010.0.0.1", pb.IP_MODE_UNSPECIFIED), "s.ingress[0].hostname"),
        (_one("::ffff:1.2.3.4", "", pb.IP_MODE_VIP), "s.ingress[0].ip"),
    ],
    ids=["mode-without-ip", "mode-on-hostname", "leading-zero-hostname", "v4-mapped-ip"],
)
def test_statuses_kubernetes_refuses_are_refused(status: pb.LoadBalancerStatus, field: str) -> None:
    """As the Rust SDK's test of the same name: each passed, and the
    apiserver refuses each in the Service's status."""
    with pytest.raises(Violation) as e:
        validate.load_balancer_status("s", status)
    assert e.value.field == field


@pytest.mark.parametrize(
    "status",
    [
        _one("1.2.3.4", "", pb.IP_MODE_VIP),
        _one("", "lb.example.com", pb.IP_MODE_UNSPECIFIED),
        _one("", "1.2.3.4444", pb.IP_MODE_UNSPECIFIED),
        _one("2001:db8::1", "lb.example.com", pb.IP_MODE_VIP),
    ],
    ids=["v4-vip", "hostname", "four-digit-octet-hostname", "v6-and-hostname"],
)
def test_statuses_kubernetes_accepts_pass(status: pb.LoadBalancerStatus) -> None:
    validate.load_balancer_status("s", status)


def test_routes_and_volumes() -> None:
    validate.route("route", pb.Route(destination_cidr="10.0.0.0/24", blackhole=True))
    with pytest.raises(Violation) as e:
        validate.route("route", pb.Route(destination_cidr="10.0.0.0/24"))
    assert e.value.field == "route.target_node"
    with pytest.raises(Violation) as e:
        validate.volume("volume", pb.Volume(name="pv", driver="d"))
    assert e.value.field == "volume.volume_id"


# As the Rust SDK's dns_addresses_are_dns_names_and_ips_are_canonical
# (issue 25, finding 9): the DNS address types hold DNS names, and IPs are in
# canonical text (RFC 5952), never IPv4-mapped.
@pytest.mark.parametrize(
    ("type_", "address"),
    [
        (pb.NODE_ADDRESS_TYPE_HOSTNAME, "$(rm -rf /)"),
        (pb.NODE_ADDRESS_TYPE_INTERNAL_DNS, "-bad-.example"),
        (pb.NODE_ADDRESS_TYPE_EXTERNAL_DNS, "Upper.Example"),
        (pb.NODE_ADDRESS_TYPE_HOSTNAME, "n1."),
        (pb.NODE_ADDRESS_TYPE_INTERNAL_IP, "fd00:0:0:0:0:0:0:1"),
        (pb.NODE_ADDRESS_TYPE_INTERNAL_IP, "FD00::1"),
        (pb.NODE_ADDRESS_TYPE_EXTERNAL_IP, "::ffff:192.0.2.1"),
    ],
)
def test_bad_dns_names_and_non_canonical_ips_are_refused(type_: int, address: str) -> None:
    with pytest.raises(Violation) as e:
        validate.node_address("a", pb.NodeAddress(type=type_, address=address))
    assert e.value.field == "a.address"


def test_dns_names_and_canonical_ips_pass() -> None:
    for type_, address in [
        (pb.NODE_ADDRESS_TYPE_HOSTNAME, "n1"),
        (pb.NODE_ADDRESS_TYPE_INTERNAL_DNS, "n1.internal.example"),
        (pb.NODE_ADDRESS_TYPE_INTERNAL_IP, "fd00::1"),
        (pb.NODE_ADDRESS_TYPE_EXTERNAL_IP, "192.0.2.1"),
    ]:
        validate.node_address("a", pb.NodeAddress(type=type_, address=address))


@pytest.mark.parametrize("ip", ["2001:DB8::1", "2001:db8:0:0:0:0:0:1", "2001:db8::0:1"])
def test_a_non_canonical_ingress_ip_is_refused(ip: str) -> None:
    status = pb.LoadBalancerStatus(ingress=[pb.LoadBalancerIngress(ip=ip)])
    with pytest.raises(Violation, match="canonical") as e:
        validate.load_balancer_status("s", status)
    assert e.value.field == "s.ingress[0].ip"


def test_an_ipv4_mapped_load_balancer_ip_is_refused() -> None:
    s = service()
    s.load_balancer_ip = "::ffff:1.2.3.4"
    with pytest.raises(Violation, match="IPv4-mapped") as e:
        validate.service("service", s)
    assert e.value.field == "service.load_balancer_ip"
