"""The in-memory example provider (providers/examples/python-memory) on a
real socket: the answers the conformance suite does not pin down exactly."""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Iterator
from types import ModuleType

import grpc
import pytest
from conftest import channel
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ccmrs.cloudprovider.v1 import loadbalancer_pb2_grpc, routes_pb2_grpc
from ccmrs_provider import ProviderServer, pb

EXAMPLE = (
    pathlib.Path(__file__).resolve().parents[3]
    / "providers"
    / "examples"
    / "python-memory"
    / "memory_provider.py"
)


@pytest.fixture(scope="module")
def memory() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memory_provider", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def ch(memory: ModuleType, endpoint: str) -> Iterator[grpc.Channel]:
    cloud = memory.MemoryCloud(["node-1"], auto_create=False, pool="192.0.2.0/24")
    server = ProviderServer(cloud).with_load_balancers(cloud).with_routes(cloud)
    with server.start(endpoint), channel(endpoint) as c:
        yield c


def service() -> pb.Service:
    return pb.Service(
        namespace="default",
        name="web",
        uid="uid-1",
        ports=[pb.ServicePort(protocol=pb.PROTOCOL_TCP, port=80)],
        external_traffic_policy=pb.TRAFFIC_POLICY_CLUSTER,
        session_affinity=pb.SESSION_AFFINITY_NONE,
    )


def test_update_of_a_missing_load_balancer_is_not_found_without_a_reason(
    ch: grpc.Channel,
) -> None:
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    update = pb.UpdateLoadBalancerRequest(cluster_name="c", service=service())
    for when in ["never ensured", "deleted"]:
        with pytest.raises(grpc.RpcError) as e:
            lb.UpdateLoadBalancer(update)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND, when
        status = rpc_status.from_call(e.value)
        assert status is not None, when
        assert not any(d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) for d in status.details), (
            f"{when}: NOT_FOUND here carries no reason"
        )
        # It never created one.
        got = lb.GetLoadBalancer(pb.GetLoadBalancerRequest(cluster_name="c", service=service()))
        assert got.existence == pb.LOAD_BALANCER_EXISTENCE_NOT_EXISTS, when
        if when == "never ensured":
            lb.EnsureLoadBalancer(pb.EnsureLoadBalancerRequest(cluster_name="c", service=service()))
            assert lb.UpdateLoadBalancer(update).HasField("updated")
            lb.EnsureLoadBalancerDeleted(
                pb.EnsureLoadBalancerDeletedRequest(cluster_name="c", service=service())
            )


def test_routes_are_listed_as_created(ch: grpc.Channel) -> None:
    routes = routes_pb2_grpc.RoutesServiceStub(ch)
    route = pb.Route(target_node="node-1", destination_cidr="10.244.1.0/24")
    routes.CreateRoute(pb.CreateRouteRequest(cluster_name="c", name_hint="h", route=route))
    (listed,) = routes.ListRoutes(pb.ListRoutesRequest(cluster_name="c")).routes
    assert (listed.target_node, listed.destination_cidr, listed.blackhole) == (
        "node-1",
        "10.244.1.0/24",
        False,
    )
    assert listed.name.startswith("route-h-")
    assert not routes.ListRoutes(pb.ListRoutesRequest(cluster_name="other")).routes


def test_the_flags_declare_classes_unclassed_services_and_platforms(memory: ModuleType) -> None:
    endpoint, cloud = memory.parse(
        [
            "--endpoint=unix:///tmp/m.sock",
            "--load-balancer-class=example.com/memory",
            "--unclassed-services=declined",
            "--platform=memory",
        ]
    )
    info = cloud.info()
    assert endpoint == "unix:///tmp/m.sock"
    assert list(info.load_balancer_classes) == ["example.com/memory"]
    assert info.serves_unclassed is False and list(info.platforms) == ["memory"]
    _, cloud = memory.parse([])
    info = cloud.info()
    assert info.serves_unclassed is None and not info.load_balancer_classes and not info.platforms
    ProviderServer(cloud)  # a valid identity
    with pytest.raises(ValueError, match="load_balancer_classes"):
        ProviderServer(memory.parse(["--load-balancer-class=memory"])[1])
