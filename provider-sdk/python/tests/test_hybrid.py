"""Contract 1.3.0: what a controller running several providers routes by
(the load balancer classes a provider serves, whether it serves Services
without a class, its KEP-5778 platforms) reaches GetProviderInfo, and an
invalid declaration stops the provider at start."""

from __future__ import annotations

import pytest
from conftest import channel

from ccmrs.cloudprovider.v1 import identity_pb2_grpc
from ccmrs_provider import CONTRACT_VERSION, Identity, ProviderInfo, ProviderServer, pb, validate


class Cloud(Identity):
    def __init__(self, **declared) -> None:
        self.declared = declared

    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name="cloud", vendor_version="1", provider_id_scheme="fake", **self.declared
        )


def provider_info(endpoint: str, cloud: Cloud) -> pb.GetProviderInfoResponse:
    with ProviderServer(cloud).start(endpoint), channel(endpoint) as ch:
        return identity_pb2_grpc.IdentityServiceStub(ch).GetProviderInfo(
            pb.GetProviderInfoRequest()
        )


def test_classes_unclassed_services_and_platforms_are_announced(endpoint: str) -> None:
    cloud = Cloud(
        load_balancer_classes=("example.com/cloud", "example.com/nlb"),
        serves_unclassed=False,
        platforms=["cloud"],
    )
    info = provider_info(endpoint, cloud)
    assert CONTRACT_VERSION == "1.4.0" == info.contract_version
    assert list(info.load_balancer_classes) == ["example.com/cloud", "example.com/nlb"]
    assert info.unclassed_services == pb.UNCLASSED_SERVICES_DECLINED
    assert not validate.serves_unclassed(info)
    assert list(info.platforms) == ["cloud"]


@pytest.mark.parametrize(
    ("serves", "wire"),
    [(None, pb.UNCLASSED_SERVICES_UNSPECIFIED), (True, pb.UNCLASSED_SERVICES_SERVED)],
)
def test_a_provider_declaring_nothing_serves_unclassed_services(
    endpoint: str, serves: bool | None, wire: int
) -> None:
    info = provider_info(endpoint, Cloud(serves_unclassed=serves))
    assert info.unclassed_services == wire
    assert validate.serves_unclassed(info)
    assert list(info.load_balancer_classes) == [] and list(info.platforms) == []


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        ({"load_balancer_classes": ["cloud"]}, "load_balancer_classes[0]"),
        ({"load_balancer_classes": ["Example.com/cloud"]}, "load_balancer_classes[0]"),
        ({"load_balancer_classes": ["example.com/a", "example.com/a"]}, "load_balancer_classes[1]"),
        ({"load_balancer_classes": [f"example.com/c{i}" for i in range(33)]}, "more than 32"),
        ({"platforms": ["Cloud"]}, "platforms[0]"),
        ({"platforms": ["cloud", "a.b"]}, "platforms[1]"),
        ({"platforms": ["cloud", "cloud"]}, "platforms[1]"),
        ({"platforms": [f"p{i}" for i in range(17)]}, "more than 16"),
        ({"serves_unclassed": "no"}, "serves_unclassed"),
    ],
)
def test_an_invalid_declaration_is_refused_at_start(declared: dict, named: str) -> None:
    with pytest.raises(ValueError, match="invalid provider identity") as e:
        ProviderServer(Cloud(**declared))
    assert named in str(e.value)


@pytest.mark.parametrize(
    ("value", "known", "served"),
    [(0, True, True), (1, True, True), (2, True, False), (7, False, True)],
)
def test_unclassed_services_unknown_values_are_unspecified_to_a_receiver(
    value: int, known: bool, served: bool
) -> None:
    info = pb.GetProviderInfoResponse(unclassed_services=value)
    if known:
        validate.unclassed_services(info)
    else:
        with pytest.raises(validate.Violation, match="unclassed_services"):
            validate.unclassed_services(info)
    assert validate.serves_unclassed(info) is served


def test_classes_need_a_prefix_and_platforms_are_labels() -> None:
    longest = f"{'a' * 63}.{'a' * 63}.{'a' * 63}.{'a' * 61}/{'b' * 63}"
    for ok in ["example.com/cloud", "k8s.io/Internal_v1.2", longest]:
        validate.load_balancer_class("f", ok)
    for bad in ["", "cloud", "/cloud", "example.com/", "example.com/a/b", "example.com/-a"]:
        with pytest.raises(validate.Violation):
            validate.load_balancer_class("f", bad)
    for ok in ["cloud", "bare-metal-2", "p" * 63]:
        validate.platform("f", ok)
    for bad in ["", "Cloud", "a.b", "-a", "a_b", "p" * 64]:
        with pytest.raises(validate.Violation):
            validate.platform("f", bad)
