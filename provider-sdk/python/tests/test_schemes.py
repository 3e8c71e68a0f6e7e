"""Contract 1.2.0: a provider owning several providerID schemes (hcloud's
servers and hrobot's dedicated machines) answers for a Node of each, and
the warnings it gives about a Node reach the controller."""

from __future__ import annotations

import grpc
import pytest
from conftest import channel

from ccmrs.cloudprovider.v1 import identity_pb2_grpc, instances_pb2_grpc
from ccmrs_provider import (
    CONTRACT_VERSION,
    Existence,
    Identity,
    Instances,
    ProviderError,
    ProviderInfo,
    ProviderServer,
    Reason,
    ShutdownState,
    pb,
)


class Hetzner(Identity, Instances):
    def __init__(self, also_owns=("hrobot",)) -> None:
        self.also_owns = also_owns
        self.seen: list[str] = []
        self.warnings: list[tuple[str, str]] = []

    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name="hcloud",
            vendor_version="1",
            provider_id_scheme="hcloud",
            also_owns=self.also_owns,
        )

    def instance_exists(self, ctx, node):
        self.seen.append(node.provider_id)
        return Existence.EXISTS

    def instance_shutdown(self, ctx, node):
        return ShutdownState.RUNNING

    def instance_metadata(self, ctx, node):
        for reason, message in self.warnings:
            ctx.warn(reason, message)
        return pb.InstanceMetadata(provider_id=node.provider_id or "hrobot://7")


def error(call, *args) -> ProviderError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args)
    return ProviderError.from_rpc_error(e.value)


def exists(pid: str) -> pb.InstanceExistsRequest:
    return pb.InstanceExistsRequest(node=pb.NodeRef(name="n", provider_id=pid))


def test_every_scheme_the_provider_owns_reaches_it(endpoint: str) -> None:
    cloud = Hetzner()
    with ProviderServer(cloud).with_instances(cloud).start(endpoint), channel(endpoint) as ch:
        info = identity_pb2_grpc.IdentityServiceStub(ch).GetProviderInfo(
            pb.GetProviderInfoRequest()
        )
        assert info.contract_version == CONTRACT_VERSION
        assert info.provider_id_scheme == "hcloud"
        assert list(info.provider_id_schemes) == ["hcloud", "hrobot"]
        inst = instances_pb2_grpc.InstancesServiceStub(ch)
        for pid in ["hrobot://321", "hcloud://1"]:
            assert inst.InstanceExists(exists(pid)).existence == pb.INSTANCE_EXISTENCE_EXISTS
        for pid in ["aws://i-1", "hrobot://", "hrobotx://1"]:
            e = error(inst.InstanceExists, exists(pid))
            assert e.reason == Reason.INVALID_REQUEST, pid
            assert "'hcloud', 'hrobot'" in e.message, e.message
        assert cloud.seen == ["hrobot://321", "hcloud://1"]
        # An answer with a providerID of the second scheme is the provider's own.
        answer = inst.InstanceMetadata(pb.InstanceMetadataRequest(node=pb.NodeRef(name="n")))
        assert answer.metadata.provider_id == "hrobot://7"


def test_one_scheme_is_announced_as_before(endpoint: str) -> None:
    cloud = Hetzner(also_owns=())
    with ProviderServer(cloud).with_instances(cloud).start(endpoint), channel(endpoint) as ch:
        info = identity_pb2_grpc.IdentityServiceStub(ch).GetProviderInfo(
            pb.GetProviderInfoRequest()
        )
        assert list(info.provider_id_schemes) == []
        inst = instances_pb2_grpc.InstancesServiceStub(ch)
        e = error(inst.InstanceExists, exists("hrobot://321"))
        assert e.reason == Reason.INVALID_REQUEST
        # Nor is an answer of a scheme not announced sent.
        e = error(inst.InstanceMetadata, pb.InstanceMetadataRequest(node=pb.NodeRef(name="n")))
        assert e.code == grpc.StatusCode.INTERNAL and "metadata.provider_id" in e.message


@pytest.mark.parametrize("also", [("hrobot", "hrobot"), ("a://b",), ("",), ("h robot",)])
def test_an_invalid_list_of_schemes_is_refused_at_start(also) -> None:
    with pytest.raises(ValueError, match="also_owns"):
        ProviderServer(Hetzner(also_owns=also))


def test_warnings_about_a_node_are_sent_and_bad_ones_never_leave(endpoint: str) -> None:
    cloud = Hetzner()
    with ProviderServer(cloud).with_instances(cloud).start(endpoint), channel(endpoint) as ch:
        inst = instances_pb2_grpc.InstancesServiceStub(ch)
        request = pb.InstanceMetadataRequest(node=pb.NodeRef(name="n", provider_id="hrobot://1"))
        assert list(inst.InstanceMetadata(request).warnings) == []
        cloud.warnings = [("MaintenanceScheduled", "rebooted on Sunday")]
        answer = inst.InstanceMetadata(request)
        assert [(w.reason, w.message) for w in answer.warnings] == cloud.warnings
        cloud.warnings = [("not camel", "x")]
        e = error(inst.InstanceMetadata, request)
        assert e.code == grpc.StatusCode.INTERNAL and "warnings[0].reason" in e.message
        cloud.warnings = [("Maintenance", "m")] * 17
        e = error(inst.InstanceMetadata, request)
        assert e.code == grpc.StatusCode.INTERNAL and "more than 16" in e.message
