"""The server end to end: a real grpc.aio server on a Unix socket in a temp
dir, called through the generated stubs, as the controller calls it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from conftest import channel
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ccmrs.cloudprovider.v1 import (
    clusters_pb2_grpc,
    identity_pb2_grpc,
    instances_pb2_grpc,
    loadbalancer_pb2_grpc,
    routes_pb2_grpc,
    volumes_pb2_grpc,
    zones_pb2_grpc,
)
from ccmrs_provider import (
    Clusters,
    Existence,
    FencingToken,
    Identity,
    Instances,
    LbAnswer,
    LoadBalancers,
    ProviderError,
    ProviderInfo,
    ProviderServer,
    Readiness,
    Reason,
    Routes,
    Volumes,
    Zones,
    calls,
    pb,
)


class Cloud(Identity, Instances, LoadBalancers, Routes, Zones, Volumes, Clusters):
    """Answers whatever the test sets; records what it was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.metadata = pb.InstanceMetadata(provider_id="test://i-1")
        self.status: object = pb.LoadBalancerStatus(
            ingress=[pb.LoadBalancerIngress(ip="192.0.2.10")]
        )
        self.lbs = [
            pb.LoadBalancerSummary(name=f"lb-{i}", service_uid=f"uid-{i:03}") for i in range(7)
        ]
        self.routes = [
            pb.Route(target_node="n", destination_cidr=f"10.0.{i}.0/24") for i in range(5)
        ]
        self.labels: dict[str, str] = {"topology.kubernetes.io/zone": "z"}
        self.update: object = LbAnswer.elsewhere("another controller").warn(
            "AnnotationIgnored", "x is ignored"
        )
        self.cancelled_seen = threading.Event()
        self.async_cancelled_seen = threading.Event()

    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name="test", vendor_version="1.2.3", provider_id_scheme="test", manifest={"k": "v"}
        )

    def annotation_schema(self) -> pb.AnnotationSchema:
        return pb.AnnotationSchema(
            prefixes=["test.example.com/"], known_keys=["test.example.com/x"]
        )

    def probe(self, ctx):
        return Readiness.starting("warming up")

    def instance_exists(self, ctx, node):
        self.calls.append(("exists", ctx))
        if node.name == "hang":
            # A cloud call that notices the caller leaving.
            if ctx.wait(10):
                self.cancelled_seen.set()
            return Existence.EXISTS
        if node.name == "crash":
            raise RuntimeError("secret=hunter2")
        if node.name == "none":
            return None
        return node.name != "gone"

    def instance_shutdown(self, ctx, node):
        raise ProviderError.instance_not_found(
            f"no {node.name}", resource_type="instance", resource_name=node.name
        )

    def instance_metadata(self, ctx, node):
        return self.metadata

    def get_load_balancer(self, ctx, cluster_name, service):
        return None

    async def ensure_load_balancer(self, ctx, cluster_name, service, nodes):
        self.calls.append(("ensure", (ctx, cluster_name, len(nodes))))
        if cluster_name == "hang":
            # A coroutine is cancelled when the caller leaves.
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.async_cancelled_seen.set()
                raise
        await asyncio.sleep(0)
        return self.status

    def update_load_balancer(self, ctx, cluster_name, service, nodes):
        return self.update

    def ensure_load_balancer_deleted(self, ctx, cluster_name, service):
        return [pb.Warning(reason="not camel", message="m")]

    def list_load_balancers(self, ctx, cluster_name):
        return self.lbs

    def list_routes(self, ctx, cluster_name):
        return self.routes

    def create_route(self, ctx, cluster_name, name_hint, route):
        self.calls.append(("create_route", ctx))
        return None

    def delete_route(self, ctx, cluster_name, route):
        raise NotImplementedError

    def zone_by_provider_id(self, ctx, provider_id):
        return pb.Zone(failure_domain="z" * (11 * 1024 * 1024))

    def zone_by_node_name(self, ctx, node_name):
        return {"not": "a zone"}

    def get_volume_labels(self, ctx, volume):
        return self.labels

    def list_clusters(self, ctx):
        return ["a", "b"]

    def master(self, ctx, cluster_name):
        return ""


def serve(cloud: Cloud, endpoint: str, **kwargs):
    server = ProviderServer(cloud, **kwargs)
    for add in (
        server.with_instances,
        server.with_load_balancers,
        server.with_routes,
        server.with_zones,
        server.with_volumes,
        server.with_clusters,
    ):
        add(cloud)
    return server.start(endpoint)


@pytest.fixture
def cloud() -> Cloud:
    return Cloud()


@pytest.fixture
def ch(cloud: Cloud, endpoint: str) -> Iterator[grpc.Channel]:
    with serve(cloud, endpoint), channel(endpoint) as c:
        yield c


def wait_for(condition, what: str, timeout: float = 5) -> None:
    """Polls ``condition`` until it holds, failing with ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def error(call, *args, **kwargs) -> ProviderError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kwargs)
    return ProviderError.from_rpc_error(e.value)


def service(**kw) -> pb.Service:
    s = pb.Service(
        namespace="default",
        name="web",
        uid="uid-1",
        ports=[pb.ServicePort(protocol=pb.PROTOCOL_TCP, port=80)],
        external_traffic_policy=pb.TRAFFIC_POLICY_CLUSTER,
        session_affinity=pb.SESSION_AFFINITY_NONE,
    )
    for k, v in kw.items():
        if k == "ports":
            del s.ports[:]
            s.ports.extend(v)
        else:
            setattr(s, k, v)
    return s


def test_identity_capabilities_and_probe(ch: grpc.Channel) -> None:
    stub = identity_pb2_grpc.IdentityServiceStub(ch)
    info = stub.GetProviderInfo(pb.GetProviderInfoRequest())
    assert (info.name, info.vendor_version, info.provider_id_scheme) == ("test", "1.2.3", "test")
    assert info.contract_version == "1.4.0" and dict(info.manifest) == {"k": "v"}
    assert not info.HasField("has_cluster_id")
    caps = stub.GetProviderCapabilities(pb.GetProviderCapabilitiesRequest()).capabilities
    assert list(caps) == [
        pb.CAPABILITY_INSTANCES,
        pb.CAPABILITY_INSTANCES_BATCH,
        pb.CAPABILITY_LOAD_BALANCERS,
        pb.CAPABILITY_LIST_LOAD_BALANCERS,
        pb.CAPABILITY_ROUTES,
        pb.CAPABILITY_ZONES,
        pb.CAPABILITY_VOLUME_LABELS,
        pb.CAPABILITY_CLUSTERS,
    ]
    probe = stub.Probe(pb.ProbeRequest())
    assert (probe.state, probe.message) == (pb.PROBE_STATE_STARTING, "warming up")


def test_identity_answers_are_built_once(endpoint: str) -> None:
    class Counting(Cloud):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[str] = []

        def info(self) -> ProviderInfo:
            self.asked.append("info")
            return super().info()

        def annotation_schema(self) -> pb.AnnotationSchema:
            self.asked.append("annotation_schema")
            return super().annotation_schema()

    cloud = Counting()
    server = ProviderServer(cloud).with_instances(cloud).with_routes(cloud)
    with server.start(endpoint), channel(endpoint) as c:
        stub = identity_pb2_grpc.IdentityServiceStub(c)
        for _ in range(3):
            assert stub.GetProviderInfo(pb.GetProviderInfoRequest()).name == "test"
            caps = stub.GetProviderCapabilities(pb.GetProviderCapabilitiesRequest())
            assert list(caps.annotations.prefixes) == ["test.example.com/"]
        assert sorted(cloud.asked) == ["annotation_schema", "info"]
        # What is served cannot change under the running server.
        with pytest.raises(RuntimeError, match="before the server serves"):
            server.with_zones(cloud)
        caps = stub.GetProviderCapabilities(pb.GetProviderCapabilitiesRequest())
        assert list(caps.capabilities) == [
            pb.CAPABILITY_INSTANCES,
            pb.CAPABILITY_INSTANCES_BATCH,
            pb.CAPABILITY_ROUTES,
        ]


def test_capabilities_follow_what_is_implemented(endpoint: str) -> None:
    class NoListing(LoadBalancers):
        get_load_balancer = ensure_load_balancer = update_load_balancer = Cloud.get_load_balancer
        ensure_load_balancer_deleted = Cloud.ensure_load_balancer_deleted

    class Addressed(Routes):
        uses_target_node_addresses = True
        list_routes = create_route = delete_route = Cloud.list_routes

    cloud = Cloud()
    server = ProviderServer(cloud).with_load_balancers(NoListing()).with_routes(Addressed())
    assert server.capabilities == [
        pb.CAPABILITY_LOAD_BALANCERS,
        pb.CAPABILITY_ROUTES,
        pb.CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES,
    ]
    with server.start(endpoint), channel(endpoint) as c:
        lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(c)
        e = error(lb.ListLoadBalancers, pb.ListLoadBalancersRequest(cluster_name="c"))
        assert e.code == grpc.StatusCode.UNIMPLEMENTED
        # A service never handed over is not served at all.
        e = error(
            instances_pb2_grpc.InstancesServiceStub(c).InstanceExists, pb.InstanceExistsRequest()
        )
        assert e.code == grpc.StatusCode.UNIMPLEMENTED


def test_health_and_reflection_share_the_socket(ch: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(ch)
    for name in [
        "",
        "ccmrs.cloudprovider.v1.IdentityService",
        "ccmrs.cloudprovider.v1.RoutesService",
    ]:
        answer = health.Check(health_pb2.HealthCheckRequest(service=name))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    listed = set()
    for method in [
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    ]:
        call = ch.stream_stream(
            f"/{method}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        (answer,) = call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        listed = {s.name for s in answer.list_services_response.service}
        assert "ccmrs.cloudprovider.v1.LoadBalancerService" in listed
        assert "grpc.health.v1.Health" in listed
    stub = reflection_pb2_grpc.ServerReflectionStub(ch)
    request = reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="ccmrs.cloudprovider.v1.Service"
    )
    (answer,) = stub.ServerReflectionInfo(iter([request]))
    assert answer.file_descriptor_response.file_descriptor_proto


def test_requests_are_validated_naming_the_field(ch: grpc.Channel) -> None:
    inst = instances_pb2_grpc.InstancesServiceStub(ch)
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    routes = routes_pb2_grpc.RoutesServiceStub(ch)
    cases = [
        (inst.InstanceExists, pb.InstanceExistsRequest(), "node"),
        (inst.InstanceExists, pb.InstanceExistsRequest(node=pb.NodeRef()), "node.name"),
        (lb.EnsureLoadBalancer, pb.EnsureLoadBalancerRequest(cluster_name="c"), "service"),
        (lb.EnsureLoadBalancer, pb.EnsureLoadBalancerRequest(service=service()), "cluster_name"),
        (
            lb.EnsureLoadBalancer,
            pb.EnsureLoadBalancerRequest(cluster_name="c", service=service(), nodes=[pb.NodeRef()]),
            "nodes[0].name",
        ),
        (
            lb.UpdateLoadBalancer,
            pb.UpdateLoadBalancerRequest(cluster_name="c", service=service(ports=[])),
            "service.ports",
        ),
        (
            lb.ListLoadBalancers,
            pb.ListLoadBalancersRequest(cluster_name="c", page_token="x"),
            "page_token",
        ),
        (routes.ListRoutes, pb.ListRoutesRequest(cluster_name="c", page_size=-1), "page_size"),
        (
            routes.CreateRoute,
            pb.CreateRouteRequest(
                cluster_name="c",
                name_hint="h",
                route=pb.Route(destination_cidr="10.0.0.0/8", blackhole=True),
            ),
            "route.blackhole",
        ),
        (
            routes.CreateRoute,
            pb.CreateRouteRequest(cluster_name="c", route=pb.Route()),
            "name_hint",
        ),
        (
            zones_pb2_grpc.ZonesServiceStub(ch).GetZoneByNodeName,
            pb.GetZoneByNodeNameRequest(),
            "node_name",
        ),
        (
            volumes_pb2_grpc.VolumesServiceStub(ch).GetVolumeLabels,
            pb.GetVolumeLabelsRequest(),
            "volume",
        ),
        (clusters_pb2_grpc.ClustersServiceStub(ch).Master, pb.MasterRequest(), "cluster_name"),
    ]
    for call, request, field in cases:
        e = error(call, request)
        assert (e.code, e.reason) == (grpc.StatusCode.INVALID_ARGUMENT, Reason.INVALID_REQUEST), (
            field
        )
        assert e.field_violations[0][0] == field


def test_foreign_provider_ids_never_reach_the_provider(ch: grpc.Channel, cloud: Cloud) -> None:
    inst = instances_pb2_grpc.InstancesServiceStub(ch)
    for pid in ["aws://i-1", "test://", "testing://i-1", "i-1"]:
        e = error(
            inst.InstanceExists,
            pb.InstanceExistsRequest(node=pb.NodeRef(name="gone", provider_id=pid)),
        )
        assert e.reason == Reason.INVALID_REQUEST
        assert e.field_violations[0][0] == "node.provider_id"
    assert cloud.calls == []
    answer = inst.InstanceExists(
        pb.InstanceExistsRequest(node=pb.NodeRef(name="gone", provider_id="test://i-9"))
    )
    assert answer.existence == pb.INSTANCE_EXISTENCE_NOT_EXISTS


def test_answers_and_errors(ch: grpc.Channel, cloud: Cloud) -> None:
    inst = instances_pb2_grpc.InstancesServiceStub(ch)
    node = pb.NodeRef(name="n")
    assert (
        inst.InstanceExists(pb.InstanceExistsRequest(node=node)).existence
        == pb.INSTANCE_EXISTENCE_EXISTS
    )
    e = error(inst.InstanceShutdown, pb.InstanceShutdownRequest(node=node))
    assert (e.code, e.reason, e.resource) == (
        grpc.StatusCode.NOT_FOUND,
        Reason.INSTANCE_NOT_FOUND,
        ("instance", "n"),
    )
    assert (
        inst.InstanceMetadata(pb.InstanceMetadataRequest(node=node)).metadata.provider_id
        == "test://i-1"
    )

    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    got = lb.GetLoadBalancer(pb.GetLoadBalancerRequest(cluster_name="c", service=service(ports=[])))
    assert got.existence == pb.LOAD_BALANCER_EXISTENCE_NOT_EXISTS and not got.HasField("status")
    name = lb.GetLoadBalancerName(
        pb.GetLoadBalancerNameRequest(cluster_name="My_Cluster", service=service(uid="a-b-c"))
    )
    assert name.name == "my-cluster-abc"
    ensured = lb.EnsureLoadBalancer(
        pb.EnsureLoadBalancerRequest(cluster_name="c", service=service(), nodes=[node])
    )
    assert ensured.status.ingress[0].ip == "192.0.2.10"
    assert cloud.calls[-1][1][1:] == ("c", 1)
    updated = lb.UpdateLoadBalancer(
        pb.UpdateLoadBalancerRequest(cluster_name="c", service=service())
    )
    assert updated.implemented_elsewhere.message == "another controller"
    assert [(w.reason, w.message) for w in updated.warnings] == [
        ("AnnotationIgnored", "x is ignored")
    ]

    routes = routes_pb2_grpc.RoutesServiceStub(ch)
    route = pb.Route(target_node="n", destination_cidr="10.0.0.0/24")
    created = routes.CreateRoute(
        pb.CreateRouteRequest(cluster_name="c", name_hint="uid", route=route)
    )
    assert not created.HasField("route")
    e = error(routes.DeleteRoute, pb.DeleteRouteRequest(cluster_name="c", route=route))
    assert e.code == grpc.StatusCode.UNIMPLEMENTED

    volumes = volumes_pb2_grpc.VolumesServiceStub(ch)
    request = pb.GetVolumeLabelsRequest(volume=pb.Volume(name="pv", driver="d", volume_id="v"))
    assert dict(volumes.GetVolumeLabels(request).labels) == {"topology.kubernetes.io/zone": "z"}
    clusters = clusters_pb2_grpc.ClustersServiceStub(ch)
    assert list(clusters.ListClusters(pb.ListClustersRequest()).cluster_names) == ["a", "b"]


def test_invalid_answers_become_internal_errors(ch: grpc.Channel, cloud: Cloud) -> None:
    inst = instances_pb2_grpc.InstancesServiceStub(ch)
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    node = pb.NodeRef(name="n")
    cloud.metadata = pb.InstanceMetadata(provider_id="not-a-provider-id")
    cloud.status = pb.LoadBalancerStatus(ingress=[pb.LoadBalancerIngress()])
    cloud.labels = {"bad key": "v"}
    cloud.update = "done"
    cloud.lbs = [pb.LoadBalancerSummary(name="lb", service_uid="")]
    cases = [
        (inst.InstanceMetadata, pb.InstanceMetadataRequest(node=node), "metadata.provider_id"),
        (inst.InstanceExists, pb.InstanceExistsRequest(node=pb.NodeRef(name="none")), "NoneType"),
        (
            lb.EnsureLoadBalancer,
            pb.EnsureLoadBalancerRequest(cluster_name="c", service=service()),
            "status.ingress[0]",
        ),
        (
            lb.UpdateLoadBalancer,
            pb.UpdateLoadBalancerRequest(cluster_name="c", service=service()),
            "str for UpdateLoadBalancer, expected LbAnswer",
        ),
        (
            lb.ListLoadBalancers,
            pb.ListLoadBalancersRequest(cluster_name="c"),
            "load_balancers[0].service_uid",
        ),
        (
            lb.EnsureLoadBalancerDeleted,
            pb.EnsureLoadBalancerDeletedRequest(cluster_name="c", service=service()),
            "warnings[0].reason",
        ),
        (
            volumes_pb2_grpc.VolumesServiceStub(ch).GetVolumeLabels,
            pb.GetVolumeLabelsRequest(volume=pb.Volume(name="pv", driver="d", volume_id="v")),
            "labels[bad key]",
        ),
        (
            zones_pb2_grpc.ZonesServiceStub(ch).GetZoneByNodeName,
            pb.GetZoneByNodeNameRequest(node_name="n"),
            "dict",
        ),
        (
            clusters_pb2_grpc.ClustersServiceStub(ch).Master,
            pb.MasterRequest(cluster_name="c"),
            "empty",
        ),
    ]
    for call, request, mentioned in cases:
        e = error(call, request)
        assert (e.code, e.reason) == (grpc.StatusCode.INTERNAL, None), mentioned
        assert mentioned in e.message


def test_provider_exceptions_are_internal_without_their_text(ch: grpc.Channel) -> None:
    inst = instances_pb2_grpc.InstancesServiceStub(ch)
    e = error(
        inst.InstanceExists,
        pb.InstanceExistsRequest(node=pb.NodeRef(name="crash")),
        metadata=[("x-ccm-request-id", "req-42")],
    )
    assert e.code == grpc.StatusCode.INTERNAL
    assert "RuntimeError" in e.message and "req-42" in e.message
    assert "hunter2" not in e.message


def test_context_carries_request_id_deadline_and_fencing_token(
    ch: grpc.Channel, cloud: Cloud
) -> None:
    inst = instances_pb2_grpc.InstancesServiceStub(ch)
    inst.InstanceExists(
        pb.InstanceExistsRequest(node=pb.NodeRef(name="n")),
        metadata=[("x-ccm-request-id", "req-1")],
        timeout=20,
    )
    ctx = cloud.calls[-1][1]
    assert ctx.request_id == "req-1" and ctx.method == "InstanceExists"
    assert 15 < ctx.deadline - time.monotonic() <= 21  # grpc rounds the timeout up
    assert ctx.fencing_token is None
    assert ctx.trace_id is None
    inst.InstanceExists(
        pb.InstanceExistsRequest(node=pb.NodeRef(name="n")),
        metadata=[("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")],
    )
    assert cloud.calls[-1][1].trace_id == "0af7651916cd43dd8448eb211c80319c"
    inst.InstanceExists(pb.InstanceExistsRequest(node=pb.NodeRef(name="n")))
    assert cloud.calls[-1][1].request_id.startswith("sdk-") and cloud.calls[-1][1].deadline is None

    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    lb.EnsureLoadBalancer(
        pb.EnsureLoadBalancerRequest(cluster_name="c", service=service()),
        metadata=[("x-ccm-fencing-token", "7:cp-1_abc")],
    )
    assert cloud.calls[-1][1][0].fencing_token == FencingToken(7, "cp-1_abc")
    before = len(cloud.calls)
    e = error(
        lb.EnsureLoadBalancer,
        pb.EnsureLoadBalancerRequest(cluster_name="c", service=service()),
        metadata=[("x-ccm-fencing-token", "seven:cp-1")],
    )
    assert (e.code, e.reason) == (grpc.StatusCode.INVALID_ARGUMENT, Reason.INVALID_REQUEST)
    assert e.field_violations[0][0] == "metadata[x-ccm-fencing-token]"
    assert len(cloud.calls) == before, "a malformed token is refused before the handler runs"


def test_a_request_read_after_its_absolute_deadline_is_refused_before_it_runs(
    ch: grpc.Channel, cloud: Cloud
) -> None:
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    now_ms = int(time.time() * 1000)
    before = len(cloud.calls)
    e = error(
        lb.EnsureLoadBalancer,
        pb.EnsureLoadBalancerRequest(cluster_name="c", service=service()),
        metadata=[("x-ccm-deadline", str(now_ms - 1500))],
    )
    assert e.code == grpc.StatusCode.DEADLINE_EXCEEDED and "x-ccm-deadline" in e.message
    assert len(cloud.calls) == before, "the handler did not run"
    for value in (str(now_ms + 60_000), "soon", "-5"):
        lb.EnsureLoadBalancer(
            pb.EnsureLoadBalancerRequest(cluster_name="c", service=service()),
            metadata=[("x-ccm-deadline", value)],
        )
    assert len(cloud.calls) == before + 3, "ahead or malformed: run"


def test_a_caller_giving_up_cancels_the_call(ch: grpc.Channel, cloud: Cloud) -> None:
    inst = instances_pb2_grpc.InstancesServiceStub(ch)
    e = error(
        inst.InstanceExists, pb.InstanceExistsRequest(node=pb.NodeRef(name="hang")), timeout=0.3
    )
    assert e.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert cloud.cancelled_seen.wait(5), "ctx.wait() did not wake when the deadline passed"
    cloud.cancelled_seen.clear()
    before = len(cloud.calls)
    future = inst.InstanceExists.future(pb.InstanceExistsRequest(node=pb.NodeRef(name="hang")))
    wait_for(lambda: len(cloud.calls) > before, "the call never reached the provider")
    future.cancel()
    assert cloud.cancelled_seen.wait(5), "ctx.wait() did not wake when the caller cancelled"


def test_a_caller_giving_up_cancels_an_async_method(ch: grpc.Channel, cloud: Cloud) -> None:
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    future = lb.EnsureLoadBalancer.future(
        pb.EnsureLoadBalancerRequest(cluster_name="hang", service=service())
    )
    wait_for(lambda: cloud.calls, "EnsureLoadBalancer never reached the provider")
    ctx = cloud.calls[-1][1][0]
    assert not ctx.cancelled
    future.cancel()
    assert cloud.async_cancelled_seen.wait(5), "the coroutine was not cancelled"
    wait_for(lambda: ctx.cancelled, "the CallContext was not marked cancelled")


def test_health_and_probe_never_queue_behind_provider_work(cloud: Cloud, endpoint: str) -> None:
    with serve(cloud, endpoint, max_workers=1), channel(endpoint) as c:
        inst = instances_pb2_grpc.InstancesServiceStub(c)
        hung = inst.InstanceExists.future(pb.InstanceExistsRequest(node=pb.NodeRef(name="hang")))
        wait_for(lambda: cloud.calls, "the call never reached the provider")
        started = time.monotonic()
        answer = health_pb2_grpc.HealthStub(c).Check(health_pb2.HealthCheckRequest(), timeout=2)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        identity_pb2_grpc.IdentityServiceStub(c).Probe(pb.ProbeRequest(), timeout=2)
        assert time.monotonic() - started < 1
        hung.cancel()


def test_a_queued_call_whose_caller_gave_up_never_starts(cloud: Cloud, endpoint: str) -> None:
    with serve(cloud, endpoint, max_workers=1), channel(endpoint) as c:
        inst = instances_pb2_grpc.InstancesServiceStub(c)

        def exists(name: str, request_id: str, **kwargs):
            return inst.InstanceExists(
                pb.InstanceExistsRequest(node=pb.NodeRef(name=name)),
                metadata=[("x-ccm-request-id", request_id)],
                **kwargs,
            )

        hung = inst.InstanceExists.future(
            pb.InstanceExistsRequest(node=pb.NodeRef(name="hang")),
            metadata=[("x-ccm-request-id", "hung")],
        )
        wait_for(lambda: cloud.calls, "the call never reached the provider")
        # The only worker is busy: this call waits for it, and gives up at
        # its deadline.
        e = error(exists, "n", "queued", timeout=0.3)
        assert e.code == grpc.StatusCode.DEADLINE_EXCEEDED
        hung.cancel()
        assert cloud.cancelled_seen.wait(5), "the hung call did not see its caller leave"
        # The worker is free; the next call, queued after the one given up,
        # runs, and the one given up never did.
        assert exists("n", "after", timeout=5).existence == pb.INSTANCE_EXISTENCE_EXISTS
        assert [ctx.request_id for _, ctx in cloud.calls] == ["hung", "after"]


def test_shutdown_reports_not_serving_while_it_drains(cloud: Cloud, endpoint: str) -> None:
    running = serve(cloud, endpoint)
    stopper = threading.Thread(target=running.stop)
    with channel(endpoint) as c:
        health = health_pb2_grpc.HealthStub(c)
        watches = [
            health.Watch(health_pb2.HealthCheckRequest(service=name), timeout=20)
            for name in ["", "ccmrs.cloudprovider.v1.InstancesService"]
        ]
        for watch in watches:
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        stopper.start()
        try:
            for watch in watches:
                assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        finally:
            # The watches are the calls in flight the server drains.
            for watch in watches:
                watch.cancel()
            stopper.join(20)
    assert not stopper.is_alive(), "the server did not stop"


def test_listings_are_paginated(ch: grpc.Channel) -> None:
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    seen, token = [], ""
    while True:
        page = lb.ListLoadBalancers(
            pb.ListLoadBalancersRequest(cluster_name="c", page_size=3, page_token=token)
        )
        assert len(page.load_balancers) <= 3
        seen += [e.service_uid for e in page.load_balancers]
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"uid-{i:03}" for i in range(7)]
    routes = routes_pb2_grpc.RoutesServiceStub(ch)
    page = routes.ListRoutes(pb.ListRoutesRequest(cluster_name="c", page_size=2))
    assert [r.destination_cidr for r in page.routes] == ["10.0.0.0/24", "10.0.1.0/24"]
    assert page.next_page_token


def test_a_listing_with_an_entry_twice_is_refused(ch: grpc.Channel, cloud: Cloud) -> None:
    cloud.routes.append(pb.Route(target_node="m", destination_cidr="10.0.3.0/24"))
    routes = routes_pb2_grpc.RoutesServiceStub(ch)
    e = error(routes.ListRoutes, pb.ListRoutesRequest(cluster_name="c"))
    assert e.code == grpc.StatusCode.INTERNAL and "10.0.3.0/24" in e.message
    cloud.lbs.append(pb.LoadBalancerSummary(name="lb-again", service_uid="uid-004"))
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    e = error(lb.ListLoadBalancers, pb.ListLoadBalancersRequest(cluster_name="c", page_size=2))
    assert (e.code, e.message) == (
        grpc.StatusCode.INTERNAL,
        "provider listed the load balancer of Service uid 'uid-004' more than once",
    )


def test_messages_over_4_mib_pass_both_ways(ch: grpc.Channel) -> None:
    lb = loadbalancer_pb2_grpc.LoadBalancerServiceStub(ch)
    nodes = [
        pb.NodeRef(name=f"node-{i}", labels={f"example.com/l{j}": "v" * 60 for j in range(12)})
        for i in range(5000)
    ]
    request = pb.EnsureLoadBalancerRequest(cluster_name="c", service=service(), nodes=nodes)
    assert 4 * 1024 * 1024 < request.ByteSize() < 16 * 1024 * 1024
    assert lb.EnsureLoadBalancer(request).status.ingress
    zones = zones_pb2_grpc.ZonesServiceStub(ch)
    answer = zones.GetZoneByProviderId(pb.GetZoneByProviderIdRequest(provider_id="test://i-1"))
    assert len(answer.zone.failure_domain) == 11 * 1024 * 1024


def test_an_identity_the_suite_would_refuse_is_refused_at_start() -> None:
    class Bad(Identity):
        def info(self):
            return ProviderInfo(name="Bad_Name", vendor_version="", provider_id_scheme="x://")

    with pytest.raises(ValueError, match=r"name .Bad_Name.*vendor_version.*provider_id_scheme"):
        ProviderServer(Bad())
    with pytest.raises(ValueError, match="other users"):
        ProviderServer(Cloud(), socket_mode=0o666)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
        None,
    ],
)
def test_malformed_traceparents_start_no_trace(value: object) -> None:
    assert calls.trace_id_of(value) is None
